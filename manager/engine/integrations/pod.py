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

Pod groups: Pods labelled `kueue.x-k8s.io/pod-group-name` and annotated
`kueue.x-k8s.io/pod-group-total-count` are one job (Kueue's ComposableJob), keyed
`namespace/pod-group:NAME` and composed from the informer (`PodGroup`, its first Pod by name
standing for it):

- the group's Workload, named after the group and owned by each of its Pods, is created once
  as many runnable Pods as the total count are there; one PodSet per pod role (the
  `kueue.x-k8s.io/role-hash` annotation the webhook computes from the role's shape, as Kueue's
  GenerateRoleHash does: requests, ports, nodeSelector, affinity, tolerations, ... of the
  spec), named after the role hash, of that many Pods;
- starting it ungates each gated Pod with its role's PodSet (at most the PodSet's count of a
  role runs: excess Pods stay gated; Kueue deletes them);
- stopping it deletes each running Pod (gated ones stay gated); a Pod being deleted lets its
  finalizer go at once;
- it finished when as many Pods as the total count succeeded, or when none runs and a Pod is
  annotated `kueue.x-k8s.io/retriable-in-group: "false"` (then failed unless all succeeded:
  Kueue reports that case as succeeded).

Through MultiKueue a group's Pods stay gated on the manager; each is created on the winning
worker with the group's Workload name as its prebuilt Workload (which its Pods adopt there),
and each Pod's status comes back to its manager Pod.

The webhook refuses, at creation, what Kueue's pod webhook refuses (a managed label other than
`true`, a group name without a positive total count or the reverse, a grouped Pod whose
prebuilt Workload is not its group's); kfed denies in its defaulting webhook.

Not yet for groups: fast admission, serving groups, deleting excess Pods, and the update
checks of Kueue's validating webhook.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, ClassVar

from pydantic import Field

from manager.api import constants as c
from manager.api.core import POD_FAILED, POD_SUCCEEDED, Pod
from manager.api.kueue import PodSet, Workload
from manager.api.meta import ObjectMeta, OwnerReference, Resource
from manager.api.validation import dns_subdomain_errors, invalid
from manager.engine.integrations.adapter import Finished, JobAdapter, PodQuery
from manager.engine.jobs import JobConversionError, PodSetInfo, multikueue_remote_metadata, prebuilt_workload_name, queue_name_of

# Kueue's pod integration constants (pkg/controller/jobs/pod/constants).
SCHEDULING_GATE = "kueue.x-k8s.io/admission"
MANAGED_LABEL = "kueue.x-k8s.io/managed"  # also the finalizer's name (Kueue's PodFinalizer)
MANAGED_VALUE = "true"
POD_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
ROLE_HASH_ANNOTATION = "kueue.x-k8s.io/role-hash"
RETRIABLE_IN_GROUP_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
IS_GROUP_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/is-group-workload"
SUSPENDED_BY_PARENT_ANNOTATION = "kueue.x-k8s.io/pod-suspending-parent"  # gated for a parent (a LeaderWorkerSet)
GROUP_SERVING_ANNOTATION = "kueue.x-k8s.io/pod-group-serving"  # a serving group never finishes by its pods
GROUP_KEY_PREFIX = "pod-group:"  # a group's job key is `namespace/pod-group:NAME` (no Pod name has a colon)
GROUP_INDEX = "podGroup"
TERMINATION_TARGET = "TerminationTarget"  # the condition a Pod gets before Kueue deletes it
POD_SCHEDULED = "PodScheduled"
POD_READY = "Ready"
POD_SET = "main"
# Kueue's default managedJobsNamespaceSelector leaves the system namespaces alone.
SYSTEM_NAMESPACES = ("kube-system", "kfed-system")
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"  # Kueue's workload slicing, which kfed does not do


def outside_system_namespaces() -> dict[str, Any]:
    """The namespaceSelector of the webhooks for pods and their parents: not the system namespaces."""
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(SYSTEM_NAMESPACES)}]}


def is_gated(pod: Pod) -> bool:
    return any(gate.get("name") == SCHEDULING_GATE for gate in pod.spec.scheduling_gates or [])


def is_terminated(pod: Pod) -> bool:
    phase = pod.status.phase if pod.status else None
    return phase in (POD_SUCCEEDED, POD_FAILED)


def group_name(labels: dict[str, str] | None) -> str:
    return (labels or {}).get(POD_GROUP_NAME_LABEL, "")


def role_hash(spec: dict[str, Any]) -> str:
    """The role of a Pod (Kueue's GenerateRoleHash): the sha256 of the shape of its spec that
    admission looks at, cut to 8 hex digits. The same shape as Kueue's, serialized by Python's
    JSON (sorted keys), so the hash is kfed's own; a Pod's role-hash annotation is used as is."""

    def containers(items: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        shaped = [{"resources": {"requests": (c.get("resources") or {}).get("requests")}, "ports": c.get("ports")} for c in items or []]
        return shaped or None

    shape: dict[str, Any] = {
        "initContainers": containers(spec.get("initContainers")),
        "containers": containers(spec.get("containers")),
        **{key: spec.get(key) for key in ("nodeSelector", "affinity", "tolerations", "runtimeClassName", "priority")},
        **{key: spec.get(key) for key in ("topologySpreadConstraints", "overhead", "resourceClaims")},
    }
    if spec.get("resources") is not None:
        shape["resources"] = (spec.get("resources") or {}).get("requests")
    raw = json.dumps({"spec": shape}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:8]


def pod_role(pod: Pod) -> str:
    given = (pod.metadata.annotations or {}).get(ROLE_HASH_ANNOTATION)
    return given or role_hash(pod.spec.model_dump(by_alias=True, exclude_none=True, mode="json"))


def group_key(namespace: str, group: str) -> str:
    return f"{namespace}/{GROUP_KEY_PREFIX}{group}"


def runnable_or_succeeded(pod: Pod) -> bool:
    """Kueue's isPodRunnableOrSucceeded: not failed, and not deleted before it was scheduled."""
    if pod.metadata.deletion_timestamp is not None and not pod.spec.node_name:
        return False
    return not (pod.status is not None and pod.status.phase == POD_FAILED)


class PodGroup(Pod):
    """A pod group as one job: its first Pod by name stands for it (its labels name the queue),
    `members` are all its Pods. Composed in memory (`compose_group`), never written."""

    group: str = ""
    members: list[Pod] = Field(default_factory=list)

    def total(self) -> int | None:
        """The group's `pod-group-total-count`; None when it is missing or not a positive integer."""
        raw = (self.metadata.annotations or {}).get(POD_GROUP_TOTAL_COUNT_ANNOTATION, "")
        return int(raw) if raw.isdigit() and int(raw) > 0 else None

    def active(self) -> list[Pod]:
        """The runnable or succeeded members, those with kfed's finalizer and ungated first (the
        ones Kueue keeps when there are too many)."""
        keep = [pod for pod in self.members if runnable_or_succeeded(pod)]
        return sorted(keep, key=lambda pod: (MANAGED_LABEL not in (pod.metadata.finalizers or []), is_gated(pod), pod.name))


def compose_group(namespace: str, group: str, pods: Sequence[Pod]) -> PodGroup | None:
    """The group `namespace/group` from its Pods; None when none is left."""
    members = sorted(pods, key=lambda pod: pod.name)
    if not members:
        return None
    first = members[0]
    meta = first.metadata.model_copy(deep=True)
    # A combined version: any member's change is a new version of the group.
    meta.resource_version = ",".join(f"{pod.name}={pod.metadata.resource_version}" for pod in members)
    meta.deletion_timestamp = first.metadata.deletion_timestamp if all(p.metadata.deletion_timestamp for p in members) else None
    return PodGroup(metadata=meta, spec=first.spec, status=first.status, group=group, members=members)


def _condition(pod: Pod, kind: str) -> dict[str, Any] | None:
    for cond in (pod.status.conditions if pod.status else None) or []:
        if cond.type == kind:
            return cond.to_dict()
    return None


def _start_one(pod: Pod, info: PodSetInfo) -> dict[str, Any]:
    """Kueue's prepare for one Pod: remove the gate, merge the admitted PodSet's nodeSelector,
    labels and annotations (a key may be added, never given another value) and add its
    tolerations, in one write with a resourceVersion precondition."""
    raw = pod.to_dict()
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
    new_meta: dict[str, Any] = {"resourceVersion": pod.metadata.resource_version}
    if info.labels:
        new_meta["labels"] = merged["metadata.labels"]
    if info.annotations:
        new_meta["annotations"] = merged["metadata.annotations"]
    return {"metadata": new_meta, "spec": new_spec}


def _running_here(pod: Pod) -> bool:
    """Ungated, not terminated and not being deleted: a Pod a stop must delete."""
    return not is_gated(pod) and not is_terminated(pod) and pod.metadata.deletion_timestamp is None


def suspended_by_parent(meta: dict[str, Any] | None) -> bool:
    return bool(((meta or {}).get("annotations") or {}).get(SUSPENDED_BY_PARENT_ANNOTATION))


def is_serving(pod: Pod) -> bool:
    return (pod.metadata.annotations or {}).get(GROUP_SERVING_ANNOTATION) == "true" and bool(group_name(pod.metadata.labels))


def template_marks_patch(
    template: dict[str, Any] | None, path: str, labels: dict[str, str], annotations: dict[str, str]
) -> list[dict[str, Any]]:
    """JSON patch operations that add `labels` and `annotations` to the pod template at `path`
    (a JSON pointer), keeping the template's own; none when it has them already."""
    template = template or {}
    meta = template.get("metadata") or {}
    merged_labels = {**(meta.get("labels") or {}), **labels}
    merged_annotations = {**(meta.get("annotations") or {}), **annotations}
    if template.get("metadata") is None:
        return [{"op": "add", "path": f"{path}/metadata", "value": {"labels": merged_labels, "annotations": merged_annotations}}]
    ops = []
    if merged_labels != (meta.get("labels") or {}):
        ops.append({"op": "add", "path": f"{path}/metadata/labels", "value": merged_labels})
    if merged_annotations != (meta.get("annotations") or {}):
        ops.append({"op": "add", "path": f"{path}/metadata/annotations", "value": merged_annotations})
    return ops


class PodTemplateParent:
    """A kind Kueue queues through its pods alone (its Deployment integration): no Workload, no
    controller and no status of kfed's. Its webhook marks the pod template of a queued object
    at creation, with the queue and WorkloadPriorityClass labels, the managed label and
    `pod-suspending-parent: FRAMEWORK`; so the pod integration (enabled for the pods a parent
    suspends) queues each of its pods as a single Pod: gated at creation, one Workload each,
    ungated with its flavor once admitted, deleted when preempted (the kind's controller makes
    a new pod, which waits gated), and through MultiKueue run on a worker as a Pod is."""

    framework: ClassVar[str]  # the name in the Configuration's integrations.frameworks
    model: type[Resource]
    template_pointer: ClassVar[str] = "/spec/template"  # the pod template, as a JSON pointer
    # Its webhook sees updates too: a queue changed while no pod runs is written into the
    # template again (the pods the rollout makes join the new queue), and the rest is checked.
    webhook_operations: ClassVar[tuple[str, ...]] = ("CREATE", "UPDATE")

    @property
    def kind(self) -> str:
        return self.model.KIND

    def creation_patch(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """Kueue's webhook Default for the kind: the pod template's marks (JSON patch)."""
        meta = obj.get("metadata") or {}
        queue = queue_name_of(meta.get("labels"), meta.get("annotations"))
        if not queue:
            return []
        labels = {c.QUEUE_NAME_LABEL: queue, MANAGED_LABEL: MANAGED_VALUE}
        if priority := (meta.get("labels") or {}).get(c.PRIORITY_CLASS_LABEL):
            labels[c.PRIORITY_CLASS_LABEL] = priority
        template = _at_pointer(obj, self.template_pointer)
        return template_marks_patch(template, self.template_pointer, labels, {SUSPENDED_BY_PARENT_ANNOTATION: self.framework})

    def creation_problems(self, obj: dict[str, Any]) -> list[str]:
        """Kueue's webhook ValidateCreate for the kind: the queue name is a DNS subdomain, and no
        elastic job (kfed, like Kueue here, slices no workload)."""
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        problems = []
        if c.QUEUE_NAME_LABEL in labels:
            problems += [str(e) for e in dns_subdomain_errors(f"metadata.labels[{c.QUEUE_NAME_LABEL}]", str(labels[c.QUEUE_NAME_LABEL]))]
        if (meta.get("annotations") or {}).get(ELASTIC_JOB_ANNOTATION) == "true":
            gvk = f"{self.model.GROUP}/{self.model.VERSION}, Kind={self.kind}"
            problems.append(f'metadata.annotations[{ELASTIC_JOB_ANNOTATION}]: Forbidden: elastic job is not supported for "{gvk}"')
        return problems

    def update_problems(self, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
        """Kueue's webhook ValidateUpdate for the kind: the creation checks, and, while any of
        its pods is ready (it counts as running), the queue name kept, as it must always be
        once set; the WorkloadPriorityClass never removed, nor added while it runs."""
        problems = self.creation_problems(new)
        old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
        running = ((old.get("status") or {}).get("readyReplicas") or 0) > 0
        old_queue = queue_name_of(old_meta.get("labels"), old_meta.get("annotations"))
        new_queue = queue_name_of(new_meta.get("labels"), new_meta.get("annotations"))
        if (running or not new_queue) and new_queue != old_queue:
            problems.append(str(invalid(f"metadata.labels[{c.QUEUE_NAME_LABEL}]", new_queue, "field is immutable")))
        old_class = (old_meta.get("labels") or {}).get(c.PRIORITY_CLASS_LABEL, "")
        new_class = (new_meta.get("labels") or {}).get(c.PRIORITY_CLASS_LABEL, "")
        where = f"metadata.labels[{c.PRIORITY_CLASS_LABEL}]"
        if running and not old_class and new_class:
            problems.append(str(invalid(where, new_class, "WorkloadPriorityClass cannot be added to a non-suspended workload")))
        if old_class and not new_class:
            problems.append(str(invalid(where, new_class, "WorkloadPriorityClass cannot be removed from a workload")))
        return problems

    def webhook_namespace_selector(self) -> dict[str, Any] | None:
        return outside_system_namespaces()


def _at_pointer(obj: dict[str, Any], pointer: str) -> dict[str, Any] | None:
    found: Any = obj
    for part in pointer.strip("/").split("/"):
        found = found.get(part) if isinstance(found, dict) else None
    return found if isinstance(found, dict) else None


class PodAdapter(JobAdapter[Pod]):
    framework = "pod"
    model = Pod
    cli_name = "pod"
    pod_label = POD_GROUP_NAME_LABEL  # a group's Pods carry its name (`pod_query`)
    finalizer = MANAGED_LABEL
    stopped_by_deletion = True
    suspended_under_multikueue = True

    def __init__(self, *, only_suspended_by_parent: bool = False) -> None:
        # Kueue's implicitly enabled pod integration (a LeaderWorkerSet enables it): only the
        # pods a parent suspends are handled; any other queued pod is left alone.
        self.only_suspended_by_parent = only_suspended_by_parent

    # --- a pod group is one job -------------------------------------------------------------------
    def job_key(self, obj: Pod) -> str:
        group = group_name(obj.metadata.labels)
        return group_key(obj.namespace, group) if group else obj.key

    def load(self, key: str, *, get: Callable[[str], Pod | None], by_index: Callable[[str, str], list[Pod]]) -> Pod | None:
        namespace, _, name = key.partition("/")
        if name.startswith(GROUP_KEY_PREFIX):
            group = name.removeprefix(GROUP_KEY_PREFIX)
            return compose_group(namespace, group, by_index(GROUP_INDEX, f"{namespace}/{group}"))
        return get(key)

    def indexes(self) -> dict[str, Callable[[Any], list[str]]]:
        def of_group(pod: Pod) -> list[str]:
            group = group_name(pod.metadata.labels)
            return [f"{pod.namespace}/{group}"] if group else []

        return {GROUP_INDEX: of_group}

    def workload_key_for(self, key: str) -> str | None:
        namespace, _, name = key.partition("/")
        return f"{namespace}/{name.removeprefix(GROUP_KEY_PREFIX)}" if name.startswith(GROUP_KEY_PREFIX) else None

    def job_keys(self, wl: Workload) -> list[str]:
        if (wl.metadata.annotations or {}).get(IS_GROUP_WORKLOAD_ANNOTATION) == "true":
            return [group_key(wl.namespace, wl.name)]
        return super().job_keys(wl)

    def names(self, wl: Workload, name: str) -> bool:
        """`pod/NAME`: a single Pod's Workload (the Pod is its controller), or a group's, by any
        of its Pods' names or by the group's name (a group's Workload is named after it)."""
        if (wl.metadata.annotations or {}).get(IS_GROUP_WORKLOAD_ANNOTATION) == "true":
            return wl.name == name or any(self.owns(ref) and ref.name == name for ref in wl.metadata.owner_references or [])
        return super().names(wl, name)

    def pod_query(self, wl: Workload) -> PodQuery | None:
        """A group's Pods by its label, valued with the group's name; a single Pod by its own name
        (a plain Pod has no label naming itself)."""
        if (wl.metadata.annotations or {}).get(IS_GROUP_WORKLOAD_ANNOTATION) == "true":
            return PodQuery(label_selector=f"{POD_GROUP_NAME_LABEL}={wl.name}")
        owner = next((ref for ref in wl.metadata.owner_references or [] if ref.controller and self.owns(ref)), None)
        return PodQuery(field_selector=f"metadata.name={owner.name}") if owner is not None else None

    def parts(self, job: Pod) -> list[Pod]:
        return list(job.members) if isinstance(job, PodGroup) else [job]

    def compose(self, parts: Sequence[Pod]) -> Pod | None:
        """A worker's Pods of one Workload: a group when they are grouped."""
        if not parts:
            return None
        group = group_name(parts[0].metadata.labels)
        return compose_group(parts[0].namespace, group, parts) if group else parts[0]

    def adoption_references(self, job: Pod) -> list[OwnerReference]:
        """A group's prebuilt Workload is owned by each of its Pods (Kueue's
        EnsureWorkloadOwnedByAllMembers); a single Pod's by the Pod, as controller."""
        if not isinstance(job, PodGroup):
            return super().adoption_references(job)
        return list(self.workload_metadata(job).owner_references or [])

    def incomplete(self, job: Pod) -> bool:
        if not isinstance(job, PodGroup):
            return False
        total = job.total()
        return total is not None and len(job.active()) < total

    def workload_metadata(self, job: Pod) -> ObjectMeta:
        """A group's Workload (Kueue's NewGroupWorkload): named after the group, owned by each
        of its Pods (none of them its controller), marked as a group's."""
        if not isinstance(job, PodGroup):
            return super().workload_metadata(job)
        owners = [
            OwnerReference(api_version="v1", kind="Pod", name=pod.name, uid=pod.metadata.uid or "", block_owner_deletion=True)
            for pod in job.active()
        ]
        return ObjectMeta(
            name=job.group, namespace=job.namespace, annotations={IS_GROUP_WORKLOAD_ANNOTATION: "true"}, owner_references=owners
        )

    # --- what it handles ------------------------------------------------------------------------
    def manages(self, job: Pod) -> bool:
        """Kueue's Skip: only Pods its webhook marked managed; a grouped Pod only as its group."""
        labels = job.metadata.labels or {}
        if self.only_suspended_by_parent and not suspended_by_parent({"annotations": job.metadata.annotations}):
            return False
        return labels.get(MANAGED_LABEL) == MANAGED_VALUE and (isinstance(job, PodGroup) or not group_name(labels))

    def creation_patch(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """Kueue's pod webhook Default: the managed label, the finalizer and the admission gate
        (each once: a Pod copied to a worker already has the gate), and a grouped Pod's role hash."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        ops: list[dict[str, Any]] = []
        gates = list(spec.get("schedulingGates") or [])
        gate = [] if any(g.get("name") == SCHEDULING_GATE for g in gates) else [{"name": SCHEDULING_GATE}]
        if suspended_by_parent(meta):
            # Gated only: its parent makes it a managed member of its group later (Kueue's
            # webhook gives such a pod neither the managed label nor the finalizer).
            return [{"op": "add", "path": "/spec/schedulingGates", "value": [*gates, *gate]}] if gate else []
        if self.only_suspended_by_parent:
            return []
        labels = dict(meta.get("labels") or {})
        if labels.get(MANAGED_LABEL) != MANAGED_VALUE:
            ops.append({"op": "add", "path": "/metadata/labels", "value": {**labels, MANAGED_LABEL: MANAGED_VALUE}})
        finalizers = list(meta.get("finalizers") or [])
        if MANAGED_LABEL not in finalizers:
            ops.append({"op": "add", "path": "/metadata/finalizers", "value": [*finalizers, MANAGED_LABEL]})
        if gate:
            ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [*gates, *gate]})
        annotations = dict(meta.get("annotations") or {})
        if group_name(labels) and ROLE_HASH_ANNOTATION not in annotations:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {**annotations, ROLE_HASH_ANNOTATION: role_hash(spec)}})
        return ops

    def creation_problems(self, obj: dict[str, Any]) -> list[str]:
        """Kueue's pod webhook ValidateCreate: the managed label is only ever `true`; a group
        names both its name and a positive total count; a grouped Pod's prebuilt Workload is
        its group's."""
        meta = obj.get("metadata") or {}
        if self.only_suspended_by_parent and not suspended_by_parent(meta):
            return []
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        problems = []
        if labels.get(MANAGED_LABEL, MANAGED_VALUE) != MANAGED_VALUE:
            problems.append(f"metadata.labels[{MANAGED_LABEL}]: Forbidden: managed label value can only be '{MANAGED_VALUE}'")
        group, total = group_name(labels), annotations.get(POD_GROUP_TOTAL_COUNT_ANNOTATION)
        both = f"both the '{POD_GROUP_TOTAL_COUNT_ANNOTATION}' annotation and the '{POD_GROUP_NAME_LABEL}' label should be set"
        if group and total is None:
            problems.append(f"metadata.annotations[{POD_GROUP_TOTAL_COUNT_ANNOTATION}]: Required value: {both}")
        elif total is not None and not group:
            problems.append(f"metadata.labels[{POD_GROUP_NAME_LABEL}]: Required value: {both}")
        elif total is not None and not (total.isdigit() and int(total) > 0):
            problems.append(
                f'metadata.annotations[{POD_GROUP_TOTAL_COUNT_ANNOTATION}]: Invalid value: "{total}": '
                "group total count should be a positive integer"
            )
        prebuilt = prebuilt_workload_name(meta)
        if group and prebuilt and prebuilt != group:
            problems.append(f'{c.PREBUILT_WORKLOAD_LABEL}: Invalid value: "{prebuilt}": prebuilt workload and pod group should be equal')
        return problems

    def webhook_namespace_selector(self) -> dict[str, Any] | None:
        return outside_system_namespaces()

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
        """Kueue's constructPodSets: one PodSet `main` of one pod, its template the Pod's spec;
        a group's (constructGroupPodSets): one per role, named by its hash, sorted by name."""
        if not isinstance(job, PodGroup):
            spec = job.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
            return [PodSet(name=POD_SET, template={"spec": copy.deepcopy(spec)}, count=1)]
        total = job.total()
        where = f"metadata.annotations[{POD_GROUP_TOTAL_COUNT_ANNOTATION}]"
        if total is None:
            raise JobConversionError(where, "Required value: a positive integer, on every Pod of the group")
        queue = (job.metadata.labels or {}).get(c.QUEUE_NAME_LABEL)
        for pod in job.members:
            if (pod.metadata.labels or {}).get(c.QUEUE_NAME_LABEL) != queue and runnable_or_succeeded(pod):
                where_queue = f"metadata.labels[{c.QUEUE_NAME_LABEL}]"
                raise JobConversionError(where_queue, f'Pods "{job.name}" and "{pod.name}" name different queues')
            if (pod.metadata.annotations or {}).get(POD_GROUP_TOTAL_COUNT_ANNOTATION) != str(total) and runnable_or_succeeded(pod):
                raise JobConversionError(where, f'Pods "{job.name}" and "{pod.name}" have different total counts')
        roles: dict[str, PodSet] = {}
        for pod in job.active()[:total]:
            role = pod_role(pod)
            if role in roles:
                roles[role].count += 1
            else:
                spec = pod.spec.model_dump(by_alias=True, exclude_none=True, mode="json")
                roles[role] = PodSet(name=role, template={"spec": copy.deepcopy(spec)}, count=1)
        if len(roles) > c.MAX_POD_SETS:
            raise JobConversionError("metadata.annotations", f"pod group can't include more than {c.MAX_POD_SETS} roles")
        return [roles[name] for name in sorted(roles)]

    # --- running and stopping ---------------------------------------------------------------------
    def is_suspended(self, job: Pod) -> bool:
        """Kueue's podSuspended: terminated, or still gated (a group: any of its Pods)."""
        if isinstance(job, PodGroup):
            return any(is_terminated(pod) or is_gated(pod) for pod in job.members)
        return is_terminated(job) or is_gated(job)

    def suspend_patch(self, job: Pod) -> dict[str, Any]:
        raise NotImplementedError("a Pod is stopped by deletion")  # stopped_by_deletion: never called

    def start_patch(self, job: Pod, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> dict[str, Any]:
        if len(pod_sets) != 1:
            raise JobConversionError("spec", f"expecting 1 admitted PodSet, got {len(pod_sets)}")
        return _start_one(job, pod_sets[0])

    def start_patches(self, job: Pod, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> list[tuple[str | None, dict[str, Any]]]:
        """A group: each gated Pod gets its role's PodSet, while fewer of its role than the
        PodSet's count run (excess Pods stay gated)."""
        if not isinstance(job, PodGroup):
            return super().start_patches(job, wl, pod_sets)
        infos = {info.name: info for info in pod_sets}
        started: list[tuple[str | None, dict[str, Any]]] = []
        running = {name: 0 for name in infos}
        active = job.active()
        for pod in active:
            if not is_gated(pod) and pod_role(pod) in running:
                running[pod_role(pod)] += 1
        for pod in active:
            role = pod_role(pod)
            if not is_gated(pod):
                continue
            if role not in infos:
                raise JobConversionError("metadata.annotations", f'no admitted PodSet for the role "{role}" of Pod "{pod.name}"')
            if running[role] < infos[role].count:
                started.append((pod.name, _start_one(pod, infos[role])))
                running[role] += 1
        return started

    def restore_patch(self, job: Pod, wl: Workload) -> dict[str, Any] | None:
        return None  # Kueue's RestorePodSetsInfo: a Pod cannot change back, it is deleted

    def stop_targets(self, job: Pod) -> list[Pod]:
        if isinstance(job, PodGroup):
            return [pod for pod in job.members if _running_here(pod)]
        return super().stop_targets(job)

    def termination_status_patch(self, job: Pod, *, reason: str, message: str, now: datetime) -> dict[str, Any] | None:
        """Kueue's Stop: `TerminationTarget=True` with the stop's reason, before the delete."""
        stamp = now.isoformat().replace("+00:00", "Z")
        mine = {"type": TERMINATION_TARGET, "status": "True", "reason": reason, "message": message[:32768], "lastTransitionTime": stamp}
        kept = [cond.to_dict() for cond in (job.status.conditions if job.status else None) or [] if cond.type != TERMINATION_TARGET]
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "status": {"conditions": [*kept, mine]}}

    def finalize_patches(self, job: Pod, *, deleting_only: bool = False) -> list[tuple[str | None, dict[str, Any]]]:
        if not isinstance(job, PodGroup):
            return super().finalize_patches(job, deleting_only=deleting_only)
        out: list[tuple[str | None, dict[str, Any]]] = []
        for pod in job.members:
            patch = self.finalize_patch(pod)
            if patch is not None and (not deleting_only or pod.metadata.deletion_timestamp is not None):
                out.append((pod.name, patch))
        return out

    def finished(self, job: Pod) -> Finished | None:
        """Kueue's Finished: a single Pod by its phase; a group once as many Pods as its total
        succeeded, or none runs and one may not be retried."""
        if isinstance(job, PodGroup):
            total = job.total()
            if total is None or is_serving(job):
                return None  # a serving group (a LeaderWorkerSet's) never finishes by its pods
            succeeded = sum(pod.status is not None and pod.status.phase == POD_SUCCEEDED for pod in job.members)
            unretriable = any((p.metadata.annotations or {}).get(RETRIABLE_IN_GROUP_ANNOTATION) == "false" for p in job.members)
            if succeeded >= total or (unretriable and not any(not is_terminated(pod) for pod in job.members)):
                return Finished(succeeded >= total, f"Pods succeeded: {succeeded}/{total}.")
            return None
        if not is_terminated(job):
            return None
        succeeded = job.status is not None and job.status.phase == POD_SUCCEEDED
        message = (job.status.message if job.status else None) or ("Pod succeeded" if succeeded else "Pod failed")
        return Finished(succeeded, message)

    def active_count(self, job: Pod) -> int:
        """The Pods that may run here: ungated and not terminated."""
        pods = job.members if isinstance(job, PodGroup) else [job]
        return sum(not is_gated(pod) and not is_terminated(pod) for pod in pods)

    def pods_ready(self, job: Pod) -> bool:
        if isinstance(job, PodGroup):
            total = job.total() or 0
            active = job.active()
            return len(active) >= total and all(self.pods_ready(pod) or is_terminated(pod) for pod in active)
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
