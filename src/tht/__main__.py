from tht.cli.main import main

raise SystemExit(main())
