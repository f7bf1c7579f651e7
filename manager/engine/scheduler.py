"""One Kueue scheduling cycle, as a pure function of the engine state and the time.

`Scheduler.cycle(now)` pops one head per active ClusterQueue, nominates each (flavor
assignment and preemption targets against the tree as it stands), orders the entries
(borrowing level, priority, age; or the fair-sharing tournament), then processes them in
order against the tree as earlier entries changed it. Trial changes made during the cycle
are undone at its end and only its decisions are applied, so the state stays incremental.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from manager.api import constants as c
from manager.api.config import UNADMITTED_WORKLOADS_OBSERVABILITY, Configuration, parse_duration
from manager.engine import fairshare
from manager.engine.cache import Cache, ClusterQueueInfo
from manager.engine.flavors import FIT, NO_FIT, PREEMPT, Assignment, FlavorAssigner
from manager.engine.podsready import (
    REASON_WAITING_FOR_PODS_READY,
    WAITING_FOR_PODS_READY_MESSAGE,
    backoff_pending,
    blocks_admission,
)
from manager.engine.preemption import HUMAN_REASONS, Preemptor, Target
from manager.engine.queues import (
    FAILED_AFTER_NOMINATION,
    GENERIC,
    NAMESPACE_MISMATCH,
    PENDING_PREEMPTION,
    PREEMPTION_GATED,
    PREEMPTION_NO_CANDIDATES,
    ClusterQueueQueue,
)
from manager.engine.queues import (
    NO_FIT as RQ_NO_FIT,
)
from manager.engine.quota import QuotaNode
from manager.engine.selectors import selector_matches
from manager.engine.units import FlavorResource
from manager.engine.workload import (
    NAMESPACE_NOT_SELECTED_MESSAGE,
    PREEMPTION_GATED_MESSAGE,
    REASON_ADMISSION_GATED,
    REASON_EXCEEDS_MAX_QUOTA,
    REASON_MISCONFIGURED,
    REASON_PENDING_EVALUATION,
    REASON_PREEMPTED,
    REASON_QUOTA_RESERVED,
    REASON_SUSPENDED,
    REASON_WAITING_FOR_PREEMPTED,
    REASON_WAITING_FOR_QUOTA,
    AssignedPodSet,
    WorkloadInfo,
    admitted_condition,
    has_closed_preemption_gate,
    missing_namespace_message,
)

log = logging.getLogger("kfed.engine.scheduler")

NO_LONGER_FITS = "Workload no longer fits after processing another workload"
OVERLAPPING_TARGETS = "Workload has overlapping preemption targets with another workload"
BYPASSED = "Bypassed scheduling evaluation because an equivalent workload recently failed"
NOT_RESERVED = admitted_condition(reserved=False, check_states=())  # Admitted of a workload without quota
# Kueue's requeueBatchPeriod (pkg/cache/queue/inadmissible_workloads.go): capacity freed in a
# tree moves its inadmissible workloads back to the heaps this long after the first notice, all
# notices meanwhile folded into that one move (a delaying work queue keyed by root cohort).
REQUEUE_BATCH_PERIOD = timedelta(seconds=1)

# A rule from outside the quota tree that keeps a workload from reserving quota in a queue,
# as the message that says why, or None. MultiKueue's: no worker could ever admit it.
Refusal = Callable[[WorkloadInfo, "ClusterQueueInfo"], str | None]


@dataclass(frozen=True)
class PreemptionMessage:
    """What Kueue's message on a preempted Workload's Evicted and Preempted conditions says:
    who preempted it, why (one of preemption's reasons), and where each sits in the tree
    (paths as `/cohort/.../cq`). `preemption_message` writes it, `parse_preemption_message`
    reads it back (the CLI names the preemptor from it): one home for the format."""

    preemptor_uid: str
    preemptor_job_uid: str
    reason: str
    preemptor_path: str
    preemptee_path: str

    @property
    def preemptor_cluster_queue(self) -> str:
        """The last part of the preemptor's path."""
        parts = _path_parts(self.preemptor_path)
        return parts[-1] if parts else ""

    @property
    def cohort(self) -> str:
        """The nearest cohort both paths share (the preemptor's parent when they share none)."""
        mine, theirs = _path_parts(self.preemptee_path), _path_parts(self.preemptor_path)
        shared = []
        for a, b in zip(mine[:-1], theirs[:-1], strict=False):
            if a != b:
                break
            shared.append(a)
        return shared[-1] if shared else (theirs[-2] if len(theirs) > 1 else "")


def _path_parts(path: str) -> list[str]:
    return [part for part in path.strip().split("/") if part]


_REASONS_BY_TEXT = {text: reason for reason, text in HUMAN_REASONS.items()}
_PREEMPTION_MESSAGE = re.compile(
    r"UID: (?P<uid>[^,)]+)(?:, JobUID: (?P<job_uid>[^)]*))?\) due to (?P<why>[^;]*)"
    r"(?:; preemptor path: (?P<preemptor_path>[^;]*))?(?:; preemptee path: (?P<preemptee_path>[^;]*))?"
)


def preemption_message(found: PreemptionMessage) -> str:
    """Kueue's message: "Preempted to accommodate a workload (UID: …, JobUID: …) due to …;
    preemptor path: /cohort/cq; preemptee path: /cohort/cq"."""
    return (
        f"Preempted to accommodate a workload (UID: {found.preemptor_uid}, JobUID: {found.preemptor_job_uid}) due to "
        f"{HUMAN_REASONS[found.reason]}; preemptor path: {found.preemptor_path}; preemptee path: {found.preemptee_path}"
    )


def parse_preemption_message(message: str) -> PreemptionMessage | None:
    """The parts of a Preempted message (`preemption_message`'s, or upstream Kueue's: older
    versions leave out the JobUID and the paths); None when the message is not one."""
    found = _PREEMPTION_MESSAGE.search(message)
    if found is None:
        return None
    why = found["why"].strip()
    return PreemptionMessage(
        preemptor_uid=found["uid"].strip(),
        preemptor_job_uid=(found["job_uid"] or "").strip(),
        reason=_REASONS_BY_TEXT.get(why, why),
        preemptor_path=(found["preemptor_path"] or "").strip(),
        preemptee_path=(found["preemptee_path"] or "").strip(),
    )


def tie_break(cycle: int, cluster_queue: str) -> int:
    """The order of entries tied on everything Kueue compares: a hash of the cycle's number and
    the ClusterQueue's name. Over a run each queue comes first among its ties about as often as
    any other (ordering by name favoured one queue for a whole run), and a run (or `kfed
    simulate`) is still reproducible."""
    digest = hashlib.blake2b(f"{cycle}/{cluster_queue}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(slots=True, eq=False)
class Entry:
    wl: WorkloadInfo
    cq: ClusterQueueInfo
    assignment: Assignment | None = None
    targets: list[Target] = field(default_factory=list)
    skip_reason: str = ""
    skip_message: str = ""
    requeue_reason: str = GENERIC
    status: str = ""  # "assumed", "preempting", or "" (requeued)


@dataclass
class Preemption:
    victim: WorkloadInfo
    victim_cq: ClusterQueueInfo
    preemptor: WorkloadInfo
    preemptor_cq: ClusterQueueInfo
    reason: str


@dataclass
class CycleResult:
    heads: int = 0
    touched: list[str] = field(default_factory=list)  # keys whose status the cycle may have changed
    admitted: list[WorkloadInfo] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    changed: bool = False


class Scheduler:
    """Queues, the quota tree and the rules that connect them."""

    # Tests swap in a variant without the search shortcuts to check that they are exact.
    preemptor_class: type[Preemptor] = Preemptor

    def __init__(
        self,
        cache: Cache,
        *,
        config: Configuration | None = None,
        namespaces: dict[str, dict[str, str]] | None = None,
        refuse: Refusal | None = None,
    ) -> None:
        self.cache = cache
        self.config = config or Configuration()
        self.refuse = refuse
        self.namespaces = namespaces if namespaces is not None else {}
        fair = self.config.fair_sharing
        self.fair_sharing = fair is not None and fair.enable is not False
        self.strategies = tuple(fair.preemption_strategies) if fair and fair.preemption_strategies else ()
        self.queues: dict[str, ClusterQueueQueue] = {}
        pods_ready = self.config.pods_ready
        self.block_admission = pods_ready is not None and pods_ready.effective_block_admission
        # Whether the workloads parked with a failed head of their equivalence class are told so
        # (one status write each); Kueue writes nothing on them unless this gate is on.
        self.explain_bypassed = self.config.feature_enabled(UNADMITTED_WORKLOADS_OBSERVABILITY)
        self.honour_preemption_gates = self.config.honours_preemption_gates
        self._now: datetime | None = None
        self.cycle_number = 0
        # ClusterQueue name -> the cycle in which an immediate requeue was asked for its tree.
        self._pending_requeues: dict[str, int] = {}
        # (is a cohort, root name) -> when capacity first freed in that tree since its last
        # batched requeue (None: at the next cycle); see requeue_inadmissible_in_tree.
        self._batched_requeues: dict[tuple[bool, str], datetime | None] = {}
        afs = self.config.admission_fair_sharing
        self.afs_enabled = afs is not None
        self.lq_consumed: dict[str, float] = {}
        self._last_cycle_at: datetime | None = None
        self._afs_half_life = parse_duration(afs.usage_half_life_time).total_seconds() if afs and afs.usage_half_life_time else 0.0
        self._afs_sampling = parse_duration(afs.usage_sampling_interval).total_seconds() if afs and afs.usage_sampling_interval else 300.0
        self._afs_weights = dict(afs.resource_weights or {}) if afs else {}
        for cq in cache.cluster_queues.values():
            afs_cq = self.afs_enabled and cq.admission_fair_sharing
            self.queues[cq.name] = ClusterQueueQueue(cq.name, cq.strategy, self._lq_usage if afs_cq else None)

    # --- admission fair sharing -------------------------------------------------------------------
    def _lq_key(self, wl: WorkloadInfo) -> str:
        return f"{wl.namespace}/{wl.queue_name}"

    def _lq_usage(self, wl: WorkloadInfo) -> float:
        key = self._lq_key(wl)
        lq = self.cache.local_queues.get(key)
        weight = 1.0
        if lq is not None and lq.spec.fair_sharing is not None and lq.spec.fair_sharing.weight is not None:
            weight = lq.spec.fair_sharing.weight.milli / 1000
        if weight <= 0:
            return float("inf")
        return self.lq_consumed.get(key, 0.0) / weight

    def _afs_alpha(self, seconds: float) -> float:
        if self._afs_half_life <= 0:
            return 0.0
        return float(1 - 0.5 ** (seconds / self._afs_half_life))

    def _afs_charge(self, wl: WorkloadInfo, usage: dict[FlavorResource, int]) -> None:
        # Kueue's entry penalty: alpha(sampling interval) times the requests, weighted per resource.
        alpha = self._afs_alpha(self._afs_sampling)
        total = sum(self._afs_weights.get(fr[1], 1.0) * value for fr, value in usage.items())
        key = self._lq_key(wl)
        self.lq_consumed[key] = self.lq_consumed.get(key, 0.0) + alpha * total

    # --- queue membership ----------------------------------------------------------------------------
    def enqueue(self, wl: WorkloadInfo, now: datetime) -> None:
        """Queue a pending workload, or record why it cannot be queued (Kueue's workload controller)."""
        if not wl.active or wl.reserved:
            return
        cq, problem = self.cache.cluster_queue_for(wl)
        if cq is None:
            self._not_admitted(wl, REASON_MISCONFIGURED, problem, now)
            return
        wl.cluster_queue = cq.name
        wl.forget_unwritten_blocker()
        if self._backing_off(wl, now):
            # Same as Kueue: a workload waiting out its requeue backoff is inadmissible until
            # the backoff ends (the update that ends it queues it again).
            self.queues[cq.name].hold(wl)
            return
        lq = self.cache.local_queues.get(self._lq_key(wl))
        if lq is not None and (lq.spec.stop_policy or "None") != "None":
            self._not_admitted(wl, REASON_SUSPENDED, f"LocalQueue {wl.queue_name} is stopped", now)
            return
        if not cq.active:
            state = "stopped" if cq.stop_policy != "None" else "inactive"
            self._not_admitted(wl, REASON_SUSPENDED, f"ClusterQueue {cq.name} is {state}", now)
        self.queues[cq.name].push(wl)

    @staticmethod
    def _backing_off(wl: WorkloadInfo, now: datetime) -> bool:
        return backoff_pending(requeued=wl.conditions.get(c.REQUEUED), requeue_at=wl.requeue_at, now=now)

    def _pods_not_ready(self) -> bool:
        """blockAdmission: whether a workload holding quota anywhere has PodsReady not True."""
        return blocks_admission(
            wl.condition_true(c.PODS_READY) for cq in self.cache.cluster_queues.values() for wl in cq.workloads.values()
        )

    def _not_admitted(self, wl: WorkloadInfo, reason: str, message: str, now: datetime) -> None:
        wl.set_condition(c.QUOTA_RESERVED, "False", reason, message, now)
        wl.set_condition(c.ADMITTED, *NOT_RESERVED, now)

    def pending_count(self, cq: str) -> int:
        queue = self.queues.get(cq)
        return queue.pending() if queue else 0

    # --- the cycle ---------------------------------------------------------------------------------
    def _decay_lq_usage(self, now: datetime) -> None:
        """Admission fair sharing: consumed usage halves every usageHalfLifeTime."""
        if self._last_cycle_at is not None and self._afs_half_life > 0 and self.lq_consumed:
            factor = 0.5 ** ((now - self._last_cycle_at).total_seconds() / self._afs_half_life)
            self.lq_consumed = {key: value * factor for key, value in self.lq_consumed.items()}
        self._last_cycle_at = now

    def cycle(self, now: datetime) -> CycleResult:
        self._now = now
        self._apply_requeues(now)
        self.cycle_number += 1
        if self.afs_enabled:
            self._decay_lq_usage(now)
        result = CycleResult()
        preemptor = self.preemptor_class(
            self.cache,
            fair_sharing=self.fair_sharing,
            strategies=self.strategies or (),
            now=now,
            lq_usage=self._lq_usage if self.afs_enabled else None,
        )
        heads: list[Entry] = []
        for name in sorted(self.queues):
            cq = self.cache.cluster_queues[name]
            if not cq.active:
                continue
            wl = self.queues[name].pop(self.cycle_number)
            if wl is not None:
                heads.append(Entry(wl, cq))
        result.heads = len(heads)
        result.touched = [entry.wl.key for entry in heads]
        if not heads:
            return result
        before = {entry.wl.key: self._observed(entry.wl) for entry in heads}
        for entry in heads:
            self._nominate(entry, preemptor)
        ordered = self._fair_order(heads) if self.fair_sharing else sorted(heads, key=self._entry_key)
        undo: list[tuple[ClusterQueueInfo, dict[FlavorResource, int]]] = []
        preempted: dict[str, Target] = {}
        for entry in ordered:
            self._process(entry, preemptor, preempted, undo, now, result)
        for cq, usage in reversed(undo):
            cq.node.remove_usages(usage)
        for entry in heads:
            self._finish(entry, result, now)
        self._mark_preemptions(result, now)
        # A cycle changes something when it admits, preempts, parks a head as inadmissible, or
        # changes what a head's status or flavor scan says; a blocked StrictFIFO head does none.
        result.changed = bool(result.admitted or result.preemptions) or any(
            not self.queues[entry.cq.name].is_active(entry.wl.key) or self._observed(entry.wl) != before[entry.wl.key] for entry in heads
        )
        return result

    @staticmethod
    def _observed(wl: WorkloadInfo) -> tuple[object, ...]:
        cond = wl.conditions.get(c.QUOTA_RESERVED)
        last = wl.last_assignment
        return (
            (cond.status, cond.reason, cond.message) if cond else None,
            tuple(tuple(sorted(t.items())) for t in last.tried) if last is not None else None,
        )

    def _entry_key(self, entry: Entry) -> tuple[object, ...]:
        """Kueue's classical order of a cycle's entries: under nominal quota first, then higher
        priority, then the earlier queue time, in the whole seconds the apiserver keeps. Kueue
        sorts them with an unstable sort over heads taken from a map, so its ties come out in no
        fixed order; kfed breaks them with `tie_break`, which favours no ClusterQueue."""
        borrowing = entry.assignment.borrowing if entry.assignment is not None else 0
        queued = int(entry.wl.queue_time.timestamp())
        return (borrowing, -entry.wl.priority, queued, tie_break(self.cycle_number, entry.cq.name), entry.wl.key)

    # --- nomination ----------------------------------------------------------------------------------
    def _nominate(self, entry: Entry, preemptor: Preemptor) -> None:
        wl, cq = entry.wl, entry.cq
        if any(state in ("Retry", "Rejected") for state in wl.checks.values()):
            entry.skip_reason, entry.skip_message = REASON_PENDING_EVALUATION, "The workload has failed admission checks"
            return
        labels = self.namespaces.get(wl.namespace)
        if labels is None:
            entry.skip_reason, entry.skip_message = REASON_MISCONFIGURED, missing_namespace_message(wl.namespace)
            entry.requeue_reason = NAMESPACE_MISMATCH
            return
        if not selector_matches(cq.namespace_selector, labels):
            entry.skip_reason, entry.skip_message = REASON_MISCONFIGURED, NAMESPACE_NOT_SELECTED_MESSAGE
            entry.requeue_reason = NAMESPACE_MISMATCH
            return
        entry.assignment, entry.targets = self._assignments(wl, cq, preemptor)
        if entry.assignment.representative_mode() == NO_FIT or self.refuse is None:
            return  # the queue's own reason comes first
        refused = self.refuse(wl, cq)
        if refused:
            # Refused before it reserves or preempts anything; parked as inadmissible until
            # whatever the rule reads changes (`requeue_inadmissible_in_tree`).
            entry.assignment, entry.targets = None, []
            entry.skip_reason, entry.skip_message = REASON_EXCEEDS_MAX_QUOTA, refused
            entry.requeue_reason = RQ_NO_FIT

    def _assigner(self, wl: WorkloadInfo, cq: ClusterQueueInfo, preemptor: Preemptor) -> FlavorAssigner:
        last = wl.last_assignment
        if last is not None and (
            last.scheduling_hash != wl.scheduling_hash or (last.generation != cq.generation and self.cycle_number - last.cycle > 1)
        ):
            last = None
        return FlavorAssigner(
            self.cache,
            cq,
            wl,
            oracle=preemptor.simulate,
            fair_sharing=self.fair_sharing,
            cycle=self.cycle_number,
            last=last,
        )

    def _assignments(self, wl: WorkloadInfo, cq: ClusterQueueInfo, preemptor: Preemptor) -> tuple[Assignment, list[Target]]:
        assigner = self._assigner(wl, cq, preemptor)
        full = assigner.assign()
        mode = full.representative_mode()
        if mode == FIT:
            return full, []
        if mode == PREEMPT:
            targets = preemptor.get_targets(wl, cq, full)
            if targets:
                return full, targets
        reduced = self._partial(wl, cq, assigner, preemptor)
        if reduced is not None:
            return reduced
        return full, []

    def _partial(
        self, wl: WorkloadInfo, cq: ClusterQueueInfo, assigner: FlavorAssigner, preemptor: Preemptor
    ) -> tuple[Assignment, list[Target]] | None:
        """Kueue's PodSetReducer: the largest proportional reduction toward minCount that fits."""
        deltas = [ps.effective_count - ps.min_count if ps.min_count is not None else 0 for ps in wl.pod_sets]
        total = sum(max(0, d) for d in deltas)
        if total <= 0:
            return None
        cache: dict[int, tuple[Assignment, list[Target]] | None] = {}

        def attempt(k: int) -> tuple[Assignment, list[Target]] | None:
            if k not in cache:
                counts = [ps.effective_count - (max(0, d) * k // total) for ps, d in zip(wl.pod_sets, deltas, strict=True)]
                assignment = assigner.assign(counts)
                mode = assignment.representative_mode()
                found: tuple[Assignment, list[Target]] | None = None
                if mode == FIT:
                    found = (assignment, [])
                elif mode == PREEMPT:
                    targets = preemptor.get_targets(wl, cq, assignment)
                    if targets:
                        found = (assignment, targets)
                cache[k] = found
            return cache[k]

        low, high = 1, total
        if attempt(high) is None:
            return None
        while low < high:
            middle = (low + high) // 2
            if attempt(middle) is not None:
                high = middle
            else:
                low = middle + 1
        return attempt(low)

    # --- fair sharing order ------------------------------------------------------------------------------
    def _fair_order(self, heads: list[Entry]) -> list[Entry]:
        """Kueue's fairSharingIterator: a DRS tournament per cohort tree, recomputed after each pop."""
        remaining = {entry.cq.name: entry for entry in heads}
        out: list[Entry] = []
        # Earlier pops are charged while ordering later ones, then undone (processing recharges them).
        charged: list[tuple[ClusterQueueInfo, dict[FlavorResource, int]]] = []
        while remaining:
            first = remaining[min(remaining)]
            if first.cq.node.parent is None or first.assignment is None:
                winner = first
            else:
                root = first.cq.node.root()
                tree = [e for e in remaining.values() if e.cq.node.root() is root and e.assignment is not None]
                values = {id(e): self._entry_shares(e) for e in tree}
                winner = self._tournament(root, tree, values) or first
            del remaining[winner.cq.name]
            out.append(winner)
            if winner.assignment is not None and winner.assignment.representative_mode() in (FIT, PREEMPT):
                winner.cq.node.add_usages(winner.assignment.usage)
                charged.append((winner.cq, winner.assignment.usage))
        for cq, usage in reversed(charged):
            cq.node.remove_usages(usage)
        return out

    def _entry_shares(self, entry: Entry) -> dict[int, fairshare.DRS]:
        assert entry.assignment is not None
        usage = entry.assignment.usage
        entry.cq.node.add_usages(usage)
        try:
            shares: dict[int, fairshare.DRS] = {}
            path = entry.cq.node.path()
            for child, parent in itertools.pairwise(path):
                shares[id(parent)] = fairshare.dominant_resource_share(child)
            return shares
        finally:
            entry.cq.node.remove_usages(usage)

    def _tournament(self, cohort: object, tree: list[Entry], values: dict[int, dict[int, fairshare.DRS]]) -> Entry | None:
        assert isinstance(cohort, QuotaNode)
        competitors: list[Entry] = []
        for child in cohort.children:
            if child.is_cohort:
                winner = self._tournament(child, tree, values)
                if winner is not None:
                    competitors.append(winner)
            else:
                competitors += [e for e in tree if e.cq.node is child]
        if not competitors:
            return None
        level = id(cohort)

        def key(entry: Entry) -> tuple[object, ...]:
            drs = values[id(entry)][level]
            assert entry.assignment is not None
            borrowing = drs.borrowing_on(entry.assignment.usage)
            weighted = drs.weighted()
            zero = 1 if drs.zero_weight_borrows else 0
            return (borrowing, zero, drs.ratio if zero else weighted, -entry.wl.priority, entry.wl.queue_time.timestamp(), entry.cq.name)

        return min(competitors, key=key)

    # --- processing ----------------------------------------------------------------------------------
    def _process(
        self,
        entry: Entry,
        preemptor: Preemptor,
        preempted: dict[str, Target],
        undo: list[tuple[ClusterQueueInfo, dict[FlavorResource, int]]],
        now: datetime,
        result: CycleResult,
    ) -> None:
        assignment = entry.assignment
        if assignment is None:
            return
        wl, cq = entry.wl, entry.cq
        mode = assignment.representative_mode()
        usage = assignment.usage
        if mode == NO_FIT:
            entry.requeue_reason = RQ_NO_FIT
            entry.skip_reason = assignment.no_fit_reason or REASON_WAITING_FOR_QUOTA
            entry.skip_message = assignment.message()
            return
        if mode == PREEMPT and not entry.targets:
            if log.isEnabledFor(logging.DEBUG):
                # Kueue logs the same at V(2): "Workload requires preemption, but there are no
                # candidate workloads allowed for preemption" (benchmarks/preemption_decisions.py).
                log.debug("preemption without candidates", extra={"preemptor": wl.key, "cluster_queue": cq.name})
            entry.requeue_reason = PREEMPTION_NO_CANDIDATES
            entry.skip_reason, entry.skip_message = REASON_WAITING_FOR_QUOTA, assignment.message()
            if cq.reclaim_within_cohort != "Any":
                reserved = self._capacity_to_reserve(cq, assignment)
                if reserved:
                    cq.node.add_usages(reserved)
                    undo.append((cq, reserved))
            return
        if mode == PREEMPT and self.honour_preemption_gates and has_closed_preemption_gate(wl.obj):
            # Kueue's markPreemptionGated: it may not preempt yet; parked until the gate opens
            # (an update of the Workload), and it says so for the MultiKueue manager to see.
            entry.skip_reason, entry.skip_message = REASON_ADMISSION_GATED, PREEMPTION_GATED_MESSAGE
            entry.requeue_reason = PREEMPTION_GATED
            wl.set_condition(c.BLOCKED_ON_PREEMPTION_GATES, "True", c.REASON_PREEMPTION_GATED, PREEMPTION_GATED_MESSAGE, now)
            wl.last_assignment = None
            return
        if any(t.wl.key in preempted for t in entry.targets):
            # Kueue v0.19.2 with its default gates (RecomputeAssignmentUponPreemptionTargetsOverlap
            # is off): a workload whose targets overlap an earlier preemptor's is skipped for this
            # cycle, however much those victims free; it is not recomputed against the cohort
            # without them, and does not wait for them as a preemptor would.
            entry.skip_reason, entry.skip_message = REASON_WAITING_FOR_QUOTA, OVERLAPPING_TARGETS
            entry.requeue_reason = FAILED_AFTER_NOMINATION
            return
        # Victims in other cohort trees cannot change this queue's availability.
        if not self._fits_after_removal(cq, usage, self._same_tree(cq, preempted) + entry.targets):
            entry.skip_reason, entry.skip_message = REASON_WAITING_FOR_QUOTA, NO_LONGER_FITS
            entry.requeue_reason = FAILED_AFTER_NOMINATION
            return
        if mode == PREEMPT:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("preemption decision", extra=self._decision_record(entry, now))
            for target in entry.targets:
                preempted[target.wl.key] = target
            # A preemptor holds its quota for the rest of the cycle only (Kueue's snapshot charge).
            cq.node.add_usages(usage)
            undo.append((cq, usage))
            entry.status = "preempting"
            entry.skip_reason = REASON_WAITING_FOR_PREEMPTED
            entry.skip_message = f"{assignment.message()}. Pending the preemption of {len(entry.targets)} workload(s)"
            entry.requeue_reason = PENDING_PREEMPTION
            for target in entry.targets:
                if not target.wl.evicted:  # an eviction already under way is not issued again
                    result.preemptions.append(Preemption(target.wl, target.cq, wl, cq, target.reason))
            wl.last_assignment = None
            return
        if self.block_admission and self._pods_not_ready():
            # Kueue's waitForPodsReadyIfNeeded: the head waits (QuotaReserved=False) until every
            # admitted workload's pods are ready, and nothing is admitted meanwhile.
            entry.skip_reason, entry.skip_message = REASON_WAITING_FOR_PODS_READY, WAITING_FOR_PODS_READY_MESSAGE
            entry.requeue_reason = FAILED_AFTER_NOMINATION
            return
        entry.status = "assumed"
        # The reservation is the one charge: it stays after the cycle, as Kueue's cache does.
        self._admit(entry, now)
        result.admitted.append(wl)

    def _decision_record(self, entry: Entry, now: datetime) -> dict[str, object]:
        """A preemption decision and the state it was taken in, for a DEBUG log record: the
        preemptor and its ClusterQueue, each victim (its queue, priority, the reason, and
        whether its eviction is already under way), and the usage of every ClusterQueue of the
        preemptor's tree, this cycle's earlier admissions and preemptors' charges included
        (the state Kueue's snapshot would show at this point of the cycle)."""
        wl, cq, assignment = entry.wl, entry.cq, entry.assignment
        assert assignment is not None
        root = cq.node.root()

        def amounts(values: dict[FlavorResource, int]) -> dict[str, int]:
            return {f"{flavor}/{resource}": value for (flavor, resource), value in sorted(values.items()) if value}

        return {
            "cycle": self.cycle_number,
            "at": now.isoformat(),
            "preemptor": wl.key,
            "priority": wl.priority,
            "cluster_queue": cq.name,
            "cohort": root.name if root is not cq.node else "",
            "requests": amounts(assignment.usage),
            "borrowing": assignment.borrowing,
            "victims": [
                {"key": t.wl.key, "cluster_queue": t.cq.name, "priority": t.wl.priority, "reason": t.reason, "ongoing": t.wl.evicted}
                for t in entry.targets
            ],
            "cohort_usage": amounts(root.usage) if root is not cq.node else {},
            "usage": {other.name: amounts(other.node.usage) for other in self.cache.cohort_cluster_queues(root)},
            "cluster_queues": {
                other.name: other.obj.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
                for other in self.cache.cohort_cluster_queues(root)
            },
            # Every Workload holding quota in the tree, so that the state can be rebuilt for
            # another scheduler (benchmarks/preemption_replay.py); a queue's usage above the sum
            # of its Workloads' is an earlier preemptor's charge in this cycle.
            "admitted": [
                {
                    "key": held.key,
                    "uid": held.uid,
                    "cluster_queue": other.name,
                    "priority": held.priority,
                    "usage": amounts(held.usage),
                    "reserved_at": held.reserved_at.isoformat() if held.reserved_at is not None else None,
                    "evicted": held.evicted,
                }
                for other in self.cache.cohort_cluster_queues(root)
                for held in other.workloads.values()
            ],
        }

    @staticmethod
    def _same_tree(cq: ClusterQueueInfo, preempted: dict[str, Target]) -> list[Target]:
        root = cq.node.root()
        return [t for t in preempted.values() if t.cq.node.root() is root]

    @staticmethod
    def _fits_after_removal(cq: ClusterQueueInfo, usage: dict[FlavorResource, int], removed: list[Target]) -> bool:
        for target in removed:
            target.cq.node.remove_usages(target.wl.usage)
        try:
            return all(cq.node.available(fr) >= value for fr, value in usage.items())
        finally:
            for target in removed:
                target.cq.node.add_usages(target.wl.usage)

    @staticmethod
    def _capacity_to_reserve(cq: ClusterQueueInfo, assignment: Assignment) -> dict[FlavorResource, int]:
        """Kueue's quotaResourcesToReserve: what a blocked preemptor holds for the rest of the cycle."""
        out: dict[FlavorResource, int] = {}
        node = cq.node
        for fr, request in assignment.usage.items():
            quota = node.quota.get(fr)
            nominal = quota.nominal if quota else 0
            used = node.usage.get(fr, 0)
            if assignment.borrowing > 0:
                if quota is not None and quota.borrowing_limit is not None:
                    value = min(request, nominal + quota.borrowing_limit - used)
                else:
                    value = request
            else:
                value = max(0, min(request, nominal - used))
            if value > 0:
                out[fr] = value
        return out

    # --- admission and status ---------------------------------------------------------------------------
    def _admit(self, entry: Entry, now: datetime) -> None:
        wl, cq, assignment = entry.wl, entry.cq, entry.assignment
        assert assignment is not None
        wl.admission = [
            AssignedPodSet(
                psa.name,
                {resource: choice.name for resource, choice in psa.flavors.items()},
                {resource: psa.requests.get(resource, 0) for resource in psa.flavors},
                psa.count,
            )
            for psa in assignment.pod_sets
        ]
        wl.admission_cq = cq.name
        wl.usage = dict(assignment.usage)
        wl.reserved_at = now
        wl.last_assignment = None
        self.cache.reserve(cq, wl)
        wl.preempted_by = ""  # admitted again: a later eviction of it says who preempted it then
        if self.afs_enabled and cq.admission_fair_sharing:
            self._afs_charge(wl, wl.usage)
        wl.set_condition(c.QUOTA_RESERVED, "True", REASON_QUOTA_RESERVED, f"Quota reserved in ClusterQueue {cq.name}", now)
        for kind in (c.EVICTED, c.PREEMPTED, c.BLOCKED_ON_PREEMPTION_GATES):
            old = wl.conditions.get(kind)
            if old is not None and old.status == "True":
                wl.set_condition(kind, "False", REASON_QUOTA_RESERVED, f"Previously: {old.message}", now)
        for check in cq.required_checks(assignment.flavors_used()):
            wl.checks.setdefault(check, "Pending")
        self.sync_admitted(wl, now)
        queue = self.queues.get(cq.name)
        if queue is not None and queue.sticky == wl.key:
            queue.sticky = None

    def sync_admitted(self, wl: WorkloadInfo, now: datetime) -> None:
        """Kueue's SyncAdmittedCondition: Admitted once quota is reserved and every check is Ready."""
        wl.set_condition(c.ADMITTED, *admitted_condition(reserved=wl.reserved, check_states=wl.checks.values()), now)

    def _finish(self, entry: Entry, result: CycleResult, now: datetime) -> None:
        """Requeue what was not admitted and write its condition (Kueue's requeueAndUpdate)."""
        if entry.status == "assumed":
            return
        wl = entry.wl
        queue = self.queues[entry.cq.name]
        if entry.skip_reason:
            self._not_admitted(wl, entry.skip_reason, entry.skip_message, now)
        if entry.assignment is not None and entry.status != "preempting":
            wl.last_assignment = entry.assignment.last
        pending = wl.last_assignment is not None and wl.last_assignment.pending_flavors()
        moved = queue.requeue(wl, entry.requeue_reason, pending_flavors=pending, status_reason=entry.skip_reason)
        if entry.skip_reason:
            wl.resource_requests = [(ps.name, ps.total()) for ps in wl.pod_sets]
        if not self.explain_bypassed:
            return
        reason = entry.skip_reason or REASON_PENDING_EVALUATION
        for other in moved:
            # Same as Kueue's workload controller for an equivalence class that just failed.
            # Most of the class already says so (parked the same way before the last requeue):
            # those change nothing and are not touched, so a flush does not look at them again.
            if self._says_not_admitted(other, reason, BYPASSED):
                continue
            self._not_admitted(other, reason, BYPASSED, now)
            result.touched.append(other.key)

    def has_heads(self) -> bool:
        """Whether a cycle now would try a workload: one waits in the heap of an active
        ClusterQueue (Kueue's queue manager hands out heads until every heap is empty)."""
        return any(queue.has_head and self.cache.cluster_queues[name].active for name, queue in self.queues.items())

    def bypassed(self, wl: WorkloadInfo) -> tuple[str, str] | None:
        """The Pending condition (reason, message) that the UnadmittedWorkloadsObservability gate
        would write on a workload parked with its failed equivalence class, whether or not the
        gate is on: for `kfed simulate` to say why such a workload waits."""
        queue = self.queues.get(wl.cluster_queue or "")
        reason = queue.parked_with_class(wl.key) if queue is not None else None
        return (reason, BYPASSED) if reason else None

    @staticmethod
    def _says_not_admitted(wl: WorkloadInfo, reason: str, message: str) -> bool:
        """Whether `_not_admitted(wl, reason, message)` would leave its conditions as they are."""
        reserved, admitted = wl.conditions.get(c.QUOTA_RESERVED), wl.conditions.get(c.ADMITTED)
        return (
            reserved is not None
            and admitted is not None
            and (reserved.status, reserved.reason, reserved.message) == ("False", reason, message)
            and (admitted.status, admitted.reason, admitted.message) == NOT_RESERVED
        )

    def _mark_preemptions(self, result: CycleResult, now: datetime) -> None:
        """Evictions issued in this cycle: the victims get Evicted and Preempted, and keep their
        quota until their job has stopped (the caller then calls `AdmissionState.finish_eviction`)."""
        for preemption in result.preemptions:
            victim, preemptor = preemption.victim, preemption.preemptor
            if not victim.reserved:
                continue
            message = preemption_message(
                PreemptionMessage(
                    preemptor_uid=preemptor.uid,
                    preemptor_job_uid=(preemptor.obj.metadata.labels or {}).get(c.JOB_UID_LABEL) or "UNKNOWN",
                    reason=preemption.reason,
                    preemptor_path=self.cache.path_of(preemption.preemptor_cq),
                    preemptee_path=self.cache.path_of(preemption.victim_cq),
                )
            )
            victim.set_condition(c.EVICTED, "True", REASON_PREEMPTED, message, now)
            victim.set_condition(c.PREEMPTED, "True", preemption.reason, message, now)
            victim.preempted_by = preemption.preemptor_cq.name

    def release(self, wl: WorkloadInfo, now: datetime, *, reason: str, message: str) -> None:
        """Give back a workload's quota and make it pending again (after an eviction)."""
        cq = self.cache.cluster_queues.get(wl.admission_cq)
        if cq is not None:
            self.cache.release(cq, wl)
        wl.admission = None
        wl.admission_cq = ""
        wl.usage = {}
        wl.reserved_at = None
        wl.set_condition(c.QUOTA_RESERVED, "False", reason, message, now)
        self.sync_admitted(wl, now)
        self.enqueue(wl, now)

    def requeue_inadmissible_in_tree(self, root: object, now: datetime | None = None, *, immediate: bool = False) -> None:
        """Capacity freed somewhere in a tree (at `now`; None: take the next cycle's time):
        every inadmissible workload in it gets another try.

        As Kueue's asynchronous requeue (NotifyRetryInadmissible): the move back to the heaps
        happens REQUEUE_BATCH_PERIOD after the first notice for the tree, once for every notice
        until then. Until it happens, freed quota goes only to workloads still in the heaps (new
        ones, and those requeued at once after a cycle), which is what leaves it free for an
        arriving workload instead of handing it at once to the parked backlog of a queue that
        borrows. `immediate`: at the start of the next cycle (kfed's own refusal rule).
        """
        assert isinstance(root, QuotaNode)
        cqs = self._tree_cluster_queues(root)
        for cq in cqs:
            # At once, not with the batched move: a workload's remembered flavor assignment
            # (Kueue's LastAssignment, made for the old capacity) is not resumed from, even by a
            # workload still in the heaps.
            cq.generation += 1
        if immediate:
            for cq in cqs:
                if cq.name in self.queues:
                    # Moved at the start of the next cycle, the only reader of the heaps: once
                    # per cycle instead of once per notice.
                    self._pending_requeues[cq.name] = self.cycle_number
            return
        key = (root.is_cohort, root.name)
        if key not in self._batched_requeues:
            self._batched_requeues[key] = now
            return
        first = self._batched_requeues[key]
        if now is not None and (first is None or now < first):
            self._batched_requeues[key] = now

    def _tree_cluster_queues(self, root: QuotaNode) -> list[ClusterQueueInfo]:
        if root.is_cohort:
            return self.cache.cohort_cluster_queues(root)
        found = self.cache.cluster_queues.get(root.name)
        return [found] if found else []

    def next_requeue_at(self) -> datetime | None:
        """When the next batched requeue falls due (the caller runs a cycle then); None: none asked."""
        due = [asked + REQUEUE_BATCH_PERIOD for asked in self._batched_requeues.values() if asked is not None]
        if len(due) < len(self._batched_requeues) and self._now is not None:
            due.append(self._now + REQUEUE_BATCH_PERIOD)  # asked since the last cycle: due a period after the next one
        return min(due, default=None)

    def _apply_requeues(self, now: datetime) -> None:
        for key, asked in list(self._batched_requeues.items()):
            if asked is None:
                self._batched_requeues[key] = asked = now
            if asked + REQUEUE_BATCH_PERIOD > now:
                continue
            del self._batched_requeues[key]
            is_cohort, name = key
            root = self.cache.cohorts.get(name) if is_cohort else None
            if root is None and not is_cohort:
                cq_info = self.cache.cluster_queues.get(name)
                root = cq_info.node if cq_info is not None else None
            if root is None:
                continue  # the tree is gone (a rebuild queues every pending workload anyway)
            for member in self._tree_cluster_queues(root):
                queue = self.queues.get(member.name)
                if queue is not None:
                    # As Kueue's queueInadmissibleWorkloads between two cycles: a head popped
                    # from now on goes back to the heap only by its own requeue reason.
                    queue.requeue_inadmissible(self.cycle_number, self._namespace_still_matches(member))
        pending, self._pending_requeues = self._pending_requeues, {}
        for name, asked_in_cycle in pending.items():
            queue, cq = self.queues.get(name), self.cache.cluster_queues.get(name)
            if queue is not None and cq is not None:
                queue.requeue_inadmissible(asked_in_cycle, self._namespace_still_matches(cq))

    def _namespace_still_matches(self, cq: ClusterQueueInfo) -> Callable[[WorkloadInfo], bool]:
        # Thousands of parked workloads share a few namespaces: match each namespace once.
        seen: dict[str, bool] = {}

        def check(wl: WorkloadInfo) -> bool:
            matches = seen.get(wl.namespace)
            if matches is None:
                labels = self.namespaces.get(wl.namespace)
                matches = seen[wl.namespace] = labels is not None and selector_matches(cq.namespace_selector, labels)
            return matches and (self._now is None or not self._backing_off(wl, self._now))

        return check
