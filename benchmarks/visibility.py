"""Latency of Kueue's visibility API, asked as a client asks it: through the apiserver (the
aggregation layer proxies to the server behind the APIService), with `limit` 100 and 1,000, over
a backlog of `--workloads` pending Workloads (15,000 by default) in one ClusterQueue with no
quota; served by kfed's manager and by upstream Kueue's own visibility server (the release
pinned in hack/kueue, its `cmd/kueue` with VisibilityOnDemand on), one after the other, each on
a fresh harness cluster with the same backlog, in one invocation.

    PYTHONPATH=. .venv/bin/python benchmarks/visibility.py [--workloads 15000] [--requests 200] [--systems kfed,kueue]

Prints, for each system and limit, the median and P99 latency of `--requests` sequential GETs of
`clusterqueues/{name}/pendingworkloads`, and the serving process's CPU per request (for Kueue the
whole manager, which also runs its controllers). kfed answers from the engine's queues in
memory; Kueue from its queue manager, also in memory. Upstream Kueue needs KFED_KUEUE_BIN
(`bash hack/kueue/build.sh`, cached by version).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from procstats import proc_stats

from manager.api import kueue
from manager.controllers.run import service_dns_names
from manager.controllers.visibility import install_api_services
from manager.dev import federation
from manager.dev.local import LocalCluster, LocalProvider, free_port, wait_for, wait_ready
from manager.kube.client import KubeClient
from manager.kube.errors import KubeError
from tests.kueue_upstream import KUEUE_NAMESPACE, UpstreamKueue

REPO = Path(__file__).resolve().parents[1]
CQ, NAMESPACE, LQ = "backlog", "backlog", "lq"
PATH = f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{CQ}/pendingworkloads"
KUEUE_VISIBILITY_SERVICE = f"{KUEUE_NAMESPACE}/kueue-visibility-server"  # as Kueue's manifests name it


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


@dataclass
class Row:
    limit: int
    median: float
    p99: float
    items: int
    cpu_per_request: float


async def create_backlog(client: KubeClient, workloads: int) -> None:
    await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
    for model, obj in queue_objects():
        await client.create(model, obj)
    started = time.monotonic()
    for chunk in range(0, workloads, 100):
        await asyncio.gather(*(client.create(kueue.Workload, workload(i)) for i in range(chunk, min(chunk + 100, workloads))))
    print(f"{workloads} Workloads created in {time.monotonic() - started:.1f} s", file=sys.stderr)


async def wait_listed(client: KubeClient, workloads: int, system: str) -> None:
    started = time.monotonic()

    async def all_listed() -> bool:
        try:
            answer = await client.request("GET", PATH, query=[("limit", "1"), ("offset", str(workloads - 1))])
        except KubeError:
            return False  # the APIService is not available yet
        return len(answer.get("items") or []) == 1

    deadline = started + 600
    while not await all_listed():  # the server still takes in the backlog: poll with a deadline
        if time.monotonic() > deadline:
            raise TimeoutError(f"{system}: the visibility API does not list {workloads} pending Workloads after 600 s")
        await asyncio.sleep(1.0)
    print(f"{system}: all {workloads} listed after {time.monotonic() - started:.1f} s", file=sys.stderr)


async def measure(client: KubeClient, pid: int, requests: int) -> list[Row]:
    rows = []
    for limit in (100, 1000):
        await client.request("GET", PATH, query=[("limit", str(limit))])  # one warm-up request
        cpu_before, _ = proc_stats(pid)
        latencies = []
        items = 0
        for _ in range(requests):
            sent = time.perf_counter()
            answer = await client.request("GET", PATH, query=[("limit", str(limit))])
            latencies.append((time.perf_counter() - sent) * 1000)
            items = len(answer.get("items") or [])
        cpu_after, _ = proc_stats(pid)
        rows.append(
            Row(limit, statistics.median(latencies), percentile(latencies, 0.99), items, (cpu_after - cpu_before) * 1000 / requests)
        )
    return rows


async def run_kfed(cluster: LocalCluster, base: Path, *, workloads: int, requests: int) -> list[Row]:
    federation.install_crds(cluster, federation.crd_manifests(REPO / "crds"))
    federation.create(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": federation.SYSTEM_NAMESPACE}})
    federation.create(cluster, federation.visibility_service())
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig(), name="bench", qps=5000, burst=5000)
    manager: subprocess.Popen[bytes] | None = None
    try:
        # The backlog first: the manager's start updates the CRDs (its conversion webhook), and
        # the apiserver answers requests in flight then with "apiserver is shutting down".
        await create_backlog(client, workloads)
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
        await wait_listed(client, workloads, "kfed")
        return await measure(client, manager.pid, requests)
    finally:
        await client.close()
        if manager is not None:
            manager.terminate()
            manager.wait(timeout=30)


async def run_kueue(cluster: LocalCluster, base: Path, *, workloads: int, requests: int) -> list[Row]:
    bin_dir = Path(
        os.environ.get("KFED_KUEUE_BIN")
        or subprocess.run(["bash", str(REPO / "hack/kueue/build.sh")], check=True, capture_output=True, text=True).stdout.strip()
    )
    port = free_port()
    upstream = UpstreamKueue(
        cluster,
        base,
        bin_dir,
        webhooks=False,
        log_level="error",
        visibility_port=port,
        visibility_names=service_dns_names(KUEUE_VISIBILITY_SERVICE),
    )
    process = upstream.prepare()  # Kueue's CRDs, namespace, certificates and Configuration
    namespace, _, name = KUEUE_VISIBILITY_SERVICE.partition("/")
    federation.create(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        },
    )
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig(), name="bench", qps=5000, burst=5000)
    try:
        await install_api_services(client, ca_bundle=upstream.ca_pem, namespace=namespace, name=name, port=port)
        await create_backlog(client, workloads)  # before the start, as for kfed
        process.start()
        upstream.process = process
        wait_ready(process, upstream.health_port, what="upstream Kueue", timeout=90)
        await wait_listed(client, workloads, "Kueue")
        pid = process.pid
        assert pid is not None
        return await measure(client, kueue_pid(pid), requests)
    finally:
        await client.close()
        upstream.stop()


def kueue_pid(launcher: int) -> int:
    """Kueue's own process: the launcher (env, unshare, sh, chroot) ends in it by exec, but
    unshare forks once; take the deepest descendant."""
    pid = launcher
    while True:
        children = Path(f"/proc/{pid}/task/{pid}/children")
        found = children.read_text().split() if children.exists() else []
        if not found:
            return pid
        pid = int(found[0])


def print_table(results: dict[str, list[Row]], workloads: int, requests: int) -> None:
    print(f"Kueue's visibility API: {workloads} pending Workloads in one ClusterQueue, {requests} GETs per limit, through the apiserver")
    systems = list(results)
    print(
        "| limit | "
        + " | ".join(f"{s} median (ms) | {s} P99 (ms)" for s in systems)
        + " | "
        + " | ".join(f"{s} CPU per request (ms)" for s in systems)
        + " |"
    )
    print("| ---: |" + " ---: | ---: |" * len(systems) + " ---: |" * len(systems))
    for i, limit in enumerate((100, 1000)):
        cells = [f"{results[s][i].median:.1f} | {results[s][i].p99:.1f}" for s in systems]
        cpu = [f"{results[s][i].cpu_per_request:.1f}" for s in systems]
        print(f"| {limit} | " + " | ".join(cells) + " | " + " | ".join(cpu) + " |")
    if "kfed" in results and "Kueue" in results:
        for i, limit in enumerate((100, 1000)):
            kfed, kueue_row = results["kfed"][i], results["Kueue"][i]
            print(f"limit {limit}: kfed/Kueue median {kfed.median / kueue_row.median:.2f}, P99 {kfed.p99 / kueue_row.p99:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=15000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--systems", default="kfed,kueue", help="kfed, kueue, or both (comma-separated)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kfed-visibility-"))
    print(f"files: {base}", file=sys.stderr)
    results: dict[str, list[Row]] = {}
    runners = {"kfed": ("kfed", run_kfed), "kueue": ("Kueue", run_kueue)}
    for system in args.systems.split(","):
        label, runner = runners[system]
        provider = LocalProvider(base / system / "clusters")
        [cluster] = provider.create([f"visibility-{system}"], aggregation=True)
        try:
            results[label] = asyncio.run(runner(cluster, base / system, workloads=args.workloads, requests=args.requests))
        finally:
            provider.delete_all()
    print_table(results, args.workloads, args.requests)


if __name__ == "__main__":
    main()
