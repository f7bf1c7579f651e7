"""What the job reconciler does with one job of any kind, given its Workload (pure). This is
Kueue's ReconcileGenericJob, rule by rule, in its order: a job that is gone takes its
Workloads with it; a job not queued is left alone; a job without a Workload gets one (or
waits, suspended, for the prebuilt one it names); a finished job finishes its Workload; an
admitted job is started; a running job that is not admitted is suspended; an evicted job,
once its pods are gone, gets its pod templates back and its quota released.

The shell (`manager.controllers.jobs`) reads its caches into `JobInputs`, calls `plan_job`,
and carries out the actions in their order; each Workload status write carries a
resourceVersion precondition, so a stale view ends in a conflict and a new plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from manager.api import constants as c
from manager.api.core import PriorityClass
from manager.api.kueue import ResourceFlavor, Workload, WorkloadPriorityClass
from manager.api.meta import Condition, Resource, find_condition, is_condition_true, set_condition
from manager.engine.integrations.adapter import Finished, JobAdapter, construct_workload
from manager.engine.jobs import (
    JobConversionError,
    admitted_pod_sets,
    admitted_without_reservation,
    backoff_left,
    job_queue_name,
    prebuilt_workload_name,
    requeued_follow_up,
    requeued_on_release,
)
from manager.engine.podsready import pods_ready_condition

REASON_PENDING = "Pending"
# Kueue's FailedToStartFinishedReason: the admission cannot be applied to the job (for example
# its template already sets a label the admission sets differently); starting it again would
# fail the same way.
REASON_FAILED_TO_START = "FailedToStart"
WAIT_FOR_CREATED_WORKLOAD = 1.0  # seconds: our new Workload is not in the cache yet
WAIT_FOR_PREBUILT_WORKLOAD = 5.0  # seconds: the prebuilt Workload the job names is not there yet
WAIT_FOR_PODS = 1.0  # seconds: an evicted job's pods (here or on a worker) are still going


# --- actions ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class CreateWorkload:
    """Create the job's Workload (AlreadyExists counts as done); the event follows a creation."""

    workload: Workload
    event: Event


@dataclass(frozen=True)
class PatchJob:
    """A merge patch on the job (or its status); the event follows the write."""

    patch: dict[str, Any]
    subresource: str | None = None
    event: Event | None = None


@dataclass(frozen=True)
class PatchWorkload:
    """A merge patch on the Workload (or its status), with a resourceVersion precondition."""

    name: str
    namespace: str
    patch: dict[str, Any]
    subresource: str | None = None


@dataclass(frozen=True)
class DeleteWorkload:
    name: str
    namespace: str
    uid: str | None


@dataclass(frozen=True)
class Warn:
    """Nothing to write, something to tell: a Warning event on the job, and the log."""

    event: Event


Action = CreateWorkload | PatchJob | PatchWorkload | DeleteWorkload | Warn


@dataclass
class JobPlan:
    """Steps for the shell, carried out in order; a failed step ends the reconcile."""

    actions: list[Action] = field(default_factory=list)
    requeue_after: float | None = None
    # The plan needs to know whether a worker may still run the job (`runs_elsewhere` was
    # None): the shell asks the workers (a live read) and plans again with the answer.
    ask_runs_elsewhere: bool = False
    # The job could not be handled for a reason time may fix (a priority class not seen yet):
    # try again with the key's growing backoff, as Kueue's reconciler does with its error.
    retry_with_backoff: bool = False


@dataclass(frozen=True)
class JobInputs:
    adapter: JobAdapter[Any]
    job: Resource | None  # None: the job is gone
    workload: Workload | None  # the prebuilt Workload it names, else the one it owns
    now: datetime
    owned: Sequence[Workload] = ()  # every Workload the job owns (removed when it is gone)
    flavors: Mapping[str, ResourceFlavor] = field(default_factory=dict)
    workload_priority_classes: Mapping[str, WorkloadPriorityClass] = field(default_factory=dict)
    priority_classes: Mapping[str, PriorityClass] = field(default_factory=dict)
    creating: bool = False  # a Workload we created for it is not in the cache yet
    # MultiKueue: whether a worker may still run (or finish) this Workload's job; None: not
    # asked yet (only an evicted job that stopped here needs the answer).
    runs_elsewhere: bool | None = False
    part_of_managed_job: bool = False  # its controller owner is a job kind Kueue manages
    wait_for_pods_ready: bool = False  # the Configuration's waitForPodsReady is on


# --- conditions ------------------------------------------------------------------------------------
def _set_conditions(old: list[Condition] | None, now: datetime, *new: tuple[str, str, str, str]) -> list[dict[str, Any]]:
    """`old` with each (type, status, reason, message) set as Kubernetes' SetStatusCondition does."""
    conditions = old
    for kind, status, reason, message in new:
        conditions = set_condition(conditions, Condition(type=kind, status=status, reason=reason, message=message), now=now)
    return [cond.to_dict() for cond in conditions or []]


def _conditions(wl: Workload) -> list[Condition] | None:
    return wl.status.conditions if wl.status else None


def _status_patch(wl: Workload, status: dict[str, Any]) -> PatchWorkload:
    patch = {"metadata": {"resourceVersion": wl.metadata.resource_version}, "status": status}
    return PatchWorkload(wl.name, wl.namespace, patch, subresource="status")


# --- the steps -------------------------------------------------------------------------------------
def _ensure_suspended(adapter: JobAdapter[Any], job: Resource) -> list[Action]:
    return [] if adapter.is_suspended(job) else [PatchJob(adapter.suspend_patch(job))]


def _adopt(adapter: JobAdapter[Any], job: Resource, wl: Workload) -> PatchWorkload:
    """A prebuilt Workload becomes the job's: owned by it, so it goes when the job goes."""
    refs = wl.metadata.owner_references or []
    owner = adapter.owner_reference(job)
    return PatchWorkload(
        wl.name,
        wl.namespace,
        {
            "metadata": {
                "resourceVersion": wl.metadata.resource_version,
                "ownerReferences": [ref.to_dict() for ref in refs if not ref.controller] + [owner.to_dict()],
                "labels": {c.JOB_UID_LABEL: job.metadata.uid},
            }
        },
    )


def _finish(wl: Workload, reason: str, message: str, now: datetime) -> PatchWorkload:
    old = _conditions(wl)
    return _status_patch(wl, {"conditions": _set_conditions(old, now, (c.FINISHED, "True", reason, message))})


def _requeue(wl: Workload, follow_up: tuple[str, str], now: datetime) -> PatchWorkload:
    """Kueue's workload controller: Requeued=False turns True once the workload may be queued
    again (reactivated, or its backoff ran out)."""
    old = _conditions(wl)
    status: dict[str, Any] = {"conditions": _set_conditions(old, now, (c.REQUEUED, "True", *follow_up))}
    state = wl.status.requeue_state if wl.status else None
    if state is not None and state.requeue_at is not None:
        status["requeueState"] = {"requeueAt": None}  # Kueue clears it once the backoff ran out
    return _status_patch(wl, status)


def _release(wl: Workload, now: datetime) -> PatchWorkload:
    """The evicted job has stopped: give its quota back (Kueue's
    UnsetQuotaReservationWithCondition), with Requeued naming the eviction: True after a
    preemption or node failures, False after anything else (`requeued_on_release`)."""
    old = _conditions(wl)
    evicted = find_condition(old, c.EVICTED)
    message = evicted.message if evicted is not None else "The workload was evicted"
    reason = evicted.reason if evicted is not None else REASON_PENDING
    admitted_reason, admitted_message = admitted_without_reservation(wl)
    status: dict[str, Any] = {
        "admission": None,
        "conditions": _set_conditions(
            old,
            now,
            (c.QUOTA_RESERVED, "False", REASON_PENDING, message),
            (c.ADMITTED, "False", admitted_reason, admitted_message),
            (c.REQUEUED, "True" if requeued_on_release(reason) else "False", reason, message),
        ),
    }
    admitted = find_condition(old, c.ADMITTED)
    if admitted is not None and admitted.status == "True" and admitted.last_transition_time is not None:
        # Kueue's SyncAdmittedCondition: the time it ran counts into its past execution time.
        ran = int((now - admitted.last_transition_time).total_seconds())
        before = (wl.status.accumulated_past_execution_time_seconds if wl.status else None) or 0
        status["accumulatedPastExecutionTimeSeconds"] = before + ran
    return _status_patch(wl, status)


def _finished_reason(finished: Finished) -> str:
    return "Succeeded" if finished.succeeded else "Failed"


# --- the planner -----------------------------------------------------------------------------------
def plan_job(inputs: JobInputs) -> JobPlan:
    """Kueue's job reconciler for one job of any kind (see the module's docstring)."""
    adapter, job, wl, now = inputs.adapter, inputs.job, inputs.workload, inputs.now
    if job is None:
        # The job is gone: its Workloads go too (the garbage collector would, where one runs).
        return JobPlan([DeleteWorkload(owned.name, owned.namespace, owned.metadata.uid) for owned in inputs.owned])
    prebuilt = prebuilt_workload_name(job.metadata)
    if not job_queue_name(job) and not prebuilt:
        return JobPlan()  # not queued: Kueue leaves it alone (manageJobsWithoutQueueName is off)
    if inputs.part_of_managed_job or job.metadata.deletion_timestamp is not None:
        return JobPlan()
    if inputs.creating:
        return JobPlan(requeue_after=WAIT_FOR_CREATED_WORKLOAD)
    finished = adapter.finished(job)

    if wl is None:
        if finished is not None:
            return JobPlan()
        if prebuilt:
            # Same as Kueue: a job pointing at a Workload that is not there yet waits, suspended.
            return JobPlan(_ensure_suspended(adapter, job), requeue_after=WAIT_FOR_PREBUILT_WORKLOAD)
        try:
            new = construct_workload(
                adapter, job, workload_priority_classes=inputs.workload_priority_classes, priority_classes=inputs.priority_classes
            )
        except JobConversionError as err:
            return JobPlan(
                [Warn(Event("Warning", "FailedCreateWorkload", str(err))), *_ensure_suspended(adapter, job)], retry_with_backoff=True
            )
        new.metadata.creation_timestamp = None
        created = Event("Normal", "CreatedWorkload", f"Created Workload: {new.key}")
        return JobPlan([CreateWorkload(new, created), *_ensure_suspended(adapter, job)])

    actions: list[Action] = []
    if prebuilt and not any(ref.uid == job.metadata.uid for ref in wl.metadata.owner_references or []):
        actions.append(_adopt(adapter, job, wl))
    conditions = _conditions(wl)
    if is_condition_true(conditions, c.FINISHED):
        return JobPlan(actions)
    if finished is not None:
        actions.append(_finish(wl, _finished_reason(finished), finished.message, now))
        return JobPlan(actions)

    if inputs.wait_for_pods_ready:
        # Kueue's job reconciler with waitForPodsReady: the PodsReady condition follows the
        # job's ready pods; its update wakes us for the next step.
        current = find_condition(conditions, c.PODS_READY)
        pods_ready = pods_ready_condition(
            admitted=is_condition_true(conditions, c.ADMITTED), pods_ready=adapter.pods_ready(job), current=current
        )
        if current is None or (current.status, current.reason) != pods_ready[:2]:
            actions.append(_status_patch(wl, {"conditions": _set_conditions(conditions, now, (c.PODS_READY, *pods_ready))}))
            return JobPlan(actions)

    reserved = wl.status is not None and wl.status.admission is not None and is_condition_true(conditions, c.QUOTA_RESERVED)
    evicted = is_condition_true(conditions, c.EVICTED)
    admitted = reserved and is_condition_true(conditions, c.ADMITTED) and not evicted
    suspended = adapter.is_suspended(job)
    if not reserved:
        follow_up = requeued_follow_up(wl, now)
        if follow_up is not None:
            actions.append(_requeue(wl, follow_up, now))
            return JobPlan(actions)  # the update wakes us with the new Workload
        wait = backoff_left(wl, now)
        if wait is not None:
            return JobPlan(actions, requeue_after=wait)  # back when the backoff runs out
    if admitted:
        if suspended:
            cluster_queue = wl.status.admission.cluster_queue if wl.status and wl.status.admission else ""
            try:
                start = adapter.start_patch(job, wl, admitted_pod_sets(wl, inputs.flavors))
            except JobConversionError as err:
                actions.append(_finish(wl, REASON_FAILED_TO_START, str(err), now))
                return JobPlan(actions)
            actions.append(PatchJob(start, event=Event("Normal", "Started", f"Admitted by clusterQueue {cluster_queue}")))
        return JobPlan(actions)
    if not suspended:
        if evicted:
            cond = find_condition(conditions, c.EVICTED)
            event = Event("Normal", "Stopped", cond.message if cond is not None and cond.message else "Evicted")
        else:
            event = Event("Normal", "Suspended", f"The {adapter.kind} was started without an admitted Workload")
        actions.append(PatchJob(adapter.suspend_patch(job), event=event))
        return JobPlan(actions)
    if evicted and reserved:
        if inputs.runs_elsewhere is None and adapter.releasable(job):
            return JobPlan(ask_runs_elsewhere=True)
        if not adapter.releasable(job) or inputs.runs_elsewhere:
            # Its pods are still going (here or on a worker), or it is finishing (then it ends
            # Finished, never queued again); the job's update wakes us too.
            return JobPlan(actions, requeue_after=WAIT_FOR_PODS)
        stop_status = adapter.stop_status_patch(job)
        if stop_status is not None:
            actions.append(PatchJob(stop_status, subresource="status"))
            return JobPlan(actions)  # the update wakes us with the new job
        restore = adapter.restore_patch(job, wl)
        if restore is not None:
            actions.append(PatchJob(restore))
        actions.append(_release(wl, now))
    return JobPlan(actions)
