"""kueue.x-k8s.io/v1beta1, still served and accepted from users.

Only the kinds whose shape differs from v1beta2 are redeclared here; the others are the same
schema under another apiVersion. `manager.api.conversion` maps between the two.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from manager.api import constants as c
from manager.api import kueue as v2
from manager.api.kueue import _cel
from manager.api.meta import Condition, KubeModel, LabelSelector, Name, Resource

# v1beta1 still accepts the deprecated aliases of MayStopSearch.
FungibilityPolicy = Literal["MayStopSearch", "TryNextFlavor", "Borrow", "Preempt"]


class FlavorFungibility(KubeModel):
    when_can_borrow: FungibilityPolicy | None = None
    when_can_preempt: FungibilityPolicy | None = None
    preference: Literal["BorrowingOverPreemption", "PreemptionOverBorrowing"] | None = None


class ClusterQueueSpec(KubeModel):
    model_config = {
        "json_schema_extra": _cel(
            *((rule.replace("has(self.cohortName)", "has(self.cohort)"), message) for rule, message in v2._NO_LIMITS_WITHOUT_COHORT),
            (
                "!(has(self.admissionChecks) && has(self.admissionChecksStrategy))",
                "Either AdmissionChecks or AdmissionCheckStrategy can be set, but not both",
            ),
        )
    }

    resource_groups: list[v2.ResourceGroup] | None = Field(default=None, max_length=16)
    cohort: Name | None = None
    queueing_strategy: v2.QueueingStrategy | None = None
    namespace_selector: LabelSelector | None = None
    flavor_fungibility: FlavorFungibility | None = None
    preemption: v2.ClusterQueuePreemption | None = None
    admission_checks: list[Name] | None = Field(default=None, max_length=64)
    admission_checks_strategy: v2.AdmissionChecksStrategy | None = None
    stop_policy: v2.StopPolicy | None = None
    fair_sharing: v2.FairSharing | None = None
    admission_scope: v2.AdmissionScope | None = None


class ClusterQueue(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta1"
    KIND: ClassVar[str] = "ClusterQueue"
    PLURAL: ClassVar[str] = "clusterqueues"

    spec: ClusterQueueSpec = Field(default_factory=ClusterQueueSpec)
    status: v2.ClusterQueueStatus | None = None


class LocalQueueStatus(KubeModel):
    conditions: list[Condition] | None = Field(default=None, max_length=16)
    pending_workloads: int | None = None
    reserving_workloads: int | None = None
    admitted_workloads: int | None = None
    flavors_reservation: list[v2.LocalQueueFlavorUsage] | None = Field(default=None, max_length=64)
    flavor_usage: list[v2.LocalQueueFlavorUsage] | None = Field(default=None, max_length=64)
    fair_sharing: v2.FairSharingStatus | None = None


class LocalQueue(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta1"
    KIND: ClassVar[str] = "LocalQueue"
    PLURAL: ClassVar[str] = "localqueues"
    NAMESPACED: ClassVar[bool] = True

    spec: v2.LocalQueueSpec = Field(default_factory=v2.LocalQueueSpec)
    status: LocalQueueStatus | None = None


class WorkloadSpec(KubeModel):
    model_config = v2.WorkloadSpec.model_config

    pod_sets: list[v2.PodSet] = Field(min_length=1, max_length=18)
    queue_name: Name | None = None
    priority_class_name: Annotated[str, Field(max_length=253)] | None = None
    priority: int | None = None
    priority_class_source: Literal["kueue.x-k8s.io/workloadpriorityclass", "scheduling.k8s.io/priorityclass", ""] | None = None
    active: bool | None = None
    maximum_execution_time_seconds: int | None = Field(default=None, ge=1)


class WorkloadStatus(KubeModel):
    conditions: list[Condition] | None = Field(default=None, max_length=16)
    admission: v2.Admission | None = None
    requeue_state: v2.RequeueState | None = None
    reclaimable_pods: list[v2.ReclaimablePod] | None = Field(default=None, max_length=18)
    admission_checks: list[v2.AdmissionCheckState] | None = Field(default=None, max_length=8)
    resource_requests: list[v2.PodSetRequest] | None = Field(default=None, max_length=18)
    # Kueue's v1beta1 field keeps this spelling.
    accumulated_past_exexcution_time_seconds: int | None = None
    scheduling_stats: v2.SchedulingStats | None = None
    nominated_cluster_names: list[str] | None = Field(default=None, max_length=20)
    cluster_name: str | None = Field(default=None, max_length=256)


class Workload(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta1"
    KIND: ClassVar[str] = "Workload"
    PLURAL: ClassVar[str] = "workloads"
    NAMESPACED: ClassVar[bool] = True

    spec: WorkloadSpec
    status: WorkloadStatus | None = None


class AdmissionCheckSpec(KubeModel):
    controller_name: Annotated[str, Field(min_length=1, max_length=253)]
    retry_delay_minutes: int | None = None
    parameters: v2.AdmissionCheckParametersReference | None = None


class AdmissionCheck(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta1"
    KIND: ClassVar[str] = "AdmissionCheck"
    PLURAL: ClassVar[str] = "admissionchecks"

    spec: AdmissionCheckSpec
    status: v2.AdmissionCheckStatus | None = None


class MultiKueueClusterSpec(KubeModel):
    kube_config: v2.KubeConfigRef | None = None
    cluster_profile_ref: v2.ClusterProfileReference | None = None


class MultiKueueCluster(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta1"
    KIND: ClassVar[str] = "MultiKueueCluster"
    PLURAL: ClassVar[str] = "multikueueclusters"

    spec: MultiKueueClusterSpec
    status: v2.MultiKueueClusterStatus | None = None


class MultiKueueConfigSpec(KubeModel):
    clusters: list[Annotated[str, Field(max_length=256)]] = Field(min_length=1, max_length=20)


class MultiKueueConfig(Resource):
    GROUP: ClassVar[str] = c.GROUP
    VERSION: ClassVar[str] = "v1beta1"
    KIND: ClassVar[str] = "MultiKueueConfig"
    PLURAL: ClassVar[str] = "multikueueconfigs"

    spec: MultiKueueConfigSpec


def _same_shape(hub: type[Resource]) -> type[Resource]:
    """A v1beta1 class for a kind whose schema did not change between versions."""
    return type(hub.__name__, (hub,), {"VERSION": "v1beta1", "__module__": __name__})


ResourceFlavor = _same_shape(v2.ResourceFlavor)
Cohort = _same_shape(v2.Cohort)
WorkloadPriorityClass = _same_shape(v2.WorkloadPriorityClass)

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
