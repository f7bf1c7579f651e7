"""`python -m manager`: the manager's controllers on the manager cluster, with MultiKueue."""

from __future__ import annotations

import sys

from manager.controllers.run import main
from manager.multikueue.controllers.run import extension

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], component="manager", extensions=[extension]))
