"""The RayCluster adapter (ray.io/v1, KubeRay; Kueue's pkg/controller/jobs/raycluster and the
Ray MultiKueue adapter), and the rules about a Ray cluster spec the RayJob adapter shares.

A Ray cluster spec asks for one PodSet named `head` of 1 pod (its template, plus the autoscaler
sidecar KubeRay adds with in-tree autoscaling, plus room for the Redis cleanup Job when GCS
fault tolerance is on), then one PodSet per worker group, named after it (lowercased), of
replicas (1 when unset) times numOfHosts pods. Starting unsuspends it and merges each admitted
PodSet's nodeSelector, tolerations, labels and annotations into its group's pod template;
stopping suspends it and gives each template back what the Workload recorded. A RayCluster
never finishes on its own (Kueue: "technically a RayCluster is never finished"); it is active
while its state is `ready`. A worker gets the whole spec with managedBy cleared, and its
status comes back whole on every sync.

`spec.workerGroupSpecs` is a list, which a merge patch replaces whole: the start and restore
patches carry the changed parts as a diff of the spec, with a resourceVersion precondition.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from manager.api import constants as c
from manager.api import ray as api
from manager.api.kueue import PodSet, Workload
from manager.api.quantity import Quantity
from manager.api.ray import RayCluster, RayClusterSpec, WorkerGroupSpec
from manager.engine.integrations.adapter import Finished, JobAdapter
from manager.engine.integrations.templates import merge_into_template, restore_template
from manager.engine.jobs import JobConversionError, PodSetInfo, original_template

HEAD = "head"
# KubeRay's hard-coded requests of the Redis cleanup Job it runs for a cluster with GCS fault
# tolerance; Kueue reserves them on the head (the larger of each, per resource).
REDIS_CLEANUP_REQUESTS = {"cpu": "200m", "memory": "256Mi"}
# The autoscaler sidecar KubeRay adds to the head with in-tree autoscaling, when
# autoscalerOptions.resources does not say otherwise.
AUTOSCALER_CONTAINER = "autoscaler"
DEFAULT_AUTOSCALER_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}


# --- a Ray cluster spec's PodSets ------------------------------------------------------------------
def worker_count(group: WorkerGroupSpec) -> int:
    """Kueue's effective worker count: replicas (1 when unset) times numOfHosts when above 1."""
    replicas = group.replicas if group.replicas is not None else 1
    hosts = group.num_of_hosts or 1
    return replicas * hosts if hosts > 1 else replicas


def gcs_fault_tolerance(spec: RayClusterSpec, annotations: Mapping[str, str] | None) -> bool:
    """KubeRay's IsGCSFaultToleranceEnabled: the ft-enabled annotation is "true" (any case) or
    gcsFaultToleranceOptions is set."""
    return (annotations or {}).get(api.FT_ENABLED_ANNOTATION, "").lower() == "true" or spec.gcs_fault_tolerance_options is not None


def _requests_keep_max(requests: Mapping[str, Any], extra: Mapping[str, str]) -> dict[str, Any]:
    merged = dict(requests)
    for name, value in extra.items():
        if name not in merged or Quantity.parse(merged[name]) < Quantity.parse(value):
            merged[name] = value
    return merged


def head_template(raw_spec: Mapping[str, Any], spec: RayClusterSpec, annotations: Mapping[str, str] | None, path: str) -> dict[str, Any]:
    """The head PodSet's template: the head group's, with what KubeRay adds to the head pod that
    takes quota (the Redis cleanup Job's requests, the autoscaler sidecar)."""
    template: dict[str, Any] = copy.deepcopy((raw_spec.get("headGroupSpec") or {}).get("template") or {})
    containers = template.setdefault("spec", {}).setdefault("containers", [])
    if gcs_fault_tolerance(spec, annotations):
        if not containers:
            raise JobConversionError(f"{path}.spec.containers", "Required value: GCS fault tolerance needs the head's Ray container")
        resources = containers[0].setdefault("resources", {})
        resources["requests"] = _requests_keep_max(resources.get("requests") or {}, REDIS_CLEANUP_REQUESTS)
    if spec.enable_in_tree_autoscaling:
        options = (raw_spec.get("autoscalerOptions") or {}).get("resources")
        resources = copy.deepcopy(options) if options is not None else copy.deepcopy(DEFAULT_AUTOSCALER_RESOURCES)
        containers.append({"name": AUTOSCALER_CONTAINER, "resources": resources})
    return template


def cluster_pod_sets(
    raw_spec: Mapping[str, Any], spec: RayClusterSpec, annotations: Mapping[str, str] | None, *, spec_path: str
) -> list[PodSet]:
    """Kueue's BuildPodSets: the head, then each worker group."""
    groups = spec.worker_group_specs or []
    raw_groups = raw_spec.get("workerGroupSpecs") or []
    if len(groups) + 1 > c.MAX_POD_SETS:
        raise JobConversionError(
            f"{spec_path}.workerGroupSpecs", f"Too many: {len(groups) + 1} PodSets: a Workload has at most {c.MAX_POD_SETS}"
        )
    pod_sets = [PodSet(name=HEAD, template=head_template(raw_spec, spec, annotations, f"{spec_path}.headGroupSpec.template"), count=1)]
    for index, (group, raw) in enumerate(zip(groups, raw_groups, strict=True)):
        name = group.group_name.lower()
        if name == HEAD:
            raise JobConversionError(
                f"{spec_path}.workerGroupSpecs[{index}].groupName", f'Forbidden: "{HEAD}" is reserved for the head group'
            )
        pod_sets.append(PodSet(name=name, template=copy.deepcopy(raw.get("template") or {}), count=worker_count(group)))
    return pod_sets


def cluster_problems(raw_spec: Mapping[str, Any], *, spec_path: str) -> list[str]:
    """Kueue's raycluster ValidateCreate for a queued cluster spec: no autoscaling (kfed has no
    workload slicing, so it is never allowed), at most MAX_POD_SETS PodSets, no worker group
    named `head`."""
    problems = []
    if raw_spec.get("enableInTreeAutoscaling") is True:
        problems.append(
            f"{spec_path}.enableInTreeAutoscaling: Invalid value: true: a kueue managed job should only use autoscaling "
            "when workload slicing is enabled"
        )
    groups = raw_spec.get("workerGroupSpecs") or []
    if len(groups) + 1 > c.MAX_POD_SETS:
        problems.append(f"{spec_path}.workerGroupSpecs: Too many: {len(groups) + 1}: must have at most {c.MAX_POD_SETS} items")
    for index, group in enumerate(groups):
        if isinstance(group, dict) and group.get("groupName") == HEAD:
            problems.append(f'{spec_path}.workerGroupSpecs[{index}].groupName: Forbidden: "{HEAD}" is reserved for the head group')
    return problems


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: maps recursively, a key
    gone as null, anything else (lists included) whole. Equal values give an empty map."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return copy.deepcopy(new)
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = copy.deepcopy(value)
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value) if isinstance(old[key], dict) and isinstance(value, dict) else copy.deepcopy(value)
    return patch


def start_cluster_spec(raw_spec: dict[str, Any], pod_sets: Sequence[PodSetInfo], *, spec_path: str) -> None:
    """Kueue's UpdateRayClusterSpecToRunWithPodSetsInfo, in place on a raw cluster spec: the
    first admitted PodSet into the head's template, the next into each worker group's."""
    head = raw_spec.setdefault("headGroupSpec", {}).setdefault("template", {})
    merge_into_template(head, pod_sets[0], path=f"{spec_path}.headGroupSpec.template")
    for index, (group, info) in enumerate(zip(raw_spec.get("workerGroupSpecs") or [], pod_sets[1:], strict=True)):
        merge_into_template(group.setdefault("template", {}), info, path=f"{spec_path}.workerGroupSpecs[{index}].template")


def restore_cluster_spec(raw_spec: dict[str, Any], wl: Workload) -> bool:
    """Kueue's RestorePodSetsInfo for a raw cluster spec, in place: the head's and each worker
    group's template get back what the Workload recorded for their PodSet (its first ones)."""
    changed = restore_template(raw_spec.setdefault("headGroupSpec", {}).setdefault("template", {}), original_template(wl, HEAD))
    for group in raw_spec.get("workerGroupSpecs") or []:
        recorded = original_template(wl, str(group.get("groupName", "")).lower())
        changed = restore_template(group.setdefault("template", {}), recorded) or changed
    return changed


def cluster_pod_set_names(spec: RayClusterSpec) -> list[str]:
    return [HEAD, *(group.group_name.lower() for group in spec.worker_group_specs or [])]


class RayClusterAdapter(JobAdapter[RayCluster]):
    framework = "ray.io/raycluster"
    model = RayCluster
    cli_name = "raycluster"
    pod_label = api.CLUSTER_LABEL
    default_managed_by = api.CONTROLLER_NAME

    # --- the Workload ---------------------------------------------------------------------------
    def template_path(self, index: int) -> str:
        return "spec.headGroupSpec.template" if index == 0 else f"spec.workerGroupSpecs[{index - 1}].template"

    def pod_sets(self, job: RayCluster) -> list[PodSet]:
        raw = job.to_dict().get("spec") or {}
        return cluster_pod_sets(raw, job.spec, job.metadata.annotations, spec_path="spec")

    def creation_problems(self, obj: dict[str, Any]) -> list[str]:
        return cluster_problems(obj.get("spec") or {}, spec_path="spec")

    # --- running and stopping ---------------------------------------------------------------------
    def is_suspended(self, job: RayCluster) -> bool:
        return job.spec.suspend is True

    def _raw_spec(self, job: RayCluster) -> dict[str, Any]:
        return copy.deepcopy(job.to_dict().get("spec") or {})

    def start_patch(self, job: RayCluster, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> dict[str, Any]:
        """Kueue's RunWithPodSetsInfo: the head's, then each worker group's admitted PodSet merged
        into its template; a value the template already has differently is a conflict."""
        expected = len(job.spec.worker_group_specs or []) + 1
        if len(pod_sets) != expected:
            raise JobConversionError("spec.workerGroupSpecs", f"expecting {expected} admitted PodSets, got {len(pod_sets)}")
        old = self._raw_spec(job)
        new = copy.deepcopy(old)
        start_cluster_spec(new, pod_sets, spec_path="spec")
        spec = {k: v for k, v in merge_patch(old, new).items() if k in ("headGroupSpec", "workerGroupSpecs")}
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "spec": {"suspend": False, **spec}}

    def restore_patch(self, job: RayCluster, wl: Workload) -> dict[str, Any] | None:
        """Kueue's RestorePodSetsInfo: each template gets back what the Workload recorded for its
        PodSet. A Workload whose PodSets do not match the groups restores nothing."""
        if cluster_pod_set_names(job.spec) != [pod_set.name for pod_set in wl.spec.pod_sets]:
            return None
        old = self._raw_spec(job)
        new = copy.deepcopy(old)
        if not restore_cluster_spec(new, wl):
            return None
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "spec": merge_patch(old, new)}

    def finished(self, job: RayCluster) -> Finished | None:
        """Never: a RayCluster runs until it is deleted (Kueue's Finished is always false)."""
        return None

    def active_count(self, job: RayCluster) -> int:
        """Kueue's IsActive for a RayCluster: its state is `ready` (KubeRay reports no pod counts
        that Kueue reads)."""
        return 1 if job.status is not None and job.status.state == api.READY else 0

    def pods_ready(self, job: RayCluster) -> bool:
        return job.status is not None and job.status.state == api.READY

    def managed_by(self, job: RayCluster) -> str | None:
        return job.spec.managed_by

    # --- MultiKueue ------------------------------------------------------------------------------
    def lost_pods_status(self, job: RayCluster) -> dict[str, Any]:
        """Its worker is lost: the cluster is no longer ready there (so not active)."""
        return {"status": {"state": api.SUSPENDED, "readyWorkerReplicas": 0}}
