"""Capacity-aware dispatch (pure): where a manager Workload fits among the workers.

Each worker's quotas are its ResourceFlavors, ClusterQueues, Cohorts and LocalQueues as the
manager watches them, with the usage its ClusterQueues report (`status.flavorsReservation`)
plus the copies this manager has sent there that are not admitted yet. The fit is the
engine's own flavor assignment (`FlavorAssigner`, without preemption) on that worker's quota
tree, through the LocalQueue of the Workload's name in its namespace, as the worker's Kueue
(or kfed) will run it.

`choose_worker` picks one worker: where it fits now, the most free capacity left, then by
name. A Workload that fits nowhere now waits; one that would fit no worker even with every
queue empty is said so, with each worker's largest offer.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from manager.api.kueue import ClusterQueue, Cohort, KueueResource, LocalQueue, ResourceFlavor, Workload
from manager.engine.cache import Cache, ClusterQueueInfo
from manager.engine.flavors import FIT, Assignment, FlavorAssigner
from manager.engine.requests import RequestError
from manager.engine.units import FlavorResource, amount, format_amount
from manager.engine.workload import WorkloadInfo, build_info

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# How MultiKueue's refusal begins (the Workload's QuotaReserved message, `kfed explain`).
NEVER_FITS = "no worker can ever admit it"


@dataclass(frozen=True)
class WorkerQuotas:
    """One worker's queue objects, as last seen."""

    flavors: Sequence[ResourceFlavor] = ()
    cluster_queues: Sequence[ClusterQueue] = ()
    cohorts: Sequence[Cohort] = ()
    local_queues: Sequence[LocalQueue] = ()

    @functools.cached_property
    def tree_key(self) -> Hashable | None:
        """What names the specs the quota tree is built from (flavors, ClusterQueues, Cohorts):
        each object's uid and generation, which the apiserver raises at every spec change and
        never at a status change. None when one lacks them (not read from an apiserver): the
        tree is then built for each fit."""
        identities = [_spec_identity(obj) for obj in (*self.flavors, *self.cluster_queues, *self.cohorts)]
        return None if None in identities else tuple(identities)


def _spec_identity(obj: KueueResource) -> Hashable | None:
    meta = obj.metadata
    if meta.uid is None or meta.generation is None:
        return None
    return (obj.KIND, meta.name, meta.uid, meta.generation)


def may_free_room(kind: str, old: Any, new: Any) -> bool:
    """Whether a status-only change of a worker's queue object could let a waiting Workload fit
    there: a ClusterQueue whose reservations went down somewhere. An admission there only adds
    to them, and a LocalQueue's or flavor's status says nothing a fit reads."""
    if kind != ClusterQueue.KIND or old is None or new is None:
        return old is None or new is None
    before, after = _usage_of(old), _usage_of(new)
    return any(after.get(fr, 0) < value for fr, value in before.items())


@dataclass(frozen=True)
class Fit:
    """A Workload on one worker: whether it fits in what is free now, whether it would fit with
    the worker's queues empty, the smallest share of a used quota left free after it (for ties),
    what the worker could ever give per resource, and why it does not fit."""

    now: bool
    ever: bool
    free_after: float = 0.0
    offers: dict[str, int] = field(default_factory=dict)  # resource -> engine units
    reason: str = ""
    missing: bool = False  # the worker lacks the LocalQueue or its ClusterQueue: `reason` says which
    cluster_queue: str = ""  # the worker's ClusterQueue that would admit it
    usage: dict[FlavorResource, int] = field(default_factory=dict)  # the worker's flavors, when it fits now


def _usage_of(cq: ClusterQueue) -> dict[FlavorResource, int]:
    usage: dict[FlavorResource, int] = {}
    for flavor in (cq.status.flavors_reservation if cq.status else None) or []:
        for resource in flavor.resources or []:
            value = amount(resource.name, resource.total) if resource.total is not None else 0
            if value:
                usage[(flavor.name, resource.name)] = value
    return usage


def _assign(cache: Cache, cq: ClusterQueueInfo, info: WorkloadInfo) -> Assignment:
    return FlavorAssigner(cache, cq, info, oracle=_no_preemption, fair_sharing=False).assign()


def _no_preemption(cq: ClusterQueueInfo, wl: WorkloadInfo, fr: FlavorResource, quantity: int) -> tuple[str, int]:
    return "NoCandidates", 0


def _offers(cq: ClusterQueueInfo) -> dict[str, int]:
    """Per resource, the most one flavor of this ClusterQueue could ever give a Workload: its
    subtree's quota (nominal plus what it may borrow, within its borrowing limit)."""
    offers: dict[str, int] = {}
    for fr in cq.node.quota:
        offers[fr[1]] = max(offers.get(fr[1], 0), cq.node.potential_available(fr))
    return offers


def workload_info(wl: Workload) -> WorkloadInfo:
    """The engine's view of a manager Workload (priority does not matter for a fit)."""
    created = wl.metadata.creation_timestamp or _EPOCH
    return build_info(wl, priority=0, created=created)


# The empty fits of `_fit_when_empty`, by the worker's spec key and the Workload's queue and
# shape; bounded, and dropped whole when full (a spec change makes new keys).
_EMPTY_FITS: dict[Hashable, tuple[Fit, Cache | None, ClusterQueueInfo | None]] = {}
MAX_EMPTY_FITS = 4096


def _remembered_fit_when_empty(info: WorkloadInfo, quotas: WorkerQuotas) -> tuple[Fit, Cache | None, ClusterQueueInfo | None]:
    """`_fit_when_empty`, reused while the worker's specs are the same: a placement over ten
    workers built ten quota trees, again for every Workload at every capacity change. The tree
    comes back with no usage in it; `fit_on` adds usage and takes it out again."""
    tree = quotas.tree_key
    if tree is None:
        return _fit_when_empty(info, quotas)
    lq = _local_queue_of(info, quotas)
    # The LocalQueue by what the fit reads of it: one the manager would propagate there is not
    # the worker's (no uid), and may point elsewhere than a queue of that name the worker had.
    queue = (lq.metadata.uid, lq.metadata.generation, lq.spec.cluster_queue) if lq is not None else None
    key = (tree, info.namespace, info.queue_name, queue, info.scheduling_hash)
    found = _EMPTY_FITS.get(key)
    if found is None:
        if len(_EMPTY_FITS) >= MAX_EMPTY_FITS:
            _EMPTY_FITS.clear()
        found = _EMPTY_FITS[key] = _fit_when_empty(info, quotas)
    return found


def _local_queue_of(info: WorkloadInfo, quotas: WorkerQuotas) -> LocalQueue | None:
    where = f"{info.namespace}/{info.queue_name}"
    return next((q for q in quotas.local_queues if f"{q.namespace}/{q.name}" == where), None)


def _fit_when_empty(info: WorkloadInfo, quotas: WorkerQuotas) -> tuple[Fit, Cache | None, ClusterQueueInfo | None]:
    """The fit with the worker's queues empty, and the quota tree to go on with when it fits."""
    lq = _local_queue_of(info, quotas)
    if lq is None:
        return Fit(False, False, reason=f"LocalQueue {info.queue_name} doesn't exist", missing=True), None, None
    cache = Cache(flavors=quotas.flavors, cluster_queues=quotas.cluster_queues, cohorts=quotas.cohorts, local_queues=[lq])
    cq = cache.cluster_queues.get(lq.spec.cluster_queue or "")
    if cq is None:
        return Fit(False, False, reason=f"ClusterQueue {lq.spec.cluster_queue} doesn't exist", missing=True), None, None
    offers = _offers(cq)
    if not cq.active:
        # A stopped queue, or one missing a flavor, admits nothing now; it may later.
        reason = f"ClusterQueue {cq.name} is inactive: {cq.inactive_message}"
        return Fit(False, True, offers=offers, reason=reason, cluster_queue=cq.name), None, None
    try:
        empty = _assign(cache, cq, info)
    except RequestError as err:
        return Fit(False, False, offers=offers, reason=str(err)), None, None
    if empty.representative_mode() != FIT:
        return Fit(False, False, offers=offers, reason=empty.no_fit_reason), None, None
    return Fit(False, True, offers=offers, cluster_queue=cq.name), cache, cq


def fit_when_empty(info: WorkloadInfo, quotas: WorkerQuotas) -> Fit:
    """Whether the Workload would fit on this worker with its queues empty (`Fit.ever`): what
    its quotas could ever give, whatever runs there now."""
    return _fit_when_empty(info, quotas)[0]


def fit_on(
    info: WorkloadInfo,
    quotas: WorkerQuotas,
    *,
    in_flight: Iterable[tuple[str, Mapping[FlavorResource, int]]] = (),
    reserved: Iterable[tuple[str, Mapping[FlavorResource, int]]] = (),
) -> Fit:
    """Whether the Workload fits on this worker. `in_flight` is the usage of copies sent there
    and not admitted yet, each with its ClusterQueue (the worker's ClusterQueue status does not
    count them); `reserved`, that of our copies the worker reserved quota for, which its
    ClusterQueue status may not show yet (it is written after the reservation)."""
    empty, cache, cq = _remembered_fit_when_empty(info, quotas)
    if cache is None or cq is None:
        return empty
    ours: dict[str, dict[FlavorResource, int]] = {}
    for queue_name, usage in reserved:
        summed = ours.setdefault(queue_name, {})
        for fr, value in usage.items():
            summed[fr] = summed.get(fr, 0) + value
    added: list[tuple[ClusterQueueInfo, dict[FlavorResource, int]]] = []
    for obj in quotas.cluster_queues:
        queue = cache.cluster_queues.get(obj.name)
        if queue is not None:
            reported, mine = _usage_of(obj), ours.get(obj.name, {})
            added.append((queue, {fr: max(reported.get(fr, 0), mine.get(fr, 0)) for fr in reported.keys() | mine.keys()}))
    for queue_name, usage in in_flight:
        queue = cache.cluster_queues.get(queue_name)
        if queue is not None:
            added.append((queue, dict(usage)))
    for queue, usage in added:
        queue.node.add_usages(usage)
    try:
        now = _assign(cache, cq, info)
        if now.representative_mode() != FIT:
            return dataclasses.replace(empty, reason=now.no_fit_reason)
        shares = []
        for fr, value in now.usage.items():
            total = cq.node.potential_available(fr)
            if total > 0:
                shares.append((cq.node.available(fr) - value) / total)
        return Fit(True, True, free_after=min(shares, default=1.0), offers=empty.offers, usage=dict(now.usage), cluster_queue=cq.name)
    finally:
        for queue, usage in reversed(added):  # the tree goes back empty, for the next fit
            queue.node.remove_usages(usage)


def never_fits(info: WorkloadInfo, workers: Mapping[str, WorkerQuotas | None]) -> str | None:
    """MultiKueue's refusal: why no worker could ever admit the Workload, even with every queue
    empty; None when one could, when no worker is configured, or while any worker's queues are
    unknown (it may be the one that could)."""
    if not workers:
        return None
    fits = {}
    for name, quotas in workers.items():
        if quotas is None:
            return None
        fit = fit_when_empty(info, quotas)
        if fit.ever:
            return None
        fits[name] = fit
    return f"{NEVER_FITS}: {never_fits_message(total_requests(info), fits)}"


@dataclass(frozen=True)
class Choice:
    """Where to send a Workload: a worker, or none with the reason (`never`: no worker could
    ever admit it; otherwise it waits for room)."""

    worker: str | None
    never: bool = False
    message: str = ""


def choose_worker(fits: Mapping[str, Fit], *, needs: Mapping[str, int], skip: Iterable[str] = ()) -> Choice:
    """The worker where the Workload fits now with the most free capacity left, then by name;
    `skip` holds workers already tried in this round. `needs` is the Workload's total request
    per resource, for the message when it can never fit."""
    skipped = set(skip)
    ready = [(-fit.free_after, name) for name, fit in fits.items() if fit.now and name not in skipped]
    if ready:
        return Choice(min(ready)[1])
    if any(fit.ever for fit in fits.values()):
        waiting = sorted(name for name, fit in fits.items() if fit.ever)
        return Choice(None, message=f"waiting for room on {', '.join(waiting)}")
    return Choice(None, never=True, message=never_fits_message(needs, fits))


def never_fits_message(needs: Mapping[str, int], fits: Mapping[str, Fit]) -> str:
    """For example: "needs cpu 12; largest worker offers cpu 8 (worker1), cpu 6 (worker2)", and
    each worker that lacks the queue, as "worker3: LocalQueue user-queue doesn't exist"."""
    wanted = ", ".join(f"{resource} {format_amount(resource, value)}" for resource, value in sorted(needs.items()))
    if not fits:
        return f"needs {wanted}; no worker is connected"
    parts = [f"needs {wanted}"]
    queued = {name: fit for name, fit in fits.items() if not fit.missing}
    if queued:
        offers = []
        for resource in sorted(needs):
            ranked = sorted(((fit.offers.get(resource, 0), name) for name, fit in queued.items()), key=lambda x: (-x[0], x[1]))
            offers += [f"{resource} {format_amount(resource, value)} ({name})" for value, name in ranked]
        parts.append(f"largest worker offers {', '.join(offers)}")
    parts += [f"{name}: {fit.reason}" for name, fit in sorted(fits.items()) if fit.missing]
    return "; ".join(parts)


def workers_lacking_the_local_queue(message: str) -> list[str]:
    """The workers a `never_fits_message` names as lacking the Workload's LocalQueue."""
    lacking = []
    for part in message.split("; "):
        worker, _, problem = part.partition(": ")
        if problem.startswith("LocalQueue ") and problem.endswith(" doesn't exist"):
            lacking.append(worker)
    return lacking


def total_requests(info: WorkloadInfo) -> dict[str, int]:
    """The Workload's total request per resource, over its pod sets."""
    needs: dict[str, int] = {}
    for ps in info.pod_sets:
        for resource, value in ps.total(ps.effective_count).items():
            needs[resource] = needs.get(resource, 0) + value
    return needs
