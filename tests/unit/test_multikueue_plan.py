"""Kueue's MultiKueue rules, one behaviour per case, on the pure planner."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from manager.api import constants as c
from manager.api.core import Job
from manager.api.kueue import ClusterQueue, LocalQueue, PreemptionGate, PreemptionGateState, ResourceFlavor, Workload
from manager.engine.integrations.registry import BATCH_JOB, enabled
from manager.engine.units import FlavorResource
from manager.engine.workload import DEACTIVATION_TARGET, WorkloadInfo, admission_check_state
from manager.multikueue.rules.capacity import WorkerQuotas
from manager.multikueue.rules.dispatch import DispatchState, incremental_nomination
from manager.multikueue.rules.plan import (
    DISPATCH_ROUND_ANNOTATION,
    ClusterHealth,
    WorkloadInputs,
    admission_check_active,
    component_placement,
    connection_failed_message,
    dispatch_round,
    made_for_this_round,
    may_still_run_on,
    open_gate_patch,
    plan_gc,
    plan_workload,
    remote_copy,
)

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
T0 = "2026-11-21T11:00:00Z"
TIMEOUT = timedelta(minutes=15)
SPEC = {"queueName": "user-queue", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]}


def cond(kind: str, status: str = "True", reason: str = "R", message: str = "", at: str = T0) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


def local(
    *,
    state: str = "Pending",
    quota: bool = True,
    conditions: list[dict[str, Any]] | None = None,
    cluster_name: str | None = None,
    nominated: list[str] | None = None,
    other_checks: list[dict[str, Any]] | None = None,
    retry_count: int | None = None,
    spec: dict[str, Any] | None = None,
) -> Workload:
    status: dict[str, Any] = {
        "admissionChecks": [
            {"name": "mk", "state": state, "message": "", "lastTransitionTime": T0, **({"retryCount": retry_count} if retry_count else {})}
        ]
        + (other_checks or []),
        "conditions": ([cond(c.QUOTA_RESERVED)] if quota else []) + (conditions or []),
    }
    if quota:
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]}
    if cluster_name:
        status["clusterName"] = cluster_name
    if nominated:
        status["nominatedClusterNames"] = nominated
    return Workload.model_validate(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "wl", "namespace": "ns"},
            "spec": spec or SPEC,
            "status": status,
        }
    )


ONE_CPU = {
    "queueName": "user-queue",
    "podSets": [
        {"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}
    ],
}


def quotas(cpu: int, *, used: int = 0) -> WorkerQuotas:
    """A worker with one ClusterQueue `cq` of `cpu` cpus (`used` of them reserved), serving ns/user-queue."""
    v = "kueue.x-k8s.io/v1beta2"
    resources = [{"name": "cpu", "nominalQuota": cpu}]
    reservation = [{"name": "default", "resources": [{"name": "cpu", "total": str(used), "borrowed": "0"}]}]
    return WorkerQuotas(
        flavors=[ResourceFlavor.model_validate({"apiVersion": v, "kind": "ResourceFlavor", "metadata": {"name": "default"}, "spec": {}})],
        cluster_queues=[
            ClusterQueue.model_validate(
                {
                    "apiVersion": v,
                    "kind": "ClusterQueue",
                    "metadata": {"name": "cq"},
                    "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": resources}]}]},
                    "status": {"flavorsReservation": reservation},
                }
            )
        ],
        local_queues=[
            LocalQueue.model_validate(
                {
                    "apiVersion": v,
                    "kind": "LocalQueue",
                    "metadata": {"name": "user-queue", "namespace": "ns"},
                    "spec": {"clusterQueue": "cq"},
                }
            )
        ],
    )


def remote(*conditions: dict[str, Any], spec: dict[str, Any] | None = None, round_of: Workload | None = None) -> Workload:
    annotations = {DISPATCH_ROUND_ANNOTATION: dispatch_round(round_of, admission_check_state(round_of, "mk"))} if round_of else None
    meta: dict[str, Any] = {"name": "wl", "namespace": "ns"}
    if annotations:
        meta["annotations"] = annotations
    return Workload.model_validate(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": meta,
            "spec": spec or SPEC,
            "status": {"conditions": list(conditions)},
        }
    )


def up(*names: str) -> list[ClusterHealth]:
    return [ClusterHealth(name, True) for name in names]


@dataclass(frozen=True)
class FakeWorkers:
    """The workers as the dispatch rules read them: their queues, and the refusal's answer."""

    queues: dict[str, WorkerQuotas] = field(default_factory=dict)
    never: str | None = None
    sent: dict[str, list[tuple[str, dict[FlavorResource, int]]]] = field(default_factory=dict)  # in flight there

    def quotas(self, worker: str) -> WorkerQuotas | None:
        return self.queues.get(worker)

    def in_flight(self, worker: str) -> list[tuple[str, dict[FlavorResource, int]]]:
        return self.sent.get(worker, [])

    def reserved(self, worker: str) -> list[tuple[str, dict[FlavorResource, int]]]:
        return []

    def never_fits(self, info: WorkloadInfo) -> str | None:
        return self.never


def inputs(
    wl: Workload,
    clusters: list[ClusterHealth],
    remotes: dict[str, Workload] | None = None,
    *,
    never_fits: str = "",
    blocked: dict[str, str] | None = None,
    problems: dict[str, str] | None = None,
    **kw: Any,
) -> WorkloadInputs:
    kw.setdefault("dispatch", DispatchState(blocked=blocked or {}, problems=problems or {}))
    kw.setdefault("workers", FakeWorkers(never=never_fits or None))
    return WorkloadInputs(local=wl, check_name="mk", clusters=clusters, remotes=remotes or {}, now=NOW, worker_lost_timeout=TIMEOUT, **kw)


# --- nomination and dispatch -------------------------------------------------------------------------------
def test_all_at_once_nominates_every_connected_cluster_and_creates_the_copies() -> None:
    plan = plan_workload(inputs(local(), [*up("w2", "w1"), ClusterHealth("w3", False, NOW)]))
    assert plan.nominate == ["w1", "w2"]
    assert plan.create == ["w1", "w2"]
    assert plan.check is None


def test_nothing_is_dispatched_without_quota_and_copies_are_deleted() -> None:
    plan = plan_workload(inputs(local(quota=False), up("w1"), {"w1": remote()}))
    assert plan.delete == ["w1"] and plan.create == [] and plan.nominate is None


def test_dispatch_waits_for_the_other_checks_to_be_ready() -> None:
    other = [{"name": "prov", "state": "Pending", "message": "", "lastTransitionTime": T0}]
    assert plan_workload(inputs(local(other_checks=other), up("w1"))).create == []


def test_incremental_dispatch_copies_only_to_the_nominated_clusters() -> None:
    wl = local(nominated=["w1"])
    in_round = DispatchState(round_started=NOW - timedelta(minutes=1))
    plan = plan_workload(inputs(wl, up("w1", "w2"), {"w2": remote(round_of=wl)}, dispatcher=c.DISPATCHER_INCREMENTAL, dispatch=in_round))
    assert plan.create == ["w1"] and plan.delete == ["w2"] and plan.nominate is None


@pytest.mark.parametrize(
    ("nominated", "started", "expected"),
    [
        ([], None, ["a", "b"]),  # the first round: the first step, in the config's order
        (["a", "b"], NOW - timedelta(minutes=1), None),  # the round is not over
        (["a", "b"], NOW - timedelta(minutes=5), ["a", "b", "c"]),  # next round: the next step
        (["a", "b", "c"], NOW - timedelta(minutes=6), None),  # nothing left to add
    ],
)
def test_the_incremental_dispatcher_widens_by_one_step_per_round(nominated: list[str], started: datetime | None, expected: Any) -> None:
    assert incremental_nomination(config_clusters=["a", "b", "c"], nominated=nominated, step=2, round_started=started, now=NOW) == expected


# --- the winner --------------------------------------------------------------------------------------------
def test_the_earliest_admitted_copy_wins_and_the_others_are_deleted() -> None:
    wl = local()
    remotes = {
        "w1": remote(cond(c.ADMITTED, at="2026-11-21T11:30:05Z"), round_of=wl),
        "w2": remote(cond(c.ADMITTED, at="2026-11-21T11:30:01Z"), round_of=wl),
        "w3": remote(cond(c.QUOTA_RESERVED, "False", "Pending"), round_of=wl),
    }
    plan = plan_workload(inputs(wl, up("w1", "w2", "w3"), remotes))
    assert plan.delete == ["w1", "w3"]
    assert plan.sync_job == "w2"
    assert plan.check is not None
    assert (plan.check.state, plan.check.message, plan.check.cluster_name) == ("Ready", 'The workload was admitted on "w2"', "w2")
    assert plan.check.clear_nominated and plan.admitted_on == "w2"
    assert plan.requeue_after == TIMEOUT.total_seconds()


@pytest.mark.parametrize(
    ("other_state", "already_admitted", "expected"),
    [
        (None, False, ("True", "Admitted", "The workload is admitted")),  # the only check: Ready admits it
        ("Ready", False, ("True", "Admitted", "The workload is admitted")),  # every other check is Ready too
        ("Pending", False, None),  # another check went back to Pending: the engine keeps Admitted False
        (None, True, None),  # already Admitted: nothing to write
    ],
)
def test_the_ready_write_carries_admitted_when_it_admits_the_workload(
    other_state: str | None, already_admitted: bool, expected: tuple[str, str, str] | None
) -> None:
    other = [{"name": "prov", "state": other_state, "message": "", "lastTransitionTime": T0}] if other_state else None
    wl = local(other_checks=other, conditions=[cond(c.ADMITTED, reason="Admitted")] if already_admitted else None)
    plan = plan_workload(inputs(wl, up("w1"), {"w1": remote(cond(c.ADMITTED), round_of=wl)}))
    assert plan.check is not None and plan.check.state == "Ready"
    assert plan.check.admitted == expected


def test_a_recorded_winner_keeps_winning_over_a_copy_admitted_in_the_same_second() -> None:
    """Two copies admitted in the same second tie, and the tie goes to the first name. Once w2
    is recorded, a later pass that still sees w1's copy must not move the Job to w1."""
    wl = local(state="Ready", cluster_name="w2")
    same_second = "2026-11-21T11:30:01Z"
    remotes = {"w1": remote(cond(c.ADMITTED, at=same_second), round_of=wl), "w2": remote(cond(c.ADMITTED, at=same_second), round_of=wl)}
    plan = plan_workload(inputs(wl, up("w1", "w2"), remotes))
    assert plan.sync_job == "w2" and plan.delete == ["w1"] and plan.check is None
    # Before anything is recorded, the same copies make w1 the winner (Kueue's tie-break).
    first = plan_workload(inputs(local(), up("w1", "w2"), remotes))
    assert first.sync_job == "w1" and first.check is not None and first.check.cluster_name == "w1"


def test_while_the_recorded_winner_is_unreachable_another_admitted_copy_never_starts_the_job() -> None:
    """w2 was cut off when w1 won, kept its copy and admitted it; now w1 is unreachable."""
    wl = local(state="Ready", cluster_name="w1")
    clusters = [ClusterHealth("w1", False, NOW - timedelta(minutes=1)), *up("w2")]
    plan = plan_workload(inputs(wl, clusters, {"w2": remote(cond(c.ADMITTED), round_of=wl)}))
    assert plan.sync_job is None and not plan.create_job and plan.check is None
    assert plan.requeue_after == (TIMEOUT - timedelta(minutes=1)).total_seconds()
    # Past workerLostTimeout the check is retried (and the Workload dispatched again from scratch).
    lost = [ClusterHealth("w1", False, NOW - TIMEOUT), *up("w2")]
    retried = plan_workload(inputs(wl, lost, {"w2": remote(cond(c.ADMITTED), round_of=wl)}))
    assert retried.sync_job is None and retried.check is not None and retried.check.state == "Retry"


def test_quota_reserved_on_a_worker_is_not_admitted_there() -> None:
    wl = local()
    plan = plan_workload(inputs(wl, up("w1"), {"w1": remote(cond(c.QUOTA_RESERVED), round_of=wl)}))
    assert plan.sync_job is None and plan.check is None


def test_an_admitted_workload_keeps_syncing_without_rewriting_its_check() -> None:
    wl = local(state="Ready", cluster_name="w1")
    plan = plan_workload(inputs(wl, up("w1"), {"w1": remote(cond(c.ADMITTED), round_of=wl)}))
    assert plan.sync_job == "w1" and plan.check is None


def test_a_copy_from_an_earlier_round_never_wins_and_is_deleted() -> None:
    earlier = local(retry_count=None)
    now_round = local(retry_count=1)
    remotes = {
        "w1": remote(cond(c.ADMITTED, at="2026-11-21T11:00:00Z"), round_of=earlier),
        "w2": remote(cond(c.ADMITTED), round_of=now_round),
    }
    plan = plan_workload(inputs(now_round, up("w1", "w2"), remotes))
    assert plan.delete == ["w1"] and plan.sync_job == "w2"


def test_an_eviction_on_the_manager_deactivates_the_running_copy_even_though_it_reset_the_retry_count() -> None:
    # Dispatched after one retry; the manager then preempts it: Kueue's eviction resets the
    # Ready check to Pending without a retry count while the reservation still holds.
    running = local(state="Ready", cluster_name="w1", retry_count=1)
    evicted = local(state="Pending", retry_count=None, conditions=[cond(c.EVICTED, reason="Preempted", message="Preempted")])
    plan = plan_workload(inputs(evicted, up("w1"), {"w1": remote(cond(c.ADMITTED), round_of=running)}))
    assert plan.delete == [] and plan.deactivate == ("w1", "Evicted on manager: Preempted")


@pytest.mark.parametrize(
    ("copy_round", "reserved_at", "retry_count", "evicted", "current"),
    [
        (None, T0, 0, False, True),  # a copy made by another manager (upstream Kueue) carries no mark
        (f"{T0}/0", T0, 0, False, True),
        (f"{T0}/0", T0, 1, False, False),  # retried and reserved again within the same second
        (f"{T0}/0", "2026-11-21T11:05:00Z", 0, False, False),  # reserved again later
        (f"{T0}/1", T0, 0, True, True),  # a preemption reset the retry count: same reservation
        (f"{T0}/1", T0, 2, True, True),  # a Retry eviction counted one more: same reservation
        (f"{T0}/0", "2026-11-21T11:05:00Z", 0, True, False),  # evicted, but a later reservation
    ],
)
def test_which_copies_belong_to_the_current_reservation(
    copy_round: str | None, reserved_at: str, retry_count: int, evicted: bool, current: bool
) -> None:
    wl = local(retry_count=retry_count, conditions=[cond(c.EVICTED, reason="Preempted")] if evicted else [])
    assert wl.status is not None and wl.status.conditions is not None
    wl.status.conditions[0].last_transition_time = datetime.strptime(reserved_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert made_for_this_round(copy_round, wl, admission_check_state(wl, "mk")) is current


# --- finish, eviction and drift -----------------------------------------------------------------------------
def test_a_remote_finish_finishes_the_manager_workload_with_its_reason() -> None:
    wl = local(state="Ready", cluster_name="w1")
    finished = remote(cond(c.ADMITTED), cond(c.FINISHED, reason="Failed", message="BackoffLimitExceeded"), round_of=wl)
    plan = plan_workload(inputs(wl, up("w1"), {"w1": finished}))
    assert plan.sync_job == "w1" and plan.finish == ("Failed", "BackoffLimitExceeded")


def test_an_out_of_sync_finish_resets_for_redispatch_and_never_finishes() -> None:
    wl = local(state="Ready", cluster_name="w1")
    plan = plan_workload(inputs(wl, up("w1"), {"w1": remote(cond(c.FINISHED, reason="OutOfSync"), round_of=wl)}))
    assert plan.finish is None
    assert plan.check is not None and plan.check.state == "Retry"
    assert (
        plan.check.message
        == 'Remote workload on worker cluster "w1" is out of sync with its user job, resetting for re-dispatch, Previously: "Ready"'
    )
    assert plan.events == [("Warning", plan.check.message)]


def test_a_finished_manager_workload_deletes_every_copy() -> None:
    plan = plan_workload(inputs(local(state="Ready", conditions=[cond(c.FINISHED)]), up("w1", "w2"), {"w1": remote(), "w2": remote()}))
    assert plan.delete == ["w1", "w2"]


def test_eviction_on_the_worker_means_retry() -> None:
    wl = local(state="Ready", cluster_name="w1")
    plan = plan_workload(inputs(wl, up("w1"), {"w1": remote(cond(c.EVICTED, reason="Preempted"), round_of=wl)}))
    assert plan.check is not None and plan.check.state == "Retry"
    assert plan.check.message == 'Workload evicted on worker cluster: "w1", resetting for re-admission. Previously: "Ready"'
    assert plan.retried_on == "w1"


def test_eviction_on_the_manager_deactivates_the_admitted_copy() -> None:
    evicted = cond(c.EVICTED, reason="Preempted", message="Preempted to accommodate a workload")
    wl = local(state="Pending", conditions=[evicted])
    plan = plan_workload(inputs(wl, up("w1"), {"w1": remote(cond(c.ADMITTED), round_of=wl)}))
    assert plan.deactivate == ("w1", "Evicted on manager: Preempted to accommodate a workload")
    assert plan.sync_job is None and plan.check is None


def test_once_both_sides_are_evicted_the_worker_jobs_stopping_status_is_synced() -> None:
    wl = local(conditions=[cond(c.EVICTED, reason="Preempted")])
    plan = plan_workload(
        inputs(wl, up("w1"), {"w1": remote(cond(c.EVICTED, reason="DeactivatedDueToEvictedOnManagerCluster"), round_of=wl)})
    )
    assert plan.sync_job == "w1" and plan.deactivate is None


def test_an_eviction_also_stops_a_copy_still_admitted_on_a_worker_that_was_cut_off() -> None:
    """Found by the fault suite (watch-410, capacity-aware): worker1 admitted its copy while its
    apiserver restarted, the copy was moved to worker2, and the Workload was then preempted.
    worker2 evicted its copy; worker1's stayed admitted, so the manager kept the quota for it
    (its agent may start the Job) and the Job never ran again. It is asked to stop too."""
    evicted = cond(c.EVICTED, reason="Preempted", message="Preempted")
    wl = local(conditions=[evicted])
    stopped = remote(cond(c.EVICTED, reason="DeactivatedDueToEvictedOnManagerCluster"), round_of=wl)
    cut_off = remote(cond(c.QUOTA_RESERVED), cond(c.ADMITTED), round_of=wl)
    plan = plan_workload(inputs(wl, up("w1", "w2"), {"w1": cut_off, "w2": stopped}, dispatcher=c.DISPATCHER_CAPACITY_AWARE))
    assert plan.deactivate == ("w1", "Evicted on manager: Preempted") and plan.sync_job == "w2"
    asked = remote(cond(c.QUOTA_RESERVED), cond(c.ADMITTED), cond(DEACTIVATION_TARGET, reason="EvictedOnManagerCluster"), round_of=wl)
    plan = plan_workload(inputs(wl, up("w1", "w2"), {"w1": asked, "w2": stopped}, dispatcher=c.DISPATCHER_CAPACITY_AWARE))
    assert plan.deactivate is None and plan.sync_job == "w2"  # asked once; the worker evicts it
    # Once both copies are evicted, the stopping status comes from the worker that holds our
    # Job, not from the copy evicted first (its worker was cut off and has none).
    first = remote(cond(c.EVICTED, reason="DeactivatedDueToEvictedOnManagerCluster", at="2026-11-21T11:00:01Z"), round_of=wl)
    ran = remote(cond(c.EVICTED, reason="DeactivatedDueToEvictedOnManagerCluster", at="2026-11-21T11:00:09Z"), round_of=wl)
    both = {"w1": first, "w2": ran}
    plan = plan_workload(inputs(wl, up("w1", "w2"), both, dispatcher=c.DISPATCHER_CAPACITY_AWARE, remote_jobs=frozenset({"w2"})))
    assert plan.sync_job == "w2" and plan.deactivate is None


def test_a_copy_evicted_on_a_worker_where_a_foreign_job_holds_the_name_speaks_for_nothing() -> None:
    """Its Job is not ours: syncing it would be retried at once, forever, and its eviction
    says nothing of the copy that runs the Workload elsewhere."""
    wl = local(state="Ready", cluster_name="w2")
    foreign = remote(cond(c.EVICTED, reason="Preempted", at="2026-11-21T11:00:01Z"), round_of=wl)
    running = remote(cond(c.QUOTA_RESERVED), cond(c.ADMITTED), round_of=wl)
    plan = plan_workload(inputs(wl, up("w1", "w2"), {"w1": foreign, "w2": running}, blocked={"w1": "a foreign Job"}))
    assert plan.check is None and plan.sync_job == "w2"
    evicted = local(conditions=[cond(c.EVICTED, reason="Preempted", message="Preempted")])
    plan = plan_workload(inputs(evicted, up("w1", "w2"), {"w1": foreign, "w2": running}, blocked={"w1": "a foreign Job"}))
    assert plan.sync_job != "w1" and plan.deactivate == ("w2", "Evicted on manager: Preempted")


def test_a_priority_change_is_forwarded_and_other_drift_deletes_the_copy() -> None:
    wl = local()
    plan = plan_workload(
        inputs(
            wl,
            up("w1", "w2"),
            {"w1": remote(spec={**SPEC, "priority": 5}, round_of=wl), "w2": remote(spec={**SPEC, "queueName": "other"}, round_of=wl)},
        )
    )
    assert plan.update_spec == ["w1"]
    assert "w2" in plan.delete and "w2" in plan.create  # made again from the manager's spec


# --- lost workers ------------------------------------------------------------------------------------------
def test_a_disconnected_admitting_worker_is_waited_for_until_the_timeout() -> None:
    wl = local(state="Ready", cluster_name="w1")
    plan = plan_workload(inputs(wl, [ClusterHealth("w1", False, NOW - timedelta(minutes=10)), *up("w2")]))
    assert plan.check is None and plan.requeue_after == pytest.approx(300)


def test_the_worker_lost_timeout_counts_from_the_first_disconnect() -> None:
    wl = local(state="Ready", cluster_name="w1")
    plan = plan_workload(inputs(wl, [ClusterHealth("w1", False, NOW - timedelta(minutes=16)), *up("w2")]))
    assert plan.check is not None and (plan.check.state, plan.check.message) == ("Retry", 'Admitting remote lost, Previously: "Ready"')


def test_a_deleted_cluster_object_is_lost_from_when_it_went() -> None:
    wl = local(state="Ready", cluster_name="gone")
    fresh = plan_workload(inputs(wl, [ClusterHealth("gone", False, NOW)]))
    old = plan_workload(inputs(wl, [ClusterHealth("gone", False, NOW - TIMEOUT)]))
    assert fresh.check is None and old.check is not None and old.check.state == "Retry"


def test_a_copy_deleted_on_a_reachable_worker_means_retry() -> None:
    plan = plan_workload(inputs(local(state="Ready", cluster_name="w1"), up("w1")))
    assert plan.check is not None and plan.check.message == 'Admitting remote no longer exists, Previously: "Ready"'


def test_the_manager_job_of_a_lost_worker_stops_counting_its_pods_after_the_timeout() -> None:
    wl = local(conditions=[cond(c.EVICTED, reason="AdmissionCheck")])
    lost = [ClusterHealth("w1", False, NOW - TIMEOUT - timedelta(seconds=1)), *up("w2")]
    assert plan_workload(inputs(wl, lost, local_job_holds_quota=True)).stop_local_job
    recent = [ClusterHealth("w1", False, NOW - timedelta(seconds=30)), *up("w2")]
    assert not plan_workload(inputs(wl, recent, local_job_holds_quota=True)).stop_local_job


@pytest.mark.parametrize(
    ("clusters", "remote_jobs", "stops"),
    [
        (up("w1", "w2"), frozenset(), False),  # every worker connected: the copy may just not be cached yet
        ([ClusterHealth("w1", False, NOW - TIMEOUT), *up("w2")], frozenset(), True),
        ([ClusterHealth("w1", False, NOW - TIMEOUT), *up("w2")], frozenset({"w2"}), False),  # a connected worker has our Job
        ([ClusterHealth("w1", False, NOW - TIMEOUT), ClusterHealth("w2", False, NOW)], frozenset(), False),  # w2 lost just now
        ([ClusterHealth("w1", False, NOW - TIMEOUT), ClusterHealth("w2", False, NOW - TIMEOUT)], frozenset(), True),
    ],
)
def test_the_manager_job_stops_counting_pods_only_when_only_lost_workers_may_run_it(
    clusters: list[ClusterHealth], remote_jobs: frozenset[str], stops: bool
) -> None:
    wl = local(conditions=[cond(c.EVICTED, reason="Preempted")])
    assert plan_workload(inputs(wl, clusters, local_job_holds_quota=True, remote_jobs=remote_jobs)).stop_local_job is stops


def test_a_deleted_manager_workload_deletes_its_copies_on_reachable_workers() -> None:
    plan = plan_workload(inputs(local(), [*up("w1"), ClusterHealth("w2", False, NOW)], {"w1": remote()}, deleted=True))
    assert plan.delete == ["w1"]


# --- what cannot be handed over, and what is in the way ----------------------------------------------------
def test_an_owner_kind_without_an_adapter_is_rejected() -> None:
    plan = plan_workload(inputs(local(), up("w1"), owner_kind="kubeflow.org/v2beta1, Kind=MPIJob"))
    assert plan.check is not None and plan.check.state == "Rejected"
    assert plan.check.message == 'No multikueue adapter found for owner kind "kubeflow.org/v2beta1, Kind=MPIJob", Previously: "Pending"'


@pytest.mark.parametrize(("frameworks", "dispatched"), [(["batch/job"], False), (["batch/job", "jobset.x-k8s.io/jobset"], True)])
def test_a_jobset_is_dispatched_only_when_its_integration_is_enabled(frameworks: list[str], dispatched: bool) -> None:
    kinds = enabled(frameworks).multikueue_kinds
    plan = plan_workload(inputs(local(), up("w1"), owner_kind="jobset.x-k8s.io/v1alpha2, Kind=JobSet", multikueue_kinds=kinds))
    assert (plan.create == ["w1"]) is dispatched
    assert (plan.check is not None and plan.check.state == "Rejected") is not dispatched


def test_a_job_not_managed_by_multikueue_is_rejected() -> None:
    plan = plan_workload(inputs(local(), up("w1"), owner_managed_by="kubernetes.io/job-controller"))
    assert plan.check is not None and plan.check.message == (
        'The owner is not managed by Kueue: Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" not '
        '"kubernetes.io/job-controller", Previously: "Pending"'
    )


def test_an_mpijob_not_managed_by_multikueue_is_rejected_naming_its_run_policys_field() -> None:
    mpijob = "kubeflow.org/v2beta1, Kind=MPIJob"
    plan = plan_workload(
        inputs(
            local(),
            up("w1"),
            owner_kind=mpijob,
            multikueue_kinds=frozenset({mpijob}),
            owner_managed_by=None,
            owner_managed_by_field="spec.runPolicy.managedBy",
        )
    )
    assert plan.check is not None and plan.check.message == (
        'The owner is not managed by Kueue: Expecting spec.runPolicy.managedBy to be "kueue.x-k8s.io/multikueue" not "", '
        'Previously: "Pending"'
    )


def test_problems_on_workers_are_said_on_the_manager_check() -> None:
    wl = local()
    missing_lq = remote(cond(c.QUOTA_RESERVED, "False", "Misconfigured", "LocalQueue user-queue doesn't exist"), round_of=wl)
    plan = plan_workload(inputs(wl, up("w1", "w2"), {"w2": missing_lq}, problems={"w1": 'namespace "ns" not found'}))
    assert plan.check is not None and plan.check.state == "Pending"
    assert plan.check.message == (
        'The workload cannot be admitted on some worker clusters: w1: namespace "ns" not found; w2: LocalQueue user-queue doesn\'t exist'
    )


def test_a_worker_with_a_foreign_job_of_the_same_name_is_skipped_and_said() -> None:
    wl = local()
    remotes = {"w1": remote(cond(c.ADMITTED, at="2026-11-21T11:00:00Z"), round_of=wl), "w2": remote(cond(c.ADMITTED), round_of=wl)}
    plan = plan_workload(inputs(wl, up("w1", "w2"), remotes, blocked={"w1": "a Job that is not ours"}))
    assert plan.sync_job == "w2" and plan.delete == ["w1"]


def test_the_capacity_aware_reason_and_a_workers_problem_share_one_stable_message() -> None:
    """Two rules must not take turns at the check's message: each write would wake the next
    pass, and the two would write for ever (seen: hundreds of writes a second)."""
    # The capacity-aware dispatcher's reason: w2 could never give it the cpu (w1 is blocked).
    waiting = FakeWorkers(queues={"w2": quotas(0)})
    blocked = {"w1": "a Job that is not ours"}
    first = plan_workload(
        inputs(local(spec=ONE_CPU), up("w1", "w2"), dispatcher=c.DISPATCHER_CAPACITY_AWARE, workers=waiting, blocked=blocked)
    )
    assert first.check is not None
    expected = (
        "needs cpu 1; largest worker offers cpu 0 (w2); The workload cannot be admitted on some worker clusters: w1: a Job that is not ours"
    )
    assert first.check.message == expected
    wl = local(spec=ONE_CPU)
    assert wl.status is not None and wl.status.admission_checks
    wl.status.admission_checks[0].message = expected
    again = plan_workload(inputs(wl, up("w1", "w2"), dispatcher=c.DISPATCHER_CAPACITY_AWARE, workers=waiting, blocked=blocked))
    assert again.check is None


# --- copies, GC and conditions -----------------------------------------------------------------------------
NEVER = "no worker can ever admit it: needs cpu 12; largest worker offers cpu 8 (w1), cpu 6 (w2)"


@pytest.mark.parametrize("dispatcher", [c.DISPATCHER_ALL_AT_ONCE, c.DISPATCHER_INCREMENTAL, c.DISPATCHER_CAPACITY_AWARE])
def test_a_workload_no_worker_could_ever_admit_gives_its_quota_back_with_every_dispatcher(dispatcher: str) -> None:
    wl = local(nominated=["w1", "w2"])
    copies = {"w1": remote(round_of=wl), "w2": remote(cond(c.QUOTA_RESERVED, "False"), round_of=wl)}
    plan = plan_workload(inputs(wl, up("w1", "w2"), copies, dispatcher=dispatcher, never_fits=NEVER))
    assert plan.check is not None and (plan.check.state, plan.check.message) == ("Retry", NEVER)
    assert plan.delete == ["w1", "w2"] and plan.create == [] and plan.nominate is None
    assert plan.events == [("Warning", NEVER)]


def test_a_copy_a_worker_reserved_quota_for_outweighs_the_refusal() -> None:
    """The worker's queues as the manager saw them were stale: the copy fits there after all."""
    wl = local(nominated=["w1"])
    plan = plan_workload(inputs(wl, up("w1"), {"w1": remote(cond(c.QUOTA_RESERVED), round_of=wl)}, never_fits=NEVER))
    assert plan.check is None and plan.delete == []


def test_a_copy_has_our_origin_and_the_spec_and_drops_the_job_uid() -> None:
    wl = local()
    wl.metadata.labels = {c.JOB_UID_LABEL: "123", "team": "a"}
    copy = remote_copy(wl, origin="east", check_name="mk")
    assert copy["metadata"]["labels"] == {"team": "a", c.MULTIKUEUE_ORIGIN_LABEL: "east"}
    assert copy["spec"] == SPEC and "status" not in copy and "ownerReferences" not in copy["metadata"]


def test_gc_collects_copies_whose_manager_workload_is_gone_or_going() -> None:
    assert plan_gc(["ns/a", "ns/b", "ns/c"], local={"ns/a": False, "ns/b": True}) == ["ns/b", "ns/c"]


@pytest.mark.parametrize(
    ("config", "clusters", "expected"),
    [
        (None, {}, ("False", "BadConfig", 'Cannot load the AdmissionChecks parameters: MultiKueueConfig.kueue.x-k8s.io "cfg" not found')),
        (["a", "b"], {"a": True, "b": True}, ("True", "Active", "The admission check is active")),
        (["a", "b"], {"a": True}, ("True", "SomeActiveClusters", "Missing clusters: [b]")),
        (["a", "b"], {"a": False, "b": True}, ("True", "SomeActiveClusters", "Inactive clusters: [a]")),
        (["a", "b"], {"a": False}, ("False", "NoUsableClusters", "Missing clusters: [b], Inactive clusters: [a]")),
    ],
)
def test_the_admission_check_is_active_as_kueue_says(config: Any, clusters: dict[str, bool], expected: tuple[str, str, str]) -> None:
    assert admission_check_active(config_name="cfg", config_clusters=config, clusters=clusters) == expected


def test_a_connection_failure_names_its_attempts_and_the_next_one() -> None:
    message = connection_failed_message("dial tcp: refused", attempts=3, next_attempt=NOW)
    assert message == "dial tcp: refused; connection attempts: 3, next connection attempt: 2026-11-21T12:00:00Z"


def test_a_worker_whose_admission_agent_is_down_gets_no_new_copy_and_keeps_the_one_it_admitted() -> None:
    agent_down = ClusterHealth("w2", True, accepts_new=False)
    fresh = plan_workload(inputs(local(), [*up("w1"), agent_down]))
    assert fresh.nominate == ["w1"] and fresh.create == ["w1"]
    wl = local(state="Ready", cluster_name="w2")
    kept = plan_workload(inputs(wl, [*up("w1"), agent_down], {"w2": remote(cond(c.QUOTA_RESERVED), cond(c.ADMITTED), round_of=wl)}))
    assert kept.delete == [] and kept.sync_job == "w2"


@pytest.mark.parametrize(
    ("workload_name", "label"),
    [("job-short-abcde", True), ("job-" + "x" * 62 + "-abcde", False)],  # 73 characters fit no label value
)
def test_the_job_for_a_worker_is_kueues_copy(workload_name: str, label: bool) -> None:
    job = Job.model_validate(
        {
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "labels": {c.QUEUE_NAME_LABEL: "q"}},
            "spec": {
                "managedBy": c.MULTIKUEUE_MANAGED_BY,
                "suspend": True,
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
                "template": {
                    "metadata": {
                        "labels": {"app": "x", "controller-uid": "u", "job-name": "j", "batch.kubernetes.io/controller-uid": "u"}
                        | {"batch.kubernetes.io/job-name": "j"}
                    },
                    "spec": {"containers": [{"name": "c"}]},
                },
            },
        }
    )
    copy = BATCH_JOB.remote_object(job, workload_name=workload_name, origin="east")
    assert copy["metadata"]["annotations"] == {c.PREBUILT_WORKLOAD_ANNOTATION: workload_name}
    want = {c.QUEUE_NAME_LABEL: "q", c.MULTIKUEUE_ORIGIN_LABEL: "east"} | ({c.PREBUILT_WORKLOAD_LABEL: workload_name} if label else {})
    assert copy["metadata"]["labels"] == want
    assert "selector" not in copy["spec"] and "managedBy" not in copy["spec"] and copy["spec"]["suspend"] is True
    assert copy["spec"]["template"]["metadata"]["labels"] == {"app": "x", "batch.kubernetes.io/job-name": "j"}


# --- a finish racing an eviction: a finished Job is never run again ------------------------------------------
PREEMPTED = cond(c.EVICTED, reason="Preempted", message="Preempted")
DONE = cond(c.FINISHED, reason="Succeeded", message="Job finished successfully")


@pytest.mark.parametrize(
    ("case", "manager", "copy", "expected"),
    [
        # the manager preempts it while its Job finishes on the worker
        ("preempted, quota held", dict(conditions=[PREEMPTED]), [cond(c.ADMITTED), DONE], "finish"),
        ("preempted, quota released first", dict(quota=False, conditions=[PREEMPTED]), [cond(c.ADMITTED), DONE], "finish"),
        ("deactivated on the worker, then finished", dict(conditions=[PREEMPTED]), [cond(c.EVICTED, reason="Deactivated"), DONE], "finish"),
        # the worker preempts it while it finishes there, and the manager already retried
        ("evicted on the worker, retried", dict(conditions=[cond(c.EVICTED, reason="AdmissionCheck")]), [cond(c.EVICTED), DONE], "finish"),
        ("released and reserved again", dict(retry_count=1), [cond(c.ADMITTED), DONE], "finish"),  # an earlier round's copy
        ("finished on both sides", dict(state="Ready", conditions=[DONE]), [DONE], "delete"),
        ("out of sync, no quota", dict(quota=False), [cond(c.FINISHED, reason="OutOfSync")], "delete"),
        # not finished: a preemption stops it on its worker, it is not deleted while it runs
        ("preempted, running", dict(conditions=[PREEMPTED]), [cond(c.ADMITTED)], "deactivate"),
        ("preempted, stopped on the worker", dict(conditions=[PREEMPTED]), [cond(c.EVICTED, reason="Deactivated")], "sync"),
        ("released after it stopped", dict(quota=False, conditions=[PREEMPTED]), [cond(c.EVICTED, reason="Deactivated")], "delete"),
    ],
)
def test_a_finish_racing_an_eviction(case: str, manager: dict[str, Any], copy: list[dict[str, Any]], expected: str) -> None:
    wl = local(**manager)
    made_for = local(retry_count=None) if manager.get("retry_count") else wl
    plan = plan_workload(inputs(wl, up("w1"), {"w1": remote(*copy, round_of=made_for)}, local_job_holds_quota=False))
    if expected == "finish":
        assert plan.finish == ("Succeeded", "Job finished successfully") and plan.sync_job == "w1", case
        assert not plan.create_job and plan.delete == [] and plan.deactivate is None, case  # nothing is started or deleted
    elif expected == "delete":
        assert plan.delete == ["w1"] and plan.finish is None, case
    elif expected == "deactivate":
        assert plan.deactivate is not None and plan.delete == [] and plan.finish is None, case
    else:
        assert plan.sync_job == "w1" and not plan.create_job and plan.delete == [] and plan.finish is None, case


def test_only_the_winner_of_a_running_workload_gets_its_job_created() -> None:
    wl = local()
    plan = plan_workload(inputs(wl, up("w1"), {"w1": remote(cond(c.ADMITTED), round_of=wl)}))
    assert plan.sync_job == "w1" and plan.create_job


# --- may the evicted Job still run on a worker? ------------------------------------------------------------------------
def worker_job(suspend: bool, status: dict[str, Any]) -> Job:
    return Job.model_validate(
        {"metadata": {"name": "j", "namespace": "ns"}, "spec": {"suspend": suspend, "completions": 1}, "status": status}
    )


SUSPENDED = {"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]}
LOST_AT = NOW - timedelta(seconds=30)


@pytest.mark.parametrize(
    ("clusters", "jobs", "expected"),
    [
        # The winner stopped its Job: the quota may go back.
        (up("w1", "w2"), {"w1": worker_job(True, SUSPENDED), "w2": None}, None),
        # No Job anywhere (never created, or deleted): nothing can run.
        (up("w1", "w2"), {"w1": None, "w2": None}, None),
        # Still running, or resumed and not yet seen stopped by the worker's Job controller.
        (up("w1", "w2"), {"w1": worker_job(False, {"active": 1})}, "w1"),
        (up("w1"), {"w1": worker_job(True, {"conditions": [{"type": "Suspended", "status": "False", "reason": "JobResumed"}]})}, "w1"),
        # Its pod succeeded as it was being stopped: it finishes, it is never released.
        (up("w1"), {"w1": worker_job(True, {"succeeded": 1, **SUSPENDED})}, "w1"),
        # A Job of an earlier round still going on another connected worker.
        (up("w1", "w2"), {"w1": None, "w2": worker_job(False, {"active": 1})}, "w2"),
        # The admitting worker is lost, for less than workerLostTimeout: its pods may be running.
        ([ClusterHealth("w1", False, LOST_AT), *up("w2")], {"w2": None}, "w1"),
        # ... and past it: its pods count as gone (Kueue's promise).
        ([ClusterHealth("w1", False, NOW - timedelta(minutes=16)), *up("w2")], {"w2": None}, None),
        # A lost worker that did not admit it and had no Job of it running when last seen.
        ([*up("w1"), ClusterHealth("w2", False, LOST_AT)], {"w1": None, "w2": None}, None),
        # The eviction cleared clusterName: a lost worker whose last known Job ran still counts ...
        ([*up("w1"), ClusterHealth("w2", False, LOST_AT)], {"w1": None, "w2": worker_job(False, {"active": 1})}, "w2"),
        # ... until workerLostTimeout.
        ([*up("w1"), ClusterHealth("w2", False, NOW - timedelta(minutes=16))], {"w2": worker_job(False, {"active": 1})}, None),
    ],
)
def test_an_evicted_job_may_still_run_where_a_worker_has_it_unstopped_or_the_admitting_worker_is_lost(
    clusters: list[ClusterHealth], jobs: dict[str, Job | None], expected: str | None
) -> None:
    assert may_still_run_on(admitted_on="w1", clusters=clusters, jobs=jobs, now=NOW, worker_lost_timeout=timedelta(minutes=15)) == expected


@pytest.mark.parametrize(
    ("admitted_copies", "never_seen", "expected"),
    [
        # The eviction cleared clusterName; w2 went away with an admitted copy of it, whose Job
        # was not in the cache yet: its agent may have started the Job since.
        (frozenset({"w2"}), frozenset(), "w2"),
        # A worker this manager has never listed (it restarted while the worker was away).
        (frozenset(), frozenset({"w2"}), "w2"),
        # Known to hold nothing of it.
        (frozenset(), frozenset(), None),
        # w1 is connected, its Job reads stopped, but its copy still holds quota there: its
        # agent may start the Job at any moment.
        (frozenset({"w1"}), frozenset(), "w1"),
    ],
)
def test_a_worker_with_an_admitted_copy_or_never_seen_holds_the_quota(
    admitted_copies: frozenset[str], never_seen: frozenset[str], expected: str | None
) -> None:
    clusters = [*up("w1"), ClusterHealth("w2", False, LOST_AT)]
    found = may_still_run_on(
        admitted_on=None,
        clusters=clusters,
        jobs={"w1": None, "w2": None},
        admitted_copies=admitted_copies,
        never_seen=never_seen,
        now=NOW,
        worker_lost_timeout=timedelta(minutes=15),
    )
    assert found == expected


def test_an_admitted_copy_on_a_worker_whose_agent_is_down_does_not_hold_the_quota() -> None:
    """Nothing there will start the Job: the live read of it decides."""
    clusters = [ClusterHealth("w1", True, accepts_new=False)]
    found = may_still_run_on(
        admitted_on=None,
        clusters=clusters,
        jobs={"w1": worker_job(True, SUSPENDED)},
        admitted_copies=frozenset({"w1"}),
        now=NOW,
        worker_lost_timeout=timedelta(minutes=15),
    )
    assert found is None


# --- the components of one job (a LeaderWorkerSet's groups) ----------------------------------------------------
@pytest.mark.parametrize(
    ("index", "siblings", "expected"),
    [
        (0, {}, (True, "")),
        (0, {"b": (1, ""), "c": (2, "")}, (True, "")),
        (1, {"a": (0, "")}, (False, "")),  # waits for the first
        (1, {"a": (0, "w2")}, (False, "w2")),  # follows it
        (0, {"b": (1, "w1")}, (True, "w1")),  # a sibling already runs somewhere: there
        (2, {"a": (0, "w1"), "b": (1, "w2")}, (False, None)),  # split: never by these rules
    ],
)
def test_components_go_where_the_first_went(index: int, siblings: dict[str, tuple[int, str]], expected: tuple[bool, str | None]) -> None:
    assert component_placement(index, siblings) == expected


def test_a_component_follows_its_siblings_worker_and_the_others_wait_for_the_first() -> None:
    follows = plan_workload(inputs(local(), up("w1", "w2"), component_index=1, siblings={"a": (0, "w2")}))
    assert (follows.nominate, follows.create) == (["w2"], ["w2"])
    waits = plan_workload(inputs(local(), up("w1", "w2"), {"w1": remote()}, component_index=1, siblings={"a": (0, "")}))
    assert (waits.nominate, waits.create, waits.delete) == (None, [], ["w1"])
    assert waits.check is not None and waits.check.message == "waiting for the first Workload of its job to be admitted on a worker cluster"
    first = plan_workload(inputs(local(), up("w1", "w2"), component_index=0, siblings={"b": (1, "")}))
    assert (first.nominate, first.create) == (["w1", "w2"], ["w1", "w2"])  # all at once, as any Workload


# --- workers chosen by selector or by the job (multikueue/selection.py) -------------------------------------
EXCLUDED = "excluded by the job's selector region=eu"


@pytest.mark.parametrize("dispatcher", [c.DISPATCHER_ALL_AT_ONCE, c.DISPATCHER_INCREMENTAL, c.DISPATCHER_CAPACITY_AWARE])
def test_an_excluded_worker_gets_no_copy_with_every_dispatcher(dispatcher: str) -> None:
    workers = FakeWorkers(queues={"w1": quotas(8), "w2": quotas(8)})
    clusters = [ClusterHealth("w1", True, excluded=EXCLUDED), *up("w2")]
    plan = plan_workload(inputs(local(), clusters, dispatcher=dispatcher, workers=workers))
    # (Incremental writes its wider nomination in a pass of its own; copies follow in the next.)
    assert plan.nominate == ["w2"] and plan.create == ([] if dispatcher == c.DISPATCHER_INCREMENTAL else ["w2"]), plan


def test_an_excluded_worker_keeps_the_copy_it_admitted_and_its_job_runs_on() -> None:
    """The restriction changed (a label moved) after the worker admitted it: nothing running is stopped."""
    wl = local(state="Ready", cluster_name="w1")
    clusters = [ClusterHealth("w1", True, excluded=EXCLUDED), *up("w2")]
    kept = plan_workload(inputs(wl, clusters, {"w1": remote(cond(c.QUOTA_RESERVED), cond(c.ADMITTED), round_of=wl)}))
    assert kept.delete == [] and kept.sync_job == "w1"


# --- orchestrated preemption (Kueue's MultiKueueOrchestratedPreemption) ----------------------------------
def gate_state(position: str, at: str = T0) -> dict[str, Any]:
    return {"name": c.MULTIKUEUE_PREEMPTION_GATE, "position": position, "lastTransitionTime": at}


def copy_of(wl: Workload, *conditions: dict[str, Any], gate: dict[str, Any] | None = None) -> Workload:
    made = remote(*conditions, round_of=wl)
    made.spec.preemption_gates = [PreemptionGate(name=c.MULTIKUEUE_PREEMPTION_GATE)]
    if gate is not None:
        assert made.status is not None
        made.status.preemption_gates = [PreemptionGateState.model_validate(gate)]
    return made


def blocked_since(at: str) -> dict[str, Any]:
    return cond(c.BLOCKED_ON_PREEMPTION_GATES, reason="PreemptionGated", at=at)


@pytest.mark.parametrize(
    "dispatcher", [c.DISPATCHER_ALL_AT_ONCE, c.DISPATCHER_INCREMENTAL, c.DISPATCHER_CAPACITY_AWARE], ids=["all", "incremental", "capacity"]
)
def test_with_orchestrated_preemption_every_dispatcher_gates_its_copies(dispatcher: str) -> None:
    wl = local(nominated=["w1", "w2"] if dispatcher == c.DISPATCHER_INCREMENTAL else None, spec=ONE_CPU)
    workers = FakeWorkers(queues={"w1": quotas(4), "w2": quotas(4)})
    in_round = DispatchState(round_started=NOW - timedelta(seconds=10))
    plan = plan_workload(
        inputs(wl, up("w1", "w2"), dispatcher=dispatcher, workers=workers, dispatch=in_round, orchestrated_preemption=True)
    )
    assert plan.create and plan.gate_copies
    made = remote_copy(wl, origin="o", check_name="mk", gated=plan.gate_copies)
    assert made["spec"]["preemptionGates"] == [{"name": "kueue.x-k8s.io/multikueue"}]
    assert "preemptionGates" not in remote_copy(wl, origin="o", check_name="mk")["spec"]


def test_without_the_gate_copies_carry_no_preemption_gate_and_none_is_opened() -> None:
    wl = local()
    plan = plan_workload(inputs(wl, up("w1", "w2"), {"w1": copy_of(wl, blocked_since(T0))}))
    assert not plan.gate_copies and plan.open_gate is None


def test_the_copy_blocked_longest_is_let_preempt_and_the_others_wait() -> None:
    wl = local()
    remotes = {
        "w1": copy_of(wl, blocked_since("2026-11-21T11:40:02Z")),
        "w2": copy_of(wl, blocked_since("2026-11-21T11:40:01Z")),
        "w3": copy_of(wl),  # fits without preempting, or has not tried yet
    }
    plan = plan_workload(inputs(wl, up("w1", "w2", "w3"), remotes, orchestrated_preemption=True))
    assert plan.open_gate == "w2"
    assert plan.requeue_after == timedelta(minutes=5).total_seconds()
    assert plan.delete == [] and plan.check is None


@pytest.mark.parametrize(
    ("opened_at", "expected", "requeue"),
    [
        ("2026-11-21T11:58:00Z", None, 180.0),  # w1 preempts since 2 minutes: its 5 minutes are not up
        ("2026-11-21T11:54:59Z", "w2", 300.0),  # w1 had its 5 minutes: w2 may preempt too
    ],
)
def test_one_worker_preempts_at_a_time_for_kueues_five_minutes(opened_at: str, expected: str | None, requeue: float) -> None:
    wl = local()
    remotes = {
        "w1": copy_of(wl, blocked_since("2026-11-21T11:50:00Z"), gate=gate_state("Open", opened_at)),
        "w2": copy_of(wl, blocked_since("2026-11-21T11:51:00Z")),
    }
    plan = plan_workload(inputs(wl, up("w1", "w2"), remotes, orchestrated_preemption=True))
    assert plan.open_gate == expected
    assert plan.requeue_after == requeue


def test_the_first_admitted_copy_wins_and_no_gate_is_opened() -> None:
    wl = local()
    remotes = {
        "w1": copy_of(wl, cond(c.ADMITTED), gate=gate_state("Open")),
        "w2": copy_of(wl, blocked_since(T0)),
    }
    plan = plan_workload(inputs(wl, up("w1", "w2"), remotes, orchestrated_preemption=True))
    assert plan.open_gate is None and plan.delete == ["w2"]
    assert plan.check is not None and plan.check.cluster_name == "w1"


def test_a_copy_on_an_excluded_or_blocked_worker_is_never_opened() -> None:
    wl = local()
    remotes = {"w1": copy_of(wl, blocked_since("2026-11-21T11:40:00Z")), "w2": copy_of(wl, blocked_since("2026-11-21T11:41:00Z"))}
    plan = plan_workload(inputs(wl, up("w1", "w2"), remotes, blocked={"w1": "a foreign Job holds the name"}, orchestrated_preemption=True))
    assert plan.open_gate == "w2"


def test_opening_a_gate_writes_its_state_and_keeps_the_others() -> None:
    wl = local()
    made = copy_of(wl, blocked_since(T0))
    assert made.status is not None
    made.metadata.resource_version = "42"
    made.status.preemption_gates = [PreemptionGateState(name="example.com/other", position="Closed")]
    patch = open_gate_patch(made, now=NOW)
    assert patch["metadata"]["resourceVersion"] == "42"
    assert patch["status"]["preemptionGates"] == [
        {"name": "example.com/other", "position": "Closed"},
        {"name": c.MULTIKUEUE_PREEMPTION_GATE, "position": "Open", "lastTransitionTime": "2026-11-21T12:00:00Z"},
    ]
