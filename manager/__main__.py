"""`python -m manager`: the manager's controllers on the manager cluster."""

from __future__ import annotations

import sys

from manager.controllers.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], component="manager"))
