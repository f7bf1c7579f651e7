"""The live admission state: Kueue's queue manager, cache and workload controller, kept
incrementally from the objects a cluster holds. Pure: the controller feeds it objects and
the time, and writes back what it returns.

Objects come in through `upsert_*` and `delete_*`. `cycle(now)` runs one scheduling cycle.
`flush(now)` returns the Workload status writes and Events that bring the cluster in line
with the engine, and `cluster_queue_status` / `local_queue_status` the queues' status.

The engine assumes its own decisions (Kueue's "assume" in its cache): a workload admitted by
a cycle holds its quota at once, while the status write is in flight. `write_failed` undoes
the assumption when the write lost a race; the next object seen from the cluster decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.config import Configuration
from manager.api.core import LimitRange, PriorityClass
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
    ResourceUsage,
    Workload,
    WorkloadStatus,
)
from manager.api.meta import Condition, is_condition_true
from manager.engine.cache import Cache, CheckInfo, ClusterQueueInfo
from manager.engine.fairshare import dominant_resource_share
from manager.engine.jobs import requeued_on_release
from manager.engine.requests import RequestError, limit_range_defaults
from manager.engine.scheduler import CycleResult, Scheduler
from manager.engine.units import to_quantity
from manager.engine.workload import (
    REASON_CQ_STOPPED,
    REASON_LQ_STOPPED,
    REASON_PENDING_EVALUATION,
    Cond,
    WorkloadInfo,
    build_info,
    to_condition,
)

# Conditions the admission side owns; the others (Finished, PodsReady, ...) belong to the
# job integration and are carried over untouched.
OWNED_CONDITIONS = (c.QUOTA_RESERVED, c.ADMITTED, c.EVICTED, c.PREEMPTED, c.REQUEUED)
CONDITION_ORDER = [c.QUOTA_RESERVED, c.ADMITTED, c.EVICTED, c.PREEMPTED, c.REQUEUED]
REASON_DEACTIVATED = "Deactivated"
REASON_ADMISSION_CHECK = "AdmissionCheck"
DEACTIVATION_TARGET = "DeactivationTarget"


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


def workload_priority(wl: Workload, wpcs: dict[str, kueue.WorkloadPriorityClass], pcs: dict[str, PriorityClass]) -> int:
    """spec.priority when set, else the value of the referenced priority class (0 when unknown)."""
    if wl.spec.priority is not None:
        return wl.spec.priority
    ref = wl.spec.priority_class_ref
    if ref is None:
        return 0
    if ref.kind == "WorkloadPriorityClass":
        wpc = wpcs.get(ref.name)
        return wpc.value if wpc else 0
    pc = pcs.get(ref.name)
    return pc.value if pc else 0


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


def cluster_queue_status(cq: ClusterQueueInfo, scheduler: Scheduler, *, since: datetime) -> ClusterQueueStatus:
    """Kueue's ClusterQueue status: counts, reservation and usage per flavor, and `Active`."""
    reservation: dict[tuple[str, str], int] = {}
    admitted_usage: dict[tuple[str, str], int] = {}
    reserving = admitted = 0
    for wl in cq.workloads.values():
        reserving += 1
        is_admitted = wl.condition_true(c.ADMITTED)
        admitted += is_admitted
        for fr, value in wl.usage.items():
            reservation[fr] = reservation.get(fr, 0) + value
            if is_admitted:
                admitted_usage[fr] = admitted_usage.get(fr, 0) + value

    def usage_list(totals: dict[tuple[str, str], int]) -> list[FlavorUsage]:
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

    status = ClusterQueueStatus(
        flavors_reservation=usage_list(reservation),
        flavors_usage=usage_list(admitted_usage),
        pending_workloads=scheduler.pending_count(cq.name),
        reserving_workloads=reserving,
        admitted_workloads=admitted,
        conditions=[
            Condition(
                type=c.ACTIVE,
                status="True" if cq.active else "False",
                reason=cq.inactive_reason,
                message=cq.inactive_message,
                last_transition_time=since,
            )
        ],
    )
    if scheduler.fair_sharing:
        status.fair_sharing = kueue.FairSharingStatus(weighted_share=dominant_resource_share(cq.node).rounded())
    return status


def stop_policy_eviction(info: WorkloadInfo, cache: Cache) -> tuple[str, str] | None:
    """(reason, message) when a stop policy evicts this reserved workload: HoldAndDrain evicts
    everything; Hold only reservations still waiting for their admission checks."""
    cq = cache.cluster_queues.get(info.admission_cq)
    lq = cache.local_queues.get(f"{info.namespace}/{info.queue_name}")
    lq_policy = (lq.spec.stop_policy if lq else None) or "None"
    admitted = info.condition_true(c.ADMITTED)
    for policy, reason, message in (
        (cq.stop_policy if cq else "None", REASON_CQ_STOPPED, "The ClusterQueue is stopped"),
        (lq_policy, REASON_LQ_STOPPED, "The LocalQueue is stopped"),
    ):
        if policy == "HoldAndDrain" or (policy == "Hold" and not admitted):
            return reason, message
    return None


@dataclass(frozen=True)
class EventRecord:
    """A Kubernetes Event to emit on a Workload."""

    namespace: str
    name: str
    uid: str
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass
class StatusWrite:
    """A status patch for one Workload, with the resourceVersion it was computed from."""

    key: str
    namespace: str
    name: str
    resource_version: str
    status: WorkloadStatus
    admits: bool = False
    events: list[EventRecord] = field(default_factory=list)  # to emit once the write succeeds


@dataclass
class _LocalQueueTally:
    pending: int = 0
    reserving: int = 0
    admitted: int = 0
    reservation: dict[tuple[str, str], int] = field(default_factory=dict)
    usage: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass
class Flush:
    writes: list[StatusWrite] = field(default_factory=list)


def _status_view(info: WorkloadInfo) -> tuple[Any, ...]:
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
        info.evicted,
        list(info.resource_requests) if info.resource_requests is not None else None,
    )


def _check_states(status: WorkloadStatus) -> list[tuple[str, str]]:
    return sorted((check.name, check.state) for check in status.admission_checks or [])


def _owned(conditions: Iterable[Condition] | None) -> dict[str, tuple[str, str, str]]:
    return {cond.type: (cond.status, cond.reason, cond.message) for cond in conditions or [] if cond.type in OWNED_CONDITIONS}


class AdmissionState:
    """Everything the admission side knows, built from a cluster's objects."""

    def __init__(self, config: Configuration | None = None, *, release_bare_evictions: bool = True) -> None:
        self.config = config or Configuration()
        # An evicted Workload that no Job owns has nothing to stop; its quota goes back at once.
        self.release_bare_evictions = release_bare_evictions
        self.flavors: dict[str, kueue.ResourceFlavor] = {}
        self.cohorts: dict[str, kueue.Cohort] = {}
        self.cluster_queue_objects: dict[str, kueue.ClusterQueue] = {}
        self.local_queues: dict[str, kueue.LocalQueue] = {}
        self.wpcs: dict[str, kueue.WorkloadPriorityClass] = {}
        self.pcs: dict[str, PriorityClass] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        self.limit_ranges: dict[str, dict[str, LimitRange]] = {}
        self.admission_checks: dict[str, CheckInfo] = {}
        self.infos: dict[str, WorkloadInfo] = {}
        self.errors: dict[str, str] = {}  # workloads the engine cannot read, and why
        self.assumed: set[str] = set()
        self.dirty: set[str] = set()
        self.cache = Cache()
        self.scheduler = Scheduler(self.cache, config=self.config, namespaces=self.namespaces, evict_immediately=False)
        self._needs_rebuild = True
        self._active_since: dict[str, tuple[bool, datetime]] = {}

    # --- configuration objects ---------------------------------------------------------------------
    def _set(self, table: dict[str, object], key: str, obj: object | None) -> None:
        if obj is None:
            table.pop(key, None)
        else:
            table[key] = obj
        self._needs_rebuild = True

    def upsert_flavor(self, obj: kueue.ResourceFlavor) -> None:
        self._set(self.flavors, obj.name, obj)  # type: ignore[arg-type]

    def delete_flavor(self, name: str) -> None:
        self._set(self.flavors, name, None)  # type: ignore[arg-type]

    def upsert_cohort(self, obj: kueue.Cohort) -> None:
        self._set(self.cohorts, obj.name, obj)  # type: ignore[arg-type]

    def delete_cohort(self, name: str) -> None:
        self._set(self.cohorts, name, None)  # type: ignore[arg-type]

    def _set_spec(self, table: dict[str, Any], key: str, obj: Any) -> None:
        old = table.get(key)
        if old is not None and old.spec == obj.spec:
            table[key] = obj  # a status write: nothing to rebuild
            return
        self._set(table, key, obj)

    def upsert_cluster_queue(self, obj: kueue.ClusterQueue) -> None:
        self._set_spec(self.cluster_queue_objects, obj.name, obj)

    def delete_cluster_queue(self, name: str) -> None:
        self._set(self.cluster_queue_objects, name, None)  # type: ignore[arg-type]

    def upsert_local_queue(self, obj: kueue.LocalQueue) -> None:
        self._set_spec(self.local_queues, obj.key, obj)

    def delete_local_queue(self, key: str) -> None:
        self._set(self.local_queues, key, None)  # type: ignore[arg-type]

    def upsert_admission_check(self, obj: kueue.AdmissionCheck) -> None:
        """A check's controller and Active condition decide whether the queues using it are active."""
        check = CheckInfo(obj.spec.controller_name, is_condition_true(obj.status.conditions if obj.status else None, c.ACTIVE))
        if self.admission_checks.get(obj.name) != check:
            self.admission_checks[obj.name] = check
            self._needs_rebuild = True

    def delete_admission_check(self, name: str) -> None:
        if self.admission_checks.pop(name, None) is not None:
            self._needs_rebuild = True

    def upsert_priority_class(self, obj: kueue.WorkloadPriorityClass | PriorityClass) -> None:
        if isinstance(obj, kueue.WorkloadPriorityClass):
            self.wpcs[obj.name] = obj
        else:
            self.pcs[obj.name] = obj

    def delete_priority_class(self, kind: str, name: str) -> None:
        if kind == "WorkloadPriorityClass":
            self.wpcs.pop(name, None)
        else:
            self.pcs.pop(name, None)

    def upsert_namespace(self, name: str, labels: dict[str, str]) -> None:
        labels = dict(labels)
        labels["kubernetes.io/metadata.name"] = name
        if self.namespaces.get(name) != labels:
            self.namespaces[name] = labels
            self._requeue_all()

    def delete_namespace(self, name: str) -> None:
        self.namespaces.pop(name, None)

    def upsert_limit_range(self, obj: LimitRange) -> None:
        self.limit_ranges.setdefault(obj.namespace, {})[obj.name] = obj

    def delete_limit_range(self, namespace: str, name: str) -> None:
        self.limit_ranges.get(namespace, {}).pop(name, None)

    def _requeue_all(self) -> None:
        for root in self.cache.roots():
            self.scheduler.requeue_inadmissible_in_tree(root)

    # --- rebuilding the tree -------------------------------------------------------------------------
    def rebuild_if_needed(self, now: datetime) -> bool:
        """Rebuild the quota tree and the queues after a configuration change; keep every workload."""
        if not self._needs_rebuild:
            return False
        self._needs_rebuild = False
        lost_pending = {key for key, info in self.infos.items() if not info.reserved}
        self.cache = Cache(
            flavors=self.flavors.values(),
            cluster_queues=self.cluster_queue_objects.values(),
            cohorts=self.cohorts.values(),
            local_queues=self.local_queues.values(),
            admission_checks=self.admission_checks,
        )
        self.scheduler = Scheduler(self.cache, config=self.config, namespaces=self.namespaces, evict_immediately=False)
        for key in sorted(self.infos):
            info = self.infos[key]
            info.last_assignment = None
            if info.reserved:
                cq = self.cache.cluster_queues.get(info.admission_cq)
                if cq is not None:
                    info.cluster_queue = cq.name
                    self.cache.reserve(cq, info)
        for key in sorted(self.infos):
            info = self.infos[key]
            if info.reserved:
                self._check_reserved(info, now)
            elif key in lost_pending:
                self.scheduler.enqueue(info, now)
                self.dirty.add(key)
        return True

    # --- workloads ------------------------------------------------------------------------------------
    def _build(self, wl: Workload) -> WorkloadInfo | None:
        defaults = limit_range_defaults(list(self.limit_ranges.get(wl.namespace, {}).values()))
        created = wl.metadata.creation_timestamp
        assert created is not None
        try:
            info = build_info(
                wl, priority=workload_priority(wl, self.wpcs, self.pcs), created=created, config=self.config, defaults=defaults
            )
        except RequestError as err:
            self.errors[wl.key] = f"Workload {wl.key}: {err}"
            return None
        self.errors.pop(wl.key, None)
        return info

    def upsert_workload(self, wl: Workload, now: datetime) -> None:
        """A Workload as the cluster now has it."""
        key = wl.key
        old = self.infos.get(key)
        if wl.metadata.creation_timestamp is None:
            wl.metadata.creation_timestamp = now
        finished = is_condition_true(wl.status.conditions if wl.status else None, c.FINISHED)
        if finished or (wl.metadata.deletion_timestamp is not None and not self._has_reservation(wl)):
            self.delete_workload(key, now)
            return
        if old is not None and key in self.assumed:
            if not self._has_reservation(wl):
                return  # an event from before our admission write; that write decides
            self.assumed.discard(key)
        if old is not None and old.obj.metadata.resource_version == wl.metadata.resource_version:
            return
        reserved_now = self._has_reservation(wl)
        if old is not None and old.reserved and reserved_now and old.obj.spec == wl.spec:
            self._refresh_reserved(old, wl, now)
            return
        if (
            old is not None
            and not old.reserved
            and not reserved_now
            and old.obj.spec == wl.spec
            and old.active == (wl.spec.active is not False)
        ):
            self._refresh_pending(old, wl)
            return
        info = self._build(wl)
        self._remove(key)
        if info is None:
            return
        self.infos[key] = info
        self.dirty.add(key)
        if info.reserved:
            cq = self.cache.cluster_queues.get(info.admission_cq)
            if cq is not None:
                info.cluster_queue = cq.name
                self.cache.reserve(cq, info)
            self._check_reserved(info, now)
        else:
            self.scheduler.enqueue(info, now)

    @staticmethod
    def _has_reservation(wl: Workload) -> bool:
        return wl.status is not None and wl.status.admission is not None and is_condition_true(wl.status.conditions, c.QUOTA_RESERVED)

    def _carry_foreign(self, info: WorkloadInfo, wl: Workload) -> None:
        """Take what others own from the new object: checks and conditions we do not write."""
        info.obj = wl
        status = wl.status
        info.checks = {check.name: check.state for check in (status.admission_checks if status else None) or []} or info.checks
        for cond in (status.conditions if status else None) or []:
            if cond.type not in OWNED_CONDITIONS:
                info.conditions[cond.type] = Cond(cond.status, cond.reason, cond.message, cond.last_transition_time or info.created)

    def _refresh_pending(self, info: WorkloadInfo, wl: Workload) -> None:
        self._carry_foreign(info, wl)
        self.dirty.add(info.key)

    def _refresh_reserved(self, info: WorkloadInfo, wl: Workload, now: datetime) -> None:
        self._carry_foreign(info, wl)
        # Evictions written by others (or by us before a restart) are taken as the cluster says.
        observed = _owned(wl.status.conditions if wl.status else None)
        if c.EVICTED in observed and observed[c.EVICTED][0] == "True" and not info.evicted:
            status, reason, message = observed[c.EVICTED]
            info.set_condition(c.EVICTED, status, reason, message, now)
        self._check_reserved(info, now)
        self.dirty.add(info.key)

    def _check_reserved(self, info: WorkloadInfo, now: datetime) -> None:
        """Kueue's workload controller for a workload holding quota: sync Admitted with the
        checks, evict for a stop policy, a deactivation or a check asking for a retry."""
        before = info.conditions.get(c.ADMITTED)
        self.scheduler.sync_admitted(info, now)
        if info.conditions.get(c.ADMITTED) != before:
            self.dirty.add(info.key)
        if not info.evicted:
            eviction = stop_policy_eviction(info, self.cache)
            if eviction is None and not info.active:
                eviction = deactivation_eviction(info)
            if eviction is None and any(state == "Retry" for state in info.checks.values()):
                eviction = (REASON_ADMISSION_CHECK, retry_eviction_message(info))
            if eviction is not None:
                info.set_condition(c.EVICTED, "True", eviction[0], eviction[1], now)
                self.dirty.add(info.key)
        if info.evicted and self.release_bare_evictions and not self._owned_by_controller(info):
            self.finish_eviction(info.key, now)

    @staticmethod
    def _owned_by_controller(info: WorkloadInfo) -> bool:
        return any(ref.controller for ref in info.obj.metadata.owner_references or [])

    def finish_eviction(self, key: str, now: datetime) -> None:
        """What the job integration does once an evicted workload's pods are gone: release its
        quota and queue it again, with Kueue's Requeued (UnsetQuotaReservationWithCondition)."""
        info = self.infos.get(key)
        if info is None or not info.reserved:
            return
        evicted = info.conditions.get(c.EVICTED)
        message = evicted.message if evicted is not None else "The workload was evicted"
        reason = evicted.reason if evicted is not None else REASON_PENDING_EVALUATION
        cq = self.cache.cluster_queues.get(info.admission_cq)
        self.scheduler.release(info, now, reason=REASON_PENDING_EVALUATION, message=message)
        # Same rule as for a Job's release: Requeued=True at once only after a preemption or
        # node failures; otherwise False until the workload controller's follow-up.
        info.set_condition(c.REQUEUED, "True" if requeued_on_release(reason) else "False", reason, message, now)
        if cq is not None:
            self.scheduler.requeue_inadmissible_in_tree(cq.node.root())
        self.dirty.add(key)

    def _remove(self, key: str) -> None:
        info = self.infos.pop(key, None)
        self.assumed.discard(key)
        if info is None:
            return
        for queue in self.scheduler.queues.values():
            queue.delete(key)
        cq = self.cache.cluster_queues.get(info.admission_cq)
        if info.reserved and cq is not None:
            self.cache.release(cq, info)
            self.scheduler.requeue_inadmissible_in_tree(cq.node.root())

    def delete_workload(self, key: str, now: datetime) -> None:
        self._remove(key)
        self.errors.pop(key, None)
        self.dirty.discard(key)

    # --- scheduling -------------------------------------------------------------------------------------
    def cycle(self, now: datetime) -> CycleResult:
        self.rebuild_if_needed(now)
        result = self.scheduler.cycle(now)
        for wl in result.admitted:
            self.assumed.add(wl.key)
            self.dirty.add(wl.key)
        for preemption in result.preemptions:
            self.dirty.add(preemption.victim.key)
            self.dirty.add(preemption.preemptor.key)
            if self.release_bare_evictions and not self._owned_by_controller(preemption.victim):
                self.finish_eviction(preemption.victim.key, now)
        # Heads examined this cycle may have a new Pending message.
        self.dirty.update(result.touched)
        return result

    def redo(self, key: str) -> None:
        """Flush this workload again (its write was held back behind one still in flight), even
        though its engine view has not changed since."""
        info = self.infos.get(key)
        if info is not None:
            info.flushed_view = None
        self.dirty.add(key)

    def write_succeeded(self, write: StatusWrite, stored: Workload) -> None:
        info = self.infos.get(write.key)
        if info is None:
            return
        info.obj = stored
        info.check_resets.clear()
        info.reset_nomination = False
        if write.admits:
            self.assumed.discard(write.key)

    def write_failed(self, write: StatusWrite, now: datetime, latest: Workload | None) -> None:
        """The write lost a race (or the object is gone): forget what we assumed (its quota goes
        back and parked workloads get another try), then start again from `latest`."""
        self._remove(write.key)
        if latest is not None:
            self.upsert_workload(latest, now)

    # --- output ----------------------------------------------------------------------------------------
    def flush(self, now: datetime) -> Flush:
        """Status writes (and their Events) for every workload whose engine view differs from the cluster's."""
        out = Flush()
        for key in sorted(self.dirty):
            info = self.infos.get(key)
            if info is None:
                continue
            # Most dirty workloads are heads that failed again the same way; building their
            # status only to find it unchanged was the manager's largest cost with many pending.
            view = _status_view(info)
            if info.flushed_view is not None and info.flushed_view[0] is view[0] and info.flushed_view[1:] == view[1:]:
                continue
            info.flushed_view = view
            desired = workload_status(info, now=now)
            current = info.obj.status or WorkloadStatus()
            if self._same(current, desired):
                continue
            admits = key in self.assumed
            events = self._events(info, current, desired)
            rv = info.obj.metadata.resource_version or ""
            out.writes.append(StatusWrite(key, info.namespace, info.name, rv, desired, admits=admits, events=events))
        self.dirty.clear()
        return out

    @staticmethod
    def _same(current: WorkloadStatus, desired: WorkloadStatus) -> bool:
        if _owned(current.conditions) != _owned(desired.conditions):
            return False
        if (current.admission is None) != (desired.admission is None):
            return False
        if current.admission is not None and desired.admission is not None and current.admission.to_dict() != desired.admission.to_dict():
            return False
        if (current.cluster_name, current.nominated_cluster_names) != (desired.cluster_name, desired.nominated_cluster_names):
            return False
        return _check_states(current) == _check_states(desired)

    def _events(self, info: WorkloadInfo, current: WorkloadStatus, desired: WorkloadStatus) -> list[EventRecord]:
        before, after = _owned(current.conditions), _owned(desired.conditions)
        out = []

        def event(kind: str, reason: str, message: str) -> None:
            out.append(EventRecord(info.namespace, info.name, info.uid, kind, reason, message))

        def became(kind: str, status: str) -> bool:
            return after.get(kind, ("",))[0] == status and before.get(kind, ("",))[0] != status

        if became(c.QUOTA_RESERVED, "True"):
            waited = int(((info.reserved_at or info.created) - info.queue_time).total_seconds())
            event("Normal", "QuotaReserved", f"Quota reserved in ClusterQueue {info.admission_cq}, wait time since queued was {waited}s")
        if became(c.ADMITTED, "True"):
            event("Normal", "Admitted", f"Admitted by ClusterQueue {info.admission_cq}, wait time since reservation was 0s")
        if became(c.PREEMPTED, "True"):
            event("Normal", "Preempted", after[c.PREEMPTED][2])
        elif became(c.EVICTED, "True"):
            event("Normal", "EvictedDueTo" + after[c.EVICTED][1], after[c.EVICTED][2])
        pending = after.get(c.QUOTA_RESERVED)
        if pending is not None and pending[0] == "False" and pending != before.get(c.QUOTA_RESERVED) and pending[2]:
            event("Normal", "Pending", pending[2])
        return out

    def cluster_queue_status(self, name: str, now: datetime) -> ClusterQueueStatus | None:
        cq = self.cache.cluster_queues.get(name)
        if cq is None:
            return None
        active, since = self._active_since.get(name, (cq.active, now))
        if active != cq.active:
            since = now
        self._active_since[name] = (cq.active, since)
        return cluster_queue_status(cq, self.scheduler, since=since)

    def local_queue_statuses(self, now: datetime) -> dict[str, LocalQueueStatus]:
        """Every LocalQueue's status, from one pass over the workloads."""
        tallies: dict[str, _LocalQueueTally] = {key: _LocalQueueTally() for key in self.cache.local_queues}
        for info in self.infos.values():
            tally = tallies.get(f"{info.namespace}/{info.queue_name}")
            if tally is None:
                continue
            if info.reserved:
                tally.reserving += 1
                is_admitted = info.condition_true(c.ADMITTED)
                tally.admitted += is_admitted
                for fr, value in info.usage.items():
                    tally.reservation[fr] = tally.reservation.get(fr, 0) + value
                    if is_admitted:
                        tally.usage[fr] = tally.usage.get(fr, 0) + value
            elif info.active:
                tally.pending += 1
        return {key: self._local_queue_status(self.cache.local_queues[key], tally, now) for key, tally in tallies.items()}

    def _local_queue_status(self, lq: kueue.LocalQueue, tally: _LocalQueueTally, now: datetime) -> LocalQueueStatus:
        cq = self.cache.cluster_queues.get(lq.spec.cluster_queue or "")

        def flavor_list(totals: dict[tuple[str, str], int]) -> list[LocalQueueFlavorUsage]:
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
        previous = lq.status.conditions if lq.status else None
        since = now
        for cond in previous or []:
            if cond.type == c.ACTIVE and cond.status == active[0] and cond.last_transition_time is not None:
                since = cond.last_transition_time
        return LocalQueueStatus(
            conditions=[Condition(type=c.ACTIVE, status=active[0], reason=active[1], message=active[2], last_transition_time=since)],
            pending_workloads=tally.pending,
            reserving_workloads=tally.reserving,
            admitted_workloads=tally.admitted,
            flavors_reservation=flavor_list(tally.reservation),
            flavors_usage=flavor_list(tally.usage),
        )
