"""``python -m tegrad COMMAND``: see :mod:`tegrad.tools.cli`."""
import sys

from tegrad.tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
