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
PREEMPTION_GATED = "PreemptionGated"  # needs to preempt, a preemption gate is closed: parked until it opens

_BEST_EFFORT_IMMEDIATE = {FAILED_AFTER_NOMINATION, PENDING_PREEMPTION, PREEMPTION_FAILED}


def order_key(wl: WorkloadInfo) -> tuple[int, float, str]:
    """Heap order: higher priority first, then the earlier queue-order timestamp, then UID."""
    return (-wl.priority, wl.queue_time.timestamp(), wl.uid)


Entry = tuple[tuple[int, float, str], int, str]  # (order key, version, workload key)
GroupKey = tuple[str, str, str]  # (LocalQueue when fair sharing orders them, else ""; namespace; scheduling hash)


@dataclass(eq=False)
class _Group:
    """Queued workloads of one equivalence class, in heap order. Kueue parks and requeues a
    class together (scheduling equivalence hashing); keeping it as one unit makes each of those
    moves cost the same however many workloads wait, instead of a heap push per workload."""

    key: GroupKey
    heap: list[Entry] = field(default_factory=list)
    members: dict[str, WorkloadInfo] = field(default_factory=dict)
    version: int = -1  # of its entry in its LocalQueue's heap; -1 while it has none
    # The status reason every member was last parked with, and those that joined since: only
    # these can need their Pending condition written when the class is parked again.
    stamp: str | None = None
    fresh: dict[str, WorkloadInfo] = field(default_factory=dict)

    def top(self, versions: dict[str, int]) -> Entry | None:
        heap = self.heap
        while heap:
            _, version, key = heap[0]
            if key in self.members and versions.get(key) == version:
                return heap[0]
            heapq.heappop(heap)
        return None


@dataclass
class ClusterQueueQueue:
    """One ClusterQueue's pending workloads.

    Every queued workload belongs to a group (its equivalence class, _Group). A group is live
    (its members are active, and its best member stands for it in its LocalQueue's heap) or
    parked with the class (its members are inadmissible). A workload that failed on its own
    is inadmissible outside any group until the next requeue."""

    name: str
    strategy: str = "BestEffortFIFO"
    lq_usage: Callable[[WorkloadInfo], float] | None = None
    bulk_hashes: dict[str, str] = field(default_factory=dict)
    sticky: str | None = None
    pop_cycle: int = -1
    requeue_cycle: int = -2
    _singles: dict[str, WorkloadInfo] = field(default_factory=dict)  # inadmissible on their own
    _live: dict[GroupKey, _Group] = field(default_factory=dict)
    _live_by_hash: dict[str, set[GroupKey]] = field(default_factory=dict)
    _parked: dict[GroupKey, _Group] = field(default_factory=dict)
    _parked_count: int = 0
    _active_count: int = 0
    _group_of: dict[str, _Group] = field(default_factory=dict)
    _heaps: dict[str, list[tuple[tuple[int, float, str], int, GroupKey]]] = field(default_factory=dict)
    _version: dict[str, int] = field(default_factory=dict)
    _order: dict[str, tuple[int, float, str]] = field(default_factory=dict)
    _counter: int = 0
    # Bumped by every call that adds or removes a member (push, hold, delete, pop, requeue):
    # in_order's sorted answer is kept until it changes.
    _membership: int = 0
    _sorted: tuple[int, tuple[WorkloadInfo, ...]] | None = None

    @property
    def best_effort(self) -> bool:
        return self.strategy != "StrictFIFO"

    def is_active(self, key: str) -> bool:
        group = self._group_of.get(key)
        return group is not None and self._live.get(group.key) is group

    def parked_with_class(self, key: str) -> str | None:
        """The reason its equivalence class failed, for a workload parked with that class
        without a try of its own (None otherwise): what the UnadmittedWorkloadsObservability
        gate would have written on it ("Bypassed scheduling evaluation ...")."""
        group = self._group_of.get(key)
        if group is None or self._parked.get(group.key) is not group or not group.stamp:
            return None
        return group.stamp

    @property
    def active(self) -> dict[str, WorkloadInfo]:
        """Every active workload (a new dict: for metrics, not for the scheduling path)."""
        out: dict[str, WorkloadInfo] = {}
        for group in self._live.values():
            out.update(group.members)
        return out

    @property
    def inadmissible(self) -> dict[str, WorkloadInfo]:
        """Every inadmissible workload (a new dict: for metrics, not for the scheduling path)."""
        out = dict(self._singles)
        for group in self._parked.values():
            out.update(group.members)
        return out

    def pending(self) -> int:
        return self._active_count + len(self._singles) + self._parked_count

    @property
    def has_head(self) -> bool:
        """Whether a workload waits in the heap (not parked): the next cycle would try one."""
        return self._active_count > 0

    def in_order(self) -> tuple[WorkloadInfo, ...]:
        """Every pending workload, active and inadmissible alike, in the queue's order (higher
        priority first, then the earlier queue time): Kueue's PendingWorkloadsInfo, which its
        visibility API and `kfed jobs` number positions from. Sorted once per change of the
        queue's members, not once per request (15,000 pending: 10 ms a sort)."""
        if self._sorted is not None and self._sorted[0] == self._membership:
            return self._sorted[1]
        members = [*self._singles.values()]
        for groups in (self._live, self._parked):
            for group in groups.values():
                members.extend(group.members.values())
        ordered = tuple(sorted(members, key=self._order_key))
        self._sorted = (self._membership, ordered)
        return ordered

    def _lq(self, wl: WorkloadInfo) -> str:
        return wl.queue_name if self.lq_usage is not None else ""

    def _group_key(self, wl: WorkloadInfo) -> GroupKey:
        return (self._lq(wl), wl.namespace, wl.scheduling_hash)

    def push(self, wl: WorkloadInfo) -> None:
        """Put a workload in the heap (or straight into inadmissible if its shape already failed)."""
        self._membership += 1
        was_active = self.is_active(wl.key)
        self._remove(wl.key)
        self._order.pop(wl.key, None)  # a new or changed workload: its order is computed afresh
        if self.best_effort and wl.scheduling_hash in self.bulk_hashes and not was_active:
            key = self._group_key(wl)
            group = self._parked.get(key)
            if group is None:
                group = self._parked[key] = _Group(key)
            self._add(group, wl)
            self._parked_count += 1
            return
        self._enter(wl)

    def hold(self, wl: WorkloadInfo) -> None:
        """Queue it as inadmissible on its own (a requeue backoff): pending, never a head."""
        self._membership += 1
        self._remove(wl.key)
        self._order.pop(wl.key, None)
        self._singles[wl.key] = wl

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    def _add(self, group: _Group, wl: WorkloadInfo) -> Entry:
        """Make it a member of `group`, with a heap entry whose version makes every older entry of it stale."""
        version = self._version[wl.key] = self._next()
        entry = (self._order_key(wl), version, wl.key)
        heapq.heappush(group.heap, entry)
        group.members[wl.key] = wl
        group.fresh[wl.key] = wl
        self._group_of[wl.key] = group
        return entry

    def _enter(self, wl: WorkloadInfo) -> None:
        """Make it active: a member of its live group."""
        key = self._group_key(wl)
        group = self._live.get(key)
        if group is None:
            group = self._live[key] = _Group(key)
            self._live_by_hash.setdefault(key[2], set()).add(key)
        entry = self._add(group, wl)
        self._active_count += 1
        if group.heap[0] is entry:  # its new best: it stands for the group from now on
            self._advertise(group, entry)

    def _advertise(self, group: _Group, top: Entry | None) -> None:
        if top is None:
            group.version = -1
            return
        group.version = self._next()
        heapq.heappush(self._heaps.setdefault(group.key[0], []), (top[0], group.version, group.key))

    def _remove(self, key: str) -> None:
        """Out of the queue, wherever it is (its heap entries go stale)."""
        self._singles.pop(key, None)
        group = self._group_of.pop(key, None)
        if group is not None:
            del group.members[key]
            group.fresh.pop(key, None)
            del self._version[key]
            if self._parked.get(group.key) is group:
                self._parked_count -= 1
            elif self._live.get(group.key) is group:
                self._active_count -= 1

    def _order_key(self, wl: WorkloadInfo) -> tuple[int, float, str]:
        """order_key, kept while the workload stays queued: its priority and queue time change
        only through push (an update, or a requeue after eviction), which forgets it."""
        found = self._order.get(wl.key)
        if found is None:
            found = self._order[wl.key] = order_key(wl)
        return found

    def delete(self, key: str) -> None:
        self._membership += 1
        self._remove(key)
        self._order.pop(key, None)
        if self.sticky == key:
            self.sticky = None

    def _top(self, heap: list[tuple[tuple[int, float, str], int, GroupKey]]) -> tuple[_Group, Entry] | None:
        """The best live group of a LocalQueue's heap and its best member, dropping stale entries."""
        while heap:
            order, version, key = heap[0]
            group = self._live.get(key)
            if group is None or group.version != version:
                heapq.heappop(heap)
                continue
            top = group.top(self._version)
            if top is None or top[0] != order:  # its best member left: stand for it anew
                heapq.heappop(heap)
                self._advertise(group, top)
                continue
            return group, top
        return None

    def pop(self, cycle: int) -> WorkloadInfo | None:
        """The head, removed from the queue ("inflight") until it is requeued or admitted."""
        self._membership += 1
        self.pop_cycle = cycle
        if self.best_effort and self.sticky is not None and self.is_active(self.sticky):
            wl = self._group_of[self.sticky].members[self.sticky]
            self._remove(wl.key)
            return wl
        best: tuple[float, tuple[int, float, str]] | None = None
        chosen: tuple[str, _Group, Entry] | None = None
        for lq, heap in self._heaps.items():
            found = self._top(heap)
            if found is None:
                continue
            group, top = found
            wl = group.members[top[2]]
            rank = (self.lq_usage(wl) if self.lq_usage is not None else 0.0, top[0])
            if best is None or rank < best:
                best, chosen = rank, (lq, group, top)
        if chosen is None:
            return None
        lq, group, top = chosen
        wl = group.members[top[2]]
        self._remove(wl.key)
        heapq.heappop(self._heaps[lq])  # the group's entry: it stands anew for its next member
        self._advertise(group, group.top(self._version))
        return wl

    def requeue(self, wl: WorkloadInfo, reason: str, *, pending_flavors: bool = False, status_reason: str = "") -> list[WorkloadInfo]:
        """Kueue's requeueIfNotPresent after a failed attempt; returns the workloads bulk-moved
        with it whose Pending condition may not say so yet (the caller writes it: the others
        were parked the same way before and have not changed since)."""
        self._membership += 1
        if reason == PENDING_PREEMPTION:
            self.sticky = wl.key
        immediate = reason in _BEST_EFFORT_IMMEDIATE if self.best_effort else reason != NAMESPACE_MISMATCH
        if immediate or self.requeue_cycle >= self.pop_cycle or pending_flavors:
            self._enter(wl)
            return []
        self._singles[wl.key] = wl
        moved: list[WorkloadInfo] = []
        if self.best_effort and reason in (NO_FIT, PREEMPTION_NO_CANDIDATES):
            # Scheduling equivalence hashing: the same shape would fail the same way.
            self.bulk_hashes[wl.scheduling_hash] = status_reason or "PendingEvaluation"
            for key in sorted(self._live_by_hash.pop(wl.scheduling_hash, ())):
                group = self._live.pop(key)
                group.version = -1
                self._active_count -= len(group.members)
                moved.extend((group.fresh if group.stamp == status_reason else group.members).values())
                group.stamp, group.fresh = status_reason, {}
                self._park(group)
        return moved

    def _park(self, group: _Group) -> None:
        self._parked_count += len(group.members)
        parked = self._parked.get(group.key)
        if parked is None:
            self._parked[group.key] = group
            return
        for member in group.members.values():  # rare: one parked before, and more since
            del self._group_of[member.key]
            self._add(parked, member)

    def requeue_inadmissible(self, cycle: int, still_admissible: Callable[[WorkloadInfo], bool] | None = None) -> int:
        """Move every inadmissible workload back to the heap (Kueue's QueueInadmissibleWorkloads)."""
        self.requeue_cycle = cycle
        self.bulk_hashes.clear()
        count = 0
        parked, self._parked, self._parked_count = self._parked, {}, 0
        for key, group in parked.items():
            if not group.members:
                continue
            # A group shares its namespace, all that still_admissible looks at.
            if still_admissible is not None and not still_admissible(next(iter(group.members.values()))):
                for member in group.members.values():
                    del self._group_of[member.key]
                    del self._version[member.key]
                    self._singles[member.key] = member
                continue
            count += len(group.members)
            live = self._live.get(key)
            if live is None:
                self._live[key] = group
                self._live_by_hash.setdefault(key[2], set()).add(key)
                self._active_count += len(group.members)
                self._advertise(group, group.top(self._version))
            else:
                for member in group.members.values():
                    del self._group_of[member.key]
                    self._enter(member)
        # After the groups, so that a group goes back whole rather than into one its failed
        # head (a single) would otherwise have started anew.
        moving = [wl for wl in self._singles.values() if still_admissible is None or still_admissible(wl)]
        for wl in moving:
            del self._singles[wl.key]
            self._enter(wl)
        return count + len(moving)
