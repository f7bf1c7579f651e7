"""The JobSet adapter (jobset.x-k8s.io/v1alpha2; Kueue's pkg/controller/jobs/jobset and its
MultiKueue adapter).

One PodSet per replicatedJob, named after it, of replicas x min(parallelism, completions)
pods. Starting unsuspends the JobSet and merges each admitted PodSet's nodeSelector,
tolerations, labels and annotations into its replicatedJob's pod template (the JobSet
controller passes them on to the Jobs it creates); stopping suspends it and gives each
template back what the Workload recorded, in one write (JobSet lets the pod template change
while the JobSet is, or is being, suspended). It finishes with its Completed or Failed
condition. A worker gets the whole JobSet with managedBy cleared, and its status comes back
whole on every sync.

`spec.replicatedJobs` is a list, which a merge patch replaces whole: the start and restore
patches carry the whole list as read, with a resourceVersion precondition.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from manager.api import constants as c
from manager.api import jobset as api
from manager.api.jobset import JOBSET_NAME_LABEL, JobSet, ReplicatedJob, ReplicatedJobStatus
from manager.api.kueue import PodSet, Workload
from manager.engine.integrations.adapter import Finished, JobAdapter, true_condition
from manager.engine.integrations.templates import merge_into_template, restore_template
from manager.engine.jobs import JobConversionError, PodSetInfo, original_template


def pods_per_replica(rjob: ReplicatedJob) -> int:
    """Kueue's PodsCountPerReplica: min(parallelism, completions), parallelism defaulting to 1."""
    spec = rjob.template.spec
    parallelism = spec.parallelism if spec.parallelism is not None else 1
    completions = spec.completions if spec.completions is not None else parallelism
    return min(parallelism, completions)


def active_jobs(statuses: Sequence[ReplicatedJobStatus] | None) -> int:
    """The child Jobs with a pod running or pending, from a JobSet's replicatedJobs status
    (JobSet counts Jobs, not pods; the Trainer copies the same status to its TrainJob)."""
    return sum(status.active or 0 for status in statuses or [])


def ready_jobs(statuses: Sequence[ReplicatedJobStatus] | None) -> int:
    """The ready and succeeded child Jobs: Kueue's PodsReady holds when they add up to the replicas."""
    return sum((status.ready or 0) + (status.succeeded or 0) for status in statuses or [])


def _pod_template(raw_rjob: dict[str, Any]) -> dict[str, Any]:
    """The pod template inside one replicatedJob as written (created on the way if absent)."""
    job_template = raw_rjob.setdefault("template", {})
    job_spec = job_template.setdefault("spec", {})
    template: dict[str, Any] = job_spec.setdefault("template", {})
    return template


class JobSetAdapter(JobAdapter[JobSet]):
    framework = "jobset.x-k8s.io/jobset"
    model = JobSet
    cli_name = "jobset"
    pod_label = JOBSET_NAME_LABEL
    default_managed_by = api.CONTROLLER_NAME

    # --- the Workload ---------------------------------------------------------------------------
    def template_path(self, index: int) -> str:
        return f"spec.replicatedJobs[{index}].template.spec.template"

    def pod_sets(self, job: JobSet) -> list[PodSet]:
        rjobs = job.spec.replicated_jobs
        if not rjobs:
            raise JobConversionError("spec.replicatedJobs", "Required value: a JobSet needs at least one replicatedJob")
        if len(rjobs) > c.MAX_POD_SETS:
            raise JobConversionError("spec.replicatedJobs", f"Too many: {len(rjobs)}: a Workload has at most {c.MAX_POD_SETS} PodSets")
        return [
            PodSet(
                name=rjob.name,
                template=copy.deepcopy(rjob.template.spec.template.model_dump(by_alias=True, exclude_none=True, mode="json")),
                count=rjob.effective_replicas * pods_per_replica(rjob),
            )
            for rjob in rjobs
        ]

    # --- running and stopping ---------------------------------------------------------------------
    def is_suspended(self, job: JobSet) -> bool:
        return job.spec.suspend is True

    def _raw_replicated_jobs(self, job: JobSet) -> list[dict[str, Any]]:
        return copy.deepcopy(list(job.to_dict().get("spec", {}).get("replicatedJobs") or []))

    def start_patch(self, job: JobSet, wl: Workload, pod_sets: Sequence[PodSetInfo]) -> dict[str, Any]:
        """Kueue's RunWithPodSetsInfo: one admitted PodSet per replicatedJob, merged into its
        pod template; a value the template already has differently is a conflict
        (JobConversionError: Kueue finishes such a Workload as FailedToStart)."""
        rjobs = self._raw_replicated_jobs(job)
        if len(pod_sets) != len(rjobs):
            raise JobConversionError("spec.replicatedJobs", f"expecting {len(rjobs)} admitted PodSets, got {len(pod_sets)}")
        for index, (raw, info) in enumerate(zip(rjobs, pod_sets, strict=True)):
            merge_into_template(_pod_template(raw), info, path=self.template_path(index))
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "spec": {"suspend": False, "replicatedJobs": rjobs}}

    def restore_patch(self, job: JobSet, wl: Workload) -> dict[str, Any] | None:
        """Kueue's RestorePodSpec for each replicatedJob: its pod template's labels,
        annotations, nodeSelector and tolerations become what the Workload recorded for its
        PodSet. A Workload whose PodSets do not match the replicatedJobs restores nothing."""
        rjobs = self._raw_replicated_jobs(job)
        if [rjob.get("name") for rjob in rjobs] != [pod_set.name for pod_set in wl.spec.pod_sets]:
            return None
        changed = False
        for raw in rjobs:
            changed |= restore_template(_pod_template(raw), original_template(wl, str(raw.get("name"))))
        if not changed:
            return None
        return {"metadata": {"resourceVersion": job.metadata.resource_version}, "spec": {"replicatedJobs": rjobs}}

    def finished(self, job: JobSet) -> Finished | None:
        done = true_condition(job.status.conditions if job.status else None, api.COMPLETED)
        if done is not None:
            return Finished(True, done.message or "JobSet finished successfully")
        failed = true_condition(job.status.conditions if job.status else None, api.FAILED)
        if failed is not None:
            return Finished(False, failed.message or "JobSet failed")
        return None

    def active_count(self, job: JobSet) -> int:
        """Its child Jobs with a pod running or pending (JobSet counts Jobs, not pods)."""
        return active_jobs(job.status.replicated_jobs_status if job.status else None)

    def pods_ready(self, job: JobSet) -> bool:
        """Kueue's PodsReady for a JobSet: its ready and succeeded child Jobs add up to its replicas."""
        replicas = sum(rjob.effective_replicas for rjob in job.spec.replicated_jobs)
        return replicas == ready_jobs(job.status.replicated_jobs_status if job.status else None)

    def managed_by(self, job: JobSet) -> str | None:
        return job.spec.managed_by

    # --- MultiKueue ------------------------------------------------------------------------------
    def lost_pods_status(self, job: JobSet) -> dict[str, Any]:
        statuses = [status.to_dict() for status in (job.status.replicated_jobs_status if job.status else None) or []]
        return {"status": {"replicatedJobsStatus": [{**status, "active": 0, "ready": 0} for status in statuses]}}
