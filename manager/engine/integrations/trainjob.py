"""The TrainJob adapter (Kubeflow Trainer v2, trainer.kubeflow.org/v1alpha1; Kueue v0.19.2's
pkg/controller/jobs/trainjob and its MultiKueue adapter, against Trainer v2.2.1).

A TrainJob names a runtime (a ClusterTrainingRuntime, or a TrainingRuntime of its namespace)
and the Trainer makes one JobSet from the runtime's template. Kueue asks for the pods of that
JobSet: one PodSet per replicatedJob, named after it, of replicas x min(parallelism,
completions) pods (the JobSet integration's rule), so the adapter builds the replicatedJobs as
the Trainer would (`replicated_jobs`) from the runtime the shell loaded with the job
(`with_related`). What it builds is what decides quota and placement: each job's pod template
with the runtime patches of other managers merged in, the trainer step's count (`numNodes`),
and its `node` container's image, command, args and `resourcesPerNode`. Not built: the
initializers' and the ML policies' environment and volumes, which change no request.

Starting writes each admitted PodSet's labels, annotations, nodeSelector and tolerations into
the TrainJob's runtime patch whose manager is `kueue.x-k8s.io/manager` (one replicatedJob
patch per PodSet) and unsuspends it, in one write: Trainer v2.2.1's webhook lets the patches
change when the TrainJob is suspended before or after an update ("so that external controllers
(e.g. Kueue) update RuntimePatches and toggle spec.suspend in a single API request"), and its
controller re-applies the JobSet while it is suspended, so the patch lands on the pods.
Stopping suspends it; once none of its jobs is active (the webhook refuses a patch change while
the JobSet has an active job), its Kueue patch is emptied again (Kueue's RestorePodSetsInfo).
It finishes with its Complete or Failed condition. A worker gets the whole spec with managedBy
cleared and without Kueue's patch (the worker's webhook adds its own), and its status comes back
whole on every sync.

`spec.runtimePatches` is a list, which a merge patch replaces whole: the start and restore
patches carry the whole list as read, with a resourceVersion precondition.

Where it differs from Kueue, and why: the PodSets leave Kueue's own runtime patch out (Kueue
builds them with every patch; at the Workload's creation Kueue's is empty, so they agree, and
after a start Kueue's would put the admission's node labels into what the Workload asked for);
starting is one write, not Kueue's two updates (the webhook allows it, see above); a TrainJob
without Kueue's patch gets one on start, where Kueue fails with "kueue runtime patch not found"
and retries forever; the JobSet a TrainJob makes is left alone, where Kueue suspends a child
job of an unadmitted parent (the Trainer keeps the JobSet suspended with its TrainJob anyway).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from manager.api import trainjob as api
from manager.api.jobset import JOBSET_NAME_LABEL
from manager.api.kueue import PodSet, Workload
from manager.api.meta import Resource
from manager.api.trainjob import ClusterTrainingRuntime, TrainingRuntime, TrainingRuntimeSpec, TrainJob
from manager.engine.integrations.adapter import Finished, JobAdapter, true_condition
from manager.engine.integrations.jobset import active_jobs, ready_jobs
from manager.engine.jobs import JobConversionError, PodSetInfo

# The merge keys of the lists a runtime patch may carry into a Job template (the strategic
# merge patch of batch/v1 JobTemplateSpec the Trainer applies); any other list is replaced.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
}


def strategic_merge(base: Any, patch: Any, *, key: str = "") -> Any:
    """`patch` merged into `base` as Kubernetes' strategic merge patch does for the fields a
    runtime patch may set: maps key by key, the lists of `_MERGE_KEYS` entry by entry on their
    merge key, anything else replaced. Neither argument is changed."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for name, value in patch.items():
            merged[name] = strategic_merge(base[name], value, key=name) if name in base else copy.deepcopy(value)
        return merged
    merge_key = _MERGE_KEYS.get(key)
    if merge_key and isinstance(base, list) and isinstance(patch, list):
        out = [copy.deepcopy(item) for item in base]
        for item in patch:
            at = next((i for i, have in enumerate(out) if isinstance(have, dict) and have.get(merge_key) == item.get(merge_key)), None)
            if at is None:
                out.append(copy.deepcopy(item))
            else:
                out[at] = strategic_merge(out[at], item)
        return out
    return copy.deepcopy(patch)


@dataclass(frozen=True)
class BuiltJob:
    """One replicatedJob of the JobSet the Trainer makes of a TrainJob: its name, replicas,
    pods per replica (parallelism = completions = count) and pod template."""

    name: str
    replicas: int
    count: int
    template: dict[str, Any]

    @property
    def pods(self) -> int:
        """Kueue's PodSet count: replicas x min(parallelism, completions)."""
        return self.replicas * self.count


def _is_kueue_patch(patch: Mapping[str, Any]) -> bool:
    return patch.get("manager") == api.KUEUE_PATCH_MANAGER


def _job_template_patches(job: TrainJob, name: str) -> list[dict[str, Any]]:
    """The Job template patches of replicatedJob `name` from the runtime patches of every manager
    but Kueue (Kueue's own is the admission's, never part of the pods it asks for), in order."""
    found = []
    for patch in job.spec.runtime_patches or []:
        if _is_kueue_patch(patch):
            continue
        spec = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for rjob in spec.get("replicatedJobs") or []:
            if rjob.get("name") == name and rjob.get("template"):
                found.append(rjob["template"])
    return found


def _apply_trainer(template: dict[str, Any], job: TrainJob) -> None:
    """The TrainJob's `trainer` on the `node` container of the trainer step (the Trainer's
    builder): image, command and args when set, and resourcesPerNode as its resources."""
    trainer = job.spec.trainer
    if trainer is None:
        return
    for container in (template.get("spec") or {}).get("containers") or []:
        if container.get("name") != api.NODE_CONTAINER:
            continue
        if trainer.image is not None:
            container["image"] = trainer.image
        if trainer.command is not None:
            container["command"] = list(trainer.command)
        if trainer.args is not None:
            container["args"] = list(trainer.args)
        resources = trainer.resources_per_node or {}
        if resources.get("requests") is not None or resources.get("limits") is not None:
            container["resources"] = {k: copy.deepcopy(v) for k, v in resources.items() if k in ("requests", "limits") and v is not None}
        return


def replicated_jobs(job: TrainJob, runtime: TrainingRuntimeSpec) -> list[BuiltJob]:
    """The replicatedJobs of the JobSet the Trainer v2.2.1 makes of `job` from `runtime`
    (its TrainingRuntime newRuntimeInfo, the ML policies' EnforceMLPolicy and the JobSet
    builder): the trainer step (labelled `trainer.kubeflow.org/trainjob-ancestor-step:
    trainer`) runs 1 replica of `trainer.numNodes`, else the ML policy's `numNodes`, else 1
    pods; any other step its own replicas of its parallelism (1 when unset)."""
    built = []
    raw_rjobs = runtime.to_dict().get("template", {}).get("spec", {}).get("replicatedJobs") or []
    for rjob, raw in zip(runtime.template.spec.replicated_jobs, raw_rjobs, strict=True):
        job_template: dict[str, Any] = copy.deepcopy(raw.get("template") or {})
        for patch in _job_template_patches(job, rjob.name):
            job_template = strategic_merge(job_template, patch)
        labels = (job_template.get("metadata") or {}).get("labels") or {}
        template = copy.deepcopy((job_template.get("spec") or {}).get("template") or {})
        replicas = rjob.effective_replicas
        count = (job_template.get("spec") or {}).get("parallelism")
        count = count if isinstance(count, int) else 1
        if labels.get(api.ANCESTOR_LABEL) == api.ANCESTOR_TRAINER:
            replicas = 1  # the Trainer runs one replica of the trainer step
            _apply_trainer(template, job)
            if runtime.ml_policy is not None:
                num_nodes = job.spec.trainer.num_nodes if job.spec.trainer is not None else None
                count = num_nodes if num_nodes is not None else runtime.ml_policy.num_nodes or 1
        built.append(BuiltJob(name=rjob.name, replicas=replicas, count=count, template=template))
    return built


def _replicated_job_patch(info: PodSetInfo) -> dict[str, Any]:
    """Kueue's ReplicatedJobPatch for one admitted PodSet: its pods' labels and annotations,
    and the nodeSelector and tolerations of its flavors (each left out when empty, as Go's
    omitempty writes them)."""
    metadata = {key: dict(value) for key, value in (("labels", info.labels), ("annotations", info.annotations)) if value}
    spec: dict[str, Any] = {}
    if info.node_selector:
        spec["nodeSelector"] = dict(info.node_selector)
    if info.tolerations:
        spec["tolerations"] = copy.deepcopy(info.tolerations)
    pod: dict[str, Any] = {}
    if metadata:
        pod["metadata"] = metadata
    if spec:
        pod["spec"] = spec
    return {"name": info.name, "template": {"spec": {"template": pod}}}


def _empty_kueue_patch() -> dict[str, Any]:
    """The runtime patch Kueue's webhook gives a TrainJob at creation: Kueue's, patching nothing yet."""
    return {"manager": api.KUEUE_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}


def _raw_patches(job: TrainJob) -> list[dict[str, Any]]:
    return copy.deepcopy(list((job.to_dict().get("spec") or {}).get("runtimePatches") or []))


class TrainJobAdapter(JobAdapter[TrainJob]):
    framework = "trainer.kubeflow.org/trainjob"
    model = TrainJob
    cli_name = "trainjob"
    pod_label = JOBSET_NAME_LABEL  # the Trainer's JobSet is named after the TrainJob
    default_managed_by = api.CONTROLLER_NAME
    restores_with_suspend = False  # Kueue's TrainJob.Stop: restored once its jobs are gone

    # --- its runtime ----------------------------------------------------------------------------
    def related_models(self) -> tuple[type[Resource], ...]:
        return (ClusterTrainingRuntime, TrainingRuntime)

    def related_of(self, job: TrainJob) -> list[tuple[type[Resource], str]]:
        """The runtime it names (a TrainJob made before its runtime waits for it, as under
        Kueue, whose TrainJob reconciler watches the runtimes)."""
        kind, key = job.runtime_key
        return [(TrainingRuntime if kind == api.TRAINING_RUNTIME else ClusterTrainingRuntime, key)]

    def with_related(self, job: TrainJob, *, find: Callable[[type[Resource], str], Resource | None]) -> TrainJob:
        """The TrainJob with the spec of the runtime it names (Kueue's getRuntimeSpec)."""
        [(model, key)] = self.related_of(job)
        found = find(model, key)
        spec = found.spec if isinstance(found, ClusterTrainingRuntime | TrainingRuntime) else None
        return job.with_runtime(spec)

    def _built(self, job: TrainJob) -> list[BuiltJob]:
        ref = job.spec.runtime_ref
        if (ref.api_group or api.GROUP) != api.GROUP or (ref.kind or api.CLUSTER_TRAINING_RUNTIME) not in (
            api.CLUSTER_TRAINING_RUNTIME,
            api.TRAINING_RUNTIME,
        ):
            raise JobConversionError("spec.runtimeRef", f"Unsupported value: unsupported runtime: {ref.api_group}/{ref.kind}")
        if job.runtime is None:
            raise JobConversionError("spec.runtimeRef", f"Not found: runtime '{ref.name}' not found")
        built = replicated_jobs(job, job.runtime)
        if not built:
            raise JobConversionError("spec.runtimeRef", f"Invalid value: the runtime '{ref.name}' has no replicatedJobs")
        return built

    # --- the Workload ---------------------------------------------------------------------------
    def template_path(self, index: int) -> str:
        return f"runtime.template.spec.replicatedJobs[{index}].template.spec.template"

    def pod_sets(self, job: TrainJob) -> list[PodSet]:
        """Kueue's TrainJob PodSets: the JobSet PodSets of the JobSet the Trainer would make."""
        return [PodSet(name=rjob.name, template=rjob.template, count=rjob.pods) for rjob in self._built(job)]

    # --- running and stopping ---------------------------------------------------------------------
    def is_suspended(self, job: TrainJob) -> bool:
        return job.spec.suspend is True

    def creation_patch(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """Kueue's TrainJob webhook: suspended, and Kueue's empty runtime patch appended (the
        entry its start fills), unless the TrainJob has one already."""
        spec = obj.get("spec") or {}
        patch = super().creation_patch(obj)
        patches = spec.get("runtimePatches")
        if not isinstance(patches, list):
            patch.append({"op": "add", "path": "/spec/runtimePatches", "value": [_empty_kueue_patch()]})
        elif not any(isinstance(p, dict) and _is_kueue_patch(p) for p in patches):
            patch.append({"op": "add", "path": "/spec/runtimePatches/-", "value": _empty_kueue_patch()})
        return patch

    def start_patch(self, job: TrainJob, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> dict[str, Any]:
        """Kueue's RunWithPodSetsInfo: one replicatedJob patch per admitted PodSet, named after
        it, in Kueue's runtime patch, written with `suspend: false`. A TrainJob without Kueue's
        patch (made before Kueue's webhook ran) gets one."""
        if job.runtime is not None:
            built = self._built(job)
            if len(pod_sets) != len(built):
                raise JobConversionError("spec.runtimePatches", f"expecting {len(built)} admitted PodSets, got {len(pod_sets)}")
        patches = _raw_patches(job)
        kueue = next((p for p in patches if _is_kueue_patch(p)), None)
        if kueue is None:
            kueue = _empty_kueue_patch()
            patches.append(kueue)
        template = kueue.setdefault("trainingRuntimeSpec", {}).setdefault("template", {})
        template.setdefault("spec", {})["replicatedJobs"] = [_replicated_job_patch(info) for info in pod_sets]
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "spec": {"suspend": False, "runtimePatches": patches}}

    def restore_patch(self, job: TrainJob, wl: Workload) -> dict[str, Any] | None:
        """Kueue's RestorePodSetsInfo: Kueue's runtime patch patches no replicatedJob again.
        None when it patches none already."""
        patches = _raw_patches(job)
        kueue = next((p for p in patches if _is_kueue_patch(p)), None)
        spec = ((kueue or {}).get("trainingRuntimeSpec") or {}).get("template", {}).get("spec")
        if not isinstance(spec, dict) or not spec.get("replicatedJobs"):
            return None
        spec.pop("replicatedJobs")
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "spec": {"runtimePatches": patches}}

    def finished(self, job: TrainJob) -> Finished | None:
        """Kueue's Finished: Complete True succeeded, Failed True failed, with its message."""
        done = true_condition(job.status.conditions if job.status else None, api.COMPLETE)
        if done is not None:
            return Finished(True, done.message or "TrainJob finished successfully")
        failed = true_condition(job.status.conditions if job.status else None, api.FAILED)
        if failed is not None:
            return Finished(False, failed.message or "TrainJob failed")
        return None

    def active_count(self, job: TrainJob) -> int:
        """Its JobSet's active Jobs, as the Trainer copies them (Kueue's IsActive: any > 0)."""
        return active_jobs(job.status.jobs_status if job.status else None)

    def pods_ready(self, job: TrainJob) -> bool:
        """Kueue's PodsReady for a TrainJob: its ready and succeeded Jobs add up to the replicas
        of the JobSet it makes (not ready while its runtime is unknown)."""
        if job.runtime is None:
            return False
        try:
            replicas = sum(rjob.replicas for rjob in self._built(job))
        except JobConversionError:
            return False
        return replicas == ready_jobs(job.status.jobs_status if job.status else None)

    def managed_by(self, job: TrainJob) -> str | None:
        return job.spec.managed_by

    # --- the rights it needs ------------------------------------------------------------------------
    def controller_rules(self) -> list[dict[str, list[str]]]:
        """The default rights, and reading the runtimes its PodSets are built from (Kueue's
        trainjob controller's RBAC)."""
        return [
            *super().controller_rules(),
            {"apiGroups": [api.GROUP], "resources": ["clustertrainingruntimes", "trainingruntimes"], "verbs": ["get", "list", "watch"]},
        ]

    # --- MultiKueue ------------------------------------------------------------------------------
    def remote_spec(self, job: TrainJob) -> dict[str, Any]:
        """The common copy, with Kueue's runtime patch removed so the worker's webhook adds its
        own (Kueue's SyncJob)."""
        spec = super().remote_spec(job)
        kept = [p for p in spec.get("runtimePatches") or [] if not (isinstance(p, dict) and _is_kueue_patch(p))]
        if kept:
            spec["runtimePatches"] = kept
        else:
            spec.pop("runtimePatches", None)
        return spec

    def lost_pods_status(self, job: TrainJob) -> dict[str, Any]:
        statuses = [status.to_dict() for status in (job.status.jobs_status if job.status else None) or []]
        return {"status": {"jobsStatus": [{**status, "active": 0, "ready": 0} for status in statuses]}}
