"""Session-wide access to real clusters for the integration and e2e tiers.

`KFED_TEST_PROVIDER=local` (the default) starts control planes from the local harness;
`KFED_TEST_PROVIDER=kind` uses kind, and skips with one clear line where no container engine
runs. A local harness that cannot start is an error, never a skip.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest
import yaml
from kubernetes_asyncio import client

from manager.dev import catalog
from manager.dev.kind import KindProvider, ProviderUnavailableError
from manager.dev.local import LocalProvider
from manager.kube.client import KubeClient, api_client_from_kubeconfig
from manager.kube.informer import Informer
from tests.prerequisites import missing_prerequisite


class HasKubeconfig(Protocol):
    def kubeconfig(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class KubeconfigFile:
    """A kubeconfig on disk, such as the ones `kfed dev up` writes."""

    path: Path

    def kubeconfig(self) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load(self.path.read_text())
        return loaded


class Provider(Protocol):
    name: str
    clusters: dict[str, Any]

    def create(self, names: list[str], *, jobs: bool = False, aggregation: bool = False) -> list[Any]: ...

    def delete(self, clusters: list[Any]) -> None: ...

    def delete_all(self) -> None: ...


def make_provider(base: Path) -> Provider:
    choice = os.environ.get("KFED_TEST_PROVIDER", "local")
    if choice == "local":
        return LocalProvider(base)
    if choice == "kind":
        try:
            return KindProvider(base)
        except ProviderUnavailableError as err:
            pytest.skip(str(err))
    raise pytest.UsageError(f"KFED_TEST_PROVIDER={choice!r}: expected local or kind")


@contextlib.asynccontextmanager
async def api_for(cluster: HasKubeconfig) -> AsyncIterator[client.ApiClient]:
    """An ApiClient for one cluster, closed afterwards."""
    api = await api_client_from_kubeconfig(cluster.kubeconfig())
    try:
        yield api
    finally:
        await api.close()


# The generated API classes are typed too narrowly for plain-dict bodies; tests use them untyped.
def core_api(api: client.ApiClient) -> Any:
    return client.CoreV1Api(api)


def batch_api(api: client.ApiClient) -> Any:
    return client.BatchV1Api(api)


def custom_api(api: client.ApiClient) -> Any:
    return client.CustomObjectsApi(api)


def require_controller(name: str) -> Path:
    """The directory that a local job controller's build script printed (its variable, such as
    KFED_JOBSET_BIN_DIR), for `kfed dev up --integrations` and the tests that run its kinds;
    `name` is its entry's in `manager.dev.catalog` (jobset, lws, kuberay, mpijob, trainer)."""
    controller = catalog.BY_NAME[name]
    build = controller.build
    value = os.environ.get(build.directory_variable, "")
    if value and all((Path(value) / file).is_file() for file in build.files):
        return Path(value)
    missing_prerequisite(f"{controller.project} not built: export {build.directory_variable}=$(bash {build.path}) (hack/test.sh does)")


def error_message(err: Exception) -> str:
    """The `message` of the Status an apiserver answered with."""
    body = getattr(err, "body", None)
    try:
        return str(json.loads(body)["message"]) if body else str(err)
    except (ValueError, KeyError, TypeError):
        return str(body)


async def eventually(
    probe: Callable[[], Any],
    *,
    timeout: float = 60.0,
    interval: float = 0.25,
    what: str = "condition",
    explain: Callable[[], Awaitable[str]] | None = None,
) -> Any:
    """Await `probe()` until it returns a truthy value; on timeout, fail showing the last value
    seen and, when given, `explain()`'s account of the state the wait was stuck in."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = probe()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        if time.monotonic() > deadline:
            story = f"\n{await explain()}" if explain is not None else ""
            pytest.fail(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}{story}")
        await asyncio.sleep(interval)


class SessionClusters:
    """The session's provider once a test asked for it, and the clusters the session keeps."""

    def __init__(self) -> None:
        self.provider: Provider | None = None
        self.kept: set[str] = set()


SESSION_CLUSTERS = SessionClusters()


def keep_for_session(clusters: list[Any]) -> None:
    """These clusters outlive the test module that started them (a session fixture's)."""
    SESSION_CLUSTERS.kept.update(cluster.name for cluster in clusters)


@contextlib.contextmanager
def provider_session(tmp: Path) -> Iterator[Provider]:
    provider = make_provider(tmp)
    try:
        yield provider
    finally:
        provider.delete_all()


@contextlib.asynccontextmanager
async def watched(client: KubeClient, model: type[Any], ns: str, handler: Any) -> AsyncIterator[None]:
    """`handler(kind, old, new)` for every change of `model` in `ns` while the block runs. A watch
    that fails on the way fails the block: what it saw would be incomplete."""
    informer: Informer[Any] = Informer(client, model, namespace=ns)
    informer.add_handler(handler)
    await informer.relist()
    task = asyncio.create_task(informer.watch_until_error())
    try:
        yield
    finally:
        error = task.exception() if task.done() and not task.cancelled() else None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    if error is not None:
        raise AssertionError(f"the watch of {model.__name__} in {ns} failed, so what it saw is incomplete: {error!r}")
