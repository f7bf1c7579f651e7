"""Dominant Resource Share (DRS), Kueue's fair-sharing measure of how much a node borrows."""

from __future__ import annotations

import math
from dataclasses import dataclass

from manager.engine.quota import QuotaNode
from manager.engine.units import FlavorResource


@dataclass(frozen=True, slots=True)
class DRS:
    weight_milli: int
    ratio: float  # borrowed * 1000 / lendable, for the dominant resource
    dominant: str = ""
    borrowing: bool = False
    borrowed_frs: tuple[FlavorResource, ...] = ()

    @property
    def zero_weight_borrows(self) -> bool:
        return self.weight_milli == 0 and self.ratio != 0

    def weighted(self) -> float:
        if self.ratio == 0:
            return 0.0
        if self.weight_milli == 0:
            return math.inf
        return self.ratio * 1000 / self.weight_milli

    def rounded(self) -> int:
        """`status.fairSharing.weightedShare`."""
        if self.zero_weight_borrows:
            return 2**63 - 1
        return math.ceil(self.weighted())

    def borrowing_on(self, requested: dict[FlavorResource, int]) -> bool:
        return any(requested.get(fr, 0) > 0 for fr in self.borrowed_frs)


NEGATIVE = DRS(1000, -1.0)


def compare(a: DRS, b: DRS) -> int:
    """Kueue's CompareDRS: -1, 0 or 1."""
    if a.zero_weight_borrows and b.zero_weight_borrows:
        x, y = a.ratio, b.ratio
    elif a.zero_weight_borrows:
        return 1
    elif b.zero_weight_borrows:
        return -1
    else:
        x, y = a.weighted(), b.weighted()
    return (x > y) - (x < y)


def lendable(parent: QuotaNode) -> dict[str, int]:
    """Per resource name: what the parent could make available, summed over flavors."""
    root = parent.root()
    out: dict[str, int] = {}
    for fr in root.subtree:
        out[fr[1]] = out.get(fr[1], 0) + parent.potential_available(fr)
    return out


def dominant_resource_share(node: QuotaNode, extra: dict[FlavorResource, int] | None = None) -> DRS:
    """DRS of a node, optionally as if `extra` were added to its usage."""
    if node.parent is None:
        return DRS(node.weight_milli, 0.0)
    borrowed: dict[str, int] = {}
    frs: list[FlavorResource] = []
    usage = node.usage
    for fr, quota in node.subtree.items():
        over = (extra.get(fr, 0) if extra else 0) + usage.get(fr, 0) - quota
        if over > 0:
            borrowed[fr[1]] = borrowed.get(fr[1], 0) + over
            frs.append(fr)
    if not borrowed:
        return DRS(node.weight_milli, 0.0)
    lend = lendable(node.parent)
    ratio, dominant = 0.0, ""
    for name in sorted(borrowed):
        total = lend.get(name, 0)
        if total > 0:
            value = borrowed[name] * 1000 / total
            if value > ratio:
                ratio, dominant = value, name
    return DRS(node.weight_milli, ratio, dominant, True, tuple(frs))
