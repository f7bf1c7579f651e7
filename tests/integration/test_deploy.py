"""deploy/ on a real apiserver: every object of every base is accepted by server-side apply,
and the RBAC grants exactly what the code uses: every verb it needs is allowed, and what it
must never do is denied (checked with `kubectl auth can-i --as=<its ServiceAccount>`)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.cli.register import WORKER_RULES
from manager.dev.binaries import binary_dir
from manager.dev.local import LocalCluster
from tests.conftest import REPO_ROOT
from tests.harness import Provider

DEPLOY = REPO_ROOT / "deploy"
BASES = ("manager", "worker-agent", "multikueue-worker-access")

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
    ("create", "events", "team-a"),
    ("get", "customresourcedefinitions.apiextensions.k8s.io/workloads.kueue.x-k8s.io", ""),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io/clusterqueues.kueue.x-k8s.io", ""),
    ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", ""),
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
]
NEVER = [
    ("get", "secrets", "default"),  # Secrets outside its own namespace
    ("update", "secrets/worker1-kubeconfig", "kfed-system"),  # only its certificate, by name
    ("list", "secrets", ""),
    ("list", "pods", ""),  # pods are the Job controller's
    ("delete", "pods", "team-a"),
    ("create", "jobs.batch", "team-a"),
    ("delete", "jobs.batch", "team-a"),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io/other.example.com", ""),
    ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io/someone-else", ""),
    ("update", "clusterqueues.kueue.x-k8s.io", ""),  # the administrator's spec
    ("patch", "clusterqueues.kueue.x-k8s.io", ""),
    ("update", "workloads.kueue.x-k8s.io#status", "team-a"),  # status is patched, with a resourceVersion
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
        assert kubectl(cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=build(base)).returncode == 0
    missing = [entry for entry in allowed if not _can(cluster, account, *entry)]
    assert missing == [], f"{account} lacks {missing}"
    granted = [entry for entry in NEVER if _can(cluster, account, *entry)]
    assert granted == [], f"{account} may {granted}"
    if account == "kfed-worker-agent":
        leaked = [entry for entry in MANAGER_ONLY if _can(cluster, account, *entry)]
        assert leaked == [], f"the worker agent may {leaked}"


def test_no_wildcards_in_any_rbac_rule() -> None:
    for base in BASES:
        for doc in yaml.safe_load_all(build(base)):
            for rule in (doc or {}).get("rules") or []:
                assert "*" not in rule.get("verbs", []) and "*" not in rule.get("resources", []), (base, rule)


def test_the_worker_access_role_is_what_register_creates() -> None:
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all((DEPLOY / "multikueue-worker-access" / "rbac.yaml").read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert role["rules"] == WORKER_RULES


def test_the_manifests_have_no_built_binaries_or_secrets_in_them() -> None:
    for path in Path(DEPLOY).rglob("*"):
        if path.is_file():
            assert "BEGIN" not in path.read_text(errors="replace"), path  # no keys or certificates
