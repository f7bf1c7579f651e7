"""How fast `kfed status` answers on a fleet of 3 clusters holding 5,000 workloads.

A manager and two workers on the local harness, the CRDs, the MultiKueue objects (Secrets,
MultiKueueClusters, config, check), a ClusterQueue and LocalQueue on each, and N Workloads on
the manager (default 5,000), half of them with a copy of our origin on a worker. The script
then runs `kfed status` (and `kfed jobs -A`) as a user would, a new process each time, and
prints the wall times.

    .venv/bin/python benchmarks/cli.py [--workloads 5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.dev import federation
from manager.dev.local import LocalProvider
from manager.kube.client import KubeClient

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"


def workload(name: str, *, origin: str | None = None) -> dict[str, Any]:
    labels = {c.MULTIKUEUE_ORIGIN_LABEL: origin} if origin else {}
    pod = {"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {"queueName": federation.LOCAL_QUEUE, "podSets": [{"name": "main", "count": 1, "template": pod}]},
    }


async def fill(client: KubeClient, items: list[dict[str, Any]], *, concurrency: int = 64) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(obj: dict[str, Any]) -> None:
        async with gate:
            await client.create(kueue.Workload, obj, namespace=NAMESPACE)

    await asyncio.gather(*(one(obj) for obj in items))


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return elapsed


async def main(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="kfed-cli-bench-"))
    provider = LocalProvider(base)
    clusters = provider.create(["manager", "worker1", "worker2"])
    manager, workers = clusters[0], clusters[1:]
    try:
        federation.install(manager, workers, federation.crd_manifests(REPO / "crds"))
        for cluster in clusters:
            federation.create(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            federation.create(
                cluster,
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": federation.LOCAL_QUEUE, "namespace": NAMESPACE},
                    "spec": {"clusterQueue": federation.CLUSTER_QUEUE},
                },
            )
        started = time.monotonic()
        client = await KubeClient.from_kubeconfig(manager.kubeconfig(), name="bench", qps=5000, burst=5000)
        await fill(client, [workload(f"wl-{i:05d}") for i in range(args.workloads)])
        await client.close()
        for index, worker in enumerate(workers):
            wclient = await KubeClient.from_kubeconfig(worker.kubeconfig(), name="bench", qps=5000, burst=5000)
            share = range(index, args.workloads // 2, len(workers))
            await fill(wclient, [workload(f"wl-{i:05d}", origin=c.DEFAULT_MULTIKUEUE_ORIGIN) for i in share])
            await wclient.close()
        print(f"created {args.workloads} manager Workloads and {args.workloads // 2} worker copies in {time.monotonic() - started:.1f} s")
        kfed = [sys.executable, "-m", "manager.cli.main"]
        kubeconfig = f"--kubeconfig={manager.kubeconfig_path}"
        startup = [timed([*kfed, "--help"]) for _ in range(3)]
        status = [timed([*kfed, "status", kubeconfig]) for _ in range(args.runs)]
        jobs = [timed([*kfed, "jobs", "-A", kubeconfig, "-o", "json"]) for _ in range(args.runs)]
        print(f"kfed CLI benchmark: 3 clusters, {args.workloads} workloads on the manager, {args.runs} runs each (a new process per run)")
        print(f"  python start-up (kfed --help):  median {statistics.median(startup):.2f} s")
        print(f"  kfed status:                    median {statistics.median(status):.2f} s, worst {max(status):.2f} s  (target < 1.5 s)")
        print(f"  kfed jobs -A -o json:           median {statistics.median(jobs):.2f} s, worst {max(jobs):.2f} s")
    finally:
        provider.delete_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    asyncio.run(main(parser.parse_args()))
