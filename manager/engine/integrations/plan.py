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
from manager.api.meta import Resource, find_condition
from manager.engine.integrations.adapter import Finished, JobAdapter, component_owner_values, construct_workload
from manager.engine.jobs import (
    JobConversionError,
    admitted_pod_sets,
    job_queue_name,
    prebuilt_workload_name,
)
from manager.engine.podsready import pods_ready_condition
from manager.engine.workload import (
    Patch,
    backoff_left,
    conditions_of,
    finish_patch,
    has_quota_reservation,
    is_admitted,
    is_evicted,
    is_finished,
    pods_ready_patch,
    release_patch,
    requeue_patch,
    requeued_follow_up,
)

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
    """A merge patch on the job (or its status); the event follows the write. `name` names
    one object of a job of several (a pod in a group); None is the job itself."""

    patch: dict[str, Any]
    subresource: str | None = None
    event: Event | None = None
    name: str | None = None


@dataclass(frozen=True)
class DeleteJob:
    """Delete the job, or the object `name` of it (a kind stopped by deletion), if it is still
    the one of `uid`; the event follows the delete."""

    event: Event
    name: str | None = None
    uid: str | None = None


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


@dataclass(frozen=True)
class PatchMember:
    """A merge patch on one pod of a job run as pod groups (it joins its group's pod group)."""

    name: str
    patch: dict[str, Any]


Action = CreateWorkload | PatchJob | DeleteJob | PatchWorkload | DeleteWorkload | Warn | PatchMember


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
    multikueue: bool = False  # its Workload has a MultiKueue admission check (dispatched to a worker)
    members: Sequence[Resource] = ()  # a job run as pod groups: its pods
    # A job run as pod groups, under MultiKueue: its evicted Workloads (by name) whose group may
    # still run on a worker (their quota is kept until it cannot).
    runs_elsewhere_by_name: Mapping[str, bool] = field(default_factory=dict)


# --- Workload status writes ----------------------------------------------------------------------
def _status_write(wl: Workload, patch: Patch) -> PatchWorkload:
    """One of `manager.engine.workload`'s status patches, as a step."""
    return PatchWorkload(wl.name, wl.namespace, patch, subresource="status")


# --- the steps -------------------------------------------------------------------------------------
def _ensure_suspended(adapter: JobAdapter[Any], job: Resource, now: datetime) -> list[Action]:
    """A job without its Workload must not run (Kueue's ensureOneWorkload: NoMatchingWorkload):
    suspended, or, for a kind stopped by deletion, each of its objects still running deleted."""
    if adapter.stopped_by_deletion:
        event = Event("Normal", "Stopped", f"The {adapter.kind} was started without an admitted Workload")
        return _stop(adapter, job, None, event, reason="NoMatchingWorkload", now=now)
    if adapter.is_suspended(job):
        return []
    return [PatchJob(adapter.suspend_patch(job))]


def _finalize(adapter: JobAdapter[Any], job: Resource, *, deleting_only: bool = False) -> list[Action]:
    """Kueue's finalizeJob: the kind's finalizer goes (kinds without one: nothing); with
    `deleting_only`, only from the objects being deleted."""
    return [PatchJob(patch, name=name) for name, patch in adapter.finalize_patches(job, deleting_only=deleting_only)]


def _one_patch(first: Mapping[str, Any], then: Mapping[str, Any]) -> dict[str, Any]:
    """One JSON merge patch doing what `first` and then `then` do (maps merged, `then` wins)."""
    merged = dict(first)
    for key, value in then.items():
        earlier = merged.get(key)
        merged[key] = _one_patch(earlier, value) if isinstance(earlier, Mapping) and isinstance(value, Mapping) else value
    return merged


def _stop(adapter: JobAdapter[Any], job: Resource, wl: Workload | None, event: Event, *, reason: str, now: datetime) -> list[Action]:
    """Suspend the job, its templates given back what `wl` recorded in the same write where the
    kind restores with its suspension; a kind stopped by deletion is told why in its status
    (`reason`: Kueue's StopReason), then deleted (Kueue's Stop of a pod: TerminationTarget,
    then delete)."""
    if not adapter.stopped_by_deletion:
        suspend = adapter.suspend_patch(job)
        restore = adapter.restore_patch(job, wl) if wl is not None and adapter.restores_with_suspend else None
        return [PatchJob(_one_patch(restore, suspend) if restore else suspend, event=event)]
    actions: list[Action] = []
    for target in adapter.stop_targets(job):
        name = None if target is job else target.name
        why = adapter.termination_status_patch(target, reason=reason, message=event.message, now=now)
        if why is not None:
            actions.append(PatchJob(why, subresource="status", name=name))
        actions.append(DeleteJob(event, name=name, uid=target.metadata.uid))
    return actions


def _adopted(adapter: JobAdapter[Any], job: Resource, wl: Workload) -> bool:
    have = {ref.uid for ref in wl.metadata.owner_references or []}
    return all(ref.uid in have for ref in adapter.adoption_references(job))


def _adopt(adapter: JobAdapter[Any], job: Resource, wl: Workload) -> PatchWorkload:
    """A prebuilt Workload becomes the job's: owned by it (a pod group's: by each of its Pods,
    as Kueue's EnsureWorkloadOwnedByAllMembers), so it goes when the job goes."""
    refs = wl.metadata.owner_references or []
    owners = adapter.adoption_references(job)
    uids = {owner.uid for owner in owners}
    kept = [ref.to_dict() for ref in refs if not ref.controller and ref.uid not in uids]
    return PatchWorkload(
        wl.name,
        wl.namespace,
        {
            "metadata": {
                "resourceVersion": wl.metadata.resource_version,
                "ownerReferences": kept + [owner.to_dict() for owner in owners],
                "labels": {c.JOB_UID_LABEL: job.metadata.uid},
            }
        },
    )


def _finished_reason(finished: Finished) -> str:
    return "Succeeded" if finished.succeeded else "Failed"


# --- the planner -----------------------------------------------------------------------------------
def plan_pod_group_parent(inputs: JobInputs) -> JobPlan:
    """Kueue's LeaderWorkerSet reconciler for a job run as pod groups: one Workload per group
    (`owned`: those it has), created and deleted as its groups come and go, and each of its
    pods made a member of its group's pod group; the pod integration does the rest. A job
    gone takes its Workloads with it (the garbage collector would, where one runs); one not
    queued is left alone."""
    adapter, job = inputs.adapter, inputs.job
    if job is None:
        return JobPlan([DeleteWorkload(owned.name, owned.namespace, owned.metadata.uid) for owned in inputs.owned])
    if job.metadata.deletion_timestamp is not None or not job_queue_name(job):
        return JobPlan()
    if inputs.creating:
        return JobPlan(requeue_after=WAIT_FOR_CREATED_WORKLOAD)
    try:
        create, delete = adapter.component_workloads(job, [owned.name for owned in inputs.owned])
        actions: list[Action] = []
        for name, index in create:
            new = construct_workload(
                adapter, job, workload_priority_classes=inputs.workload_priority_classes, priority_classes=inputs.priority_classes
            )
            new.metadata = adapter.component_workload_metadata(job, name, index)
            actions.append(CreateWorkload(new, Event("Normal", "CreatedWorkload", f"Created Workload: {new.key}")))
    except JobConversionError as err:
        return JobPlan([Warn(Event("Warning", "FailedCreateWorkload", str(err)))], retry_with_backoff=True)
    by_name = {owned.name: owned for owned in inputs.owned}
    actions += [DeleteWorkload(name, job.namespace, by_name[name].metadata.uid) for name in delete if name in by_name]
    for pod in inputs.members:
        patch = adapter.member_patch(job, pod)
        if patch is not None:
            actions.append(PatchMember(pod.name, patch))
    # An evicted group with no pod here (a MultiKueue manager runs none): its quota goes back
    # once no worker may still run it; a group with pods is its pod group's to stop and release.
    requeue = None
    grouped = {prebuilt_workload_name(pod.metadata) for pod in inputs.members}
    for wl in inputs.owned:
        if wl.name in delete or wl.name in grouped or not (is_evicted(wl) and has_quota_reservation(wl)):
            continue
        if inputs.runs_elsewhere_by_name.get(wl.name, False):
            requeue = WAIT_FOR_PODS
            continue
        actions.append(_status_write(wl, release_patch(wl, now=inputs.now)))
    return JobPlan(actions, requeue_after=requeue)


def plan_job(inputs: JobInputs) -> JobPlan:
    """Kueue's job reconciler for one job of any kind (see the module's docstring)."""
    adapter, job, wl, now = inputs.adapter, inputs.job, inputs.workload, inputs.now
    if adapter.runs_as_pod_groups:
        return plan_pod_group_parent(inputs)
    if job is None:
        # The job is gone: its Workloads go too (the garbage collector would, where one runs),
        # except one of a parent job's (a LeaderWorkerSet's group, whose pods come and go).
        orphans = [owned for owned in inputs.owned if not component_owner_values(owned)]
        return JobPlan([DeleteWorkload(owned.name, owned.namespace, owned.metadata.uid) for owned in orphans])
    prebuilt = prebuilt_workload_name(job.metadata)
    if not job_queue_name(job) and not prebuilt:
        return JobPlan()  # not queued: Kueue leaves it alone (manageJobsWithoutQueueName is off)
    if not adapter.manages(job):
        return JobPlan()
    if job.metadata.deletion_timestamp is not None:
        # Same as Kueue: a job being deleted lets its finalizer go; its Workloads go with it.
        return JobPlan(_finalize(adapter, job))
    if inputs.part_of_managed_job:
        return JobPlan()
    if inputs.creating:
        return JobPlan(requeue_after=WAIT_FOR_CREATED_WORKLOAD)
    finished = adapter.finished(job)
    # Of a job of several objects, those being deleted let their finalizer go at once.
    gone = _finalize(adapter, job, deleting_only=True)

    if wl is None:
        if finished is not None:
            return JobPlan(_finalize(adapter, job))
        if adapter.incomplete(job):
            # A pod group waits for the rest of its pods (their events wake us), none running.
            return JobPlan([*gone, *_ensure_suspended(adapter, job, now)])
        if prebuilt:
            # Same as Kueue: a job pointing at a Workload that is not there yet waits, suspended.
            return JobPlan([*gone, *_ensure_suspended(adapter, job, now)], requeue_after=WAIT_FOR_PREBUILT_WORKLOAD)
        try:
            new = construct_workload(
                adapter, job, workload_priority_classes=inputs.workload_priority_classes, priority_classes=inputs.priority_classes
            )
        except JobConversionError as err:
            warn = Warn(Event("Warning", "FailedCreateWorkload", str(err)))
            return JobPlan([*gone, warn, *_ensure_suspended(adapter, job, now)], retry_with_backoff=True)
        new.metadata.creation_timestamp = None
        created = Event("Normal", "CreatedWorkload", f"Created Workload: {new.key}")
        return JobPlan([*gone, CreateWorkload(new, created), *_ensure_suspended(adapter, job, now)])

    actions: list[Action] = list(gone)
    if prebuilt and not _adopted(adapter, job, wl):
        actions.append(_adopt(adapter, job, wl))
    rest = [action for action in _finalize(adapter, job) if action not in gone]
    if is_finished(wl):
        return JobPlan([*actions, *rest])
    if finished is not None:
        actions.append(_status_write(wl, finish_patch(wl, reason=_finished_reason(finished), message=finished.message, now=now)))
        return JobPlan([*actions, *rest])

    if inputs.wait_for_pods_ready:
        # Kueue's job reconciler with waitForPodsReady: the PodsReady condition follows the
        # job's ready pods; its update wakes us for the next step.
        current = find_condition(conditions_of(wl), c.PODS_READY)
        pods_ready = pods_ready_condition(admitted=is_admitted(wl), pods_ready=adapter.pods_ready(job), current=current)
        if current is None or (current.status, current.reason) != pods_ready[:2]:
            actions.append(_status_write(wl, pods_ready_patch(wl, pods_ready=pods_ready, now=now)))
            return JobPlan(actions)

    reserved = has_quota_reservation(wl)
    evicted = is_evicted(wl)
    admitted = reserved and is_admitted(wl) and not evicted
    suspended = adapter.is_suspended(job)
    if not reserved:
        follow_up = requeued_follow_up(wl, now)
        if follow_up is not None:
            actions.append(_status_write(wl, requeue_patch(wl, reason=follow_up[0], message=follow_up[1], now=now)))
            return JobPlan(actions)  # the update wakes us with the new Workload
        wait = backoff_left(wl, now)
        if wait is not None:
            return JobPlan(actions, requeue_after=wait)  # back when the backoff runs out
    if admitted:
        if suspended and inputs.multikueue and adapter.suspended_under_multikueue:
            return JobPlan(actions)  # a worker runs it; it stays gated here
        if suspended:
            cluster_queue = wl.status.admission.cluster_queue if wl.status and wl.status.admission else ""
            try:
                starts = adapter.start_patches(job, wl, admitted_pod_sets(wl, inputs.flavors))
            except JobConversionError as err:
                actions.append(_status_write(wl, finish_patch(wl, reason=REASON_FAILED_TO_START, message=str(err), now=now)))
                return JobPlan(actions)
            started = Event("Normal", "Started", f"Admitted by clusterQueue {cluster_queue}")
            actions += [PatchJob(start, event=started, name=name) for name, start in starts]
        return JobPlan(actions)
    # A kind stopped by deletion stops each object still running (a pod group's running pods,
    # while its gated ones stay gated); any other kind is suspended once.
    must_stop = bool(adapter.stop_targets(job)) if adapter.stopped_by_deletion else not suspended
    if must_stop:
        if evicted:
            cond = find_condition(conditions_of(wl), c.EVICTED)
            event = Event("Normal", "Stopped", cond.message if cond is not None and cond.message else "Evicted")
            reason = f"WorkloadEvictedDueTo{cond.reason}" if cond is not None and cond.reason else "WorkloadEvicted"
        else:
            event = Event("Normal", "Suspended", f"The {adapter.kind} was started without an admitted Workload")
            reason = "NotAdmitted"
        actions += _stop(adapter, job, wl, event, reason=reason, now=now)
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
        actions.append(_status_write(wl, release_patch(wl, now=now)))
    return JobPlan(actions)
