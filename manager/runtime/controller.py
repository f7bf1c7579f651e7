"""The controller loop: workers take keys from a WorkQueue and reconcile them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from manager.kube.errors import ConflictError, KubeError, NotFoundError
from manager.runtime.metrics import Registry
from manager.runtime.workqueue import WorkQueue

log = logging.getLogger("kfed.controller")


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for next: nothing, or another pass after `requeue_after` seconds."""

    requeue_after: float | None = None


Reconcile = Callable[[str], Awaitable[Result | None]]


class RetryWithBackoff(Exception):
    """Raised by a reconcile that could not finish for a reason time may fix (an object it
    refers to is not there yet): the key is retried with its growing backoff, as
    controller-runtime retries a reconcile that returned an error, without a warning."""


class Controller:
    """Level-triggered: `enqueue(key)` from event handlers; `reconcile(key)` reads caches and writes.

    A ConflictError means the snapshot was stale: requeue soon, without counting a failure
    toward the key's backoff. Other errors back off per key. Reconcile bugs are logged and
    retried with backoff; they never stop the loop.
    """

    def __init__(self, name: str, reconcile: Reconcile, *, metrics: Registry, workers: int = 4) -> None:
        self.name = name
        self.reconcile = reconcile
        self.workers = workers
        self.queue = WorkQueue()
        self._reconciles = metrics.counter(
            "kfed_controller_reconcile_total", "Reconciles by controller and result.", ("controller", "result")
        )
        self._duration = metrics.histogram("kfed_controller_reconcile_seconds", "Reconcile duration.", ("controller",))

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}") for i in range(self.workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()

    def stop(self) -> None:
        self.queue.close()

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            if key is None:
                return
            started = time.monotonic()
            outcome = "success"
            try:
                result = await self.reconcile(key)
                self.queue.forget(key)
                if result is not None and result.requeue_after is not None:
                    self.queue.add_after(key, result.requeue_after)
            except asyncio.CancelledError:
                raise
            except RetryWithBackoff as err:
                outcome = "retry"
                log.debug("retrying with backoff", extra={"controller": self.name, "key": key, "error": str(err)})
                self.queue.add_rate_limited(key)
            except ConflictError as err:
                outcome = "conflict"
                log.debug("stale snapshot; requeueing", extra={"controller": self.name, "key": key, "error": str(err)})
                self.queue.add_after(key, 0.05)
            except NotFoundError as err:
                outcome = "notfound"
                log.debug("object gone; requeueing", extra={"controller": self.name, "key": key, "error": str(err)})
                self.queue.add_rate_limited(key)
            except KubeError as err:
                outcome = "error"
                log.warning("reconcile failed", extra={"controller": self.name, "key": key, "error": str(err)})
                self.queue.add_rate_limited(key)
            except Exception:
                outcome = "error"
                log.exception("reconcile crashed", extra={"controller": self.name, "key": key})
                self.queue.add_rate_limited(key)
            finally:
                self.queue.done(key)
                self._reconciles.inc(self.name, outcome)
                self._duration.observe(time.monotonic() - started, self.name)
