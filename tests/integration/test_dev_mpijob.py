"""`kfed dev up --integrations kubeflow.org/mpijob`: the MPIJob CRD on every cluster and the MPI
Operator on each worker, so an MPIJob runs there as it would on a real cluster with the operator
installed: its launcher Job and worker Pods on kwok's nodes, and Succeeded once its launcher is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from manager.api.mpijob import JOB_NAME_LABEL
from manager.dev import mpijob
from tests.harness import KubeconfigFile, api_for, batch_api, custom_api, eventually, require_controller
from tests.integration.test_dev_command import kfed
from tests.integration.test_job_integrations import KWOK_RUN_TIME

GROUP, VERSION = "kubeflow.org", "v2beta1"


def plain_mpijob(name: str) -> dict[str, Any]:
    """A launcher running 2 s and 2 workers, with no queue-name label: only the operator acts on it."""

    def replica(replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
        container = {"name": "mpi", "image": "mpioperator/mpi-pi:openmpi", "resources": {"requests": {"cpu": "100m"}}}
        return {"replicas": replicas, "template": {"metadata": {"annotations": annotations}, "spec": {"containers": [container]}}}

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"mpiReplicaSpecs": {"Launcher": replica(1, {KWOK_RUN_TIME: "2s"}), "Worker": replica(2, {})}},
    }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind and c["status"] == "True"), None)


async def test_a_plain_mpijob_on_a_worker_gets_its_launcher_and_workers_from_the_operator_and_succeeds(tmp_path: Path) -> None:
    require_controller("mpijob")
    up = kfed("dev", "up", "--workers", "1", "--jobs", "--integrations", "kubeflow.org/mpijob", "--dir", str(tmp_path))
    try:
        assert up.returncode == 0, up.stderr
        assert "Job kinds: batch/v1 Job, MPIJob (the MPI Operator runs on each worker)." in up.stdout
        status = kfed("dev", "status", "--dir", str(tmp_path))
        assert status.returncode == 0, status.stdout + status.stderr
        manager_line, worker_line = status.stdout.splitlines()[1:]
        assert f"{mpijob.COMPONENT}=up" in worker_line and mpijob.COMPONENT not in manager_line
        assert "kubeflow.org/mpijob" in (tmp_path / "kfed-configuration.yaml").read_text()

        # The manager has the CRD (MultiKueue dispatches MPIJobs from there) and no operator.
        async with api_for(KubeconfigFile(tmp_path / "manager.kubeconfig")) as api:
            listed = await custom_api(api).list_namespaced_custom_object(GROUP, VERSION, "default", "mpijobs")
            assert listed["items"] == []

        async with api_for(KubeconfigFile(tmp_path / "worker1.kubeconfig")) as api:
            custom, batch = custom_api(api), batch_api(api)
            await custom.create_namespaced_custom_object(GROUP, VERSION, "default", "mpijobs", plain_mpijob("pi"))

            async def running() -> dict[str, Any] | None:
                current = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", "mpijobs", "pi")
                return current if condition(current, "Running") else None

            await eventually(running, timeout=60, what="MPIJob pi Running (its launcher and 2 workers on kwok nodes)")
            launcher = await batch.read_namespaced_job("pi-launcher", "default")
            assert launcher.metadata.owner_references[0].kind == "MPIJob"

            async def succeeded() -> dict[str, Any] | None:
                current = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", "mpijobs", "pi")
                return current if condition(current, "Succeeded") else None

            done = await eventually(succeeded, timeout=120, what="MPIJob pi Succeeded once its launcher Job is")
            assert done["status"]["replicaStatuses"]["Launcher"].get("succeeded") == 1
            pods = await api_pods(api, JOB_NAME_LABEL)
            assert sorted(name for name in pods if "-worker-" in name) == ["pi-worker-0", "pi-worker-1"]
    finally:
        down = kfed("dev", "down", "--dir", str(tmp_path))
    assert down.returncode == 0, down.stderr
    assert "stopped worker1" in down.stdout


async def api_pods(api: Any, label: str) -> list[str]:
    pods = await client.CoreV1Api(api).list_namespaced_pod("default", label_selector=f"{label}=pi")
    return [pod.metadata.name for pod in pods.items]
