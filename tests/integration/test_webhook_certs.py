"""The webhook certificate kept in a Secret: made at start, served, rotated before it
expires while the manager runs, and no create is refused through the rotation."""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import uuid
from collections.abc import Iterator

import pytest

from manager.api.core import Secret
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from manager.kube.errors import KubeError
from tests.harness import Provider, eventually
from tests.integration.controllers import SYSTEM_NAMESPACE, ControllerProcess, crd_cluster, running_manager
from tests.integration.test_controllers import job_manifest

SECRET = "kfed-webhook-cert"


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "certs")


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    # Certificates that live 40 s and are rotated 30 s before expiry: a rotation every ~10 s.
    extra = [
        f"--webhook-cert-secret={SECRET}",
        "--webhook-cert-validity=40s",
        "--webhook-cert-rotate-before=30s",
        "--webhook-cert-check-interval=1",
    ]
    with running_manager(cluster, tmp_path_factory.mktemp("certs"), extra=extra) as process:
        yield process


async def _ca_bundle(kube: KubeClient) -> str:
    config = await kube.request(
        "GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kfed-mutating-webhook-configuration"
    )
    return str(config["webhooks"][0]["clientConfig"]["caBundle"])


async def test_the_certificate_is_rotated_while_running_and_no_create_is_refused(manager: ControllerProcess, kube: KubeClient) -> None:
    """A client creates Jobs one after another, without pause, through two rotations: every one
    reaches the mutating webhook (suspended), none is refused while the CA changes."""
    ns = f"rot-{uuid.uuid4().hex[:6]}"
    await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    first = await kube.get(Secret, SECRET, namespace=SYSTEM_NAMESPACE)
    served_ca = base64.b64decode((first.data or {})["ca.crt"])
    assert base64.b64decode(await _ca_bundle(kube)) == served_ca  # the configurations trust the Secret's trust bundle

    created: list[str] = []
    refused: list[str] = []
    stop = asyncio.Event()

    async def create_in_a_loop() -> None:
        # Dry runs: the apiserver calls the webhooks as for a real create and stores nothing.
        # kfed's client sends a POST once (no retry), as kubectl does.
        while not stop.is_set():
            name = f"loop-{len(created) + len(refused)}"
            try:
                job = await kube.request(
                    "POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body=job_manifest(name, ns), query=[("dryRun", "All")]
                )
            except KubeError as err:
                refused.append(f"{name}: {err}")
                continue
            (created if job["spec"].get("suspend") is True else refused).append(name)

    handshakes: list[str] = []
    untrusted: list[str] = []

    async def connect_in_a_loop() -> None:
        # A new connection each time, as an apiserver's fresh webhook client makes, verified with
        # the trust bundle the apiserver has stored at that moment: the served certificate must
        # never be one whose CA the stored configurations do not hold yet. (The apiserver keeps
        # its connections open, so the creates alone would miss a short window.)
        while not stop.is_set():
            trust = base64.b64decode(await _ca_bundle(kube))
            error = await asyncio.to_thread(handshake, manager.webhook_port, trust)
            (untrusted if error else handshakes).append(error or "ok")

    creator = asyncio.create_task(create_in_a_loop())
    connector = asyncio.create_task(connect_in_a_loop())
    try:
        for round_ in (1, 2):

            def rotated(times: int = round_) -> bool:
                for loop in (creator, connector):
                    if loop.done():
                        loop.result()  # the loops must run throughout: raise what ended one
                return manager_log_count(manager, "webhook certificate reloaded") >= times

            await eventually(rotated, timeout=60, what=f"rotation {round_} served")
        latest = await kube.get(Secret, SECRET, namespace=SYSTEM_NAMESPACE)
        new_ca = base64.b64decode((latest.data or {})["ca.crt"])

        async def trusted() -> bool:
            return base64.b64decode(await _ca_bundle(kube)) == new_ca

        await eventually(trusted, timeout=30, what="the configurations trusting the new trust bundle")
    finally:
        stop.set()
        await asyncio.gather(creator, connector)
    assert latest.data != first.data
    assert untrusted == [], f"{len(untrusted)} of {len(untrusted) + len(handshakes)} new connections untrusted: {untrusted[:3]}"
    assert len(handshakes) >= 20, handshakes
    assert refused == [], f"{len(refused)} of {len(created) + len(refused)} creates refused during rotation: {refused[:3]}"
    assert len(created) >= 20, created  # the loop really ran through the rotations


def handshake(port: int, trust: bytes) -> str | None:
    """A TLS handshake with the webhook server on 127.0.0.1, trusting only `trust`: None, or why it failed."""
    context = ssl.create_default_context(cadata=trust.decode())
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw, server_hostname="127.0.0.1"):
            return None
    except (ssl.SSLError, OSError) as err:
        return str(err)


def manager_log_count(process: ControllerProcess, message: str) -> int:
    return sum(1 for record in process.records() if record.get("msg") == message)
