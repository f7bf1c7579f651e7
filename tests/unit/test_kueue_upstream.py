"""How upstream Kueue is built (hack/gen_wrapper_gomod.py) and wired to a harness cluster
(tests/kueue_upstream.py): pure pieces, table-tested."""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.kueue_upstream import CONFIGURATION_NAMES, configuration, webhook_configurations


def gen_gomod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_wrapper_gomod", REPO_ROOT / "hack" / "gen_wrapper_gomod.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("gomod", "replaces", "local"),
    [
        ("module sigs.k8s.io/kueue\n\ngo 1.26.0\n\nrequire k8s.io/api v0.36.2\n", [], []),
        ("module m\nreplace a.io/x => b.io/x v1.2.3 // fork\n", ["a.io/x => b.io/x v1.2.3"], []),
        (
            "module m\nreplace (\n\ta.io/x v1.0.0 => b.io/x v1.0.1\n\n\tc.io/y => ./hack/y\n)\nrequire d.io/z v1\n",
            ["a.io/x v1.0.0 => b.io/x v1.0.1", "c.io/y => ./hack/y"],
            ["c.io/y => ./hack/y"],
        ),
    ],
)
def test_replace_directives_are_found_in_lines_and_blocks(gomod: str, replaces: list[str], local: list[str]) -> None:
    module = gen_gomod()
    assert module.replace_directives(gomod) == replaces
    assert module.local_replacements(replaces) == local


def test_the_wrapper_requires_the_release_and_keeps_its_go_version_and_replaces() -> None:
    text = gen_gomod().wrapper_gomod("sigs.k8s.io/kueue", "module sigs.k8s.io/kueue\ngo 1.26.0\nreplace a.io/x => b.io/x v2\n", "v0.19.2")
    assert "module kfed.local/hack/kueue\n" in text
    assert "\ngo 1.26.0\n" in text
    assert "require sigs.k8s.io/kueue v0.19.2\n" in text
    assert "replace (\n\ta.io/x => b.io/x v2\n)\n" in text
    assert "replace" not in gen_gomod().wrapper_gomod("sigs.k8s.io/jobset", "module m\ngo 1.26.0\n", "v0.12.0")


MANIFESTS = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  failurePolicy: Fail
  name: mjob.kb.io
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  name: mpod.kb.io
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  sideEffects: None
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: validating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-kueue-x-k8s-io-v1beta2-workload}}
  name: vworkload.kb.io
  rules: [{apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE, UPDATE], resources: [workloads, workloads/status]}]
  sideEffects: None
"""


def test_webhooks_are_registered_by_url_with_the_ca_for_jobs_and_kueue_kinds_only() -> None:
    made = webhook_configurations(MANIFESTS, "https://127.0.0.1:9443", b"CA PEM")
    assert [(c["kind"], c["metadata"]["name"]) for c in made] == list(CONFIGURATION_NAMES.items())
    mutating, validating = made
    assert [w["name"] for w in mutating["webhooks"]] == ["mjob.kb.io"]  # no Pod webhook: the pod integration is off
    assert mutating["webhooks"][0]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-batch-v1-job",
        "caBundle": base64.b64encode(b"CA PEM").decode(),
    }
    assert mutating["webhooks"][0]["failurePolicy"] == "Fail"
    assert validating["webhooks"][0]["clientConfig"]["url"] == "https://127.0.0.1:9443/validate-kueue-x-k8s-io-v1beta2-workload"


def test_the_configuration_keeps_kueue_on_loopback_with_its_own_certificates() -> None:
    config = configuration(health_port=1, metrics_port=2, webhook_port=3, cert_dir=Path("/c"), multikueue={"gcInterval": "2s"})
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 3, "certDir": "/c"}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:1"
    assert config["metrics"]["bindAddress"] == "127.0.0.1:2"
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["integrations"]["frameworks"] == ["batch/job"]
    assert config["multiKueue"] == {"gcInterval": "2s"}
    assert "multiKueue" not in configuration(health_port=1, metrics_port=2, webhook_port=3, cert_dir=Path("/c"))
    assert yaml.safe_load(yaml.safe_dump(config)) == config
