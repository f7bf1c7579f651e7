"""A thin typed model of KubeRay's RayCluster and RayJob (ray.io/v1), as the Ray integrations read them.

Like the core kinds (`manager.api.core`) it types only what kfed reads and keeps every other
field, so an object read, changed and written back loses nothing.
"""

from __future__ import annotations

from pydantic import Field

from manager.api.core import PodTemplateSpec, ResourceRequirements
from manager.api.meta import OpenModel, Resource

GROUP = "ray.io"
VERSION = "v1"
# spec.managedBy of a RayCluster or RayJob KubeRay's own operator runs (the default when unset).
CONTROLLER_NAME = "ray.io/kuberay-operator"
# The label KubeRay puts on every pod of a RayCluster (a RayJob's too), with the cluster's name.
CLUSTER_LABEL = "ray.io/cluster"
# The annotation that turns on GCS fault tolerance (as spec.gcsFaultToleranceOptions does).
FT_ENABLED_ANNOTATION = "ray.io/ft-enabled"

# RayCluster status.state
READY = "ready"
FAILED = "failed"
SUSPENDED = "suspended"

# RayJob spec.submissionMode; the CRD defaults it to K8sJobMode.
K8S_JOB_MODE = "K8sJobMode"
SIDECAR_MODE = "SidecarMode"
DEFAULT_SUBMISSION_MODE = K8S_JOB_MODE
# The submitter container KubeRay runs (its own Job in K8sJobMode, a head sidecar in SidecarMode).
SUBMITTER_CONTAINER = "ray-job-submitter"

# RayJob status.jobDeploymentStatus and status.jobStatus
DEPLOYMENT_NEW = ""
DEPLOYMENT_SUSPENDED = "Suspended"
DEPLOYMENT_COMPLETE = "Complete"
DEPLOYMENT_FAILED = "Failed"
JOB_SUCCEEDED = "SUCCEEDED"


class HeadGroupSpec(OpenModel):
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)


class WorkerGroupSpec(OpenModel):
    group_name: str = ""
    replicas: int | None = None
    num_of_hosts: int | None = None
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)


class AutoscalerOptions(OpenModel):
    resources: ResourceRequirements | None = None


class RayClusterSpec(OpenModel):
    suspend: bool | None = None
    managed_by: str | None = None
    head_group_spec: HeadGroupSpec = Field(default_factory=HeadGroupSpec)
    worker_group_specs: list[WorkerGroupSpec] | None = None
    enable_in_tree_autoscaling: bool | None = None
    autoscaler_options: AutoscalerOptions | None = None
    gcs_fault_tolerance_options: dict[str, object] | None = None


class RayClusterStatus(OpenModel):
    state: str | None = None
    reason: str | None = None
    ready_worker_replicas: int | None = None
    desired_worker_replicas: int | None = None


class RayCluster(Resource, OpenModel, group=GROUP, version=VERSION, kind="RayCluster", namespaced=True):
    spec: RayClusterSpec = Field(default_factory=RayClusterSpec)
    status: RayClusterStatus | None = None


class RayJobSpec(OpenModel):
    suspend: bool | None = None
    managed_by: str | None = None
    ray_cluster_spec: RayClusterSpec | None = None
    submitter_pod_template: PodTemplateSpec | None = None
    submission_mode: str | None = None
    cluster_selector: dict[str, str] | None = None
    shutdown_after_job_finishes: bool | None = None

    @property
    def effective_submission_mode(self) -> str:
        return self.submission_mode or DEFAULT_SUBMISSION_MODE


class RayJobStatus(OpenModel):
    job_status: str | None = None
    job_deployment_status: str | None = None
    reason: str | None = None
    message: str | None = None
    ray_cluster_name: str | None = None
    ray_cluster_status: RayClusterStatus | None = None


class RayJob(Resource, OpenModel, group=GROUP, version=VERSION, kind="RayJob", namespaced=True):
    spec: RayJobSpec = Field(default_factory=RayJobSpec)
    status: RayJobStatus | None = None
