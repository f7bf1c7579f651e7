"""What each page of the dashboard shows, decided from what was read (pure: no I/O, time passed
in). The rules are the CLI's (`manager.cli.views`, `manager.cli.explain`); this module only
shapes them for a page: filters and paging of the jobs table, bars for quota, the cohort tree,
and a job's timeline. The templates print these values and decide nothing."""

from __future__ import annotations

import json
import math
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from manager.api import kueue
from manager.api.core import Event, Job
from manager.api.meta import Condition
from manager.cli import views
from manager.cli.dashboard import history
from manager.engine.integrations.registry import ADAPTERS
from manager.engine.units import amount, format_amount

PER_PAGE = 50
MAX_PER_PAGE = 500
# Every kind an adapter integrates (one home: a new adapter is a new kind here), and a Workload
# that no job owns.
KINDS = (*(adapter.kind for adapter in ADAPTERS), "Workload")


class QueryError(ValueError):
    """A request the dashboard cannot answer, in one line for the user."""


# --- jobs ----------------------------------------------------------------------------------------------
class JobQuery(BaseModel):
    """The Jobs view's filters and page, from the URL's query string (all optional)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    namespace: str = Field(default="", max_length=63, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")
    queue: str = Field(default="", max_length=253)
    state: str = ""
    worker: str = Field(default="", max_length=253)
    kind: str = ""
    page: int = Field(default=1, ge=1, le=1_000_000)
    per_page: int = Field(default=PER_PAGE, ge=1, le=MAX_PER_PAGE)

    def params(self, **changed: Any) -> dict[str, str]:
        """The query string of this view (with `changed`), without the defaults."""
        values = {**self.model_dump(), **changed}
        defaults = JobQuery().model_dump()
        return {key: str(value) for key, value in values.items() if value != defaults[key]}


def _shown(value: str) -> str:
    """A user's text inside a one-line message: quoted, control characters escaped, and cut."""
    return json.dumps(value if len(value) <= 60 else value[:60] + "...")


def parse_job_query(params: Mapping[str, str]) -> JobQuery:
    """The filters of `?namespace=&queue=&state=&worker=&kind=&page=&per_page=`; a bad one is
    refused in one line naming the parameter and what it takes."""
    known = set(JobQuery.model_fields)
    for key in params:
        if key not in known:
            raise QueryError(f"unknown parameter {_shown(key)}: the Jobs view takes {', '.join(sorted(known))}")
    try:
        query = JobQuery.model_validate(dict(params))
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise QueryError(f"{where}: {first['msg']}") from None
    if query.state and query.state not in views.STATES:
        by_lower = {s.lower(): s for s in views.STATES}
        if query.state.lower() not in by_lower:
            raise QueryError(f"state {_shown(query.state)}: expected one of {', '.join(views.STATES)}")
        query = query.model_copy(update={"state": by_lower[query.state.lower()]})
    if query.kind and query.kind not in KINDS:
        raise QueryError(f"kind {_shown(query.kind)}: expected one of {', '.join(KINDS)}")
    return query


def select_jobs(rows: Iterable[views.JobView], query: JobQuery) -> list[views.JobView]:
    """The jobs the filters keep, in the CLI's order (namespace, then age)."""
    return [
        v
        for v in rows
        if (not query.namespace or v.namespace == query.namespace)
        and (not query.queue or v.queue == query.queue)
        and (not query.state or v.state == query.state)
        and (not query.worker or v.cluster == query.worker)
        and (not query.kind or v.kind == query.kind)
    ]


@dataclass(frozen=True)
class JobRow:
    namespace: str
    name: str
    kind: str
    href: str
    queue: str
    cluster_queue: str
    state: str
    cluster: str
    age: str
    position: str
    reason: str
    priority: int


def job_path(namespace: str, kind: str, name: str) -> str:
    """A job's page: /jobs/NAMESPACE/KIND/NAME, kind as the CLI names it (job, jobset, workload)."""
    return f"/jobs/{namespace}/{kind.lower()}/{name}"


def job_row(v: views.JobView, *, now: datetime) -> JobRow:
    return JobRow(
        namespace=v.namespace,
        name=v.name,
        kind=v.kind,
        href=job_path(v.namespace, v.kind, v.name if v.kind != "Workload" else v.workload),
        queue=v.queue,
        cluster_queue=v.cluster_queue,
        state=v.state,
        cluster=v.cluster,
        age=views.age(v.created, now),
        position=str(v.position) if v.position is not None else "",
        reason=v.reason,
        priority=v.priority,
    )


@dataclass(frozen=True)
class JobsPage:
    rows: list[JobRow]
    total: int  # after the filters
    page: int
    pages: int
    query: JobQuery
    counts: dict[str, int]  # by state, after the filters
    choices: dict[str, list[str]]  # the values seen, for the filters' lists

    @property
    def first(self) -> int:
        return 0 if not self.total else (self.page - 1) * self.query.per_page + 1

    @property
    def last(self) -> int:
        return min(self.total, self.page * self.query.per_page)


def jobs_page(jobs: Sequence[views.JobView], query: JobQuery, *, now: datetime) -> JobsPage:
    """One page of the filtered jobs (a page past the end shows the last one)."""
    kept = select_jobs(jobs, query)
    pages = max(1, math.ceil(len(kept) / query.per_page))
    page = min(query.page, pages)
    start = (page - 1) * query.per_page
    choices = {
        "namespace": sorted({v.namespace for v in jobs} | ({query.namespace} if query.namespace else set())),
        "queue": sorted({v.queue for v in jobs if v.queue}),
        "state": list(views.STATES),
        "worker": sorted({v.cluster for v in jobs if v.cluster}),
        "kind": sorted({v.kind for v in jobs} | {"Job"}),
    }
    return JobsPage(
        rows=[job_row(v, now=now) for v in kept[start : start + query.per_page]],
        total=len(kept),
        page=page,
        pages=pages,
        query=query.model_copy(update={"page": page}),
        counts=views.state_counts(kept),
        choices=choices,
    )


# --- quota as bars -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bar:
    """One resource's use against its quota: `used` of `nominal`, `borrowed` beyond it (engine
    units), and the limits when set; `text` says it in Kubernetes quantities."""

    label: str
    used: int
    nominal: int
    borrowed: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    resource: str = ""

    @property
    def scale(self) -> int:
        """The bar's full length: the nominal quota, or the use when it borrows beyond it."""
        return max(self.nominal, self.used, 1)

    @property
    def own(self) -> int:
        """What is used of the ClusterQueue's own quota (the rest is borrowed)."""
        return self.used - self.borrowed

    @property
    def text(self) -> str:
        parts = [f"{self.show(self.used)} / {self.show(self.nominal)}"]
        if self.borrowed:
            parts.append(f"borrowed {self.show(self.borrowed)}")
        if self.borrowing_limit is not None:
            parts.append(f"borrowing limit {self.show(self.borrowing_limit)}")
        if self.lending_limit is not None:
            parts.append(f"lending limit {self.show(self.lending_limit)}")
        return ", ".join(parts)

    def show(self, value: int) -> str:
        return format_amount(self.resource or self.label, value)


def worker_bars(w: views.WorkerView) -> list[tuple[str, list[Bar]]]:
    """A worker's quota use per flavor (reserved, nominal, borrowed), summed over its
    ClusterQueues; per resource alone (flavor "") from a read API that does not say flavors."""
    if not w.flavors:
        return [("", [Bar(resource, used, nominal, resource=resource) for resource, (used, nominal) in sorted(w.usage.items())])]
    by_flavor: dict[str, list[Bar]] = {}
    for (flavor, resource), (used, nominal, borrowed) in sorted(w.flavors.items()):
        by_flavor.setdefault(flavor, []).append(Bar(resource, used, nominal, borrowed=borrowed, resource=resource))
    return list(by_flavor.items())


def cluster_queue_bars(cq: kueue.ClusterQueue) -> list[tuple[str, list[Bar]]]:
    """Per flavor, each resource's reservation against the nominal quota, what is borrowed, and
    the borrowing and lending limits."""
    reserved: dict[tuple[str, str], tuple[int, int]] = {}
    for used in (cq.status.flavors_reservation if cq.status else None) or []:
        for usage in used.resources or []:
            total = amount(usage.name, usage.total) if usage.total is not None else 0
            borrowed = amount(usage.name, usage.borrowed) if usage.borrowed is not None else 0
            reserved[(used.name, usage.name)] = (total, borrowed)
    flavors = []
    for group in cq.spec.resource_groups or []:
        for quotas in group.flavors:
            bars = []
            for r in quotas.resources:
                total, borrowed = reserved.get((quotas.name, r.name), (0, 0))
                bars.append(
                    Bar(
                        r.name,
                        total,
                        amount(r.name, r.nominal_quota),
                        borrowed=borrowed,
                        borrowing_limit=amount(r.name, r.borrowing_limit) if r.borrowing_limit is not None else None,
                        lending_limit=amount(r.name, r.lending_limit) if r.lending_limit is not None else None,
                        resource=r.name,
                    )
                )
            flavors.append((quotas.name, bars))
    return flavors


# --- fleet ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerCard:
    name: str
    connected: bool
    status: str  # Active, or why not
    why: str  # the condition's message or the read error
    since: str
    running: str
    pending: str
    flavors: list[tuple[str, list[Bar]]]  # (flavor, its resources' bars); flavor "" when not said


def worker_cards(workers: Sequence[views.WorkerView], *, now: datetime) -> list[WorkerCard]:
    """Each worker: connected or not and why (the MultiKueueCluster's Active condition, or why
    the manager could not read it), since when, our copies there and its quota use."""
    cards = []
    for w in sorted(workers, key=lambda x: x.name):
        connected = w.active == "True" and w.reachable
        if w.active != "True":
            status = f"Not active: {w.reason}" if w.reason else "Not active"
            why = w.message or w.error
        elif not w.reachable:
            status, why = "Unreachable", w.error
        else:
            status, why = "Active", ""
        cards.append(
            WorkerCard(
                name=w.name,
                connected=connected,
                status=status,
                why=why,
                since=views.age(w.since, now),
                running=str(w.running) if w.reachable else "-",
                pending=str(w.pending) if w.reachable else "-",
                flavors=worker_bars(w),
            )
        )
    return cards


# --- queues --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueCard:
    name: str
    cohort: str
    status: str  # Active, Stopped (Hold), Inactive (reason)
    stop_policy: str
    pending: int
    admitted: int
    flavors: list[tuple[str, list[Bar]]]
    local_queues: list[dict[str, Any]]
    plots: list[history.Plot] = field(default_factory=list)


@dataclass
class CohortNode:
    name: str  # "" for the ClusterQueues in no cohort
    queues: list[QueueCard] = field(default_factory=list)
    children: list[CohortNode] = field(default_factory=list)


def usage_values(cq: kueue.ClusterQueue) -> dict[tuple[str, str], tuple[int, int]]:
    """What the plots sample: each flavor's resource reserved and its nominal quota."""
    return {(flavor, bar.resource): (bar.used, bar.nominal) for flavor, bars in cluster_queue_bars(cq) for bar in bars}


def queue_card(
    cq: kueue.ClusterQueue,
    local_queues: Iterable[kueue.LocalQueue],
    *,
    recorded: history.History | None = None,
    now: datetime | None = None,
    readable: Container[str] = frozenset(),
) -> QueueCard:
    """A ClusterQueue's card; with `recorded` (and `now`), its plots over time, naming the
    Workloads of the `readable` namespaces only (`history.waits_plot`)."""
    record = views.queue_records([cq], [])[0]
    row = views.cluster_queue_rows([cq])[0]
    lqs = [r for r in views.local_queue_rows(local_queues) if r["CLUSTERQUEUE"] == cq.name]
    return QueueCard(
        name=cq.name,
        cohort=cq.spec.cohort_name or "",
        status=row["STATUS"] or "Active",
        stop_policy=record["stopPolicy"],
        pending=record["pending"],
        admitted=record["admitted"],
        flavors=cluster_queue_bars(cq),
        local_queues=lqs,
        plots=[history.usage_plot(recorded, cq.name, now), history.waits_plot(recorded, cq.name, now, readable=readable)]
        if recorded is not None and now is not None
        else [],
    )


def cohort_tree(
    cluster_queues: Iterable[kueue.ClusterQueue],
    cohorts: Iterable[kueue.Cohort],
    local_queues: Iterable[kueue.LocalQueue],
    *,
    recorded: history.History | None = None,
    now: datetime | None = None,
    readable: Container[str] = frozenset(),
) -> list[CohortNode]:
    """The cohorts as a forest (a Cohort's `spec.parentName`; a cohort only named by a
    ClusterQueue is a root), each with its ClusterQueues (and their plots, given `recorded`);
    the ClusterQueues in no cohort last, under a node named ""."""
    lqs = list(local_queues)
    parents = {co.name: co.spec.parent_name or "" for co in cohorts}
    nodes: dict[str, CohortNode] = {}

    def node(name: str, seen: frozenset[str] = frozenset()) -> CohortNode:
        if name not in nodes:
            nodes[name] = CohortNode(name)
            parent = parents.get(name, "")
            if parent and parent not in seen | {name}:  # a cycle is Kueue's error to report; stop here
                node(parent, seen | {name}).children.append(nodes[name])
        return nodes[name]

    loose = CohortNode("")
    for cq in sorted(cluster_queues, key=lambda q: q.name):
        card = queue_card(cq, lqs, recorded=recorded, now=now, readable=readable)
        (node(card.cohort) if card.cohort else loose).queues.append(card)
    for name in sorted(parents):
        node(name)
    children = {id(child) for n in nodes.values() for child in n.children}
    roots = [n for name, n in sorted(nodes.items()) if id(n) not in children]
    for n in nodes.values():
        n.children.sort(key=lambda x: x.name)
    return [*roots, loose] if loose.queues else roots


# --- a job's page --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Moment:
    """One line of a job's timeline: a condition's transition or an Event."""

    when: datetime | None
    source: str  # "Workload", "Job", or the Event's object kind
    what: str  # the condition type and status, or the Event's reason
    message: str
    warning: bool = False


def timeline(*, workload: kueue.Workload | None, job: Job | None, events: Iterable[Event], created: datetime | None = None) -> list[Moment]:
    """From submission to finish: the Job's creation, its and its Workload's conditions at
    their last transitions, and the Events of both, oldest first (undated last)."""
    moments: list[Moment] = []
    if created is not None:
        moments.append(Moment(created, "Job", "Created", "submitted"))
    found: Sequence[Condition] = (workload.status.conditions if workload and workload.status else None) or []
    for cond in found:
        moments.append(Moment(cond.last_transition_time, "Workload", f"{cond.type}={cond.status}", f"{cond.reason}: {cond.message}"))
    for job_cond in (job.status.conditions if job and job.status else None) or []:
        moments.append(
            Moment(
                job_cond.last_transition_time,
                "Job",
                f"{job_cond.type}={job_cond.status}",
                f"{job_cond.reason or ''}: {job_cond.message or ''}",
            )
        )
    for event in events:
        when = event.last_timestamp or event.first_timestamp or _micro_time(event.event_time) or event.metadata.creation_timestamp
        count = f" (x{event.count})" if event.count and event.count > 1 else ""
        moments.append(
            Moment(
                when,
                event.involved_object.kind or "Event",
                event.reason or "",
                (event.message or "") + count,
                warning=(event.type or "") == "Warning",
            )
        )
    return sorted(moments, key=lambda m: (m.when is None, m.when or datetime.min, m.source))


def _micro_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


ANNOTATION_SHOWN = 300  # characters of a value shown; a longer one (last-applied-configuration) is cut


def metadata_items(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None) -> list[tuple[str, str, str]]:
    """(label or annotation, key, value) of a job, sorted, each long value cut with an ellipsis."""
    found = []
    for what, items in (("label", labels or {}), ("annotation", annotations or {})):
        for key, value in sorted(items.items()):
            shown = value if len(value) <= ANNOTATION_SHOWN else value[:ANNOTATION_SHOWN] + "…"
            found.append((what, key, shown))
    return found
