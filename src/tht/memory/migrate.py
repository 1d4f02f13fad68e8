"""`python -m tht.memory.migrate`: apply the memory migration pack (the installation's
preparation step). Same behaviour and output as `tht memory migrate`."""

import sys

from tht.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["memory", "migrate", *sys.argv[1:]]))
