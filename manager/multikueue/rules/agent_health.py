"""Is a worker's admission side running? Judged from its agent's leader-election Lease (pure).

A worker whose apiserver answers but whose `worker_agent` has stopped (it lost its lease after
a freeze and nothing restarted it, or its Deployment is scaled to zero) still looks connected:
the manager's watches work. Copies sent there would wait forever for an admission that never
comes. The agent renews `kfed-system/kfed-worker-agent` every retry period, so a Lease whose
renewal the manager has not *seen change* for longer than its duration means no agent is
running. As client-go's leader election does, expiry is judged by the observer's own monotonic
clock from the moment it saw the Lease change, never by comparing the worker's timestamps with
the manager's (the clocks of two clusters may differ).

A worker with no such Lease (upstream Kueue, or a role that may not read it) is not judged:
its admission side is unknown, and it is treated as running, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

AGENT_LEASE_NAMESPACE = "kfed-system"
AGENT_LEASE_NAME = "kfed-worker-agent"
REASON_AGENT_NOT_RUNNING = "AdmissionAgentNotRunning"
DEFAULT_LEASE_SECONDS = 15.0
# How often the Lease is read: often enough to notice within about one lease duration, rarely
# enough to cost nothing next to the workload traffic (a 15 s lease is read every 5 s).
MIN_POLL_SECONDS = 1.0
MAX_POLL_SECONDS = 5.0


@dataclass(frozen=True)
class LeaseSighting:
    """What one read of the agent's Lease showed; None fields were not set on the Lease."""

    holder: str | None
    renew_time: str | None
    duration_seconds: int | None


@dataclass(frozen=True)
class AgentVerdict:
    running: bool | None  # None: unknown (no kfed agent Lease to judge by)
    message: str = ""


@dataclass
class AgentLeaseWatch:
    """Keeps what was last seen of one worker's agent Lease, and when it last changed."""

    last: LeaseSighting | None = None
    changed_at: float | None = None  # monotonic seconds of the observer

    def observe(self, sighting: LeaseSighting | None, now: float) -> None:
        """Record one read: `None` when the Lease does not exist or may not be read."""
        if sighting is None:
            self.last, self.changed_at = None, None
            return
        if sighting != self.last:
            self.last, self.changed_at = sighting, now

    def forget(self) -> None:
        self.last, self.changed_at = None, None

    def poll_interval(self) -> float:
        duration = float(self.last.duration_seconds) if self.last and self.last.duration_seconds else DEFAULT_LEASE_SECONDS
        return min(MAX_POLL_SECONDS, max(MIN_POLL_SECONDS, duration / 3))

    def verdict(self, now: float) -> AgentVerdict:
        if self.last is None or self.changed_at is None:
            return AgentVerdict(None)
        duration = float(self.last.duration_seconds or DEFAULT_LEASE_SECONDS)
        unseen_for = now - self.changed_at
        if unseen_for <= duration:
            return AgentVerdict(True)
        holder = f"last held by {self.last.holder}" if self.last.holder else "released"
        return AgentVerdict(
            False,
            f"the worker's admission agent is not running: its Lease {AGENT_LEASE_NAMESPACE}/{AGENT_LEASE_NAME} "
            f"({holder}) has not been renewed for {unseen_for:.0f}s, longer than its {duration:.0f}s duration; "
            "new workloads are not sent to this worker until it runs again",
        )
