"""kfed and upstream Kueue in one MultiKueue federation, both ways round:

- a kfed manager dispatching to one kfed worker and one upstream-Kueue worker, and
- an upstream Kueue manager dispatching to two kfed worker agents.

Upstream Kueue is the release pinned in hack/kueue/versions.env, built by hack/kueue/build.sh.
Every cluster runs the real apiserver; workers also run the Job controller, the scheduler and
kwok nodes, so the Jobs really run.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.meta import find_condition, is_condition_true
from manager.dev import federation
from manager.dev.local import LocalCluster
from manager.engine.workload import admission_check_state
from manager.kube.client import KubeClient
from tests.conftest import REPO_ROOT
from tests.e2e.federation import CHECK, GC_INTERVAL, LQ, PARKED, RUNS, WORKER_LOST_TIMEOUT, Clients, job_manifest, join, write_config
from tests.harness import Provider, eventually
from tests.integration.controllers import SYSTEM_NAMESPACE, ControllerProcess, ensure_namespace, wait_webhooks
from tests.kueue_upstream import KUEUE_NAMESPACE, UpstreamKueue, require_upstream_kueue

# The longest Job name whose Workload name Kueue has to shorten (job-<name>-<hash> > 63).
LONG_NAME = "interop-long-name-" + "x" * 44
assert len(LONG_NAME) == 62


@dataclass
class Interop:
    """A federation mixing kfed and upstream Kueue, and how to stop what it started. Only
    `runs_on` gets quota, so the tests' Jobs run there (every worker gets a copy to admit)."""

    manager: LocalCluster
    workers: dict[str, LocalCluster]
    runs_on: str
    stoppers: list[Callable[[], object]] = field(default_factory=list)

    def stop(self) -> None:
        for stop in reversed(self.stoppers):
            with contextlib.suppress(Exception):
                stop()
        for cluster in [self.manager, *self.workers.values()]:
            cluster.stop()


def kfed_cluster(cluster: LocalCluster) -> None:
    federation.install_crds(cluster, federation.crd_manifests(REPO_ROOT / "crds"))
    ensure_namespace(cluster, SYSTEM_NAMESPACE)


def start_agent(fed: Interop, name: str, directory: Path) -> None:
    worker = fed.workers[name]
    kfed_cluster(worker)
    agent = ControllerProcess(worker, directory / name, component="worker_agent").start()
    fed.stoppers.append(agent.terminate)
    agent.wait_ready()
    wait_webhooks(worker, agent)


def start_kueue(fed: Interop, cluster: LocalCluster, directory: Path, bin_dir: Path, multikueue: dict[str, Any] | None = None) -> None:
    kueue_process = UpstreamKueue(cluster, directory, bin_dir, multikueue=multikueue)
    fed.stoppers.append(kueue_process.stop)
    kueue_process.start()


def kfed_manager_with_a_kueue_worker(provider: Provider, directory: Path, bin_dir: Path) -> Interop:
    suffix = uuid.uuid4().hex[:4]
    manager = provider.create([f"ik-manager-{suffix}"])[0]
    kfed_worker, kueue_worker = provider.create([f"ik-kfed-{suffix}", f"ik-kueue-{suffix}"], jobs=True)
    fed = Interop(
        manager,
        {"kfed-worker": kfed_worker, "kueue-worker": kueue_worker},
        runs_on="kueue-worker",
    )
    try:
        start_agent(fed, "kfed-worker", directory)
        start_kueue(fed, kueue_worker, directory / "kueue-worker", bin_dir)
        kfed_cluster(manager)
        config = directory / "kfed-manager-config.yaml"
        write_config(config, origin=None)
        join(manager, fed.workers)
        process = ControllerProcess(manager, directory / "manager", extra=[f"--config={config}"]).start()
        fed.stoppers.append(process.terminate)
        process.wait_ready()
        wait_webhooks(manager, process)
    except BaseException:
        fed.stop()
        raise
    return fed


def kueue_manager_with_kfed_workers(provider: Provider, directory: Path, bin_dir: Path) -> Interop:
    suffix = uuid.uuid4().hex[:4]
    manager = provider.create([f"kk-manager-{suffix}"])[0]
    w1, w2 = provider.create([f"kk-w1-{suffix}", f"kk-w2-{suffix}"], jobs=True)
    fed = Interop(manager, {"worker1": w1, "worker2": w2}, runs_on="worker2")
    try:
        for name in fed.workers:
            start_agent(fed, name, directory)
        multikueue = {"gcInterval": f"{GC_INTERVAL}s", "workerLostTimeout": f"{WORKER_LOST_TIMEOUT}s"}
        start_kueue(fed, manager, directory / "manager", bin_dir, multikueue=multikueue)
        join(manager, fed.workers, namespace=KUEUE_NAMESPACE)
    except BaseException:
        fed.stop()
        raise
    return fed


SETUPS = {"kfed-manager": kfed_manager_with_a_kueue_worker, "kueue-manager": kueue_manager_with_kfed_workers}


@pytest.fixture(scope="module", params=sorted(SETUPS))
def interop(request: pytest.FixtureRequest, provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Interop]:
    bin_dir = require_upstream_kueue()
    fed = SETUPS[request.param](provider, tmp_path_factory.mktemp(request.param), bin_dir)
    try:
        yield fed
    finally:
        fed.stop()


@pytest.fixture
async def kube(interop: Interop) -> AsyncIterator[Clients]:
    manager = await KubeClient.from_kubeconfig(interop.manager.kubeconfig(), name="test-manager")
    workers = {name: await KubeClient.from_kubeconfig(w.kubeconfig(), name=f"test-{name}") for name, w in interop.workers.items()}
    clients = Clients(manager, workers)
    try:
        yield clients
    finally:
        await clients.close()


@pytest.fixture
def tag() -> str:
    return f"i{uuid.uuid4().hex[:6]}"


async def queues_ready(
    interop: Interop, kube: Clients, namespace: str, *, labels: dict[str, str], tag: str, manager_cpu: int = 4
) -> dict[str, str]:
    """Queues on every cluster (4 cpu on `runs_on`, none elsewhere), and the manager's LocalQueue
    active: its ClusterQueue's MultiKueue check sees every worker, so a Job created now is dispatched."""
    worker_cpu = {name: 4 if name == interop.runs_on else 0 for name in kube.workers}
    cqs = await kube.queues(namespace, manager_cpu=manager_cpu, worker_cpu=worker_cpu, labels=labels, tag=tag)

    async def active() -> Any:
        lq = await kube.manager.get(kueue.LocalQueue, LQ, namespace=namespace)
        return is_condition_true(lq.status.conditions if lq.status else None, c.ACTIVE)

    await eventually(active, timeout=90, what="the manager's LocalQueue Active (every worker connected)")
    return cqs


async def admitted_on(kube: Clients, ns: str, job: str) -> str | None:
    wl = await kube.manager_workload(ns, job)
    check = admission_check_state(wl, CHECK) if wl else None
    conditions = wl.status.conditions if wl and wl.status else None
    if wl is None or check is None or check.state != "Ready" or not is_condition_true(conditions, "Admitted"):
        return None
    return wl.status.cluster_name if wl.status else None


async def job_complete(kube: Clients, ns: str, name: str) -> Job | None:
    job = await kube.manager.get(Job, name, namespace=ns)
    conditions = job.status.conditions if job.status else None
    return job if any(cond.type == "Complete" and cond.status == "True" for cond in conditions or []) else None


async def pods_created(kube: Clients, ns: str, job: str) -> dict[str, int]:
    """Per worker, how many pods the Job controller created for a Job of this name (its events
    outlive the Job)."""
    counts = {}
    for worker, client in kube.workers.items():
        query = [("fieldSelector", f"involvedObject.kind=Job,involvedObject.name={job},reason=SuccessfulCreate")]
        events = (await client.request("GET", f"/api/v1/namespaces/{ns}/events", query=query))["items"]
        counts[worker] = sum(int(event.get("count") or 1) for event in events)
    return counts


async def remote_leftovers(kube: Clients, ns: str) -> dict[str, list[str]]:
    left: dict[str, list[str]] = {}
    for worker, client in kube.workers.items():
        names = [f"Job/{j.name}" for j in (await client.list(Job, namespace=ns)).items]
        names += [f"Workload/{w.name}" for w in (await client.list(kueue.Workload, namespace=ns)).items]
        names += [f"Pod/{p['metadata']['name']}" for p in (await client.request("GET", f"/api/v1/namespaces/{ns}/pods"))["items"]]
        if names:
            left[worker] = names
    return left


# --- Jobs run exactly once and leave nothing behind ---------------------------------------------------------
async def test_short_and_62_character_jobs_each_run_exactly_once_and_leave_nothing_behind(
    interop: Interop, kube: Clients, tag: str
) -> None:
    ns = f"{tag}-once"
    await queues_ready(interop, kube, ns, labels=RUNS, tag=tag)
    names = ["short", LONG_NAME]
    for name in names:
        await kube.manager.create(Job, job_manifest(name, ns))
    for name in names:
        job = await eventually(functools.partial(job_complete, kube, ns, name), timeout=180, what=f"Job {name} Complete on the manager")
        assert job.spec.managed_by == c.MULTIKUEUE_MANAGED_BY  # the manager's own Job controller never ran it
        assert job.status is not None and job.status.succeeded == 1 and not job.status.failed
        # The manager's Workload is finished in a write of its own, after the Job's status.
        wl = await eventually(functools.partial(finished_workload, kube, ns, name), timeout=30, what=f"Job {name}'s Workload Finished")
        finished = find_condition(wl.status.conditions, c.FINISHED)
        assert finished is not None and (finished.status, finished.reason) == ("True", "Succeeded")
        assert wl.status.cluster_name == interop.runs_on

    await eventually(lambda: _nothing_left(kube, ns), timeout=90, what="every remote Job, Workload and Pod deleted after the finish")
    for name in names:
        created = await eventually(functools.partial(_some_pod_created, kube, ns, name), timeout=30, what=f"the pod events of {name}")
        assert sum(created.values()) == 1, f"{name} ran {created} times per worker; expected once in all"


async def finished_workload(kube: Clients, ns: str, job: str) -> kueue.Workload | None:
    wl = await kube.manager_workload(ns, job)
    return wl if wl is not None and wl.status is not None and find_condition(wl.status.conditions, c.FINISHED) is not None else None


async def _nothing_left(kube: Clients, ns: str) -> bool:
    return not await remote_leftovers(kube, ns)


async def _some_pod_created(kube: Clients, ns: str, job: str) -> dict[str, int] | None:
    counts = await pods_created(kube, ns, job)
    return counts if sum(counts.values()) else None


# --- preemption on the manager --------------------------------------------------------------------------------
async def test_a_preemption_on_the_manager_stops_the_remote_job_and_frees_quota_on_both_sides(
    interop: Interop, kube: Clients, tag: str
) -> None:
    ns = f"{tag}-preempt"
    # Every cluster knows the priority classes, as the Jobs carry them everywhere.
    for client in [kube.manager, *kube.workers.values()]:
        for name, value in (("low", 10), ("high", 1000)):
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": f"{tag}-{name}"},
                "value": value,
            }
            await client.create(kueue.WorkloadPriorityClass, body)
    cqs = await queues_ready(interop, kube, ns, manager_cpu=1, labels=PARKED, tag=tag)
    await kube.manager.create(Job, job_manifest("victim", ns, priority_class=f"{tag}-low"))
    victim_on = await eventually(lambda: admitted_on(kube, ns, "victim"), timeout=90, what="the low-priority Job admitted")
    assert victim_on == interop.runs_on

    async def running_on_its_worker() -> bool:
        jobs = (await kube.workers[victim_on].list(Job, namespace=ns)).items
        return any(j.name == "victim" and j.spec.suspend is False for j in jobs)

    await eventually(running_on_its_worker, timeout=60, what=f"the victim running on {victim_on}")
    await kube.manager.create(Job, job_manifest("urgent", ns, priority_class=f"{tag}-high"))

    async def victim_requeued() -> Any:
        wl = await kube.manager_workload(ns, "victim")
        conditions = wl.status.conditions if wl and wl.status else None
        evicted = find_condition(conditions, c.EVICTED)
        reserved = is_condition_true(conditions, c.QUOTA_RESERVED)
        return evicted if evicted is not None and evicted.reason == "Preempted" and not reserved else None

    evicted = await eventually(victim_requeued, timeout=120, what="the victim preempted and its quota released on the manager")
    assert "Preempted to accommodate a workload" in evicted.message
    urgent_on = await eventually(lambda: admitted_on(kube, ns, "urgent"), timeout=90, what="the preemptor admitted")

    async def victim_stopped_on_its_worker() -> bool:
        jobs = [j for j in (await kube.workers[victim_on].list(Job, namespace=ns)).items if j.name == "victim"]
        wls = [w for w in (await kube.workers[victim_on].list(kueue.Workload, namespace=ns)).items if w.name.startswith("job-victim-")]
        return all(j.spec.suspend is True for j in jobs) and not any(
            is_condition_true(w.status.conditions if w.status else None, c.QUOTA_RESERVED) for w in wls
        )

    await eventually(victim_stopped_on_its_worker, timeout=90, what=f"the victim's remote Job stopped on {victim_on}")
    victim = await kube.manager.get(Job, "victim", namespace=ns)
    assert victim.spec.suspend is True and not (victim.status and victim.status.active)
    assert urgent_on == victim_on
    # The preemptor's 1 cpu alone on both sides: the victim's reservation is released everywhere.
    for side, client in (("manager", kube.manager), (victim_on, kube.workers[victim_on])):
        await eventually(
            functools.partial(reserved_cpu, client, cqs[side], "1"), timeout=60, what=f"{side} reserving only the preemptor's cpu"
        )


async def reserved_cpu(client: KubeClient, cq: str, expected: str) -> str | None:
    """The cpu a ClusterQueue reports reserved, once it is `expected` (status is written a moment
    after admissions change)."""
    status = (await client.get(kueue.ClusterQueue, cq)).status
    reserved = status.flavors_reservation if status else None
    total = str((reserved[0].resources or [])[0].total) if reserved else None
    return total if total == expected else None
