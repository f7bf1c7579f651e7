"""What `kfed jobs`, `kfed queues`, `kfed clusters` and `kfed status` show, computed from the
objects read from the clusters (pure: no I/O, time passed in), and the printers.

A row is a plain dict of column to text, so the same rows become a rich table, JSON or YAML.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml
from rich import box
from rich.console import Console
from rich.table import Table

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import find_condition, is_condition_true

STATES = ("Pending", "QuotaReserved", "Dispatching", "Running", "Succeeded", "Failed", "Evicted")


def age(since: datetime | None, now: datetime) -> str:
    """kubectl's short age: 45s, 12m, 3h, 5d."""
    if since is None:
        return "<unknown>"
    seconds = max(0, int((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _multikueue_check(wl: kueue.Workload, checks: Mapping[str, kueue.AdmissionCheck]) -> kueue.AdmissionCheckState | None:
    for state in (wl.status.admission_checks if wl.status else None) or []:
        check = checks.get(state.name)
        if check is not None and check.spec.controller_name == c.MULTIKUEUE_CONTROLLER_NAME:
            return state
    return None


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
    reason: str
    priority: int
    position: int | None = None


def job_state(wl: kueue.Workload, checks: Mapping[str, kueue.AdmissionCheck]) -> tuple[str, str]:
    """(STATE, REASON) of a Workload, from its conditions and its MultiKueue check."""
    conditions = wl.status.conditions if wl.status else None
    finished = find_condition(conditions, c.FINISHED)
    if finished is not None and finished.status == "True":
        return ("Failed" if finished.reason == "Failed" else "Succeeded"), finished.message
    reserved = is_condition_true(conditions, c.QUOTA_RESERVED)
    evicted = find_condition(conditions, c.EVICTED)
    if evicted is not None and evicted.status == "True":
        return "Evicted", evicted.message
    if is_condition_true(conditions, c.ADMITTED):
        return "Running", ""
    mk = _multikueue_check(wl, checks)
    if reserved and mk is not None:
        nominated = (wl.status.nominated_cluster_names if wl.status else None) or []
        reason = mk.message or (
            f"waiting for a worker to admit it (copies on {', '.join(nominated)})" if nominated else "waiting for a worker"
        )
        return "Dispatching", reason
    if reserved:
        pending = [s.name for s in (wl.status.admission_checks if wl.status else None) or [] if s.state != "Ready"]
        return "QuotaReserved", f"waiting for admission checks: {', '.join(pending)}" if pending else ""
    waiting = find_condition(conditions, c.QUOTA_RESERVED)
    requeued = find_condition(conditions, c.REQUEUED)
    message = waiting.message if waiting is not None and waiting.message else ""
    if not message and requeued is not None and requeued.status == "False":
        message = requeued.message
    if wl.spec.active is False:
        return "Pending", "deactivated (spec.active is false)"
    return "Pending", message or "waiting for the scheduler"


def job_views(
    workloads: Iterable[kueue.Workload], *, checks: Mapping[str, kueue.AdmissionCheck], local_queues: Mapping[str, kueue.LocalQueue]
) -> list[JobView]:
    """Every Workload as a JobView, with each pending one's position in its ClusterQueue
    (Kueue's order: higher priority first, then older first)."""
    views = []
    for wl in workloads:
        state, reason = job_state(wl, checks)
        owner = next((ref.name for ref in wl.metadata.owner_references or [] if ref.controller), None)
        lq = local_queues.get(f"{wl.namespace}/{wl.spec.queue_name or ''}")
        admission = wl.status.admission if wl.status else None
        views.append(
            JobView(
                namespace=wl.namespace,
                name=owner or wl.name,
                workload=wl.name,
                queue=wl.spec.queue_name or "",
                cluster_queue=admission.cluster_queue if admission else (lq.spec.cluster_queue or "" if lq else ""),
                state=state,
                cluster=(wl.status.cluster_name or "") if wl.status else "",
                created=wl.metadata.creation_timestamp,
                reason=reason,
                priority=wl.spec.priority or 0,
            )
        )
    by_queue: dict[str, list[int]] = {}
    for i, view in enumerate(views):
        if view.state == "Pending":
            by_queue.setdefault(view.cluster_queue, []).append(i)
    for indexes in by_queue.values():
        ordered = sorted(indexes, key=lambda i: (-views[i].priority, views[i].created or datetime.max, views[i].name))
        for position, i in enumerate(ordered, start=1):
            view = views[i]
            views[i] = JobView(**{**view.__dict__, "position": position})
    return sorted(views, key=lambda v: (v.namespace, v.created or datetime.max, v.name))


def job_rows(views: Sequence[JobView], *, now: datetime, wide: bool = False) -> list[dict[str, str]]:
    rows = []
    for v in views:
        row = {
            "NAMESPACE": v.namespace,
            "NAME": v.name,
            "QUEUE": v.queue,
            "STATE": v.state,
            "CLUSTER": v.cluster,
            "AGE": age(v.created, now),
            "POSITION": str(v.position) if v.position is not None else "",
            "REASON": v.reason,
        }
        if wide:
            row["WORKLOAD"] = v.workload
            row["CLUSTERQUEUE"] = v.cluster_queue
            row["PRIORITY"] = str(v.priority)
        rows.append(row)
    return rows


# --- queues -----------------------------------------------------------------------------------------
def usage_text(cq: kueue.ClusterQueue) -> str:
    """cpu 3/8, memory 1Gi/32Gi per flavor: what is reserved against the nominal quota."""
    reserved: dict[tuple[str, str], str] = {}
    for used in (cq.status.flavors_reservation if cq.status else None) or []:
        for resource in used.resources or []:
            reserved[(used.name, resource.name)] = str(resource.total)
    parts = []
    for group in cq.spec.resource_groups or []:
        for quotas in group.flavors:
            values = [f"{r.name} {reserved.get((quotas.name, r.name), '0')}/{r.nominal_quota}" for r in quotas.resources]
            parts.append(f"{quotas.name}: {', '.join(values)}")
    return "; ".join(parts)


def queue_rows(cluster_queues: Iterable[kueue.ClusterQueue], local_queues: Iterable[kueue.LocalQueue]) -> list[dict[str, str]]:
    rows = []
    for cq in sorted(cluster_queues, key=lambda q: q.name):
        active = find_condition(cq.status.conditions if cq.status else None, c.ACTIVE)
        rows.append(
            {
                "KIND": "ClusterQueue",
                "NAME": cq.name,
                "COHORT": cq.spec.cohort_name or "",
                "PENDING": str((cq.status.pending_workloads if cq.status else 0) or 0),
                "ADMITTED": str((cq.status.admitted_workloads if cq.status else 0) or 0),
                "USAGE": usage_text(cq),
                "STOPPED": "yes" if (cq.spec.stop_policy or "None") != "None" else "",
                "ACTIVE": f"{active.status} ({active.reason})" if active else "",
            }
        )
    for lq in sorted(local_queues, key=lambda q: (q.namespace, q.name)):
        rows.append(
            {
                "KIND": "LocalQueue",
                "NAME": f"{lq.namespace}/{lq.name}",
                "COHORT": f"-> {lq.spec.cluster_queue}",
                "PENDING": str((lq.status.pending_workloads if lq.status else 0) or 0),
                "ADMITTED": str((lq.status.admitted_workloads if lq.status else 0) or 0),
                "USAGE": "",
                "STOPPED": "yes" if (lq.spec.stop_policy or "None") != "None" else "",
                "ACTIVE": "",
            }
        )
    return rows


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


def worker_view(cluster: kueue.MultiKueueCluster) -> WorkerView:
    cond = find_condition(cluster.status.conditions if cluster.status else None, c.ACTIVE)
    view = WorkerView(cluster.name)
    if cond is not None:
        view.active, view.reason, view.message, view.since = cond.status, cond.reason, cond.message, cond.last_transition_time
    return view


def add_worker_queues(
    view: WorkerView, cluster_queues: Iterable[kueue.ClusterQueue], workloads: Iterable[kueue.Workload], *, origin: str
) -> None:
    """Fill in quota use (summed over the worker's ClusterQueues) and our copies' counts."""
    from manager.engine.units import amount

    for cq in cluster_queues:
        reserved: dict[tuple[str, str], int] = {}
        for used_flavor in (cq.status.flavors_reservation if cq.status else None) or []:
            for resource in used_flavor.resources or []:
                if resource.total is not None:
                    reserved[(used_flavor.name, resource.name)] = amount(resource.name, resource.total)
        for group in cq.spec.resource_groups or []:
            for quotas in group.flavors:
                for r in quotas.resources:
                    used, total = view.usage.get(r.name, (0, 0))
                    view.usage[r.name] = (used + reserved.get((quotas.name, r.name), 0), total + amount(r.name, r.nominal_quota))
    for wl in workloads:
        if (wl.metadata.labels or {}).get(c.MULTIKUEUE_ORIGIN_LABEL) != origin:
            continue
        if is_condition_true(wl.status.conditions if wl.status else None, c.FINISHED):
            continue
        if is_condition_true(wl.status.conditions if wl.status else None, c.ADMITTED):
            view.running += 1
        else:
            view.pending += 1


def _resource_text(resource: str, pair: tuple[int, int] | None) -> str:
    if pair is None:
        return ""
    used, total = pair
    if resource == "memory":
        return f"{used / 2**30:.0f}/{total / 2**30:.0f}Gi"
    return f"{used / 1000:g}/{total / 1000:g}"


def cluster_rows(views: Sequence[WorkerView], *, now: datetime) -> list[dict[str, str]]:
    rows = []
    for v in sorted(views, key=lambda x: x.name):
        gpu = next((k for k in v.usage if k.endswith("/gpu") or k == "gpu"), None)
        rows.append(
            {
                "NAME": v.name,
                "ACTIVE": v.active,
                "REASON": v.reason if v.active != "True" else "",
                "SINCE": age(v.since, now),
                "WORKLOADS": f"{v.running} running, {v.pending} pending" if v.reachable else (v.error or "unreachable"),
                "CPU": _resource_text("cpu", v.usage.get("cpu")),
                "GPU": _resource_text("gpu", v.usage.get(gpu)) if gpu else "",
                "MEMORY": _resource_text("memory", v.usage.get("memory")),
            }
        )
    return rows


# --- printing -----------------------------------------------------------------------------------------
def render(rows: Sequence[Mapping[str, Any]], *, output: str, title: str = "", width: int = 160, empty: str = "No resources found.") -> str:
    """Rows as a table (rich, no colour when not a terminal), JSON or YAML."""
    if output == "json":
        return json.dumps(list(rows), indent=2) + "\n"
    if output == "yaml":
        return yaml.safe_dump(list(rows), sort_keys=False)
    if not rows:
        return empty + "\n"
    table = Table(box=box.SIMPLE_HEAD, title=title or None, title_justify="left", show_edge=False, pad_edge=False)
    for column in rows[0]:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(str(value) for value in row.values()))
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def state_counts(views: Iterable[JobView]) -> dict[str, int]:
    counts = dict.fromkeys(STATES, 0)
    for view in views:
        counts[view.state] = counts.get(view.state, 0) + 1
    return counts


def status_text(
    *,
    manager: str,
    workers: Sequence[WorkerView],
    cluster_queues: Sequence[kueue.ClusterQueue],
    jobs: Sequence[JobView],
    now: datetime,
    width: int = 160,
) -> str:
    """`kfed status`: the manager, each worker, each ClusterQueue and the jobs by state, on one screen."""
    out = [f"Manager: {manager}"]
    out.append(render(cluster_rows(workers, now=now), output="table", title="Workers", width=width, empty="Workers: none registered"))
    cq_rows = [row for row in queue_rows(cluster_queues, []) if row["KIND"] == "ClusterQueue"]
    for row in cq_rows:
        del row["KIND"]
    out.append(render(cq_rows, output="table", title="ClusterQueues", width=width, empty="ClusterQueues: none"))
    counts = state_counts(jobs)
    out.append("Jobs: " + ", ".join(f"{state} {count}" for state, count in counts.items()))
    return "\n".join(out) + "\n"


def status_data(
    *, manager: str, workers: Sequence[WorkerView], cluster_queues: Sequence[kueue.ClusterQueue], jobs: Sequence[JobView], now: datetime
) -> dict[str, Any]:
    return {
        "manager": manager,
        "workers": cluster_rows(workers, now=now),
        "clusterQueues": [row for row in queue_rows(cluster_queues, []) if row.pop("KIND") == "ClusterQueue"],
        "jobs": state_counts(jobs),
    }
