"""Benchmark of admission on a real cluster, shaped like Kueue's scheduler performance baseline.

5 cohorts x 6 ClusterQueues (nominal 20 cpu, borrowingLimit 100, reclaimWithinCohort Any,
withinClusterQueue LowerPriority), and per ClusterQueue:
- 350 small Workloads (1 cpu, one every 100 ms, running 200 ms, priority 50);
- 100 medium Workloads (5 cpu, one every 500 ms, running 500 ms, priority 100);
- 50 large Workloads (20 cpu, one every 1200 ms, running 1000 ms, priority 200).

That is 15,000 Workloads on one local-harness cluster, admitted by `python -m manager` as a
separate process. A runner in this process plays the jobs: it creates the Workloads on
schedule and marks each Finished (a status patch) once it has run for its runtime after
admission, as Kueue's benchmark does; a preempted one is re-run from scratch when readmitted.
Like Kueue's runner, it finishes each eviction at once (`releaser.Releaser`: QuotaReserved=False,
no admission): the manager keeps a victim's quota until then, as Kueue does.
Prints: wall time and the quota bound, average time to admission per class, the
ClusterQueues' average usage, the API QPS the manager used, and the manager's CPU and RSS.

Run: python benchmarks/admission.py [--scale 1.0] [--qps 300] [--burst 500] [--profile FILE]
(`--scale 0.2` runs a fifth of each class: a quick look; `--profile` samples the manager with
py-spy for the whole run and writes collapsed stacks.) `run_baseline` is also what
benchmarks/compare_kueue.py runs for kfed's side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from procstats import cpu_by_kind, machine_busy, metric_sum, proc_stats
from releaser import Releaser

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import is_condition_true
from manager.dev import federation
from manager.dev.local import LocalCluster, LocalProvider, free_port, wait_for
from manager.kube.client import KubeClient
from manager.kube.errors import ConflictError, KubeError
from manager.kube.informer import Informer

REPO = Path(__file__).resolve().parents[1]
COHORTS, QUEUES_PER_COHORT, NOMINAL = 5, 6, 20
# name, cpu, count, interval (s), runtime (s), priority
CLASSES = (("small", 1, 350, 0.1, 0.2, 50), ("medium", 5, 100, 0.5, 0.5, 100), ("large", 20, 50, 1.2, 1.0, 200))


@dataclass
class Run:
    cls: str
    cpu: int
    runtime: float
    created: float = 0.0
    admitted_at: list[float] = field(default_factory=list)
    finished: float | None = None
    intervals: list[tuple[float, float]] = field(default_factory=list)


def objects() -> list[tuple[Any, dict[str, Any]]]:
    out: list[tuple[Any, dict[str, Any]]] = [
        (kueue.ResourceFlavor, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}})
    ]
    for co in range(COHORTS):
        for q in range(QUEUES_PER_COHORT):
            name = f"cq-{co}-{q}"
            spec = {
                "cohortName": f"cohort-{co}",
                "namespaceSelector": {},
                "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": NOMINAL, "borrowingLimit": 100}]}],
                    }
                ],
            }
            out.append(
                (
                    kueue.ClusterQueue,
                    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec},
                )
            )
            out.append(
                (
                    kueue.LocalQueue,
                    {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "LocalQueue",
                        "metadata": {"name": "lq", "namespace": name},
                        "spec": {"clusterQueue": name},
                    },
                )
            )
    return out


def workload(name: str, namespace: str, cpu: int, priority: int) -> dict[str, Any]:
    pod = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": str(cpu)}}}]}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"queueName": "lq", "priority": priority, "podSets": [{"name": "main", "count": 1, "template": pod}]},
    }


def quota_bound(scale: float) -> float:
    """The shortest possible wall time: all work over all capacity, or the last arrival plus its run."""
    work = sum(cpu * round(count * scale) * runtime for _, cpu, count, _, runtime, _ in CLASSES) * COHORTS * QUEUES_PER_COHORT
    capacity = NOMINAL * COHORTS * QUEUES_PER_COHORT
    last = max(round(count * scale) * interval + runtime for _, _, count, interval, runtime, _ in CLASSES)
    return max(work / capacity, last)


def manager_requests(port: int) -> float:
    return metric_sum(port, "kfed_kube_requests_total{")


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else (values[0] if values else 0.0)


@dataclass
class Baseline:
    """What one run measured; `report` prints it."""

    scale: float
    total: int
    wall: float
    runs: dict[str, Run]
    qps: float
    burst: int
    manager_cpu: float
    manager_peak_rss: int
    manager_requests: float
    spent: dict[str, float]  # CPU seconds by process kind, the runner included
    busy: float  # share of the machine's CPU busy
    started_at: float  # epoch seconds when the first Workload was due

    def waits(self, cls: str | None = None) -> list[float]:
        """Seconds from creation to first admission (no admission checks: reservation is admission)."""
        return [run.admitted_at[0] - run.created for run in self.runs.values() if run.admitted_at and cls in (None, run.cls)]

    @property
    def preemptions(self) -> int:
        return sum(len(run.admitted_at) - 1 for run in self.runs.values())


def install_kfed(cluster: LocalCluster) -> None:
    """What kfed's manager needs on a fresh cluster: its CRDs and its namespace."""
    federation.install_crds(cluster, federation.crd_manifests(REPO / "crds"))
    federation.create(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kfed-system"}})


def manager_argv(cluster: LocalCluster, base: Path, *, port: int, qps: float, burst: int) -> list[str]:
    """The manager of the baseline: webhooks off, `port` for health and metrics, one client
    bucket of `qps` and `burst`."""
    return federation.controller_argv(
        cluster,
        "manager",
        health_port=port,
        webhook_port=None,
        cert_dir=base,
        extra=(f"--kube-api-qps={qps}", f"--kube-api-burst={burst}", "--log-level=warning"),
    )


async def run_baseline(
    cluster: LocalCluster,
    base: Path,
    *,
    scale: float,
    qps: float,
    burst: int,
    timeout: float,
    runner_kubeconfig: dict[str, Any] | None = None,
    profile: Path | None = None,
) -> Baseline:
    """Run the scenario on a cluster already up; `runner_kubeconfig` (default: the admin's) is
    what this script's own client uses, so that an audit log can tell its requests apart."""
    install_kfed(cluster)
    client = await KubeClient.from_kubeconfig(runner_kubeconfig or cluster.kubeconfig(), name="runner", qps=5000, burst=5000)
    manager: subprocess.Popen[bytes] | None = None
    profiler: subprocess.Popen[bytes] | None = None
    try:
        for model, obj in objects():
            if model is kueue.LocalQueue:
                await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": obj["metadata"]["namespace"]}})
            await client.create(model, obj)
        port = free_port()
        log = base / "manager.log"
        argv = manager_argv(cluster, base, port=port, qps=qps, burst=burst)
        with log.open("wb") as out:
            manager = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                return bool(response.status == 200)

        wait_for(ready, timeout=60, what="manager ready")
        if profile is not None:
            # py-spy samples the manager from outside (100 samples a second), as collapsed stacks.
            # py-spy is a dev extra (pyproject.toml), installed beside this interpreter.
            profiler = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("py-spy")),
                    "record",
                    "--pid",
                    str(manager.pid),
                    "--format",
                    "raw",
                    "--output",
                    str(profile),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=(base / "py-spy.log").open("wb"),
            )
        cpu_before, _ = proc_stats(manager.pid)
        requests_before = manager_requests(port)
        kinds_before, busy_before, runner_before = cpu_by_kind(base), machine_busy(), sum(os.times()[:2])
        runs: dict[str, Run] = {}
        informer: Informer[kueue.Workload] = Informer(client, kueue.Workload)
        finishing: set[str] = set()
        done = asyncio.Event()
        total = sum(round(count * scale) for _, _, count, _, _, _ in CLASSES) * COHORTS * QUEUES_PER_COHORT
        finished = 0
        start, started_at = time.monotonic(), time.time()

        async def finish_after(key: str, wl: kueue.Workload, runtime: float) -> None:
            nonlocal finished
            await asyncio.sleep(runtime)  # the job's runtime, simulated
            run = runs[key]
            current = informer.get(key) or wl
            while True:
                conds = current.status.conditions if current.status else None
                if is_condition_true(conds, c.EVICTED) or not is_condition_true(conds, c.ADMITTED):
                    finishing.discard(key)
                    return  # preempted while running: it will run again when readmitted
                conditions = [cond.to_dict() for cond in conds or []]
                conditions.append(
                    {
                        "type": "Finished",
                        "status": "True",
                        "reason": "Succeeded",
                        "message": "done",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                )
                try:
                    await client.patch(
                        kueue.Workload,
                        wl.name,
                        {"metadata": {"resourceVersion": current.metadata.resource_version}, "status": {"conditions": conditions}},
                        namespace=wl.namespace,
                        subresource="status",
                    )
                    break
                except ConflictError:
                    # The manager wrote it meanwhile (say, evicted and admitted it again while
                    # this run was under way): finish what is there now, as a job controller would.
                    current = await client.get(kueue.Workload, wl.name, namespace=wl.namespace)
                except KubeError:
                    finishing.discard(key)
                    return
            now = time.monotonic()
            run.intervals.append((run.admitted_at[-1], now))
            run.finished = now
            finished += 1
            if finished == total:
                done.set()

        def on_workload(kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
            if new is None or new.key not in runs:
                return
            run = runs[new.key]
            conds = new.status.conditions if new.status else None
            if is_condition_true(conds, c.FINISHED):
                return
            if is_condition_true(conds, c.ADMITTED) and not is_condition_true(conds, c.EVICTED) and new.key not in finishing:
                finishing.add(new.key)
                run.admitted_at.append(time.monotonic())
                asyncio.get_running_loop().create_task(finish_after(new.key, new, run.runtime))
            elif is_condition_true(conds, c.EVICTED) and run.admitted_at and len(run.intervals) < len(run.admitted_at):
                run.intervals.append((run.admitted_at[-1], time.monotonic()))

        informer.add_handler(on_workload)
        # The runner finishes each eviction as Kueue's runner does: at once, QuotaReserved=False.
        releaser = Releaser(client, informer)
        watch = asyncio.create_task(informer.run())
        await informer.synced.wait()

        async def generate(cq: str, cls: str, cpu: int, count: int, interval: float, runtime: float, priority: int) -> None:
            for i in range(count):
                due = start + i * interval
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)  # the arrival schedule
                name = f"{cls}-{i}"
                runs[f"{cq}/{name}"] = Run(cls, cpu, runtime, created=time.monotonic())
                await client.create(kueue.Workload, workload(name, cq, cpu, priority))

        generators = [
            generate(f"cq-{co}-{q}", cls, cpu, round(count * scale), interval, runtime, priority)
            for co in range(COHORTS)
            for q in range(QUEUES_PER_COHORT)
            for cls, cpu, count, interval, runtime, priority in CLASSES
        ]
        await asyncio.gather(*generators)
        await asyncio.wait_for(done.wait(), timeout=timeout)
        wall = time.monotonic() - start
        cpu_after, peak = proc_stats(manager.pid)
        requests = manager_requests(port) - requests_before
        kinds_after, busy_after, runner_after = cpu_by_kind(base), machine_busy(), sum(os.times()[:2])
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await releaser.close()
        spent = {k: kinds_after.get(k, 0.0) - kinds_before.get(k, 0.0) for k in kinds_after}
        spent["runner (this script)"] = runner_after - runner_before
        busy = (busy_after[0] - busy_before[0]) / max(busy_after[1] - busy_before[1], 1)
        return Baseline(scale, total, wall, runs, qps, burst, cpu_after - cpu_before, peak, requests, spent, busy, started_at)
    finally:
        await client.close()
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            profiler.wait(timeout=60)
        if manager is not None:
            manager.terminate()
            manager.wait(timeout=30)


def report(result: Baseline) -> None:
    total, wall = result.total, result.wall
    bound = quota_bound(result.scale)
    capacity = NOMINAL * COHORTS * QUEUES_PER_COHORT
    used = sum(run.cpu * (end - begin) for run in result.runs.values() for begin, end in run.intervals)
    print(f"workloads                      {total} ({COHORTS} cohorts x {QUEUES_PER_COHORT} ClusterQueues, scale {result.scale})")
    print(f"wall time                      {wall:.1f} s")
    print(f"quota bound                    {bound:.1f} s  (wall / bound = {wall / bound:.2f}; target <= 1.30)")
    for cls, *_ in CLASSES:
        waits = result.waits(cls)
        if not waits:  # a small --scale rounds this class to no Workloads
            print(f"time to admission, {cls:<7}     (none at this scale)")
            continue
        print(f"time to admission, {cls:<7}     avg {statistics.fmean(waits):.2f} s, max {max(waits):.2f} s")
    print(f"P95 time to admission          {p95(result.waits()):.2f} s")
    print(f"average ClusterQueue usage     {100 * used / (capacity * wall):.1f} %  (target >= 85 %)")
    limit = f"client limit {result.qps:.0f} QPS, burst {result.burst}"
    requests = result.manager_requests
    print(f"manager API requests           {requests:.0f} ({requests / wall:.0f} QPS; {limit})")
    cpu = result.manager_cpu
    print(f"manager CPU                    {cpu:.1f} s ({100 * cpu / wall:.0f} % of one core; {1000 * cpu / total:.1f} ms per Workload)")
    print(f"manager peak RSS               {result.manager_peak_rss / 2**20:.0f} MiB")
    print(f"preempted and re-run           {result.preemptions}")
    # What limits the run: the CPU each Workload costs, by process, against the machine's cores.
    cores = os.cpu_count() or 1
    print(f"machine CPU busy               {100 * result.busy:.0f} % of {cores} cores")
    per_workload = {k: 1000 * v / total for k, v in result.spent.items()}
    print("CPU per Workload (ms)          " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(per_workload.items(), key=lambda kv: -kv[1])))
    cost = sum(per_workload.values()) / 1000
    needed = total / (1.3 * bound)
    print(
        f"rate the cores allow           {cores / cost:.0f} Workloads/s at that cost; the 1.3x target needs {needed:.0f}/s"
        f" ({needed * cost:.1f} cores)"
    )


async def main(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="kfed-bench-"))
    provider = LocalProvider(base)
    cluster = provider.create(["bench"])[0]
    try:
        result = await run_baseline(
            cluster, base, scale=args.scale, qps=args.qps, burst=args.burst, timeout=args.timeout, profile=args.profile
        )
        report(result)
        if args.profile is not None:
            print(f"py-spy profile (collapsed stacks)  {args.profile}")
    finally:
        provider.delete_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--qps", type=float, default=300)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--profile", type=Path, help="record the manager with py-spy into this file (collapsed stacks)")
    asyncio.run(main(parser.parse_args()))
