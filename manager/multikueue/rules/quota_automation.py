"""Kueue's MultiKueue manager quota automation (KEP-9988; Kueue's `MultiKueueManagerQuotaAutomation`
gate, alpha and off by default since 0.18), decided as a pure function.

With the gate on and a MultiKueueConfig's `quotaManagement: Automated`, the nominal quota of each
manager ClusterQueue that uses that config's MultiKueue AdmissionCheck follows its workers: for
each resource, the sum of the nominal quotas (over every flavor) of the worker ClusterQueues that
its LocalQueues lead to. MultiKueue pairs LocalQueues by namespace and name, so a worker
ClusterQueue is related when a worker LocalQueue with the namespace and name of one of the
manager ClusterQueue's LocalQueues points at it. A worker that is not connected counts for
nothing, so a worker that leaves takes its quota with it and one that joins brings it.

As in Kueue, only a manager ClusterQueue with exactly one ResourceGroup of exactly one flavor is
automated, and its `coveredResources` must name every resource the related worker queues have;
otherwise the queue keeps working with its own quota and the `MultiKueueManagerQuotaAutomation`
condition says why. The flavor's resources are replaced by one entry per covered resource holding
only the nominal quota.

A sum hides fragmentation: 16 cpu over two workers of 8 cannot run a 12-cpu job. kfed's
dispatch already refuses a Workload that no single worker could ever admit
(`multikueue/workload.py`, `capacity.fit_when_empty`), so such a job is refused at once, with each
worker's reason, rather than reserving the summed quota and waiting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from manager.api import kueue
from manager.api.quantity import Quantity
from manager.engine.units import amount, to_quantity
from manager.engine.workload import is_multikueue_check
from manager.multikueue.rules.capacity import WorkerQuotas

CONDITION = "MultiKueueManagerQuotaAutomation"
AUTOMATED = ("True", "QuotaAutomated", "ClusterQueue quota is automatically managed based on MultiKueue workers.")
NOT_REQUESTED = ("False", "NotRequested", "MultiKueue manager quota automation has not been requested.")
CONFIG_NOT_FOUND = ("False", "UnsupportedConfiguration", "The referenced MultiKueueConfig was not found.")
NOT_ONE_FLAVOR = (
    "False",
    "UnsupportedConfiguration",
    "Quota automation requires that the manager-side ClusterQueue has exactly one ResourceFlavor",
)

ConditionState = tuple[str, str, str]  # status, reason, message


@dataclass(frozen=True)
class QuotaDecision:
    """What the manager ClusterQueue should hold: its condition (None: none at all, as for a
    queue that is not MultiKueue's) and its single flavor's resources (None: leave the spec)."""

    condition: ConditionState | None
    resources: list[kueue.ResourceQuota] | None = None


def multikueue_check(cq: kueue.ClusterQueue, checks: Mapping[str, kueue.AdmissionCheck]) -> kueue.AdmissionCheck | None:
    """The MultiKueue AdmissionCheck among the queue's `admissionChecksStrategy` rules, if any."""
    rules = (cq.spec.admission_checks_strategy.admission_checks if cq.spec.admission_checks_strategy else None) or []
    for rule in rules:
        check = checks.get(rule.name)
        if is_multikueue_check(check):
            return check
    return None


def related_sums(
    local_queues: Iterable[tuple[str, str]], clusters: Sequence[str], workers: Mapping[str, WorkerQuotas | None]
) -> dict[str, int]:
    """Per resource, the nominal quotas summed over the related worker ClusterQueues of the
    connected workers named by the config (engine units: milli-units or bytes)."""
    wanted = set(local_queues)
    totals: dict[str, int] = {}
    for name in clusters:
        seen = workers.get(name)
        if seen is None:  # not connected (or never was): counts for nothing
            continue
        related = {lq.spec.cluster_queue for lq in seen.local_queues if (lq.namespace, lq.name) in wanted}
        for wcq in seen.cluster_queues:
            if wcq.name not in related:
                continue
            for group in wcq.spec.resource_groups or []:
                for flavor in group.flavors:
                    for r in flavor.resources:
                        totals[r.name] = totals.get(r.name, 0) + amount(r.name, r.nominal_quota)
    return totals


def decide(
    cq: kueue.ClusterQueue,
    check: kueue.AdmissionCheck | None,
    config: kueue.MultiKueueConfig | None,
    local_queues: Iterable[tuple[str, str]],
    workers: Mapping[str, WorkerQuotas | None],
) -> QuotaDecision:
    """Kueue's decision for one manager ClusterQueue. `check` is its MultiKueue AdmissionCheck
    (`multikueue_check`), `config` the MultiKueueConfig that check names (None: not found),
    `local_queues` the (namespace, name) of the manager LocalQueues pointing at it, `workers`
    each worker's queues as last seen (None: not connected)."""
    if check is None:
        return QuotaDecision(None)
    if config is None:
        return QuotaDecision(CONFIG_NOT_FOUND)
    if (config.spec.quota_management or "Manual") == "Manual":
        return QuotaDecision(NOT_REQUESTED)
    groups = cq.spec.resource_groups or []
    if len(groups) != 1 or len(groups[0].flavors) != 1:
        return QuotaDecision(NOT_ONE_FLAVOR)
    sums = related_sums(local_queues, config.spec.clusters, workers)
    covered = list(groups[0].covered_resources)
    missing = sorted(set(sums) - set(covered))
    if missing:
        # Go's %v of a list of names: [a b]
        message = f"manager-side coveredResources is missing resources configured on workers: [{' '.join(missing)}]"
        return QuotaDecision(("False", "UnsupportedConfiguration", message))
    wanted = [kueue.ResourceQuota(name=r, nominal_quota=to_quantity(r, sums.get(r, 0))) for r in covered]
    current = groups[0].flavors[0].resources
    return QuotaDecision(AUTOMATED, None if same_resources(current, wanted) else wanted)


def same_resources(current: Sequence[kueue.ResourceQuota], wanted: Sequence[kueue.ResourceQuota]) -> bool:
    """Kueue compares semantically: the same names in the same order, equal quantities, no limits."""

    def value(q: Quantity | None, resource: str) -> int | None:
        return amount(resource, q) if q is not None else None

    return len(current) == len(wanted) and all(
        a.name == b.name
        and value(a.nominal_quota, a.name) == value(b.nominal_quota, b.name)
        and a.borrowing_limit is None
        and a.lending_limit is None
        for a, b in zip(current, wanted, strict=True)
    )


def spec_patch(cq: kueue.ClusterQueue, resources: Sequence[kueue.ResourceQuota]) -> dict[str, object]:
    """The merge patch that gives the single flavor `resources` (resourceGroups is replaced whole,
    as a merge patch replaces lists; everything else in the group is kept)."""
    groups = cq.spec.resource_groups or []
    group = groups[0].model_copy(
        update={"flavors": [groups[0].flavors[0].model_copy(update={"resources": list(resources)})]},
    )
    return {"spec": {"resourceGroups": [group.to_dict()]}}
