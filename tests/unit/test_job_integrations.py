"""The job integrations' pure rules: the kind-independent ones (`manager.engine.jobs`), the
batch/v1 Job adapter, the JobSet adapter, and the registry of kinds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.config import Configuration
from manager.api.core import Job, PriorityClass
from manager.api.jobset import JobSet
from manager.api.meta import OwnerReference
from manager.engine.integrations.adapter import construct_workload
from manager.engine.integrations.registry import BATCH_JOB, JOBSET, UnsupportedFrameworkError, enabled
from manager.engine.jobs import (
    JobConversionError,
    admitted_pod_sets,
    prebuilt_workload_metadata,
    prebuilt_workload_name,
    workload_name,
)
from manager.engine.workload import admitted_without_reservation, requeued_follow_up, requeued_on_release


# --- the batch/v1 Job adapter ----------------------------------------------------------------------
def job(**spec: Any) -> Job:
    template = {"spec": {"nodeSelector": {"user": "choice"}, "containers": [{"name": "c"}]}}
    return Job.model_validate(
        {"metadata": {"name": "j", "namespace": "ns"}, "spec": {"parallelism": 4, "completions": 4, "template": template, **spec}}
    )


def admitted_workload(count: int = 4) -> kueue.Workload:
    template = {"spec": {"nodeSelector": {"user": "choice"}, "containers": [{"name": "c"}]}}
    return kueue.Workload.model_validate(
        {
            "metadata": {"name": "job-j-abcde", "namespace": "ns"},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 4, "template": template}]},
            "status": {
                "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "gpu-a"}, "count": count}]}
            },
        }
    )


GPU_A = kueue.ResourceFlavor.model_validate(
    {
        "metadata": {"name": "gpu-a"},
        "spec": {"nodeLabels": {"pool": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }
)


def start(job: Job, wl: kueue.Workload) -> dict[str, Any]:
    return BATCH_JOB.start_patch(job, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))


def test_starting_a_job_adds_the_flavor_node_labels_and_tolerations_to_what_the_user_wrote() -> None:
    patch = start(job(suspend=True), admitted_workload())
    assert patch["spec"]["suspend"] is False
    assert patch["spec"]["template"]["spec"]["nodeSelector"] == {"user": "choice", "pool": "a"}
    assert patch["spec"]["template"]["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "parallelism" not in patch["spec"]


def test_a_partially_admitted_job_runs_with_the_admitted_count_and_gets_it_back_when_stopped() -> None:
    started = start(job(suspend=True), admitted_workload(count=2))
    assert started["spec"]["parallelism"] == 2
    running = job(suspend=True, parallelism=2)
    running.spec.template.spec.node_selector = {"user": "choice", "pool": "a"}
    restored = BATCH_JOB.restore_patch(running, admitted_workload(count=2))
    assert restored == {"spec": {"template": {"spec": {"nodeSelector": {"user": "choice"}, "tolerations": None}}, "parallelism": 4}}
    assert BATCH_JOB.suspend_patch(running) == {"spec": {"suspend": True}}


def test_a_job_already_as_the_user_wrote_it_needs_no_restore() -> None:
    assert BATCH_JOB.restore_patch(job(suspend=True), admitted_workload()) is None


def test_the_pods_of_an_admitted_job_get_kueues_labels_and_annotation_and_lose_them_when_stopped() -> None:
    wl = admitted_workload()
    patch = start(job(suspend=True), wl)
    assert patch["spec"]["template"]["metadata"] == {
        "labels": {c.PODSET_LABEL: "main", c.LOCAL_QUEUE_LABEL: "q", c.CLUSTER_QUEUE_LABEL: "cq"},
        "annotations": {c.WORKLOAD_ANNOTATION: "job-j-abcde"},
    }
    running = job(suspend=True)
    running.spec.template.metadata = Job.model_validate(
        {"spec": {"template": {"metadata": {"labels": {c.PODSET_LABEL: "main", "controller-uid": "u"}}}}}
    ).spec.template.metadata
    restored = BATCH_JOB.restore_patch(running, wl)
    assert restored == {"spec": {"template": {"metadata": {"labels": {c.PODSET_LABEL: None}}}}}  # the Job controller's label stays


@pytest.mark.parametrize(
    ("labels", "cluster_queue", "checks", "want_labels", "want_annotations"),
    [
        # a worker's copy of a MultiKueue workload marks its pods as such
        ({c.MULTIKUEUE_ORIGIN_LABEL: "mk"}, "cq", [], {c.MULTIKUEUE_WORKER_POD_LABEL: "true", c.CLUSTER_QUEUE_LABEL: "cq"}, {}),
        # a ClusterQueue name that is no valid label value is left out
        ({}, "Team.CQ", [], {}, {}),
        # an admission check's podSetUpdates add their labels and annotations
        (
            {},
            "cq",
            [{"name": "prov", "state": "Ready", "podSetUpdates": [{"name": "main", "labels": {"l": "v"}, "annotations": {"a": "b"}}]}],
            {"l": "v", c.CLUSTER_QUEUE_LABEL: "cq"},
            {"a": "b"},
        ),
    ],
)
def test_admitted_pod_labels_and_annotations_are_kueues_pod_set_info(
    labels: dict[str, str], cluster_queue: str, checks: list[Any], want_labels: dict[str, str], want_annotations: dict[str, str]
) -> None:
    wl = admitted_workload()
    wl.metadata.labels = labels
    assert wl.status is not None and wl.status.admission is not None
    wl.status.admission.cluster_queue = cluster_queue
    wl.status.admission_checks = [kueue.AdmissionCheckState.model_validate(check) for check in checks] or None
    [info] = admitted_pod_sets(wl, {})
    got_labels, got_annotations = info.labels, info.annotations
    assert got_labels == {c.PODSET_LABEL: "main", c.LOCAL_QUEUE_LABEL: "q", **want_labels}
    assert got_annotations == {c.WORKLOAD_ANNOTATION: "job-j-abcde", **want_annotations}


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({}, {c.PREBUILT_WORKLOAD_ANNOTATION: "from-annotation"}, "from-annotation"),  # Kueue v0.18+ writes only this
        ({c.PREBUILT_WORKLOAD_LABEL: "from-label"}, {}, "from-label"),  # older Kueue, and the gate off
        ({c.PREBUILT_WORKLOAD_LABEL: "label"}, {c.PREBUILT_WORKLOAD_ANNOTATION: "annotation"}, "annotation"),  # the annotation first
        ({}, {}, ""),
    ],
)
def test_the_prebuilt_workload_name_is_read_from_the_annotation_then_the_label(
    labels: dict[str, str], annotations: dict[str, str], expected: str
) -> None:
    meta = {"name": "j", "labels": labels, "annotations": annotations}
    assert prebuilt_workload_name(meta) == expected
    assert prebuilt_workload_name(Job.model_validate({"metadata": meta}).metadata) == expected


@pytest.mark.parametrize(
    ("length", "has_label"),
    [(63, True), (64, False), (73, False)],
)
def test_the_prebuilt_name_is_an_annotation_and_a_label_only_where_it_fits(length: int, has_label: bool) -> None:
    name = "w" * length
    labels, annotations = prebuilt_workload_metadata(name)
    assert annotations == {c.PREBUILT_WORKLOAD_ANNOTATION: name}
    assert labels == ({c.PREBUILT_WORKLOAD_LABEL: name} if has_label else {})


LONG_OWNER = (
    "marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-social-media-engagement-"
    "tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-lead-senior-architect-validation-checked-approved-by-"
    "legal-and-ops-dept"
)


@pytest.mark.parametrize(
    ("job_name", "expected"),
    [
        # the values Kueue's own tests expect of GetWorkloadNameForOwnerWithGVK (ShortWorkloadNames off, its default)
        ("name", "job-name-ef3a1"),
        (LONG_OWNER, f"{('job-' + LONG_OWNER)[:247]}-218b8"),
    ],
)
def test_workload_names_are_kueues(job_name: str, expected: str) -> None:
    assert workload_name(job_name, "uid") == expected
    assert len(workload_name(job_name, "uid")) <= 253


def test_a_workloads_pod_template_drops_the_job_controllers_uid_labels() -> None:
    labelled = Job.model_validate(
        {
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "labels": {c.QUEUE_NAME_LABEL: "q"}},
            "spec": {
                "template": {
                    "metadata": {
                        "labels": {
                            "app": "x",
                            "controller-uid": "u",
                            "job-name": "j",
                            "batch.kubernetes.io/controller-uid": "u",
                            "batch.kubernetes.io/job-name": "j",
                        }
                    },
                    "spec": {"containers": [{"name": "c"}]},
                }
            },
        }
    )
    wl = construct_workload(BATCH_JOB, labelled, workload_priority_classes={}, priority_classes={})
    assert wl.spec.pod_sets[0].template["metadata"]["labels"] == {"app": "x", "batch.kubernetes.io/job-name": "j"}


@pytest.mark.parametrize(
    ("reason", "requeued"),
    [
        ("Preempted", True),
        ("NodeFailures", True),
        ("AdmissionCheck", False),
        ("PodsReadyTimeout", False),
        ("Deactivated", False),
        ("DeactivatedDueToEvictedOnManagerCluster", False),
        ("InactiveWorkload", False),
    ],
)
def test_requeued_on_release_is_true_only_after_preemption_or_node_failures(reason: str, requeued: bool) -> None:
    assert requeued_on_release(reason) is requeued


@pytest.mark.parametrize(
    ("reason", "active", "requeue_at", "expected"),
    [
        ("AdmissionCheck", True, None, ("BackoffFinished", "The workload backoff was finished")),
        ("PodsReadyTimeout", True, "2026-11-21T11:00:00Z", ("BackoffFinished", "The workload backoff was finished")),
        ("PodsReadyTimeout", True, "2099-01-01T00:00:00Z", None),  # the backoff has not run out
        ("Deactivated", True, None, ("Reactivated", "The workload was reactivated")),
        ("Deactivated", False, None, None),  # still deactivated
        ("DeactivatedDueToAdmissionCheck", True, None, None),  # Kueue matches the bare reason only
    ],
)
def test_requeued_false_turns_true_as_kueues_workload_controller_does(
    reason: str, active: bool, requeue_at: str | None, expected: Any
) -> None:
    wl = admitted_workload()
    status: dict[str, Any] = {
        "conditions": [
            {"type": c.REQUEUED, "status": "False", "reason": reason, "message": "m", "lastTransitionTime": "2026-11-21T11:00:00Z"}
        ]
    }
    if requeue_at:
        status["requeueState"] = {"requeueAt": requeue_at}
    wl.status = kueue.WorkloadStatus.model_validate(status)
    wl.spec.active = active
    assert requeued_follow_up(wl, datetime(2026, 11, 21, 12, tzinfo=UTC)) == expected


@pytest.mark.parametrize(
    ("completions", "status", "releases"),
    [
        (1, {}, True),  # never ran, or stopped before any pod finished
        (4, {"succeeded": 2, "failed": 1}, True),  # stopped half way: it runs again from its Workload
        (1, {"active": 1}, False),  # its pods are still going
        (1, {"terminating": 1}, False),  # a terminating pod may yet succeed
        (1, {"succeeded": 1}, False),  # done, its Complete condition not written yet
        (None, {"succeeded": 1}, False),  # without completions, one success is done
        (2, {"succeeded": 1, "uncountedTerminatedPods": {"succeeded": ["u"]}}, False),  # done, not counted yet
        (4, {"conditions": [{"type": "SuccessCriteriaMet", "status": "True"}]}, False),
        (4, {"conditions": [{"type": "FailureTarget", "status": "True"}]}, False),  # its failure is decided
    ],
)
def test_an_evicted_job_gives_its_quota_back_only_when_stopped_unfinished(
    completions: int | None, status: dict[str, Any], releases: bool
) -> None:
    evicted = job(suspend=True, completions=completions, parallelism=1)
    evicted.status = Job.model_validate({"status": status}).status
    assert BATCH_JOB.releasable(evicted) is releases


@pytest.mark.parametrize(
    ("suspend", "status", "stopped"),
    [
        (True, {}, True),
        (False, {}, False),  # unsuspended: about to run, or running
        (True, {"active": 1}, False),  # suspended, its pod not gone yet
        (True, {"succeeded": 1}, False),  # finishing
        (True, {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}, False),  # finished: it ends Finished
        # Resumed, and the Job controller has not seen the suspension yet: its counts are old.
        (True, {"conditions": [{"type": "Suspended", "status": "False", "reason": "JobResumed"}]}, False),
        (True, {"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]}, True),
    ],
)
def test_a_worker_job_is_stopped_only_when_suspended_with_no_pod_and_unfinished(
    suspend: bool, status: dict[str, Any], stopped: bool
) -> None:
    remote = job(suspend=suspend, completions=1, parallelism=1)
    remote.status = Job.model_validate({"status": status}).status
    assert BATCH_JOB.stopped(remote) is stopped


T0 = "2026-11-27T01:27:09Z"


@pytest.mark.parametrize(
    ("local_status", "remote_status", "copied"),
    [
        # The worker's Job runs: its status comes back whole.
        ({}, {"startTime": T0, "active": 1}, {"startTime": T0, "active": 1}),
        ({"startTime": T0, "succeeded": 1}, {"startTime": T0, "succeeded": 2, "active": 1}, {"startTime": T0, "succeeded": 2, "active": 1}),
        # Dispatched again after an eviction: the new copy counts from zero, the manager's Job
        # keeps the counts it showed (the API refuses fewer) and takes everything else.
        (
            {"startTime": T0, "succeeded": 1, "failed": 2},
            {"startTime": T0, "active": 1},
            {"startTime": T0, "active": 1, "succeeded": 1, "failed": 2},
        ),
        (
            {"succeeded": 1},
            {"startTime": T0, "succeeded": 0, "failed": 1, "active": 1},
            {"startTime": T0, "succeeded": 1, "failed": 1, "active": 1},
        ),
    ],
)
def test_a_worker_jobs_status_comes_back_without_counting_down(
    local_status: dict[str, Any], remote_status: dict[str, Any], copied: dict[str, Any]
) -> None:
    local, remote = job(completions=3, parallelism=1), job(completions=3, parallelism=1)
    local.status = Job.model_validate({"status": local_status}).status
    remote.status = Job.model_validate({"status": remote_status}).status
    assert BATCH_JOB.status_update(local, remote) == (copied, False)


def test_admitted_without_reservation_names_unready_checks() -> None:
    wl = admitted_workload()
    assert admitted_without_reservation(wl) == ("NoReservation", "The workload has no reservation")
    assert wl.status is not None
    wl.status.admission_checks = [kueue.AdmissionCheckState(name="mk", state="Pending")]
    assert admitted_without_reservation(wl) == (
        "NoReservationUnsatisfiedChecks",
        "The workload has no reservation and not all checks ready",
    )


# --- the JobSet adapter ----------------------------------------------------------------------------
def a_jobset(**spec: Any) -> JobSet:
    def rjob(name: str, replicas: int | None, job_spec: dict[str, Any]) -> dict[str, Any]:
        template = {"spec": {"nodeSelector": {"user": "choice"}, "containers": [{"name": "c"}]}}
        out: dict[str, Any] = {"name": name, "template": {"spec": {**job_spec, "template": template}}}
        if replicas is not None:
            out["replicas"] = replicas
        return out

    return JobSet.model_validate(
        {
            "metadata": {"name": "js", "namespace": "ns", "uid": "u", "resourceVersion": "7", "labels": {c.QUEUE_NAME_LABEL: "q"}},
            "spec": {
                "suspend": True,
                "replicatedJobs": [
                    rjob("leader", None, {}),  # replicas defaults to 1, parallelism to 1
                    rjob("workers", 3, {"parallelism": 4, "completions": 2, "completionMode": "Indexed"}),
                ],
                **spec,
            },
        }
    )


def jobset_workload(js: JobSet, *, flavors: dict[str, str] | None = None) -> kueue.Workload:
    wl = construct_workload(JOBSET, js, workload_priority_classes={}, priority_classes={})
    wl.metadata.name = "jobset-js-abcde"
    assignments = [{"name": ps.name, "flavors": flavors or {"cpu": "gpu-a"}, "count": ps.count} for ps in wl.spec.pod_sets]
    wl.status = kueue.WorkloadStatus.model_validate({"admission": {"clusterQueue": "cq", "podSetAssignments": assignments}})
    return wl


def test_a_jobset_asks_for_one_pod_set_per_replicated_job_of_replicas_times_its_pods() -> None:
    wl = construct_workload(JOBSET, a_jobset(), workload_priority_classes={}, priority_classes={})
    assert [(ps.name, ps.count, ps.min_count) for ps in wl.spec.pod_sets] == [("leader", 1, None), ("workers", 6, None)]
    assert wl.spec.pod_sets[1].template == {"spec": {"nodeSelector": {"user": "choice"}, "containers": [{"name": "c"}]}}
    assert wl.metadata.name == workload_name("js", "u", kind="JobSet", group="jobset.x-k8s.io")
    assert wl.metadata.name.startswith("jobset-js-")
    assert wl.metadata.owner_references is not None
    [owner] = wl.metadata.owner_references
    assert (owner.api_version, owner.kind, owner.name, owner.uid) == ("jobset.x-k8s.io/v1alpha2", "JobSet", "js", "u")
    assert owner.controller
    assert wl.metadata.labels == {c.JOB_UID_LABEL: "u"}


def test_a_jobset_takes_the_priority_class_of_its_first_replicated_job_that_names_one() -> None:
    js = a_jobset()
    js.spec.replicated_jobs[1].template.spec.template.spec.priority_class_name = "high"
    high = PriorityClass.model_validate({"metadata": {"name": "high"}, "value": 1000})
    wl = construct_workload(JOBSET, js, workload_priority_classes={}, priority_classes={"high": high})
    assert wl.spec.priority == 1000
    js.spec.replicated_jobs[1].template.spec.template.spec.priority_class_name = "missing"
    with pytest.raises(JobConversionError, match=r"^spec\.replicatedJobs\[1\]\.template\.spec\.template\.spec\.priorityClassName: "):
        construct_workload(JOBSET, js, workload_priority_classes={}, priority_classes={})


def test_a_jobset_without_replicated_jobs_gets_no_workload() -> None:
    with pytest.raises(JobConversionError, match=r"^spec\.replicatedJobs: Required value"):
        JOBSET.pod_sets(a_jobset(replicatedJobs=[]))


def test_starting_a_jobset_gives_each_replicated_job_its_pod_sets_flavor_and_kueues_pod_labels() -> None:
    js = a_jobset()
    wl = jobset_workload(js)
    patch = JOBSET.start_patch(js, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))
    assert patch["metadata"] == {"resourceVersion": "7"}  # the whole list is written: only over what was read
    assert patch["spec"]["suspend"] is False
    leader, workers = patch["spec"]["replicatedJobs"]
    assert workers["replicas"] == 3 and workers["template"]["spec"]["completionMode"] == "Indexed"  # the rest as it was
    for rjob in (leader, workers):
        pod = rjob["template"]["spec"]["template"]
        assert pod["spec"]["nodeSelector"] == {"user": "choice", "pool": "a"}
        assert pod["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert pod["metadata"]["labels"][c.PODSET_LABEL] == rjob["name"]
        assert pod["metadata"]["annotations"] == {c.WORKLOAD_ANNOTATION: "jobset-js-abcde"}


def test_a_started_jobset_gets_its_templates_back_when_stopped_and_none_when_they_are_as_written() -> None:
    js = a_jobset()
    wl = jobset_workload(js)
    started = JobSet.model_validate(
        {**js.to_dict(), "spec": {**js.to_dict()["spec"], **JOBSET.start_patch(js, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))["spec"]}}
    )
    restore = JOBSET.restore_patch(started, wl)
    assert restore is not None
    for rjob in restore["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]
        assert pod["spec"] == {"nodeSelector": {"user": "choice"}, "containers": [{"name": "c"}]}
        assert "labels" not in pod.get("metadata", {}) and "annotations" not in pod.get("metadata", {})
    assert JOBSET.restore_patch(js, wl) is None


def test_a_jobset_admitted_for_other_pod_sets_is_not_started() -> None:
    js = a_jobset()
    wl = jobset_workload(js)
    with pytest.raises(JobConversionError, match="expecting 2 admitted PodSets, got 1"):
        JOBSET.start_patch(js, wl, admitted_pod_sets(wl, {})[:1])


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], None),
        ([{"type": "StartupPolicyCompleted", "status": "True"}], None),
        ([{"type": "Completed", "status": "False"}], None),
        ([{"type": "Completed", "status": "True", "message": "all jobs completed"}], (True, "all jobs completed")),
        ([{"type": "Completed", "status": "True"}], (True, "JobSet finished successfully")),
        ([{"type": "Failed", "status": "True", "message": "a job failed"}], (False, "a job failed")),
    ],
)
def test_a_jobset_finishes_with_its_terminal_condition(conditions: list[dict[str, Any]], expected: tuple[bool, str] | None) -> None:
    js = a_jobset()
    js.status = JobSet.model_validate({"status": {"conditions": conditions}}).status
    finished = JOBSET.finished(js)
    assert (None if finished is None else (finished.succeeded, finished.message)) == expected


@pytest.mark.parametrize(
    ("statuses", "active", "ready"),
    [
        ([], 0, False),
        ([{"name": "leader", "active": 1, "ready": 1}, {"name": "workers", "active": 3, "ready": 2}], 4, False),
        ([{"name": "leader", "active": 1, "ready": 1}, {"name": "workers", "active": 2, "ready": 2, "succeeded": 1}], 3, True),
        ([{"name": "leader", "succeeded": 1}, {"name": "workers", "succeeded": 3}], 0, True),
    ],
)
def test_a_jobsets_running_and_ready_child_jobs_are_counted(statuses: list[dict[str, Any]], active: int, ready: bool) -> None:
    js = a_jobset(suspend=False)
    js.status = JobSet.model_validate({"status": {"replicatedJobsStatus": statuses}}).status
    assert JOBSET.active_count(js) == active
    assert JOBSET.releasable(js) is (active == 0)
    assert JOBSET.pods_ready(js) is ready


def test_the_jobset_for_a_worker_is_the_whole_jobset_handed_to_its_controller() -> None:
    js = a_jobset(managedBy=c.MULTIKUEUE_MANAGED_BY)
    copy = JOBSET.remote_object(js, workload_name="jobset-js-abcde", origin="east")
    assert (copy["apiVersion"], copy["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert copy["metadata"] == {
        "name": "js",
        "namespace": "ns",
        "labels": {c.QUEUE_NAME_LABEL: "q", c.MULTIKUEUE_ORIGIN_LABEL: "east", c.PREBUILT_WORKLOAD_LABEL: "jobset-js-abcde"},
        "annotations": {c.PREBUILT_WORKLOAD_ANNOTATION: "jobset-js-abcde"},
    }
    assert "managedBy" not in copy["spec"] and copy["spec"]["suspend"] is True
    assert copy["spec"]["replicatedJobs"] == js.to_dict()["spec"]["replicatedJobs"]


def test_a_worker_jobsets_status_comes_back_whole_every_time() -> None:
    local, remote = a_jobset(), a_jobset()
    status = {"replicatedJobsStatus": [{"name": "workers", "active": 3, "ready": 3}], "restarts": 1}
    remote.status = JobSet.model_validate({"status": status}).status
    assert JOBSET.status_update(local, remote) == (status, False)
    assert JOBSET.lost_pods_status(remote) == {"status": {"replicatedJobsStatus": [{"name": "workers", "active": 0, "ready": 0}]}}


@pytest.mark.parametrize(
    ("managed_by", "can"),
    [(None, True), ("jobset.sigs.k8s.io/jobset-controller", True), (c.MULTIKUEUE_MANAGED_BY, False), ("example.com/other", False)],
)
def test_only_a_jobset_its_own_controller_would_run_is_handed_to_multikueue(managed_by: str | None, can: bool) -> None:
    assert JOBSET.can_default_managed_by(managed_by) is can


# --- the registry ----------------------------------------------------------------------------------
def test_the_configuration_enables_job_kinds_by_kueues_framework_names() -> None:
    assert enabled(Configuration().effective_frameworks).adapters == (BATCH_JOB,)
    config = Configuration.model_validate({"integrations": {"frameworks": ["jobset.x-k8s.io/jobset", "batch/job", "batch/job"]}})
    registry = enabled(config.effective_frameworks)
    assert registry.adapters == (JOBSET, BATCH_JOB)
    assert registry.multikueue_kinds == {"batch/v1, Kind=Job", "jobset.x-k8s.io/v1alpha2, Kind=JobSet"}
    assert registry.by_gvk("jobset.x-k8s.io/v1alpha2, Kind=JobSet") is JOBSET


def test_an_unsupported_framework_name_is_one_line_naming_the_field() -> None:
    with pytest.raises(UnsupportedFrameworkError) as err:
        enabled(["batch/job", "kubeflow.org/pytorchjob"])
    assert str(err.value) == (
        'integrations.frameworks[1]: Unsupported value: "kubeflow.org/pytorchjob": supported values: '
        '"batch/job", "deployment", "jobset.x-k8s.io/jobset", "kubeflow.org/mpijob", "leaderworkerset.x-k8s.io/leaderworkerset", '
        '"pod", "ray.io/raycluster", "ray.io/rayjob", "trainer.kubeflow.org/trainjob"'
    )


def test_a_job_owned_by_a_managed_jobset_is_part_of_it() -> None:
    registry = enabled(["batch/job", "jobset.x-k8s.io/jobset"])
    child = OwnerReference(api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet", name="js", uid="u", controller=True)
    assert registry.owns_any([child])
    assert not registry.owns_any([child.model_copy(update={"controller": False})])
    assert not enabled(["batch/job"]).owns_any([child])  # JobSet not integrated: the Job is its own
