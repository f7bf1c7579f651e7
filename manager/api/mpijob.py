"""A thin typed model of Kubeflow's MPIJob (kubeflow.org/v2beta1, github.com/kubeflow/mpi-operator),
as the MPIJob integration reads it.

Like the core kinds (`manager.api.core`) it types only what kfed reads and keeps every other
field, so an MPIJob read, changed and written back loses nothing. Its replica specs are a map
keyed by replica type (`Launcher`, `Worker`), not a list.
"""

from __future__ import annotations

from pydantic import Field

from manager.api.core import JobCondition, PodTemplateSpec
from manager.api.meta import OpenModel, Resource

GROUP = "kubeflow.org"
VERSION = "v2beta1"
# spec.runPolicy.managedBy of an MPIJob the MPI Operator runs (the default when unset).
CONTROLLER_NAME = "kubeflow.org/mpi-operator"
# The replica types, in the order Kueue makes their PodSets.
LAUNCHER = "Launcher"
WORKER = "Worker"
REPLICA_TYPES = (LAUNCHER, WORKER)
# The MPIJob's terminal condition types, and the one that says all its pods run.
SUCCEEDED = "Succeeded"
FAILED = "Failed"
RUNNING = "Running"
# The labels the MPI Operator puts on every pod of an MPIJob (launcher and workers): the job's
# name, and the operator's.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
OPERATOR_NAME = "mpi-operator"


class ReplicaSpec(OpenModel):
    replicas: int | None = None  # the MPI Operator defaults it to 1
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)

    @property
    def effective_replicas(self) -> int:
        return self.replicas if self.replicas is not None else 1


class SchedulingPolicy(OpenModel):
    priority_class: str | None = None


class RunPolicy(OpenModel):
    suspend: bool | None = None
    managed_by: str | None = None
    scheduling_policy: SchedulingPolicy | None = None


class MPIJobSpec(OpenModel):
    # Keyed by replica type; a null entry is as good as none (the operator skips it).
    mpi_replica_specs: dict[str, ReplicaSpec | None] = Field(default_factory=dict)
    run_policy: RunPolicy = Field(default_factory=RunPolicy)


class ReplicaStatus(OpenModel):
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None


class MPIJobStatus(OpenModel):
    conditions: list[JobCondition] | None = None
    replica_statuses: dict[str, ReplicaStatus | None] | None = None


class MPIJob(Resource, OpenModel, group=GROUP, version=VERSION, kind="MPIJob", namespaced=True):
    spec: MPIJobSpec = Field(default_factory=MPIJobSpec)
    status: MPIJobStatus | None = None
