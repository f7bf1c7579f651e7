"""MultiKueue manager quota automation (Kueue's KEP-9988, `MultiKueueManagerQuotaAutomation`)
end to end: with the gate on and `quotaManagement: Automated`, the manager's ClusterQueue holds
the sum of its workers' related quotas, follows a worker leaving and joining within seconds
while a running job keeps its place, and a job that fits the sum but no single worker is refused
at once with each worker's offer rather than reserving and waiting."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.meta import find_condition, is_condition_true
from manager.dev.local import POD_RUN_TIME_ANNOTATION
from manager.engine.units import amount
from manager.multikueue.rules import quota_automation as qa
from tests.e2e.federation import CONFIG, RUNS, Clients, Federation, job_manifest, running
from tests.e2e.test_multikueue import running_where
from tests.harness import Provider, eventually


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation, its manager with Kueue's quota automation gate on."""
    gates = {"featureGates": {"MultiKueueManagerQuotaAutomation": True}}
    with running(provider, Path(tmp_path_factory.mktemp("quotas")), manager_config=gates) as created:
        yield created


@pytest.fixture
def tag() -> str:
    return f"q{uuid.uuid4().hex[:6]}"


async def quota_and_condition(kube: Clients, cq: str) -> tuple[int, tuple[str, str] | None]:
    found = await kube.manager.get(kueue.ClusterQueue, cq)
    resources = found.spec.resource_groups[0].flavors[0].resources if found.spec.resource_groups else []
    cpu = next((amount("cpu", r.nominal_quota) for r in resources if r.name == "cpu"), 0)
    cond = find_condition(found.status.conditions if found.status else None, qa.CONDITION)
    return cpu, (cond.status, cond.reason) if cond else None


async def set_clusters(kube: Clients, clusters: list[str]) -> None:
    await kube.manager.patch(kueue.MultiKueueConfig, CONFIG, {"spec": {"clusters": clusters}})


async def test_the_manager_quota_follows_its_workers_and_a_job_no_single_worker_fits_is_refused(kube: Clients, tag: str) -> None:
    ns = f"{tag}-auto"
    cqs = await kube.queues(ns, manager_cpu=1, worker_cpu={"worker1": 8, "worker2": 8}, labels=RUNS, tag=tag)
    manager_cq = cqs["manager"]
    # Not requested yet: the quota stays the administrator's, and the condition says so.
    assert await eventually(lambda: _is(kube, manager_cq, (1000, ("False", "NotRequested"))), timeout=30, what="the NotRequested condition")
    await kube.manager.patch(kueue.MultiKueueConfig, CONFIG, {"spec": {"quotaManagement": "Automated"}})
    await eventually(lambda: _is(kube, manager_cq, (16000, ("True", "QuotaAutomated"))), timeout=30, what="16 cpu: 8 on each worker")

    # 12 cpu fit the summed 16 but no single worker: refused at once, with each worker's offer.
    await kube.manager.create(Job, job_manifest("wide", ns, cpu="12"))
    expected = "no worker can ever admit it: needs cpu 12; largest worker offers cpu 8 (worker1), cpu 8 (worker2)"

    async def refused() -> Any:
        wl = await kube.manager_workload(ns, "wide")
        reserved = find_condition(wl.status.conditions if wl and wl.status else None, c.QUOTA_RESERVED)
        return reserved if reserved is not None and reserved.status == "False" and reserved.message == expected else None

    reserved = await eventually(refused, timeout=60, what="the 12-cpu job refused with each worker's offer")
    assert reserved.reason == "ExceedsMaxQuota"

    # A running job keeps its place while a worker leaves and the quota shrinks under it.
    steady = job_manifest("steady", ns, cpu="2")
    steady["spec"]["template"]["metadata"] = {"annotations": {POD_RUN_TIME_ANNOTATION: "600s"}}
    await kube.manager.create(Job, steady)
    where = await eventually(lambda: running_where(kube, ns, "steady"), timeout=60, what="steady running on a worker")
    stays = where[0]
    leaves = "worker2" if stays == "worker1" else "worker1"
    await set_clusters(kube, [stays])
    await eventually(lambda: _is(kube, manager_cq, (8000, ("True", "QuotaAutomated"))), timeout=30, what=f"8 cpu once {leaves} left")
    wl = await kube.manager_workload(ns, "steady")
    assert wl is not None and is_condition_true(wl.status.conditions if wl.status else None, c.ADMITTED), "steady kept its admission"
    assert await running_where(kube, ns, "steady") == [stays]
    await set_clusters(kube, ["worker1", "worker2"])
    await eventually(lambda: _is(kube, manager_cq, (16000, ("True", "QuotaAutomated"))), timeout=30, what=f"16 cpu once {leaves} joined")

    # Back to Manual: the quota stays as it was last set, and is the administrator's again.
    await kube.manager.patch(kueue.MultiKueueConfig, CONFIG, {"spec": {"quotaManagement": "Manual"}})
    await eventually(lambda: _is(kube, manager_cq, (16000, ("False", "NotRequested"))), timeout=30, what="NotRequested again")
    await kube.manager.delete(Job, "steady", namespace=ns, propagation="Background")
    await kube.manager.delete(Job, "wide", namespace=ns, propagation="Background")


async def _is(kube: Clients, cq: str, expected: tuple[int, tuple[str, str] | None]) -> bool:
    return await quota_and_condition(kube, cq) == expected
