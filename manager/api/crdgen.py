"""Generate kfed's CustomResourceDefinitions from the models (nobody edits crds/ by hand).

The pydantic JSON schema of each version's model is turned into a structural OpenAPI v3
schema: references inlined, `X | None` unions collapsed to X, titles and pydantic's defaults
dropped (the API server applies only those declared with `crd_default`), quantities as
int-or-string, list and map markers and CEL rules carried through as the models declare them.
tests/unit/test_crds_upstream.py diffs the result against the pinned Kueue's CRDs.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from manager.api import kueue, v1beta1
from manager.api.constants import GROUP, STORAGE_VERSION
from manager.api.meta import CRD_DEFAULT, Resource

# Kueue's short names and printer columns, plus `wl` for Workloads.
SHORT_NAMES: dict[str, list[str]] = {
    "ResourceFlavor": ["flavor", "flavors", "rf"],
    "ClusterQueue": ["cq"],
    "Cohort": ["co"],
    "LocalQueue": ["queue", "queues", "lq"],
    "WorkloadPriorityClass": ["wpc"],
    "Workload": ["wl", "kwl", "kueueworkload", "kueueworkloads"],
    "AdmissionCheck": ["ac"],
    "MultiKueueConfig": ["mkconf"],
    "MultiKueueCluster": ["mkc"],
}


def _column(name: str, path: str, kind: str, description: str, priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {"name": name, "type": kind, "jsonPath": path, "description": description}
    if priority:
        column["priority"] = priority
    return column


_AGE = _column("Age", ".metadata.creationTimestamp", "date", "Time this object was created")
PRINTER_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "ClusterQueue": [
        _column("Cohort", ".spec.cohortName", "string", "Cohort that this ClusterQueue belongs to"),
        _column("Strategy", ".spec.queueingStrategy", "string", "The queueing strategy used to prioritize workloads", 1),
        _column("Pending Workloads", ".status.pendingWorkloads", "integer", "Number of pending workloads"),
        _column("Admitted Workloads", ".status.admittedWorkloads", "integer", "Number of admitted workloads that haven't finished yet", 1),
    ],
    "LocalQueue": [
        _column("ClusterQueue", ".spec.clusterQueue", "string", "Backing ClusterQueue"),
        _column("Pending Workloads", ".status.pendingWorkloads", "integer", "Number of pending workloads"),
        _column("Admitted Workloads", ".status.admittedWorkloads", "integer", "Number of admitted workloads that haven't finished yet."),
    ],
    "Workload": [
        _column("Queue", ".spec.queueName", "string", "Name of the queue this workload was submitted to"),
        _column(
            "Reserved in", ".status.admission.clusterQueue", "string", "Name of the ClusterQueue where the workload is reserving quota"
        ),
        _column("Admitted", ".status.conditions[?(@.type=='Admitted')].status", "string", "Admission status"),
        _column("Finished", ".status.conditions[?(@.type=='Finished')].status", "string", "Workload finished"),
        _AGE,
    ],
    "WorkloadPriorityClass": [_column("Value", ".value", "integer", "Value of workloadPriorityClass's Priority")],
    "MultiKueueCluster": [
        _column("Connected", ".status.conditions[?(@.type=='Active')].status", "string", "MultiKueueCluster is connected"),
        _AGE,
    ],
}
_DROP_KEYS = ("title", "default", "description")


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        members = [m for m in node["anyOf"] if m != {"type": "null"}]
        if len(members) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            return _structural({**members[0], **rest}, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS or key == "$defs":
            continue
        if key == "properties":
            out[key] = {name: _structural(schema, defs) for name, schema in value.items()}
        elif key == "const":
            out["enum"] = [value]
        elif key == CRD_DEFAULT:
            out["default"] = copy.deepcopy(value)
        else:
            out[key] = _structural(value, defs)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("additionalProperties") is True or out.get("additionalProperties") == {}:
        out.pop("additionalProperties")
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    return out


def openapi_schema(model: type[Resource]) -> dict[str, Any]:
    """The structural openAPIV3Schema of one kind in one version."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema: dict[str, Any] = _structural(raw, raw.get("$defs", {}))
    properties = schema.setdefault("properties", {})
    properties["apiVersion"] = {"type": "string"}
    properties["kind"] = {"type": "string"}
    properties["metadata"] = {"type": "object"}
    # Kueue's CRDs require no spec (an object without one is stored; kfed's models refuse it).
    schema["required"] = [name for name in schema.get("required", []) if name not in ("metadata", "apiVersion", "kind", "spec")]
    if not schema["required"]:
        del schema["required"]
    schema["type"] = "object"
    return schema


def crd(hub: type[Resource], spoke: type[Resource]) -> dict[str, Any]:
    """The CRD for one kind, serving v1beta2 (stored) and v1beta1."""
    versions = []
    for model in (hub, spoke):
        version: dict[str, Any] = {
            "name": model.VERSION,
            "served": True,
            "storage": model.VERSION == STORAGE_VERSION,
            "schema": {"openAPIV3Schema": openapi_schema(model)},
        }
        if "status" in model.model_fields:
            version["subresources"] = {"status": {}}
        if hub.KIND in PRINTER_COLUMNS:
            columns = copy.deepcopy(PRINTER_COLUMNS[hub.KIND])
            if model.VERSION == "v1beta1":
                for column in columns:
                    column["jsonPath"] = column["jsonPath"].replace(".spec.cohortName", ".spec.cohort")
            version["additionalPrinterColumns"] = columns
        if model.VERSION == "v1beta1":
            version["deprecated"] = True
            version["deprecationWarning"] = f"{GROUP}/v1beta1 {hub.KIND} is deprecated; use {GROUP}/v1beta2"
        versions.append(version)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{hub.PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "kfed"},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": hub.KIND,
                "listKind": f"{hub.KIND}List",
                "plural": hub.PLURAL,
                "singular": hub.KIND.lower(),
                "shortNames": SHORT_NAMES[hub.KIND],
                "categories": ["kueue"],
            },
            "scope": "Namespaced" if hub.NAMESPACED else "Cluster",
            # No `conversion` here (the apiserver defaults it to None): the manager points it at
            # its conversion webhook when it leads, and a later `kubectl apply --server-side` of
            # these files (an upgrade) must not fight it for that field.
            "versions": versions,
        },
    }


def render_all(kinds: tuple[tuple[type[Resource], type[Resource]], ...] | None = None) -> dict[str, str]:
    """File name to YAML text for every CRD in crds/ (or for the given hub and v1beta1 pairs)."""
    files: dict[str, str] = {}
    pairs = kinds or tuple((hub, v1beta1.KIND_BY_NAME[hub.KIND]) for hub in kueue.KINDS)
    for hub, spoke in pairs:
        text = "# Generated by `kfed crds`; do not edit by hand.\n" + yaml.safe_dump(crd(hub, spoke), sort_keys=False, width=120)
        files[f"{GROUP}_{hub.PLURAL}.yaml"] = text
    if kinds is None:
        # So that `kubectl apply -k crds/` works and deploy/ can use crds/ as a base.
        resources = "".join(f"  - {name}\n" for name in sorted(files))
        files["kustomization.yaml"] = (
            "# Generated by `kfed crds`; do not edit by hand.\n"
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n" + resources
        )
    return files
