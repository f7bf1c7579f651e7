"""Preemption: which admitted workloads to evict so that a workload fits.

Kueue's two algorithms: classic (candidates by policy and cohort position, greedy removal
then reverse fill-back) and fair sharing (target ClusterQueues by dominant resource share,
with the LessThanOrEqualToFinalShare and LessThanInitialShare strategies). Both work on the
live quota tree by removing and re-adding usage, and always leave it as they found it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from manager.engine import fairshare
from manager.engine.cache import Cache, ClusterQueueInfo
from manager.engine.flavors import NO_CANDIDATES, PREEMPT, PREEMPT_POSSIBLE, RECLAIM_POSSIBLE, Assignment
from manager.engine.quota import QuotaNode, lowest_fitting_subtree_height
from manager.engine.units import FlavorResource
from manager.engine.workload import WorkloadInfo

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"

HUMAN_REASONS = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}

# Classic preemption variants (classical/hierarchical_preemption.go).
_WITHIN_CQ, _HIERARCHICAL, _WITHOUT_BORROWING, _WHILE_BORROWING = 1, 2, 3, 4
_VARIANT_REASON = {
    _WITHIN_CQ: IN_CLUSTER_QUEUE,
    _HIERARCHICAL: IN_COHORT_RECLAMATION,
    _WITHOUT_BORROWING: IN_COHORT_RECLAMATION,
    _WHILE_BORROWING: IN_COHORT_RECLAIM_WHILE_BORROWING,
}

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
DEFAULT_STRATEGIES = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)


@dataclass(slots=True)
class Target:
    wl: WorkloadInfo
    cq: ClusterQueueInfo
    reason: str


@dataclass(slots=True)
class _Candidate:
    wl: WorkloadInfo
    cq: ClusterQueueInfo
    lca: QuotaNode | None
    variant: int


def satisfies_policy(preemptor: WorkloadInfo, candidate: WorkloadInfo, policy: str) -> bool:
    """Kueue's SatisfiesPreemptionPolicy."""
    if not policy_admits_priority(preemptor, candidate.priority, policy):
        return False
    if policy == "LowerOrNewerEqualPriority" and candidate.priority == preemptor.priority:
        return preemptor.queue_time < candidate.queue_time
    return True


def policy_admits_priority(preemptor: WorkloadInfo, priority: int, policy: str) -> bool:
    """Whether a candidate of this priority may satisfy the policy at all.

    False for every priority from some bound up, so a scan in ascending priority stops at
    the first candidate for which it is False.
    """
    if policy == "LowerPriority":
        return priority < preemptor.priority
    if policy == "LowerOrNewerEqualPriority":
        return priority <= preemptor.priority
    return policy == "Any"


def uses_resources(wl: WorkloadInfo, frs: set[FlavorResource]) -> bool:
    return not frs.isdisjoint(wl.usage)


class _Lazy:
    """Candidates merged from per-queue streams, materialised only as far as they are read.

    Several runs read the same candidates, and most runs stop after a few, so nothing is
    classified or sorted past the point where the preemptor fits.
    """

    def __init__(
        self,
        streams: list[Iterator[tuple[tuple[bool, int, float, str], _Candidate]]],
        resort: Callable[[_Candidate], tuple[Any, ...]] | None = None,
    ) -> None:
        if resort is not None:
            everything = sorted((cand for stream in streams for _, cand in stream), key=resort)
            self._source: Iterator[_Candidate] = iter(everything)
        elif len(streams) == 1:
            self._source = (cand for _, cand in streams[0])
        else:
            self._source = (cand for _, cand in heapq.merge(*streams, key=lambda item: item[0]))
        self._seen: list[_Candidate] = []
        self._done = False

    def _pull(self) -> bool:
        if self._done:
            return False
        nxt = next(self._source, None)
        if nxt is None:
            self._done = True
            return False
        self._seen.append(nxt)
        return True

    def __bool__(self) -> bool:
        return bool(self._seen) or self._pull()

    def items(self, evicted: bool) -> Iterator[_Candidate]:
        """The evicted candidates (a prefix, as they sort first) or the rest."""
        i = 0
        while True:
            if i >= len(self._seen) and not self._pull():
                return
            cand = self._seen[i]
            i += 1
            if cand.wl.evicted == evicted:
                yield cand
            elif evicted:
                return


class Preemptor:
    """Finds preemption targets against the live tree in `cache`."""

    def __init__(
        self,
        cache: Cache,
        *,
        fair_sharing: bool = False,
        strategies: tuple[str, ...] = DEFAULT_STRATEGIES,
        now: datetime,
        lq_usage: Callable[[WorkloadInfo], float] | None = None,
    ) -> None:
        self.cache = cache
        self.fair_sharing = fair_sharing
        self.strategies = strategies or DEFAULT_STRATEGIES
        self.now = now
        self.lq_usage = lq_usage

    # --- the snapshot operations ---------------------------------------------------------------
    @staticmethod
    def _remove(target_cq: ClusterQueueInfo, wl: WorkloadInfo) -> None:
        target_cq.node.remove_usages(wl.usage)

    @staticmethod
    def _add(target_cq: ClusterQueueInfo, wl: WorkloadInfo) -> None:
        target_cq.node.add_usages(wl.usage)

    def _restore(self, targets: list[Target]) -> None:
        for target in targets:
            self._add(target.cq, target.wl)

    @staticmethod
    def fits(cq: ClusterQueueInfo, requests: dict[FlavorResource, int], allow_borrowing: bool) -> bool:
        node = cq.node
        for fr, value in requests.items():
            if not allow_borrowing and node.borrowing_with(fr, value):
                return False
            if value > node.available(fr):
                return False
        return True

    def _fill_back(
        self, cq: ClusterQueueInfo, requests: dict[FlavorResource, int], targets: list[Target], allow_borrowing: bool
    ) -> list[Target]:
        """Add back, in reverse order (never the last one), every target not needed after all.

        The leading targets from other queues (often many) are first added back all at once:
        if the workload still fits, each one-by-one test (which sees less usage) would have
        passed too, so all of them go, in Kueue's swap order.
        """
        others = 0
        while others < len(targets) - 1 and targets[others].cq is not cq:
            others += 1
        self._fill_back_range(cq, requests, targets, allow_borrowing, len(targets) - 2, others)
        if others > 1:
            for target in targets[:others]:
                self._add(target.cq, target.wl)
            if self.fits(cq, requests, allow_borrowing):
                for i in range(others - 1, -1, -1):
                    targets[i] = targets[-1]
                    targets.pop()
                return targets
            for target in targets[:others]:
                self._remove(target.cq, target.wl)
        self._fill_back_range(cq, requests, targets, allow_borrowing, others - 1, 0)
        return targets

    def _fill_back_range(
        self, cq: ClusterQueueInfo, requests: dict[FlavorResource, int], targets: list[Target], allow_borrowing: bool, first: int, last: int
    ) -> None:
        for i in range(first, last - 1, -1):
            self._add(targets[i].cq, targets[i].wl)
            if self.fits(cq, requests, allow_borrowing):
                targets[i] = targets[-1]
                targets.pop()
            else:
                self._remove(targets[i].cq, targets[i].wl)

    # --- ordering --------------------------------------------------------------------------------
    def _order_key(self, preemptor_cq: ClusterQueueInfo) -> Callable[[WorkloadInfo], tuple[object, ...]]:
        """Kueue's CandidatesOrdering as a sort key."""
        afs = self.lq_usage if preemptor_cq.admission_fair_sharing else None

        def key(wl: WorkloadInfo) -> tuple[object, ...]:
            same = wl.admission_cq == preemptor_cq.name
            lq = -afs(wl) if afs is not None and same else 0.0
            evicted, priority, reserved, uid = wl.candidate_key()
            return (evicted, same, lq, priority, reserved, uid)

        return key

    # --- entry points ----------------------------------------------------------------------------
    def get_targets(self, wl: WorkloadInfo, cq: ClusterQueueInfo, assignment: Assignment) -> list[Target]:
        frs = {(choice.name, resource) for ps in assignment.pod_sets for resource, choice in ps.flavors.items() if choice.mode == PREEMPT}
        return self.targets(wl, cq, frs, assignment.usage)

    def targets(
        self, wl: WorkloadInfo, cq: ClusterQueueInfo, frs: set[FlavorResource], requests: dict[FlavorResource, int]
    ) -> list[Target]:
        if self.fair_sharing:
            return self._fair(wl, cq, frs, requests)
        return self._classical(wl, cq, frs, requests)

    def simulate(self, cq: ClusterQueueInfo, wl: WorkloadInfo, fr: FlavorResource, quantity: int) -> tuple[str, int]:
        """Kueue's PreemptionOracle.SimulatePreemption for one (flavor, resource)."""
        targets = self.targets(wl, cq, {fr}, {fr: quantity})
        if not targets:
            borrow, _ = lowest_fitting_subtree_height(cq.node, fr, quantity)
            return NO_CANDIDATES, borrow
        for target in targets:
            self._remove(target.cq, target.wl)
        borrow, _ = lowest_fitting_subtree_height(cq.node, fr, quantity)
        self._restore(targets)
        if any(target.cq is cq for target in targets):
            return PREEMPT_POSSIBLE, borrow
        return RECLAIM_POSSIBLE, borrow

    # --- classic ---------------------------------------------------------------------------------
    def _classify(self, wl: WorkloadInfo, cq: ClusterQueueInfo, candidate: WorkloadInfo, frs: set[FlavorResource], advantage: bool) -> int:
        if frs.isdisjoint(candidate.usage):
            return 0
        same = candidate.admission_cq == cq.name
        policy = cq.within_cluster_queue if same else cq.reclaim_within_cohort
        if not satisfies_policy(wl, candidate, policy):
            return 0
        if same:
            return _WITHIN_CQ
        if advantage:
            return _HIERARCHICAL
        if cq.borrow_within_cohort == "Never":
            return _WITHOUT_BORROWING
        threshold = cq.borrow_threshold
        if candidate.priority >= wl.priority or (threshold is not None and candidate.priority > threshold):
            return _WITHOUT_BORROWING
        return _WHILE_BORROWING

    def _stream(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueueInfo,
        source: ClusterQueueInfo,
        lca: QuotaNode | None,
        frs: set[FlavorResource],
        advantage: bool,
    ) -> Iterator[tuple[tuple[bool, int, float, str], _Candidate]]:
        """One ClusterQueue's candidates, lazily, in candidate order.

        The cached list is sorted by priority after the evicted ones, so under the priority
        policies the scan stops at the first workload the policy protects.
        """
        policy = cq.within_cluster_queue if source is cq else cq.reclaim_within_cohort
        for candidate in source.sorted_workloads():
            if candidate is wl:
                continue
            if not candidate.evicted and not policy_admits_priority(wl, candidate.priority, policy):
                return
            variant = self._classify(wl, cq, candidate, frs, advantage)
            if variant:
                yield candidate.candidate_key(), _Candidate(candidate, source, lca, variant)

    def _collect_in_subtree(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueueInfo,
        current: QuotaNode,
        subtree_root: QuotaNode,
        skip: QuotaNode | None,
        frs: set[FlavorResource],
        advantage: bool,
        into: list[Iterator[tuple[tuple[bool, int, float, str], _Candidate]]],
    ) -> None:
        # Only children over their quota hold candidates (Kueue skips the ones within nominal).
        over = current.children_over(frs)
        for child in over:
            if child.is_cohort and child is not skip:
                self._collect_in_subtree(wl, cq, child, subtree_root, skip, frs, advantage, into)
        for child in over:
            if child.is_cohort or child is cq.node:
                continue
            source = self.cache.cluster_queues.get(child.name)
            if source is not None and source.workloads:
                into.append(self._stream(wl, cq, source, subtree_root, frs, advantage))

    def _classical(
        self, wl: WorkloadInfo, cq: ClusterQueueInfo, frs: set[FlavorResource], requests: dict[FlavorResource, int]
    ) -> list[Target]:
        same_streams = []
        if cq.within_cluster_queue != "Never":
            same_streams.append(self._stream(wl, cq, cq, None, frs, False))
        hierarchy_streams: list[Iterator[tuple[tuple[bool, int, float, str], _Candidate]]] = []
        priority_streams: list[Iterator[tuple[tuple[bool, int, float, str], _Candidate]]] = []
        if cq.node.parent is not None and cq.reclaim_within_cohort != "Never":
            advantage, remaining = cq.node.fits_in_subtree(requests)
            previous: QuotaNode | None = None
            node: QuotaNode | None = cq.node.parent
            while node is not None:
                self._collect_in_subtree(wl, cq, node, node, previous, frs, advantage, hierarchy_streams if advantage else priority_streams)
                fits, remaining = node.fits_in_subtree(remaining)
                advantage = advantage or fits
                previous = node
                node = node.parent
        same = _Lazy(same_streams, self._afs_key(cq))
        hierarchy = _Lazy(hierarchy_streams)
        priority = _Lazy(priority_streams)
        if not same and not hierarchy and not priority:
            return []
        forbidden = cq.borrow_within_cohort == "Never"
        node = cq.node
        under_nominal = all(node.nominal(fr) > node.usage.get(fr, 0) for fr in frs)
        runs: tuple[bool, ...]
        if (not hierarchy and not priority) or (forbidden and not under_nominal):
            runs = (True,)
        elif forbidden and not hierarchy:
            runs = (False, True)
        else:
            runs = (True, False)
        # With borrowWithinCohort Never every candidate of the priority group (other queues
        # reached without the hierarchical advantage) is `_WITHOUT_BORROWING`, which `_valid`
        # rejects in a run that allows borrowing: such a run need not read them at all.
        barred = priority if forbidden else None
        for allow_borrowing in runs:
            targets = self._classical_run(
                cq, frs, requests, allow_borrowing, (hierarchy, priority, same), barred if allow_borrowing else None
            )
            if targets:
                return targets
        return []

    def _classical_run(
        self,
        cq: ClusterQueueInfo,
        frs: set[FlavorResource],
        requests: dict[FlavorResource, int],
        allow_borrowing: bool,
        groups: tuple[_Lazy, _Lazy, _Lazy],
        barred: _Lazy | None = None,
    ) -> list[Target]:
        """One of Kueue's runs: remove candidates in order until the workload fits, then fill back.

        Order: the evicted ones (hierarchy, priority, own queue), then the rest likewise. Two
        exact shortcuts leave out work whose outcome is known (see `_skip_others`), and the
        `barred` group, none of whose candidates is valid in this run (`_valid` would skip
        each of them), is not read.
        """
        same = groups[2]
        targets: list[Target] = []
        for evicted in (True, False):
            for group in groups:
                # Tested before the group's emptiness, which merges its streams to find out.
                # Leaving out `_skip_others` here loses nothing: when it says the run fails,
                # no removal can lift the own cap, and the run ends with no targets anyway.
                if group is barred:
                    continue
                if group is not same and group:
                    skip = self._skip_others(cq, requests, allow_borrowing, same, evicted)
                    if skip is None:
                        self._restore(targets)
                        return []
                    if skip:
                        continue
                for cand in group.items(evicted):
                    if not self._valid(cq, cand, frs, allow_borrowing):
                        continue
                    self._remove(cand.cq, cand.wl)
                    targets.append(Target(cand.wl, cand.cq, _VARIANT_REASON[cand.variant]))
                    if not self._own_cap_blocks(cq, requests, allow_borrowing) and self.fits(cq, requests, allow_borrowing):
                        targets = self._fill_back(cq, requests, targets, allow_borrowing)
                        self._restore(targets)
                        return targets
        self._restore(targets)
        return []

    def _skip_others(
        self, cq: ClusterQueueInfo, requests: dict[FlavorResource, int], allow_borrowing: bool, same: _Lazy, evicted: bool
    ) -> bool | None:
        """Whether to leave out the next group of other queues' candidates; None: the run fails.

        While the preemptor's own ClusterQueue caps it below its request (nominal quota in a
        no-borrowing run, or nominal + borrowingLimit), removing other queues' workloads
        cannot make it fit; only removing its own lower-priority workloads, which come later,
        lowers that cap. Kueue still removes the others first, and they stay evicted when the
        cohort is short of room too: the minimal set then needs both kinds. So:
        - if even removing every own-queue candidate still to come leaves it capped, the run
          finds nothing (None);
        - if the tree above already has room for the request with the others in place, each
          fit test Kueue makes is decided by the own cap alone and fill-back adds every other
          workload back: skipping them gives the same targets (True);
        - otherwise the others are removed as Kueue does (False).
        """
        if not self._own_cap_blocks(cq, requests, allow_borrowing):
            return False
        if not self._own_candidates_lift_cap(cq, requests, allow_borrowing, same, evicted):
            return None
        node = cq.node
        return all(value <= 0 or value <= node.raw_available(fr, own_limit=False) for fr, value in requests.items())

    def _own_candidates_lift_cap(
        self, cq: ClusterQueueInfo, requests: dict[FlavorResource, int], allow_borrowing: bool, same: _Lazy, evicted: bool
    ) -> bool:
        """Whether removing the own-queue candidates still to come lifts the own cap at some point."""
        freed: dict[FlavorResource, int] = {}
        for phase in (True, False) if evicted else (False,):
            for cand in same.items(phase):
                for fr, value in cand.wl.usage.items():
                    freed[fr] = freed.get(fr, 0) + value
                if not self._own_cap_blocks(cq, requests, allow_borrowing, freed):
                    return True
        return False

    @staticmethod
    def _own_cap_blocks(
        cq: ClusterQueueInfo, requests: dict[FlavorResource, int], allow_borrowing: bool, freed: dict[FlavorResource, int] | None = None
    ) -> bool:
        """True when the queue's own quota alone rules out the request, at its usage less `freed`.

        `available` is the smaller of what the tree above offers and nominal + borrowingLimit
        − usage, so this cap depends only on the queue's own usage.
        """
        node = cq.node
        for fr, value in requests.items():
            if value <= 0:
                continue
            usage = node.usage.get(fr, 0)
            if freed:
                usage -= freed.get(fr, 0)
            quota = node.quota.get(fr)
            nominal = quota.nominal if quota is not None else 0
            if not allow_borrowing:
                cap = nominal
            elif quota is not None and quota.borrowing_limit is not None and node.parent is not None:
                cap = nominal + quota.borrowing_limit
            else:
                continue
            if cap < usage + value:
                return True
        return False

    def _afs_key(self, cq: ClusterQueueInfo) -> Callable[[_Candidate], tuple[Any, ...]] | None:
        """With admission fair sharing, same-queue candidates from busier LocalQueues go first."""
        if self.lq_usage is None or not cq.admission_fair_sharing:
            return None
        usage = self.lq_usage
        return lambda cand: (not cand.wl.evicted, -usage(cand.wl), *cand.wl.candidate_key()[1:])

    @staticmethod
    def _valid(cq: ClusterQueueInfo, cand: _Candidate, frs: set[FlavorResource], allow_borrowing: bool) -> bool:
        if cand.cq is cq:
            return True
        if allow_borrowing and cand.variant == _WITHOUT_BORROWING:
            return False
        if cand.cq.node.within_nominal(frs):
            return False
        node = cand.cq.node.parent
        while node is not None and node is not cand.lca:
            if node.within_nominal(frs):
                return False
            node = node.parent
        return True

    # --- fair sharing ------------------------------------------------------------------------------
    def _fair(self, wl: WorkloadInfo, cq: ClusterQueueInfo, frs: set[FlavorResource], requests: dict[FlavorResource, int]) -> list[Target]:
        candidates: list[tuple[WorkloadInfo, ClusterQueueInfo]] = []
        if cq.within_cluster_queue != "Never":
            for cand in cq.workloads.values():
                if cand is not wl and satisfies_policy(wl, cand, cq.within_cluster_queue) and uses_resources(cand, frs):
                    candidates.append((cand, cq))
        if cq.node.parent is not None and cq.reclaim_within_cohort != "Never":
            for other in self.cache.cohort_cluster_queues(cq.node.root()):
                if other is cq or not any(other.node.is_borrowing(fr) for fr in frs):
                    continue
                for cand in other.workloads.values():
                    if satisfies_policy(wl, cand, cq.reclaim_within_cohort) and uses_resources(cand, frs):
                        candidates.append((cand, other))
        if not candidates:
            return []
        key = self._order_key(cq)
        candidates.sort(key=lambda pair: key(pair[0]))
        cq.node.add_usages(requests)
        fits, targets, retry = self._first_strategy(wl, cq, frs, requests, candidates, self.strategies[0])
        if not fits and len(self.strategies) > 1:
            fits, targets = self._second_strategy(cq, requests, retry, targets)
        cq.node.remove_usages(requests)
        if not fits:
            self._restore(targets)
            return []
        targets = self._fill_back(cq, requests, targets, True)
        self._restore(targets)
        return targets

    def _fits_fair(self, cq: ClusterQueueInfo, requests: dict[FlavorResource, int]) -> bool:
        cq.node.remove_usages(requests)
        try:
            return self.fits(cq, requests, True)
        finally:
            cq.node.add_usages(requests)

    def _first_strategy(
        self,
        wl: WorkloadInfo,
        cq: ClusterQueueInfo,
        frs: set[FlavorResource],
        requests: dict[FlavorResource, int],
        candidates: list[tuple[WorkloadInfo, ClusterQueueInfo]],
        strategy: str,
    ) -> tuple[bool, list[Target], list[tuple[WorkloadInfo, ClusterQueueInfo]]]:
        ordering = _TargetOrdering(self, cq, candidates)
        targets: list[Target] = []
        retry: list[tuple[WorkloadInfo, ClusterQueueInfo]] = []
        within_nominal = not any(cq.node.is_borrowing(fr) for fr in frs)
        for target_cq in ordering.iterate():
            if target_cq is cq or within_nominal:
                # In-queue preemption, or Kueue's nominal-first rule: no share test.
                cand = ordering.pop(target_cq)
                self._remove(target_cq, cand)
                targets.append(Target(cand, target_cq, IN_CLUSTER_QUEUE if target_cq is cq else IN_COHORT_RECLAMATION))
                if self._fits_fair(cq, requests):
                    return True, targets, []
                continue
            preemptor_new, target_old = ordering.shares(target_cq)
            if preemptor_new.weighted() == float("inf") and target_old.weighted() != float("inf"):
                while ordering.has(target_cq):
                    retry.append((ordering.pop(target_cq), target_cq))
                continue
            while ordering.has(target_cq):
                cand = ordering.pop(target_cq)
                target_new = ordering.share_after_removal(target_cq, cand)
                if strategy == LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
                    passed = fairshare.compare(preemptor_new, target_new) <= 0
                else:
                    passed = fairshare.compare(preemptor_new, target_old) < 0
                if passed:
                    self._remove(target_cq, cand)
                    targets.append(Target(cand, target_cq, IN_COHORT_FAIR_SHARING))
                    if self._fits_fair(cq, requests):
                        return True, targets, []
                    break
                retry.append((cand, target_cq))
        return False, targets, retry

    def _second_strategy(
        self,
        cq: ClusterQueueInfo,
        requests: dict[FlavorResource, int],
        retry: list[tuple[WorkloadInfo, ClusterQueueInfo]],
        targets: list[Target],
    ) -> tuple[bool, list[Target]]:
        ordering = _TargetOrdering(self, cq, retry)
        for target_cq in ordering.iterate():
            preemptor_new, target_old = ordering.shares(target_cq)
            cand = ordering.pop(target_cq)
            if fairshare.compare(preemptor_new, target_old) < 0:
                self._remove(target_cq, cand)
                targets.append(Target(cand, target_cq, IN_COHORT_FAIR_SHARING))
                if self._fits_fair(cq, requests):
                    return True, targets
            ordering.drop(target_cq)
        return False, targets


class _TargetOrdering:
    """Kueue's TargetClusterQueueOrdering: descend from the root to the highest-DRS borrower."""

    def __init__(self, preemptor: Preemptor, cq: ClusterQueueInfo, candidates: list[tuple[WorkloadInfo, ClusterQueueInfo]]) -> None:
        self.preemptor = preemptor
        self.cq = cq
        self.by_cq: dict[str, list[WorkloadInfo]] = {}
        self.cq_of: dict[str, ClusterQueueInfo] = {}
        for wl, owner in candidates:
            self.by_cq.setdefault(owner.name, []).append(wl)
            self.cq_of[owner.name] = owner
        for wls in self.by_cq.values():
            wls.reverse()  # pop() from the end takes the first candidate
        self.ancestors = {id(node) for node in cq.node.path()[1:]}
        self.pruned_cqs: set[str] = set()
        self.pruned_cohorts: set[int] = set()
        self.key = preemptor._order_key(cq)

    def has(self, cq: ClusterQueueInfo) -> bool:
        return bool(self.by_cq.get(cq.name))

    def pop(self, cq: ClusterQueueInfo) -> WorkloadInfo:
        return self.by_cq[cq.name].pop()

    def drop(self, cq: ClusterQueueInfo) -> None:
        self.pruned_cqs.add(cq.name)

    def iterate(self) -> Iterator[ClusterQueueInfo]:
        cq = self.cq
        if cq.node.parent is None:
            while cq.name not in self.pruned_cqs and self.has(cq):
                yield cq
            return
        root = cq.node.root()
        while id(root) not in self.pruned_cohorts:
            target = self._next(root)
            if target is not None:
                yield target

    def _next(self, cohort: QuotaNode) -> ClusterQueueInfo | None:
        best_cq: ClusterQueueInfo | None = None
        best_cq_drs = fairshare.NEGATIVE
        for child in cohort.children:
            if child.is_cohort or child.name in self.pruned_cqs:
                continue
            info = self.preemptor.cache.cluster_queues.get(child.name)
            if info is None:
                continue
            drs = fairshare.dominant_resource_share(child)
            order = fairshare.compare(drs, best_cq_drs)
            if (not drs.borrowing and info is not self.cq) or not self.has(info):
                self.pruned_cqs.add(child.name)
            elif order == 0 and best_cq is not None:
                if self.key(self.by_cq[info.name][-1]) < self.key(self.by_cq[best_cq.name][-1]):
                    best_cq = info
            elif order == 1:
                best_cq, best_cq_drs = info, drs
        best_cohort: QuotaNode | None = None
        best_cohort_drs = fairshare.NEGATIVE
        for child in cohort.children:
            if not child.is_cohort or id(child) in self.pruned_cohorts:
                continue
            drs = fairshare.dominant_resource_share(child)
            if not drs.borrowing and id(child) not in self.ancestors:
                self.pruned_cohorts.add(id(child))
            elif fairshare.compare(drs, best_cohort_drs) >= 0:
                best_cohort, best_cohort_drs = child, drs
        if best_cohort is None and best_cq is None:
            self.pruned_cohorts.add(id(cohort))
            return None
        if best_cohort is not None and fairshare.compare(best_cohort_drs, best_cq_drs) >= 0:
            return self._next(best_cohort)
        return best_cq

    def _almost_lcas(self, target: ClusterQueueInfo) -> tuple[QuotaNode, QuotaNode]:
        preemptor_path = self.cq.node.path()
        target_path = target.node.path()
        target_ids = {id(n) for n in target_path}
        lca = next(n for n in preemptor_path if id(n) in target_ids)
        preemptor_side = preemptor_path[preemptor_path.index(lca) - 1] if preemptor_path.index(lca) > 0 else lca
        target_index = next(i for i, n in enumerate(target_path) if n is lca)
        target_side = target_path[target_index - 1] if target_index > 0 else lca
        return preemptor_side, target_side

    def shares(self, target: ClusterQueueInfo) -> tuple[fairshare.DRS, fairshare.DRS]:
        preemptor_side, target_side = self._almost_lcas(target)
        return fairshare.dominant_resource_share(preemptor_side), fairshare.dominant_resource_share(target_side)

    def share_after_removal(self, target: ClusterQueueInfo, wl: WorkloadInfo) -> fairshare.DRS:
        target.node.remove_usages(wl.usage)
        try:
            return fairshare.dominant_resource_share(self._almost_lcas(target)[1])
        finally:
            target.node.add_usages(wl.usage)
