"""Latency of Kueue's visibility API served by kfed's manager, asked as a client asks it: through
the apiserver (the aggregation layer proxies to the manager), with `limit` 100 and 1,000, over a
backlog of `--workloads` pending Workloads (15,000 by default) in one ClusterQueue with no quota.

    PYTHONPATH=. .venv/bin/python benchmarks/visibility.py [--workloads 15000] [--requests 200]

Prints, for each limit, the median and P99 latency of `--requests` sequential GETs of
`clusterqueues/{name}/pendingworkloads`, and the manager's CPU per request. The answers are
computed from the engine's queues in memory; no list call is made per request. (The same figure
for upstream Kueue's own visibility server is not measured yet: it writes its self-signed
certificate under /visibility, which this harness does not provide.)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from procstats import proc_stats

from manager.api import kueue
from manager.dev import federation
from manager.dev.local import LocalCluster, LocalProvider, free_port, wait_for
from manager.kube.client import KubeClient

REPO = Path(__file__).resolve().parents[1]
CQ, NAMESPACE, LQ = "backlog", "backlog", "lq"
PATH = f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{CQ}/pendingworkloads"


def queue_objects() -> list[tuple[Any, dict[str, Any]]]:
    group = {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 0}]}]}
    meta = {"apiVersion": "kueue.x-k8s.io/v1beta2"}
    return [
        (kueue.ResourceFlavor, {**meta, "kind": "ResourceFlavor", "metadata": {"name": "default"}}),
        (
            kueue.ClusterQueue,
            {**meta, "kind": "ClusterQueue", "metadata": {"name": CQ}, "spec": {"namespaceSelector": {}, "resourceGroups": [group]}},
        ),
        (kueue.LocalQueue, {**meta, "kind": "LocalQueue", "metadata": {"name": LQ, "namespace": NAMESPACE}, "spec": {"clusterQueue": CQ}}),
    ]


def workload(index: int) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
    spec = {"queueName": LQ, "priority": index % 7, "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"w{index:05d}", "namespace": NAMESPACE},
        "spec": spec,
    }


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(cluster: LocalCluster, base: Path, *, workloads: int, requests: int) -> None:
    federation.install_crds(cluster, federation.crd_manifests(REPO / "crds"))
    federation.create(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": federation.SYSTEM_NAMESPACE}})
    federation.create(cluster, federation.visibility_service())
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig(), name="bench", qps=5000, burst=5000)
    manager: subprocess.Popen[bytes] | None = None
    try:
        await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
        for model, obj in queue_objects():
            await client.create(model, obj)
        health = free_port()
        argv = federation.controller_argv(
            cluster,
            "manager",
            health_port=health,
            webhook_port=free_port(),
            cert_dir=base / "certs",
            extra=("--log-level=warning", *federation.visibility_flags(free_port())),
        )
        with (base / "manager.log").open("wb") as out:
            manager = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=2) as response:
                return bool(response.status == 200)

        wait_for(ready, timeout=60, what="manager ready")
        started = time.monotonic()
        for chunk in range(0, workloads, 100):
            await asyncio.gather(*(client.create(kueue.Workload, workload(i)) for i in range(chunk, min(chunk + 100, workloads))))
        print(f"{workloads} Workloads created in {time.monotonic() - started:.1f} s", file=sys.stderr)

        async def all_listed() -> bool:
            answer = await client.request("GET", PATH, query=[("limit", "1"), ("offset", str(workloads - 1))])
            return len(answer.get("items") or []) == 1

        deadline = time.monotonic() + 600
        while not await all_listed():  # the manager still takes in the backlog: poll with a deadline
            if time.monotonic() > deadline:
                raise TimeoutError(f"the visibility API does not list {workloads} pending Workloads after 600 s")
            await asyncio.sleep(1.0)
        print(f"all {workloads} listed after {time.monotonic() - started:.1f} s", file=sys.stderr)
        print(f"kfed visibility API, {workloads} pending Workloads in one ClusterQueue, {requests} GETs per limit through the apiserver")
        print("| limit | median (ms) | P99 (ms) | items | manager CPU per request (ms) |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for limit in (100, 1000):
            cpu_before, _ = proc_stats(manager.pid)
            latencies = []
            items = 0
            for _ in range(requests):
                sent = time.perf_counter()
                answer = await client.request("GET", PATH, query=[("limit", str(limit))])
                latencies.append((time.perf_counter() - sent) * 1000)
                items = len(answer.get("items") or [])
            cpu_after, _ = proc_stats(manager.pid)
            per_request = (cpu_after - cpu_before) * 1000 / requests
            print(f"| {limit} | {statistics.median(latencies):.1f} | {percentile(latencies, 0.99):.1f} | {items} | {per_request:.1f} |")
    finally:
        await client.close()
        if manager is not None:
            manager.terminate()
            manager.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=15000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kfed-visibility-"))
    provider = LocalProvider(base / "clusters")
    [cluster] = provider.create(["visibility"], aggregation=True)
    try:
        asyncio.run(run(cluster, base, workloads=args.workloads, requests=args.requests))
    finally:
        provider.delete_all()


if __name__ == "__main__":
    main()
