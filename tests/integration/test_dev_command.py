"""`kfed dev up/status/down` as a newcomer runs them, and the harness's fault helpers."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from manager.dev import federation, kind
from tests.conftest import REPO_ROOT
from tests.harness import KubeconfigFile, api_for, batch_api, core_api, custom_api, eventually
from tests.unit.test_examples_and_docs import printed_commands


def kfed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "manager.cli.main", *args], capture_output=True, text=True, cwd=REPO_ROOT)


def run_as_printed(commands: list[str]) -> subprocess.CompletedProcess[str]:
    """Run commands in one shell from the repository root, as a user pastes them; stop at the first failure."""
    script = "\n".join(["set -ex", *commands])
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, env=dict(os.environ), timeout=120)


async def test_dev_up_leaves_a_ready_federation_whose_printed_steps_run_and_down_stops_it(tmp_path: Path) -> None:
    up = kfed("dev", "up", "--workers", "2", "--jobs", "--dir", str(tmp_path))
    try:
        assert up.returncode == 0, up.stderr
        assert f"export KUBECONFIG={tmp_path / 'manager.kubeconfig'}" in up.stdout
        steps = printed_commands(up.stdout)
        assert f"kubectl create -f {federation.LONG_JOB}" in steps
        assert steps[-1] == f"kfed dev down --dir {tmp_path}"
        assert "Queues follow the manager (multiKueue.propagateQueues)" in up.stdout
        await a_new_namespace_on_the_manager_runs_its_job(tmp_path)
        ran = run_as_printed(steps[:-1])
        assert ran.returncode == 0, ran.stderr
        assert "clusterqueue.kueue.x-k8s.io/cluster-queue" in ran.stdout
        assert "job.batch/sample-job-" in ran.stdout and "job.batch/long-job-" in ran.stdout
        await printed_jobs_run_and_queue(tmp_path, steps)
        status = kfed("dev", "status", "--dir", str(tmp_path))
        assert status.returncode == 0, status.stdout + status.stderr
        assert [line.split()[0] for line in status.stdout.splitlines()[1:]] == ["manager", "worker1", "worker2"]
        assert "manager=up" in status.stdout.splitlines()[1]
        assert all("worker_agent=up" in line for line in status.stdout.splitlines()[2:])

        async with api_for(KubeconfigFile(tmp_path / "manager.kubeconfig")) as api:
            custom = custom_api(api)
            config = await custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "multikueueconfigs", "multikueue")
            assert config["spec"]["clusters"] == ["worker1", "worker2"]
            queue = await custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", "cluster-queue")
            quotas = queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
            assert quotas == [{"name": "cpu", "nominalQuota": 16}, {"name": "memory", "nominalQuota": "64Gi"}]
            assert queue["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": "multikueue"}]}
            secret = await core_api(api).read_namespaced_secret("worker1-kubeconfig", "kfed-system")
            assert set(secret.data) == {"kubeconfig"}
            # The manager holds the least-privilege ServiceAccount token `kfed register
            # --create-service-account` makes, never the worker's system:masters certificate.
            stored = yaml.safe_load(base64.b64decode(secret.data["kubeconfig"]))
            assert stored["users"] == [{"name": "kfed-multikueue", "user": {"token": stored["users"][0]["user"]["token"]}}]
            assert stored["clusters"][0]["cluster"]["server"].startswith("https://127.0.0.1:")

            async def workers_connected() -> bool:
                for name in ("worker1", "worker2"):
                    cluster = await custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "multikueueclusters", name)
                    conditions = cluster.get("status", {}).get("conditions", [])
                    if not any(c["type"] == "Active" and c["status"] == "True" for c in conditions):
                        return False
                return True

            await eventually(workers_connected, timeout=60, what="both workers connected with their ServiceAccount tokens")
        async with api_for(KubeconfigFile(tmp_path / "worker2.kubeconfig")) as api:
            lq = await custom_api(api).get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "default", "localqueues", "user-queue")
            assert lq["spec"]["clusterQueue"] == "cluster-queue"

            async def worker_queue_active() -> Any:
                cq = await custom_api(api).get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", "cluster-queue")
                conditions = cq.get("status", {}).get("conditions", [])
                return [c for c in conditions if c["type"] == "Active" and c["status"] == "True"]

            # The worker agent runs: it writes the worker's ClusterQueue status.
            await eventually(worker_queue_active, timeout=30, what="worker2's ClusterQueue Active, written by its worker_agent")
    finally:
        down = run_as_printed([step for step in printed_commands(up.stdout) if step.startswith(("export ", "kfed dev down"))])
    assert down.returncode == 0, down.stderr
    assert "stopped worker2" in down.stdout
    assert kfed("dev", "status", "--dir", str(tmp_path)).returncode == 1


async def a_new_namespace_on_the_manager_runs_its_job(directory: Path) -> None:
    """What a newcomer does first: a namespace and a LocalQueue made on the manager only, and a
    Job there. The playground's manager makes them on the worker it sends the Job to (with the
    rights its least-privilege credential was given for that), so the Job runs."""
    job = yaml.safe_load((REPO_ROOT / federation.SAMPLE_JOB).read_text())
    job["metadata"]["namespace"] = "research"
    job["spec"]["parallelism"] = job["spec"]["completions"] = 1
    local_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "user-queue", "namespace": "research"},
        "spec": {"clusterQueue": "cluster-queue"},
    }
    async with api_for(KubeconfigFile(directory / "manager.kubeconfig")) as api:
        await core_api(api).create_namespace({"metadata": {"name": "research"}})
        await custom_api(api).create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "research", "localqueues", local_queue)
        created = await batch_api(api).create_namespaced_job("research", job)

        async def complete() -> bool:
            found = await batch_api(api).read_namespaced_job(created.metadata.name, "research")
            return any(c.type == "Complete" and c.status == "True" for c in found.status.conditions or [])

        await eventually(complete, timeout=90, what="the Job in the manager-only namespace Complete")
        # It ran on a worker, which had no such namespace (`dev up` makes only `default`'s queue
        # there); the manager removes what it made once unused, so the worker is not read here.
        wl = next(iter((await workloads_in(api, "research")).values()))
        assert wl["status"]["clusterName"] in ("worker1", "worker2")


async def workloads_in(api: Any, namespace: str) -> dict[str, dict[str, Any]]:
    listed = await custom_api(api).list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")
    return {owner["name"]: wl for wl in listed["items"] for owner in wl["metadata"].get("ownerReferences", []) if owner["kind"] == "Job"}


async def workloads_by_job(api: Any) -> dict[str, dict[str, Any]]:
    return await workloads_in(api, "default")


def condition_true(obj: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


async def printed_jobs_run_and_queue(directory: Path, steps: list[str]) -> None:
    """The sample Job completes on a worker; long Jobs hold a worker's quota for their 2 minutes, so a third waits."""
    async with api_for(KubeconfigFile(directory / "manager.kubeconfig")) as api:
        batch = batch_api(api)
        names = [job.metadata.name for job in (await batch.list_namespaced_job("default")).items]
        sample = next(name for name in names if name.startswith("sample-job-"))
        first_long = next(name for name in names if name.startswith("long-job-"))

        async def complete(name: str) -> Any:
            job = await batch.read_namespaced_job(name, "default")
            return job.status if any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or []) else None

        assert (await eventually(lambda: complete(sample), timeout=90, what=f"Job {sample} Complete")).succeeded == 3
        sample_wl = (await workloads_by_job(api))[sample]
        assert condition_true(sample_wl, "Finished") and sample_wl["status"]["clusterName"] in ("worker1", "worker2")

        # The README's loop: the long Job created three times in all.
        again = run_as_printed([s for s in steps if s.startswith("export ")] + [f"kubectl create -f {federation.LONG_JOB}"] * 2)
        assert again.returncode == 0, again.stderr

        async def two_run_and_one_waits() -> Any:
            longs = {name: wl for name, wl in (await workloads_by_job(api)).items() if name.startswith("long-job-")}
            admitted = sorted(wl.get("status", {}).get("clusterName", "") for wl in longs.values() if condition_true(wl, "Admitted"))
            waiting = [
                c["message"]
                for wl in longs.values()
                for c in wl.get("status", {}).get("conditions", [])
                if c["type"] == "QuotaReserved" and c["status"] == "False"
            ]
            return (admitted, waiting) if admitted == ["worker1", "worker2"] and len(waiting) == 1 and len(longs) == 3 else None

        _, (waiting,) = await eventually(two_run_and_one_waits, timeout=90, what="two long Jobs admitted, one per worker, a third pending")
        assert "insufficient unused quota for cpu" in waiting
        # The first long Job is still running: its 2 minutes hold the quota.
        first = await batch.read_namespaced_job(first_long, "default")
        assert first.status.active == 4
        assert not [c.type for c in first.status.conditions or [] if c.type in ("Complete", "Failed") and c.status == "True"]


async def test_a_stopped_apiserver_refuses_clients_until_restarted(worker_clusters: Callable[[int], list[Any]]) -> None:
    worker = worker_clusters(1)[0]
    worker.stop_component("kube-apiserver")
    try:
        async with api_for(worker) as api:
            with pytest.raises((OSError, ApiException)):
                await core_api(api).list_namespace(_request_timeout=3)
    finally:
        worker.start_component("kube-apiserver")
    async with api_for(worker) as api:
        namespaces = await core_api(api).list_namespace()
        assert "default" in {n.metadata.name for n in namespaces.items}


def test_kind_provider_says_in_one_line_why_it_cannot_run() -> None:
    reason = kind.unavailable_reason()
    if reason is None:
        pytest.skip("a container engine runs here: the kind provider is exercised with KFED_TEST_PROVIDER=kind")
    assert reason.startswith("kind provider skipped: ")
    assert "\n" not in reason
    with pytest.raises(kind.ProviderUnavailableError, match=r"^kind provider skipped: "):
        kind.KindProvider(Path("/nonexistent"))
