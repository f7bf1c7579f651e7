"""config.kueue.x-k8s.io/v1beta2 Configuration: the parts kfed uses."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field

from manager.api import constants as c
from manager.api.meta import KubeModel, LabelSelector, OpenModel
from manager.api.quantity import Quantity

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration (`1m`, `15m`, `1h30m`, `500ms`, `0`), as Kueue's configuration takes."""
    value = text.strip()
    sign = -1.0 if value.startswith("-") else 1.0
    value = value.lstrip("+-")
    if value == "0":
        return timedelta(0)
    position, seconds = 0, 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != position:
            break
        seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if position != len(value) or not value:
        raise ValueError(f'invalid duration "{text}"')
    return timedelta(seconds=sign * seconds)


def _non_negative(value: str) -> str:
    if parse_duration(value) < timedelta(0):
        raise ValueError(f'must not be negative, got "{value}"')
    return value


# A Go duration field that may not be negative (Kueue's validation).
Duration = Annotated[str, AfterValidator(_non_negative)]


class ResourceTransformation(KubeModel):
    input: str
    strategy: Literal["Retain", "Replace"] | None = None
    outputs: dict[str, Quantity] | None = None
    multiply_by: str | None = None


class Resources(KubeModel):
    exclude_resource_prefixes: list[str] | None = None
    transformations: list[ResourceTransformation] | None = None


class FairSharingConfig(KubeModel):
    enable: bool | None = None
    preemption_strategies: list[Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]] | None = None


class AdmissionFairSharingConfig(KubeModel):
    usage_half_life_time: str | None = None
    usage_sampling_interval: str | None = None
    resource_weights: dict[str, float] | None = None


class IncrementalDispatcherConfig(KubeModel):
    step_size: int | None = Field(default=None, ge=1)


class CapacityAwareDispatcherConfig(KubeModel):
    """kfed's own: how long a worker has to admit the one copy before the next worker is tried."""

    admission_timeout: Duration | None = None


class QueuePropagationConfig(KubeModel):
    """kfed's own: which of the manager's namespaces propagate their queues to the workers, and
    which worker namespaces never receive them (`manager.multikueue.rules.queues`)."""

    # Unset: every namespace but kube-* and kfed-system. Set: the namespaces whose labels match.
    namespace_selector: LabelSelector | None = None
    # Never propagated to, beside kube-* and kfed-system: exact names, or prefixes ending in `*`.
    denied_namespaces: list[str] | None = None


class MultiKueueConfiguration(KubeModel):
    gc_interval: Duration | None = None
    origin: str | None = Field(default=None, max_length=63)
    worker_lost_timeout: Duration | None = None
    dispatcher_name: str | None = None
    incremental_dispatcher_config: IncrementalDispatcherConfig | None = None
    capacity_aware_dispatcher_config: CapacityAwareDispatcherConfig | None = None
    # kfed's own: keep on each worker the namespaces and LocalQueues the dispatched Workloads need
    # (`manager.multikueue.rules.queues`). Off (Kueue's rule: the administrator mirrors them).
    propagate_queues: bool | None = None
    queue_propagation: QueuePropagationConfig | None = None

    @property
    def effective_origin(self) -> str:
        return self.origin or c.DEFAULT_MULTIKUEUE_ORIGIN

    @property
    def effective_gc_interval(self) -> timedelta:
        return parse_duration(self.gc_interval) if self.gc_interval is not None else timedelta(minutes=1)

    @property
    def effective_worker_lost_timeout(self) -> timedelta:
        return parse_duration(self.worker_lost_timeout) if self.worker_lost_timeout else timedelta(minutes=15)

    @property
    def effective_dispatcher_name(self) -> str:
        return self.dispatcher_name or c.DISPATCHER_ALL_AT_ONCE

    @property
    def effective_step_size(self) -> int:
        config = self.incremental_dispatcher_config
        return config.step_size if config and config.step_size else 3


class RequeuingStrategy(KubeModel):
    """`waitForPodsReady.requeuingStrategy`: how a workload evicted for its pods comes back."""

    timestamp: Literal["Eviction", "Creation"] | None = None
    backoff_limit_count: int | None = Field(default=None, ge=0)
    backoff_base_seconds: int | None = Field(default=None, ge=0)
    backoff_max_seconds: int | None = Field(default=None, ge=0)


class WaitForPodsReady(KubeModel):
    """`waitForPodsReady`: Kueue's all-or-nothing admission. v1beta2 enables it by the section's
    presence; v1beta1's `enable` is read too (false turns it off)."""

    enable: bool | None = None
    timeout: Duration | None = None
    block_admission: bool | None = None
    requeuing_strategy: RequeuingStrategy | None = None
    recovery_timeout: Duration | None = None

    @property
    def enabled(self) -> bool:
        return self.enable is not False

    @property
    def effective_timeout(self) -> timedelta:
        # Kueue's v1beta2 default (a zero timeout is defaulted too).
        timeout = parse_duration(self.timeout) if self.timeout else timedelta(0)
        return timeout if timeout > timedelta(0) else timedelta(minutes=30)

    @property
    def effective_recovery_timeout(self) -> timedelta | None:
        """The recovery timeout, None when disabled ("0s"); it defaults to the timeout."""
        if self.recovery_timeout is None:
            return self.effective_timeout
        value = parse_duration(self.recovery_timeout)
        return value if value > timedelta(0) else None

    @property
    def effective_block_admission(self) -> bool:
        return bool(self.block_admission)

    @property
    def requeue_by_creation(self) -> bool:
        strategy = self.requeuing_strategy
        return strategy is not None and strategy.timestamp == "Creation"

    @property
    def backoff_limit_count(self) -> int | None:
        return self.requeuing_strategy.backoff_limit_count if self.requeuing_strategy else None

    @property
    def backoff_base_seconds(self) -> int:
        # Same as Kueue's defaulting (cmp.Or): an unset or zero base is 60 s.
        strategy = self.requeuing_strategy
        return (strategy.backoff_base_seconds if strategy else None) or 60

    @property
    def backoff_max_seconds(self) -> int:
        strategy = self.requeuing_strategy
        return (strategy.backoff_max_seconds if strategy else None) or 3600


class ClientConnection(KubeModel):
    qps: float | None = None
    burst: int | None = None


class LocalQueueMetrics(KubeModel):
    # Kueue defaults only an absent section to enabled: a section without `enable` turns them off.
    enable: bool = False
    local_queue_selector: LabelSelector | None = None


class ControllerMetrics(KubeModel):
    """`metrics`: which optional Kueue metrics are served (the bind address is a flag)."""

    bind_address: str | None = None
    enable_cluster_queue_resources: bool = False
    local_queue_metrics: LocalQueueMetrics | None = None


# Kueue's integrations.frameworks names (its configuration API); kfed implements the ones its
# job-integration registry (`manager.engine.integrations.registry`) lists.
BATCH_JOB_FRAMEWORK = "batch/job"
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
TRAINJOB_FRAMEWORK = "trainer.kubeflow.org/trainjob"
DEFAULT_FRAMEWORKS = (BATCH_JOB_FRAMEWORK,)


class Integrations(KubeModel):
    """`integrations`: which job kinds Kueue manages (by framework name)."""

    frameworks: list[str] | None = None

    @property
    def effective_frameworks(self) -> list[str]:
        # Same as Kueue's defaulting: an empty list means batch/job alone.
        return list(self.frameworks) if self.frameworks else list(DEFAULT_FRAMEWORKS)


# Kueue v0.19.2's defaults (pkg/features/kube_features.go) for the gates that change what kfed does.
UNADMITTED_WORKLOADS_OBSERVABILITY = "UnadmittedWorkloadsObservability"
MULTIKUEUE_MANAGER_QUOTA_AUTOMATION = "MultiKueueManagerQuotaAutomation"
MULTIKUEUE_ORCHESTRATED_PREEMPTION = "MultiKueueOrchestratedPreemption"
CONCURRENT_ADMISSION = "ConcurrentAdmission"
FEATURE_DEFAULTS: dict[str, bool] = {
    # Off: a workload parked with an equivalent one that failed keeps its condition as it was;
    # on, the workload controller writes "Bypassed scheduling evaluation ..." on it.
    UNADMITTED_WORKLOADS_OBSERVABILITY: False,
    # Off (alpha since Kueue 0.18): a MultiKueueConfig's quotaManagement: Automated is not acted on.
    MULTIKUEUE_MANAGER_QUOTA_AUTOMATION: False,
    # Off (alpha since Kueue 0.17): the manager gates its copies and opens one worker's gate at a
    # time; a worker with it (or ConcurrentAdmission, alpha since 0.18) on honours closed gates.
    MULTIKUEUE_ORCHESTRATED_PREEMPTION: False,
    CONCURRENT_ADMISSION: False,
}


def parse_feature_gates(text: str) -> dict[str, bool]:
    """Kueue's `--feature-gates` flag: `Name=true,Other=false`; a malformed pair is one line naming it."""
    gates: dict[str, bool] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or value.strip().lower() not in ("true", "false"):
            raise ValueError(f'--feature-gates: "{pair}": expected Name=true or Name=false')
        gates[name.strip()] = value.strip().lower() == "true"
    return gates


class Configuration(OpenModel):
    """Kueue's component configuration. Not a stored object, so no metadata is required."""

    KIND: ClassVar[str] = "Configuration"

    api_version: str = f"{c.CONFIG_GROUP}/v1beta2"
    kind: str = "Configuration"
    namespace: str | None = None
    client_connection: ClientConnection | None = None
    fair_sharing: FairSharingConfig | None = None
    admission_fair_sharing: AdmissionFairSharingConfig | None = None
    resources: Resources | None = None
    multi_kueue: MultiKueueConfiguration | None = None
    metrics: ControllerMetrics | None = None
    integrations: Integrations | None = None
    wait_for_pods_ready: WaitForPodsReady | None = None
    feature_gates: dict[str, bool] | None = None

    def feature_enabled(self, gate: str) -> bool:
        """A Kueue feature gate as `featureGates` sets it, else as Kueue v0.19.2 defaults it
        (FEATURE_DEFAULTS holds the gates whose behaviour kfed follows)."""
        if self.feature_gates and gate in self.feature_gates:
            return self.feature_gates[gate]
        return FEATURE_DEFAULTS[gate]

    @property
    def honours_preemption_gates(self) -> bool:
        """Kueue's scheduler leaves a Workload with a closed preemption gate unpreempting only
        with one of these gates on; otherwise the gates are ignored."""
        return self.feature_enabled(MULTIKUEUE_ORCHESTRATED_PREEMPTION) or self.feature_enabled(CONCURRENT_ADMISSION)

    @property
    def effective_namespace(self) -> str:
        return self.namespace or "kfed-system"

    @property
    def effective_frameworks(self) -> list[str]:
        return (self.integrations or Integrations()).effective_frameworks

    @property
    def pods_ready(self) -> WaitForPodsReady | None:
        """waitForPodsReady when it is on, else None. kfed turns it on only when the section is
        given (Kueue 0.19's v1beta2 defaults also turn it on with no section at all). A v1beta1
        file keeps v1beta1's rules: on only with `enable: true`, a 5m timeout, and
        blockAdmission on unless set."""
        section = self.wait_for_pods_ready
        if section is None or not section.enabled:
            return None
        if self.api_version.endswith("/v1beta1"):
            if section.enable is not True:
                return None
            block = section.block_admission if section.block_admission is not None else True
            return section.model_copy(update={"timeout": section.timeout or "5m", "block_admission": block})
        return section
