"""What one pod of a podSet asks for, as Kueue counts it for quota.

Same order as Kueue's `workload.NewInfo`: LimitRange defaults fill in missing requests and
limits, limits stand in for missing requests, then the pod total (containers and sidecars
summed, regular init containers as a maximum, plus overhead), then excluded prefixes are
dropped and resource transformations applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from manager.api.config import Configuration, ResourceTransformation
from manager.api.core import LimitRange
from manager.api.quantity import Quantity, QuantityError
from manager.engine.units import amount

Requests = dict[str, int]


class RequestError(ValueError):
    """A pod template whose resources cannot be read (named by field path)."""


@lru_cache(maxsize=4096)
def _parse(raw: str) -> Quantity:
    return Quantity.parse(raw)


def _read(resource_list: Any, path: str) -> Requests:
    if resource_list is None:
        return {}
    if not isinstance(resource_list, Mapping):
        raise RequestError(f"{path}: must be a map of resource name to quantity")
    out: Requests = {}
    for name, raw in resource_list.items():
        try:
            quantity = raw if isinstance(raw, Quantity) else _parse(str(raw))
        except QuantityError:
            raise RequestError(f'{path}.{name}: invalid quantity "{raw}"') from None
        out[str(name)] = amount(str(name), quantity)
    return out


@dataclass(frozen=True)
class LimitRangeDefaults:
    """The Container defaults of a namespace's LimitRanges, in engine units."""

    default_limits: Requests
    default_requests: Requests


def limit_range_defaults(limit_ranges: Iterable[LimitRange]) -> LimitRangeDefaults:
    limits: Requests = {}
    requests: Requests = {}
    for limit_range in limit_ranges:
        for item in limit_range.spec.limits:
            if item.type != "Container":
                continue
            for name, quantity in (item.default or {}).items():
                limits.setdefault(name, amount(name, quantity))
            for name, quantity in (item.default_request or {}).items():
                requests.setdefault(name, amount(name, quantity))
    return LimitRangeDefaults(limits, requests)


def _container_requests(container: Any, path: str, defaults: LimitRangeDefaults | None) -> Requests:
    if not isinstance(container, Mapping):
        raise RequestError(f"{path}: must be a container object")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise RequestError(f"{path}.resources: must be an object")
    requests = _read(resources.get("requests"), f"{path}.resources.requests")
    limits = _read(resources.get("limits"), f"{path}.resources.limits")
    if defaults is not None:
        for name, value in defaults.default_limits.items():
            limits.setdefault(name, value)
        for name, value in defaults.default_requests.items():
            requests.setdefault(name, value)
    for name, value in limits.items():
        # Same as Kueue: a limit stands in for a missing request.
        requests.setdefault(name, value)
    for name, value in requests.items():
        if name in limits and value > limits[name]:
            raise RequestError(f"{path}.resources.requests.{name}: must be less than or equal to the {name} limit")
    return requests


def pod_requests(pod_spec: Mapping[str, Any], *, path: str = "spec", defaults: LimitRangeDefaults | None = None) -> Requests:
    """The quota one pod of this spec takes, before transformations."""
    total: Requests = {}
    containers = pod_spec.get("containers") or []
    if not isinstance(containers, list):
        raise RequestError(f"{path}.containers: must be a list")
    for i, container in enumerate(containers):
        for name, value in _container_requests(container, f"{path}.containers[{i}]", defaults).items():
            total[name] = total.get(name, 0) + value
    init_containers = pod_spec.get("initContainers") or []
    if not isinstance(init_containers, list):
        raise RequestError(f"{path}.initContainers: must be a list")
    sidecars: Requests = {}
    init_peak: Requests = {}
    for i, container in enumerate(init_containers):
        requests = _container_requests(container, f"{path}.initContainers[{i}]", defaults)
        if isinstance(container, Mapping) and container.get("restartPolicy") == "Always":
            # A sidecar runs beside everything after it, so it adds to the pod total.
            for name, value in requests.items():
                sidecars[name] = sidecars.get(name, 0) + value
            continue
        for name, value in requests.items():
            init_peak[name] = max(init_peak.get(name, 0), value + sidecars.get(name, 0))
    for name, value in sidecars.items():
        total[name] = total.get(name, 0) + value
    for name, value in init_peak.items():
        total[name] = max(total.get(name, 0), value)
    for name, value in _read(pod_spec.get("overhead"), f"{path}.overhead").items():
        total[name] = total.get(name, 0) + value
    return total


def transform(requests: Requests, config: Configuration | None) -> Requests:
    """Drop excluded resources and apply `resources.transformations` (Kueue's order)."""
    resources = config.resources if config is not None else None
    if resources is None:
        return requests
    out = dict(requests)
    for prefix in resources.exclude_resource_prefixes or []:
        for name in [n for n in out if n.startswith(prefix)]:
            del out[name]
    transformations: list[ResourceTransformation] = resources.transformations or []
    if not transformations:
        return out
    outputs: dict[str, int] = {}
    source = dict(out)
    for transformation in transformations:
        if transformation.input not in source:
            continue
        input_amount = source[transformation.input]
        multiplier = source.get(transformation.multiply_by, 1) if transformation.multiply_by else 1
        for output_name, factor in (transformation.outputs or {}).items():
            # input × factor as quantities (Kueue multiplies the input's value by the factor),
            # in exact integer nano-units; cpu inputs are held in milli.
            input_nanos = input_amount * (10**6 if transformation.input == "cpu" else 10**9)
            produced = Quantity(nanos=input_nanos * factor.nanos // 10**9 * multiplier)
            outputs[output_name] = outputs.get(output_name, 0) + amount(output_name, produced)
        if (transformation.strategy or "Retain") == "Replace":
            out.pop(transformation.input, None)
    for name, value in outputs.items():
        out[name] = out.get(name, 0) + max(0, value)
    return {name: max(0, value) for name, value in out.items()}
