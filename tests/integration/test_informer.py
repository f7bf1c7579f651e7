"""The informer against a real apiserver: a watch resumed from a compacted revision gets 410
Gone, and the informer relists and carries on with what changed meanwhile; a watch that hears
nothing for a while is watched again quietly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any, ClassVar

import pytest

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


@contextlib.asynccontextmanager
async def client_and_namespace(cluster: Any) -> AsyncIterator[tuple[KubeClient, str]]:
    """A client of `cluster` and a new namespace in it; the client is closed after."""
    namespace = f"inf-{uuid.uuid4().hex[:6]}"
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig(), name="test")
    try:
        await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        yield client, namespace
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def running(work: Coroutine[Any, Any, None]) -> AsyncIterator[asyncio.Task[None]]:
    """`work` as a task for the body of the block, cancelled after it."""
    task = asyncio.create_task(work)
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def quiet_watches(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records if r.getMessage() == "watch quiet; watching again")


async def test_an_informer_relists_after_410_gone_and_sees_what_changed(manager_cluster: Any) -> None:
    async with client_and_namespace(manager_cluster) as (client, namespace):
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
        async with running(informer.watch_until_error()):
            await eventually(lambda: informer.relists == 2, timeout=30, what="a relist after 410 Gone")
            assert set(informer.store) == {f"{namespace}/during"}
            assert ("ADDED", "during") in seen and ("DELETED", "before") in seen
            # And it keeps watching from the new list.
            await client.create(PodTemplate, template("after"), namespace=namespace)
            await eventually(lambda: f"{namespace}/after" in informer.store, timeout=30, what="an event after the relist")


async def test_a_quiet_watch_is_watched_again_without_a_warning_or_a_relist(manager_cluster: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A kind that rarely changes hears nothing, not even a bookmark, for longer than the read
    timeout (a busy apiserver delays bookmarks). That is not a failure: the informer watches
    again from where it was, warns nobody and keeps what it has, and later changes arrive."""
    async with client_and_namespace(manager_cluster) as (client, namespace):
        await client.create(PodTemplate, template("before"), namespace=namespace)
        informer: Informer[PodTemplate] = Informer(client, PodTemplate, namespace=namespace, read_timeout=0.3)
        caplog.set_level(logging.DEBUG, logger="kfed.informer")
        async with running(informer.run()):
            await eventually(lambda: informer.synced.is_set(), timeout=30, what="the first list")
            await eventually(lambda: quiet_watches(caplog) >= 3, timeout=30, what="three quiet watches")
            await client.create(PodTemplate, template("after"), namespace=namespace)
            await eventually(lambda: f"{namespace}/after" in informer.store, timeout=30, what="a change after the quiet watches")
            assert informer.relists == 1 and set(informer.store) == {f"{namespace}/before", f"{namespace}/after"}
            assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_quiet_watch_of_a_workers_connection_does_not_end_it(manager_cluster: Any, caplog: pytest.LogCaptureFixture) -> None:
    """`watch_until_error` (what a MultiKueue worker's connection runs on) ends only when the
    server cannot be reached: after a quiet watch one small read finds it alive, and the
    watch goes on."""
    async with client_and_namespace(manager_cluster) as (client, namespace):
        informer: Informer[PodTemplate] = Informer(client, PodTemplate, namespace=namespace, read_timeout=0.3)
        caplog.set_level(logging.DEBUG, logger="kfed.informer")
        await informer.relist()
        async with running(informer.watch_until_error()) as watching:
            await eventually(lambda: quiet_watches(caplog) >= 3 or watching.done(), timeout=30, what="three quiet watches")
            assert not watching.done(), watching.exception()
            await client.create(PodTemplate, template("after"), namespace=namespace)
            await eventually(lambda: f"{namespace}/after" in informer.store, timeout=30, what="a change after the quiet watches")
            assert not watching.done()
