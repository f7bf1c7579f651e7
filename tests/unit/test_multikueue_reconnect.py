"""How long the manager waits before reconnecting to a worker: 5 s doubling to 320 s, or sooner
when the worker's apiserver says when to come back (Retry-After), so that an apiserver restart
is a blip and not a lost worker."""

from __future__ import annotations

import pytest
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

from manager.multikueue.controllers.remote import ConnectionFailedError, backoff_wait, reconnect_wait

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("backoff", "retry_after", "expected"),
    [
        (5.0, None, 5.0),  # no hint: the backoff step
        (10.0, 1.0, 1.0),  # a restarting apiserver asks for 1 s
        (5.0, 60.0, 5.0),  # never later than the backoff would have tried
        (20.0, -3.0, 1.0),  # a nonsense hint is not a busy loop
        (20.0, 0.0, 1.0),
    ],
)
def test_the_wait_is_the_backoff_or_the_servers_retry_after_whichever_is_sooner(
    backoff: float, retry_after: float | None, expected: float
) -> None:
    assert reconnect_wait(backoff, retry_after) == expected


async def test_the_reconnect_loop_honours_retry_after_and_keeps_its_backoff() -> None:
    """The real tenacity loop, as `RemoteCluster._run` builds it, with a sleep that records."""
    restarting = ConnectionFailedError("storage is (re)initializing", retry_after=1)
    failures = [ConnectionFailedError("refused"), restarting, ConnectionFailedError("refused"), None]
    slept: list[float] = []

    async def record(seconds: float) -> None:
        slept.append(seconds)

    attempts = iter(failures)
    retrying = AsyncRetrying(
        retry=retry_if_exception_type(ConnectionFailedError), wait=backoff_wait, sleep=record, stop=stop_after_attempt(5), reraise=True
    )
    async for attempt in retrying:
        with attempt:
            failure = next(attempts)
            if failure is not None:
                raise failure
    assert slept == [5.0, 1.0, 20.0]
