"""One worker cluster as the manager reaches it: its client, the watches on the remote
Workloads and jobs (of every kind MultiKueue dispatches) of our origin, and its connection
health.

Same as Kueue's remoteClient: a connection counts only once every watch is open; a watch
that fails marks the cluster disconnected (the first drop is remembered, so the
worker-lost timeout runs from it) and the client is rebuilt with backoff, 5 s doubling to a
320 s cap (tenacity), or sooner when the worker's apiserver sends Retry-After. Each worker has
its own client, rate limiter and task, so a slow or dead worker never holds up another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential

from manager.api import constants as c
from manager.api.core import Lease
from manager.api.kueue import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Workload
from manager.api.meta import Resource, utcnow
from manager.engine.integrations.adapter import JobAdapter
from manager.engine.integrations.registry import BATCH_JOB
from manager.engine.jobs import prebuilt_keys
from manager.kube.access import can_i
from manager.kube.client import KubeClient, KubeconfigError
from manager.kube.errors import ForbiddenError, KubeError, NotFoundError, TransientError
from manager.kube.informer import InformerSet
from manager.multikueue.rules.agent_health import AGENT_LEASE_NAME, AGENT_LEASE_NAMESPACE, AgentLeaseWatch, AgentVerdict, LeaseSighting
from manager.multikueue.rules.capacity import WorkerQuotas, may_free_room
from manager.runtime.tasks import cancel_and_wait

log = logging.getLogger("kfed.multikueue.remote")

RETRY_BASE_SECONDS = 5
RETRY_MAX_SECONDS = 320
WATCH_START_BASE_SECONDS = 60.0  # Kueue's establish timeout: 1 min doubling to 10 min
WATCH_START_MAX_SECONDS = 600.0
QUOTA_WATCH_RETRY_SECONDS = 30.0
QUOTA_REWATCH_SECONDS = 1.0  # between the watches of one kind of the worker's queues
MIN_RETRY_AFTER_SECONDS = 1.0  # a Retry-After of 0 (or less) never makes a busy loop


class ConnectionFailedError(Exception):
    """The worker could not be reached or a watch could not be opened; the message is safe to
    show. `retry_after` is the worker apiserver's Retry-After, when it sent one."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def reconnect_wait(backoff: float, retry_after: float | None) -> float:
    """Seconds until the next connection attempt: the backoff step, or sooner when the worker's
    apiserver said when to come back (a restarting apiserver answers 429 "storage is
    (re)initializing" with Retry-After: 1), so a short blip stays shorter than workerLostTimeout."""
    if retry_after is None:
        return backoff
    return min(backoff, max(retry_after, MIN_RETRY_AFTER_SECONDS))


_BACKOFF = wait_exponential(multiplier=RETRY_BASE_SECONDS, max=RETRY_MAX_SECONDS)


def backoff_wait(state: RetryCallState) -> float:
    """tenacity's wait: the exponential backoff, shortened by a Retry-After."""
    failure = state.outcome.exception() if state.outcome is not None else None
    retry_after = failure.retry_after if isinstance(failure, ConnectionFailedError) else None
    return reconnect_wait(_BACKOFF(state), retry_after)


async def _keep_watching(kind: str, informer: InformerSet[Any]) -> None:
    """Watch one kind of the worker's queues for as long as the connection lasts. A watch that
    breaks (a quiet one is already watched again by `watch_until_error`; this is one whose
    server did not answer after it) is watched again from its last version after a pause,
    never taken for lost capacity; the connection's own watches judge the worker's health."""
    while True:
        try:
            await informer.watch_until_error()
        except TransientError as err:
            log.debug("a watch of the worker's queues broke; watching again", extra={"kind": kind, "error": str(err)})
            await asyncio.sleep(QUOTA_REWATCH_SECONDS)


class RemoteCluster:
    """A worker's client and caches. `start(kubeconfig)` connects in the background and keeps
    reconnecting; `on_change(self)` is called whenever the connection state changes, and
    `on_object(self, namespace, workload_name)` for every remote event of ours."""

    def __init__(
        self,
        name: str,
        *,
        origin: str,
        qps: float,
        burst: int,
        on_change: Callable[[RemoteCluster], None],
        on_object: Callable[[RemoteCluster, str, str], None],
        observe_latency: Callable[[str, str, float], None] | None = None,
        clock: Callable[[], datetime] = utcnow,
        monotonic: Callable[[], float] = time.monotonic,
        adapters: Sequence[JobAdapter[Any]] = (BATCH_JOB,),
        on_quotas: Callable[[RemoteCluster], None] | None = None,
    ) -> None:
        self.name = name
        # Capacity-aware dispatch: the worker's queues are watched too (`quotas()`), and
        # `on_quotas(self)` is called when they change. Failing to watch them never ends the
        # connection: the worker's capacity is then unknown.
        self.on_quotas = on_quotas
        self.quota_informers: dict[str, InformerSet[Any]] | None = None
        # Counts changes to what the worker's queues could ever give (their specs, or whether
        # they are known at all), not to their usage: what MultiKueue's refusal reads.
        self.quota_spec_version = 0
        # The job kinds to watch (as Kueue does, a worker must serve each: a watch that cannot
        # be opened fails the connection).
        self.adapters = tuple(adapters)
        self.origin = origin
        self.qps = qps
        self.burst = burst
        self.on_change = on_change
        self.on_object = on_object
        self.observe_latency = observe_latency
        self.clock = clock
        self.kubeconfig: dict[str, Any] | None = None
        self.client: KubeClient | None = None
        # The worker namespaces the manager may use there (None: the whole cluster).
        self.namespaces: tuple[str, ...] | None = None
        self.workloads: InformerSet[Workload] | None = None
        self.jobs: dict[str, InformerSet[Any]] = {}  # by the job kind's GVK string
        self.connected = False
        # A manager that just started has not seen the worker yet: the worker-lost clock runs
        # from now (Kueue: "disconnected since creation").
        self.lost_since: datetime | None = clock()
        self.failed_attempts = 0
        self.next_attempt: datetime | None = None
        self.last_error = ""
        self.reconnects = 0
        self.monotonic = monotonic
        self.agent = AgentLeaseWatch()
        self._agent_running: bool | None = None
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self, kubeconfig: dict[str, Any], *, namespaces: tuple[str, ...] | None = None) -> None:
        """(Re)connect with this kubeconfig, watching `namespaces` (None: the whole cluster).
        The same again changes nothing; a new kubeconfig restarts the connection at once and
        resets the backoff (Kueue does the same), and so do new namespaces, with new caches."""
        same = (kubeconfig, namespaces) == (self.kubeconfig, self.namespaces)
        if same and self._task is not None and not self._task.done():
            return
        if namespaces != self.namespaces:
            self.workloads, self.jobs = None, {}  # they cached other namespaces
        self.kubeconfig, self.namespaces = kubeconfig, namespaces
        self.failed_attempts = 0
        self.next_attempt = None
        self._cancel()
        self._task = asyncio.create_task(self._run(kubeconfig), name=f"multikueue-remote-{self.name}")

    async def stop(self, *, reason: str = "") -> None:
        """Stop the watches and close the client; the cluster counts as disconnected from now
        on (unless it already was), so the worker-lost clock keeps running."""
        task = self._cancel()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._close_client()
        self.kubeconfig = None
        if reason:
            self.last_error = reason
        self._mark_disconnected()

    def _cancel(self) -> asyncio.Task[None] | None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        return task

    async def _close_client(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    def _mark_disconnected(self) -> None:
        was = self.connected
        self.connected = False
        if self.lost_since is None:
            self.lost_since = self.clock()
        if was:
            self.on_change(self)

    # --- the connection loop -------------------------------------------------------------------------
    def _before_sleep(self, state: RetryCallState) -> None:
        err = state.outcome.exception() if state.outcome is not None else None
        self.failed_attempts = state.attempt_number
        seconds = state.upcoming_sleep
        self.next_attempt = self.clock() + timedelta(seconds=seconds)
        self.last_error = str(err) if err is not None else "connection failed"
        log.warning(
            "worker connection failed; retrying",
            extra={"cluster": self.name, "error": self.last_error, "attempts": self.failed_attempts, "retry_in": seconds},
        )
        self._mark_disconnected()
        self.on_change(self)

    async def _run(self, kubeconfig: dict[str, Any]) -> None:
        """Connect with backoff, watch until the connection fails, and start over: a
        connection that worked resets the backoff, so the first retry after a drop comes
        at once and the next ones 5 s, 10 s, 20 s, ... later."""
        while True:
            retrying = AsyncRetrying(
                retry=retry_if_exception_type(ConnectionFailedError),
                wait=backoff_wait,
                before_sleep=self._before_sleep,
                reraise=True,
            )
            async for attempt in retrying:
                with attempt:
                    await self._connect(kubeconfig)
            try:
                await self._watch()
            except ConnectionFailedError as err:
                self.last_error = str(err)
                log.warning("worker connection lost", extra={"cluster": self.name, "error": self.last_error})
                self._mark_disconnected()

    async def _connect(self, kubeconfig: dict[str, Any]) -> None:
        """Build the client and open every watch within a deadline."""
        await self._close_client()
        try:
            client = await KubeClient.from_kubeconfig(
                kubeconfig, name=f"worker/{self.name}", qps=self.qps, burst=self.burst, where=f"MultiKueueCluster {self.name}"
            )
        except KubeconfigError as err:
            raise ConnectionFailedError(str(err)) from None
        # The connection has its own backoff: a failed list must fail the attempt at once.
        client.retry_attempts = 1
        if self.observe_latency is not None:
            observe = self.observe_latency
            client.observe_latency = lambda verb, seconds: observe(self.name, verb, seconds)
        self.client = client
        selector = f"{c.MULTIKUEUE_ORIGIN_LABEL}={self.origin}"
        scope = self.namespaces
        workloads = self.workloads or InformerSet(client, Workload, namespaces=scope, label_selector=selector)
        if self.workloads is None:
            workloads.add_handler(self._on_workload)
            for adapter in self.adapters:
                indexes: dict[str, Callable[[Any], Iterable[str]]] = {"prebuilt": adapter.remote_workload_keys}
                jobs = InformerSet(client, adapter.model, namespaces=scope, label_selector=selector, indexes=indexes)
                jobs.add_handler(self._on_job)
                self.jobs[adapter.gvk] = jobs
        self.workloads = workloads
        for informer in self._informers():
            informer.client = client
        deadline = min(WATCH_START_BASE_SECONDS * 2**self.failed_attempts, WATCH_START_MAX_SECONDS)
        try:
            # Same as Kueue: the connection counts once every watch is open; time-bound it.
            await asyncio.wait_for(asyncio.gather(*(informer.relist() for informer in self._informers())), timeout=deadline)
        except (KubeError, TimeoutError) as err:
            raise ConnectionFailedError(_describe(err), retry_after=getattr(err, "retry_after", None)) from None
        self.connected = True
        self.lost_since = None
        if self.failed_attempts:
            self.reconnects += 1
        self.failed_attempts = 0
        self.next_attempt = None
        self.last_error = ""
        log.info("worker connected", extra={"cluster": self.name})
        self.on_change(self)

    async def _watch(self) -> None:
        """Watch until one of the watches fails; raises ConnectionFailedError. The agent's
        Lease is read alongside; failing to read it never ends the connection."""
        watches = [asyncio.create_task(informer.watch_until_error()) for informer in self._informers()]
        agent = asyncio.create_task(self._poll_agent(), name=f"multikueue-agent-lease-{self.name}")
        side = [agent]
        if self.on_quotas is not None:
            side.append(asyncio.create_task(self._watch_quotas(), name=f"multikueue-quotas-{self.name}"))
        try:
            done, _ = await asyncio.wait(watches, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                failure = task.exception()
                if failure is not None:
                    raise ConnectionFailedError(_describe(failure))
            raise ConnectionFailedError("the watch ended")
        finally:
            await cancel_and_wait([*watches, *side])
            self.agent.forget()
            self._agent_running = None
            self.quota_informers = None
            self.quota_spec_version += 1

    async def _watch_quotas(self) -> None:
        """Watch the worker's ResourceFlavors, ClusterQueues, Cohorts and LocalQueues for as
        long as the connection lasts; a failure (no right to read them, a worker without
        Cohorts) leaves the capacity unknown and is tried again."""
        while True:
            client = self.client
            assert client is not None
            try:
                # Asked first, so that a credential bound to some namespaces (which cannot read
                # the cluster-scoped queues) is never refused a request for them.
                readable = await can_i(client, group=c.GROUP, resource="clusterqueues", verb="list")
            except (KubeError, TimeoutError) as err:
                readable = False
                log.warning("cannot ask whether the worker's queues are readable", extra={"cluster": self.name, "error": str(err)})
            if not readable:
                await asyncio.sleep(QUOTA_WATCH_RETRY_SECONDS)
                continue
            informers: dict[str, InformerSet[Any]] = {
                model.KIND: InformerSet(client, model, namespaces=self.namespaces if model is LocalQueue else None)
                for model in (ResourceFlavor, ClusterQueue, Cohort, LocalQueue)
            }
            try:
                try:
                    await informers[Cohort.KIND].relist()
                except NotFoundError:
                    del informers[Cohort.KIND]  # a Kueue that serves no Cohorts: none to read
                await asyncio.gather(*(informer.relist() for kind, informer in informers.items() if kind != Cohort.KIND))
                for informer in informers.values():
                    informer.add_handler(self._on_quota_object)
                self.quota_informers = informers
                self.quota_spec_version += 1
                self._quotas_changed()
                watches = [asyncio.create_task(_keep_watching(kind, informer)) for kind, informer in informers.items()]
                try:
                    done, _ = await asyncio.wait(watches, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        task.result()
                finally:
                    await cancel_and_wait(watches)
            except (KubeError, TimeoutError) as err:
                log.warning("cannot watch the worker's queues; its capacity is unknown", extra={"cluster": self.name, "error": str(err)})
            self.quota_informers = None
            self.quota_spec_version += 1
            self._quotas_changed()
            await asyncio.sleep(QUOTA_WATCH_RETRY_SECONDS)

    def _on_quota_object(self, kind: str, old: Any, new: Any) -> None:
        changed = old is None or new is None or old.spec != new.spec
        if changed:
            self.quota_spec_version += 1
        # Status-only changes wake the Workloads waiting for room only when they may have made
        # some: an admission there (most of them) cannot.
        if changed or may_free_room((new or old).KIND, old, new):
            self._quotas_changed()

    def _quotas_changed(self) -> None:
        if self.on_quotas is not None:
            self.on_quotas(self)

    def quotas(self) -> WorkerQuotas | None:
        """The worker's queues as last seen while connected; None while unknown."""
        informers = self.quota_informers
        if informers is None or not self.connected:
            return None
        return WorkerQuotas(
            flavors=informers[ResourceFlavor.KIND].items(),
            cluster_queues=informers[ClusterQueue.KIND].items(),
            cohorts=informers[Cohort.KIND].items() if Cohort.KIND in informers else [],
            local_queues=informers[LocalQueue.KIND].items(),
        )

    # --- the admission side ---------------------------------------------------------------------------
    def agent_verdict(self) -> AgentVerdict:
        """Whether the worker's kfed agent runs (None: unknown, for example upstream Kueue)."""
        return self.agent.verdict(self.monotonic())

    async def _poll_agent(self) -> None:
        while True:
            client = self.client
            if client is not None:
                try:
                    lease = await client.get(Lease, AGENT_LEASE_NAME, namespace=AGENT_LEASE_NAMESPACE)
                    spec = lease.spec
                    self.agent.observe(LeaseSighting(spec.holder_identity, spec.renew_time, spec.lease_duration_seconds), self.monotonic())
                except (NotFoundError, ForbiddenError):
                    self.agent.observe(None, self.monotonic())  # no kfed agent to judge by
                except KubeError as err:
                    # A failed read says nothing about the agent; the watches judge the connection.
                    log.debug("cannot read the worker agent's lease", extra={"cluster": self.name, "error": str(err)})
                running = self.agent_verdict().running
                if running != self._agent_running:
                    self._agent_running = running
                    if running is False:
                        log.warning("worker admission agent not running", extra={"cluster": self.name})
                    self.on_change(self)
            await asyncio.sleep(self.agent.poll_interval())

    # --- events ---------------------------------------------------------------------------------
    def _on_workload(self, kind: str, old: Workload | None, new: Workload | None) -> None:
        wl = new or old
        if wl is not None:
            self.on_object(self, wl.namespace, wl.name)

    def _on_job(self, kind: str, old: Resource | None, new: Resource | None) -> None:
        job = new or old
        if job is None:
            return
        adapter = next((adapter for adapter in self.adapters if isinstance(job, adapter.model)), None)
        for key in adapter.remote_workload_keys(job) if adapter is not None else prebuilt_keys(job):
            namespace, _, name = key.partition("/")
            self.on_object(self, namespace, name)

    # --- reading ----------------------------------------------------------------------------------
    def serves(self, namespace: str) -> bool:
        """Whether the manager may use this namespace on the worker."""
        return self.namespaces is None or namespace in self.namespaces

    def workload(self, key: str) -> Workload | None:
        return self.workloads.get(key) if self.workloads is not None and self.connected else None

    def _informers(self) -> list[InformerSet[Any]]:
        return [informer for informer in (self.workloads, *self.jobs.values()) if informer is not None]

    def last_known_workload(self, key: str) -> Workload | None:
        """The copy as last seen, also while the worker is not connected (the cache keeps it)."""
        return self.workloads.get(key) if self.workloads is not None else None

    @property
    def ever_seen(self) -> bool:
        """Whether this manager has listed the worker's objects at least once since it started."""
        return self.workloads is not None

    def job_for(self, key: str, adapter: JobAdapter[Any] = BATCH_JOB) -> Resource | None:
        """Our job of the adapter's kind on this worker for the Workload `key` (namespace/name),
        from the cache."""
        informer = self.jobs.get(adapter.gvk)
        found = informer.by_index("prebuilt", key) if informer is not None else []
        return found[0] if found else None

    def parts_for(self, key: str, adapter: JobAdapter[Any]) -> list[Resource]:
        """Every object of the adapter's kind on this worker for the Workload `key` (a pod
        group's Pods), from the cache."""
        informer = self.jobs.get(adapter.gvk)
        return informer.by_index("prebuilt", key) if informer is not None else []

    def jobs_for(self, key: str) -> list[tuple[JobAdapter[Any], Resource]]:
        """Our jobs (every object of them) of every kind on this worker for the Workload `key`,
        with their adapters."""
        return [(adapter, job) for adapter in self.adapters for job in self.parts_for(key, adapter)]

    async def read_job(self, key: str, job_name: str, adapter: JobAdapter[Any] = BATCH_JOB) -> Resource | None:
        """Our job of the adapter's kind for the Workload `key`, read live from the worker (not
        from the cache, which may not have seen it start yet); None when it is not there.
        Raises KubeError when the worker cannot be asked."""
        client = self.client
        if client is None:
            raise ConnectionFailedError("not connected")
        namespace, _, _ = key.partition("/")
        try:
            job = await client.get(adapter.model, job_name, namespace=namespace)
        except NotFoundError:
            return None
        ours = (job.metadata.labels or {}).get(c.MULTIKUEUE_ORIGIN_LABEL) == self.origin
        return job if ours and key in adapter.remote_workload_keys(job) else None

    def all_jobs(self) -> list[tuple[JobAdapter[Any], Resource]]:
        """Every job of our origin the caches hold, with its adapter."""
        return [(adapter, job) for adapter in self.adapters if (informer := self.jobs.get(adapter.gvk)) for job in informer.items()]


def _describe(err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return "timed out opening the watches"
    return str(err) or type(err).__name__
