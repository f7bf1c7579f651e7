"""Benchmark of the admission engine on a scenario shaped like Kueue's large-scale test.

10 cohorts x 100 ClusterQueues, 50,000 pending Workloads of three sizes and priorities, with
borrowing and preemption enabled. A fifth of the ClusterQueues start out borrowing to their
limit with low-priority running Workloads, so the pending ones have to reclaim quota across
the cohort and preempt within their queue. Prints:
- admission decisions per second for a full `kfed simulate` run (a decision is one head
  evaluated in a cycle: admitted, preempting, or sent back to the queue);
- the time of one scheduling cycle over 1,000 heads (median and p99);
- peak memory (max RSS of this process).

Run: python benchmarks/engine.py [--cohorts 10] [--queues 100] [--workloads 50000]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from manager.api import kueue
from manager.engine.simulate import Simulation, Source

SIZES = (("500m", "1Gi"), ("2", "4Gi"), ("4", "16Gi"))
PRIORITIES = (0, 100, 1000)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def pod_sets(cpu: str, memory: str) -> list[dict[str, Any]]:
    requests = {"cpu": cpu, "memory": memory}
    return [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}}]


def condition(kind: str) -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": T0.isoformat()}


def scenario(cohorts: int, queues: int, workloads: int) -> list[Source]:
    objs: list[Any] = [kueue.ResourceFlavor.model_validate({"metadata": {"name": "default"}})]
    names = []
    for co in range(cohorts):
        for q in range(queues):
            name = f"cq-{co}-{q}"
            names.append(name)
            objs.append(
                kueue.ClusterQueue.model_validate(
                    {
                        "metadata": {"name": name},
                        "spec": {
                            "cohortName": f"cohort-{co}",
                            "namespaceSelector": {},
                            "resourceGroups": [
                                {
                                    "coveredResources": ["cpu", "memory"],
                                    "flavors": [
                                        {
                                            "name": "default",
                                            "resources": [
                                                {"name": "cpu", "nominalQuota": "20", "borrowingLimit": "40"},
                                                {"name": "memory", "nominalQuota": "80Gi", "borrowingLimit": "160Gi"},
                                            ],
                                        }
                                    ],
                                }
                            ],
                            "preemption": {
                                "withinClusterQueue": "LowerPriority",
                                "reclaimWithinCohort": "Any",
                                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100},
                            },
                        },
                    }
                )
            )
            objs.append(
                kueue.LocalQueue.model_validate({"metadata": {"name": "lq", "namespace": f"ns-{co}-{q}"}, "spec": {"clusterQueue": name}})
            )
    running = 0
    for co in range(cohorts):
        for q in range(queues // 5):
            # Busy queues run 15 x 4 cpu = nominal 20 + borrowingLimit 40, at priority 0.
            for k in range(15):
                running += 1
                objs.append(
                    kueue.Workload.model_validate(
                        {
                            "metadata": {"name": f"running-{co}-{q}-{k}", "namespace": f"ns-{co}-{q}", "creationTimestamp": T0.isoformat()},
                            "spec": {
                                "queueName": "lq",
                                "priority": 0,
                                "podSets": [
                                    {
                                        "name": "main",
                                        "count": 1,
                                        "template": {
                                            "spec": {
                                                "containers": [{"name": "c", "resources": {"requests": {"cpu": "4", "memory": "16Gi"}}}]
                                            }
                                        },
                                    }
                                ],
                            },
                            "status": {
                                "admission": {
                                    "clusterQueue": f"cq-{co}-{q}",
                                    "podSetAssignments": [
                                        {
                                            "name": "main",
                                            "count": 1,
                                            "flavors": {"cpu": "default", "memory": "default"},
                                            "resourceUsage": {"cpu": "4", "memory": "16Gi"},
                                        }
                                    ],
                                },
                                "conditions": [
                                    {
                                        "type": "QuotaReserved",
                                        "status": "True",
                                        "reason": "QuotaReserved",
                                        "message": "",
                                        "lastTransitionTime": T0.isoformat(),
                                    },
                                    {
                                        "type": "Admitted",
                                        "status": "True",
                                        "reason": "Admitted",
                                        "message": "",
                                        "lastTransitionTime": T0.isoformat(),
                                    },
                                ],
                            },
                        }
                    )
                )
    for i in range(workloads):
        cq = i % len(names)
        cpu, memory = SIZES[(i // len(names)) % 3]
        priority = PRIORITIES[(i // (3 * len(names))) % 3]
        objs.append(
            kueue.Workload.model_validate(
                {
                    "metadata": {
                        "name": f"wl-{i}",
                        "namespace": f"ns-{names[cq][3:]}",
                        "creationTimestamp": (T0 + timedelta(milliseconds=i)).isoformat(),
                    },
                    "spec": {
                        "queueName": "lq",
                        "priority": priority,
                        "podSets": [
                            {
                                "name": "main",
                                "count": 1,
                                "template": {
                                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}
                                },
                            }
                        ],
                    },
                }
            )
        )
    return [Source(f"generated[{i}]", obj) for i, obj in enumerate(objs)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument("--queues", type=int, default=100, help="ClusterQueues per cohort")
    parser.add_argument("--workloads", type=int, default=50_000)
    parser.add_argument("--profile", action="store_true", help="print the hottest functions (cProfile)")
    parser.add_argument("--max-cycles", type=int, default=10_000, help="stop after this many cycles")
    args = parser.parse_args()

    start = time.perf_counter()
    sources = scenario(args.cohorts, args.queues, args.workloads)
    generated = time.perf_counter() - start

    start = time.perf_counter()
    simulation = Simulation(sources)
    built = time.perf_counter() - start

    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cycle_times: list[float] = []
    heads_per_cycle: list[int] = []
    start = time.perf_counter()
    while simulation.cycles < args.max_cycles:
        t = time.perf_counter()
        outcome = simulation.step()
        cycle_times.append(time.perf_counter() - t)
        heads_per_cycle.append(outcome.heads)
        if not outcome.changed:
            break
    ran = time.perf_counter() - start
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)

    full = [t for t, heads in zip(cycle_times, heads_per_cycle, strict=True) if heads >= args.cohorts * args.queues]
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    quantiles = statistics.quantiles(full, n=100) if len(full) >= 2 else full * 99
    print(f"scenario: {args.cohorts} cohorts x {args.queues} ClusterQueues, {args.workloads} pending Workloads (3 sizes, 3 priorities)")
    print(f"generate objects:            {generated:8.2f} s")
    print(f"build engine state:          {built:8.2f} s")
    counts = f"{simulation.decisions} decisions, {simulation.admitted} admitted, {simulation.preemptions} preemptions"
    print(f"simulate: {simulation.cycles} cycles, {counts}")
    print(f"  run time:                  {ran:8.2f} s")
    print(f"  decisions per second:      {simulation.decisions / ran:8.0f}")
    print(f"  decisions per second (incl. build): {simulation.decisions / (ran + built):8.0f}")
    if full:
        print(f"cycle over {args.cohorts * args.queues} heads ({len(full)} such cycles):")
        print(f"  median:                    {statistics.median(full) * 1000:8.1f} ms")
        print(f"  p99:                       {quantiles[98] * 1000:8.1f} ms")
    print(f"peak memory (max RSS):       {peak_mib:8.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
