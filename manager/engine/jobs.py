"""A batch/v1 Job turned into the Workload Kueue's job integration would create for it."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

from manager.api import constants as c
from manager.api.core import Job, PriorityClass
from manager.api.kueue import PodSet, PriorityClassRef, ResourceFlavor, Workload, WorkloadPriorityClass, WorkloadSpec
from manager.api.meta import ObjectMeta, OwnerReference

JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
_MAX_NAME = 253
_HASH_LENGTH = 5


class JobConversionError(ValueError):
    """A Job that Kueue would not create a Workload for; the message names the field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def workload_name(job_name: str, job_uid: str) -> str:
    """Kueue's GetWorkloadNameForOwnerWithGVK: `job-<name>-<5 hex of sha1(kind, group, name, uid)>`."""
    digest = hashlib.sha1(f"Job\nbatch\n{job_name}\n{job_uid}".encode()).hexdigest()[:_HASH_LENGTH]
    prefix = f"job-{job_name}"[: _MAX_NAME - 1 - _HASH_LENGTH]
    return f"{prefix}-{digest}"


def pods_count(job: Job) -> int:
    """min(parallelism, completions), parallelism defaulting to 1 (Kueue's podsCount)."""
    parallelism = job.spec.parallelism if job.spec.parallelism is not None else 1
    if job.spec.completions is not None and job.spec.completions < parallelism:
        return job.spec.completions
    return parallelism


def resolve_priority(
    job: Job,
    template_spec: Mapping[str, Any],
    *,
    workload_priority_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> tuple[int, PriorityClassRef | None]:
    """Kueue's ExtractPriority: the WorkloadPriorityClass label, else the pod's PriorityClass, else the default."""
    labels = job.metadata.labels or {}
    wpc_name = labels.get(c.PRIORITY_CLASS_LABEL)
    if wpc_name:
        wpc = workload_priority_classes.get(wpc_name)
        if wpc is None:
            raise JobConversionError(f"metadata.labels[{c.PRIORITY_CLASS_LABEL}]", f'WorkloadPriorityClass "{wpc_name}" not found')
        return wpc.value, PriorityClassRef(group=c.GROUP, kind="WorkloadPriorityClass", name=wpc_name)
    pc_name = template_spec.get("priorityClassName")
    if pc_name:
        pc = priority_classes.get(str(pc_name))
        if pc is None:
            raise JobConversionError("spec.template.spec.priorityClassName", f'PriorityClass "{pc_name}" not found')
        return pc.value, PriorityClassRef(group="scheduling.k8s.io", kind="PriorityClass", name=str(pc_name))
    defaults = sorted((pc for pc in priority_classes.values() if pc.global_default), key=lambda pc: pc.value)
    if defaults:
        return defaults[0].value, PriorityClassRef(group="scheduling.k8s.io", kind="PriorityClass", name=defaults[0].name)
    return 0, None


def workload_for_job(
    job: Job,
    *,
    job_uid: str,
    workload_priority_classes: Mapping[str, WorkloadPriorityClass],
    priority_classes: Mapping[str, PriorityClass],
) -> Workload:
    """The Workload for a queued Job, as Kueue's job reconciler builds it."""
    labels = job.metadata.labels or {}
    queue_name = labels.get(c.QUEUE_NAME_LABEL) or (job.metadata.annotations or {}).get(c.QUEUE_NAME_ANNOTATION)
    if not queue_name:
        raise JobConversionError(f"metadata.labels[{c.QUEUE_NAME_LABEL}]", "Required value: the Job is not queued")
    template = job.spec.template.model_dump(by_alias=True, exclude_none=True, mode="json")
    template = copy.deepcopy(template)
    spec = template.get("spec") or {}
    priority, ref = resolve_priority(job, spec, workload_priority_classes=workload_priority_classes, priority_classes=priority_classes)
    min_count: int | None = None
    raw_min = (job.metadata.annotations or {}).get(JOB_MIN_PARALLELISM_ANNOTATION)
    if raw_min is not None:
        try:
            min_count = int(raw_min)
        except ValueError:
            raise JobConversionError(
                f"metadata.annotations[{JOB_MIN_PARALLELISM_ANNOTATION}]", f'Invalid value: "{raw_min}": must be an integer'
            ) from None
    count = pods_count(job)
    if min_count is not None and not 0 < min_count <= count:
        raise JobConversionError(
            f"metadata.annotations[{JOB_MIN_PARALLELISM_ANNOTATION}]",
            f"Invalid value: {min_count}: must be between 1 and the Job's pod count ({count})",
        )
    meta = ObjectMeta(
        name=workload_name(job.name, job_uid),
        namespace=job.namespace,
        labels={c.JOB_UID_LABEL: job_uid},
        creation_timestamp=job.metadata.creation_timestamp,
        owner_references=[
            OwnerReference(api_version="batch/v1", kind="Job", name=job.name, uid=job_uid, controller=True, block_owner_deletion=True)
        ],
    )
    return Workload(
        metadata=meta,
        spec=WorkloadSpec(
            pod_sets=[PodSet(name="main", template=template, count=count, min_count=min_count)],
            queue_name=queue_name,
            priority=priority,
            priority_class_ref=ref,
        ),
    )


def job_queue_name(job: Job) -> str:
    return (job.metadata.labels or {}).get(c.QUEUE_NAME_LABEL) or (job.metadata.annotations or {}).get(c.QUEUE_NAME_ANNOTATION) or ""


def job_finished(job: Job) -> tuple[bool, bool, str]:
    """(finished, succeeded, message) from the Job's Complete and Failed conditions."""
    for cond in (job.status.conditions if job.status else None) or []:
        if cond.status == "True" and cond.type in ("Complete", "Failed"):
            return True, cond.type == "Complete", cond.message or ("Job finished successfully" if cond.type == "Complete" else "Job failed")
    return False, False, ""


def _original_pod_spec(wl: Workload) -> dict[str, Any]:
    template = wl.spec.pod_sets[0].template if wl.spec.pod_sets else None
    spec = (template or {}).get("spec") if isinstance(template, dict) else None
    return spec if isinstance(spec, dict) else {}


def start_job_patch(job: Job, wl: Workload, flavors: Mapping[str, ResourceFlavor]) -> dict[str, Any]:
    """Kueue's RunWithPodSetsInfo: unsuspend, and add the assigned flavors' nodeLabels to the
    nodeSelector and their tolerations; a partially admitted Job runs with the admitted count."""
    original = _original_pod_spec(wl)
    node_selector = dict(original.get("nodeSelector") or {})
    tolerations = list(original.get("tolerations") or [])
    admission = wl.status.admission if wl.status else None
    count: int | None = None
    if admission is not None and admission.pod_set_assignments:
        assignment = admission.pod_set_assignments[0]
        count = assignment.count
        for flavor_name in sorted(set((assignment.flavors or {}).values())):
            flavor = flavors.get(flavor_name)
            if flavor is None:
                continue
            node_selector.update(flavor.spec.node_labels or {})
            for toleration in flavor.spec.tolerations or []:
                as_dict = toleration.to_dict()
                if as_dict not in tolerations:
                    tolerations.append(as_dict)
    spec: dict[str, Any] = {
        "suspend": False,
        "template": {"spec": {"nodeSelector": node_selector or None, "tolerations": tolerations or None}},
    }
    if count is not None and job.spec.parallelism is not None and count < pods_count(job):
        spec["parallelism"] = count
    return {"spec": spec}


def suspend_job_patch() -> dict[str, Any]:
    """Suspend only: Kubernetes lets the pod template change only once the Job is suspended."""
    return {"spec": {"suspend": True}}


def restore_job_patch(job: Job, wl: Workload) -> dict[str, Any] | None:
    """Kueue's RestorePodSetsInfo for a suspended Job: the nodeSelector, tolerations and
    parallelism the Workload recorded; None when the Job already has them."""
    original = _original_pod_spec(wl)
    current = job.spec.template.spec
    spec: dict[str, Any] = {}
    want_selector = original.get("nodeSelector") or None
    want_tolerations = original.get("tolerations") or None
    have_tolerations = [t.to_dict() for t in current.tolerations] if current.tolerations else None
    if (current.node_selector or None) != want_selector or have_tolerations != want_tolerations:
        spec["template"] = {"spec": {"nodeSelector": want_selector, "tolerations": want_tolerations}}
    if wl.spec.pod_sets and job.spec.parallelism is not None and job.spec.parallelism < wl.spec.pod_sets[0].count:
        spec["parallelism"] = wl.spec.pod_sets[0].count
    return {"spec": spec} if spec else None
