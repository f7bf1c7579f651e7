"""The live admission state: Kueue's queue manager, cache and workload controller, kept
incrementally from the objects a cluster holds. Pure: the controller feeds it objects and
the time, and writes back what it returns.

Objects come in through `upsert_*` and `delete_*`. `cycle(now)` runs one scheduling cycle.
`flush(now)` returns the Workload status writes and Events that bring the cluster in line
with the engine, and `cluster_queue_status` / `local_queue_status` the queues' status.

The engine assumes its own decisions (Kueue's "assume" in its cache): a workload admitted by
a cycle holds its quota at once, while the status write is in flight. The writes and their
outcomes are `manager.engine.writes`'s part of the state; waitForPodsReady's timers are
`manager.engine.deadlines`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.config import Configuration
from manager.api.core import LimitRange, PriorityClass
from manager.api.kueue import ClusterQueueStatus, LocalQueueStatus, Workload
from manager.api.meta import is_condition_true
from manager.engine.cache import Cache, CheckInfo
from manager.engine.deadlines import Deadlines
from manager.engine.podsready import (
    REASON_PODS_READY_TIMEOUT,
)
from manager.engine.requests import RequestError, limit_range_defaults
from manager.engine.scheduler import CycleResult, Refusal, Scheduler
from manager.engine.status import cluster_queue_status, local_queue_statuses, owned_conditions
from manager.engine.workload import (
    REASON_DEACTIVATED,
    REASON_PENDING_EVALUATION,
    WorkloadInfo,
    build_info,
    controller_owner,
    has_quota_reservation,
    is_active,
    is_finished,
    preemption_gates_view,
    requeued_on_release,
    reserved_eviction,
    reserved_release,
    workload_priority,
)
from manager.engine.writes import WriteBookkeeping, older_than_held, take_admitted_as_written, take_pending_condition_as_written


def _backoff_view(wl: Workload) -> tuple[object, ...]:
    """What decides whether a pending workload still waits out a backoff: its Requeued
    condition and its requeueAt (the job controller changes them when the backoff ends)."""
    status = wl.status
    requeued = next((cond for cond in (status.conditions if status else None) or [] if cond.type == c.REQUEUED), None)
    state = status.requeue_state if status else None
    return (requeued.status, requeued.reason) if requeued else None, state.requeue_at if state else None


class AdmissionState(WriteBookkeeping, Deadlines):
    """Everything the admission side knows, built from a cluster's objects."""

    def __init__(
        self,
        config: Configuration | None = None,
        *,
        release_bare_evictions: bool = False,
        admission_checks_known: bool = True,
        jitter: Callable[[], float] | None = None,
    ) -> None:
        self.config = config or Configuration()
        # waitForPodsReady: the backoff's random draw in [0, 1) (the controller passes its
        # generator; none by default), and when each admitted workload's timeout runs out.
        self.jitter = jitter or (lambda: 0.0)
        self.pods_ready_deadlines: dict[str, datetime] = {}
        # Workloads this state released itself (no job owns them) waiting out their backoff:
        # Kueue's workload controller ends it (Requeued=True, BackoffFinished), and so does this.
        self.backoff_deadlines: dict[str, datetime] = {}
        # Kueue's lifecycle (the default): an evicted Workload keeps its reservation, and its
        # usage stays charged, until its QuotaReserved turns False. The job integration writes
        # that once the job has stopped; for a Workload no job owns, whoever plays that part
        # (Kueue's scheduler-performance runner does). `release_bare_evictions` instead gives an
        # unowned victim's quota back at once: the worker agent's choice for a remote copy that
        # no job owns yet (`manager.controllers.run.Process`).
        self.release_bare_evictions = release_bare_evictions
        # `kfed simulate` reads no AdmissionChecks: every check a ClusterQueue names then counts
        # as present and active, instead of making the queue inactive.
        self.admission_checks_known = admission_checks_known
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
        self.errors: dict[str, str] = {}  # workload key -> why the engine cannot read it
        self.assumed: set[str] = set()
        self.dirty: set[str] = set()
        self.cache = Cache()
        self.refuse: Refusal | None = None
        self.scheduler = Scheduler(self.cache, config=self.config, namespaces=self.namespaces, refuse=self.refuse)
        self._needs_rebuild = True

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
    def set_refusal(self, refuse: Refusal | None) -> None:
        """A rule outside the quota tree that keeps workloads from reserving quota (see
        `Refusal`); the scheduler asks it before assigning flavors to each head."""
        self.refuse = refuse
        self.scheduler.refuse = refuse

    def requeue_refused(self, cluster_queues: Iterable[str]) -> None:
        """What the refusal rule reads changed: the inadmissible workloads of these queues get
        another try."""
        for name in cluster_queues:
            cq = self.cache.cluster_queues.get(name)
            if cq is not None:
                self.scheduler.requeue_inadmissible_in_tree(cq.node, immediate=True)

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
            admission_checks=self.admission_checks if self.admission_checks_known else None,
        )
        self.scheduler = Scheduler(self.cache, config=self.config, namespaces=self.namespaces, refuse=self.refuse)
        for key in sorted(self.infos):
            info = self.infos[key]
            info.last_assignment = None
            if info.reserved:
                self.cache.reserve_admitted(info)
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
            self.errors[wl.key] = str(err)
            return None
        self.errors.pop(wl.key, None)
        return info

    def upsert_workload(self, wl: Workload, now: datetime) -> None:
        """A Workload as the cluster now has it."""
        key = wl.key
        old = self.infos.get(key)
        if older_than_held(old, wl):
            return
        if wl.metadata.creation_timestamp is None:
            wl.metadata.creation_timestamp = now
        if is_finished(wl) or (wl.metadata.deletion_timestamp is not None and not has_quota_reservation(wl)):
            self.delete_workload(key, now)
            return
        if old is not None and key in self.assumed:
            if not has_quota_reservation(wl):
                return  # an event from before our admission write; that write decides
            self.assumed.discard(key)
        if old is not None and old.obj.metadata.resource_version == wl.metadata.resource_version:
            return
        reserved_now = has_quota_reservation(wl)
        if old is not None and old.reserved and reserved_now and old.obj.spec == wl.spec:
            self._refresh_reserved(old, wl, now)
            return
        if (
            old is not None
            and not old.reserved
            and not reserved_now
            and old.obj.spec == wl.spec
            and old.active == is_active(wl)
            and _backoff_view(old.obj) == _backoff_view(wl)
            # A gate opened by the MultiKueue manager: the parked Workload may preempt now.
            and preemption_gates_view(old.obj) == preemption_gates_view(wl)
        ):
            self._refresh_pending(old, wl)
            return
        info = self._build(wl)
        self._remove(key, now)
        if info is None:
            return
        self.infos[key] = info
        self.dirty.add(key)
        if info.reserved:
            self.cache.reserve_admitted(info)
            self._check_reserved(info, now)
        else:
            self.scheduler.enqueue(info, now)
            if info.requeue_at is not None and not self._owned_by_controller(info):
                # Released by another writer (Kueue's runner) with a backoff to wait out: no job
                # controller ends it, so this side does, as Kueue's workload controller would.
                self.backoff_deadlines[key] = info.requeue_at

    def _refresh_pending(self, info: WorkloadInfo, wl: Workload) -> None:
        info.carry_foreign(wl)
        take_pending_condition_as_written(info)
        self.dirty.add(info.key)

    def _refresh_reserved(self, info: WorkloadInfo, wl: Workload, now: datetime) -> None:
        info.carry_foreign(wl)
        # Evictions written by others (or by us before a restart) are taken as the cluster says.
        observed = owned_conditions(wl.status.conditions if wl.status else None)
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
        take_admitted_as_written(info)
        if info.conditions.get(c.ADMITTED) != before:
            self.dirty.add(info.key)
        cq_policy, lq_policy = self.cache.stop_policies(info)
        release = reserved_release(
            info, cluster_queue_policy=cq_policy, local_queue_policy=lq_policy, granular=self.scheduler.explain_bypassed
        )
        if release is not None:
            self._release_reservation(info, now, reason=release[0], message=release[1])
            return
        eviction = None
        if not info.evicted:
            eviction = reserved_eviction(info, cluster_queue_policy=cq_policy, local_queue_policy=lq_policy)
        if eviction is None and not info.evicted:
            eviction = self._pods_ready_eviction(info, now)
        elif eviction is not None and eviction[0].startswith(REASON_DEACTIVATED) and info.obj.status and info.obj.status.requeue_state:
            info.requeue_state_write = (None,)  # Kueue clears the requeue state of a deactivated workload
        if eviction is not None:
            info.set_condition(c.EVICTED, "True", eviction[0], eviction[1], now)
            self.dirty.add(info.key)
        if info.evicted and self._released_at_eviction(info):
            self.finish_eviction(info.key, now)

    @staticmethod
    def _owned_by_controller(info: WorkloadInfo) -> bool:
        return controller_owner(info.obj) is not None

    def _released_at_eviction(self, info: WorkloadInfo) -> bool:
        """Whether this side gives an evicted Workload's quota back with its eviction. A Workload
        a job controls is released by its job integration once the job has stopped, and one
        that nothing owns by whoever plays the job's part (Kueue's runner): both keep their
        quota until then, as in Kueue. A Workload owned, not as controller, by its pods or its
        LeaderWorkerSet is released here at once: kfed's pod-group and LeaderWorkerSet
        integrations stop nothing before the release (Kueue's release once the group's pods are
        gone is not modelled yet). `release_bare_evictions` releases every Workload no job
        controls at once (the worker agent's choice)."""
        if self._owned_by_controller(info):
            return False
        return self.release_bare_evictions or bool(info.obj.metadata.owner_references)

    def finish_eviction(self, key: str, now: datetime) -> None:
        """What the job integration does once an evicted workload's pods are gone: release its
        quota and queue it again, with Kueue's Requeued (UnsetQuotaReservationWithCondition)."""
        info = self.infos.get(key)
        if info is None or not info.reserved:
            return
        evicted = info.conditions.get(c.EVICTED)
        message = evicted.message if evicted is not None else "The workload was evicted"
        reason = evicted.reason if evicted is not None else REASON_PENDING_EVALUATION
        # Same rule as for a Job's release: Requeued=True at once only after a preemption or
        # node failures; otherwise False until the workload controller's follow-up (set first:
        # the release queues it, and a PodsReady timeout's backoff holds it back).
        info.set_condition(c.REQUEUED, "True" if requeued_on_release(reason) else "False", reason, message, now)
        self._release_reservation(info, now, reason=REASON_PENDING_EVALUATION, message=message)
        if reason == REASON_PODS_READY_TIMEOUT:
            self.backoff_deadlines[key] = info.requeue_at or now

    def _release_reservation(self, info: WorkloadInfo, now: datetime, *, reason: str, message: str) -> None:
        """Kueue's workload controller unsetting a reservation itself (`reserved_release`): the
        quota goes back with no eviction, and the workload is queued again."""
        cq = self.cache.cluster_queues.get(info.admission_cq)
        self.scheduler.release(info, now, reason=reason, message=message)
        if cq is not None:
            self.scheduler.requeue_inadmissible_in_tree(cq.node.root(), now)
        self.dirty.add(info.key)

    def _remove(self, key: str, now: datetime) -> None:
        self.pods_ready_deadlines.pop(key, None)
        self.backoff_deadlines.pop(key, None)
        info = self.infos.pop(key, None)
        self.assumed.discard(key)
        if info is None:
            return
        for queue in self.scheduler.queues.values():
            queue.delete(key)
        cq = self.cache.cluster_queues.get(info.admission_cq)
        if info.reserved and cq is not None:
            self.cache.release(cq, info)
            self.scheduler.requeue_inadmissible_in_tree(cq.node.root(), now)

    def delete_workload(self, key: str, now: datetime) -> None:
        self._remove(key, now)
        self.errors.pop(key, None)
        self.dirty.discard(key)

    # --- scheduling -------------------------------------------------------------------------------------
    def cycle(self, now: datetime) -> CycleResult:
        self.rebuild_if_needed(now)
        if self.pods_ready_deadlines:
            self.expire_pods_ready(now)
        if self.backoff_deadlines:
            self.end_backoffs(now)
        result = self.scheduler.cycle(now)
        for wl in result.admitted:
            self.assumed.add(wl.key)
            self.dirty.add(wl.key)
            if self.config.pods_ready is not None:
                self._pods_ready_eviction(wl, now)  # starts its PodsReady timeout (nothing is due yet)
        for preemption in result.preemptions:
            self.dirty.add(preemption.victim.key)
            self.dirty.add(preemption.preemptor.key)
            if self._released_at_eviction(preemption.victim):
                self.finish_eviction(preemption.victim.key, now)
        # Heads examined this cycle may have a new Pending message.
        self.dirty.update(result.touched)
        return result

    def cluster_queue_status(self, name: str, now: datetime) -> ClusterQueueStatus | None:
        cq = self.cache.cluster_queues.get(name)
        if cq is None:
            return None
        stored = self.cluster_queue_objects.get(name)
        return cluster_queue_status(cq, self.scheduler, now=now, previous=stored.status.conditions if stored and stored.status else None)

    def local_queue_statuses(self, now: datetime) -> dict[str, LocalQueueStatus]:
        """Every LocalQueue's status, from one pass over the workloads."""
        return local_queue_statuses(self.infos.values(), self.cache, now=now, stored=self.local_queues)
