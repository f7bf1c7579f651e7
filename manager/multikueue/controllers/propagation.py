"""Queues that follow the manager: the shell of `manager.multikueue.rules.queues`.

Before a copy goes to a worker (`WorkloadController._create_remote`), `ensure` creates there
the copy's namespace and LocalQueue when they are missing, marked as this manager's, where both
sides opted in: the manager's namespace is selected (`manager_selects`) and the worker accepts
it (`worker_accepts`: a namespace kfed creates, or one labelled `kfed.dev/accept-queues: "true"`
by the worker's administrator). Every gcInterval, `sweep` reads what it created on each worker
whose config propagates, and what its namespaces hold (metadata only), removes what nothing
uses any more and only what kfed created (`plan_cleanup`; each delete carries the object's uid,
so a same-named object made since by someone else is never touched), and reports the drift of
its LocalQueues (a ClusterQueue the worker lacks) as the MultiKueueCluster's
`kfed.dev/QueuesInSync` condition, and the namespaces it keeps for others' objects as
`kfed.dev/NamespacesKept`. Making a copy and a sweep of the same worker hold one lock, so the sweep never
removes a namespace between a copy's `ensure` and its create.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from typing import Any

from manager.api import kueue
from manager.api.core import ConfigMap, Job, Namespace, Pod, RoleBinding, Secret, ServiceAccount
from manager.api.meta import ObjectMeta, Resource
from manager.controllers.caches import Caches
from manager.engine.workload import check_states, is_finished, multikueue_check_name
from manager.kube.client import KubeClient
from manager.kube.errors import AlreadyExistsError, ConflictError, ForbiddenError, KubeError, NotFoundError
from manager.kube.informer import Informer
from manager.multikueue.controllers.clusters import ClusterController
from manager.multikueue.controllers.remote import RemoteCluster
from manager.multikueue.rules import federation
from manager.multikueue.rules.queues import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PROPAGATED_BY_LABEL,
    Held,
    Owned,
    WorkerQueues,
    idle_namespaces,
    is_ours,
    kept_condition,
    local_queue_manifest,
    manager_selects,
    missing_cluster_queues,
    namespace_manifest,
    plan_cleanup,
    propagation_on,
    queues_condition,
    worker_accepts,
)
from manager.multikueue.rules.settings import Settings
from manager.runtime.metrics import Registry
from manager.runtime.runnables import Runnable, leader

log = logging.getLogger("kfed.multikueue.propagation")

# What the sweep reads of a namespace it may delete, metadata only (with its Workloads and
# LocalQueues, read whole already): an administrator's objects keep the namespace.
HELD_MODELS: tuple[type[Resource], ...] = (Secret, ServiceAccount, RoleBinding, ConfigMap, Pod, Job)


class QueuePropagator:
    def __init__(
        self,
        *,
        caches: Caches,
        configs: Informer[kueue.MultiKueueConfig],
        clusters: ClusterController,
        settings: Settings,
        metrics: Registry,
    ) -> None:
        self.caches = caches
        self.configs = configs
        self.clusters = clusters
        self.settings = settings
        self._locks: dict[str, asyncio.Lock] = {}
        self._refused: set[str] = set()  # bad annotations already logged
        # (worker, namespace/name) of LocalQueues a sweep removed: the worker's cache may still
        # show them for a moment, so `ensure` asks the worker itself.
        self._removed_keys: set[tuple[str, str]] = set()
        self._created = metrics.counter(
            "kfed_multikueue_queue_objects_created_total",
            "Namespaces and LocalQueues created on workers, per cluster.",
            ("cluster", "kind"),
        )
        self._removed = metrics.counter(
            "kfed_multikueue_queue_objects_removed_total",
            "Unused namespaces and LocalQueues removed from workers, per cluster.",
            ("cluster", "kind"),
        )

    # --- which configs propagate --------------------------------------------------------------------
    def _config_on(self, config: kueue.MultiKueueConfig) -> bool:
        try:
            return propagation_on(config.metadata.annotations, default=self.settings.propagate_queues, config_name=config.name)
        except ValueError as err:
            if str(err) not in self._refused:  # once per bad value, not once per Workload
                self._refused.add(str(err))
                log.warning("queue propagation off for this config: %s", err)
            return False

    def _config_of(self, check_name: str) -> kueue.MultiKueueConfig | None:
        return federation.config_of_check(check_name, self.caches.admission_checks.get, self.configs.get)

    def propagates(self, check_name: str) -> bool:
        """Whether the Workloads of this MultiKueue check get their queues on the workers."""
        config = self._config_of(check_name)
        return config is not None and self._config_on(config)

    def selects(self, namespace: str) -> bool:
        """Whether the manager propagates this namespace's queues (the manager's side of the opt-in)."""
        found = self.caches.namespaces.get(namespace)
        labels = found.metadata.labels if found is not None else None
        return manager_selects(namespace, labels, selector=self.settings.propagation_namespace_selector)

    def propagating_workers(self) -> set[str]:
        return {name for config in self.configs.items() if self._config_on(config) for name in config.spec.clusters}

    # --- creating -----------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def holding(self, worker: str) -> AsyncIterator[None]:
        """The worker's lock: a copy's `ensure` and create, or one sweep."""
        lock = self._locks.setdefault(worker, asyncio.Lock())
        async with lock:
            yield

    async def ensure(self, remote: RemoteCluster, local: kueue.Workload) -> str | None:
        """Create the Workload's namespace and LocalQueue on the worker where they are missing;
        returns why they could not be, or None. An existing one is used as it is, whoever made
        it. Hold `holding(remote.name)` around this and the copy's create."""
        client = remote.client
        queue = self.caches.local_queues.get(f"{local.namespace}/{local.spec.queue_name}")
        if client is None or queue is None or not queue.spec.cluster_queue:
            return None  # nothing to mirror: the copy meets Kueue's rule
        if (remote.name, queue.key) not in self._removed_keys and local.spec.queue_name in _local_queue_names(remote, local.namespace):
            return None  # seen there already: no request
        if not self.selects(local.namespace):
            return None  # not propagated: the copy meets Kueue's rule (the worker's own queues)
        origin = self.settings.origin
        # A credential bound to some namespaces (`kfed.dev/worker-namespaces`) is only given
        # those: they exist, their administrator named them, and namespaces are not its to read.
        bound = remote.namespaces is not None
        existing: Namespace | None = None
        if not bound:
            try:
                existing = await client.get(Namespace, local.namespace)
            except NotFoundError:
                existing = None
            except KubeError as err:
                return f'cannot read namespace "{local.namespace}" on the worker: {err}'
        acceptance = worker_accepts(
            local.namespace,
            existing.metadata.labels if existing is not None else None,
            exists=existing is not None,
            bound=bound,
            deny_list=self.settings.propagation_denied_namespaces,
        )
        if acceptance.refused:
            return acceptance.refused
        if acceptance.create_namespace:
            try:
                await client.create(Namespace, namespace_manifest(local.namespace, origin=origin))
                self._created.inc(remote.name, "Namespace")
                log.info("namespace created on the worker", extra={"cluster": remote.name, "namespace": local.namespace})
            except AlreadyExistsError:
                return f'namespace "{local.namespace}" was just created on the worker by someone else; it is not kfed\'s'
            except KubeError as err:
                return f'cannot create namespace "{local.namespace}" on the worker: {err}'
        manifest = local_queue_manifest(local.namespace, queue.name, cluster_queue=queue.spec.cluster_queue, origin=origin)
        try:
            await client.create(kueue.LocalQueue, manifest, namespace=local.namespace)
            self._created.inc(remote.name, "LocalQueue")
            log.info("LocalQueue created on the worker", extra={"cluster": remote.name, "key": queue.key})
        except AlreadyExistsError:
            pass
        except KubeError as err:
            return f'cannot create LocalQueue "{queue.key}" on the worker: {err}'
        self._removed_keys.discard((remote.name, queue.key))
        return None

    # --- removing and reporting ---------------------------------------------------------------------
    def runnable(self) -> Runnable:
        """Deletes on the workers, so only the lease holder sweeps."""
        return leader("multikueue-queue-propagation", self.run)

    async def run(self) -> None:
        interval = self.settings.gc_interval.total_seconds()
        if interval <= 0:
            log.info("unused propagated queues are not removed (gcInterval 0)")
            return
        await self.caches.workloads.synced.wait()  # an unsynced cache would make every queue look unneeded
        while True:
            await asyncio.sleep(interval)  # the sweep period, not a sync point
            await self.sweep_all()

    async def sweep_all(self) -> None:
        for name in sorted(self.propagating_workers()):
            remote = self.clusters.remotes.get(name)
            if remote is None:
                continue
            try:
                await self.sweep(remote)
            except asyncio.CancelledError:
                raise
            except KubeError as err:
                log.warning("sweeping the propagated queues failed", extra={"cluster": name, "error": str(err)})

    def _needed(self) -> set[tuple[str, str]]:
        """(namespace, queue) of every manager Workload of a MultiKueue check that has not
        finished: its queue may be wanted on any worker at any moment."""
        needed = set()
        for wl in self.caches.workloads.items():
            if not is_finished(wl) and multikueue_check_name(check_states(wl), self.caches.admission_checks) is not None:
                needed.add((wl.namespace, wl.spec.queue_name or ""))
        return needed

    async def sweep(self, remote: RemoteCluster) -> None:
        client = remote.client
        if not remote.connected or client is None:
            return
        origin = self.settings.origin
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{PROPAGATED_BY_LABEL}={origin}"
        async with self.holding(remote.name):
            scopes = remote.namespaces or (None,)
            queues = [lq for scope in scopes for lq in (await client.list(kueue.LocalQueue, namespace=scope)).items]
            ours = [lq for lq in queues if is_ours(lq.metadata.labels, origin)]
            namespaces = [] if remote.namespaces is not None else (await client.list(Namespace, label_selector=selector)).items
            looked_in = sorted({ns.name for ns in namespaces} | {lq.namespace for lq in ours})
            workloads = [wl for ns in looked_in for wl in (await client.list(kueue.Workload, namespace=ns)).items]
            needed = self._needed()
            worker = WorkerQueues(
                namespaces=[Owned(ns.name, ns.metadata.uid or "") for ns in namespaces if is_ours(ns.metadata.labels, origin)],
                local_queues=[Owned(lq.key, lq.metadata.uid or "") for lq in ours],
                all_local_queues=[lq.key for lq in queues],
                workloads=[(wl.namespace, wl.spec.queue_name or "") for wl in workloads],
                jobs=[job.namespace for _, job in remote.all_jobs()],
                our_uids=[job.metadata.uid for _, job in remote.all_jobs() if job.metadata.uid],
            )
            # What the namespaces kfed no longer needs hold (metadata only): only those may go.
            held: dict[str, list[Held]] = {}
            for idle in idle_namespaces(worker, needed=needed):
                found = await _held(client, idle)
                if found is not None:
                    held[idle] = [
                        *found,
                        *(_as_held("Workload", wl.metadata) for wl in workloads if wl.namespace == idle),
                        *(_as_held("LocalQueue", lq.metadata) for lq in queues if lq.namespace == idle),
                    ]
            cleanup = plan_cleanup(replace(worker, held=held), needed=needed, origin=origin)
            for lq in cleanup.local_queues:
                namespace, _, name = lq.name.partition("/")
                self._removed_keys.add((remote.name, lq.name))
                if await _deleted(client.delete(kueue.LocalQueue, name, namespace=namespace, uid=lq.uid)):
                    self._removed.inc(remote.name, "LocalQueue")
                    log.info("unused LocalQueue removed from the worker", extra={"cluster": remote.name, "key": lq.name})
            for ns in cleanup.namespaces:
                if await _deleted(client.delete(Namespace, ns.name, uid=ns.uid)):
                    self._removed.inc(remote.name, "Namespace")
                    log.info("unused namespace removed from the worker", extra={"cluster": remote.name, "namespace": ns.name})
        for ns_name, why in cleanup.kept:
            log.info("namespace kept on the worker", extra={"cluster": remote.name, "namespace": ns_name, "reason": why})
        if remote.namespaces is None:
            self.clusters.report_kept(remote.name, kept_condition(cleanup.kept))
        removed = {lq.name for lq in cleanup.local_queues}
        await self._report_drift(remote, [(lq.key, lq.spec.cluster_queue or "") for lq in ours if lq.key not in removed])

    async def _report_drift(self, remote: RemoteCluster, ours: list[tuple[str, str]]) -> None:
        client = remote.client
        if client is None or remote.namespaces is not None:
            return  # a credential bound to some namespaces cannot read the ClusterQueues
        try:
            cluster_queues = [cq.name for cq in (await client.list(kueue.ClusterQueue)).items]
        except ForbiddenError:
            return
        self.clusters.report_queues(remote.name, queues_condition(missing_cluster_queues(ours, cluster_queues)))


def _as_held(kind: str, meta: ObjectMeta) -> Held:
    return Held(
        kind=kind,
        name=meta.name or "",
        uid=meta.uid or "",
        labels=meta.labels or {},
        annotations=meta.annotations or {},
        owners=tuple(ref.uid for ref in meta.owner_references or []),
    )


async def _held(client: KubeClient, namespace: str) -> list[Held] | None:
    """What a namespace holds of `HELD_MODELS` (metadata only), or None when a list is refused
    or fails: a namespace whose contents are unknown is never deleted."""
    found: list[Held] = []
    for model in HELD_MODELS:
        try:
            metas = await client.list_metadata(model, namespace=namespace)
        except KubeError as err:
            log.warning("cannot read what a namespace holds", extra={"namespace": namespace, "kind": model.KIND, "error": str(err)})
            return None
        found.extend(_as_held(model.KIND, meta) for meta in metas)
    return found


def _local_queue_names(remote: RemoteCluster, namespace: str) -> set[str]:
    quotas = remote.quotas()
    return {lq.name for lq in quotas.local_queues if lq.namespace == namespace} if quotas is not None else set()


async def _deleted(delete: Awaitable[Any]) -> bool:
    """One delete with its uid precondition; False when the object is gone or is another one now."""
    try:
        await delete
    except (NotFoundError, ConflictError):
        return False
    return True
