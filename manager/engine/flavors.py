"""Flavor assignment: which ResourceFlavor each podSet's resources get, and at what cost.

Kueue's `flavorassigner`: podSets in order, one flavor per resource group, flavors tried in
the ClusterQueue's order (resuming where the last attempt stopped), each flavor checked for
taints and node affinity and then for quota; flavorFungibility decides when to stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from manager.api import constants as c
from manager.engine.cache import Cache, ClusterQueueInfo
from manager.engine.quota import lowest_fitting_subtree_height
from manager.engine.selectors import flavor_matches_pod, format_taint, untolerated_taint
from manager.engine.units import FlavorResource, format_amount
from manager.engine.workload import (
    REASON_EXCEEDS_MAX_QUOTA,
    REASON_NO_MATCHING_FLAVOR,
    REASON_WAITING_FOR_QUOTA,
    PodSetInfo,
    WorkloadInfo,
)

# Public assignment modes, worst to best (FlavorAssignmentMode).
NO_FIT, PREEMPT, DEFERRED_FIT, FIT = 0, 1, 2, 3

# Internal preemption modes, worst to best (preemptionMode).
P_NO_FIT, P_NO_CANDIDATES, P_PREEMPT, P_RECLAIM, P_FIT = 0, 1, 2, 3, 4

# What the preemption oracle reports for one (flavor, resource).
NO_CANDIDATES, PREEMPT_POSSIBLE, RECLAIM_POSSIBLE = "NoCandidates", "Preempt", "Reclaim"

_SEVERITY = {"": 0, "TopologyPlacementFailed": 1, REASON_WAITING_FOR_QUOTA: 2, REASON_EXCEEDS_MAX_QUOTA: 3, REASON_NO_MATCHING_FLAVOR: 4}

Oracle = Callable[[ClusterQueueInfo, WorkloadInfo, FlavorResource, int], tuple[str, int]]
"""simulate_preemption(cq, workload, fr, quantity) -> (possibility, borrowing level after)."""

INFINITE_LEVEL = 1 << 30


def most_severe(a: str, b: str) -> str:
    return a if _SEVERITY.get(a, 0) >= _SEVERITY.get(b, 0) else b


def public_mode(pmode: int) -> int:
    if pmode == P_FIT:
        return FIT
    if pmode == P_NO_FIT:
        return NO_FIT
    return PREEMPT


@dataclass(slots=True)
class FlavorChoice:
    name: str
    mode: int
    borrow: int
    tried_index: int = -1


@dataclass(slots=True)
class PodSetAssignment:
    name: str
    flavors: dict[str, FlavorChoice]
    reasons: list[str]
    requests: dict[str, int]
    count: int
    attempts: list[tuple[str, int, str]] = field(default_factory=list)  # (flavor, public mode, no-fit reason)
    error: str = ""

    @property
    def is_fit(self) -> bool:
        return not self.reasons and not self.error

    def mode(self) -> int:
        if self.is_fit:
            return FIT
        if self.error or not self.flavors:
            return NO_FIT
        return min(choice.mode for choice in self.flavors.values())

    def message(self) -> str:
        return self.error or ", ".join(sorted(self.reasons))


@dataclass(slots=True)
class LastAssignment:
    """Where each podSet's flavor scan stopped (Kueue's AssignmentClusterQueueState)."""

    tried: list[dict[str, int]]
    generation: int
    cycle: int
    scheduling_hash: str

    def pending_flavors(self) -> bool:
        return any(index != -1 for per_ps in self.tried for index in per_ps.values())

    def next_flavor(self, ps_index: int, resource: str) -> int:
        if ps_index >= len(self.tried):
            return 0
        index = self.tried[ps_index].get(resource, -1)
        return index + 1


@dataclass(slots=True)
class Assignment:
    pod_sets: list[PodSetAssignment]
    borrowing: int
    usage: dict[FlavorResource, int]
    last: LastAssignment
    no_fit_reason: str = ""
    forced_mode: int | None = None

    def representative_mode(self) -> int:
        if self.forced_mode is not None:
            return self.forced_mode
        if not self.pod_sets:
            return NO_FIT
        return min(ps.mode() for ps in self.pod_sets)

    def message(self) -> str:
        parts = []
        for ps in self.pod_sets:
            if ps.is_fit:
                continue
            if ps.error:
                return f"failed to assign flavors to pod set {ps.name}: {ps.error}"
            parts.append(f"couldn't assign flavors to pod set {ps.name}: {ps.message()}")
        return "; ".join(parts)

    def flavors_used(self) -> set[str]:
        return {choice.name for ps in self.pod_sets for choice in ps.flavors.values()}


def is_preferred(a: tuple[int, int], b: tuple[int, int], preference: str) -> bool:
    """Kueue's isPreferred: is granular mode a = (preemption mode, borrowing level) better than b?"""
    if a[0] == P_NO_FIT:
        return False
    if b[0] == P_NO_FIT:
        return True
    a_none, b_none = a[0] == P_NO_CANDIDATES, b[0] == P_NO_CANDIDATES
    if a_none != b_none:
        return not a_none
    if preference == "PreemptionOverBorrowing":
        if a[1] != b[1]:
            return a[1] < b[1]
        return a[0] > b[0]
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] < b[1]


def should_try_next_flavor(mode: tuple[int, int], cq: ClusterQueueInfo) -> bool:
    if mode[0] in (P_NO_FIT, P_NO_CANDIDATES):
        return True
    if mode[0] in (P_PREEMPT, P_RECLAIM) and cq.when_can_preempt == "TryNextFlavor":
        return True
    return mode[1] != 0 and cq.when_can_borrow == "TryNextFlavor"


@dataclass(eq=False)
class FlavorAssigner:
    """Assigns flavors for one workload in one ClusterQueue, against the current tree state."""

    cache: Cache
    cq: ClusterQueueInfo
    wl: WorkloadInfo
    _: KW_ONLY
    oracle: Oracle
    fair_sharing: bool
    ignore_undeclared: bool = False
    cycle: int = 0
    last: LastAssignment | None = None

    def can_preempt_while_borrowing(self) -> bool:
        cq = self.cq
        return cq.borrow_within_cohort != "Never" or (self.fair_sharing and cq.reclaim_within_cohort != "Never")

    def assign(self, counts: list[int] | None = None) -> Assignment:
        cq = self.cq
        usage: dict[FlavorResource, int] = {}
        assignment = Assignment([], 0, usage, LastAssignment([], cq.generation, self.cycle, self.wl.scheduling_hash))
        for index, ps in enumerate(self.wl.pod_sets):
            count = ps.effective_count if counts is None else counts[index]
            requests = ps.total(count)
            if cq.covers_pods:
                requests[c.PODS_RESOURCE] = count
            psa = PodSetAssignment(ps.name, {}, [], requests, count)
            group_flavors: dict[str, FlavorChoice] = {}
            failed = False
            for resource in sorted(requests):
                quantity = requests[resource]
                if resource not in cq.group_of and (quantity == 0 or self.ignore_undeclared):
                    continue
                if resource in group_flavors:
                    continue
                found, reasons, attempts, error = self._find_flavor(index, ps, requests, resource, usage)
                psa.attempts += attempts
                if error or not found:
                    psa.reasons = reasons
                    psa.error = error
                    group_flavors = {}
                    failed = True
                    break
                group_flavors.update(found)
                psa.reasons += reasons
            psa.flavors = {r: f for r, f in group_flavors.items() if r in requests}
            assignment.pod_sets.append(psa)
            tried: dict[str, int] = {}
            for resource, choice in psa.flavors.items():
                assignment.borrowing = max(assignment.borrowing, choice.borrow)
                value = requests.get(resource, 0)
                if value:
                    fr = (choice.name, resource)
                    usage[fr] = usage.get(fr, 0) + value
                tried[resource] = choice.tried_index
            assignment.last.tried.append(tried)
            if failed or (requests and not psa.flavors and not psa.is_fit):
                assignment.no_fit_reason = self._no_fit_reason(assignment)
                return assignment
        if assignment.representative_mode() == NO_FIT:
            assignment.no_fit_reason = self._no_fit_reason(assignment)
        return assignment

    def _no_fit_reason(self, assignment: Assignment) -> str:
        if assignment.representative_mode() != NO_FIT:
            return ""
        overall = ""
        for ps in assignment.pod_sets:
            if ps.mode() != NO_FIT:
                continue
            if not ps.attempts:
                overall = most_severe(overall, REASON_NO_MATCHING_FLAVOR)
                continue
            per_group: dict[int, str] = {}
            for i, (flavor, mode, reason) in enumerate(ps.attempts):
                if mode != NO_FIT:
                    continue
                groups = [g for g, info in enumerate(self.cq.groups) if flavor in info.flavors] or [-1 - i]
                for g in groups:
                    if g not in per_group or _SEVERITY.get(reason, 0) < _SEVERITY.get(per_group[g], 0):
                        per_group[g] = reason
            ps_reason = ""
            for reason in per_group.values():
                ps_reason = most_severe(ps_reason, reason)
            overall = most_severe(overall, ps_reason)
        return overall

    def _find_flavor(
        self,
        ps_index: int,
        ps: PodSetInfo,
        requests: dict[str, int],
        resource: str,
        usage: dict[FlavorResource, int],
    ) -> tuple[dict[str, FlavorChoice] | None, list[str], list[tuple[str, int, str]], str]:
        cq = self.cq
        group_index = cq.group_of.get(resource)
        if group_index is None:
            # No group covers it: no flavor can ever match (reported as NoMatchingFlavor).
            return None, [f"resource {resource} unavailable in ClusterQueue"], [("", NO_FIT, REASON_NO_MATCHING_FLAVOR)], ""
        group = cq.groups[group_index]
        group_requests = {r: requests[r] for r in sorted(requests) if r in group.covered}
        reasons: list[str] = []
        attempts: list[tuple[str, int, str]] = []
        best: dict[str, FlavorChoice] | None = None
        best_mode = (P_NO_FIT, INFINITE_LEVEL)
        start = self.last.next_flavor(ps_index, resource) if self.last is not None else 0
        attempted = -1
        for index in range(start, len(group.flavors)):
            attempted = index
            flavor_name = group.flavors[index]
            structural = self._check_flavor(flavor_name, ps)
            if structural:
                reasons.append(structural)
                attempts.append((flavor_name, NO_FIT, REASON_NO_MATCHING_FLAVOR))
                continue
            choices: dict[str, FlavorChoice] = {}
            mode = (P_FIT, 0)
            flavor_reason = ""
            for name, value in group_requests.items():
                fr = (flavor_name, name)
                pmode, borrow, message, no_fit_reason = self._fits_quota(fr, usage.get(fr, 0), value)
                if message:
                    reasons.append(message)
                    flavor_reason = most_severe(flavor_reason, no_fit_reason)
                this = (pmode, borrow)
                if is_preferred(mode, this, cq.preference):
                    mode = this
                if mode[0] == P_NO_FIT:
                    break
                choices[name] = FlavorChoice(flavor_name, public_mode(pmode), borrow)
            attempts.append((flavor_name, public_mode(mode[0]), flavor_reason if mode[0] == P_NO_FIT else ""))
            if not should_try_next_flavor(mode, cq):
                best, best_mode = choices, mode
                break
            if is_preferred(mode, best_mode, cq.preference):
                best, best_mode = choices, mode
        if best is not None:
            tried = -1 if attempted == len(group.flavors) - 1 else attempted
            for choice in best.values():
                choice.tried_index = tried
            if best_mode[0] == P_FIT:
                return best, [], attempts, ""
        return best, reasons, attempts, ""

    def _check_flavor(self, flavor_name: str, ps: PodSetInfo) -> str:
        flavor = self.cache.flavors.get(flavor_name)
        if flavor is None:
            return f"flavor {flavor_name} not found"
        spec = flavor.spec
        taint = untolerated_taint(spec.node_taints or [], [*ps.tolerations, *(spec.tolerations or [])])
        if taint is not None:
            return f"untolerated taint {format_taint(taint)} in flavor {flavor_name}"
        if not flavor_matches_pod(ps.spec, spec.node_labels or {}):
            return f"flavor {flavor_name} doesn't match node affinity"
        return ""

    def _fits_quota(self, fr: FlavorResource, assumed: int, request: int) -> tuple[int, int, str, str]:
        """Kueue's fitsResourceQuota: (preemption mode, borrowing level, message, no-fit reason)."""
        node = self.cq.node
        available = node.available(fr)
        maximum = node.potential_available(fr)
        value = assumed + request
        resource = fr[1]
        if value > maximum:
            message = (
                f"insufficient quota for {resource} in flavor {fr[0]}, previously considered podsets requests "
                f"({format_amount(resource, assumed)}) + current podset request ({format_amount(resource, request)}) "
                f"> maximum capacity ({format_amount(resource, maximum)})"
            )
            return P_NO_FIT, 0, message, REASON_EXCEEDS_MAX_QUOTA
        borrow, may_reclaim = lowest_fitting_subtree_height(node, fr, value)
        if value <= available:
            return P_FIT, borrow, "", ""
        message = f"insufficient unused quota for {resource} in flavor {fr[0]}, {format_amount(resource, value - available)} more needed"
        if node.nominal(fr) >= value or may_reclaim or self.can_preempt_while_borrowing():
            possibility, borrow_after = self.oracle(self.cq, self.wl, fr, value)
            mode = {NO_CANDIDATES: P_NO_CANDIDATES, PREEMPT_POSSIBLE: P_PREEMPT, RECLAIM_POSSIBLE: P_RECLAIM}[possibility]
            return mode, borrow_after, message, ""
        return P_NO_FIT, borrow, message, REASON_WAITING_FOR_QUOTA
