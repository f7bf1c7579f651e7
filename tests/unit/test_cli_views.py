"""The fleet views and printers, on known objects, against golden outputs."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from manager.api import kueue
from manager.cli import views

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
MK = kueue.AdmissionCheck.model_validate({"metadata": {"name": "mk"}, "spec": {"controllerName": "kueue.x-k8s.io/multikueue"}})


def cond(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": "2026-11-21T11:59:00Z"}


def wl(name: str, *, created: str, priority: int = 0, status: dict[str, Any] | None = None) -> kueue.Workload:
    return kueue.Workload.model_validate(
        {
            "metadata": {
                "name": f"job-{name}-abcde",
                "namespace": "team-a",
                "creationTimestamp": created,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": name, "controller": True}],
            },
            "spec": {"queueName": "user-queue", "priority": priority, "podSets": [{"name": "main", "count": 1, "template": {}}]},
            "status": status,
        }
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
        status={"conditions": [cond("QuotaReserved", "False", "Pending", "waiting")]},
    ),
    wl("done", created="2026-11-21T10:00:00Z", status={"conditions": [cond("Finished", "True", "Failed", "BackoffLimitExceeded")]}),
]

GOLDEN = Path(__file__).parent / "golden"


def test_jobs_table_states_clusters_positions_and_reasons() -> None:
    rows = views.job_views(WORKLOADS, checks={"mk": MK}, local_queues={})
    text = views.render(views.job_rows(rows, now=NOW), output="table", width=120)
    assert text == (GOLDEN / "jobs.txt").read_text()


def test_jobs_json_is_exact_and_machine_readable() -> None:
    rows = views.job_views(WORKLOADS[:1], checks={"mk": MK}, local_queues={})
    data = json.loads(views.render(views.job_rows(rows, now=NOW, wide=True), output="json"))
    assert data == [
        {
            "NAMESPACE": "team-a",
            "NAME": "train",
            "QUEUE": "user-queue",
            "STATE": "Running",
            "CLUSTER": "worker1",
            "AGE": "1h",
            "POSITION": "",
            "REASON": "",
            "WORKLOAD": "job-train-abcde",
            "CLUSTERQUEUE": "cq",
            "PRIORITY": "0",
        }
    ]


def test_clusters_table_shows_quota_use_and_the_reason_of_an_inactive_worker() -> None:
    up = views.WorkerView(
        "worker1",
        active="True",
        reason="Active",
        reachable=True,
        running=2,
        pending=1,
        usage={"cpu": (3000, 8000), "memory": (2 * 2**30, 32 * 2**30)},
    )
    down = views.WorkerView("worker2", active="False", reason="ClientConnectionFailed", error="unreachable")
    text = views.render(views.cluster_rows([down, up], now=NOW), output="table", width=120)
    assert text == (GOLDEN / "clusters.txt").read_text()


def test_an_empty_listing_says_so() -> None:
    assert views.render([], output="table") == "No resources found.\n"
    assert views.render([], output="json") == "[]\n"
