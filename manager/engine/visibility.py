"""Kueue's visibility API answers (`visibility.kueue.x-k8s.io`), as pure functions of the
engine's queues: the pending Workloads of a ClusterQueue or a LocalQueue, in the order the
scheduler takes them, with their positions.

Positions count from 0, as Kueue's do. In a ClusterQueue's answer, a Workload's position in its
LocalQueue counts the Workloads of that LocalQueue among the first `offset + limit` only (so a
page is cheap to compute), as Kueue's storage computes it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from manager.engine.workload import WorkloadInfo

GROUP = "visibility.kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")
DEFAULT_LIMIT = 1000  # Kueue's DefaultPendingWorkloadsLimit
SUMMARY_KIND = "PendingWorkloadsSummary"


MAX_DIGITS = 9  # a limit or offset of a billion Workloads or more is refused, not parsed
SHOWN = 40  # how much of a refused value its message repeats


class VisibilityQueryError(ValueError):
    """A query parameter that is not a non-negative integer; the message names it."""


def non_negative_integer(name: str, raw: str) -> int:
    """`raw` read as Kubernetes reads a count: ASCII digits only (`str.isdigit` also takes `²`
    and `٣`, which `int` then refuses or reads as 3), and at most MAX_DIGITS of them. A refusal
    is one line naming the parameter, with the value quoted and cut (never a traceback)."""
    if not (0 < len(raw) <= MAX_DIGITS and raw.isascii() and raw.isdigit()):
        shown = json.dumps(raw[:SHOWN] + ("..." if len(raw) > SHOWN else ""))
        limit = f" of at most {MAX_DIGITS} digits" if len(raw) > MAX_DIGITS else ""
        raise VisibilityQueryError(f"{name}: Invalid value: {shown}: must be a non-negative integer{limit}")
    return int(raw)


@dataclass(frozen=True)
class Page:
    limit: int = DEFAULT_LIMIT
    offset: int = 0


def page_of(query: dict[str, str]) -> Page:
    """`limit` and `offset` from a request's query, with Kueue's defaults."""
    values = {}
    for name, default in (("limit", DEFAULT_LIMIT), ("offset", 0)):
        raw = query.get(name)
        if raw is None or raw == "":
            values[name] = default
            continue
        values[name] = non_negative_integer(name, raw)
    return Page(values["limit"], values["offset"])


def _item(info: WorkloadInfo, *, in_cluster_queue: int, in_local_queue: int) -> dict[str, Any]:
    meta = info.obj.metadata
    metadata: dict[str, Any] = {
        "name": info.name,
        "namespace": info.namespace,
        "creationTimestamp": meta.creation_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ") if meta.creation_timestamp else None,
    }
    owners = [{"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name, "uid": ref.uid} for ref in meta.owner_references or []]
    if owners:
        metadata["ownerReferences"] = owners
    return {
        "metadata": metadata,
        "priority": info.priority,
        "localQueueName": info.queue_name,
        "positionInClusterQueue": in_cluster_queue,
        "positionInLocalQueue": in_local_queue,
    }


def in_cluster_queue(ordered: Sequence[WorkloadInfo], page: Page) -> list[dict[str, Any]]:
    """A page of a ClusterQueue's pending Workloads (`ordered` as the queue orders them)."""
    seen_in_local_queue: dict[tuple[str, str], int] = {}
    items = []
    for index, info in enumerate(ordered[: page.offset + page.limit]):
        lq = (info.namespace, info.queue_name)
        position_in_lq = seen_in_local_queue.get(lq, 0)
        seen_in_local_queue[lq] = position_in_lq + 1
        if index >= page.offset:
            items.append(_item(info, in_cluster_queue=index, in_local_queue=position_in_lq))
    return items


def in_local_queue(ordered: Sequence[WorkloadInfo], namespace: str, name: str, page: Page) -> list[dict[str, Any]]:
    """A page of one LocalQueue's pending Workloads, from its ClusterQueue's order."""
    items: list[dict[str, Any]] = []
    skipped = 0
    for index, info in enumerate(ordered):
        if len(items) >= page.limit:
            break
        if info.namespace != namespace or info.queue_name != name:
            continue
        if skipped < page.offset:
            skipped += 1
            continue
        items.append(_item(info, in_cluster_queue=index, in_local_queue=page.offset + len(items)))
    return items


def summary(version: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": SUMMARY_KIND, "apiVersion": f"{GROUP}/{version}", "metadata": {}, "items": items}


def resource_list(version: str) -> dict[str, Any]:
    """The discovery document of one version, listing the resources as Kueue's server does."""
    resources = [
        {"name": "clusterqueues", "singularName": "clusterqueue", "namespaced": False, "kind": "ClusterQueue", "verbs": ["get"]},
        {"name": "clusterqueues/pendingworkloads", "singularName": "", "namespaced": False, "kind": SUMMARY_KIND, "verbs": ["get"]},
        {"name": "localqueues", "singularName": "localqueue", "namespaced": True, "kind": "LocalQueue", "verbs": ["get"]},
        {"name": "localqueues/pendingworkloads", "singularName": "", "namespaced": True, "kind": SUMMARY_KIND, "verbs": ["get"]},
    ]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{version}", "resources": resources}


def group_document() -> dict[str, Any]:
    versions = [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in VERSIONS]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": versions, "preferredVersion": versions[0]}
