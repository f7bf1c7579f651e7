"""The e2e tier shares one federation (a manager and two workers) for the session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.e2e.federation import Clients, Federation, running
from tests.harness import Provider, keep_for_session


@pytest.fixture(scope="session")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    with running(provider, Path(tmp_path_factory.mktemp("federation"))) as created:
        keep_for_session([created.manager, *created.workers.values()])
        yield created


@pytest.fixture
async def kube(fed: Federation) -> AsyncIterator[Clients]:
    clients = await Clients.open(fed)
    try:
        yield clients
    finally:
        await clients.close()
