"""deploy/ on a real apiserver: every object of every kustomize base and of the Helm chart is
accepted by server-side apply, the chart renders the same objects as the bases, and the RBAC
grants exactly what the code uses: every verb it needs is allowed, and what it must never do is
denied (checked with `kubectl auth can-i --as=<its ServiceAccount>`)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.api.config import Configuration
from manager.controllers.webhooks import WebhookEndpoint, install, webhook_configurations
from manager.dev.binaries import binary_dir
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from manager.multikueue.controllers.worker_access import AGENT_LEASE_RULES, WORKLOAD_RULES, queue_propagation_rules
from manager.runtime.pki import new_ca
from tests.conftest import REPO_ROOT
from tests.harness import Provider

DEPLOY = REPO_ROOT / "deploy"
BASES = (
    "manager",
    "worker-agent",
    "multikueue-worker-access",
    "visibility-apf",
    "dashboard",
    "overlays/dashboard",
    "quota-automation",
    "overlays/quota-automation",
    "multikueue-queue-propagation",
)
# Opt-in rights, left out of the RBAC check of a default installation.
OPT_IN = ("quota-automation", "overlays/quota-automation", "multikueue-queue-propagation")
CHART = DEPLOY / "helm" / "kfed"
# The chart's values for each kind of cluster, and the kustomize bases that install the same.
CHART_INSTALLS = {
    "manager-cluster": ([], ("manager",)),
    "manager-cluster-with-visibility-apf": (["--set", "manager.visibilityAPF=true"], ("manager", "visibility-apf")),
    "manager-cluster-with-dashboard": (["--set", "dashboard.enabled=true"], ("manager", "dashboard")),
    "manager-cluster-with-quota-automation": (["--set", "manager.quotaAutomation=true"], ("overlays/quota-automation",)),
    "worker-cluster": (
        ["--set", "manager.enabled=false", "--set", "workerAgent.enabled=true", "--set", "multikueueWorkerAccess.enabled=true"],
        ("worker-agent", "multikueue-worker-access"),
    ),
    "worker-cluster-with-queue-propagation": (
        [
            "--set",
            "manager.enabled=false",
            "--set",
            "workerAgent.enabled=true",
            "--set",
            "multikueueWorkerAccess.enabled=true",
            "--set",
            "multikueueWorkerAccess.propagateQueues=true",
        ],
        ("worker-agent", "multikueue-worker-access", "multikueue-queue-propagation"),
    ),
}
# Labels only Helm adds (release bookkeeping); everything else must match the bases.
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version")

# (verb, resource, namespace or "" for cluster-wide) the code uses; see deploy/*/rbac.yaml.
# `resource#status` is the status subresource, `resource/name` one named object.
COMMON = [
    ("list", "namespaces", ""),
    ("watch", "limitranges", ""),
    ("list", "priorityclasses.scheduling.k8s.io", ""),
    ("watch", "clusterqueues.kueue.x-k8s.io", ""),
    ("list", "workloadpriorityclasses.kueue.x-k8s.io", ""),
    ("create", "workloads.kueue.x-k8s.io", "team-a"),
    ("patch", "workloads.kueue.x-k8s.io", "team-a"),
    ("delete", "workloads.kueue.x-k8s.io", "team-a"),
    ("patch", "workloads.kueue.x-k8s.io#status", "team-a"),
    ("patch", "clusterqueues.kueue.x-k8s.io#status", ""),
    ("patch", "localqueues.kueue.x-k8s.io#status", "team-a"),
    ("patch", "jobs.batch", "team-a"),
    ("patch", "jobs.batch#status", "team-a"),  # startTime cleared on eviction; MultiKueue's status copy
    ("watch", "jobs.batch", ""),
    # The Pod kind (plain Pods and pod groups), as Kueue's pod integration: stopped by deletion.
    ("list", "pods", ""),
    ("delete", "pods", "team-a"),
    ("patch", "pods#status", "team-a"),
    ("create", "events", "team-a"),
    ("get", "customresourcedefinitions.apiextensions.k8s.io/workloads.kueue.x-k8s.io", ""),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io/clusterqueues.kueue.x-k8s.io", ""),
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/kfed-mutating-webhook-configuration", ""),
    ("patch", "validatingwebhookconfigurations.admissionregistration.k8s.io/kfed-validating-webhook-configuration", ""),
    ("create", "leases.coordination.k8s.io", "kfed-system"),
    ("update", "leases.coordination.k8s.io", "kfed-system"),
    ("get", "secrets/kfed-webhook-cert", "kfed-system"),
    ("update", "secrets/kfed-webhook-cert", "kfed-system"),
    ("create", "secrets", "kfed-system"),
]
MANAGER_ONLY = [
    ("watch", "multikueueclusters.kueue.x-k8s.io", ""),
    ("list", "multikueueconfigs.kueue.x-k8s.io", ""),
    ("patch", "multikueueclusters.kueue.x-k8s.io#status", ""),
    ("patch", "admissionchecks.kueue.x-k8s.io#status", ""),
    ("watch", "secrets", "kfed-system"),
    # The visibility API and kfed's read API: their APIServices, and the delegated authentication and authorization.
    ("patch", "apiservices.apiregistration.k8s.io/v1beta2.visibility.kueue.x-k8s.io", ""),
    ("patch", "apiservices.apiregistration.k8s.io/v1beta1.visibility.kueue.x-k8s.io", ""),
    ("patch", "apiservices.apiregistration.k8s.io/v1alpha1.reads.kfed.dev", ""),  # kfed's read API
    ("create", "tokenreviews.authentication.k8s.io", ""),
    ("create", "subjectaccessreviews.authorization.k8s.io", ""),
    ("get", "configmaps/extension-apiserver-authentication", "kube-system"),
]
NEVER = [
    ("get", "secrets", "default"),  # Secrets outside its own namespace
    ("update", "secrets/worker1-kubeconfig", "kfed-system"),  # only its certificate, by name
    ("list", "secrets", ""),
    ("create", "pods", "team-a"),  # pods are their controllers' (a Job's, a JobSet's) or the user's
    ("create", "pods#exec", "team-a"),
    ("create", "jobs.batch", "team-a"),
    ("delete", "jobs.batch", "team-a"),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io/other.example.com", ""),
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/someone-else", ""),
    ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", ""),  # deploy/ ships its own
    ("create", "validatingwebhookconfigurations.admissionregistration.k8s.io", ""),
    ("update", "clusterqueues.kueue.x-k8s.io", ""),  # the administrator's spec
    ("patch", "clusterqueues.kueue.x-k8s.io", ""),
    ("update", "workloads.kueue.x-k8s.io#status", "team-a"),  # status is patched, with a resourceVersion
    ("create", "apiservices.apiregistration.k8s.io", ""),  # deploy/ ships them
    ("patch", "apiservices.apiregistration.k8s.io/v1.apps", ""),
    ("get", "configmaps", "kube-system"),  # only the front proxy's settings, by name
    ("*", "*", ""),
]


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    created: LocalCluster = provider.create([f"deploy{uuid.uuid4().hex[:4]}"])[0]
    return created


def kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary_dir() / "kubectl"), f"--kubeconfig={cluster.kubeconfig_path}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def build(base: str) -> str:
    result = subprocess.run([str(binary_dir() / "kubectl"), "kustomize", str(DEPLOY / base)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@cache
def helm() -> str:
    """hack/test.sh exports KFED_HELM; otherwise hack/helm.sh builds (or finds) the pinned helm."""
    if os.environ.get("KFED_HELM"):
        return os.environ["KFED_HELM"]
    result = subprocess.run(["bash", str(REPO_ROOT / "hack" / "helm.sh")], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"cannot build helm for the chart tests:\n{result.stderr}"
    return result.stdout.strip()


def helm_template(*values: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm(), "template", "kfed", str(CHART), "--namespace=kfed-system", "--include-crds", *values],
        capture_output=True,
        text=True,
        timeout=120,
    )


def chart(install: str) -> str:
    result = helm_template(*CHART_INSTALLS[install][0])
    assert result.returncode == 0, result.stderr
    return result.stdout


def objects(rendered: str, *, strip_helm: bool = False) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Rendered objects by (kind, namespace, name), without Helm's release labels if asked."""
    out = {}
    for doc in yaml.safe_load_all(rendered):
        if not doc:
            continue
        metadata = doc["metadata"]
        if strip_helm:
            labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k not in HELM_LABELS}
            metadata.pop("labels", None)
            if labels:
                metadata["labels"] = labels
        out[(doc["kind"], metadata.get("namespace", ""), metadata["name"])] = doc
    return out


@pytest.mark.parametrize("install", CHART_INSTALLS)
def test_the_helm_chart_renders_what_the_kustomize_bases_render(install: str) -> None:
    from_chart = objects(chart(install), strip_helm=True)
    from_bases: dict[tuple[str, str, str], dict[str, Any]] = {}
    for base in CHART_INSTALLS[install][1]:
        from_bases.update(objects(build(base)))
    assert sorted(from_chart) == sorted(from_bases)
    different = [key for key in from_bases if from_chart[key] != from_bases[key]]
    assert different == [], f"the chart and the bases disagree on {different}"


@pytest.mark.parametrize("install", CHART_INSTALLS)
def test_every_object_of_the_helm_chart_is_accepted_by_server_side_apply(cluster: LocalCluster, install: str) -> None:
    rendered = chart(install)
    count = len([doc for doc in yaml.safe_load_all(rendered) if doc])
    applied = kubectl(cluster, "apply", "--server-side", "--force-conflicts", "--field-manager=helm-test", "-f", "-", stdin=rendered)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("serverside-applied") == count, applied.stdout


def test_a_mistyped_chart_value_is_refused_with_its_path() -> None:
    result = helm_template("--set", "manager.replica=3")
    assert result.returncode != 0
    assert "/manager" in result.stderr and "'replica' not allowed" in result.stderr, result.stderr
    result = helm_template("--set", "workerAgent.logLevel=verbose")
    assert result.returncode != 0 and "/workerAgent/logLevel" in result.stderr, result.stderr


def test_a_kueue_configuration_in_the_values_reaches_the_manager() -> None:
    settings = {"multiKueue": {"gcInterval": "2m", "workerLostTimeout": "10m"}, "fairSharing": {"enable": True}}
    rendered = helm_template("--set-json", f"manager.config={json.dumps(settings)}")
    assert rendered.returncode == 0, rendered.stderr
    rendered_objects = objects(rendered.stdout)
    config_map = rendered_objects[("ConfigMap", "kfed-system", "kfed-manager-config")]
    configuration = Configuration.model_validate(yaml.safe_load(config_map["data"]["config.yaml"]))
    assert configuration.multi_kueue is not None and configuration.multi_kueue.gc_interval == "2m"
    assert configuration.fair_sharing is not None and configuration.fair_sharing.enable
    deployment = rendered_objects[("Deployment", "kfed-system", "kfed-manager")]
    pod = deployment["spec"]["template"]
    assert "--config=/etc/kfed/config.yaml" in pod["spec"]["containers"][0]["args"]
    assert {"name": "config", "configMap": {"name": "kfed-manager-config"}} in pod["spec"]["volumes"]
    assert "kfed.dev/config-sha256" in pod["metadata"]["annotations"]  # a changed config rolls the pods


@pytest.mark.parametrize("base", BASES)
def test_every_object_of_a_base_is_accepted_by_server_side_apply(cluster: LocalCluster, base: str) -> None:
    rendered = build(base)
    kinds = [doc["kind"] for doc in yaml.safe_load_all(rendered) if doc]
    assert kinds, f"deploy/{base} renders nothing"
    applied = kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("serverside-applied") == len(kinds), applied.stdout


def _can(cluster: LocalCluster, account: str, verb: str, resource: str, namespace: str) -> bool:
    """`resource#sub` asks about a subresource; `resource/name` about one object."""
    where = ["-n", namespace] if namespace else ["--all-namespaces"]
    resource, _, sub = resource.partition("#")
    extra = [f"--subresource={sub}"] if sub else []
    result = kubectl(cluster, "auth", "can-i", verb, resource, *extra, f"--as=system:serviceaccount:kfed-system:{account}", *where)
    return result.stdout.strip() == "yes"


@pytest.mark.parametrize(
    ("account", "allowed"),
    [("kfed-manager", COMMON + MANAGER_ONLY), ("kfed-worker-agent", COMMON)],
)
def test_rbac_allows_every_verb_the_code_uses_and_nothing_it_must_not_do(
    cluster: LocalCluster, account: str, allowed: list[tuple[str, str, str]]
) -> None:
    for base in BASES:
        if base not in OPT_IN:
            assert kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=build(base)).returncode == 0
    # The module's apply tests installed the opt-in rights too: a default installation has none.
    removed = kubectl(cluster, "delete", "--ignore-not-found", "-f", "-", stdin=build("quota-automation"))
    assert removed.returncode == 0, removed.stderr
    missing = [entry for entry in allowed if not _can(cluster, account, *entry)]
    assert missing == [], f"{account} lacks {missing}"
    granted = [entry for entry in NEVER if _can(cluster, account, *entry)]
    assert granted == [], f"{account} may {granted}"
    if account == "kfed-worker-agent":
        leaked = [entry for entry in MANAGER_ONLY if _can(cluster, account, *entry)]
        assert leaked == [], f"the worker agent may {leaked}"


def test_quota_automation_adds_only_the_right_to_patch_cluster_queues(cluster: LocalCluster) -> None:
    """Run after the default installation's check: the opt-in base grants the manager exactly
    the spec patch MultiKueue manager quota automation makes, and the worker agent nothing."""
    applied = kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=build("quota-automation"))
    assert applied.returncode == 0, applied.stderr
    try:
        assert _can(cluster, "kfed-manager", "patch", "clusterqueues.kueue.x-k8s.io", "")
        granted = [entry for entry in NEVER if _can(cluster, "kfed-manager", *entry)]
        assert granted == [("patch", "clusterqueues.kueue.x-k8s.io", "")], granted
        assert not _can(cluster, "kfed-worker-agent", "patch", "clusterqueues.kueue.x-k8s.io", "")
    finally:
        kubectl(cluster, "delete", "--ignore-not-found", "-f", "-", stdin=build("quota-automation"))


async def test_reapplying_the_crds_in_an_upgrade_keeps_the_conversion_the_manager_set(cluster: LocalCluster) -> None:
    """An upgrade applies the CRDs again (docs/upgrade.md) after the manager pointed their
    conversion at its webhook; the apply must succeed without --force-conflicts and leave that."""
    crds = build("../crds")
    first = kubectl(cluster, "apply", "--server-side", "--field-manager=upgrade-test", "-f", "-", stdin=crds)
    assert first.returncode == 0, first.stderr
    endpoint = WebhookEndpoint(new_ca("kfed-test-ca").cert_pem, url="https://127.0.0.1:9443")
    client = await KubeClient.from_kubeconfig(cluster.kubeconfig(), name="test")
    try:
        await install(client, endpoint)  # what the leader does
        again = kubectl(cluster, "apply", "--server-side", "--field-manager=upgrade-test", "-f", "-", stdin=crds)
        assert again.returncode == 0, again.stderr  # no conflict over spec.conversion
        crd = await client.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workloads.kueue.x-k8s.io")
        assert crd["spec"]["conversion"]["strategy"] == "Webhook"
        assert crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == "https://127.0.0.1:9443/convert"
    finally:
        # Leave nothing pointing at a webhook that does not run for the module's other tests.
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            for item in (await client.request("GET", f"/apis/admissionregistration.k8s.io/v1/{plural}"))["items"]:
                if item["metadata"]["name"].startswith("kfed-"):
                    await client.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{item['metadata']['name']}")
        for doc in yaml.safe_load_all(crds):
            if doc:
                await client.request(
                    "PATCH",
                    f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{doc['metadata']['name']}",
                    body={"spec": {"conversion": {"strategy": "None", "webhook": None}}},
                    content_type="application/merge-patch+json",
                )
        await client.close()


def test_no_wildcards_in_any_rbac_rule() -> None:
    renderings = [build(base) for base in BASES] + [chart(install) for install in CHART_INSTALLS]
    for rendered in renderings:
        for doc in yaml.safe_load_all(rendered):
            for rule in (doc or {}).get("rules") or []:
                assert "*" not in rule.get("verbs", []) and "*" not in rule.get("resources", []), (doc["metadata"]["name"], rule)


@pytest.mark.parametrize(("base", "service"), [("manager", "kfed-webhook-service"), ("worker-agent", "kfed-agent-webhook-service")])
def test_the_shipped_webhook_configurations_are_what_the_code_installs(base: str, service: str) -> None:
    shipped = [d for d in yaml.safe_load_all((DEPLOY / base / "webhooks.yaml").read_text()) if d]
    expected = webhook_configurations(WebhookEndpoint(b"", service_namespace="kfed-system", service_name=service))
    for obj in expected:
        for webhook in obj["webhooks"]:
            del webhook["clientConfig"]["caBundle"]  # injected by the leader
    assert shipped == expected


def test_the_worker_access_role_is_what_register_creates() -> None:
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all((DEPLOY / "multikueue-worker-access" / "rbac.yaml").read_text()) if d]
    assert next(d for d in docs if d["kind"] == "ClusterRole")["rules"] == WORKLOAD_RULES
    assert next(d for d in docs if d["kind"] == "Role")["rules"] == AGENT_LEASE_RULES
    propagation = [d for d in yaml.safe_load_all((DEPLOY / "multikueue-queue-propagation" / "rbac.yaml").read_text()) if d]
    assert next(d for d in propagation if d["kind"] == "ClusterRole")["rules"] == queue_propagation_rules(None)


def test_the_manager_may_read_only_the_worker_agents_lease_on_a_worker(cluster: LocalCluster) -> None:
    applied = kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=build("multikueue-worker-access"))
    assert applied.returncode == 0, applied.stderr
    assert _can(cluster, "kfed-multikueue", "get", "leases/kfed-worker-agent", "kfed-system")
    assert not _can(cluster, "kfed-multikueue", "get", "leases/kfed-manager", "kfed-system")
    assert not _can(cluster, "kfed-multikueue", "list", "leases", "kfed-system")
    assert not _can(cluster, "kfed-multikueue", "update", "leases/kfed-worker-agent", "kfed-system")
    assert not _can(cluster, "kfed-multikueue", "get", "leases/kfed-worker-agent", "default")  # a Role: its namespace only


def test_the_manifests_have_no_built_binaries_or_secrets_in_them() -> None:
    for path in Path(DEPLOY).rglob("*"):
        if path.is_file():
            assert "BEGIN" not in path.read_text(errors="replace"), path  # no keys or certificates


# (verb, resource, namespace or "") the in-cluster dashboard makes with its own identity, each
# only after a SubjectAccessReview for the user allowed it (manager/cli/dashboard/incluster.py).
# The aggregated groups (visibility.kueue.x-k8s.io, reads.kfed.dev) are not served on this
# apiserver, so `kubectl auth can-i` cannot name them; the browser tests use them.
DASHBOARD = [
    ("create", "tokenreviews.authentication.k8s.io", ""),
    ("create", "subjectaccessreviews.authorization.k8s.io", ""),
    ("list", "workloads.kueue.x-k8s.io", ""),
    ("list", "clusterqueues.kueue.x-k8s.io", ""),
    ("list", "cohorts.kueue.x-k8s.io", ""),
    ("get", "jobs.batch", "team-a"),
    ("list", "events", "team-a"),
    ("get", "pods#log", "team-a"),
    ("delete", "jobs.batch", "team-a"),
    ("patch", "clusterqueues.kueue.x-k8s.io", ""),
]
DASHBOARD_NEVER = [
    ("get", "secrets", "kfed-system"),
    ("list", "secrets", ""),
    ("create", "jobs.batch", "team-a"),
    ("delete", "clusterqueues.kueue.x-k8s.io", ""),
    ("create", "pods", "team-a"),
    ("update", "workloads.kueue.x-k8s.io#status", "team-a"),
    ("impersonate", "users", ""),
    ("patch", "multikueueclusters.kueue.x-k8s.io", ""),
]


def test_the_dashboards_role_holds_what_it_does_for_users_and_no_credential(cluster: LocalCluster) -> None:
    assert kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=build("overlays/dashboard")).returncode == 0
    missing = [entry for entry in DASHBOARD if not _can(cluster, "kfed-dashboard", *entry)]
    assert missing == [], f"kfed-dashboard lacks {missing}"
    granted = [entry for entry in DASHBOARD_NEVER if _can(cluster, "kfed-dashboard", *entry)]
    assert granted == [], f"kfed-dashboard may {granted}"
