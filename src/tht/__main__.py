from tht.cli.entry import main

raise SystemExit(main())
