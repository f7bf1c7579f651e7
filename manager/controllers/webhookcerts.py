"""Webhook certificates managed by kfed itself (no cert-manager): a CA and serving
certificate kept in one Secret, so that every replica behind the webhook Service serves the
same certificate; rotated before it expires; and handed to the webhook and CRD conversion
configurations whenever it changes."""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from manager.api.core import Secret
from manager.api.meta import utcnow
from manager.kube.client import KubeClient
from manager.kube.errors import AlreadyExistsError, ConflictError, KubeError, NotFoundError
from manager.runtime.certs import BUNDLE_KEYS, ServingCert, needs_rotation, new_bundle, write_bundle
from manager.runtime.runnables import Runnable, always, leader

log = logging.getLogger("kfed.webhookcerts")


@dataclass(eq=False)
class WebhookCertManager:
    """The serving certificate in Secret `namespace`/`secret`, for `names` and `ips`: written to
    `directory` when it changes, rotated by the lease holder `rotate_before` it expires."""

    client: KubeClient
    _: KW_ONLY
    namespace: str
    secret: str
    names: tuple[str, ...]
    ips: tuple[str, ...]
    directory: Path
    validity: datetime.timedelta
    rotate_before: datetime.timedelta
    check_interval: float
    on_change: Callable[[ServingCert], Awaitable[None]]
    clock: Callable[[], datetime.datetime] = utcnow
    serving: dict[str, bytes] | None = field(default=None, init=False)
    rotations: int = field(default=0, init=False)

    async def _read(self) -> tuple[dict[str, bytes] | None, str]:
        try:
            secret = await self.client.get(Secret, self.secret, namespace=self.namespace)
        except NotFoundError:
            return None, ""
        data = secret.data or {}
        bundle = {key: base64.b64decode(data[key]) for key in BUNDLE_KEYS if key in data}
        return bundle, secret.metadata.resource_version or ""

    async def _store(self, resource_version: str) -> dict[str, bytes] | None:
        """Write a new bundle; None when another replica wrote one first (read it again)."""
        bundle = new_bundle(names=self.names, ips=self.ips, validity=self.validity)
        metadata: dict[str, Any] = {"name": self.secret, "namespace": self.namespace, "labels": {"app.kubernetes.io/managed-by": "kfed"}}
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": metadata,
            "data": {key: base64.b64encode(value).decode() for key, value in bundle.items()},
        }
        try:
            if resource_version:
                metadata["resourceVersion"] = resource_version
                await self.client.replace(Secret, Secret.model_validate(body))
            else:
                await self.client.create(Secret, body, namespace=self.namespace)
        except (AlreadyExistsError, ConflictError):
            return None
        self.rotations += 1
        log.info(
            "webhook certificate written", extra={"key": f"{self.namespace}/{self.secret}", "expires": str(self.clock() + self.validity)}
        )
        return bundle

    async def ensure(self) -> ServingCert:
        """At start: the Secret's bundle (made now if missing or expiring), on disk."""
        for _ in range(5):
            bundle, version = await self._read()
            if bundle is not None and not needs_rotation(bundle, now=self.clock(), before=self.rotate_before):
                break
            bundle = await self._store(version)
            if bundle is not None:
                break
        if bundle is None:
            raise KubeError(f"cannot settle the webhook certificate in Secret {self.namespace}/{self.secret}")
        self.serving = bundle
        return write_bundle(self.directory, bundle)

    async def check(self, *, rotate: bool = False) -> None:
        """One round: every replica serves what the Secret holds; with `rotate` (the leader's
        round) an expiring bundle is replaced first."""
        bundle, version = await self._read()
        if rotate and needs_rotation(bundle, now=self.clock(), before=self.rotate_before):
            bundle = await self._store(version) or (await self._read())[0]
        if bundle is None or bundle == self.serving or needs_rotation(bundle, now=self.clock(), before=datetime.timedelta(0)):
            return
        self.serving = bundle
        await self.on_change(write_bundle(self.directory, bundle))

    def runnables(self) -> list[Runnable]:
        """Every replica follows the Secret; the lease holder alone rotates it."""
        return [always("webhook-certs", self._follow), leader("webhook-certs-rotation", self._rotate)]

    async def _follow(self) -> None:
        await self._every_interval(rotate=False)

    async def _rotate(self) -> None:
        await self._every_interval(rotate=True)

    async def _every_interval(self, *, rotate: bool) -> None:
        while True:
            await asyncio.sleep(self.check_interval)  # the rotation check period
            try:
                await self.check(rotate=rotate)
            except asyncio.CancelledError:
                raise
            except KubeError as err:
                log.warning("webhook certificate check failed", extra={"key": f"{self.namespace}/{self.secret}", "error": str(err)})
