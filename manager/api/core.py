"""Thin typed models of the core Kubernetes kinds kfed touches.

They type the fields kfed reads and keep every other field (`OpenModel`), so an object read,
changed and written back loses nothing.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from manager.api.meta import KubeModel, OpenModel, Resource, Time, Toleration
from manager.api.quantity import Quantity


class ResourceRequirements(OpenModel):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class Container(OpenModel):
    name: str = ""
    resources: ResourceRequirements | None = None


class PodSpec(OpenModel):
    containers: list[Container] = Field(default_factory=list)
    init_containers: list[Container] | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    affinity: dict[str, Any] | None = None
    priority_class_name: str | None = None
    priority: int | None = None
    overhead: dict[str, Quantity] | None = None
    restart_policy: str | None = None
    scheduling_gates: list[dict[str, Any]] | None = None
    node_name: str | None = None


class PodTemplateMeta(OpenModel):
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodTemplateSpec(OpenModel):
    metadata: PodTemplateMeta | None = None
    spec: PodSpec = Field(default_factory=PodSpec)


class JobSpec(OpenModel):
    parallelism: int | None = None
    completions: int | None = None
    suspend: bool | None = None
    managed_by: str | None = None
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)


class JobCondition(OpenModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: Time | None = None


class JobStatus(OpenModel):
    conditions: list[JobCondition] | None = None
    start_time: Time | None = None
    completion_time: Time | None = None
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    ready: int | None = None


# The label the Job controller sets on every pod of a Job, with its name.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


class Job(Resource, OpenModel, group="batch", kind="Job", namespaced=True):
    spec: JobSpec = Field(default_factory=JobSpec)
    status: JobStatus | None = None


class PodCondition(OpenModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


class PodStatus(OpenModel):
    phase: str | None = None
    message: str | None = None
    conditions: list[PodCondition] | None = None


# A Pod's terminal phases: its containers ran to the end and will not run again.
POD_SUCCEEDED = "Succeeded"
POD_FAILED = "Failed"


class Pod(Resource, OpenModel, kind="Pod", namespaced=True):
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus | None = None


class Namespace(Resource, OpenModel, kind="Namespace"):
    """A Namespace: kfed reads its name and labels."""


class Secret(Resource, OpenModel, kind="Secret", namespaced=True):
    """A Secret. Its `data` is never logged or printed by kfed (see `__repr__`)."""

    type: str | None = None
    data: dict[str, str] | None = Field(default=None, repr=False)
    string_data: dict[str, str] | None = Field(default=None, repr=False)


class ServiceAccount(Resource, OpenModel, kind="ServiceAccount", namespaced=True):
    """A ServiceAccount: kfed reads only its metadata (whether queue propagation may delete a namespace)."""


class ConfigMap(Resource, OpenModel, kind="ConfigMap", namespaced=True):
    """A ConfigMap: kfed reads only its metadata (whether queue propagation may delete a namespace)."""


class RoleBinding(Resource, OpenModel, group="rbac.authorization.k8s.io", kind="RoleBinding", namespaced=True):
    """A RoleBinding: kfed reads only its metadata (whether queue propagation may delete a namespace)."""


class PriorityClass(Resource, OpenModel, group="scheduling.k8s.io", kind="PriorityClass"):
    value: int
    global_default: bool | None = None
    description: str | None = None


class LeaseSpec(KubeModel):
    holder_identity: str | None = None
    lease_duration_seconds: int | None = None
    acquire_time: str | None = None  # MicroTime: kept as written
    renew_time: str | None = None
    lease_transitions: int | None = None


class Lease(Resource, OpenModel, group="coordination.k8s.io", kind="Lease", namespaced=True):
    spec: LeaseSpec = Field(default_factory=LeaseSpec)


class LimitRangeItem(OpenModel):
    type: str
    default: dict[str, Quantity] | None = None
    default_request: dict[str, Quantity] | None = None


class LimitRangeSpec(OpenModel):
    limits: list[LimitRangeItem] = Field(default_factory=list)


class LimitRange(Resource, OpenModel, kind="LimitRange", namespaced=True):
    spec: LimitRangeSpec = Field(default_factory=LimitRangeSpec)


class ObjectReference(OpenModel):
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None


class Event(Resource, OpenModel, kind="Event", namespaced=True):
    """A core/v1 Event, as `kubectl describe` shows it: what happened to `involvedObject`."""

    involved_object: ObjectReference = Field(default_factory=ObjectReference)
    type: str | None = None
    reason: str | None = None
    message: str | None = None
    count: int | None = None
    first_timestamp: Time | None = None
    last_timestamp: Time | None = None
    event_time: str | None = None  # MicroTime, kept as written
