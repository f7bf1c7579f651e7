"""A small Prometheus registry: counters, gauges and histograms with labels, text exposition 0.0.4."""

from __future__ import annotations

import math
from collections.abc import Callable


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: tuple[str, ...], values: tuple[str, ...], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...]) -> None:
        self.name = name
        self.help = help_text
        self.label_names = labels

    def _check(self, values: tuple[str, ...]) -> tuple[str, ...]:
        if len(values) != len(self.label_names):
            raise ValueError(f"{self.name}: expected labels {self.label_names}, got {values}")
        return tuple(str(v) for v in values)

    def samples(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...]) -> None:
        super().__init__(name, help_text, labels)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        key = self._check(labels)
        self.values[key] = self.values.get(key, 0.0) + amount

    def get(self, *labels: str) -> float:
        return self.values.get(tuple(labels), 0.0)

    def samples(self) -> list[str]:
        return [f"{self.name}{_labels(self.label_names, k)} {_number(v)}" for k, v in sorted(self.values.items())]


class Gauge(Counter):
    kind = "gauge"

    def set(self, value: float, *labels: str) -> None:
        self.values[self._check(labels)] = value

    def remove(self, *labels: str) -> None:
        self.values.pop(tuple(labels), None)


DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...], buckets: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        super().__init__(name, help_text, labels)
        self.buckets = buckets
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, value: float, *labels: str) -> None:
        key = self._check(labels)
        counts, totals = self.series.setdefault(key, ([0] * len(self.buckets), [0.0, 0.0]))
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                counts[i] += 1
        totals[0] += value
        totals[1] += 1

    def samples(self) -> list[str]:
        out = []
        for key, (counts, (total, count)) in sorted(self.series.items()):
            for bound, n in zip(self.buckets, counts, strict=True):
                le = 'le="' + _number(bound) + '"'
                out.append(f"{self.name}_bucket{_labels(self.label_names, key, le)} {n}")
            le = 'le="+Inf"'
            out.append(f"{self.name}_bucket{_labels(self.label_names, key, le)} {_number(count)}")
            out.append(f"{self.name}_sum{_labels(self.label_names, key)} {_number(total)}")
            out.append(f"{self.name}_count{_labels(self.label_names, key)} {_number(count)}")
        return out


class Registry:
    def __init__(self) -> None:
        self.metrics: dict[str, _Metric] = {}
        self.collectors: list[Callable[[], None]] = []

    def _get(self, cls: type[_Metric], name: str, help_text: str, labels: tuple[str, ...]) -> _Metric:
        existing = self.metrics.get(name)
        if existing is not None:
            if not isinstance(existing, cls) or existing.label_names != labels:
                raise ValueError(f"metric {name} is already registered with another type or labels")
            return existing
        metric = cls(name, help_text, labels)
        self.metrics[name] = metric
        return metric

    def counter(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> Counter:
        metric = self._get(Counter, name, help_text, labels)
        assert isinstance(metric, Counter)
        return metric

    def gauge(self, name: str, help_text: str, labels: tuple[str, ...] = ()) -> Gauge:
        metric = self._get(Gauge, name, help_text, labels)
        assert isinstance(metric, Gauge)
        return metric

    def histogram(
        self, name: str, help_text: str, labels: tuple[str, ...] = (), *, buckets: tuple[float, ...] = DEFAULT_BUCKETS
    ) -> Histogram:
        metric = self._get(Histogram, name, help_text, labels)
        assert isinstance(metric, Histogram)
        if not metric.series:
            metric.buckets = buckets
        return metric

    def render(self) -> str:
        for collect in self.collectors:
            collect()
        lines = []
        for name in sorted(self.metrics):
            metric = self.metrics[name]
            lines.append(f"# HELP {name} {metric.help}")
            lines.append(f"# TYPE {name} {metric.kind}")
            lines.extend(metric.samples())
        return "\n".join(lines) + "\n"


REGISTRY = Registry()
