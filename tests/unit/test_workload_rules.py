"""The rules kept in one home each: the condition upsert (manager.api.meta), the workload
predicates and Kueue's Misconfigured messages (manager.engine.workload), and the Preempted
message (manager.engine.scheduler), each shown with what its writer and its readers do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from manager.api import kueue
from manager.api.meta import MAX_CONDITION_MESSAGE, Condition, set_condition
from manager.cli import views
from manager.engine import preemption
from manager.engine.scheduler import PreemptionMessage, parse_preemption_message, preemption_message
from manager.engine.workload import (
    MISSING_CLUSTER_QUEUE,
    MISSING_LOCAL_QUEUE,
    MISSING_NAMESPACE,
    NAMESPACE_NOT_SELECTED,
    NAMESPACE_NOT_SELECTED_MESSAGE,
    eviction_labels,
    has_quota_reservation,
    misconfiguration,
    missing_cluster_queue_message,
    missing_local_queue_message,
    missing_namespace_message,
    multikueue_check_state,
    owner_name,
    workload_priority,
)
from manager.multikueue.rules.reads import Remote, worker_verdict

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LATER = T0 + timedelta(minutes=5)


def active(status: str, reason: str = "Ready", message: str = "", when: datetime = T0) -> Condition:
    return Condition(type="Active", status=status, reason=reason, message=message, last_transition_time=when)


# --- the condition upsert ---------------------------------------------------------------------------
def test_setting_a_condition_keeps_its_transition_time_while_the_status_stays() -> None:
    other = Condition(type="Other", status="True", reason="R", last_transition_time=T0)
    out = set_condition([active("True"), other], active("True", "StillReady", "new words"), now=LATER)
    assert [(cond.type, cond.reason, cond.last_transition_time) for cond in out] == [("Other", "R", T0), ("Active", "StillReady", T0)]


def test_setting_a_condition_to_another_status_stamps_the_time_of_the_change() -> None:
    out = set_condition([active("True")], active("False", "Broken"), now=LATER)
    assert [(cond.status, cond.last_transition_time) for cond in out] == [("False", LATER)]


def test_setting_a_new_condition_stamps_now_and_cuts_its_message_to_the_limit() -> None:
    long = Condition.model_construct(type="Active", status="True", reason="R", message="x" * (MAX_CONDITION_MESSAGE + 10))
    (out,) = set_condition(None, long, now=LATER)
    assert out.last_transition_time == LATER and len(out.message) == MAX_CONDITION_MESSAGE


# --- the workload predicates ------------------------------------------------------------------------
def workload(status: dict[str, Any] | None = None, **spec: Any) -> kueue.Workload:
    return kueue.Workload.model_validate(
        {
            "metadata": {
                "name": "job-train-abcde",
                "namespace": "ns",
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}],
            },
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}], **spec},
            "status": status,
        }
    )


def reserved(status: str) -> dict[str, Any]:
    return {"type": "QuotaReserved", "status": status, "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def test_quota_is_reserved_only_with_an_admission_and_quota_reserved_true() -> None:
    admission = {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]}
    assert has_quota_reservation(workload({"admission": admission, "conditions": [reserved("True")]}))
    assert not has_quota_reservation(workload({"conditions": [reserved("True")]}))
    assert not has_quota_reservation(workload({"admission": admission, "conditions": [reserved("False")]}))
    # The CLI's states follow the same rule: without an admission the job is still Pending.
    (view,) = views.job_views([workload({"conditions": [reserved("True")]})], checks={}, local_queues={})
    assert view.state == "Pending"


def test_priority_is_the_workloads_own_else_its_class_value_else_zero() -> None:
    wpc = kueue.WorkloadPriorityClass.model_validate({"metadata": {"name": "high"}, "value": 100})
    by_class = workload(priorityClassRef={"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"})
    assert workload_priority(by_class, {"high": wpc}) == 100
    assert workload_priority(by_class) == 0
    assert workload_priority(workload(priority=7)) == 7


def test_the_multikueue_check_is_found_by_its_controller_name() -> None:
    checks = {
        name: kueue.AdmissionCheck.model_validate({"metadata": {"name": name}, "spec": {"controllerName": controller}})
        for name, controller in (("prov", "kueue.x-k8s.io/provisioning-request"), ("mk", "kueue.x-k8s.io/multikueue"))
    }
    states = [{"name": name, "state": "Pending", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"} for name in ("prov", "mk")]
    found = multikueue_check_state(workload({"admissionChecks": states}), checks)
    assert found is not None and found.name == "mk"
    assert multikueue_check_state(workload({"admissionChecks": states[:1]}), checks) is None


def test_a_workload_is_known_by_its_jobs_name() -> None:
    wl = workload()
    assert owner_name(wl) == "train"
    wl.metadata.owner_references = None
    assert owner_name(wl) == "job-train-abcde"


@pytest.mark.parametrize(
    ("reason", "labels"),
    [
        ("Preempted", ("Preempted", "")),
        ("Deactivated", ("Deactivated", "")),
        ("DeactivatedDueToEvictedOnManagerCluster", ("Deactivated", "EvictedOnManagerCluster")),
    ],
)
def test_eviction_reasons_split_into_reason_and_cause(reason: str, labels: tuple[str, str]) -> None:
    assert eviction_labels(reason) == labels


# --- Kueue's Misconfigured messages ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (missing_local_queue_message("user-queue"), MISSING_LOCAL_QUEUE),
        (missing_cluster_queue_message("cq"), MISSING_CLUSTER_QUEUE),
        (missing_namespace_message("ns"), MISSING_NAMESPACE),
        ('namespace "ns" not found', MISSING_NAMESPACE),  # MultiKueue's, when it cannot copy a Workload
        (NAMESPACE_NOT_SELECTED_MESSAGE, NAMESPACE_NOT_SELECTED),
        ("couldn't assign flavors to pod set main: insufficient quota for cpu", ""),
    ],
)
def test_each_misconfiguration_the_engine_writes_is_recognised(message: str, kind: str) -> None:
    assert misconfiguration(message) == kind


def test_a_workers_verdict_names_its_misconfiguration_from_the_workers_own_message() -> None:
    copy = workload({"conditions": [dict(reserved("False"), message=missing_local_queue_message("q"))]})
    verdict = worker_verdict(Remote("worker1", True, copy=copy), nominated=["worker1"], winner="", reserved=True)
    assert (verdict.text, verdict.problem) == ("waiting: LocalQueue q doesn't exist", MISSING_LOCAL_QUEUE)


# --- the Preempted message -------------------------------------------------------------------------
def test_the_preempted_message_reads_back_as_the_scheduler_wrote_it() -> None:
    written = PreemptionMessage(
        preemptor_uid="11111111-2222-3333-4444-555555555555",
        preemptor_job_uid="UNKNOWN",
        reason=preemption.IN_COHORT_RECLAMATION,
        preemptor_path="/org/research/team-a-cq",
        preemptee_path="/org/research/team-b-cq",
    )
    message = preemption_message(written)
    assert message == (
        "Preempted to accommodate a workload (UID: 11111111-2222-3333-4444-555555555555, JobUID: UNKNOWN) due to "
        "reclamation within the cohort; preemptor path: /org/research/team-a-cq; preemptee path: /org/research/team-b-cq"
    )
    read = parse_preemption_message(message)
    assert read == written
    assert (read.preemptor_cluster_queue, read.cohort) == ("team-a-cq", "research")


def test_an_older_kueues_preempted_message_without_paths_still_names_the_preemptor() -> None:
    read = parse_preemption_message("Preempted to accommodate a workload (UID: abc) due to prioritization in the ClusterQueue")
    assert read is not None
    assert (read.preemptor_uid, read.reason, read.preemptor_cluster_queue, read.cohort) == ("abc", preemption.IN_CLUSTER_QUEUE, "", "")
    assert parse_preemption_message("The workload is deactivated") is None
