"""`kfed crds`, `kfed validate` and `kfed convert`, run as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from pydantic import Field

from manager.api import crdgen, kueue, v1beta1
from manager.cli.main import crd_drift
from tests.conftest import EXAMPLE_FILES, EXAMPLES, REPO_ROOT


def kfed(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "manager.cli.main", *args], capture_output=True, text=True, input=stdin, cwd=REPO_ROOT)


def test_crds_in_the_repo_match_the_models() -> None:
    result = kfed("crds", "--check")
    assert result.returncode == 0, result.stderr
    # crds/ holds the 9 CRDs and their kustomization; the Helm chart's crds/ the same 9 CRDs.
    assert f"10 generated file(s) in {REPO_ROOT / 'crds'} match" in result.stdout
    assert f"9 generated file(s) in {REPO_ROOT / 'deploy/helm/kfed/crds'} match" in result.stdout


def test_a_stale_crd_in_the_helm_chart_fails_the_check(tmp_path: Path) -> None:
    chart_crd = REPO_ROOT / "deploy/helm/kfed/crds/kueue.x-k8s.io_cohorts.yaml"
    original = chart_crd.read_text()
    try:
        chart_crd.write_text(original + "# edited\n")
        result = kfed("crds", "--check")
        assert result.returncode == 1
        assert f"{chart_crd}: out of date with the models" in result.stderr
    finally:
        chart_crd.write_text(original)


def test_changing_a_model_without_regenerating_is_drift() -> None:
    class ChangedSpec(kueue.ResourceFlavorSpec):
        new_field: str | None = None

    class ChangedFlavor(kueue.ResourceFlavor):
        PLURAL: ClassVar[str] = "resourceflavors"
        spec: ChangedSpec = Field(default_factory=ChangedSpec)

    files = crdgen.render_all(((ChangedFlavor, v1beta1.KIND_BY_NAME["ResourceFlavor"]),))
    problems = crd_drift(REPO_ROOT / "crds", files)
    assert f"{REPO_ROOT / 'crds' / 'kueue.x-k8s.io_resourceflavors.yaml'}: out of date with the models" in problems


def test_a_hand_edited_crd_fails_the_check(tmp_path: Path) -> None:
    assert kfed("crds", "--dir", str(tmp_path)).returncode == 0
    target = tmp_path / "kueue.x-k8s.io_clusterqueues.yaml"
    target.write_text(target.read_text().replace("maxItems: 16", "maxItems: 17"))
    result = kfed("crds", "--check", "--dir", str(tmp_path))
    assert result.returncode == 1
    assert f"{target}: out of date with the models" in result.stderr


def test_crds_serve_both_versions_and_store_v1beta2() -> None:
    crd = yaml.safe_load(crdgen.render_all()["kueue.x-k8s.io_clusterqueues.yaml"])
    versions = {v["name"]: v for v in crd["spec"]["versions"]}
    assert versions["v1beta2"]["storage"] and not versions["v1beta1"]["storage"]
    assert crd["spec"]["names"]["shortNames"] == ["cq"]
    assert versions["v1beta2"]["subresources"] == {"status": {}}
    v1 = versions["v1beta1"]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    v2 = versions["v1beta2"]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert "cohort" in v1 and "cohortName" in v2


def test_crd_schemas_are_structural() -> None:
    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            assert "$ref" not in node, path
            if "anyOf" in node:
                assert node.get("x-kubernetes-int-or-string"), f"anyOf without int-or-string at {path}"
            if "properties" in node or "items" in node:
                assert "type" in node, f"no type at {path}"
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{path}[{i}]")

    for name, text in crdgen.render_all().items():
        walk(yaml.safe_load(text), name)


def test_validate_accepts_every_example() -> None:
    result = kfed("validate", "-f", str(EXAMPLES))
    assert result.returncode == 0, result.stderr
    assert "92 object(s) valid" in result.stdout


def test_validate_reports_every_error_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "team-a.yaml"
    bad.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: ok}\n---\n"
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: q, namespace: ns}\nspec: {}\n---\n"
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: team-a-cq}\n"
        "spec: {resourceGroups: [{coveredResources: [cpu], flavors: [{name: f, resources: [{name: cpu, nominalQuota: 9x}]}]}]}\n"
    )
    result = kfed("validate", "-f", str(bad))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[:2] == [
        f"{bad}[1] LocalQueue/ns/q: spec.clusterQueue: Required value",
        f'{bad}[2] ClusterQueue/team-a-cq: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: invalid quantity "9x"',
    ]


def test_validate_reports_a_missing_file_in_one_line(tmp_path: Path) -> None:
    result = kfed("validate", "-f", str(tmp_path / "nope.yaml"))
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == f"{tmp_path / 'nope.yaml'}[0]: cannot read file: No such file or directory"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_convert_round_trips_each_example(path: Path) -> None:
    down = kfed("convert", "--to", "v1beta1", "-f", str(path))
    assert down.returncode == 0, down.stderr
    up = kfed("convert", "--to", "v1beta2", "-f", "-", stdin=down.stdout)
    assert up.returncode == 0, up.stderr
    again = kfed("convert", "--to", "v1beta1", "-f", "-", stdin=up.stdout)
    assert list(yaml.safe_load_all(again.stdout)) == list(yaml.safe_load_all(down.stdout))
    for document in yaml.safe_load_all(up.stdout):
        if document["apiVersion"].startswith("kueue.x-k8s.io/"):
            assert document["apiVersion"] == "kueue.x-k8s.io/v1beta2"
