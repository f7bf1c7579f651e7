"""A thin typed model of Kubeflow Trainer v2's TrainJob and its runtimes
(trainer.kubeflow.org/v1alpha1, github.com/kubeflow/trainer/v2), as the TrainJob integration
reads them.

Like the core kinds (`manager.api.core`) they type only what kfed reads and keep every other
field, so an object read, changed and written back loses nothing. A TrainJob names its runtime
(a ClusterTrainingRuntime, or a TrainingRuntime of its namespace) and the Trainer builds one
JobSet from the runtime's template: the integration needs both to know the pods it asks for,
so the job the integration is given carries the runtime's spec it was loaded with
(`TrainJob.with_runtime`), never written back.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, PrivateAttr

from manager.api.jobset import ReplicatedJob, ReplicatedJobStatus
from manager.api.meta import OpenModel, Resource

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
# spec.managedBy of a TrainJob the Trainer's controller runs (the CRD's default).
CONTROLLER_NAME = "trainer.kubeflow.org/trainjob-controller"
# The runtime kinds a runtimeRef may name (`kind`; ClusterTrainingRuntime when unset).
CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
TRAINING_RUNTIME = "TrainingRuntime"
# The TrainJob's terminal condition types.
COMPLETE = "Complete"
FAILED = "Failed"
# The replicatedJob label naming the step a job of the runtime is (`trainer`: the training
# nodes, whose count and `node` container the TrainJob's `trainer` overrides).
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
NODE_CONTAINER = "node"
# The runtimePatches entry that is Kueue's: where it puts each PodSet's node labels on start.
KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"


class RuntimeRef(OpenModel):
    name: str = ""
    api_group: str | None = None  # trainer.kubeflow.org by the CRD's default
    kind: str | None = None  # ClusterTrainingRuntime by the CRD's default


class Trainer(OpenModel):
    num_nodes: int | None = None
    resources_per_node: dict[str, Any] | None = None  # a core ResourceRequirements
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None


class TrainJobSpec(OpenModel):
    runtime_ref: RuntimeRef = Field(default_factory=RuntimeRef)
    trainer: Trainer | None = None
    # Kept as written: each entry is one manager's patch of the runtime's template (a list
    # keyed by `manager`, which a merge patch replaces whole).
    runtime_patches: list[dict[str, Any]] | None = None
    suspend: bool | None = None
    managed_by: str | None = None


class TrainJobCondition(OpenModel):
    """metav1.Condition, as the Trainer writes it (read only)."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None


class TrainJobStatus(OpenModel):
    conditions: list[TrainJobCondition] | None = None
    # The Trainer copies each replicatedJob's status from its JobSet, in JobSet's shape.
    jobs_status: list[ReplicatedJobStatus] | None = None


class MLPolicy(OpenModel):
    num_nodes: int | None = None


class JobSetTemplateSpec(OpenModel):
    replicated_jobs: list[ReplicatedJob] = Field(default_factory=list)


class JobSetTemplate(OpenModel):
    spec: JobSetTemplateSpec = Field(default_factory=JobSetTemplateSpec)


class TrainingRuntimeSpec(OpenModel):
    ml_policy: MLPolicy | None = None
    template: JobSetTemplate = Field(default_factory=JobSetTemplate)


class ClusterTrainingRuntime(Resource, OpenModel, group=GROUP, version=VERSION, kind=CLUSTER_TRAINING_RUNTIME, namespaced=False):
    spec: TrainingRuntimeSpec = Field(default_factory=TrainingRuntimeSpec)


class TrainingRuntime(Resource, OpenModel, group=GROUP, version=VERSION, kind=TRAINING_RUNTIME, namespaced=True):
    spec: TrainingRuntimeSpec = Field(default_factory=TrainingRuntimeSpec)


class TrainJob(Resource, OpenModel, group=GROUP, version=VERSION, kind="TrainJob", namespaced=True):
    spec: TrainJobSpec = Field(default_factory=TrainJobSpec)
    status: TrainJobStatus | None = None
    # The spec of the runtime it names, as found when it was loaded; None: not found (yet).
    _runtime: TrainingRuntimeSpec | None = PrivateAttr(default=None)

    @property
    def runtime(self) -> TrainingRuntimeSpec | None:
        return self._runtime

    def with_runtime(self, runtime: TrainingRuntimeSpec | None) -> TrainJob:
        """A copy of the TrainJob carrying its runtime's spec (the cached object is never changed)."""
        job = self.model_copy()
        job._runtime = runtime
        return job

    @property
    def runtime_key(self) -> tuple[str, str]:
        """(the runtime kind it names, its key: a ClusterTrainingRuntime's name, or a
        TrainingRuntime's `namespace/name` in the TrainJob's namespace), as the Trainer's
        RuntimeRefIsClusterTrainingRuntime reads the reference."""
        ref = self.spec.runtime_ref
        if (ref.kind or CLUSTER_TRAINING_RUNTIME) == TRAINING_RUNTIME:
            return TRAINING_RUNTIME, f"{self.namespace}/{ref.name}"
        return CLUSTER_TRAINING_RUNTIME, ref.name
