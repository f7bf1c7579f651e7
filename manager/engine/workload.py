"""The engine's view of one Workload: its requests, priority, queue position and state.

Built once from the API object; the scheduler reads and updates these, and `to_status`
turns them back into Kueue's status fields.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

from manager.api import constants as c
from manager.api.config import Configuration
from manager.api.kueue import Workload
from manager.api.meta import MAX_CONDITION_MESSAGE, Condition, Toleration
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
    status: str
    reason: str
    message: str
    time: datetime


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
    _candidate_key: tuple[bool, int, float, str] | None = None
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
        self._candidate_key = None

    @property
    def reserved(self) -> bool:
        return self.admission is not None

    @property
    def queue_time(self) -> datetime:
        """Kueue's queue-order timestamp: creation, or the eviction time when requeued by it."""
        return self.order_time or self.created

    def set_condition(self, kind: str, status: str, reason: str, message: str, now: datetime) -> None:
        """Set a condition; lastTransitionTime changes only when the status does (Kubernetes)."""
        old = self.conditions.get(kind)
        when = old.time if old is not None and old.status == status else now
        self.conditions[kind] = Cond(status, reason, message[:MAX_CONDITION_MESSAGE], when)
        if kind == c.EVICTED:
            if status == "True" and not self.evicted:
                self._prepare_for_eviction()
            self.evicted = status == "True"
            self._candidate_key = None

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

    def condition_true(self, kind: str) -> bool:
        cond = self.conditions.get(kind)
        return cond is not None and cond.status == "True"

    def frs(self) -> set[FlavorResource]:
        return set(self.usage)


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
        active=wl.spec.active is not False,
        scheduling_hash=hashlib.sha256(shape.encode()).hexdigest()[:16],
    )
    status = wl.status
    if status is not None:
        for cond in status.conditions or []:
            info.conditions[cond.type] = Cond(cond.status, cond.reason, cond.message, cond.last_transition_time or created)
        info.checks = {check.name: check.state for check in status.admission_checks or []}
        info.evicted = info.condition_true(c.EVICTED)
        evicted = info.conditions.get(c.EVICTED)
        if evicted is not None and evicted.status == "True" and evicted.reason in ("PodsReadyTimeout", "AdmissionCheck"):
            info.order_time = evicted.time
        if status.admission is not None and info.condition_true(c.QUOTA_RESERVED):
            info.admission_cq = status.admission.cluster_queue
            info.admission = admission_from_status(wl)
            info.usage = usage_of(info.admission)
            reserved = info.conditions[c.QUOTA_RESERVED]
            info.reserved_at = reserved.time
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


def to_condition(kind: str, cond: Cond) -> Condition:
    # Not validated again: every field comes from a Cond, which holds only validated values
    # (read from the cluster, or the engine's own, messages cut by set_condition), and this ran
    # for each condition of each status built, a tenth of the manager's CPU.
    status = cast(Literal["True", "False", "Unknown"], cond.status)
    return Condition.model_construct(type=kind, status=status, reason=cond.reason, message=cond.message, last_transition_time=cond.time)
