"""The informers every controller of one cluster reads from, created and started together.

Each enabled job integration gets an informer of its kind, and of each kind its adapter reads
besides (a TrainJob's runtimes). As Kueue does, a kind whose API
the cluster does not serve yet (its CRD is not installed) is waited for in the background:
its informer starts once the API appears, and the process is ready without it meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from manager.api import kueue
from manager.api.core import LimitRange, Namespace, Pod, PriorityClass
from manager.api.meta import Resource
from manager.engine.integrations.adapter import RELATED_INDEX, JobAdapter, component_owner_values, model_gvk, owner_index_values
from manager.engine.integrations.registry import DEFAULT, Registry
from manager.engine.jobs import prebuilt_keys
from manager.kube.client import KubeClient
from manager.kube.errors import KubeError
from manager.kube.informer import Informer
from manager.runtime.tasks import cancel_and_wait

log = logging.getLogger("kfed.caches")

API_WAIT_FIRST = 1.0  # seconds between looks for a job kind's API, doubling
API_WAIT_MAX = 10.0  # a CRD installed after kfed started is picked up within this


def _owner_uids(obj: Any) -> Iterable[str]:
    return [ref.uid for ref in obj.metadata.owner_references or [] if ref.controller]


def member_index(adapter: JobAdapter[Any]) -> str:
    """The pod informer's index of the pods of a kind run as pod groups, by its job's key."""
    return f"member:{adapter.gvk}"


def _member_keys(adapter: JobAdapter[Any]) -> Callable[[Any], list[str]]:
    def keys(pod: Any) -> list[str]:
        key = adapter.member_of(pod)
        return [key] if key else []

    return keys


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
    registry: Registry = DEFAULT
    jobs: dict[str, Informer[Any]] = field(default_factory=dict)  # by the job kind's GVK string
    # The kinds the enabled adapters read besides their own (`related_models`), by GVK string.
    related: dict[str, Informer[Any]] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # Job kinds whose API the cluster did not serve at start: not waited for to be ready.
    deferred: set[str] = field(default_factory=set)
    _settled: dict[str, asyncio.Event] = field(default_factory=dict)

    @classmethod
    def create(cls, client: KubeClient, registry: Registry = DEFAULT) -> Caches:
        # The pods of each kind run as pod groups, by its job's key (`member:GVK`).
        members = {member_index(parent): _member_keys(parent) for parent in registry.adapters if parent.runs_as_pod_groups}
        return cls(
            client=client,
            flavors=Informer(client, kueue.ResourceFlavor),
            cohorts=Informer(client, kueue.Cohort),
            cluster_queues=Informer(client, kueue.ClusterQueue),
            local_queues=Informer(client, kueue.LocalQueue),
            workloads=Informer(
                client,
                kueue.Workload,
                indexes={"owner": _owner_uids, "ownerKey": owner_index_values, "componentOwner": component_owner_values},
            ),
            workload_priority_classes=Informer(client, kueue.WorkloadPriorityClass),
            priority_classes=Informer(client, PriorityClass),
            namespaces=Informer(client, Namespace),
            limit_ranges=Informer(client, LimitRange),
            admission_checks=Informer(client, kueue.AdmissionCheck),
            registry=registry,
            jobs={
                adapter.gvk: Informer(
                    client,
                    adapter.model,
                    indexes={
                        "prebuilt": prebuilt_keys,
                        RELATED_INDEX: adapter.related_index_values,
                        **adapter.indexes(),
                        **(members if adapter.model is Pod else {}),
                    },
                )
                for adapter in registry.adapters
            },
            related={model_gvk(model): Informer(client, model) for adapter in registry.adapters for model in adapter.related_models()},
        )

    def find(self, model: type[Resource], key: str) -> Resource | None:
        """One object of a related kind (`JobAdapter.related_models`) from its cache."""
        informer = self.related.get(model_gvk(model))
        found: Resource | None = informer.get(key) if informer is not None else None
        return found

    def _served_kinds(self) -> dict[str, Informer[Any]]:
        """The informers of kinds a cluster may not serve (yet): the job kinds and their related ones."""
        return {**self.jobs, **self.related}

    def core(self) -> list[Informer[Any]]:
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
        ]

    def all(self) -> list[Informer[Any]]:
        return [*self.core(), *self._served_kinds().values()]

    def start(self) -> None:
        for informer in self.core():
            self.tasks.append(asyncio.create_task(informer.run(), name=f"informer-{informer.model.KIND}"))
        for gvk, informer in self._served_kinds().items():
            self._settled[gvk] = asyncio.Event()
            self.tasks.append(asyncio.create_task(self._run_when_served(gvk, informer), name=f"informer-{informer.model.KIND}"))

    async def _run_when_served(self, gvk: str, informer: Informer[Any]) -> None:
        """Kueue's WaitForAPI: start the kind's informer once its API is served."""
        wait = API_WAIT_FIRST
        while not (served := await self._served(informer.model)):
            if served is False and gvk not in self.deferred:
                log.info("No matching API in the server for job framework, deferring its controller", extra={"kind": gvk})
                self.deferred.add(gvk)
                self._settled[gvk].set()
            await asyncio.sleep(wait)
            wait = min(wait * 2, API_WAIT_MAX)
        if gvk in self.deferred:
            log.info("API now available, starting its controller", extra={"kind": gvk})
            self.deferred.discard(gvk)
        watch = asyncio.create_task(informer.run(), name=f"informer-{informer.model.KIND}")
        try:
            await informer.synced.wait()
            self._settled[gvk].set()
            await watch
        finally:
            await cancel_and_wait([watch])

    async def _served(self, model: type[Resource]) -> bool | None:
        """Whether the cluster serves the kind; None when it could not be asked."""
        try:
            return await self.client.serves(model)
        except KubeError as err:
            log.warning("cannot tell whether the API is served; looking again", extra={"kind": model.KIND, "error": str(err)})
            return None

    async def wait_synced(self) -> None:
        await asyncio.gather(*(informer.synced.wait() for informer in self.core()), *(event.wait() for event in self._settled.values()))

    def synced(self) -> bool:
        jobs_synced = all(informer.synced.is_set() for gvk, informer in self._served_kinds().items() if gvk not in self.deferred)
        return jobs_synced and all(informer.synced.is_set() for informer in self.core())

    async def stop(self) -> None:
        await cancel_and_wait(self.tasks)
        self.tasks.clear()
