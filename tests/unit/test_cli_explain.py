"""`kfed explain` verdicts on known states, each ending with one line to act on."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from manager.api import kueue
from manager.cli import views
from manager.cli.explain import Candidate, explain, explanation_record, explanation_text
from manager.multikueue.rules.reads import Remote

MK = kueue.AdmissionCheck.model_validate({"metadata": {"name": "mk"}, "spec": {"controllerName": "kueue.x-k8s.io/multikueue"}})
CQ = kueue.ClusterQueue.model_validate(
    {
        "metadata": {"name": "cq"},
        "spec": {
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 4}]}]}]
        },
        "status": {"flavorsReservation": [{"name": "f", "resources": [{"name": "cpu", "total": "3"}]}]},
    }
)


def cond(kind: str, status: str, reason: str = "R", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": "2026-11-21T11:00:00Z"}


def workload(status: dict[str, Any]) -> kueue.Workload:
    return kueue.Workload.model_validate(
        {
            "metadata": {
                "name": "job-train-abcde",
                "namespace": "ns",
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}],
            },
            "spec": {"queueName": "user-queue", "podSets": [{"name": "main", "count": 1, "template": {}}]},
            "status": status,
        }
    )


def copy(*conditions: dict[str, Any]) -> kueue.Workload:
    return kueue.Workload.model_validate(
        {
            "metadata": {"name": "job-train-abcde", "namespace": "ns"},
            "spec": {"queueName": "user-queue", "podSets": [{"name": "main", "count": 1, "template": {}}]},
            "status": {"conditions": list(conditions)},
        }
    )


def texts(candidates: list[Candidate]) -> list[str]:
    return [candidate.text() for candidate in candidates]


def run(wl: kueue.Workload, remotes: list[Remote]) -> str:
    lq = kueue.LocalQueue.model_validate({"metadata": {"name": "user-queue", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}})
    view = views.job_views([wl], checks={"mk": MK}, local_queues={lq.key: lq}, positions={wl.key: 1})[0]
    return explanation_text(explain(view=view, wl=wl, cq=CQ, remotes=remotes))


ADMISSION = {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]}
PENDING_CHECK = [{"name": "mk", "state": "Pending", "message": "", "lastTransitionTime": "2026-11-21T11:00:00Z"}]


def test_a_job_waiting_for_quota_on_the_manager_shows_the_numbers_and_what_to_do() -> None:
    wl = workload(
        {"conditions": [cond("QuotaReserved", "False", "Pending", "insufficient quota for cpu in flavor f, request (2) > 1 free")]}
    )
    text = run(wl, [Remote("worker1", True), Remote("worker2", False, "ClientConnectionFailed", error="dial tcp: refused")])
    assert text.splitlines() == [
        "Job ns/train (Workload job-train-abcde), queue user-queue -> ClusterQueue cq",
        "State: Pending, position 1 in its ClusterQueue",
        "",
        "Manager:",
        "  waiting for quota: insufficient quota for cpu in flavor f, request (2) > 1 free",
        "  ClusterQueue cq: f: cpu 3/4 (reserved/nominal)",
        "  preemption candidates: none (nothing its preemption policy allows it to take, in its queue or its cohort)",
        "",
        "Workers:",
        "  worker1  not nominated yet: the manager has not reserved quota",
        "  worker2  unreachable (ClientConnectionFailed): dial tcp: refused",
        "",
        "Next: It waits for quota in ClusterQueue cq: running jobs must finish first, or raise its quota.",
    ]


def test_a_job_asking_for_a_resource_its_queue_does_not_cover_says_which_queue_lacks_it_and_how_to_add_it() -> None:
    reason = "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in ClusterQueue"
    wl = workload({"conditions": [cond("QuotaReserved", "False", "Pending", reason)]})
    text = run(wl, [Remote("worker1", True)])
    assert text.splitlines()[-1] == (
        "Next: ClusterQueue cq has no quota for nvidia.com/gpu, so no finish will help: add it to a resourceGroup's "
        "coveredResources, with a nominalQuota in a flavor, or remove the request from the job."
    )
    assert "running jobs must finish first" not in text


def test_a_job_no_worker_could_ever_admit_shows_each_workers_largest_offer_and_what_to_do() -> None:
    never = "no worker can ever admit it: needs cpu 12; largest worker offers cpu 8 (worker1), cpu 6 (worker2)"
    wl = workload({"conditions": [cond("QuotaReserved", "False", "ExceedsMaxQuota", never)]})
    text = run(wl, [Remote("worker1", True), Remote("worker2", True)])
    assert f"  waiting for quota: {never}" in text.splitlines()
    assert "preemption candidates" not in text
    assert text.splitlines()[-1] == "Next: No worker could ever admit it: lower its requests, or raise a worker's quota to what it needs."


def test_a_job_refused_because_a_worker_lacks_its_local_queue_says_where_to_create_it() -> None:
    never = "no worker can ever admit it: needs cpu 1; largest worker offers cpu 0 (worker1); worker2: LocalQueue user-queue doesn't exist"
    wl = workload({"conditions": [cond("QuotaReserved", "False", "ExceedsMaxQuota", never)]})
    text = run(wl, [Remote("worker1", True), Remote("worker2", True)])
    assert text.splitlines()[-1] == "Next: Create LocalQueue user-queue in namespace ns on worker2, as on the manager."


def test_a_job_a_worker_cannot_take_for_lack_of_a_local_queue_says_where_to_create_it() -> None:
    wl = workload(
        {
            "admission": ADMISSION,
            "conditions": [cond("QuotaReserved", "True")],
            "admissionChecks": PENDING_CHECK,
            "nominatedClusterNames": ["worker1", "worker2"],
        }
    )
    full = copy(cond("QuotaReserved", "False", "Pending", "couldn't assign flavors: insufficient quota for cpu"))
    missing = copy(cond("QuotaReserved", "False", "Misconfigured", "LocalQueue user-queue doesn't exist"))
    text = run(wl, [Remote("worker1", True, copy=full), Remote("worker2", True, copy=missing)])
    assert "  worker1  waiting: couldn't assign flavors: insufficient quota for cpu" in text
    assert "  worker2  waiting: LocalQueue user-queue doesn't exist" in text
    assert text.splitlines()[-1] == "Next: Create LocalQueue user-queue in namespace ns on worker2, as on the manager."


def test_a_running_job_names_its_worker() -> None:
    ready = [
        {"name": "mk", "state": "Ready", "message": 'The workload was admitted on "worker2"', "lastTransitionTime": "2026-11-21T11:00:00Z"}
    ]
    wl = workload(
        {
            "admission": ADMISSION,
            "clusterName": "worker2",
            "conditions": [cond("QuotaReserved", "True"), cond("Admitted", "True")],
            "admissionChecks": ready,
        }
    )
    text = run(wl, [Remote("worker1", True), Remote("worker2", True, copy=copy(cond("Admitted", "True")))])
    assert "State: Running on worker2" in text
    assert "  worker1  no copy: the job was admitted on worker2" in text
    assert "  worker2  admitted here: the Job runs on this worker" in text
    assert text.splitlines()[-1] == "Next: Nothing to do: it runs on worker2."


def test_preemption_candidates_are_the_lower_priority_workloads_of_its_queue() -> None:
    from manager.cli.explain import preemption_candidates

    cq = CQ.model_copy(deep=True)
    cq.spec.preemption = kueue.ClusterQueuePreemption(within_cluster_queue="LowerPriority")
    me = workload({}).model_copy(update={"spec": workload({}).spec.model_copy(update={"priority": 10})})

    def holder(name: str, priority: int, queue: str = "cq") -> kueue.Workload:
        other = workload({"admission": {**ADMISSION, "clusterQueue": queue}, "conditions": [cond("QuotaReserved", "True")]})
        other.metadata.name = name
        other.spec.priority = priority
        return other

    others = [holder("low", 1), holder("lowest", 0), holder("equal", 10), holder("elsewhere", 0, queue="other")]
    assert texts(preemption_candidates(me, cq, others)) == ["ns/lowest (priority 0)", "ns/low (priority 1)"]
    assert texts(preemption_candidates(me, CQ, others)) == []  # withinClusterQueue: Never


def test_preemption_candidates_include_workloads_of_borrowing_queues_in_the_cohort() -> None:
    from manager.cli.explain import preemption_candidates

    def queue(name: str, borrowed: str, reclaim: str | None = None) -> kueue.ClusterQueue:
        out = CQ.model_copy(deep=True)
        out.metadata.name = name
        out.spec.cohort_name = "research"
        if reclaim:
            out.spec.preemption = kueue.ClusterQueuePreemption(reclaim_within_cohort=reclaim)
        out.status = kueue.ClusterQueueStatus.model_validate(
            {"flavorsReservation": [{"name": "f", "resources": [{"name": "cpu", "total": "6", "borrowed": borrowed}]}]}
        )
        return out

    mine = queue("cq", "0", reclaim="LowerPriority")
    queues = {"cq": mine, "lender": queue("lender", "0"), "borrower": queue("borrower", "2"), "outsider": queue("outsider", "2")}
    queues["outsider"].spec.cohort_name = "other"
    me = workload({}).model_copy(update={"spec": workload({}).spec.model_copy(update={"priority": 10})})

    def holder(name: str, priority: int, queue_name: str) -> kueue.Workload:
        other = workload({"admission": {**ADMISSION, "clusterQueue": queue_name}, "conditions": [cond("QuotaReserved", "True")]})
        other.metadata.name = name
        other.spec.priority = priority
        return other

    others = [
        holder("b-low", 1, "borrower"),
        holder("b-high", 50, "borrower"),
        holder("l-low", 0, "lender"),
        holder("o-low", 0, "outsider"),
    ]
    # Only the borrowing queue of its own cohort, and (LowerPriority) only below its priority.
    assert texts(preemption_candidates(me, mine, others, queues)) == ["ns/b-low (priority 1, borrowing in borrower)"]
    mine.spec.preemption = kueue.ClusterQueuePreemption(reclaim_within_cohort="Any")
    assert texts(preemption_candidates(me, mine, others, queues)) == [
        "ns/b-low (priority 1, borrowing in borrower)",
        "ns/b-high (priority 50, borrowing in borrower)",
    ]
    mine.spec.preemption = None  # reclaimWithinCohort: Never
    assert texts(preemption_candidates(me, mine, others, queues)) == []


def test_equal_priority_is_a_candidate_only_when_newer_as_the_engine_decides() -> None:
    from manager.cli.explain import preemption_candidates

    cq = CQ.model_copy(deep=True)
    cq.spec.preemption = kueue.ClusterQueuePreemption(within_cluster_queue="LowerOrNewerEqualPriority")
    me = workload({})
    me.metadata.creation_timestamp = datetime(2026, 11, 21, 11, 0, tzinfo=UTC)

    def holder(name: str, created: datetime) -> kueue.Workload:
        other = workload({"admission": ADMISSION, "conditions": [cond("QuotaReserved", "True")]})
        other.metadata.name = name
        other.metadata.creation_timestamp = created
        return other

    others = [holder("newer", datetime(2026, 11, 21, 11, 30, tzinfo=UTC)), holder("older", datetime(2026, 11, 21, 10, 0, tzinfo=UTC))]
    assert texts(preemption_candidates(me, cq, others)) == ["ns/newer (priority 0)"]


def test_explain_json_is_built_from_the_same_findings_as_the_text() -> None:
    wl = workload(
        {
            "admission": ADMISSION,
            "conditions": [cond("QuotaReserved", "True")],
            "admissionChecks": PENDING_CHECK,
            "nominatedClusterNames": ["worker1"],
        }
    )
    lq = kueue.LocalQueue.model_validate({"metadata": {"name": "user-queue", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}})
    view = views.job_views([wl], checks={"mk": MK}, local_queues={lq.key: lq}, positions={wl.key: 1})[0]
    found = explain(view=view, wl=wl, cq=CQ, remotes=[Remote("worker1", True), Remote("worker2", False, "ClientConnectionFailed")])
    record = explanation_record(found)
    assert record["job"] == "ns/train" and record["state"] == "Dispatching"
    assert record["manager"] == [
        "quota reserved in ClusterQueue cq",
        "ClusterQueue cq: f: cpu 3/4 (reserved/nominal)",
        "admission check mk: Pending",
    ]
    assert record["workers"] == {"worker1": "no copy yet (nominated)", "worker2": "unreachable (ClientConnectionFailed)"}
    assert explanation_text(found).splitlines()[-1] == f"Next: {record['next']}"


def test_a_preempted_job_says_who_took_its_place() -> None:
    message = (
        "Preempted to accommodate a workload (UID: 11111111-2222-3333-4444-555555555555, JobUID: UNKNOWN) due to "
        "prioritization in the ClusterQueue; preemptor path: /cq; preemptee path: /cq"
    )
    wl = workload(
        {
            "conditions": [
                cond("QuotaReserved", "False", "Pending", message),
                cond("Evicted", "True", "Preempted", message),
                cond("Preempted", "True", "InClusterQueue", message),
            ]
        }
    )
    urgent = workload({}).model_copy(deep=True)
    urgent.metadata.name, urgent.metadata.uid, urgent.spec.priority = "job-urgent-x", "11111111-2222-3333-4444-555555555555", 50
    urgent.metadata.owner_references[0].name = "urgent"  # type: ignore[index]
    view = views.job_views([wl], checks={}, local_queues={}, known=[urgent])[0]
    text = explanation_text(explain(view=view, wl=wl, cq=CQ, remotes=[]))
    assert "State: Preempted" in text
    assert "  preempted by ns/urgent (priority 50) to make room in ClusterQueue cq" in text
    assert "11111111" not in text
    assert text.splitlines()[-1] == "Next: It was preempted and will be queued again; nothing to do unless it keeps happening."


@pytest.mark.parametrize(
    ("message", "next_line"),
    [
        (
            "LocalQueue user-queue doesn't exist",
            'Next: LocalQueue "user-queue" does not exist in namespace ns: create it, or pass --queue with an existing one.',
        ),
        (
            "ClusterQueue cq doesn't exist",
            'Next: LocalQueue ns/user-queue points to ClusterQueue "cq", which does not exist: create it, or fix spec.clusterQueue.',
        ),
        (
            "workload namespace doesn't match ClusterQueue selector",
            "Next: ClusterQueue cq does not select namespace ns (spec.namespaceSelector): "
            "label the namespace to match it, or widen the selector.",
        ),
    ],
)
def test_a_misconfigured_job_names_the_fix(message: str, next_line: str) -> None:
    wl = workload({"conditions": [cond("QuotaReserved", "False", "Misconfigured", message)]})
    assert run(wl, []).splitlines()[-1] == next_line
