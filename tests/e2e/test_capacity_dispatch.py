"""kfed's capacity-aware dispatcher end to end: the manager sends one copy of a Workload, to
the worker whose own queues have room for it; a Workload with room nowhere waits on the
manager and goes out when a worker's queue grows. (A Workload larger than any worker could
ever give is refused with every dispatcher: `test_multikueue`.)"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.dev.local import POD_RUN_TIME_ANNOTATION
from manager.engine.workload import admission_check_state
from tests.e2e.federation import CHECK, RUNS, Clients, Federation, job_manifest, running, watch_workers
from tests.e2e.test_multikueue import running_where
from tests.harness import Provider, eventually


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation, its manager dispatching with the capacity-aware dispatcher."""
    settings = {"dispatcherName": c.DISPATCHER_CAPACITY_AWARE, "capacityAwareDispatcherConfig": {"admissionTimeout": "20s"}}
    with running(provider, Path(tmp_path_factory.mktemp("capacity")), multikueue=settings) as created:
        yield created


@pytest.fixture
def tag() -> str:
    return f"a{uuid.uuid4().hex[:6]}"


def long_job(name: str, ns: str, cpu: str, run_time: str = "600s") -> dict[str, Any]:
    manifest = job_manifest(name, ns, cpu=cpu)
    manifest["spec"]["template"]["metadata"] = {"annotations": {POD_RUN_TIME_ANNOTATION: run_time}}
    return manifest


async def check_message(kube: Clients, ns: str, job: str) -> str | None:
    wl = await kube.manager_workload(ns, job)
    check = admission_check_state(wl, CHECK) if wl else None
    return check.message if check else None


def message_is(kube: Clients, ns: str, job: str, expected: str) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return await check_message(kube, ns, job) == expected

    return probe


def running_on_worker(kube: Clients, ns: str, job: str) -> Callable[[], Awaitable[list[str]]]:
    return lambda: running_where(kube, ns, job)


async def test_a_job_is_sent_only_to_the_worker_where_it_fits(kube: Clients, tag: str) -> None:
    ns = f"{tag}-fit"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 1, "worker2": 4}, labels=RUNS, tag=tag)
    async with watch_workers(kube, ns, kueue.Workload) as seen:
        await kube.manager.create(Job, job_manifest("train", ns, cpu="2"))
        assert await eventually(lambda: running_where(kube, ns, "train"), timeout=60, what="train running on a worker") == ["worker2"]
        wl = await kube.manager_workload(ns, "train")
        assert wl is not None and wl.status is not None and wl.status.cluster_name == "worker2"
    # worker1's queue has 1 cpu: it never got a copy, not even for a moment.
    assert seen.names["worker1"] == set() and len(seen.names["worker2"]) == 1, seen


async def test_a_job_with_no_room_now_waits_and_goes_where_room_appears(kube: Clients, tag: str) -> None:
    ns = f"{tag}-wait"
    names = await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 2, "worker2": 2}, labels=RUNS, tag=tag)
    for blocker in ("block-a", "block-b"):
        await kube.manager.create(Job, long_job(blocker, ns, cpu="2"))
    for blocker in ("block-a", "block-b"):
        await eventually(running_on_worker(kube, ns, blocker), timeout=60, what=f"{blocker} running")
    async with watch_workers(kube, ns, kueue.Workload) as seen:
        await kube.manager.create(Job, job_manifest("late", ns, cpu="2"))
        waiting = "waiting for room on worker1, worker2"
        await eventually(message_is(kube, ns, "late", waiting), timeout=30, what="the waiting message")
        await kube.set_quota(kube.workers["worker2"], names["worker2"], 4)
        assert await eventually(lambda: running_where(kube, ns, "late"), timeout=60, what="late running once worker2 grew") == ["worker2"]
    late = await kube.manager_workload(ns, "late")
    assert late is not None
    assert late.name not in seen.names["worker1"], seen
