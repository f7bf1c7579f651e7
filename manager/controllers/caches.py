"""The informers every controller of one cluster reads from, created and started together."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from manager.api import kueue
from manager.api.core import Job, LimitRange, Namespace, PriorityClass
from manager.engine.jobs import prebuilt_workload_name
from manager.kube.client import KubeClient
from manager.kube.informer import Informer
from manager.runtime.tasks import cancel_and_wait


def _owner_uids(obj: Any) -> Iterable[str]:
    return [ref.uid for ref in obj.metadata.owner_references or [] if ref.controller]


def _owner_jobs(wl: kueue.Workload) -> Iterable[str]:
    return [f"{wl.namespace}/{ref.name}" for ref in wl.metadata.owner_references or [] if ref.kind == "Job" and ref.controller]


def _prebuilt_of_job(job: Job) -> Iterable[str]:
    name = prebuilt_workload_name(job.metadata)
    return [f"{job.namespace}/{name}"] if name else []


@dataclass
class Caches:
    client: KubeClient
    flavors: Informer[kueue.ResourceFlavor]
    cohorts: Informer[kueue.Cohort]
    cluster_queues: Informer[kueue.ClusterQueue]
    local_queues: Informer[kueue.LocalQueue]
    workloads: Informer[kueue.Workload]
    workload_priority_classes: Informer[kueue.WorkloadPriorityClass]
    priority_classes: Informer[PriorityClass]
    namespaces: Informer[Namespace]
    limit_ranges: Informer[LimitRange]
    admission_checks: Informer[kueue.AdmissionCheck]
    jobs: Informer[Job]
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @classmethod
    def create(cls, client: KubeClient) -> Caches:
        return cls(
            client=client,
            flavors=Informer(client, kueue.ResourceFlavor),
            cohorts=Informer(client, kueue.Cohort),
            cluster_queues=Informer(client, kueue.ClusterQueue),
            local_queues=Informer(client, kueue.LocalQueue),
            workloads=Informer(client, kueue.Workload, indexes={"owner": _owner_uids, "ownerJob": _owner_jobs}),
            workload_priority_classes=Informer(client, kueue.WorkloadPriorityClass),
            priority_classes=Informer(client, PriorityClass),
            namespaces=Informer(client, Namespace),
            limit_ranges=Informer(client, LimitRange),
            admission_checks=Informer(client, kueue.AdmissionCheck),
            jobs=Informer(client, Job, indexes={"prebuilt": _prebuilt_of_job}),
        )

    def all(self) -> list[Informer[Any]]:
        return [
            self.flavors,
            self.cohorts,
            self.cluster_queues,
            self.local_queues,
            self.workload_priority_classes,
            self.priority_classes,
            self.namespaces,
            self.limit_ranges,
            self.admission_checks,
            self.workloads,
            self.jobs,
        ]

    def start(self) -> None:
        for informer in self.all():
            self.tasks.append(asyncio.create_task(informer.run(), name=f"informer-{informer.model.KIND}"))

    async def wait_synced(self) -> None:
        await asyncio.gather(*(informer.synced.wait() for informer in self.all()))

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.all())

    async def stop(self) -> None:
        await cancel_and_wait(self.tasks)
        self.tasks.clear()
