"""kueue.x-k8s.io/v1beta2, the stored version: every Kueue kind kfed reads or writes.

Field names, enums and limits follow Kueue's Go types. Defaults that Kueue's CRDs apply are
kept as properties (`effective_*`) instead of model defaults, so that a manifest written back
is exactly the manifest read.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from manager.api import constants as c
from manager.api.meta import (
    DNS_LABEL_PATTERN,
    Condition,
    KubeModel,
    LabelSelector,
    Name,
    OpenModel,
    Resource,
    Taint,
    Time,
    Toleration,
)
from manager.api.quantity import Quantity

ResourceName = Annotated[str, Field(max_length=253)]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
FungibilityPolicy = Literal["MayStopSearch", "TryNextFlavor"]
CheckState = Literal["Pending", "Ready", "Retry", "Rejected"]


def _cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """Schema extras carrying CEL rules, so the API server enforces what OpenAPI cannot say."""
    return {"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}


# --- ResourceFlavor ---------------------------------------------------------------------------


class ResourceFlavorSpec(KubeModel):
    node_labels: dict[str, str] | None = Field(default=None, max_length=8)
    node_taints: list[Taint] | None = Field(default=None, max_length=8)
    tolerations: list[Toleration] | None = Field(default=None, max_length=8)
    topology_name: Name | None = None


class ResourceFlavor(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta2"
    KIND: ClassVar[str] = "ResourceFlavor"
    PLURAL: ClassVar[str] = "resourceflavors"

    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec)


# --- quotas shared by ClusterQueue and Cohort -------------------------------------------------


class ResourceQuota(KubeModel):
    name: ResourceName
    nominal_quota: Quantity = Field(default_factory=lambda: Quantity.from_value(0))
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(KubeModel):
    name: Name
    resources: list[ResourceQuota] = Field(min_length=1, max_length=64)


class ResourceGroup(KubeModel):
    model_config = {
        "json_schema_extra": _cel(
            (
                "self.flavors.all(x, size(x.resources) == size(self.coveredResources))",
                "flavors must have the same number of resources as the coveredResources",
            )
        )
    }

    covered_resources: list[ResourceName] = Field(min_length=1, max_length=64)
    flavors: list[FlavorQuotas] = Field(min_length=1, max_length=64)


class FairSharing(KubeModel):
    weight: Quantity | None = None


class FairSharingStatus(KubeModel):
    weighted_share: int = 0


# --- ClusterQueue -----------------------------------------------------------------------------


class FlavorFungibility(KubeModel):
    model_config = {
        "json_schema_extra": _cel(
            (
                "!has(self.preference) || (has(self.whenCanBorrow) && self.whenCanBorrow == 'TryNextFlavor'"
                " && has(self.whenCanPreempt) && self.whenCanPreempt == 'TryNextFlavor')",
                "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
            )
        )
    }

    when_can_borrow: FungibilityPolicy | None = None
    when_can_preempt: FungibilityPolicy | None = None
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class BorrowWithinCohort(KubeModel):
    policy: Literal["Never", "LowerPriority"] | None = None
    max_priority_threshold: int | None = None


class ClusterQueuePreemption(KubeModel):
    model_config = {
        "json_schema_extra": _cel(
            (
                "!(has(self.reclaimWithinCohort) && self.reclaimWithinCohort == 'Never'"
                " && has(self.borrowWithinCohort) && has(self.borrowWithinCohort.policy)"
                " && self.borrowWithinCohort.policy != 'Never')",
                "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
            )
        )
    }

    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] | None = None
    borrow_within_cohort: BorrowWithinCohort | None = None
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] | None = None


class AdmissionCheckStrategyRule(KubeModel):
    name: Name
    on_flavors: list[Name] | None = Field(default=None, max_length=64)


class AdmissionChecksStrategy(KubeModel):
    admission_checks: list[AdmissionCheckStrategyRule] | None = Field(default=None, min_length=1, max_length=64)


class AdmissionScope(KubeModel):
    admission_mode: Literal["UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"] | None = None


_NO_LIMITS_WITHOUT_COHORT = (
    (
        "has(self.cohortName) || !has(self.resourceGroups) || self.resourceGroups.all(rg,"
        " rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit))))",
        "borrowingLimit must be nil when cohort is empty",
    ),
    (
        "has(self.cohortName) || !has(self.resourceGroups) || self.resourceGroups.all(rg,"
        " rg.flavors.all(f, f.resources.all(r, !has(r.lendingLimit))))",
        "lendingLimit must be nil when cohort is empty",
    ),
)


class ClusterQueueSpec(KubeModel):
    model_config = {"json_schema_extra": _cel(*_NO_LIMITS_WITHOUT_COHORT)}

    resource_groups: list[ResourceGroup] | None = Field(default=None, max_length=16)
    cohort_name: Name | None = None
    queueing_strategy: QueueingStrategy | None = None
    namespace_selector: LabelSelector | None = None
    flavor_fungibility: FlavorFungibility | None = None
    preemption: ClusterQueuePreemption | None = None
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    stop_policy: StopPolicy | None = None
    fair_sharing: FairSharing | None = None
    admission_scope: AdmissionScope | None = None


class ResourceUsage(KubeModel):
    name: ResourceName
    total: Quantity | None = None
    borrowed: Quantity | None = None


class FlavorUsage(KubeModel):
    name: Name
    resources: list[ResourceUsage] | None = Field(default=None, max_length=64)


class ClusterQueueStatus(KubeModel):
    conditions: list[Condition] | None = Field(default=None, max_length=16)
    flavors_reservation: list[FlavorUsage] | None = Field(default=None, max_length=64)
    flavors_usage: list[FlavorUsage] | None = Field(default=None, max_length=64)
    pending_workloads: int | None = None
    reserving_workloads: int | None = None
    admitted_workloads: int | None = None
    fair_sharing: FairSharingStatus | None = None


class ClusterQueue(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta2"
    KIND: ClassVar[str] = "ClusterQueue"
    PLURAL: ClassVar[str] = "clusterqueues"

    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)
    status: ClusterQueueStatus | None = None

    @property
    def effective_stop_policy(self) -> str:
        return self.spec.stop_policy or "None"

    @property
    def effective_queueing_strategy(self) -> str:
        return self.spec.queueing_strategy or "BestEffortFIFO"

    @property
    def admission_check_names(self) -> list[str]:
        strategy = self.spec.admission_checks_strategy
        return [rule.name for rule in (strategy.admission_checks or [])] if strategy else []


# --- Cohort -----------------------------------------------------------------------------------


class CohortSpec(KubeModel):
    model_config = {
        "json_schema_extra": _cel(
            (
                "has(self.parentName) || !has(self.resourceGroups) || self.resourceGroups.all(rg,"
                " rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit) && !has(r.lendingLimit))))",
                "borrowingLimit and lendingLimit must be nil when parentName is empty",
            )
        )
    }

    parent_name: Name | None = None
    resource_groups: list[ResourceGroup] | None = Field(default=None, max_length=16)
    fair_sharing: FairSharing | None = None


class CohortStatus(KubeModel):
    fair_sharing: FairSharingStatus | None = None


class Cohort(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta2"
    KIND: ClassVar[str] = "Cohort"
    PLURAL: ClassVar[str] = "cohorts"

    spec: CohortSpec = Field(default_factory=CohortSpec)
    status: CohortStatus | None = None


# --- LocalQueue -------------------------------------------------------------------------------


class LocalQueueSpec(KubeModel):
    cluster_queue: Name | None = None
    stop_policy: StopPolicy | None = None
    fair_sharing: FairSharing | None = None


class LocalQueueResourceUsage(KubeModel):
    name: ResourceName
    total: Quantity | None = None


class LocalQueueFlavorUsage(KubeModel):
    name: Name
    resources: list[LocalQueueResourceUsage] | None = Field(default=None, max_length=64)


class LocalQueueStatus(KubeModel):
    conditions: list[Condition] | None = Field(default=None, max_length=16)
    pending_workloads: int | None = None
    reserving_workloads: int | None = None
    admitted_workloads: int | None = None
    flavors_reservation: list[LocalQueueFlavorUsage] | None = Field(default=None, max_length=64)
    flavors_usage: list[LocalQueueFlavorUsage] | None = Field(default=None, max_length=64)
    fair_sharing: FairSharingStatus | None = None


class LocalQueue(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta2"
    KIND: ClassVar[str] = "LocalQueue"
    PLURAL: ClassVar[str] = "localqueues"
    NAMESPACED: ClassVar[bool] = True

    spec: LocalQueueSpec = Field(default_factory=LocalQueueSpec)
    status: LocalQueueStatus | None = None


# --- WorkloadPriorityClass --------------------------------------------------------------------


class WorkloadPriorityClass(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta2"
    KIND: ClassVar[str] = "WorkloadPriorityClass"
    PLURAL: ClassVar[str] = "workloadpriorityclasses"

    value: int = Field(ge=-(2**31), le=2**31 - 1)
    description: str | None = Field(default=None, max_length=2048)


# --- Workload ---------------------------------------------------------------------------------


class PodTemplateSpec(OpenModel):
    """corev1.PodTemplateSpec, kept whole; the engine reads requests through `manager.api.core`."""


class PodSetTopologyRequest(OpenModel):
    required: str | None = Field(default=None, max_length=63)
    preferred: str | None = Field(default=None, max_length=63)
    unconstrained: bool | None = None


class PodSet(KubeModel):
    name: Annotated[str, Field(max_length=63, pattern=DNS_LABEL_PATTERN)] = "main"
    template: dict[str, Any] = Field(default_factory=dict, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    count: int = Field(default=1, ge=0)
    min_count: int | None = Field(default=None, ge=1)
    topology_request: PodSetTopologyRequest | None = None


class PriorityClassRef(KubeModel):
    group: Literal["kueue.x-k8s.io", "scheduling.k8s.io"]
    kind: Literal["WorkloadPriorityClass", "PriorityClass"]
    name: Annotated[str, Field(min_length=1, max_length=253)]


class PreemptionGate(KubeModel):
    name: Annotated[str, Field(min_length=1, max_length=63)]


class WorkloadSpec(KubeModel):
    model_config = {
        "json_schema_extra": _cel(
            (
                "size(self.podSets.filter(ps, has(ps.minCount))) <= 1",
                "at most one podSet can use minCount",
            )
        )
    }

    pod_sets: list[PodSet] = Field(min_length=1, max_length=18)
    queue_name: Name | None = None
    priority_class_ref: PriorityClassRef | None = None
    priority: int | None = None
    active: bool | None = None
    maximum_execution_time_seconds: int | None = Field(default=None, ge=1)
    preemption_gates: list[PreemptionGate] | None = Field(default=None, max_length=8)


class PodSetAssignment(KubeModel):
    name: Annotated[str, Field(max_length=63)]
    flavors: dict[str, str] | None = None
    resource_usage: dict[str, Quantity] | None = None
    count: int | None = Field(default=None, ge=0)
    topology_assignment: dict[str, Any] | None = Field(default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    delayed_topology_request: Literal["Pending", "Ready"] | None = None


class Admission(KubeModel):
    cluster_queue: Name
    pod_set_assignments: list[PodSetAssignment] = Field(max_length=18)


class RequeueState(KubeModel):
    count: int | None = Field(default=None, ge=0)
    requeue_at: Time | None = None


class ReclaimablePod(KubeModel):
    name: str
    count: int = Field(ge=0)


class PodSetUpdate(KubeModel):
    name: str
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = Field(default=None, max_length=8)


class AdmissionCheckState(KubeModel):
    name: Name
    state: CheckState
    last_transition_time: Time | None = None
    message: str = Field(default="", max_length=32768)
    requeue_after_seconds: int | None = Field(default=None, ge=0)
    retry_count: int | None = Field(default=None, ge=0)
    pod_set_updates: list[PodSetUpdate] | None = Field(default=None, max_length=18)


class PodSetRequest(KubeModel):
    name: str
    resources: dict[str, Quantity] | None = None


class EvictionStat(KubeModel):
    reason: str
    underlying_cause: str = ""
    count: int = Field(ge=0)


class SchedulingStats(KubeModel):
    evictions: list[EvictionStat] | None = Field(default=None, max_length=256)


class WorkloadStatus(KubeModel):
    conditions: list[Condition] | None = Field(default=None, max_length=16)
    admission: Admission | None = None
    requeue_state: RequeueState | None = None
    reclaimable_pods: list[ReclaimablePod] | None = Field(default=None, max_length=18)
    admission_checks: list[AdmissionCheckState] | None = Field(default=None, max_length=8)
    resource_requests: list[PodSetRequest] | None = Field(default=None, max_length=18)
    accumulated_past_execution_time_seconds: int | None = None
    scheduling_stats: SchedulingStats | None = None
    nominated_cluster_names: list[str] | None = Field(default=None, max_length=20)
    cluster_name: str | None = Field(default=None, max_length=256)


class Workload(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta2"
    KIND: ClassVar[str] = "Workload"
    PLURAL: ClassVar[str] = "workloads"
    NAMESPACED: ClassVar[bool] = True

    spec: WorkloadSpec
    status: WorkloadStatus | None = None

    @property
    def effective_priority(self) -> int:
        return self.spec.priority or 0

    @property
    def is_active(self) -> bool:
        return self.spec.active is not False


# --- AdmissionCheck ---------------------------------------------------------------------------


class AdmissionCheckParametersReference(KubeModel):
    api_group: Annotated[str, Field(min_length=1, max_length=253)]
    kind: Annotated[str, Field(min_length=1, max_length=63)]
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]


class AdmissionCheckSpec(KubeModel):
    controller_name: Annotated[str, Field(min_length=1, max_length=253)]
    parameters: AdmissionCheckParametersReference | None = None


class AdmissionCheckStatus(KubeModel):
    conditions: list[Condition] | None = Field(default=None, max_length=16)


class AdmissionCheck(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta2"
    KIND: ClassVar[str] = "AdmissionCheck"
    PLURAL: ClassVar[str] = "admissionchecks"

    spec: AdmissionCheckSpec
    status: AdmissionCheckStatus | None = None


# --- MultiKueue -------------------------------------------------------------------------------


class KubeConfigRef(KubeModel):
    location: Annotated[str, Field(min_length=1, max_length=256)]
    location_type: Literal["Secret", "Path"] | None = None

    @property
    def effective_location_type(self) -> str:
        return self.location_type or "Secret"


class ClusterProfileReference(KubeModel):
    name: Annotated[str, Field(min_length=1, max_length=256)]


class ClusterSource(KubeModel):
    model_config = {
        "json_schema_extra": _cel(
            (
                "has(self.kubeConfig) != has(self.clusterProfileRef)",
                "exactly one of kubeConfig or clusterProfileRef must be set",
            )
        )
    }

    kube_config: KubeConfigRef | None = None
    cluster_profile_ref: ClusterProfileReference | None = None


class MultiKueueClusterSpec(KubeModel):
    cluster_source: ClusterSource


class MultiKueueClusterStatus(KubeModel):
    conditions: list[Condition] | None = Field(default=None, max_length=16)


class MultiKueueCluster(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta2"
    KIND: ClassVar[str] = "MultiKueueCluster"
    PLURAL: ClassVar[str] = "multikueueclusters"

    spec: MultiKueueClusterSpec
    status: MultiKueueClusterStatus | None = None


class MultiKueueConfigSpec(KubeModel):
    model_config = {
        "json_schema_extra": _cel(("size(self.clusters.filter(i, size(self.clusters.filter(j, j == i)) > 1)) == 0", "must be unique"))
    }

    clusters: list[Annotated[str, Field(max_length=256)]] = Field(min_length=1, max_length=20)
    quota_management: Literal["Manual", "Automated"] | None = None


class MultiKueueConfig(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta2"
    KIND: ClassVar[str] = "MultiKueueConfig"
    PLURAL: ClassVar[str] = "multikueueconfigs"

    spec: MultiKueueConfigSpec


KINDS: tuple[type[Resource], ...] = (
    ResourceFlavor,
    ClusterQueue,
    Cohort,
    LocalQueue,
    WorkloadPriorityClass,
    Workload,
    AdmissionCheck,
    MultiKueueConfig,
    MultiKueueCluster,
)
KIND_BY_NAME: dict[str, type[Resource]] = {kind.KIND: kind for kind in KINDS}
