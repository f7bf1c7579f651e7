"""`kfed simulate`: Kueue's scheduling cycles over a set of manifests, with no cluster.

Pure: takes typed objects (as the manifest loader returns them), runs the live admission
path's `AdmissionState` over them, and returns the final Workloads and ClusterQueues with
the status the admission controller would have written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from manager.api import constants as c
from manager.api import kueue
from manager.api.config import Configuration
from manager.api.core import Job, LimitRange, Namespace, PriorityClass
from manager.api.kueue import (
    ClusterQueue,
    Workload,
)
from manager.engine.cache import Cache
from manager.engine.integrations.adapter import construct_workload
from manager.engine.integrations.registry import BATCH_JOB
from manager.engine.jobs import JobConversionError, job_queue_name
from manager.engine.scheduler import CycleResult, Scheduler
from manager.engine.state import AdmissionState
from manager.engine.workload import WorkloadInfo, stable_uid
from manager.engine.writes import StatusWrite

DEFAULT_MAX_CYCLES = 10_000
DEFAULT_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
SIMULATED_KINDS = {
    ("kueue.x-k8s.io", "ResourceFlavor"),
    ("kueue.x-k8s.io", "Cohort"),
    ("kueue.x-k8s.io", "ClusterQueue"),
    ("kueue.x-k8s.io", "LocalQueue"),
    ("kueue.x-k8s.io", "WorkloadPriorityClass"),
    ("kueue.x-k8s.io", "Workload"),
    ("config.kueue.x-k8s.io", "Configuration"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("", "Namespace"),
    ("", "LimitRange"),
    ("batch", "Job"),
}


class SimulationError(ValueError):
    """Input the simulator cannot use; the message names the object and the field."""


@dataclass
class Source:
    """Where an object came from, for error messages (`file[index] Kind/ns/name`)."""

    where: str
    obj: BaseModel


@dataclass
class SimulationResult:
    cycles: int
    converged: bool
    workloads: list[Workload]
    cluster_queues: list[ClusterQueue]
    infos: list[WorkloadInfo] = field(default_factory=list)
    untracked: list[Workload] = field(default_factory=list)  # finished or being deleted: as given
    admitted: int = 0
    preemptions: int = 0
    decisions: int = 0
    # Pending workloads parked with their equivalence class, by key: the (reason, message) that
    # Kueue writes on them only with the UnadmittedWorkloadsObservability gate on.
    bypassed: dict[str, tuple[str, str]] = field(default_factory=dict)

    def as_list(self) -> dict[str, Any]:
        """A `v1` List of every Workload and ClusterQueue, sorted by kind, namespace and name."""
        items: list[tuple[tuple[str, str, str], dict[str, Any]]] = []
        for cq in self.cluster_queues:
            items.append((("ClusterQueue", "", cq.name), cq.to_dict()))
        for wl in self.workloads:
            items.append((("Workload", wl.namespace, wl.name), wl.to_dict()))
        items.sort(key=lambda item: item[0])
        return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": [item for _, item in items]}


def group_of(obj: BaseModel) -> tuple[str, str]:
    api_version = str(getattr(obj, "api_version", ""))
    group = api_version.split("/")[0] if "/" in api_version else ""
    return group, str(getattr(obj, "kind", ""))


def _document_hash(obj: BaseModel) -> str:
    data = obj.model_dump(by_alias=True, exclude_none=True, mode="json")
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()


class Simulation:
    """`kfed simulate` as a driver over the live path's `AdmissionState`: it feeds the objects in,
    runs cycles (one a simulated second), applies the status writes to its in-memory objects, and
    stands in for the job integration. Under Kueue's lifecycle an evicted Workload keeps its
    quota until its job has stopped and its QuotaReserved turns False; here nothing runs, so the
    simulation releases each victim `release_after` seconds after its eviction: 0 (the default)
    within the cycle that evicted it, a job that stops at once; 1, at the next cycle; None, never
    (a state replayed as it was, rather than run on from: benchmarks/preemption_replay.py)."""

    def __init__(self, sources: Sequence[Source], *, release_after: float | None = 0.0) -> None:
        self.notes: list[str] = []
        sources = self._deduplicate(sources)
        configs = [source.obj for source in sources if isinstance(source.obj, Configuration)]
        self.state = AdmissionState(configs[-1] if configs else None, admission_checks_known=False)
        self.release_after = release_after
        self._releases: dict[str, datetime] = {}  # victim -> when its job has stopped
        workload_sources: list[Source] = []
        for source in sources:
            if isinstance(source.obj, (Workload, Job)):
                workload_sources.append(source)
            else:
                self._feed(source.obj)
        built = self._workloads(workload_sources)
        for namespace in sorted({wl.namespace for wl, _ in built} | {lq.namespace for lq in self.state.local_queues.values()}):
            if namespace not in self.state.namespaces:
                self.state.upsert_namespace(namespace, {})
        latest = max((wl.metadata.creation_timestamp or DEFAULT_EPOCH for wl, _ in built), default=DEFAULT_EPOCH)
        self.start = latest.replace(microsecond=0) + timedelta(seconds=1)
        self.cycles = 0
        self.admitted = 0
        self.preemptions = 0
        self.decisions = 0
        self.state.rebuild_if_needed(self.start)
        for wl, source in sorted(built, key=lambda item: item[0].key):
            self.state.upsert_workload(wl, self.start)
            self._raise_if_unreadable(wl, source)
        # Finished Workloads (and ones being deleted without quota) are no business of the
        # admission side, as on a cluster: they hold nothing and come out as they went in.
        self.untracked = sorted((wl for wl, _ in built if wl.key not in self.state.infos), key=lambda wl: wl.key)
        # Stop policies and deactivations evict running workloads as they come in.
        for info in self.workloads:
            if info.evicted:
                self._release_later(info.key, self.start)
        self._release_due(self.start)

    # --- building ---------------------------------------------------------------------------------
    def _feed(self, obj: BaseModel) -> None:
        state = self.state
        if isinstance(obj, kueue.ResourceFlavor):
            state.upsert_flavor(obj)
        elif isinstance(obj, kueue.Cohort):
            state.upsert_cohort(obj)
        elif isinstance(obj, kueue.ClusterQueue):
            state.upsert_cluster_queue(obj)
        elif isinstance(obj, kueue.LocalQueue):
            state.upsert_local_queue(obj)
        elif isinstance(obj, (kueue.WorkloadPriorityClass, PriorityClass)):
            state.upsert_priority_class(obj)
        elif isinstance(obj, Namespace):
            state.upsert_namespace(obj.name, dict(obj.metadata.labels or {}))
        elif isinstance(obj, LimitRange):
            if not obj.metadata.namespace:
                obj.metadata.namespace = "default"
            state.upsert_limit_range(obj)

    def _deduplicate(self, sources: Sequence[Source]) -> list[Source]:
        """Same as `kubectl apply -f`: a later definition of the same object replaces the earlier one."""
        latest: dict[tuple[str, str, str, str], int] = {}
        for i, source in enumerate(sources):
            meta = getattr(source.obj, "metadata", None)
            name = getattr(meta, "name", None) if meta is not None else None
            if not name:
                continue
            group, kind = group_of(source.obj)
            key = (group, kind, getattr(meta, "namespace", None) or "", name)
            if key in latest and _document_hash(sources[latest[key]].obj) != _document_hash(source.obj):
                self.notes.append(f"{source.where}: replaces the definition at {sources[latest[key]].where.split(' ')[0]}")
            latest[key] = i
        keep = set(latest.values())
        return [s for i, s in enumerate(sources) if i in keep or not getattr(getattr(s.obj, "metadata", None), "name", None)]

    def _workloads(self, sources: list[Source]) -> list[tuple[Workload, Source]]:
        """The Workloads to feed in (built from Jobs where needed), each with a namespace and a
        creation time: workloads without one are created just after the latest given, in input order."""
        explicit = [
            s.obj.metadata.creation_timestamp for s in sources if isinstance(s.obj, (Workload, Job)) and s.obj.metadata.creation_timestamp
        ]
        base = max(explicit, default=DEFAULT_EPOCH)
        if base.tzinfo is None:
            base = base.replace(tzinfo=UTC)
        untimed = 0
        out: list[tuple[Workload, Source]] = []
        seen: dict[str, str] = {}
        for source in sources:
            obj = source.obj
            if isinstance(obj, Job):
                wl = self._job_workload(source, obj)
                if wl is None:
                    continue
            else:
                assert isinstance(obj, Workload)
                wl = obj
            if not wl.namespace:
                wl.metadata.namespace = "default"
            created = wl.metadata.creation_timestamp
            if created is None:
                untimed += 1
                wl.metadata.creation_timestamp = base + timedelta(milliseconds=untimed)
            elif created.tzinfo is None:
                wl.metadata.creation_timestamp = created.replace(tzinfo=UTC)
            key = f"{wl.namespace}/{wl.name}"
            if key in seen:
                raise SimulationError(f"{source.where}: metadata.name: Duplicate value: Workload {key} is also defined by {seen[key]}")
            seen[key] = source.where
            out.append((wl, source))
        return out

    def _job_workload(self, source: Source, job: Job) -> Workload | None:
        if not job_queue_name(job):
            return None  # Kueue leaves Jobs without a queue alone (manageJobsWithoutQueueName is off)
        if not job.metadata.name:
            # generateName: a stable name from the content, so results do not depend on input order.
            prefix = job.metadata.generate_name or "job-"
            job.metadata.name = f"{prefix}{_document_hash(job)[:5]}"
        if not job.metadata.namespace:
            job.metadata.namespace = "default"
        queued = job.model_copy(deep=True)
        queued.metadata.uid = job.metadata.uid or stable_uid(f"Job/{job.namespace}/{job.name}")
        try:
            return construct_workload(BATCH_JOB, queued, workload_priority_classes=self.state.wpcs, priority_classes=self.state.pcs)
        except JobConversionError as err:
            raise SimulationError(f"{source.where}: {err}") from None

    def _raise_if_unreadable(self, wl: Workload, source: Source) -> None:
        message = self.state.errors.get(wl.key)
        if message is None:
            return
        if isinstance(source.obj, Job):
            # Name the Job's own field, not the Workload built from it.
            message = message.replace("spec.podSets[0].template.", "spec.template.", 1)
        raise SimulationError(f"{source.where}: {message}")

    # --- the state the live path keeps ----------------------------------------------------------------
    @property
    def config(self) -> Configuration:
        return self.state.config

    @property
    def cache(self) -> Cache:
        return self.state.cache

    @property
    def scheduler(self) -> Scheduler:
        return self.state.scheduler

    @property
    def workloads(self) -> list[WorkloadInfo]:
        return sorted(self.state.infos.values(), key=lambda w: w.key)

    # --- running --------------------------------------------------------------------------------------
    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.cycles)

    def _release_later(self, key: str, evicted_at: datetime) -> None:
        if self.release_after is not None:
            self._releases.setdefault(key, evicted_at + timedelta(seconds=self.release_after))

    def _release_due(self, now: datetime) -> None:
        """The victims whose jobs have stopped by `now` give their quota back."""
        for key, due in sorted(self._releases.items(), key=lambda item: (item[1], item[0])):
            if due <= now:
                del self._releases[key]
                self.state.finish_eviction(key, now)

    def step(self) -> CycleResult:
        """Release the victims whose jobs have stopped, run one cycle, and stop the new victims'
        jobs (those that stop at once give their quota back in the same step)."""
        self.cycles += 1
        now = self.now()
        self._release_due(now)
        outcome = self.state.cycle(now)
        for preemption in outcome.preemptions:
            self._release_later(preemption.victim.key, now)
        self._release_due(now)
        self.admitted += len(outcome.admitted)
        self.preemptions += len(outcome.preemptions)
        self.decisions += outcome.heads
        return outcome

    def run(self, cycles: int | None = None, *, max_cycles: int = DEFAULT_MAX_CYCLES) -> SimulationResult:
        converged = False
        if cycles is not None:
            for _ in range(cycles):
                self.step()
            converged = True
        else:
            while self.cycles < max_cycles:
                if not self.step().changed and not self._releases:
                    converged = True
                    break
        return self.result(converged)

    def _write(self, write: StatusWrite) -> None:
        """What the apiserver does with the admission controller's status write."""
        info = self.state.infos[write.key]
        self.state.write_succeeded(write, info.obj.model_copy(update={"status": write.status}))

    # --- output --------------------------------------------------------------------------------------
    def result(self, converged: bool = True) -> SimulationResult:
        for write in self.state.flush(self.now()):
            self._write(write)
        infos = self.workloads
        cluster_queues = [self._cluster_queue_out(name) for name in sorted(self.cache.cluster_queues)]
        return SimulationResult(
            cycles=self.cycles,
            converged=converged,
            workloads=sorted([*(self._workload_out(info) for info in infos), *map(_stored, self.untracked)], key=lambda wl: wl.key),
            untracked=self.untracked,
            cluster_queues=cluster_queues,
            infos=infos,
            admitted=self.admitted,
            preemptions=self.preemptions,
            decisions=self.decisions,
            bypassed={info.key: found for info in infos if not info.reserved and (found := self.state.scheduler.bypassed(info))},
        )

    # Shallow copies: the output shares the input's spec, which nothing changes (a deep copy
    # of 10,000 Workloads took seconds).
    def _workload_out(self, info: WorkloadInfo) -> Workload:
        metadata = info.obj.metadata
        if metadata.uid is None:
            metadata = metadata.model_copy(update={"uid": info.uid})
        return _stored(info.obj.model_copy(update={"metadata": metadata}))

    def _cluster_queue_out(self, name: str) -> ClusterQueue:
        status = self.state.cluster_queue_status(name, self.start)
        obj = self.state.cluster_queue_objects[name]
        return obj.model_copy(update={"api_version": f"{c.GROUP}/{c.STORAGE_VERSION}", "status": status})


def _stored(wl: Workload) -> Workload:
    """A Workload as the apiserver returns it: in the storage version."""
    return wl.model_copy(update={"api_version": f"{c.GROUP}/{c.STORAGE_VERSION}"})
