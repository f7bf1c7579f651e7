"""The admission state's timers (pure): Kueue's workload controller with waitForPodsReady. An
admitted workload whose pods are not ready in time is evicted (PodsReadyTimeout) or, past the
requeuing limit, deactivated; a workload released here (no job owns it) waits out its backoff,
which this ends (Requeued=True, BackoffFinished). Each timer is a deadline per workload, run
out by `expire_pods_ready` and `end_backoffs` at the start of each cycle.

`AdmissionState` (`manager.engine.state`) keeps the workloads; this is the part of it that
keeps their deadlines.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from manager.api import constants as c
from manager.api import kueue
from manager.api.config import Configuration
from manager.engine.podsready import (
    REASON_PODS_READY_TIMEOUT,
    REASON_REQUEUING_LIMIT_EXCEEDED,
    REQUEUING_LIMIT_MESSAGE,
    pods_ready_timeout,
    requeue_after_timeout,
    timeout_message,
)
from manager.engine.scheduler import Scheduler
from manager.engine.workload import BACKOFF_FINISHED, DEACTIVATION_TARGET, WorkloadInfo


class Deadlines:
    """The waitForPodsReady timeouts and backoffs of `AdmissionState`."""

    # Kept by AdmissionState: the configuration, the backoff's random draw in [0, 1), when each
    # admitted workload's timeout runs out, when each backoff of a workload released here ends,
    # the workloads, those to flush, and the scheduler that queues them.
    config: Configuration
    jitter: Callable[[], float]
    pods_ready_deadlines: dict[str, datetime]
    backoff_deadlines: dict[str, datetime]
    infos: dict[str, WorkloadInfo]
    dirty: set[str]
    scheduler: Scheduler

    def _check_reserved(self, info: WorkloadInfo, now: datetime) -> None:
        raise NotImplementedError

    def _pods_ready_eviction(self, info: WorkloadInfo, now: datetime) -> tuple[str, str] | None:
        """Kueue's workload controller with waitForPodsReady: an admitted workload whose pods
        are not ready in time is evicted (PodsReadyTimeout) with its requeue state advanced,
        or, past the requeuing limit, marked for deactivation (RequeuingLimitExceeded)."""
        self.pods_ready_deadlines.pop(info.key, None)
        config = self.config.pods_ready
        if config is None or not info.active:
            return None
        timeout = pods_ready_timeout(
            config, admitted=info.conditions.get(c.ADMITTED), pods_ready=info.conditions.get(c.PODS_READY), now=now
        )
        if timeout is None:
            return None
        _, remaining = timeout
        if remaining.total_seconds() > 0:
            self.pods_ready_deadlines[info.key] = now + remaining
            return None
        state = info.obj.status.requeue_state if info.obj.status else None
        decision = requeue_after_timeout(
            config, count=state.count if state else None, requeue_at=state.requeue_at if state else None, now=now, jitter=self.jitter
        )
        if decision.deactivate:
            if not info.condition_true(DEACTIVATION_TARGET):
                info.set_condition(DEACTIVATION_TARGET, "True", REASON_REQUEUING_LIMIT_EXCEEDED, REQUEUING_LIMIT_MESSAGE, now)
                self.dirty.add(info.key)
            return None
        info.requeue_state_write = (kueue.RequeueState(count=decision.count, requeue_at=decision.requeue_at),)
        info.requeue_at = decision.requeue_at
        return REASON_PODS_READY_TIMEOUT, timeout_message(info.key)

    def expire_pods_ready(self, now: datetime) -> None:
        """Evict the admitted workloads whose PodsReady timeout ran out since they were last seen."""
        due = [key for key, at in self.pods_ready_deadlines.items() if at <= now]
        for key in due:
            self.pods_ready_deadlines.pop(key, None)
            info = self.infos.get(key)
            if info is not None and info.reserved:
                self._check_reserved(info, now)

    def end_backoffs(self, now: datetime) -> None:
        """Kueue's workload controller for a pending workload that no job owns (or that was
        released here) once its backoff ran out: requeueAt cleared, Requeued=True
        (BackoffFinished) where a PodsReady timeout left it False, and queued again."""
        due = [key for key, at in self.backoff_deadlines.items() if at <= now]
        for key in due:
            del self.backoff_deadlines[key]
            info = self.infos.get(key)
            if info is None or info.reserved:
                continue
            requeued = info.conditions.get(c.REQUEUED)
            if requeued is not None and requeued.status == "False" and requeued.reason == REASON_PODS_READY_TIMEOUT:
                info.set_condition(c.REQUEUED, "True", *BACKOFF_FINISHED, now)
            count = info.obj.status.requeue_state.count if info.obj.status and info.obj.status.requeue_state else None
            info.requeue_state_write = (kueue.RequeueState(count=count),)
            info.requeue_at = None
            self.scheduler.enqueue(info, now)
            self.dirty.add(key)
