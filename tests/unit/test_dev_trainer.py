"""How Kubeflow Trainer's controller manager is configured and its webhooks registered on a
local worker (`manager.dev.trainer`; pure pieces, table-tested)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from manager.api.config import Configuration
from manager.dev import catalog, federation, trainer

# The shape of the release's manifests/base/webhook/manifests.yaml (github.com/kubeflow/trainer/v2 v2.2.1).
MANIFESTS = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-trainer-kubeflow-org-v1alpha1-trainjob}}
  failurePolicy: Fail
  name: defaulter.trainjob.trainer.kubeflow.org
  rules: [{apiGroups: [trainer.kubeflow.org], apiVersions: [v1alpha1], operations: [CREATE, UPDATE], resources: [trainjobs]}]
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-trainer-kubeflow-org-v1alpha1-trainjob}}
  failurePolicy: Fail
  name: validator.trainjob.trainer.kubeflow.org
  rules: [{apiGroups: [trainer.kubeflow.org], apiVersions: [v1alpha1], operations: [CREATE, UPDATE], resources: [trainjobs]}]
  sideEffects: None
"""


@pytest.mark.parametrize("text", ["trainjob", "trainer.kubeflow.org/trainjob", "job, trainjob ,trainer.kubeflow.org/trainjob"])
def test_trainjobs_are_named_by_the_short_name_or_kueues_framework_name_and_bring_jobsets_controller(text: str) -> None:
    assert federation.parse_integrations(text) == ("trainjob",)
    config = federation.kfed_configuration(("trainjob",))
    assert Configuration.model_validate(config).effective_frameworks == ["batch/job", "trainer.kubeflow.org/trainjob"]
    assert [controller.name for controller in catalog.serving(("trainjob",))] == ["jobset", "trainer"]


def test_the_trainers_configuration_has_only_fields_its_strict_decoder_knows_and_its_cert_management_off() -> None:
    config = trainer.TRAINER.configuration(health_port=1, metrics_port=2, webhook_port=3, cert_dir=Path("/x"))
    assert config == {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": "127.0.0.1:1"},
        "metrics": {"bindAddress": "127.0.0.1:2", "secureServing": False},
        "webhook": {"host": "127.0.0.1", "port": 3},
        "certManagement": {"enable": False},
    }
    assert trainer.TRAINER.certs_in_tmpdir, "it has no certDir: its pair is under its own TMPDIR"


def test_the_trainers_webhooks_are_registered_by_url_under_the_names_its_release_gives_them() -> None:
    configurations = trainer.TRAINER.webhook_configurations(MANIFESTS, "https://127.0.0.1:9", b"CA")
    assert [(c["kind"], c["metadata"]["name"]) for c in configurations] == [
        ("MutatingWebhookConfiguration", "defaulter.trainer.kubeflow.org"),
        ("ValidatingWebhookConfiguration", "validator.trainer.kubeflow.org"),
    ]
    webhooks = [webhook for configuration in configurations for webhook in configuration["webhooks"]]
    assert [w["clientConfig"]["url"] for w in webhooks] == [
        "https://127.0.0.1:9/mutate-trainer-kubeflow-org-v1alpha1-trainjob",
        "https://127.0.0.1:9/validate-trainer-kubeflow-org-v1alpha1-trainjob",
    ]
    assert all(base64.b64decode(w["clientConfig"]["caBundle"]) == b"CA" for w in webhooks)
    assert all("objectSelector" not in w for w in webhooks), "no Pod webhook to narrow"
