"""Kueue's Prometheus metrics as Kueue v0.19.2 defines them (pkg/metrics/metrics.go,
InitMetricVectors): name, type, label names, help text and buckets. Existing Kueue dashboards
and alerts select on exactly these, so they are data here, not code: `manager.runtime.metrics`
builds the collectors from this table. The trailing comment names Kueue's Go variable.

The groups say when a metric is served, as in Kueue:
- HEALTH, CLUSTER_QUEUE, COHORT: always.
- LOCAL_QUEUE: Kueue's LocalQueueMetrics feature (beta, on by default since v0.17) and the
  Configuration's `metrics.localQueueMetrics` (enable, localQueueSelector).
- CLUSTER_QUEUE_RESOURCES: the Configuration's `metrics.enableClusterQueueResources` (off by default).

Not served, because kfed has no such fact (or not yet): kueue_build_info (a Go build), waitForPodsReady's
kueue_ready_wait_time_seconds, kueue_admitted_until_ready_wait_time_seconds and
kueue_pods_ready_to_evicted_time_seconds (and their local_queue_ forms), Pod integration's
kueue_pod_scheduling_gate_removal_seconds, elastic jobs' kueue_replaced_workload_slices_total,
kueue_workload_creation_latency_seconds (an alpha gate), the UnadmittedWorkloadsObservability
gate's kueue_unadmitted_workloads, kueue_evicted_workloads_once_total (needs
status.schedulingStats), kueue_admission_cycle_preemption_skips,
kueue_cluster_queue_resource_pending and kueue_local_queue_admission_fair_sharing_usage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

COUNTER: Literal["counter"] = "counter"
GAUGE: Literal["gauge"] = "gauge"
HISTOGRAM: Literal["histogram"] = "histogram"

HEALTH = "health"
CLUSTER_QUEUE = "clusterqueue"
LOCAL_QUEUE = "localqueue"
CLUSTER_QUEUE_RESOURCES = "optional_clusterqueue_resources"
COHORT = "cohort"

# client_golang's prometheus.DefBuckets: Kueue's histograms without explicit buckets use them
# (prometheus-client's own default differs: it adds 0.075, 0.75 and 7.5).
GO_DEFAULT_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """client_golang's prometheus.ExponentialBuckets."""
    return tuple(start * factor**i for i in range(count))


def kueue_wait_buckets(count: int) -> tuple[float, ...]:
    """Kueue's generateExponentialBuckets: 1, then 2.5 doubling (count bounds in all)."""
    return (1.0, *exponential_buckets(2.5, 2, count - 1))


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: Literal["counter", "gauge", "histogram"]
    labels: tuple[str, ...]
    help: str
    group: str
    buckets: tuple[float, ...] = ()


# The labels of Kueue's per-priority workload metrics, per ClusterQueue and per LocalQueue.
_CQ_PRIORITY = ("cluster_queue", "priority_class", "replica_role")
_LQ_PRIORITY = ("name", "namespace", "priority_class", "replica_role")


def _wait_time(name: str, labels: tuple[str, ...], help: str, group: str, *, buckets: int = 14) -> MetricSpec:
    """One of Kueue's wait-time histograms, on its exponential wait buckets."""
    return MetricSpec(name, HISTOGRAM, labels, help, group, buckets=kueue_wait_buckets(buckets))


# Help texts Kueue repeats across metrics, kept once here.
_EVICTION_REASON_HELP = (
    "The label 'reason' can have the following values:\n"
    '- "Preempted" means that the workload was evicted in order to free resources for a workload with a '
    "higher priority or reclamation of nominal quota.\n"
    '- "PodsReadyTimeout" means that the eviction took place due to a PodsReady timeout.\n'
    '- "AdmissionCheck" means that the workload was evicted because at least one admission check '
    "transitioned to False.\n"
    '- "ClusterQueueStopped" means that the workload was evicted because the ClusterQueue is stopped.\n'
    '- "LocalQueueStopped" means that the workload was evicted because the LocalQueue is stopped.\n'
    '- "NodeFailures" means that the workload was evicted due to node failures when using '
    "TopologyAwareScheduling.\n"
    '- "Deactivated" means that the workload was evicted because spec.active is set to false.'
)
# Both eviction counters end with the description of their labels.
_EVICTION_LABELS_HELP = (
    _EVICTION_REASON_HELP + "\n"
    "The label 'underlying_cause' can have the following values:\n"
    "- \"\" means that the value in 'reason' label is the root cause for eviction.\n"
    '- "AdmissionCheck" means that the workload was evicted by Kueue due to a rejected admission check.\n'
    '- "MaximumExecutionTimeExceeded" means that the workload was evicted by Kueue due to maximum '
    "execution time exceeded.\n"
    '- "RequeuingLimitExceeded" means that the workload was evicted by Kueue due to requeuing limit '
    "exceeded."
)
_ADMISSION_RESULT_HELP = (
    "The label 'result' can have the following values:\n"
    "- 'success' means that at least one workload was admitted.,\n"
    "- 'inadmissible' means that no workload was admitted."
)
_PENDING_STATUS_HELP = (
    "'status' can have the following values:\n"
    '- "active" means that the workloads are in the admission queue.\n'
    '- "inadmissible" means there was a failed admission attempt for these workloads and they won\'t be '
    "retried until cluster conditions, which could make this workload admissible, change"
)


def _weighted_share_help(owner: str, cohort: str) -> str:
    """Kueue's help for kueue_cluster_queue_weighted_share and kueue_cohort_weighted_share."""
    return (
        "Reports a value that representing the maximum of the ratios of usage above nominal\n"
        f"quota to the lendable resources in the {cohort}, among all the resources provided by\n"
        f"the {owner}, and divided by the weight.\n"
        f"If zero, it means that the usage of the {owner} is below the nominal quota.\n"
        f"If the {owner} has a weight of zero and is borrowing, this will return NaN."
    )


KUEUE_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "kueue_admission_attempts_total",
        COUNTER,
        ("result", "replica_role"),
        "The total number of attempts to admit workloads.\nEach admission attempt might try to admit more than one workload.\n"
        + _ADMISSION_RESULT_HELP,
        HEALTH,
    ),  # AdmissionAttemptsTotal
    MetricSpec(
        "kueue_admission_attempt_duration_seconds",
        HISTOGRAM,
        ("result", "replica_role"),
        "The latency of an admission attempt.\n" + _ADMISSION_RESULT_HELP,
        HEALTH,
        buckets=GO_DEFAULT_BUCKETS,
    ),  # admissionAttemptDuration
    MetricSpec(
        "multikueue_workloads_dispatched_total",
        COUNTER,
        ("cluster_queue", "cluster", "replica_role"),
        ("The total number of remote workloads created by the MultiKueue manager on a worker cluster, per 'cluster_queue' and 'cluster'."),
        HEALTH,
    ),  # MultiKueueWorkloadsDispatchedTotal
    MetricSpec(
        "multikueue_workloads_admitted_total",
        COUNTER,
        ("cluster_queue", "cluster", "replica_role"),
        (
            "The total number of remote workload admissions on a worker cluster, per 'cluster_queue' and "
            "'cluster'. A workload may be counted more than once if it is evicted and re-admitted."
        ),
        HEALTH,
    ),  # MultiKueueWorkloadsAdmittedTotal
    MetricSpec(
        "kueue_pending_workloads",
        GAUGE,
        ("cluster_queue", "status", "replica_role"),
        "The number of pending workloads, per 'cluster_queue' and 'status'.\n" + _PENDING_STATUS_HELP,
        CLUSTER_QUEUE,
    ),  # PendingWorkloads
    MetricSpec(
        "kueue_finished_workloads",
        GAUGE,
        ("cluster_queue", "replica_role"),
        "The number of finished workloads per 'cluster_queue'.",
        CLUSTER_QUEUE,
    ),  # FinishedWorkloads
    MetricSpec(
        "kueue_quota_reserved_workloads_total",
        COUNTER,
        _CQ_PRIORITY,
        "The total number of quota reserved workloads per 'cluster_queue'",
        CLUSTER_QUEUE,
    ),  # QuotaReservedWorkloadsTotal
    MetricSpec(
        "kueue_finished_workloads_total",
        COUNTER,
        _CQ_PRIORITY,
        "The total number of finished workloads per 'cluster_queue'",
        CLUSTER_QUEUE,
    ),  # FinishedWorkloadsTotal
    _wait_time(
        "kueue_quota_reserved_wait_time_seconds",
        _CQ_PRIORITY,
        "The time between a workload was created or requeued until it got quota reservation, per 'cluster_queue'",
        CLUSTER_QUEUE,
    ),  # QuotaReservedWaitTime
    MetricSpec(
        "kueue_admitted_workloads_total",
        COUNTER,
        _CQ_PRIORITY,
        "The total number of admitted workloads per 'cluster_queue'",
        CLUSTER_QUEUE,
    ),  # AdmittedWorkloadsTotal
    _wait_time(
        "kueue_admission_wait_time_seconds",
        _CQ_PRIORITY,
        "The time between a workload was created or requeued until admission, per 'cluster_queue'",
        CLUSTER_QUEUE,
        buckets=16,
    ),  # AdmissionWaitTime
    _wait_time(
        "kueue_admission_checks_wait_time_seconds",
        _CQ_PRIORITY,
        "The time from when a workload got the quota reservation until admission, per 'cluster_queue'",
        CLUSTER_QUEUE,
    ),  # AdmissionChecksWaitTime
    MetricSpec(
        "kueue_evicted_workloads_total",
        COUNTER,
        ("cluster_queue", "reason", "underlying_cause", "priority_class", "replica_role"),
        ("The number of evicted workloads per 'cluster_queue',\n" + _EVICTION_LABELS_HELP),
        CLUSTER_QUEUE,
    ),  # EvictedWorkloadsTotal
    MetricSpec(
        "kueue_preempted_workloads_total",
        COUNTER,
        ("preempting_cluster_queue", "reason", "replica_role"),
        (
            "The number of preempted workloads per 'preempting_cluster_queue',\n"
            "The label 'reason' can have the following values:\n"
            '- "InClusterQueue" means that the workload was preempted by a workload in the same ClusterQueue.\n'
            '- "InCohortReclamation" means that the workload was preempted by a workload in the same cohort due '
            "to reclamation of nominal quota.\n"
            '- "InCohortFairSharing" means that the workload was preempted by a workload in the same cohort Fair '
            "Sharing.\n"
            '- "InCohortReclaimWhileBorrowing" means that the workload was preempted by a workload in the same '
            "cohort due to reclamation of nominal quota while borrowing."
        ),
        CLUSTER_QUEUE,
    ),  # PreemptedWorkloadsTotal
    MetricSpec(
        "kueue_workload_eviction_latency_seconds",
        HISTOGRAM,
        ("cluster_queue", "reason", "replica_role"),
        (
            "The time from workload eviction (WorkloadEvicted condition becomes True) until the workload returns "
            "to Pending (quota released).\n"
            "Observed on status transition from admitted or quota-reserved to pending while WorkloadEvicted "
            "remains True.\n"
            "Each matching update observes one latency sample (seconds) into this histogram; Prometheus "
            "aggregates samples across workloads.\n"
            "Uses the eviction condition LastTransitionTime on the updated object as the start time; "
            "cluster_queue is taken from status.admission.cluster_queue on the pre-update object when set and "
            "non-empty (otherwise no sample is recorded for that update).\n" + _EVICTION_REASON_HELP
        ),
        CLUSTER_QUEUE,
        buckets=kueue_wait_buckets(14),
    ),  # WorkloadEvictionLatencySeconds
    MetricSpec(
        "kueue_reserving_active_workloads",
        GAUGE,
        ("cluster_queue", "replica_role"),
        "The number of Workloads that are reserving quota, per 'cluster_queue'",
        CLUSTER_QUEUE,
    ),  # ReservingActiveWorkloads
    MetricSpec(
        "kueue_admitted_active_workloads",
        GAUGE,
        ("cluster_queue", "replica_role"),
        "The number of admitted Workloads that are active, per 'cluster_queue'",
        CLUSTER_QUEUE,
    ),  # AdmittedActiveWorkloads
    MetricSpec(
        "kueue_cluster_queue_status",
        GAUGE,
        ("cluster_queue", "status", "replica_role"),
        (
            "Reports 'cluster_queue' with its 'status' (with possible values 'pending', 'active' or "
            "'terminated').\n"
            "For a ClusterQueue, the metric only reports a value of 1 for one of the statuses."
        ),
        CLUSTER_QUEUE,
    ),  # ClusterQueueByStatus
    MetricSpec(
        "kueue_cluster_queue_info",
        GAUGE,
        ("cluster_queue", "parent_cohort", "root_cohort", "replica_role"),
        "Reports ClusterQueue hierarchy information. The metric has value 1 and can be joined using labels.",
        CLUSTER_QUEUE,
    ),  # ClusterQueueInfo
    MetricSpec(
        "kueue_local_queue_pending_workloads",
        GAUGE,
        ("name", "namespace", "status", "replica_role"),
        "The number of pending workloads, per 'local_queue' and 'status'.\n" + _PENDING_STATUS_HELP,
        LOCAL_QUEUE,
    ),  # LocalQueuePendingWorkloads
    MetricSpec(
        "kueue_local_queue_finished_workloads",
        GAUGE,
        ("name", "namespace", "replica_role"),
        "The number of finished workloads, per 'local_queue'.",
        LOCAL_QUEUE,
    ),  # LocalQueueFinishedWorkloads
    MetricSpec(
        "kueue_local_queue_quota_reserved_workloads_total",
        COUNTER,
        _LQ_PRIORITY,
        "The total number of quota reserved workloads per 'local_queue'",
        LOCAL_QUEUE,
    ),  # LocalQueueQuotaReservedWorkloadsTotal
    MetricSpec(
        "kueue_local_queue_finished_workloads_total",
        COUNTER,
        _LQ_PRIORITY,
        "The total number of finished workloads per 'local_queue'",
        LOCAL_QUEUE,
    ),  # LocalQueueFinishedWorkloadsTotal
    _wait_time(
        "kueue_local_queue_quota_reserved_wait_time_seconds",
        _LQ_PRIORITY,
        "The time between a workload was created or requeued until it got quota reservation, per 'local_queue'",
        LOCAL_QUEUE,
    ),  # LocalQueueQuotaReservedWaitTime
    MetricSpec(
        "kueue_local_queue_admitted_workloads_total",
        COUNTER,
        _LQ_PRIORITY,
        "The total number of admitted workloads per 'local_queue'",
        LOCAL_QUEUE,
    ),  # LocalQueueAdmittedWorkloadsTotal
    _wait_time(
        "kueue_local_queue_admission_wait_time_seconds",
        _LQ_PRIORITY,
        "The time between a workload was created or requeued until admission, per 'local_queue'",
        LOCAL_QUEUE,
    ),  # LocalQueueAdmissionWaitTime
    _wait_time(
        "kueue_local_queue_admission_checks_wait_time_seconds",
        _LQ_PRIORITY,
        "The time from when a workload got the quota reservation until admission, per 'local_queue'",
        LOCAL_QUEUE,
    ),  # LocalQueueAdmissionChecksWaitTime
    MetricSpec(
        "kueue_local_queue_evicted_workloads_total",
        COUNTER,
        ("name", "namespace", "reason", "underlying_cause", "priority_class", "replica_role"),
        ("The number of evicted workloads per 'local_queue',\n" + _EVICTION_LABELS_HELP),
        LOCAL_QUEUE,
    ),  # LocalQueueEvictedWorkloadsTotal
    MetricSpec(
        "kueue_local_queue_reserving_active_workloads",
        GAUGE,
        ("name", "namespace", "replica_role"),
        "The number of Workloads that are reserving quota, per 'localQueue'",
        LOCAL_QUEUE,
    ),  # LocalQueueReservingActiveWorkloads
    MetricSpec(
        "kueue_local_queue_admitted_active_workloads",
        GAUGE,
        ("name", "namespace", "replica_role"),
        "The number of admitted Workloads that are active, per 'localQueue'",
        LOCAL_QUEUE,
    ),  # LocalQueueAdmittedActiveWorkloads
    MetricSpec(
        "kueue_local_queue_status",
        GAUGE,
        ("name", "namespace", "active", "replica_role"),
        (
            "Reports 'localQueue' with its 'active' status (with possible values 'True', 'False', or 'Unknown').\n"
            "For a LocalQueue, the metric only reports a value of 1 for one of the statuses."
        ),
        LOCAL_QUEUE,
    ),  # LocalQueueByStatus
    MetricSpec(
        "kueue_local_queue_resource_reservation",
        GAUGE,
        ("name", "namespace", "flavor", "resource", "replica_role"),
        "Reports the localQueue's total resource reservation within all the flavors",
        LOCAL_QUEUE,
    ),  # LocalQueueResourceReservations
    MetricSpec(
        "kueue_local_queue_resource_usage",
        GAUGE,
        ("name", "namespace", "flavor", "resource", "replica_role"),
        "Reports the localQueue's total resource usage within all the flavors",
        LOCAL_QUEUE,
    ),  # LocalQueueResourceUsage
    MetricSpec(
        "kueue_cluster_queue_resource_reservation",
        GAUGE,
        ("cohort", "cluster_queue", "flavor", "resource", "replica_role"),
        "Reports the cluster_queue's total resource reservation within all the flavors",
        CLUSTER_QUEUE_RESOURCES,
    ),  # ClusterQueueResourceReservations
    MetricSpec(
        "kueue_cluster_queue_resource_usage",
        GAUGE,
        ("cohort", "cluster_queue", "flavor", "resource", "replica_role"),
        "Reports the cluster_queue's total resource usage within all the flavors",
        CLUSTER_QUEUE_RESOURCES,
    ),  # ClusterQueueResourceUsage
    MetricSpec(
        "kueue_cluster_queue_nominal_quota",
        GAUGE,
        ("cohort", "cluster_queue", "flavor", "resource", "replica_role"),
        "Reports the cluster_queue's resource nominal quota within all the flavors",
        CLUSTER_QUEUE_RESOURCES,
    ),  # ClusterQueueResourceNominalQuota
    MetricSpec(
        "kueue_cluster_queue_borrowing_limit",
        GAUGE,
        ("cohort", "cluster_queue", "flavor", "resource", "replica_role"),
        (
            "Reports the cluster_queue's resource borrowing limit within all the flavors. If borrowingLimit is "
            "unset, this metric reports +Inf."
        ),
        CLUSTER_QUEUE_RESOURCES,
    ),  # ClusterQueueResourceBorrowingLimit
    MetricSpec(
        "kueue_cluster_queue_lending_limit",
        GAUGE,
        ("cohort", "cluster_queue", "flavor", "resource", "replica_role"),
        ("Reports the cluster_queue's resource lending limit within all the flavors. If lendingLimit is unset, this metric reports +Inf."),
        CLUSTER_QUEUE_RESOURCES,
    ),  # ClusterQueueResourceLendingLimit
    MetricSpec(
        "kueue_cluster_queue_weighted_share",
        GAUGE,
        ("cluster_queue", "cohort", "replica_role"),
        _weighted_share_help("ClusterQueue", "cohort"),
        CLUSTER_QUEUE_RESOURCES,
    ),  # ClusterQueueWeightedShare
    MetricSpec(
        "kueue_cohort_info",
        GAUGE,
        ("cohort", "parent_cohort", "root_cohort", "replica_role"),
        "Reports Cohort hierarchy information. The metric has value 1 and can be joined using labels.",
        COHORT,
    ),  # CohortInfo
    MetricSpec(
        "kueue_cohort_subtree_quota",
        GAUGE,
        ("cohort", "flavor", "resource", "replica_role"),
        ("Reports the cohort's nominal quota aggregated within the cohort's subtree. The values are reported per resource and flavor"),
        COHORT,
    ),  # CohortSubtreeQuota
    MetricSpec(
        "kueue_cohort_subtree_resource_reservations",
        GAUGE,
        ("cohort", "flavor", "resource", "replica_role"),
        (
            "Reports the cohort's resource reservations aggregated within the cohort's subtree. The values are "
            "reported per resource and flavor"
        ),
        COHORT,
    ),  # CohortSubtreeResourceReservations
    MetricSpec(
        "kueue_cohort_subtree_admitted_active_workloads",
        GAUGE,
        ("cohort", "replica_role"),
        "The number of admitted Workloads that are active, per cohort's subtree",
        COHORT,
    ),  # CohortSubtreeAdmittedActiveWorkloads
    MetricSpec(
        "kueue_cohort_subtree_admitted_workloads_total",
        COUNTER,
        ("cohort", "priority_class", "replica_role"),
        "The total number of admitted workloads per cohort's subtree",
        COHORT,
    ),  # CohortSubtreeAdmittedWorkloadsTotal
    MetricSpec(
        "kueue_cohort_weighted_share",
        GAUGE,
        ("cohort", "replica_role"),
        _weighted_share_help("Cohort", "Cohort"),
        COHORT,
    ),  # CohortWeightedShare
)

KUEUE_BY_NAME = {spec.name: spec for spec in KUEUE_METRICS}
