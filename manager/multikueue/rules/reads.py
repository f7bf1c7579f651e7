"""kfed's own read API (`reads.kfed.dev`, v1alpha1), as pure functions of what the manager
already knows: each worker's health and capacity, each Workload's verdict on every worker, and
where a Workload's pods run. The manager serves it through its aggregated API server beside
Kueue's visibility API (`manager.multikueue.controllers.read_api`), so that a user reads the workers
through the manager, with the user's own identity, and never holds a worker's credential.

The verdicts are the ones `kfed explain` prints (one home: `worker_verdict`), and the health
and capacity the ones `kfed clusters` and `kfed status` print (`worker_usage`, `copy_counts`).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import find_condition
from manager.engine.units import amount, format_amount
from manager.engine.workload import conditions_of, has_quota_reservation, is_admitted, is_finished, misconfiguration
from manager.multikueue.rules.capacity import WorkerQuotas, fit_when_empty, total_requests, workload_info
from manager.multikueue.rules.queues import (
    DRIFT_ENDING,
    KEPT_CONDITION,
    QUEUES_CONDITION,
    Listing,
    drift_listing,
    kept_listing,
    listed_message,
)

GROUP = "reads.kfed.dev"
VERSION = "v1alpha1"
VERSIONS = (VERSION,)
# The resources, as RBAC names them (a subresource after the slash).
CLUSTERS = "clusters"
VERDICTS = "workloads/verdicts"
PODS = "workloads/pods"
LOG = "workloads/log"  # "log": the apiserver counts it long-running, so a follow is never cut at 60 s


# --- verdicts ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Remote:
    """What the manager knows of one worker for one Workload: its connection and our copy
    there (or why not), and what its queues could ever give per resource."""

    cluster: str
    active: bool
    reason: str = ""
    copy: kueue.Workload | None = None
    error: str = ""
    offers: Mapping[str, int] = field(default_factory=dict)  # resource -> engine units
    excluded: str = ""  # why the job may not go there (`multikueue/selection.py`), or ""


@dataclass(frozen=True)
class Verdict:
    """A worker's verdict on the job: the sentence, and the misconfiguration it names (one of
    `manager.engine.workload`'s MISSING_LOCAL_QUEUE, ...; "" for none), read from the worker's
    own words before they became the sentence."""

    text: str
    problem: str = ""


def worker_verdict(remote: Remote, *, nominated: Sequence[str], winner: str, reserved: bool) -> Verdict:
    if not remote.active:
        return Verdict(
            f"unreachable ({remote.reason or 'not connected'}){': ' + remote.error if remote.error else ''}", misconfiguration(remote.error)
        )
    if remote.cluster == winner:
        return Verdict("admitted here: the Job runs on this worker")
    if remote.error:
        return Verdict(remote.error, misconfiguration(remote.error))
    if remote.copy is None and remote.excluded:
        return Verdict(remote.excluded)
    if remote.copy is None:
        if not reserved:
            return Verdict("not nominated yet: the manager has not reserved quota")
        if winner:
            return Verdict(f"no copy: the job was admitted on {winner}")
        return Verdict("no copy yet" + (" (nominated)" if remote.cluster in nominated else " (not nominated)"))
    if is_admitted(remote.copy):
        return Verdict("admitted here too (a copy that lost the race, about to be deleted)")
    waiting = find_condition(conditions_of(remote.copy), c.QUOTA_RESERVED)
    if waiting is not None and waiting.status == "False" and waiting.message:
        return Verdict(f"waiting: {waiting.message}", misconfiguration(waiting.message))
    if waiting is not None and waiting.status == "True":
        return Verdict("quota reserved here, waiting for its admission checks")
    return Verdict("copied, waiting for the worker's scheduler")


def largest_offers(wl: kueue.Workload, quotas: WorkerQuotas | None) -> dict[str, int]:
    """What the worker's queues could ever give the Workload, per resource it asks for (empty
    while the worker's queues are unknown, or when it lacks the LocalQueue)."""
    if quotas is None:
        return {}
    try:
        info = workload_info(wl)
    except ValueError:
        return {}
    fit = fit_when_empty(info, quotas)
    return {resource: fit.offers.get(resource, 0) for resource in sorted(total_requests(info)) if not fit.missing}


def verdicts_document(wl: kueue.Workload, remotes: Sequence[Remote]) -> dict[str, Any]:
    """The `workloads/verdicts` answer: each worker's verdict on the Workload, by name."""
    status = wl.status
    nominated = list((status.nominated_cluster_names if status else None) or [])
    winner = (status.cluster_name or "") if status else ""
    reserved = has_quota_reservation(wl)
    workers = []
    for remote in sorted(remotes, key=lambda r: r.cluster):
        verdict = worker_verdict(remote, nominated=nominated, winner=winner, reserved=reserved)
        workers.append(
            {
                "name": remote.cluster,
                "active": remote.active,
                "reason": remote.reason,
                "verdict": verdict.text,
                "problem": verdict.problem,
                "largestOffer": {resource: format_amount(resource, value) for resource, value in remote.offers.items()},
            }
        )
    return {
        "kind": "WorkloadVerdicts",
        "apiVersion": f"{GROUP}/{VERSION}",
        "metadata": {"name": wl.name, "namespace": wl.namespace},
        "nominated": nominated,
        "admittedOn": winner,
        "quotaReserved": reserved,
        "workers": workers,
    }


def verdicts_from(document: Mapping[str, Any]) -> dict[str, tuple[bool, Verdict]]:
    """A `workloads/verdicts` answer read back: worker -> (reachable, its verdict)."""
    found = {}
    for worker in document.get("workers") or []:
        found[str(worker["name"])] = (bool(worker.get("active")), Verdict(str(worker.get("verdict", "")), str(worker.get("problem", ""))))
    return found


# --- health and capacity -------------------------------------------------------------------------------
def flavor_usage(cluster_queues: Iterable[kueue.ClusterQueue]) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Quota use per flavor and resource, summed over a worker's ClusterQueues: (flavor,
    resource) -> (reserved, nominal, borrowed), in engine units (milli-units, or bytes)."""
    usage: dict[tuple[str, str], tuple[int, int, int]] = {}
    for cq in cluster_queues:
        reserved: dict[tuple[str, str], tuple[int, int]] = {}
        for used_flavor in (cq.status.flavors_reservation if cq.status else None) or []:
            for resource in used_flavor.resources or []:
                total = amount(resource.name, resource.total) if resource.total is not None else 0
                borrowed = amount(resource.name, resource.borrowed) if resource.borrowed is not None else 0
                reserved[(used_flavor.name, resource.name)] = (total, borrowed)
        for group in cq.spec.resource_groups or []:
            for quotas in group.flavors:
                for r in quotas.resources:
                    key = (quotas.name, r.name)
                    used, nominal, borrowed = usage.get(key, (0, 0, 0))
                    add_used, add_borrowed = reserved.get(key, (0, 0))
                    usage[key] = (used + add_used, nominal + amount(r.name, r.nominal_quota), borrowed + add_borrowed)
    return usage


def worker_usage(cluster_queues: Iterable[kueue.ClusterQueue]) -> dict[str, tuple[int, int]]:
    """Quota use summed over a worker's ClusterQueues and flavors: resource -> (reserved,
    nominal), in engine units (milli-units, or bytes)."""
    usage: dict[str, tuple[int, int]] = {}
    for (_, resource), (used, nominal, _) in flavor_usage(cluster_queues).items():
        total_used, total_nominal = usage.get(resource, (0, 0))
        usage[resource] = (total_used + used, total_nominal + nominal)
    return usage


def flavors_item(usage: dict[tuple[str, str], tuple[int, int, int]]) -> dict[str, dict[str, dict[str, int]]]:
    """`flavor_usage` as the read API says it: flavor -> resource -> reserved, nominal, borrowed."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for (flavor, resource), (used, nominal, borrowed) in sorted(usage.items()):
        out.setdefault(flavor, {})[resource] = {"reserved": used, "nominal": nominal, "borrowed": borrowed}
    return out


def copy_counts(workloads: Iterable[kueue.Workload], *, origin: str) -> tuple[int, int]:
    """(running, pending): our unfinished copies on a worker, admitted there or not."""
    running = pending = 0
    for wl in workloads:
        if (wl.metadata.labels or {}).get(c.MULTIKUEUE_ORIGIN_LABEL) != origin or is_finished(wl):
            continue
        if is_admitted(wl):
            running += 1
        else:
            pending += 1
    return running, pending


@dataclass(frozen=True)
class WorkerSighting:
    """What the manager holds of one worker: its MultiKueueCluster, whether the connection is
    up (and the last error), our copies there and its queues (None while unknown)."""

    cluster: kueue.MultiKueueCluster
    connected: bool
    error: str = ""
    copies: Sequence[kueue.Workload] | None = None  # None: never listed
    cluster_queues: Sequence[kueue.ClusterQueue] | None = None


def _iso(when: datetime | None) -> str | None:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when is not None else None


# --- what a worker's propagation names, for one reader -------------------------------------------------
# A fleet-level read names no namespace that the reader may not read: a worker's queue drift and
# kept namespaces (its `kfed.dev/QueuesInSync` and `kfed.dev/NamespacesKept` conditions, which
# an administrator reads whole on the MultiKueueCluster) name to a reader only the entries of
# namespaces it may read, and count the others. The controller asks which those are.
def _drift(cluster: kueue.MultiKueueCluster) -> Listing:
    cond = find_condition(cluster.status.conditions if cluster.status else None, QUEUES_CONDITION)
    return drift_listing(cond.message) if cond is not None and cond.status == "False" else Listing()


def _kept(cluster: kueue.MultiKueueCluster) -> Listing:
    cond = find_condition(cluster.status.conditions if cluster.status else None, KEPT_CONDITION)
    return kept_listing(cond.message) if cond is not None and cond.status == "True" else Listing()


def namespaces_named(clusters: Iterable[kueue.MultiKueueCluster]) -> list[str]:
    """The namespaces the workers' drift and kept namespaces name, sorted: whether the reader
    may read each is what decides what it is told."""
    named = {ns for cluster in clusters for listing in (_drift(cluster), _kept(cluster)) for ns, _ in listing.entries}
    return sorted(named - {""})


def for_reader(listing: Listing, readable: Container[str], *, ending: str = "") -> str:
    """The listing as told to a reader who may read the namespaces in `readable`: their entries
    by name, the others (and any whose namespace cannot be told) by count alone."""
    shown = [phrase for ns, phrase in listing.entries if ns and ns in readable]
    hidden = len(listing.entries) - len(shown) + listing.unreadable
    return listed_message(shown, more=listing.more, ending=ending, unreadable=hidden)


# The reviews that decide what `clusters` names to a reader, one home for every teller (the read
# API, the in-cluster dashboard): reading the MultiKueueClusters themselves (everything, the
# workers' own words included), else listing a namespace's LocalQueues on the manager (the
# objects that propagation copies, and that the drift and the kept namespaces both name).
CLUSTER_OBJECTS = {"group": c.GROUP, "version": c.STORAGE_VERSION, "resource": "multikueueclusters"}
LIST_LOCAL_QUEUES = {"group": c.GROUP, "version": c.STORAGE_VERSION, "resource": "localqueues", "verb": "list"}


class EveryNamespace(Container[str]):
    """What a reader of the MultiKueueClusters themselves may read: every namespace their
    conditions name (they read those conditions whole anyway)."""

    def __contains__(self, namespace: object) -> bool:
        return True


EVERY_NAMESPACE = EveryNamespace()
# In place of a worker's own words (its connection's last error, the Active condition's
# message) to a reader who may not read the MultiKueueCluster: those words may name any of the
# worker's namespaces (a refusal names the namespace refused).
WITHHELD = "details only for readers of the MultiKueueCluster"


def cluster_item(seen: WorkerSighting, *, origin: str, readable: Container[str], worker_words: bool) -> dict[str, Any]:
    """One worker's health and capacity, as `clusters` answers it to a reader who may read the
    namespaces in `readable`, and the worker's own words only if `worker_words` (`told_to`)."""
    cond = find_condition(seen.cluster.status.conditions if seen.cluster.status else None, c.ACTIVE)
    reachable = seen.connected and seen.copies is not None
    running, pending = copy_counts(seen.copies or [], origin=origin) if reachable else (0, 0)
    usage = worker_usage(seen.cluster_queues or []) if reachable else {}
    flavors = flavor_usage(seen.cluster_queues or []) if reachable else {}
    error = "" if reachable else ("unreachable: " + seen.error if seen.error else "unreachable")
    whole = {
        "metadata": {"name": seen.cluster.name},
        "active": cond.status if cond is not None else "Unknown",
        "reason": cond.reason if cond is not None else "",
        "message": cond.message if cond is not None else "",
        "since": _iso(cond.last_transition_time) if cond is not None else None,
        "reachable": reachable,
        "error": error,
        "running": running,
        "pending": pending,
        "usage": {resource: {"reserved": used, "nominal": total} for resource, (used, total) in sorted(usage.items())},
        "flavors": flavors_item(flavors),
        # Propagated queues' drift (`kfed.dev/QueuesInSync` False): what the worker lacks.
        "queueDrift": _message(seen.cluster, QUEUES_CONDITION, "False"),
        # Namespaces propagation created and keeps for objects it did not create (`kfed.dev/NamespacesKept` True).
        "keptNamespaces": _message(seen.cluster, KEPT_CONDITION, "True"),
    }
    return told_to(whole, readable, worker_words=worker_words)


def _message(cluster: kueue.MultiKueueCluster, kind: str, status: str) -> str:
    cond = find_condition(cluster.status.conditions if cluster.status else None, kind)
    return cond.message if cond is not None and cond.status == status else ""


def item_namespaces(items: Iterable[Mapping[str, Any]]) -> list[str]:
    """The namespaces that `clusters` items name in their drift and kept namespaces, sorted."""
    named = {
        ns
        for item in items
        for listing in (drift_listing(item.get("queueDrift") or ""), kept_listing(item.get("keptNamespaces") or ""))
        for ns, _ in listing.entries
    }
    return sorted(named - {""})


def told_to(item: Mapping[str, Any], readable: Container[str], *, worker_words: bool) -> dict[str, Any]:
    """A `clusters` item as told to a reader who may read the namespaces in `readable`: their
    drift and kept entries by name, the others by count (`for_reader`); and the worker's own
    words (its connection's last error, its Active message), which may name a namespace the
    worker refused, only if `worker_words` (the reader may read the MultiKueueCluster).

    The one rule for every teller: the read API tells its caller, and the in-cluster dashboard,
    which reads `clusters` with its own identity, tells it again to the user it serves (an item
    told once reads back the same way: what was counted stays counted)."""
    told = dict(item)
    drift, kept = item.get("queueDrift") or "", item.get("keptNamespaces") or ""
    told["queueDrift"] = for_reader(drift_listing(drift), readable, ending=DRIFT_ENDING) if drift else ""
    told["keptNamespaces"] = for_reader(kept_listing(kept), readable) if kept else ""
    if not worker_words:
        told["error"] = f"unreachable ({WITHHELD})" if item.get("error") else ""
        told["message"] = WITHHELD if item.get("message") else ""
    return told


def answer_items(answer: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The items of a `clusters` answer: a list's, or the one cluster's."""
    if answer.get("kind") == "WorkerClusterList":
        items = answer.get("items")
        return [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []
    return [answer]


def told_answer(answer: Mapping[str, Any], readable: Container[str], *, worker_words: bool) -> dict[str, Any]:
    """A `clusters` answer (list or one cluster) told again to another reader (`told_to`)."""
    told = [told_to(item, readable, worker_words=worker_words) for item in answer_items(answer)]
    if answer.get("kind") == "WorkerClusterList":
        return {**answer, "items": told}
    return told[0]


def clusters_document(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": "WorkerClusterList", "apiVersion": f"{GROUP}/{VERSION}", "metadata": {}, "items": list(items)}


def cluster_document(item: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "WorkerCluster", "apiVersion": f"{GROUP}/{VERSION}", **item}


# --- pods and logs --------------------------------------------------------------------------------------
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


def pods_document(wl: kueue.Workload, cluster: str, pods: Sequence[Any]) -> dict[str, Any]:
    """The `workloads/pods` answer: where the Workload runs, and its pods there with their
    containers (kubectl's default one first named), by name."""
    listed = []
    for pod in sorted(pods, key=lambda p: p.name):
        listed.append(
            {
                "name": pod.name,
                "containers": [container.name for container in pod.spec.containers],
                "defaultContainer": (pod.metadata.annotations or {}).get(DEFAULT_CONTAINER_ANNOTATION, ""),
            }
        )
    return {
        "kind": "WorkloadPods",
        "apiVersion": f"{GROUP}/{VERSION}",
        "metadata": {"name": wl.name, "namespace": wl.namespace},
        "cluster": cluster,
        "pods": listed,
    }


# --- discovery -----------------------------------------------------------------------------------------------
def resource_list(version: str) -> dict[str, Any]:
    resources = [
        {"name": CLUSTERS, "singularName": "cluster", "namespaced": False, "kind": "WorkerCluster", "verbs": ["get", "list"]},
        {"name": "workloads", "singularName": "workload", "namespaced": True, "kind": "Workload", "verbs": []},
        {"name": VERDICTS, "singularName": "", "namespaced": True, "kind": "WorkloadVerdicts", "verbs": ["get"]},
        {"name": PODS, "singularName": "", "namespaced": True, "kind": "WorkloadPods", "verbs": ["get"]},
        {"name": LOG, "singularName": "", "namespaced": True, "kind": "WorkloadLog", "verbs": ["get"]},
    ]
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{version}", "resources": resources}


def group_document() -> dict[str, Any]:
    versions = [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in VERSIONS]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": versions, "preferredVersion": versions[0]}
