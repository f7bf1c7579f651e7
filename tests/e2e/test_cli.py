"""The `kfed` fleet commands, run as a user runs them, against the federation."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest

from manager.api import kueue
from manager.api.core import Job
from manager.dev.local import LocalCluster
from tests.conftest import REPO_ROOT
from tests.e2e.federation import PARKED, Clients, Federation, job_manifest
from tests.harness import eventually


def kfed(manager: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "manager.cli.main", *args, f"--kubeconfig={manager.kubeconfig_path}"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )


def jobs_json(manager: LocalCluster, ns: str) -> dict[str, dict[str, Any]]:
    result = kfed(manager, "jobs", "-n", ns, "-o", "json")
    assert result.returncode == 0, result.stderr
    return {row["NAME"]: row for row in json.loads(result.stdout)}


@pytest.fixture
def tag() -> str:
    return f"c{uuid.uuid4().hex[:6]}"


async def test_jobs_shows_a_pending_job_with_quota_numbers_a_dispatching_one_and_a_running_one_with_its_cluster(
    fed: Federation, kube: Clients, tag: str
) -> None:
    ns = f"{tag}-cli"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 0}, labels=PARKED, tag=tag)
    await kube.manager.create(Job, job_manifest("runs", ns))
    await kube.manager.create(Job, job_manifest("too-big", ns, cpu="10"))

    async def settled() -> Any:
        rows = jobs_json(fed.manager, ns)
        return rows if rows.get("runs", {}).get("STATE") == "Running" and rows.get("too-big", {}).get("STATE") == "Pending" else None

    rows = await eventually(settled, timeout=60, what="one Job running and one pending in `kfed jobs`")
    assert rows["runs"]["CLUSTER"] == "worker1" and rows["runs"]["QUEUE"] == "user-queue"
    assert rows["too-big"]["POSITION"] == "1"
    assert "insufficient quota for cpu" in rows["too-big"]["REASON"] and "request (10) > maximum capacity (4)" in rows["too-big"]["REASON"]
    running = kfed(fed.manager, "jobs", "-n", ns, "--state", "running")
    assert running.returncode == 0 and "runs" in running.stdout and "too-big" not in running.stdout
    table = kfed(fed.manager, "jobs", "-n", ns)
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split() == ["NAMESPACE", "NAME", "QUEUE", "STATE", "CLUSTER", "AGE", "POSITION", "REASON"]


async def test_a_job_waiting_because_a_worker_lacks_its_local_queue_says_so(fed: Federation, kube: Clients, tag: str) -> None:
    ns = f"{tag}-cli-nolq"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 0, "worker2": 0}, labels=PARKED, tag=tag)
    await kube.workers["worker2"].delete(kueue.LocalQueue, "user-queue", namespace=ns)
    await kube.manager.create(Job, job_manifest("stuck", ns))

    async def explained() -> Any:
        row = jobs_json(fed.manager, ns).get("stuck")
        return row if row and "worker2: LocalQueue user-queue doesn't exist" in row["REASON"] else None

    row = await eventually(explained, timeout=60, what="`kfed jobs` naming worker2's missing LocalQueue")
    assert row["STATE"] == "Dispatching"


async def test_status_and_clusters_show_every_worker_and_an_unreachable_one(fed: Federation, kube: Clients) -> None:
    clusters = kfed(fed.manager, "clusters", "-o", "json")
    assert clusters.returncode == 0, clusters.stderr
    rows = {row["NAME"]: row for row in json.loads(clusters.stdout)}
    assert set(rows) == {"worker1", "worker2"}
    assert rows["worker1"]["ACTIVE"] == "True" and rows["worker1"]["CPU"].count("/") == 1
    fed.stop_apiserver("worker2")
    try:

        async def unreachable() -> Any:
            result = kfed(fed.manager, "clusters", "-o", "json")
            row = {r["NAME"]: r for r in json.loads(result.stdout)}["worker2"]
            return row if row["ACTIVE"] == "False" and row["WORKLOADS"].startswith("unreachable") else None

        row = await eventually(unreachable, timeout=60, what="worker2 shown unreachable")
        assert row["REASON"] == "ClientConnectionFailed"
        status = kfed(fed.manager, "status")
        assert status.returncode == 0, status.stderr
        assert "worker2" in status.stdout and "ClientConnectionFailed" in status.stdout and "Jobs: " in status.stdout
    finally:
        fed.start_apiserver("worker2")


def test_a_missing_kubeconfig_is_one_clear_line_and_a_non_zero_exit(tmp_path: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "manager.cli.main", "jobs", f"--kubeconfig={tmp_path / 'nope'}"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: cannot read kubeconfig {tmp_path / 'nope'}: No such file or directory"]
