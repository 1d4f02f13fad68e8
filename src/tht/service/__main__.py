from tht.service.server import main

raise SystemExit(main())
