"""`kfed dev up/status/down` as a newcomer runs them, and the harness's fault helpers."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from manager.dev import kind
from tests.conftest import REPO_ROOT
from tests.harness import KubeconfigFile, api_for, core_api, custom_api, eventually


def kfed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "manager.cli.main", *args], capture_output=True, text=True, cwd=REPO_ROOT)


async def test_dev_up_leaves_a_ready_federation_and_down_stops_it(tmp_path: Path) -> None:
    up = kfed("dev", "up", "--workers", "2", "--dir", str(tmp_path))
    try:
        assert up.returncode == 0, up.stderr
        assert f"export KUBECONFIG={tmp_path / 'manager.kubeconfig'}" in up.stdout
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
        down = kfed("dev", "down", "--dir", str(tmp_path))
    assert down.returncode == 0
    assert kfed("dev", "status", "--dir", str(tmp_path)).returncode == 1


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
