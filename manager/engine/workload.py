"""Kueue's workload rules (its pkg/workload), in one home that every layer uses: the engine's
view of one Workload (its requests, priority, queue position and state, built once from the
API object), and the pure predicates and decisions on a Workload that the engine, the
controllers, the federation and the CLI all ask instead of reading conditions themselves.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, TypeGuard, cast

from manager.api import constants as c
from manager.api.config import Configuration
from manager.api.core import PriorityClass
from manager.api.kueue import AdmissionCheck, AdmissionCheckState, RequeueState, Workload, WorkloadPriorityClass
from manager.api.meta import (
    MAX_CONDITION_MESSAGE,
    Condition,
    OwnerReference,
    Toleration,
    find_condition,
    is_condition_true,
    set_condition,
    transition_time,
)
from manager.engine.requests import LimitRangeDefaults, Requests, pod_requests, transform
from manager.engine.units import FlavorResource, amount

# Condition reasons Kueue writes (workload_types.go).
REASON_QUOTA_RESERVED = "QuotaReserved"
REASON_ADMITTED = "Admitted"
REASON_NO_RESERVATION = "NoReservation"
REASON_UNSATISFIED_CHECKS = "UnsatisfiedAdmissionChecks"
REASON_PREEMPTED = "Preempted"
REASON_PENDING_EVALUATION = "PendingEvaluation"
REASON_WAITING_FOR_QUOTA = "WaitingForQuota"
REASON_WAITING_FOR_PREEMPTED = "WaitingForPreemptedWorkloads"
REASON_NO_MATCHING_FLAVOR = "NoMatchingFlavor"
REASON_EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
REASON_MISCONFIGURED = "Misconfigured"
REASON_SUSPENDED = "Suspended"
REASON_CQ_STOPPED = "ClusterQueueStopped"
REASON_LQ_STOPPED = "LocalQueueStopped"
REASON_DEACTIVATED = "Deactivated"
REASON_ADMISSION_CHECK = "AdmissionCheck"
# The job reconciler's QuotaReserved reason when an evicted job's quota is given back.
REASON_PENDING = "Pending"
REASON_INADMISSIBLE = "Inadmissible"  # Kueue's fallback when UnadmittedWorkloadsObservability is off
# A condition another controller sets to ask Kueue's workload controller to deactivate a
# Workload (the MultiKueue manager does, for a copy it evicted); the eviction consumes it.
DEACTIVATION_TARGET = "DeactivationTarget"

# Conditions the admission side owns; the others (Finished, PodsReady, ...) belong to the
# job integration and are carried over untouched.
OWNED_CONDITIONS = (c.QUOTA_RESERVED, c.ADMITTED, c.EVICTED, c.PREEMPTED, c.REQUEUED, c.BLOCKED_ON_PREEMPTION_GATES)
# What the scheduler says of a Workload that needs to preempt while one of its preemption gates is
# closed (Kueue's markPreemptionGated): its QuotaReserved reason and both conditions' message.
REASON_ADMISSION_GATED = "AdmissionGated"
PREEMPTION_GATED_MESSAGE = "Workload requires preemption, but it's gated"

NO_RESERVATION_MESSAGE = "The workload has no reservation"
ADMITTED_MESSAGE = "The workload is admitted"
UNSATISFIED_CHECKS_MESSAGE = "The workload has not all checks ready"


def admitted_condition(*, reserved: bool, check_states: Iterable[str]) -> tuple[str, str, str]:
    """Kueue's SyncAdmittedCondition as (status, reason, message): Admitted once quota is
    reserved and every admission check is Ready. The engine keeps the condition by this rule,
    and the MultiKueue check writes it with its own Ready (one write instead of two)."""
    if not reserved:
        return "False", REASON_NO_RESERVATION, NO_RESERVATION_MESSAGE
    if all(state == "Ready" for state in check_states):
        return "True", REASON_ADMITTED, ADMITTED_MESSAGE
    return "False", REASON_UNSATISFIED_CHECKS, UNSATISFIED_CHECKS_MESSAGE


@dataclass(slots=True, frozen=True)
class PodSetInfo:
    """A podSet: its count, minCount and what one pod asks for (after transformations)."""

    name: str
    count: int
    min_count: int | None
    per_pod: Requests
    spec: dict[str, Any]
    tolerations: tuple[Toleration, ...]
    reclaimable: int = 0

    @property
    def effective_count(self) -> int:
        return max(0, self.count - self.reclaimable)

    def total(self, count: int | None = None) -> Requests:
        n = self.effective_count if count is None else count
        return {name: value * n for name, value in self.per_pod.items()}


@dataclass(slots=True)
class AssignedPodSet:
    """One podSet of `status.admission`: flavors per resource, usage per resource, count."""

    name: str
    flavors: dict[str, str]
    usage: Requests
    count: int


@dataclass(slots=True)
class Cond:
    """A condition as the engine keeps it (a metav1.Condition without the validation)."""

    status: str
    reason: str
    message: str
    last_transition_time: datetime


@dataclass(slots=True, eq=False)
class WorkloadInfo:
    key: str
    namespace: str
    name: str
    uid: str
    queue_name: str
    priority: int
    created: datetime
    pod_sets: list[PodSetInfo]
    obj: Workload
    active: bool = True
    scheduling_hash: str = ""
    # Where it stands: the ClusterQueue its LocalQueue points to, and its reservation.
    cluster_queue: str = ""
    admission: list[AssignedPodSet] | None = None
    admission_cq: str = ""
    usage: dict[FlavorResource, int] = field(default_factory=dict)
    reserved_at: datetime | None = None
    evicted_at: datetime | None = None
    order_time: datetime | None = None
    checks: dict[str, str] = field(default_factory=dict)
    conditions: dict[str, Cond] = field(default_factory=dict)
    last_assignment: Any = None
    resource_requests: list[tuple[str, Requests]] | None = None
    evicted: bool = False
    # Kueue's prepareForEviction: checks reset to Pending (name -> (message, retryCount)) and the
    # MultiKueue cluster nomination cleared, to be written with the eviction.
    check_resets: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    reset_nomination: bool = False
    close_preemption_gates: bool = False  # the eviction closes them, in the same write
    # The ClusterQueue of the workload that preempted this one (Kueue's preempting_cluster_queue
    # label, reported once the eviction is written).
    preempted_by: str = ""
    # waitForPodsReady: status.requeueState's requeueAt as read, and a new requeueState to
    # write with the eviction (a 1-tuple; (None,) clears it), like check_resets.
    requeue_at: datetime | None = None
    requeue_state_write: tuple[RequeueState | None] | None = None
    _candidate_key: tuple[bool, int, float, str] | None = None
    # Set while a ClusterQueue holds this workload's quota: drops that queue's cached candidate
    # order, which sorts by this workload's key (`ClusterQueueInfo.sorted_workloads`).
    _forget_holder_order: Callable[[], None] | None = field(default=None, repr=False)
    # What the last flush saw (see AdmissionState.flush): unchanged means no status to compute.
    flushed_view: tuple[Any, ...] | None = None

    def candidate_key(self) -> tuple[bool, int, float, str]:
        """Kueue's CandidatesOrdering within one group: evicted first, lower priority, newest
        reservation, then UID. Cached; `forget_key` drops it when the parts change."""
        key = self._candidate_key
        if key is None:
            reserved = self.reserved_at.timestamp() if self.reserved_at is not None else float("inf")
            key = self._candidate_key = (not self.evicted, self.priority, -reserved, self.uid)
        return key

    def forget_key(self) -> None:
        """The key's parts changed: drop it, and the order of the queue holding this workload."""
        self._candidate_key = None
        if self._forget_holder_order is not None:
            self._forget_holder_order()

    def held_by(self, forget_order: Callable[[], None] | None) -> None:
        """Called by the cache as a ClusterQueue starts (`forget_order`) or stops (None) holding
        this workload's quota."""
        self._forget_holder_order = forget_order

    @property
    def reserved(self) -> bool:
        return self.admission is not None

    @property
    def queue_time(self) -> datetime:
        """Kueue's queue-order timestamp: creation, or the eviction time when requeued by it."""
        return self.order_time or self.created

    def set_condition(self, kind: str, status: str, reason: str, message: str, now: datetime) -> None:
        """Set a condition; lastTransitionTime changes only when the status does (Kubernetes)."""
        when = transition_time(self.conditions.get(kind), status, now)
        self.conditions[kind] = Cond(status, reason, message[:MAX_CONDITION_MESSAGE], when)
        if kind == c.EVICTED:
            if status == "True" and not self.evicted:
                self._prepare_for_eviction()
                # Kueue's eviction says, with its own reason, that the gate no longer blocks it.
                if self.condition_true(c.BLOCKED_ON_PREEMPTION_GATES):
                    self.set_condition(c.BLOCKED_ON_PREEMPTION_GATES, "False", reason, message, now)
            if self.evicted != (status == "True"):
                self.evicted = status == "True"
                self.forget_key()  # evicted workloads sort first among preemption candidates

    def _prepare_for_eviction(self) -> None:
        """Same as Kueue's evict.prepareForEviction: every check that is not Pending goes back
        to Pending (a Retry counts one more retry), and the cluster nomination is cleared."""
        status = self.obj.status
        observed = {check.name: check for check in (status.admission_checks if status else None) or []}
        for name, state in list(self.checks.items()):
            if state == "Pending":
                continue
            retry_count = None
            if state == "Retry":
                previous = observed.get(name)
                retry_count = ((previous.retry_count if previous is not None else None) or 0) + 1
            self.check_resets[name] = (f"Reset to Pending after eviction. Previously: {state}", retry_count)
            self.checks[name] = "Pending"
        self.reset_nomination = True
        self.close_preemption_gates = True

    def forget_unwritten_blocker(self) -> None:
        """A `Misconfigured` QuotaReserved=False set in memory but never written (a LocalQueue,
        ClusterQueue or namespace seen missing while the caches were still filling at start),
        once the workload has a queue: back to what the cluster says. Kueue's workload
        controller starts only when its caches have synced, so it never writes such a blocker."""
        mine = self.conditions.get(c.QUOTA_RESERVED)
        if mine is None or mine.reason != REASON_MISCONFIGURED:
            return
        for kind in (c.QUOTA_RESERVED, c.ADMITTED):
            written = find_condition(conditions_of(self.obj), kind)
            if written is None:
                self.conditions.pop(kind, None)
            elif (self.conditions[kind].status, self.conditions[kind].reason, self.conditions[kind].message) != (
                written.status,
                written.reason,
                written.message,
            ):
                self.conditions[kind] = from_condition(written, default_time=self.created)

    def carry_foreign(self, wl: Workload) -> None:
        """Take what others own from a newer copy of the object: the admission checks' states
        and the conditions the admission side does not write."""
        self.obj = wl
        status = wl.status
        self.checks = {check.name: check.state for check in (status.admission_checks if status else None) or []} or self.checks
        for cond in (status.conditions if status else None) or []:
            if cond.type not in OWNED_CONDITIONS:
                self.conditions[cond.type] = from_condition(cond, default_time=self.created)

    def condition_true(self, kind: str) -> bool:
        cond = self.conditions.get(kind)
        return cond is not None and cond.status == "True"

    def frs(self) -> set[FlavorResource]:
        return set(self.usage)


def has_closed_preemption_gate(wl: Workload) -> bool:
    """Kueue's HasClosedPreemptionGate: a gate of the spec whose state in the status is not Open
    (a gate only in the spec counts as closed, so that a Workload can be created gated)."""
    positions = {state.name: state.position for state in (wl.status.preemption_gates if wl.status else None) or []}
    return any(positions.get(gate.name, "Closed") == "Closed" for gate in wl.spec.preemption_gates or [])


def preemption_gates_view(wl: Workload) -> tuple[tuple[str, str], ...]:
    """The gates' positions, to tell whether an update opened one (the Workload is then tried again)."""
    return tuple((state.name, state.position) for state in (wl.status.preemption_gates if wl.status else None) or [])


def stable_uid(key: str) -> str:
    """A deterministic UID for objects given without one, so results do not depend on input order."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kfed:{key}"))


def _tolerations(spec: dict[str, Any]) -> tuple[Toleration, ...]:
    raw = spec.get("tolerations") or []
    return tuple(Toleration.model_validate(t) for t in raw if isinstance(t, dict))


def _shape(spec: dict[str, Any]) -> str:
    return repr((spec.get("nodeSelector"), spec.get("affinity"), spec.get("tolerations")))


def build_info(
    wl: Workload,
    *,
    priority: int,
    created: datetime,
    config: Configuration | None = None,
    defaults: LimitRangeDefaults | None = None,
) -> WorkloadInfo:
    """The engine's WorkloadInfo for an API Workload. Raises RequestError for unreadable resources."""
    reclaimable = {p.name: p.count for p in (wl.status.reclaimable_pods or [])} if wl.status else {}
    pod_sets: list[PodSetInfo] = []
    for i, ps in enumerate(wl.spec.pod_sets):
        template = ps.template or {}
        spec = template.get("spec") or {}
        if not isinstance(spec, dict):
            spec = {}
        per_pod = transform(pod_requests(spec, path=f"spec.podSets[{i}].template.spec", defaults=defaults), config)
        pod_sets.append(
            PodSetInfo(
                name=ps.name,
                count=ps.count,
                min_count=ps.min_count,
                per_pod=per_pod,
                spec=spec,
                tolerations=_tolerations(spec),
                reclaimable=reclaimable.get(ps.name, 0),
            )
        )
    key = f"{wl.namespace}/{wl.name}"
    shape = repr(
        (
            priority,
            [(p.name, p.effective_count, p.min_count, sorted(p.per_pod.items()), _shape(p.spec)) for p in pod_sets],
        )
    )
    info = WorkloadInfo(
        key=key,
        namespace=wl.namespace,
        name=wl.name,
        uid=wl.metadata.uid or stable_uid(key),
        queue_name=wl.spec.queue_name or "",
        priority=priority,
        created=created,
        pod_sets=pod_sets,
        obj=wl,
        active=is_active(wl),
        scheduling_hash=hashlib.sha256(shape.encode()).hexdigest()[:16],
    )
    status = wl.status
    if status is not None:
        for cond in status.conditions or []:
            info.conditions[cond.type] = from_condition(cond, default_time=created)
        info.checks = {check.name: check.state for check in status.admission_checks or []}
        info.evicted = info.condition_true(c.EVICTED)
        evicted = info.conditions.get(c.EVICTED)
        by_creation = config is not None and config.pods_ready is not None and config.pods_ready.requeue_by_creation
        # Kueue's queue-order timestamp: the eviction's time after a check retry, and after a
        # PodsReady timeout unless requeuingStrategy.timestamp is Creation.
        requeued_by = (REASON_ADMISSION_CHECK,) if by_creation else (REASON_ADMISSION_CHECK, "PodsReadyTimeout")
        if evicted is not None and evicted.status == "True" and evicted.reason in requeued_by:
            info.order_time = evicted.last_transition_time
        if status.requeue_state is not None:
            info.requeue_at = status.requeue_state.requeue_at
        if status.admission is not None and info.condition_true(c.QUOTA_RESERVED):
            info.admission_cq = status.admission.cluster_queue
            info.admission = admission_from_status(wl)
            info.usage = usage_of(info.admission)
            reserved = info.conditions[c.QUOTA_RESERVED]
            info.reserved_at = reserved.last_transition_time
    return info


def admission_from_status(wl: Workload) -> list[AssignedPodSet]:
    assert wl.status is not None and wl.status.admission is not None
    out = []
    for psa in wl.status.admission.pod_set_assignments:
        usage = {name: amount(name, q) for name, q in (psa.resource_usage or {}).items()}
        out.append(AssignedPodSet(psa.name, dict(psa.flavors or {}), usage, psa.count if psa.count is not None else 0))
    return out


def usage_of(admission: list[AssignedPodSet]) -> dict[FlavorResource, int]:
    usage: dict[FlavorResource, int] = {}
    for assigned in admission:
        for resource, value in assigned.usage.items():
            flavor = assigned.flavors.get(resource)
            if flavor is None or value == 0:
                continue
            fr = (flavor, resource)
            usage[fr] = usage.get(fr, 0) + value
    return usage


def from_condition(cond: Condition, *, default_time: datetime) -> Cond:
    """The engine's copy of a condition read from the API (`default_time` when it has none)."""
    return Cond(cond.status, cond.reason, cond.message, cond.last_transition_time or default_time)


def to_condition(kind: str, cond: Cond) -> Condition:
    # Not validated again: every field comes from a Cond, which holds only validated values
    # (read from the cluster, or the engine's own, messages cut by set_condition), and this ran
    # for each condition of each status built, a tenth of the manager's CPU.
    status = cast(Literal["True", "False", "Unknown"], cond.status)
    return Condition.model_construct(
        type=kind, status=status, reason=cond.reason, message=cond.message, last_transition_time=cond.last_transition_time
    )


# --- rules on the API object ------------------------------------------------------------------------
def conditions_of(wl: Workload) -> list[Condition] | None:
    return wl.status.conditions if wl.status else None


def has_quota_reservation(wl: Workload) -> bool:
    """Kueue's HasQuotaReservation: an admission and QuotaReserved=True."""
    return wl.status is not None and wl.status.admission is not None and is_condition_true(wl.status.conditions, c.QUOTA_RESERVED)


def is_quota_reserved(wl: Workload) -> bool:
    """The QuotaReserved condition alone, as a worker's copy says it (has_quota_reservation also
    asks for the admission the manager's own Workload holds)."""
    return is_condition_true(conditions_of(wl), c.QUOTA_RESERVED)


def is_admitted(wl: Workload) -> bool:
    return is_condition_true(conditions_of(wl), c.ADMITTED)


def queued_since(wl: Workload) -> datetime | None:
    """Kueue's QueuedWaitTime starts at creation, or at the last Requeued transition."""
    requeued = find_condition(wl.status.conditions if wl.status else None, c.REQUEUED)
    if requeued is not None and requeued.last_transition_time is not None:
        return requeued.last_transition_time
    return wl.metadata.creation_timestamp


def admission_wait(wl: Workload) -> tuple[datetime, float] | None:
    """When an admitted Workload was admitted, and how long it had waited: what Kueue's
    `kueue_admission_wait_time_seconds` observed then, read back from the object (from its
    creation, or from its last requeue when that came before the admission)."""
    admitted = find_condition(conditions_of(wl), c.ADMITTED)
    if admitted is None or admitted.status != "True" or admitted.last_transition_time is None:
        return None
    at = admitted.last_transition_time
    start = queued_since(wl)
    if start is None or start > at:
        start = wl.metadata.creation_timestamp
    return (at, max(0.0, (at - start).total_seconds())) if start is not None else None


def is_finished(wl: Workload) -> bool:
    return is_condition_true(conditions_of(wl), c.FINISHED)


def is_evicted(wl: Workload) -> bool:
    return is_condition_true(conditions_of(wl), c.EVICTED)


def is_preempted(wl: Workload) -> bool:
    return is_condition_true(conditions_of(wl), c.PREEMPTED)


def has_deactivation_target(wl: Workload) -> bool:
    """Whether another controller asked Kueue's workload controller to deactivate it."""
    return is_condition_true(conditions_of(wl), DEACTIVATION_TARGET)


def is_active(wl: Workload) -> bool:
    """spec.active defaults to true: only an explicit false deactivates."""
    return wl.spec.active is not False


def workload_priority(
    wl: Workload,
    wpcs: Mapping[str, WorkloadPriorityClass] | None = None,
    pcs: Mapping[str, PriorityClass] | None = None,
) -> int:
    """spec.priority when set, else the value of the referenced priority class (0 when unknown)."""
    if wl.spec.priority is not None:
        return wl.spec.priority
    ref = wl.spec.priority_class_ref
    if ref is None:
        return 0
    if ref.kind == "WorkloadPriorityClass":
        wpc = (wpcs or {}).get(ref.name)
        return wpc.value if wpc else 0
    pc = (pcs or {}).get(ref.name)
    return pc.value if pc else 0


def controller_owner(wl: Workload) -> OwnerReference | None:
    """The owner reference marked controller (the Job), if any."""
    return next((ref for ref in wl.metadata.owner_references or [] if ref.controller), None)


def owner_name(wl: Workload) -> str:
    """The name a person knows a Workload by: its controlling owner's (the Job), else the job it
    is one of several Workloads of (a LeaderWorkerSet's group), else its own."""
    owner = controller_owner(wl)
    if owner is not None:
        return owner.name
    return (wl.metadata.annotations or {}).get(c.JOB_OWNER_NAME_ANNOTATION) or wl.name


class AdmissionChecks(Protocol):
    """AdmissionChecks by name: a dict, or a cache of them."""

    def get(self, name: str, /) -> AdmissionCheck | None: ...


def is_multikueue_controller(controller_name: str) -> bool:
    """Whether an AdmissionCheck's controllerName is MultiKueue's (the one test, as Kueue decides)."""
    return controller_name == c.MULTIKUEUE_CONTROLLER_NAME


def is_multikueue_check(check: AdmissionCheck | None) -> TypeGuard[AdmissionCheck]:
    """Whether an AdmissionCheck is MultiKueue's (by its controllerName, as Kueue decides)."""
    return check is not None and is_multikueue_controller(check.spec.controller_name)


def multikueue_check_name(names: Iterable[str], checks: AdmissionChecks) -> str | None:
    """The first of `names` that is a MultiKueue AdmissionCheck."""
    return next((name for name in names if is_multikueue_check(checks.get(name))), None)


def check_states(wl: Workload) -> dict[str, AdmissionCheckState]:
    """The Workload's admission check states, by check name, in its status order."""
    return {state.name: state for state in (wl.status.admission_checks if wl.status else None) or []}


def admission_check_state(wl: Workload, name: str) -> AdmissionCheckState | None:
    """The Workload's state of the admission check `name`, if it has one."""
    return check_states(wl).get(name)


def multikueue_check_state(wl: Workload, checks: AdmissionChecks) -> AdmissionCheckState | None:
    """The Workload's state of its MultiKueue admission check, if it has one."""
    states = check_states(wl)
    name = multikueue_check_name(states, checks)
    return states[name] if name is not None else None


# --- the end of an eviction and the requeue (Kueue's job reconciler, "handle eviction", and its workload controller)
# Evictions after which the workload is queued again at once (Requeued=True); after any other,
# Requeued=False names the eviction until the workload controller lets it back in.
_REQUEUED_AT_ONCE = ("Preempted", "NodeFailures")
# Requeued=False reasons the workload controller turns into Requeued=True: (reason, message).
BACKOFF_FINISHED = ("BackoffFinished", "The workload backoff was finished")
_REACTIVATED = ("Reactivated", "The workload was reactivated")


def requeued_on_release(evicted_reason: str) -> bool:
    """Requeued's status when an evicted job's quota is released: True only after a preemption
    or node failures (Kueue's job reconciler)."""
    return evicted_reason in _REQUEUED_AT_ONCE


def admitted_without_reservation(wl: Workload) -> tuple[str, str]:
    """(reason, message) of Admitted=False once the quota is released (Kueue's
    SyncAdmittedCondition): checks that are not all Ready are named too."""
    checks = (wl.status.admission_checks if wl.status else None) or []
    if any(check.state != "Ready" for check in checks):
        return "NoReservationUnsatisfiedChecks", "The workload has no reservation and not all checks ready"
    return "NoReservation", "The workload has no reservation"


def requeued_follow_up(wl: Workload, now: datetime) -> tuple[str, str] | None:
    """Kueue's workload controller for an active Workload whose Requeued is False: after a
    deactivation it is reactivated, after a check retry or a PodsReady timeout its backoff
    (`status.requeueState.requeueAt`) has run out. (reason, message) for Requeued=True, or None."""
    if wl.spec.active is False or wl.status is None:
        return None
    requeued = next((cond for cond in wl.status.conditions or [] if cond.type == c.REQUEUED), None)
    if requeued is None or requeued.status != "False":
        return None
    if requeued.reason == "Deactivated":
        return _REACTIVATED
    if requeued.reason in ("PodsReadyTimeout", "AdmissionCheck"):
        state = wl.status.requeue_state
        if state is not None and state.requeue_at is not None and state.requeue_at > now:
            return None
        return BACKOFF_FINISHED
    return None


def backoff_left(wl: Workload, now: datetime) -> float | None:
    """Seconds until the backoff of a Workload waiting to be requeued (Requeued=False after a
    check retry or a PodsReady timeout) runs out; None when it waits for none."""
    if wl.spec.active is False or wl.status is None:
        return None
    requeued = next((cond for cond in wl.status.conditions or [] if cond.type == c.REQUEUED), None)
    state = wl.status.requeue_state
    if requeued is None or requeued.status != "False" or state is None or state.requeue_at is None:
        return None
    left = (state.requeue_at - now).total_seconds()
    return left if left > 0 else None


# --- the condition writes (Kueue's pkg/workload setters) ---------------------------------------------
# Every writer of a Workload's conditions builds its patch here: a merge patch of the status,
# guarded by the resourceVersion it was computed from (a stale view ends in a conflict and a new
# plan), each condition set as Kubernetes' SetStatusCondition does (`set_condition`).
Patch = dict[str, Any]


def status_patch(wl: Workload, status: dict[str, Any]) -> Patch:
    """A merge patch of the Workload's status, guarded by the resourceVersion it was read at."""
    return {"metadata": {"resourceVersion": wl.metadata.resource_version}, "status": status}


def _set_conditions(wl: Workload, now: datetime, *new: Condition) -> list[dict[str, Any]]:
    """The Workload's conditions with each of `new` set (the whole list: a merge patch replaces it)."""
    conditions = conditions_of(wl)
    for cond in new:
        conditions = set_condition(conditions, cond, now=now)
    return [cond.to_dict() for cond in conditions or []]


def _condition(kind: str, status: str, reason: str, message: str) -> Condition:
    return Condition(type=kind, status=status, reason=reason, message=message[:MAX_CONDITION_MESSAGE])


def finish_patch(wl: Workload, *, reason: str, message: str, now: datetime) -> Patch:
    """Kueue's workload.SetFinishedCondition: Finished=True with the job's reason and message
    (the job reconciler's, or the worker's copy's for MultiKueue's workloadfinish)."""
    return status_patch(wl, {"conditions": _set_conditions(wl, now, _condition(c.FINISHED, "True", reason, message))})


def requeue_patch(wl: Workload, *, reason: str, message: str, now: datetime) -> Patch:
    """Kueue's workload controller: Requeued=False turns True once the workload may be queued
    again (reactivated, or its backoff ran out); requeueAt is cleared once the backoff ran out."""
    status: dict[str, Any] = {"conditions": _set_conditions(wl, now, _condition(c.REQUEUED, "True", reason, message))}
    state = wl.status.requeue_state if wl.status else None
    if state is not None and state.requeue_at is not None:
        status["requeueState"] = {"requeueAt": None}
    return status_patch(wl, status)


def unset_reservation_patch(wl: Workload, *, reason: str, message: str, now: datetime) -> Patch:
    """Kueue's UnsetQuotaReservationWithCondition alone: QuotaReserved=False with `reason` and
    `message`, no admission, and Admitted synced. What Kueue's scheduler-performance runner
    writes to finish the eviction of a Workload that no job owns ("Evicted by the test runner");
    the engine gives the quota back once it observes it."""
    admitted_reason, admitted_message = admitted_without_reservation(wl)
    conditions = _set_conditions(
        wl,
        now,
        _condition(c.QUOTA_RESERVED, "False", reason, message),
        _condition(c.ADMITTED, "False", admitted_reason, admitted_message),
    )
    return status_patch(wl, {"admission": None, "conditions": conditions})


def release_patch(wl: Workload, *, now: datetime) -> Patch:
    """Kueue's UnsetQuotaReservationWithCondition once an evicted job has stopped: the quota
    goes back, with Requeued naming the eviction: True after a preemption or node failures,
    False after anything else (`requeued_on_release`)."""
    evicted = find_condition(conditions_of(wl), c.EVICTED)
    message = evicted.message if evicted is not None else "The workload was evicted"
    reason = evicted.reason if evicted is not None else REASON_PENDING
    admitted_reason, admitted_message = admitted_without_reservation(wl)
    status: dict[str, Any] = {
        "admission": None,
        "conditions": _set_conditions(
            wl,
            now,
            _condition(c.QUOTA_RESERVED, "False", REASON_PENDING, message),
            _condition(c.ADMITTED, "False", admitted_reason, admitted_message),
            _condition(c.REQUEUED, "True" if requeued_on_release(reason) else "False", reason, message),
        ),
    }
    admitted = find_condition(conditions_of(wl), c.ADMITTED)
    if admitted is not None and admitted.status == "True" and admitted.last_transition_time is not None:
        # Kueue's SyncAdmittedCondition: the time it ran counts into its past execution time.
        ran = int((now - admitted.last_transition_time).total_seconds())
        before = (wl.status.accumulated_past_execution_time_seconds if wl.status else None) or 0
        status["accumulatedPastExecutionTimeSeconds"] = before + ran
    return status_patch(wl, status)


def deactivation_patch(wl: Workload, *, reason: str, message: str, now: datetime) -> Patch:
    """Kueue's SetDeactivationTarget: asks the Workload's own workload controller to deactivate
    it (MultiKueue asks so of a worker's copy, whose worker then evicts it and stops its Job)."""
    target = _condition(DEACTIVATION_TARGET, "True", reason, message).model_copy(update={"observed_generation": wl.metadata.generation})
    return status_patch(wl, {"conditions": _set_conditions(wl, now, target)})


def pods_ready_patch(wl: Workload, *, pods_ready: tuple[str, str, str], now: datetime) -> Patch:
    """The job reconciler's PodsReady condition (status, reason, message; `pods_ready_condition`'s
    rule) with waitForPodsReady."""
    return status_patch(wl, {"conditions": _set_conditions(wl, now, _condition(c.PODS_READY, *pods_ready))})


def admitted_patch(wl: Workload, *, admitted: tuple[str, str, str], now: datetime) -> Patch:
    """Kueue's SyncAdmittedCondition written by another writer: the Admitted condition
    (status, reason, message; `admitted_condition`'s rule), as the MultiKueue check writes it
    with its own Ready."""
    return status_patch(wl, {"conditions": _set_conditions(wl, now, _condition(c.ADMITTED, *admitted))})


# --- why Kueue cannot queue a workload ------------------------------------------------------------------
# Its Misconfigured messages, written by the engine and recognised by `kfed explain` (on the
# manager, and on workers running kfed or upstream Kueue, which write the same).
MISSING_LOCAL_QUEUE = "MissingLocalQueue"
MISSING_CLUSTER_QUEUE = "MissingClusterQueue"
MISSING_NAMESPACE = "MissingNamespace"
NAMESPACE_NOT_SELECTED = "NamespaceNotSelected"
NAMESPACE_NOT_SELECTED_MESSAGE = "workload namespace doesn't match ClusterQueue selector"


def missing_local_queue_message(queue: str) -> str:
    return f"LocalQueue {queue} doesn't exist"


def missing_cluster_queue_message(cluster_queue: str) -> str:
    return f"ClusterQueue {cluster_queue} doesn't exist"


def missing_namespace_message(namespace: str) -> str:
    return f"namespace {namespace} doesn't exist"


_MISCONFIGURATIONS = (
    (MISSING_LOCAL_QUEUE, re.compile(r"\bLocalQueue \S+ doesn't exist")),
    (MISSING_CLUSTER_QUEUE, re.compile(r"\bClusterQueue \S+ doesn't exist")),
    # MultiKueue says it of a worker that lacks the namespace to copy the Workload into.
    (MISSING_NAMESPACE, re.compile(r"\bnamespace \S+ (?:doesn't exist|not found)")),
    (NAMESPACE_NOT_SELECTED, re.compile(re.escape(NAMESPACE_NOT_SELECTED_MESSAGE))),
)


def misconfiguration(message: str) -> str:
    """Which of the messages above `message` carries (MISSING_LOCAL_QUEUE, ...), or ""."""
    return next((kind for kind, pattern in _MISCONFIGURATIONS if pattern.search(message)), "")


# --- why a reserved workload is evicted (Kueue's workload controller) ----------------------------------
def retry_eviction_message(info: WorkloadInfo) -> str:
    """Kueue's message for an eviction by checks in Retry, with each check's own message."""
    status = info.obj.status
    messages = {check.name: check.message for check in (status.admission_checks if status else None) or []}
    names = sorted(name for name, state in info.checks.items() if state == "Retry")
    parts = [f'"{name}" ({messages[name]})' if messages.get(name) else f'"{name}"' for name in names]
    noun = "AdmissionChecks" if len(names) > 1 else "AdmissionCheck"
    return f"Evicted due to {noun} in Retry state: {'; '.join(parts)}"


def deactivation_eviction(info: WorkloadInfo) -> tuple[str, str]:
    """Kueue's eviction of a deactivated workload, naming the deactivation target's cause."""
    target = info.conditions.get(DEACTIVATION_TARGET)
    if target is not None and target.status == "True":
        return f"{REASON_DEACTIVATED}DueTo{target.reason}", f"The workload is deactivated due to {target.message}"
    return REASON_DEACTIVATED, "The workload is deactivated"


def eviction_labels(reason: str) -> tuple[str, str]:
    """(reason, underlying cause) of an Evicted condition's reason: the inverse of
    `deactivation_eviction`, which writes a deactivation caused by something else as
    `DeactivatedDueTo<cause>` (Kueue's metrics label them apart)."""
    prefix = REASON_DEACTIVATED + "DueTo"
    if reason.startswith(prefix):
        return REASON_DEACTIVATED, reason[len(prefix) :]
    return reason, ""


def reserved_release(
    info: WorkloadInfo, *, cluster_queue_policy: str | None, local_queue_policy: str | None, granular: bool
) -> tuple[str, str] | None:
    """(reason, message) of QuotaReserved=False when Kueue's workload controller gives back the
    quota of a workload that holds it but is not admitted yet (it waits for its admission
    checks), with no eviction (`UnsetQuotaReservationWithCondition`): its LocalQueue, then its
    ClusterQueue, missing or stopped (a policy of None: the queue is not there). `granular`:
    the UnadmittedWorkloadsObservability gate's reasons, else Kueue's fallback, Inadmissible.
    These are the only cases where the engine releases a reservation itself; every other
    release is the job integration's, after an eviction."""
    if info.condition_true(c.ADMITTED):
        return None
    for kind, name, policy in (
        ("LocalQueue", info.queue_name, local_queue_policy),
        ("ClusterQueue", info.admission_cq, cluster_queue_policy),
    ):
        if policy is None:
            return (REASON_MISCONFIGURED if granular else REASON_INADMISSIBLE), f"{kind} {name} is terminating or missing"
        if policy != "None":
            return (REASON_SUSPENDED if granular else REASON_INADMISSIBLE), f"{kind} {name} is stopped"
    return None


def stop_policy_eviction(info: WorkloadInfo, *, cluster_queue_policy: str | None, local_queue_policy: str | None) -> tuple[str, str] | None:
    """(reason, message) when a stop policy evicts this admitted workload: HoldAndDrain on its
    LocalQueue, then on its ClusterQueue (Kueue's order). A reservation not admitted yet is
    given back instead (`reserved_release`)."""
    if not info.condition_true(c.ADMITTED):
        return None
    for policy, reason, message in (
        (local_queue_policy, REASON_LQ_STOPPED, "The LocalQueue is stopped"),
        (cluster_queue_policy, REASON_CQ_STOPPED, "The ClusterQueue is stopped"),
    ):
        if policy == "HoldAndDrain":
            return reason, message
    return None


def reserved_eviction(info: WorkloadInfo, *, cluster_queue_policy: str | None, local_queue_policy: str | None) -> tuple[str, str] | None:
    """(reason, message) when Kueue's workload controller evicts a workload holding quota: a
    stop policy first, then a deactivation, then an admission check asking for a retry."""
    eviction = stop_policy_eviction(info, cluster_queue_policy=cluster_queue_policy, local_queue_policy=local_queue_policy)
    if eviction is None and not info.active:
        eviction = deactivation_eviction(info)
    if eviction is None and any(state == "Retry" for state in info.checks.values()):
        eviction = (REASON_ADMISSION_CHECK, retry_eviction_message(info))
    return eviction
