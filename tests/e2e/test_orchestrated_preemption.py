"""Orchestrated preemption (Kueue's `MultiKueueOrchestratedPreemption`, KEP-8303) end to end: a
high-priority job that must preempt on a worker, where each of two workers could make room by
preempting a low-priority job. With the gate on (manager and workers), the manager's copies carry
its preemption gate, both workers say they are blocked on it, the manager opens it on one, and
only that worker preempts: the other worker's job runs on untouched. With the gate off (Kueue's
default), both workers preempt at once and one of the two evictions is for nothing."""

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
from tests.e2e.federation import PARKED, Clients, Federation, job_manifest, running
from tests.e2e.test_multikueue import admitted_on, make_priority_classes, running_where, workload_story
from tests.harness import Provider, eventually, watched

GATE = {"featureGates": {"MultiKueueOrchestratedPreemption": True}}


@pytest.fixture(scope="module", params=[True, False], ids=["gate-on", "gate-off"])
def orchestrated(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture(scope="module")
def fed(orchestrated: bool, provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation (AllAtOnce), with the gate on the manager and both workers, or off."""
    gates = GATE if orchestrated else None
    with running(provider, Path(tmp_path_factory.mktemp("orchestrated")), manager_config=gates, worker_config=gates) as created:
        yield created


class Seen:
    """What each worker's Workloads showed at any moment: copies blocked on their gate, gates
    opened, and Workloads evicted (a watch sees a state that a later poll would miss)."""

    def __init__(self, workers: list[str]) -> None:
        self.blocked: dict[str, set[str]] = {w: set() for w in workers}
        self.opened: dict[str, set[str]] = {w: set() for w in workers}
        self.evicted: dict[str, set[str]] = {w: set() for w in workers}

    def recorder(self, worker: str) -> Any:
        def record(kind: str, old: Any, new: kueue.Workload | None) -> None:
            if new is None:
                return
            conditions = new.status.conditions if new.status else None
            if is_condition_true(conditions, c.BLOCKED_ON_PREEMPTION_GATES):
                self.blocked[worker].add(new.name)
            if any(g.position == "Open" for g in (new.status.preemption_gates if new.status else None) or []):
                self.opened[worker].add(new.name)
            if is_condition_true(conditions, c.EVICTED):
                self.evicted[worker].add(new.name)

        return record


async def test_only_one_of_two_workers_that_could_preempt_does(kube: Clients, orchestrated: bool) -> None:
    tag = f"o{uuid.uuid4().hex[:6]}"

    def admitted(job: str) -> Any:
        return lambda: admitted_on(kube, ns, job)

    def runs(job: str) -> Any:
        return lambda: running_where(kube, ns, job)

    ns = f"{tag}-gated"
    # One cpu on each worker, each filled by a low-priority job; the manager has room for all.
    cqs = await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 1, "worker2": 1}, labels=PARKED, tag=tag)
    for worker, client in kube.workers.items():
        await client.patch(kueue.ClusterQueue, cqs[worker], {"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}})
    await make_priority_classes(kube, tag)
    low_on: dict[str, str] = {}
    for name in ("low-a", "low-b"):
        await kube.manager.create(Job, job_manifest(name, ns, priority_class=f"{tag}-low"))
        low_on[name] = await eventually(admitted(name), timeout=90, what=f"{name} admitted on a worker")
        await eventually(runs(name), timeout=60, what=f"{name} running")
    assert sorted(low_on.values()) == ["worker1", "worker2"], low_on

    async def one_copy_each() -> dict[str, str] | None:
        """Each worker's copy of the low job it runs, once the losing copies are gone."""
        found = {}
        for worker, client in kube.workers.items():
            copies = [wl.name for wl in (await client.list(kueue.Workload, namespace=ns)).items if wl.name.startswith("job-low-")]
            if len(copies) != 1:
                return None
            found[worker] = copies[0]
        return found

    low_copies: dict[str, str] = await eventually(one_copy_each, timeout=60, what="one low copy on each worker")

    seen = Seen(sorted(kube.workers))
    async with (
        watched(kube.workers["worker1"], kueue.Workload, ns, seen.recorder("worker1")),
        watched(kube.workers["worker2"], kueue.Workload, ns, seen.recorder("worker2")),
    ):
        await kube.manager.create(Job, job_manifest("urgent", ns, priority_class=f"{tag}-high"))
        chosen = await eventually(
            lambda: admitted_on(kube, ns, "urgent"),
            timeout=120,
            what="the high-priority job admitted on a worker",
            explain=lambda: workload_story(kube, ns, "urgent"),
        )
        await eventually(lambda: running_where(kube, ns, "urgent"), timeout=60, what="urgent running")
        other = "worker2" if chosen == "worker1" else "worker1"

        async def copy_gone_from_other() -> bool:
            items = (await kube.workers[other].list(kueue.Workload, namespace=ns)).items
            return not any(wl.name.startswith("job-urgent-") for wl in items)

        await eventually(copy_gone_from_other, timeout=60, what=f"urgent's copy gone from {other}")

    if orchestrated:
        urgent = {name for name in seen.blocked[chosen] if name.startswith("job-urgent-")}
        # Both workers needed to preempt and said so; the manager let one of them, once.
        assert all(any(n.startswith("job-urgent-") for n in seen.blocked[w]) for w in kube.workers), seen.blocked
        assert len(urgent) == 1 and seen.opened == {chosen: urgent, other: set()}, seen.opened
        # Exactly the victim on the chosen worker; the other worker's job was never evicted.
        assert seen.evicted == {chosen: {low_copies[chosen]}, other: set()}, seen.evicted
        assert await running_where(kube, ns, low_name_on(low_on, other)) == [other]
        untouched = await kube.workers[other].get(kueue.Workload, low_copies[other], namespace=ns)
        conditions = untouched.status.conditions if untouched.status else None
        assert find_condition(conditions, c.EVICTED) is None and is_condition_true(conditions, c.ADMITTED)
    else:
        # Kueue's default: both workers preempted for the job, which runs on one of them only.
        assert seen.evicted == {chosen: {low_copies[chosen]}, other: {low_copies[other]}}, seen.evicted
        assert not any(seen.blocked.values()) and not any(seen.opened.values())


def low_name_on(low_on: dict[str, str], worker: str) -> str:
    return next(name for name, where in low_on.items() if where == worker)
