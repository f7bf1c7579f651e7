"""The job kinds kfed integrates, by Kueue's framework name, and the ones a Configuration
enables (`integrations.frameworks`).

Every adapter module of this package is found here by itself: adding a kind is writing its
adapter module (and its API model), nothing to list (docs/adding-a-job-kind.md)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from manager.api.meta import OwnerReference
from manager.engine import integrations
from manager.engine.integrations.adapter import JobAdapter
from manager.engine.integrations.pod import PodAdapter, PodTemplateParent


def _subclasses(cls: type[JobAdapter[Any]]) -> list[type[JobAdapter[Any]]]:
    return [sub for direct in cls.__subclasses__() for sub in (direct, *_subclasses(direct))]


def discover() -> tuple[JobAdapter[Any], ...]:
    """One adapter per concrete JobAdapter defined in this package's modules, ordered by framework
    name (so `batch/job` comes first, and the generated manifests are stable)."""
    for module in pkgutil.iter_modules(integrations.__path__):
        importlib.import_module(f"{integrations.__name__}.{module.name}")
    found = {
        cls.framework: cls
        for cls in _subclasses(JobAdapter)  # type: ignore[type-abstract]
        if cls.__module__.startswith(f"{integrations.__name__}.") and "framework" in vars(cls)
    }
    return tuple(found[name]() for name in sorted(found))


def discover_parents() -> tuple[PodTemplateParent, ...]:
    """One of each kind queued through its pods alone (`PodTemplateParent`: the Deployment),
    ordered by framework name. `discover` has imported every module of the package."""
    found = {cls.framework: cls for cls in PodTemplateParent.__subclasses__() if "framework" in vars(cls)}
    return tuple(found[name]() for name in sorted(found))


ADAPTERS: tuple[JobAdapter[Any], ...] = discover()
PARENTS: tuple[PodTemplateParent, ...] = discover_parents()
BY_FRAMEWORK = {adapter.framework: adapter for adapter in ADAPTERS}
PARENTS_BY_FRAMEWORK = {parent.framework: parent for parent in PARENTS}
BATCH_JOB = BY_FRAMEWORK["batch/job"]
JOBSET = BY_FRAMEWORK["jobset.x-k8s.io/jobset"]


class UnsupportedFrameworkError(ValueError):
    """A framework name kfed has no adapter for; the message names the field."""


@dataclass(frozen=True)
class Registry:
    """The enabled adapters, in the Configuration's order, and the enabled kinds queued through
    their pods alone (`parents`: they need only their webhook)."""

    adapters: tuple[JobAdapter[Any], ...]
    parents: tuple[PodTemplateParent, ...] = ()

    @property
    def webhooked(self) -> tuple[JobAdapter[Any] | PodTemplateParent, ...]:
        """Every enabled kind whose objects kfed's webhook defaults at creation."""
        return (*self.adapters, *self.parents)

    def by_gvk(self, gvk: str) -> JobAdapter[Any] | None:
        return next((adapter for adapter in self.adapters if adapter.gvk == gvk), None)

    def for_owner(self, ref: OwnerReference) -> JobAdapter[Any] | None:
        """The adapter of the kind an owner reference names (any version of its group)."""
        return next((adapter for adapter in self.adapters if adapter.owns(ref)), None)

    def owns_any(self, refs: Iterable[OwnerReference] | None) -> bool:
        """Whether a controller owner is a kind Kueue manages: then the object is part of that
        job, never a job of its own (Kueue's top-level job rule)."""
        return any(ref.controller and self.for_owner(ref) is not None for ref in refs or [])

    @property
    def multikueue(self) -> tuple[JobAdapter[Any], ...]:
        """The enabled adapters MultiKueue can dispatch (Kueue registers only those)."""
        return tuple(adapter for adapter in self.adapters if adapter.multikueue)

    @property
    def multikueue_kinds(self) -> frozenset[str]:
        return frozenset(adapter.gvk for adapter in self.multikueue)


def enabled(frameworks: Sequence[str]) -> Registry:
    """The registry for a Configuration's `integrations.frameworks`."""
    chosen: list[JobAdapter[Any]] = []
    parents: list[PodTemplateParent] = []
    for index, name in enumerate(frameworks):
        adapter, parent = BY_FRAMEWORK.get(name), PARENTS_BY_FRAMEWORK.get(name)
        if adapter is None and parent is None:
            supported = ", ".join(f'"{known}"' for known in sorted([*BY_FRAMEWORK, *PARENTS_BY_FRAMEWORK]))
            raise UnsupportedFrameworkError(f'integrations.frameworks[{index}]: Unsupported value: "{name}": supported values: {supported}')
        if adapter is not None and adapter not in chosen:
            chosen.append(adapter)
        if parent is not None and parent not in parents:
            parents.append(parent)
    if (parents or any(adapter.runs_as_pod_groups for adapter in chosen)) and BY_FRAMEWORK["pod"] not in chosen:
        # Kueue's ImplicitlyEnabledFrameworkNames: a kind run as pod groups, or queued through
        # its pods, needs the pod integration, for the pods it suspends only.
        chosen.append(PodAdapter(only_suspended_by_parent=True))
    return Registry(tuple(chosen), tuple(parents))


DEFAULT = enabled(["batch/job"])
