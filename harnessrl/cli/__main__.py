"""`python -m harnessrl.cli ...`: the same as the `harnessrl` console script."""

import sys

from harnessrl.cli import main

if __name__ == "__main__":
    sys.exit(main())
