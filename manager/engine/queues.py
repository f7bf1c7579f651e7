"""Pending workloads per ClusterQueue: Kueue's heap, inadmissible set and requeue rules."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from manager.engine.workload import WorkloadInfo

# Requeue reasons (pkg/cache/queue).
NO_FIT = "NoFit"
PREEMPTION_NO_CANDIDATES = "PreemptionNoCandidates"
PENDING_PREEMPTION = "PendingPreemption"
PREEMPTION_FAILED = "PreemptionFailed"
NAMESPACE_MISMATCH = "NamespaceMismatch"
FAILED_AFTER_NOMINATION = "FailedAfterNomination"
GENERIC = "Generic"

_BEST_EFFORT_IMMEDIATE = {FAILED_AFTER_NOMINATION, PENDING_PREEMPTION, PREEMPTION_FAILED}


def order_key(wl: WorkloadInfo) -> tuple[int, float, str]:
    """Heap order: higher priority first, then the earlier queue-order timestamp, then UID."""
    return (-wl.priority, wl.queue_time.timestamp(), wl.uid)


@dataclass
class ClusterQueueQueue:
    """One ClusterQueue's pending workloads."""

    name: str
    strategy: str = "BestEffortFIFO"
    lq_usage: Callable[[WorkloadInfo], float] | None = None
    active: dict[str, WorkloadInfo] = field(default_factory=dict)
    inadmissible: dict[str, WorkloadInfo] = field(default_factory=dict)
    bulk_hashes: dict[str, str] = field(default_factory=dict)
    sticky: str | None = None
    pop_cycle: int = -1
    requeue_cycle: int = -2
    _heaps: dict[str, list[tuple[tuple[int, float, str], int, str]]] = field(default_factory=dict)
    _version: dict[str, int] = field(default_factory=dict)
    _order: dict[str, tuple[int, float, str]] = field(default_factory=dict)
    _counter: int = 0

    @property
    def best_effort(self) -> bool:
        return self.strategy != "StrictFIFO"

    def pending(self) -> int:
        return len(self.active) + len(self.inadmissible)

    def _lq(self, wl: WorkloadInfo) -> str:
        return wl.queue_name if self.lq_usage is not None else ""

    def push(self, wl: WorkloadInfo) -> None:
        """Put a workload in the heap (or straight into inadmissible if its shape already failed)."""
        self.inadmissible.pop(wl.key, None)
        self._order.pop(wl.key, None)  # a new or changed workload: its order is computed afresh
        if self.best_effort and wl.scheduling_hash in self.bulk_hashes and wl.key not in self.active:
            self.inadmissible[wl.key] = wl
            return
        self._push_active(wl)

    def _push_active(self, wl: WorkloadInfo) -> None:
        heapq.heappush(self._heaps.setdefault(self._lq(wl), []), self._enter(wl))

    def _enter(self, wl: WorkloadInfo) -> tuple[tuple[int, float, str], int, str]:
        """Make it active; its heap entry, whose version makes every older entry of it stale."""
        self._counter += 1
        self._version[wl.key] = self._counter
        self.active[wl.key] = wl
        return (self._order_key(wl), self._counter, wl.key)

    def _order_key(self, wl: WorkloadInfo) -> tuple[int, float, str]:
        """order_key, kept while the workload stays queued: its priority and queue time change
        only through push (an update, or a requeue after eviction), which forgets it."""
        found = self._order.get(wl.key)
        if found is None:
            found = self._order[wl.key] = order_key(wl)
        return found

    def _push_all_active(self, workloads: list[WorkloadInfo]) -> None:
        """Many at once (a requeue of the parked ones): one heapify, instead of a push each,
        after dropping the entries of workloads that left or were pushed again."""
        if len(workloads) < 64:
            for wl in workloads:
                self._push_active(wl)
            return
        added: dict[str, list[tuple[tuple[int, float, str], int, str]]] = {}
        for wl in workloads:
            added.setdefault(self._lq(wl), []).append(self._enter(wl))
        for lq, entries in added.items():
            heap = self._heaps.setdefault(lq, [])
            heap[:] = [e for e in heap if e[2] in self.active and self._version.get(e[2]) == e[1]] + entries
            heapq.heapify(heap)

    def delete(self, key: str) -> None:
        self.active.pop(key, None)
        self.inadmissible.pop(key, None)
        self._order.pop(key, None)
        if self.sticky == key:
            self.sticky = None

    def _top(self, heap: list[tuple[tuple[int, float, str], int, str]]) -> str | None:
        while heap:
            _, version, key = heap[0]
            if key in self.active and self._version.get(key) == version:
                return key
            heapq.heappop(heap)
        return None

    def pop(self, cycle: int) -> WorkloadInfo | None:
        """The head, removed from the queue ("inflight") until it is requeued or admitted."""
        self.pop_cycle = cycle
        if self.best_effort and self.sticky is not None and self.sticky in self.active:
            return self.active.pop(self.sticky)
        best_key: str | None = None
        best: tuple[float, tuple[int, float, str]] | None = None
        for heap in self._heaps.values():
            key = self._top(heap)
            if key is None:
                continue
            wl = self.active[key]
            rank = (self.lq_usage(wl) if self.lq_usage is not None else 0.0, self._order_key(wl))
            if best is None or rank < best:
                best, best_key = rank, key
        if best_key is None:
            return None
        return self.active.pop(best_key)

    def requeue(self, wl: WorkloadInfo, reason: str, *, pending_flavors: bool = False, status_reason: str = "") -> list[WorkloadInfo]:
        """Kueue's requeueIfNotPresent after a failed attempt; returns workloads bulk-moved with it."""
        if reason == PENDING_PREEMPTION:
            self.sticky = wl.key
        immediate = reason in _BEST_EFFORT_IMMEDIATE if self.best_effort else reason != NAMESPACE_MISMATCH
        if immediate or self.requeue_cycle >= self.pop_cycle or pending_flavors:
            self._push_active(wl)
            return []
        self.inadmissible[wl.key] = wl
        moved: list[WorkloadInfo] = []
        if self.best_effort and reason in (NO_FIT, PREEMPTION_NO_CANDIDATES):
            # Scheduling equivalence hashing: the same shape would fail the same way.
            self.bulk_hashes[wl.scheduling_hash] = status_reason or "PendingEvaluation"
            for key in [k for k, other in self.active.items() if other.scheduling_hash == wl.scheduling_hash]:
                other = self.active.pop(key)
                self.inadmissible[key] = other
                moved.append(other)
        return moved

    def requeue_inadmissible(self, cycle: int, still_admissible: Callable[[WorkloadInfo], bool] | None = None) -> int:
        """Move every inadmissible workload back to the heap (Kueue's QueueInadmissibleWorkloads)."""
        self.requeue_cycle = cycle
        self.bulk_hashes.clear()
        moving = [wl for wl in self.inadmissible.values() if still_admissible is None or still_admissible(wl)]
        for wl in moving:
            del self.inadmissible[wl.key]
        self._push_all_active(moving)
        return len(moving)
