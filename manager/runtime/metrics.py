"""Prometheus metrics, served with prometheus-client: kfed's own (`kfed_*`) and Kueue's, under
Kueue's names, labels and buckets (the table in `manager.runtime.kueue_metrics`), so that
existing Kueue dashboards and alerts work unchanged.

Each process owns one `Metrics`, with its own CollectorRegistry (never prometheus-client's
global one): several managers in one Python process keep apart. There is one way to register:
the process's composition root hands its `Metrics` to every component it builds (a `metrics`
argument), and nothing reaches for a global one.

Kueue's counters and histograms are fed as things happen (`quota_reserved`, `admitted`, ...);
its gauges are read from the live state at scrape time (`add_gauges`), so a deleted queue's
series disappear with it and nothing can go stale.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, disable_created_metrics
from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge as PromGauge
from prometheus_client import Histogram as PromHistogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics import MetricWrapperBase

from manager.runtime.kueue_metrics import (
    CLUSTER_QUEUE_RESOURCES,
    COUNTER,
    GAUGE,
    HISTOGRAM,
    KUEUE_BY_NAME,
    KUEUE_METRICS,
    LOCAL_QUEUE,
    MetricSpec,
)

log = logging.getLogger("kfed.metrics")

# Kueue's registry (client_golang) exposes no `_created` series; neither do we.
disable_created_metrics()  # type: ignore[no-untyped-call]

# Kueue's replica_role label (pkg/util/roletracker).
ROLE_LEADER = "leader"
ROLE_FOLLOWER = "follower"
ROLE_STANDALONE = "standalone"

DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

# kfed's own metrics that count exactly what a Kueue metric counts: one call site feeds both.
KFED_ALSO_AS_KUEUE = {
    "kfed_multikueue_workloads_dispatched_total": "multikueue_workloads_dispatched_total",
    "kfed_multikueue_workloads_admitted_total": "multikueue_workloads_admitted_total",
}


@dataclass(frozen=True)
class Sample:
    """One value of a Kueue gauge, its label values in the table's order without replica_role."""

    name: str
    labels: tuple[str, ...]
    value: float


@dataclass(frozen=True)
class LocalQueueRef:
    name: str
    namespace: str


# --- kfed's own metrics -----------------------------------------------------------------------------
M = TypeVar("M", bound=MetricWrapperBase)


class _Labelled(Generic[M]):
    """A prometheus-client metric whose label values are checked against its names on every use."""

    def __init__(self, metric: M, label_names: tuple[str, ...]) -> None:
        self._metric: M = metric
        self.label_names = label_names

    def _child(self, values: tuple[str, ...]) -> M:
        return self._metric.labels(*values) if values else self._metric


class Counter(_Labelled[PromCounter]):
    def __init__(self, metric: PromCounter, label_names: tuple[str, ...], also: Callable[[tuple[str, ...], float], None] | None) -> None:
        super().__init__(metric, label_names)
        self._also = also

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        values = _check(self.label_names, labels)
        self._child(values).inc(amount)
        if self._also is not None:
            self._also(values, amount)


class Gauge(_Labelled[PromGauge]):
    def set(self, value: float, *labels: str) -> None:
        self._child(_check(self.label_names, labels)).set(value)

    def remove(self, *labels: str) -> None:
        with contextlib.suppress(KeyError):  # never set
            self._metric.remove(*_check(self.label_names, labels))


class Histogram(_Labelled[PromHistogram]):
    def observe(self, value: float, *labels: str) -> None:
        self._child(_check(self.label_names, labels)).observe(value)


def _check(names: tuple[str, ...], values: tuple[str, ...]) -> tuple[str, ...]:
    if len(values) != len(names):
        raise ValueError(f"expected labels {names}, got {values}")
    return tuple(str(v) for v in values)


class Registry(Protocol):
    """Where a component registers kfed's own metrics: its process's `Metrics`, handed to it."""

    def counter(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> Counter: ...

    def gauge(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> Gauge: ...

    def histogram(
        self, name: str, help_text: str, labels: tuple[str, ...] = (), *, buckets: tuple[float, ...] = DEFAULT_BUCKETS
    ) -> Histogram: ...


# --- one process's metrics ------------------------------------------------------------------------
class Metrics:
    """One process's registry: kfed's metrics, and Kueue's for the groups this process serves.

    `local_queue_metrics` is Kueue's LocalQueueMetrics (on by default); `local_queue_filter`
    its localQueueSelector, given the LocalQueue's labels. `cluster_queue_resources` is Kueue's
    `metrics.enableClusterQueueResources` (off by default).
    """

    def __init__(
        self,
        *,
        local_queue_metrics: bool = True,
        cluster_queue_resources: bool = False,
        local_queue_filter: Callable[[LocalQueueRef], bool] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.role = ROLE_STANDALONE
        self.local_queue_metrics = local_queue_metrics
        self.cluster_queue_resources = cluster_queue_resources
        self.local_queue_filter = local_queue_filter
        self._read_counters: set[str] = set()  # names registered by `counter_from`
        self._own: dict[str, tuple[type, tuple[str, ...], Counter | Gauge | Histogram]] = {}
        self._events: dict[str, PromCounter | PromHistogram] = {}
        self._gauge_sources: list[Callable[[], Iterable[Sample]]] = []
        for spec in KUEUE_METRICS:
            if not self.serves(spec):
                continue
            if spec.kind == COUNTER:
                self._events[spec.name] = PromCounter(spec.name, spec.help, spec.labels, registry=self.registry)
            elif spec.kind == HISTOGRAM:
                self._events[spec.name] = PromHistogram(spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=self.registry)
        self.registry.register(_KueueGauges(self))

    def serves(self, spec: MetricSpec) -> bool:
        if spec.group == LOCAL_QUEUE:
            return self.local_queue_metrics
        if spec.group == CLUSTER_QUEUE_RESOURCES:
            return self.cluster_queue_resources
        return True

    def exposes(self, lq: LocalQueueRef) -> bool:
        """Kueue's ShouldExposeLocalQueueMetrics."""
        return self.local_queue_metrics and (self.local_queue_filter is None or self.local_queue_filter(lq))

    # kfed's own metrics: registering a name again returns the same metric (a controller rebuilt
    # in the same process keeps counting where it was).
    def _own_metric(self, cls: type, name: str, labels: tuple[str, ...], make: Callable[[], Counter | Gauge | Histogram]) -> object:
        if name in self._read_counters:
            raise ValueError(f"metric {name} is already registered with another type or labels")
        existing = self._own.get(name)
        if existing is not None:
            if existing[0] is not cls or existing[1] != labels:
                raise ValueError(f"metric {name} is already registered with another type or labels")
            return existing[2]
        metric = make()
        self._own[name] = (cls, labels, metric)
        return metric

    def counter(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> Counter:
        kueue_name = KFED_ALSO_AS_KUEUE.get(name)

        def make() -> Counter:
            also = None
            if kueue_name is not None:
                also = lambda values, amount: self._inc(kueue_name, *values, amount=amount)  # noqa: E731
            return Counter(PromCounter(name, help_text, labels, registry=self.registry), labels, also)

        metric = self._own_metric(Counter, name, labels, make)
        assert isinstance(metric, Counter)
        return metric

    def gauge(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> Gauge:
        metric = self._own_metric(Gauge, name, labels, lambda: Gauge(PromGauge(name, help_text, labels, registry=self.registry), labels))
        assert isinstance(metric, Gauge)
        return metric

    def histogram(
        self, name: str, help_text: str, labels: tuple[str, ...] = (), *, buckets: tuple[float, ...] = DEFAULT_BUCKETS
    ) -> Histogram:
        def make() -> Histogram:
            return Histogram(PromHistogram(name, help_text, labels, buckets=buckets, registry=self.registry), labels)

        metric = self._own_metric(Histogram, name, labels, make)
        assert isinstance(metric, Histogram)
        return metric

    def counter_from(
        self, name: str, help_text: str, labels: tuple[str, ...], read: Callable[[], Iterable[tuple[tuple[str, ...], float]]]
    ) -> None:
        """A counter whose values another object already counts (a client's requests by verb),
        read at scrape time: exposed as a counter, so `rate()` works, with no second tally kept."""
        if name in self._own or name in self._read_counters:
            raise ValueError(f"metric {name} is already registered")
        self._read_counters.add(name)
        self.registry.register(_ReadCounter(name, help_text, labels, read))

    # --- Kueue's gauges, read at scrape time ------------------------------------------------------
    def add_gauges(self, source: Callable[[], Iterable[Sample]]) -> None:
        self._gauge_sources.append(source)

    def gauge_samples(self) -> Iterator[Sample]:
        for source in self._gauge_sources:
            try:
                samples = list(source())
            except Exception:  # a scrape must answer even if one source is broken
                log.exception("metrics source failed; its gauges are left out of this scrape")
                continue
            yield from samples

    # --- Kueue's counters and histograms, as Kueue's pkg/metrics reports them -----------------------
    def _inc(self, name: str, *labels: str, amount: float = 1.0) -> None:
        metric = self._events.get(name)
        if isinstance(metric, PromCounter):
            metric.labels(*labels, self.role).inc(amount)

    def _observe(self, name: str, value: float, *labels: str) -> None:
        metric = self._events.get(name)
        if isinstance(metric, PromHistogram):
            metric.labels(*labels, self.role).observe(max(0.0, value))

    def admission_attempt(self, *, admitted: bool, seconds: float) -> None:
        result = "success" if admitted else "inadmissible"
        self._inc("kueue_admission_attempts_total", result)
        self._observe("kueue_admission_attempt_duration_seconds", seconds, result)

    def quota_reserved(self, cq: str, lq: LocalQueueRef, priority_class: str, wait: float) -> None:
        self._inc("kueue_quota_reserved_workloads_total", cq, priority_class)
        self._observe("kueue_quota_reserved_wait_time_seconds", wait, cq, priority_class)
        if self.exposes(lq):
            self._inc("kueue_local_queue_quota_reserved_workloads_total", lq.name, lq.namespace, priority_class)
            self._observe("kueue_local_queue_quota_reserved_wait_time_seconds", wait, lq.name, lq.namespace, priority_class)

    def admitted(
        self, cq: str, lq: LocalQueueRef, priority_class: str, wait: float, checks_wait: float | None, cohorts: Iterable[str]
    ) -> None:
        """`checks_wait` is the time from quota reservation to admission, when checks were involved."""
        self._inc("kueue_admitted_workloads_total", cq, priority_class)
        self._observe("kueue_admission_wait_time_seconds", wait, cq, priority_class)
        if checks_wait is not None:
            self._observe("kueue_admission_checks_wait_time_seconds", checks_wait, cq, priority_class)
        for cohort in cohorts:
            self._inc("kueue_cohort_subtree_admitted_workloads_total", cohort, priority_class)
        if self.exposes(lq):
            self._inc("kueue_local_queue_admitted_workloads_total", lq.name, lq.namespace, priority_class)
            self._observe("kueue_local_queue_admission_wait_time_seconds", wait, lq.name, lq.namespace, priority_class)
            if checks_wait is not None:
                self._observe("kueue_local_queue_admission_checks_wait_time_seconds", checks_wait, lq.name, lq.namespace, priority_class)

    def evicted(self, cq: str, lq: LocalQueueRef, reason: str, underlying_cause: str, priority_class: str) -> None:
        self._inc("kueue_evicted_workloads_total", cq, reason, underlying_cause, priority_class)
        if self.exposes(lq):
            self._inc("kueue_local_queue_evicted_workloads_total", lq.name, lq.namespace, reason, underlying_cause, priority_class)

    def eviction_released(self, cq: str, reason: str, seconds: float) -> None:
        """From the Evicted condition turning True to the quota being given back."""
        self._observe("kueue_workload_eviction_latency_seconds", seconds, cq, reason)

    def preempted(self, preempting_cq: str, reason: str) -> None:
        self._inc("kueue_preempted_workloads_total", preempting_cq, reason)

    def finished(self, cq: str, lq: LocalQueueRef, priority_class: str) -> None:
        self._inc("kueue_finished_workloads_total", cq, priority_class)
        if self.exposes(lq):
            self._inc("kueue_local_queue_finished_workloads_total", lq.name, lq.namespace, priority_class)

    # --- exposition -----------------------------------------------------------------------------------
    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition for a scrape with this Accept header: (body, content type)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """One sample's value (for tests and `kfed` tooling)."""
        return self.registry.get_sample_value(name, labels or {})


class _ReadCounter:
    """The collector behind `Metrics.counter_from`."""

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...], read: Callable[[], Iterable[tuple[tuple[str, ...], float]]]):
        self.name, self.help_text, self.labels, self.read = name, help_text, labels, read

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.help_text, labels=self.labels)
        for values, value in self.read():
            family.add_metric(list(_check(self.labels, values)), value)
        yield family


class _KueueGauges:
    """The scrape-time Kueue gauges, with the table's help and labels and the current role."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        for sample in self.metrics.gauge_samples():
            spec = KUEUE_BY_NAME.get(sample.name)
            if spec is None or spec.kind != GAUGE or not self.metrics.serves(spec):
                continue
            family = families.get(spec.name)
            if family is None:
                family = families[spec.name] = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
            family.add_metric([*sample.labels, self.metrics.role], sample.value)
        yield from families.values()
