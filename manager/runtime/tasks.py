"""Stopping asyncio tasks for certain."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

RECANCEL_SECONDS = 0.2


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel the tasks and return once every one has ended.

    One cancel is not always enough on Python 3.11: `asyncio.wait_for` swallows a cancellation
    that arrives just as the awaited thing completes (CPython gh-86296, fixed in 3.12), and a
    loop around it (wait for a wake-up or a tick) then runs on. A task still running after a
    moment is cancelled again, until it ends."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=RECANCEL_SECONDS)
    # Every task has ended; this only collects their outcomes so none is reported as unretrieved.
    await asyncio.gather(*tasks, return_exceptions=True)
