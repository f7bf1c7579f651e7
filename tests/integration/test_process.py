"""The shape of one controller process on a real apiserver: its HTTP servers are runnables,
and a runnable that fails ends the process with an error (so that its Deployment restarts it),
as controller-runtime's manager does."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from manager.controllers.run import EXIT_RUNNABLE_FAILED, Process
from manager.dev.local import LocalCluster, free_port
from manager.runtime.options import parse
from manager.runtime.runnables import Runnable, always
from tests.harness import Provider, eventually
from tests.integration.controllers import crd_cluster


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "proc")


class Broken:
    """An extension whose one runnable fails once `fail` is set."""

    informers: list[Any] = []
    api_groups: list[Any] = []

    def __init__(self) -> None:
        self.fail = asyncio.Event()

    def runnables(self) -> list[Runnable]:
        async def doomed() -> None:
            await self.fail.wait()
            raise RuntimeError("lost its watch for good")

        return [always("doomed", doomed)]

    async def stop(self) -> None:
        return None


def probe(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status)
    except OSError:
        return 0


async def test_a_failing_runnable_ends_the_process_with_an_error_and_its_servers_stop(cluster: LocalCluster, tmp_path: Path) -> None:
    health = free_port()
    argv = [
        f"--kubeconfig={cluster.kubeconfig_path}",
        "--no-leader-elect",
        "--no-webhooks",
        f"--health-probe-bind-address=127.0.0.1:{health}",
        f"--metrics-bind-address=127.0.0.1:{health}",
        "--shutdown-timeout=10",
    ]
    broken = Broken()
    process = Process(parse(argv, component="manager"), component="manager", extensions=[lambda _: broken])
    running = asyncio.create_task(process.run())
    # The probe server is a runnable of the process: it answers once the groups start.
    await eventually(lambda: asyncio.to_thread(probe, health, "/healthz"), timeout=60, what="the probe server answering")
    broken.fail.set()
    code = await asyncio.wait_for(running, timeout=30)
    assert code == EXIT_RUNNABLE_FAILED
    assert process.groups.failed is not None and process.groups.failed[0] == "doomed"
    assert await asyncio.to_thread(probe, health, "/healthz") == 0  # its servers stopped with it
