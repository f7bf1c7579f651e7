"""Job integration for batch/v1 Job, as Kueue's job reconciler does it.

A queued Job gets a Workload (or adopts a prebuilt one); it runs only while its Workload is
admitted, with the flavors' node labels in its nodeSelector; when it is evicted it is
suspended and its template restored, and once its pods are gone its quota is released;
when it finishes, its Workload is marked Finished. Deleting the Job deletes its Workload.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.meta import Condition, OwnerReference, find_condition, is_condition_true
from manager.controllers.caches import Caches
from manager.controllers.events import EventRecorder, InvolvedObject
from manager.engine.jobs import (
    JobConversionError,
    admitted_without_reservation,
    eviction_can_release,
    job_finished,
    job_queue_name,
    prebuilt_workload_name,
    requeued_follow_up,
    requeued_on_release,
    restore_job_patch,
    start_job_patch,
    suspend_job_patch,
    workload_for_job,
)
from manager.kube.client import KubeClient
from manager.kube.errors import AlreadyExistsError, NotFoundError
from manager.runtime.controller import Controller, Result
from manager.runtime.expectations import Expectations

log = logging.getLogger("kfed.jobs")

REASON_PENDING = "Pending"
CONDITION_SUSPENDED_JOB = "JobSuspended"


def _now() -> datetime:
    return datetime.now(UTC)


def _condition(kind: str, status: str, reason: str, message: str, old: list[Condition] | None) -> Condition:
    previous = find_condition(old, kind)
    when = previous.last_transition_time if previous is not None and previous.status == status else _now()
    return Condition(type=kind, status=status, reason=reason, message=message[:32768], last_transition_time=when)


def _replace_conditions(old: list[Condition] | None, *new: Condition) -> list[dict[str, Any]]:
    kinds = {cond.type for cond in new}
    kept = [cond for cond in old or [] if cond.type not in kinds]
    return [cond.to_dict() for cond in [*kept, *new]]


class JobController:
    def __init__(self, client: KubeClient, caches: Caches, *, recorder: EventRecorder | None = None, workers: int = 8) -> None:
        self.client = client
        self.caches = caches
        self.recorder = recorder
        self.expectations = Expectations()
        self.controller = Controller("job", self.reconcile, workers=workers)
        self.is_leader = False
        # Set by MultiKueue on the manager: whether a worker still runs this Workload's Job
        # (its quota is kept until the worker has stopped it).
        self.runs_elsewhere: Callable[[kueue.Workload], Awaitable[bool]] | None = None
        # The resourceVersion each write was made from, by object key: until the cache shows a
        # newer object, a reconcile (woken by another event) would only write the same again.
        self._started: dict[str, str | None] = {}
        self._adopted: dict[str, str | None] = {}
        caches.jobs.add_handler(self._on_job)
        caches.workloads.add_handler(self._on_workload)

    # --- events --------------------------------------------------------------------------------------
    def _on_job(self, kind: str, old: Job | None, new: Job | None) -> None:
        job = new or old
        if job is not None and self.is_leader:
            self.controller.enqueue(job.key)

    def _on_workload(self, kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
        wl = new or old
        if wl is None:
            return
        if new is None:
            self._adopted.pop(wl.key, None)
        for ref in wl.metadata.owner_references or []:
            if ref.kind == "Job" and ref.controller:
                key = f"{wl.namespace}/{ref.name}"
                self.expectations.observe(key, wl.key)
                if self.is_leader:
                    self.controller.enqueue(key)
        for job in self.caches.jobs.by_index("prebuilt", wl.key):
            if self.is_leader:
                self.controller.enqueue(job.key)

    def resync(self) -> None:
        """Enqueue every Job (on becoming leader)."""
        for job in self.caches.jobs.items():
            self.controller.enqueue(job.key)

    def _event(self, job: Job, kind: str, reason: str, message: str) -> None:
        if self.recorder is not None:
            self.recorder.emit(
                InvolvedObject("batch/v1", "Job", job.namespace, job.name, job.metadata.uid or ""),
                type=kind,
                reason=reason,
                message=message,
            )

    # --- reconcile ----------------------------------------------------------------------------------
    def _workload_of(self, job: Job) -> kueue.Workload | None:
        prebuilt = prebuilt_workload_name(job.metadata)
        if prebuilt:
            return self.caches.workloads.get(f"{job.namespace}/{prebuilt}")
        owned = self.caches.workloads.by_index("owner", job.metadata.uid or "")
        return owned[0] if owned else None

    async def reconcile(self, key: str) -> Result | None:
        job = self.caches.jobs.get(key)
        if job is None:
            await self._cleanup(key)
            return None
        prebuilt = prebuilt_workload_name(job.metadata)
        if not job_queue_name(job) and not prebuilt:
            return None  # not queued: Kueue leaves it alone (manageJobsWithoutQueueName is off)
        if job.metadata.deletion_timestamp is not None:
            return None
        if not self.expectations.satisfied(key):
            return Result(requeue_after=1.0)
        wl = self._workload_of(job)
        finished, succeeded, message = job_finished(job)
        if wl is None:
            if finished:
                return None
            if prebuilt:
                # Same as Kueue: a Job pointing at a Workload that is not there yet waits, suspended.
                await self._ensure_suspended(job, None)
                return Result(requeue_after=5.0)
            await self._create_workload(job)
            return None
        if prebuilt:
            await self._adopt(job, wl)
        if is_condition_true(wl.status.conditions if wl.status else None, c.FINISHED):
            return None
        if finished:
            await self._finish(wl, succeeded, message)
            return None
        conditions = wl.status.conditions if wl.status else None
        reserved = wl.status is not None and wl.status.admission is not None and is_condition_true(conditions, c.QUOTA_RESERVED)
        evicted = is_condition_true(conditions, c.EVICTED)
        admitted = reserved and is_condition_true(conditions, c.ADMITTED) and not evicted
        suspended = job.spec.suspend is True
        if not reserved and await self._requeue(wl):
            return None  # the update wakes us with the new Workload
        if admitted:
            if suspended and self._started.get(job.key) != job.metadata.resource_version:
                await self._start(job, wl)
            return None
        if not suspended:
            await self._stop(job, wl, evicted)
            return None
        if evicted and reserved:
            if not eviction_can_release(job) or (self.runs_elsewhere is not None and await self.runs_elsewhere(wl)):
                # Its pods are still going (here or on a worker), or it is finishing (then it
                # ends Finished, never queued again); the Job's update wakes us too.
                return Result(requeue_after=1.0)
            if job.status is not None and job.status.start_time is not None:
                # Same as Kueue's stop: clear startTime. Kubernetes lets a suspended Job's
                # template change only without it, and a Job handed to MultiKueue gets the
                # next run's startTime from the worker that runs it.
                await self.client.patch(
                    Job,
                    job.name,
                    {"metadata": {"resourceVersion": job.metadata.resource_version}, "status": {"startTime": None}},
                    namespace=job.namespace,
                    subresource="status",
                )
                return None  # the update wakes us with the new Job
            restore = restore_job_patch(job, wl)
            if restore is not None:
                await self.client.patch(Job, job.name, restore, namespace=job.namespace)
            await self._release(wl)
        return None

    async def _create_workload(self, job: Job) -> None:
        try:
            wl = workload_for_job(
                job,
                job_uid=job.metadata.uid or "",
                workload_priority_classes={p.name: p for p in self.caches.workload_priority_classes.items()},
                priority_classes={p.name: p for p in self.caches.priority_classes.items()},
            )
        except JobConversionError as err:
            self._event(job, "Warning", "FailedCreateWorkload", str(err))
            log.warning("cannot create a Workload for the Job", extra={"key": job.key, "error": str(err)})
            await self._ensure_suspended(job, None)
            return
        wl.metadata.creation_timestamp = None
        self.expectations.expect(job.key, wl.key)
        try:
            await self.client.create(kueue.Workload, wl)
            self._event(job, "Normal", "CreatedWorkload", f"Created Workload: {wl.key}")
        except AlreadyExistsError:
            self.expectations.forget(job.key)
        except Exception:
            self.expectations.forget(job.key)
            raise
        await self._ensure_suspended(job, None)

    async def _ensure_suspended(self, job: Job, wl: kueue.Workload | None) -> None:
        if job.spec.suspend is not True:
            await self.client.patch(Job, job.name, suspend_job_patch(), namespace=job.namespace)

    async def _adopt(self, job: Job, wl: kueue.Workload) -> None:
        """A prebuilt Workload becomes the Job's: owned by it, so it goes when the Job goes."""
        refs = wl.metadata.owner_references or []
        if any(ref.uid == job.metadata.uid for ref in refs) or self._adopted.get(wl.key) == wl.metadata.resource_version:
            return
        owner = OwnerReference(
            api_version="batch/v1", kind="Job", name=job.name, uid=job.metadata.uid or "", controller=True, block_owner_deletion=True
        )
        patch = {
            "metadata": {
                "resourceVersion": wl.metadata.resource_version,
                "ownerReferences": [ref.to_dict() for ref in refs if not ref.controller] + [owner.to_dict()],
                "labels": {c.JOB_UID_LABEL: job.metadata.uid},
            }
        }
        await self.client.patch(kueue.Workload, wl.name, patch, namespace=wl.namespace)
        self._adopted[wl.key] = wl.metadata.resource_version

    async def _start(self, job: Job, wl: kueue.Workload) -> None:
        flavors = {f.name: f for f in self.caches.flavors.items()}
        await self.client.patch(Job, job.name, start_job_patch(job, wl, flavors), namespace=job.namespace)
        self._started[job.key] = job.metadata.resource_version
        cq = wl.status.admission.cluster_queue if wl.status and wl.status.admission else ""
        self._event(job, "Normal", "Started", f"Admitted by clusterQueue {cq}")

    async def _stop(self, job: Job, wl: kueue.Workload, evicted: bool) -> None:
        await self.client.patch(Job, job.name, suspend_job_patch(), namespace=job.namespace)
        if evicted:
            cond = find_condition(wl.status.conditions if wl.status else None, c.EVICTED)
            self._event(job, "Normal", "Stopped", cond.message if cond else "Evicted")
        else:
            self._event(job, "Normal", "Suspended", "The Job was started without an admitted Workload")

    async def _release(self, wl: kueue.Workload) -> None:
        """The evicted Job has stopped: give its quota back (Kueue's
        UnsetQuotaReservationWithCondition), with Requeued naming the eviction: True after a
        preemption or node failures, False after anything else (`requeued_on_release`)."""
        old = wl.status.conditions if wl.status else None
        evicted = find_condition(old, c.EVICTED)
        message = evicted.message if evicted is not None else "The workload was evicted"
        reason = evicted.reason if evicted is not None else REASON_PENDING
        admitted_reason, admitted_message = admitted_without_reservation(wl)
        status: dict[str, Any] = {
            "admission": None,
            "conditions": _replace_conditions(
                old,
                _condition(c.QUOTA_RESERVED, "False", REASON_PENDING, message, old),
                _condition(c.ADMITTED, "False", admitted_reason, admitted_message, old),
                _condition(c.REQUEUED, "True" if requeued_on_release(reason) else "False", reason, message, old),
            ),
        }
        admitted = find_condition(old, c.ADMITTED)
        if admitted is not None and admitted.status == "True" and admitted.last_transition_time is not None:
            # Kueue's SyncAdmittedCondition: the time it ran counts into its past execution time.
            ran = int((_now() - admitted.last_transition_time).total_seconds())
            before = (wl.status.accumulated_past_execution_time_seconds if wl.status else None) or 0
            status["accumulatedPastExecutionTimeSeconds"] = before + ran
        patch = {"metadata": {"resourceVersion": wl.metadata.resource_version}, "status": status}
        await self.client.patch(kueue.Workload, wl.name, patch, namespace=wl.namespace, subresource="status")

    async def _requeue(self, wl: kueue.Workload) -> bool:
        """Kueue's workload controller: Requeued=False turns True once the workload may be
        queued again (reactivated, or its backoff ran out). Returns whether it wrote."""
        follow_up = requeued_follow_up(wl, _now())
        if follow_up is None:
            return False
        old = wl.status.conditions if wl.status else None
        patch = {
            "metadata": {"resourceVersion": wl.metadata.resource_version},
            "status": {"conditions": _replace_conditions(old, _condition(c.REQUEUED, "True", *follow_up, old))},
        }
        await self.client.patch(kueue.Workload, wl.name, patch, namespace=wl.namespace, subresource="status")
        return True

    async def _finish(self, wl: kueue.Workload, succeeded: bool, message: str) -> None:
        old = wl.status.conditions if wl.status else None
        reason = "Succeeded" if succeeded else "Failed"
        patch = {
            "metadata": {"resourceVersion": wl.metadata.resource_version},
            "status": {"conditions": _replace_conditions(old, _condition(c.FINISHED, "True", reason, message, old))},
        }
        await self.client.patch(kueue.Workload, wl.name, patch, namespace=wl.namespace, subresource="status")

    async def _cleanup(self, key: str) -> None:
        """The Job is gone: delete the Workloads it owned (the garbage collector would, where one runs)."""
        self.expectations.forget(key)
        self._started.pop(key, None)
        for wl in self.caches.workloads.by_index("ownerJob", key):
            with contextlib.suppress(NotFoundError):
                await self.client.delete(kueue.Workload, wl.name, namespace=wl.namespace, uid=wl.metadata.uid)
