"""What MultiKueue does with one manager Workload, given its remote copies, the health of
each worker and what the controller remembers of it (pure). This is Kueue's MultiKueue
workload reconciler (reconcileGroup), step by step in Kueue's order: finished, evicted, spec
drift, the admitting remote (syncAdmittingRemoteState), then nomination
(nominateAndSynchronizeWorkers); kfed checks for a copy whose Job finished first of all, so
that no eviction can start a finished Job again. Before those steps the dispatch rules
(`manager.multikueue.rules.dispatch`: the Incremental and capacity-aware dispatchers and the
never-fits refusal) run and advance the Workload's `DispatchState`. The shell
(`manager.multikueue.controllers.workload`) reads caches, calls `plan_workload`, stores the state it
returns, and carries the plan out in the order its fields are listed.

Also here: the manager Workload's check write (`check_patch`), the garbage collector's choice
of orphans, the AdmissionCheck's and the MultiKueueCluster's `Active` conditions, and the
reconnect backoff.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from manager.api import constants as c
from manager.api.kueue import AdmissionCheckState, Workload
from manager.api.meta import DNS_LABEL_PATTERN, MAX_CONDITION_MESSAGE, Condition, Resource, find_condition, format_time
from manager.engine.integrations.adapter import JobAdapter
from manager.engine.integrations.registry import BATCH_JOB
from manager.engine.workload import (
    DEACTIVATION_TARGET,
    Patch,
    admission_check_state,
    admitted_condition,
    admitted_patch,
    has_quota_reservation,
    is_admitted,
    is_evicted,
    is_finished,
    is_quota_reserved,
    status_patch,
)
from manager.multikueue.rules.capacity import Choice
from manager.multikueue.rules.dispatch import (
    FORGOTTEN,
    NO_WORKERS,
    Candidate,
    DispatchState,
    Workers,
    awaiting_dispatch,
    look_again_in,
    never_fits_refusal,
    place,
    widen_incrementally,
)
from manager.multikueue.rules.settings import DEFAULT_ADMISSION_TIMEOUT, DEFAULT_STEP_SIZE

REASON_MULTIKUEUE = "MultiKueue"
# kfed's own mark on a copy: which reservation of the manager's Workload it was made for. A
# worker that was unreachable while the workload was evicted and dispatched again comes back
# with a copy from an earlier round; that copy must never win or finish the workload.
DISPATCH_ROUND_ANNOTATION = "kfed.dev/dispatch-round"
# kfed's own mark on a MultiKueueCluster: the worker's namespaces that its credential may use
# (`kfed register --worker-namespace`, whose RoleBindings grant the Job and Workload rights
# there only). The manager then watches and writes in those namespaces alone; without it,
# the whole cluster, as in Kueue.
WORKER_NAMESPACES_ANNOTATION = "kfed.dev/worker-namespaces"
REASON_EVICTED_ON_MANAGER = "EvictedOnManagerCluster"
JOB_ADAPTER_KIND = "batch/v1, Kind=Job"  # Kueue's GVK string of the batch Job, the adapter enabled by default
SYNC_DEFERRED_REQUEUE = 2.0  # seconds: the manager Job is still suspended, try the status copy again
MAX_MESSAGE = MAX_CONDITION_MESSAGE

# Fields a copy may differ in without being out of sync: gates are per cluster (Kueue), and
# `active` is the worker's to set when the manager asks it to deactivate its copy.
_SPEC_IGNORED = ("preemptionGates", "active")
_PRIORITY_FIELDS = ("priority", "priorityClassRef", "priorityClassName", "priorityClassSource")


@dataclass(frozen=True)
class ClusterHealth:
    """A worker as the workload planner sees it."""

    name: str
    connected: bool
    lost_since: datetime | None = None  # the first disconnect, kept across failed reconnects
    accepts_new: bool = True  # False: its admission agent is down; it keeps what it has, gets no new copy
    # Why the job may not go there (the config's cluster selector, the job's restriction), or
    # "": like a worker whose agent is down, it keeps what it has and gets no new copy.
    excluded: str = ""

    @property
    def takes_new(self) -> bool:
        return self.accepts_new and not self.excluded


@dataclass(frozen=True)
class WorkloadInputs:
    local: Workload
    check_name: str
    clusters: Sequence[ClusterHealth]  # the MultiKueueConfig's clusters, in its order
    remotes: Mapping[str, Workload]  # copies found on connected clusters
    now: datetime
    worker_lost_timeout: timedelta
    dispatcher: str = c.DISPATCHER_ALL_AT_ONCE
    step: int = DEFAULT_STEP_SIZE  # the Incremental dispatcher's
    admission_timeout: timedelta = DEFAULT_ADMISSION_TIMEOUT  # the capacity-aware dispatcher's: a copy's time to be admitted
    # What the controller remembers of this Workload (`DispatchState`: the dispatchers' state, and
    # per worker why no copy could be made there or that a foreign Job holds the name), and what
    # the dispatch rules read of the workers.
    dispatch: DispatchState = FORGOTTEN
    workers: Workers = field(default_factory=lambda: NO_WORKERS)
    deleted: bool = False
    owner_kind: str | None = JOB_ADAPTER_KIND  # the controller owner's GVK string; None: no owner
    # The GVK strings of the enabled kinds with a MultiKueue adapter (the shell asks the registry).
    multikueue_kinds: frozenset[str] = frozenset({JOB_ADAPTER_KIND})
    owner_managed_by: str | None = c.MULTIKUEUE_MANAGED_BY
    owner_managed_by_field: str = "spec.managedBy"  # where its kind keeps it (an MPIJob: spec.runPolicy.managedBy)
    local_job_holds_quota: bool = False  # the manager's Job still counts pods (not `releasable`)
    remote_jobs: frozenset[str] = frozenset()  # connected clusters that hold our Job for this workload
    # A component of a job of several Workloads (a LeaderWorkerSet's groups): its index, and each
    # other component's (index, the worker that admitted it or ""); all run on one worker.
    component_index: int | None = None
    siblings: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    # Kueue's MultiKueueOrchestratedPreemption: copies carry the manager's preemption gate, and
    # one worker at a time may preempt for the Workload (`preemption_gate_to_open`).
    orchestrated_preemption: bool = False


@dataclass(frozen=True)
class CheckUpdate:
    state: str
    message: str
    cluster_name: str | None = None  # set on Ready
    clear_nominated: bool = False
    # With a Ready that leaves every check Ready: the Workload's Admitted condition, written in
    # the same patch (the engine's rule, `admitted_condition`; one write instead of two).
    admitted: tuple[str, str, str] | None = None


@dataclass
class Plan:
    """Steps for the shell, carried out in this order."""

    delete: list[str] = field(default_factory=list)  # remove our Job and the copy on these clusters
    update_spec: list[str] = field(default_factory=list)  # the copy's priority follows the manager's
    deactivate: tuple[str, str] | None = None  # (cluster, message): ask the worker to evict its copy
    sync_job: str | None = None  # copy the status of our Job on this cluster back to the manager's Job
    create_job: bool = False  # with sync_job: create our Job there first if it is missing (the winner only)
    stop_local_job: bool = False  # the manager Job's pods are assumed gone: active and ready to 0
    finish: tuple[str, str] | None = None  # (reason, message) for the manager Workload's Finished
    nominate: list[str] | None = None  # new status.nominatedClusterNames
    create: list[str] = field(default_factory=list)  # make a copy on these clusters
    gate_copies: bool = False  # the copies made carry the manager's preemption gate
    open_gate: str | None = None  # open the manager's preemption gate of the copy on this cluster
    check: CheckUpdate | None = None
    events: list[tuple[str, str]] = field(default_factory=list)  # (type, message), reason MultiKueue
    requeue_after: float | None = None
    admitted_on: str | None = None  # for metrics: the check became Ready here
    retried_on: str | None = None  # for metrics: a copy admitted here was lost or evicted
    # What the controller remembers of the Workload from now on (stored before any write, so
    # that the other Workloads' placement counts a copy as soon as it is chosen), and whether it
    # forgets the Workload once the copies are deleted.
    dispatch: DispatchState = FORGOTTEN
    forget: bool = False
    round_started: datetime | None = None  # with nominate: a new Incremental round, once that is written


# --- small readers ---------------------------------------------------------------------------------
def _conditions(wl: Workload) -> list[Condition] | None:
    return wl.status.conditions if wl.status else None


def _earliest(remotes: Mapping[str, Workload], kind: str) -> tuple[str, Condition] | None:
    """Same as Kueue's bestMatchByCondition: the copy whose condition turned True first."""
    best: tuple[str, Condition] | None = None
    for cluster in sorted(remotes):
        cond = find_condition(_conditions(remotes[cluster]), kind)
        if cond is None or cond.status != "True":
            continue
        when = cond.last_transition_time
        if best is None or (when is not None and (best[1].last_transition_time is None or when < best[1].last_transition_time)):
            best = (cluster, cond)
    return best


def _spec(wl: Workload) -> dict[str, Any]:
    spec = wl.spec.to_dict()
    for name in _SPEC_IGNORED:
        spec.pop(name, None)
    return spec


def _without(spec: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    return {k: v for k, v in spec.items() if k not in names}


def _with_previous(message: str, previous: str) -> str:
    """Kueue's updateACS suffix naming the state left behind."""
    return f'{message}, Previously: "{previous}"'[:MAX_MESSAGE]


def _out_of_sync(wl: Workload) -> bool:
    finished = find_condition(_conditions(wl), c.FINISHED)
    return finished is not None and finished.reason == "OutOfSync"


def _stop_request(local_conditions: list[Condition] | None, cluster: str, copy: Workload) -> tuple[str, str] | None:
    """(cluster, message) asking that worker to evict its copy of a Workload evicted here (the
    copy's DeactivationTarget), or None when it was asked already."""
    target = find_condition(_conditions(copy), DEACTIVATION_TARGET)
    if target is not None and target.status == "True":
        return None
    evicted = find_condition(local_conditions, c.EVICTED)
    return cluster, f"Evicted on manager: {evicted.message if evicted else ''}"[:MAX_MESSAGE]


def _admitted_with_ready(wl: Workload, check_name: str) -> tuple[str, str, str] | None:
    """The Admitted condition to write with this check's Ready, when that admits the Workload
    and it does not say so already."""
    states = [check.state for check in (wl.status.admission_checks if wl.status else None) or [] if check.name != check_name]
    admitted = admitted_condition(reserved=has_quota_reservation(wl), check_states=[*states, "Ready"])
    return admitted if admitted[0] == "True" and not is_admitted(wl) else None


def check_patch(local: Workload, *, check_name: str, update: CheckUpdate | None, nominate: list[str] | None, now: datetime) -> Patch:
    """The manager Workload's status write for a plan's check update and nomination: the check's
    state and message (its lastTransitionTime moves when the state does, and on every Ready and
    Retry, as Kueue's SetAdmissionCheckState is called), the winner, the nomination, and the
    Admitted condition a Ready brings (`admitted_patch`)."""
    status: dict[str, Any] = {}
    if update is not None:
        checks = []
        for check in (local.status.admission_checks if local.status else None) or []:
            entry = check.to_dict()
            if check.name == check_name:
                entry["state"] = update.state
                entry["message"] = update.message
                if check.state != update.state or update.state in ("Ready", "Retry"):
                    entry["lastTransitionTime"] = format_time(now)
            checks.append(entry)
        status["admissionChecks"] = checks
        if update.cluster_name is not None:
            status["clusterName"] = update.cluster_name
        if update.clear_nominated:
            status["nominatedClusterNames"] = None
        if update.admitted is not None:
            # The list is replaced whole; the resourceVersion guards what it was built from.
            status.update(admitted_patch(local, admitted=update.admitted, now=now)["status"])
    if nominate is not None and "nominatedClusterNames" not in status:
        status["nominatedClusterNames"] = nominate or None
    return status_patch(local, status)


def dispatch_round(local: Workload, check: AdmissionCheckState | None) -> str:
    """The current reservation of the manager's Workload: when its quota was reserved, and how
    many times its MultiKueue check was retried (which tells apart two reservations made in
    the same second after a retry)."""
    reserved = find_condition(_conditions(local), c.QUOTA_RESERVED)
    when = reserved.last_transition_time.strftime("%Y-%m-%dT%H:%M:%SZ") if reserved and reserved.last_transition_time else ""
    return f"{when}/{(check.retry_count if check else None) or 0}"


def made_for_this_round(made_for: str | None, local: Workload, check: AdmissionCheckState | None) -> bool:
    """Whether a copy marked `made_for` belongs to the manager Workload's current reservation.
    Unmarked copies (made by another manager's Kueue) count as current. While the Workload is
    being evicted its reservation still holds, but the eviction has already reset the check's
    retry count (Kueue's resetChecksOnEviction: a Ready check to none, a Retry one to one
    more): only the reservation time is compared then, so the copy that runs the Job is
    deactivated and stopped, never deleted."""
    if made_for is None:
        return True
    current = dispatch_round(local, check)
    if made_for == current:
        return True
    if is_evicted(local):
        return made_for.partition("/")[0] == current.partition("/")[0]
    return False


def remote_copy(local: Workload, *, origin: str, check_name: str, gated: bool = False) -> dict[str, Any]:
    """Kueue's clone for a worker: name, namespace, labels (without the job UID, with our
    origin), annotations and the whole spec; no owner, no status. kfed adds the dispatch round.
    `gated` (orchestrated preemption): the manager's own gates stay here, and the copy gets the
    MultiKueue preemption gate alone, closed until `preemption_gate_to_open` picks its worker."""
    labels = {k: v for k, v in (local.metadata.labels or {}).items() if k != c.JOB_UID_LABEL}
    labels[c.MULTIKUEUE_ORIGIN_LABEL] = origin
    annotations = dict(local.metadata.annotations or {})
    annotations[DISPATCH_ROUND_ANNOTATION] = dispatch_round(local, admission_check_state(local, check_name))
    metadata: dict[str, Any] = {"name": local.name, "namespace": local.namespace, "labels": labels, "annotations": annotations}
    spec = local.spec.to_dict()
    if gated:
        spec["preemptionGates"] = [{"name": c.MULTIKUEUE_PREEMPTION_GATE}]
    return {"apiVersion": f"{c.GROUP}/{c.STORAGE_VERSION}", "kind": "Workload", "metadata": metadata, "spec": spec}


# Kueue's singleClusterPreemptionTimeout: how long one worker may preempt for a Workload before
# the next worker that asked may preempt too.
SINGLE_CLUSTER_PREEMPTION_TIMEOUT = timedelta(minutes=5)


def preemption_gate_to_open(remotes: Mapping[str, Workload], *, now: datetime) -> tuple[str | None, timedelta | None]:
    """Kueue's workloadToOpenPreemptionGate: (the worker whose copy's gate to open, when to look
    again). The copy blocked on its gate the longest is opened, unless another copy's gate was
    opened less than SINGLE_CLUSTER_PREEMPTION_TIMEOUT ago: then nothing until that time is up.
    Ties go to the first worker by name (Kueue's map order is random)."""
    latest_opened: datetime | None = None
    oldest_blocked: tuple[datetime, str] | None = None
    for cluster in sorted(remotes):
        copy = remotes[cluster]
        gate = next(
            (g for g in (copy.status.preemption_gates if copy.status else None) or [] if g.name == c.MULTIKUEUE_PREEMPTION_GATE), None
        )
        if gate is not None and gate.position == "Open":
            opened = gate.last_transition_time or now
            latest_opened = opened if latest_opened is None or opened > latest_opened else latest_opened
            continue
        blocked = find_condition(_conditions(copy), c.BLOCKED_ON_PREEMPTION_GATES)
        if blocked is None or blocked.status != "True":
            continue
        since = blocked.last_transition_time or now
        if oldest_blocked is None or since < oldest_blocked[0]:
            oldest_blocked = (since, cluster)
    if oldest_blocked is None:
        return None, None
    if latest_opened is not None and now - latest_opened < SINGLE_CLUSTER_PREEMPTION_TIMEOUT:
        return None, SINGLE_CLUSTER_PREEMPTION_TIMEOUT - (now - latest_opened)
    return oldest_blocked[1], SINGLE_CLUSTER_PREEMPTION_TIMEOUT


def open_gate_patch(copy: Workload, *, now: datetime) -> Patch:
    """The copy's status write that opens the manager's preemption gate (Kueue's
    OpenPreemptionGate), guarded by the resourceVersion it was read at: the worker writes the
    same list when an eviction closes it."""
    states = [g.to_dict() for g in (copy.status.preemption_gates if copy.status else None) or [] if g.name != c.MULTIKUEUE_PREEMPTION_GATE]
    states.append({"name": c.MULTIKUEUE_PREEMPTION_GATE, "position": "Open", "lastTransitionTime": format_time(now)})
    return status_patch(copy, {"preemptionGates": states})


# --- the workload planner --------------------------------------------------------------------------
@dataclass
class _Group:
    """Kueue's wlGroup: the manager's Workload and its copies on the connected workers, as one
    pass reads them. `remotes` loses the copies a step deletes or sets aside."""

    inputs: WorkloadInputs
    check: AdmissionCheckState
    _: KW_ONLY
    available: list[str]  # the connected workers, in the MultiKueueConfig's order
    remotes: dict[str, Workload]
    local_evicted: bool
    cluster_name: str | None  # the winner recorded on the manager's Workload

    @property
    def local(self) -> Workload:
        return self.inputs.local

    @property
    def blocked(self) -> Mapping[str, str]:
        return self.inputs.dispatch.blocked


def plan_workload(inputs: WorkloadInputs) -> Plan:
    """Kueue's MultiKueue rules for one manager Workload (reference section 2.2), with kfed's
    dispatchers: the dispatch rules first (they keep their state whatever the rules below
    decide), then Kueue's reconcileGroup, step by step."""
    if inputs.deleted:
        return _remove_with_the_workload(inputs)
    plan = Plan(dispatch=inputs.dispatch)
    if _dispatch_incrementally(inputs, plan):
        return plan
    refusal = never_fits_refusal(inputs.local, check_name=inputs.check_name, workers=inputs.workers)
    placement = None if refusal else _place(inputs, plan)
    group = _read_group(inputs)
    if group is not None:
        _reconcile_group(group, plan, refusal=refusal, placement=placement)
    due = look_again_in(plan.dispatch, now=inputs.now, admission_timeout=inputs.admission_timeout)
    if due is not None:  # look again when the nominated worker's time is up
        plan.requeue_after = due if plan.requeue_after is None else min(plan.requeue_after, due)
    return plan


def _remove_with_the_workload(inputs: WorkloadInputs) -> Plan:
    """A deleted manager Workload takes its copies and our Jobs on the connected workers with
    it (unreachable workers: the GC's job), and is forgotten."""
    available = {cl.name for cl in inputs.clusters if cl.connected}
    reached = {name for name in inputs.remotes if name in available} | (inputs.remote_jobs & available)
    return Plan(delete=sorted(reached), dispatch=FORGOTTEN, forget=True)


def _dispatch_incrementally(inputs: WorkloadInputs, plan: Plan) -> bool:
    """The Incremental dispatcher (Kueue runs it as its own controller): widen the nomination
    by one step every round while nothing admits the workload. True: that write is the pass."""
    if inputs.dispatcher != c.DISPATCHER_INCREMENTAL:
        return False
    wider, plan.dispatch = widen_incrementally(
        inputs.local,
        check_name=inputs.check_name,
        state=plan.dispatch,
        config_clusters=[cl.name for cl in inputs.clusters if not cl.excluded],
        step=inputs.step,
        now=inputs.now,
    )
    if wider is None:
        return False
    plan.nominate = wider
    plan.round_started = inputs.now
    return True


def _place(inputs: WorkloadInputs, plan: Plan) -> Choice | None:
    """The capacity-aware dispatcher's nomination (`place`), over the workers that may get a new copy."""
    if inputs.dispatcher != c.DISPATCHER_CAPACITY_AWARE:
        return None
    blocked = inputs.dispatch.blocked
    candidates = [
        Candidate(cl.name, inputs.remotes.get(cl.name))
        for cl in inputs.clusters
        if cl.connected and cl.takes_new and cl.name not in blocked
    ]
    placement, plan.dispatch = place(
        inputs.local,
        check_name=inputs.check_name,
        state=plan.dispatch,
        candidates=candidates,
        workers=inputs.workers,
        now=inputs.now,
        admission_timeout=inputs.admission_timeout,
    )
    return placement


def _read_group(inputs: WorkloadInputs) -> _Group | None:
    """The group, or None when the check is gone or Rejected (nothing more to do)."""
    check = admission_check_state(inputs.local, inputs.check_name)
    if check is None or check.state == "Rejected":
        return None
    available = [cl.name for cl in inputs.clusters if cl.connected]
    remotes = {name: wl for name, wl in inputs.remotes.items() if name in available}
    status = inputs.local.status
    return _Group(
        inputs,
        check,
        available=available,
        remotes=remotes,
        local_evicted=is_evicted(inputs.local),
        cluster_name=status.cluster_name if status else None,
    )


def _reconcile_group(group: _Group, plan: Plan, *, refusal: str | None, placement: Choice | None) -> None:
    """Kueue's reconcileGroup, in its order (kfed checks for a finished copy first of all). Each
    step returns True when it ends the pass."""
    steps = (
        _reject_what_cannot_be_handed_over,
        _finish_from_a_finished_copy,
        _remove_copies_without_quota,
        _drop_copies_of_earlier_rounds,
        _retry_a_copy_out_of_sync,
        _follow_an_eviction,
        _sync_specs,
        _sync_admitting_remote_state,
        _open_a_preemption_gate,
    )
    for step in steps:
        if step(group, plan):
            return
    _nominate_and_synchronize_workers(group, plan, refusal=refusal, placement=placement)


def _reject_what_cannot_be_handed_over(group: _Group, plan: Plan) -> bool:
    """Kueue's adapter lookup and managedBy check: a Job we cannot hand over is rejected."""
    inputs, check = group.inputs, group.check
    if inputs.owner_kind not in inputs.multikueue_kinds:
        message = "No multikueue adapter found"
        if inputs.owner_kind:
            message += f' for owner kind "{inputs.owner_kind}"'
        plan.check = CheckUpdate("Rejected", _with_previous(message, check.state))
        return True
    if inputs.owner_managed_by != c.MULTIKUEUE_MANAGED_BY:
        reason = f'Expecting {inputs.owner_managed_by_field} to be "{c.MULTIKUEUE_MANAGED_BY}" not "{inputs.owner_managed_by or ""}"'
        plan.check = CheckUpdate("Rejected", _with_previous(f"The owner is not managed by Kueue: {reason}", check.state))
        return True
    return False


def _finish_from_a_finished_copy(group: _Group, plan: Plan) -> bool:
    """A copy whose Job finished finishes the manager Workload, whatever its reservation,
    eviction or dispatch round: a finished Job is never run again (kfed orders this before
    Kueue's no-quota rule, so an eviction racing the finish cannot delete the finished copy and
    dispatch the Job again)."""
    if is_finished(group.local):
        return False
    finishing = {k: v for k, v in group.remotes.items() if not _out_of_sync(v) and k not in group.blocked}
    done = _earliest(finishing, c.FINISHED)
    if done is None:
        return False
    plan.sync_job = done[0]
    plan.finish = (done[1].reason, done[1].message)
    return True


def _remove_copies_without_quota(group: _Group, plan: Plan) -> bool:
    """Finished here, or no quota here: no copy may stay anywhere."""
    if not is_finished(group.local) and has_quota_reservation(group.local):
        return False
    plan.delete = sorted(group.remotes)
    if any(not cl.connected for cl in group.inputs.clusters):
        # Copies on unreachable workers are retried later (and the GC is the backstop).
        plan.requeue_after = group.inputs.worker_lost_timeout.total_seconds()
    return True


def _drop_copies_of_earlier_rounds(group: _Group, plan: Plan) -> bool:
    """Copies from an earlier round (a worker that was unreachable while the workload was
    evicted and dispatched again) are deleted and never read."""
    for cluster in sorted(group.remotes):
        made_for = (group.remotes[cluster].metadata.annotations or {}).get(DISPATCH_ROUND_ANNOTATION)
        if not made_for_this_round(made_for, group.local, group.check):
            plan.delete.append(cluster)
            del group.remotes[cluster]
    return False


def _retry_a_copy_out_of_sync(group: _Group, plan: Plan) -> bool:
    """A copy of this round is out of sync with its Job (Kueue's worker finishes it so):
    dispatch again. (Copies whose Job finished were handled first.)"""
    out_of_sync = _earliest(group.remotes, c.FINISHED)
    if out_of_sync is None:
        return False
    cluster = out_of_sync[0]
    if group.check.state == "Ready":
        message = f'Remote workload on worker cluster "{cluster}" is out of sync with its user job, resetting for re-dispatch'
        plan.check = CheckUpdate("Retry", _with_previous(message, group.check.state))
        plan.events.append(("Warning", plan.check.message))
        plan.retried_on = cluster
    return True


def _follow_an_eviction(group: _Group, plan: Plan) -> bool:
    """A copy was evicted on a worker. Not one on a worker where a foreign Job holds the name:
    that copy is being removed and never speaks for the Workload (its Job is not ours to sync,
    and a pass syncing it would be retried at once, forever)."""
    unblocked = {k: v for k, v in group.remotes.items() if k not in group.blocked}
    evicted = _earliest(unblocked, c.EVICTED)
    if evicted is None:
        return False
    cluster = evicted[0]
    if group.local_evicted:
        # The worker Job's stopping status comes back from an evicted copy whose worker holds
        # our Job (a copy evicted while its worker was cut off may have none).
        evicted_on = sorted(cl for cl, copy in unblocked.items() if is_evicted(copy))
        plan.sync_job = next((cl for cl in evicted_on if cl in group.inputs.remote_jobs), cluster)
        # Another copy of this round may still be admitted (its worker was cut off while the
        # Workload moved on): its agent may start the Job, and the manager keeps the quota
        # while it may (`may_still_run_on`), so it is asked to stop too.
        for other in sorted(unblocked):
            if other != cluster and is_admitted(unblocked[other]):
                plan.deactivate = plan.deactivate or _stop_request(_conditions(group.local), other, unblocked[other])
        return True
    if group.check.state == "Ready":
        message = f'Workload evicted on worker cluster: "{group.cluster_name or cluster}", resetting for re-admission. Previously: "Ready"'
        plan.check = CheckUpdate("Retry", message)
        plan.events.append(("Normal", message))
        plan.retried_on = cluster
        return True
    return False


def _sync_specs(group: _Group, plan: Plan) -> bool:
    """Copies whose spec drifted from the manager's: priority is forwarded, anything else means
    the copy is no longer this workload."""
    local_spec = _spec(group.local)
    for cluster in sorted(group.remotes):
        remote_spec = _spec(group.remotes[cluster])
        if remote_spec == local_spec:
            continue
        if _without(remote_spec, _PRIORITY_FIELDS) == _without(local_spec, _PRIORITY_FIELDS):
            plan.update_spec.append(cluster)
        elif cluster not in plan.delete:
            plan.delete.append(cluster)
            del group.remotes[cluster]
    return False


def _sync_admitting_remote_state(group: _Group, plan: Plan) -> bool:
    """Kueue's admitting remote: the earliest Admitted copy wins. Once a winner is recorded,
    only it can win (kfed): two copies admitted in the same second tie, and a second pass must
    not pick the other; and while the recorded winner is unreachable or its copy is gone,
    another admitted copy (a worker that was cut off when the winner was chosen) must not start
    the Job a second time. The lost-winner rules then wait for it or retry."""
    candidates = {k: v for k, v in group.remotes.items() if k not in group.blocked}
    admitted = _earliest(candidates, c.ADMITTED)
    cluster_name, check = group.cluster_name, group.check
    if check.state == "Ready" and cluster_name:
        recorded = find_condition(_conditions(candidates[cluster_name]), c.ADMITTED) if cluster_name in candidates else None
        admitted = (cluster_name, recorded) if recorded is not None and recorded.status == "True" else None
    if admitted is None:
        if check.state == "Ready":
            return _retry_a_lost_winner(group, plan)
        if group.local_evicted and group.inputs.local_job_holds_quota and not group.remotes and _only_lost_workers_may_run_it(group.inputs):
            # The worker that ran it is gone past workerLostTimeout: its pods count as gone,
            # so the manager Job stops holding quota (nothing will ever report them).
            plan.stop_local_job = True
        return False
    winner = admitted[0]
    plan.delete += [cluster for cluster in sorted(group.remotes) if cluster != winner and cluster not in plan.delete]
    if group.local_evicted:
        plan.deactivate = _stop_request(_conditions(group.local), winner, group.remotes[winner])
        return True
    plan.sync_job = winner
    plan.create_job = True
    if check.state not in ("Retry", "Rejected") and (check.state != "Ready" or cluster_name != winner):
        plan.check = CheckUpdate(
            "Ready",
            f'The workload was admitted on "{winner}"',
            cluster_name=winner,
            clear_nominated=True,
            admitted=_admitted_with_ready(group.local, group.inputs.check_name),
        )
        plan.events.append(("Normal", plan.check.message))
        plan.admitted_on = winner
    plan.requeue_after = group.inputs.worker_lost_timeout.total_seconds()
    return True


def _retry_a_lost_winner(group: _Group, plan: Plan) -> bool:
    """The check is Ready but the winner's admitted copy is not there: wait out
    workerLostTimeout for an unreachable winner, then (or at once, for a copy gone from a
    reachable one) ask for a retry."""
    inputs, cluster_name = group.inputs, group.cluster_name
    if cluster_name and cluster_name not in group.available:
        lost = next((cl for cl in inputs.clusters if cl.name == cluster_name), None)
        since = lost.lost_since if lost is not None and lost.lost_since is not None else inputs.now
        remaining = inputs.worker_lost_timeout - (inputs.now - since)
        if remaining > timedelta(0):
            plan.requeue_after = remaining.total_seconds()
            return True
        message = "Admitting remote lost"
    elif not cluster_name:
        message = "Admission check is Ready but no admitting cluster is recorded; this is unexpected, please report it"
    else:
        message = "Admitting remote no longer exists"
    plan.check = CheckUpdate("Retry", _with_previous(message, group.check.state))
    plan.events.append(("Normal", plan.check.message))
    plan.retried_on = cluster_name or None
    return True


def _open_a_preemption_gate(group: _Group, plan: Plan) -> bool:
    """Kueue's step 7 under orchestrated preemption: no copy admitted yet, so the worker whose
    copy has waited longest to preempt may preempt now, one worker per timeout. Never ends the pass."""
    if not group.inputs.orchestrated_preemption:
        return False
    candidates = {k: v for k, v in group.remotes.items() if k not in group.blocked and k not in plan.delete}
    plan.open_gate, look_again = preemption_gate_to_open(candidates, now=group.inputs.now)
    if look_again is not None:
        seconds = look_again.total_seconds()
        plan.requeue_after = seconds if plan.requeue_after is None else min(plan.requeue_after, seconds)
    return False


def component_placement(index: int, siblings: Mapping[str, tuple[int, str]]) -> tuple[bool, str | None]:
    """Kueue's component Workloads under MultiKueue (isPrimaryComponentWorkload and
    getComponentWorkloadsClusterName): (whether this one may pick its worker, the worker its
    siblings went to). The lowest index picks; a sibling's worker binds every other. None for
    the worker: siblings went to different workers (which never happens by these rules)."""
    clusters = {cluster for _, cluster in siblings.values() if cluster}
    if len(clusters) > 1:
        return False, None
    primary = all(other >= index for other, _ in siblings.values())
    return primary, next(iter(clusters), "")


def _follow_the_components(group: _Group, plan: Plan) -> bool:
    """A component Workload goes where its siblings went; only the first (lowest index) picks
    a worker, the others wait for it. True: the nomination is decided here."""
    inputs, remotes = group.inputs, group.remotes
    if inputs.component_index is None:
        return False
    primary, assigned = component_placement(inputs.component_index, inputs.siblings)
    if assigned is None:
        message = "the Workloads of its job were admitted on different worker clusters"
    elif assigned:
        current = list(group.local.status.nominated_cluster_names or []) if group.local.status else []
        if current != [assigned]:
            plan.nominate = [assigned]
        takes_new = any(cl.name == assigned and cl.takes_new for cl in inputs.clusters)
        if assigned in group.available and takes_new and assigned not in remotes and assigned not in group.blocked:
            plan.create.append(assigned)
        plan.delete += [cluster for cluster in sorted(remotes) if cluster != assigned and cluster not in plan.delete]
        message = "" if assigned in group.available else f'waiting for worker cluster "{assigned}", where the rest of its job runs'
    elif primary:
        return False
    else:
        plan.delete += [cluster for cluster in sorted(remotes) if cluster not in plan.delete]
        message = "waiting for the first Workload of its job to be admitted on a worker cluster"
    if message and group.check.message != message:
        plan.check = CheckUpdate("Pending", message[:MAX_MESSAGE])
    return True


def _nominate_and_synchronize_workers(group: _Group, plan: Plan, *, refusal: str | None, placement: Choice | None) -> None:
    """Kueue's nominateAndSynchronizeWorkers: nothing is dispatched while an eviction is in
    progress, a winner is recorded, or another check is not Ready yet. Otherwise the
    dispatcher's nomination, a copy on each nominated worker, none elsewhere, and one message
    for all that holds the Workload back."""
    inputs, local, remotes = group.inputs, group.local, group.remotes
    if not awaiting_dispatch(local, inputs.check_name):
        return
    if _refuse_what_never_fits(group, plan, refusal=refusal):
        return
    if _follow_the_components(group, plan):
        return
    current = list(local.status.nominated_cluster_names or []) if local.status else []
    accepting = {cl.name for cl in inputs.clusters if cl.takes_new}
    if inputs.dispatcher == c.DISPATCHER_ALL_AT_ONCE:
        nominated = sorted(name for name in group.available if name not in group.blocked and name in accepting)
        if sorted(current) != nominated:
            plan.nominate = nominated
    elif inputs.dispatcher == c.DISPATCHER_CAPACITY_AWARE and placement is not None:
        # kfed's capacity-aware dispatcher: one copy, on the worker `place` chose by fit.
        nominated = [placement.worker] if placement.worker else []
        if current != nominated:
            plan.nominate = nominated
    else:
        nominated = [name for name in current if name not in group.blocked]
    for cluster in nominated:
        if cluster in group.available and cluster in accepting and cluster not in remotes:
            plan.create.append(cluster)
    # Kueue gates the copies of every dispatcher's nomination, not those of a component
    # following its siblings (one worker, where the rest of its job already runs).
    plan.gate_copies = inputs.orchestrated_preemption
    plan.delete += [cluster for cluster in sorted(remotes) if cluster not in nominated and cluster not in plan.delete]
    # One message says all that holds the Workload back (the capacity-aware dispatcher's reason
    # for sending no copy, then the workers' problems), so that no two rules take turns at it.
    waiting = placement.message if placement is not None and placement.worker is None else ""
    message = "; ".join(part for part in (waiting, _problems(inputs.dispatch, remotes, nominated)) if part)[:MAX_MESSAGE]
    if message and group.check.message != message:
        plan.check = CheckUpdate("Pending", message)


def _refuse_what_never_fits(group: _Group, plan: Plan, *, refusal: str | None) -> bool:
    """No worker could ever admit it (their queues shrank, or were unknown when it reserved
    quota), and no worker has reserved quota for a copy: the check asks for a retry, which gives
    the manager's quota back, and the scheduler refuses it the same way until a worker's queues
    change (kfed; Kueue would hold the quota)."""
    if not refusal or any(is_quota_reserved(copy) for copy in group.remotes.values()):
        return False
    plan.delete += [cluster for cluster in sorted(group.remotes) if cluster not in plan.delete]
    plan.check = CheckUpdate("Retry", refusal[:MAX_MESSAGE])
    plan.events.append(("Warning", plan.check.message))
    return True


def _only_lost_workers_may_run_it(inputs: WorkloadInputs) -> bool:
    """Whether the Job can run only on workers lost for workerLostTimeout or longer: no
    connected worker holds our Job, at least one worker is lost, and every disconnected
    worker has been lost that long. With every worker connected the answer is no: the copy
    or Job may just not be in the cache yet."""
    if any(cluster.connected and cluster.name in inputs.remote_jobs for cluster in inputs.clusters):
        return False
    lost = [cluster for cluster in inputs.clusters if not cluster.connected]
    if not lost:
        return False
    return all(inputs.now - (cluster.lost_since or inputs.now) >= inputs.worker_lost_timeout for cluster in lost)


def may_still_run_on(
    *,
    admitted_on: str | None,
    clusters: Sequence[ClusterHealth],
    jobs: Mapping[str, Resource | None],
    admitted_copies: frozenset[str] = frozenset(),
    never_seen: frozenset[str] = frozenset(),
    now: datetime,
    worker_lost_timeout: timedelta,
    adapter: JobAdapter[Any] = BATCH_JOB,
) -> str | None:
    """The worker where an evicted Workload's Job may still run or finish, or None: only then
    may the manager give its quota back, delete the copies and dispatch it again.

    `jobs` holds, per worker, our Job there: read live from each connected worker (a cache
    may not have seen it start yet), and as last known for a worker that is not connected. The
    eviction has already cleared `status.clusterName` (Kueue's prepareForEviction), so
    `admitted_on` is often None. A worker that is not connected counts, until workerLostTimeout
    has passed since it was lost (Kueue's promise: after that its pods count as gone), when it
    admitted the Workload, when its last known Job was not stopped, when its last known copy
    was admitted there (`admitted_copies`: its agent may have started the Job since), or when
    this manager has never seen it (`never_seen`: nothing is known).

    A connected worker counts while its Job is not stopped, and while its copy is still
    admitted there and its admission agent runs: that agent may start a stopped Job at any moment
    (seen: a Job read suspended, deleted as it was being started, run again elsewhere). The
    eviction deactivates the copy, and the worker releases it once its Job has stopped."""
    for cluster in clusters:
        job = jobs.get(cluster.name)
        running = job is not None and not adapter.stopped(job)
        if cluster.connected:
            if running or (cluster.name in admitted_copies and cluster.accepts_new):
                return cluster.name
            continue
        if now - (cluster.lost_since or now) >= worker_lost_timeout:
            continue
        if running or cluster.name in (admitted_on, *admitted_copies, *never_seen):
            return cluster.name
    return None


def _problems(state: DispatchState, remotes: Mapping[str, Workload], nominated: Sequence[str]) -> str:
    """Why nominated workers cannot admit the copy, said on the manager's check: a copy the
    worker's queues reject as misconfigured (a missing LocalQueue), a copy that cannot be
    created (a missing namespace), or a foreign Job in the way."""
    found = []
    for cluster in sorted(set(nominated) | set(state.blocked)):
        if cluster in state.blocked:
            found.append(f"{cluster}: {state.blocked[cluster]}")
            continue
        if cluster in state.problems:
            found.append(f"{cluster}: {state.problems[cluster]}")
            continue
        remote = remotes.get(cluster)
        reserved = find_condition(_conditions(remote), c.QUOTA_RESERVED) if remote is not None else None
        if reserved is not None and reserved.status == "False" and reserved.reason in ("Misconfigured", "Inadmissible"):
            found.append(f"{cluster}: {reserved.message}")
    if not found:
        return ""
    return ("The workload cannot be admitted on some worker clusters: " + "; ".join(found))[:MAX_MESSAGE]


# --- the garbage collector -------------------------------------------------------------------------
def plan_gc(remote_keys: Sequence[str], *, local: Mapping[str, bool]) -> list[str]:
    """Remote workloads of our origin to delete: those whose manager Workload is gone or being
    deleted (`local[key]` is True while it is being deleted). Other origins never reach here."""
    return sorted(key for key in remote_keys if key not in local or local[key])


# --- conditions ------------------------------------------------------------------------------------
def admission_check_active(
    *, config_name: str | None, config_clusters: Sequence[str] | None, clusters: Mapping[str, bool]
) -> tuple[str, str, str]:
    """The MultiKueue AdmissionCheck's Active condition: (status, reason, message).
    `config_clusters` None means the MultiKueueConfig does not exist; `clusters` maps each
    existing MultiKueueCluster to whether it is Active."""
    if config_name is None:
        return "False", "BadConfig", "Cannot load the AdmissionChecks parameters: the parameters must reference a MultiKueueConfig"
    if config_clusters is None:
        not_found = f'MultiKueueConfig.kueue.x-k8s.io "{config_name}" not found'
        return "False", "BadConfig", f"Cannot load the AdmissionChecks parameters: {not_found}"
    missing = [name for name in config_clusters if name not in clusters]
    inactive = [name for name in config_clusters if name in clusters and not clusters[name]]
    if not missing and not inactive:
        return "True", "Active", "The admission check is active"
    parts = []
    if missing:
        parts.append(f"Missing clusters: [{' '.join(missing)}]")
    if inactive:
        parts.append(f"Inactive clusters: [{' '.join(inactive)}]")
    message = ", ".join(parts)
    if len(missing) + len(inactive) < len(config_clusters):
        return "True", "SomeActiveClusters", message
    return "False", "NoUsableClusters", message


def worker_namespaces(annotations: Mapping[str, str] | None) -> tuple[str, ...] | None:
    """The namespaces a MultiKueueCluster's annotation names (sorted, each once), or None for
    the whole cluster. Raises ValueError naming the annotation when it is not a comma-separated
    list of namespace names."""
    raw = (annotations or {}).get(WORKER_NAMESPACES_ANNOTATION)
    if raw is None:
        return None
    names = sorted({part.strip() for part in raw.split(",") if part.strip()})
    bad = [name for name in names if len(name) > 63 or not re.fullmatch(DNS_LABEL_PATTERN, name)]
    if not names or bad:
        what = f'"{bad[0]}" is not a namespace name' if bad else "names no namespace"
        raise ValueError(f"metadata.annotations[{WORKER_NAMESPACES_ANNOTATION}]: Invalid value: {raw!r}: {what}")
    return tuple(names)


def connection_failed_message(message: str, *, attempts: int, next_attempt: datetime) -> str:
    """Kueue's ClientConnectionFailed message, with the attempt count and the next attempt."""
    if attempts <= 0:
        return message
    return f"{message}; connection attempts: {attempts}, next connection attempt: {next_attempt.strftime('%Y-%m-%dT%H:%M:%SZ')}"
