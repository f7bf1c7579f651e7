"""Keyed work queues, as client-go's: a key is processed by one worker at a time, adds while
it is processed coalesce into one more pass, failures back off per key, and adds can be delayed."""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Per-key exponential backoff: base * 2^failures, capped."""

    base: float = 0.05
    cap: float = 300.0
    failures: dict[str, int] = field(default_factory=dict)

    def next_delay(self, key: str) -> float:
        count = self.failures.get(key, 0)
        self.failures[key] = count + 1
        return float(min(self.cap, self.base * (2**count)))

    def forget(self, key: str) -> None:
        self.failures.pop(key, None)


class WorkQueue:
    def __init__(self, *, backoff: Backoff | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.backoff = backoff or Backoff()
        self._clock = clock
        self._queue: list[str] = []
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._delayed: list[tuple[float, int, str]] = []
        self._counter = 0
        self._ready = asyncio.Condition()
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        if self._closed or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._notify()

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        self._counter += 1
        heapq.heappush(self._delayed, (self._clock() + delay, self._counter, key))
        self._arm()

    def add_rate_limited(self, key: str) -> None:
        self.add_after(key, self.backoff.next_delay(key))

    def forget(self, key: str) -> None:
        self.backoff.forget(key)

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            self._timer.cancel()
        if self._delayed:
            self._timer = loop.call_at(loop.time() + max(0.0, self._delayed[0][0] - self._clock()), self._release_due)

    def _release_due(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, key = heapq.heappop(self._delayed)
            self.add(key)
        self._timer = None
        self._arm()

    def _notify(self) -> None:
        async def wake() -> None:
            async with self._ready:
                self._ready.notify()

        asyncio.get_running_loop().create_task(wake())

    async def get(self) -> str | None:
        """The next key to process (now owned by the caller until `done`), or None once closed."""
        async with self._ready:
            await self._ready.wait_for(lambda: bool(self._queue) or self._closed)
            if not self._queue:
                return None
            key = self._queue.pop(0)
            self._processing.add(key)
            self._dirty.discard(key)
            return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._notify()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()

        async def wake_all() -> None:
            async with self._ready:
                self._ready.notify_all()

        asyncio.get_running_loop().create_task(wake_all())
