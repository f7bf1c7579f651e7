"""`python -m manager.dev.supervise --name NAME -- ARGV...`: keep one controller process running,
as a Deployment's kubelet would.

`kfed dev up` starts kfed's controllers through this supervisor, because nothing else restarts
them on a developer's machine: a worker agent that loses its lease (say, after its apiserver froze
for 20 s) exits by design, and a Deployment would restart it. Here the supervisor does, with
CrashLoopBackOff's shape (an exponential delay, reset after a run that lasted), and logs every
restart as one JSON line in the same log as the process it watches.

The supervisor and its child share one process group, so stopping the group (`kfed dev down`,
SIGTERM) stops both; SIGTERM to the supervisor alone is passed on to the child and ends the
supervision.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from types import FrameType

FIRST_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 30.0
# A run at least this long counts as healthy: the next crash starts the backoff over, as the
# kubelet resets CrashLoopBackOff after a container ran for 10 minutes (shorter here: a dev box).
HEALTHY_RUN_SECONDS = 60.0


def command(name: str, argv: Sequence[str]) -> list[str]:
    """The command line that runs `argv` under this supervisor, its restarts logged as `name`."""
    return [sys.executable, "-m", "manager.dev.supervise", f"--name={name}", "--", *argv]


def restart_delay(*, consecutive_crashes: int, ran_for: float) -> float:
    """Seconds to wait before the next start after a crash: 1 s doubling per consecutive crash,
    capped at 30 s; a run of `HEALTHY_RUN_SECONDS` or more starts over at 1 s."""
    if ran_for >= HEALTHY_RUN_SECONDS or consecutive_crashes <= 0:
        return FIRST_DELAY_SECONDS
    return float(min(MAX_DELAY_SECONDS, FIRST_DELAY_SECONDS * 2 ** (consecutive_crashes - 1)))


def _log(name: str, message: str, **fields: object) -> None:
    record: dict[str, object] = {
        "ts": datetime.now(UTC).isoformat(),
        "level": "info",
        "logger": "kfed.dev.supervise",
        "component": name,
        "msg": message,
    }
    record.update(fields)
    print(json.dumps(record), file=sys.stderr, flush=True)


class Supervisor:
    def __init__(self, name: str, argv: Sequence[str]) -> None:
        self.name = name
        self.argv = list(argv)
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False
        self.restarts = 0

    def _on_stop_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        consecutive_crashes = 0
        while True:
            started = time.monotonic()
            self.child = subprocess.Popen(self.argv)
            code = self.child.wait()
            ran_for = time.monotonic() - started
            if self.stopping:
                return 0
            consecutive_crashes = 1 if ran_for >= HEALTHY_RUN_SECONDS else consecutive_crashes + 1
            delay = restart_delay(consecutive_crashes=consecutive_crashes, ran_for=ran_for)
            self.restarts += 1
            _log(
                self.name,
                "process exited; restarting",
                exitCode=code,
                ranForSeconds=round(ran_for, 1),
                restartInSeconds=delay,
                restarts=self.restarts,
            )
            deadline = time.monotonic() + delay
            # Waiting in short steps keeps a stop signal during the backoff prompt.
            while not self.stopping and time.monotonic() < deadline:
                time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            if self.stopping:
                return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m manager.dev.supervise", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--name", required=True, help="the component's name in the restart log lines")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to keep running")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to supervise after --")
    return Supervisor(args.name, command).run()


if __name__ == "__main__":
    raise SystemExit(main())
