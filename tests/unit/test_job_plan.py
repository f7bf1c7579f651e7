"""Kueue's job reconciler, one behaviour per case, on the pure `plan_job`, for each job kind."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.jobset import JobSet
from manager.api.meta import Resource
from manager.engine.integrations.adapter import JobAdapter
from manager.engine.integrations.plan import (
    CreateWorkload,
    DeleteWorkload,
    JobInputs,
    JobPlan,
    PatchJob,
    PatchWorkload,
    Warn,
    plan_job,
)
from manager.engine.integrations.registry import BATCH_JOB, JOBSET

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
T0 = "2026-11-21T11:00:00Z"
POD = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}


def cond(kind: str, status: str = "True", reason: str = "R", message: str = "m") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": T0}


def batch_job(*, suspend: bool | None = True, labels: dict[str, str] | None = None, status: dict[str, Any] | None = None) -> Job:
    return Job.model_validate(
        {
            "metadata": {"name": "j", "namespace": "ns", "uid": "uid-j", "labels": {c.QUEUE_NAME_LABEL: "q"} if labels is None else labels},
            "spec": {"suspend": suspend, "parallelism": 2, "template": {"spec": POD}},
            "status": status or {},
        }
    )


def jobset(*, suspend: bool | None = True, labels: dict[str, str] | None = None, status: dict[str, Any] | None = None) -> JobSet:
    return JobSet.model_validate(
        {
            "metadata": {
                "name": "js",
                "namespace": "ns",
                "uid": "uid-js",
                "resourceVersion": "7",
                "labels": {c.QUEUE_NAME_LABEL: "q"} if labels is None else labels,
            },
            "spec": {
                "suspend": suspend,
                "replicatedJobs": [
                    {"name": "leader", "replicas": 1, "template": {"spec": {"template": {"spec": POD}}}},
                    {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "template": {"spec": POD}}}},
                ],
            },
            "status": status or {},
        }
    )


KINDS: dict[str, tuple[JobAdapter[Any], Any]] = {"Job": (BATCH_JOB, batch_job), "JobSet": (JOBSET, jobset)}


def workload(
    adapter: JobAdapter[Any],
    job: Resource,
    *,
    admitted: bool = False,
    reserved: bool | None = None,
    conditions: list[dict[str, Any]] | None = None,
    owned: bool = True,
) -> kueue.Workload:
    pod_sets = [pod_set.to_dict() for pod_set in adapter.pod_sets(job)]
    reserved = admitted if reserved is None else reserved
    status: dict[str, Any] = {"conditions": list(conditions or [])}
    if reserved:
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [{"name": ps["name"], "flavors": {"cpu": "default"}, "count": ps["count"]} for ps in pod_sets],
        }
        status["conditions"].append(cond(c.QUOTA_RESERVED))
    if admitted:
        status["conditions"].append(cond(c.ADMITTED))
    refs = [adapter.owner_reference(job).to_dict()] if owned else []
    return kueue.Workload.model_validate(
        {
            "metadata": {"name": "wl", "namespace": "ns", "resourceVersion": "3", "ownerReferences": refs},
            "spec": {"queueName": "q", "podSets": pod_sets},
            "status": status,
        }
    )


def plan(adapter: JobAdapter[Any], job: Resource | None, wl: kueue.Workload | None, **extra: Any) -> JobPlan:
    return plan_job(JobInputs(adapter, job, wl, NOW, **extra))


def kinds(result: JobPlan) -> list[str]:
    return [type(action).__name__ for action in result.actions]


def status_of(result: JobPlan) -> dict[str, Any]:
    [patch] = [action for action in result.actions if isinstance(action, PatchWorkload) and action.subresource == "status"]
    status: dict[str, Any] = patch.patch["status"]
    assert patch.patch["metadata"] == {"resourceVersion": "3"}  # a stale view ends in a conflict
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(cond for cond in status["conditions"] if cond["type"] == kind)


both = pytest.mark.parametrize("kind", sorted(KINDS))


# --- a job without a Workload ----------------------------------------------------------------------
@both
def test_a_queued_job_gets_its_workload_and_is_suspended(kind: str) -> None:
    adapter, make = KINDS[kind]
    result = plan(adapter, make(suspend=False), None)
    assert kinds(result) == ["CreateWorkload", "PatchJob"]
    create = result.actions[0]
    assert isinstance(create, CreateWorkload)
    assert create.workload.metadata.owner_references == [adapter.owner_reference(make())]
    assert create.workload.metadata.name is not None and create.workload.metadata.name.startswith(f"{kind.lower()}-")
    assert create.event.reason == "CreatedWorkload"
    assert result.actions[1] == PatchJob({"spec": {"suspend": True}})


@both
def test_a_suspended_queued_job_only_gets_its_workload(kind: str) -> None:
    adapter, make = KINDS[kind]
    assert kinds(plan(adapter, make(), None)) == ["CreateWorkload"]


@both
def test_a_job_waits_for_the_workload_it_just_created_to_reach_the_cache(kind: str) -> None:
    adapter, make = KINDS[kind]
    result = plan(adapter, make(), None, creating=True)
    assert result.actions == [] and result.requeue_after == 1.0


@both
@pytest.mark.parametrize(
    ("case", "labels", "extra"),
    [
        ("no queue name", {}, {}),
        ("part of another managed job", None, {"part_of_managed_job": True}),
    ],
)
def test_a_job_kueue_does_not_manage_is_left_alone(kind: str, case: str, labels: dict[str, str] | None, extra: dict[str, Any]) -> None:
    adapter, make = KINDS[kind]
    assert plan(adapter, make(suspend=False, labels=labels), None, **extra) == JobPlan(), case


@both
def test_a_finished_job_without_a_workload_gets_none(kind: str) -> None:
    adapter, make = KINDS[kind]
    done = {"conditions": [cond("Complete" if kind == "Job" else "Completed")]}
    assert plan(adapter, make(status=done), None) == JobPlan()


@both
def test_a_job_naming_a_missing_prebuilt_workload_waits_suspended(kind: str) -> None:
    adapter, make = KINDS[kind]
    result = plan(adapter, make(suspend=False, labels={c.PREBUILT_WORKLOAD_LABEL: "wl"}), None)
    assert result.actions == [PatchJob({"spec": {"suspend": True}})] and result.requeue_after == 5.0


@both
def test_a_job_whose_workload_cannot_be_built_says_why_stays_suspended_and_is_tried_again(kind: str) -> None:
    adapter, make = KINDS[kind]
    result = plan(adapter, make(suspend=False, labels={c.QUEUE_NAME_LABEL: "q", c.PRIORITY_CLASS_LABEL: "missing"}), None)
    assert kinds(result) == ["Warn", "PatchJob"]
    warn = result.actions[0]
    assert isinstance(warn, Warn) and warn.event.reason == "FailedCreateWorkload"
    assert warn.event.message == f'metadata.labels[{c.PRIORITY_CLASS_LABEL}]: WorkloadPriorityClass "missing" not found'
    # The class may only be missing from a cache that has not seen it yet: retried with backoff.
    assert result.retry_with_backoff


@both
def test_a_gone_job_takes_the_workloads_it_owned_with_it(kind: str) -> None:
    adapter, make = KINDS[kind]
    wl = workload(adapter, make())
    assert plan(adapter, None, None, owned=[wl]).actions == [DeleteWorkload("wl", "ns", None)]


# --- a prebuilt Workload ---------------------------------------------------------------------------
@both
def test_a_prebuilt_workload_is_adopted_by_its_job(kind: str) -> None:
    adapter, make = KINDS[kind]
    job = make(labels={c.PREBUILT_WORKLOAD_LABEL: "wl"})
    result = plan(adapter, job, workload(adapter, job, owned=False))
    [adopt] = result.actions
    assert isinstance(adopt, PatchWorkload) and adopt.subresource is None
    assert adopt.patch["metadata"]["ownerReferences"] == [adapter.owner_reference(job).to_dict()]
    assert adopt.patch["metadata"]["labels"] == {c.JOB_UID_LABEL: job.metadata.uid}


# --- finishing ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "condition_type", "message", "reason", "want_message"),
    [
        ("Job", "Complete", "", "Succeeded", "Job finished successfully"),
        ("Job", "Failed", "BackoffLimitExceeded", "Failed", "BackoffLimitExceeded"),
        ("JobSet", "Completed", "jobset completed successfully", "Succeeded", "jobset completed successfully"),
        ("JobSet", "Failed", "jobset failed due to a job failure", "Failed", "jobset failed due to a job failure"),
    ],
)
def test_a_finished_job_finishes_its_workload_with_its_outcome(
    kind: str, condition_type: str, message: str, reason: str, want_message: str
) -> None:
    adapter, make = KINDS[kind]
    job = make(suspend=False, status={"conditions": [cond(condition_type, message=message)]})
    finished = condition(status_of(plan(adapter, job, workload(adapter, job, admitted=True))), c.FINISHED)
    assert (finished["status"], finished["reason"], finished["message"]) == ("True", reason, want_message)


@both
def test_nothing_is_done_for_a_finished_workload(kind: str) -> None:
    adapter, make = KINDS[kind]
    job = make(suspend=False)
    assert plan(adapter, job, workload(adapter, job, admitted=True, conditions=[cond(c.FINISHED)])) == JobPlan()


# --- starting and stopping -------------------------------------------------------------------------
@both
def test_an_admitted_suspended_job_is_started(kind: str) -> None:
    adapter, make = KINDS[kind]
    job = make()
    [start] = plan(adapter, job, workload(adapter, job, admitted=True)).actions
    assert isinstance(start, PatchJob) and start.patch["spec"]["suspend"] is False
    assert start.event is not None and (start.event.reason, start.event.message) == ("Started", "Admitted by clusterQueue cq")


@both
def test_an_admitted_running_job_is_left_running(kind: str) -> None:
    adapter, make = KINDS[kind]
    job = make(suspend=False)
    assert plan(adapter, job, workload(adapter, job, admitted=True)) == JobPlan()


@both
@pytest.mark.parametrize(
    ("case", "reserved", "conditions", "reason", "message"),
    [
        ("quota reserved, checks pending", True, [], "Suspended", "was started without an admitted Workload"),
        ("not admitted at all", False, [], "Suspended", "was started without an admitted Workload"),
        ("evicted", True, [cond(c.EVICTED, reason="Preempted", message="Preempted to accommodate a workload")], "Stopped", "Preempted to"),
    ],
)
def test_a_running_job_that_is_not_admitted_is_suspended(
    kind: str, case: str, reserved: bool, conditions: list[dict[str, Any]], reason: str, message: str
) -> None:
    adapter, make = KINDS[kind]
    job = make(suspend=False)
    [stop] = plan(adapter, job, workload(adapter, job, reserved=reserved, conditions=conditions)).actions
    assert isinstance(stop, PatchJob) and stop.patch == {"spec": {"suspend": True}}, case
    assert stop.event is not None and stop.event.reason == reason and message in stop.event.message, case


# --- the end of an eviction -------------------------------------------------------------------------
PREEMPTED = cond(c.EVICTED, reason="Preempted", message="Preempted to accommodate a workload")
STILL_RUNNING = {"Job": {"active": 1}, "JobSet": {"replicatedJobsStatus": [{"name": "workers", "active": 1}]}}


@both
def test_an_evicted_job_keeps_its_quota_while_its_pods_still_run(kind: str) -> None:
    adapter, make = KINDS[kind]
    job = make(status=STILL_RUNNING[kind])
    result = plan(adapter, job, workload(adapter, job, admitted=True, conditions=[PREEMPTED]))
    assert result.actions == [] and result.requeue_after == 1.0


@both
def test_an_evicted_job_keeps_its_quota_while_a_worker_still_runs_it(kind: str) -> None:
    adapter, make = KINDS[kind]
    job = make()
    result = plan(adapter, job, workload(adapter, job, admitted=True, conditions=[PREEMPTED]), runs_elsewhere=True)
    assert result.actions == [] and result.requeue_after == 1.0


@both
def test_whether_a_worker_still_runs_an_evicted_job_is_asked_only_once_it_stopped_here(kind: str) -> None:
    adapter, make = KINDS[kind]
    stopped, running = make(), make(status=STILL_RUNNING[kind])
    evicted = [PREEMPTED]
    asked = plan(adapter, stopped, workload(adapter, stopped, admitted=True, conditions=evicted), runs_elsewhere=None)
    assert asked == JobPlan(ask_runs_elsewhere=True)  # the shell reads the workers, then plans again
    waiting = plan(adapter, running, workload(adapter, running, admitted=True, conditions=evicted), runs_elsewhere=None)
    assert not waiting.ask_runs_elsewhere and waiting.requeue_after == 1.0
    admitted = plan(adapter, stopped, workload(adapter, stopped, admitted=True), runs_elsewhere=None)
    assert not admitted.ask_runs_elsewhere


@pytest.mark.parametrize(("managed_by", "waits"), [(None, True), (c.MULTIKUEUE_MANAGED_BY, False)])
def test_an_evicted_batch_job_waits_until_the_job_controller_has_seen_its_suspension(managed_by: str | None, waits: bool) -> None:
    """Found by the fault suite (watch-410): across an apiserver restart the Job controller
    created pods it had not counted yet, its last word still Suspended=False. Clearing
    startTime then left a Job that could never finish once those pods succeeded. A Job handed
    to MultiKueue has no Job controller on the manager: nothing to wait for there."""
    resumed = {"type": "Suspended", "status": "False", "reason": "JobResumed", "message": "Job resumed"}
    job = batch_job(status={"startTime": T0, "conditions": [resumed]})
    job.spec.managed_by = managed_by
    job.metadata.resource_version = "9"
    result = plan(BATCH_JOB, job, workload(BATCH_JOB, job, admitted=True, conditions=[PREEMPTED]), runs_elsewhere=False)
    if waits:
        assert result.actions == [] and result.requeue_after == 1.0
    else:
        assert result.actions == [PatchJob({"metadata": {"resourceVersion": "9"}, "status": {"startTime": None}}, subresource="status")]
    seen = batch_job(status={"startTime": T0, "conditions": [{**resumed, "status": "True", "reason": "JobSuspended"}]})
    seen.metadata.resource_version = "9"
    result = plan(BATCH_JOB, seen, workload(BATCH_JOB, seen, admitted=True, conditions=[PREEMPTED]))
    assert result.actions == [PatchJob({"metadata": {"resourceVersion": "9"}, "status": {"startTime": None}}, subresource="status")]


def test_an_evicted_batch_job_has_its_start_time_cleared_before_its_template_is_restored() -> None:
    job = batch_job(status={"startTime": T0})
    job.metadata.resource_version = "9"
    result = plan(BATCH_JOB, job, workload(BATCH_JOB, job, admitted=True, conditions=[PREEMPTED]))
    assert result.actions == [PatchJob({"metadata": {"resourceVersion": "9"}, "status": {"startTime": None}}, subresource="status")]


@both
@pytest.mark.parametrize(
    ("eviction", "requeued"),
    [
        (PREEMPTED, "True"),  # queued again at once
        (cond(c.EVICTED, reason="NodeFailures"), "True"),
        (cond(c.EVICTED, reason="PodsReadyTimeout"), "False"),  # until its backoff runs out
        (cond(c.EVICTED, reason="Deactivated"), "False"),
    ],
)
def test_a_stopped_evicted_job_gives_its_quota_back(kind: str, eviction: dict[str, Any], requeued: str) -> None:
    adapter, make = KINDS[kind]
    job = make()
    status = status_of(plan(adapter, job, workload(adapter, job, admitted=True, conditions=[eviction])))
    assert status["admission"] is None
    assert condition(status, c.QUOTA_RESERVED)["status"] == "False"
    assert condition(status, c.ADMITTED)["reason"] == "NoReservation"
    assert (condition(status, c.REQUEUED)["status"], condition(status, c.REQUEUED)["reason"]) == (requeued, eviction["reason"])
    assert status["accumulatedPastExecutionTimeSeconds"] == 3600  # admitted an hour ago


def test_a_stopped_evicted_jobset_gets_its_templates_back_before_its_quota_is_released() -> None:
    job = jobset()
    wl = workload(JOBSET, job, admitted=True, conditions=[PREEMPTED])
    rjobs = job.spec.replicated_jobs
    rjobs[1].template.spec.template.spec.node_selector = {"pool": "a"}  # what the admission added
    result = plan(JOBSET, job, wl)
    assert kinds(result) == ["PatchJob", "PatchWorkload"]
    restore = result.actions[0]
    assert isinstance(restore, PatchJob)
    assert "nodeSelector" not in restore.patch["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]


def test_an_evicted_running_jobset_is_suspended_with_its_templates_given_back_in_the_same_write() -> None:
    """Kueue's stopJob for a kind with no stop of its own: Suspend and RestorePodSetsInfo in one
    patch, so whoever sees it suspended sees its templates as written (CI saw a RayJob
    suspended with the admitted flavor's nodeSelector still on it)."""
    job = jobset(suspend=False)
    wl = workload(JOBSET, job, admitted=True, conditions=[PREEMPTED])
    job.spec.replicated_jobs[1].template.spec.template.spec.node_selector = {"pool": "a"}  # what the admission added
    [stop] = plan(JOBSET, job, wl).actions
    assert isinstance(stop, PatchJob) and stop.patch["spec"]["suspend"] is True
    assert "nodeSelector" not in stop.patch["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]


def test_an_evicted_running_batch_job_is_suspended_alone_its_template_restored_once_its_start_time_is_gone() -> None:
    job = batch_job(suspend=False)
    wl = workload(BATCH_JOB, job, admitted=True, conditions=[PREEMPTED])
    job.spec.template.spec.node_selector = {"pool": "a"}
    [stop] = plan(BATCH_JOB, job, wl).actions
    assert isinstance(stop, PatchJob) and stop.patch == {"spec": {"suspend": True}}


@both
def test_a_released_workload_whose_backoff_ran_out_is_requeued(kind: str) -> None:
    adapter, make = KINDS[kind]
    job = make()
    wl = workload(adapter, job, conditions=[cond(c.REQUEUED, status="False", reason="Deactivated")])
    requeued = condition(status_of(plan(adapter, job, wl)), c.REQUEUED)
    assert (requeued["status"], requeued["reason"]) == ("True", "Reactivated")


def test_a_jobset_whose_template_conflicts_with_its_admission_finishes_as_failed_to_start() -> None:
    job = jobset()
    job.spec.replicated_jobs[0].template.spec.template.metadata = Job.model_validate(
        {"spec": {"template": {"metadata": {"labels": {c.PODSET_LABEL: "other"}}}}}
    ).spec.template.metadata
    finished = condition(status_of(plan(JOBSET, job, workload(JOBSET, job, admitted=True))), c.FINISHED)
    assert finished["reason"] == "FailedToStart"
    assert finished["message"].startswith("spec.replicatedJobs[0].template.spec.template.metadata.labels: conflict for labels")


# --- waitForPodsReady ---------------------------------------------------------------------------------
@both
def test_with_wait_for_pods_ready_a_workload_gets_pods_ready_false_until_its_pods_are_ready(kind: str) -> None:
    adapter, make = KINDS[kind]
    job = make(suspend=False)
    result = plan(adapter, job, workload(adapter, job, admitted=True), wait_for_pods_ready=True)
    assert kinds(result) == ["PatchWorkload"]
    ready = condition(status_of(result), c.PODS_READY)
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "WaitForStart", "Not all pods are ready or succeeded")
    # Without the configuration there is no PodsReady condition.
    assert not any(isinstance(action, PatchWorkload) for action in plan(adapter, job, workload(adapter, job, admitted=True)).actions)


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("Job", {"ready": 1, "succeeded": 1}),
        ("JobSet", {"replicatedJobsStatus": [{"name": "leader", "ready": 1}, {"name": "workers", "ready": 2}]}),
    ],
)
def test_a_job_whose_pods_are_all_ready_or_succeeded_gets_pods_ready_true(kind: str, status: dict[str, Any]) -> None:
    adapter, make = KINDS[kind]
    job = make(suspend=False, status=status)
    waiting = cond(c.PODS_READY, status="False", reason="WaitForStart")
    ready = condition(
        status_of(plan(adapter, job, workload(adapter, job, admitted=True, conditions=[waiting]), wait_for_pods_ready=True)), c.PODS_READY
    )
    assert (ready["status"], ready["reason"]) == ("True", "Started")


@both
def test_an_unchanged_pods_ready_condition_is_not_written_again(kind: str) -> None:
    adapter, make = KINDS[kind]
    job = make(suspend=False)
    waiting = cond(c.PODS_READY, status="False", reason="WaitForStart")
    result = plan(adapter, job, workload(adapter, job, admitted=True, conditions=[waiting]), wait_for_pods_ready=True)
    assert result.actions == []


@both
def test_a_released_workload_in_its_backoff_is_looked_at_again_when_the_backoff_ends(kind: str) -> None:
    adapter, make = KINDS[kind]
    job = make()
    wl = workload(adapter, job, conditions=[cond(c.REQUEUED, status="False", reason="PodsReadyTimeout")])
    assert wl.status is not None
    wl.status.requeue_state = kueue.RequeueState(count=1, requeue_at=NOW.replace(minute=1))
    assert plan(adapter, job, wl) == JobPlan(requeue_after=60.0)
    wl.status.requeue_state.requeue_at = NOW
    status = status_of(plan(adapter, job, wl))
    requeued = condition(status, c.REQUEUED)
    assert (requeued["status"], requeued["reason"]) == ("True", "BackoffFinished")
    assert status["requeueState"] == {"requeueAt": None}  # Kueue clears it; the count stays
