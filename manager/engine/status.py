"""The statuses Kueue writes, rendered from the engine's view (pure: the time is an argument).

A Workload's status (`workload_status`), whether it differs from what the cluster holds in
what the admission side owns (`same_status`), the Events such a change raises
(`status_events`), and the ClusterQueue and LocalQueue statuses with their counts and usage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.kueue import (
    Admission,
    AdmissionCheckState,
    ClusterQueueStatus,
    FlavorUsage,
    LocalQueueFlavorUsage,
    LocalQueueResourceUsage,
    LocalQueueStatus,
    PodSetAssignment,
    PodSetRequest,
    PreemptionGateState,
    ResourceUsage,
    WorkloadStatus,
)
from manager.api.meta import Condition, find_condition, transition_time
from manager.engine.cache import Cache, ClusterQueueInfo
from manager.engine.fairshare import dominant_resource_share
from manager.engine.scheduler import Scheduler
from manager.engine.units import FlavorResource, to_quantity
from manager.engine.workload import DEACTIVATION_TARGET, OWNED_CONDITIONS, WorkloadInfo, to_condition

CONDITION_ORDER = [c.QUOTA_RESERVED, c.ADMITTED, c.EVICTED, c.PREEMPTED, c.REQUEUED, c.BLOCKED_ON_PREEMPTION_GATES]


@dataclass(frozen=True)
class EventRecord:
    """A Kubernetes Event to emit on a Workload."""

    namespace: str
    name: str
    uid: str
    type: str  # Normal or Warning
    reason: str
    message: str


# --- Workloads ----------------------------------------------------------------------------------------
def workload_status(info: WorkloadInfo, *, now: datetime) -> WorkloadStatus:
    """The status Kueue would write for a workload, from the engine's view of it."""
    wl = info.obj
    # A shallow copy is enough: every field this function changes is reassigned, never mutated,
    # and a deep copy of each dirty workload's status was a third of the manager's CPU.
    status = wl.status.model_copy() if wl.status else WorkloadStatus()
    order = {kind: i for i, kind in enumerate(CONDITION_ORDER)}
    kinds = sorted(info.conditions, key=lambda k: (order.get(k, len(order)), k))
    status.conditions = [to_condition(kind, info.conditions[kind]) for kind in kinds] or None
    if info.admission is not None:
        status.admission = Admission(
            cluster_queue=info.admission_cq,
            pod_set_assignments=[
                PodSetAssignment(
                    name=a.name,
                    flavors=dict(sorted(a.flavors.items())),
                    resource_usage={r: to_quantity(r, v) for r, v in sorted(a.usage.items())},
                    count=a.count,
                )
                for a in info.admission
            ],
        )
    else:
        status.admission = None
    if info.checks:
        existing = {check.name: check for check in status.admission_checks or []}

        def check_state(name: str, state: str) -> AdmissionCheckState:
            reset = info.check_resets.get(name)
            if reset is not None:
                old = existing.get(name)
                return AdmissionCheckState(
                    name=name,
                    state="Pending",
                    last_transition_time=now,
                    message=reset[0],
                    requeue_after_seconds=old.requeue_after_seconds if old else None,
                    retry_count=reset[1],
                )
            return existing.get(name) or AdmissionCheckState(name=name, state=state, last_transition_time=now, message="")

        status.admission_checks = [check_state(name, state) for name, state in sorted(info.checks.items())]
    if info.reset_nomination:
        status.cluster_name = None
        status.nominated_cluster_names = None
    if info.requeue_state_write is not None:
        status.requeue_state = info.requeue_state_write[0]
    if info.close_preemption_gates and any(gate.position == "Open" for gate in status.preemption_gates or []):
        # Kueue's eviction closes every preemption gate: a Workload admitted again asks again.
        status.preemption_gates = [
            PreemptionGateState(name=gate.name, position="Closed", last_transition_time=now) for gate in status.preemption_gates or []
        ]
    if info.evicted:
        # Same as Kueue: the deactivation target is consumed by the eviction it caused.
        status.conditions = [cond for cond in status.conditions or [] if cond.type != DEACTIVATION_TARGET] or None
    if info.admission is None and info.resource_requests is not None:
        status.resource_requests = [
            PodSetRequest(name=name, resources={r: to_quantity(r, v) for r, v in sorted(req.items())})
            for name, req in info.resource_requests
        ]
    elif info.admission is not None:
        status.resource_requests = None
    return status


def status_view(info: WorkloadInfo) -> tuple[Any, ...]:
    """Everything `workload_status` reads, except the clock (which only stamps new entries):
    the stored object (by identity) and snapshots of the engine's view of it."""
    return (
        info.obj,
        [(kind, cond.status, cond.reason, cond.message) for kind, cond in info.conditions.items()],
        list(info.admission) if info.admission is not None else None,
        info.admission_cq,
        dict(info.checks),
        dict(info.check_resets),
        info.reset_nomination,
        info.requeue_state_write,
        info.close_preemption_gates,
        info.evicted,
        list(info.resource_requests) if info.resource_requests is not None else None,
    )


def owned_conditions(conditions: Iterable[Condition] | None) -> dict[str, tuple[str, str, str]]:
    """(status, reason, message) of each condition the admission side owns, by type."""
    return {cond.type: (cond.status, cond.reason, cond.message) for cond in conditions or [] if cond.type in OWNED_CONDITIONS}


def _check_states(status: WorkloadStatus) -> list[tuple[str, str]]:
    return sorted((check.name, check.state) for check in status.admission_checks or [])


def _requeue_state(status: WorkloadStatus) -> dict[str, Any] | None:
    return status.requeue_state.to_dict() if status.requeue_state is not None else None


def _deactivation_target(status: WorkloadStatus) -> bool:
    cond = find_condition(status.conditions, DEACTIVATION_TARGET)
    return cond is not None and cond.status == "True"


def same_status(current: WorkloadStatus, desired: WorkloadStatus) -> bool:
    """Whether the cluster already holds what the admission side would write."""
    if owned_conditions(current.conditions) != owned_conditions(desired.conditions):
        return False
    if (current.admission is None) != (desired.admission is None):
        return False
    if current.admission is not None and desired.admission is not None and current.admission.to_dict() != desired.admission.to_dict():
        return False
    if (current.cluster_name, current.nominated_cluster_names) != (desired.cluster_name, desired.nominated_cluster_names):
        return False
    if _requeue_state(current) != _requeue_state(desired):
        return False
    if _deactivation_target(desired) and not _deactivation_target(current):
        return False  # the requeuing limit asks for a deactivation (waitForPodsReady)
    return _check_states(current) == _check_states(desired)


def since_reservation(status: WorkloadStatus, now: datetime) -> float:
    """Seconds since the stored quota reservation (0 without one): the time an admission waited
    for its checks, as Kueue's workload controller measures it for its Event and metrics."""
    reserved = find_condition(status.conditions, c.QUOTA_RESERVED)
    since = reserved.last_transition_time if reserved is not None and reserved.status == "True" else None
    return max(0.0, (now - since).total_seconds()) if since is not None else 0.0


def admitted_message(cluster_queue: str, since_reservation: float) -> str:
    """The Admitted Event's message: Kueue's scheduler says 0s for a workload admitted as it
    reserves quota, its workload controller the seconds its checks took."""
    return f"Admitted by ClusterQueue {cluster_queue}, wait time since reservation was {since_reservation:.0f}s"


def status_events(info: WorkloadInfo, current: WorkloadStatus, desired: WorkloadStatus, *, now: datetime) -> list[EventRecord]:
    """Kueue's Events for a status change: QuotaReserved, Admitted, Preempted or EvictedDueTo…, Pending."""
    before, after = owned_conditions(current.conditions), owned_conditions(desired.conditions)
    out = []

    def event(kind: str, reason: str, message: str) -> None:
        out.append(EventRecord(info.namespace, info.name, info.uid, kind, reason, message))

    def became(kind: str, status: str) -> bool:
        return after.get(kind, ("",))[0] == status and before.get(kind, ("",))[0] != status

    if became(c.QUOTA_RESERVED, "True"):
        waited = int(((info.reserved_at or info.created) - info.queue_time).total_seconds())
        event("Normal", "QuotaReserved", f"Quota reserved in ClusterQueue {info.admission_cq}, wait time since queued was {waited}s")
    if became(c.ADMITTED, "True"):
        since = 0.0 if became(c.QUOTA_RESERVED, "True") else since_reservation(current, now)
        event("Normal", "Admitted", admitted_message(info.admission_cq, since))
    if became(c.PREEMPTED, "True"):
        event("Normal", "Preempted", after[c.PREEMPTED][2])
    elif became(c.EVICTED, "True"):
        event("Normal", "EvictedDueTo" + after[c.EVICTED][1], after[c.EVICTED][2])
    pending = after.get(c.QUOTA_RESERVED)
    if pending is not None and pending[0] == "False" and pending != before.get(c.QUOTA_RESERVED) and pending[2]:
        event("Normal", "Pending", pending[2])
    return out


# --- ClusterQueues ------------------------------------------------------------------------------------
def _usage_totals(workloads: Iterable[WorkloadInfo]) -> tuple[dict[FlavorResource, int], dict[FlavorResource, int], int, int]:
    """(reservation, admitted usage, reserving count, admitted count) of reserved workloads."""
    reservation: dict[FlavorResource, int] = {}
    usage: dict[FlavorResource, int] = {}
    reserving = admitted = 0
    for wl in workloads:
        reserving += 1
        is_admitted = wl.condition_true(c.ADMITTED)
        admitted += is_admitted
        for fr, value in wl.usage.items():
            reservation[fr] = reservation.get(fr, 0) + value
            if is_admitted:
                usage[fr] = usage.get(fr, 0) + value
    return reservation, usage, reserving, admitted


def cluster_queue_status(
    cq: ClusterQueueInfo, scheduler: Scheduler, *, now: datetime, previous: list[Condition] | None = None
) -> ClusterQueueStatus:
    """Kueue's ClusterQueue status: counts, reservation and usage per flavor, and `Active`
    (its time kept from the `previous` conditions while its status stays), other writers'
    conditions kept as they were."""
    reservation, admitted_usage, reserving, admitted = _usage_totals(cq.workloads.values())

    def usage_list(totals: dict[FlavorResource, int]) -> list[FlavorUsage]:
        out = []
        for group in cq.groups:
            for flavor in group.flavors:
                resources = []
                for resource in group.covered:
                    total = totals.get((flavor, resource), 0)
                    nominal = cq.node.nominal((flavor, resource))
                    resources.append(
                        ResourceUsage(
                            name=resource, total=to_quantity(resource, total), borrowed=to_quantity(resource, max(0, total - nominal))
                        )
                    )
                out.append(FlavorUsage(name=flavor, resources=resources))
        return out

    active = "True" if cq.active else "False"
    since = transition_time(find_condition(previous, c.ACTIVE), active, now)
    status = ClusterQueueStatus(
        flavors_reservation=usage_list(reservation),
        flavors_usage=usage_list(admitted_usage),
        pending_workloads=scheduler.pending_count(cq.name),
        reserving_workloads=reserving,
        admitted_workloads=admitted,
        conditions=[
            Condition(
                type=c.ACTIVE,
                status=active,
                reason=cq.inactive_reason,
                message=cq.inactive_message,
                last_transition_time=since,
            ),
            # Other writers' conditions stay (MultiKueue's quota automation writes its own): the
            # status is written with a merge patch, which replaces the list whole.
            *(cond for cond in previous or [] if cond.type != c.ACTIVE),
        ],
    )
    if scheduler.fair_sharing:
        status.fair_sharing = kueue.FairSharingStatus(weighted_share=dominant_resource_share(cq.node).rounded())
    return status


# --- LocalQueues --------------------------------------------------------------------------------------
@dataclass
class _LocalQueueWorkloads:
    pending: int = 0
    reserved: list[WorkloadInfo] = field(default_factory=list)


def local_queue_statuses(
    infos: Iterable[WorkloadInfo], cache: Cache, *, now: datetime, stored: Mapping[str, kueue.LocalQueue] | None = None
) -> dict[str, LocalQueueStatus]:
    """Every LocalQueue's status, from one pass over the workloads; `stored` holds the latest
    objects (the cache's may predate a status write), whose Active condition keeps its time."""
    members: dict[str, _LocalQueueWorkloads] = {key: _LocalQueueWorkloads() for key in cache.local_queues}
    for info in infos:
        found = members.get(f"{info.namespace}/{info.queue_name}")
        if found is None:
            continue
        if info.reserved:
            found.reserved.append(info)
        elif info.active:
            found.pending += 1
    latest = stored or {}
    return {key: local_queue_status(latest.get(key) or cache.local_queues[key], cache, found, now=now) for key, found in members.items()}


def local_queue_status(lq: kueue.LocalQueue, cache: Cache, members: _LocalQueueWorkloads, *, now: datetime) -> LocalQueueStatus:
    cq = cache.cluster_queues.get(lq.spec.cluster_queue or "")
    reservation, usage, reserving, admitted = _usage_totals(members.reserved)

    def flavor_list(totals: dict[FlavorResource, int]) -> list[LocalQueueFlavorUsage]:
        if cq is None:
            return []
        return [
            LocalQueueFlavorUsage(
                name=flavor,
                resources=[LocalQueueResourceUsage(name=r, total=to_quantity(r, totals.get((flavor, r), 0))) for r in group.covered],
            )
            for group in cq.groups
            for flavor in group.flavors
        ]

    if cq is None:
        active = ("False", "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue")
    elif (lq.spec.stop_policy or "None") != "None":
        active = ("False", "Stopped", "LocalQueue is stopped")
    elif not cq.active:
        active = ("False", "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue")
    else:
        active = ("True", "Ready", "Can submit new workloads to localQueue")
    previous = find_condition(lq.status.conditions if lq.status else None, c.ACTIVE)
    since = transition_time(previous, active[0], now)
    return LocalQueueStatus(
        conditions=[Condition(type=c.ACTIVE, status=active[0], reason=active[1], message=active[2], last_transition_time=since)],
        pending_workloads=members.pending,
        reserving_workloads=reserving,
        admitted_workloads=admitted,
        flavors_reservation=flavor_list(reservation),
        flavors_usage=flavor_list(usage),
    )
