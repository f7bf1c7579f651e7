"""waitForPodsReady, as Kueue has it: the PodsReady condition, the timeout, the requeue backoff
and its limit, the backoff gate and blockAdmission; the pure rules, then the admission state."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.config import Configuration, WaitForPodsReady
from manager.api.meta import Condition, find_condition, is_condition_true
from manager.engine.podsready import (
    RECOVERED,
    STARTED,
    WAIT_FOR_RECOVERY,
    WAIT_FOR_START,
    backoff_pending,
    blocks_admission,
    pods_ready_condition,
    pods_ready_timeout,
    requeue_after_timeout,
    requeue_backoff,
)
from manager.engine.state import AdmissionState
from manager.engine.workload import build_info
from manager.engine.writes import StatusWrite
from tests.unit.test_admission_state import T0, cluster_queue, flavor, local_queue, released, run, stored, workload

pytestmark = pytest.mark.unit


@dataclass
class C:
    status: str
    reason: str = ""
    last_transition_time: datetime | None = T0


def config(**section: Any) -> WaitForPodsReady:
    return Configuration.model_validate({"waitForPodsReady": section}).wait_for_pods_ready or WaitForPodsReady()


# --- the configuration -------------------------------------------------------------------------------
def test_the_section_turns_it_on_with_kueues_defaults() -> None:
    assert Configuration().pods_ready is None
    assert Configuration.model_validate({"waitForPodsReady": {"enable": False}}).pods_ready is None
    on = Configuration.model_validate({"waitForPodsReady": {}}).pods_ready
    assert on is not None
    assert (on.effective_timeout, on.effective_recovery_timeout, on.effective_block_admission) == (
        timedelta(minutes=30),
        timedelta(minutes=30),
        False,
    )
    assert (on.backoff_base_seconds, on.backoff_max_seconds, on.backoff_limit_count, on.requeue_by_creation) == (60, 3600, None, False)
    assert config(timeout="3s", recoveryTimeout="0s").effective_recovery_timeout is None  # "0s" turns recovery off


def test_a_negative_timeout_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="timeout"):
        Configuration.model_validate({"waitForPodsReady": {"timeout": "-1s"}})


# --- the PodsReady condition (the job reconciler) ------------------------------------------------------
@pytest.mark.parametrize(
    ("admitted", "ready", "current", "want"),
    [
        (False, True, None, ("False", WAIT_FOR_START)),
        (True, False, None, ("False", WAIT_FOR_START)),
        (True, False, C("False", WAIT_FOR_START), ("False", WAIT_FOR_START)),
        (True, True, C("False", WAIT_FOR_START), ("True", STARTED)),
        (True, False, C("True", STARTED), ("False", WAIT_FOR_RECOVERY)),
        (True, False, C("False", WAIT_FOR_RECOVERY), ("False", WAIT_FOR_RECOVERY)),
        (True, True, C("False", WAIT_FOR_RECOVERY), ("True", RECOVERED)),
        (True, True, C("True", RECOVERED), ("True", RECOVERED)),
        (False, False, C("True", STARTED), ("False", WAIT_FOR_START)),  # evicted and released
    ],
    ids=[
        "not-admitted",
        "admitted-nothing-ready",
        "still-waiting",
        "all-ready-starts",
        "ready-pod-lost",
        "still-recovering",
        "recovered",
        "stays-recovered",
        "released",
    ],
)
def test_pods_ready_condition(admitted: bool, ready: bool, current: C | None, want: tuple[str, str]) -> None:
    assert pods_ready_condition(admitted=admitted, pods_ready=ready, current=current)[:2] == want


# --- the timeout (the workload controller) ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("admitted", "pods_ready", "seconds", "want"),
    [
        (None, None, 10, None),
        (C("False"), None, 10, None),
        (C("True"), C("True", STARTED), 10, None),
        (C("True"), None, 1, (WAIT_FOR_START, 2.0)),
        (C("True"), C("False", WAIT_FOR_START), 5, (WAIT_FOR_START, 0.0)),
        (C("True"), C("False", WAIT_FOR_RECOVERY, T0 + timedelta(seconds=4)), 5, (WAIT_FOR_RECOVERY, 9.0)),
    ],
    ids=["not-admitted", "admitted-false", "ready", "counting-from-admission", "ran-out", "recovery-from-its-transition"],
)
def test_pods_ready_timeout(admitted: C | None, pods_ready: C | None, seconds: int, want: tuple[str, float] | None) -> None:
    got = pods_ready_timeout(
        config(timeout="3s", recoveryTimeout="10s"), admitted=admitted, pods_ready=pods_ready, now=T0 + timedelta(seconds=seconds)
    )
    assert ((got[0], got[1].total_seconds()) if got is not None else None) == want


def test_recovery_is_not_timed_when_its_timeout_is_zero() -> None:
    got = pods_ready_timeout(
        config(timeout="3s", recoveryTimeout="0s"),
        admitted=C("True"),
        pods_ready=C("False", WAIT_FOR_RECOVERY),
        now=T0 + timedelta(hours=1),
    )
    assert got is None


# --- the backoff and its limit -----------------------------------------------------------------------------
@pytest.mark.parametrize(("count", "want"), [(1, 60), (2, 120), (3, 240), (6, 1920), (7, 3600), (30, 3600)])
def test_backoff_doubles_from_its_base_up_to_its_cap(count: int, want: int) -> None:
    assert requeue_backoff(count, base_seconds=60, max_seconds=3600) == timedelta(seconds=want)


def test_backoff_jitter_adds_at_most_a_ten_thousandth() -> None:
    assert requeue_backoff(1, base_seconds=60, max_seconds=3600, jitter=0.999) < timedelta(seconds=60.006)


@pytest.mark.parametrize(
    ("limit", "count", "deactivate", "next_count", "wait"),
    [(None, None, False, 1, 2), (None, 5, False, 6, 64), (2, 1, False, 2, 4), (2, 2, True, 2, None), (0, None, True, 0, None)],
    ids=["first", "no-limit", "under-the-limit", "limit-spent", "limit-zero"],
)
def test_the_requeue_decision(limit: int | None, count: int | None, deactivate: bool, next_count: int, wait: int | None) -> None:
    strategy: dict[str, Any] = {"backoffBaseSeconds": 2}
    if limit is not None:
        strategy["backoffLimitCount"] = limit
    decision = requeue_after_timeout(config(requeuingStrategy=strategy), count=count, requeue_at=None, now=T0, jitter=lambda: 0.0)
    assert (decision.deactivate, decision.count) == (deactivate, next_count)
    assert decision.requeue_at == (T0 + timedelta(seconds=wait) if wait is not None else None)


def test_a_later_requeue_time_already_set_is_kept() -> None:
    later = T0 + timedelta(hours=1)
    decision = requeue_after_timeout(config(), count=0, requeue_at=later, now=T0, jitter=lambda: 0.0)
    assert decision.requeue_at == later


@pytest.mark.parametrize(
    ("requeued", "requeue_at", "want"),
    [
        (None, None, False),
        (C("False", "PodsReadyTimeout"), None, True),
        (C("True", "BackoffFinished"), None, False),
        (C("True", "BackoffFinished"), T0 + timedelta(seconds=1), True),
        (C("True", "BackoffFinished"), T0, False),
        (C("False", "ClusterQueueStopped"), None, False),
    ],
    ids=["fresh", "timed-out", "backoff-finished", "requeue-at-ahead", "requeue-at-now", "other-eviction"],
)
def test_backoff_pending(requeued: C | None, requeue_at: datetime | None, want: bool) -> None:
    assert backoff_pending(requeued=requeued, requeue_at=requeue_at, now=T0) is want


def test_any_not_ready_workload_blocks_admission() -> None:
    assert not blocks_admission([])
    assert not blocks_admission([True, True])
    assert blocks_admission([True, False])


# --- the admission state ------------------------------------------------------------------------------------
def pods_ready_state(cpu: int = 2, **section: Any) -> AdmissionState:
    state = AdmissionState(Configuration.model_validate({"waitForPodsReady": section}), jitter=lambda: 0.0)
    state.upsert_namespace("ns", {})
    state.upsert_flavor(flavor())
    state.upsert_cluster_queue(cluster_queue(cpu=cpu))
    state.upsert_local_queue(local_queue())
    state.rebuild_if_needed(T0)
    return state


def admit(state: AdmissionState, name: str, rv: str = "2", at: datetime = T0, **kwargs: Any) -> kueue.Workload:
    wl = workload(name, owned=True, **kwargs)
    state.upsert_workload(wl, at)
    [write] = [w for w in run(state, at) if w.key == f"ns/{name}"]
    assert write.admits
    out = stored(write, wl, rv)
    state.write_succeeded(write, out)
    state.upsert_workload(out, at)
    return out


def with_pods_ready(wl: kueue.Workload, status: str, reason: str, rv: str) -> kueue.Workload:
    out = wl.model_copy(deep=True)
    assert out.status is not None
    cond = {"type": c.PODS_READY, "status": status, "reason": reason, "message": "m", "lastTransitionTime": T0.isoformat()}
    out.status.conditions = [*(out.status.conditions or []), Condition.model_validate(cond)]
    out.metadata.resource_version = rv
    return out


def writes_at(state: AdmissionState, seconds: float) -> dict[str, StatusWrite]:
    return {w.key: w for w in run(state, T0 + timedelta(seconds=seconds))}


def test_an_admitted_workload_whose_pods_are_not_ready_in_time_is_evicted_and_its_requeue_counted() -> None:
    state = pods_ready_state(timeout="3s", requeuingStrategy={"backoffBaseSeconds": 5})
    admit(state, "a")
    assert "ns/a" not in writes_at(state, 2)  # still within its timeout
    write = writes_at(state, 3)["ns/a"]
    evicted = find_condition(write.status.conditions, c.EVICTED)
    assert evicted is not None and (evicted.status, evicted.reason) == ("True", "PodsReadyTimeout")
    assert evicted.message == "Exceeded the PodsReady timeout ns/a"
    assert write.status.requeue_state is not None
    assert (write.status.requeue_state.count, write.status.requeue_state.requeue_at) == (1, T0 + timedelta(seconds=8))
    assert write.status.admission is not None  # the job integration releases the quota once its pods stopped
    assert [e.reason for e in write.events] == ["EvictedDueToPodsReadyTimeout"]


def test_a_workload_whose_pods_are_ready_is_not_evicted() -> None:
    state = pods_ready_state(timeout="3s")
    wl = admit(state, "a")
    state.upsert_workload(with_pods_ready(wl, "True", STARTED, "3"), T0 + timedelta(seconds=1))
    assert "ns/a" not in writes_at(state, 60)


def test_without_the_section_nothing_is_timed() -> None:
    state = AdmissionState()
    state.upsert_namespace("ns", {})
    state.upsert_flavor(flavor())
    state.upsert_cluster_queue(cluster_queue())
    state.upsert_local_queue(local_queue())
    admit(state, "a")
    assert "ns/a" not in writes_at(state, 3600)


def test_past_the_requeuing_limit_the_workload_is_marked_for_deactivation_instead() -> None:
    state = pods_ready_state(timeout="3s", requeuingStrategy={"backoffLimitCount": 1})
    admit(state, "a", requeueState={"count": 1})
    write = writes_at(state, 3)["ns/a"]
    target = find_condition(write.status.conditions, "DeactivationTarget")
    assert target is not None and (target.status, target.reason) == ("True", "RequeuingLimitExceeded")
    assert not is_condition_true(write.status.conditions, c.EVICTED)  # the deactivation evicts it
    assert write.status.requeue_state is not None and write.status.requeue_state.count == 1


def test_a_workload_in_its_backoff_is_pending_but_not_admitted_until_the_backoff_ends() -> None:
    state = pods_ready_state(timeout="3s")
    requeued = {"type": c.REQUEUED, "status": "False", "reason": "PodsReadyTimeout", "message": "m", "lastTransitionTime": T0.isoformat()}
    wl = workload("a", owned=True, conditions=[requeued], requeueState={"count": 1, "requeueAt": (T0 + timedelta(seconds=60)).isoformat()})
    state.upsert_workload(wl, T0)
    assert not any(w.admits for w in writes_at(state, 0).values())
    assert state.scheduler.pending_count("cq") == 1
    # The job controller ends the backoff: Requeued=True (BackoffFinished) and requeueAt cleared.
    done = wl.model_copy(deep=True)
    assert done.status is not None and done.status.conditions
    done.status.conditions[0].status, done.status.conditions[0].reason = "True", "BackoffFinished"
    done.status.requeue_state = kueue.RequeueState(count=1)
    done.metadata.resource_version = "2"
    state.upsert_workload(done, T0 + timedelta(seconds=60))
    assert writes_at(state, 60)["ns/a"].admits


def test_block_admission_holds_every_admission_until_the_admitted_pods_are_ready() -> None:
    state = pods_ready_state(timeout="1h", blockAdmission=True)
    first = admit(state, "a")
    state.upsert_workload(workload("b", owned=True, at=1), T0 + timedelta(seconds=1))
    waiting = writes_at(state, 1)["ns/b"]
    reserved = find_condition(waiting.status.conditions, c.QUOTA_RESERVED)
    assert not waiting.admits and reserved is not None
    assert (reserved.status, reserved.reason, reserved.message) == (
        "False",
        "WaitingForPodsReady",
        "waiting for all admitted workloads to be in PodsReady condition",
    )
    state.write_succeeded(waiting, stored(waiting, workload("b", owned=True, at=1), "3"))
    state.upsert_workload(with_pods_ready(first, "True", STARTED, "4"), T0 + timedelta(seconds=2))
    assert writes_at(state, 2)["ns/b"].admits


def test_without_block_admission_two_not_ready_workloads_are_admitted_together() -> None:
    state = pods_ready_state(timeout="1h")
    admit(state, "a")
    state.upsert_workload(workload("b", owned=True, at=1), T0)
    assert writes_at(state, 1)["ns/b"].admits


def test_a_bare_workload_keeps_its_quota_until_released_and_is_queued_again_when_its_backoff_ends() -> None:
    """No job owns it: Kueue's workload controller evicts it and keeps its reservation (the
    runner releases it); once its backoff runs out the admission side clears requeueAt and
    queues it again, as Kueue's workload controller does."""
    state = pods_ready_state(timeout="3s", requeuingStrategy={"backoffBaseSeconds": 5})
    wl = workload("a")
    state.upsert_workload(wl, T0)
    [first] = run(state, T0)
    state.write_succeeded(first, stored(first, wl, "2"))
    evicted = writes_at(state, 3)["ns/a"]
    assert evicted.status.admission is not None and not evicted.admits, "the eviction keeps the reservation"
    assert find_condition(evicted.status.conditions, c.EVICTED) is not None
    assert evicted.status.requeue_state == kueue.RequeueState(count=1, requeue_at=T0 + timedelta(seconds=8))
    held = stored(evicted, wl, "3")
    state.write_succeeded(evicted, held)
    state.upsert_workload(released(evicted, held, "4"), T0 + timedelta(seconds=4))
    assert "ns/a" not in writes_at(state, 7)  # still in its backoff
    readmitted = writes_at(state, 8)["ns/a"]
    assert readmitted.admits
    assert readmitted.status.requeue_state == kueue.RequeueState(count=1)


def test_a_v1beta1_configuration_keeps_v1beta1_defaults() -> None:
    def v1beta1(section: dict[str, Any]) -> WaitForPodsReady | None:
        return Configuration.model_validate({"apiVersion": "config.kueue.x-k8s.io/v1beta1", "waitForPodsReady": section}).pods_ready

    assert v1beta1({"timeout": "1m"}) is None  # v1beta1 needs enable: true
    on = v1beta1({"enable": True})
    assert on is not None and (on.effective_timeout, on.effective_block_admission) == (timedelta(minutes=5), True)
    off = v1beta1({"enable": True, "blockAdmission": False, "timeout": "2m"})
    assert off is not None and (off.effective_timeout, off.effective_block_admission) == (timedelta(minutes=2), False)


@pytest.mark.parametrize(("timestamp", "ordered_by_eviction"), [(None, True), ("Eviction", True), ("Creation", False)])
def test_a_workload_evicted_for_its_pods_is_queued_by_its_eviction_time_unless_creation_is_asked(
    timestamp: str | None, ordered_by_eviction: bool
) -> None:
    strategy = {"timestamp": timestamp} if timestamp else {}
    evicted_at = T0 + timedelta(minutes=5)
    cond = {"type": c.EVICTED, "status": "True", "reason": "PodsReadyTimeout", "message": "m", "lastTransitionTime": evicted_at.isoformat()}
    config_ = Configuration.model_validate({"waitForPodsReady": {"requeuingStrategy": strategy}})
    info = build_info(workload("a", conditions=[cond]), priority=0, created=T0, config=config_)
    assert info.queue_time == (evicted_at if ordered_by_eviction else T0)
