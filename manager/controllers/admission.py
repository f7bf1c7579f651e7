"""Queues and admission on a live cluster: Kueue's queue manager, cache, scheduler and
workload controller, run over the engine's AdmissionState.

Informer events are applied to the state as they arrive (one event loop, no locks). The
loop then runs scheduling cycles until one changes nothing or evicts, and writes what the
engine decided: Workload status patches with a resourceVersion precondition (a conflict
undoes the assumed decision; the next observed object decides), Events, and ClusterQueue and
LocalQueue status. After a cycle that evicts, the next waits until those evictions are
written, as Kueue issues a cycle's preemptions within the cycle. Only the leader runs cycles and writes; a standby keeps its state
current so that it can take over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.config import Configuration
from manager.api.core import Namespace
from manager.api.meta import newest_copy, older_resource_version, utcnow
from manager.controllers.caches import Caches
from manager.controllers.events import EventRecorder, InvolvedObject
from manager.controllers.queue_metrics import (
    Finished,
    admitted_written,
    cluster_queue_samples,
    eviction_release,
    finished_entry,
    finished_transition,
    local_queue_samples,
    priority_class,
    record_write,
)
from manager.engine.scheduler import Refusal
from manager.engine.state import AdmissionState
from manager.engine.status import EventRecord, admitted_message, since_reservation
from manager.engine.workload import WorkloadInfo, has_deactivation_target, is_active, is_finished
from manager.engine.writes import StatusWrite
from manager.kube.client import KubeClient
from manager.kube.errors import ConflictError, KubeError, NotFoundError
from manager.kube.ratelimit import DEFERRABLE, REQUEST, TurnSemaphore
from manager.runtime.metrics import Metrics, Sample
from manager.runtime.runnables import Runnable, leader, while_leading

log = logging.getLogger("kfed.admission")

TICK = 1.0  # the longest the loop waits without an event (time-based requeues)
CYCLES_PER_ROUND = 200
# Kueue's scheduler loop (pkg/util/wait.UntilWithBackoff) runs cycles as long as any heap has a
# head, waiting 1 ms after a cycle that admits nothing, doubling up to 10 ms while none does, and
# going on at once after one that admits. kfed's loop does the same while heads wait, and waits
# for an event otherwise; the pause also keeps a stream of watch events from running a full
# round for each of them.
FRUITLESS_PAUSE_FIRST, FRUITLESS_PAUSE_MAX = 0.001, 0.010


def fruitless_round_pause(rounds: int) -> float:
    """The pause before the next round after `rounds` rounds in a row that admitted nothing."""
    if rounds <= 0:
        return 0.0
    return min(FRUITLESS_PAUSE_FIRST * float(2 ** min(rounds - 1, 16)), FRUITLESS_PAUSE_MAX)


# The longest the loop waits for the last round's eviction writes before it decides again (a
# write stuck behind a slow apiserver must not stop admission elsewhere for good).
EVICTIONS_TIMEOUT = 10.0

# Queue status writes at most this often: Kueue's UpdatesBatchPeriod (pkg/constants), 1 s.
STATUS_INTERVAL = 1.0


SEND, HOLD, REPLACE = "send", "hold", "replace"


def issue_action(write: StatusWrite, *, in_flight: bool, unsent_message: bool) -> str:
    """What to do with a new status write of a workload: SEND it; HOLD it until the
    workload's write in flight is done (one write per workload at a time); or REPLACE that
    write, when it only carries a message and waits for its turn while this one moves quota.
    The message waits behind every other workload's admission; this admission must not wait
    behind it. Computed from the same object, it carries everything the message's status
    would have; only the message's Pending Event, for a wait already over, is not sent."""
    if not in_flight:
        return SEND
    return REPLACE if write.moves_quota and unsent_message else HOLD


def status_patch(write: StatusWrite, current: kueue.WorkloadStatus | None) -> dict[str, Any]:
    """A merge patch that sets the owned status fields and clears those the engine dropped."""
    body = write.status.to_dict()
    for name in ("admission", "resourceRequests", "clusterName", "nominatedClusterNames", "requeueState"):
        if name not in body and current is not None and current.to_dict().get(name) is not None:
            body[name] = None
    return {"metadata": {"resourceVersion": write.resource_version}, "status": body}


class AdmissionController:
    def __init__(
        self,
        client: KubeClient,
        caches: Caches,
        *,
        metrics: Metrics,
        config: Configuration | None = None,
        recorder: EventRecorder | None = None,
        write_concurrency: int = 32,
        clock: Callable[[], datetime] = utcnow,
        release_bare_evictions: bool = False,
    ) -> None:
        self.client = client
        self.caches = caches
        # random.random: Kueue's backoff jitter.
        self.state = AdmissionState(config, jitter=random.random, release_bare_evictions=release_bare_evictions)
        self.recorder = recorder
        self.clock = clock
        self._wake = asyncio.Event()
        # The write task of each workload with one in flight (one at a time per workload).
        self._inflight: dict[str, asyncio.Task[None]] = {}
        # Those of them that only carry a message and still wait for a place at the write
        # semaphore: not sent yet, so an admission or eviction of the same workload replaces them.
        self._unsent: set[str] = set()
        # Flushed while a write of theirs was in flight: flushed again once that write is done.
        # (Re-flushing them every round until then rebuilt their status once per event, for as
        # many workloads as had writes queued behind the client's rate limit.)
        self._held: set[str] = set()
        self._writes = TurnSemaphore(write_concurrency)
        # The eviction writes of the last round: the next cycle decides once they have reached
        # the apiserver, as Kueue's cycle issues its preemptions before the next one starts.
        self._evicting: set[asyncio.Task[None]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._queue_status: dict[str, dict[str, Any]] = {}
        self._deactivate: set[str] = set()
        self.metrics = metrics
        self._finished: dict[str, Finished] = {}  # finished Workloads that still exist
        self._admitted = self.metrics.counter("kfed_admitted_workloads_total", "Workloads admitted, by ClusterQueue.", ("cluster_queue",))
        self._preempted = self.metrics.counter(
            "kfed_preempted_workloads_total", "Workloads preempted, by ClusterQueue.", ("cluster_queue",)
        )
        self._cycle_seconds = self.metrics.histogram("kfed_admission_attempt_duration_seconds", "Scheduling cycle duration.")
        self._pending = self.metrics.gauge("kfed_pending_workloads", "Pending workloads, by ClusterQueue.", ("cluster_queue",))
        self._wire()
        self.metrics.add_gauges(self._kueue_gauges)

    # --- events from the caches --------------------------------------------------------------------
    def _wire(self) -> None:
        s, caches = self.state, self.caches

        def on(informer: Any, upsert: Any, delete: Any) -> None:
            def handler(kind: str, old: Any, new: Any) -> None:
                if new is None:
                    delete(old)
                else:
                    upsert(new)
                self._wake.set()

            informer.add_handler(handler)

        on(caches.flavors, s.upsert_flavor, lambda o: s.delete_flavor(o.name))
        on(caches.cohorts, s.upsert_cohort, lambda o: s.delete_cohort(o.name))
        on(caches.cluster_queues, s.upsert_cluster_queue, lambda o: s.delete_cluster_queue(o.name))
        on(caches.local_queues, s.upsert_local_queue, lambda o: s.delete_local_queue(o.key))
        on(caches.admission_checks, s.upsert_admission_check, lambda o: s.delete_admission_check(o.name))
        on(caches.workload_priority_classes, s.upsert_priority_class, lambda o: s.delete_priority_class("WorkloadPriorityClass", o.name))
        on(caches.priority_classes, s.upsert_priority_class, lambda o: s.delete_priority_class("PriorityClass", o.name))
        on(caches.namespaces, self._namespace, lambda o: s.delete_namespace(o.name))
        on(caches.limit_ranges, s.upsert_limit_range, lambda o: s.delete_limit_range(o.namespace, o.name))
        on(caches.workloads, self._workload, lambda wl: s.delete_workload(wl.key, self.clock()))
        caches.workloads.add_handler(self._observe_workload)

    def _workload(self, wl: kueue.Workload) -> None:
        self.state.upsert_workload(wl, self.clock())
        if is_active(wl) and has_deactivation_target(wl):
            self._deactivate.add(wl.key)

    def _observe_workload(self, kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
        """Finished Workloads, counted while they exist, whoever finished them: every replica
        keeps these gauges."""
        if new is None or not is_finished(new):
            gone = new or old
            if gone is not None:
                self._finished.pop(gone.key, None)
        else:
            lq = self.caches.local_queues.get(f"{new.namespace}/{new.spec.queue_name}")
            self._finished[new.key] = finished_entry(new, lq.spec.cluster_queue or "" if lq is not None else "")

    def _count_transitions(self, kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
        """Kueue's counters that follow a Workload's updates, whoever wrote them: each Workload
        as it finishes, and the time an eviction took to give the quota back. Only the leader
        counts (see `runnables`), as only Kueue's leader runs the reconciler that counts."""
        if old is None or new is None:
            return
        if finished_transition(old, new):
            entry = self._finished.get(new.key)
            if entry is not None and entry.cluster_queue:
                self.metrics.finished(entry.cluster_queue, entry.local_queue, priority_class(new))
        released = eviction_release(old, new, self.clock())
        if released is not None:
            self.metrics.eviction_released(*released)

    def _kueue_gauges(self) -> list[Sample]:
        now = self.clock()
        finished = list(self._finished.values())
        samples = cluster_queue_samples(self.state, finished, now)
        if self.metrics.local_queue_metrics:
            samples += local_queue_samples(self.state, finished, now, self.metrics.exposes)
        return samples

    def _cohorts_of(self, cluster_queue: str) -> list[str]:
        cq = self.state.cache.cluster_queues.get(cluster_queue)
        return [node.name for node in cq.node.path()[1:]] if cq is not None else []

    def _namespace(self, ns: Namespace) -> None:
        self.state.upsert_namespace(ns.name, dict(ns.metadata.labels or {}))

    def wake(self) -> None:
        self._wake.set()

    def refuse_with(self, refuse: Refusal | None) -> None:
        """A rule outside the quota tree that keeps workloads from reserving quota (MultiKueue's:
        no worker could ever admit it)."""
        self.state.set_refusal(refuse)

    def pending_in_order(self, cluster_queue: str) -> Sequence[WorkloadInfo] | None:
        """A ClusterQueue's pending Workloads in the scheduler's order (None: no such queue), for
        the visibility API on any replica. The state this controller owns is first brought to the
        latest configuration, as its next cycle would: a standby runs no cycle, and a ClusterQueue
        made since it started would have no queue yet."""
        self.state.rebuild_if_needed(self.clock())
        queue = self.state.scheduler.queues.get(cluster_queue)
        return queue.in_order() if queue is not None else None

    def refusal_may_have_changed(self) -> None:
        """What the refusal rule reads changed: the inadmissible workloads of every queue with
        an admission check are tried again."""
        self.state.requeue_refused(name for name, cq in self.state.cache.cluster_queues.items() if cq.checks)
        self._wake.set()

    # --- the loop ------------------------------------------------------------------------------------
    def runnables(self) -> list[Runnable]:
        """Admission writes, so it runs on the lease holder alone; the caches feed every
        replica's AdmissionState, so a new leader starts from a warm state."""
        return [
            leader("admission", self.run),
            while_leading("admission-counters", self.caches.workloads, self._count_transitions),
        ]

    async def run(self) -> None:
        await self.caches.wait_synced()
        log.info("admission caches synced", extra={"workloads": len(self.caches.workloads.store)})
        status_task = asyncio.create_task(self._status_loop(), name="queue-status")
        try:
            await self._loop()
        finally:
            status_task.cancel()

    async def _status_loop(self) -> None:
        """ClusterQueue and LocalQueue status, written apart from the admission loop so that a
        slow apiserver delays status, never admission."""
        while True:
            await asyncio.sleep(STATUS_INTERVAL)  # the status write period, not a sync point
            try:
                await self._write_queue_status(self.clock())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("queue status round failed; continuing")

    def _wait_time(self) -> float:
        """How long the loop may sleep without an event: TICK, or less when a batched requeue of
        inadmissible workloads falls due sooner (`Scheduler.next_requeue_at`)."""
        due = self.state.scheduler.next_requeue_at()
        if due is None:
            return TICK
        return min(TICK, max(0.0, (due - self.clock()).total_seconds()))

    async def _loop(self) -> None:
        fruitless = 0
        while True:
            if fruitless:
                await asyncio.sleep(fruitless_round_pause(fruitless))  # pacing, as Kueue's scheduler loop
            if not self.state.scheduler.has_heads():
                # Nothing to try until something changes (an event) or a timer falls due. While
                # a head waits in a heap (a preemptor for its victims, one that lost its place
                # in a cycle), the loop goes on after the pause, as Kueue's scheduler does.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=self._wait_time())
            self._wake.clear()
            if self._evicting:
                await asyncio.wait(set(self._evicting), timeout=EVICTIONS_TIMEOUT)
            try:
                admitted = await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("admission round failed; continuing")
                admitted = False
            fruitless = 0 if admitted else fruitless + 1

    async def _round(self) -> bool:
        """Cycles until one changes nothing, then the writes; whether anything was admitted."""
        await self._deactivate_targets()
        now = self.clock()
        self.state.rebuild_if_needed(now)
        admitted = False
        for i in range(CYCLES_PER_ROUND):
            started = time.perf_counter()
            result = self.state.cycle(now)
            seconds = time.perf_counter() - started
            self._cycle_seconds.observe(seconds)
            if result.heads:
                self.metrics.admission_attempt(admitted=bool(result.admitted), seconds=seconds)
            for wl in result.admitted:
                self._admitted.inc(wl.admission_cq)
            admitted = admitted or bool(result.admitted)
            if not result.changed or result.preemptions:
                # After a cycle that evicts, its writes go out before the next cycle decides.
                break
            if i % 20 == 19:
                await asyncio.sleep(0)  # let watches and writes make progress during a long round
            now = self.clock()
        self._issue(self.state.flush(now))
        return admitted

    async def _deactivate_targets(self) -> None:
        """Kueue's workload controller: a workload marked DeactivationTarget (by a check, or by
        the MultiKueue manager that evicted it there) gets spec.active=false; the eviction
        follows from the change."""
        keys, self._deactivate = self._deactivate, set()
        for key in sorted(keys):
            wl = self.caches.workloads.get(key)
            if wl is None or not is_active(wl):
                continue
            patch = {"metadata": {"resourceVersion": wl.metadata.resource_version}, "spec": {"active": False}}
            try:
                await self.client.patch(kueue.Workload, wl.name, patch, namespace=wl.namespace)
            except (ConflictError, NotFoundError):
                continue  # the next event brings the new object back here
            except KubeError as err:
                log.warning("cannot deactivate the workload", extra={"key": key, "error": str(err)})
                self._deactivate.add(key)

    def _issue(self, writes: list[StatusWrite]) -> None:
        for write in writes:
            earlier = self._inflight.get(write.key)
            action = issue_action(write, in_flight=earlier is not None, unsent_message=write.key in self._unsent)
            if action == HOLD:
                self._held.add(write.key)  # one write per workload at a time; redo after it
                continue
            if action == REPLACE and earlier is not None:
                earlier.cancel()
                self._unsent.discard(write.key)
                self._held.discard(write.key)
            task = asyncio.create_task(self._write(write))
            self._inflight[write.key] = task
            if write.preempting_cq:
                self._evicting.add(task)
                task.add_done_callback(self._evicting.discard)
            if not write.moves_quota:
                self._unsent.add(write.key)  # a message: a write that moves quota may replace it
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write(self, write: StatusWrite) -> None:
        try:
            # Admissions and evictions go first: they move quota, while the other writes only
            # say why a workload still waits.
            async with self._writes.hold(REQUEST if write.moves_quota else DEFERRABLE):
                self._unsent.discard(write.key)
                current = self.state.infos.get(write.key)
                before = current.obj if current is not None else None
                patch = status_patch(write, before.status if before is not None else None)
                stored = await self.client.patch(kueue.Workload, write.name, patch, namespace=write.namespace, subresource="status")
            self.state.write_succeeded(write, stored)
            for event in write.events:
                self._emit(event)
            if before is not None:
                preemption = record_write(self.metrics, write, before, self._cohorts_of, self.clock())
                if preemption is not None:
                    self._preempted.inc(preemption.victim_cq)
        except (ConflictError, NotFoundError) as err:
            log.debug("workload write lost a race", extra={"key": write.key, "error": str(err)})
            gone = isinstance(err, NotFoundError)
            self.state.write_failed(write, self.clock(), await self._copy_to_plan_from(write, may_read=not gone))
        except KubeError as err:
            log.warning("workload status write failed", extra={"key": write.key, "error": str(err)})
            self.state.write_failed(write, self.clock(), await self._copy_to_plan_from(write, may_read=False))
        finally:
            # A write replaced before it was sent (see _issue) leaves the workload to its successor.
            if self._inflight.get(write.key) is asyncio.current_task():
                del self._inflight[write.key]
                self._unsent.discard(write.key)
                if write.key in self._held:
                    self._held.discard(write.key)
                    self.state.redo(write.key)
                self._wake.set()

    def _emit(self, event: EventRecord) -> None:
        if self.recorder is not None:
            self.recorder.emit(
                InvolvedObject(f"{c.GROUP}/{c.STORAGE_VERSION}", "Workload", event.namespace, event.name, event.uid),
                type=event.type,
                reason=event.reason,
                message=event.message,
            )

    def admitted_by_check(self, before: kueue.Workload, written: kueue.Workload) -> None:
        """The MultiKueue check wrote `Admitted` with its `Ready` (by the engine's rule,
        `admitted_condition`), in place of the engine's own write: the Event and the metrics
        Kueue's workload controller gives an admission after its checks, as if it wrote it."""
        status = written.status
        if status is None or status.admission is None:
            return
        now = self.clock()
        cq = status.admission.cluster_queue
        waited = since_reservation(before.status or kueue.WorkloadStatus(), now)
        uid = written.metadata.uid or ""
        self._emit(EventRecord(written.namespace, written.name, uid, "Normal", "Admitted", admitted_message(cq, waited)))
        admitted_written(self.metrics, before, cq, self._cohorts_of(cq), now, checks_wait=waited)

    async def _copy_to_plan_from(self, write: StatusWrite, *, may_read: bool) -> kueue.Workload | None:
        """The Workload to plan again from after a write of it failed (None: it is gone).

        The newest copy known (the cache's, or the one the engine holds from our own writes)
        if it is newer than the copy the write was computed from; planning again from that one
        would only lose again, so then it is read (`may_read`: a 409, not a Workload found gone
        nor a failed request). The engine never goes back to a copy older than the one it holds
        (`AdmissionState.write_failed`)."""
        cached = self.caches.workloads.get(write.key)
        known = newest_copy(cached, self.state.held_copy(write.key))
        if not may_read or (known is not None and older_resource_version(write.resource_version, known.metadata.resource_version)):
            return cached
        try:
            fetched = await self.client.get(kueue.Workload, write.name, namespace=write.namespace)
        except NotFoundError:
            return None
        except KubeError as err:
            log.warning("workload read after a lost race failed", extra={"key": write.key, "error": str(err)})
            return cached
        cached_now = self.caches.workloads.get(write.key)
        if cached is not None and cached_now is None:
            return None  # deleted while it was read: the delete was applied already
        return newest_copy(fetched, cached_now)

    async def _write_queue_status(self, now: datetime) -> None:
        writes: list[tuple[Any, str, str | None, Any, Any]] = []
        for cq in self.caches.cluster_queues.items():
            status = self.state.cluster_queue_status(cq.name, now)
            if status is None:
                continue
            self._pending.set(status.pending_workloads or 0, cq.name)
            writes.append((kueue.ClusterQueue, cq.name, None, status, cq.status))
        lq_statuses = self.state.local_queue_statuses(now)
        for lq in self.caches.local_queues.items():
            lq_status = lq_statuses.get(lq.key)
            if lq_status is not None:
                writes.append((kueue.LocalQueue, lq.name, lq.namespace, lq_status, lq.status))
        pending = []
        for model, name, namespace, status, current in writes:
            body = status.to_dict()
            key = f"{model.KIND}/{namespace or ''}/{name}"
            if self._queue_status.get(key) == body:
                continue
            if current is not None and _same_queue_status(current.to_dict(), body):
                self._queue_status[key] = body
                continue
            pending.append(self._write_one_status(model, name, namespace, key, body))
        await asyncio.gather(*pending)

    async def _write_one_status(self, model: Any, name: str, namespace: str | None, key: str, body: dict[str, Any]) -> None:
        async with self._writes.hold(DEFERRABLE):
            try:
                # Deferrable at the semaphore only: waiting for a token while holding a place
                # would keep admissions from the place.
                await self.client.patch(model, name, {"status": body}, namespace=namespace, subresource="status")
                self._queue_status[key] = body
            except KubeError as err:
                log.warning("queue status write failed", extra={"key": key, "error": str(err)})


def _same_queue_status(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    def strip(status: dict[str, Any]) -> dict[str, Any]:
        out = dict(status)
        out["conditions"] = [{k: v for k, v in cond.items() if k != "lastTransitionTime"} for cond in status.get("conditions") or []]
        return out

    return strip(current) == strip(desired)
