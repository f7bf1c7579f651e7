"""Kueue's eviction lifecycle, as sequences of writes: kfed's manager reaches Kueue's states.

Each case runs the same script twice, on two harness apiservers: one run by upstream Kueue v0.19.2
(the pinned build of `hack/kueue/build.sh`, webhooks off) and one by `python -m manager`. The
Workloads are bare (no job owns them), as in Kueue's scheduler-performance runner, and one scripted
releaser (`benchmarks/releaser.py`) plays the job's part for both: it turns an evicted Workload's
`QuotaReserved` False `RELEASE_AFTER` seconds after it observes the eviction. Under Kueue's
lifecycle the victim holds its quota until then; the preemptor waits sticky at its queue's head,
and a later preemptor counts a victim already being evicted instead of evicting another.

A trace (`benchmarks/lifecycle.py`) records, from the watch, each Workload's transitions in the
order the apiserver served them: evicted (Evicted turns True), released (QuotaReserved turns False after an eviction) and
admitted (QuotaReserved turns True). Both managers must evict the same Workloads in the same order
and admit the same Workloads in the same order; the expected sequences are Kueue's, read from its
code (`pkg/cache/queue/cluster_queue.go` for the sticky preemptor, `pkg/scheduler/preemption` for
the candidates under eviction) and checked here against the running Kueue too.

`test_the_smallest_case_evicts_once_as_kueue_does` fails if kfed gives a victim's quota back at
its eviction (its former `release_bare_evictions`): it then evicts b1 and b2.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from benchmarks import lifecycle
from benchmarks.releaser import Releaser, awaits_release
from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.meta import is_condition_true
from manager.dev import federation
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from manager.kube.errors import ConflictError
from manager.kube.informer import Informer
from tests.harness import Provider, eventually
from tests.integration.controllers import crd_cluster, running_manager
from tests.integration.test_controllers import job_manifest
from tests.kueue_upstream import UpstreamKueue, require_upstream_kueue

RELEASE_AFTER = 1.0  # seconds from an eviction to its release: a job that takes a second to stop
FINISH_AFTER = 0.5  # seconds from the first eviction to the scripted finish of a running Workload
FLAVOR = "default"
V1BETA2 = f"{c.GROUP}/v1beta2"


@dataclass
class System:
    name: str
    cluster: LocalCluster


@contextlib.contextmanager
def upstream_system(
    provider: Provider, directory: Path, name: str, objects: list[dict[str, Any]], *, jobs: bool, webhooks: bool
) -> Iterator[System]:
    """Upstream Kueue on a fresh cluster (`jobs`: one whose Jobs really run), with `objects`."""
    bin_dir = require_upstream_kueue()
    (cluster,) = provider.create([f"{name}-{uuid.uuid4().hex[:4]}"], jobs=jobs)
    upstream = UpstreamKueue(cluster, directory, bin_dir, webhooks=webhooks)
    upstream.start()
    for obj in objects:
        federation.create(cluster, obj)
    try:
        yield System("upstream Kueue", cluster)
    finally:
        upstream.stop()


@pytest.fixture(scope="module")
def kueue_system(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    flavor = {"apiVersion": V1BETA2, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}}
    with upstream_system(
        provider, tmp_path_factory.mktemp("lifecycle-kueue"), "lifecycle-kueue", [flavor], jobs=False, webhooks=False
    ) as system:
        yield system


@pytest.fixture(scope="module")
def kueue_jobs_system(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """Upstream Kueue with its webhooks (its Job integration suspends queued Jobs), on a cluster
    whose Jobs really run (kube-controller-manager, kube-scheduler, kwok nodes)."""
    directory = tmp_path_factory.mktemp("lifecycle-kueue-jobs")
    with upstream_system(provider, directory, "lifecycle-kueue-jobs", job_cluster_objects(), jobs=True, webhooks=True) as system:
        yield system


@pytest.fixture(scope="module")
def kfed_jobs_system(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    cluster = crd_cluster(provider, "lifecycle-kfed-jobs-", jobs=True)
    with running_manager(cluster, tmp_path_factory.mktemp("lifecycle-kfed-jobs")):
        for obj in job_cluster_objects():
            federation.create(cluster, obj)
        yield System("kfed", cluster)


def job_cluster_objects() -> list[dict[str, Any]]:
    """The flavor, and the WorkloadPriorityClasses the Job-owned case names."""
    priorities = [("low", 1), ("mid", 10), ("high", 20)]
    return [
        {"apiVersion": V1BETA2, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        *(
            {"apiVersion": V1BETA2, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}
            for name, value in priorities
        ),
    ]


@pytest.fixture(scope="module")
def kfed_system(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    cluster = crd_cluster(provider, "lifecycle-kfed-")
    with running_manager(cluster, tmp_path_factory.mktemp("lifecycle-kfed")):
        federation.create(cluster, {"apiVersion": V1BETA2, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}})
        yield System("kfed", cluster)


@dataclass
class Trace(lifecycle.Trace):
    """`benchmarks/lifecycle.py`'s trace, read by the name of each Workload's Job (its own name
    for a Workload that no job owns)."""

    owners: dict[str, str] = field(default_factory=dict)  # Workload key -> its Job's name

    def on_workload(self, kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
        if new is not None:
            owner = next((ref.name for ref in new.metadata.owner_references or [] if ref.controller), None)
            self.owners[new.key] = owner or new.name
        super().on_workload(kind, old, new)

    def name(self, key: str) -> str:
        return self.owners.get(key, key.split("/", 1)[1])

    def names(self, kind: str) -> list[str]:
        return [self.name(t.key) for t in self.transitions if t.kind == kind]

    def first(self, kind: str) -> float | None:
        return next((t.at for t in self.transitions if t.kind == kind), None)

    def story(self) -> str:
        return "; ".join(f"{t.at:.2f}s {t.kind} {self.name(t.key)}" for t in self.transitions)


@dataclass
class Run:
    """One case on one system: its namespace, its client, the trace and the releaser."""

    system: System
    client: KubeClient
    namespace: str
    informer: Informer[kueue.Workload]
    trace: Trace
    releaser: Releaser | None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def reserved(self, name: str) -> bool:
        """The Workload `name`, or the Workload of the Job `name`, holds quota."""
        keys = [key for key, owner in self.trace.owners.items() if owner == name] or [f"{self.namespace}/{name}"]
        return any(
            (wl := self.informer.get(key)) is not None and is_condition_true(wl.status.conditions if wl.status else None, c.QUOTA_RESERVED)
            for key in keys
        )

    async def job(self, name: str, queue: str, *, cpu: int, priority_class: str) -> None:
        """A Job whose pods run until it is stopped (kwok completes a pod after this delay)."""
        manifest = job_manifest(name, self.namespace, queue=queue, cpu=str(cpu), priority_class=priority_class)
        manifest["spec"]["template"]["metadata"] = {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "10m"}}
        await self.client.create(Job, manifest)

    async def workload(self, name: str, queue: str, *, cpu: int, priority: int) -> None:
        pod = {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": str(cpu)}}}],
            }
        }
        body = {
            "apiVersion": V1BETA2,
            "kind": "Workload",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"queueName": queue, "priority": priority, "podSets": [{"name": "main", "count": 1, "template": pod}]},
        }
        await self.client.create(kueue.Workload, body)

    async def all_reserved(self, *names: str, timeout: float = 60.0) -> None:
        await eventually(
            lambda: all(self.reserved(name) for name in names),
            timeout=timeout,
            what=f"{', '.join(names)} holding quota under {self.system.name}",
            explain=self._explain,
        )

    async def _explain(self) -> str:
        return f"trace: {self.trace.story()}"

    async def finish(self, name: str) -> None:
        """The job's end, as Kueue's runner writes it: Finished=True."""
        wl = self.informer.get(f"{self.namespace}/{name}")
        assert wl is not None, name
        while True:
            conditions = [cond.to_dict() for cond in (wl.status.conditions if wl.status else None) or []]
            conditions.append(
                {"type": c.FINISHED, "status": "True", "reason": "ByTest", "message": "By test runner", "lastTransitionTime": _now()}
            )
            patch = {"metadata": {"resourceVersion": wl.metadata.resource_version}, "status": {"conditions": conditions}}
            try:
                await self.client.patch(kueue.Workload, name, patch, namespace=self.namespace, subresource="status")
                return
            except ConflictError:  # the manager wrote it meanwhile: finish what is there now
                wl = await self.client.get(kueue.Workload, name, namespace=self.namespace)

    async def settled(self, *names: str, timeout: float = 60.0) -> None:
        """`names` hold quota and no Workload waits for its release: the scenario is over."""

        def over() -> bool:
            return all(self.reserved(name) for name in names) and not any(awaits_release(wl) for wl in self.informer.items())

        await eventually(over, timeout=timeout, what=f"{', '.join(names)} admitted and no eviction under way", explain=self._explain)

    def after_first_eviction(self, delay: float, action: Callable[[], Awaitable[None]]) -> None:
        """Run `action` `delay` seconds after the first eviction the trace sees."""

        async def wait_then_act() -> None:
            await eventually(lambda: self.trace.first("evicted") is not None, timeout=60, what="a first eviction", interval=0.02)
            if delay:
                await asyncio.sleep(delay)  # the scripted delay of the scenario, not a synchronisation
            await action()

        task = asyncio.get_running_loop().create_task(wait_then_act())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def cluster_queue(name: str, *, cpu: int, cohort: str | None, borrowing_limit: int | None, preemption: dict[str, str]) -> dict[str, Any]:
    quota: dict[str, Any] = {"name": "cpu", "nominalQuota": cpu}
    if borrowing_limit is not None:
        quota["borrowingLimit"] = borrowing_limit
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never", **preemption},
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": FLAVOR, "resources": [quota]}]}],
    }
    if cohort is not None:
        spec["cohortName"] = cohort
    return {"apiVersion": V1BETA2, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


@contextlib.asynccontextmanager
async def started(system: System, case: str, queues: list[dict[str, Any]], *, release: bool = True) -> AsyncIterator[Run]:
    """A namespace of the case's own, its ClusterQueues (named `case-<queue>`) with a LocalQueue
    each (named after the queue), a trace and a releaser on a watch of its Workloads (`release`
    False: none, where the job integration releases its own Workloads)."""
    namespace = f"{case}-{uuid.uuid4().hex[:4]}"
    federation.create(system.cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for cq in queues:
        federation.create(system.cluster, cq)
        local = cq["metadata"]["name"].removeprefix(f"{case}-")
        body = {
            "apiVersion": V1BETA2,
            "kind": "LocalQueue",
            "metadata": {"name": local, "namespace": namespace},
            "spec": {"clusterQueue": cq["metadata"]["name"]},
        }
        federation.create(system.cluster, body)
    client = await KubeClient.from_kubeconfig(system.cluster.kubeconfig(), name="lifecycle", qps=500, burst=500)
    informer: Informer[kueue.Workload] = Informer(client, kueue.Workload, namespace=namespace)
    trace = Trace()
    informer.add_handler(trace.on_workload)
    releaser = Releaser(client, informer, delay=RELEASE_AFTER) if release else None
    watch = asyncio.create_task(informer.run())
    run = Run(system, client, namespace, informer, trace, releaser)
    try:
        await informer.synced.wait()
        yield run
    finally:
        for task in list(run.tasks):
            task.cancel()
        if releaser is not None:
            await releaser.close()
        watch.cancel()
        await asyncio.gather(watch, *run.tasks, return_exceptions=True)
        await client.close()


def same_on_both(runs: dict[str, Run], *, evicted: list[str], admitted: list[str], of: list[str]) -> None:
    """Each system evicted `evicted` in that order and admitted the Workloads `of` in the order
    `admitted` (the ones admitted before the scenario started are not counted)."""
    seen = {name: (run.trace.names("evicted"), [n for n in run.trace.names("admitted") if n in of]) for name, run in runs.items()}
    stories = "\n".join(f"  {name}: {run.trace.story()}" for name, run in runs.items())
    for name, (got_evicted, got_admitted) in seen.items():
        assert (got_evicted, got_admitted) == (evicted, admitted), f"{name} differs from Kueue's lifecycle:\n{stories}"


async def test_the_smallest_case_evicts_once_as_kueue_does(kueue_system: System, kfed_system: System) -> None:
    """Cohort of A and B (2 cpu each, borrowing limit 2, reclaimWithinCohort Any). B runs b1..b4
    (1 cpu each, priorities 1..4); a1 and a2 arrive in A. a1 reclaims b1; b4 finishes 0.5 s
    later and a1 takes its place while b1 is still being evicted; a2 then counts b1, which is
    already being evicted, and takes its quota once it is released. One eviction, not two."""
    runs: dict[str, Run] = {}
    for system in (kueue_system, kfed_system):
        case = "smallest"
        queues = [
            cluster_queue(f"{case}-{q}", cpu=2, cohort=f"{case}-co", borrowing_limit=2, preemption={"reclaimWithinCohort": "Any"})
            for q in ("a", "b")
        ]
        async with started(system, case, queues) as run:
            for i in range(1, 5):
                await run.workload(f"b{i}", "b", cpu=1, priority=i)
            await run.all_reserved("b1", "b2", "b3", "b4")
            run.after_first_eviction(FINISH_AFTER, lambda run=run: run.finish("b4"))  # type: ignore[misc]
            await run.workload("a1", "a", cpu=1, priority=2)
            await run.workload("a2", "a", cpu=1, priority=1)
            await run.settled("a1", "a2")
            runs[system.name] = run
    same_on_both(runs, evicted=["b1"], admitted=["a1", "a2"], of=["a1", "a2"])


async def test_a_later_preemptor_waits_for_a_victim_already_being_evicted(kueue_system: System, kfed_system: System) -> None:
    """Cohort of A, B and C (1 cpu each, borrowing limit 2, reclaimWithinCohort Any). C runs
    c1..c3 (priorities 1..3). a1 reclaims c1; b1 arrives while c1 is being evicted, and its
    target is c1 too: a1 (first in each cycle) counts c1 as under way, and b1 is skipped for
    overlapping targets, so neither evicts c2 while c1 holds its quota. Once c1 is released a1
    (the higher priority) takes it, and b1 then reclaims c2."""
    runs: dict[str, Run] = {}
    for system in (kueue_system, kfed_system):
        case = "reuse"
        queues = [
            cluster_queue(f"{case}-{q}", cpu=1, cohort=f"{case}-co", borrowing_limit=2, preemption={"reclaimWithinCohort": "Any"})
            for q in ("a", "b", "c")
        ]
        async with started(system, case, queues) as run:
            for i in range(1, 4):
                await run.workload(f"c{i}", "c", cpu=1, priority=i)
            await run.all_reserved("c1", "c2", "c3")
            run.after_first_eviction(0, lambda run=run: run.workload("b1", "b", cpu=1, priority=1))  # type: ignore[misc]
            await run.workload("a1", "a", cpu=1, priority=2)
            await run.settled("a1", "b1")
            runs[system.name] = run
    same_on_both(runs, evicted=["c1", "c2"], admitted=["a1", "b1"], of=["a1", "b1"])


async def test_a_preemptor_stays_sticky_at_its_queue_head_while_its_victim_is_evicted(kueue_system: System, kfed_system: System) -> None:
    """One BestEffortFIFO ClusterQueue of 3 cpu that preempts by priority. l1 (priority 1, 2 cpu)
    runs; p (priority 10, 3 cpu) evicts it. q (priority 20, 1 cpu) arrives while l1 is being
    evicted: it would fit in the free cpu, but p holds the head of the queue until it is
    admitted (Kueue's sticky preemptor), so q waits, and then evicts p."""
    runs: dict[str, Run] = {}
    for system in (kueue_system, kfed_system):
        case = "sticky"
        queues = [cluster_queue(f"{case}-s", cpu=3, cohort=None, borrowing_limit=None, preemption={"withinClusterQueue": "LowerPriority"})]
        async with started(system, case, queues) as run:
            await run.workload("l1", "s", cpu=2, priority=1)
            await run.all_reserved("l1")
            run.after_first_eviction(0, lambda run=run: run.workload("q", "s", cpu=1, priority=20))  # type: ignore[misc]
            await run.workload("p", "s", cpu=3, priority=10)
            await run.settled("q")
            runs[system.name] = run
    same_on_both(runs, evicted=["l1", "p"], admitted=["p", "q"], of=["p", "q"])


async def test_a_preempted_job_holds_its_quota_until_stopped_and_its_preemptor_stays_sticky(
    kueue_jobs_system: System, kfed_jobs_system: System
) -> None:
    """The sticky case on the Job-owned path: each system's own Job integration stops the
    victim's Job and releases its Workload (no scripted releaser). l1 (low, 2 cpu) runs; p (mid,
    3 cpu) evicts it; q (high, 1 cpu) arrives once the eviction is seen. p holds its queue's
    head until admitted, then q evicts p."""
    runs: dict[str, Run] = {}
    for system in (kueue_jobs_system, kfed_jobs_system):
        case = "sticky-jobs"
        queues = [cluster_queue(f"{case}-s", cpu=3, cohort=None, borrowing_limit=None, preemption={"withinClusterQueue": "LowerPriority"})]
        async with started(system, case, queues, release=False) as run:
            await run.job("l1", "s", cpu=2, priority_class="low")
            await run.all_reserved("l1")
            run.after_first_eviction(0, lambda run=run: run.job("q", "s", cpu=1, priority_class="high"))  # type: ignore[misc]
            await run.job("p", "s", cpu=3, priority_class="mid")
            await run.settled("q", timeout=120)
            runs[system.name] = run
    same_on_both(runs, evicted=["l1", "p"], admitted=["p", "q"], of=["p", "q"])
