"""Everything kfed knows about a job kind comes from its adapter: the RBAC in deploy/ and the
Helm chart, the manager's role on a worker, and the CLI's kind names."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, ClassVar

import pytest
import yaml

from manager.api import rbac
from manager.api.meta import Resource
from manager.cli.fleet import JOB_KINDS, OBJECT_KINDS, parse_object_name
from manager.engine.integrations import rbacgen
from manager.engine.integrations.batchjob import BatchJobAdapter
from manager.engine.integrations.registry import ADAPTERS
from manager.multikueue.controllers.worker_access import WORKLOAD_RULES
from tests.conftest import REPO_ROOT


class Widget(Resource, group="example.com", version="v1", kind="Widget", namespaced=True):
    """A made-up kind, to show what a new adapter brings with it."""


class WidgetAdapter(BatchJobAdapter):
    framework: ClassVar[str] = "example.com/widget"
    model: Any = Widget
    cli_name: ClassVar[str] = "widget"
    pod_label: ClassVar[str] = "example.com/widget-name"


def committed() -> dict[str, str]:
    return {path: (REPO_ROOT / path).read_text(encoding="utf-8") for path, _ in rbacgen.TARGETS}


def test_the_committed_manifests_hold_exactly_what_the_adapters_declare() -> None:
    assert rbacgen.drift(committed(), ADAPTERS) == []


def test_a_new_adapter_is_drift_until_written_and_then_in_every_manifest() -> None:
    adapters = (*ADAPTERS, WidgetAdapter())
    texts = committed()
    assert len(rbacgen.drift(texts, adapters)) == len(rbacgen.TARGETS)
    written = {path: rbacgen.regenerate(texts[path], adapters, side, where=path) for path, side in rbacgen.TARGETS}
    assert rbacgen.drift(written, adapters) == []
    manager = written["deploy/manager/rbac.yaml"]
    assert "  - apiGroups: [example.com]\n    resources: [widgets]\n    verbs: [list, watch, patch]" in manager
    assert "    resources: [widgets/status]\n    verbs: [patch]" in manager
    worker = written["deploy/multikueue-worker-access/rbac.yaml"]
    assert "  - apiGroups: [example.com]\n    resources: [widgets]\n    verbs: [create, delete, get, list, watch]" in worker


def test_a_manifest_without_its_markers_is_named() -> None:
    with pytest.raises(rbacgen.MarkersMissingError, match=r"^deploy/x.yaml: the lines"):
        rbacgen.regenerate("rules: []\n", ADAPTERS, rbacgen.CONTROLLER, where="deploy/x.yaml")


def test_the_managers_role_on_a_worker_has_each_multikueue_kinds_rules() -> None:
    for adapter in ADAPTERS:
        for rule in adapter.worker_rules():
            assert rule in WORKLOAD_RULES, (adapter.kind, rule)


def test_the_cli_names_every_kind_as_kubectl_does() -> None:
    assert {name: OBJECT_KINDS[name] for name in ("job", "jobs", "job.batch", "jobs.batch")} == dict.fromkeys(
        ("job", "jobs", "job.batch", "jobs.batch"), "job"
    )
    assert OBJECT_KINDS["jobsets.jobset.x-k8s.io"] == "jobset"
    assert set(JOB_KINDS) == {adapter.cli_name for adapter in ADAPTERS}
    assert parse_object_name("jobsets.jobset.x-k8s.io/train").kind == "jobset"


def test_kfed_rbac_check_passes_on_the_checkout() -> None:
    result = subprocess.run([sys.executable, "-m", "manager.cli.main", "rbac", "--check"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert "match the" in result.stdout


def cluster_role(path: str, name: str) -> rbac.Grant:
    """The committed ClusterRole `name` of a plain manifest, as a ClusterRoleBinding applies it."""
    docs = [doc for doc in yaml.safe_load_all((REPO_ROOT / path).read_text(encoding="utf-8")) if doc]
    role = next(doc for doc in docs if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == name)
    return rbac.Grant(f"ClusterRoleBinding {name}", f"ClusterRole {name}", tuple(rbac.Rule.from_dict(r) for r in role["rules"]))


@pytest.mark.parametrize("kind", sorted(JOB_KINDS))
def test_the_in_cluster_dashboard_may_cancel_every_kind_it_shows_a_cancel_button_for(kind: str) -> None:
    """Cancel deletes the job with the dashboard's own identity (after the user's review): a
    kind whose delete right is missing from its ClusterRole gets a 403 in the cluster."""
    model = JOB_KINDS[kind].model
    role = cluster_role("deploy/dashboard/dashboard.yaml", "kfed-dashboard")
    for verb in ("get", "list", "delete"):
        name = "" if verb == "list" else "train"
        request = rbac.Request(verb=verb, group=model.GROUP, resource=model.PLURAL, namespace="team-a", name=name)
        assert role.allows(request), f"kfed-dashboard lacks {request.describe()}"


@pytest.mark.parametrize("kind", sorted(JOB_KINDS))
def test_a_namespace_reader_may_read_every_kind(kind: str) -> None:
    model = JOB_KINDS[kind].model
    role = cluster_role("deploy/manager/user-roles.yaml", "kfed-namespace-reader")
    for verb in ("get", "list"):
        request = rbac.Request(verb=verb, group=model.GROUP, resource=model.PLURAL, namespace="team-a")
        assert role.allows(request), f"kfed-namespace-reader lacks {request.describe()}"


def test_a_new_adapter_is_in_the_dashboards_and_the_readers_roles_once_written() -> None:
    adapters = (*ADAPTERS, WidgetAdapter())
    texts = committed()
    written = {path: rbacgen.regenerate(texts[path], adapters, side, where=path) for path, side in rbacgen.TARGETS}
    for path in ("deploy/dashboard/dashboard.yaml", "deploy/helm/kfed/templates/dashboard.yaml"):
        assert "  - apiGroups: [example.com]\n    resources: [widgets]\n    verbs: [get, list, delete]" in written[path], path
    for path in ("deploy/manager/user-roles.yaml", "deploy/helm/kfed/templates/user-roles.yaml"):
        assert "  - apiGroups: [example.com]\n    resources: [widgets]\n    verbs: [get, list]" in written[path], path
