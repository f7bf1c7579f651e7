"""The informer against a real apiserver: a watch resumed from a compacted revision gets 410
Gone, and the informer relists and carries on with what changed meanwhile."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, ClassVar

from manager.api.meta import OpenModel, Resource
from manager.kube.client import KubeClient
from manager.kube.informer import Informer
from tests.harness import eventually


class PodTemplate(Resource, OpenModel):
    # PodTemplates bypass the harness's watch cache, so a watch reads etcd's own revisions.
    VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "PodTemplate"
    PLURAL: ClassVar[str] = "podtemplates"
    NAMESPACED: ClassVar[bool] = True


def template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name},
        "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    }


async def test_an_informer_relists_after_410_gone_and_sees_what_changed(manager_cluster: Any) -> None:
    namespace = f"inf-{uuid.uuid4().hex[:6]}"
    client = await KubeClient.from_kubeconfig(manager_cluster.kubeconfig(), name="test")
    try:
        await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        await client.create(PodTemplate, template("before"), namespace=namespace)
        informer: Informer[PodTemplate] = Informer(client, PodTemplate, namespace=namespace)
        seen: list[tuple[str, str]] = []
        informer.add_handler(lambda kind, old, new: seen.append((kind, (new or old).name)))
        await informer.relist()
        assert set(informer.store) == {f"{namespace}/before"} and informer.relists == 1
        # While the informer is not watching, the world moves on and etcd forgets the history.
        await client.create(PodTemplate, template("during"), namespace=namespace)
        await client.delete(PodTemplate, "before", namespace=namespace)
        manager_cluster.compact_etcd()
        watching = asyncio.create_task(informer.watch_until_error())
        try:
            await eventually(lambda: informer.relists == 2, timeout=30, what="a relist after 410 Gone")
            assert set(informer.store) == {f"{namespace}/during"}
            assert ("ADDED", "during") in seen and ("DELETED", "before") in seen
            # And it keeps watching from the new list.
            await client.create(PodTemplate, template("after"), namespace=namespace)
            await eventually(lambda: f"{namespace}/after" in informer.store, timeout=30, what="an event after the relist")
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
    finally:
        await client.close()
