"""The engine's state: flavors, the quota tree of ClusterQueues and Cohorts, and who holds quota.

Built from API objects once; admission and eviction then update it incrementally
(`reserve`/`release`). A scheduling cycle mutates the same tree and undoes its trial
changes (see `scheduler.py`), so nothing is rebuilt per cycle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from manager.api import constants as c
from manager.api.kueue import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, ResourceGroup
from manager.api.meta import MAX_CONDITION_MESSAGE, LabelSelector
from manager.engine.quota import Quota, QuotaNode, recompute_tree
from manager.engine.units import FlavorResource, amount
from manager.engine.workload import WorkloadInfo, is_multikueue_controller, missing_cluster_queue_message, missing_local_queue_message


@dataclass(slots=True)
class GroupInfo:
    covered: tuple[str, ...]
    flavors: tuple[str, ...]


@dataclass(slots=True, eq=False)
class ClusterQueueInfo:
    name: str
    obj: ClusterQueue
    node: QuotaNode
    cohort: str
    groups: list[GroupInfo]
    group_of: dict[str, int]
    strategy: str
    namespace_selector: LabelSelector | None
    when_can_borrow: str
    when_can_preempt: str
    preference: str
    within_cluster_queue: str
    reclaim_within_cohort: str
    borrow_within_cohort: str
    borrow_threshold: int | None
    stop_policy: str
    checks: list[tuple[str, tuple[str, ...]]]
    admission_fair_sharing: bool
    active: bool = True
    inactive_reason: str = ""
    inactive_message: str = ""
    workloads: dict[str, WorkloadInfo] = field(default_factory=dict)
    generation: int = 0
    _sorted: list[WorkloadInfo] | None = None

    def sorted_workloads(self) -> list[WorkloadInfo]:
        """Quota-holding workloads in preemption-candidate order, cached until one comes, goes
        or changes its key (`forget_order`, called by `WorkloadInfo.forget_key`)."""
        if self._sorted is None:
            self._sorted = sorted(self.workloads.values(), key=WorkloadInfo.candidate_key)
        return self._sorted

    def forget_order(self) -> None:
        self._sorted = None

    @property
    def covers_pods(self) -> bool:
        return c.PODS_RESOURCE in self.group_of

    @property
    def has_parent(self) -> bool:
        return self.node.parent is not None

    def required_checks(self, flavors: Iterable[str]) -> list[str]:
        """Admission checks that apply to a workload using these flavors (empty onFlavors: all)."""
        used = set(flavors)
        return [name for name, on in self.checks if not on or used.intersection(on)]


@dataclass(frozen=True)
class CheckInfo:
    """What the cache needs of an AdmissionCheck: its controller and whether it is Active."""

    controller: str
    active: bool


def _quota_of(groups: list[ResourceGroup] | None) -> dict[FlavorResource, Quota]:
    quota: dict[FlavorResource, Quota] = {}
    for group in groups or []:
        for flavor in group.flavors:
            for resource in flavor.resources:
                quota[(flavor.name, resource.name)] = Quota(
                    nominal=amount(resource.name, resource.nominal_quota),
                    borrowing_limit=amount(resource.name, resource.borrowing_limit) if resource.borrowing_limit is not None else None,
                    lending_limit=amount(resource.name, resource.lending_limit) if resource.lending_limit is not None else None,
                )
    return quota


def _weight_milli(weight: object) -> int:
    from manager.api.quantity import Quantity

    return weight.milli if isinstance(weight, Quantity) else 1000


def cluster_queue_info(cq: ClusterQueue, node: QuotaNode) -> ClusterQueueInfo:
    spec = cq.spec
    groups = [GroupInfo(tuple(g.covered_resources), tuple(f.name for f in g.flavors)) for g in spec.resource_groups or []]
    group_of = {resource: i for i, g in enumerate(groups) for resource in g.covered}
    fungibility = spec.flavor_fungibility
    preemption = spec.preemption
    borrow = preemption.borrow_within_cohort if preemption else None
    return ClusterQueueInfo(
        name=cq.name,
        obj=cq,
        node=node,
        cohort=spec.cohort_name or "",
        groups=groups,
        group_of=group_of,
        strategy=cq.effective_queueing_strategy,
        namespace_selector=spec.namespace_selector,
        when_can_borrow=(fungibility.when_can_borrow if fungibility else None) or "MayStopSearch",
        when_can_preempt=(fungibility.when_can_preempt if fungibility else None) or "TryNextFlavor",
        preference=(fungibility.preference if fungibility else None) or "BorrowingOverPreemption",
        within_cluster_queue=(preemption.within_cluster_queue if preemption else None) or "Never",
        reclaim_within_cohort=(preemption.reclaim_within_cohort if preemption else None) or "Never",
        borrow_within_cohort=(borrow.policy if borrow else None) or "Never",
        borrow_threshold=borrow.max_priority_threshold if borrow else None,
        stop_policy=spec.stop_policy or "None",
        checks=[(rule.name, tuple(rule.on_flavors or ())) for rule in (spec.admission_checks_strategy.admission_checks or [])]
        if spec.admission_checks_strategy
        else [],
        admission_fair_sharing=bool(spec.admission_scope and spec.admission_scope.admission_mode == "UsageBasedAdmissionFairSharing"),
    )


class Cache:
    """Flavors, ClusterQueues, Cohorts and LocalQueues, with the quota tree they form."""

    def __init__(
        self,
        *,
        flavors: Iterable[ResourceFlavor] = (),
        cluster_queues: Iterable[ClusterQueue] = (),
        cohorts: Iterable[Cohort] = (),
        local_queues: Iterable[LocalQueue] = (),
        admission_checks: Mapping[str, CheckInfo] | None = None,
    ) -> None:
        # None: checks are not known (the simulator), so they do not make a queue inactive.
        self.admission_checks = admission_checks
        self.flavors: dict[str, ResourceFlavor] = {f.name: f for f in flavors}
        self.cohort_objects: dict[str, Cohort] = {co.name: co for co in cohorts}
        self.local_queues: dict[str, LocalQueue] = {f"{lq.namespace}/{lq.name}": lq for lq in local_queues}
        self.cluster_queues: dict[str, ClusterQueueInfo] = {}
        self.cohorts: dict[str, QuotaNode] = {}
        self.cycle_cohorts: set[str] = set()
        self._build(list(cluster_queues))

    # --- construction ---------------------------------------------------------------------------
    def _cohort_node(self, name: str) -> QuotaNode:
        node = self.cohorts.get(name)
        if node is None:
            obj = self.cohort_objects.get(name)
            quota = _quota_of(obj.spec.resource_groups) if obj else {}
            weight = obj.spec.fair_sharing.weight if obj and obj.spec.fair_sharing else None
            node = QuotaNode(name, is_cohort=True, quota=quota, weight_milli=_weight_milli(weight))
            self.cohorts[name] = node
        return node

    def _build(self, cluster_queues: list[ClusterQueue]) -> None:
        for name in sorted(self.cohort_objects):
            self._cohort_node(name)
        for cq in sorted(cluster_queues, key=lambda q: q.name):
            weight = cq.spec.fair_sharing.weight if cq.spec.fair_sharing else None
            node = QuotaNode(cq.name, is_cohort=False, quota=_quota_of(cq.spec.resource_groups), weight_milli=_weight_milli(weight))
            info = cluster_queue_info(cq, node)
            self.cluster_queues[cq.name] = info
            if info.cohort:
                self._attach(node, self._cohort_node(info.cohort))
        # Cohort parents; an unknown parent is an implicit, quota-less cohort.
        for name in sorted(self.cohort_objects):
            parent = self.cohort_objects[name].spec.parent_name
            if parent:
                self._cohort_node(parent)
        for name in sorted(self.cohort_objects):
            parent = self.cohort_objects[name].spec.parent_name
            if parent and not self._creates_cycle(name, parent):
                self._attach(self.cohorts[name], self.cohorts[parent])
            elif parent:
                self.cycle_cohorts.update(self._cycle_members(name))
        for root in self.roots():
            recompute_tree(root)
        for info in self.cluster_queues.values():
            self._refresh_active(info)

    @staticmethod
    def _attach(child: QuotaNode, parent: QuotaNode) -> None:
        child.parent = parent
        parent.children.append(child)

    def _creates_cycle(self, name: str, parent: str) -> bool:
        seen = {name}
        current: str | None = parent
        while current:
            if current in seen:
                return True
            seen.add(current)
            obj = self.cohort_objects.get(current)
            current = obj.spec.parent_name if obj else None
        return False

    def _cycle_members(self, name: str) -> set[str]:
        members: list[str] = []
        current: str | None = name
        while current and current not in members:
            members.append(current)
            obj = self.cohort_objects.get(current)
            current = obj.spec.parent_name if obj else None
        return set(members[members.index(current) :]) if current in members else set(members)

    def roots(self) -> list[QuotaNode]:
        roots = [n for n in self.cohorts.values() if n.parent is None]
        roots += [q.node for q in self.cluster_queues.values() if q.node.parent is None]
        return roots

    def _refresh_active(self, info: ClusterQueueInfo) -> None:
        """Kueue's ClusterQueue inactiveReason: every reason found, the first one as the reason."""
        missing = sorted({f for g in info.groups for f in g.flavors if f not in self.flavors})
        in_cycle = any(node.name in self.cycle_cohorts for node in info.node.path()[1:]) or info.cohort in self.cycle_cohorts
        found: list[tuple[str, str]] = []
        if info.stop_policy != "None":
            found.append(("Stopped", "is stopped"))
        if missing:
            found.append(("FlavorNotFound", f"references missing ResourceFlavor(s): {','.join(missing)}"))
        found += self._check_problems(info)
        if in_cycle:
            found.append(("CohortCycle", "the cohort tree has a cycle"))
        if found:
            info.active, info.inactive_reason = False, found[0][0]
            info.inactive_message = f"Can't admit new workloads: {', '.join(message for _, message in found)}."[:MAX_CONDITION_MESSAGE]
        else:
            info.active, info.inactive_reason, info.inactive_message = True, "Ready", "Can admit new workloads"

    def _check_problems(self, info: ClusterQueueInfo) -> list[tuple[str, str]]:
        """Missing and inactive admission checks, and Kueue's MultiKueue constraints on a queue."""
        checks = self.admission_checks
        if checks is None or not info.checks:
            return []
        all_flavors = {f for g in info.groups for f in g.flavors}
        missing, inactive, multikueue, per_flavor, provisioning = [], [], [], [], []
        for name, on_flavors in info.checks:
            check = checks.get(name)
            if check is None:
                missing.append(name)
                continue
            if not check.active:
                inactive.append(name)
            if check.controller == c.PROVISIONING_CONTROLLER_NAME:
                provisioning.append(name)
            if is_multikueue_controller(check.controller):
                multikueue.append(name)
                if on_flavors and set(on_flavors) != all_flavors:
                    per_flavor.append(name)
        out = []
        if missing:
            out.append(("AdmissionCheckNotFound", f"references missing AdmissionCheck(s): {','.join(sorted(missing))}"))
        if inactive:
            out.append(("AdmissionCheckInactive", f"references inactive AdmissionCheck(s): {','.join(sorted(inactive))}"))
        if len(multikueue) > 1:
            out.append(
                (
                    "MultipleMultiKueueAdmissionChecks",
                    f"Cannot use multiple MultiKueue AdmissionChecks on the same ClusterQueue, found: {','.join(sorted(multikueue))}",
                )
            )
        if per_flavor:
            out.append(
                (
                    "MultiKueueAdmissionCheckAppliedPerFlavor",
                    f"Cannot specify MultiKueue AdmissionCheck per flavor, found: {','.join(sorted(per_flavor))}",
                )
            )
        if multikueue and provisioning:
            out.append(
                (
                    "MultiKueueWithProvisioningRequest",
                    "Cannot use both MultiKueue and ProvisioningRequest AdmissionChecks together, found: "
                    f"{','.join(sorted(multikueue))}, {','.join(sorted(provisioning))}",
                )
            )
        return out

    # --- queries ---------------------------------------------------------------------------------
    def stop_policies(self, wl: WorkloadInfo) -> tuple[str | None, str | None]:
        """The stop policies of the ClusterQueue holding a reserved workload's quota and of its
        LocalQueue (None for a queue that is not there), for `reserved_release` and
        `reserved_eviction`."""
        cq = self.cluster_queues.get(wl.admission_cq)
        lq = self.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        return (cq.stop_policy if cq else None), ((lq.spec.stop_policy or "None") if lq else None)

    def cluster_queue_for(self, wl: WorkloadInfo) -> tuple[ClusterQueueInfo | None, str]:
        """The ClusterQueue a workload's LocalQueue points to, or why there is none."""
        lq = self.local_queues.get(f"{wl.namespace}/{wl.queue_name}")
        if lq is None:
            return None, missing_local_queue_message(wl.queue_name)
        cq = self.cluster_queues.get(lq.spec.cluster_queue or "")
        if cq is None:
            return None, missing_cluster_queue_message(lq.spec.cluster_queue or "")
        return cq, ""

    def path_of(self, cq: ClusterQueueInfo) -> str:
        """Kueue's preemption path: ancestors root-first, e.g. `/eng/eng-beta/team-a`."""
        return "/" + "/".join(node.name for node in reversed(cq.node.path()))

    def cohort_cluster_queues(self, root: QuotaNode) -> list[ClusterQueueInfo]:
        out: list[ClusterQueueInfo] = []
        stack = [root]
        while stack:
            node = stack.pop()
            if node.is_cohort:
                stack.extend(node.children)
            else:
                info = self.cluster_queues.get(node.name)
                if info is not None:
                    out.append(info)
        return out

    # --- reservations ------------------------------------------------------------------------------
    def reserve(self, cq: ClusterQueueInfo, wl: WorkloadInfo) -> None:
        """Charge a workload's usage to its ClusterQueue (and up the tree)."""
        cq.workloads[wl.key] = wl
        wl.held_by(cq.forget_order)
        wl.forget_key()
        cq.node.add_usages(wl.usage)

    def reserve_admitted(self, wl: WorkloadInfo) -> ClusterQueueInfo | None:
        """Charge a workload that already holds a reservation (read from the cluster) to the
        ClusterQueue its admission names; None when that queue does not exist (nothing charged)."""
        cq = self.cluster_queues.get(wl.admission_cq)
        if cq is not None:
            wl.cluster_queue = cq.name
            self.reserve(cq, wl)
        else:
            wl.held_by(None)  # a queue of an earlier cache may still point at it
        return cq

    def release(self, cq: ClusterQueueInfo, wl: WorkloadInfo) -> None:
        if cq.workloads.pop(wl.key, None) is not None:
            wl.held_by(None)
            cq.forget_order()
            cq.node.remove_usages(wl.usage)
