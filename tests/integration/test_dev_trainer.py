"""`kfed dev up --integrations trainer.kubeflow.org/trainjob`: the Trainer's CRDs and its
torch-distributed runtime on every cluster, and the Trainer's controller manager, with JobSet's
controller, on each worker, so a TrainJob runs there as it would on a real cluster with the
Trainer installed: a JobSet of its training nodes on kwok's nodes, and Complete once they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from manager.api.jobset import JOBSET_NAME_LABEL
from manager.dev import jobset, trainer
from tests.harness import KubeconfigFile, api_for, custom_api, eventually, require_controller
from tests.integration.test_dev_command import kfed
from tests.integration.test_job_integrations import KWOK_RUN_TIME

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"


def plain_trainjob(name: str) -> dict[str, Any]:
    """2 training nodes running 2 s, with no queue-name label: only the Trainer acts on it."""
    pod = {"metadata": {"annotations": {KWOK_RUN_TIME: "2s"}}}
    patch = {
        "manager": "kfed.dev/test",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}}},
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runtimeRef": {"name": trainer.RUNTIME},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {"cpu": "100m"}}},
            "runtimePatches": [patch],
        },
    }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind and c["status"] == "True"), None)


async def test_a_plain_trainjob_on_a_worker_gets_its_jobset_from_the_trainer_and_completes(tmp_path: Path) -> None:
    require_controller("jobset")
    require_controller("trainer")
    up = kfed("dev", "up", "--workers", "1", "--jobs", "--integrations", "trainer.kubeflow.org/trainjob", "--dir", str(tmp_path))
    try:
        assert up.returncode == 0, up.stderr
        assert "Job kinds: batch/v1 Job, TrainJob (Kubeflow Trainer and JobSet run on each worker)." in up.stdout
        status = kfed("dev", "status", "--dir", str(tmp_path))
        assert status.returncode == 0, status.stdout + status.stderr
        manager_line, worker_line = status.stdout.splitlines()[1:]
        for component in (trainer.COMPONENT, jobset.COMPONENT):
            assert f"{component}=up" in worker_line and component not in manager_line
        config = (tmp_path / "kfed-configuration.yaml").read_text()
        assert "trainer.kubeflow.org/trainjob" in config and "jobset.x-k8s.io/jobset" not in config
        # Each Trainer reads its own certificate, from its own TMPDIR under its cluster's directory.
        assert (tmp_path / "clusters" / "worker1" / "trainer" / "tmp" / "k8s-webhook-server" / "serving-certs" / "tls.crt").is_file()

        # The manager has the CRDs and the runtime (Kueue builds a TrainJob's PodSets from it
        # there too), and no Trainer.
        async with api_for(KubeconfigFile(tmp_path / "manager.kubeconfig")) as api:
            listed = await custom_api(api).list_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs")
            assert listed["items"] == []
            await custom_api(api).get_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", trainer.RUNTIME)

        async with api_for(KubeconfigFile(tmp_path / "worker1.kubeconfig")) as api:
            custom = custom_api(api)
            await custom.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", plain_trainjob("pi"))
            created = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "pi")
            assert created["spec"]["runtimePatches"][0].get("time"), "the Trainer's defaulting webhook stamps each patch"

            async def active() -> dict[str, Any] | None:
                current = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "pi")
                jobs = current.get("status", {}).get("jobsStatus") or []
                return current if any(job.get("active") for job in jobs) else None

            await eventually(active, timeout=60, what="TrainJob pi active (its JobSet's node Job on kwok nodes)")
            made = await custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", "default", "jobsets", "pi")
            assert made["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
            pods = await client.CoreV1Api(api).list_namespaced_pod("default", label_selector=f"{JOBSET_NAME_LABEL}=pi")
            assert len(pods.items) == 2

            async def complete() -> dict[str, Any] | None:
                current = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", "pi")
                return current if condition(current, "Complete") else None

            done = await eventually(complete, timeout=120, what="TrainJob pi Complete once its JobSet is")
            assert [job.get("succeeded") for job in done["status"]["jobsStatus"]] == [1]
            # The Trainer's validating webhook is called: a TrainJob naming no runtime is refused.
            missing = plain_trainjob("nowhere")
            missing["spec"]["runtimeRef"]["name"] = "no-such-runtime"
            try:
                await custom.create_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs", missing)
            except client.ApiException as err:
                assert "validator.trainjob.trainer.kubeflow.org" in str(err.body), err.body
            else:
                raise AssertionError("a TrainJob naming a missing runtime was created")
    finally:
        down = kfed("dev", "down", "--dir", str(tmp_path))
    assert down.returncode == 0, down.stderr
    assert "stopped worker1" in down.stdout
