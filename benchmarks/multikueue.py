"""MultiKueue throughput, in the unit of Kueue's own MultiKueue benchmark.

One manager and three workers on the local harness (real kube-apiserver and etcd each),
`python -m manager` on the manager and `python -m worker_agent` on every worker. A burst of
suspended Jobs (1,000 by default) is submitted to the manager; no pods run. Every Job is
dispatched to all three workers, the first to admit wins, the Job is created there and the
manager's Workload becomes Admitted. Prints:

- admitted workloads per second (from the first submission to the last admission);
- P95 quota reservation on the manager and P95 submission to admission;
- API requests per workload (the manager to its own apiserver, the manager to the workers,
  and the worker agents);
- the manager's CPU (seconds, and share of one core) and peak RSS.

    .venv/bin/python benchmarks/multikueue.py [--jobs 1000] [--workers 3] [--qps 300 --burst 500] [--dispatcher all-at-once] [--by-resource]

`--by-resource` also prints, per workload, what the manager's and the workers' apiservers
served by verb and resource (from their own `apiserver_request_total`), to see where the
requests go.

The Jobs are created as the manager's webhook would leave them (suspended, managedBy
MultiKueue); the webhooks themselves are not part of the measured path.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from procstats import apiserver_requests, cpu_by_kind, machine_busy, metric_lines, metric_sum, proc_stats

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.meta import find_condition
from manager.dev import federation
from manager.dev.local import LocalCluster, LocalProvider, free_port, wait_for
from manager.kube.client import KubeClient
from manager.kube.informer import Informer

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"


def worker_names(count: int) -> tuple[str, ...]:
    return tuple(f"worker{i}" for i in range(1, count + 1))


WORKERS = worker_names(3)  # the default size, as Kueue's own MultiKueue benchmark
# The manager's dispatcher (Configuration multiKueue.dispatcherName), by the name --dispatcher takes.
DISPATCHERS = c.DISPATCHERS_BY_SHORT_NAME


def queue_objects(check: str | None) -> list[tuple[Any, dict[str, Any]]]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 100000}]}]}
        ],
    }
    if check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    return [
        (kueue.ResourceFlavor, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}}),
        (kueue.ClusterQueue, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": spec}),
        (
            kueue.LocalQueue,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": NAMESPACE},
                "spec": {"clusterQueue": "cq"},
            },
        ),
    ]


def job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {c.QUEUE_NAME_LABEL: "lq"}},
        "spec": {
            "suspend": True,
            "managedBy": c.MULTIKUEUE_MANAGED_BY,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
                }
            },
        },
    }


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else (values[0] if values else 0.0)


async def setup(client: KubeClient, objects: list[tuple[Any, dict[str, Any]]]) -> None:
    await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
    for model, obj in objects:
        await client.create(model, obj)


def start(
    cluster: LocalCluster, component: str, base: Path, args: argparse.Namespace, extra: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    argv = federation.controller_argv(
        cluster,
        component,
        health_port=port,
        webhook_port=None,
        cert_dir=base,
        extra=(f"--kube-api-qps={args.qps}", f"--kube-api-burst={args.burst}", "--log-level=warning", *extra),
    )
    with (base / f"{cluster.name}-{component}.log").open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_for(ready, timeout=90, what=f"{component} on {cluster.name} ready")
    return process, port


@dataclass
class Burst:
    """When each Job was submitted, and when its Workload on the manager reserved quota and was admitted."""

    jobs: int
    started: float
    submit_seconds: float
    submitted: dict[str, float] = field(default_factory=dict)
    reserved: dict[str, float] = field(default_factory=dict)
    admitted: dict[str, float] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.admitted)

    @property
    def wall(self) -> float:
        """From the first submission to the last admission."""
        return (max(self.admitted.values()) - self.started) if self.admitted else float("nan")

    def reservation(self) -> list[float]:
        return [self.reserved[n] - self.submitted[n] for n in self.reserved if n in self.submitted]

    def admission(self) -> list[float]:
        return [self.admitted[n] - self.submitted[n] for n in self.admitted if n in self.submitted]


async def burst(client: KubeClient, *, jobs: int, submitters: int, timeout: float) -> Burst:
    """Submit `jobs` suspended Jobs at once and wait until every one's Workload is Admitted on
    the manager (whoever the manager is: kfed's or upstream Kueue's; both own their Workloads by
    the Job)."""
    result = Burst(jobs, 0.0, 0.0)
    done = asyncio.Event()
    informer: Informer[kueue.Workload] = Informer(client, kueue.Workload, namespace=NAMESPACE)

    def on_workload(kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
        if new is None:
            return
        owner = next((ref.name for ref in new.metadata.owner_references or []), None)
        if owner is None:
            return
        conditions = new.status.conditions if new.status else None
        now = time.monotonic()
        qr, ad = find_condition(conditions, c.QUOTA_RESERVED), find_condition(conditions, c.ADMITTED)
        if qr is not None and qr.status == "True":
            result.reserved.setdefault(owner, now)
        if ad is not None and ad.status == "True" and owner not in result.admitted:
            result.admitted[owner] = now
            if len(result.admitted) == jobs:
                done.set()

    informer.add_handler(on_workload)
    watch = asyncio.create_task(informer.run())
    await informer.synced.wait()
    gate = asyncio.Semaphore(submitters)

    async def submit(name: str) -> None:
        async with gate:
            result.submitted[name] = time.monotonic()
            await client.create(Job, job(name), namespace=NAMESPACE)

    result.started = time.monotonic()
    await asyncio.gather(*(submit(f"job-{i:05d}") for i in range(jobs)))
    result.submit_seconds = time.monotonic() - result.started
    try:
        await asyncio.wait_for(done.wait(), timeout=timeout)
    except TimeoutError:
        print(f"timed out: {len(result.admitted)} of {jobs} admitted after {timeout}s")
    watch.cancel()
    await asyncio.gather(watch, return_exceptions=True)
    return result


@dataclass
class KfedBurst:
    burst: Burst
    qps: float
    client_burst: int
    manager_cpu: float
    manager_peak_rss: int
    manager_requests: float  # to its own apiserver
    remote_requests: float  # to the workers
    agent_requests: float
    # Every sender's requests from the burst until they stopped (the Events a recorder sends
    # after the last admission included).
    requests_until_quiet: float
    agent_cpu: float
    agent_peak_rss: int  # the largest of the agents
    busy: float
    spent: dict[str, float]
    # Requests each side's apiservers served during the burst, by (verb, resource), from their
    # own metrics: every client's, this script's (its Job creates and watch) included.
    served: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)
    # Events in the benchmark's namespace once the burst is admitted, by side and reason (an
    # Event may be sent after the burst: the recorder does not hold admission back).
    events: dict[str, Counter[str]] = field(default_factory=dict)
    manager_verbs: dict[str, float] = field(default_factory=dict)  # the manager's own count, by verb


def configuration(dispatcher: str) -> dict[str, Any]:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "multiKueue": {"dispatcherName": DISPATCHERS[dispatcher]},
    }


async def run_kfed(
    manager_cluster: LocalCluster,
    workers: list[LocalCluster],
    base: Path,
    args: argparse.Namespace,
    *,
    runner_kubeconfig: dict[str, Any] | None = None,
    worker_kubeconfigs: dict[str, dict[str, Any]] | None = None,
) -> KfedBurst:
    """kfed's manager and agents on clusters already up, and one burst. `worker_kubeconfigs`
    (default: each worker's admin kubeconfig) are what the manager gets for its workers;
    `runner_kubeconfig` what this script's client uses."""
    processes: list[subprocess.Popen[bytes]] = []
    crds = federation.crd_manifests(REPO / "crds")
    for cluster in [manager_cluster, *workers]:
        federation.install_crds(cluster, crds)
        federation.create(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kfed-system"}})
    client = await KubeClient.from_kubeconfig(runner_kubeconfig or manager_cluster.kubeconfig(), name="runner", qps=5000, burst=5000)
    try:
        await setup(client, queue_objects("mk"))
        for worker in workers:
            worker_client = await KubeClient.from_kubeconfig(worker.kubeconfig(), name="runner", qps=5000, burst=5000)
            await setup(worker_client, queue_objects(None))
            await worker_client.close()
        kubeconfigs = worker_kubeconfigs or {worker.name: worker.kubeconfig() for worker in workers}
        named = zip(worker_names(len(workers)), workers, strict=True)
        mk_objects = federation.manager_objects({name: kubeconfigs[worker.name] for name, worker in named})
        for obj in mk_objects:
            if obj["kind"] in ("Secret", "MultiKueueCluster", "MultiKueueConfig", "AdmissionCheck"):
                if obj["kind"] == "AdmissionCheck":
                    obj["metadata"]["name"] = "mk"
                federation.create(manager_cluster, obj)
        config = base / "config.yaml"
        config.write_text(yaml.safe_dump(configuration(args.dispatcher)))
        agent_ports = []
        agents = []
        for worker in workers:
            process, port = start(worker, "worker_agent", base, args)
            processes.append(process)
            agents.append(process)
            agent_ports.append(port)
        manager, manager_port = start(manager_cluster, "manager", base, args, (f"--config={config}",))
        processes.append(manager)

        def connected() -> bool:
            status, body = manager_cluster.request("GET", "/apis/kueue.x-k8s.io/v1beta2/admissionchecks/mk")
            conds = (body or {}).get("status", {}).get("conditions", []) if status == 200 else []
            return any(cond["type"] == "Active" and cond["status"] == "True" and cond["reason"] == "Active" for cond in conds)

        wait_for(connected, timeout=60, what="the MultiKueue check Active with every worker connected")
        cpu_before, _ = proc_stats(manager.pid)
        agents_before = sum(proc_stats(agent.pid)[0] for agent in agents)
        busy_before = machine_busy()
        kinds_before = cpu_by_kind(base)

        def sent() -> tuple[float, float, float]:
            """What each sender has sent so far: the manager to its apiserver, the manager to
            the workers, the worker agents."""
            return (
                metric_sum(manager_port, "kfed_kube_requests_total{"),
                metric_sum(manager_port, "kfed_multikueue_remote_request_seconds_count{"),
                sum(metric_sum(port, "kfed_kube_requests_total{") for port in agent_ports),
            )

        sent_before = sent()
        verbs_before = metric_lines(manager_port, "kfed_kube_requests_total{")
        served_before = {"manager": apiserver_requests(manager_cluster), "workers": sum_counters(apiserver_requests(w) for w in workers)}
        result = await burst(client, jobs=args.jobs, submitters=args.submitters, timeout=args.timeout)
        cpu_after, peak = proc_stats(manager.pid)
        agent_stats = [proc_stats(agent.pid) for agent in agents]
        busy_after = machine_busy()
        kinds_after = cpu_by_kind(base)
        served_after = {"manager": apiserver_requests(manager_cluster), "workers": sum_counters(apiserver_requests(w) for w in workers)}
        verbs_after = metric_lines(manager_port, "kfed_kube_requests_total{")
        manager_verbs = {line: verbs_after[line] - verbs_before.get(line, 0.0) for line in verbs_after}
        during = tuple(after - before for after, before in zip(sent(), sent_before, strict=True))
        quiet = await until_quiet(lambda: sum(sent())) - sum(sent_before)
        events = {"manager": event_reasons(manager_cluster), "workers": sum_counters(event_reasons(w) for w in workers)}
        return KfedBurst(
            burst=result,
            qps=args.qps,
            client_burst=args.burst,
            manager_cpu=cpu_after - cpu_before,
            manager_peak_rss=peak,
            manager_requests=during[0],
            remote_requests=during[1],
            agent_requests=during[2],
            requests_until_quiet=quiet,
            agent_cpu=sum(cpu for cpu, _ in agent_stats) - agents_before,
            agent_peak_rss=max(rss for _, rss in agent_stats),
            busy=(busy_after[0] - busy_before[0]) / max(busy_after[1] - busy_before[1], 1),
            spent={k: kinds_after.get(k, 0.0) - kinds_before.get(k, 0.0) for k in kinds_after},
            served={side: served_after[side] - served_before[side] for side in served_after},
            events=events,
            manager_verbs=manager_verbs,
        )
    finally:
        await client.close()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


async def until_quiet(total: Callable[[], float], *, settle: float = 3.0, noise: float = 10.0, limit: float = 120.0) -> float:
    """`total()` once it has grown by less than `noise` in `settle` seconds (leases are renewed
    and queue status written all the time), or at `limit`."""
    deadline = time.monotonic() + limit
    mark, since = total(), time.monotonic()
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)  # the sampling period of this wait
        now = total()
        if now - mark >= noise:
            mark, since = now, time.monotonic()
        elif time.monotonic() - since >= settle:
            return mark
    return total()


def sum_counters(counters: Iterable[Counter[Any]]) -> Counter[Any]:
    total: Counter[Any] = Counter()
    for counter in counters:
        total.update(counter)
    return total


def event_reasons(cluster: LocalCluster) -> Counter[str]:
    """The Events in the benchmark's namespace, by the kind of object and their reason."""
    status, body = cluster.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events", timeout=30)
    items = (body or {}).get("items", []) if status == 200 and isinstance(body, dict) else []
    return Counter(f"{item['involvedObject'].get('kind', '')} {item.get('reason', '')}" for item in items)


def report_served(result: KfedBurst) -> None:
    """Per workload, what the manager's and the workers' apiservers served, by verb and resource."""
    per = max(result.burst.count, 1)
    for side, served in result.served.items():
        rows = [(count / per, verb, resource) for (verb, resource), count in served.items() if count / per >= 0.05]
        print(f"  served by the {side} apiserver(s), per workload ({sum(served.values()) / per:.1f} in all, this script's included):")
        for share, verb, resource in sorted(rows, reverse=True):
            print(f"    {share:5.2f}  {verb} {resource}")
        if side == "manager":
            sent = ", ".join(f"{line} {count / per:.2f}" for line, count in sorted(result.manager_verbs.items()))
            print(f"  sent by the manager's client, by its own count: {sent}")
        reasons = result.events.get(side, Counter())
        print(f"  Events on the {side} side per workload, by object and reason ({sum(reasons.values()) / per:.1f} in all):")
        for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"    {count / per:5.2f}  {reason}")


def report(result: KfedBurst, dispatcher: str, workers: int) -> None:
    b = result.burst
    count, wall = b.count, b.wall
    print(f"kfed MultiKueue benchmark: 1 manager, {workers} workers, {b.jobs} suspended Jobs in a burst, no pods run")
    print(f"  dispatcher:                      {dispatcher}")
    print(f"  client QPS/burst per cluster:    {result.qps:g}/{result.client_burst}")
    print(f"  submission took:                 {b.submit_seconds:.1f} s")
    print(f"  admitted:                        {count} in {wall:.1f} s -> {count / wall:.1f} workloads/s")
    print(f"  P95 quota reservation (manager): {p95(b.reservation()):.2f} s")
    print(f"  P95 submission to admission:     {p95(b.admission()):.2f} s")
    per = max(count, 1)
    total = result.manager_requests + result.remote_requests + result.agent_requests
    print(
        f"  API requests per workload:       {total / per:.1f} "
        f"(manager->manager {result.manager_requests / per:.1f}, manager->workers {result.remote_requests / per:.1f}, "
        f"worker agents {result.agent_requests / per:.1f})"
    )
    print(f"  ... and until every sender was quiet: {result.requests_until_quiet / per:.1f} (Events sent after the burst included)")
    cpu = result.manager_cpu
    print(f"  manager CPU:                     {cpu:.1f} s ({cpu / wall * 100:.0f}% of one core)")
    print(f"  manager peak RSS:                {result.manager_peak_rss / 2**20:.0f} MiB")
    print(f"  machine CPU busy (all cores):    {result.busy * 100:.0f}% (4 apiservers, 4 etcds, the manager, 3 agents, this script)")
    print("  CPU seconds by process kind:     " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(result.spent.items(), key=lambda kv: -kv[1])))


async def main(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="kfed-mk-bench-"))
    provider = LocalProvider(base)
    clusters = provider.create(["manager", *worker_names(args.workers)])
    try:
        result = await run_kfed(clusters[0], clusters[1:], base, args)
        report(result, args.dispatcher, args.workers)
        if args.by_resource:
            report_served(result)
    finally:
        provider.delete_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=len(WORKERS), help="worker clusters (each an apiserver, etcd and an agent)")
    parser.add_argument("--qps", type=float, default=300)
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--submitters", type=int, default=50, help="concurrent creates while submitting")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--dispatcher", choices=sorted(DISPATCHERS), default="all-at-once", help="the manager's MultiKueue dispatcher")
    parser.add_argument("--by-resource", action="store_true", help="also print what each side's apiservers served, by verb and resource")
    asyncio.run(main(parser.parse_args()))
