"""Client-side flow control: a token bucket as client-go's (QPS tokens a second, up to `burst`
saved), and a semaphore for concurrent writes, both serving their waiters by turn."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import AsyncIterator, Callable

# The turn a request waits for. A deferrable one is served only when no other waits: at the
# token bucket an Event, so that a controller's own requests (an admission, a lease renewal)
# never queue behind the Events that describe them; at the manager's write semaphore a
# message on a workload that still waits, or a queue's status, behind admissions and
# evictions. client-go reaches the same end for Events with a bucket per resource kind; one
# bucket shared by turn keeps the total the administrator configured.
REQUEST = 0
DEFERRABLE = 1


class Turns:
    """Waiters, first turn first, then in arrival order. A cancelled waiter is skipped."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._heap)

    def join(self, turn: int) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (turn, next(self._arrivals), waiter))
        return waiter

    def first(self) -> asyncio.Future[None] | None:
        """The waiter to serve next, left in line (None when nobody waits)."""
        while self._heap and self._heap[0][2].done():
            heapq.heappop(self._heap)
        return self._heap[0][2] if self._heap else None

    def serve(self) -> bool:
        """Wakes the next waiter; False when nobody waits."""
        waiter = self.first()
        if waiter is None:
            return False
        heapq.heappop(self._heap)
        waiter.set_result(None)
        return True


class TokenBucket:
    """`await acquire()` takes one token, waiting for the bucket to refill when it is empty.

    Waiters are served by turn (`REQUEST` before `DEFERRABLE`), then in arrival order, so a
    burst of reconciles cannot starve a lease renewal that queued earlier. The clock is
    injectable for tests.
    """

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"rate limit needs qps > 0 and burst >= 1, got qps={qps} burst={burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._waiters = Turns()
        self._pacer: asyncio.Task[None] | None = None
        self.waited_seconds = 0.0

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    def delay(self) -> float:
        """Seconds until a token is free (0 when one is), without taking it."""
        self._refill()
        return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.qps

    async def acquire(self, turn: int = REQUEST) -> None:
        if not self._waiters and self.delay() == 0:
            self._tokens -= 1
            return
        granted = self._waiters.join(turn)
        if self._pacer is None or self._pacer.done():
            self._pacer = asyncio.create_task(self._pace(), name="rate-limit")
        started = self._clock()
        await granted
        self.waited_seconds += self._clock() - started

    async def _pace(self) -> None:
        """Hands out tokens as the bucket refills."""
        while self._waiters.first() is not None:
            wait = self.delay()
            if wait > 0:
                await asyncio.sleep(wait)  # pacing, not synchronisation
                continue
            self._tokens -= 1
            self._waiters.serve()


class TurnSemaphore:
    """At most `limit` holders at once; `async with hold(turn)` waits its turn for a place."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a semaphore needs limit >= 1, got {limit}")
        self._free = limit
        self._waiters = Turns()

    @contextlib.asynccontextmanager
    async def hold(self, turn: int = REQUEST) -> AsyncIterator[None]:
        if self._free > 0 and not self._waiters:
            self._free -= 1
        else:
            handed = self._waiters.join(turn)
            try:
                await handed
            except asyncio.CancelledError:
                if handed.done() and not handed.cancelled():
                    self._release()  # handed a place, then cancelled before taking it
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        if not self._waiters.serve():  # a place goes straight to the next waiter, or back
            self._free += 1
