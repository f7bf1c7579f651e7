"""The garbage collector: every gcInterval, remote Workloads (and our jobs) of our origin whose
manager Workload is gone are deleted from each connected worker. Another origin's objects
are never seen: the remote caches hold our origin only."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import Resource
from manager.engine.integrations.adapter import JobAdapter
from manager.kube.errors import KubeError, NotFoundError
from manager.kube.informer import Informer
from manager.multikueue.controllers.remote import RemoteCluster
from manager.multikueue.rules.plan import plan_gc
from manager.runtime.metrics import Registry
from manager.runtime.runnables import Runnable, leader

log = logging.getLogger("kfed.multikueue.gc")


class GarbageCollector:
    def __init__(
        self,
        *,
        local_workloads: Informer[kueue.Workload],
        remotes: Callable[[], list[RemoteCluster]],
        origin: str,
        interval: float,
        metrics: Registry,
    ) -> None:
        self.local_workloads = local_workloads
        self.remotes = remotes
        self.origin = origin
        self.interval = interval
        self._collected = metrics.counter("kfed_multikueue_gc_deleted_total", "Orphaned remote objects deleted, per cluster.", ("cluster",))
        # A pass that deletes nothing is invisible otherwise: this says the collector still runs.
        self._passes = metrics.counter(
            "kfed_multikueue_gc_passes_total", "Garbage collection passes completed, per connected cluster.", ("cluster",)
        )

    def runnable(self) -> Runnable:
        """Deletes on the workers, so only the lease holder collects."""
        return leader("multikueue-gc", self.run)

    async def run(self) -> None:
        if self.interval <= 0:
            log.info("garbage collection is off (gcInterval 0)")
            return
        await self.local_workloads.synced.wait()  # an unsynced cache would make everything look orphaned
        while True:
            await asyncio.sleep(self.interval)  # the collection period, not a sync point
            for remote in self.remotes():
                try:
                    await self.collect(remote)
                except asyncio.CancelledError:
                    raise
                except KubeError as err:
                    log.warning("garbage collection failed", extra={"cluster": remote.name, "error": str(err)})

    async def collect(self, remote: RemoteCluster) -> int:
        """Delete this worker's orphans; returns how many objects went."""
        if not remote.connected or remote.client is None or remote.workloads is None:
            return 0
        local = {wl.key: wl.metadata.deletion_timestamp is not None for wl in self.local_workloads.items()}
        workload_keys = [wl.key for wl in remote.workloads.items()]
        jobs: dict[str, list[tuple[JobAdapter[Any], Resource]]] = {}
        keys_of: dict[str, list[str]] = {}  # by job UID: every Workload it was created for
        for adapter, job in remote.all_jobs():
            keys = adapter.remote_workload_keys(job) or [f"{job.namespace}/"]
            keys_of[job.metadata.uid or ""] = keys
            for key in keys:
                jobs.setdefault(key, []).append((adapter, job))
        orphans = plan_gc(sorted(set(workload_keys) | set(jobs)), local=local)
        gone = set(orphans)
        deleted = 0
        for key in orphans:
            namespace, _, name = key.partition("/")
            for adapter, job in jobs.get(key, []):
                if (job.metadata.labels or {}).get(c.MULTIKUEUE_ORIGIN_LABEL) != self.origin:
                    continue
                if not set(keys_of.get(job.metadata.uid or "", [key])) <= gone:
                    continue  # a job of several Workloads (a LeaderWorkerSet's groups) goes with the last
                with contextlib.suppress(NotFoundError):
                    await remote.client.delete(adapter.model, job.name, namespace=namespace, propagation="Background", uid=job.metadata.uid)
                    deleted += 1
            if key in workload_keys:
                with contextlib.suppress(NotFoundError):
                    await remote.client.delete(kueue.Workload, name, namespace=namespace)
                    deleted += 1
        if deleted:
            self._collected.inc(remote.name, amount=deleted)
            log.info("collected orphans", extra={"cluster": remote.name, "objects": deleted})
        self._passes.inc(remote.name)
        return deleted
