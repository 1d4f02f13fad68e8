from tht.service.client import main

raise SystemExit(main())
