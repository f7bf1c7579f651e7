"""Leader election and restarts of `python -m manager` on a real cluster: one writer at a time,
a fast handover, and state rebuilt from the cluster alone."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Lease
from manager.api.meta import is_condition_true
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from tests.harness import Provider, eventually
from tests.integration.controllers import SYSTEM_NAMESPACE, ControllerProcess, crd_cluster

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


async def setup_queue(kube: KubeClient, cpu: int) -> tuple[str, str]:
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
            "metadata": {"name": "q", "namespace": ns},
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


async def quota_reserved_events(kube: KubeClient, ns: str) -> dict[str, int]:
    events = await kube.request("GET", f"/api/v1/namespaces/{ns}/events")
    counts: dict[str, int] = {}
    for event in events["items"]:
        if event["reason"] == "QuotaReserved":
            name = event["involvedObject"]["name"]
            counts[name] = counts.get(name, 0) + 1
    return counts


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
    await add_workloads(kube, ns, [f"w{i}" for i in range(6)])
    first_batch = await eventually(lambda: _exactly(kube, ns, 3), timeout=30, what="3 Workloads admitted by the leader")
    assert await holder(kube) == "replica-a"
    assert not second.is_leader_log()

    async def first_events_recorded() -> bool:
        return sum((await quota_reserved_events(kube, ns)).values()) == 3

    # Events are sent after their writes; let them land before the crash, which would lose them.
    await eventually(first_events_recorded, timeout=30, what="the leader's 3 QuotaReserved events")
    first.kill()
    # Handover: the standby must hold the lease within one lease duration (plus its retry period).
    await eventually(lambda: _holder_is(kube, "replica-b"), timeout=LEASE_DURATION + 2.0, interval=0.1, what="replica-b taking the lease")
    for wl in first_batch[:2]:
        await finish(kube, wl)
    second_batch = await eventually(
        lambda: _exactly(kube, ns, 3, excluding={w.name for w in first_batch[:2]}),
        timeout=30,
        what="the new leader admitting into the freed quota",
    )
    assert {w.name for w in first_batch[2:]} <= {w.name for w in second_batch}
    # Nothing was admitted twice, by either replica.
    events = await quota_reserved_events(kube, ns)
    assert events and all(count == 1 for count in events.values()), events
    assert sum(events.values()) == 5


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
    events = await quota_reserved_events(kube, ns)
    assert all(count == 1 for count in events.values()), events

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
