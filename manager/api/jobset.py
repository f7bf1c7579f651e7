"""A thin typed model of JobSet (jobset.x-k8s.io/v1alpha2), as the JobSet integration reads it.

Like the core kinds (`manager.api.core`) it types only what kfed reads and keeps every other
field, so a JobSet read, changed and written back loses nothing.
"""

from __future__ import annotations

from pydantic import Field

from manager.api.core import JobCondition, JobSpec, PodTemplateMeta
from manager.api.meta import OpenModel, Resource

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
# spec.managedBy of a JobSet its own controller runs (the default when unset).
CONTROLLER_NAME = "jobset.sigs.k8s.io/jobset-controller"
# JobSet's terminal condition types.
COMPLETED = "Completed"
FAILED = "Failed"
# The label the JobSet controller sets on every pod of a JobSet, with its name.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


class JobTemplateSpec(OpenModel):
    metadata: PodTemplateMeta | None = None
    spec: JobSpec = Field(default_factory=JobSpec)


class ReplicatedJob(OpenModel):
    name: str = ""
    replicas: int | None = None  # the API server defaults it to 1
    template: JobTemplateSpec = Field(default_factory=JobTemplateSpec)

    @property
    def effective_replicas(self) -> int:
        return self.replicas if self.replicas is not None else 1


class JobSetSpec(OpenModel):
    replicated_jobs: list[ReplicatedJob] = Field(default_factory=list)
    suspend: bool | None = None
    managed_by: str | None = None


class ReplicatedJobStatus(OpenModel):
    name: str = ""
    ready: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    active: int | None = None
    suspended: int | None = None


class JobSetStatus(OpenModel):
    conditions: list[JobCondition] | None = None
    replicated_jobs_status: list[ReplicatedJobStatus] | None = None
    restarts: int | None = None
    terminal_state: str | None = None


class JobSet(Resource, OpenModel, group=GROUP, version=VERSION, kind="JobSet", namespaced=True):
    spec: JobSetSpec = Field(default_factory=JobSetSpec)
    status: JobSetStatus | None = None
