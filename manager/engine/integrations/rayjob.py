"""The RayJob adapter (ray.io/v1, KubeRay; Kueue's pkg/controller/jobs/rayjob and the Ray
MultiKueue adapter).

Its Workload asks for its Ray cluster's PodSets (`raycluster.cluster_pod_sets`: the head, then
each worker group) and, in K8sJobMode (the CRD's default submission mode), one more named
`submitter` of 1 pod: its submitterPodTemplate, or KubeRay's default submitter (one container,
the head's image, 500m cpu and 200Mi memory requested). In SidecarMode KubeRay adds that
default submitter container to the head pod, so the head PodSet carries it. Starting
unsuspends it with the admitted PodSets merged into the cluster's templates and the
submitter's (writing KubeRay's default submitter template when it had none, as Kueue does);
stopping suspends it and gives the templates back what the Workload recorded. A RayJob that
names an existing cluster (clusterSelector) is not Kueue's (JobWithSkip).

It is finished when its jobDeploymentStatus is Complete or Failed, successfully when its
jobStatus is SUCCEEDED, with KubeRay's status message. It is active unless its
jobDeploymentStatus is Suspended or new (empty). A worker gets the whole spec with managedBy
cleared, and its status comes back whole on every sync.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from manager.api import ray as api
from manager.api.kueue import PodSet, Workload
from manager.api.ray import RayClusterSpec, RayJob
from manager.engine.integrations.adapter import Finished, JobAdapter, PodQuery
from manager.engine.integrations.raycluster import (
    cluster_pod_set_names,
    cluster_pod_sets,
    cluster_problems,
    merge_patch,
    restore_cluster_spec,
    start_cluster_spec,
)
from manager.engine.integrations.templates import merge_into_template, restore_template
from manager.engine.jobs import JobConversionError, PodSetInfo, original_template

SUBMITTER = "submitter"
# KubeRay's default submitter container resources (its GetDefaultSubmitterContainer), which
# Kueue mirrors for the submitter PodSet and for the sidecar in SidecarMode.
DEFAULT_SUBMITTER_RESOURCES = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}
CLUSTER_SPEC = "spec.rayClusterSpec"


def _cluster_spec(job: RayJob) -> RayClusterSpec:
    if job.spec.ray_cluster_spec is None:
        raise JobConversionError(CLUSTER_SPEC, "Required value: rayClusterSpec is required for a RayJob Kueue manages")
    return job.spec.ray_cluster_spec


def _head_image(raw_spec: dict[str, Any]) -> str:
    containers = (
        (((raw_spec.get("rayClusterSpec") or {}).get("headGroupSpec") or {}).get("template") or {}).get("spec", {}).get("containers")
    )
    return str(containers[0].get("image", "")) if containers else ""


def default_submitter_template(raw_spec: dict[str, Any]) -> dict[str, Any]:
    """KubeRay's default submitter pod template, as Kueue writes it: one container with the
    head's image (against version mismatches) and the default resources, never restarted."""
    container = {"name": api.SUBMITTER_CONTAINER, "image": _head_image(raw_spec), "resources": copy.deepcopy(DEFAULT_SUBMITTER_RESOURCES)}
    return {"spec": {"containers": [container], "restartPolicy": "Never"}}


def submitter_template(raw_spec: dict[str, Any]) -> dict[str, Any]:
    template = raw_spec.get("submitterPodTemplate")
    return copy.deepcopy(template) if isinstance(template, dict) else default_submitter_template(raw_spec)


def creation_problems(obj: dict[str, Any]) -> list[str]:
    """Kueue's RayJob webhook ValidateCreate for a queued RayJob: a RayJob on an existing
    cluster (clusterSelector) is not Kueue's, unless it also has a rayClusterSpec; otherwise
    it needs a rayClusterSpec that passes the cluster's checks, and must shut its cluster down
    once the job finishes (or it would keep the queue's resources)."""
    spec = obj.get("spec") or {}
    has_selector, cluster = bool(spec.get("clusterSelector")), spec.get("rayClusterSpec")
    if has_selector and cluster is not None:
        return ["spec.clusterSelector: Invalid value: a kueue managed job should not use an existing cluster"]
    if has_selector:
        return []
    if cluster is None:
        return ["spec.rayClusterSpec: Required value: rayClusterSpec is required for Kueue-managed jobs that don't use clusterSelector"]
    problems = []
    if spec.get("shutdownAfterJobFinishes") is not True:
        problems.append(
            "spec.shutdownAfterJobFinishes: Invalid value: false: a kueue managed job should delete the cluster after finishing"
        )
    return problems + cluster_problems(cluster, spec_path=CLUSTER_SPEC)


class RayJobAdapter(JobAdapter[RayJob]):
    framework = "ray.io/rayjob"
    model = RayJob
    cli_name = "rayjob"
    # KubeRay labels the pods with the name of the cluster it made for the RayJob (its name and a
    # random suffix, in status.rayClusterName), never with the RayJob's own: see `pod_query`.
    pod_label = api.CLUSTER_LABEL
    default_managed_by = api.CONTROLLER_NAME

    def pod_query(self, wl: Workload) -> PodQuery | None:
        """None: no label valued the RayJob's name reaches its pods (Kueue selects them by
        status.rayClusterName, which the Workload does not carry), so `kfed logs rayjob/NAME`
        finds none."""
        return None

    def manages(self, job: RayJob) -> bool:
        """Kueue's Skip: a RayJob that runs on an existing cluster (clusterSelector) is not queued."""
        return not job.spec.cluster_selector

    def creation_problems(self, obj: dict[str, Any]) -> list[str]:
        return creation_problems(obj)

    # --- the Workload ---------------------------------------------------------------------------
    def _submitter(self, job: RayJob) -> bool:
        return job.spec.effective_submission_mode == api.K8S_JOB_MODE

    def template_path(self, index: int) -> str:
        if index == 0:
            return f"{CLUSTER_SPEC}.headGroupSpec.template"
        return f"{CLUSTER_SPEC}.workerGroupSpecs[{index - 1}].template"

    def pod_sets(self, job: RayJob) -> list[PodSet]:
        """The cluster's PodSets; in K8sJobMode the submitter's last; in SidecarMode the
        submitter container on the head."""
        raw = job.to_dict().get("spec") or {}
        pod_sets = cluster_pod_sets(raw.get("rayClusterSpec") or {}, _cluster_spec(job), job.metadata.annotations, spec_path=CLUSTER_SPEC)
        if self._submitter(job):
            pod_sets.append(PodSet(name=SUBMITTER, template=submitter_template(raw), count=1))
        elif job.spec.effective_submission_mode == api.SIDECAR_MODE:
            sidecar = {"name": api.SUBMITTER_CONTAINER, "resources": copy.deepcopy(DEFAULT_SUBMITTER_RESOURCES)}
            pod_sets[0].template.setdefault("spec", {}).setdefault("containers", []).append(sidecar)
        return pod_sets

    def _expected_pod_sets(self, job: RayJob) -> int:
        return len(_cluster_spec(job).worker_group_specs or []) + 1 + (1 if self._submitter(job) else 0)

    # --- running and stopping ---------------------------------------------------------------------
    def is_suspended(self, job: RayJob) -> bool:
        return job.spec.suspend is True

    def _raw_spec(self, job: RayJob) -> dict[str, Any]:
        return copy.deepcopy(job.to_dict().get("spec") or {})

    def start_patch(self, job: RayJob, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> dict[str, Any]:
        """Kueue's RunWithPodSetsInfo: the cluster's PodSets into its templates, the submitter's
        (the last) into submitterPodTemplate, written as KubeRay's default when it had none."""
        expected = self._expected_pod_sets(job)
        if len(pod_sets) != expected:
            raise JobConversionError(CLUSTER_SPEC, f"expecting {expected} admitted PodSets, got {len(pod_sets)}")
        old = self._raw_spec(job)
        new = copy.deepcopy(old)
        start_cluster_spec(
            new.setdefault("rayClusterSpec", {}), pod_sets[: expected - (1 if self._submitter(job) else 0)], spec_path=CLUSTER_SPEC
        )
        if self._submitter(job):
            template = submitter_template(new)
            merge_into_template(template, pod_sets[-1], path="spec.submitterPodTemplate")
            new["submitterPodTemplate"] = template
        spec = {k: v for k, v in merge_patch(old, new).items() if k in ("rayClusterSpec", "submitterPodTemplate")}
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "spec": {"suspend": False, **spec}}

    def restore_patch(self, job: RayJob, wl: Workload) -> dict[str, Any] | None:
        """Kueue's RestorePodSetsInfo: the cluster's templates, and the submitter's when the
        RayJob has one, get back what the Workload recorded. A Workload whose PodSets do not
        match restores nothing."""
        names = cluster_pod_set_names(_cluster_spec(job)) + ([SUBMITTER] if self._submitter(job) else [])
        if names != [pod_set.name for pod_set in wl.spec.pod_sets]:
            return None
        old = self._raw_spec(job)
        new = copy.deepcopy(old)
        changed = restore_cluster_spec(new.setdefault("rayClusterSpec", {}), wl)
        if self._submitter(job) and isinstance(new.get("submitterPodTemplate"), dict):
            changed = restore_template(new["submitterPodTemplate"], original_template(wl, SUBMITTER)) or changed
        if not changed:
            return None
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "spec": merge_patch(old, new)}

    def finished(self, job: RayJob) -> Finished | None:
        """Kueue's Finished: jobDeploymentStatus Complete or Failed; succeeded when jobStatus is
        SUCCEEDED; KubeRay's message (kfed names the outcome when there is none)."""
        status = job.status
        if status is None or status.job_deployment_status not in (api.DEPLOYMENT_COMPLETE, api.DEPLOYMENT_FAILED):
            return None
        succeeded = status.job_status == api.JOB_SUCCEEDED
        return Finished(succeeded, status.message or ("RayJob finished successfully" if succeeded else "RayJob failed"))

    def active_count(self, job: RayJob) -> int:
        """Kueue's IsActive: neither Suspended nor new; KubeRay counts no pods Kueue reads."""
        deployment = (job.status.job_deployment_status if job.status else None) or api.DEPLOYMENT_NEW
        return 0 if deployment in (api.DEPLOYMENT_NEW, api.DEPLOYMENT_SUSPENDED) else 1

    def pods_ready(self, job: RayJob) -> bool:
        """Kueue's PodsReady: its cluster's state is `ready`."""
        cluster = job.status.ray_cluster_status if job.status else None
        return cluster is not None and cluster.state == api.READY

    def managed_by(self, job: RayJob) -> str | None:
        return job.spec.managed_by

    # --- MultiKueue ------------------------------------------------------------------------------
    def lost_pods_status(self, job: RayJob) -> dict[str, Any]:
        """Its worker is lost: the RayJob counts as Suspended (KubeRay's state with no cluster)."""
        return {"status": {"jobDeploymentStatus": api.DEPLOYMENT_SUSPENDED}}
