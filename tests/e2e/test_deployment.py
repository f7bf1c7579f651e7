"""Deployments through MultiKueue, as Kueue runs them: pod by pod. The manager runs
kube-controller-manager, whose Deployment and ReplicaSet controllers make the pods; kfed's
webhook marked their template, so each pod stays gated on the manager with a Workload of its
own, runs on exactly one worker as a Pod does, and its status comes back, so the manager's
Deployment counts its pods ready. Scaled down, the pods it deletes leave their workers; deleted,
nothing of it is left on the workers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.apps import Deployment
from manager.api.core import Pod
from manager.engine.integrations.pod import SCHEDULING_GATE
from tests.e2e.federation import RUNS, Clients, Federation, running
from tests.harness import Provider, eventually
from tests.integration.test_deployment_integration import deployment_manifest
from tests.integration.test_lws_integration import gates


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation: kfed integrating Deployments (and so their pods) everywhere,
    and a manager with Kubernetes' own controllers, which make a Deployment's pods."""
    directory = Path(tmp_path_factory.mktemp("deployment"))
    with running(provider, directory, integrations=("deployment",), manager_controllers=True) as created:
        yield created


async def manager_pods(kube: Clients, ns: str, name: str) -> list[Pod]:
    found = (await kube.manager.list(Pod, namespace=ns, label_selector=f"app={name}")).items
    return [p for p in found if p.metadata.deletion_timestamp is None]


async def worker_pods(kube: Clients, ns: str) -> dict[str, list[str]]:
    """Per worker, the names of its live pods in `ns`."""
    return {
        worker: sorted(p.name for p in (await client.list(Pod, namespace=ns)).items if p.metadata.deletion_timestamp is None)
        for worker, client in kube.workers.items()
    }


async def test_a_deployments_pods_run_one_each_on_a_worker_its_readiness_comes_back_and_nothing_is_left(kube: Clients) -> None:
    ns = f"dp{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 4, "worker2": 4}, labels=RUNS, tag=ns)
    await kube.manager.create(Deployment, deployment_manifest("web", ns, replicas=3))

    async def three_running_remotely() -> dict[str, list[str]] | None:
        where = await worker_pods(kube, ns)
        running = [name for names in where.values() for name in names]
        return where if len(running) == 3 else None

    where = await eventually(three_running_remotely, timeout=120, what="the Deployment's three pods on the workers")
    pods = await manager_pods(kube, ns, "web")
    assert sorted(p.name for p in pods) == sorted(n for names in where.values() for n in names), "each pod runs once, under its name"
    for pod in pods:
        assert gates(pod) == [SCHEDULING_GATE] and not pod.spec.node_name, "the manager's pods never run there"
    wls = (await kube.manager.list(kueue.Workload, namespace=ns)).items
    assert len(wls) == 3 and all((wl.status.cluster_name if wl.status else None) in kube.workers for wl in wls)

    async def ready(replicas: int) -> Deployment | None:
        dep = await kube.manager.get(Deployment, "web", namespace=ns)
        return dep if dep.status is not None and dep.status.ready_replicas == replicas else None

    await eventually(lambda: ready(3), timeout=90, what="the manager's Deployment with 3 ready pods, from the workers' statuses")
    for worker, names in where.items():
        for name in names:
            remote = await kube.workers[worker].get(Pod, name, namespace=ns)
            assert remote.spec.node_selector == RUNS and (remote.metadata.labels or {}).get(c.MULTIKUEUE_ORIGIN_LABEL)

    # Scaled down: the two pods the ReplicaSet deletes leave their workers.
    await kube.manager.patch(Deployment, "web", {"spec": {"replicas": 1}}, namespace=ns)

    async def one_left() -> dict[str, list[str]] | None:
        now = await worker_pods(kube, ns)
        return now if sum(len(names) for names in now.values()) == 1 and len(await manager_pods(kube, ns, "web")) == 1 else None

    await eventually(one_left, timeout=90, what="one pod left, on one worker, after scaling down to 1")
    await eventually(lambda: ready(1), timeout=60, what="the manager's Deployment with its one ready pod")

    await kube.manager.delete(Deployment, "web", namespace=ns)

    async def nothing_left() -> Any:
        left = await kube.leftovers(ns)
        gone = not await manager_pods(kube, ns, "web") and not (await kube.manager.list(kueue.Workload, namespace=ns)).items
        return left if gone and not any(left.values()) else None

    await eventually(nothing_left, timeout=120, what="no pod or Workload of the Deployment left, on the manager or the workers")
