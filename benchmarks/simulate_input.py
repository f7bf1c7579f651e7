"""Write a `kfed simulate` input: 1,000 ClusterQueues (10 cohorts of 100) and 10,000 Workloads.

Each ClusterQueue has 20 cpu and 80Gi nominal with borrowing, and its LocalQueue in its own
namespace. Each queue holds ten pending Workloads of three sizes and three priorities, so most
are admitted, some borrow from the cohort and some wait. `--preemption` adds Kueue's
preemption policies (LowerPriority within the queue, reclaim from the cohort). The file is what a user would write:
YAML documents separated by `---`.

Run: python benchmarks/simulate_input.py OUT.yaml [--cohorts 10] [--queues 100] [--per-queue 10]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

SIZES = (("500m", "1Gi"), ("2", "4Gi"), ("4", "16Gi"))
PRIORITIES = (0, 100, 1000)
GROUP = "kueue.x-k8s.io/v1beta2"


def cluster_queue(name: str, cohort: str, *, preemption: bool) -> dict[str, Any]:
    resources = [
        {"name": "cpu", "nominalQuota": "20", "borrowingLimit": "40"},
        {"name": "memory", "nominalQuota": "80Gi", "borrowingLimit": "160Gi"},
    ]
    spec: dict[str, Any] = {
        "cohortName": cohort,
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": "default", "resources": resources}]}],
    }
    if preemption:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
    return {"apiVersion": GROUP, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def workload(name: str, namespace: str, index: int) -> dict[str, Any]:
    cpu, memory = SIZES[index % len(SIZES)]
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    return {
        "apiVersion": GROUP,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": f"2026-03-01T12:{index // 60 % 60:02d}:{index % 60:02d}Z"},
        "spec": {
            "queueName": "lq",
            "priority": PRIORITIES[index % len(PRIORITIES)],
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}],
        },
    }


def documents(cohorts: int, queues: int, per_queue: int, *, preemption: bool = False) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [{"apiVersion": GROUP, "kind": "ResourceFlavor", "metadata": {"name": "default"}}]
    for co in range(cohorts):
        for q in range(queues):
            name, namespace = f"cq-{co}-{q}", f"ns-{co}-{q}"
            docs.append(cluster_queue(name, f"cohort-{co}", preemption=preemption))
            docs.append(
                {
                    "apiVersion": GROUP,
                    "kind": "LocalQueue",
                    "metadata": {"name": "lq", "namespace": namespace},
                    "spec": {"clusterQueue": name},
                }
            )
            docs += [workload(f"wl-{k}", namespace, co * queues * per_queue + q * per_queue + k) for k in range(per_queue)]
    return docs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument("--queues", type=int, default=100, help="ClusterQueues per cohort")
    parser.add_argument("--per-queue", type=int, default=10, help="pending Workloads per ClusterQueue")
    parser.add_argument(
        "--preemption", action="store_true", help="queues preempt lower priorities and reclaim from the cohort (the engine works harder)"
    )
    args = parser.parse_args()
    dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    docs = documents(args.cohorts, args.queues, args.per_queue, preemption=args.preemption)
    args.out.write_text(yaml.dump_all(docs, Dumper=dumper, sort_keys=False))
    print(f"{args.out}: {len(docs)} documents, {args.out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
