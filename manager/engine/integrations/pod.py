"""The plain Pod adapter (v1 Pod; Kueue's pkg/controller/jobs/pod and its MultiKueue adapter).

A Pod has no suspend field. Kueue's pod webhook gives a queued Pod the scheduling gate
`kueue.x-k8s.io/admission` at creation (with the label `kueue.x-k8s.io/managed=true` and the
finalizer of the same name), so no scheduler binds it until its Workload is admitted:

- one Workload per single Pod, of one PodSet `main` of one pod whose template is the Pod's spec;
- starting it removes the gate and adds the admitted flavors' nodeSelector and tolerations and
  Kueue's labels and annotations (a gated Pod accepts exactly these changes);
- a Pod is suspended while gated or once terminated; it is stopped by deletion, after a
  `TerminationTarget` condition says why: a running Pod that loses its admission is deleted,
  a gated one stays gated and waits for its Workload's next admission;
- it finished when its phase is Succeeded or Failed; the finalizer lets the Pod go once it or
  its Workload finished, or once it is being deleted;
- only Pods with the managed label are handled (Kueue's Skip), and a Pod whose controller
  owner is a job kind Kueue manages is part of that job.

Through MultiKueue the manager's Pod stays gated (Kueue's ShouldSkipLocalExecution); the Pod
is created on the winning worker with the prebuilt Workload's name, and its status comes back
whole, except that the manager's `PodScheduled=False/SchedulingGated` stays until the worker's
Pod is scheduled (so no autoscaler on the manager takes the gated Pod for an unschedulable one).

Pod groups (`kueue.x-k8s.io/pod-group-name`) are not handled yet: a grouped Pod is not gated
by the webhook and not managed here.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from manager.api import constants as c
from manager.api.core import POD_FAILED, POD_SUCCEEDED, Pod
from manager.api.kueue import PodSet, Workload
from manager.engine.integrations.adapter import Finished, JobAdapter
from manager.engine.jobs import JobConversionError, PodSetInfo, multikueue_remote_metadata

# Kueue's pod integration constants (pkg/controller/jobs/pod/constants).
SCHEDULING_GATE = "kueue.x-k8s.io/admission"
MANAGED_LABEL = "kueue.x-k8s.io/managed"  # also the finalizer's name (Kueue's PodFinalizer)
MANAGED_VALUE = "true"
POD_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
TERMINATION_TARGET = "TerminationTarget"  # the condition a Pod gets before Kueue deletes it
POD_SCHEDULED = "PodScheduled"
POD_READY = "Ready"
POD_SET = "main"
# Kueue's default managedJobsNamespaceSelector leaves the system namespaces alone.
SYSTEM_NAMESPACES = ("kube-system", "kfed-system")


def is_gated(pod: Pod) -> bool:
    return any(gate.get("name") == SCHEDULING_GATE for gate in pod.spec.scheduling_gates or [])


def is_terminated(pod: Pod) -> bool:
    phase = pod.status.phase if pod.status else None
    return phase in (POD_SUCCEEDED, POD_FAILED)


def group_name(labels: dict[str, str] | None) -> str:
    return (labels or {}).get(POD_GROUP_NAME_LABEL, "")


def _condition(pod: Pod, kind: str) -> dict[str, Any] | None:
    for cond in (pod.status.conditions if pod.status else None) or []:
        if cond.type == kind:
            return cond.to_dict()
    return None


class PodAdapter(JobAdapter[Pod]):
    framework = "pod"
    model = Pod
    cli_name = "pod"
    pod_label = POD_GROUP_NAME_LABEL  # `kfed logs pod/GROUP` finds a group's pods
    finalizer = MANAGED_LABEL
    stopped_by_deletion = True
    suspended_under_multikueue = True

    # --- what it handles ------------------------------------------------------------------------
    def manages(self, job: Pod) -> bool:
        """Kueue's Skip: only Pods its webhook marked managed (and, for now, no pod groups)."""
        labels = job.metadata.labels or {}
        return labels.get(MANAGED_LABEL) == MANAGED_VALUE and not group_name(labels)

    def creation_patch(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """Kueue's pod webhook Default: the managed label, the finalizer and the admission gate
        (each once: a Pod copied to a worker already has the gate)."""
        meta = obj.get("metadata") or {}
        if group_name(meta.get("labels")):
            return []  # pod groups: not handled yet (the module's docstring)
        spec = obj.get("spec") or {}
        ops: list[dict[str, Any]] = []
        labels = dict(meta.get("labels") or {})
        if labels.get(MANAGED_LABEL) != MANAGED_VALUE:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {**labels, MANAGED_LABEL: MANAGED_VALUE}})
        finalizers = list(meta.get("finalizers") or [])
        if MANAGED_LABEL not in finalizers:
            ops.append({"op": "add", "path": "/metadata/finalizers", "value": [*finalizers, MANAGED_LABEL]})
        gates = list(spec.get("schedulingGates") or [])
        if not any(gate.get("name") == SCHEDULING_GATE for gate in gates):
            ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [*gates, {"name": SCHEDULING_GATE}]})
        return ops

    def webhook_namespace_selector(self) -> dict[str, Any] | None:
        return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(SYSTEM_NAMESPACES)}]}

    def controller_rules(self) -> list[dict[str, list[str]]]:
        """The defaults, and delete: a Pod is stopped by deleting it (Kueue's pod RBAC markers)."""
        return [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        ]

    def can_default_managed_by(self, managed_by: str | None) -> bool:
        return False  # a Pod has no managedBy: on the manager it stays gated instead

    # --- the Workload ---------------------------------------------------------------------------
    def template_path(self, index: int) -> str:
        return "spec"

    def pod_sets(self, job: Pod) -> list[PodSet]:
        """Kueue's constructPodSets: one PodSet `main` of one pod, its template the Pod's spec."""
        spec = job.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
        return [PodSet(name=POD_SET, template={"spec": copy.deepcopy(spec)}, count=1)]

    # --- running and stopping ---------------------------------------------------------------------
    def is_suspended(self, job: Pod) -> bool:
        """Kueue's podSuspended: terminated, or still gated."""
        return is_terminated(job) or is_gated(job)

    def suspend_patch(self, job: Pod) -> dict[str, Any]:
        raise NotImplementedError("a Pod is stopped by deletion")  # stopped_by_deletion: never called

    def start_patch(self, job: Pod, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> dict[str, Any]:
        """Kueue's prepare for a Pod: remove the gate, merge the admitted PodSet's nodeSelector,
        labels and annotations (a key may be added, never given another value) and add its
        tolerations, in one write with a resourceVersion precondition."""
        if len(pod_sets) != 1:
            raise JobConversionError("spec", f"expecting 1 admitted PodSet, got {len(pod_sets)}")
        info = pod_sets[0]
        raw = job.to_dict()
        meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        merged = {}
        for what, have, add in (
            ("spec.nodeSelector", spec.get("nodeSelector") or {}, info.node_selector),
            ("metadata.labels", meta.get("labels") or {}, info.labels),
            ("metadata.annotations", meta.get("annotations") or {}, info.annotations),
        ):
            for key, value in add.items():
                if key in have and have[key] != value:
                    raise JobConversionError(what, f'conflict for "{key}": it is "{have[key]}", the admission sets "{value}"')
            merged[what] = {**have, **add}
        tolerations = list(spec.get("tolerations") or [])
        tolerations += [toleration for toleration in info.tolerations if toleration not in tolerations]
        gates = [gate for gate in spec.get("schedulingGates") or [] if gate.get("name") != SCHEDULING_GATE]
        new_spec: dict[str, Any] = {"schedulingGates": gates or None}
        if merged["spec.nodeSelector"]:
            new_spec["nodeSelector"] = merged["spec.nodeSelector"]
        if tolerations:
            new_spec["tolerations"] = tolerations
        new_meta: dict[str, Any] = {"resourceVersion": job.metadata.resource_version}
        if info.labels:
            new_meta["labels"] = merged["metadata.labels"]
        if info.annotations:
            new_meta["annotations"] = merged["metadata.annotations"]
        return {"metadata": new_meta, "spec": new_spec}

    def restore_patch(self, job: Pod, wl: Workload) -> dict[str, Any] | None:
        return None  # Kueue's RestorePodSetsInfo: a Pod cannot change back, it is deleted

    def termination_status_patch(self, job: Pod, *, reason: str, message: str, now: datetime) -> dict[str, Any] | None:
        """Kueue's Stop: `TerminationTarget=True` with the stop's reason, before the delete."""
        stamp = now.isoformat().replace("+00:00", "Z")
        mine = {"type": TERMINATION_TARGET, "status": "True", "reason": reason, "message": message[:32768], "lastTransitionTime": stamp}
        kept = [cond.to_dict() for cond in (job.status.conditions if job.status else None) or [] if cond.type != TERMINATION_TARGET]
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "status": {"conditions": [*kept, mine]}}

    def finished(self, job: Pod) -> Finished | None:
        """Kueue's Finished for a single Pod: its phase is Succeeded or Failed."""
        if not is_terminated(job):
            return None
        succeeded = job.status is not None and job.status.phase == POD_SUCCEEDED
        message = (job.status.message if job.status else None) or ("Pod succeeded" if succeeded else "Pod failed")
        return Finished(succeeded, message)

    def active_count(self, job: Pod) -> int:
        """1 while the Pod may run here: ungated and not terminated."""
        return 0 if self.is_suspended(job) else 1

    def pods_ready(self, job: Pod) -> bool:
        ready = _condition(job, POD_READY)
        return ready is not None and ready.get("status") == "True"

    def managed_by(self, job: Pod) -> str | None:
        """Kueue's IsJobManagedByKueue for Pods: always MultiKueue's to hand over."""
        return c.MULTIKUEUE_MANAGED_BY

    # --- MultiKueue ------------------------------------------------------------------------------
    def remote_object(self, job: Pod, *, workload_name: str, origin: str) -> dict[str, Any]:
        """Kueue's pod SyncJob: name, namespace, labels and annotations, the whole spec, our
        origin and the prebuilt Workload's name. The worker's webhook gates it there too."""
        spec = copy.deepcopy(job.to_dict().get("spec") or {})
        spec.pop("nodeName", None)
        metadata = multikueue_remote_metadata(job, workload_name=workload_name, origin=origin)
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata, "spec": spec}

    def status_update(self, local: Pod, remote: Pod) -> tuple[dict[str, Any] | None, bool]:
        """The worker Pod's status, whole, keeping the manager's gated PodScheduled condition
        until the worker's Pod is scheduled (Kueue's syncLocalPodWithRemote)."""
        status = remote.status.to_dict() if remote.status else {}
        local_scheduled = _condition(local, POD_SCHEDULED)
        remote_scheduled = _condition(remote, POD_SCHEDULED)
        if is_gated(local) and local_scheduled is not None and (remote_scheduled or {}).get("status") != "True":
            others = [cond for cond in status.get("conditions") or [] if cond.get("type") != POD_SCHEDULED]
            status["conditions"] = [*others, local_scheduled]
        return status, False

    def lost_pods_status(self, job: Pod) -> dict[str, Any]:
        return {"status": {}}  # a gated Pod holds no quota here; nothing to say
