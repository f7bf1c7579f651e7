"""Admission rules, each a scenario run through full scheduling cycles."""

from __future__ import annotations

import pytest

from manager.api import constants as c
from tests.unit.scenario import cluster_queue, cohort, flavor, local_queue, run, workload

F = flavor("default-flavor")


def jobs(
    prefix: str, n: int, queue: str, cpu: str = "1", *, namespace: str = "default", start: int = 0, **kw: object
) -> list[dict[str, object]]:
    return [workload(f"{prefix}{i:02d}", queue, {"cpu": cpu}, namespace=namespace, created=start + i, **kw) for i in range(n)]  # type: ignore[arg-type]


def two_teams(a: object = 9, b: object = 12) -> list[dict[str, object]]:
    return [
        F,
        cluster_queue("team-a-cq", {"default-flavor": {"cpu": a}}, cohort="team-ab"),
        cluster_queue("team-b-cq", {"default-flavor": {"cpu": b}}, cohort="team-ab"),
        local_queue("a", "team-a-cq", namespace="team-a"),
        local_queue("b", "team-b-cq", namespace="team-b"),
    ]


@pytest.mark.parametrize(
    ("team_a_quota", "expected"),
    [
        pytest.param(9, 21, id="team-a borrows all of team-b's idle 12"),
        pytest.param((9, 1, None), 10, id="borrowingLimit 1 gives 10"),
    ],
)
def test_team_a_admits_up_to_what_the_cohort_allows(team_a_quota: object, expected: int) -> None:
    outcome = run(two_teams(a=team_a_quota) + jobs("w", 25, "a", namespace="team-a"))
    assert len(outcome.admitted()) == expected


def test_lending_limit_of_1_on_team_b_gives_team_a_10() -> None:
    outcome = run(two_teams(b=(12, None, 1)) + jobs("w", 25, "a", namespace="team-a"))
    assert len(outcome.admitted()) == 10


def test_pending_workload_says_how_much_more_quota_it_needs() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 4}}), local_queue("q", "cq")]
    outcome = run(objs + [workload("big", "q", {"cpu": "3"}, created=0), workload("next", "q", {"cpu": "3"}, created=1)])
    assert outcome.admitted() == ["big"]
    assert outcome.condition("next") == (
        "False",
        "WaitingForQuota",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 2 more needed",
    )
    assert outcome.condition("next", c.ADMITTED) == ("False", "NoReservation", "The workload has no reservation")


def test_request_above_maximum_capacity_is_exceeds_max_quota() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 4}}), local_queue("q", "cq")]
    outcome = run(objs + [workload("huge", "q", {"cpu": "5"})])
    status, reason, message = outcome.condition("huge")
    assert (status, reason) == ("False", "ExceedsMaxQuota")
    assert message == (
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default-flavor, "
        "previously considered podsets requests (0) + current podset request (5) > maximum capacity (4)"
    )


def test_memory_shortfall_is_printed_in_binary_units() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 8, "memory": "4Gi"}}), local_queue("q", "cq")]
    outcome = run(
        objs + [workload("a", "q", {"cpu": "1", "memory": "3Gi"}, created=0), workload("b", "q", {"cpu": "1", "memory": "2Gi"}, created=1)]
    )
    assert "insufficient unused quota for memory in flavor default-flavor, 1Gi more needed" in outcome.condition("b")[2]


def test_flavors_are_tried_in_order_and_the_first_that_fits_wins() -> None:
    objs = [
        flavor("spot"),
        flavor("on-demand"),
        cluster_queue("cq", {"spot": {"cpu": 2}, "on-demand": {"cpu": 10}}),
        local_queue("q", "cq"),
    ]
    outcome = run(objs + jobs("w", 4, "q"))
    assert [outcome.flavors(f"w{i:02d}")["cpu"] for i in range(4)] == ["spot", "spot", "on-demand", "on-demand"]


def test_one_flavor_per_resource_group_and_independent_groups() -> None:
    groups = [
        {"spot": {"cpu": 9, "memory": "36Gi"}, "on-demand": {"cpu": 18, "memory": "72Gi"}},
        {"pool1": {"example.com/license": 1}, "pool2": {"example.com/license": 10}},
    ]
    objs = [flavor(n) for n in ("spot", "on-demand", "pool1", "pool2")] + [cluster_queue("cq", groups), local_queue("q", "cq")]
    wls = [workload(f"w{i}", "q", {"cpu": "5", "memory": "1Gi", "example.com/license": "1"}, created=i) for i in range(2)]
    outcome = run(objs + wls)
    assert outcome.flavors("w0") == {"cpu": "spot", "memory": "spot", "example.com/license": "pool1"}
    assert outcome.flavors("w1") == {"cpu": "on-demand", "memory": "on-demand", "example.com/license": "pool2"}


def test_tainted_flavor_is_skipped_unless_tolerated() -> None:
    tainted = flavor("gpu-nodes", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    objs = [tainted, flavor("cpu-nodes"), cluster_queue("cq", {"gpu-nodes": {"cpu": 10}, "cpu-nodes": {"cpu": 10}}), local_queue("q", "cq")]
    toleration = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    outcome = run(objs + [workload("plain", "q"), workload("tolerant", "q", tolerations=toleration)])
    assert outcome.flavors("plain")["cpu"] == "cpu-nodes"
    assert outcome.flavors("tolerant")["cpu"] == "gpu-nodes"


def test_untolerated_taint_message_names_the_taint() -> None:
    tainted = flavor("gpu-nodes", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
    objs = [tainted, cluster_queue("cq", {"gpu-nodes": {"cpu": 10}}), local_queue("q", "cq")]
    outcome = run(objs + [workload("plain", "q")])
    assert outcome.condition("plain") == (
        "False",
        "NoMatchingFlavor",
        "couldn't assign flavors to pod set main: untolerated taint {nvidia.com/gpu present NoSchedule <nil>} in flavor gpu-nodes",
    )


def test_node_selector_matches_only_the_flavor_labels() -> None:
    objs = [
        flavor("x86", labels={"kubernetes.io/arch": "amd64"}),
        flavor("arm", labels={"kubernetes.io/arch": "arm64"}),
        cluster_queue("cq", {"x86": {"cpu": 10}, "arm": {"cpu": 10}}),
        local_queue("q", "cq"),
    ]
    wls = [
        workload("wants-arm", "q", nodeSelector={"kubernetes.io/arch": "arm64", "unrelated": "x"}),
        workload("any", "q"),
    ]
    outcome = run(objs + wls)
    assert outcome.flavors("wants-arm")["cpu"] == "arm"
    assert outcome.flavors("any")["cpu"] == "x86"


def test_required_node_affinity_picks_a_matching_flavor() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["spot"]}]}]
            }
        }
    }
    objs = [
        flavor("spot", labels={"tier": "spot"}),
        flavor("reserved", labels={"tier": "reserved"}),
        cluster_queue("cq", {"spot": {"cpu": 10}, "reserved": {"cpu": 10}}),
        local_queue("q", "cq"),
    ]
    outcome = run(objs + [workload("w", "q", affinity=affinity)])
    assert outcome.flavors("w")["cpu"] == "reserved"


def test_multiple_pod_sets_choose_flavors_independently() -> None:
    objs = [flavor("one"), flavor("two"), cluster_queue("cq", {"one": {"cpu": 4}, "two": {"cpu": 10}}), local_queue("q", "cq")]
    pod_sets = [
        {"name": "driver", "count": 1, "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "5"}}}]}}},
        {"name": "worker", "count": 1, "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]}}},
    ]
    outcome = run(objs + [workload("w", "q", pod_sets=pod_sets)])
    admission = outcome.info("w").admission
    assert admission is not None
    assert {a.name: a.flavors["cpu"] for a in admission} == {"driver": "two", "worker": "one"}


def test_pods_resource_counts_one_per_pod() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 100, "pods": 3}}), local_queue("q", "cq")]
    outcome = run(objs + [workload("three", "q", count=3, created=0), workload("one-more", "q", created=1)])
    assert outcome.admitted() == ["three"]
    admission = outcome.info("three").admission
    assert admission is not None and admission[0].usage["pods"] == 3
    assert "insufficient unused quota for pods in flavor default-flavor, 1 more needed" in outcome.condition("one-more")[2]


def test_undeclared_resource_cannot_be_admitted() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 10}}), local_queue("q", "cq")]
    outcome = run(objs + [workload("gpu", "q", {"cpu": "1", "nvidia.com/gpu": "1"})])
    assert outcome.condition("gpu")[1:] == (
        "NoMatchingFlavor",
        "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in ClusterQueue",
    )


def test_zero_request_for_undeclared_resource_is_ignored() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 10}}), local_queue("q", "cq")]
    outcome = run(objs + [workload("w", "q", {"cpu": "1", "example.com/foo": "0"})])
    assert outcome.admitted() == ["w"]


@pytest.mark.parametrize(
    ("strategy", "admitted"),
    [
        pytest.param("StrictFIFO", ["running"], id="StrictFIFO: the head that does not fit blocks newer workloads"),
        pytest.param("BestEffortFIFO", ["running", "small"], id="BestEffortFIFO: smaller newer workloads get through"),
    ],
)
def test_queueing_strategy(strategy: str, admitted: list[str]) -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 4}}, strategy=strategy), local_queue("q", "cq")]
    objs += [
        workload("running", "q", {"cpu": "2"}, created=0),
        workload("big", "q", {"cpu": "3"}, created=1),
        workload("small", "q", {"cpu": "1"}, created=2),
    ]
    assert run(objs).admitted() == admitted


def test_higher_priority_is_admitted_before_older_workloads() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 1}}, strategy="StrictFIFO"), local_queue("q", "cq")]
    outcome = run(objs + [workload("old", "q", created=0), workload("urgent", "q", created=5, priority=100)])
    assert outcome.admitted() == ["urgent"]


def test_older_workload_first_at_equal_priority() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 1}}), local_queue("q", "cq")]
    outcome = run(objs + [workload("newer", "q", created=5), workload("older", "q", created=0)])
    assert outcome.admitted() == ["older"]


def test_workload_priority_class_sets_the_priority_of_a_workload() -> None:
    wpc = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 1000}
    objs = [F, wpc, cluster_queue("cq", {"default-flavor": {"cpu": 1}}), local_queue("q", "cq")]
    urgent = workload("urgent", "q", created=9)
    urgent["spec"]["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    urgent["spec"]["priority"] = 1000
    outcome = run(objs + [workload("old", "q", created=0), urgent])
    assert outcome.admitted() == ["urgent"]


def test_one_head_per_cluster_queue_per_cycle() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 10}}), local_queue("q", "cq")]
    outcome = run(objs + jobs("w", 3, "q"), cycles=2)
    assert len(outcome.admitted()) == 2


def test_no_longer_fits_after_processing_another_workload() -> None:
    objs = two_teams(a=2, b=2) + [
        workload("a1", "a", {"cpu": "3"}, namespace="team-a", created=0),
        workload("b1", "b", {"cpu": "3"}, namespace="team-b", created=1),
    ]
    outcome = run(objs, cycles=1)
    assert outcome.admitted() == ["a1"]
    assert outcome.condition("b1") == ("False", "WaitingForQuota", "Workload no longer fits after processing another workload")


def test_entries_that_fit_without_borrowing_go_first_in_a_cycle() -> None:
    # Both heads fit alone; team-a's needs to borrow, team-b's does not, so team-b's goes first.
    objs = two_teams(a=1, b=3) + [
        workload("borrower", "a", {"cpu": "3"}, namespace="team-a", created=0, priority=10),
        workload("local", "b", {"cpu": "3"}, namespace="team-b", created=5),
    ]
    outcome = run(objs, cycles=1)
    assert outcome.admitted() == ["local"]


def test_namespace_selector_null_selects_nothing() -> None:
    cq = cluster_queue("cq", {"default-flavor": {"cpu": 10}})
    del cq["spec"]["namespaceSelector"]
    outcome = run([F, cq, local_queue("q", "cq"), workload("w", "q")])
    assert outcome.condition("w") == ("False", "Misconfigured", "workload namespace doesn't match ClusterQueue selector")


def test_namespace_selector_matches_namespace_labels() -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research", "labels": {"team": "ml"}}}
    selector = {"matchLabels": {"team": "ml"}}
    objs = [F, ns, cluster_queue("cq", {"default-flavor": {"cpu": 10}}, namespace_selector=selector)]
    objs += [local_queue("q", "cq", namespace="research"), local_queue("q", "cq", namespace="other")]
    outcome = run(objs + [workload("in", "q", namespace="research"), workload("out", "q", namespace="other")])
    assert outcome.admitted() == ["in"]


def test_missing_local_queue_is_misconfigured() -> None:
    outcome = run([F, cluster_queue("cq", {"default-flavor": {"cpu": 10}}), workload("w", "nope")])
    assert outcome.condition("w") == ("False", "Misconfigured", "LocalQueue nope doesn't exist")


def test_cluster_queue_with_missing_flavor_is_inactive_and_admits_nothing() -> None:
    outcome = run([cluster_queue("cq", {"ghost": {"cpu": 10}}), local_queue("q", "cq"), workload("w", "q")])
    assert outcome.condition("w") == ("False", "Suspended", "ClusterQueue cq is inactive")
    cq = outcome.result.cluster_queues[0]
    assert cq.status is not None and cq.status.conditions is not None
    assert cq.status.conditions[0].reason == "FlavorNotFound"


@pytest.mark.parametrize("policy", ["Hold", "HoldAndDrain"])
def test_stopped_cluster_queue_admits_nothing_new(policy: str) -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 10}}, stop_policy=policy), local_queue("q", "cq")]
    outcome = run(objs + [workload("running", "q", admitted=("cq", {"cpu": "default-flavor"})), workload("new", "q")])
    assert outcome.condition("new") == ("False", "Suspended", "ClusterQueue cq is stopped")
    if policy == "Hold":
        assert outcome.admitted() == ["running"]
    else:
        assert outcome.admitted() == []
        assert outcome.condition("running", c.EVICTED)[:2] == ("True", "ClusterQueueStopped")


def test_stopped_local_queue_holds_its_workloads_only() -> None:
    objs = [
        F,
        cluster_queue("cq", {"default-flavor": {"cpu": 10}}),
        local_queue("held", "cq", stop_policy="Hold"),
        local_queue("open", "cq"),
    ]
    outcome = run(objs + [workload("a", "held"), workload("b", "open")])
    assert outcome.admitted() == ["b"]
    assert outcome.condition("a") == ("False", "Suspended", "LocalQueue held is stopped")


def test_admission_checks_reserve_quota_but_admit_only_when_all_ready() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 10}}, checks=["prov", "mk"]), local_queue("q", "cq")]
    outcome = run(objs + [workload("ready", "q", checks={"prov": "Ready", "mk": "Ready"}), workload("half", "q", checks={"prov": "Ready"})])
    assert outcome.condition("ready", c.ADMITTED) == ("True", "Admitted", "The workload is admitted")
    assert outcome.condition("half", c.QUOTA_RESERVED)[:2] == ("True", "QuotaReserved")
    assert outcome.condition("half", c.ADMITTED) == ("False", "UnsatisfiedAdmissionChecks", "The workload has not all checks ready")
    assert outcome.info("half").checks == {"prov": "Ready", "mk": "Pending"}


def test_failed_admission_check_keeps_the_workload_out() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 10}}, checks=["prov"]), local_queue("q", "cq")]
    outcome = run(objs + [workload("w", "q", checks={"prov": "Retry"})])
    assert outcome.condition("w") == ("False", "PendingEvaluation", "The workload has failed admission checks")


def test_partial_admission_scales_down_to_what_fits() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 50}}), local_queue("q", "cq")]
    outcome = run(objs + [workload("w", "q", {"cpu": "2"}, count=50, min_count=20)])
    admission = outcome.info("w").admission
    assert admission is not None and admission[0].count == 25
    assert admission[0].usage["cpu"] == 50_000


def test_partial_admission_never_goes_below_min_count() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 10}}), local_queue("q", "cq")]
    outcome = run(objs + [workload("w", "q", {"cpu": "2"}, count=50, min_count=20)])
    assert outcome.admitted() == []


def test_resource_transformation_charges_credits() -> None:
    config = {"resources": {"transformations": [{"input": "cpu", "strategy": "Retain", "outputs": {"cpu-credits": "1"}}]}}
    groups = [{"on-demand": {"cpu": 9}, "spot": {"cpu": 9}}, {"credits": {"cpu-credits": 14}}]
    objs = [flavor("on-demand"), flavor("spot"), flavor("credits"), cluster_queue("cq", groups), local_queue("q", "cq")]
    outcome = run(objs + jobs("w", 5, "q", cpu="3"), config=config)
    assert len(outcome.admitted()) == 4
    assert "insufficient unused quota for cpu-credits in flavor credits, 1 more needed" in outcome.condition("w04")[2]


def test_limit_range_default_request_is_charged() -> None:
    limit_range = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "defaults", "namespace": "default"},
        "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "2"}}]},
    }
    objs = [F, limit_range, cluster_queue("cq", {"default-flavor": {"cpu": 10}}), local_queue("q", "cq")]
    outcome = run(
        objs
        + [
            workload(
                "w",
                "q",
                {"memory": "1Gi"},
            )
        ]
    )
    assert outcome.admitted() == []  # memory is not covered by the ClusterQueue
    outcome = run(
        [
            F,
            limit_range,
            cluster_queue("cq", {"default-flavor": {"cpu": 10, "memory": "10Gi"}}),
            local_queue("q", "cq"),
            workload("w", "q", {"memory": "1Gi"}),
        ]
    )
    admission = outcome.info("w").admission
    assert admission is not None and admission[0].usage["cpu"] == 2000


def test_inactive_workload_is_not_queued() -> None:
    objs = [F, cluster_queue("cq", {"default-flavor": {"cpu": 10}}), local_queue("q", "cq")]
    outcome = run(objs + [workload("off", "q", active=False)])
    assert outcome.admitted() == []
    assert c.QUOTA_RESERVED not in outcome.info("off").conditions


def test_cohort_object_quota_is_shared_by_its_members() -> None:
    objs = [F, cohort("pool", groups={"default-flavor": {"cpu": 6}})]
    objs += [cluster_queue("cq", {"default-flavor": {"cpu": 0}}, cohort="pool"), local_queue("q", "cq")]
    outcome = run(objs + jobs("w", 8, "q"))
    assert len(outcome.admitted()) == 6


def test_hierarchical_cohort_lending_limit_limits_borrowing() -> None:
    objs = [F, cohort("root"), cohort("child", parent="root")]
    objs += [
        cluster_queue("lender", {"default-flavor": {"cpu": (10, None, 3)}}, cohort="child"),
        cluster_queue("borrower", {"default-flavor": {"cpu": (5, 10, None)}}, cohort="child"),
        local_queue("q", "borrower"),
    ]
    outcome = run(objs + jobs("w", 12, "q"))
    assert len(outcome.admitted()) == 8


def test_cluster_queue_status_reports_reservation_and_borrowing() -> None:
    outcome = run(two_teams() + jobs("w", 12, "a", namespace="team-a"))
    cq = next(q for q in outcome.result.cluster_queues if q.name == "team-a-cq")
    assert cq.status is not None and cq.status.flavors_reservation is not None
    usage = cq.status.flavors_reservation[0].resources
    assert usage is not None
    assert (str(usage[0].total), str(usage[0].borrowed)) == ("12", "3")
    assert (cq.status.reserving_workloads, cq.status.admitted_workloads, cq.status.pending_workloads) == (12, 12, 0)


def fungibility_setup(fungibility: dict[str, str] | None, *, preemption: dict[str, str] | None = None) -> list[dict[str, object]]:
    # "first" can only be had by borrowing from the lender; "second" has room of its own.
    return [
        flavor("first"),
        flavor("second"),
        cluster_queue("cq", {"first": {"cpu": 0}, "second": {"cpu": 4}}, cohort="co", fungibility=fungibility, preemption=preemption),
        cluster_queue("lender", {"first": {"cpu": 4}, "second": {"cpu": 0}}, cohort="co"),
        local_queue("q", "cq"),
    ]


def test_default_fungibility_stops_at_the_first_flavor_that_fits_even_by_borrowing() -> None:
    outcome = run([*fungibility_setup(None), workload("w", "q", {"cpu": "2"})])
    assert outcome.flavors("w")["cpu"] == "first"


def test_when_can_borrow_try_next_flavor_prefers_a_flavor_without_borrowing() -> None:
    outcome = run([*fungibility_setup({"whenCanBorrow": "TryNextFlavor"}), workload("w", "q", {"cpu": "2"})])
    assert outcome.flavors("w")["cpu"] == "second"


def test_when_can_preempt_may_stop_search_preempts_in_the_first_flavor() -> None:
    objs = [
        flavor("first"),
        flavor("second"),
        cluster_queue(
            "cq",
            {"first": {"cpu": 2}, "second": {"cpu": 2}},
            fungibility={"whenCanPreempt": "MayStopSearch"},
            preemption={"withinClusterQueue": "LowerPriority"},
        ),
        local_queue("q", "cq"),
        workload("low", "q", {"cpu": "2"}, admitted=("cq", {"cpu": "first"}), priority=0, created=0),
        workload("high", "q", {"cpu": "2"}, priority=10, created=1),
    ]
    stop = run(objs)
    assert stop.flavors("high")["cpu"] == "first"
    assert stop.result.preemptions == 1
    assert stop.flavors("low")["cpu"] == "second", "the victim comes back in the other flavor"
    objs[2]["spec"]["flavorFungibility"] = {"whenCanPreempt": "TryNextFlavor"}
    cont = run(objs)
    assert cont.flavors("high")["cpu"] == "second"
    assert cont.result.preemptions == 0


def test_flavor_scan_resumes_after_the_last_tried_flavor() -> None:
    from manager.engine.flavors import FlavorAssigner, LastAssignment

    outcome = run([*fungibility_setup(None), workload("w", "q", {"cpu": "2"})], cycles=0)
    cache = outcome.simulation.cache
    cq = cache.cluster_queues["cq"]
    (wl,) = outcome.simulation.workloads
    fresh = FlavorAssigner(cache, cq, wl, oracle=lambda *a: ("NoCandidates", 0), fair_sharing=False).assign()
    assert fresh.pod_sets[0].flavors["cpu"].name == "first"
    assert fresh.last.pending_flavors(), "the scan stopped before the last flavor"
    resumed = FlavorAssigner(
        cache,
        cq,
        wl,
        oracle=lambda *a: ("NoCandidates", 0),
        fair_sharing=False,
        last=LastAssignment([{"cpu": 0}], cq.generation, 0, wl.scheduling_hash),
    ).assign()
    assert resumed.pod_sets[0].flavors["cpu"].name == "second"
    assert not resumed.last.pending_flavors()


@pytest.mark.parametrize(
    ("team_a_quota", "team_b_quota", "a_request", "b_request", "cohort_milli_cpu"),
    [
        (4, 0, "2", "2", 4000),  # team-b borrows the half team-a leaves
        (2, 2, "3", "1", 4000),  # team-b's head fits within nominal and goes first; team-a borrows the rest
        (3, 3, "3", "3", 6000),  # each fills its own nominal quota
        ("1500m", "500m", "1", "1", 2000),
    ],
)
def test_heads_that_together_fill_the_quota_exactly_are_admitted_in_one_cycle(
    team_a_quota: object, team_b_quota: object, a_request: str, b_request: str, cohort_milli_cpu: int
) -> None:
    # Kueue charges an admission once; charging it again for the rest of the cycle would turn the
    # second head away with "no longer fits" although it fits beside the first.
    objs = two_teams(a=team_a_quota, b=team_b_quota) + [
        workload("a1", "a", {"cpu": a_request}, namespace="team-a", created=0),
        workload("b1", "b", {"cpu": b_request}, namespace="team-b", created=1),
    ]
    outcome = run(objs, cycles=1)
    assert outcome.admitted() == ["a1", "b1"]
    used = outcome.usage("team-a-cq", "default-flavor", "cpu") + outcome.usage("team-b-cq", "default-flavor", "cpu")
    assert used == cohort_milli_cpu, "each admission is charged once, also after the cycle"
