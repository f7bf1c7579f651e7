"""waitForPodsReady through MultiKueue: the workers' agents run with it, the manager without.
A Job whose pods never become Ready on its worker is evicted there (PodsReadyTimeout); the
manager sees, as with Kueue, its copy evicted on the worker, retries its check and dispatches
the Workload again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.meta import find_condition
from manager.engine.workload import admission_check_state
from tests.e2e.federation import CHECK, PARKED, Clients, Federation, job_manifest, running
from tests.harness import Provider, eventually

TIMEOUT = 3  # seconds, on the workers


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation, its workers with waitForPodsReady (the tier's `kube`
    fixture opens its clients on it)."""
    section = {"timeout": f"{TIMEOUT}s", "requeuingStrategy": {"backoffBaseSeconds": 1}}
    with running(provider, Path(tmp_path_factory.mktemp("podsready")), worker_config={"waitForPodsReady": section}) as created:
        yield created


async def test_a_job_whose_pods_never_get_ready_on_its_worker_is_evicted_there_and_dispatched_again(kube: Clients) -> None:
    ns = f"p{uuid.uuid4().hex[:6]}-podsready"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 4}, labels=PARKED, tag=ns[:7])
    await kube.manager.create(Job, job_manifest("stuck", ns))
    worker_evictions: list[tuple[str, str, str]] = []
    manager_evictions: list[tuple[str, str, str]] = []

    async def retried() -> Any:
        for worker, copies in (await kube.remote_workloads(ns)).items():
            for copy in copies:
                conditions = copy.status.conditions if copy.status else None
                evicted, ready = find_condition(conditions, c.EVICTED), find_condition(conditions, c.PODS_READY)
                if evicted is not None and evicted.status == "True":
                    worker_evictions.append((worker, evicted.reason, ready.reason if ready else ""))
        wl = await kube.manager_workload(ns, "stuck")
        evicted = find_condition(wl.status.conditions if wl and wl.status else None, c.EVICTED)
        if evicted is not None:
            manager_evictions.append((evicted.status, evicted.reason, evicted.message))
        check = admission_check_state(wl, CHECK) if wl else None
        return wl if check is not None and (check.retry_count or 0) >= 1 and check.state == "Ready" else None

    wl = await eventually(retried, timeout=120, interval=0.2, what="the manager's Workload retried after an eviction on its worker")
    # On the worker: evicted by its PodsReady timeout, its pods waiting for their start.
    assert any(reason == "PodsReadyTimeout" and ready == "WaitForStart" for _, reason, ready in worker_evictions), worker_evictions
    # On the manager: what Kueue's MultiKueue does with an eviction on the worker (the check
    # retried, the Workload evicted for it, and admitted again, which turns Evicted False).
    assert any(
        'Evicted due to AdmissionCheck in Retry state: "mk" (Workload evicted on worker cluster: "' in message
        and (status, reason) in {("True", "AdmissionCheck"), ("False", "QuotaReserved")}
        for status, reason, message in manager_evictions
    ), manager_evictions
    assert wl.status is not None and wl.status.cluster_name in ("worker1", "worker2")  # dispatched again
    # The manager's Workload has no PodsReady of its own: its configuration has no waitForPodsReady.
    assert find_condition(wl.status.conditions, c.PODS_READY) is None
    await kube.manager.delete(Job, "stuck", namespace=ns)

    async def cleaned() -> bool:
        left = await kube.remote_workloads(ns)
        return not any(left.values()) and not (await kube.manager.list(kueue.Workload, namespace=ns)).items

    await eventually(cleaned, timeout=60, what="the Job's Workloads gone everywhere")
