"""The quota tree: ClusterQueues and Cohorts as resource nodes, with Kueue's formulas.

Each node holds per (flavor, resource) its own quota, its subtree quota (what it and the
children below it can lend upward) and its usage (for a cohort, only what spills out of each
child's guaranteed part). Usage changes propagate incrementally, exactly as Kueue's
`addUsage`/`removeUsage`, so the tree never has to be rebuilt to admit or evict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from manager.engine.units import FlavorResource


@dataclass(frozen=True, slots=True)
class Quota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


class QuotaNode:
    """A ClusterQueue (leaf) or a Cohort in the quota tree."""

    __slots__ = ("children", "is_cohort", "name", "over", "parent", "quota", "subtree", "usage", "weight_milli")

    def __init__(self, name: str, *, is_cohort: bool, quota: dict[FlavorResource, Quota] | None = None, weight_milli: int = 1000):
        self.name = name
        self.is_cohort = is_cohort
        self.parent: QuotaNode | None = None
        self.children: list[QuotaNode] = []
        self.quota: dict[FlavorResource, Quota] = quota or {}
        self.subtree: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        self.weight_milli = weight_milli
        # For a cohort: per fr, the children using more than their subtree quota. Kept up to
        # date on every usage change, so preemption finds the borrowers without a scan.
        self.over: dict[FlavorResource, set[QuotaNode]] = {}

    def __repr__(self) -> str:
        return f"QuotaNode({'cohort' if self.is_cohort else 'cq'} {self.name})"

    # --- structure -------------------------------------------------------------------------
    def root(self) -> QuotaNode:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def path(self) -> list[QuotaNode]:
        """This node and its ancestors, from this node up to the root."""
        out = [self]
        node = self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def height(self) -> int:
        """Kueue's cohort height: 1 for a cohort of only ClusterQueues, +1 per cohort level."""
        if not self.is_cohort:
            return 0
        best = min(len(self.children), 1)
        for child in self.children:
            if child.is_cohort:
                best = max(best, child.height() + 1)
        return best

    # --- quota formulas (kueue-semantics.md §2) ----------------------------------------------
    def local_quota(self, fr: FlavorResource) -> int:
        """Guaranteed quota: what only this subtree may use (subtree − lendingLimit)."""
        quota = self.quota.get(fr)
        if quota is None or quota.lending_limit is None:
            return 0
        return max(0, self.subtree.get(fr, 0) - quota.lending_limit)

    def local_available(self, fr: FlavorResource) -> int:
        return max(0, self.local_quota(fr) - self.usage.get(fr, 0))

    def raw_available(self, fr: FlavorResource, *, own_limit: bool = True) -> int:
        """Kueue's `available`: may be negative after over-admission.

        Folded from the root down instead of recursing up: this is the scheduler's hottest call.
        With `own_limit=False` this node's own borrowingLimit is left out: what the tree above
        could give it (preemption uses it to tell the queue's own cap from the cohort's).
        """
        path = [self]
        node = self.parent
        while node is not None:
            path.append(node)
            node = node.parent
        root = path.pop()
        available = root.subtree.get(fr, 0) - root.usage.get(fr, 0)
        for node in reversed(path):
            quota = node.quota.get(fr)
            usage = node.usage.get(fr, 0)
            if quota is None:
                continue  # no quota of its own for fr: nothing guaranteed, no borrowing limit
            local = 0
            if quota.lending_limit is not None:
                local = node.subtree.get(fr, 0) - quota.lending_limit
                if local < 0:
                    local = 0
            if quota.borrowing_limit is not None and (own_limit or node is not self):
                used_in_parent = usage - local if usage > local else 0
                limited = node.subtree.get(fr, 0) - local - used_in_parent + quota.borrowing_limit
                if limited < available:
                    available = limited
            if local > usage:
                available += local - usage
        return available

    def available(self, fr: FlavorResource) -> int:
        """What fits now without preemption."""
        return max(0, self.raw_available(fr))

    def potential_available(self, fr: FlavorResource) -> int:
        """The largest request that could be admitted if all usage were zero."""
        if self.parent is None:
            return self.subtree.get(fr, 0)
        result = self.local_quota(fr) + self.parent.potential_available(fr)
        quota = self.quota.get(fr)
        if quota is not None and quota.borrowing_limit is not None:
            result = min(self.subtree.get(fr, 0) + quota.borrowing_limit, result)
        return result

    def nominal(self, fr: FlavorResource) -> int:
        quota = self.quota.get(fr)
        return quota.nominal if quota is not None else 0

    def borrowing_with(self, fr: FlavorResource, value: int) -> bool:
        """Would this node borrow if `value` more were used? (Cohorts compare with subtree quota.)"""
        limit = self.subtree.get(fr, 0) if self.is_cohort else self.nominal(fr)
        return limit < self.usage.get(fr, 0) + value

    def is_borrowing(self, fr: FlavorResource) -> bool:
        return self.borrowing_with(fr, 0)

    def within_nominal(self, frs: Iterable[FlavorResource]) -> bool:
        """Kueue's `IsWithinNominalInResources`: subtree quota covers usage for every fr."""
        usage = self.usage
        subtree = self.subtree
        return all(usage.get(fr, 0) <= subtree.get(fr, 0) for fr in frs)

    # --- usage propagation ------------------------------------------------------------------
    def _track(self, fr: FlavorResource) -> None:
        parent = self.parent
        if parent is None:
            return
        over = self.usage.get(fr, 0) > self.subtree.get(fr, 0)
        members = parent.over.get(fr)
        if over:
            if members is None:
                parent.over[fr] = {self}
            else:
                members.add(self)
        elif members is not None:
            members.discard(self)

    def _set_usage(self, fr: FlavorResource, old: int, new: int) -> None:
        self.usage[fr] = new
        parent = self.parent
        if parent is not None:
            subtree = self.subtree.get(fr, 0)
            if (old > subtree) != (new > subtree):
                self._track(fr)

    def add_usage(self, fr: FlavorResource, value: int) -> None:
        node: QuotaNode | None = self
        while node is not None and value:
            old = node.usage.get(fr, 0)
            local_available = node.local_quota(fr) - old
            node._set_usage(fr, old, old + value)
            if value <= local_available:
                return
            if local_available > 0:
                value -= local_available
            node = node.parent

    def remove_usage(self, fr: FlavorResource, value: int) -> None:
        node: QuotaNode | None = self
        while node is not None and value:
            old = node.usage.get(fr, 0)
            stored = old - node.local_quota(fr)
            node._set_usage(fr, old, old - value)
            if stored <= 0:
                return
            value = min(value, stored)
            node = node.parent

    def children_over(self, frs: Iterable[FlavorResource]) -> list[QuotaNode]:
        """Children not within their subtree quota for some fr (Kueue's !IsWithinNominal), in order."""
        found: set[QuotaNode] = set()
        for fr in frs:
            members = self.over.get(fr)
            if members:
                found |= members
        if not found:
            return []
        return [child for child in self.children if child in found]

    def add_usages(self, usage: dict[FlavorResource, int]) -> None:
        for fr, value in usage.items():
            self.add_usage(fr, value)

    def remove_usages(self, usage: dict[FlavorResource, int]) -> None:
        for fr, value in usage.items():
            self.remove_usage(fr, value)

    def fits_in_subtree(self, requests: dict[FlavorResource, int]) -> tuple[bool, dict[FlavorResource, int]]:
        """Kueue's `QuantitiesFitInQuota`: fits, and what remains to find higher up."""
        fits = True
        remaining: dict[FlavorResource, int] = {}
        for fr, value in requests.items():
            if self.subtree.get(fr, 0) < self.usage.get(fr, 0) + value:
                fits = False
            remaining[fr] = max(0, value - self.local_available(fr))
        return fits, remaining


def lowest_fitting_subtree_height(cq: QuotaNode, fr: FlavorResource, value: int) -> tuple[int, bool]:
    """Kueue's `FindHeightOfLowestSubtreeThatFits`: (borrowing level, may reclaim in hierarchy)."""
    if cq.parent is None or not cq.borrowing_with(fr, value):
        return 0, cq.parent is not None
    remaining = value - cq.local_available(fr)
    node: QuotaNode | None = cq.parent
    while node is not None:
        if node.subtree.get(fr, 0) >= node.usage.get(fr, 0) + remaining:
            return node.height(), node.parent is not None
        remaining -= node.local_available(fr)
        node = node.parent
    return cq.root().height(), False


def recompute_tree(root: QuotaNode, cq_usage: dict[str, dict[FlavorResource, int]] | None = None) -> None:
    """Compute subtree quotas (and cohort usage from leaf usage) for a whole tree, from scratch.

    Used when quotas or edges change; admission and eviction use `add_usage`/`remove_usage`.
    """

    def visit(node: QuotaNode) -> None:
        subtree: dict[FlavorResource, int] = {fr: quota.nominal for fr, quota in node.quota.items()}
        if node.is_cohort:
            usage: dict[FlavorResource, int] = {}
            for child in node.children:
                visit(child)
                for fr, value in child.subtree.items():
                    subtree[fr] = subtree.get(fr, 0) + value - child.local_quota(fr)
                for fr, value in child.usage.items():
                    spill = max(0, value - child.local_quota(fr))
                    if spill:
                        usage[fr] = usage.get(fr, 0) + spill
                    else:
                        usage.setdefault(fr, 0)
            node.subtree = subtree
            node.usage = usage
        else:
            node.subtree = subtree
            if cq_usage is not None:
                node.usage = dict(cq_usage.get(node.name, {}))

    visit(root)

    def track(node: QuotaNode) -> None:
        node.over = {}
        for child in node.children:
            track(child)
            for fr in set(child.usage) | set(child.subtree):
                child._track(fr)

    track(root)

    # The root's subtree holds every fr present anywhere in the tree, zeros included.
    def collect(node: QuotaNode, into: set[FlavorResource]) -> None:
        into.update(node.quota)
        for child in node.children:
            collect(child, into)

    every: set[FlavorResource] = set()
    collect(root, every)
    for fr in every:
        root.subtree.setdefault(fr, 0)
