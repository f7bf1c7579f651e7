"""MultiKueue's settings, from the `multiKueue` section of a Kueue Configuration (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from manager.api import constants as c
from manager.api.config import MULTIKUEUE_ORCHESTRATED_PREEMPTION, Configuration, parse_duration
from manager.api.meta import LabelSelector
from manager.multikueue.rules.kubeconfig import DEFAULT_PATH_PREFIX

DEFAULT_GC_INTERVAL = timedelta(minutes=1)
DEFAULT_WORKER_LOST_TIMEOUT = timedelta(minutes=15)
DEFAULT_STEP_SIZE = 3
DEFAULT_ADMISSION_TIMEOUT = timedelta(seconds=30)


@dataclass(frozen=True)
class Settings:
    origin: str = c.DEFAULT_MULTIKUEUE_ORIGIN
    gc_interval: timedelta = DEFAULT_GC_INTERVAL  # 0 turns the garbage collector off
    worker_lost_timeout: timedelta = DEFAULT_WORKER_LOST_TIMEOUT
    dispatcher_name: str = c.DISPATCHER_ALL_AT_ONCE
    step_size: int = DEFAULT_STEP_SIZE
    admission_timeout: timedelta = DEFAULT_ADMISSION_TIMEOUT  # capacity-aware: a copy's time to be admitted
    kubeconfig_path_prefix: str = DEFAULT_PATH_PREFIX
    # kfed's own: the manager keeps the namespaces and LocalQueues its Workloads need on each
    # worker (a MultiKueueConfig's `kfed.dev/propagate-queues` annotation overrides it).
    propagate_queues: bool = False
    # Which manager namespaces propagate (None: all but kube-* and kfed-system), and the worker
    # namespaces never propagated to beside those (`multiKueue.queuePropagation`).
    propagation_namespace_selector: LabelSelector | None = None
    propagation_denied_namespaces: tuple[str, ...] = ()
    # Kueue's MultiKueueOrchestratedPreemption gate: copies carry a preemption gate, opened on
    # one worker at a time.
    orchestrated_preemption: bool = False

    @classmethod
    def from_configuration(cls, config: Configuration, *, kubeconfig_path_prefix: str = DEFAULT_PATH_PREFIX) -> Settings:
        mk = config.multi_kueue
        orchestrated = config.feature_enabled(MULTIKUEUE_ORCHESTRATED_PREEMPTION)
        if mk is None:
            return cls(kubeconfig_path_prefix=kubeconfig_path_prefix, orchestrated_preemption=orchestrated)
        if mk.origin == "":
            raise ValueError("multiKueue.origin: Invalid value: must not be empty")
        step = mk.incremental_dispatcher_config.step_size if mk.incremental_dispatcher_config else None
        if step is not None and mk.dispatcher_name != c.DISPATCHER_INCREMENTAL:
            raise ValueError(
                f"multiKueue.incrementalDispatcherConfig: Invalid value: only valid with dispatcherName {c.DISPATCHER_INCREMENTAL}"
            )
        capacity = mk.capacity_aware_dispatcher_config
        if capacity is not None and mk.dispatcher_name != c.DISPATCHER_CAPACITY_AWARE:
            raise ValueError(
                f"multiKueue.capacityAwareDispatcherConfig: Invalid value: only valid with dispatcherName {c.DISPATCHER_CAPACITY_AWARE}"
            )
        propagation = mk.queue_propagation
        selector = propagation.namespace_selector if propagation else None
        _check_selector(selector, "multiKueue.queuePropagation.namespaceSelector")
        return cls(
            origin=mk.origin or c.DEFAULT_MULTIKUEUE_ORIGIN,
            gc_interval=_duration(mk.gc_interval, DEFAULT_GC_INTERVAL),
            worker_lost_timeout=_duration(mk.worker_lost_timeout, DEFAULT_WORKER_LOST_TIMEOUT),
            dispatcher_name=mk.dispatcher_name or c.DISPATCHER_ALL_AT_ONCE,
            step_size=step or DEFAULT_STEP_SIZE,
            admission_timeout=_duration(capacity.admission_timeout if capacity else None, DEFAULT_ADMISSION_TIMEOUT),
            kubeconfig_path_prefix=kubeconfig_path_prefix,
            propagate_queues=bool(mk.propagate_queues),
            propagation_namespace_selector=selector,
            propagation_denied_namespaces=tuple(propagation.denied_namespaces or ()) if propagation else (),
            orchestrated_preemption=orchestrated,
        )


def _duration(text: str | None, default: timedelta) -> timedelta:
    return parse_duration(text) if text is not None else default


SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _check_selector(selector: LabelSelector | None, where: str) -> None:
    """A LabelSelector as the apiserver validates one: a known operator, values for In and NotIn
    only. Raises ValueError naming the field."""
    for index, requirement in enumerate(selector.match_expressions or [] if selector else []):
        field = f"{where}.matchExpressions[{index}]"
        if requirement.operator not in SELECTOR_OPERATORS:
            supported = ", ".join(SELECTOR_OPERATORS)
            raise ValueError(f"{field}.operator: Unsupported value: {requirement.operator!r}: supported values: {supported}")
        if requirement.operator in ("In", "NotIn") and not requirement.values:
            raise ValueError(f"{field}.values: Required value: must be specified when operator is {requirement.operator}")
        if requirement.operator in ("Exists", "DoesNotExist") and requirement.values:
            raise ValueError(f"{field}.values: Forbidden: may not be specified when operator is {requirement.operator}")
