"""kueue.x-k8s.io/v1beta1, still served and accepted from users.

Only what differs from v1beta2 is redeclared here (Kueue's v1beta1 CRDs have other fields and
fewer limits, which kfed must not narrow); the rest is the same schema under another
apiVersion. `manager.api.conversion` maps between the two.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from manager.api import constants as c
from manager.api import kueue as v2
from manager.api.meta import (
    DNS_LABEL_PATTERN,
    LIST_ATOMIC,
    LIST_SET,
    MAP_ATOMIC,
    Condition,
    KubeModel,
    LabelSelector,
    Name,
    Resource,
    Taint,
    Time,
    cel_config,
    crd_default,
    list_map,
)

# v1beta1 still accepts the deprecated aliases of MayStopSearch.
FungibilityPolicy = Literal["MayStopSearch", "TryNextFlavor", "Borrow", "Preempt"]
# Kueue's v1beta1 conditions have no count limit.
Conditions = Annotated[list[Condition], Field(json_schema_extra=list_map("type"))]
CheckName = Annotated[str, Field(max_length=316)]


class FlavorFungibility(KubeModel):
    model_config = v2.FlavorFungibility.model_config

    when_can_borrow: FungibilityPolicy | None = Field(default=None, json_schema_extra=crd_default("MayStopSearch"))
    when_can_preempt: FungibilityPolicy | None = Field(default=None, json_schema_extra=crd_default("TryNextFlavor"))
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class AdmissionCheckStrategyRule(KubeModel):
    name: CheckName
    on_flavors: list[Name] | None = None


class AdmissionChecksStrategy(KubeModel):
    admission_checks: list[AdmissionCheckStrategyRule] | None = None


class AdmissionScope(KubeModel):
    admission_mode: str


class ClusterQueueSpec(KubeModel):
    model_config = cel_config(
        v2.NO_BORROWING_WITHOUT_COHORT[0].replace("has(self.cohortName)", "has(self.cohort)"), v2.NO_BORROWING_WITHOUT_COHORT[1]
    )

    resource_groups: list[v2.ResourceGroup] | None = Field(default=None, max_length=c.MAX_RESOURCE_GROUPS, json_schema_extra=LIST_ATOMIC)
    cohort: Name | None = None
    queueing_strategy: v2.QueueingStrategy | None = Field(default=None, json_schema_extra=crd_default("BestEffortFIFO"))
    namespace_selector: LabelSelector | None = None
    flavor_fungibility: FlavorFungibility | None = Field(default=None, json_schema_extra=crd_default({}))
    preemption: v2.ClusterQueuePreemption | None = Field(default=None, json_schema_extra=crd_default({}))
    # Both may be set here (Kueue's webhook refuses that, as kfed's does).
    admission_checks: list[CheckName] | None = None
    admission_checks_strategy: AdmissionChecksStrategy | None = None
    stop_policy: v2.StopPolicy | None = Field(default=None, json_schema_extra=crd_default("None"))
    fair_sharing: v2.FairSharing | None = None
    admission_scope: AdmissionScope | None = None


class PendingWorkloadReference(KubeModel):
    name: str
    namespace: str


class PendingWorkloadsStatus(KubeModel):
    cluster_queue_pending_workload: list[PendingWorkloadReference] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    last_change_time: Time | None = None


class ClusterQueueStatus(KubeModel):
    conditions: Conditions | None = None
    flavors_reservation: list[v2.FlavorUsage] | None = Field(default=None, max_length=64, json_schema_extra=list_map("name"))
    flavors_usage: list[v2.FlavorUsage] | None = Field(default=None, max_length=64, json_schema_extra=list_map("name"))
    pending_workloads: int | None = None
    reserving_workloads: int | None = None
    admitted_workloads: int | None = None
    pending_workloads_status: PendingWorkloadsStatus | None = None
    fair_sharing: v2.LocalQueueFairSharingStatus | None = None


class CohortStatus(KubeModel):
    fair_sharing: v2.LocalQueueFairSharingStatus | None = None


class TopologyInfo(KubeModel):
    name: Name
    levels: list[str] = Field(min_length=1, max_length=16, json_schema_extra=LIST_ATOMIC)


class LocalQueueFlavorStatus(KubeModel):
    """The v1beta1-only summary of each flavor (dropped by the conversion, as by Kueue)."""

    name: Name
    resources: list[str] | None = Field(default=None, max_length=64, json_schema_extra=LIST_SET)
    node_labels: dict[str, str] | None = Field(default=None, max_length=8, json_schema_extra=MAP_ATOMIC)
    node_taints: list[Taint] | None = Field(default=None, max_length=8, json_schema_extra=LIST_ATOMIC)
    topology: TopologyInfo | None = None


class LocalQueueStatus(v2.LocalQueueStatusBase):
    conditions: Conditions | None = None  # in its place, without v1beta2's limit
    flavor_usage: list[v2.LocalQueueFlavorUsage] | None = Field(default=None, max_length=64, json_schema_extra=list_map("name"))
    flavors: list[LocalQueueFlavorStatus] | None = Field(default=None, max_length=64, json_schema_extra=list_map("name"))
    fair_sharing: v2.LocalQueueFairSharingStatus | None = None


class PodSetTopologyRequest(v2.PodSetTopologyRequest):
    required: str | None = None
    preferred: str | None = None


class PodSet(v2.PodSet):
    topology_request: PodSetTopologyRequest | None = None


class WorkloadSpec(KubeModel):
    pod_sets: Annotated[list[PodSet], Field(min_length=1, max_length=c.MAX_POD_SETS, json_schema_extra=list_map("name"))] = Field(
        default_factory=list
    )
    queue_name: Name | None = None
    priority_class_name: Annotated[str, Field(max_length=253)] | None = None
    priority: int | None = None
    priority_class_source: Literal["kueue.x-k8s.io/workloadpriorityclass", "scheduling.k8s.io/priorityclass", ""] | None = Field(
        default=None, json_schema_extra=crd_default("")
    )
    active: bool | None = Field(default=None, json_schema_extra=crd_default(True))
    maximum_execution_time_seconds: int | None = Field(default=None, ge=1)


# v1beta1 declares delayedTopologyRequest as a free string (v1beta2 adds the enum): the
# v1beta1 schema must accept what upstream's accepts, so the field is widened here on purpose.
class PodSetAssignment(v2.PodSetAssignment):
    delayed_topology_request: str | None = None  # type: ignore[assignment]


class Admission(v2.Admission):
    pod_set_assignments: list[PodSetAssignment] = Field(  # type: ignore[assignment]
        default_factory=list, max_length=c.MAX_POD_SETS, json_schema_extra=list_map("name")
    )


class AdmissionCheckState(v2.AdmissionCheckState):
    name: CheckName


class SchedulingStats(KubeModel):
    evictions: list[v2.EvictionStat] | None = Field(default=None, json_schema_extra=list_map("reason", "underlyingCause"))


class WorkloadStatus(KubeModel):
    conditions: Conditions | None = None
    admission: Admission | None = None
    requeue_state: v2.RequeueState | None = None
    reclaimable_pods: v2.ReclaimablePods | None = None
    admission_checks: Annotated[list[AdmissionCheckState], Field(max_length=8, json_schema_extra=list_map("name"))] | None = None
    resource_requests: v2.PodSetRequests | None = None
    # Kueue's v1beta1 field keeps this spelling.
    accumulated_past_exexcution_time_seconds: int | None = None
    scheduling_stats: SchedulingStats | None = None
    nominated_cluster_names: list[str] | None = Field(default=None, max_length=c.MAX_MULTIKUEUE_CLUSTERS, json_schema_extra=LIST_ATOMIC)
    cluster_name: str | None = None
    unhealthy_nodes: list[v2.UnhealthyNode] | None = None


class AdmissionCheckParametersReference(KubeModel):
    api_group: Annotated[str, Field(max_length=253)]
    kind: Annotated[str, Field(max_length=63)]
    name: Annotated[str, Field(max_length=63, pattern=DNS_LABEL_PATTERN)]


class AdmissionCheckSpec(KubeModel):
    controller_name: str
    retry_delay_minutes: int | None = Field(default=None, json_schema_extra=crd_default(15))
    parameters: AdmissionCheckParametersReference | None = None


class KubeConfigRef(v2.KubeConfigRef):
    location: str


class MultiKueueClusterSpec(KubeModel):
    kube_config: KubeConfigRef | None = None
    cluster_profile_ref: v2.ClusterProfileReference | None = None


class MultiKueueConfigSpec(KubeModel):
    clusters: list[str] = Field(min_length=1, max_length=c.MAX_MULTIKUEUE_CLUSTERS, json_schema_extra=LIST_SET)


class ConditionsStatus(KubeModel):
    """The status of an AdmissionCheck or a MultiKueueCluster at v1beta1."""

    conditions: Conditions | None = None


def _kind(
    hub: type[Resource], *, spec: type[KubeModel] | None = None, status: type[KubeModel] | None = None, **fields: Any
) -> type[Resource]:
    """The v1beta1 class of `hub`'s kind: the v1beta2 schema under this apiVersion, with the
    v1beta1 `spec` and `status` models, and `fields` ((type, default) pairs), where they differ."""
    annotations = {name: annotation for name, (annotation, _) in fields.items()}
    namespace: dict[str, Any] = {"__module__": __name__, **{name: default for name, (_, default) in fields.items()}}
    if spec is not None:
        annotations["spec"] = spec
        if not hub.model_fields["spec"].is_required():
            namespace["spec"] = Field(default_factory=spec)
    if status is not None:
        annotations["status"] = status | None
        namespace["status"] = None
    return type(hub.__name__, (hub,), {**namespace, "__annotations__": annotations}, version="v1beta1")


# What v1beta1 declares otherwise, per kind: the rest is the v1beta2 schema.
_DIFFERENCES: dict[str, dict[str, Any]] = {
    "ClusterQueue": {"spec": ClusterQueueSpec, "status": ClusterQueueStatus},
    "Cohort": {"status": CohortStatus},
    "LocalQueue": {"status": LocalQueueStatus},
    "WorkloadPriorityClass": {"description": (str | None, None)},
    "Workload": {"spec": WorkloadSpec, "status": WorkloadStatus},
    "AdmissionCheck": {"spec": AdmissionCheckSpec, "status": ConditionsStatus},
    "MultiKueueCluster": {"spec": MultiKueueClusterSpec, "status": ConditionsStatus},
    "MultiKueueConfig": {"spec": MultiKueueConfigSpec},
}
KINDS: tuple[type[Resource], ...] = tuple(_kind(hub, **_DIFFERENCES.get(hub.KIND, {})) for hub in v2.KINDS)
KIND_BY_NAME: dict[str, type[Resource]] = {kind.KIND: kind for kind in KINDS}
