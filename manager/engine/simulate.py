"""`kfed simulate`: Kueue's scheduling cycles over a set of manifests, with no cluster.

Pure: takes typed objects (as the manifest loader returns them), returns the final
Workloads and ClusterQueues with the status Kueue would write.
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
from manager.engine.cache import Cache, ClusterQueueInfo
from manager.engine.integrations.adapter import construct_workload
from manager.engine.integrations.registry import BATCH_JOB
from manager.engine.jobs import JobConversionError, job_queue_name
from manager.engine.requests import RequestError, limit_range_defaults
from manager.engine.scheduler import Scheduler
from manager.engine.status import cluster_queue_status, workload_status
from manager.engine.workload import (
    REASON_PENDING_EVALUATION,
    WorkloadInfo,
    build_info,
    stable_uid,
    stop_policy_eviction,
    workload_priority,
)

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
    admitted: int = 0
    preemptions: int = 0
    decisions: int = 0

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
    """Builds the engine from objects and runs cycles."""

    def __init__(self, sources: Sequence[Source]) -> None:
        self.notes: list[str] = []
        sources = self._deduplicate(sources)
        flavors, cohorts, cqs, lqs = [], [], [], []
        self.wpcs: dict[str, kueue.WorkloadPriorityClass] = {}
        self.pcs: dict[str, PriorityClass] = {}
        self.namespaces: dict[str, dict[str, str]] = {}
        limit_ranges: dict[str, list[LimitRange]] = {}
        config: Configuration | None = None
        workload_sources: list[Source] = []
        for source in sources:
            obj = source.obj
            if isinstance(obj, kueue.ResourceFlavor):
                flavors.append(obj)
            elif isinstance(obj, kueue.Cohort):
                cohorts.append(obj)
            elif isinstance(obj, kueue.ClusterQueue):
                cqs.append(obj)
            elif isinstance(obj, kueue.LocalQueue):
                lqs.append(obj)
            elif isinstance(obj, kueue.WorkloadPriorityClass):
                self.wpcs[obj.name] = obj
            elif isinstance(obj, PriorityClass):
                self.pcs[obj.name] = obj
            elif isinstance(obj, Namespace):
                labels = dict(obj.metadata.labels or {})
                labels["kubernetes.io/metadata.name"] = obj.name
                self.namespaces[obj.name] = labels
            elif isinstance(obj, LimitRange):
                limit_ranges.setdefault(obj.namespace or "default", []).append(obj)
            elif isinstance(obj, Configuration):
                config = obj
            elif isinstance(obj, (Workload, Job)):
                workload_sources.append(source)
        self.config = config or Configuration()
        self.cache = Cache(flavors=flavors, cluster_queues=cqs, cohorts=cohorts, local_queues=lqs)
        self.workloads = self._workloads(workload_sources, limit_ranges)
        for wl in self.workloads:
            self.namespaces.setdefault(wl.namespace, {"kubernetes.io/metadata.name": wl.namespace})
        for lq in lqs:
            self.namespaces.setdefault(lq.namespace, {"kubernetes.io/metadata.name": lq.namespace})
        self.scheduler = Scheduler(self.cache, config=self.config, namespaces=self.namespaces)
        latest = max((wl.created for wl in self.workloads), default=DEFAULT_EPOCH)
        self.start = latest.replace(microsecond=0) + timedelta(seconds=1)
        self.cycles = 0
        self.admitted = 0
        self.preemptions = 0
        self.decisions = 0
        self._place(self.start)

    # --- building ---------------------------------------------------------------------------------
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

    def _workloads(self, sources: list[Source], limit_ranges: dict[str, list[LimitRange]]) -> list[WorkloadInfo]:
        explicit = [
            s.obj.metadata.creation_timestamp for s in sources if isinstance(s.obj, (Workload, Job)) and s.obj.metadata.creation_timestamp
        ]
        base = max(explicit, default=DEFAULT_EPOCH)
        if base.tzinfo is None:
            base = base.replace(tzinfo=UTC)
        untimed = 0
        out: list[WorkloadInfo] = []
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
                created = base + timedelta(milliseconds=untimed)
                wl.metadata.creation_timestamp = created
            elif created.tzinfo is None:
                created = created.replace(tzinfo=UTC)
            key = f"{wl.namespace}/{wl.name}"
            if key in seen:
                raise SimulationError(f"{source.where}: metadata.name: Duplicate value: Workload {key} is also defined by {seen[key]}")
            seen[key] = source.where
            defaults = limit_range_defaults(limit_ranges.get(wl.namespace, []))
            try:
                info = build_info(wl, priority=self._priority(wl), created=created, config=self.config, defaults=defaults)
            except RequestError as err:
                message = str(err)
                if isinstance(source.obj, Job):
                    # Name the Job's own field, not the Workload built from it.
                    message = message.replace("spec.podSets[0].template.", "spec.template.", 1)
                raise SimulationError(f"{source.where}: {message}") from None
            out.append(info)
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
            return construct_workload(BATCH_JOB, queued, workload_priority_classes=self.wpcs, priority_classes=self.pcs)
        except JobConversionError as err:
            raise SimulationError(f"{source.where}: {err}") from None

    def _priority(self, wl: Workload) -> int:
        return workload_priority(wl, self.wpcs, self.pcs)

    def _place(self, now: datetime) -> None:
        """Running workloads hold quota; the rest are queued (stop policies applied first)."""
        for wl in sorted(self.workloads, key=lambda w: w.key):
            if wl.reserved:
                self.cache.reserve_admitted(wl)
        for wl in sorted(self.workloads, key=lambda w: w.key):
            if wl.reserved:
                self._apply_stop_policies(wl, now)
            else:
                self.scheduler.enqueue(wl, now)

    def _apply_stop_policies(self, wl: WorkloadInfo, now: datetime) -> None:
        eviction = stop_policy_eviction(wl, self.cache)
        if eviction is not None:
            reason, message = eviction
            wl.set_condition(c.EVICTED, "True", reason, message, now)
            self.scheduler.release(wl, now, reason=REASON_PENDING_EVALUATION, message=message)

    # --- running --------------------------------------------------------------------------------------
    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.cycles)

    def step(self) -> bool:
        """Run one cycle; True if it changed anything."""
        self.cycles += 1
        outcome = self.scheduler.cycle(self.now())
        self.admitted += len(outcome.admitted)
        self.preemptions += len(outcome.preemptions)
        self.decisions += outcome.heads
        return outcome.changed

    def run(self, cycles: int | None = None, *, max_cycles: int = DEFAULT_MAX_CYCLES) -> SimulationResult:
        converged = False
        if cycles is not None:
            for _ in range(cycles):
                self.step()
            converged = True
        else:
            while self.cycles < max_cycles:
                if not self.step():
                    converged = True
                    break
        return self.result(converged)

    # --- output --------------------------------------------------------------------------------------
    def result(self, converged: bool = True) -> SimulationResult:
        workloads = [self._workload_out(info) for info in sorted(self.workloads, key=lambda w: w.key)]
        cluster_queues = [self._cluster_queue_out(cq) for _, cq in sorted(self.cache.cluster_queues.items())]
        return SimulationResult(
            cycles=self.cycles,
            converged=converged,
            workloads=workloads,
            cluster_queues=cluster_queues,
            infos=sorted(self.workloads, key=lambda w: w.key),
            admitted=self.admitted,
            preemptions=self.preemptions,
            decisions=self.decisions,
        )

    # Shallow copies: the output shares the input's spec, which nothing changes (a deep copy
    # of 10,000 Workloads took seconds).
    def _workload_out(self, info: WorkloadInfo) -> Workload:
        metadata = info.obj.metadata
        if metadata.uid is None:
            metadata = metadata.model_copy(update={"uid": info.uid})
        update = {"api_version": f"{c.GROUP}/{c.STORAGE_VERSION}", "metadata": metadata, "status": workload_status(info, now=self.now())}
        return info.obj.model_copy(update=update)

    def _cluster_queue_out(self, cq: ClusterQueueInfo) -> ClusterQueue:
        status = cluster_queue_status(cq, self.scheduler, now=self.start)
        return cq.obj.model_copy(update={"api_version": f"{c.GROUP}/{c.STORAGE_VERSION}", "status": status})
