"""Fair sharing: dominant resource share, admission order by share, preemption strategies, AFS."""

from __future__ import annotations

from typing import Any

import pytest

from manager.api import constants as c
from manager.engine.fairshare import DRS, compare, dominant_resource_share
from manager.engine.quota import Quota, QuotaNode, recompute_tree
from manager.engine.simulate import Simulation
from tests.unit.scenario import cluster_queue, flavor, local_queue, run, sources, workload

F = flavor("default-flavor")
FAIR: dict[str, Any] = {"fairSharing": {}}


def test_dominant_resource_share_of_a_borrowing_queue() -> None:
    cpu, gpu = ("f", "cpu"), ("f", "gpu")
    root = QuotaNode("co", is_cohort=True)
    cq = QuotaNode("cq", is_cohort=False, quota={cpu: Quota(2000), gpu: Quota(5)})
    lender = QuotaNode("lending-cq", is_cohort=False, quota={cpu: Quota(8000), gpu: Quota(5)})
    for node in (cq, lender):
        node.parent = root
        root.children.append(node)
    recompute_tree(root, {"cq": {cpu: 3000, gpu: 7}})
    drs = dominant_resource_share(cq)
    assert (drs.ratio, drs.dominant, drs.rounded()) == (200.0, "gpu", 200)
    assert dominant_resource_share(lender).ratio == 0


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (DRS(1000, 100.0), DRS(2000, 150.0), 1),
        (DRS(0, 10.0), DRS(1000, 900.0), 1),
        (DRS(0, 10.0), DRS(0, 20.0), -1),
        (DRS(1000, 0.0), DRS(0, 0.0), 0),
    ],
    ids=["weight halves the share", "zero weight borrower is largest", "two zero weights compare ratios", "not borrowing is zero"],
)
def test_compare_drs(a: DRS, b: DRS, expected: int) -> None:
    assert compare(a, b) == expected


def three_queues(**kw: object) -> list[dict[str, object]]:
    return [
        F,
        cluster_queue("a", {"default-flavor": {"cpu": 0}}, cohort="co", **kw),  # type: ignore[arg-type]
        cluster_queue("b", {"default-flavor": {"cpu": 0}}, cohort="co", **kw),  # type: ignore[arg-type]
        cluster_queue("lender", {"default-flavor": {"cpu": 3}}, cohort="co"),
        local_queue("qa", "a"),
        local_queue("qb", "b"),
    ]


def contest() -> list[dict[str, object]]:
    return three_queues() + [
        workload("a-running", "qa", {"cpu": "2"}, admitted=("a", {"cpu": "default-flavor"}), created=0),
        workload("a-new", "qa", {"cpu": "1"}, priority=100, created=1),
        workload("b-new", "qb", {"cpu": "1"}, priority=0, created=2),
    ]


def test_classic_order_admits_the_higher_priority_borrower() -> None:
    assert "a-new" in run(contest(), cycles=1).admitted()


def test_fair_sharing_admits_the_queue_with_the_lower_share_first() -> None:
    outcome = run(contest(), cycles=1, config=FAIR)
    assert "b-new" in outcome.admitted()
    assert "a-new" not in outcome.admitted()


def test_fair_sharing_preempts_the_queue_above_its_share() -> None:
    objs = [
        F,
        cluster_queue("a", {"default-flavor": {"cpu": 3}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("b", {"default-flavor": {"cpu": 3}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("lender", {"default-flavor": {"cpu": 6}}, cohort="co"),
        local_queue("qa", "a"),
        local_queue("qb", "b"),
    ]
    objs += [workload(f"a{i}", "qa", {"cpu": "1"}, admitted=("a", {"cpu": "default-flavor"}), created=i) for i in range(9)]
    objs += [workload("b-own", "qb", {"cpu": "3"}, admitted=("b", {"cpu": "default-flavor"}), created=10)]
    objs += [workload("b-more", "qb", {"cpu": "2"}, created=20)]
    outcome = run(objs, config=FAIR)
    preempted = {i.name: i.conditions[c.PREEMPTED].reason for i in outcome.result.infos if i.condition_true(c.PREEMPTED)}
    assert preempted == {"a8": "InCohortFairSharing", "a7": "InCohortFairSharing"}
    assert "b-more" in outcome.admitted()
    message = outcome.condition("a8", c.PREEMPTED)[2]
    assert "due to Fair Sharing within the cohort; preemptor path: /co/b; preemptee path: /co/a" in message


def test_fair_sharing_within_nominal_reclaims_without_share_test() -> None:
    objs = [
        F,
        cluster_queue("a", {"default-flavor": {"cpu": 3}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("b", {"default-flavor": {"cpu": 3}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}),
        local_queue("qa", "a"),
        local_queue("qb", "b"),
    ]
    objs += [workload(f"a{i}", "qa", {"cpu": "1"}, admitted=("a", {"cpu": "default-flavor"}), created=i) for i in range(6)]
    objs += [workload("b-own", "qb", {"cpu": "2"}, created=20)]
    outcome = run(objs, config=FAIR)
    preempted = {i.name: i.conditions[c.PREEMPTED].reason for i in outcome.result.infos if i.condition_true(c.PREEMPTED)}
    assert preempted == {"a5": "InCohortReclamation", "a4": "InCohortReclamation"}


def two_borrowing_queues() -> list[dict[str, Any]]:
    return [
        F,
        cluster_queue("a", {"default-flavor": {"cpu": 2}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("b", {"default-flavor": {"cpu": 2}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("lender", {"default-flavor": {"cpu": 4}}, cohort="co"),
        local_queue("qa", "a"),
        local_queue("qb", "b"),
    ]


def test_two_queues_arriving_together_split_the_cohort_evenly() -> None:
    objs = two_borrowing_queues()
    objs += [workload(f"a{i}", "qa", {"cpu": "1"}, created=i) for i in range(8)]
    objs += [workload(f"b{i}", "qb", {"cpu": "1"}, created=100 + i) for i in range(8)]
    outcome = run(objs, config=FAIR)
    assert outcome.usage("a", "default-flavor", "cpu") == outcome.usage("b", "default-flavor", "cpu") == 4000
    assert outcome.result.preemptions == 0


def test_two_queues_never_preempt_each_other_back_and_forth() -> None:
    """a borrows the whole cohort; b's Workloads arrive and take back their fair half, one victim
    of a's at a time. Every preemption of the run is recorded, cycle by cycle: a's victims, once
    each, never one of b's, and none once the shares are equal (a's requeued victims do not
    take their quota back)."""
    objs = two_borrowing_queues()
    objs += [workload(f"a{i}", "qa", {"cpu": "1"}, admitted=("a", {"cpu": "default-flavor"}), created=i) for i in range(8)]
    objs += [workload(f"b{i}", "qb", {"cpu": "1"}, created=100 + i) for i in range(8)]
    simulation = Simulation(sources([{"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", **FAIR}, *objs]))
    preemptions: list[tuple[str, str]] = []
    for _ in range(100):
        outcome = simulation.step()
        preemptions += [(p.victim_cq.name, p.victim.name) for p in outcome.preemptions]
        if not outcome.changed:
            break
    assert preemptions == [("a", "a7"), ("a", "a6"), ("a", "a5"), ("a", "a4")]
    assert all(simulation.step().preemptions == [] for _ in range(10))  # settled: nothing is taken back
    usage = simulation.cache.cluster_queues
    assert usage["a"].node.usage[("default-flavor", "cpu")] == usage["b"].node.usage[("default-flavor", "cpu")] == 4000


def test_less_than_initial_share_strategy_alone_is_stricter() -> None:
    objs = [
        F,
        cluster_queue("a", {"default-flavor": {"cpu": 0}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("b", {"default-flavor": {"cpu": 0}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("lender", {"default-flavor": {"cpu": 4}}, cohort="co"),
        local_queue("qa", "a"),
        local_queue("qb", "b"),
    ]
    objs += [workload("a-big", "qa", {"cpu": "4"}, admitted=("a", {"cpu": "default-flavor"}), created=0)]
    objs += [workload("b-new", "qb", {"cpu": "3"}, created=5)]
    final = run(objs, config={"fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]}}, cycles=1)
    initial = run(objs, config={"fairSharing": {"preemptionStrategies": ["LessThanInitialShare"]}}, cycles=1)
    # b after admitting 3 (share 750) is above a after losing a-big (0): S2-a refuses;
    # S2-b compares with a's initial share (1000) and accepts.
    assert not any(i.condition_true(c.PREEMPTED) for i in final.result.infos)
    assert [i.name for i in initial.result.infos if i.condition_true(c.PREEMPTED)] == ["a-big"]


def test_cluster_queue_status_reports_weighted_share() -> None:
    objs = three_queues() + [workload("a-running", "qa", {"cpu": "2"}, admitted=("a", {"cpu": "default-flavor"}), created=0)]
    outcome = run(objs, config=FAIR)
    shares = {q.name: q.status.fair_sharing.weighted_share for q in outcome.result.cluster_queues if q.status and q.status.fair_sharing}
    assert shares == {"a": 667, "b": 0, "lender": 0}


def afs_objects(enabled: bool) -> list[dict[str, object]]:
    scope = "UsageBasedAdmissionFairSharing" if enabled else None
    objs: list[dict[str, object]] = [
        F,
        cluster_queue("cq", {"default-flavor": {"cpu": 4}}, admission_scope=scope),
        local_queue("lq-a", "cq"),
        local_queue("lq-b", "cq"),
    ]
    objs += [workload(f"a{i}", "lq-a", {"cpu": "1"}, created=i) for i in range(6)]
    objs += [workload(f"b{i}", "lq-b", {"cpu": "1"}, created=10 + i) for i in range(6)]
    return objs


AFS = {"admissionFairSharing": {"usageHalfLifeTime": "1h", "usageSamplingInterval": "5m"}}


def test_admission_fair_sharing_alternates_between_local_queues() -> None:
    assert run(afs_objects(True), config=AFS).admitted() == ["a0", "a1", "b0", "b1"]


def test_without_admission_fair_sharing_the_oldest_local_queue_wins() -> None:
    assert run(afs_objects(False), config=AFS).admitted() == ["a0", "a1", "a2", "a3"]
