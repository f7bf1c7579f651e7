"""Lease-based leader election, as client-go's leaderelection with a coordination.k8s.io Lease.

Expiry is judged by the local monotonic clock from when this process last saw the lease
change, never by comparing another host's renewTime with ours (clocks skew).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from manager.api.core import Lease, LeaseSpec
from manager.api.meta import ObjectMeta, utcnow
from manager.kube.client import KubeClient
from manager.kube.errors import ConflictError, KubeError, NotFoundError

log = logging.getLogger("kfed.leader")


def micro_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaderConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaderElector:
    """`await run()` returns once leadership is held; `await hold()` renews until it is lost."""

    def __init__(
        self,
        client: KubeClient,
        cfg: LeaderConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.client = client
        self.cfg = cfg
        self.clock = clock  # judges expiry
        self.wall_clock = wall_clock  # stamps acquireTime and renewTime
        self.is_leader = False
        self.transitions_seen = 0
        self._observed: tuple[str, str, str] | None = None  # holder, renewTime, resourceVersion
        self._observed_at = 0.0
        self._lease: Lease | None = None

    async def _try_acquire_or_renew(self) -> bool:
        cfg = self.cfg
        now = micro_time(self.wall_clock())
        try:
            lease = await self.client.get(Lease, cfg.name, namespace=cfg.namespace)
        except NotFoundError:
            fresh = Lease(
                metadata=ObjectMeta(name=cfg.name, namespace=cfg.namespace),
                spec=LeaseSpec(
                    holder_identity=cfg.identity,
                    lease_duration_seconds=int(cfg.lease_duration),
                    acquire_time=now,
                    renew_time=now,
                    lease_transitions=0,
                ),
            )
            try:
                self._lease = await self.client.create(Lease, fresh)
            except ConflictError:
                return False
            self._see(self._lease)
            return True
        self._see(lease)
        spec = lease.spec
        holder = spec.holder_identity or ""
        expired = self.clock() - self._observed_at > float(spec.lease_duration_seconds or self.cfg.lease_duration)
        if holder and holder != cfg.identity and not expired:
            return False
        ours = holder == cfg.identity
        lease.spec = LeaseSpec(
            holder_identity=cfg.identity,
            lease_duration_seconds=int(cfg.lease_duration),
            acquire_time=spec.acquire_time if ours else now,
            renew_time=now,
            lease_transitions=(spec.lease_transitions or 0) + (0 if ours else 1),
        )
        try:
            self._lease = await self.client.replace(Lease, lease)  # resourceVersion is the precondition
        except ConflictError:
            return False
        self._see(self._lease)
        return True

    def _see(self, lease: Lease) -> None:
        record = (lease.spec.holder_identity or "", lease.spec.renew_time or "", lease.metadata.resource_version or "")
        if record != self._observed:
            self._observed = record
            self._observed_at = self.clock()

    async def acquire(self, stop: asyncio.Event | None = None) -> bool:
        """Wait until this process holds the lease (True), or `stop` is set (False)."""
        while stop is None or not stop.is_set():
            try:
                if await self._try_acquire_or_renew():
                    self.is_leader = True
                    log.info("became leader", extra={"key": f"{self.cfg.namespace}/{self.cfg.name}", "identity": self.cfg.identity})
                    return True
            except KubeError as err:
                log.warning("leader election: cannot read the lease", extra={"key": self.cfg.name, "error": str(err)})
            await _wait(stop, self.cfg.retry_period)
        return False

    async def hold(self, stop: asyncio.Event | None = None) -> None:
        """Renew every retry period. Returns when renewal failed for longer than the renew
        deadline (leadership lost), or when `stop` is set (then the caller releases)."""
        last_renew = self.clock()
        while stop is None or not stop.is_set():
            await _wait(stop, self.cfg.retry_period)
            if stop is not None and stop.is_set():
                return
            try:
                renewed = await asyncio.wait_for(self._try_acquire_or_renew(), timeout=self.cfg.renew_deadline)
            except (KubeError, TimeoutError):
                renewed = False
            if renewed:
                last_renew = self.clock()
            elif self.clock() - last_renew > self.cfg.renew_deadline or self._held_by_other():
                self.is_leader = False
                log.error("lost leadership", extra={"key": f"{self.cfg.namespace}/{self.cfg.name}", "identity": self.cfg.identity})
                return

    def _held_by_other(self) -> bool:
        return self._observed is not None and self._observed[0] not in ("", self.cfg.identity)

    async def release(self) -> None:
        """Give the lease up at once (on SIGTERM), so a standby need not wait for it to expire."""
        if not self.is_leader or self._lease is None:
            return
        lease = self._lease
        lease.spec.holder_identity = None
        lease.spec.lease_duration_seconds = 1
        lease.spec.renew_time = micro_time(self.wall_clock())
        try:
            await self.client.replace(Lease, lease)
            log.info("released leadership", extra={"key": f"{self.cfg.namespace}/{self.cfg.name}", "identity": self.cfg.identity})
        except KubeError as err:
            log.warning("could not release the lease", extra={"key": self.cfg.name, "error": str(err)})
        self.is_leader = False


async def _wait(stop: asyncio.Event | None, seconds: float) -> None:
    """Wait `seconds`, or less if `stop` is set: the election's retry period, not a sync point."""
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
