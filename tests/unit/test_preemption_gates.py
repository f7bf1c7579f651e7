"""A worker's side of orchestrated preemption (Kueue's MultiKueueOrchestratedPreemption, KEP-8303):
a Workload that must preempt while a preemption gate of its spec is closed preempts nobody, says
so (`BlockedOnPreemptionGates`), and preempts once the gate opens."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.config import Configuration
from manager.api.meta import find_condition, is_condition_true
from manager.engine.state import AdmissionState
from manager.engine.workload import has_closed_preemption_gate
from manager.engine.writes import StatusWrite
from tests.unit.test_admission_state import T0, cluster_queue, flavor, local_queue, released, run, stored, workload

GATES_ON = Configuration.model_validate({"featureGates": {"MultiKueueOrchestratedPreemption": True}})


def state_with(config: Configuration | None) -> AdmissionState:
    state = AdmissionState(config)
    state.upsert_namespace("ns", {})
    state.upsert_flavor(flavor())
    state.upsert_cluster_queue(cluster_queue(cpu=1, preemption={"withinClusterQueue": "LowerPriority"}))
    state.upsert_local_queue(local_queue())
    state.rebuild_if_needed(T0)
    return state


def gated(wl: kueue.Workload, *, position: str | None = None) -> kueue.Workload:
    """The copy the MultiKueue manager makes: its gate in the spec, and (once the manager opens
    it) its position in the status."""
    out = wl.model_copy(deep=True)
    out.spec.preemption_gates = [kueue.PreemptionGate(name=c.MULTIKUEUE_PREEMPTION_GATE)]
    if position is not None:
        status = out.status or kueue.WorkloadStatus()
        status.preemption_gates = [kueue.PreemptionGateState(name=c.MULTIKUEUE_PREEMPTION_GATE, position=position, last_transition_time=T0)]
        out.status = status
    return out


def with_low_running(state: AdmissionState) -> kueue.Workload:
    low = workload("low", priority=1, owned=True)
    state.upsert_workload(low, T0)
    first = run(state)[0]
    running = stored(first, low, "2")
    state.write_succeeded(first, running)
    return running


def evicted_keys(writes: list[StatusWrite]) -> set[str]:
    return {w.key for w in writes if is_condition_true(w.status.conditions, c.EVICTED)}


@pytest.mark.parametrize(
    ("spec_only", "states", "closed"),
    [
        (False, [], False),  # no gate at all
        (True, [], True),  # a gate only in the spec counts as closed
        (True, [("kueue.x-k8s.io/multikueue", "Closed")], True),
        (True, [("kueue.x-k8s.io/multikueue", "Open")], False),
        (True, [("other", "Open")], True),  # another gate's state does not open this one
    ],
)
def test_a_gate_is_closed_until_its_status_says_open(spec_only: bool, states: list[tuple[str, str]], closed: bool) -> None:
    wl = workload("w")
    if spec_only:
        wl.spec.preemption_gates = [kueue.PreemptionGate(name=c.MULTIKUEUE_PREEMPTION_GATE)]
    wl.status = kueue.WorkloadStatus(preemption_gates=[kueue.PreemptionGateState(name=n, position=p) for n, p in states] or None)
    assert has_closed_preemption_gate(wl) is closed


def test_a_gated_workload_that_must_preempt_preempts_nobody_and_says_it_is_blocked() -> None:
    state = state_with(GATES_ON)
    with_low_running(state)
    high = gated(workload("high", priority=100, owned=True, at=5))
    state.upsert_workload(high, T0)
    writes = {w.key: w for w in run(state)}
    assert evicted_keys(list(writes.values())) == set()
    conditions = writes["ns/high"].status.conditions
    blocked = find_condition(conditions, c.BLOCKED_ON_PREEMPTION_GATES)
    reserved = find_condition(conditions, c.QUOTA_RESERVED)
    assert blocked is not None and (blocked.status, blocked.reason) == ("True", "PreemptionGated")
    assert reserved is not None and (reserved.status, reserved.reason, reserved.message) == (
        "False",
        "AdmissionGated",
        "Workload requires preemption, but it's gated",
    )
    # Parked: later cycles neither preempt nor write again.
    state.write_succeeded(writes["ns/high"], stored(writes["ns/high"], high, "5"))
    assert run(state, T0 + timedelta(seconds=3)) == []


def test_the_gate_opened_by_the_manager_lets_it_preempt_and_its_admission_clears_the_block() -> None:
    state = state_with(GATES_ON)
    low = with_low_running(state)
    high = gated(workload("high", priority=100, owned=True, at=5))
    state.upsert_workload(high, T0)
    blocked_write = {w.key: w for w in run(state)}["ns/high"]
    blocked = stored(blocked_write, high, "5")
    state.write_succeeded(blocked_write, blocked)
    # The manager opens the gate (a status write on the copy): the Workload is tried again.
    opened = gated(blocked, position="Open")
    opened.metadata.resource_version = "6"
    state.upsert_workload(opened, T0 + timedelta(seconds=1))
    writes = {w.key: w for w in run(state, T0 + timedelta(seconds=1))}
    assert evicted_keys(list(writes.values())) == {"ns/low"}
    # The victim's Job stopped and gave the quota back: the preemptor is admitted, no longer blocked.
    state.upsert_workload(released(writes["ns/low"], low, "9"), T0 + timedelta(seconds=2))
    admitted = {w.key: w for w in run(state, T0 + timedelta(seconds=2)) if w.admits}
    assert set(admitted) == {"ns/high"}
    cleared = find_condition(admitted["ns/high"].status.conditions, c.BLOCKED_ON_PREEMPTION_GATES)
    assert cleared is not None and (cleared.status, cleared.reason) == ("False", "QuotaReserved")
    assert cleared.message == "Previously: Workload requires preemption, but it's gated"


@pytest.mark.parametrize("config", [None, Configuration()], ids=["no configuration", "gate off"])
def test_without_the_feature_gate_the_gates_are_ignored_as_kueue_does(config: Configuration | None) -> None:
    state = state_with(config)
    with_low_running(state)
    state.upsert_workload(gated(workload("high", priority=100, owned=True, at=5)), T0)
    writes = run(state)
    assert evicted_keys(writes) == {"ns/low"}
    assert all(find_condition(w.status.conditions, c.BLOCKED_ON_PREEMPTION_GATES) is None for w in writes)


def test_a_gated_workload_that_fits_without_preempting_is_admitted() -> None:
    state = state_with(GATES_ON)
    state.upsert_workload(gated(workload("high", priority=100, owned=True)), T0)
    assert [w.key for w in run(state) if w.admits] == ["ns/high"]


def test_an_eviction_closes_the_open_gate_so_that_the_next_admission_asks_again() -> None:
    config: dict[str, Any] = {"featureGates": {"MultiKueueOrchestratedPreemption": True}}
    state = state_with(Configuration.model_validate(config))
    running = gated(workload("low", priority=1, owned=True), position="Open")
    state.upsert_workload(running, T0)
    first = run(state)[0]
    state.write_succeeded(first, stored(first, running, "2"))
    # A higher-priority Workload without gates preempts it.
    state.upsert_workload(workload("high", priority=100, owned=True, at=5), T0)
    writes = {w.key: w for w in run(state, T0 + timedelta(seconds=1))}
    victim = writes["ns/low"].status
    assert is_condition_true(victim.conditions, c.EVICTED)
    assert [(g.name, g.position) for g in victim.preemption_gates or []] == [(c.MULTIKUEUE_PREEMPTION_GATE, "Closed")]
