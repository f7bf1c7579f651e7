"""The e2e tier shares one federation (a manager and two workers) for the session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.e2e.federation import Clients, Federation, build, stop
from tests.harness import Provider


@pytest.fixture(scope="session")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    created = build(provider, Path(tmp_path_factory.mktemp("federation")))
    try:
        yield created
    finally:
        stop(created)


@pytest.fixture
async def kube(fed: Federation) -> AsyncIterator[Clients]:
    clients = await Clients.open(fed)
    try:
        yield clients
    finally:
        await clients.close()
