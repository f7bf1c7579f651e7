"""Expectations: remember writes not yet seen in the cache, so one event is not acted on twice.

After creating a Workload for a Job, the Job's next reconcile may run before the Workload
reaches the informer; without this it would create a second one (or fail on AlreadyExists
forever). A reconcile waits until what it expects has been observed, or the TTL passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_TTL = 300.0  # client-go's ExpectationsTimeout


class Expectations:
    def __init__(self, *, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self._clock = clock
        self._pending: dict[str, tuple[set[str], float]] = {}

    def expect(self, key: str, *items: str) -> None:
        """`key` (the owner) waits until each item (an object key, or key@resourceVersion) is observed."""
        wanted, _ = self._pending.get(key, (set(), 0.0))
        self._pending[key] = (wanted | set(items), self._clock())

    def observe(self, key: str, item: str) -> None:
        entry = self._pending.get(key)
        if entry is None:
            return
        entry[0].discard(item)
        if not entry[0]:
            del self._pending[key]

    def satisfied(self, key: str) -> bool:
        entry = self._pending.get(key)
        if entry is None:
            return True
        if self._clock() - entry[1] > self.ttl:
            del self._pending[key]
            return True
        return False

    def forget(self, key: str) -> None:
        self._pending.pop(key, None)
