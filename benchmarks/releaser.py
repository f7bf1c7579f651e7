"""The job side of an eviction, for Workloads that no job owns: what Kueue's scheduler-performance
runner does (`test/performance/scheduler/runner/controller`, "Evicted by the test runner").

Under Kueue's lifecycle an eviction only sets `Evicted`: the victim keeps its reservation, and its
usage stays charged, until its `QuotaReserved` turns False. A job integration writes that once the
job's pods are gone; for a Workload that no job owns, the runner does. `Releaser` plays that part
for both managers alike (upstream Kueue and kfed's), `delay` seconds after it observes the eviction
(0: at once, as Kueue's runner), so that kfed's runner (`admission.py`) and the eviction-lifecycle
conformance tests drive the same protocol as Kueue's own harness.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import is_condition_true
from manager.engine.workload import REASON_PENDING, unset_reservation_patch
from manager.kube.client import KubeClient
from manager.kube.errors import ConflictError, KubeError, NotFoundError
from manager.kube.informer import Informer

log = logging.getLogger("kfed.releaser")

RELEASE_MESSAGE = "Evicted by the test runner"


def awaits_release(wl: kueue.Workload) -> bool:
    """Evicted while it still holds its reservation, and not finished."""
    conditions = wl.status.conditions if wl.status else None
    return (
        is_condition_true(conditions, c.EVICTED)
        and is_condition_true(conditions, c.QUOTA_RESERVED)
        and not is_condition_true(conditions, c.FINISHED)
    )


class Releaser:
    """Releases each evicted Workload of `informer`, `delay` seconds after the eviction is seen."""

    def __init__(self, client: KubeClient, informer: Informer[kueue.Workload], *, delay: float = 0.0) -> None:
        self.client = client
        self.informer = informer
        self.delay = delay
        self._scheduled: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        informer.add_handler(self._on_workload)

    def _on_workload(self, kind: str, old: kueue.Workload | None, new: kueue.Workload | None) -> None:
        if new is None or new.key in self._scheduled or not awaits_release(new):
            return
        self._scheduled.add(new.key)
        task = asyncio.get_running_loop().create_task(self._release(new.key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _release(self, key: str) -> None:
        try:
            if self.delay > 0:
                await asyncio.sleep(self.delay)  # how long the job takes to stop: the scripted delay itself
            current = self.informer.get(key)
            while current is not None and awaits_release(current):
                patch = unset_reservation_patch(current, reason=REASON_PENDING, message=RELEASE_MESSAGE, now=datetime.now(UTC))
                try:
                    await self.client.patch(kueue.Workload, current.name, patch, namespace=current.namespace, subresource="status")
                except ConflictError:
                    # Written meanwhile: release what is there now, as Kueue's runner retries.
                    current = await self.client.get(kueue.Workload, current.name, namespace=current.namespace)
                    continue
                except NotFoundError:
                    return
                except KubeError as err:
                    log.warning("cannot release an evicted workload", extra={"key": key, "error": str(err)})
                    return
                return
        except NotFoundError:
            return
        finally:
            self._scheduled.discard(key)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
