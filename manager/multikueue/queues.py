"""Queues that follow the manager (kfed's own, opt-in): which namespaces and LocalQueues the
manager keeps on a worker for the Workloads it dispatches there, and which of those it removes
(pure). The shell (`manager.multikueue.propagation`) reads, calls these, and writes.

Kueue's rule is that the administrator mirrors every namespace and LocalQueue onto every
worker by hand; with propagation off, kfed keeps that rule exactly. With it on, the manager
creates what a copy needs on the worker it sends the copy to, marks what it created as its own
(`ours`: kfed's managed-by label and this manager's origin), and removes only what carries that
mark and nothing on the worker uses any more. An object it did not create is never changed or
deleted: one that exists already, whoever made it, is used as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from manager.api import constants as c
from manager.api.kueue import LocalQueue
from manager.multikueue.capacity import WorkerQuotas

# On a MultiKueueConfig: "true" or "false", overriding the Configuration's
# `multiKueue.propagateQueues` for the Workloads whose check uses that config.
PROPAGATE_QUEUES_ANNOTATION = "kfed.dev/propagate-queues"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kfed"
# Which manager created the object (its MultiKueue origin): two managers sharing a worker never
# remove each other's.
PROPAGATED_BY_LABEL = "kfed.dev/propagated-by"

# The MultiKueueCluster condition that reports a propagated LocalQueue whose ClusterQueue the
# worker does not have (kfed's own type; Kueue reads only `Active`).
QUEUES_CONDITION = "kfed.dev/QueuesInSync"
REASON_IN_SYNC = "InSync"
REASON_CLUSTER_QUEUE_MISSING = "ClusterQueueMissing"


def propagation_on(annotations: Mapping[str, str] | None, *, default: bool, config_name: str) -> bool:
    """Whether a MultiKueueConfig propagates queues: its annotation, else the Configuration's
    setting. Raises ValueError naming the object and field when the annotation is neither
    "true" nor "false"."""
    raw = (annotations or {}).get(PROPAGATE_QUEUES_ANNOTATION)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(
            f"multikueueconfig/{config_name}: metadata.annotations[{PROPAGATE_QUEUES_ANNOTATION}]: "
            f'Invalid value: {raw!r}: must be "true" or "false"'
        )
    return value == "true"


def ownership_labels(origin: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY, PROPAGATED_BY_LABEL: origin}


def is_ours(labels: Mapping[str, str] | None, origin: str) -> bool:
    """Whether this manager created the object (both marks; either alone may be someone else's)."""
    found = labels or {}
    return found.get(MANAGED_BY_LABEL) == MANAGED_BY and found.get(PROPAGATED_BY_LABEL) == origin


def namespace_manifest(name: str, *, origin: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": ownership_labels(origin)}}


def local_queue_manifest(namespace: str, name: str, *, cluster_queue: str, origin: str) -> dict[str, Any]:
    """The worker's LocalQueue for the manager's `namespace/name`: the same ClusterQueue name,
    which the worker's administrator provides (as Kueue's MultiKueue expects)."""
    return {
        "apiVersion": f"{c.GROUP}/{c.STORAGE_VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace, "labels": ownership_labels(origin)},
        "spec": {"clusterQueue": cluster_queue},
    }


@dataclass(frozen=True)
class Owned:
    """An object this manager created on the worker: its name (`namespace/name` for a
    LocalQueue) and uid (the delete's precondition: a same-named object made since is not ours)."""

    name: str
    uid: str


@dataclass(frozen=True)
class WorkerQueues:
    """What the cleanup reads of one worker."""

    namespaces: Sequence[Owned]  # ours
    local_queues: Sequence[Owned]  # ours
    all_local_queues: Iterable[str] = ()  # `namespace/name` of every LocalQueue there, ours or not
    workloads: Iterable[tuple[str, str]] = ()  # (namespace, queueName) of every Workload there
    jobs: Iterable[str] = ()  # namespaces of our jobs there (they outlive their copy for a moment)


@dataclass
class Cleanup:
    local_queues: list[Owned] = field(default_factory=list)
    namespaces: list[Owned] = field(default_factory=list)


def plan_cleanup(worker: WorkerQueues, *, needed: Iterable[tuple[str, str]]) -> Cleanup:
    """Our LocalQueues no Workload on the worker uses and no manager Workload still needs there
    (`needed`: (namespace, queue)); then our namespaces left with nothing in them that counts:
    no Workload, no job of ours, no LocalQueue but ours going now, and no need from the manager."""
    wanted = set(needed)
    used = set(worker.workloads)
    going = [lq for lq in worker.local_queues if tuple(lq.name.split("/", 1)) not in used | wanted]
    staying = set(worker.all_local_queues) - {lq.name for lq in going}
    busy = {ns for ns, _ in used | wanted} | set(worker.jobs) | {key.partition("/")[0] for key in staying}
    return Cleanup(
        local_queues=sorted(going, key=lambda owned: owned.name),
        namespaces=sorted((ns for ns in worker.namespaces if ns.name not in busy), key=lambda owned: owned.name),
    )


def missing_cluster_queues(local_queues: Iterable[tuple[str, str]], cluster_queues: Iterable[str]) -> list[str]:
    """Drift: for each (LocalQueue `namespace/name`, its ClusterQueue) whose ClusterQueue the
    worker does not have, one phrase naming both, sorted."""
    present = set(cluster_queues)
    return sorted(f"LocalQueue {lq} points at ClusterQueue {cq}" for lq, cq in local_queues if cq not in present)


def queues_condition(drift: Sequence[str]) -> tuple[str, str, str]:
    """(status, reason, message) of the `kfed.dev/QueuesInSync` condition."""
    if not drift:
        return "True", REASON_IN_SYNC, "every LocalQueue the manager created has its ClusterQueue on the worker"
    more = f" (and {len(drift) - 3} more)" if len(drift) > 3 else ""
    return "False", REASON_CLUSTER_QUEUE_MISSING, f"{'; '.join(drift[:3])}{more}, which the worker does not have"


def with_propagated_queue(quotas: WorkerQuotas, manager_queue: LocalQueue, *, origin: str) -> WorkerQuotas:
    """The worker's queues as the dispatch rules should judge them when the manager propagates:
    with the manager's LocalQueue as `ensure` would create it there, unless the worker has one
    of that name (which is used as it is, whatever ClusterQueue it points at)."""
    if any(lq.key == manager_queue.key for lq in quotas.local_queues) or not manager_queue.spec.cluster_queue:
        return quotas
    manifest = local_queue_manifest(
        manager_queue.namespace, manager_queue.name, cluster_queue=manager_queue.spec.cluster_queue, origin=origin
    )
    return replace(quotas, local_queues=[*quotas.local_queues, LocalQueue.model_validate(manifest)])
