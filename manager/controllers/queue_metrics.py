"""Kueue's metrics from what the admission side knows: the gauges read from the engine's state
at scrape time, and the counters a successful Workload status write stands for. Pure: no I/O;
the admission controller calls these and hands the results to `manager.runtime.metrics`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from manager.api import constants as c
from manager.api.kueue import FlavorUsage, LocalQueueFlavorUsage, Workload, WorkloadStatus
from manager.api.meta import find_condition
from manager.api.quantity import Quantity
from manager.engine.cache import ClusterQueueInfo
from manager.engine.fairshare import dominant_resource_share
from manager.engine.podsready import REASON_PODS_READY_TIMEOUT, timeout_cause
from manager.engine.quota import QuotaNode
from manager.engine.state import AdmissionState
from manager.engine.status import cluster_queue_status, since_reservation
from manager.engine.units import to_quantity
from manager.engine.workload import eviction_labels, is_finished, queued_since
from manager.engine.writes import StatusWrite
from manager.runtime.metrics import LocalQueueRef, Metrics, Sample

# kueue_cluster_queue_status's statuses (Kueue's CQStatuses).
CQ_PENDING, CQ_ACTIVE, CQ_TERMINATING = "pending", "active", "terminating"
# kueue_local_queue_status's values (the Active condition's status).
CONDITION_STATUSES = ("True", "False", "Unknown")


@dataclass(frozen=True)
class Finished:
    """A finished Workload that still exists: Kueue's queue manager counts these per queue."""

    cluster_queue: str
    local_queue: LocalQueueRef


def approximate(quantity: Quantity) -> float:
    """Kueue's Quantity.AsApproximateFloat64: cores for cpu, bytes for memory, counts."""
    return quantity.milli / 1000


def engine_amount(resource: str, value: int) -> float:
    return approximate(to_quantity(resource, value))


def cluster_queue_state(cq: ClusterQueueInfo) -> str:
    if cq.obj.metadata.deletion_timestamp is not None:
        return CQ_TERMINATING
    return CQ_ACTIVE if cq.active else CQ_PENDING


def _pending(active: int, inadmissible: int, cq_active: bool) -> tuple[int, int]:
    """Kueue counts every pending workload of an inactive ClusterQueue as inadmissible."""
    return (active, inadmissible) if cq_active else (0, active + inadmissible)


def _usage_samples(name: str, prefix: tuple[str, ...], flavors: Iterable[FlavorUsage | LocalQueueFlavorUsage]) -> list[Sample]:
    return [
        Sample(name, (*prefix, flavor.name, resource.name), approximate(resource.total))
        for flavor in flavors
        for resource in flavor.resources or []
        if resource.total is not None
    ]


def _cohort_nodes(state: AdmissionState) -> list[QuotaNode]:
    return [node for name, node in sorted(state.cache.cohorts.items()) if name not in state.cache.cycle_cohorts]


def _subtree_cluster_queues(node: QuotaNode) -> list[QuotaNode]:
    out, stack = [], [node]
    while stack:
        current = stack.pop()
        if current.is_cohort:
            stack.extend(current.children)
        else:
            out.append(current)
    return out


def cluster_queue_samples(state: AdmissionState, finished: Iterable[Finished], now: datetime) -> list[Sample]:
    """Kueue's ClusterQueue gauges, including the optional resource ones (the registry serves
    those only when enabled)."""
    out: list[Sample] = []
    finished_per_cq: dict[str, int] = {}
    for done in finished:
        finished_per_cq[done.cluster_queue] = finished_per_cq.get(done.cluster_queue, 0) + 1
    fair_sharing = state.scheduler.fair_sharing
    for name, cq in sorted(state.cache.cluster_queues.items()):
        current = cluster_queue_state(cq)
        out += [Sample("kueue_cluster_queue_status", (name, s), float(s == current)) for s in (CQ_PENDING, CQ_ACTIVE, CQ_TERMINATING)]
        queue = state.scheduler.queues.get(name)
        active, inadmissible = _pending(len(queue.active) if queue else 0, len(queue.inadmissible) if queue else 0, cq.active)
        out.append(Sample("kueue_pending_workloads", (name, "active"), active))
        out.append(Sample("kueue_pending_workloads", (name, "inadmissible"), inadmissible))
        out.append(Sample("kueue_finished_workloads", (name,), finished_per_cq.get(name, 0)))
        out.append(Sample("kueue_reserving_active_workloads", (name,), len(cq.workloads)))
        admitted = sum(1 for wl in cq.workloads.values() if wl.active and wl.condition_true(c.ADMITTED))
        out.append(Sample("kueue_admitted_active_workloads", (name,), admitted))
        parent = cq.node.parent
        out.append(Sample("kueue_cluster_queue_info", (name, parent.name if parent else "", cq.node.root().name if parent else ""), 1))
        # Optional: enableClusterQueueResources.
        cohort = parent.name if parent else ""
        for (flavor, resource), quota in sorted(cq.node.quota.items()):
            labels = (cohort, name, flavor, resource)
            out.append(Sample("kueue_cluster_queue_nominal_quota", labels, engine_amount(resource, quota.nominal)))
            borrowing = math.inf if quota.borrowing_limit is None else engine_amount(resource, quota.borrowing_limit)
            lending = math.inf if quota.lending_limit is None else engine_amount(resource, quota.lending_limit)
            out.append(Sample("kueue_cluster_queue_borrowing_limit", labels, borrowing))
            out.append(Sample("kueue_cluster_queue_lending_limit", labels, lending))
        status = cluster_queue_status(cq, state.scheduler, now=now)
        out += _usage_samples("kueue_cluster_queue_resource_reservation", (cohort, name), status.flavors_reservation or [])
        out += _usage_samples("kueue_cluster_queue_resource_usage", (cohort, name), status.flavors_usage or [])
        if fair_sharing:
            share = dominant_resource_share(cq.node).weighted()
            out.append(Sample("kueue_cluster_queue_weighted_share", (name, cohort), math.nan if math.isinf(share) else share))
    for node in _cohort_nodes(state):
        parent = node.parent
        out.append(Sample("kueue_cohort_info", (node.name, parent.name if parent else "", node.root().name), 1))
        for (flavor, resource), amount in sorted(node.subtree.items()):
            if amount > 0:
                out.append(Sample("kueue_cohort_subtree_quota", (node.name, flavor, resource), engine_amount(resource, amount)))
        cqs = state.cache.cluster_queues
        members = [cqs[leaf.name] for leaf in _subtree_cluster_queues(node) if leaf.name in cqs]
        reservations: dict[tuple[str, str], int] = {}
        for member in members:
            for fr, amount in member.node.usage.items():
                reservations[fr] = reservations.get(fr, 0) + amount
        for (flavor, resource), amount in sorted(reservations.items()):
            if amount > 0:
                cohort_fr = (node.name, flavor, resource)
                out.append(Sample("kueue_cohort_subtree_resource_reservations", cohort_fr, engine_amount(resource, amount)))
        admitted = sum(1 for member in members for wl in member.workloads.values() if wl.active and wl.condition_true(c.ADMITTED))
        out.append(Sample("kueue_cohort_subtree_admitted_active_workloads", (node.name,), admitted))
        if fair_sharing:
            out.append(Sample("kueue_cohort_weighted_share", (node.name,), dominant_resource_share(node).weighted()))
    return out


def local_queue_samples(
    state: AdmissionState, finished: Iterable[Finished], now: datetime, exposes: Callable[[LocalQueueRef], bool]
) -> list[Sample]:
    """Kueue's LocalQueue gauges, for the LocalQueues whose metrics are exposed."""
    pending: dict[str, list[int]] = {}
    for name, queue in state.scheduler.queues.items():
        cq = state.cache.cluster_queues.get(name)
        for index, workloads in enumerate((queue.active, queue.inadmissible)):
            for wl in workloads.values():
                counts = pending.setdefault(f"{wl.namespace}/{wl.queue_name}", [0, 0])
                counts[index if cq is None or cq.active else 1] += 1
    finished_per_lq: dict[LocalQueueRef, int] = {}
    for done in finished:
        finished_per_lq[done.local_queue] = finished_per_lq.get(done.local_queue, 0) + 1
    out: list[Sample] = []
    for key, status in sorted(state.local_queue_statuses(now).items()):
        lq = state.cache.local_queues[key]
        ref = LocalQueueRef(lq.name, lq.namespace or "")
        if not exposes(ref):
            continue
        labels = (ref.name, ref.namespace)
        active, inadmissible = pending.get(key, [0, 0])
        out += [
            Sample("kueue_local_queue_pending_workloads", (*labels, "active"), active),
            Sample("kueue_local_queue_pending_workloads", (*labels, "inadmissible"), inadmissible),
            Sample("kueue_local_queue_finished_workloads", labels, finished_per_lq.get(ref, 0)),
            Sample("kueue_local_queue_reserving_active_workloads", labels, status.reserving_workloads or 0),
            Sample("kueue_local_queue_admitted_active_workloads", labels, status.admitted_workloads or 0),
        ]
        condition = find_condition(status.conditions, c.ACTIVE)
        current = condition.status if condition is not None else "Unknown"
        out += [Sample("kueue_local_queue_status", (*labels, s), float(s == current)) for s in CONDITION_STATUSES]
        out += _usage_samples("kueue_local_queue_resource_reservation", labels, status.flavors_reservation or [])
        out += _usage_samples("kueue_local_queue_resource_usage", labels, status.flavors_usage or [])
    return out


# --- what a successful status write stands for ------------------------------------------------------
def priority_class(wl: Workload) -> str:
    """Kueue's PriorityClassName: the Workload's priorityClassRef name, or empty."""
    ref = wl.spec.priority_class_ref
    return (ref.name or "") if ref is not None else ""


def _queued_wait(wl: Workload, now: datetime) -> float:
    start = queued_since(wl)
    return (now - start).total_seconds() if start is not None else 0.0


def admitted_written(
    metrics: Metrics, before: Workload, cluster_queue: str, cohorts: Iterable[str], now: datetime, *, checks_wait: float | None
) -> None:
    """Report an admission that was written, from the Workload as it was before: Kueue's
    admitted counters and wait times (`checks_wait` None when no check was involved)."""
    lq = LocalQueueRef(before.spec.queue_name or "", before.namespace or "")
    metrics.admitted(cluster_queue, lq, priority_class(before), _queued_wait(before, now), checks_wait, cohorts)


def record_write(
    metrics: Metrics, write: StatusWrite, before: Workload, cohorts: Callable[[str], list[str]], now: datetime
) -> WrittenPreemption | None:
    """Report what a Workload status write that succeeded changed, as Kueue's scheduler and
    workload controller report it: a quota reservation, an admission, an eviction, a
    preemption (returned, for kfed's own counter). `before` is the object the write was
    computed from."""
    old, new = before.status or WorkloadStatus(), write.status
    reasons = {event.reason for event in write.events}
    lq = LocalQueueRef(before.spec.queue_name or "", before.namespace or "")
    pc = priority_class(before)
    cq = new.admission.cluster_queue if new.admission is not None else ""
    if "QuotaReserved" in reasons and cq:
        metrics.quota_reserved(cq, lq, pc, _queued_wait(before, now))
    if "Admitted" in reasons and cq:
        # Admitted as it reserved quota: its checks (if any) took no time; else since the reservation.
        reserved_now = "QuotaReserved" in reasons
        checks_wait = (0.0 if new.admission_checks else None) if reserved_now else since_reservation(old, now)
        admitted_written(metrics, before, cq, cohorts(cq), now, checks_wait=checks_wait)
    preemption = preemption_written(write, before)
    if preemption is not None:
        metrics.preempted(write.preempting_cq, preemption.reason)
    evicted = find_condition(new.conditions, c.EVICTED)
    old_cq = old.admission.cluster_queue if old.admission is not None else ""
    if evicted is not None and evicted.status == "True":
        reason, cause = eviction_labels(evicted.reason or "")
        if reason == REASON_PODS_READY_TIMEOUT:
            cause = timeout_cause(find_condition(new.conditions, c.PODS_READY))
        was = find_condition(old.conditions, c.EVICTED)
        if (was is None or was.status != "True") and old_cq:
            metrics.evicted(old_cq, lq, reason, cause, pc)
    return preemption


class WrittenPreemption(NamedTuple):
    victim_cq: str
    reason: str


def preemption_written(write: StatusWrite, before: Workload) -> WrittenPreemption | None:
    """(the victim's ClusterQueue, the preemption reason) when a write that succeeded preempted
    the workload: Kueue counts a preemption once its eviction is written, not when the scheduler
    picks the victim (a victim picked and then admitted again before any write was never
    stopped)."""
    old = before.status or WorkloadStatus()
    now_preempted, was_preempted = find_condition(write.status.conditions, c.PREEMPTED), find_condition(old.conditions, c.PREEMPTED)
    if now_preempted is None or now_preempted.status != "True" or (was_preempted is not None and was_preempted.status == "True"):
        return None
    if old.admission is None or not write.preempting_cq:
        return None
    return WrittenPreemption(old.admission.cluster_queue, now_preempted.reason or "")


def eviction_release(old: Workload, new: Workload, now: datetime) -> tuple[str, str, float] | None:
    """(ClusterQueue, reason, seconds) when an update gives back an evicted Workload's quota:
    Kueue's workload_eviction_latency, from the Evicted condition turning True until then."""
    before, after = old.status or WorkloadStatus(), new.status or WorkloadStatus()
    evicted = find_condition(after.conditions, c.EVICTED)
    if before.admission is None or after.admission is not None or evicted is None or evicted.status != "True":
        return None
    if evicted.last_transition_time is None or not before.admission.cluster_queue:
        return None
    reason, _ = eviction_labels(evicted.reason or "")
    return before.admission.cluster_queue, reason, (now - evicted.last_transition_time).total_seconds()


def finished_transition(old: Workload | None, new: Workload | None) -> bool:
    """A Workload that just finished (Kueue counts kueue_finished_workloads_total then)."""
    return old is not None and new is not None and is_finished(new) and not is_finished(old)


def finished_entry(wl: Workload, local_queue_cluster_queue: str) -> Finished:
    """Where a finished Workload is counted: its admission's ClusterQueue, else its LocalQueue's."""
    cq = wl.status.admission.cluster_queue if wl.status and wl.status.admission else ""
    return Finished(cq or local_queue_cluster_queue, LocalQueueRef(wl.spec.queue_name or "", wl.namespace or ""))
