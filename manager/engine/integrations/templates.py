"""Kueue's podset.Merge and RestorePodSpec on one pod template (pure): what a job kind's adapter
does to each of its templates when its Workload is admitted, and when it is stopped. One home
for every kind that starts by rewriting its templates (JobSet's replicatedJobs, a RayCluster's
head and worker groups; an MPIJob's replica types restore through it, and merge with a conflict
message of their own)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from manager.engine.jobs import JobConversionError, PodSetInfo


def _merge_map(have: Mapping[str, str], add: Mapping[str, str], *, what: str, path: str) -> dict[str, str]:
    """Kueue's podset.Merge for one map: a key may be added, never given another value."""
    for key, value in add.items():
        if key in have and have[key] != value:
            raise JobConversionError(path, f'conflict for {what}: "{key}" is "{have[key]}", the admission sets "{value}"')
    return {**have, **add}


def _set_or_drop(target: dict[str, Any], key: str, value: Any) -> None:
    if value:
        target[key] = value
    else:
        target.pop(key, None)


def merge_into_template(template: dict[str, Any], info: PodSetInfo, *, path: str) -> None:
    """Merge one admitted PodSet into a pod template in place (Kueue's podset.Merge): its labels,
    annotations and nodeSelector added (a different value for a key is a conflict), its
    tolerations appended unless there already."""
    meta = template.setdefault("metadata", {})
    spec = template.setdefault("spec", {})
    for target, key, add, where in (
        (meta, "labels", info.labels, "metadata.labels"),
        (meta, "annotations", info.annotations, "metadata.annotations"),
        (spec, "nodeSelector", info.node_selector, "spec.nodeSelector"),
    ):
        _set_or_drop(target, key, _merge_map(target.get(key) or {}, add, what=key, path=f"{path}.{where}"))
    tolerations = list(spec.get("tolerations") or [])
    tolerations += [toleration for toleration in info.tolerations if toleration not in tolerations]
    _set_or_drop(spec, "tolerations", tolerations)


def restore_template(template: dict[str, Any], recorded: Mapping[str, Any]) -> bool:
    """Give a pod template back the labels, annotations, nodeSelector and tolerations its
    Workload recorded (Kueue's RestorePodSpec), in place; whether anything changed."""
    want_meta = recorded.get("metadata") or {}
    want_spec = recorded.get("spec") or {}
    meta = template.setdefault("metadata", {})
    spec = template.setdefault("spec", {})
    changed = False
    for target, key, want in (
        (meta, "labels", want_meta.get("labels")),
        (meta, "annotations", want_meta.get("annotations")),
        (spec, "nodeSelector", want_spec.get("nodeSelector")),
        (spec, "tolerations", want_spec.get("tolerations")),
    ):
        if (target.get(key) or None) != (want or None):
            changed = True
            _set_or_drop(target, key, copy.deepcopy(want))
    if not meta:
        template.pop("metadata", None)
    return changed
