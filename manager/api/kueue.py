"""kueue.x-k8s.io/v1beta2, the stored version: every Kueue kind kfed reads or writes.

Field names, enums, limits, defaults and list markers follow Kueue's CRDs (a test diffs the
generated CRDs against the pinned Kueue's). Defaults that Kueue's CRDs apply are declared with
`crd_default` for the API server and read through `effective_*` properties, not set as model
defaults, so that a manifest written back is exactly the manifest read.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from manager.api import constants as c
from manager.api.meta import (
    DNS_LABEL_PATTERN,
    LIST_ATOMIC,
    LIST_SET,
    MAP_ATOMIC,
    MAX_CONDITION_MESSAGE,
    TAINT_RULES,
    TOLERATION_RULES,
    Conditions,
    KubeModel,
    LabelSelector,
    Name,
    OpenModel,
    Resource,
    Taint,
    Time,
    Toleration,
    cel,
    cel_config,
    crd_default,
    list_map,
)
from manager.api.quantity import Quantity

# Kueue's CRDs take any string as a resource name (the webhook checks its form).
ResourceName = str
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]
QueueingStrategy = Literal["StrictFIFO", "BestEffortFIFO"]
FungibilityPolicy = Literal["MayStopSearch", "TryNextFlavor"]
CheckState = Literal["Pending", "Ready", "Retry", "Rejected"]


class KueueResource(Resource, group=c.GROUP, version=c.STORAGE_VERSION):
    """A kind of Kueue's API group, at the version kfed stores."""


# --- ResourceFlavor ---------------------------------------------------------------------------


class ResourceFlavorSpec(KubeModel):
    node_labels: dict[str, str] | None = Field(default=None, max_length=8, json_schema_extra=MAP_ATOMIC)
    node_taints: list[Taint] | None = Field(default=None, max_length=8, json_schema_extra={**LIST_ATOMIC, **TAINT_RULES})
    tolerations: list[Toleration] | None = Field(default=None, max_length=8, json_schema_extra={**LIST_ATOMIC, **TOLERATION_RULES})
    topology_name: Name | None = None


class ResourceFlavor(KueueResource, kind="ResourceFlavor"):
    spec: ResourceFlavorSpec = Field(default_factory=ResourceFlavorSpec)


# --- quotas shared by ClusterQueue and Cohort -------------------------------------------------


class ResourceQuota(KubeModel):
    name: ResourceName
    nominal_quota: Quantity = Field(default_factory=lambda: Quantity.from_value(0))
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None


class FlavorQuotas(KubeModel):
    name: Name
    resources: list[ResourceQuota] = Field(min_length=1, max_length=64, json_schema_extra=list_map("name"))


class ResourceGroup(KubeModel):
    model_config = cel_config(
        "self.flavors.all(x, size(x.resources) == size(self.coveredResources))",
        "flavors must have the same number of resources as the coveredResources",
    )

    covered_resources: list[ResourceName] = Field(min_length=1, max_length=64, json_schema_extra=LIST_ATOMIC)
    flavors: list[FlavorQuotas] = Field(min_length=1, max_length=64, json_schema_extra=list_map("name"))


class FairSharing(KubeModel):
    weight: Quantity | None = Field(default=None, json_schema_extra=crd_default(1))


class FairSharingStatus(KubeModel):
    weighted_share: int = 0


class AdmissionFairSharingStatus(KubeModel):
    consumed_resources: dict[str, Quantity] = Field(default_factory=dict)
    last_update: Time | None = None


class LocalQueueFairSharingStatus(FairSharingStatus):
    admission_fair_sharing_status: AdmissionFairSharingStatus | None = None


# --- ClusterQueue -----------------------------------------------------------------------------


class FlavorFungibility(KubeModel):
    # The API server defaults both policies first, so `has()` is not needed.
    model_config = cel_config(
        "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')",
        "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
    )

    when_can_borrow: FungibilityPolicy | None = Field(default=None, json_schema_extra=crd_default("MayStopSearch"))
    when_can_preempt: FungibilityPolicy | None = Field(default=None, json_schema_extra=crd_default("TryNextFlavor"))
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class BorrowWithinCohort(KubeModel):
    policy: Literal["Never", "LowerPriority"] | None = Field(default=None, json_schema_extra=crd_default("Never"))
    max_priority_threshold: int | None = None


class ClusterQueuePreemption(KubeModel):
    model_config = cel_config(
        "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) && self.borrowWithinCohort.policy != 'Never')",
        "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never",
    )

    reclaim_within_cohort: Literal["Never", "LowerPriority", "Any"] | None = Field(default=None, json_schema_extra=crd_default("Never"))
    borrow_within_cohort: BorrowWithinCohort | None = Field(default=None, json_schema_extra=crd_default({}))
    within_cluster_queue: Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"] | None = Field(
        default=None, json_schema_extra=crd_default("Never")
    )


class AdmissionCheckStrategyRule(KubeModel):
    name: Annotated[str, Field(min_length=1, max_length=316)]
    on_flavors: list[Name] | None = Field(default=None, max_length=64, json_schema_extra=LIST_SET)


class AdmissionChecksStrategy(KubeModel):
    admission_checks: list[AdmissionCheckStrategyRule] | None = Field(
        default=None, min_length=1, max_length=64, json_schema_extra=list_map("name")
    )


class AdmissionScope(KubeModel):
    admission_mode: Literal["UsageBasedAdmissionFairSharing", "NoAdmissionFairSharing"] | None = None


# The webhook (manager.api.validation) also refuses a lendingLimit without a cohort, as Kueue's does.
NO_BORROWING_WITHOUT_COHORT = (
    "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg,"
    " rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true",
    "borrowingLimit must be nil when cohort is empty",
)


class ConcurrentAdmissionConstraints(KubeModel):
    last_acceptable_flavor_name: Name | None = None


class ConcurrentAdmissionMigration(KubeModel):
    mode: Annotated[Literal["TryPreferredFlavors", "RetainFirstAdmission"], Field(max_length=253)]
    constraints: ConcurrentAdmissionConstraints | None = None


class ConcurrentAdmissionPolicy(KubeModel):
    """Accepted and kept as Kueue's CRD does; kfed admits each workload once."""

    migration: ConcurrentAdmissionMigration


class ClusterQueueSpec(KubeModel):
    model_config = cel_config(*NO_BORROWING_WITHOUT_COHORT)

    resource_groups: list[ResourceGroup] | None = Field(default=None, max_length=c.MAX_RESOURCE_GROUPS, json_schema_extra=LIST_ATOMIC)
    cohort_name: Name | None = None
    queueing_strategy: QueueingStrategy | None = Field(default=None, json_schema_extra=crd_default("BestEffortFIFO"))
    namespace_selector: LabelSelector | None = None
    flavor_fungibility: FlavorFungibility | None = Field(default=None, json_schema_extra=crd_default({}))
    preemption: ClusterQueuePreemption | None = Field(default=None, json_schema_extra=crd_default({}))
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    stop_policy: StopPolicy | None = Field(default=None, json_schema_extra=crd_default("None"))
    fair_sharing: FairSharing | None = None
    admission_scope: AdmissionScope | None = None
    concurrent_admission_policy: ConcurrentAdmissionPolicy | None = None


class LocalQueueResourceUsage(KubeModel):
    name: ResourceName
    total: Quantity | None = None


class LocalQueueFlavorUsage(KubeModel):
    name: Name
    resources: list[LocalQueueResourceUsage] | None = Field(default=None, max_length=64, json_schema_extra=list_map("name"))


class ResourceUsage(LocalQueueResourceUsage):
    borrowed: Quantity | None = None


class FlavorUsage(KubeModel):
    name: Name
    resources: list[ResourceUsage] | None = Field(default=None, max_length=64, json_schema_extra=list_map("name"))


class ClusterQueueStatus(KubeModel):
    conditions: Conditions | None = None
    flavors_reservation: list[FlavorUsage] | None = Field(default=None, max_length=64, json_schema_extra=list_map("name"))
    flavors_usage: list[FlavorUsage] | None = Field(default=None, max_length=64, json_schema_extra=list_map("name"))
    pending_workloads: int | None = None
    reserving_workloads: int | None = None
    admitted_workloads: int | None = None
    fair_sharing: FairSharingStatus | None = None


class ClusterQueue(KueueResource, kind="ClusterQueue"):
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
    # Limits without a parent are refused by the webhook (manager.api.validation), as Kueue's does.
    parent_name: Name | None = None
    resource_groups: list[ResourceGroup] | None = Field(default=None, max_length=c.MAX_RESOURCE_GROUPS, json_schema_extra=LIST_ATOMIC)
    fair_sharing: FairSharing | None = None


class CohortStatus(KubeModel):
    fair_sharing: FairSharingStatus | None = None


class Cohort(KueueResource, kind="Cohort"):
    spec: CohortSpec = Field(default_factory=CohortSpec)
    status: CohortStatus | None = None


# --- LocalQueue -------------------------------------------------------------------------------


class LocalQueueSpec(KubeModel):
    cluster_queue: Name | None = None
    stop_policy: StopPolicy | None = Field(default=None, json_schema_extra=crd_default("None"))
    fair_sharing: FairSharing | None = None


class LocalQueueStatusBase(KubeModel):
    """The first fields of a LocalQueue's status, the same in v1beta1 (which follows with its own)."""

    conditions: Conditions | None = None
    pending_workloads: int | None = None
    reserving_workloads: int | None = None
    admitted_workloads: int | None = None
    flavors_reservation: list[LocalQueueFlavorUsage] | None = Field(default=None, max_length=64, json_schema_extra=list_map("name"))


class LocalQueueStatus(LocalQueueStatusBase):
    flavors_usage: list[LocalQueueFlavorUsage] | None = Field(default=None, max_length=64, json_schema_extra=list_map("name"))
    fair_sharing: LocalQueueFairSharingStatus | None = None


class LocalQueue(KueueResource, kind="LocalQueue", namespaced=True):
    spec: LocalQueueSpec = Field(default_factory=LocalQueueSpec)
    status: LocalQueueStatus | None = None


# --- WorkloadPriorityClass --------------------------------------------------------------------


class WorkloadPriorityClass(KueueResource, kind="WorkloadPriorityClass"):
    value: int
    description: str | None = Field(default=None, max_length=2048)


# --- Workload ---------------------------------------------------------------------------------


class PodTemplateSpec(OpenModel):
    """corev1.PodTemplateSpec, kept whole; the engine reads requests through `manager.api.core`."""


class PodSetTopologyRequest(OpenModel):
    required: str | None = Field(default=None, max_length=63)
    preferred: str | None = Field(default=None, max_length=63)
    unconstrained: bool | None = None


class PodSet(KubeModel):
    name: Annotated[str, Field(max_length=63, pattern=DNS_LABEL_PATTERN)] = Field(default="main", json_schema_extra=crd_default("main"))
    template: dict[str, Any] = Field(default_factory=dict, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    count: int = Field(default=1, ge=0, json_schema_extra=crd_default(1))
    min_count: int | None = Field(default=None, ge=1)
    topology_request: PodSetTopologyRequest | None = None


class PriorityClassRef(KubeModel):
    group: Literal["kueue.x-k8s.io", "scheduling.k8s.io"]
    kind: Literal["WorkloadPriorityClass", "PriorityClass"]
    name: Annotated[str, Field(min_length=1, max_length=253)]


class PreemptionGate(KubeModel):
    name: Annotated[str, Field(min_length=1, max_length=63)]


PodSets = Annotated[list[PodSet], Field(min_length=1, max_length=c.MAX_POD_SETS, json_schema_extra=list_map("name"))]


class WorkloadSpec(KubeModel):
    # At most one podSet with minCount: the webhook (manager.api.validation), as Kueue's.
    pod_sets: PodSets = Field(default_factory=list)
    queue_name: Name | None = None
    priority_class_ref: PriorityClassRef | None = None
    priority: int | None = None
    active: bool | None = Field(default=None, json_schema_extra=crd_default(True))
    maximum_execution_time_seconds: int | None = Field(default=None, ge=1)
    preemption_gates: list[PreemptionGate] | None = Field(default=None, max_length=8, json_schema_extra=list_map("name"))


class PodSetAssignment(KubeModel):
    name: Annotated[str, Field(max_length=63, pattern=DNS_LABEL_PATTERN)] = Field(default="main", json_schema_extra=crd_default("main"))
    flavors: dict[str, str] | None = None
    resource_usage: dict[str, Quantity] | None = None
    count: int | None = Field(default=None, ge=0)
    topology_assignment: dict[str, Any] | None = Field(default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    delayed_topology_request: Literal["Pending", "Ready"] | None = None


class Admission(KubeModel):
    # Neither is required by Kueue's CRD; kfed always writes both.
    cluster_queue: Name = ""
    pod_set_assignments: list[PodSetAssignment] = Field(default_factory=list, max_length=c.MAX_POD_SETS, json_schema_extra=list_map("name"))


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
    tolerations: list[Toleration] | None = Field(default=None, max_length=8, json_schema_extra={**LIST_ATOMIC, **TOLERATION_RULES})


class AdmissionCheckState(KubeModel):
    name: Annotated[str, Field(min_length=1, max_length=316)]
    state: CheckState
    last_transition_time: Time | None = None
    message: str = Field(default="", max_length=MAX_CONDITION_MESSAGE)
    requeue_after_seconds: int | None = Field(default=None, ge=0)
    retry_count: int | None = Field(default=None, ge=0)
    pod_set_updates: list[PodSetUpdate] | None = Field(default=None, max_length=c.MAX_POD_SETS, json_schema_extra=LIST_ATOMIC)


class PodSetRequest(KubeModel):
    name: str
    resources: dict[str, Quantity] | None = None


class EvictionStat(KubeModel):
    # Both keys of the list map are required, as in Kueue's CRD.
    reason: str
    underlying_cause: str
    count: int = Field(ge=0)


class SchedulingStats(KubeModel):
    evictions: list[EvictionStat] | None = Field(default=None, max_length=256, json_schema_extra=list_map("reason", "underlyingCause"))


class PreemptionGateState(KubeModel):
    name: Annotated[str, Field(min_length=1, max_length=63)]
    position: Literal["Closed", "Open"]
    last_transition_time: Time | None = None


class UnhealthyNode(KubeModel):
    name: str


ReclaimablePods = Annotated[list[ReclaimablePod], Field(max_length=c.MAX_POD_SETS, json_schema_extra=list_map("name"))]
AdmissionCheckStates = Annotated[list[AdmissionCheckState], Field(max_length=8, json_schema_extra=list_map("name"))]
PodSetRequests = Annotated[list[PodSetRequest], Field(max_length=c.MAX_POD_SETS, json_schema_extra=list_map("name"))]
UnhealthyNodes = Annotated[list[UnhealthyNode], Field(max_length=8, json_schema_extra=list_map("name"))]


class WorkloadStatus(KubeModel):
    conditions: Conditions | None = None
    admission: Admission | None = None
    requeue_state: RequeueState | None = None
    reclaimable_pods: ReclaimablePods | None = None
    admission_checks: AdmissionCheckStates | None = None
    resource_requests: PodSetRequests | None = None
    accumulated_past_execution_time_seconds: int | None = None
    scheduling_stats: SchedulingStats | None = None
    nominated_cluster_names: list[str] | None = Field(default=None, max_length=c.MAX_MULTIKUEUE_CLUSTERS, json_schema_extra=LIST_ATOMIC)
    cluster_name: str | None = Field(default=None, max_length=256)
    unhealthy_nodes: UnhealthyNodes | None = None
    preemption_gates: list[PreemptionGateState] | None = Field(default=None, max_length=8, json_schema_extra=list_map("name"))


class Workload(KueueResource, kind="Workload", namespaced=True):
    spec: WorkloadSpec = Field(default_factory=WorkloadSpec)
    status: WorkloadStatus | None = None


# --- AdmissionCheck ---------------------------------------------------------------------------


class AdmissionCheckParametersReference(KubeModel):
    api_group: Annotated[str, Field(min_length=1, max_length=253)]
    kind: Annotated[str, Field(min_length=1, max_length=63)]
    name: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]


class AdmissionCheckSpec(KubeModel):
    controller_name: Annotated[str, Field(min_length=1, max_length=253)]
    parameters: AdmissionCheckParametersReference | None = None


class AdmissionCheckStatus(KubeModel):
    conditions: Conditions | None = None


class AdmissionCheck(KueueResource, kind="AdmissionCheck"):
    spec: AdmissionCheckSpec
    status: AdmissionCheckStatus | None = None


# --- MultiKueue -------------------------------------------------------------------------------


class KubeConfigRef(KubeModel):
    location: Annotated[str, Field(min_length=1, max_length=256)]
    location_type: Literal["Secret", "Path"] | None = Field(default=None, json_schema_extra=crd_default("Secret"))

    @property
    def effective_location_type(self) -> str:
        return self.location_type or "Secret"


class ClusterProfileReference(KubeModel):
    name: Annotated[str, Field(min_length=1, max_length=256)]


class ClusterSource(KubeModel):
    model_config = cel_config(
        "[has(self.kubeConfig),has(self.clusterProfileRef)].filter(x,x==true).size() == 1",
        "exactly one of kubeConfig or clusterProfileRef must be set",
    )

    kube_config: KubeConfigRef | None = None
    cluster_profile_ref: ClusterProfileReference | None = None


class MultiKueueClusterSpec(KubeModel):
    cluster_source: ClusterSource


class MultiKueueClusterStatus(KubeModel):
    conditions: Conditions | None = None


class MultiKueueCluster(KueueResource, kind="MultiKueueCluster"):
    spec: MultiKueueClusterSpec
    status: MultiKueueClusterStatus | None = None


UNIQUE_ITEMS = cel(("size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0", "must be unique"))


class MultiKueueConfigSpec(KubeModel):
    clusters: list[Annotated[str, Field(max_length=256)]] = Field(
        min_length=1, max_length=c.MAX_MULTIKUEUE_CLUSTERS, json_schema_extra={**LIST_ATOMIC, **UNIQUE_ITEMS}
    )
    quota_management: Literal["Manual", "Automated"] | None = None


class MultiKueueConfig(KueueResource, kind="MultiKueueConfig"):
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
