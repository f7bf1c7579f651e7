"""Preemption: classic policies, the minimal set, hierarchy, capacity reservation, the cycle rule."""

from __future__ import annotations

from typing import Any

import pytest

from manager.api import constants as c
from tests.unit.scenario import cluster_queue, cohort, flavor, local_queue, run, workload

F = flavor("default-flavor")
RUN = ("default-flavor",)


def running(name: str, cq: str, queue: str, cpu: str = "1", **kw: object) -> dict[str, object]:
    return workload(name, queue, {"cpu": cpu}, admitted=(cq, {"cpu": "default-flavor"}), **kw)  # type: ignore[arg-type]


def single(policy: str, *, quota: int = 2) -> list[dict[str, object]]:
    return [F, cluster_queue("cq", {"default-flavor": {"cpu": quota}}, preemption={"withinClusterQueue": policy}), local_queue("q", "cq")]


def test_higher_priority_preempts_lower_priority_in_the_same_cluster_queue() -> None:
    objs = single("LowerPriority") + [
        running("low-1", "cq", "q", priority=0, created=0),
        running("low-2", "cq", "q", priority=0, created=1),
        workload("high", "q", {"cpu": "1"}, priority=100, created=10),
    ]
    outcome = run(objs)
    assert outcome.admitted() == ["high", "low-1"], "the most recently admitted victim goes first"
    status, reason, message = outcome.condition("low-2", c.PREEMPTED)
    assert (status, reason) == ("True", "InClusterQueue")
    assert message.startswith("Preempted to accommodate a workload (UID: ")
    assert message.endswith("due to prioritization in the ClusterQueue; preemptor path: /cq; preemptee path: /cq")
    assert outcome.condition("low-2", c.EVICTED)[:2] == ("True", "Preempted")
    assert outcome.condition("low-2", c.QUOTA_RESERVED)[:2] == ("False", "WaitingForQuota"), "pending again, and tried again"
    first = run(objs, cycles=1)
    assert first.condition("low-2", c.QUOTA_RESERVED) == ("False", "PendingEvaluation", message)
    assert first.condition("low-2", c.REQUEUED)[:2] == ("True", "Preempted")


def test_preemptor_is_not_admitted_in_the_cycle_that_preempts() -> None:
    objs = single("LowerPriority", quota=1) + [
        running("low", "cq", "q", priority=0, created=0),
        workload("high", "q", {"cpu": "1"}, priority=5, created=1),
    ]
    outcome = run(objs, cycles=1)
    assert outcome.admitted() == []
    assert outcome.condition("high") == (
        "False",
        "WaitingForPreemptedWorkloads",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 1 more needed. "
        "Pending the preemption of 1 workload(s)",
    )
    outcome = run(objs, cycles=2)
    assert outcome.admitted() == ["high"]


@pytest.mark.parametrize(
    ("policy", "victim_priority", "victim_created", "preempts"),
    [
        ("Never", 0, 0, False),
        ("LowerPriority", 0, 0, True),
        ("LowerPriority", 5, 0, False),
        ("LowerOrNewerEqualPriority", 5, 20, True),
        ("LowerOrNewerEqualPriority", 5, 0, False),
    ],
)
def test_within_cluster_queue_policy(policy: str, victim_priority: int, victim_created: int, preempts: bool) -> None:
    objs = single(policy, quota=1) + [
        running("victim", "cq", "q", priority=victim_priority, created=victim_created),
        workload("incoming", "q", {"cpu": "1"}, priority=5, created=10),
    ]
    outcome = run(objs)
    assert outcome.admitted() == (["incoming"] if preempts else ["victim"])


def test_minimal_set_of_victims_is_kept_after_fill_back() -> None:
    objs = single("LowerPriority", quota=4) + [
        running("small-a", "cq", "q", "1", priority=0, created=3),
        running("small-b", "cq", "q", "1", priority=0, created=2),
        running("big", "cq", "q", "2", priority=1, created=1),
        workload("incoming", "q", {"cpu": "2"}, priority=10, created=10),
    ]
    outcome = run(objs, cycles=1)
    evicted = sorted(i.name for i in outcome.result.infos if i.condition_true(c.PREEMPTED))
    assert evicted == ["small-a", "small-b"]


def cohort_pair(preemption_a: dict[str, Any], preemption_b: dict[str, Any] | None = None, quota: int = 3) -> list[dict[str, object]]:
    return [
        F,
        cluster_queue("a", {"default-flavor": {"cpu": quota}}, cohort="co", preemption=preemption_a),
        cluster_queue("b", {"default-flavor": {"cpu": quota}}, cohort="co", preemption=preemption_b),
        local_queue("qa", "a"),
        local_queue("qb", "b"),
    ]


def test_reclaim_within_cohort_takes_back_lent_nominal_quota() -> None:
    objs = cohort_pair({"reclaimWithinCohort": "Any"}) + [running(f"b{i}", "b", "qb", priority=50, created=i) for i in range(6)]
    objs += [workload("mine", "qa", {"cpu": "2"}, priority=0, created=10)]
    outcome = run(objs)
    preempted = sorted(i.name for i in outcome.result.infos if i.condition_true(c.PREEMPTED))
    assert preempted == ["b4", "b5"]
    assert outcome.condition("b5", c.PREEMPTED)[1] == "InCohortReclamation"
    assert "mine" in outcome.admitted()


def test_reclaim_lower_priority_spares_higher_priority_borrowers() -> None:
    objs = cohort_pair({"reclaimWithinCohort": "LowerPriority"}) + [running(f"b{i}", "b", "qb", priority=50, created=i) for i in range(6)]
    objs += [workload("mine", "qa", {"cpu": "2"}, priority=0, created=10)]
    outcome = run(objs)
    assert "mine" not in outcome.admitted()
    assert outcome.condition("mine")[1] == "WaitingForQuota"


def test_only_workloads_that_fit_in_nominal_quota_may_reclaim() -> None:
    objs = cohort_pair({"reclaimWithinCohort": "Any"}) + [running(f"b{i}", "b", "qb", created=i) for i in range(6)]
    objs += [workload("too-big", "qa", {"cpu": "4"}, created=10)]
    outcome = run(objs)
    assert "too-big" not in outcome.admitted()
    assert not any(i.condition_true(c.PREEMPTED) for i in outcome.result.infos)


def with_idle_lender(objs: list[dict[str, object]]) -> list[dict[str, object]]:
    return objs + [cluster_queue("lender", {"default-flavor": {"cpu": 3}}, cohort="co")]


def test_borrow_within_cohort_preempts_lower_priority_while_borrowing() -> None:
    preemption = {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100}}
    objs = with_idle_lender(cohort_pair(preemption)) + [
        running("a-own", "a", "qa", "3", priority=0, created=0),
        running("b-low", "b", "qb", "6", priority=10, created=1),
        workload("urgent", "qa", {"cpu": "3"}, priority=500, created=10),
    ]
    outcome = run(objs)
    assert outcome.condition("b-low", c.PREEMPTED)[1] == "InCohortReclaimWhileBorrowing"
    assert "urgent" in outcome.admitted()


def test_borrow_within_cohort_respects_the_priority_threshold() -> None:
    preemption = {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100}}
    objs = with_idle_lender(cohort_pair(preemption)) + [
        running("a-own", "a", "qa", "3", priority=0, created=0),
        running("b-important", "b", "qb", "6", priority=200, created=1),
        workload("urgent", "qa", {"cpu": "3"}, priority=500, created=10),
    ]
    outcome = run(objs)
    assert "urgent" not in outcome.admitted()


def test_hierarchical_reclaim_across_cohort_levels() -> None:
    objs = [F, cohort("root"), cohort("left", parent="root"), cohort("right", parent="root")]
    objs += [
        cluster_queue("l1", {"default-flavor": {"cpu": 4}}, cohort="left", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("r1", {"default-flavor": {"cpu": 0}}, cohort="right"),
        local_queue("ql", "l1"),
        local_queue("qr", "r1"),
    ]
    objs += [running(f"r{i}", "r1", "qr", created=i) for i in range(4)]
    objs += [workload("mine", "ql", {"cpu": "2"}, created=10)]
    outcome = run(objs)
    assert "mine" in outcome.admitted()
    reasons = {i.name: i.conditions[c.PREEMPTED].reason for i in outcome.result.infos if i.condition_true(c.PREEMPTED)}
    assert reasons == {"r3": "InCohortReclamation", "r2": "InCohortReclamation"}
    message = outcome.condition("r3", c.PREEMPTED)[2]
    assert "preemptor path: /root/left/l1; preemptee path: /root/right/r1" in message


def test_capacity_is_reserved_when_preemption_finds_no_candidates() -> None:
    # "guarded" cannot reclaim (policy LowerPriority, borrower has higher priority), so its
    # pending request holds its own nominal quota for the cycle: the same-cycle borrower
    # from "greedy" must not take it.
    objs = [
        F,
        cluster_queue("guarded", {"default-flavor": {"cpu": 4}}, cohort="co", preemption={"reclaimWithinCohort": "LowerPriority"}),
        cluster_queue("greedy", {"default-flavor": {"cpu": 0}}, cohort="co"),
        cluster_queue("other", {"default-flavor": {"cpu": 2}}, cohort="co"),
        local_queue("qg", "guarded"),
        local_queue("qx", "greedy"),
        local_queue("qo", "other"),
        workload("holder", "qo", {"cpu": "2"}, admitted=("guarded", {"cpu": "default-flavor"}), priority=10, created=0),
        running("borrowing", "greedy", "qx", "2", priority=100, created=1),
        workload("needs-4", "qg", {"cpu": "4"}, priority=50, created=5),
        workload("late-borrower", "qx", {"cpu": "2"}, priority=0, created=6),
    ]
    outcome = run(objs, cycles=1)
    assert "late-borrower" not in outcome.admitted()


def test_overlapping_targets_skip_the_later_preemptor_for_the_cycle() -> None:
    # Both a1 and a2 reclaim their nominal quota from the one workload b borrows it with. Kueue
    # v0.19.2, default gates (RecomputeAssignmentUponPreemptionTargetsOverlap off; scheduler.go
    # processEntry): mine-1 preempts; mine-2's targets overlap, so it is skipped for the cycle
    # ("overlapping preemption targets", WaitingForQuota), even though the borrower's eviction
    # frees enough for both, and is admitted once the borrower is gone.
    objs = [
        F,
        cluster_queue("a1", {"default-flavor": {"cpu": 2}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("a2", {"default-flavor": {"cpu": 2}}, cohort="co", preemption={"reclaimWithinCohort": "Any"}),
        cluster_queue("b", {"default-flavor": {"cpu": 0}}, cohort="co"),
        local_queue("q1", "a1"),
        local_queue("q2", "a2"),
        local_queue("qb", "b"),
        running("borrower", "b", "qb", "4", created=0),
        workload("mine-1", "q1", {"cpu": "2"}, created=1),
        workload("mine-2", "q2", {"cpu": "2"}, created=2),
    ]
    first = run(objs, cycles=1)
    assert first.result.preemptions == 1
    status, reason, message = first.condition("mine-1")
    assert (status, reason) == ("False", "WaitingForPreemptedWorkloads")
    assert message.endswith("Pending the preemption of 1 workload(s)")
    assert first.condition("mine-2") == ("False", "WaitingForQuota", "Workload has overlapping preemption targets with another workload")
    assert run(objs).admitted() == ["mine-1", "mine-2"]


# --- Kueue's preemption table (pkg/scheduler/preemption/preemption_test.go, v0.19.2) ---------------
# The rows whose candidates mix the preemptor's own ClusterQueue and other queues of its cohort.
# Each row: ClusterQueues, admitted (name, queue, priority, requests), the incoming workload
# (queue, priority, requests), and the victims Kueue picks with their reasons.

LOWER_PRIORITY_BOTH = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority"}
KUEUE_QUEUES: dict[str, dict[str, Any]] = {
    name: cluster_queue(name, groups, cohort=cohort_name, preemption=preemption)
    for name, groups, cohort_name, preemption in [
        (
            "c1",
            {"default": {"cpu": (6, 6, None), "memory": ("3Gi", "3Gi", None)}},
            "cohort",
            LOWER_PRIORITY_BOTH,
        ),
        (
            "c2",
            {"default": {"cpu": (6, 6, None), "memory": ("3Gi", "3Gi", None)}},
            "cohort",
            {"withinClusterQueue": "Never", "reclaimWithinCohort": "Any"},
        ),
        ("lend1", {"default": {"cpu": (6, None, 4)}}, "cohort-lend", LOWER_PRIORITY_BOTH),
        ("lend2", {"default": {"cpu": (6, None, 2)}}, "cohort-lend", LOWER_PRIORITY_BOTH),
        ("a", {"default": {"cpu": 2, "memory": 2}}, "cohort-three", {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}),
        ("b", {"default": {"cpu": 2, "memory": 2}}, "cohort-three", None),
        ("c", {"default": {"cpu": 2, "memory": 2}}, "cohort-three", None),
        *(
            (
                name,
                {"default": {"cpu": (nominal, limit, None)}},
                "with-shared-cq",
                {
                    "withinClusterQueue": within,
                    "reclaimWithinCohort": reclaim,
                    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 0},
                },
            )
            for name, nominal, limit, within, reclaim in [
                ("a-standard", 1, 12, "Never", "LowerPriority"),
                ("b-standard", 1, 12, "LowerPriority", "Any"),
                ("a-best-effort", 1, 12, "Never", "LowerPriority"),
                ("b-best-effort", 0, 13, "Never", "LowerPriority"),
            ]
        ),
        ("shared", {"default": {"cpu": 10}}, "with-shared-cq", None),
    ]
}

Admitted = tuple[str, str, int, dict[str, str]]
KUEUE_MIXED_ROWS: list[tuple[str, list[str], list[Admitted], tuple[str, int, dict[str, str]], dict[str, str]]] = [
    (
        "preempt from all ClusterQueues in cohort",
        ["c1", "c2"],
        [
            ("c1-low", "c1", -1, {"cpu": "3"}),
            ("c1-mid", "c1", 0, {"cpu": "2"}),
            ("c2-low", "c2", -1, {"cpu": "3"}),
            ("c2-mid", "c2", 0, {"cpu": "4"}),
        ],
        ("c1", 0, {"cpu": "4"}),
        {"c1-low": "InClusterQueue", "c2-low": "InCohortReclamation"},
    ),
    (
        "preempt from all ClusterQueues in cohort-lend",
        ["lend1", "lend2"],
        [
            ("lend1-low", "lend1", -1, {"cpu": "3"}),
            ("lend1-mid", "lend1", 0, {"cpu": "2"}),
            ("lend2-low", "lend2", -1, {"cpu": "3"}),
            ("lend2-mid", "lend2", 0, {"cpu": "4"}),
        ],
        ("lend1", 0, {"cpu": "4"}),
        {"lend1-low": "InClusterQueue", "lend2-low": "InCohortReclamation"},
    ),
    (
        "allow preemption from other cluster queues if target cq is not exhausted for the requested resource",
        ["a", "b", "c"],
        [
            ("a1", "a", -1, {"cpu": "1"}),
            ("b1", "b", 0, {"cpu": "1"}),
            ("b2", "b", 0, {"cpu": "1"}),
            ("b3", "b", 0, {"cpu": "1"}),
            ("b4", "b", 0, {"cpu": "1"}),
            ("b5", "b", -1, {"cpu": "1"}),
        ],
        ("a", 0, {"cpu": "2"}),
        {"a1": "InClusterQueue", "b5": "InCohortReclamation"},
    ),
    (
        "use BorrowWithinCohort; preempt from CQ and from other CQs with workloads below threshold",
        ["a-standard", "b-standard", "a-best-effort", "b-best-effort", "shared"],
        [
            ("b-standard-high", "b-standard", 2, {"cpu": "10"}),
            ("b-standard-mid", "b-standard", 1, {"cpu": "1"}),
            ("a-best-effort-low", "a-best-effort", -1, {"cpu": "1"}),
            ("a-best-effort-lower", "a-best-effort", -2, {"cpu": "1"}),
        ],
        ("b-standard", 2, {"cpu": "2"}),
        {"a-best-effort-lower": "InCohortReclaimWhileBorrowing", "b-standard-mid": "InClusterQueue"},
    ),
    (
        "preemptions from cq when target queue is exhausted for the single requested resource",
        ["a", "b", "c"],
        [
            ("a1", "a", -2, {"cpu": "1"}),
            ("a2", "a", -2, {"cpu": "1"}),
            ("a3", "a", -1, {"cpu": "1"}),
            ("b1", "b", 0, {"cpu": "1"}),
            ("b2", "b", 0, {"cpu": "1"}),
            ("b3", "b", 0, {"cpu": "1"}),
        ],
        ("a", 0, {"cpu": "2"}),
        {"a1": "InClusterQueue", "a2": "InClusterQueue"},
    ),
    (
        "preemptions from cq when target queue is exhausted for two requested resources",
        ["a", "b", "c"],
        [
            ("a1", "a", -2, {"cpu": "1", "memory": "1"}),
            ("a2", "a", -2, {"cpu": "1", "memory": "1"}),
            ("a3", "a", -1, {"cpu": "1", "memory": "1"}),
            ("b1", "b", 0, {"cpu": "1", "memory": "1"}),
            ("b2", "b", 0, {"cpu": "1", "memory": "1"}),
            ("b3", "b", 0, {"cpu": "1", "memory": "1"}),
        ],
        ("a", 0, {"cpu": "2", "memory": "2"}),
        {"a1": "InClusterQueue", "a2": "InClusterQueue"},
    ),
    (
        "preempting locally and borrowing same resource in cohort",
        ["c1", "c2"],
        [
            ("c1-med", "c1", 0, {"cpu": "4"}),
            ("c1-low", "c1", -1, {"cpu": "4"}),
            ("c2-low-1", "c2", -1, {"cpu": "4"}),
        ],
        ("c1", 1, {"cpu": "4"}),
        {"c1-low": "InClusterQueue"},
    ),
    (
        "preempting locally and borrowing other resources in cohort, with cohort candidates",
        ["c1", "c2"],
        [
            ("c1-med", "c1", 0, {"cpu": "4"}),
            ("c2-low-1", "c2", -1, {"cpu": "5"}),
            ("c2-low-2", "c2", -1, {"cpu": "1"}),
            ("c2-low-3", "c2", -1, {"cpu": "1"}),
        ],
        ("c1", 1, {"cpu": "2", "memory": "5Gi"}),
        {"c1-med": "InClusterQueue"},
    ),
]


def kueue_row_objects(queues: list[str], admitted: list[Admitted], incoming: tuple[str, int, dict[str, str]]) -> list[dict[str, object]]:
    objs: list[dict[str, object]] = [flavor("default")]
    objs += [KUEUE_QUEUES[name] for name in queues]
    objs += [local_queue(f"lq-{name}", name) for name in queues]
    for i, (name, cq, priority, requests) in enumerate(admitted):
        objs.append(workload(name, f"lq-{cq}", requests, priority=priority, created=i, admitted=(cq, dict.fromkeys(requests, "default"))))
    cq, priority, requests = incoming
    objs.append(workload("in", f"lq-{cq}", requests, priority=priority, created=100))
    return objs


@pytest.mark.parametrize(
    ("queues", "admitted", "incoming", "victims"), [row[1:] for row in KUEUE_MIXED_ROWS], ids=[row[0] for row in KUEUE_MIXED_ROWS]
)
def test_kueue_table_own_queue_and_cohort_candidates(
    queues: list[str], admitted: list[Admitted], incoming: tuple[str, int, dict[str, str]], victims: dict[str, str]
) -> None:
    first = run(kueue_row_objects(queues, admitted, incoming), cycles=1)
    preempted = {i.name: i.conditions[c.PREEMPTED].reason for i in first.result.infos if i.condition_true(c.PREEMPTED)}
    assert preempted == victims
    assert first.condition("in")[1] == "WaitingForPreemptedWorkloads"


def test_each_preemption_decision_is_logged_with_the_state_it_was_taken_in(caplog: pytest.LogCaptureFixture) -> None:
    objs = cohort_pair({"reclaimWithinCohort": "Any"}) + [running(f"b{i}", "b", "qb", priority=50, created=i) for i in range(6)]
    objs += [workload("mine", "qa", {"cpu": "2"}, priority=0, created=10)]
    with caplog.at_level("DEBUG", logger="kfed.engine.scheduler"):
        run(objs, cycles=1)
    (record,) = [r for r in caplog.records if r.getMessage() == "preemption decision"]
    fields = vars(record)
    assert (fields["preemptor"], fields["cluster_queue"], fields["cohort"]) == ("default/mine", "a", "co")
    assert fields["requests"] == {"default-flavor/cpu": 2000}
    victims = sorted((v["key"], v["cluster_queue"], v["reason"], v["ongoing"]) for v in fields["victims"])
    assert victims == [("default/b4", "b", "InCohortReclamation", False), ("default/b5", "b", "InCohortReclamation", False)]
    assert fields["usage"] == {"a": {}, "b": {"default-flavor/cpu": 6000}}, "the state before the decision"
    assert fields["cohort_usage"] == {"default-flavor/cpu": 6000}, "without lending limits, all of it counts in the cohort"
    held = sorted((w["key"], w["cluster_queue"], w["priority"], w["usage"]["default-flavor/cpu"], w["evicted"]) for w in fields["admitted"])
    assert held == [(f"default/b{i}", "b", 50, 1000, False) for i in range(6)], "every Workload holding quota, to rebuild the state"
    assert all(w["reserved_at"] and w["uid"] for w in fields["admitted"])
