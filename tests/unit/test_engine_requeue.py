"""When freed quota reaches the workloads parked as inadmissible: Kueue's asynchronous requeue.

Kueue v0.19.2 (pkg/cache/queue/inadmissible_workloads.go, NotifyRetryInadmissible and its
workqueueRequeuer) moves a cohort tree's inadmissible workloads back to the heaps
requeueBatchPeriod (1 s) after the first notice that capacity changed in the tree (a workload
finished, was deleted or gave its quota back), folding every later notice into that one move.
Until then freed quota goes only to workloads still in the heaps. kfed moved them at the very
next cycle, which, under Kueue's own scheduler-performance runner, handed each freed slot of a
queue to the parked backlog of the queues that borrow, so that the queue's next arrival had to
take it back by preemption (issue #37: 278 evictions against the 11 of Kueue's full manager).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.engine.scheduler import REQUEUE_BATCH_PERIOD
from manager.engine.state import AdmissionState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PREEMPTION = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def cluster_queue(name: str, nominal: int, preemption: dict[str, str] | None = None) -> kueue.ClusterQueue:
    spec: dict[str, Any] = {
        "cohortName": "co",
        "namespaceSelector": {},
        "resourceGroups": [
            {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": nominal}]}]}
        ],
    }
    if preemption:
        spec["preemption"] = preemption
    return kueue.ClusterQueue.model_validate({"metadata": {"name": name}, "spec": spec})


def workload(name: str, queue: str, cpu: int, *, created: float, priority: int = 0, finished: bool = False) -> kueue.Workload:
    status: dict[str, Any] | None = None
    if finished:
        when = at(created).isoformat()
        status = {
            "conditions": [{"type": c.FINISHED, "status": "True", "reason": "Succeeded", "message": "done", "lastTransitionTime": when}]
        }
    pod = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]}}
    return kueue.Workload.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "resourceVersion": "1",
                "creationTimestamp": at(created).isoformat(),
            },
            "spec": {"queueName": queue, "priority": priority, "podSets": [{"name": "main", "count": 1, "template": pod}]},
            "status": status,
        }
    )


def cohort_state(queues: dict[str, int], preemption: dict[str, str] | None = None) -> AdmissionState:
    """ClusterQueues of one cohort, `name: nominal cpu`, each with a LocalQueue of the same name."""
    state = AdmissionState()
    state.upsert_namespace("ns", {})
    state.upsert_flavor(kueue.ResourceFlavor.model_validate({"metadata": {"name": "default"}}))
    for name, nominal in queues.items():
        state.upsert_cluster_queue(cluster_queue(name, nominal, preemption))
        state.upsert_local_queue(
            kueue.LocalQueue.model_validate({"metadata": {"name": name, "namespace": "ns"}, "spec": {"clusterQueue": name}})
        )
    state.rebuild_if_needed(T0)
    return state


def settle(state: AdmissionState, now: datetime) -> None:
    """The controller's round: cycles until one changes nothing."""
    while state.cycle(now).changed:
        pass


def reserved(state: AdmissionState) -> list[str]:
    return sorted(info.name for info in state.infos.values() if info.reserved and not info.evicted)


def preempted(state: AdmissionState) -> list[str]:
    return sorted(info.name for info in state.infos.values() if info.condition_true(c.PREEMPTED))


@pytest.mark.parametrize(
    ("seconds_after_finish", "admitted"),
    [(0.0, False), (0.5, False), (0.999, False), (1.0, True), (3.0, True)],
)
def test_freed_quota_reaches_a_parked_workload_one_batch_period_after_it_was_freed(seconds_after_finish: float, admitted: bool) -> None:
    # Kueue: "big" finishes at 10 s; the parked "waiting" (it borrows, and the cohort was
    # full) is moved back to the heap at 11 s, not at the next cycle.
    state = cohort_state({"a": 2, "b": 0})
    state.upsert_workload(workload("big", "a", 2, created=0), at(0))
    settle(state, at(0))
    state.upsert_workload(workload("waiting", "b", 1, created=1), at(1))
    settle(state, at(1))
    assert reserved(state) == ["big"]
    state.upsert_workload(workload("big", "a", 2, created=10, finished=True), at(10))
    assert state.scheduler.next_requeue_at() == at(10) + REQUEUE_BATCH_PERIOD
    settle(state, at(10 + seconds_after_finish))
    assert reserved(state) == (["waiting"] if admitted else [])


def test_an_arrival_takes_freed_nominal_quota_before_the_parked_borrowers_and_preempts_nothing() -> None:
    # The runner's cycle (issue #37): queue "a" frees its nominal quota; the borrowers parked
    # in "b" are still inadmissible when a's next workload arrives half a second later, so it
    # fits. Requeued at the next cycle instead, the borrowers took the slot, and the arrival,
    # its queue under nominal, reclaimed it by evicting both.
    state = cohort_state({"a": 2, "b": 2}, PREEMPTION)
    state.upsert_workload(workload("a-running", "a", 2, created=0), at(0))
    state.upsert_workload(workload("b-running-1", "b", 1, created=0), at(0))
    state.upsert_workload(workload("b-running-2", "b", 1, created=0), at(0))
    settle(state, at(0))
    state.upsert_workload(workload("b-parked-1", "b", 1, created=1), at(1))
    state.upsert_workload(workload("b-parked-2", "b", 1, created=1), at(1))
    settle(state, at(1))
    state.upsert_workload(workload("a-running", "a", 2, created=10, finished=True), at(10))
    settle(state, at(10.1))
    assert reserved(state) == ["b-running-1", "b-running-2"], "the borrowers wait for the batched requeue"
    state.upsert_workload(workload("a-next", "a", 2, created=10.5, priority=100), at(10.5))
    settle(state, at(10.5))
    assert reserved(state) == ["a-next", "b-running-1", "b-running-2"]
    assert preempted(state) == []
    settle(state, at(11))
    assert reserved(state) == ["a-next", "b-running-1", "b-running-2"], "requeued at 11 s, the borrowers find the cohort full"
    assert preempted(state) == []


def test_notices_within_a_period_are_folded_into_the_first_ones_requeue() -> None:
    state = cohort_state({"a": 2, "b": 0})
    state.upsert_workload(workload("one", "a", 1, created=0), at(0))
    state.upsert_workload(workload("two", "a", 1, created=0), at(0))
    settle(state, at(0))
    state.upsert_workload(workload("waiting", "b", 2, created=1), at(1))
    settle(state, at(1))
    state.upsert_workload(workload("one", "a", 1, created=10, finished=True), at(10))
    state.upsert_workload(workload("two", "a", 1, created=10.6, finished=True), at(10.6))
    assert state.scheduler.next_requeue_at() == at(11), "the first notice sets the time; later ones join it"
    settle(state, at(11))
    assert reserved(state) == ["waiting"]
    assert state.scheduler.next_requeue_at() is None
