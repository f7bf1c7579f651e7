"""What the benchmark scripts read about the processes they run: CPU time and peak memory from
/proc, and counters from a controller's /metrics."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS in bytes) of a process."""
    peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return cpu_seconds(pid), peak


def metric_sum(port: int, prefix: str) -> float:
    """The sum of every sample of /metrics whose line starts with `prefix`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))
