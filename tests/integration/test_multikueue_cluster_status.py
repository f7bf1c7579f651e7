"""A MultiKueueCluster's Active condition ends as the latest verdict, on a real apiserver.

Seen in CI after a manager restart: the new process judged a cluster `BadKubeConfig` (its
Secret not cached yet) and wrote it, then judged it `Active` once connected. The second
verdict was compared with a cache that still showed the condition from before the restart
(`Active`), so nothing was written, and the cache's later update (the `BadKubeConfig` write)
was taken for "a status write of ours" and ignored. The cluster stayed inactive while
connected, and nothing was dispatched to it. Here the cache is listed by hand to hold it
behind on purpose.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Secret
from manager.api.meta import find_condition, format_time, utcnow
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from manager.kube.informer import Informer
from tests.harness import Provider, eventually
from tests.integration.controllers import SYSTEM_NAMESPACE, cluster_controller, crd_cluster

V1B2 = f"{c.GROUP}/v1beta2"


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "mkstatus")


async def active_condition(kube: KubeClient, name: str) -> tuple[str, str] | None:
    found = await kube.get(kueue.MultiKueueCluster, name)
    cond = find_condition(found.status.conditions if found.status else None, c.ACTIVE)
    return (cond.status, cond.reason) if cond else None


async def test_the_latest_verdict_is_written_even_when_the_cache_already_showed_it(kube: KubeClient, names: Any) -> None:
    name = names("worker")
    source = {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": name}}}
    body = {"apiVersion": V1B2, "kind": "MultiKueueCluster", "metadata": {"name": name}, "spec": source}
    await kube.create(kueue.MultiKueueCluster, body)
    created = await kube.get(kueue.MultiKueueCluster, name)
    active = {
        "type": c.ACTIVE,
        "status": "True",
        "reason": "Active",
        "message": "Connected",
        "lastTransitionTime": format_time(utcnow()),
        "observedGeneration": created.metadata.generation,
    }
    await kube.patch(kueue.MultiKueueCluster, name, {"status": {"conditions": [active]}}, subresource="status")

    clusters: Informer[kueue.MultiKueueCluster] = Informer(kube, kueue.MultiKueueCluster)
    secrets: Informer[Secret] = Informer(kube, Secret, namespace=SYSTEM_NAMESPACE)
    for informer in (clusters, secrets):
        await informer.relist()  # the cache shows Active, as the previous process left it
    controller = cluster_controller(kube, clusters, secrets)
    publishing = asyncio.create_task(controller.status_controller.run())
    try:
        cached = clusters.get(name)
        assert cached is not None
        controller._judge(cached, "False", "BadKubeConfig", 'Secret "x" not found')
        await eventually(lambda: _is(kube, name, ("False", "BadKubeConfig")), timeout=10, what="the first verdict written")
        # Connected a moment later: the cache still shows Active, so this write is skipped.
        controller._judge(cached, "True", "Active", "Connected")
        await clusters.relist()  # the cache sees the BadKubeConfig write
        await eventually(lambda: _is(kube, name, ("True", "Active")), timeout=10, what="the latest verdict, Active, written")
    finally:
        controller.status_controller.stop()
        publishing.cancel()
        await asyncio.gather(publishing, return_exceptions=True)
        await controller.stop()


async def _is(kube: KubeClient, name: str, expected: tuple[str, str]) -> bool:
    return await active_condition(kube, name) == expected
