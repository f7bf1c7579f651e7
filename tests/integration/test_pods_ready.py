"""waitForPodsReady on a real cluster: `python -m manager` with a short timeout, and Jobs whose
pods never become Ready (their flavor's nodes do not exist, so the pods stay Pending)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from tests.harness import Provider, eventually
from tests.integration.controllers import ControllerProcess, crd_cluster, running_manager
from tests.integration.test_controllers import PARKED, condition, job_manifest, make_queues, workload_of
from tests.integration.test_metrics import scrape, value

TIMEOUT = 3  # seconds
LIMIT = 2  # requeues before the deactivation


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "prdy", jobs=True)


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    section = {
        "timeout": f"{TIMEOUT}s",
        "blockAdmission": True,
        "requeuingStrategy": {"backoffLimitCount": LIMIT, "backoffBaseSeconds": 1, "backoffMaxSeconds": 4},
    }
    with running_manager(cluster, tmp_path_factory.mktemp("manager"), config={"waitForPodsReady": section}) as process:
        yield process


async def test_a_job_whose_pods_never_get_ready_is_evicted_requeued_with_backoff_then_deactivated(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("prdy"), names("prdy-cq"), names("parked")
    await make_queues(kube, ns, cq=cq, cpu=2, flavor=flavor, node_labels=PARKED)
    job = await kube.create(Job, job_manifest("stuck", ns))
    seen: list[tuple[int | None, tuple[str, str, str] | None]] = []

    async def current() -> kueue.Workload | None:
        return await workload_of(kube, await kube.get(Job, job.name, namespace=ns))

    async def admitted_not_ready() -> Any:
        wl = await current()
        ready = condition(wl, c.PODS_READY)
        return (
            wl if condition(wl, c.ADMITTED) == ("True", "Admitted", "The workload is admitted") and ready and ready[0] == "False" else None
        )

    wl = await eventually(admitted_not_ready, timeout=60, what="the Job admitted with PodsReady=False")
    assert condition(wl, c.PODS_READY) == ("False", "WaitForStart", "Not all pods are ready or succeeded")

    async def deactivated() -> Any:
        wl = await current()
        if wl is not None and wl.status is not None:
            state = wl.status.requeue_state
            seen.append((state.count if state else None, condition(wl, c.EVICTED)))
        return wl if wl is not None and wl.spec.active is False and condition(wl, c.QUOTA_RESERVED)[0] == "False" else None  # type: ignore[index]

    final = await eventually(deactivated, timeout=120, interval=0.1, what="the Workload deactivated after its requeues")
    evictions = [evicted for _, evicted in seen if evicted is not None and evicted[0] == "True"]
    assert ("True", "PodsReadyTimeout", f"Exceeded the PodsReady timeout {ns}/{final.name}") in evictions
    assert [count for count, _ in seen if count] == sorted(count for count, _ in seen if count)  # the count only grows
    assert {count for count, _ in seen} >= {1, LIMIT}
    assert condition(final, c.EVICTED) == (
        "True",
        "DeactivatedDueToRequeuingLimitExceeded",
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
    )
    assert condition(final, c.REQUEUED)[:2] == ("False", "DeactivatedDueToRequeuingLimitExceeded")  # type: ignore[index]
    assert final.status is not None and final.status.requeue_state is None  # Kueue clears it on deactivation
    assert (await kube.get(Job, job.name, namespace=ns)).spec.suspend is True
    events = (await kube.request("GET", f"/api/v1/namespaces/{ns}/events"))["items"]
    assert any(e["reason"] == "EvictedDueToPodsReadyTimeout" and e["involvedObject"]["name"] == final.name for e in events)
    # Kueue's metrics: each timeout, then the deactivation, with their underlying causes.
    samples = scrape(manager)
    timeouts = value(samples, "kueue_evicted_workloads_total", cluster_queue=cq, reason="PodsReadyTimeout", underlying_cause="WaitForStart")
    assert timeouts == LIMIT
    deactivations = value(
        samples, "kueue_evicted_workloads_total", cluster_queue=cq, reason="Deactivated", underlying_cause="RequeuingLimitExceeded"
    )
    assert deactivations == 1


async def test_block_admission_holds_the_next_job_until_the_admitted_one_is_out_of_the_way(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("block"), names("block-cq"), names("parked")
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=flavor, node_labels=PARKED)
    first = await kube.create(Job, job_manifest("first", ns))

    async def unsuspended(name: str) -> bool:
        return (await kube.get(Job, name, namespace=ns)).spec.suspend is False

    await eventually(lambda: unsuspended("first"), timeout=60, what="the first Job admitted")
    second = await kube.create(Job, job_manifest("second", ns))

    async def waiting() -> Any:
        wl = await workload_of(kube, second)
        return wl if condition(wl, c.QUOTA_RESERVED) is not None else None

    wl = await eventually(waiting, timeout=30, interval=0.1, what="the second Job's Workload held back")
    assert condition(wl, c.QUOTA_RESERVED) == (
        "False",
        "WaitingForPodsReady",
        "waiting for all admitted workloads to be in PodsReady condition",
    )
    # The first Job's pods never get ready: its timeout evicts it, and the second one goes in.
    await eventually(lambda: unsuspended("second"), timeout=60, what="the second Job admitted once the first one was evicted")
    evicted = condition(await workload_of(kube, first), c.EVICTED)
    assert evicted is not None and evicted[:2] in {("True", "PodsReadyTimeout"), ("False", "QuotaReserved")}
