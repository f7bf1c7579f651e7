"""The MultiKueue workload controller: carries out `plan_workload` for each manager Workload
that has a MultiKueue admission check.

A reconcile reads the manager's caches and each connected worker's caches (the remote
Workloads and jobs of our origin) and what it remembers of the Workload (its `DispatchState`),
asks the planner, stores the state the plan returns, and writes: remote deletes first, then
the job on the winner (or its status back to the manager's job), then the manager
Workload's status. What differs between job kinds (the remote object, the status copied
back) is the kind's adapter's (`manager.engine.integrations`). Every write to the manager's Workload carries a resourceVersion
precondition; a conflict means the view was stale and the key is reconciled again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, InitVar, dataclass
from datetime import datetime
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import (
    OwnerReference,
    Resource,
    utcnow,
)
from manager.controllers.caches import Caches
from manager.controllers.events import EventRecorder, InvolvedObject
from manager.engine.cache import ClusterQueueInfo
from manager.engine.integrations.adapter import JobAdapter, component_index, component_owner_values
from manager.engine.integrations.registry import BATCH_JOB
from manager.engine.units import FlavorResource
from manager.engine.workload import (
    Patch,
    WorkloadInfo,
    admission_from_status,
    check_states,
    deactivation_patch,
    finish_patch,
    has_quota_reservation,
    is_admitted,
    is_multikueue_controller,
    multikueue_check_name,
    usage_of,
)
from manager.kube.client import JSON_PATCH, KubeClient
from manager.kube.errors import AlreadyExistsError, ConflictError, KubeError, NotFoundError
from manager.kube.informer import Informer
from manager.multikueue.controllers.clusters import ClusterController
from manager.multikueue.controllers.propagation import QueuePropagator
from manager.multikueue.controllers.remote import ConnectionFailedError, RemoteCluster
from manager.multikueue.rules import federation, selection
from manager.multikueue.rules.capacity import WorkerQuotas, never_fits
from manager.multikueue.rules.dispatch import FORGOTTEN, DispatchState, InFlight, Usages
from manager.multikueue.rules.plan import (
    REASON_EVICTED_ON_MANAGER,
    REASON_MULTIKUEUE,
    SYNC_DEFERRED_REQUEUE,
    WORKER_NAMESPACES_ANNOTATION,
    ClusterHealth,
    Plan,
    WorkloadInputs,
    check_patch,
    may_still_run_on,
    open_gate_patch,
    plan_workload,
    remote_copy,
)
from manager.multikueue.rules.queues import with_propagated_queue
from manager.multikueue.rules.settings import Settings
from manager.runtime.controller import Controller, Result
from manager.runtime.metrics import Registry
from manager.runtime.runnables import Runnable, leader

log = logging.getLogger("kfed.multikueue.workload")

PROBLEM_RETRY = 5.0  # seconds before a copy that could not be made is tried again
# The refusal remembers its answers per Workload shape; a burst of many shapes starts it afresh.
MAX_REMEMBERED_REFUSALS = 10_000


def owner_kind(ref: Any) -> str:
    """Kueue's GVK string, e.g. `batch/v1, Kind=Job`."""
    return f"{ref.api_version}, Kind={ref.kind}"


@dataclass(eq=False)
class WorkloadController:
    client: KubeClient
    caches: Caches
    _: KW_ONLY
    settings: Settings
    clusters: ClusterController
    configs: Informer[kueue.MultiKueueConfig]
    metrics: Registry
    recorder: EventRecorder | None = None
    clock: Callable[[], datetime] = utcnow
    # Called when what the refusal reads (a worker's queue specs) changed: the admission
    # controller then tries the refused Workloads again.
    on_refusal_inputs: Callable[[], None] | None = None
    # Called with the Workload before and after a check write that admitted it (`CheckUpdate.
    # admitted`): the admission controller reports that admission as Kueue's does.
    on_admitted: Callable[[kueue.Workload, kueue.Workload], None] | None = None
    # Queues that follow the manager (kfed's own): a copy's namespace and LocalQueue are made on
    # its worker first, where its config propagates them.
    propagation: QueuePropagator | None = None
    workers: InitVar[int] = 16

    def __post_init__(self, workers: int) -> None:
        self.controller = Controller("multikueue-workload", self.reconcile, metrics=self.metrics, workers=workers)
        self.deleted: dict[str, kueue.Workload] = {}
        # What each plan leaves to remember of a Workload (`DispatchState`), and two indexes of
        # it kept by `_store`: the Workloads waiting for room, and the copies in flight.
        self.dispatch: dict[str, DispatchState] = {}
        self.waiting: set[str] = set()
        self.in_flight: dict[str, InFlight] = {}
        # The refusal's answers, for the workers' queue specs last announced (`_quota_specs`).
        self._refusals: dict[tuple[object, ...], str | None] = {}
        self._specs_announced: tuple[tuple[str, int, bool], ...] = ()
        self._dispatched = self.metrics.counter(
            "kfed_multikueue_workloads_dispatched_total", "Remote Workload copies created, per cluster.", ("cluster_queue", "cluster")
        )
        self._admitted = self.metrics.counter(
            "kfed_multikueue_workloads_admitted_total", "Workloads admitted through a worker, per cluster.", ("cluster_queue", "cluster")
        )
        self._retried = self.metrics.counter(
            "kfed_multikueue_workloads_retried_total", "Admissions lost or evicted on a worker, per cluster.", ("cluster_queue", "cluster")
        )
        self._latency = self.metrics.histogram(
            "kfed_multikueue_dispatch_to_admission_seconds",
            "From the first remote copy to the check turning Ready, per cluster.",
            ("cluster",),
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900),
        )
        self.caches.workloads.add_handler(self._on_local)

    # --- events ------------------------------------------------------------------------------------
    def _is_multikueue(self, wl: kueue.Workload) -> bool:
        return self._check_name(wl) is not None

    def _check_name(self, wl: kueue.Workload) -> str | None:
        return multikueue_check_name(check_states(wl), self.caches.admission_checks)

    def _on_local(self, kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
        wl = new or old
        if wl is None or not self._is_multikueue(wl):
            return
        if new is None:
            self.deleted[wl.key] = wl
        self.controller.enqueue(wl.key)
        # The other Workloads of its job follow it to its worker (Kueue's enqueueComponentWorkloads).
        for name in self._siblings(wl):
            self.controller.enqueue(f"{wl.namespace}/{name}")

    def on_remote_object(self, remote: RemoteCluster, namespace: str, name: str) -> None:
        self.controller.enqueue(f"{namespace}/{name}")

    def on_quotas(self, remote: RemoteCluster) -> None:
        """A worker's queues changed: the Workloads waiting for room may fit now, and, when
        their specs changed, the refused ones may fit some worker."""
        for key in list(self.waiting):
            self.controller.enqueue(key)
        self._announce_quota_specs()

    def on_connection_change(self, remote: RemoteCluster) -> None:
        """A worker came or went: every MultiKueue workload may have something new to do, and
        the refusal may read different workers."""
        self.resync()
        self._announce_quota_specs()

    def _announce_quota_specs(self) -> None:
        specs = self._quota_specs()
        if specs != self._specs_announced:
            # Only a change to what the workers could ever give: their usage changes with every
            # admission there, and says nothing new to the refusal. Every change to a worker's
            # queue specs or connection comes through here, so the remembered answers go too.
            self._specs_announced = specs
            self._refusals.clear()
            if self.on_refusal_inputs is not None:
                self.on_refusal_inputs()

    # --- the refusal -------------------------------------------------------------------------------
    def _quota_specs(self) -> tuple[tuple[str, int, bool], ...]:
        return tuple((name, remote.quota_spec_version, remote.connected) for name, remote in sorted(self.clusters.remotes.items()))

    def refusal(self, info: WorkloadInfo, cq: ClusterQueueInfo) -> str | None:
        """The admission controller's gate for a Workload about to reserve quota in a ClusterQueue
        with a MultiKueue check: why no worker of that check could ever admit it, or None."""
        for check_name, _ in cq.checks:
            ac = self.caches.admission_checks.get(check_name)
            if ac is not None and is_multikueue_controller(ac.spec.controller_name):
                return self.never_fits_for(info, check_name)
        return None

    def never_fits_for(self, info: WorkloadInfo, check_name: str) -> str | None:
        """`capacity.never_fits` over the workers the job may go to (`selection`), each judged
        with the LocalQueue the manager would create there when its config propagates queues,
        each other worker named with why it may not; remembered until a worker's queue specs or
        connection change (the scheduler asks for every head of every cycle)."""
        chosen = self._selection(info.obj, check_name)
        excluded = tuple(chosen.excluded.items())
        propagated = self._propagated_queue(check_name, info.namespace, info.queue_name)
        target = propagated.spec.cluster_queue if propagated is not None else None
        key = (tuple(chosen.allowed), excluded, info.namespace, info.queue_name, info.scheduling_hash, target)
        if key not in self._refusals:
            if len(self._refusals) >= MAX_REMEMBERED_REFUSALS:
                self._refusals.clear()
            if not chosen.allowed:
                self._refusals[key] = selection.refusal(chosen)
            else:
                workers = {name: self.worker_quotas(name, check_name, info.namespace, info.queue_name) for name in chosen.allowed}
                found = never_fits(info, workers)
                lines = "".join(f"; {name}: {why}" for name, why in excluded)
                self._refusals[key] = f"{found}{lines}" if found else None
        return self._refusals[key]

    def _selection(self, wl: kueue.Workload, check_name: str) -> selection.Selection:
        """The check's workers this Workload may go to (`selection.for_workload`)."""
        return selection.for_workload(wl, self._config(check_name), self.clusters.clusters.get)

    def _propagated_queue(self, check_name: str, namespace: str, queue_name: str) -> kueue.LocalQueue | None:
        """The manager's LocalQueue when this check's config propagates it to the workers."""
        if self.propagation is None or not self.propagation.propagates(check_name) or not self.propagation.selects(namespace):
            return None
        return self.caches.local_queues.get(f"{namespace}/{queue_name}")

    def worker_quotas(self, worker: str, check_name: str, namespace: str, queue_name: str) -> WorkerQuotas | None:
        """A worker's queues as the dispatch rules judge them: with the propagated LocalQueue
        where the manager would create it before the copy (`queues.with_propagated_queue`)."""
        remote = self.clusters.remotes.get(worker)
        quotas = remote.quotas() if remote is not None else None
        propagated = self._propagated_queue(check_name, namespace, queue_name)
        if quotas is None or remote is None or propagated is None or not remote.serves(namespace):
            return quotas
        return with_propagated_queue(quotas, propagated, origin=self.settings.origin)

    def runnable(self) -> Runnable:
        """Dispatch and sync write on the manager and the workers, so only the lease holder
        runs them, starting with every MultiKueue Workload."""

        async def run() -> None:
            self.resync()
            await self.controller.run()

        return leader(self.controller.name, run)

    def resync(self) -> None:
        for wl in self.caches.workloads.items():
            if self._is_multikueue(wl):
                self.controller.enqueue(wl.key)
        for key in list(self.deleted):
            self.controller.enqueue(key)

    def _event(self, wl: kueue.Workload, kind: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.emit(
                InvolvedObject(f"{c.GROUP}/{c.STORAGE_VERSION}", "Workload", wl.namespace, wl.name, wl.metadata.uid or ""),
                type=kind,
                reason=REASON_MULTIKUEUE,
                message=message,
            )

    async def runs_on_a_worker(self, wl: kueue.Workload) -> bool:
        """Whether our job for this Workload may still run or finish on a worker
        (`may_still_run_on`): the manager keeps the evicted Workload's quota until it cannot,
        so that an eviction stops a running remote job (and sees it finish) instead of
        deleting it and starting it again elsewhere. Every connected worker is asked live (one
        read each, once per eviction check); a worker that cannot be asked counts as running it."""
        check_name = self._check_name(wl)
        names = (self._config_clusters(check_name) if check_name else None) or []
        names += [name for name in self.clusters.remotes if name not in names]
        health = self._health(names)
        adapter, local_job, owner = self._local_job(wl)
        adapter = adapter or BATCH_JOB  # no adapter: the check was rejected, nothing was dispatched
        local_names = {part.name for part in adapter.parts(local_job)} if local_job is not None else set()
        jobs: dict[str, Resource | None] = {}
        admitted_copies, never_seen = set(), set()
        for cluster in health:
            remote = self.clusters.remotes.get(cluster.name)
            if remote is None:
                continue
            if not remote.ever_seen:
                never_seen.add(cluster.name)
            copy = remote.last_known_workload(wl.key)
            if copy is not None and is_admitted(copy):  # only an admitted copy's Job may be started
                admitted_copies.add(cluster.name)
            cached_parts = remote.parts_for(wl.key, adapter)
            cached = adapter.compose(cached_parts)
            # Every object of the job (a pod group's Pods), by the names known here or there.
            job_names = sorted({part.name for part in cached_parts} | local_names) or ([owner.name] if owner is not None else [])
            if not cluster.connected or not job_names:
                jobs[cluster.name] = cached
                continue
            try:
                found = [await remote.read_job(wl.key, job_name, adapter) for job_name in job_names]
                jobs[cluster.name] = adapter.compose([part for part in found if part is not None])
            except (KubeError, ConnectionFailedError) as err:
                log.info(
                    "cannot read the job on the worker; its quota is kept",
                    extra={"key": wl.key, "cluster": cluster.name, "error": str(err)},
                )
                return True
        where = may_still_run_on(
            admitted_on=wl.status.cluster_name if wl.status else None,
            clusters=health,
            jobs=jobs,
            admitted_copies=frozenset(admitted_copies),
            never_seen=frozenset(never_seen),
            now=self.clock(),
            worker_lost_timeout=self.settings.worker_lost_timeout,
            adapter=adapter,
        )
        return where is not None

    # --- reading -----------------------------------------------------------------------------------
    def _config(self, check_name: str) -> kueue.MultiKueueConfig | None:
        return federation.config_of_check(check_name, self.caches.admission_checks.get, self.configs.get)

    def _config_clusters(self, check_name: str) -> list[str] | None:
        config = self._config(check_name)
        return list(config.spec.clusters) if config is not None else None

    def _health(self, names: list[str]) -> list[ClusterHealth]:
        out = []
        now = self.clock()
        for name in names:
            remote = self.clusters.remotes.get(name)
            if remote is None:
                out.append(ClusterHealth(name, False, self.clusters.removed_at.setdefault(name, now)))
            else:
                # A worker whose admission agent is down keeps what it runs, but gets nothing new.
                accepts = remote.agent_verdict().running is not False
                out.append(ClusterHealth(name, remote.connected, remote.lost_since, accepts_new=accepts))
        return out

    def _local_job(self, wl: kueue.Workload) -> tuple[JobAdapter[Any] | None, Resource | None, OwnerReference | None]:
        """The owner's MultiKueue adapter (Kueue's adapter lookup by GVK), and the job."""
        owner = next((ref for ref in wl.metadata.owner_references or [] if ref.controller), None)
        if owner is None and wl.metadata.owner_references:
            owner = wl.metadata.owner_references[0]
        adapter = self.caches.registry.by_gvk(owner_kind(owner)) if owner is not None else None
        if owner is None or adapter is None or not adapter.multikueue:
            return None, None, owner
        informer = self.caches.jobs[adapter.gvk]
        key = next(iter(adapter.job_keys(wl)), f"{wl.namespace}/{owner.name}")  # a pod group: its key
        job = adapter.load(key, get=informer.get, by_index=informer.by_index)
        return adapter, adapter.with_related(job, find=self.caches.find) if job is not None else None, owner

    # --- reconcile ---------------------------------------------------------------------------------
    async def reconcile(self, key: str) -> Result | None:
        local = self.caches.workloads.get(key)
        deleted = local is None or local.metadata.deletion_timestamp is not None
        if local is None:
            local = self.deleted.get(key)
            if local is None:
                return None
        check_name = self._check_name(local)
        if check_name is None:
            self._forget(key)
            return None
        names = self._config_clusters(check_name) or []
        excluded = self._selection(local, check_name).excluded
        health = [dataclasses.replace(h, excluded=excluded.get(h.name, "")) for h in self._health(names)]
        connected = {h.name: self.clusters.remotes[h.name] for h in health if h.connected}
        remotes = {}
        for name, remote in connected.items():
            found = remote.workload(key)
            if found is not None:
                remotes[name] = found
        adapter, job, owner = self._local_job(local)
        inputs = WorkloadInputs(
            local=local,
            check_name=check_name,
            clusters=health,
            remotes=remotes,
            now=self.clock(),
            worker_lost_timeout=self.settings.worker_lost_timeout,
            dispatcher=self.settings.dispatcher_name,
            step=self.settings.step_size,
            admission_timeout=self.settings.admission_timeout,
            dispatch=self.dispatch.get(key, FORGOTTEN),
            workers=_Workers(self, key, check_name=check_name),
            deleted=deleted,
            owner_kind=owner_kind(owner) if owner is not None else None,
            multikueue_kinds=self.caches.registry.multikueue_kinds,
            owner_managed_by=adapter.managed_by(job)
            if adapter is not None and job is not None
            else (c.MULTIKUEUE_MANAGED_BY if owner is not None else None),
            owner_managed_by_field=".".join(adapter.managed_by_field) if adapter is not None else "spec.managedBy",
            local_job_holds_quota=adapter is not None and job is not None and not adapter.releasable(job),
            remote_jobs=frozenset(name for name, remote in connected.items() if remote.jobs_for(key)),
            component_index=component_index(local),
            siblings=self._siblings(local),
            orchestrated_preemption=self.settings.orchestrated_preemption,
        )
        plan = plan_workload(inputs)
        if not plan.forget:
            self._store(key, plan.dispatch)
        return await self._execute(key, local, adapter, job, plan, connected, check_name)

    def _siblings(self, wl: kueue.Workload) -> dict[str, tuple[int, str]]:
        """The other Workloads of its job (a LeaderWorkerSet's groups): (index, the worker that admitted it)."""
        found = {}
        for value in component_owner_values(wl):
            for other in self.caches.workloads.by_index("componentOwner", value):
                index = component_index(other)
                if other.name != wl.name and index is not None:
                    found[other.name] = (index, (other.status.cluster_name if other.status else None) or "")
        return found

    # --- what is remembered of each Workload -------------------------------------------------------
    def _store(self, key: str, state: DispatchState) -> None:
        """Remember a Workload's dispatch state (forget it when there is nothing to remember)."""
        old = self.dispatch.get(key, FORGOTTEN)
        if state == FORGOTTEN:
            self.dispatch.pop(key, None)
        else:
            self.dispatch[key] = state
        if state.waiting:
            self.waiting.add(key)
        else:
            self.waiting.discard(key)
        if state.in_flight is not None:
            self.in_flight[key] = state.in_flight
        else:
            self.in_flight.pop(key, None)
        if old.in_flight is not None and (state.in_flight is None or state.in_flight.worker != old.in_flight.worker):
            # A copy's usage no longer counts against its worker: the Workloads waiting for room
            # may fit now (no event on the worker says so).
            for waiting in self.waiting - {key}:
                self.controller.enqueue(waiting)

    def _record(self, key: str, outcome: Callable[[DispatchState], DispatchState]) -> None:
        """The outcome of one of this pass's writes, in what is remembered of the Workload."""
        self._store(key, outcome(self.dispatch.get(key, FORGOTTEN)))

    def _forget(self, key: str) -> None:
        self._store(key, FORGOTTEN)
        self.deleted.pop(key, None)

    async def _execute(
        self,
        key: str,
        local: kueue.Workload,
        adapter: JobAdapter[Any] | None,
        job: Resource | None,
        plan: Plan,
        connected: dict[str, RemoteCluster],
        check_name: str,
    ) -> Result | None:
        requeue = plan.requeue_after
        recorded_first = plan.check is not None and plan.check.cluster_name is not None
        if recorded_first:
            # A new winner is recorded before any worker is touched. The write carries the
            # Workload's resourceVersion, so a pass planned from a stale view (which may pick
            # the other of two copies admitted in the same second) fails here, having deleted
            # and created nothing; after a crash, the next pass finds the recorded winner.
            local = await self._write_check(local, check_name, plan)
            self._log_check(key, plan)
        for cluster in plan.delete:
            if cluster in connected:
                await self._remove_remote(connected[cluster], key)
        if plan.forget:
            self._forget(key)
            return None
        for cluster in plan.update_spec:
            await self._forward_priority(connected[cluster], local)
        if plan.deactivate is not None:
            cluster, message = plan.deactivate
            await self._deactivate_remote(connected[cluster], key, message)
        if plan.sync_job is not None and adapter is not None and job is not None:
            deferred = await self._sync_job(connected[plan.sync_job], key, local, adapter, job, create=plan.create_job)
            if deferred:
                requeue = SYNC_DEFERRED_REQUEUE if requeue is None else min(requeue, SYNC_DEFERRED_REQUEUE)
            if plan.sync_job in self.dispatch.get(key, FORGOTTEN).blocked:
                return Result(requeue_after=0.1)  # a foreign Job: plan again without that worker
        if plan.stop_local_job and adapter is not None and job is not None:
            log.info("the worker that ran the job is lost; its pods count as gone", extra={"key": key})
            await self._stop_local_job(adapter, job)
        if plan.finish is not None:
            reason, message = plan.finish
            await self._patch_local(local, finish_patch(local, reason=reason, message=message, now=self.clock()))
            return Result(requeue_after=plan.requeue_after) if plan.requeue_after is not None else None
        if plan.open_gate is not None:
            await self._open_gate(connected[plan.open_gate], key)
        for cluster in plan.create:
            if await self._create_remote(connected[cluster], key, local, check_name, gated=plan.gate_copies):
                requeue = PROBLEM_RETRY if requeue is None else min(requeue, PROBLEM_RETRY)
        if not recorded_first and (plan.check is not None or plan.nominate is not None):
            await self._write_check(local, check_name, plan)
            self._log_check(key, plan)
            if plan.round_started is not None:
                began = plan.round_started
                self._record(key, lambda state: state.round_began(began))
        cq = local.status.admission.cluster_queue if local.status and local.status.admission else ""
        if plan.admitted_on is not None:
            self._admitted.inc(cq, plan.admitted_on)
            started = self.dispatch.get(key, FORGOTTEN).dispatched_at
            self._record(key, DispatchState.admitted)
            if started is not None:
                self._latency.observe((self.clock() - started).total_seconds(), plan.admitted_on)
        if plan.retried_on is not None:
            self._retried.inc(cq, plan.retried_on)
        for kind, message in plan.events:
            self._event(local, kind, message)
        return Result(requeue_after=requeue) if requeue is not None else None

    # --- writes on workers -------------------------------------------------------------------------
    async def _remove_remote(self, remote: RemoteCluster, key: str) -> None:
        """Our job first (only if it carries our origin: the cache holds nothing else), then the
        copy, its finalizer removed first (Kueue does the same)."""
        client = remote.client
        if client is None:
            return
        namespace, _, name = key.partition("/")
        for adapter, job in remote.jobs_for(key):
            if (job.metadata.labels or {}).get(c.MULTIKUEUE_ORIGIN_LABEL) == self.settings.origin:
                with contextlib.suppress(NotFoundError):
                    await client.delete(adapter.model, job.name, namespace=namespace, propagation="Background", uid=job.metadata.uid)
        copy = remote.workload(key)
        if copy is not None and copy.metadata.finalizers:
            kept = [f for f in copy.metadata.finalizers if f != c.RESOURCE_IN_USE_FINALIZER]
            with contextlib.suppress(NotFoundError, ConflictError):
                await client.patch(kueue.Workload, name, {"metadata": {"finalizers": kept or None}}, namespace=namespace)
        with contextlib.suppress(NotFoundError):
            await client.delete(kueue.Workload, name, namespace=namespace)

    async def _create_remote(self, remote: RemoteCluster, key: str, local: kueue.Workload, check_name: str, *, gated: bool) -> bool:
        """Make the copy, its namespace and LocalQueue first where its config propagates them;
        returns True when it could not be made (the reason is kept for the manager's check message)."""
        if self.propagation is None or not self.propagation.propagates(check_name):
            return await self._create_copy(remote, key, local, check_name, gated=gated)
        async with self.propagation.holding(remote.name):
            if remote.serves(local.namespace):
                problem = await self.propagation.ensure(remote, local)
                if problem is not None:
                    self._record(key, lambda state: state.with_problem(remote.name, problem))
                    return True
            return await self._create_copy(remote, key, local, check_name, gated=gated)

    async def _create_copy(self, remote: RemoteCluster, key: str, local: kueue.Workload, check_name: str, *, gated: bool) -> bool:
        """Make the copy; returns True when it could not be made (the reason is kept for the
        manager's check message)."""
        client = remote.client
        if client is None:
            return False
        if not remote.serves(local.namespace):
            problem = f'namespace "{local.namespace}" is not among the worker\'s namespaces ({WORKER_NAMESPACES_ANNOTATION})'
            self._record(key, lambda state: state.with_problem(remote.name, problem))
            return True
        try:
            await client.create(
                kueue.Workload,
                remote_copy(local, origin=self.settings.origin, check_name=check_name, gated=gated),
                namespace=local.namespace,
            )
        except AlreadyExistsError:
            pass
        except NotFoundError:
            missing = f'namespace "{local.namespace}" not found'
            self._record(key, lambda state: state.with_problem(remote.name, missing))
            return True
        except KubeError as err:
            failed = f"cannot create the copy: {err}"
            self._record(key, lambda state: state.with_problem(remote.name, failed))
            return True
        now = self.clock()
        self._record(key, lambda state: state.with_problem(remote.name, None).dispatched(now))
        cq = local.status.admission.cluster_queue if local.status and local.status.admission else ""
        self._dispatched.inc(cq, remote.name)
        return False

    async def _forward_priority(self, remote: RemoteCluster, local: kueue.Workload) -> None:
        if remote.client is None:
            return
        spec = local.spec.to_dict()
        patch = {"spec": {name: spec.get(name) for name in ("priority", "priorityClassRef")}}
        with contextlib.suppress(NotFoundError):
            await remote.client.patch(kueue.Workload, local.name, patch, namespace=local.namespace)

    async def _open_gate(self, remote: RemoteCluster, key: str) -> None:
        """Let this worker preempt for the Workload (Kueue's OpenPreemptionGate). A write that
        loses a race with the worker's own is planned again from the newer copy."""
        copy = remote.workload(key)
        if copy is None or remote.client is None:
            return
        log.info("preemption gate opened", extra={"key": key, "cluster": remote.name})
        with contextlib.suppress(NotFoundError):
            await remote.client.patch(
                kueue.Workload, copy.name, open_gate_patch(copy, now=self.clock()), namespace=copy.namespace, subresource="status"
            )

    async def _deactivate_remote(self, remote: RemoteCluster, key: str, message: str) -> None:
        """Kueue's SetDeactivationTarget on the copy: the worker evicts it and stops its Job."""
        copy = remote.workload(key)
        if copy is None or remote.client is None:
            return
        patch = deactivation_patch(copy, reason=REASON_EVICTED_ON_MANAGER, message=message, now=self.clock())
        await remote.client.patch(kueue.Workload, copy.name, patch, namespace=copy.namespace, subresource="status")

    async def _sync_job(
        self, remote: RemoteCluster, key: str, local: kueue.Workload, adapter: JobAdapter[Any], job: Resource, *, create: bool
    ) -> bool:
        """Copy the worker's job status back, creating that job first when `create` (only the
        winner of a running workload: a finished or evicted one is never started again); a job
        of several objects (a pod group), object by object. Returns True when deferred."""
        theirs_by_name = {part.name: part for part in remote.parts_for(key, adapter)}
        deferred = False
        for part in adapter.parts(job):
            if part.metadata.deletion_timestamp is not None and len(adapter.parts(job)) > 1:
                continue  # same as Kueue: a group's Pod being deleted here is not synced
            deferred |= await self._sync_part(remote, key, local, adapter, part, theirs_by_name.get(part.name), create=create)
        return deferred

    async def _sync_part(
        self,
        remote: RemoteCluster,
        key: str,
        local: kueue.Workload,
        adapter: JobAdapter[Any],
        job: Resource,
        theirs: Resource | None,
        *,
        create: bool,
    ) -> bool:
        client = remote.client
        if client is None:
            return False
        if theirs is None and not create:
            return False
        if theirs is None:
            remote_object = adapter.remote_object(job, workload_name=local.name, origin=self.settings.origin)
            try:
                await client.create(adapter.model, remote_object, namespace=job.namespace)
                return False
            except AlreadyExistsError:
                found = await client.get(adapter.model, job.name, namespace=job.namespace)
                if (found.metadata.labels or {}).get(c.MULTIKUEUE_ORIGIN_LABEL) == self.settings.origin:
                    theirs = found
                else:
                    message = (
                        f'a {adapter.kind} "{job.namespace}/{job.name}" that this manager did not create exists there; it is left alone'
                    )
                    self._record(key, lambda state: state.with_blocked(remote.name, message))
                    self._event(local, "Warning", f'worker cluster "{remote.name}": {message}')
                    await self._remove_copy_only(remote, key)
                    return False
        status, deferred = adapter.status_update(job, theirs)
        current = job.to_dict().get("status") or {}
        if status is not None and status != current:
            # The whole status, replaced (a merge patch would keep nested entries the worker dropped).
            replace = [{"op": "add", "path": "/status", "value": status}]
            await self.client.patch(
                adapter.model, job.name, replace, namespace=job.namespace, subresource="status", content_type=JSON_PATCH
            )
        return deferred

    async def _remove_copy_only(self, remote: RemoteCluster, key: str) -> None:
        if remote.client is None:
            return
        namespace, _, name = key.partition("/")
        with contextlib.suppress(NotFoundError):
            await remote.client.delete(kueue.Workload, name, namespace=namespace)

    async def _stop_local_job(self, adapter: JobAdapter[Any], job: Resource) -> None:
        with contextlib.suppress(NotFoundError):
            await self.client.patch(adapter.model, job.name, adapter.lost_pods_status(job), namespace=job.namespace, subresource="status")

    # --- writes on the manager ---------------------------------------------------------------------
    async def _patch_local(self, local: kueue.Workload, patch: Patch) -> kueue.Workload:
        return await self.client.patch(kueue.Workload, local.name, patch, namespace=local.namespace, subresource="status")

    @staticmethod
    def _log_check(key: str, plan: Plan) -> None:
        if plan.check is not None:
            log.info("admission check", extra={"key": key, "state": plan.check.state, "detail": plan.check.message})

    async def _write_check(self, local: kueue.Workload, check_name: str, plan: Plan) -> kueue.Workload:
        """Write the plan's check update and nomination; returns the Workload as written."""
        patch = check_patch(local, check_name=check_name, update=plan.check, nominate=plan.nominate, now=self.clock())
        written = await self._patch_local(local, patch)
        if plan.check is not None and plan.check.admitted is not None and self.on_admitted is not None:
            try:
                self.on_admitted(local, written)
            except Exception:  # the admission is written: the rest of the pass (its Job) must go on
                log.exception("reporting an admission failed", extra={"key": local.key})
        return written


@dataclass(frozen=True)
class _Workers:
    """What the dispatch rules read of the workers, for one Workload (`plan.Workers`)."""

    controller: WorkloadController
    key: str
    _: KW_ONLY
    check_name: str

    def quotas(self, worker: str) -> WorkerQuotas | None:
        namespace = self.key.partition("/")[0]
        local = self.controller.caches.workloads.get(self.key)
        queue_name = (local.spec.queue_name or "") if local is not None else ""
        return self.controller.worker_quotas(worker, self.check_name, namespace, queue_name)

    def in_flight(self, worker: str) -> Usages:
        """The usage of the other copies sent to `worker` that it has not reserved quota for
        yet, each with its ClusterQueue there."""
        remote = self.controller.clusters.remotes.get(worker)
        usages = []
        for other, sent in self.controller.in_flight.items():
            if other == self.key or sent.worker != worker:
                continue
            copy = remote.workload(other) if remote is not None else None
            if copy is None or not has_quota_reservation(copy):
                usages.append((sent.cluster_queue, sent.usage))
        return usages

    def reserved(self, worker: str) -> Usages:
        """The usage of our other copies on `worker` that it reserved quota for, each with its
        ClusterQueue there, from the copies' own admission."""
        remote = self.controller.clusters.remotes.get(worker)
        if remote is None or remote.workloads is None:
            return []
        usages: list[tuple[str, Mapping[FlavorResource, int]]] = []
        for copy in remote.workloads.items():
            if copy.key != self.key and has_quota_reservation(copy) and copy.status is not None and copy.status.admission is not None:
                usages.append((copy.status.admission.cluster_queue, usage_of(admission_from_status(copy))))
        return usages

    def never_fits(self, info: WorkloadInfo) -> str | None:
        return self.controller.never_fits_for(info, self.check_name)
