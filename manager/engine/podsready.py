"""Kueue's waitForPodsReady rules (pure; the time is an argument): the PodsReady condition the
job reconciler writes, when the workload controller's timeout runs out, the requeue backoff
and its limit, and which workloads block admission with `blockAdmission`.

The job controller asks `pods_ready_condition`; the admission state asks `pods_ready_timeout`
and `requeue_after_timeout` for each admitted workload and `blocks_admission` before each
admission; the scheduler asks `backoff_pending` before it queues a workload.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from manager.api import constants as c
from manager.api.config import WaitForPodsReady

# PodsReady's reasons (Kueue's workload_types.go).
WAIT_FOR_START = "WaitForStart"
WAIT_FOR_RECOVERY = "WaitForRecovery"
STARTED = "Started"
RECOVERED = "Recovered"
NOT_READY_MESSAGE = "Not all pods are ready or succeeded"
WAITING_FOR_RECOVERY_MESSAGE = "At least one pod has failed, waiting for recovery"
READY_MESSAGE = "All pods reached readiness and the workload is running"

REASON_PODS_READY_TIMEOUT = "PodsReadyTimeout"
REASON_REQUEUING_LIMIT_EXCEEDED = "RequeuingLimitExceeded"
REQUEUING_LIMIT_MESSAGE = "exceeding the maximum number of re-queuing retries"
# QuotaReserved=False while blockAdmission holds a workload back.
REASON_WAITING_FOR_PODS_READY = "WaitingForPodsReady"
WAITING_FOR_PODS_READY_MESSAGE = "waiting for all admitted workloads to be in PodsReady condition"
JITTER = 0.0001  # Kueue's backoff jitter: at most this fraction of the wait is added


class ConditionLike(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def last_transition_time(self) -> datetime | None: ...


def pods_ready_condition(*, admitted: bool, pods_ready: bool, current: ConditionLike | None) -> tuple[str, str, str]:
    """(status, reason, message) of the PodsReady condition Kueue's job reconciler writes when
    waitForPodsReady is on: False/WaitForStart until the workload is admitted and its pods are
    ready; True/Started (Recovered after a recovery); False/WaitForRecovery when ready pods are
    lost after the start."""
    if not admitted:
        return "False", WAIT_FOR_START, NOT_READY_MESSAGE
    if pods_ready:
        recovering = current is not None and current.reason in (WAIT_FOR_RECOVERY, RECOVERED)
        return "True", RECOVERED if recovering else STARTED, READY_MESSAGE
    if current is not None and (current.status == "True" or current.reason == WAIT_FOR_RECOVERY):
        return "False", WAIT_FOR_RECOVERY, WAITING_FOR_RECOVERY_MESSAGE
    return "False", WAIT_FOR_START, NOT_READY_MESSAGE


def timeout_cause(pods_ready: ConditionLike | None) -> str:
    """The underlying cause Kueue gives a PodsReady timeout (its evicted_workloads_total label):
    WaitForRecovery after the pods were once ready, else WaitForStart."""
    return WAIT_FOR_RECOVERY if pods_ready is not None and pods_ready.reason == WAIT_FOR_RECOVERY else WAIT_FOR_START


def pods_ready_timeout(
    config: WaitForPodsReady, *, admitted: ConditionLike | None, pods_ready: ConditionLike | None, now: datetime
) -> tuple[str, timedelta] | None:
    """Kueue's admittedNotReadyWorkload: for an admitted workload whose pods are not ready,
    (underlying cause, time left): the timeout counts from the Admitted transition while it
    waits for its start, the recovery timeout from PodsReady's last transition to
    WaitForRecovery. None when nothing is timed (not admitted, ready, no recovery timeout)."""
    if admitted is None or admitted.status != "True":
        return None
    if pods_ready is not None and pods_ready.status == "True":
        return None
    if pods_ready is None or pods_ready.reason in (WAIT_FOR_START, c.PODS_READY):
        since = admitted.last_transition_time or now
        return timeout_cause(pods_ready), max(config.effective_timeout - (now - since), timedelta(0))
    recovery = config.effective_recovery_timeout
    if pods_ready.reason == WAIT_FOR_RECOVERY and recovery is not None:
        since = pods_ready.last_transition_time or now
        return timeout_cause(pods_ready), max(recovery - (now - since), timedelta(0))
    return None


def requeue_backoff(count: int, *, base_seconds: int, max_seconds: int, jitter: float = 0.0) -> timedelta:
    """The wait before the `count`-th requeue: base * 2^(count-1), capped at max (Kueue's
    wait.Backoff), plus `jitter` (a draw in [0, 1)) times JITTER of it."""
    wait = float(base_seconds)
    for _ in range(max(count, 1) - 1):
        wait *= 2
        if wait >= max_seconds:
            wait = float(max_seconds)
            break
    wait = min(wait, float(max_seconds)) if max_seconds > 0 else wait
    return timedelta(seconds=wait * (1 + JITTER * jitter))


@dataclass(frozen=True)
class RequeueDecision:
    """What the workload controller does once the timeout ran out: deactivate the workload
    (the requeuing limit is spent), or evict it and requeue it `count` times at `requeue_at`."""

    deactivate: bool
    count: int = 0
    requeue_at: datetime | None = None


def requeue_after_timeout(
    config: WaitForPodsReady, *, count: int | None, requeue_at: datetime | None, now: datetime, jitter: Callable[[], float]
) -> RequeueDecision:
    """Kueue's triggerDeactivation and UpdateRequeueState: past `backoffLimitCount` requeues
    the workload is deactivated (RequeuingLimitExceeded); otherwise count + 1 and a requeue
    time that never moves an earlier-set later one back."""
    done = count or 0
    limit = config.backoff_limit_count
    if limit is not None and done + 1 > limit:
        return RequeueDecision(deactivate=True, count=done)
    wait = requeue_backoff(done + 1, base_seconds=config.backoff_base_seconds, max_seconds=config.backoff_max_seconds, jitter=jitter())
    at = now + wait
    if requeue_at is not None and requeue_at >= at:
        at = requeue_at
    return RequeueDecision(deactivate=False, count=done + 1, requeue_at=at)


def timeout_message(key: str) -> str:
    """The Evicted message of a PodsReady timeout (`key` is namespace/name)."""
    return f"Exceeded the PodsReady timeout {key}"


def backoff_pending(*, requeued: ConditionLike | None, requeue_at: datetime | None, now: datetime) -> bool:
    """Whether a workload evicted for its pods still waits out its backoff before it may be
    queued (Kueue's backoffWaitingTimeExpired, for the PodsReady timeout): its Requeued is
    still False, or its requeueAt is still ahead."""
    if requeued is not None and requeued.status == "False" and requeued.reason == REASON_PODS_READY_TIMEOUT:
        return True
    return requeue_at is not None and requeue_at > now


def blocks_admission(ready: Iterable[bool]) -> bool:
    """blockAdmission: any workload holding quota (in any ClusterQueue) whose PodsReady is not
    True holds every admission back (Kueue's PodsReadyForAllAdmittedWorkloads)."""
    return not all(ready)
