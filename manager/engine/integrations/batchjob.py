"""The batch/v1 Job adapter (Kueue's pkg/controller/jobs/job and its MultiKueue adapter).

One PodSet, `main`, of min(parallelism, completions) pods; a partial admission
(`kueue.x-k8s.io/job-min-parallelism`) runs it with the admitted parallelism. Kubernetes lets
a Job's pod template change only while it is suspended and has no startTime, so stopping is
three steps: suspend, clear startTime, restore the template.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from manager.api.core import JOB_NAME_LABEL, Job
from manager.api.kueue import PodSet, Workload
from manager.engine.integrations.adapter import Finished, JobAdapter
from manager.engine.jobs import JobConversionError, PodSetInfo, map_patch, multikueue_remote_metadata, original_template

JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
JOB_CONTROLLER_NAME = "kubernetes.io/job-controller"  # batch/v1's JobControllerName
POD_SET = "main"
# The Job controller's own pod-template labels (Kueue's managedLabels). A PodSet, and a Job
# copied to a worker, drop them all but `batch.kubernetes.io/job-name`, which only names the
# Job and is the same on every cluster; the UIDs belong to one cluster's Job.
JOB_CONTROLLER_LABELS = ("job-name", "controller-uid", "batch.kubernetes.io/job-name", "batch.kubernetes.io/controller-uid")


def without_controller_labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    """Kueue's cleanLabels: the template labels without the Job controller's UID-bound ones."""
    return {k: v for k, v in (labels or {}).items() if k not in JOB_CONTROLLER_LABELS or k == JOB_NAME_LABEL}


def pods_count(job: Job) -> int:
    """min(parallelism, completions), parallelism defaulting to 1 (Kueue's podsCount)."""
    parallelism = job.spec.parallelism if job.spec.parallelism is not None else 1
    if job.spec.completions is not None and job.spec.completions < parallelism:
        return job.spec.completions
    return parallelism


def job_finished(job: Job) -> Finished | None:
    """From the Job's Complete and Failed conditions (kfed names the outcome when the
    condition has no message)."""
    for cond in (job.status.conditions if job.status else None) or []:
        if cond.status == "True" and cond.type in ("Complete", "Failed"):
            succeeded = cond.type == "Complete"
            return Finished(succeeded, cond.message or ("Job finished successfully" if succeeded else "Job failed"))
    return None


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


def _original_pod_spec(wl: Workload) -> dict[str, Any]:
    spec = original_template(wl, POD_SET).get("spec")
    return spec if isinstance(spec, dict) else {}


def _original_metadata(wl: Workload) -> tuple[dict[str, str], dict[str, str]]:
    meta = original_template(wl, POD_SET).get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})


class BatchJobAdapter(JobAdapter[Job]):
    framework = "batch/job"
    model = Job
    cli_name = "job"
    pod_label = JOB_NAME_LABEL
    default_managed_by = JOB_CONTROLLER_NAME
    restores_with_suspend = False  # Kueue's Job.Stop: its startTime goes before its template changes

    # --- the Workload ---------------------------------------------------------------------------
    def template_path(self, index: int) -> str:
        return "spec.template"

    def pod_sets(self, job: Job) -> list[PodSet]:
        template = copy.deepcopy(job.spec.template.model_dump(by_alias=True, exclude_none=True, mode="json"))
        template_meta = template.get("metadata")
        if isinstance(template_meta, dict) and template_meta.get("labels"):
            template_meta["labels"] = without_controller_labels(template_meta["labels"])
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
        return [PodSet(name=POD_SET, template=template, count=count, min_count=min_count)]

    # --- running and stopping ---------------------------------------------------------------------
    def is_suspended(self, job: Job) -> bool:
        return job.spec.suspend is True

    def start_patch(self, job: Job, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> dict[str, Any]:
        """Unsuspend, add the assigned flavors' nodeLabels to the nodeSelector the Workload
        recorded and their tolerations, and give the pods Kueue's labels and annotations; a
        partially admitted Job runs with the admitted count. Only the injected fields are
        written: the rest of the template may not change."""
        original = _original_pod_spec(wl)
        node_selector = dict(original.get("nodeSelector") or {})
        tolerations = list(original.get("tolerations") or [])
        info = pod_sets[0] if pod_sets else None
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        if info is not None:
            node_selector.update(info.node_selector)
            tolerations += [toleration for toleration in info.tolerations if toleration not in tolerations]
            labels, annotations = info.labels, info.annotations
        template: dict[str, Any] = {"spec": {"nodeSelector": node_selector or None, "tolerations": tolerations or None}}
        if labels or annotations:
            template["metadata"] = {"labels": labels or None, "annotations": annotations or None}
        spec: dict[str, Any] = {"suspend": False, "template": template}
        if info is not None and job.spec.parallelism is not None and info.count < pods_count(job):
            spec["parallelism"] = info.count
        return {"spec": spec}

    def stop_status_patch(self, job: Job) -> dict[str, Any] | None:
        """Same as Kueue's stop: clear startTime. Kubernetes lets a suspended Job's template
        change only without it, and a Job handed to MultiKueue gets the next run's startTime
        from the worker that runs it."""
        if job.status is None or job.status.start_time is None:
            return None
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "status": {"startTime": None}}

    def restore_patch(self, job: Job, wl: Workload) -> dict[str, Any] | None:
        """The nodeSelector, tolerations, pod labels and annotations and the parallelism the
        Workload recorded (the Job controller's own labels stay as the Job has them)."""
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
        meta = {"labels": map_patch(have_labels, want_labels), "annotations": map_patch(have_annotations, want_annotations)}
        meta = {key: value for key, value in meta.items() if value is not None}
        if meta:
            template["metadata"] = meta
        if template:
            spec["template"] = template
        recorded = next((pod_set.count for pod_set in wl.spec.pod_sets if pod_set.name == POD_SET), None)
        if recorded is not None and job.spec.parallelism is not None and job.spec.parallelism < recorded:
            spec["parallelism"] = recorded
        return {"spec": spec} if spec else None

    def finished(self, job: Job) -> Finished | None:
        return job_finished(job)

    def active_count(self, job: Job) -> int:
        return (job.status.active or 0) if job.status else 0

    def releasable(self, job: Job) -> bool:
        """None of its pods is running or still terminating (a terminating pod may yet
        succeed), and it is not finishing: a Job that finished, or is about to, must end
        Finished; an eviction never starts it again."""
        status = job.status.to_dict() if job.status else {}
        if status.get("active") or status.get("terminating") or job_finishing(job):
            return False
        # Where the Job controller runs the Job, it must have seen the suspension: while its
        # last word is Suspended=False (it resumed the Job), its counts predate the stop and a
        # pod may yet run. Seen in the fault suite: two pods created across an apiserver
        # restart and counted nowhere, which succeeded after the stop had cleared startTime;
        # the Job controller could then never finish the Job ("startTime is required for
        # finished job"). A Job handed to MultiKueue has no Job controller here: the Job
        # controller runs only a Job that names it or nobody (`can_default_managed_by`).
        return not (self.can_default_managed_by(self.managed_by(job)) and _resumed_last(job))

    def pods_ready(self, job: Job) -> bool:
        status = job.status.to_dict() if job.status else {}
        uncounted = len((status.get("uncountedTerminatedPods") or {}).get("succeeded") or [])
        return (status.get("succeeded") or 0) + (status.get("ready") or 0) + uncounted >= pods_count(job)

    def managed_by(self, job: Job) -> str | None:
        return job.spec.managed_by

    # --- MultiKueue ------------------------------------------------------------------------------
    def remote_object(self, job: Job, *, workload_name: str, origin: str) -> dict[str, Any]:
        """The manager's Job for a worker, with the selector and the controller's UID-bound
        template labels dropped, managedBy cleared, and our origin and the prebuilt
        Workload's name set. It keeps `suspend` (true): the worker's Kueue starts it."""
        raw = job.to_dict()
        spec = dict(raw.get("spec") or {})
        spec.pop("selector", None)
        spec.pop("managedBy", None)
        template = dict(spec.get("template") or {})
        meta = dict(template.get("metadata") or {})
        if meta.get("labels"):
            meta["labels"] = without_controller_labels(meta["labels"])
        template["metadata"] = meta
        spec["template"] = template
        metadata = multikueue_remote_metadata(job, workload_name=workload_name, origin=origin)
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata, "spec": spec}

    def status_update(self, local: Job, remote: Job) -> tuple[dict[str, Any] | None, bool]:
        """Kueue's determineStatusUpdate: the worker's status is copied once the manager's Job
        runs, while both are suspended (so an eviction's active=0 comes back), or when the
        worker's Job finished."""
        remote_status = _never_counting_down(local, remote.status.to_dict() if remote.status else {})
        if job_finished(remote) is not None or (local.spec.suspend is True and remote.spec.suspend is True):
            return remote_status, False
        if local.spec.suspend is not True and (remote_status.get("startTime") or not (local.status and local.status.start_time)):
            return remote_status, False
        # The manager's Job waits to be unsuspended, or the worker's has not started yet (a
        # running Job's startTime may not be removed): copy later.
        return None, True

    def lost_pods_status(self, job: Job) -> dict[str, Any]:
        return {"status": {"active": 0, "ready": 0, "terminating": 0}}


def _resumed_last(job: Job) -> bool:
    """Whether the Job controller's last word on the suspension is Suspended=False."""
    conditions = (job.status.conditions if job.status else None) or []
    return any(cond.type == "Suspended" and cond.status == "False" for cond in conditions)


# The Job API refuses a status that lowers these (`cannot decrease the succeeded counter`).
MONOTONIC_COUNTS = ("succeeded", "failed")


def _never_counting_down(local: Job, status: dict[str, Any]) -> dict[str, Any]:
    """The worker's status with the counts the API never lets go down kept at least at the
    manager Job's. A Job dispatched again after an eviction starts over on its worker (a new
    Job there, counting from zero), while the manager's Job still shows what the first copy
    had done; copied as it is, every status write would be refused until the new copy
    caught up, and the manager's Job would show nothing of it meanwhile."""
    if local.status is None:
        return status
    kept = {name: getattr(local.status, name) or 0 for name in MONOTONIC_COUNTS}
    lower = {name: value for name, value in kept.items() if value > (status.get(name) or 0)}
    return {**status, **lower} if lower else status
