"""Kueue's job-framework rules that hold for every job kind: which queue an object asks for,
the name of its Workload, the prebuilt Workload it names, its priority, what an admission
gives each PodSet's pods, and how an eviction ends.

The rules of one kind (its PodSets, suspend and start patches, when it is finished) live in
its adapter (`manager.engine.integrations`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from manager.api import constants as c
from manager.api.core import PriorityClass
from manager.api.kueue import PodSet, PodSetUpdate, PriorityClassRef, ResourceFlavor, Workload, WorkloadPriorityClass
from manager.api.meta import ObjectMeta, Resource

_MAX_NAME = 253
_HASH_LENGTH = 5
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class JobConversionError(ValueError):
    """A job that Kueue would not create a Workload for; the message names the field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def workload_name(owner_name: str, owner_uid: str, *, kind: str = "Job", group: str = "batch") -> str:
    """Kueue's GetWorkloadNameForOwnerWithGVK: `<kind>-<name>-<5 hex of sha1(kind, group, name, uid)>`."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{owner_name}\n{owner_uid}".encode()).hexdigest()[:_HASH_LENGTH]
    prefix = f"{kind.lower()}-{owner_name}"[: _MAX_NAME - 1 - _HASH_LENGTH]
    return f"{prefix}-{digest}"


def queue_name_of(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None) -> str:
    """Kueue's rule for which LocalQueue an object asks for: the queue-name label, else the
    (deprecated) queue-name annotation; "" when it names none. The one home of this rule: the
    webhook, the job controller, `simulate` and `explain` all ask here."""
    return (labels or {}).get(c.QUEUE_NAME_LABEL) or (annotations or {}).get(c.QUEUE_NAME_ANNOTATION) or ""


def job_queue_name(job: Resource) -> str:
    return queue_name_of(job.metadata.labels, job.metadata.annotations)


def prebuilt_workload_name(meta: ObjectMeta | Mapping[str, Any]) -> str:
    """Kueue's PrebuiltWorkloadNameFor with WorkloadIdentifierAnnotations on (its default since
    v0.18): the `prebuilt-workload-name` annotation, else the label of that name; "" for none.
    `meta` is an object's metadata, typed or as sent (a webhook's request)."""
    if isinstance(meta, ObjectMeta):
        labels, annotations = meta.labels, meta.annotations
    else:
        labels, annotations = meta.get("labels"), meta.get("annotations")
    return str((annotations or {}).get(c.PREBUILT_WORKLOAD_ANNOTATION) or (labels or {}).get(c.PREBUILT_WORKLOAD_LABEL) or "")


def prebuilt_keys(job: Resource) -> list[str]:
    """The key of the prebuilt Workload a job of any kind names, as a cache index's values."""
    name = prebuilt_workload_name(job.metadata)
    return [f"{job.namespace}/{name}"] if name else []


def prebuilt_workload_metadata(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) naming a prebuilt Workload on a job: the annotation always (what
    Kueue v0.18 and later read first), and the label too when the name fits a label value (63
    characters), for readers that know only the label."""
    labels = {c.PREBUILT_WORKLOAD_LABEL: name} if len(name) <= c.LABEL_VALUE_MAX_LENGTH else {}
    return labels, {c.PREBUILT_WORKLOAD_ANNOTATION: name}


def multikueue_remote_metadata(job: Resource, *, workload_name: str, origin: str) -> dict[str, Any]:
    """The metadata of a job copied to a worker (Kueue's CloneObjectMetaForCreation and
    SetMultiKueueMeta): name, namespace, labels and annotations, with our origin and the
    prebuilt Workload's name (as an annotation, and as a label where it fits)."""
    prebuilt_labels, prebuilt_annotations = prebuilt_workload_metadata(workload_name)
    labels = {k: v for k, v in (job.metadata.labels or {}).items() if k != c.PREBUILT_WORKLOAD_LABEL}
    labels |= {c.MULTIKUEUE_ORIGIN_LABEL: origin} | prebuilt_labels
    annotations = dict(job.metadata.annotations or {}) | prebuilt_annotations
    return {"name": job.name, "namespace": job.namespace, "labels": labels, "annotations": annotations}


def resolve_priority(
    labels: Mapping[str, str] | None,
    pod_sets: Sequence[PodSet],
    *,
    template_paths: Sequence[str],
    workload_priority_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
    job_priority_class: tuple[str, str] | None = None,
) -> tuple[int, PriorityClassRef | None]:
    """Kueue's ExtractPriority: the WorkloadPriorityClass label, else the PriorityClass the job
    names outside its templates (`job_priority_class`: name and field path), else that of the
    first PodSet that names one, else the default. `template_paths[i]` is where the object
    holds PodSet i's pod template (for the error message)."""
    wpc_name = (labels or {}).get(c.PRIORITY_CLASS_LABEL)
    if wpc_name:
        wpc = workload_priority_classes.get(wpc_name)
        if wpc is None:
            raise JobConversionError(f"metadata.labels[{c.PRIORITY_CLASS_LABEL}]", f'WorkloadPriorityClass "{wpc_name}" not found')
        return wpc.value, PriorityClassRef(group=c.GROUP, kind="WorkloadPriorityClass", name=wpc_name)
    if job_priority_class is not None:
        named, path = job_priority_class
        pc = priority_classes.get(named)
        if pc is None:
            raise JobConversionError(path, f'PriorityClass "{named}" not found')
        return pc.value, PriorityClassRef(group="scheduling.k8s.io", kind="PriorityClass", name=named)
    for index, pod_set in enumerate(pod_sets):
        spec = pod_set.template.get("spec") or {}
        pc_name = spec.get("priorityClassName") if isinstance(spec, dict) else None
        if not pc_name:
            continue
        pc = priority_classes.get(str(pc_name))
        if pc is None:
            raise JobConversionError(f"{template_paths[index]}.spec.priorityClassName", f'PriorityClass "{pc_name}" not found')
        return pc.value, PriorityClassRef(group="scheduling.k8s.io", kind="PriorityClass", name=str(pc_name))
    defaults = sorted((pc for pc in priority_classes.values() if pc.global_default), key=lambda pc: pc.value)
    if defaults:
        return defaults[0].value, PriorityClassRef(group="scheduling.k8s.io", kind="PriorityClass", name=defaults[0].name)
    return 0, None


# --- what an admission gives each PodSet (Kueue's getPodSetsInfoFromStatus) ------------------------
@dataclass(frozen=True)
class PodSetInfo:
    """What one admitted PodSet's pods get on top of their template: the assigned flavors'
    node labels and tolerations, Kueue's pod labels and annotations, and what the admission
    checks ask for; `count` is the admitted count (a partial admission may lower it)."""

    name: str
    count: int
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def _pod_set_updates(wl: Workload, podset: str) -> list[PodSetUpdate]:
    updates = []
    for check in (wl.status.admission_checks if wl.status else None) or []:
        updates += [update for update in check.pod_set_updates or [] if update.name == podset]
    return updates


def admitted_pod_sets(wl: Workload, flavors: Mapping[str, ResourceFlavor]) -> list[PodSetInfo]:
    """One PodSetInfo per PodSet assignment, in the admission's order. The pods get the podset
    label, the queue labels (AssignQueueLabelsForPods; the ClusterQueue's only when its name
    is a valid label value), the worker-copy label on a MultiKueue copy, the workload
    annotation (set with TopologyAwareScheduling, on by default), and the labels,
    annotations, nodeSelector and tolerations the admission checks ask for in podSetUpdates."""
    admission = wl.status.admission if wl.status else None
    if admission is None:
        return []
    counts = {pod_set.name: pod_set.count for pod_set in wl.spec.pod_sets}
    infos = []
    for assignment in admission.pod_set_assignments or []:
        labels = {c.PODSET_LABEL: assignment.name}
        if c.MULTIKUEUE_ORIGIN_LABEL in (wl.metadata.labels or {}):
            labels[c.MULTIKUEUE_WORKER_POD_LABEL] = "true"
        labels[c.LOCAL_QUEUE_LABEL] = wl.spec.queue_name or ""
        if len(admission.cluster_queue) <= c.LABEL_VALUE_MAX_LENGTH and _DNS1123_LABEL.match(admission.cluster_queue):
            labels[c.CLUSTER_QUEUE_LABEL] = admission.cluster_queue
        annotations = {c.WORKLOAD_ANNOTATION: wl.name}
        node_selector: dict[str, str] = {}
        tolerations: list[dict[str, Any]] = []
        groups = []
        for flavor_name in sorted(set((assignment.flavors or {}).values())):
            flavor = flavors.get(flavor_name)
            if flavor is not None:
                node_selector.update(flavor.spec.node_labels or {})
                groups.append(flavor.spec.tolerations or [])
        for update in _pod_set_updates(wl, assignment.name):
            labels.update(update.labels or {})
            annotations.update(update.annotations or {})
            node_selector.update(update.node_selector or {})
            groups.append(update.tolerations or [])
        for group in groups:
            for toleration in group:
                as_dict = toleration.to_dict()
                if as_dict not in tolerations:
                    tolerations.append(as_dict)
        count = assignment.count if assignment.count is not None else counts.get(assignment.name, 0)
        infos.append(PodSetInfo(assignment.name, count, node_selector, tolerations, labels, annotations))
    return infos


def original_template(wl: Workload, pod_set: str) -> dict[str, Any]:
    """The pod template the Workload recorded for a PodSet: the job's template before any
    admission changed it (what an eviction restores)."""
    for candidate in wl.spec.pod_sets:
        if candidate.name == pod_set and isinstance(candidate.template, dict):
            return candidate.template
    return {}


def map_patch(have: Mapping[str, str], want: Mapping[str, str]) -> dict[str, str | None] | None:
    """A merge patch turning `have` into `want`; None when they are equal."""
    if dict(have) == dict(want):
        return None
    patch: dict[str, str | None] = {key: None for key in have if key not in want}
    patch.update({key: value for key, value in want.items() if have.get(key) != value})
    return patch
