"""A thin typed model of LeaderWorkerSet (leaderworkerset.x-k8s.io/v1, sigs.k8s.io/lws v0.7.0),
as the LeaderWorkerSet integration reads it.

Like the core kinds (`manager.api.core`) it types only what kfed reads and keeps every other
field, so a LeaderWorkerSet read, changed and written back loses nothing.
"""

from __future__ import annotations

from pydantic import Field

from manager.api.core import JobCondition, PodTemplateSpec
from manager.api.meta import OpenModel, Resource

GROUP = "leaderworkerset.x-k8s.io"
VERSION = "v1"
# Labels and annotations the LWS controller and its pod webhook put on each pod of a group.
SET_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LEADER_NAME_ANNOTATION = "leaderworkerset.sigs.k8s.io/leader-name"  # on worker pods only
DOMAIN_PREFIX = "leaderworkerset.sigs.k8s.io"
# The API server's defaults (+kubebuilder:default=1) for spec.replicas and leaderWorkerTemplate.size.
DEFAULT_REPLICAS = 1
DEFAULT_SIZE = 1


class LeaderWorkerTemplate(OpenModel):
    leader_template: PodTemplateSpec | None = None
    worker_template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)
    size: int | None = None

    @property
    def effective_size(self) -> int:
        return self.size if self.size is not None else DEFAULT_SIZE


class LeaderWorkerSetSpec(OpenModel):
    replicas: int | None = None
    leader_worker_template: LeaderWorkerTemplate = Field(default_factory=LeaderWorkerTemplate)

    @property
    def effective_replicas(self) -> int:
        return self.replicas if self.replicas is not None else DEFAULT_REPLICAS


class LeaderWorkerSetStatus(OpenModel):
    conditions: list[JobCondition] | None = None
    ready_replicas: int | None = None
    updated_replicas: int | None = None
    replicas: int | None = None


class LeaderWorkerSet(Resource, OpenModel, group=GROUP, version=VERSION, kind="LeaderWorkerSet", namespaced=True):
    spec: LeaderWorkerSetSpec = Field(default_factory=LeaderWorkerSetSpec)
    status: LeaderWorkerSetStatus | None = None
