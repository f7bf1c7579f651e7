"""`kfed dev up --integrations rayjob,raycluster`: KubeRay's CRDs on every cluster and its
operator on each worker, so a RayCluster runs there as it would on a real cluster with KubeRay
installed (on kwok nodes its pods run and turn ready, though no Ray process runs in them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from manager.api.ray import CLUSTER_LABEL
from manager.dev import kuberay
from tests.harness import KubeconfigFile, api_for, custom_api, eventually, require_controller
from tests.integration.test_dev_command import kfed

GROUP, VERSION = "ray.io", "v1"


def plain_raycluster(name: str) -> dict[str, Any]:
    """A head and a worker group of 2, with no queue-name label: only KubeRay acts on it."""

    def pod(container: str) -> dict[str, Any]:
        resources = {"requests": {"cpu": "100m", "memory": "64Mi"}}
        return {"spec": {"containers": [{"name": container, "image": "rayproject/ray:2.46.0", "resources": resources}]}}

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": pod("ray-head")},
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": 2,
                    "minReplicas": 0,
                    "maxReplicas": 2,
                    "rayStartParams": {},
                    "template": pod("ray-worker"),
                }
            ],
        },
    }


async def test_a_plain_raycluster_on_a_worker_gets_its_pods_from_kuberay_and_turns_ready(tmp_path: Path) -> None:
    require_controller("kuberay")
    up = kfed("dev", "up", "--workers", "1", "--jobs", "--integrations", "ray.io/rayjob,raycluster", "--dir", str(tmp_path))
    try:
        assert up.returncode == 0, up.stderr
        assert "RayCluster (the KubeRay operator runs on each worker)" in up.stdout
        assert "RayJob (the KubeRay operator runs on each worker)" in up.stdout
        status = kfed("dev", "status", "--dir", str(tmp_path))
        assert status.returncode == 0, status.stdout + status.stderr
        manager_line, worker_line = status.stdout.splitlines()[1:]
        assert f"{kuberay.COMPONENT}=up" in worker_line and kuberay.COMPONENT not in manager_line
        configuration = (tmp_path / "kfed-configuration.yaml").read_text()
        assert "ray.io/raycluster" in configuration and "ray.io/rayjob" in configuration

        # The manager has the CRDs (MultiKueue dispatches Ray objects from there) and no operator.
        async with api_for(KubeconfigFile(tmp_path / "manager.kubeconfig")) as api:
            for plural in ("rayclusters", "rayjobs"):
                listed = await custom_api(api).list_namespaced_custom_object(GROUP, VERSION, "default", plural)
                assert listed["items"] == []

        async with api_for(KubeconfigFile(tmp_path / "worker1.kubeconfig")) as api:
            custom = custom_api(api)
            await custom.create_namespaced_custom_object(GROUP, VERSION, "default", "rayclusters", plain_raycluster("demo"))
            core = client.CoreV1Api(api)

            async def pods() -> list[Any]:
                listed = await core.list_namespaced_pod("default", label_selector=f"{CLUSTER_LABEL}=demo")
                return list(listed.items) if len(listed.items) == 3 else []

            created = await eventually(pods, timeout=60, what="KubeRay creating demo's head and 2 workers")
            kinds = sorted(p.metadata.labels.get("ray.io/node-type") for p in created)
            assert kinds == ["head", "worker", "worker"]
            assert all(p.metadata.owner_references[0].kind == "RayCluster" for p in created)

            async def ready() -> dict[str, Any] | None:
                current = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", "rayclusters", "demo")
                return current if current.get("status", {}).get("state") == "ready" else None

            done = await eventually(ready, timeout=90, what="RayCluster demo ready (its pods run on kwok nodes)")
            assert done["status"].get("readyWorkerReplicas") == 2
    finally:
        down = kfed("dev", "down", "--dir", str(tmp_path))
    assert down.returncode == 0, down.stderr
    assert "stopped worker1" in down.stdout
