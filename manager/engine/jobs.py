"""Kueue's job integration for batch/v1 Job, its pure rules: the Workload for a Job, the
prebuilt Workload it names, what admission and eviction change in its pod template, and how
an eviction ends."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from manager.api import constants as c
from manager.api.core import Job, PriorityClass
from manager.api.kueue import PodSet, PriorityClassRef, ResourceFlavor, Workload, WorkloadPriorityClass, WorkloadSpec
from manager.api.meta import ObjectMeta, OwnerReference

JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
_MAX_NAME = 253
_HASH_LENGTH = 5
# The Job controller's own pod-template labels (Kueue's managedLabels). A PodSet, and a Job
# copied to a worker, drop them all but `batch.kubernetes.io/job-name`, which only names the
# Job and is the same on every cluster; the UIDs belong to one cluster's Job.
JOB_CONTROLLER_LABELS = ("job-name", "controller-uid", "batch.kubernetes.io/job-name", "batch.kubernetes.io/controller-uid")
_JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


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


def without_controller_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """Kueue's cleanLabels: the template labels without the Job controller's UID-bound ones."""
    return {k: v for k, v in (labels or {}).items() if k not in JOB_CONTROLLER_LABELS or k == _JOB_NAME_LABEL}


def prebuilt_workload_name(meta: ObjectMeta | Mapping[str, Any]) -> str:
    """Kueue's PrebuiltWorkloadNameFor with WorkloadIdentifierAnnotations on (its default since
    v0.18): the `prebuilt-workload-name` annotation, else the label of that name; "" for none.
    `meta` is an object's metadata, typed or as sent (a webhook's request)."""
    if isinstance(meta, ObjectMeta):
        labels, annotations = meta.labels, meta.annotations
    else:
        labels, annotations = meta.get("labels"), meta.get("annotations")
    return str((annotations or {}).get(c.PREBUILT_WORKLOAD_ANNOTATION) or (labels or {}).get(c.PREBUILT_WORKLOAD_LABEL) or "")


def prebuilt_workload_metadata(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) naming a prebuilt Workload on a Job: the annotation always (what
    Kueue v0.18 and later read first), and the label too when the name fits a label value (63
    characters), for readers that know only the label."""
    labels = {c.PREBUILT_WORKLOAD_LABEL: name} if len(name) <= c.LABEL_VALUE_MAX_LENGTH else {}
    return labels, {c.PREBUILT_WORKLOAD_ANNOTATION: name}


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
    queue_name = job_queue_name(job)
    if not queue_name:
        raise JobConversionError(f"metadata.labels[{c.QUEUE_NAME_LABEL}]", "Required value: the Job is not queued")
    template = job.spec.template.model_dump(by_alias=True, exclude_none=True, mode="json")
    template = copy.deepcopy(template)
    template_meta = template.get("metadata")
    if isinstance(template_meta, dict) and template_meta.get("labels"):
        template_meta["labels"] = without_controller_labels(template_meta["labels"])
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


def queue_name_of(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None) -> str:
    """Kueue's rule for which LocalQueue an object asks for: the queue-name label, else the
    (deprecated) queue-name annotation; "" when it names none. The one home of this rule: the
    webhook, the job controller, `simulate` and `explain` all ask here."""
    return (labels or {}).get(c.QUEUE_NAME_LABEL) or (annotations or {}).get(c.QUEUE_NAME_ANNOTATION) or ""


def job_queue_name(job: Job) -> str:
    return queue_name_of(job.metadata.labels, job.metadata.annotations)


def job_finished(job: Job) -> tuple[bool, bool, str]:
    """(finished, succeeded, message) from the Job's Complete and Failed conditions."""
    for cond in (job.status.conditions if job.status else None) or []:
        if cond.status == "True" and cond.type in ("Complete", "Failed"):
            return True, cond.type == "Complete", cond.message or ("Job finished successfully" if cond.type == "Complete" else "Job failed")
    return False, False, ""


def job_finishing(job: Job) -> bool:
    """The Job's work is done (or its failure decided) but its Complete or Failed condition has
    not landed yet: SuccessCriteriaMet or FailureTarget is True, or its succeeded pods, counted
    or not yet counted, reach its completions (any one, without completions)."""
    status = job.status.to_dict() if job.status else {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("SuccessCriteriaMet", "FailureTarget"):
            return True
    succeeded = (status.get("succeeded") or 0) + len((status.get("uncountedTerminatedPods") or {}).get("succeeded") or [])
    completions = job.spec.completions
    return succeeded > 0 and (completions is None or succeeded >= completions)


def eviction_can_release(job: Job) -> bool:
    """Whether an evicted Job's quota may be given back and its Workload queued again: none of
    its pods is running or still terminating (a terminating pod may yet succeed), and it is not
    finishing. A Job that finished, or is about to, must end Finished; an eviction never starts
    it again."""
    status = job.status.to_dict() if job.status else {}
    return not status.get("active") and not status.get("terminating") and not job_finishing(job)


def job_stopped(job: Job) -> bool:
    """Suspended with no pod left running or terminating, and neither finished nor finishing:
    what a Job handed to a worker must be there before the manager gives its quota back (and
    deletes it). The Job controller must also have seen the suspension: while its last word is
    Suspended=False (it resumed the Job), its counts predate the stop and a pod may yet run."""
    conditions = (job.status.conditions if job.status else None) or []
    if any(cond.type == "Suspended" and cond.status == "False" for cond in conditions):
        return False
    return job.spec.suspend is True and eviction_can_release(job) and not job_finished(job)[0]


def _original_template(wl: Workload) -> dict[str, Any]:
    template = wl.spec.pod_sets[0].template if wl.spec.pod_sets else None
    return template if isinstance(template, dict) else {}


def _original_pod_spec(wl: Workload) -> dict[str, Any]:
    spec = _original_template(wl).get("spec")
    return spec if isinstance(spec, dict) else {}


def _original_metadata(wl: Workload) -> tuple[dict[str, str], dict[str, str]]:
    meta = _original_template(wl).get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})


def admitted_pod_metadata(wl: Workload) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) Kueue's getPodSetsInfoFromStatus gives the pods of an admitted
    Job: the podset label, the queue labels (AssignQueueLabelsForPods; the ClusterQueue's only
    when its name is a valid label value), the worker-copy label on a MultiKueue copy, the
    workload annotation (set with TopologyAwareScheduling, on by default), and the labels and
    annotations the admission checks ask for in podSetUpdates."""
    admission = wl.status.admission if wl.status else None
    if admission is None or not admission.pod_set_assignments:
        return {}, {}
    podset = admission.pod_set_assignments[0].name
    labels = {c.PODSET_LABEL: podset}
    if c.MULTIKUEUE_ORIGIN_LABEL in (wl.metadata.labels or {}):
        labels[c.MULTIKUEUE_WORKER_POD_LABEL] = "true"
    labels[c.LOCAL_QUEUE_LABEL] = wl.spec.queue_name or ""
    if len(admission.cluster_queue) <= c.LABEL_VALUE_MAX_LENGTH and _DNS1123_LABEL.match(admission.cluster_queue):
        labels[c.CLUSTER_QUEUE_LABEL] = admission.cluster_queue
    annotations = {c.WORKLOAD_ANNOTATION: wl.name}
    for update in _pod_set_updates(wl, podset):
        labels.update(update.labels or {})
        annotations.update(update.annotations or {})
    return labels, annotations


def _pod_set_updates(wl: Workload, podset: str) -> list[Any]:
    updates = []
    for check in (wl.status.admission_checks if wl.status else None) or []:
        updates += [update for update in check.pod_set_updates or [] if update.name == podset]
    return updates


def start_job_patch(job: Job, wl: Workload, flavors: Mapping[str, ResourceFlavor]) -> dict[str, Any]:
    """Kueue's RunWithPodSetsInfo: unsuspend, add the assigned flavors' nodeLabels to the
    nodeSelector and their tolerations, and give the pods Kueue's labels and annotations
    (`admitted_pod_metadata`); a partially admitted Job runs with the admitted count."""
    original = _original_pod_spec(wl)
    node_selector = dict(original.get("nodeSelector") or {})
    tolerations = list(original.get("tolerations") or [])
    admission = wl.status.admission if wl.status else None
    count: int | None = None
    if admission is not None and admission.pod_set_assignments:
        assignment = admission.pod_set_assignments[0]
        count = assignment.count
        extra = []
        for flavor_name in sorted(set((assignment.flavors or {}).values())):
            flavor = flavors.get(flavor_name)
            if flavor is not None:
                node_selector.update(flavor.spec.node_labels or {})
                extra.append(flavor.spec.tolerations or [])
        for update in _pod_set_updates(wl, assignment.name):
            node_selector.update(update.node_selector or {})
            extra.append(update.tolerations or [])
        for group in extra:
            for toleration in group:
                as_dict = toleration.to_dict()
                if as_dict not in tolerations:
                    tolerations.append(as_dict)
    labels, annotations = admitted_pod_metadata(wl)
    template: dict[str, Any] = {"spec": {"nodeSelector": node_selector or None, "tolerations": tolerations or None}}
    if labels or annotations:
        template["metadata"] = {"labels": labels or None, "annotations": annotations or None}
    spec: dict[str, Any] = {"suspend": False, "template": template}
    if count is not None and job.spec.parallelism is not None and count < pods_count(job):
        spec["parallelism"] = count
    return {"spec": spec}


def suspend_job_patch() -> dict[str, Any]:
    """Suspend only: Kubernetes lets the pod template change only once the Job is suspended."""
    return {"spec": {"suspend": True}}


def _map_patch(have: Mapping[str, str], want: Mapping[str, str]) -> dict[str, str | None] | None:
    """A merge patch turning `have` into `want`; None when they are equal."""
    if dict(have) == dict(want):
        return None
    patch: dict[str, str | None] = {key: None for key in have if key not in want}
    patch.update({key: value for key, value in want.items() if have.get(key) != value})
    return patch


def restore_job_patch(job: Job, wl: Workload) -> dict[str, Any] | None:
    """Kueue's RestorePodSetsInfo for a suspended Job: the nodeSelector, tolerations, pod
    labels and annotations and the parallelism the Workload recorded (the Job controller's own
    labels stay as the Job has them); None when the Job already has them."""
    original = _original_pod_spec(wl)
    current = job.spec.template.spec
    spec: dict[str, Any] = {}
    template: dict[str, Any] = {}
    want_selector = original.get("nodeSelector") or None
    want_tolerations = original.get("tolerations") or None
    have_tolerations = [t.to_dict() for t in current.tolerations] if current.tolerations else None
    if (current.node_selector or None) != want_selector or have_tolerations != want_tolerations:
        template["spec"] = {"nodeSelector": want_selector, "tolerations": want_tolerations}
    want_labels, want_annotations = _original_metadata(wl)
    have_meta = job.spec.template.metadata
    have_labels = dict((have_meta.labels if have_meta else None) or {})
    have_annotations = dict((have_meta.annotations if have_meta else None) or {})
    want_labels = {k: v for k, v in want_labels.items() if k not in JOB_CONTROLLER_LABELS}
    want_labels.update({k: v for k, v in have_labels.items() if k in JOB_CONTROLLER_LABELS})
    meta = {"labels": _map_patch(have_labels, want_labels), "annotations": _map_patch(have_annotations, want_annotations)}
    meta = {key: value for key, value in meta.items() if value is not None}
    if meta:
        template["metadata"] = meta
    if template:
        spec["template"] = template
    if wl.spec.pod_sets and job.spec.parallelism is not None and job.spec.parallelism < wl.spec.pod_sets[0].count:
        spec["parallelism"] = wl.spec.pod_sets[0].count
    return {"spec": spec} if spec else None


# --- the end of an eviction (Kueue's job reconciler, "handle eviction") -----------------------------
# Evictions after which the workload is queued again at once (Requeued=True); after any other,
# Requeued=False names the eviction until the workload controller lets it back in.
_REQUEUED_AT_ONCE = ("Preempted", "NodeFailures")
# Requeued=False reasons the workload controller turns into Requeued=True: (reason, message).
_BACKOFF_FINISHED = ("BackoffFinished", "The workload backoff was finished")
_REACTIVATED = ("Reactivated", "The workload was reactivated")


def requeued_on_release(evicted_reason: str) -> bool:
    """Requeued's status when an evicted Job's quota is released: True only after a preemption
    or node failures (Kueue's job reconciler)."""
    return evicted_reason in _REQUEUED_AT_ONCE


def admitted_without_reservation(wl: Workload) -> tuple[str, str]:
    """(reason, message) of Admitted=False once the quota is released (Kueue's
    SyncAdmittedCondition): checks that are not all Ready are named too."""
    checks = (wl.status.admission_checks if wl.status else None) or []
    if any(check.state != "Ready" for check in checks):
        return "NoReservationUnsatisfiedChecks", "The workload has no reservation and not all checks ready"
    return "NoReservation", "The workload has no reservation"


def requeued_follow_up(wl: Workload, now: datetime) -> tuple[str, str] | None:
    """Kueue's workload controller for an active Workload whose Requeued is False: after a
    deactivation it is reactivated, after a check retry or a PodsReady timeout its backoff
    (`status.requeueState.requeueAt`) has run out. (reason, message) for Requeued=True, or None."""
    if wl.spec.active is False or wl.status is None:
        return None
    requeued = next((cond for cond in wl.status.conditions or [] if cond.type == c.REQUEUED), None)
    if requeued is None or requeued.status != "False":
        return None
    if requeued.reason == "Deactivated":
        return _REACTIVATED
    if requeued.reason in ("PodsReadyTimeout", "AdmissionCheck"):
        state = wl.status.requeue_state
        if state is not None and state.requeue_at is not None and state.requeue_at > now:
            return None
        return _BACKOFF_FINISHED
    return None
