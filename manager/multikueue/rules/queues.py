"""Queues that follow the manager (kfed's own, opt-in): which namespaces and LocalQueues the
manager keeps on a worker for the Workloads it dispatches there, and which of those it removes
(pure). The shell (`manager.multikueue.controllers.propagation`) reads, calls these, and writes.

Kueue's rule is that the administrator mirrors every namespace and LocalQueue onto every
worker by hand; with propagation off, kfed keeps that rule exactly. With it on, the manager
creates what a copy needs on the worker it sends the copy to, marks what it created as its own
(`ours`: kfed's managed-by label and this manager's origin), and removes only what carries that
mark and nothing on the worker uses any more. An object it did not create is never changed or
deleted: one that exists already, whoever made it, is used as it is.

Propagation asks both sides (as Karmada's PropagationPolicy and a member cluster's admission):
- the manager chooses which of its namespaces propagate (`manager_selects`: the Configuration's
  `multiKueue.queuePropagation.namespaceSelector`; unset, every namespace but `kube-*` and
  `kfed-system`);
- a worker accepts a namespace only where its administrator said so (`worker_accepts`): an
  existing namespace labelled `kfed.dev/accept-queues: "true"`, or one kfed creates (and marks);
  never `kube-*`, `kfed-system` or a name of `multiKueue.queuePropagation.deniedNamespaces`.
The cleanup (`plan_cleanup`) deletes a namespace only when kfed created it and it holds nothing
kfed did not create (`others_in`); such a namespace is kept, and said to be kept, and why.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from manager.api import constants as c
from manager.api.kueue import LocalQueue
from manager.api.meta import LabelSelector
from manager.engine.selectors import selector_matches
from manager.multikueue.rules.capacity import WorkerQuotas

# On a MultiKueueConfig: "true" or "false", overriding the Configuration's
# `multiKueue.propagateQueues` for the Workloads whose check uses that config.
PROPAGATE_QUEUES_ANNOTATION = "kfed.dev/propagate-queues"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kfed"
# Which manager created the object (its MultiKueue origin): two managers sharing a worker never
# remove each other's.
PROPAGATED_BY_LABEL = "kfed.dev/propagated-by"

# On a worker's existing namespace, set by its administrator: the manager may create its
# LocalQueues there. A namespace kfed created itself needs no such label.
ACCEPT_QUEUES_LABEL = "kfed.dev/accept-queues"
# Never propagated to, whatever a selector or label says: the control plane's and kfed's own.
NEVER_PREFIXES = ("kube-",)
NEVER_NAMES = ("kfed-system",)

# The MultiKueueCluster condition that reports a propagated LocalQueue whose ClusterQueue the
# worker does not have (kfed's own type; Kueue reads only `Active`).
QUEUES_CONDITION = "kfed.dev/QueuesInSync"
REASON_IN_SYNC = "InSync"
REASON_CLUSTER_QUEUE_MISSING = "ClusterQueueMissing"
# The MultiKueueCluster condition that names the namespaces kfed created on the worker and keeps
# because they hold objects kfed did not create (True while there is one).
KEPT_CONDITION = "kfed.dev/NamespacesKept"
REASON_HOLDS_OTHERS = "HoldsObjectsKfedDidNotCreate"
REASON_NONE_KEPT = "NoneKept"


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


def denied(namespace: str, *, deny_list: Iterable[str] = ()) -> str | None:
    """Why no namespace of this name is ever propagated to, or None: `kube-*`, `kfed-system`,
    and each entry of the deny list (an exact name, or a prefix ending in `*`)."""
    if namespace.startswith(NEVER_PREFIXES) or namespace in NEVER_NAMES:
        return f"namespace \"{namespace}\" is never propagated to (kube-* and kfed-system are the cluster's and kfed's own)"
    for entry in deny_list:
        if namespace == entry or (entry.endswith("*") and namespace.startswith(entry[:-1])):
            return f'namespace "{namespace}" is denied by multiKueue.queuePropagation.deniedNamespaces ({entry})'
    return None


def manager_selects(namespace: str, labels: Mapping[str, str] | None, *, selector: LabelSelector | None) -> bool:
    """Whether the manager propagates this namespace's queues (its side of the opt-in). Without
    a selector, every namespace but `kube-*` and `kfed-system`: what propagation did before the
    selector, where that was safe. With one, the namespaces whose labels it matches (the
    apiserver labels each namespace `kubernetes.io/metadata.name`, to select by name)."""
    if selector is None:
        return denied(namespace) is None
    return selector_matches(selector, labels or {})


def kfed_created(labels: Mapping[str, str] | None) -> bool:
    """Whether a kfed manager (this one or another) created the object: its two marks."""
    found = labels or {}
    return found.get(MANAGED_BY_LABEL) == MANAGED_BY and bool(found.get(PROPAGATED_BY_LABEL))


@dataclass(frozen=True)
class Acceptance:
    """What the worker's side allows for one namespace: create it first (it is missing and ours
    to create), and whether the LocalQueue may go there at all (`refused` says why not)."""

    create_namespace: bool = False
    refused: str = ""


def worker_accepts(
    namespace: str, found: Mapping[str, str] | None, *, exists: bool, bound: bool, deny_list: Iterable[str] = ()
) -> Acceptance:
    """The worker's side of the opt-in, for a namespace with `found` labels (`exists`), or on a
    credential `bound` to named namespaces (whose administrator named them by binding the
    manager's role there; the namespace itself is not the credential's to read). A missing
    namespace is one kfed creates; an existing one must carry `kfed.dev/accept-queues: "true"`
    or kfed's marks. Never `kube-*`, `kfed-system` or the deny list."""
    why = denied(namespace, deny_list=deny_list)
    if why is not None:
        return Acceptance(refused=why)
    if bound:
        return Acceptance()
    if not exists:
        return Acceptance(create_namespace=True)
    labels = found or {}
    if labels.get(ACCEPT_QUEUES_LABEL) == "true" or kfed_created(labels):
        return Acceptance()
    return Acceptance(
        refused=f'namespace "{namespace}" exists on the worker without the label {ACCEPT_QUEUES_LABEL}: "true" '
        "(its administrator has not opted it in)"
    )


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
class Held:
    """An object in a namespace the cleanup may delete: what decides whether kfed created it."""

    kind: str
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[str, ...] = ()  # ownerReferences' uids


# Kinds the cleanup looks for in a namespace before deleting it (with Workloads, LocalQueues and
# the namespace's Pods and Jobs): an administrator's credentials and bindings.
HELD_KINDS = ("Secret", "ServiceAccount", "RoleBinding", "ConfigMap", "Pod", "Job", "Workload", "LocalQueue")


def _comes_with_the_namespace(item: Held) -> bool:
    """What Kubernetes puts in every namespace: the `default` ServiceAccount, its legacy token
    Secret, and the `kube-root-ca.crt` ConfigMap."""
    if item.kind == "ServiceAccount":
        return item.name == "default"
    if item.kind == "ConfigMap":
        return item.name == "kube-root-ca.crt"
    if item.kind == "Secret":
        return item.annotations.get("kubernetes.io/service-account.name") == "default"
    return False


def others_in(items: Iterable[Held], *, origin: str, ours: Iterable[str] = ()) -> list[str]:
    """`Kind name` of each object kfed did not create, sorted: neither marked as this manager's
    (`ownership_labels`, or a copy's `kueue.x-k8s.io/multikueue-origin`), nor one of `ours`
    (uids: the jobs this manager runs there), nor owned, however deep, by one of those (a job's
    pods), nor what comes with every namespace. An object whose owners are all gone is not
    counted either: Kubernetes' garbage collector is deleting it (the pods of a job just
    deleted with its copy)."""
    held = list(items)
    present = {i.uid for i in held}
    held = [i for i in held if not i.owners or any(owner in present for owner in i.owners)]
    mine = set(ours)
    mine |= {i.uid for i in held if is_ours(i.labels, origin) or i.labels.get(c.MULTIKUEUE_ORIGIN_LABEL) == origin}
    grew = True
    while grew:  # owners first or last: follow the chain until nothing more is ours
        more = {i.uid for i in held if i.uid not in mine and any(owner in mine for owner in i.owners)}
        grew = bool(more)
        mine |= more
    return sorted(f"{i.kind} {i.name}" for i in held if i.uid not in mine and not _comes_with_the_namespace(i))


@dataclass(frozen=True)
class WorkerQueues:
    """What the cleanup reads of one worker."""

    namespaces: Sequence[Owned]  # ours
    local_queues: Sequence[Owned]  # ours
    all_local_queues: Iterable[str] = ()  # `namespace/name` of every LocalQueue there, ours or not
    workloads: Iterable[tuple[str, str]] = ()  # (namespace, queueName) of every Workload there
    jobs: Iterable[str] = ()  # namespaces of our jobs there (they outlive their copy for a moment)
    # What each of our namespaces holds (`HELD_KINDS`), as read; a namespace not here is not read.
    held: Mapping[str, Sequence[Held]] = field(default_factory=dict)
    our_uids: Iterable[str] = ()  # the uids of the jobs this manager runs on the worker


@dataclass
class Cleanup:
    local_queues: list[Owned] = field(default_factory=list)
    namespaces: list[Owned] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (namespace, why), of ours kfed would delete but for others' objects


def _unused_queues(worker: WorkerQueues, needed: Iterable[tuple[str, str]]) -> list[Owned]:
    used = set(worker.workloads) | set(needed)
    return [lq for lq in worker.local_queues if tuple(lq.name.split("/", 1)) not in used]


def idle_namespaces(worker: WorkerQueues, *, needed: Iterable[tuple[str, str]]) -> list[str]:
    """Our namespaces kfed no longer needs: no need from the manager, no Workload, no job of
    ours, no LocalQueue of ours staying. Only these are read (`held`) and may be deleted."""
    wanted = list(needed)
    staying = {lq.name for lq in worker.local_queues} - {lq.name for lq in _unused_queues(worker, wanted)}
    busy = {ns for ns, _ in {*worker.workloads, *wanted}} | set(worker.jobs) | {key.partition("/")[0] for key in staying}
    return sorted(ns.name for ns in worker.namespaces if ns.name not in busy)


def plan_cleanup(worker: WorkerQueues, *, needed: Iterable[tuple[str, str]], origin: str) -> Cleanup:
    """Our LocalQueues no Workload on the worker uses and no manager Workload still needs there
    (`needed`: (namespace, queue)); then our namespaces kfed no longer needs (no need from the
    manager, no Workload, no job of ours, no LocalQueue of ours staying). Of those, a namespace
    is deleted only when it holds nothing kfed did not create (`others_in`, read in `held`; a
    namespace not read is never deleted); otherwise it is kept, with the objects that keep it."""
    going = _unused_queues(worker, needed)
    going_names = {lq.name for lq in going}
    staying_ours = {lq.name for lq in worker.local_queues} - going_names
    idle = set(idle_namespaces(worker, needed=needed))
    ours = list(worker.our_uids)
    deleted, kept = [], []
    for ns in sorted(worker.namespaces, key=lambda owned: owned.name):
        if ns.name not in idle:
            continue
        if ns.name not in worker.held:
            kept.append((ns.name, "its contents could not be read"))
            continue
        foreign_queues = set(worker.all_local_queues) - going_names - staying_ours
        theirs = {key.partition("/")[2] for key in foreign_queues if key.startswith(f"{ns.name}/")}
        others = sorted({*others_in(worker.held[ns.name], origin=origin, ours=ours), *(f"LocalQueue {name}" for name in theirs)})
        if others:
            kept.append((ns.name, f"holds {', '.join(others)}, which kfed did not create"))
        else:
            deleted.append(ns)
    return Cleanup(local_queues=sorted(going, key=lambda owned: owned.name), namespaces=deleted, kept=kept)


# --- the two conditions' messages: written here, and read back here ----------------------------------
# Each names entries of one namespace apiece, the first `NAMED_AT_MOST` by name and the rest by
# count. The read API reads them back (`kept_listing`, `drift_listing`) to name to each caller
# only the namespaces the caller may read: every replica serves it, and only the leader
# propagates, so the condition is what every replica has. One home for the format, so that what
# the writer says the reader finds.
NAMED_AT_MOST = 3
ENTRY_SEPARATOR = "; "
DRIFT_ENDING = ", which the worker does not have"
_MORE = re.compile(r" \(and (\d+) more\)$")
_KEPT_ENTRY = re.compile(r"^namespace (?P<namespace>[^\s;/]+) kept: ")
_DRIFT_ENTRY = re.compile(r"^LocalQueue (?P<namespace>[^\s;/]+)/[^\s;/]+ points at ClusterQueue [^\s;]+$")
UNREADABLE = "in namespaces you may not read"


@dataclass(frozen=True)
class Listing:
    """A condition message's entries as (namespace, phrase), and how many more it counted
    without naming. A phrase whose namespace cannot be read from it has namespace "" (no one's
    to see: whoever reads the listing leaves it out)."""

    entries: tuple[tuple[str, str], ...] = ()
    more: int = 0
    unreadable: int = 0  # told already to a reader who could not read them: counted, unnamed


def listed_message(phrases: Sequence[str], *, more: int = 0, ending: str = "", unreadable: int = 0) -> str:
    """The first `NAMED_AT_MOST` phrases, how many more there are (`more` counted already
    unnamed, besides those past the first), the ending; and how many were left out for the
    reader (`unreadable`: entries of namespaces the reader may not read, by count alone)."""
    more += max(0, len(phrases) - NAMED_AT_MOST)
    counted = f" (and {more} more)" if more else ""
    if not phrases:  # all left out for the reader: the count alone, and no name
        return f"{unreadable} {UNREADABLE}{counted}" if unreadable else counted.strip()
    said = f"{ENTRY_SEPARATOR.join(phrases[:NAMED_AT_MOST])}{counted}{ending}"
    return f"{said}{ENTRY_SEPARATOR}and {unreadable} more {UNREADABLE}" if unreadable else said


_UNREADABLE_AFTER = re.compile(rf"{re.escape(ENTRY_SEPARATOR)}and (\d+) more {UNREADABLE}$")
_UNREADABLE_ALONE = re.compile(rf"^(\d+) {UNREADABLE}")


def _listing(message: str, *, ending: str, entry: re.Pattern[str]) -> Listing:
    body, unreadable = message, 0
    # A message told already to a reader (`listed_message` with `unreadable`) reads back with
    # its count, so that telling it again to another reader keeps it.
    if (after := _UNREADABLE_AFTER.search(body)) is not None:
        unreadable, body = int(after.group(1)), body[: after.start()]
    elif (alone := _UNREADABLE_ALONE.match(body)) is not None:
        unreadable, body = int(alone.group(1)), body[alone.end() :]
    body = body.removesuffix(ending)
    found = _MORE.search(body)
    more = int(found.group(1)) if found is not None else 0
    body = body[: found.start()] if found is not None else body
    entries = []
    for phrase in body.split(ENTRY_SEPARATOR) if body else []:
        named = entry.match(phrase)
        entries.append((named.group("namespace") if named is not None else "", phrase))
    return Listing(tuple(entries), more, unreadable)


def kept_phrase(namespace: str, why: str) -> str:
    return f"namespace {namespace} kept: {why}"


def kept_condition(kept: Sequence[tuple[str, str]]) -> tuple[str, str, str]:
    """(status, reason, message) of the `kfed.dev/NamespacesKept` condition."""
    if not kept:
        return "False", REASON_NONE_KEPT, "every namespace the manager created and no longer needs was removed"
    return "True", REASON_HOLDS_OTHERS, listed_message([kept_phrase(ns, why) for ns, why in kept])


def kept_listing(message: str) -> Listing:
    """A `kfed.dev/NamespacesKept` message (status True) read back."""
    return _listing(message, ending="", entry=_KEPT_ENTRY)


def drift_phrase(local_queue: str, cluster_queue: str) -> str:
    return f"LocalQueue {local_queue} points at ClusterQueue {cluster_queue}"


def missing_cluster_queues(local_queues: Iterable[tuple[str, str]], cluster_queues: Iterable[str]) -> list[str]:
    """Drift: for each (LocalQueue `namespace/name`, its ClusterQueue) whose ClusterQueue the
    worker does not have, one phrase naming both, sorted."""
    present = set(cluster_queues)
    return sorted(drift_phrase(lq, cq) for lq, cq in local_queues if cq not in present)


def queues_condition(drift: Sequence[str]) -> tuple[str, str, str]:
    """(status, reason, message) of the `kfed.dev/QueuesInSync` condition."""
    if not drift:
        return "True", REASON_IN_SYNC, "every LocalQueue the manager created has its ClusterQueue on the worker"
    return "False", REASON_CLUSTER_QUEUE_MISSING, listed_message(drift, ending=DRIFT_ENDING)


def drift_listing(message: str) -> Listing:
    """A `kfed.dev/QueuesInSync` message (status False) read back."""
    return _listing(message, ending=DRIFT_ENDING, entry=_DRIFT_ENTRY)


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
