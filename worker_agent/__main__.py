"""`python -m worker_agent`: admission on a worker cluster, adopting the manager's prebuilt Workloads."""

from __future__ import annotations

import sys

from manager.controllers.run import main

if __name__ == "__main__":
    # A remote copy that no job owns yet (a copy that did not win, or the winner before its job
    # exists) has nothing to stop: evicted on a worker, its quota goes back at once, and the
    # manager dispatches it again.
    sys.exit(main(sys.argv[1:], component="worker_agent", release_unowned_evictions=True))
