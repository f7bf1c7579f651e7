"""Tiers are marked by folder: tests/unit, tests/integration, tests/e2e (`pytest -m unit`, ...).
The real-cluster fixtures are shared by the integration and e2e tiers: one provider per session."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.kube.client import KubeClient
from tests.harness import SESSION_CLUSTERS, Provider, keep_for_session, provider_session
from tests.prerequisites import ALLOWED_SKIPS, allowed_skips, in_ci, unlisted

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = REPO_ROOT / "examples"
# Every manifest of examples/, jobs/ and config/ included, in a stable order.
EXAMPLE_FILES = sorted(EXAMPLES.rglob("*.yaml"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).relative_to(REPO_ROOT / "tests").parts[0]
        if tier in ("unit", "integration", "e2e"):
            item.add_marker(getattr(pytest.mark, tier))


_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI, a skipped test that tests/allowed_skips.txt does not list fails the run."""
    if not in_ci() or not _skipped:
        return
    refused = unlisted(_skipped, allowed_skips(ALLOWED_SKIPS.read_text()))
    if not refused:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", f"CI: {len(refused)} skipped test(s) not listed in tests/{ALLOWED_SKIPS.name}", red=True)
        for nodeid in refused:
            reporter.write_line(f"  {nodeid}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    with provider_session(tmp_path_factory.mktemp("clusters")) as created:
        SESSION_CLUSTERS.provider = created
        try:
            yield created
        finally:
            SESSION_CLUSTERS.provider = None


@pytest.fixture(scope="module", autouse=True)
def _clusters_end_with_their_module() -> Iterator[None]:
    """A cluster a test module started is deleted when the module ends, unless a session fixture
    keeps it: the whole run starts about sixty, and kept alive together their apiservers alone
    would outgrow a 24 GiB machine."""
    before = set(SESSION_CLUSTERS.provider.clusters) if SESSION_CLUSTERS.provider is not None else set()
    yield
    provider = SESSION_CLUSTERS.provider
    if provider is not None:
        provider.delete([c for name, c in list(provider.clusters.items()) if name not in before and name not in SESSION_CLUSTERS.kept])


@pytest.fixture(scope="session")
def manager_cluster(provider: Provider) -> Any:
    created = provider.create(["manager"])
    keep_for_session(created)
    return created[0]


@pytest.fixture(scope="session")
def worker_clusters(provider: Provider) -> Callable[[int], list[Any]]:
    """`worker_clusters(n)`: the first n worker clusters, started (in parallel) on first use."""
    started: list[Any] = []

    def get(count: int) -> list[Any]:
        missing = [f"worker{i}" for i in range(len(started) + 1, count + 1)]
        if missing:
            created = provider.create(missing)
            keep_for_session(created)
            started.extend(created)
        return started[:count]

    return get


@pytest.fixture(scope="session")
def jobs_cluster(provider: Provider) -> Any:
    """A cluster with kube-controller-manager, kube-scheduler and kwok nodes: Jobs really run."""
    created = provider.create(["jobs"], jobs=True)
    keep_for_session(created)
    return created[0]


@contextlib.asynccontextmanager
async def client_of(cluster: Any, name: str) -> AsyncIterator[KubeClient]:
    """kfed's own gateway to a cluster of the harness, closed after the block."""
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig(), name=name)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def kube(cluster: Any) -> AsyncIterator[KubeClient]:
    """kfed's own gateway to the test module's `cluster`, as a user's tooling would hold one."""
    async with client_of(cluster, "test") as client:
        yield client


@pytest.fixture
def names() -> Callable[[str], str]:
    """Names unique to one test (`names("cq")` is `cq-1a2b3c`), so tests share clusters safely."""
    suffix = uuid.uuid4().hex[:6]
    return lambda base: f"{base}-{suffix}"
