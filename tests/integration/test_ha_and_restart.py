"""Leader election and restarts of `python -m manager` on a real cluster: one writer at a time,
a fast handover (also with Jobs arriving through the webhook during it), and state rebuilt
from the cluster alone."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job, Lease
from manager.api.meta import find_condition, is_condition_true
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from tests.harness import Provider, eventually, watched
from tests.integration.controllers import SYSTEM_NAMESPACE, ControllerProcess, ServiceProxy, crd_cluster, wait_webhooks
from tests.integration.test_controllers import job_manifest

LEASE_DURATION = 4.0  # ControllerProcess passes --lease-duration=4
LEASE = "kfed-manager"


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "ha")


@pytest.fixture
def processes(cluster: LocalCluster, tmp_path: Any) -> Iterator[Any]:
    started: list[ControllerProcess] = []

    def start(identity: str) -> ControllerProcess:
        # Bare Workloads only here: no Job webhook needed, so no webhook configuration churn.
        process = ControllerProcess(cluster, tmp_path, identity=identity, extra=["--no-webhooks"]).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


@pytest.fixture(scope="module")
def jobs_ha_cluster(provider: Provider) -> LocalCluster:
    # Its own cluster: the webhook configurations installed here must not reach the other tests.
    return crd_cluster(provider, "hajob")


async def setup_queue(kube: KubeClient, cpu: int, *, queue: str = "q") -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:6]
    ns, cq, flavor = f"ha-{suffix}", f"ha-cq-{suffix}", f"ha-flavor-{suffix}"
    await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    await kube.create(
        kueue.ResourceFlavor, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}}
    )
    await kube.create(
        kueue.ClusterQueue,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}
                ],
            },
        },
    )
    await kube.create(
        kueue.LocalQueue,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": queue, "namespace": ns},
            "spec": {"clusterQueue": cq},
        },
    )
    return ns, cq


async def add_workloads(kube: KubeClient, ns: str, names: list[str]) -> None:
    pod = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}
    for name in names:
        await kube.create(
            kueue.Workload,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": pod}]},
            },
        )


async def reserved(kube: KubeClient, ns: str) -> list[kueue.Workload]:
    items = (await kube.list(kueue.Workload, namespace=ns)).items
    return [
        w
        for w in items
        if w.status is not None
        and w.status.admission is not None
        and is_condition_true(w.status.conditions, c.QUOTA_RESERVED)
        and not is_condition_true(w.status.conditions, c.FINISHED)
    ]


async def finish(kube: KubeClient, wl: kueue.Workload) -> None:
    conditions = [cond.to_dict() for cond in (wl.status.conditions if wl.status else None) or []]
    conditions.append(
        {"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    )
    await kube.patch(kueue.Workload, wl.name, {"status": {"conditions": conditions}}, namespace=wl.namespace, subresource="status")


@dataclass
class Reservations:
    """Every quota reservation a watch saw written to the Workloads of one namespace: one entry
    per Workload each time its QuotaReserved turned True, or was written True again with another
    transition time (a second admission). Counted from the Workloads' own writes, which a watch
    delivers one by one, not from Events, which are best effort and dropped under load."""

    by_workload: dict[str, list[str]] = field(default_factory=dict)

    def record(self, kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
        if new is None:
            return
        now, before = _reserved_at(new), _reserved_at(old)
        if now is not None and now != before:
            self.by_workload.setdefault(new.name, []).append(now)

    def total(self) -> int:
        return sum(len(times) for times in self.by_workload.values())

    def twice(self) -> dict[str, list[str]]:
        return {name: times for name, times in self.by_workload.items() if len(times) > 1}


def _reserved_at(wl: kueue.Workload | None) -> str | None:
    cond = find_condition(wl.status.conditions if wl is not None and wl.status else None, c.QUOTA_RESERVED)
    return str(cond.last_transition_time) if cond is not None and cond.status == "True" else None


@contextlib.asynccontextmanager
async def reservations_seen(kube: KubeClient, ns: str) -> AsyncIterator[Reservations]:
    """Watch the namespace's Workloads while the block runs (it must run through every restart and
    handover of the test: the apiserver's watch outlives the replicas); a failed watch fails it."""
    seen = Reservations()
    async with watched(kube, kueue.Workload, ns, seen.record):
        yield seen


async def _reservations(seen: Reservations, total: int) -> bool:
    if seen.twice() or seen.total() > total:
        raise AssertionError(f"{seen.total()} reservations for {total} Workloads, twice: {seen.twice()}")
    return seen.total() == total


async def holder(kube: KubeClient) -> str:
    lease = await kube.get(Lease, LEASE, namespace=SYSTEM_NAMESPACE)
    return lease.spec.holder_identity or ""


async def test_only_the_leader_admits_and_a_standby_takes_over_when_it_dies(processes: Any, kube: KubeClient) -> None:
    first = processes("replica-a")
    first.wait_ready()
    await eventually(lambda: _holder_is(kube, "replica-a"), timeout=30, what="replica-a holding the lease")
    second = processes("replica-b")
    second.wait_ready()  # a standby is ready: its caches are synced, so it can take over at once
    ns, _ = await setup_queue(kube, cpu=3)
    async with reservations_seen(kube, ns) as seen:
        await add_workloads(kube, ns, [f"w{i}" for i in range(6)])
        first_batch = await eventually(lambda: _exactly(kube, ns, 3), timeout=30, what="3 Workloads admitted by the leader")
        assert await holder(kube) == "replica-a"
        assert not second.is_leader_log()
        first.kill()
        # Handover: the standby must hold the lease within one lease duration (plus its retry period).
        await eventually(
            lambda: _holder_is(kube, "replica-b"), timeout=LEASE_DURATION + 2.0, interval=0.1, what="replica-b taking the lease"
        )
        for wl in first_batch[:2]:
            await finish(kube, wl)
        second_batch = await eventually(
            lambda: _exactly(kube, ns, 3, excluding={w.name for w in first_batch[:2]}),
            timeout=30,
            what="the new leader admitting into the freed quota",
        )
        assert {w.name for w in first_batch[2:]} <= {w.name for w in second_batch}
        # Nothing was reserved twice, by either replica: five reservations, one per Workload.
        await eventually(lambda: _reservations(seen, 5), timeout=30, what="5 reservations, one per Workload")
    assert seen.total() == 5 and not seen.twice(), seen


async def test_a_burst_of_jobs_during_a_handover_is_admitted_exactly_once_each(jobs_ha_cluster: LocalCluster, tmp_path: Any) -> None:
    cluster = jobs_ha_cluster
    # Both replicas serve the webhooks behind one address, as behind the Service in deploy/,
    # with the certificate they share through the Secret. A longer lease than the other tests
    # leaves a window of several seconds in which nobody leads.
    replicas = [
        ControllerProcess(cluster, tmp_path, identity=name, extra=["--lease-duration=8", "--renew-deadline=6"])
        for name in ("jobs-a", "jobs-b")
    ]
    proxy = ServiceProxy([r.webhook_port for r in replicas])
    for replica in replicas:
        replica.extra += [f"--webhook-url={proxy.url}", "--webhook-cert-secret=kfed-webhook-cert"]
    first, second = replicas
    kube = await KubeClient.from_kubeconfig(cluster.kubeconfig(), name="test")
    try:
        first.start().wait_ready()
        await eventually(lambda: _holder_is(kube, "jobs-a"), timeout=30, what="jobs-a holding the lease")
        wait_webhooks(cluster, first, url=proxy.url)
        second.start().wait_ready()
        ns, _ = await setup_queue(kube, cpu=30, queue="user-queue")
        async with reservations_seen(kube, ns) as seen:
            jobs = await _handover_burst(kube, ns, [f"early-{i}" for i in range(5)], first)
            await eventually(lambda: _reservations(seen, 25), timeout=30, what="25 reservations, one per Workload")
        # One reservation per Workload, through the handover: none twice.
        assert seen.total() == 25 and not seen.twice(), seen
        workloads = (await kube.list(kueue.Workload, namespace=ns)).items
        owners = [ref.name for w in workloads for ref in w.metadata.owner_references or []]
        assert sorted(owners) == sorted(jobs)  # one Workload per Job, none twice
        assert all(w.status is not None and is_condition_true(w.status.conditions, c.QUOTA_RESERVED) for w in workloads)
    finally:
        await kube.close()
        for replica in replicas:
            replica.kill()
        proxy.close()


async def _handover_burst(kube: KubeClient, ns: str, early: list[str], first: ControllerProcess) -> list[str]:
    """Start 5 Jobs, kill the leader, send 20 more while nobody leads, and wait for all 25 to run
    and their reservations to be seen."""
    for name in early:
        await kube.create(Job, job_manifest(name, ns), namespace=ns)
    await eventually(lambda: _unsuspended(kube, ns, early), timeout=30, what="the leader starting the first 5 Jobs")
    first.kill()
    burst = [f"burst-{i}" for i in range(20)]
    # As `kfed submit` does: a create the apiserver refused because its webhook call hit the
    # dead replica stored nothing, so it is sent again.
    created = await asyncio.gather(
        *(kube.create(Job, job_manifest(name, ns), namespace=ns, retry_unreachable_webhook=True) for name in burst)
    )
    # Accepted by the surviving replica's webhook and held, while nobody leads yet.
    assert all(job.spec.suspend is True for job in created)
    assert await holder(kube) == "jobs-a", "the burst must arrive before the standby takes over"
    await eventually(lambda: _holder_is(kube, "jobs-b"), timeout=8 + 4, interval=0.1, what="jobs-b taking the lease")
    await eventually(lambda: _unsuspended(kube, ns, early + burst), timeout=60, what="every Job started")
    return early + burst


async def _unsuspended(kube: KubeClient, ns: str, names: list[str]) -> bool:
    jobs = {job.name: job for job in (await kube.list(Job, namespace=ns)).items}
    return all(name in jobs and jobs[name].spec.suspend is False for name in names)


async def test_sigterm_releases_the_lease_and_losing_it_exits_non_zero(processes: Any, kube: KubeClient) -> None:
    process = processes("replica-c")
    process.wait_ready()
    await eventually(lambda: _holder_is(kube, "replica-c"), timeout=30, what="replica-c leading")
    assert process.terminate() == 0
    assert await holder(kube) == ""  # released at once, so a standby need not wait for expiry

    process = processes("replica-d")
    process.wait_ready()
    await eventually(lambda: _holder_is(kube, "replica-d"), timeout=30, what="replica-d leading")
    lease = await kube.get(Lease, LEASE, namespace=SYSTEM_NAMESPACE)
    lease.spec.holder_identity = "intruder"
    lease.spec.lease_duration_seconds = 3600
    await kube.replace(Lease, lease)
    code = await eventually(process.exit_code, timeout=30, what="replica-d exiting after losing the lease")
    assert code == 3
    await kube.patch(Lease, LEASE, {"spec": {"holderIdentity": None}}, namespace=SYSTEM_NAMESPACE)


async def test_a_restarted_manager_rebuilds_its_state_from_the_cluster(processes: Any, kube: KubeClient) -> None:
    process = processes("replica-e")
    process.wait_ready()
    await eventually(lambda: _holder_is(kube, "replica-e"), timeout=30, what="replica-e leading")
    ns, cq = await setup_queue(kube, cpu=3)
    async with reservations_seen(kube, ns) as seen:
        await add_workloads(kube, ns, [f"a{i}" for i in range(5)])
        admitted = await eventually(lambda: _exactly(kube, ns, 3), timeout=30, what="3 admitted")
        process.kill()
        # While it is down: one admitted Workload finishes and two more arrive.
        await finish(kube, admitted[0])
        await add_workloads(kube, ns, ["b0", "b1"])
        await kube.patch(Lease, LEASE, {"spec": {"holderIdentity": None}}, namespace=SYSTEM_NAMESPACE)
        restarted = processes("replica-e2")
        restarted.wait_ready()
        after = await eventually(
            lambda: _exactly(kube, ns, 3, excluding={admitted[0].name}), timeout=30, what="quota refilled after the restart"
        )
        assert {w.name for w in admitted[1:]} <= {w.name for w in after}  # still admitted, not readmitted
        await eventually(lambda: _reservations(seen, 4), timeout=30, what="4 reservations, one per admitted Workload")
    assert seen.total() == 4 and not seen.twice(), seen

    async def status_counts() -> Any:
        got = await kube.get(kueue.ClusterQueue, cq)
        s = got.status
        return s if s is not None and s.reserving_workloads == 3 and s.pending_workloads == 3 else None

    await eventually(status_counts, timeout=30, what="ClusterQueue status: 3 reserving, 3 pending")


async def _holder_is(kube: KubeClient, identity: str) -> bool:
    try:
        return await holder(kube) == identity
    except Exception:  # noqa: BLE001 - the lease may not exist yet
        return False


async def _exactly(kube: KubeClient, ns: str, count: int, *, excluding: set[str] | None = None) -> list[kueue.Workload] | None:
    found = [w for w in await reserved(kube, ns) if w.name not in (excluding or set())]
    if len(found) > count:
        raise AssertionError(f"more than {count} Workloads hold quota: {[w.name for w in found]}")
    return sorted(found, key=lambda w: w.name) if len(found) == count else None
