"""The fleet views and printers, on known objects, against golden outputs."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.api import kueue
from manager.cli import views

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
MK = kueue.AdmissionCheck.model_validate({"metadata": {"name": "mk"}, "spec": {"controllerName": "kueue.x-k8s.io/multikueue"}})


def cond(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": "2026-11-21T11:59:00Z"}


def wl(name: str, *, created: str, priority: int = 0, status: dict[str, Any] | None = None, uid: str = "") -> kueue.Workload:
    return kueue.Workload.model_validate(
        {
            "metadata": {
                "name": f"job-{name}-abcde",
                "namespace": "team-a",
                "uid": uid or None,
                "creationTimestamp": created,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": name, "controller": True}],
            },
            "spec": {"queueName": "user-queue", "priority": priority, "podSets": [{"name": "main", "count": 1, "template": {}}]},
            "status": status,
        }
    )


URGENT_UID = "5f1c2a9e-3b7d-4c1e-9a0b-1d2e3f4a5b6c"
RECLAIMED = (
    f"Preempted to accommodate a workload (UID: {URGENT_UID}, JobUID: 0b9c8d7e-6f5a-4b3c-2d1e-0f9e8d7c6b5a) due to "
    "reclamation within the cohort; preemptor path: /research/team-a-cq; preemptee path: /research/team-b-cq"
)
ADMISSION = {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": 1}]}
WORKLOADS = [
    wl(
        "train",
        created="2026-11-21T11:00:00Z",
        status={
            "admission": ADMISSION,
            "clusterName": "worker1",
            "conditions": [cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")],
            "admissionChecks": [
                {
                    "name": "mk",
                    "state": "Ready",
                    "message": 'The workload was admitted on "worker1"',
                    "lastTransitionTime": "2026-11-21T11:59:00Z",
                }
            ],
        },
    ),
    wl(
        "eval",
        created="2026-11-21T11:58:00Z",
        status={
            "admission": ADMISSION,
            "nominatedClusterNames": ["worker1", "worker2"],
            "conditions": [cond("QuotaReserved", "True", "QuotaReserved")],
            "admissionChecks": [{"name": "mk", "state": "Pending", "message": "", "lastTransitionTime": "2026-11-21T11:59:00Z"}],
        },
    ),
    wl(
        "big",
        created="2026-11-21T11:59:30Z",
        status={"conditions": [cond("QuotaReserved", "False", "Pending", "insufficient quota for cpu: 10 > 4")]},
    ),
    wl(
        "urgent",
        created="2026-11-21T11:59:50Z",
        priority=100,
        uid=URGENT_UID,
        status={"conditions": [cond("QuotaReserved", "False", "Pending", "waiting")]},
    ),
    wl("done", created="2026-11-21T10:00:00Z", status={"conditions": [cond("Finished", "True", "Failed", "BackoffLimitExceeded")]}),
    wl(
        "nightly-evaluation-of-the-large-model",
        created="2026-11-21T09:00:00Z",
        status={
            "conditions": [
                cond("QuotaReserved", "False", "Pending", RECLAIMED),
                cond("Evicted", "True", "Preempted", RECLAIMED),
                cond("Preempted", "True", "InCohortReclamation", RECLAIMED),
                cond("Requeued", "True", "Preempted", RECLAIMED),
            ]
        },
    ),
    wl(
        "slow-start",
        created="2026-11-21T08:00:00Z",
        status={"conditions": [cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout default/slow-start")]},
    ),
]

GOLDEN = Path(__file__).parent / "golden"
# What the manager's visibility API answers for the two pending ones (positions from 1).
POSITIONS = {"team-a/job-urgent-abcde": 1, "team-a/job-big-abcde": 2}


def golden(name: str, text: str) -> None:
    """Compare with tests/unit/golden/NAME; KFED_UPDATE_GOLDEN=1 rewrites it (review the diff)."""
    path = GOLDEN / name
    if os.environ.get("KFED_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()
    assert all(len(line) <= 80 for line in text.splitlines()) or name.endswith("-wide.txt")


def test_jobs_table_fits_80_columns_with_states_clusters_positions_and_plain_reasons() -> None:
    rows = views.job_views(WORKLOADS, checks={"mk": MK}, local_queues={}, positions=POSITIONS)
    text = views.render(views.job_rows(rows, now=NOW), output="table")
    golden("jobs.txt", text)
    assert "…" in text  # the long name and reasons are cut, not wrapped
    assert URGENT_UID not in text and "UID" not in text


def test_jobs_wide_shows_every_value_whole() -> None:
    rows = views.job_views(WORKLOADS, checks={"mk": MK}, local_queues={}, positions=POSITIONS)
    text = views.render(views.job_rows(rows, now=NOW, wide=True, all_namespaces=True), output="table", wide=True)
    golden("jobs-wide.txt", text)
    assert "nightly-evaluation-of-the-large-model" in text and "…" not in text
    assert "preempted by team-a/urgent (priority 100) to reclaim quota lent to cohort research" in text


def test_jobs_names_the_kind_only_when_the_list_holds_jobs_and_jobsets() -> None:
    jobset = wl("pretrain", created="2026-11-21T11:30:00Z").model_copy(deep=True)
    jobset.metadata.owner_references[0].kind = "JobSet"  # type: ignore[index]
    jobset.metadata.owner_references[0].api_version = "jobset.x-k8s.io/v1alpha2"  # type: ignore[index]
    mixed = views.job_views([WORKLOADS[0], jobset], checks={"mk": MK}, local_queues={})
    assert [row["NAME"] for row in views.job_rows(mixed, now=NOW)] == ["job/train", "jobset/pretrain"]
    assert [record["kind"] for record in views.job_records(mixed)] == ["Job", "JobSet"]
    jobsets_only = views.job_views([jobset], checks={"mk": MK}, local_queues={})
    assert [row["NAME"] for row in views.job_rows(jobsets_only, now=NOW)] == ["pretrain"]


def test_jobs_json_has_stable_camel_case_keys_and_the_full_detail() -> None:
    rows = views.job_views(WORKLOADS, checks={"mk": MK}, local_queues={}, positions=POSITIONS)
    data = {record["name"]: record for record in json.loads(views.dump(views.job_records(rows), output="json"))}
    assert data["train"] == {
        "kind": "Job",
        "name": "train",
        "namespace": "team-a",
        "workload": "job-train-abcde",
        "queue": "user-queue",
        "clusterQueue": "cq",
        "cluster": "worker1",
        "state": "Running",
        "reason": "",
        "message": "",
        "position": None,
        "priority": 0,
        "created": "2026-11-21T11:00:00Z",
        "preemptedBy": None,
    }
    victim = data["nightly-evaluation-of-the-large-model"]
    assert victim["state"] == "Preempted"
    assert victim["message"] == RECLAIMED  # the UIDs stay in -o json
    assert victim["preemptedBy"] == {
        "uid": URGENT_UID,
        "reason": "InCohortReclamation",
        "namespace": "team-a",
        "name": "urgent",
        "workload": "job-urgent-abcde",
        "priority": 100,
        "clusterQueue": "team-a-cq",
        "cohort": "research",
    }
    assert yaml.safe_load(views.dump(views.job_records(rows), output="yaml")) == list(data.values())


@pytest.mark.parametrize(
    ("reason", "preemptor_path", "known", "sentence"),
    [
        ("InClusterQueue", "/research/team-b-cq", True, "preempted by team-a/urgent (priority 100) to make room in ClusterQueue team-b-cq"),
        (
            "InCohortReclamation",
            "/research/team-a-cq",
            True,
            "preempted by team-a/urgent (priority 100) to reclaim quota lent to cohort research",
        ),
        (
            "InCohortReclaimWhileBorrowing",
            "/research/team-a-cq",
            True,
            "preempted by team-a/urgent (priority 100) of ClusterQueue team-a-cq, which reclaims quota in cohort research while it borrows",
        ),
        (
            "InCohortFairSharing",
            "/research/team-a-cq",
            True,
            "preempted by team-a/urgent (priority 100) of ClusterQueue team-a-cq, to restore fair sharing in cohort research",
        ),
        (
            "InCohortReclamation",
            "/research/team-a-cq",
            False,
            "preempted by a workload that is no longer listed to reclaim quota lent to cohort research",
        ),
    ],
)
def test_each_kueue_preemption_reason_is_one_plain_sentence_without_uids(
    reason: str, preemptor_path: str, known: bool, sentence: str
) -> None:
    message = RECLAIMED.replace("/research/team-a-cq", preemptor_path)
    victim = wl(
        "victim",
        created="2026-11-21T11:00:00Z",
        status={"conditions": [cond("Evicted", "True", "Preempted", message), cond("Preempted", "True", reason, message)]},
    )
    view = views.job_views([victim], checks={}, local_queues={}, known=WORKLOADS if known else ())[0]
    assert (view.state, view.reason) == ("Preempted", sentence)


@pytest.mark.parametrize(
    ("reason", "message", "sentence"),
    [
        (
            "PodsReadyTimeout",
            "Exceeded the PodsReady timeout",
            "evicted: its pods were not ready in time (waitForPodsReady); it is queued again",
        ),
        ("ClusterQueueStopped", "The ClusterQueue is stopped", "evicted: its ClusterQueue was stopped"),
        (
            "Deactivated",
            "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
            "evicted: the workload is deactivated due to exceeding the maximum number of re-queuing retries",
        ),
        ("SomethingNew", "by 5f1c2a9e-3b7d-4c1e-9a0b-1d2e3f4a5b6c", "evicted (SomethingNew): by"),
    ],
)
def test_evictions_read_as_sentences(reason: str, message: str, sentence: str) -> None:
    evicted = wl("e", created="2026-11-21T11:00:00Z", status={"conditions": [cond("Evicted", "True", reason, message)]})
    view = views.job_views([evicted], checks={}, local_queues={})[0]
    assert (view.state, view.reason) == ("Evicted", sentence)


def test_a_job_in_its_pods_ready_backoff_says_until_when() -> None:
    status = {
        "conditions": [
            cond("QuotaReserved", "False", "Pending"),
            cond("Requeued", "False", "PodsReadyTimeout", "Exceeded the PodsReady timeout"),
        ],
        "requeueState": {"count": 2, "requeueAt": "2026-11-21T12:02:00Z"},
    }
    view = views.job_views([wl("b", created="2026-11-21T11:00:00Z", status=status)], checks={}, local_queues={})[0]
    assert (view.state, view.reason) == (
        "Pending",
        "its pods were not ready in time: waiting out its requeue backoff until 2026-11-21T12:02:00Z; requeued 2 time(s)",
    )


@pytest.mark.parametrize(
    ("natural", "widths"),
    [
        ([9, 4, 10, 6], [9, 4, 10, 6]),  # fits: untouched
        ([9, 40, 10, 60], [9, 31, 10, 24]),  # REASON gives way first, down to 24, then the long NAME
        ([9, 12, 10, 90], [9, 12, 10, 43]),  # REASON alone when that is enough
        ([9, 30, 60, 60], [9, 21, 20, 24]),  # then the widest of the others, in turn
        ([9, 16, 16, 90], [9, 16, 16, 33]),  # names of 16 or less stay whole while REASON keeps 12
    ],
)
def test_fit_widths_cuts_the_free_text_first(natural: list[int], widths: list[int]) -> None:
    headings = ["NAMESPACE", "NAME", "QUEUE", "REASON"]
    fitted = views.fit_widths(headings, natural, width=80)
    assert fitted == widths
    assert sum(fitted) + views.COLUMN_GAP * 3 <= 80


def queue(name: str, cohort: str, total: str, nominal: int, stop: str = "None") -> kueue.ClusterQueue:
    return kueue.ClusterQueue.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "cohortName": cohort,
                "stopPolicy": stop,
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [{"name": "cpu", "nominalQuota": nominal}, {"name": "memory", "nominalQuota": "64Gi"}],
                            }
                        ],
                    }
                ],
            },
            "status": {
                "pendingWorkloads": 2,
                "admittedWorkloads": 5,
                "flavorsReservation": [
                    {"name": "default-flavor", "resources": [{"name": "cpu", "total": total}, {"name": "memory", "total": "12Gi"}]}
                ],
                "conditions": [cond("Active", "True", "Ready", "Can admit new workloads")],
            },
        }
    )


QUEUES = [queue("team-a-cq", "research", "7", 8), queue("team-b-cq", "research", "0", 8, stop="Hold")]
LQS = [kueue.LocalQueue.model_validate({"metadata": {"name": "user-queue", "namespace": "team-a"}, "spec": {"clusterQueue": "team-a-cq"}})]


def test_queues_table_fits_80_columns() -> None:
    golden("queues.txt", views.queues_text(QUEUES, LQS))


def test_queues_json_has_camel_case_keys() -> None:
    records = views.queue_records(QUEUES, LQS)
    assert records[0]["usage"] == [
        {
            "flavor": "default-flavor",
            "resources": [{"name": "cpu", "reserved": "7", "nominal": "8"}, {"name": "memory", "reserved": "12Gi", "nominal": "64Gi"}],
        }
    ]
    assert records[2] == {
        "kind": "LocalQueue",
        "name": "user-queue",
        "namespace": "team-a",
        "clusterQueue": "team-a-cq",
        "pending": 0,
        "admitted": 0,
        "stopPolicy": "None",
    }


UP = views.WorkerView(
    "worker1",
    active="True",
    reason="Active",
    since=datetime(2026, 11, 20, 9, 0, 0, tzinfo=UTC),
    reachable=True,
    running=2,
    pending=1,
    usage={"cpu": (3000, 8000), "memory": (2 * 2**30, 32 * 2**30)},
)
DOWN = views.WorkerView(
    "worker2",
    active="False",
    reason="ClientConnectionFailed",
    since=datetime(2026, 11, 21, 11, 55, 0, tzinfo=UTC),
    error="unreachable: Get https://10.0.0.7:6443/apis/kueue.x-k8s.io/v1beta2/clusterqueues: dial tcp: connection refused",
)


def test_clusters_table_fits_80_columns_and_shows_the_reason_of_an_inactive_worker() -> None:
    golden("clusters.txt", views.render(views.cluster_rows([DOWN, UP], now=NOW), output="table"))


def test_clusters_json_has_camel_case_keys() -> None:
    records = views.cluster_records([DOWN, UP])
    assert [r["name"] for r in records] == ["worker1", "worker2"]
    assert records[0]["usage"] == {"cpu": {"reserved": 3000, "nominal": 8000}, "memory": {"reserved": 2 * 2**30, "nominal": 32 * 2**30}}
    assert records[1]["reachable"] is False and records[1]["running"] is None


def test_status_fits_80_columns() -> None:
    jobs = views.job_views(WORKLOADS, checks={"mk": MK}, local_queues={})
    text = views.status_text(manager="https://127.0.0.1:6443 (reachable)", workers=[DOWN, UP], cluster_queues=QUEUES, jobs=jobs, now=NOW)
    golden("status.txt", text)
    assert text.splitlines()[-2:] == [
        "Jobs: Pending 2, QuotaReserved 0, Dispatching 1, Running 1, Succeeded 0,",
        "      Failed 1, Preempted 1, Evicted 1",
    ]


def test_an_empty_listing_says_so() -> None:
    assert views.render([], output="table") == "No resources found.\n"
    assert views.render([], output="json") == "[]\n"


def test_an_active_worker_that_cannot_be_read_says_why_in_a_word_and_wide_says_it_all() -> None:
    broken = views.WorkerView("worker3", active="True", reason="Active", error="cannot use its kubeconfig: Secret w3: not found")
    gpus = views.WorkerView("worker4", active="True", reachable=True, usage={"nvidia.com/gpu": (2000, 8000)})
    (short, with_gpu) = views.cluster_rows([broken, gpus], now=NOW)
    assert (short["REASON"], short["RUNNING"], short["GPU"], with_gpu["GPU"]) == ("cannot use its kubeconfig", "-", "", "2/8")
    assert views.cluster_rows([broken], now=NOW, wide=True)[0]["REASON"] == "cannot use its kubeconfig: Secret w3: not found"
    assert "GPU" not in views.cluster_rows([broken], now=NOW)[0]  # no worker has GPUs: no column for them


def test_a_worker_says_which_namespace_propagation_keeps_and_why() -> None:
    kept = "namespace team-a kept: holds RoleBinding admins, Secret creds, which kfed did not create"
    item = {"metadata": {"name": "worker1"}, "active": "True", "reachable": True, "keptNamespaces": kept}
    view = views.worker_view_from(item)
    assert views.cluster_rows([view], now=NOW)[0]["REASON"] == "NamespacesKept"
    assert views.cluster_rows([view], now=NOW, wide=True)[0]["REASON"] == f"NamespacesKept: {kept}"
    assert views.cluster_records([view])[0]["keptNamespaces"] == kept
    drifting = views.WorkerView(
        "worker1", active="True", reachable=True, queue_drift="LocalQueue a/q points at ClusterQueue cq", kept_namespaces=kept
    )
    assert views.cluster_rows([drifting], now=NOW)[0]["REASON"] == "ClusterQueueMissing; NamespacesKept"


def test_a_position_is_shown_only_as_the_visibility_api_gives_it_and_only_for_a_pending_job() -> None:
    rows = {v.name: v.position for v in views.job_views(WORKLOADS, checks={"mk": MK}, local_queues={}, positions=POSITIONS)}
    assert (rows["urgent"], rows["big"], rows["train"]) == (1, 2, None)
    unknown = {v.name: v.position for v in views.job_views(WORKLOADS, checks={"mk": MK}, local_queues={})}
    assert unknown["urgent"] is None and unknown["big"] is None  # not served or not readable: none made up
    running = views.job_views(WORKLOADS, checks={"mk": MK}, local_queues={}, positions={"team-a/job-train-abcde": 3})
    assert {v.name: v.position for v in running}["train"] is None
