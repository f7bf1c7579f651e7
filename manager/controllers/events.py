"""Kubernetes Events, as Kueue's recorder emits them: core/v1 Events on the involved object.

Emitting never blocks a controller: events go through a bounded queue and are dropped when
it is full (as client-go's broadcaster drops them), since an Event is a hint, not state. For
the same reason an Event takes its token from the client's rate limiter only when no other
request waits for one: an admission never queues behind the Events that announce it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from manager.api.meta import format_time, utcnow
from manager.kube.client import KubeClient
from manager.kube.errors import KubeError

log = logging.getLogger("kfed.events")


@dataclass(frozen=True)
class InvolvedObject:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


class EventRecorder:
    def __init__(self, client: KubeClient, *, component: str, capacity: int = 2000, clock: Callable[[], datetime] = utcnow) -> None:
        self.client = client
        self.clock = clock
        self.component = component
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=capacity)
        self.dropped = 0
        self.sent = 0

    def emit(self, obj: InvolvedObject, *, type: str, reason: str, message: str) -> None:
        now = format_time(self.clock())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{obj.name}.{secrets.token_hex(8)}", "namespace": obj.namespace or "default"},
            "involvedObject": {
                "apiVersion": obj.api_version,
                "kind": obj.kind,
                "namespace": obj.namespace,
                "name": obj.name,
                "uid": obj.uid,
            },
            "type": type,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    async def run(self) -> None:
        while True:
            event = await self.queue.get()
            namespace = event["metadata"]["namespace"]
            with contextlib.suppress(KubeError):
                await self.client.request(
                    "POST", f"/api/v1/namespaces/{namespace}/events", body=event, what="create Event", deferrable=True
                )
                self.sent += 1
