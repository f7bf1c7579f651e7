"""`kfed dev up --integrations`: which job kinds kfed is told about, and how the JobSet controller
is configured and its webhooks registered on a local worker (pure pieces, table-tested)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from manager.api.config import Configuration
from manager.dev import federation, jobset

# The shape of the release's config/components/webhook/manifests.yaml (sigs.k8s.io/jobset v0.12.0).
MANIFESTS = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mutating-webhook-configuration
webhooks:
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-jobset-x-k8s-io-v1alpha2-jobset}}
  failurePolicy: Fail
  name: mjobset.kb.io
  rules: [{apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE], resources: [jobsets]}]
  sideEffects: None
- admissionReviewVersions: [v1]
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  failurePolicy: Fail
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
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-jobset-x-k8s-io-v1alpha2-jobset}}
  failurePolicy: Fail
  name: vjobset.kb.io
  rules: [{apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE, UPDATE], resources: [jobsets]}]
  sideEffects: None
"""


@pytest.mark.parametrize(
    ("text", "integrations", "frameworks"),
    [
        ("job", (), ["batch/job"]),
        ("", (), ["batch/job"]),
        ("jobset", ("jobset",), ["batch/job", "jobset.x-k8s.io/jobset"]),
        (" jobset , job,jobset", ("jobset",), ["batch/job", "jobset.x-k8s.io/jobset"]),
    ],
)
def test_integrations_always_keep_job_and_add_the_named_frameworks(text: str, integrations: tuple[str, ...], frameworks: list[str]) -> None:
    assert federation.parse_integrations(text) == integrations
    config = federation.kfed_configuration(integrations)
    assert config["integrations"]["frameworks"] == frameworks
    # kfed's processes read it as their --config.
    assert Configuration.model_validate(config).kind == "Configuration"


def test_an_unknown_integration_is_one_line_naming_it_and_the_known_ones() -> None:
    with pytest.raises(ValueError) as raised:
        federation.parse_integrations("jobset,sparkapplication")
    assert (
        str(raised.value)
        == "--integrations: unknown sparkapplication (known: job, deployment, jobset, lws, mpijob, pod, raycluster, rayjob, trainjob)"
    )


def test_the_controller_listens_on_loopback_only_with_its_own_ports_and_no_cert_management(tmp_path: Path) -> None:
    config = jobset.configuration(health_port=1001, metrics_port=1002, webhook_port=1003, cert_dir=tmp_path)
    assert config["apiVersion"] == "config.jobset.x-k8s.io/v1alpha1"
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:1001"}
    assert config["metrics"] == {"bindAddress": "127.0.0.1:1002", "certDir": str(tmp_path)}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 1003, "certDir": str(tmp_path)}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}


def test_webhooks_call_the_controller_by_url_and_intercept_only_jobset_pods() -> None:
    configurations = jobset.webhook_configurations(MANIFESTS, "https://127.0.0.1:9999", b"CA PEM")
    assert [c["metadata"]["name"] for c in configurations] == [
        "jobset-mutating-webhook-configuration",
        "jobset-validating-webhook-configuration",
    ]
    webhooks = {w["name"]: w for c in configurations for w in c["webhooks"]}
    assert webhooks["mjobset.kb.io"]["clientConfig"] == {
        "url": "https://127.0.0.1:9999/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "caBundle": base64.b64encode(b"CA PEM").decode(),
    }
    assert webhooks["mpod.kb.io"]["clientConfig"]["url"] == "https://127.0.0.1:9999/mutate--v1-pod"
    assert webhooks["mpod.kb.io"]["objectSelector"] == {
        "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
    }
    assert "objectSelector" not in webhooks["mjobset.kb.io"] and "objectSelector" not in webhooks["vjobset.kb.io"]
    assert all(w["failurePolicy"] == "Fail" for w in webhooks.values())


def test_a_crd_counts_as_served_when_its_discovery_path_and_a_list_of_its_resource_answer() -> None:
    crds = [
        {"spec": {"group": "jobset.x-k8s.io", "names": {"plural": "jobsets"}, "versions": [{"name": "v1alpha2", "served": True}]}},
        {
            "spec": {
                "group": "kueue.x-k8s.io",
                "names": {"plural": "workloads"},
                "versions": [{"name": "v1beta1", "served": False}, {"name": "v1beta2", "served": True}],
            }
        },
        {"spec": {"group": "kueue.x-k8s.io", "names": {"plural": "clusterqueues"}, "versions": [{"name": "v1beta2"}]}},
    ]
    assert federation.served_paths(crds) == [
        "/apis/jobset.x-k8s.io/v1alpha2",
        "/apis/jobset.x-k8s.io/v1alpha2/jobsets?limit=1",
        "/apis/kueue.x-k8s.io/v1beta2",
        "/apis/kueue.x-k8s.io/v1beta2/workloads?limit=1",
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues?limit=1",
    ]


def test_next_steps_name_the_job_kinds(tmp_path: Path) -> None:
    plain = federation.next_steps(elapsed=8, directory=tmp_path, workers=1, jobs=True, repo_root=None, cwd=tmp_path, path_dirs=[])
    assert "Job kinds: batch/v1 Job." in plain
    with_jobset = federation.next_steps(
        elapsed=8, directory=tmp_path, workers=1, jobs=True, repo_root=None, cwd=tmp_path, path_dirs=[], integrations=("jobset",)
    )
    assert "Job kinds: batch/v1 Job, JobSet (its controller runs on each worker)." in with_jobset


def test_integrations_are_named_by_short_name_or_kueues_framework_name() -> None:
    assert federation.parse_integrations("pod,jobset.x-k8s.io/jobset,batch/job") == ("jobset", "pod")
    assert federation.kfed_configuration(("pod",))["integrations"]["frameworks"] == ["batch/job", "pod"]


def test_lws_is_named_by_short_name_or_kueues_framework_name() -> None:
    assert federation.parse_integrations("leaderworkerset.x-k8s.io/leaderworkerset") == ("lws",)
    assert federation.parse_integrations("lws,pod") == ("lws", "pod")
    frameworks = federation.kfed_configuration(("lws",))["integrations"]["frameworks"]
    assert frameworks == ["batch/job", "leaderworkerset.x-k8s.io/leaderworkerset"]


def test_the_playground_propagates_queues_and_says_so(tmp_path: Path) -> None:
    """`kfed dev up` spares the user Kueue's chore of mirroring namespaces and LocalQueues."""
    assert federation.kfed_configuration((), propagate_queues=True)["multiKueue"] == {"propagateQueues": True}
    assert "multiKueue" not in federation.kfed_configuration(())
    shown = federation.next_steps(elapsed=8, directory=tmp_path, workers=2, jobs=True, repo_root=None, cwd=tmp_path, path_dirs=[])
    assert "Queues follow the manager (multiKueue.propagateQueues)" in shown
