"""kfed's CRDs accept what upstream Kueue's accept, with the same defaults and list markers.

The schema comparison is a pure function (`manager.api.crd_diff`), table-tested here on small
schemas; the real comparison runs it over Kueue's own CRDs at the pinned version, fetched from
its Go module by `hack/kueue-crds.sh` (cached by version)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.api.crd_diff import crd_findings, schema_findings
from tests.conftest import REPO_ROOT
from tests.prerequisites import missing_prerequisite

# kfed keeps a PodSet's pod template whole (x-kubernetes-preserve-unknown-fields): it accepts
# any template, so what upstream declares beneath it is not compared.
OPAQUE = ("spec.podSets[].template",)
# Kinds kfed does not serve (no ProvisioningRequest admission check, no topology-aware scheduling).
NOT_SERVED = {"provisioningrequestconfigs.kueue.x-k8s.io", "topologies.kueue.x-k8s.io"}


def obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **extra}


@pytest.mark.parametrize(
    ("upstream", "kfed", "expected"),
    [
        pytest.param(
            obj({"a": {"type": "string"}}), obj({"a": {"type": "string"}, "b": {"type": "integer"}}), [], id="kfed may add fields"
        ),
        pytest.param(
            obj({"mode": {"type": "string", "enum": ["A", "B"]}}),
            obj({"mode": {"type": "string", "enum": ["A"]}}),
            ["mode: enum lacks ['B']"],
            id="a narrower enum refuses what upstream accepts",
        ),
        pytest.param(
            obj({"n": {"type": "integer", "maximum": 10}}),
            obj({"n": {"type": "integer", "maximum": 5}}),
            ["n: maximum 5, upstream 10"],
            id="a lower maximum",
        ),
        pytest.param(
            obj({"s": {"type": "string", "default": "x"}}),
            obj({"s": {"type": "string"}}),
            ["s: default None, upstream 'x'"],
            id="a default upstream applies and kfed does not",
        ),
        pytest.param(
            obj(
                {"conditions": {"type": "array", "items": obj({}), "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}}
            ),
            obj({"conditions": {"type": "array", "items": obj({})}}),
            ["conditions: x-kubernetes-list-type atomic, upstream map", "conditions: x-kubernetes-list-map-keys None, upstream ['type']"],
            id="an atomic list where upstream merges by key",
        ),
        pytest.param(
            obj({"a": {"type": "string"}}),
            obj({"a": {"type": "string"}}, required=["a"]),
            [": requires ['a'], upstream does not"],
            id="a field kfed requires and upstream does not",
        ),
    ],
)
def test_schema_findings_name_each_way_kfed_would_differ(upstream: dict[str, Any], kfed: dict[str, Any], expected: list[str]) -> None:
    assert schema_findings(upstream, kfed) == expected


def _upstream_crds() -> Path:
    if shutil.which("go") is None:
        missing_prerequisite("Go is not installed: upstream Kueue's CRDs cannot be fetched from its Go module")
    result = subprocess.run(["bash", str(REPO_ROOT / "hack" / "kueue-crds.sh")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip().splitlines()[-1])


def test_kfeds_crds_accept_everything_upstream_kueues_accept() -> None:
    upstream_dir = _upstream_crds()
    kfed = {}
    for path in (REPO_ROOT / "crds").glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        if doc.get("kind") == "CustomResourceDefinition":
            kfed[doc["metadata"]["name"]] = doc
    compared, findings = [], []
    for path in sorted(upstream_dir.glob("*.yaml")):
        upstream = yaml.safe_load(path.read_text())
        name = upstream["metadata"]["name"]
        if name in NOT_SERVED:
            continue
        assert name in kfed, f"kfed has no CRD for {name}"
        compared.append(name)
        findings += crd_findings(upstream, kfed[name], opaque=OPAQUE)
    assert len(compared) == 9, compared
    assert findings == []
