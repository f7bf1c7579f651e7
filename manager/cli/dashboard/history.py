"""The dashboard's plots over time: what it samples of each ClusterQueue, kept in memory for the
window shown, and the plots' geometry. Pure: the server's recorder reads and calls `record_*`
with the time; the pages ask for plots.

Two figures, as Kueue's metrics define them:
- **usage against quota**: each flavor's resource reserved, as a share of its nominal quota
  (`kueue_cluster_queue_resource_reservation` over `kueue_cluster_queue_nominal_quota`), one line
  per flavor and resource, sampled from the ClusterQueue's status;
- **admission wait**: one point per Workload admitted in the window, at its admission, as high as
  it waited (`kueue_admission_wait_time_seconds`, read back from the Workload by
  `engine.workload.admission_wait`).

Reading them back from the objects, not scraping the manager's /metrics, keeps the dashboard to
the rights its user already has (a researcher may list ClusterQueues, not read the manager's
metrics endpoint), and gives the same figures.

The recorder reads every namespace's Workloads (in the cluster, with the dashboard's own
identity), so the plots are built from many namespaces: a point names its Workload
(`namespace/name`) only for a reader who may list Workloads in that namespace (`readable`);
for anyone else it says only how long it waited, and the caption holds aggregates alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from manager.api.kueue import Workload
from manager.engine.workload import admission_wait

WINDOW = timedelta(hours=1)
SAMPLE_SECONDS = 10.0  # how often the server's recorder reads the ClusterQueues and Workloads
MIN_SPAN = timedelta(minutes=2)
WIDTH, HEIGHT = 300, 80  # the plots' SVG user units; the stylesheet sizes them

FlavorResource = tuple[str, str]


@dataclass(frozen=True)
class UsageSample:
    at: datetime
    values: Mapping[FlavorResource, tuple[int, int]]  # (flavor, resource) -> (reserved, nominal)


@dataclass
class History:
    """Samples per ClusterQueue over the last `window`."""

    window: timedelta = WINDOW
    usage: dict[str, deque[UsageSample]] = field(default_factory=dict)
    waits: dict[str, deque[tuple[datetime, float, str]]] = field(default_factory=dict)  # (admitted, seconds, workload)
    _admitted: dict[str, datetime] = field(default_factory=dict)  # UID -> when admitted: counted once
    samples: int = 0
    workloads_unreadable: str = ""  # why the admission waits are not recorded ("" while they are)

    def record_usage(self, cluster_queue: str, values: Mapping[FlavorResource, tuple[int, int]], now: datetime) -> None:
        self.usage.setdefault(cluster_queue, deque()).append(UsageSample(now, dict(values)))

    def record_admissions(self, workloads: Iterable[Workload], now: datetime) -> None:
        """Each Workload admitted within the window, once (by UID), into its ClusterQueue's waits."""
        start = now - self.window
        for wl in workloads:
            uid = wl.metadata.uid or wl.key
            if uid in self._admitted or wl.status is None or wl.status.admission is None:
                continue
            found = admission_wait(wl)
            if found is None:
                continue
            at, seconds = found
            if at < start:
                continue
            self._admitted[uid] = at
            queue = self.waits.setdefault(wl.status.admission.cluster_queue, deque())
            queue.append((at, seconds, wl.key))
            if len(queue) > 1 and queue[-2][0] > at:  # a late arrival: keep the points in time order
                self.waits[wl.status.admission.cluster_queue] = deque(sorted(queue))

    def namespaces(self, cluster_queues: Iterable[str]) -> set[str]:
        """The namespaces of the Workloads whose waits the ClusterQueues' plots show."""
        return {key.partition("/")[0] for name in cluster_queues for _, _, key in self.waits.get(name, ())}

    def forget_before(self, now: datetime) -> None:
        """Drop what has left the window, and the ClusterQueues with nothing left."""
        start = now - self.window
        for series in (self.usage, self.waits):
            for name in list(series):
                queue = series[name]
                while queue and _time(queue[0]) < start:
                    queue.popleft()
                if not queue:
                    del series[name]
        self._admitted = {uid: at for uid, at in self._admitted.items() if at >= start}
        self.samples += 1

    def span(self, cluster_queue: str, now: datetime) -> timedelta:
        """The time the ClusterQueue's plots cover: what is recorded of it, at least
        `MIN_SPAN` and at most the window, so that a dashboard started a minute ago spreads
        that minute across the plot rather than into its last pixels."""
        first_sample = next(iter(self.usage.get(cluster_queue, ())), None)
        first_wait = next(iter(self.waits.get(cluster_queue, ())), None)
        times = [first_sample.at] if first_sample is not None else []
        times += [first_wait[0]] if first_wait is not None else []
        recorded = now - min(times) if times else timedelta(0)
        return min(self.window, max(MIN_SPAN, recorded))


def _time(item: UsageSample | tuple[datetime, float, str]) -> datetime:
    return item.at if isinstance(item, UsageSample) else item[0]


# --- the plots -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Line:
    label: str
    points: str  # SVG polyline points, "x,y x,y"
    last: tuple[float, float]  # the latest point, marked
    latest: str  # its value, said in words


@dataclass(frozen=True)
class Dot:
    x: float
    y: float
    text: str


@dataclass(frozen=True)
class Plot:
    kind: str  # usage, waits
    title: str
    caption: str
    lines: list[Line] = field(default_factory=list)
    dots: list[Dot] = field(default_factory=list)
    guide: float | None = None  # y of the nominal quota line
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def empty(self) -> bool:
        return not self.lines and not self.dots


def _x(at: datetime, now: datetime, span: timedelta) -> float:
    return round(max(0.0, min(1.0, 1 - (now - at) / span)) * WIDTH, 1)


def _y(value: float, top: float) -> float:
    return round(HEIGHT - (value / top if top > 0 else 0.0) * (HEIGHT - 4), 1)


def minutes(span: timedelta) -> str:
    return f"{max(1, round(span.total_seconds() / 60))} min"


def usage_plot(history: History, cluster_queue: str, now: datetime) -> Plot:
    """Each flavor's resources reserved as a share of nominal quota, over the window; the line
    at 100 % is the nominal quota, and above it the ClusterQueue borrows."""
    samples = list(history.usage.get(cluster_queue, ()))
    span = history.span(cluster_queue, now)
    keys = sorted({key for sample in samples for key in sample.values})
    shares: dict[FlavorResource, list[tuple[datetime, float]]] = {key: [] for key in keys}
    for sample in samples:
        for key, (used, nominal) in sample.values.items():
            shares[key].append((sample.at, 100.0 * used / nominal if nominal > 0 else (100.0 if used else 0.0)))
    top = max([100.0, *(share for series in shares.values() for _, share in series)])
    lines = []
    for (flavor, resource), series in shares.items():
        points = [(_x(at, now, span), _y(share, top)) for at, share in series]
        lines.append(
            Line(
                label=f"{flavor} {resource}",
                points=" ".join(f"{x},{y}" for x, y in points),
                last=points[-1],
                latest=f"{flavor} {resource}: {series[-1][1]:.0f} % of nominal",
            )
        )
    caption = "; ".join(line.latest for line in lines) if lines else "no sample yet"
    return Plot("usage", f"Usage against nominal quota, last {minutes(span)}", caption, lines=lines, guide=_y(100.0, top))


def waits_plot(history: History, cluster_queue: str, now: datetime, *, readable: Container[str] = frozenset()) -> Plot:
    """One point per Workload admitted in the window: when, and how long it waited; named only
    where its namespace is one of `readable` (those where the reader may list Workloads; none
    unless said), so that a reader learns nothing of other namespaces but aggregates."""
    waits = list(history.waits.get(cluster_queue, ()))
    span = history.span(cluster_queue, now)
    title = f"Admission wait, last {minutes(span)}"
    if not waits:
        caption = history.workloads_unreadable or "no admission in the window"
        return Plot("waits", title, caption)
    top = max(seconds for _, seconds, _ in waits) or 1.0
    dots = [Dot(_x(at, now, span), _y(seconds, top), _dot_text(key, seconds, readable)) for at, seconds, key in waits]
    ordered = sorted(seconds for _, seconds, _ in waits)
    median = ordered[len(ordered) // 2]
    caption = f"{len(waits)} admitted; median {format_seconds(median)}, longest {format_seconds(ordered[-1])}"
    return Plot("waits", title, caption, dots=dots)


def _dot_text(key: str, seconds: float, readable: Container[str]) -> str:
    waited = f"waited {format_seconds(seconds)}"
    return f"{key}: {waited}" if key.partition("/")[0] in readable else waited


def format_seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
