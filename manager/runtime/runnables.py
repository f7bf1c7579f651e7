"""Runnables and when they run, as controller-runtime's runnable groups.

A process is a set of runnables: long-lived coroutines such as a cache, a webhook server or a
controller's workers. Some run on every replica (caches, probes, the work that only reads).
The others write to the API and so run only on the replica that holds the lease
(controller-runtime's `LeaderElectionRunnable`): they start when the lease is won, and they
are cancelled when it is lost or the process stops. A controller therefore never asks whether
it leads; its writing part is simply not running on a standby.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from manager.runtime.tasks import cancel_and_wait

log = logging.getLogger("kfed.runnables")

RunFunc = Callable[[], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class Runnable:
    """One coroutine function to run; `needs_leader` keeps it off standby replicas."""

    name: str
    run: RunFunc
    needs_leader: bool = False


def leader(name: str, run: RunFunc) -> Runnable:
    """A runnable that only the lease holder runs."""
    return Runnable(name, run, needs_leader=True)


def always(name: str, run: RunFunc) -> Runnable:
    """A runnable that every replica runs."""
    return Runnable(name, run)


def to_start(runnables: list[Runnable], *, is_leader: bool, running: set[str]) -> list[Runnable]:
    """Which runnables to start now: those not running whose group is active (every replica's
    group always, the leader's group once the lease is held), in the order they were added."""
    return [r for r in runnables if r.name not in running and (is_leader or not r.needs_leader)]


class Handlers(Protocol):
    def add_handler(self, handler: Any) -> None: ...

    def remove_handler(self, handler: Any) -> None: ...


def while_leading(name: str, source: Handlers, handler: Any) -> Runnable:
    """A leader runnable that feeds `handler` with `source`'s events while the lease is held:
    for work done per event that only one replica may do (a counter Kueue increments in its
    reconciler, which runs on the leader alone)."""

    async def run() -> None:
        source.add_handler(handler)
        try:
            await asyncio.Event().wait()  # until cancelled: the lease is lost or the process stops
        finally:
            source.remove_handler(handler)

    return leader(name, run)


class RunnableGroups:
    """Starts every replica's runnables with `start()`, the leader's with `elected()`, and
    cancels them with `stop()`; `lost()` cancels the leader's alone.

    A runnable that raises ends the process, as in controller-runtime: `failed` is set with its
    name and error, and `on_failure` is called so that the process stops and exits non-zero (its
    Deployment then restarts it), rather than run on with one controller gone."""

    def __init__(self, *, on_failure: Callable[[str, BaseException], None] | None = None) -> None:
        self.on_failure = on_failure
        self.failed: tuple[str, BaseException] | None = None
        self._runnables: list[Runnable] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._started = False
        self._is_leader = False
        self._on_elected: list[Callable[[], None]] = []

    def add(self, *runnables: Runnable) -> None:
        for runnable in runnables:
            if any(r.name == runnable.name for r in self._runnables):
                raise ValueError(f"runnable {runnable.name!r} is added twice")
            self._runnables.append(runnable)
        if self._started:
            self._start_due()

    def on_elected(self, callback: Callable[[], None]) -> None:
        """Call `callback` each time the lease is won, before the leader's runnables start."""
        self._on_elected.append(callback)

    def start(self) -> None:
        self._started = True
        self._start_due()

    def elected(self) -> None:
        """The lease is held (or there is no election): start the leader's runnables."""
        self._is_leader = True
        for callback in self._on_elected:
            callback()
        self._start_due()

    async def lost(self) -> None:
        """The lease is gone: cancel the leader's runnables and wait until they have stopped."""
        self._is_leader = False
        leaders = {r.name for r in self._runnables if r.needs_leader}
        await cancel_and_wait([self._tasks.pop(name) for name in list(self._tasks) if name in leaders])

    async def stop(self) -> None:
        self._is_leader = False
        self._started = False
        tasks, self._tasks = list(self._tasks.values()), {}
        await cancel_and_wait(tasks)

    def running(self) -> set[str]:
        return {name for name, task in self._tasks.items() if not task.done()}

    def _start_due(self) -> None:
        for runnable in to_start(self._runnables, is_leader=self._is_leader, running=set(self._tasks)):
            task = asyncio.create_task(self._guard(runnable), name=runnable.name)
            self._tasks[runnable.name] = task

    async def _guard(self, runnable: Runnable) -> None:
        try:
            await runnable.run()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.exception("runnable stopped with an error; the process stops", extra={"runnable": runnable.name})
            if self.failed is None:
                self.failed = (runnable.name, err)
            if self.on_failure is not None:
                self.on_failure(runnable.name, err)
