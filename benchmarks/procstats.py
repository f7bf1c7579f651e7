"""What the benchmark scripts read about the processes they run: CPU time and peak memory from
/proc, and counters from a controller's /metrics."""

from __future__ import annotations

import os
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families


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


def metric_lines(port: int, prefix: str) -> dict[str, float]:
    """Every sample of /metrics whose line starts with `prefix`, by its labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = (line.rsplit(" ", 1) for line in text.splitlines() if line.startswith(prefix))
    return {labels[len(prefix) - 1 :]: float(value) for labels, value in samples}


def cpu_by_kind(base: Path) -> dict[str, float]:
    """CPU seconds of every process of this run (its command line names the run's directory)."""
    out: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            seconds = cpu_seconds(int(proc.name))
        except OSError:
            continue
        if str(base) not in cmd:
            continue
        kind = next((k for k in ("kube-apiserver", "etcd", "worker_agent", "manager") if k in cmd.split()[0] or f"-m {k}" in cmd), "other")
        out[kind] = out.get(kind, 0.0) + seconds
    return out


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU ticks of the whole machine since boot."""
    parts = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


class Apiserver(Protocol):
    def request(self, method: str, path: str) -> tuple[int, Any]: ...


def apiserver_requests(cluster: Apiserver) -> Counter[tuple[str, str]]:
    """The requests an apiserver has served, by verb and resource (with its subresource), from
    its own `apiserver_request_total`: what every client sent it, watches included."""
    status, text = cluster.request("GET", "/metrics")
    if status != 200 or not isinstance(text, str):
        return Counter()
    out: Counter[tuple[str, str]] = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            resource = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            out[(labels.get("verb", ""), resource)] += int(sample.value)
    return out
