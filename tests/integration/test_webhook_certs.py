"""The webhook certificate kept in a Secret: made at start, served, rotated before it
expires while the manager runs, and admissions keep working through the rotation."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator

import pytest

from manager.api.core import Job, Secret
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
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


async def test_the_certificate_is_rotated_while_running_and_admissions_keep_working(manager: ControllerProcess, kube: KubeClient) -> None:
    ns = f"rot-{uuid.uuid4().hex[:6]}"
    await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    first = await kube.get(Secret, SECRET, namespace=SYSTEM_NAMESPACE)
    served_ca = base64.b64decode((first.data or {})["ca.crt"])
    assert base64.b64decode(await _ca_bundle(kube)).startswith(served_ca)  # the configurations trust the Secret's CA
    before = await kube.create(Job, job_manifest("before", ns), namespace=ns)
    assert before.spec.suspend is True  # suspended by the mutating webhook

    for round_ in (1, 2):

        def rotated(times: int = round_) -> bool:
            return manager_log_count(manager, "webhook certificate reloaded") >= times

        await eventually(rotated, timeout=60, what=f"rotation {round_} served")
        after = await kube.create(Job, job_manifest(f"after-{round_}", ns), namespace=ns)
        assert after.spec.suspend is True, f"admission after rotation {round_}"
    latest = await kube.get(Secret, SECRET, namespace=SYSTEM_NAMESPACE)
    assert latest.data != first.data
    new_ca = base64.b64decode((latest.data or {})["ca.crt"])

    async def trusted() -> bool:
        return base64.b64decode(await _ca_bundle(kube)).startswith(new_ca)

    await eventually(trusted, timeout=30, what="the configurations trusting the new CA")


def manager_log_count(process: ControllerProcess, message: str) -> int:
    return sum(1 for record in process.records() if record.get("msg") == message)
