"""Webhook certificates managed by kfed itself (no cert-manager): a CA and serving
certificate kept in one Secret, so that every replica behind the webhook Service serves the
same certificate; rotated before it expires; and handed to the webhook and CRD conversion
configurations whenever it changes.

Rotation leaves no moment in which the apiserver refuses a call, as cert-manager's CA injector
and trust bundles do it: the CA of the next certificate is in the trust bundle (`ca.crt`, the
configurations' `caBundle`) a whole rotation period before any certificate it signs is served,
the lease holder serves that certificate only once the stored configurations trust its CA, and
the CA of the certificate served before stays trusted for one more period, while the other
replicas switch."""

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
from manager.runtime.certs import (
    ADD_NEXT_CA,
    CREATE,
    KEEP,
    ROTATE,
    SECRET_KEYS,
    ServingCert,
    new_bundle,
    plan_rotation,
    rotated,
    with_next_ca,
    write_bundle,
)
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
    # Whether the webhook configurations, as the apiserver stored them, trust this CA.
    trusted: Callable[[bytes], bool]
    clock: Callable[[], datetime.datetime] = utcnow
    serving: dict[str, bytes] | None = field(default=None, init=False)
    rotations: int = field(default=0, init=False)

    async def _read(self) -> tuple[dict[str, bytes] | None, str]:
        try:
            secret = await self.client.get(Secret, self.secret, namespace=self.namespace)
        except NotFoundError:
            return None, ""
        data = secret.data or {}
        bundle = {key: base64.b64decode(data[key]) for key in SECRET_KEYS if key in data}
        return bundle, secret.metadata.resource_version or ""

    async def _store(self, bundle: dict[str, bytes], resource_version: str) -> dict[str, bytes] | None:
        """Write `bundle`; None when another replica wrote first (read it again)."""
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

    def _next(self, plan: str, bundle: dict[str, bytes] | None) -> dict[str, bytes] | None:
        """The bundle to write for `plan`, or None to keep the Secret as it is."""
        if plan == CREATE or bundle is None:
            return new_bundle(names=self.names, ips=self.ips, validity=self.validity)
        if plan == ADD_NEXT_CA:
            return with_next_ca(bundle, validity=self.validity)
        if plan == ROTATE:
            if not self.trusted(bundle["next-ca.crt"]):
                log.warning(
                    "webhook certificate rotation waits until the webhook configurations trust the next CA",
                    extra={"key": f"{self.namespace}/{self.secret}"},
                )
                return None
            return rotated(bundle, names=self.names, ips=self.ips, validity=self.validity)
        return None

    async def ensure(self) -> ServingCert:
        """At start: the Secret's bundle on disk, made now if it is missing or its certificate has
        expired, and given a next CA if it has none. Rotation is the lease holder's, later."""
        for _ in range(5):
            bundle, version = await self._read()
            plan = plan_rotation(bundle, now=self.clock(), before=datetime.timedelta(0))
            if plan == KEEP:
                break
            bundle = await self._store(self._next(plan, bundle) or {}, version)
            if bundle is not None:
                break
        if bundle is None:
            raise KubeError(f"cannot settle the webhook certificate in Secret {self.namespace}/{self.secret}")
        self.serving = bundle
        return write_bundle(self.directory, bundle)

    async def check(self, *, rotate: bool = False) -> None:
        """One round: every replica serves what the Secret holds; with `rotate` (the leader's
        round) the bundle is first rotated, created or given its next CA when it is time."""
        bundle, version = await self._read()
        if rotate:
            following = self._next(plan_rotation(bundle, now=self.clock(), before=self.rotate_before), bundle)
            if following is not None:
                bundle = await self._store(following, version) or (await self._read())[0]
        if bundle is None or bundle == self.serving or plan_rotation(bundle, now=self.clock(), before=datetime.timedelta(0)) == CREATE:
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
