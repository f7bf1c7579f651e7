"""Conversion between kueue.x-k8s.io v1beta1 and v1beta2, on the wire form (plain dicts).

The one place where versions are mapped; the conversion webhook and `kfed convert` both call
`convert`. Working on dicts keeps every field the object carries, known to kfed or not.
Same as Kueue, except where noted: v1beta1 `spec.admissionChecks` becomes
`spec.admissionChecksStrategy`, and a strategy whose rules name no flavors goes back to
`spec.admissionChecks`, so both directions round-trip to an equal object.
"""

from __future__ import annotations

import copy
from typing import Any

from manager.api.constants import GROUP

VERSIONS = ("v1beta1", "v1beta2")
WPC_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
POD_PRIORITY_SOURCE = "scheduling.k8s.io/priorityclass"


class ConversionError(ValueError):
    """The object cannot be converted to the version asked for."""


def version_of(obj: dict[str, Any]) -> tuple[str, str]:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    return group, version


def convert(obj: dict[str, Any], to_version: str) -> dict[str, Any]:
    """Return a copy of `obj` written in `to_version`; objects of other groups come back as they are."""
    if to_version not in VERSIONS:
        raise ConversionError(f"unknown version {to_version!r}: expected one of {', '.join(VERSIONS)}")
    group, version = version_of(obj)
    out = copy.deepcopy(obj)
    if group != GROUP or version == to_version:
        return out
    if version not in VERSIONS:
        raise ConversionError(f"{obj.get('kind')}: unknown apiVersion {obj.get('apiVersion')!r}")
    kind = str(obj.get("kind", ""))
    step = _UP if to_version == "v1beta2" else _DOWN
    if kind in step:
        step[kind](out)
    out["apiVersion"] = f"{GROUP}/{to_version}"
    return out


def _rename(mapping: dict[str, Any] | None, old: str, new: str) -> None:
    if isinstance(mapping, dict) and old in mapping:
        mapping[new] = mapping.pop(old)


def _cluster_queue_up(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    _rename(spec, "cohort", "cohortName")
    checks = spec.pop("admissionChecks", None)
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in checks]}
    fungibility = spec.get("flavorFungibility")
    if isinstance(fungibility, dict):
        # Same as Kueue: the deprecated Borrow and Preempt both mean MayStopSearch.
        for key, alias in (("whenCanBorrow", "Borrow"), ("whenCanPreempt", "Preempt")):
            if fungibility.get(key) == alias:
                fungibility[key] = "MayStopSearch"


def _cluster_queue_down(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    _rename(spec, "cohortName", "cohort")
    strategy = spec.get("admissionChecksStrategy")
    rules = strategy.get("admissionChecks") if isinstance(strategy, dict) else None
    if rules and isinstance(strategy, dict) and len(strategy) == 1 and all(set(rule) == {"name"} for rule in rules):
        spec["admissionChecks"] = [rule["name"] for rule in rules]
        del spec["admissionChecksStrategy"]


def _local_queue_up(obj: dict[str, Any]) -> None:
    status = obj.get("status")
    _rename(status, "flavorUsage", "flavorsUsage")
    if isinstance(status, dict):
        status.pop("flavors", None)  # v1beta1-only TAS summary, dropped by Kueue too


def _local_queue_down(obj: dict[str, Any]) -> None:
    _rename(obj.get("status"), "flavorsUsage", "flavorUsage")


def _workload_up(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        source = spec.pop("priorityClassSource", None)
        name = spec.get("priorityClassName")
        if source == WPC_SOURCE and name:
            spec["priorityClassRef"] = {"group": GROUP, "kind": "WorkloadPriorityClass", "name": name}
            del spec["priorityClassName"]
        elif source == POD_PRIORITY_SOURCE and name:
            spec["priorityClassRef"] = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": name}
            del spec["priorityClassName"]
        else:
            spec.pop("priorityClassName", None)
    _rename(obj.get("status"), "accumulatedPastExexcutionTimeSeconds", "accumulatedPastExecutionTimeSeconds")


def _workload_down(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        ref = spec.pop("priorityClassRef", None)
        spec.pop("preemptionGates", None)
        if isinstance(ref, dict):
            if ref.get("kind") == "WorkloadPriorityClass":
                spec["priorityClassSource"] = WPC_SOURCE
            else:
                spec["priorityClassSource"] = POD_PRIORITY_SOURCE
            spec["priorityClassName"] = ref.get("name", "")
    _rename(obj.get("status"), "accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds")


def _multikueue_cluster_up(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    source: dict[str, Any] = {}
    if "kubeConfig" in spec:
        source["kubeConfig"] = spec.pop("kubeConfig")
    if "clusterProfileRef" in spec:
        source["clusterProfileRef"] = spec.pop("clusterProfileRef")
    if source:
        spec["clusterSource"] = source


def _multikueue_cluster_down(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        source = spec.pop("clusterSource", None) or {}
        spec.update(source)


def _admission_check_up(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.pop("retryDelayMinutes", None)  # deprecated in v1beta1, removed in v1beta2


def _multikueue_config_down(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        spec.pop("quotaManagement", None)  # v1beta2 only


_UP = {
    "ClusterQueue": _cluster_queue_up,
    "LocalQueue": _local_queue_up,
    "Workload": _workload_up,
    "MultiKueueCluster": _multikueue_cluster_up,
    "AdmissionCheck": _admission_check_up,
}
_DOWN = {
    "ClusterQueue": _cluster_queue_down,
    "LocalQueue": _local_queue_down,
    "Workload": _workload_down,
    "MultiKueueCluster": _multikueue_cluster_down,
    "MultiKueueConfig": _multikueue_config_down,
}
