"""What `kfed jobs`, `kfed queues`, `kfed clusters` and `kfed status` show, computed from the
objects read from the clusters (pure: no I/O, time passed in), and the printers.

Each view has two shapes: records (stable camelCase keys, typed values, every detail) for
`-o json|yaml`, and rows (heading to text) for the table, which fits the terminal's width by
cutting long values with an ellipsis (`-o wide` shows them whole).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import find_condition
from manager.engine import preemption
from manager.engine.scheduler import parse_preemption_message
from manager.engine.workload import (
    controller_owner,
    has_quota_reservation,
    is_active,
    is_admitted,
    multikueue_check_state,
    owner_name,
    workload_priority,
)
from manager.multikueue.rules.queues import KEPT_CONDITION, QUEUES_CONDITION, REASON_CLUSTER_QUEUE_MISSING
from manager.multikueue.rules.reads import copy_counts, flavor_usage, worker_usage

STATES = ("Pending", "QuotaReserved", "Dispatching", "Running", "Succeeded", "Failed", "Preempted", "Evicted")
TABLE_WIDTH = 80  # what a table fits when the terminal's width is unknown (output to a pipe or file)
COLUMN_GAP = 2


def age(since: datetime | None, now: datetime) -> str:
    """kubectl's short age: 45s, 12m, 3h, 5d."""
    if since is None:
        return "<unknown>"
    seconds = max(0, int((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment is not None else None


# --- why a job was preempted or evicted ----------------------------------------------------------------
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)


@dataclass(frozen=True)
class Preemptor:
    """Who preempted a job, as far as the listed Workloads tell."""

    uid: str
    reason: str  # Kueue's: InClusterQueue, InCohortReclamation, InCohortFairSharing, InCohortReclaimWhileBorrowing
    namespace: str = ""
    name: str = ""  # the preemptor's Job (its Workload's when it has no owner); empty when not listed
    workload: str = ""
    priority: int | None = None
    cluster_queue: str = ""  # the last part of the preemptor path
    cohort: str = ""  # the nearest cohort the two paths share

    def record(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "reason": self.reason,
            "namespace": self.namespace or None,
            "name": self.name or None,
            "workload": self.workload or None,
            "priority": self.priority,
            "clusterQueue": self.cluster_queue or None,
            "cohort": self.cohort or None,
        }


def parse_preemptor(reason: str, message: str, by_uid: Mapping[str, kueue.Workload]) -> Preemptor | None:
    """The preemptor named in Kueue's Preempted message, resolved to a listed Workload by UID."""
    found = parse_preemption_message(message)
    if found is None:
        return None
    preemptor = by_uid.get(found.preemptor_uid)
    return Preemptor(
        uid=found.preemptor_uid,
        reason=reason,
        namespace=preemptor.namespace if preemptor else "",
        name=owner_name(preemptor) if preemptor else "",
        workload=preemptor.name if preemptor else "",
        priority=workload_priority(preemptor) if preemptor else None,
        cluster_queue=found.preemptor_cluster_queue,
        cohort=found.cohort,
    )


def preemption_sentence(preemptor: Preemptor) -> str:
    """One sentence a person understands: who, in which queue, and why (no UIDs)."""
    who = (
        f"{preemptor.namespace}/{preemptor.name} (priority {preemptor.priority})"
        if preemptor.name
        else "a workload that is no longer listed"
    )
    queue = f"ClusterQueue {preemptor.cluster_queue}" if preemptor.cluster_queue else "its ClusterQueue"
    cohort = f"cohort {preemptor.cohort}" if preemptor.cohort else "its cohort"
    why = {
        preemption.IN_CLUSTER_QUEUE: f" to make room in {queue}",
        preemption.IN_COHORT_RECLAMATION: f" to reclaim quota lent to {cohort}",
        preemption.IN_COHORT_RECLAIM_WHILE_BORROWING: f" of {queue}, which reclaims quota in {cohort} while it borrows",
        preemption.IN_COHORT_FAIR_SHARING: f" of {queue}, to restore fair sharing in {cohort}",
    }.get(preemptor.reason, f" in {queue}")
    return f"preempted by {who}{why}"


EVICTION_SENTENCES = {
    "PodsReadyTimeout": "evicted: its pods were not ready in time (waitForPodsReady); it is queued again",
    "AdmissionCheck": "evicted: an admission check asked for a retry; it is queued again",
    "ClusterQueueStopped": "evicted: its ClusterQueue was stopped",
    "LocalQueueStopped": "evicted: its LocalQueue was stopped",
    "Deactivated": "evicted: it was deactivated (spec.active is false)",
    "NodeFailures": "evicted: a node it ran on failed; it is queued again",
    "FlavorMigration": "evicted to move it to a preferred flavor; it is queued again",
    "EvictedOnManagerCluster": "evicted on the manager cluster",
}


def scrub(text: str) -> str:
    """Human text never shows UIDs: `-o json` keeps them."""
    return re.sub(r"\s*\(\s*\)", "", _UUID.sub("", text)).strip()


def eviction_sentence(reason: str, message: str) -> str:
    sentence = EVICTION_SENTENCES.get(reason)
    if sentence is None:
        return f"evicted ({reason})" + (f": {scrub(message)}" if message else "")
    if reason == "Deactivated" and message:  # Kueue's message says why (e.g. the requeuing limit)
        said = scrub(message)
        return f"evicted: {said[:1].lower()}{said[1:]}"
    return sentence


# --- jobs --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobView:
    """One manager Workload as a researcher sees it."""

    namespace: str
    name: str  # the Job's name (the Workload's when it has no Job)
    workload: str
    queue: str
    cluster_queue: str
    state: str
    cluster: str
    created: datetime | None
    reason: str  # for a person: no UIDs
    priority: int
    position: int | None = None
    detail: str = ""  # the condition's own message, UIDs and all (for -o json)
    preemptor: Preemptor | None = None
    kind: str = "Job"  # the kind of its owner (Job, JobSet), or Workload when it has none


def job_state(
    wl: kueue.Workload, checks: Mapping[str, kueue.AdmissionCheck] | None, by_uid: Mapping[str, kueue.Workload] | None = None
) -> tuple[str, str, str, Preemptor | None]:
    """(STATE, REASON for a person, the condition's own message, the preemptor) of a Workload,
    from its conditions and its MultiKueue check (`checks` None: the AdmissionChecks could not
    be read, and a check of a Workload with nominated workers is taken for MultiKueue's)."""
    conditions = wl.status.conditions if wl.status else None
    finished = find_condition(conditions, c.FINISHED)
    if finished is not None and finished.status == "True":
        return ("Failed" if finished.reason == "Failed" else "Succeeded"), finished.message, finished.message, None
    reserved = has_quota_reservation(wl)
    evicted = find_condition(conditions, c.EVICTED)
    if evicted is not None and evicted.status == "True":
        preempted = find_condition(conditions, c.PREEMPTED)
        if preempted is not None and preempted.status == "True":
            preemptor = parse_preemptor(preempted.reason, preempted.message, by_uid or {})
            sentence = preemption_sentence(preemptor) if preemptor else f"preempted ({preempted.reason}): {scrub(preempted.message)}"
            return "Preempted", sentence, preempted.message, preemptor
        return "Evicted", eviction_sentence(evicted.reason, evicted.message), evicted.message, None
    if is_admitted(wl):
        return "Running", "", "", None
    mk = multikueue_check_state(wl, checks) if checks is not None else _nominating_check(wl)
    if reserved and mk is not None:
        nominated = (wl.status.nominated_cluster_names if wl.status else None) or []
        reason = mk.message or (
            f"waiting for a worker to admit it (copies on {', '.join(nominated)})" if nominated else "waiting for a worker"
        )
        return "Dispatching", reason, mk.message, None
    if reserved:
        pending = [s.name for s in (wl.status.admission_checks if wl.status else None) or [] if s.state != "Ready"]
        reason = f"waiting for admission checks: {', '.join(pending)}" if pending else ""
        return "QuotaReserved", reason, reason, None
    waiting = find_condition(conditions, c.QUOTA_RESERVED)
    requeued = find_condition(conditions, c.REQUEUED)
    message = waiting.message if waiting is not None and waiting.message else ""
    if not message and requeued is not None and requeued.status == "False":
        message = requeued.message
    if not is_active(wl):
        return "Pending", "deactivated (spec.active is false)", message, None
    state = wl.status.requeue_state if wl.status else None
    if requeued is not None and requeued.status == "False" and requeued.reason == "PodsReadyTimeout":
        # waitForPodsReady: evicted because its pods were not ready in time, queued again once
        # its backoff ends (Kueue's status.requeueState).
        until = f" until {state.requeue_at.strftime('%Y-%m-%dT%H:%M:%SZ')}" if state and state.requeue_at else ""
        times = f"; requeued {state.count} time(s)" if state and state.count else ""
        return "Pending", f"its pods were not ready in time: waiting out its requeue backoff{until}{times}", message, None
    return "Pending", scrub(message) or "waiting for the scheduler", message, None


def _nominating_check(wl: kueue.Workload) -> kueue.AdmissionCheckState | None:
    """Without the AdmissionChecks to tell which is MultiKueue's: the first check not Ready
    of a Workload that MultiKueue nominated workers for."""
    if not (wl.status and wl.status.nominated_cluster_names):
        return None
    return next((s for s in wl.status.admission_checks or [] if s.state != "Ready"), None)


def job_views(
    workloads: Iterable[kueue.Workload],
    *,
    checks: Mapping[str, kueue.AdmissionCheck] | None,
    local_queues: Mapping[str, kueue.LocalQueue],
    known: Iterable[kueue.Workload] = (),
    positions: Mapping[str, int] | None = None,
) -> list[JobView]:
    """Every Workload as a JobView, each pending one with its position in its ClusterQueue as
    `positions` gives it (Workload key to position, from 1; the visibility API's, which is the
    engine's own order). A preemptor is named from the Workloads given and those in `known`."""
    positions = positions or {}
    workloads = list(workloads)
    by_uid = {w.metadata.uid: w for w in [*known, *workloads] if w.metadata.uid}
    views = []
    for wl in workloads:
        state, reason, detail, preemptor = job_state(wl, checks, by_uid)
        lq = local_queues.get(f"{wl.namespace}/{wl.spec.queue_name or ''}")
        admission = wl.status.admission if wl.status else None
        views.append(
            JobView(
                namespace=wl.namespace,
                name=owner_name(wl),
                workload=wl.name,
                queue=wl.spec.queue_name or "",
                cluster_queue=admission.cluster_queue if admission else (lq.spec.cluster_queue or "" if lq else ""),
                state=state,
                cluster=(wl.status.cluster_name or "") if wl.status else "",
                created=wl.metadata.creation_timestamp,
                reason=reason,
                priority=workload_priority(wl),
                detail=detail,
                preemptor=preemptor,
                kind=owner_kind_name(wl),
                position=positions.get(wl.key) if state == "Pending" else None,
            )
        )
    return sorted(views, key=lambda v: (v.namespace, v.created or datetime.max, v.name))


def owner_kind_name(wl: kueue.Workload) -> str:
    """The kind a person submitted: the Workload's controlling owner's, else that of the job it is
    one of several Workloads of (a LeaderWorkerSet's group), else Workload."""
    owner = controller_owner(wl)
    if owner is not None:
        return owner.kind
    gvk = (wl.metadata.annotations or {}).get(c.JOB_OWNER_GVK_ANNOTATION, "")
    return gvk.partition("Kind=")[2] or "Workload"


def job_rows(views: Sequence[JobView], *, now: datetime, wide: bool = False, all_namespaces: bool = False) -> list[dict[str, str]]:
    """The table; like kubectl, it names the namespace only when listing several, and the kind
    (`jobset/NAME`) only when the list holds more than one kind."""
    mixed = len({v.kind for v in views}) > 1
    rows = []
    for v in views:
        row = {"NAMESPACE": v.namespace} if all_namespaces else {}
        row |= {
            "NAME": f"{v.kind.lower()}/{v.name}" if mixed else v.name,
            "QUEUE": v.queue,
            "STATE": v.state,
            "CLUSTER": v.cluster,
            "AGE": age(v.created, now),
            "POS": str(v.position) if v.position is not None else "",
            "REASON": v.reason,
        }
        if wide:
            row["WORKLOAD"] = v.workload
            row["CLUSTERQUEUE"] = v.cluster_queue
            row["PRIORITY"] = str(v.priority)
        rows.append(row)
    return rows


def job_records(views: Sequence[JobView]) -> list[dict[str, Any]]:
    """`kfed jobs -o json|yaml`: stable camelCase keys, typed values, the conditions' own messages."""
    return [
        {
            "kind": v.kind,
            "name": v.name,
            "namespace": v.namespace,
            "workload": v.workload,
            "queue": v.queue,
            "clusterQueue": v.cluster_queue,
            "cluster": v.cluster or None,
            "state": v.state,
            "reason": v.reason,
            "message": v.detail,
            "position": v.position,
            "priority": v.priority,
            "created": _iso(v.created),
            "preemptedBy": v.preemptor.record() if v.preemptor else None,
        }
        for v in views
    ]


# --- queues -----------------------------------------------------------------------------------------
def _flavor_usage(cq: kueue.ClusterQueue) -> list[dict[str, Any]]:
    reserved: dict[tuple[str, str], str] = {}
    for used in (cq.status.flavors_reservation if cq.status else None) or []:
        for resource in used.resources or []:
            reserved[(used.name, resource.name)] = str(resource.total)
    return [
        {
            "flavor": quotas.name,
            "resources": [
                {"name": r.name, "reserved": reserved.get((quotas.name, r.name), "0"), "nominal": str(r.nominal_quota)}
                for r in quotas.resources
            ],
        }
        for group in cq.spec.resource_groups or []
        for quotas in group.flavors
    ]


def usage_text(cq: kueue.ClusterQueue) -> str:
    """cpu 3/8, memory 1Gi/32Gi per flavor: what is reserved against the nominal quota."""
    parts = []
    for flavor in _flavor_usage(cq):
        values = [f"{r['name']} {r['reserved']}/{r['nominal']}" for r in flavor["resources"]]
        parts.append(f"{flavor['flavor']}: {', '.join(values)}")
    return "; ".join(parts)


def _active(cq: kueue.ClusterQueue) -> tuple[str, str]:
    active = find_condition(cq.status.conditions if cq.status else None, c.ACTIVE)
    return (active.status, active.reason) if active else ("", "")


def queue_records(cluster_queues: Iterable[kueue.ClusterQueue], local_queues: Iterable[kueue.LocalQueue]) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for cq in sorted(cluster_queues, key=lambda q: q.name):
        active, reason = _active(cq)
        records.append(
            {
                "kind": "ClusterQueue",
                "name": cq.name,
                "cohort": cq.spec.cohort_name or None,
                "pending": (cq.status.pending_workloads if cq.status else 0) or 0,
                "admitted": (cq.status.admitted_workloads if cq.status else 0) or 0,
                "usage": _flavor_usage(cq),
                "stopPolicy": cq.spec.stop_policy or "None",
                "active": active or None,
                "activeReason": reason or None,
            }
        )
    for lq in sorted(local_queues, key=lambda q: (q.namespace, q.name)):
        records.append(
            {
                "kind": "LocalQueue",
                "name": lq.name,
                "namespace": lq.namespace,
                "clusterQueue": lq.spec.cluster_queue,
                "pending": (lq.status.pending_workloads if lq.status else 0) or 0,
                "admitted": (lq.status.admitted_workloads if lq.status else 0) or 0,
                "stopPolicy": lq.spec.stop_policy or "None",
            }
        )
    return records


def _queue_status(stop_policy: str | None, active: str = "", reason: str = "") -> str:
    if (stop_policy or "None") != "None":
        return f"Stopped ({stop_policy})"
    if active == "False":
        return f"Inactive ({reason})" if reason else "Inactive"
    return "Active" if active == "True" else ""


def cluster_queue_rows(cluster_queues: Iterable[kueue.ClusterQueue]) -> list[dict[str, str]]:
    rows = []
    for cq in sorted(cluster_queues, key=lambda q: q.name):
        active, reason = _active(cq)
        rows.append(
            {
                "NAME": cq.name,
                "COHORT": cq.spec.cohort_name or "",
                "PENDING": str((cq.status.pending_workloads if cq.status else 0) or 0),
                "ADMITTED": str((cq.status.admitted_workloads if cq.status else 0) or 0),
                "STATUS": _queue_status(cq.spec.stop_policy, active, reason),
                "USAGE": usage_text(cq),
            }
        )
    return rows


def local_queue_rows(local_queues: Iterable[kueue.LocalQueue]) -> list[dict[str, str]]:
    return [
        {
            "NAMESPACE": lq.namespace,
            "NAME": lq.name,
            "CLUSTERQUEUE": lq.spec.cluster_queue or "",
            "PENDING": str((lq.status.pending_workloads if lq.status else 0) or 0),
            "ADMITTED": str((lq.status.admitted_workloads if lq.status else 0) or 0),
            "STATUS": _queue_status(lq.spec.stop_policy) or "Active",
        }
        for lq in sorted(local_queues, key=lambda q: (q.namespace, q.name))
    ]


def queues_text(
    cluster_queues: Iterable[kueue.ClusterQueue] | None,
    local_queues: Iterable[kueue.LocalQueue],
    *,
    width: int = TABLE_WIDTH,
    wide: bool = False,
) -> str:
    """`kfed queues`: the ClusterQueues (None: not readable, left out), then the LocalQueues,
    each its own table."""
    tables = [render(local_queue_rows(local_queues), title="LocalQueues", width=width, wide=wide, empty="LocalQueues: none")]
    if cluster_queues is not None:
        tables.insert(
            0, render(cluster_queue_rows(cluster_queues), title="ClusterQueues", width=width, wide=wide, empty="ClusterQueues: none")
        )
    return "\n".join(tables)


# --- clusters ---------------------------------------------------------------------------------------
@dataclass
class WorkerView:
    """A worker cluster: its MultiKueueCluster's condition and what was read from the worker itself."""

    name: str
    active: str = "Unknown"
    reason: str = ""
    message: str = ""
    since: datetime | None = None
    reachable: bool = False
    error: str = ""
    running: int = 0
    pending: int = 0
    usage: dict[str, tuple[int, int]] = field(default_factory=dict)  # resource -> (reserved, nominal) in milli-units or bytes
    # (flavor, resource) -> (reserved, nominal, borrowed); empty from a read API that predates it
    flavors: dict[tuple[str, str], tuple[int, int, int]] = field(default_factory=dict)
    queue_drift: str = ""  # a propagated LocalQueue's missing ClusterQueue (`kfed.dev/QueuesInSync` False)
    kept_namespaces: str = ""  # namespaces propagation created and keeps, and why (`kfed.dev/NamespacesKept` True)


def worker_view_from(item: Mapping[str, Any]) -> WorkerView:
    """A worker as kfed's read API (`reads.kfed.dev` clusters) gives it."""
    since = item.get("since")
    return WorkerView(
        str((item.get("metadata") or {}).get("name", "")),
        active=str(item.get("active") or "Unknown"),
        reason=str(item.get("reason") or ""),
        message=str(item.get("message") or ""),
        since=datetime.fromisoformat(since.replace("Z", "+00:00")) if isinstance(since, str) and since else None,
        reachable=bool(item.get("reachable")),
        error=str(item.get("error") or ""),
        running=int(item.get("running") or 0),
        pending=int(item.get("pending") or 0),
        usage={str(name): (int(use["reserved"]), int(use["nominal"])) for name, use in (item.get("usage") or {}).items()},
        flavors={
            (str(flavor), str(resource)): (int(use["reserved"]), int(use["nominal"]), int(use.get("borrowed") or 0))
            for flavor, resources in (item.get("flavors") or {}).items()
            for resource, use in (resources or {}).items()
        },
        queue_drift=str(item.get("queueDrift") or ""),
        kept_namespaces=str(item.get("keptNamespaces") or ""),
    )


def worker_view(cluster: kueue.MultiKueueCluster) -> WorkerView:
    cond = find_condition(cluster.status.conditions if cluster.status else None, c.ACTIVE)
    view = WorkerView(cluster.name)
    if cond is not None:
        view.active, view.reason, view.message, view.since = cond.status, cond.reason, cond.message, cond.last_transition_time
    drift = find_condition(cluster.status.conditions if cluster.status else None, QUEUES_CONDITION)
    if drift is not None and drift.status == "False":
        view.queue_drift = drift.message
    kept = find_condition(cluster.status.conditions if cluster.status else None, KEPT_CONDITION)
    if kept is not None and kept.status == "True":
        view.kept_namespaces = kept.message
    return view


def add_worker_queues(
    view: WorkerView, cluster_queues: Iterable[kueue.ClusterQueue], workloads: Iterable[kueue.Workload], *, origin: str
) -> None:
    """Fill in quota use (summed over the worker's ClusterQueues) and our copies' counts."""
    cluster_queues = list(cluster_queues)
    view.usage = worker_usage(cluster_queues)
    view.flavors = flavor_usage(cluster_queues)
    view.running, view.pending = copy_counts(workloads, origin=origin)


def _resource_text(resource: str, pair: tuple[int, int] | None) -> str:
    if pair is None:
        return ""
    used, total = pair
    if resource == "memory":
        return f"{used / 2**30:.0f}/{total / 2**30:.0f}Gi"
    return f"{used / 1000:g}/{total / 1000:g}"


def cluster_rows(views: Sequence[WorkerView], *, now: datetime, wide: bool = False) -> list[dict[str, str]]:
    """The table. REASON says why a worker is not Active, or why it could not be read (in a
    word; the whole error with wide); RUNNING and PENDING count our copies there."""
    rows = []
    for v in sorted(views, key=lambda x: x.name):
        gpu = next((k for k in v.usage if k.endswith("/gpu") or k == "gpu"), None)
        rows.append(
            {
                "NAME": v.name,
                "ACTIVE": v.active,
                "REASON": v.reason if v.active != "True" else _active_reason(v, wide=wide),
                "SINCE": age(v.since, now),
                "RUNNING": str(v.running) if v.reachable else "-",
                "PENDING": str(v.pending) if v.reachable else "-",
                "CPU": _resource_text("cpu", v.usage.get("cpu")),
                "GPU": _resource_text("gpu", v.usage.get(gpu)) if gpu else "",
                "MEMORY": _resource_text("memory", v.usage.get("memory")),
            }
        )
    if not any(row["GPU"] for row in rows):  # a fleet without GPUs keeps the room for the reasons
        for row in rows:
            del row["GPU"]
    return rows


def _active_reason(v: WorkerView, *, wide: bool) -> str:
    """An Active worker's REASON: why it could not be read, else its propagated queues' drift
    and the namespaces propagation keeps there (and why, with wide)."""
    if not v.reachable:
        return v.error if wide else v.error.split(":")[0]
    said = []
    if v.queue_drift:
        said.append(f"{REASON_CLUSTER_QUEUE_MISSING}: {v.queue_drift}" if wide else REASON_CLUSTER_QUEUE_MISSING)
    if v.kept_namespaces:
        said.append(f"{NAMESPACES_KEPT}: {v.kept_namespaces}" if wide else NAMESPACES_KEPT)
    return "; ".join(said)


NAMESPACES_KEPT = "NamespacesKept"


def cluster_records(views: Sequence[WorkerView]) -> list[dict[str, Any]]:
    return [
        {
            "name": v.name,
            "active": v.active,
            "reason": v.reason or None,
            "message": v.message or None,
            "since": _iso(v.since),
            "reachable": v.reachable,
            "error": v.error or None,
            "running": v.running if v.reachable else None,
            "pending": v.pending if v.reachable else None,
            "usage": {resource: {"reserved": used, "nominal": total} for resource, (used, total) in sorted(v.usage.items())},
            "queueDrift": v.queue_drift or None,
            "keptNamespaces": v.kept_namespaces or None,
        }
        for v in sorted(views, key=lambda x: x.name)
    ]


# --- printing -----------------------------------------------------------------------------------------
FLEXIBLE = ("REASON", "USAGE", "WORKLOADS", "MESSAGE")  # long free text: cut first when a table is too wide
# Who gives way, in turn, and down to how much (never below its heading): the free text first,
# then names longer than 16, then the free text again, then everything.
_SHRINK_STEPS = ((True, 24), (False, 16), (True, 12), (False, 0), (True, 0))


def fit_widths(headings: Sequence[str], natural: Sequence[int], *, width: int) -> list[int]:
    """Column widths that fit `width` (gaps included), taking from the widest column of each
    step of `_SHRINK_STEPS` in turn."""
    widths = list(natural)
    excess = sum(widths) + COLUMN_GAP * (len(widths) - 1) - width
    for flexible, floor in _SHRINK_STEPS:
        group = [i for i, heading in enumerate(headings) if (heading in FLEXIBLE) == flexible]
        while excess > 0:
            shrinkable = [i for i in group if widths[i] > max(floor, len(headings[i]), 1)]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: (widths[i], i))
            widths[widest] -= 1
            excess -= 1
    return widths


def dump(records: Sequence[Mapping[str, Any]] | Mapping[str, Any], *, output: str) -> str:
    """Records as JSON or YAML."""
    data: Any = list(records) if not isinstance(records, Mapping) else dict(records)
    if output == "json":
        return json.dumps(data, indent=2) + "\n"
    return yaml.safe_dump(data, sort_keys=False)


def render(
    rows: Sequence[Mapping[str, Any]],
    *,
    output: str = "table",
    title: str = "",
    width: int = TABLE_WIDTH,
    wide: bool = False,
    empty: str = "No resources found.",
) -> str:
    """Rows as a table (rich, no colour) that fits `width`, cutting long values with an
    ellipsis; `wide` shows every value whole. JSON and YAML take records (see `dump`)."""
    if output in ("json", "yaml"):
        return dump(rows, output=output)
    if not rows:
        return empty + "\n"
    headings = list(rows[0])
    cells = [[str(row.get(h, "")) for h in headings] for row in rows]
    natural = [max([len(h)] + [len(line[i]) for line in cells]) for i, h in enumerate(headings)]
    widths = natural if wide else fit_widths(headings, natural, width=width)
    table = Table(box=None, title=title or None, title_justify="left", show_edge=False, pad_edge=False, padding=(0, COLUMN_GAP // 2))
    for heading, column_width in zip(headings, widths, strict=True):
        table.add_column(heading, width=column_width, no_wrap=True, overflow="ellipsis", header_style="none")
    for line in cells:
        table.add_row(*line)
    total = sum(widths) + COLUMN_GAP * (len(widths) - 1)
    buffer = io.StringIO()
    Console(file=buffer, width=max(total, len(title)), color_system=None, force_terminal=False, highlight=False).print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def wrap_parts(lead: str, parts: Sequence[str], *, width: int) -> str:
    """`lead` then the parts joined by ", ", wrapped between parts to fit `width`."""
    lines, line = [], lead
    for i, part in enumerate(parts):
        piece = part + ("," if i < len(parts) - 1 else "")
        if line.strip() and len(line) + len(piece) + 1 > width and line != lead:
            lines.append(line.rstrip())
            line = " " * len(lead)
        line += piece + " "
    lines.append(line.rstrip())
    return "\n".join(lines)


def state_counts(views: Iterable[JobView]) -> dict[str, int]:
    counts = dict.fromkeys(STATES, 0)
    for view in views:
        counts[view.state] = counts.get(view.state, 0) + 1
    return counts


def status_text(
    *,
    manager: str,
    workers: Sequence[WorkerView] | None,
    cluster_queues: Sequence[kueue.ClusterQueue] | None,
    jobs: Sequence[JobView],
    now: datetime,
    width: int = TABLE_WIDTH,
    wide: bool = False,
) -> str:
    """`kfed status`: the manager, each worker, each ClusterQueue and the jobs by state, on one
    screen (workers or ClusterQueues None: not readable by the user, left out)."""
    out = [f"Manager: {manager}"]
    if workers is not None:
        out.append(
            render(cluster_rows(workers, now=now, wide=wide), title="Workers", width=width, wide=wide, empty="Workers: none registered")
        )
    if cluster_queues is not None:
        out.append(render(cluster_queue_rows(cluster_queues), title="ClusterQueues", width=width, wide=wide, empty="ClusterQueues: none"))
    counts = state_counts(jobs)
    out.append(wrap_parts("Jobs: ", [f"{state} {count}" for state, count in counts.items()], width=width if not wide else 10**6))
    return "\n".join(out) + "\n"


def status_data(
    *, manager: str, workers: Sequence[WorkerView], cluster_queues: Sequence[kueue.ClusterQueue], jobs: Sequence[JobView]
) -> dict[str, Any]:
    return {
        "manager": manager,
        "workers": cluster_records(workers),
        "clusterQueues": queue_records(cluster_queues, []),
        "jobs": state_counts(jobs),
    }
