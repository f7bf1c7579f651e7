"""The dispatch rules, one behaviour per case, on the pure functions of a Workload's
`DispatchState`: the Incremental dispatcher's rounds, the capacity-aware placement, the
never-fits refusal, and what `plan_workload` makes of them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from manager.api import constants as c
from manager.api.kueue import Workload
from manager.multikueue.rules.capacity import WorkerQuotas
from manager.multikueue.rules.dispatch import (
    FORGOTTEN,
    Candidate,
    DispatchState,
    InFlight,
    look_again_in,
    never_fits_refusal,
    place,
    widen_incrementally,
)
from manager.multikueue.rules.plan import ClusterHealth, plan_workload
from tests.unit.test_multikueue_plan import NOW, ONE_CPU, FakeWorkers, cond, inputs, local, quotas, remote, up

TIMEOUT = timedelta(minutes=5)  # the capacity-aware admission timeout


def requesting(cpu: str) -> dict[str, Any]:
    """A Workload spec whose one pod requests `cpu` (ONE_CPU's queue and pod set)."""
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    return {"queueName": "user-queue", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}]}


TWO_CPU = requesting("2")
UNREADABLE = requesting("lots")
SENT = InFlight("w1", "cq", {("default", "cpu"): 1000})


# --- the Incremental dispatcher ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("wl", "started", "wider", "round_started"),
    [
        (local(), None, ["a", "b"], None),  # the first round: the first step (it begins once written)
        (local(nominated=["a", "b"]), NOW - timedelta(minutes=1), None, NOW - timedelta(minutes=1)),  # the round goes on
        (local(nominated=["a", "b"]), NOW - timedelta(minutes=5), ["a", "b", "c"], NOW - timedelta(minutes=5)),  # the next round
        (local(nominated=["a", "b", "c"]), NOW - timedelta(minutes=6), None, NOW - timedelta(minutes=6)),  # nothing left to add
        (local(state="Ready", cluster_name="a"), NOW, None, None),  # a winner: the rounds end
        (local(quota=False), NOW, None, None),  # no quota: the rounds end
        (local(nominated=["a"], cluster_name="a"), NOW, None, None),  # a winner recorded: the rounds end
    ],
)
def test_the_incremental_dispatcher_widens_once_a_round_while_nothing_admits_the_workload(
    wl: Workload, started: Any, wider: list[str] | None, round_started: Any
) -> None:
    state = DispatchState(round_started=started)
    got, after = widen_incrementally(wl, check_name="mk", state=state, config_clusters=["a", "b", "c"], step=2, now=NOW)
    assert (got, after.round_started) == (wider, round_started)


def test_a_wider_nomination_is_the_whole_pass_and_its_round_begins_once_written() -> None:
    plan = plan_workload(inputs(local(nominated=["w1"]), up("w1", "w2"), dispatcher=c.DISPATCHER_INCREMENTAL))
    assert plan.nominate == ["w1", "w2"] and plan.round_started == NOW
    assert plan.dispatch.round_started is None, "the state says so only once the nomination is written"
    assert plan.create == [] and plan.delete == [] and plan.check is None


# --- the refusal ---------------------------------------------------------------------------------------------
NEVER = "no worker can ever admit it: needs cpu 1; largest worker offers cpu 0 (w1)"


@pytest.mark.parametrize(
    ("wl", "refusal"),
    [
        (local(spec=ONE_CPU), NEVER),  # waiting for dispatch: the workers' answer
        (local(spec=ONE_CPU, state="Ready", cluster_name="w1"), None),  # dispatched: too late to refuse
        (local(spec=ONE_CPU, conditions=[cond(c.EVICTED)]), None),  # being evicted
        (local(spec=UNREADABLE), None),  # requests not readable: the placement says why
    ],
)
def test_the_never_fits_refusal_applies_only_to_a_workload_waiting_for_dispatch(wl: Workload, refusal: str | None) -> None:
    assert never_fits_refusal(wl, check_name="mk", workers=FakeWorkers(never=NEVER)) == refusal


def test_a_refused_workload_is_not_placed() -> None:
    workers = FakeWorkers(queues={"w1": quotas(8)}, never=NEVER)
    plan = plan_workload(inputs(local(spec=ONE_CPU), up("w1"), dispatcher=c.DISPATCHER_CAPACITY_AWARE, workers=workers))
    assert plan.check is not None and plan.check.state == "Retry" and plan.nominate is None and plan.dispatch == FORGOTTEN


# --- the capacity-aware dispatcher ---------------------------------------------------------------------------
def placed(
    wl: Workload,
    state: DispatchState = FORGOTTEN,
    *,
    queues: dict[str, WorkerQuotas | None] | None = None,
    copies: dict[str, Workload] | None = None,
    sent: dict[str, list[tuple[str, dict[Any, int]]]] | None = None,
) -> tuple[Any, DispatchState]:
    queues = {"w1": quotas(8), "w2": quotas(4)} if queues is None else queues
    workers = FakeWorkers(queues={k: v for k, v in queues.items() if v is not None}, sent=sent or {})
    candidates = [Candidate(name, (copies or {}).get(name)) for name in queues]
    return place(wl, check_name="mk", state=state, candidates=candidates, workers=workers, now=NOW, admission_timeout=TIMEOUT)


def test_a_workload_goes_to_the_worker_with_the_most_room_left_and_counts_there_at_once() -> None:
    choice, state = placed(local(spec=ONE_CPU))
    assert choice is not None and choice.worker == "w1"
    assert state.nominated_at == NOW and state.in_flight == SENT and not state.waiting


@pytest.mark.parametrize(
    ("state", "copy", "kept"),
    [
        (DispatchState(nominated_at=NOW - timedelta(minutes=1)), None, True),  # its time is not up
        (DispatchState(nominated_at=NOW - timedelta(minutes=6)), remote(cond(c.QUOTA_RESERVED)), False),  # reserved, no admission
        (DispatchState(nominated_at=NOW - timedelta(minutes=6)), None, False),  # its time is up: moved
    ],
)
def test_a_nominated_worker_keeps_the_copy_while_its_time_runs_or_it_holds_quota_for_it(
    state: DispatchState, copy: Workload | None, kept: bool
) -> None:
    wl = local(spec=ONE_CPU, nominated=["w1"])
    choice, after = placed(wl, state, copies={"w1": copy} if copy is not None else None)
    if kept:
        assert (choice, after) == (None, state)
    else:
        assert choice is not None and choice.worker == "w2" and after.tried == {"w1"} and after.nominated_at == NOW


def test_a_copy_a_worker_reserved_quota_for_is_never_moved() -> None:
    reserved = remote(cond(c.QUOTA_RESERVED))
    assert reserved.status is not None
    reserved.status.admission = local().status.admission  # type: ignore[union-attr]
    state = DispatchState(nominated_at=NOW - timedelta(minutes=6))
    assert placed(local(spec=ONE_CPU, nominated=["w1"]), state, copies={"w1": reserved}) == (None, state)


def test_a_nomination_made_before_this_process_started_gets_its_full_time_from_now() -> None:
    assert placed(local(spec=ONE_CPU, nominated=["w1"])) == (None, DispatchState(nominated_at=NOW))


def test_every_worker_where_it_fits_is_tried_once_a_round_then_a_new_round_begins() -> None:
    state = DispatchState(nominated_at=NOW - timedelta(minutes=6), tried=frozenset({"w2"}))
    choice, after = placed(local(spec=ONE_CPU, nominated=["w1"]), state)
    assert choice is not None and choice.worker == "w1" and after.tried == frozenset(), "w1 and w2 were tried: a new round"


@pytest.mark.parametrize(
    ("queues", "worker", "never", "message"),
    [
        ({"w1": quotas(8, used=8), "w2": quotas(4, used=4)}, None, False, "waiting for room on w1, w2"),
        ({"w1": quotas(1), "w2": quotas(1)}, None, True, "needs cpu 2; largest worker offers cpu 1 (w1), cpu 1 (w2)"),
        ({"w1": quotas(1), "w2": None}, "w2", False, ""),  # queues not readable: tried after those that fit
    ],
)
def test_a_workload_that_fits_nowhere_now_waits_and_counts_nowhere(
    queues: dict[str, WorkerQuotas | None], worker: str | None, never: bool, message: str
) -> None:
    state = DispatchState(in_flight=SENT, nominated_at=NOW - timedelta(minutes=6))
    choice, after = placed(local(spec=TWO_CPU), state, queues=queues)
    assert choice is not None and (choice.worker, choice.never, choice.message) == (worker, never, message)
    if worker is None:
        assert after.waiting and after.in_flight is None and after.nominated_at is None


def test_the_copies_in_flight_to_a_worker_count_against_it() -> None:
    choice, _ = placed(local(spec=ONE_CPU), sent={"w1": [("cq", {("default", "cpu"): 7500})]})
    assert choice is not None and choice.worker == "w2"


def test_unreadable_requests_are_said_and_nothing_is_placed() -> None:
    choice, state = placed(local(spec=UNREADABLE))
    assert choice is not None and choice.worker is None and choice.message.startswith("cannot read the workload's requests")
    assert state == FORGOTTEN


def test_a_workload_no_longer_waiting_for_dispatch_is_placed_nowhere_and_counts_nowhere() -> None:
    state = DispatchState(nominated_at=NOW, tried=frozenset({"w1"}), in_flight=SENT, problems={"w2": "no namespace"})
    choice, after = placed(local(spec=ONE_CPU, state="Ready", cluster_name="w1"), state)
    assert choice is None and after == DispatchState(problems={"w2": "no namespace"})


@pytest.mark.parametrize(
    ("state", "due"),
    [
        (FORGOTTEN, None),
        (DispatchState(nominated_at=NOW - timedelta(minutes=2)), 180.0),
        (DispatchState(nominated_at=NOW - timedelta(minutes=9)), 0.1),
        (DispatchState(waiting=True), 300.0),
    ],
)
def test_the_dispatcher_looks_again_when_the_nominated_workers_time_is_up(state: DispatchState, due: float | None) -> None:
    assert look_again_in(state, now=NOW, admission_timeout=TIMEOUT) == due


def test_the_plan_nominates_the_placed_worker_makes_its_copy_and_looks_again_in_time() -> None:
    workers = FakeWorkers(queues={"w1": quotas(8), "w2": quotas(4)})
    plan = plan_workload(
        inputs(local(spec=ONE_CPU), up("w1", "w2"), dispatcher=c.DISPATCHER_CAPACITY_AWARE, workers=workers, admission_timeout=TIMEOUT)
    )
    assert plan.nominate == ["w1"] and plan.create == ["w1"] and plan.dispatch.in_flight == SENT
    assert plan.requeue_after == TIMEOUT.total_seconds()


def test_a_blocked_worker_or_one_whose_agent_is_down_is_no_candidate() -> None:
    workers = FakeWorkers(queues={"w1": quotas(8), "w2": quotas(4), "w3": quotas(8)})
    clusters = [*up("w1", "w2"), ClusterHealth("w3", True, accepts_new=False)]
    plan = plan_workload(
        inputs(local(spec=ONE_CPU), clusters, dispatcher=c.DISPATCHER_CAPACITY_AWARE, workers=workers, blocked={"w1": "not ours"})
    )
    assert plan.nominate == ["w2"]


# --- the state between passes ----------------------------------------------------------------------------------
def test_a_deleted_workload_takes_its_copies_and_jobs_on_reachable_workers_and_is_forgotten() -> None:
    clusters = [*up("w1", "w2"), ClusterHealth("w3", False, NOW)]
    plan = plan_workload(
        inputs(local(), clusters, {"w1": remote(), "w3": remote()}, deleted=True, remote_jobs=frozenset({"w2"}), blocked={"w1": "x"})
    )
    assert plan.delete == ["w1", "w2"] and plan.forget and plan.dispatch == FORGOTTEN


@pytest.mark.parametrize(
    ("state", "change", "expected"),
    [
        (FORGOTTEN, lambda s: s.with_problem("w1", "no namespace"), DispatchState(problems={"w1": "no namespace"})),
        (DispatchState(problems={"w1": "no namespace"}), lambda s: s.with_problem("w1", None), FORGOTTEN),
        (FORGOTTEN, lambda s: s.with_blocked("w1", "not ours"), DispatchState(blocked={"w1": "not ours"})),
        (FORGOTTEN, lambda s: s.dispatched(NOW), DispatchState(dispatched_at=NOW)),
        (DispatchState(dispatched_at=NOW - TIMEOUT), lambda s: s.dispatched(NOW), DispatchState(dispatched_at=NOW - TIMEOUT)),
        (DispatchState(dispatched_at=NOW), DispatchState.admitted, FORGOTTEN),
        (FORGOTTEN, lambda s: s.round_began(NOW), DispatchState(round_started=NOW)),
    ],
)
def test_the_controller_records_its_writes_outcomes_in_the_state(state: DispatchState, change: Any, expected: DispatchState) -> None:
    assert change(state) == expected
