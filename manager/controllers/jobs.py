"""The job integration's controller, one per enabled job kind, as Kueue's job reconciler.

A reconcile reads the job and its Workload from the caches, asks `plan_job` (pure, in
`manager.engine.integrations.plan`) what to do, and carries the actions out in order. What
differs between kinds is the adapter's business; this shell only reads and writes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from manager.api import kueue
from manager.api.core import Pod
from manager.api.meta import Resource, utcnow
from manager.controllers.caches import Caches, member_index
from manager.controllers.events import EventRecorder, InvolvedObject
from manager.engine.integrations.adapter import RELATED_INDEX, JobAdapter, gvk_of, model_gvk, related_index_value
from manager.engine.integrations.plan import (
    Action,
    CreateWorkload,
    DeleteJob,
    DeleteWorkload,
    Event,
    JobInputs,
    PatchJob,
    PatchMember,
    PatchWorkload,
    Warn,
    plan_job,
)
from manager.engine.jobs import prebuilt_workload_name
from manager.engine.workload import check_states, has_quota_reservation, is_evicted, multikueue_check_name
from manager.kube.client import KubeClient
from manager.kube.errors import AlreadyExistsError, NotFoundError
from manager.kube.informer import Informer
from manager.runtime.controller import Controller, Result, RetryWithBackoff
from manager.runtime.expectations import Expectations
from manager.runtime.metrics import Registry
from manager.runtime.runnables import Runnable, leader

log = logging.getLogger("kfed.jobs")
# Seconds before a job whose cache has not shown our last write yet is looked at again (its
# watch event normally comes first).
STALE_CACHE_RECHECK = 1.0


class JobController:
    def __init__(
        self,
        client: KubeClient,
        caches: Caches,
        adapter: JobAdapter[Any],
        *,
        metrics: Registry,
        recorder: EventRecorder | None = None,
        clock: Callable[[], datetime] = utcnow,
        workers: int = 8,
        wait_for_pods_ready: bool = False,
    ) -> None:
        self.client = client
        self.wait_for_pods_ready = wait_for_pods_ready
        self.caches = caches
        self.adapter = adapter
        self.informer: Informer[Any] = caches.jobs[adapter.gvk]
        self.recorder = recorder
        self.clock = clock
        self.expectations = Expectations()
        # Per job key, the resourceVersion a write to the job was planned from, while the cache
        # still shows that version: a reconcile then would plan the same write again (seen on
        # workers: a Job started twice, two Started events), so it waits for the watch event.
        self.written_from: dict[str, str] = {}
        self.controller = Controller(adapter.kind.lower(), self.reconcile, metrics=metrics, workers=workers)
        # Set by MultiKueue on the manager: whether a worker may still run this Workload's job
        # (its quota is kept until the worker has stopped it); it may read the worker live.
        self.runs_elsewhere: Callable[[kueue.Workload], Awaitable[bool]] | None = None
        self.informer.add_handler(self._on_job)
        caches.workloads.add_handler(self._on_workload)
        # A kind run as pod groups: its pods' events wake their job (it labels them).
        self.members: Informer[Any] | None = caches.jobs.get(gvk_of("v1", "Pod")) if adapter.runs_as_pod_groups else None
        if self.members is not None:
            self.members.add_handler(self._on_member)
        # An object a job names (a TrainJob's runtime) wakes the jobs that name it.
        for model in adapter.related_models():
            caches.related[model_gvk(model)].add_handler(self._on_related_of(model))

    # --- events --------------------------------------------------------------------------------------
    def _on_job(self, kind: str, old: Resource | None, new: Resource | None) -> None:
        job = new or old
        if job is not None:
            self.controller.enqueue(self.adapter.job_key(job))

    def _on_workload(self, kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
        wl = new or old
        if wl is None:
            return
        for key in self.adapter.job_keys(wl):
            self.expectations.observe(key, wl.key)
            self.controller.enqueue(key)
        for job in self.informer.by_index("prebuilt", wl.key):
            self.controller.enqueue(self.adapter.job_key(job))

    def _on_member(self, kind: str, old: Resource | None, new: Resource | None) -> None:
        pod = new or old
        key = self.adapter.member_of(pod) if pod is not None else None
        if key:
            self.controller.enqueue(key)

    def _on_related_of(self, model: type[Resource]) -> Callable[[str, Resource | None, Resource | None], None]:
        def on_related(kind: str, old: Resource | None, new: Resource | None) -> None:
            obj = new or old
            if obj is not None:
                for job in self.informer.by_index(RELATED_INDEX, related_index_value(model, obj.key)):
                    self.controller.enqueue(self.adapter.job_key(job))

        return on_related

    def runnable(self) -> Runnable:
        """The reconciler writes, so only the lease holder runs it. A standby's queue fills
        from the events as well (each key once), and the new leader starts with a full resync."""

        async def run() -> None:
            for job in self.informer.items():
                self.controller.enqueue(self.adapter.job_key(job))
            await self.controller.run()

        return leader(self.controller.name, run)

    def _event(self, job: Resource, event: Event, name: str | None = None, uid: str | None = None) -> None:
        """An event on the job, or on its object `name` (a pod of a group)."""
        if self.recorder is not None:
            name, uid = (name, uid) if name else (job.name, job.metadata.uid)
            involved = InvolvedObject(self.adapter.api_version, self.adapter.kind, job.namespace, name, uid or "")
            self.recorder.emit(involved, type=event.type, reason=event.reason, message=event.message)

    # --- reconcile ----------------------------------------------------------------------------------
    def _workload_of(self, key: str, job: Resource) -> kueue.Workload | None:
        prebuilt = prebuilt_workload_name(job.metadata)
        if prebuilt:
            return self.caches.workloads.get(f"{job.namespace}/{prebuilt}")
        named = self.adapter.workload_key_for(key)
        if named is not None:
            return self.caches.workloads.get(named)
        owned = self.caches.workloads.by_index("owner", job.metadata.uid or "")
        return owned[0] if owned else None

    def _parent_inputs(self, key: str, job: Resource | None) -> JobInputs:
        """A job run as pod groups: its Workloads (by their owner annotations) and its pods."""
        owned = self.caches.workloads.by_index("componentOwner", f"{self.adapter.gvk}|{key}")
        members = self.members.by_index(member_index(self.adapter), key) if self.members is not None and job is not None else []
        return JobInputs(
            self.adapter,
            job,
            None,
            self.clock(),
            owned=owned,
            members=members,
            workload_priority_classes={p.name: p for p in self.caches.workload_priority_classes.items()},
            priority_classes={p.name: p for p in self.caches.priority_classes.items()},
            creating=not self.expectations.satisfied(key),
        )

    def _inputs(self, key: str, job: Resource | None) -> JobInputs:
        if self.adapter.runs_as_pod_groups:
            return self._parent_inputs(key, job)
        now = self.clock()
        if job is None:
            named = self.adapter.workload_key_for(key)
            if named is not None:
                found = self.caches.workloads.get(named)
                owned = [found] if found is not None else []
            else:
                owned = self.caches.workloads.by_index("ownerKey", self.adapter.owner_index_value(key))
            return JobInputs(self.adapter, None, None, now, owned=owned)
        wl = self._workload_of(key, job)
        return JobInputs(
            self.adapter,
            job,
            wl,
            now,
            flavors={f.name: f for f in self.caches.flavors.items()},
            workload_priority_classes={p.name: p for p in self.caches.workload_priority_classes.items()},
            priority_classes={p.name: p for p in self.caches.priority_classes.items()},
            creating=not self.expectations.satisfied(key),
            runs_elsewhere=None if self.runs_elsewhere is not None else False,
            part_of_managed_job=self.caches.registry.owns_any(job.metadata.owner_references),
            wait_for_pods_ready=self.wait_for_pods_ready,
            multikueue=wl is not None and multikueue_check_name(check_states(wl), self.caches.admission_checks) is not None,
        )

    async def reconcile(self, key: str) -> Result | None:
        job = self.adapter.load(key, get=self.informer.get, by_index=self.informer.by_index)
        if job is not None:
            job = self.adapter.with_related(job, find=self.caches.find)
        if job is None:
            self.expectations.forget(key)
            self.written_from.pop(key, None)
        elif self.written_from.get(key) == job.metadata.resource_version:
            return Result(requeue_after=STALE_CACHE_RECHECK)  # the watch event of our write brings it back sooner
        else:
            self.written_from.pop(key, None)
        inputs = self._inputs(key, job)
        if self.adapter.runs_as_pod_groups and self.runs_elsewhere is not None:
            evicted = [wl for wl in inputs.owned if is_evicted(wl) and has_quota_reservation(wl)]
            inputs = replace(inputs, runs_elsewhere_by_name={wl.name: await self.runs_elsewhere(wl) for wl in evicted})
        plan = plan_job(inputs)
        if plan.ask_runs_elsewhere and inputs.workload is not None and self.runs_elsewhere is not None:
            plan = plan_job(replace(inputs, runs_elsewhere=await self.runs_elsewhere(inputs.workload)))
        for action in plan.actions:
            await self._apply(key, job, action)
        if plan.retry_with_backoff:
            raise RetryWithBackoff(f"{self.adapter.kind} {key} could not be handled yet")
        return Result(requeue_after=plan.requeue_after) if plan.requeue_after is not None else None

    async def _apply(self, key: str, job: Resource | None, action: Action) -> None:
        if isinstance(action, DeleteWorkload):
            with contextlib.suppress(NotFoundError):
                await self.client.delete(kueue.Workload, action.name, namespace=action.namespace, uid=action.uid)
            return
        assert job is not None  # every other action is about an existing job
        if isinstance(action, CreateWorkload):
            await self._create(key, job, action)
        elif isinstance(action, PatchJob):
            written = await self.client.patch(
                self.adapter.model, action.name or job.name, action.patch, namespace=job.namespace, subresource=action.subresource
            )
            planned_from = job.metadata.resource_version
            # A no-op write brings no event. A write to one object of a job of several is not
            # remembered: the job's version is not that object's (each such write carries its
            # object's resourceVersion or UID, so a plan made again from a stale view conflicts).
            if planned_from and action.name is None and written.metadata.resource_version != planned_from:
                self.written_from[key] = planned_from
            if action.event is not None:
                self._event(job, action.event, action.name, written.metadata.uid)
        elif isinstance(action, DeleteJob):
            with contextlib.suppress(NotFoundError):
                await self.client.delete(self.adapter.model, action.name or job.name, namespace=job.namespace, uid=action.uid)
            self._event(job, action.event, action.name, action.uid)
        elif isinstance(action, PatchMember):
            with contextlib.suppress(NotFoundError):
                await self.client.patch(Pod, action.name, action.patch, namespace=job.namespace)
        elif isinstance(action, PatchWorkload):
            await self.client.patch(kueue.Workload, action.name, action.patch, namespace=action.namespace, subresource=action.subresource)
        elif isinstance(action, Warn):
            log.warning(
                "cannot handle the job",
                extra={"key": key, "kind": self.adapter.kind, "reason": action.event.reason, "error": action.event.message},
            )
            self._event(job, action.event)

    async def _create(self, key: str, job: Resource, action: CreateWorkload) -> None:
        wl = action.workload
        self.expectations.expect(key, wl.key)
        try:
            await self.client.create(kueue.Workload, wl)
        except AlreadyExistsError:
            self.expectations.forget(key)
            return
        except Exception:
            self.expectations.forget(key)
            raise
        self._event(job, action.event)
