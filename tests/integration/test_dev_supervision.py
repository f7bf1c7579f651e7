"""`kfed dev up` supervises kfed's controllers: one that dies is started again and works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from tests.conftest import REPO_ROOT
from tests.harness import KubeconfigFile, api_for, batch_api, custom_api, eventually


def kfed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "manager.cli.main", *args], capture_output=True, text=True, cwd=REPO_ROOT)


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


async def test_a_killed_worker_agent_is_restarted_and_admits_again(tmp_path: Path) -> None:
    up = kfed("dev", "up", "--workers", "1", "--dir", str(tmp_path))
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads((tmp_path / "state.json").read_text())
        worker = next(entry for entry in state["clusters"] if entry["name"] == "worker1")
        supervisor = worker["pids"]["worker_agent"]
        [agent] = _children(supervisor)
        os.kill(agent, signal.SIGKILL)  # as the OOM killer, or a lost lease's exit, would end it

        def restarted() -> list[int]:
            children = _children(supervisor)
            return children if children and children != [agent] else []

        await eventually(restarted, timeout=30, what="a new worker_agent process under the supervisor")
        log = Path(worker["logs"]["worker_agent"]).read_text()
        restart_lines = [json.loads(line) for line in log.splitlines() if '"process exited; restarting"' in line]
        assert [(line["component"], line["exitCode"], line["restarts"]) for line in restart_lines] == [("worker_agent", -9, 1)]

        # The restarted agent does the agent's work: a new LocalQueue on the worker becomes Active.
        async with api_for(KubeconfigFile(tmp_path / "worker1.kubeconfig")) as api:
            custom = custom_api(api)
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "after-restart", "namespace": "default"},
                "spec": {"clusterQueue": "cluster-queue"},
            }

            async def created() -> bool:
                # Until the new process serves its webhooks the apiserver refuses the create.
                try:
                    await custom.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "default", "localqueues", body)
                except ApiException as err:
                    if err.status != 500:
                        raise
                    return False
                return True

            await eventually(created, timeout=60, what="the worker's webhooks answering again")

            async def active() -> Any:
                lq = await custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "default", "localqueues", "after-restart")
                return [c for c in lq.get("status", {}).get("conditions", []) if c["type"] == "Active" and c["status"] == "True"]

            await eventually(active, timeout=60, what="the LocalQueue made Active by the restarted worker_agent")

        # ... and admits again: a Job submitted to the manager is admitted by worker1's new agent,
        # the only admission side in this federation, so the manager's Workload names worker1.
        async with api_for(KubeconfigFile(tmp_path / "manager.kubeconfig")) as api:
            job = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "after-restart", "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
                        }
                    }
                },
            }
            await batch_api(api).create_namespaced_job("default", job)

            async def admitted_on_worker1() -> Any:
                listed = await custom_api(api).list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "default", "workloads")
                for wl in listed["items"]:
                    owners = [ref["name"] for ref in wl["metadata"].get("ownerReferences", [])]
                    conditions = {cond["type"]: cond["status"] for cond in wl.get("status", {}).get("conditions", [])}
                    if owners == ["after-restart"] and conditions.get("Admitted") == "True":
                        return wl["status"].get("clusterName")
                return None

            assert await eventually(admitted_on_worker1, timeout=60, what="the Job admitted through worker1's restarted agent") == "worker1"
        status = kfed("dev", "status", "--dir", str(tmp_path))
        assert "worker_agent=up" in status.stdout, status.stdout
    finally:
        down = kfed("dev", "down", "--dir", str(tmp_path))
    assert down.returncode == 0
    assert not Path(f"/proc/{supervisor}").exists() or Path(f"/proc/{supervisor}/stat").read_text().split()[2] == "Z"
