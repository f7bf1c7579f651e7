"""Time `kfed simulate` on the input benchmarks/simulate_input.py writes (1,000 ClusterQueues,
10,000 Workloads), as a user runs it: `kfed simulate -f FILE -o json`, in this process.

Prints the wall time of the whole command and of its phases (reading YAML, validating, the
simulation, writing JSON). With --profile, the top functions by cumulative time.

Run: python benchmarks/simulate.py [--input FILE] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from manager.api.manifest import load_text, split_documents  # noqa: E402
from manager.cli.main import main as kfed  # noqa: E402


def timed_phase(label: str, call: Callable[[], object]) -> object:
    started = time.process_time()
    result = call()
    print(f"  {label}: {time.process_time() - started:.2f} s CPU")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, help="an input file (default: generate the standard one)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    path = args.input
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="kfed-simulate-bench-")) / "input.yaml"
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "simulate_input.py"), str(path)], check=True)
    raw = path.read_bytes()
    print("phases:")
    timed_phase("reading YAML (libyaml)", lambda: split_documents(raw, str(path)))
    timed_phase("reading and validating", lambda: load_text(raw, str(path)))
    profiler = cProfile.Profile() if args.profile else None
    sink = io.StringIO()
    started, cpu_started = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(sink):
        if profiler is not None:
            profiler.enable()
        code = kfed(["simulate", "-f", str(path), "-o", "json"])
        if profiler is not None:
            profiler.disable()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if code != 0:
        raise SystemExit(f"kfed simulate exited {code}")
    # CPU time too: on a shared machine the wall time includes waiting for a core.
    print(f"kfed simulate -f {path.name} -o json: {elapsed:.1f} s wall, {cpu:.1f} s CPU ({len(sink.getvalue()) / 1e6:.0f} MB of JSON)")
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
