"""LeaderWorkerSet (leaderworkerset.x-k8s.io/v1; Kueue's pkg/controller/jobs/leaderworkerset),
the functional core: pure decisions, no I/O.

Kueue does not suspend a LeaderWorkerSet (it has no suspend field): it queues each of its
groups, one Workload per group, and runs the group's pods as a serving pod group:

- its webhook, at creation of a queued LeaderWorkerSet, labels the leader and worker pod
  templates with the queue (and the WorkloadPriorityClass) and annotates them
  `kueue.x-k8s.io/pod-suspending-parent: leaderworkerset.x-k8s.io/leaderworkerset` and
  `kueue.x-k8s.io/pod-group-serving: "true"` (`creation_patch`); so the pod webhook gates every
  pod of it (without the managed label or the finalizer: the pod waits for its group);
- its reconciler keeps one Workload per group index `0..replicas-1` (`plan_workloads`), named
  after `NAME-INDEX` and the LeaderWorkerSet's UID (on a MultiKueue worker: the origin's UID),
  with the PodSets `leader` (1) and `worker` (size-1), or `main` (size) without a leader
  template (`pod_sets`); the LeaderWorkerSet owns each one (not as controller), and a worker
  creates none (they come from the manager);
- once the LWS controller has labelled a pod with its group index, the reconciler makes it a
  member of its group's pod group (`pod_group_patch`): managed, the group and prebuilt Workload
  named after the group's Workload, the total count `size`, and its role (`leader`, `worker` or
  `main`) as the role hash, so the pod integration starts (ungates) and stops (deletes) it with
  its group's admission;
- a serving pod group never finishes by its pods: the StatefulSets replace them.

Through MultiKueue the manager's LeaderWorkerSet is copied once to a worker (with the origin's
UID annotated, so the worker's pods join pod groups named after the manager's Workloads, whose
copies are dispatched there), and all its Workloads go to the worker the first (lowest index)
one went to (`worker_for`). Unlike Kueue, the worker's status is copied back: Kueue leaves it to
the manager's own LWS controller, but kfed's manager runs none (as for JobSet).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from manager.api import constants as c
from manager.api import lws as api
from manager.api.core import Pod
from manager.api.kueue import PodSet, Workload
from manager.api.lws import LeaderWorkerSet
from manager.api.meta import ObjectMeta, OwnerReference
from manager.engine.integrations.adapter import (
    COMPONENT_WORKLOAD_INDEX_ANNOTATION,
    JOB_OWNER_GVK_ANNOTATION,
    JOB_OWNER_NAME_ANNOTATION,
    Finished,
    JobAdapter,
    PodQuery,
    component_owner_values,
    gvk_of,
)
from manager.engine.integrations.pod import (
    IS_GROUP_WORKLOAD_ANNOTATION,
    MANAGED_LABEL,
    MANAGED_VALUE,
    POD_GROUP_NAME_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    ROLE_HASH_ANNOTATION,
    SCHEDULING_GATE,
    template_marks_patch,
)
from manager.engine.jobs import JobConversionError, PodSetInfo, prebuilt_workload_metadata, queue_name_of, workload_name

FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
KIND = "LeaderWorkerSet"
API_VERSION = f"{api.GROUP}/{api.VERSION}"
GVK = gvk_of(API_VERSION, KIND)
# Kueue's pod integration constants for pods whose parent suspends them.
SUSPENDED_BY_PARENT_ANNOTATION = "kueue.x-k8s.io/pod-suspending-parent"
GROUP_SERVING_ANNOTATION = "kueue.x-k8s.io/pod-group-serving"
GROUP_SERVING_VALUE = "true"
MULTIKUEUE_ORIGIN_UID_ANNOTATION = "kueue.x-k8s.io/multikueue-origin-uid"
LEADER = "leader"
WORKER = "worker"
MAIN = "main"
MAX_REPLICAS = 1_000_000  # Kueue's sanity bound on spec.replicas (one Workload each)


def workload_name_for(name: str, uid: str, index: int | str) -> str:
    """Kueue's GetWorkloadName: the Workload of group `index`, unique by index and owner UID."""
    return workload_name(f"{name}-{index}", uid, kind=KIND, group=api.GROUP)


def owner_uid(lws: LeaderWorkerSet) -> str:
    """Kueue's GetOwnerUID: on a MultiKueue worker, the origin's UID (so the names match the
    manager's Workloads); else the object's own."""
    labels, annotations = lws.metadata.labels or {}, lws.metadata.annotations or {}
    if c.MULTIKUEUE_ORIGIN_LABEL in labels and MULTIKUEUE_ORIGIN_UID_ANNOTATION in annotations:
        return annotations[MULTIKUEUE_ORIGIN_UID_ANNOTATION]
    return lws.metadata.uid or ""


def replicas_problem(replicas: Any) -> str | None:
    """Kueue's validateReplicasField, as `path: reason`; None when it is valid."""
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        return f'spec.replicas: Invalid value: "{replicas}": must be an integer'
    if replicas < 0:
        return f"spec.replicas: Invalid value: {replicas}: invalid LeaderWorkerSet replicas: must be >= 0, got {replicas}"
    if replicas > MAX_REPLICAS:
        return f"spec.replicas: Invalid value: {replicas}: invalid LeaderWorkerSet replicas: must be <= {MAX_REPLICAS}, got {replicas}"
    return None


def _drop_lws_keys(values: Mapping[str, str] | None) -> dict[str, str] | None:
    """Kueue's dropLWSPrefixedKeys: the LWS controller's own keys (all but the set's name)."""
    if values is None:
        return None
    return {k: v for k, v in values.items() if not k.startswith(api.DOMAIN_PREFIX) or k == api.SET_NAME_LABEL}


def _pod_set(name: str, count: int, template: dict[str, Any]) -> PodSet:
    template = copy.deepcopy(template)
    meta = template.get("metadata") or {}
    for key in ("labels", "annotations"):
        kept = _drop_lws_keys(meta.get(key))
        if kept:
            meta[key] = kept
        else:
            meta.pop(key, None)
    template["metadata"] = meta
    return PodSet(name=name, count=count, template=template)


def pod_sets(lws: LeaderWorkerSet) -> list[PodSet]:
    """Kueue's podSets: `leader` of 1 and `worker` of size-1 with a leader template, else `main`
    of size; each template the LWS's, without the LWS controller's own keys."""
    lwt = lws.spec.leader_worker_template
    size = lwt.effective_size
    if size < 1:
        raise JobConversionError("spec.leaderWorkerTemplate.size", f"Invalid value: {size}: must be at least 1")
    problem = replicas_problem(lws.spec.effective_replicas)
    if problem is not None:
        where, _, reason = problem.partition(": ")
        raise JobConversionError(where, reason)
    raw = lws.to_dict().get("spec", {}).get("leaderWorkerTemplate") or {}
    worker = raw.get("workerTemplate") or {}
    if lwt.leader_template is None:
        return [_pod_set(MAIN, size, worker)]
    return [_pod_set(LEADER, 1, raw.get("leaderTemplate") or {}), _pod_set(WORKER, size - 1, worker)]


def template_path(pod_set: str) -> str:
    return "spec.leaderWorkerTemplate.leaderTemplate" if pod_set == LEADER else "spec.leaderWorkerTemplate.workerTemplate"


def creation_patch(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Kueue's LWS webhook Default for a queued LeaderWorkerSet (JSON patch): each pod template
    gets the queue and WorkloadPriorityClass labels and the suspended-by-parent and serving
    annotations, so its pods are gated by the pod webhook and run as serving pod groups."""
    meta = obj.get("metadata") or {}
    queue = queue_name_of(meta.get("labels"), meta.get("annotations"))
    if not queue:
        return []
    priority = (meta.get("labels") or {}).get(c.PRIORITY_CLASS_LABEL)
    lwt = (obj.get("spec") or {}).get("leaderWorkerTemplate") or {}
    ops: list[dict[str, Any]] = []
    labels = {c.QUEUE_NAME_LABEL: queue, **({c.PRIORITY_CLASS_LABEL: priority} if priority else {})}
    annotations = {SUSPENDED_BY_PARENT_ANNOTATION: FRAMEWORK, GROUP_SERVING_ANNOTATION: GROUP_SERVING_VALUE}
    for field in ("leaderTemplate", "workerTemplate"):
        if field in lwt and lwt[field] is not None:
            ops += template_marks_patch(lwt[field], f"/spec/leaderWorkerTemplate/{field}", labels, annotations)
    return ops


def creation_problems(obj: dict[str, Any]) -> list[str]:
    """Kueue's LWS webhook ValidateCreate (the checks kfed makes): spec.replicas in range."""
    replicas = (obj.get("spec") or {}).get("replicas", api.DEFAULT_REPLICAS)
    problem = replicas_problem(replicas)
    return [problem] if problem is not None else []


# --- the Workloads of a LeaderWorkerSet ------------------------------------------------------------
@dataclass(frozen=True)
class WorkloadsPlan:
    """Which Workloads a LeaderWorkerSet needs: `create` (name, group index), `keep` and `delete` (names)."""

    create: tuple[tuple[str, int], ...]
    keep: tuple[str, ...]
    delete: tuple[str, ...]


def _rolling_update_with_surge(lws: LeaderWorkerSet) -> bool:
    raw = lws.to_dict().get("spec", {}).get("rolloutStrategy") or {}
    surge = (raw.get("rollingUpdateConfiguration") or {}).get("maxSurge")
    updated = lws.status.updated_replicas if lws.status and lws.status.updated_replicas else 0
    return isinstance(surge, int) and surge > 0 and updated < lws.spec.effective_replicas


def plan_workloads(lws: LeaderWorkerSet, existing: Sequence[str]) -> WorkloadsPlan:
    """Kueue's filterWorkloads: one Workload per group index below the replicas (during a rolling
    update with surge, below the status's replicas when more); the others go. A MultiKueue
    worker's copy creates none: the manager's Workloads come with it."""
    replicas = lws.spec.effective_replicas
    status_replicas = lws.status.replicas if lws.status and lws.status.replicas else 0
    if status_replicas > replicas and _rolling_update_with_surge(lws):
        replicas = status_replicas
    remote = c.MULTIKUEUE_ORIGIN_LABEL in (lws.metadata.labels or {})
    uid = owner_uid(lws)
    have = set(existing)
    create: list[tuple[str, int]] = []
    keep: list[str] = []
    for index in range(replicas):
        name = workload_name_for(lws.name, uid, index)
        if name in have:
            keep.append(name)
        elif not remote:
            create.append((name, index))
    wanted = set(keep)
    return WorkloadsPlan(tuple(create), tuple(keep), tuple(sorted(n for n in existing if n not in wanted)))


def owner_reference(lws: LeaderWorkerSet) -> OwnerReference:
    """controllerutil.SetOwnerReference: the LeaderWorkerSet owns its Workloads, not as controller."""
    return OwnerReference(api_version=API_VERSION, kind=KIND, name=lws.name, uid=lws.metadata.uid or "")


def workload_metadata(lws: LeaderWorkerSet, name: str, index: int) -> ObjectMeta:
    """Kueue's constructWorkload metadata: a group Workload with the job's UID label, the owner
    annotations MultiKueue finds the job by, and its group index."""
    return ObjectMeta(
        name=name,
        namespace=lws.namespace,
        labels={c.JOB_UID_LABEL: lws.metadata.uid or ""},
        annotations={
            IS_GROUP_WORKLOAD_ANNOTATION: "true",
            JOB_OWNER_GVK_ANNOTATION: GVK,
            JOB_OWNER_NAME_ANNOTATION: lws.name,
            COMPONENT_WORKLOAD_INDEX_ANNOTATION: str(index),
        },
        owner_references=[owner_reference(lws)],
    )


# --- its pods ------------------------------------------------------------------------------------------
def suspended_by_lws(pod: Pod) -> bool:
    return (pod.metadata.annotations or {}).get(SUSPENDED_BY_PARENT_ANNOTATION) == FRAMEWORK


def pod_group_patch(lws: LeaderWorkerSet, pod: Pod) -> dict[str, Any] | None:
    """Kueue's setDefault for a pod of a LeaderWorkerSet (a merge patch; None when there is
    nothing to do yet, or nothing left): once the LWS controller gave the pod its group index,
    it joins its group's pod group, named after the group's Workload, as its `leader`, `worker`
    or `main` role; a managed gated pod only gets a changed queue name."""
    labels, annotations = pod.metadata.labels or {}, pod.metadata.annotations or {}
    queue = queue_name_of(lws.metadata.labels, lws.metadata.annotations)
    gated = any(gate.get("name") == SCHEDULING_GATE for gate in pod.spec.scheduling_gates or [])
    if MANAGED_LABEL in labels:
        if queue and gated and labels.get(c.QUEUE_NAME_LABEL) != queue:
            return {"metadata": {"resourceVersion": pod.metadata.resource_version, "labels": {c.QUEUE_NAME_LABEL: queue}}}
        return None
    index = labels.get(api.GROUP_INDEX_LABEL)
    if index is None:
        return None  # the LWS controller's pod webhook labels it first
    group = workload_name_for(lws.name, owner_uid(lws), index)
    prebuilt_labels, prebuilt_annotations = prebuilt_workload_metadata(group)
    new_labels = {MANAGED_LABEL: MANAGED_VALUE, POD_GROUP_NAME_LABEL: group, **prebuilt_labels}
    if queue and gated:
        new_labels[c.QUEUE_NAME_LABEL] = queue
    role = MAIN
    if lws.spec.leader_worker_template.leader_template is not None:
        role = WORKER if api.LEADER_NAME_ANNOTATION in annotations else LEADER
    new_annotations = {
        **prebuilt_annotations,
        POD_GROUP_TOTAL_COUNT_ANNOTATION: str(lws.spec.leader_worker_template.effective_size),
        ROLE_HASH_ANNOTATION: role,
    }
    return {"metadata": {"resourceVersion": pod.metadata.resource_version, "labels": new_labels, "annotations": new_annotations}}


# --- MultiKueue ------------------------------------------------------------------------------------------
def remote_object(lws: LeaderWorkerSet, *, origin: str) -> dict[str, Any]:
    """Kueue's LWS SyncJob: the manager's object, once, with the origin label and its UID
    annotated (the worker names its Workloads after it); its status is never copied back."""
    raw = lws.to_dict()
    meta = raw.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), c.MULTIKUEUE_ORIGIN_LABEL: origin}
    annotations = {**(meta.get("annotations") or {}), MULTIKUEUE_ORIGIN_UID_ANNOTATION: lws.metadata.uid or ""}
    metadata = {"name": lws.name, "namespace": lws.namespace, "labels": labels, "annotations": annotations}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": copy.deepcopy(raw.get("spec") or {})}


# --- the adapter ---------------------------------------------------------------------------------------
class LeaderWorkerSetAdapter(JobAdapter[LeaderWorkerSet]):
    """A LeaderWorkerSet runs as pod groups (see the module's docstring): never suspended, never
    finished by kfed (its Workloads are its groups', which serve until it is gone)."""

    framework = FRAMEWORK
    model = LeaderWorkerSet
    cli_name = "lws"
    pod_label = api.SET_NAME_LABEL
    runs_as_pod_groups = True

    # --- its groups --------------------------------------------------------------------------------
    def component_workloads(self, job: LeaderWorkerSet, existing: Sequence[str]) -> tuple[list[tuple[str, int]], list[str]]:
        plan = plan_workloads(job, existing)
        return list(plan.create), list(plan.delete)

    def component_workload_metadata(self, job: LeaderWorkerSet, name: str, index: int) -> ObjectMeta:
        return workload_metadata(job, name, index)

    def member_patch(self, job: LeaderWorkerSet, pod: Any) -> dict[str, Any] | None:
        return pod_group_patch(job, pod) if isinstance(pod, Pod) and suspended_by_lws(pod) else None

    def member_of(self, pod: Any) -> str | None:
        if not isinstance(pod, Pod) or not suspended_by_lws(pod):
            return None
        name = (pod.metadata.labels or {}).get(api.SET_NAME_LABEL)
        return f"{pod.namespace}/{name}" if name else None

    def job_keys(self, wl: Workload) -> list[str]:
        """Its Workloads name it by their owner annotations (they outlive owner references)."""
        return [value.partition("|")[2] for value in component_owner_values(wl) if value.partition("|")[0] == GVK]

    def names(self, wl: Workload, name: str) -> bool:
        return any(value == f"{GVK}|{wl.namespace}/{name}" for value in component_owner_values(wl))

    def pod_query(self, wl: Workload) -> PodQuery | None:
        """Every pod of the set the Workload is a group of (`kfed logs lws/NAME`): the LWS
        controller labels each with the set's name."""
        keys = self.job_keys(wl)
        return PodQuery(label_selector=f"{api.SET_NAME_LABEL}={keys[0].partition('/')[2]}") if keys else None

    def creation_patch(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        return creation_patch(obj)

    def creation_problems(self, obj: dict[str, Any]) -> list[str]:
        return creation_problems(obj)

    def controller_rules(self) -> list[dict[str, list[str]]]:
        """Watch it (never suspended), write its status (MultiKueue copies a worker's back), and
        label its pods (the pod integration, implicitly enabled, starts and stops them)."""
        return [
            {"apiGroups": [api.GROUP], "resources": ["leaderworkersets"], "verbs": ["list", "watch"]},
            {"apiGroups": [api.GROUP], "resources": ["leaderworkersets/status"], "verbs": ["patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch", "patch"]},
        ]

    # --- the Workload of one group ---------------------------------------------------------------------
    def template_path(self, index: int) -> str:
        return "spec.leaderWorkerTemplate.leaderTemplate" if index == 0 else "spec.leaderWorkerTemplate.workerTemplate"

    def pod_sets(self, job: LeaderWorkerSet) -> list[PodSet]:
        return pod_sets(job)

    # --- never suspended, started or finished itself: its pods are -------------------------------------
    def is_suspended(self, job: LeaderWorkerSet) -> bool:
        return False

    def start_patch(self, job: LeaderWorkerSet, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> dict[str, Any]:
        raise NotImplementedError("a LeaderWorkerSet's pods are started by the pod integration")

    def restore_patch(self, job: LeaderWorkerSet, wl: Workload) -> dict[str, Any] | None:
        return None

    def finished(self, job: LeaderWorkerSet) -> Finished | None:
        return None

    def active_count(self, job: LeaderWorkerSet) -> int:
        return job.status.replicas or 0 if job.status else 0

    def pods_ready(self, job: LeaderWorkerSet) -> bool:
        return job.status is not None and (job.status.ready_replicas or 0) >= job.spec.effective_replicas

    def managed_by(self, job: LeaderWorkerSet) -> str | None:
        """Kueue's IsJobManagedByKueue for LWS: always MultiKueue's to hand over (it has no managedBy)."""
        return c.MULTIKUEUE_MANAGED_BY

    def can_default_managed_by(self, managed_by: str | None) -> bool:
        return False  # no managedBy field to set

    # --- MultiKueue ------------------------------------------------------------------------------------
    def remote_workload_keys(self, job: LeaderWorkerSet) -> list[str]:
        """Kueue's WorkloadKeysFor: a worker's copy was created for each group's Workload,
        named after the origin's UID."""
        origin_uid = (job.metadata.annotations or {}).get(MULTIKUEUE_ORIGIN_UID_ANNOTATION)
        if not origin_uid or replicas_problem(job.spec.effective_replicas) is not None:
            return []
        return [f"{job.namespace}/{workload_name_for(job.name, origin_uid, i)}" for i in range(job.spec.effective_replicas)]

    def remote_object(self, job: LeaderWorkerSet, *, workload_name: str, origin: str) -> dict[str, Any]:
        return remote_object(job, origin=origin)

    def status_update(self, local: LeaderWorkerSet, remote: LeaderWorkerSet) -> tuple[dict[str, Any] | None, bool]:
        """The worker's status, whole. Kueue copies none back, as the manager's own LWS
        controller writes it there; kfed's manager runs no LWS controller (as for JobSet), so
        the worker's is the only status there is."""
        return (remote.status.to_dict() if remote.status else {}), False

    def stopped(self, job: LeaderWorkerSet) -> bool:
        """The set itself never says whether a group runs (it is never suspended): a group runs
        on a worker while its Workload's copy is admitted there (`may_still_run_on` counts such
        copies), and the worker releases that copy only once its pod group's pods are gone."""
        return True

    def lost_pods_status(self, job: LeaderWorkerSet) -> dict[str, Any]:
        return {"status": {"readyReplicas": 0}}
