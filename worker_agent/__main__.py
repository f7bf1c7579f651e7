"""`python -m worker_agent`: admission on a worker cluster, adopting the manager's prebuilt Workloads."""

from __future__ import annotations

import sys

from manager.controllers.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], component="worker_agent"))
