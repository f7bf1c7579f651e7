"""A client-side token bucket, as client-go's: QPS tokens a second, up to `burst` saved."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """`await acquire()` takes one token, waiting for the bucket to refill when it is empty.

    Waiters are served in arrival order (one lock), so a burst of reconciles cannot starve a
    lease renewal that queued earlier. The clock is injectable for tests.
    """

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"rate limit needs qps > 0 and burst >= 1, got qps={qps} burst={burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = asyncio.Lock()
        self.waited_seconds = 0.0

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    def delay(self) -> float:
        """Seconds until a token is free (0 when one is), without taking it."""
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.qps

    async def acquire(self) -> None:
        async with self._lock:
            wait = self.delay()
            if wait > 0:
                self.waited_seconds += wait
                await asyncio.sleep(wait)  # pacing, not synchronisation
                self._refill()
            self._tokens -= 1
