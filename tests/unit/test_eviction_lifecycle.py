"""Kueue's eviction lifecycle in the engine: a victim keeps its quota until its release, the
preemptor waits at its queue's head meanwhile, and a later preemptor counts a victim already being
evicted instead of evicting another. `kfed simulate --release-after` sets when the release comes
(one cycle is one simulated second); the real-cluster sequences against upstream Kueue are in
tests/integration/test_eviction_lifecycle.py."""

from __future__ import annotations

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.kueue import Workload
from manager.engine.scheduler import tie_break
from manager.engine.state import AdmissionState
from manager.engine.workload import WorkloadInfo, build_info, reserved_release, stop_policy_eviction
from tests.unit.scenario import T0, cluster_queue, flavor, local_queue, run, workload

F = flavor("default")


def running(name: str, cq: str, queue: str, *, priority: int, created: int, cpu: str = "1") -> dict[str, object]:
    return workload(name, queue, {"cpu": cpu}, admitted=(cq, {"cpu": "default"}), priority=priority, created=created)


def reuse_case() -> list[dict[str, object]]:
    """A, B and C share a cohort (1 cpu each, borrowing limit 2, reclaimWithinCohort Any); C
    runs c1..c3 on all of it, and a1 (in A) and b1 (in B) want 1 cpu each."""
    queues: list[dict[str, object]] = [F]
    for name in ("a", "b", "c"):
        queues.append(cluster_queue(name, {"default": {"cpu": (1, 2, None)}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}))
        queues.append(local_queue(name, name))
    return [
        *queues,
        *(running(f"c{i}", "c", "c", priority=i, created=i) for i in (1, 2, 3)),
        workload("a1", "a", {"cpu": "1"}, priority=2, created=10),
        workload("b1", "b", {"cpu": "1"}, priority=1, created=11),
    ]


def test_a_victim_holds_its_quota_and_the_preemptor_waits_until_the_release() -> None:
    objs = [
        F,
        cluster_queue("cq", {"default": {"cpu": 1}}, preemption={"withinClusterQueue": "LowerPriority"}),
        local_queue("q", "cq"),
        running("low", "cq", "q", priority=0, created=0),
        workload("high", "q", {"cpu": "1"}, priority=5, created=1),
    ]
    waiting = run(objs, cycles=3, release_after=3)
    assert waiting.admitted() == ["low"], "the victim keeps its reservation while its job stops"
    assert waiting.condition("low", c.EVICTED)[:2] == ("True", "Preempted")
    assert waiting.condition("high")[1] == "WaitingForPreemptedWorkloads"
    assert waiting.simulation.preemptions == 1, "the preemptor waits for its victim and evicts nobody else"
    released = run(objs, cycles=5, release_after=3)
    assert released.admitted() == ["high"], "released at the fourth cycle, the preemptor is admitted"


def test_a_second_preemptor_of_the_same_victim_waits_and_evicts_no_one() -> None:
    """a1 (ordered first) evicts c1 and counts it, being evicted, every cycle after; b1's target
    is c1 too, so it is skipped (Kueue's overlapping targets) rather than evicting c2 while c1
    still holds its quota."""
    under_way = run(reuse_case(), cycles=3, release_after=5)
    assert under_way.simulation.preemptions == 1
    assert under_way.admitted() == ["c1", "c2", "c3"]
    assert under_way.condition("a1")[2].endswith("Pending the preemption of 1 workload(s)")
    assert under_way.condition("b1")[2] == "Workload has overlapping preemption targets with another workload"
    done = run(reuse_case(), release_after=5)
    assert done.admitted() == ["a1", "b1", "c3"] and done.simulation.preemptions == 2


def test_a_release_within_the_cycle_still_evicts_the_same_victims() -> None:
    """`--release-after 0`, the default: each victim's job stops within the cycle that evicts it."""
    outcome = run(reuse_case())
    assert outcome.admitted() == ["a1", "b1", "c3"] and outcome.simulation.preemptions == 2


def test_with_no_release_the_victims_keep_their_quota_for_good() -> None:
    outcome = run(reuse_case(), cycles=10, release_after=None)
    assert outcome.admitted() == ["c1", "c2", "c3"] and outcome.simulation.preemptions == 1


def test_ties_favour_no_cluster_queue() -> None:
    """Entries tied on borrowing, priority and queue time (whole seconds): over many cycles each of
    six ClusterQueues comes first about as often as any other, where ordering by name made `cq-0`
    win every tie of a run."""
    names = [f"cq-{i}" for i in range(6)]
    wins = {name: 0 for name in names}
    for cycle in range(1, 6001):
        wins[min(names, key=lambda name: tie_break(cycle, name))] += 1
    assert all(800 <= count <= 1200 for count in wins.values()), wins
    assert tie_break(7, "cq-1") == tie_break(7, "cq-1"), "a run is reproducible"


def test_two_heads_tied_in_one_second_are_ordered_by_the_tie_break_not_by_name() -> None:
    """Two ClusterQueues of a cohort, one cpu free, a head each created in the same second: the
    one admitted follows `tie_break` for that cycle (here `c` before `a`, against their names'
    order), as Kueue's ties follow no order of names."""
    objs: list[dict[str, object]] = [F]
    for name in ("a", "c"):
        objs.append(cluster_queue(name, {"default": {"cpu": (0, 1, None)}}, cohort="co"))
        objs.append(local_queue(name, name))
    objs.append(cluster_queue("lender", {"default": {"cpu": 1}}, cohort="co"))
    objs.append(workload("wa", "a", {"cpu": "1"}, created=0))
    objs.append(workload("wc", "c", {"cpu": "1"}, created=0))
    assert tie_break(1, "c") < tie_break(1, "a")
    assert run(objs, cycles=1).admitted() == ["wc"]


def reserved_info(*, admitted: bool) -> WorkloadInfo:
    """A Workload holding quota in `cq` through LocalQueue `lq`; admitted, or still waiting for its check `mk`."""
    checks = None if admitted else {"mk": "Pending"}
    obj = workload("w", "lq", {"cpu": "1"}, admitted=("cq", {"cpu": "default"}), created=0, checks=checks)
    if not admitted:
        conditions = obj["status"]["conditions"]
        conditions[1].update(status="False", reason="UnsatisfiedAdmissionChecks", message="The workload has not all checks ready")
    wl = Workload.model_validate(obj)
    return build_info(wl, priority=0, created=T0)


@pytest.mark.parametrize(
    ("admitted", "local_queue", "cluster_queue_policy", "granular", "released"),
    [
        # Kueue's reconcileOnLocalQueueActiveState, then reconcileOnClusterQueueActiveState.
        (False, None, "None", False, ("Inadmissible", "LocalQueue lq is terminating or missing")),
        (False, None, "None", True, ("Misconfigured", "LocalQueue lq is terminating or missing")),
        (False, "Hold", "None", False, ("Inadmissible", "LocalQueue lq is stopped")),
        (False, "HoldAndDrain", "None", True, ("Suspended", "LocalQueue lq is stopped")),
        (False, "None", None, False, ("Inadmissible", "ClusterQueue cq is terminating or missing")),
        (False, "None", "Hold", True, ("Suspended", "ClusterQueue cq is stopped")),
        (False, "Hold", "Hold", False, ("Inadmissible", "LocalQueue lq is stopped")),
        (False, "None", "None", False, None),
        # An admitted workload's reservation is never given back by the controller: HoldAndDrain
        # evicts it (the job integration then releases it), Hold and a missing queue leave it.
        (True, None, None, False, None),
        (True, "HoldAndDrain", "HoldAndDrain", False, None),
        (True, "Hold", "Hold", False, None),
    ],
)
def test_the_engine_releases_a_reservation_itself_only_where_kueues_workload_controller_does(
    admitted: bool, local_queue: str | None, cluster_queue_policy: str | None, granular: bool, released: tuple[str, str] | None
) -> None:
    info = reserved_info(admitted=admitted)
    got = reserved_release(info, cluster_queue_policy=cluster_queue_policy, local_queue_policy=local_queue, granular=granular)
    assert got == released


@pytest.mark.parametrize(
    ("admitted", "local_queue", "cluster_queue_policy", "evicted"),
    [
        (True, "HoldAndDrain", "None", ("LocalQueueStopped", "The LocalQueue is stopped")),
        (True, "None", "HoldAndDrain", ("ClusterQueueStopped", "The ClusterQueue is stopped")),
        (True, "HoldAndDrain", "HoldAndDrain", ("LocalQueueStopped", "The LocalQueue is stopped")),
        (True, "Hold", "Hold", None),
        (False, "HoldAndDrain", "HoldAndDrain", None),
    ],
)
def test_a_stop_policy_evicts_only_an_admitted_workload_and_the_local_queue_first(
    admitted: bool, local_queue: str, cluster_queue_policy: str, evicted: tuple[str, str] | None
) -> None:
    info = reserved_info(admitted=admitted)
    assert stop_policy_eviction(info, cluster_queue_policy=cluster_queue_policy, local_queue_policy=local_queue) == evicted


def test_a_reservation_waiting_for_its_checks_goes_back_with_no_eviction_when_its_queue_stops() -> None:
    """The live path: the Workload's QuotaReserved turns False ("LocalQueue lq is stopped"), its
    admission goes, no Evicted condition is written, and its quota is free again."""
    state = AdmissionState(admission_checks_known=False)  # the check `mk` counts as there and active
    state.upsert_namespace("default", {})
    state.upsert_flavor(kueue.ResourceFlavor.model_validate(F))
    state.upsert_cluster_queue(kueue.ClusterQueue.model_validate(cluster_queue("cq", {"default": {"cpu": 1}}, checks=["mk"])))
    state.upsert_local_queue(kueue.LocalQueue.model_validate(local_queue("lq", "cq")))
    state.rebuild_if_needed(T0)
    state.upsert_workload(reserved_info(admitted=False).obj, T0)
    assert state.infos["default/w"].reserved
    state.flush(T0)
    state.upsert_local_queue(kueue.LocalQueue.model_validate(local_queue("lq", "cq", stop_policy="Hold")))
    state.rebuild_if_needed(T0)
    (write,) = [w for w in state.flush(T0) if w.key == "default/w"]
    conditions = {cond.type: cond for cond in write.status.conditions or []}
    assert write.status.admission is None
    assert conditions[c.QUOTA_RESERVED].status == "False"
    assert conditions[c.QUOTA_RESERVED].message == "LocalQueue lq is stopped"
    assert c.EVICTED not in conditions
    cq_status = state.cluster_queue_status("cq", T0)
    assert cq_status is not None and cq_status.reserving_workloads == 0
