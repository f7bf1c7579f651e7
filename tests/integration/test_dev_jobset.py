"""`kfed dev up --integrations jobset`: JobSet's CRD on every cluster and its controller on each
worker, so a JobSet runs there as it would on a real cluster with JobSet installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from manager.dev import jobset
from tests.harness import KubeconfigFile, api_for, batch_api, custom_api, eventually, require_controller
from tests.integration.test_dev_command import kfed

GROUP, VERSION = "jobset.x-k8s.io", "v1alpha2"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def plain_jobset(name: str) -> dict[str, Any]:
    """A leader (1 pod) and 2 worker Jobs of 2 pods each, with no queue-name label: only the
    JobSet controller acts on it."""

    def replicated_job(job: str, replicas: int, parallelism: int) -> dict[str, Any]:
        pod = {
            "restartPolicy": "Never",
            "containers": [{"name": job, "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        }
        return {
            "name": job,
            "replicas": replicas,
            "template": {"spec": {"parallelism": parallelism, "completions": parallelism, "template": {"spec": pod}}},
        }

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"replicatedJobs": [replicated_job("leader", 1, 1), replicated_job("workers", 2, 2)]},
    }


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind and c["status"] == "True"), None)


async def test_a_plain_jobset_on_a_worker_gets_its_jobs_from_the_jobset_controller_and_completes(tmp_path: Path) -> None:
    require_controller("jobset")
    up = kfed("dev", "up", "--workers", "1", "--jobs", "--integrations", "jobset", "--dir", str(tmp_path))
    try:
        assert up.returncode == 0, up.stderr
        assert "Job kinds: batch/v1 Job, JobSet (its controller runs on each worker)." in up.stdout
        status = kfed("dev", "status", "--dir", str(tmp_path))
        assert status.returncode == 0, status.stdout + status.stderr
        manager_line, worker_line = status.stdout.splitlines()[1:]
        assert f"{jobset.COMPONENT}=up" in worker_line and jobset.COMPONENT not in manager_line
        configuration = (tmp_path / "kfed-configuration.yaml").read_text()
        assert "jobset.x-k8s.io/jobset" in configuration

        # The manager has the CRD (MultiKueue dispatches JobSets from there) and no controller.
        async with api_for(KubeconfigFile(tmp_path / "manager.kubeconfig")) as api:
            listed = await custom_api(api).list_namespaced_custom_object(GROUP, VERSION, "default", "jobsets")
            assert listed["items"] == []

        async with api_for(KubeconfigFile(tmp_path / "worker1.kubeconfig")) as api:
            custom, batch = custom_api(api), batch_api(api)
            created = await custom.create_namespaced_custom_object(GROUP, VERSION, "default", "jobsets", plain_jobset("train"))
            # JobSet's defaulting webhook ran: the CRD itself has no default for it.
            assert created["spec"]["network"]["enableDNSHostnames"] is True

            async def child_jobs() -> list[Any]:
                jobs = await batch.list_namespaced_job("default", label_selector=f"{JOBSET_NAME_LABEL}=train")
                return list(jobs.items) if len(jobs.items) == 3 else []

            jobs = await eventually(child_jobs, timeout=60, what="the JobSet controller creating train's 3 Jobs")
            assert sorted(job.metadata.name for job in jobs) == ["train-leader-0", "train-workers-0", "train-workers-1"]
            assert all(job.metadata.owner_references[0].kind == "JobSet" for job in jobs)

            async def completed() -> dict[str, Any] | None:
                current = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", "jobsets", "train")
                return current if condition(current, "Completed") else None

            done = await eventually(completed, timeout=120, what="JobSet train Completed (its pods run on kwok nodes)")
            assert done["status"].get("terminalState") == "Completed"
            finished = [await batch.read_namespaced_job(job.metadata.name, "default") for job in jobs]
            succeeded = {job.metadata.name: job.status.succeeded for job in finished}
            assert succeeded == {"train-leader-0": 1, "train-workers-0": 2, "train-workers-1": 2}
    finally:
        down = kfed("dev", "down", "--dir", str(tmp_path))
    assert down.returncode == 0, down.stderr
    assert "stopped worker1" in down.stdout
