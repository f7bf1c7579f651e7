"""/metrics: Kueue's metrics under Kueue's names, labels and buckets, fed from the admission
state, and kfed's own metrics, all in one registry per process."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from manager.api import kueue
from manager.api.config import Configuration
from manager.api.meta import Condition
from manager.controllers.queue_metrics import (
    Finished,
    cluster_queue_samples,
    eviction_release,
    local_queue_samples,
    preemption_written,
    record_write,
)
from manager.controllers.run import process_metrics
from manager.engine.status import EventRecord
from manager.engine.workload import eviction_labels
from manager.engine.writes import StatusWrite
from manager.runtime.kueue_metrics import KUEUE_METRICS
from manager.runtime.metrics import ROLE_LEADER, LocalQueueRef, Metrics, Sample
from tests.unit.test_admission_state import T0, ready_state, run, stored, workload

# Kueue v0.19.2, pkg/metrics/metrics.go. Buckets: `generateExponentialBuckets(n)` is 1 followed
# by prometheus.ExponentialBuckets(2.5, 2, n-1); histograms without Buckets use client_golang's
# prometheus.DefBuckets.
DEF_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
EXP14 = [1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 5120, 10240]
EXP16 = [*EXP14, 20480, 40960]
CQ = ["cluster_queue", "priority_class", "replica_role"]
LQ = ["name", "namespace", "priority_class", "replica_role"]
RESOURCE = ["cohort", "cluster_queue", "flavor", "resource", "replica_role"]

KUEUE_V0_19_2: dict[str, tuple[str, list[str], list[float] | None]] = {
    # health
    "kueue_admission_attempts_total": ("counter", ["result", "replica_role"], None),  # AdmissionAttemptsTotal
    "kueue_admission_attempt_duration_seconds": ("histogram", ["result", "replica_role"], DEF_BUCKETS),  # admissionAttemptDuration
    "multikueue_workloads_dispatched_total": ("counter", ["cluster_queue", "cluster", "replica_role"], None),
    "multikueue_workloads_admitted_total": ("counter", ["cluster_queue", "cluster", "replica_role"], None),
    # clusterqueue
    "kueue_pending_workloads": ("gauge", ["cluster_queue", "status", "replica_role"], None),  # PendingWorkloads
    "kueue_finished_workloads": ("gauge", ["cluster_queue", "replica_role"], None),  # FinishedWorkloads
    "kueue_quota_reserved_workloads_total": ("counter", CQ, None),  # QuotaReservedWorkloadsTotal
    "kueue_finished_workloads_total": ("counter", CQ, None),  # FinishedWorkloadsTotal
    "kueue_quota_reserved_wait_time_seconds": ("histogram", CQ, EXP14),  # QuotaReservedWaitTime
    "kueue_admitted_workloads_total": ("counter", CQ, None),  # AdmittedWorkloadsTotal
    "kueue_admission_wait_time_seconds": ("histogram", CQ, EXP16),  # AdmissionWaitTime: 16 buckets
    "kueue_admission_checks_wait_time_seconds": ("histogram", CQ, EXP14),  # AdmissionChecksWaitTime
    "kueue_evicted_workloads_total": ("counter", ["cluster_queue", "reason", "underlying_cause", "priority_class", "replica_role"], None),
    "kueue_preempted_workloads_total": ("counter", ["preempting_cluster_queue", "reason", "replica_role"], None),
    "kueue_workload_eviction_latency_seconds": ("histogram", ["cluster_queue", "reason", "replica_role"], EXP14),
    "kueue_reserving_active_workloads": ("gauge", ["cluster_queue", "replica_role"], None),
    "kueue_admitted_active_workloads": ("gauge", ["cluster_queue", "replica_role"], None),
    "kueue_cluster_queue_status": ("gauge", ["cluster_queue", "status", "replica_role"], None),  # ClusterQueueByStatus
    "kueue_cluster_queue_info": ("gauge", ["cluster_queue", "parent_cohort", "root_cohort", "replica_role"], None),
    # localqueue (LocalQueueMetrics)
    "kueue_local_queue_pending_workloads": ("gauge", ["name", "namespace", "status", "replica_role"], None),
    "kueue_local_queue_finished_workloads": ("gauge", ["name", "namespace", "replica_role"], None),
    "kueue_local_queue_quota_reserved_workloads_total": ("counter", LQ, None),
    "kueue_local_queue_finished_workloads_total": ("counter", LQ, None),
    "kueue_local_queue_quota_reserved_wait_time_seconds": ("histogram", LQ, EXP14),
    "kueue_local_queue_admitted_workloads_total": ("counter", LQ, None),
    "kueue_local_queue_admission_wait_time_seconds": ("histogram", LQ, EXP14),  # 14, unlike the ClusterQueue's 16
    "kueue_local_queue_admission_checks_wait_time_seconds": ("histogram", LQ, EXP14),
    "kueue_local_queue_evicted_workloads_total": (
        "counter",
        ["name", "namespace", "reason", "underlying_cause", "priority_class", "replica_role"],
        None,
    ),
    "kueue_local_queue_reserving_active_workloads": ("gauge", ["name", "namespace", "replica_role"], None),
    "kueue_local_queue_admitted_active_workloads": ("gauge", ["name", "namespace", "replica_role"], None),
    "kueue_local_queue_status": ("gauge", ["name", "namespace", "active", "replica_role"], None),  # LocalQueueByStatus
    "kueue_local_queue_resource_reservation": ("gauge", ["name", "namespace", "flavor", "resource", "replica_role"], None),
    "kueue_local_queue_resource_usage": ("gauge", ["name", "namespace", "flavor", "resource", "replica_role"], None),
    # optional_clusterqueue_resources (enableClusterQueueResources)
    "kueue_cluster_queue_resource_reservation": ("gauge", RESOURCE, None),
    "kueue_cluster_queue_resource_usage": ("gauge", RESOURCE, None),
    "kueue_cluster_queue_nominal_quota": ("gauge", RESOURCE, None),
    "kueue_cluster_queue_borrowing_limit": ("gauge", RESOURCE, None),
    "kueue_cluster_queue_lending_limit": ("gauge", RESOURCE, None),
    "kueue_cluster_queue_weighted_share": ("gauge", ["cluster_queue", "cohort", "replica_role"], None),
    # cohort
    "kueue_cohort_info": ("gauge", ["cohort", "parent_cohort", "root_cohort", "replica_role"], None),
    "kueue_cohort_subtree_quota": ("gauge", ["cohort", "flavor", "resource", "replica_role"], None),
    "kueue_cohort_subtree_resource_reservations": ("gauge", ["cohort", "flavor", "resource", "replica_role"], None),
    "kueue_cohort_subtree_admitted_active_workloads": ("gauge", ["cohort", "replica_role"], None),
    "kueue_cohort_subtree_admitted_workloads_total": ("counter", ["cohort", "priority_class", "replica_role"], None),
    "kueue_cohort_weighted_share": ("gauge", ["cohort", "replica_role"], None),
}


def exposed(metrics: Metrics) -> dict[str, Any]:
    """Families by their exposed name (prometheus-client's parser drops a counter's `_total`,
    which would mix Kueue's kueue_finished_workloads gauge and kueue_finished_workloads_total)."""
    families = text_string_to_metric_families(metrics.render()[0].decode())
    return {(f.name + "_total" if f.type == "counter" else f.name): f for f in families}


def every_metric_once(metrics: Metrics) -> None:
    """One series of every Kueue metric, as kfed feeds them."""
    lq = LocalQueueRef("lq", "ns")
    metrics.admission_attempt(admitted=True, seconds=0.01)
    metrics.quota_reserved("cq", lq, "high", 3.0)
    metrics.admitted("cq", lq, "high", 3.0, 1.0, ["cohort"])
    metrics.evicted("cq", lq, "Preempted", "", "high")
    metrics.eviction_released("cq", "Preempted", 2.0)
    metrics.preempted("cq", "InClusterQueue")
    metrics.finished("cq", lq, "high")
    metrics.counter("kfed_multikueue_workloads_dispatched_total", "Dispatched.", ("cluster_queue", "cluster")).inc("cq", "w1")
    metrics.counter("kfed_multikueue_workloads_admitted_total", "Admitted.", ("cluster_queue", "cluster")).inc("cq", "w1")
    gauges = [spec for spec in KUEUE_METRICS if spec.kind == "gauge"]
    metrics.add_gauges(lambda: [Sample(spec.name, tuple("x" for _ in spec.labels[:-1]), 1.0) for spec in gauges])


def test_every_kueue_metric_has_kueues_name_type_labels_and_buckets() -> None:
    metrics = Metrics(cluster_queue_resources=True)
    every_metric_once(metrics)
    found = exposed(metrics)
    assert set(KUEUE_V0_19_2) <= set(found), sorted(set(KUEUE_V0_19_2) - set(found))
    for name, (kind, labels, buckets) in KUEUE_V0_19_2.items():
        family = found[name]
        assert family.type == kind, name
        for sample in family.samples:
            assert sorted(k for k in sample.labels if k != "le") == sorted(labels), (name, sample)
        if buckets is not None:
            bounds = [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")]
            assert bounds == [*buckets, math.inf], name


def test_the_help_text_is_kueues() -> None:
    metrics = Metrics()
    every_metric_once(metrics)
    found = exposed(metrics)
    # metrics.go: PendingWorkloads' Help (a raw string over several lines) and AdmittedWorkloadsTotal's.
    assert found["kueue_pending_workloads"].documentation.startswith("The number of pending workloads, per 'cluster_queue' and 'status'.\n")
    assert found["kueue_admitted_workloads_total"].documentation == "The total number of admitted workloads per 'cluster_queue'"


def test_optional_groups_follow_the_kueue_configuration() -> None:
    default = process_metrics(Configuration(), lambda lq: {})
    every_metric_once(default)
    names = set(exposed(default))
    assert "kueue_cluster_queue_resource_usage" not in names  # enableClusterQueueResources is off by default
    assert "kueue_local_queue_pending_workloads" in names  # LocalQueueMetrics is on by default
    config = Configuration.model_validate(
        {
            "metrics": {
                "enableClusterQueueResources": True,
                "localQueueMetrics": {"enable": True, "localQueueSelector": {"matchLabels": {"team": "a"}}},
            }
        }
    )
    labels = {"lq-a": {"team": "a"}, "lq-b": {"team": "b"}}
    selected = process_metrics(config, lambda lq: labels.get(lq.name))
    assert selected.cluster_queue_resources
    assert selected.exposes(LocalQueueRef("lq-a", "ns")) and not selected.exposes(LocalQueueRef("lq-b", "ns"))
    assert not selected.exposes(LocalQueueRef("missing", "ns"))
    # Kueue defaults only an absent section: a section without `enable` turns them off.
    off = process_metrics(Configuration.model_validate({"metrics": {"localQueueMetrics": {}}}), lambda lq: {})
    every_metric_once(off)
    assert not any(name.startswith("kueue_local_queue_") for name in exposed(off))


def test_each_process_has_its_own_registry() -> None:
    """Every component is handed its process's metrics (one way to register, no global): two
    processes in one interpreter count apart."""
    first, second = Metrics(), Metrics()
    for metrics, name in ((first, "a"), (second, "b")):
        metrics.counter("kfed_admitted_workloads_total", "Admitted.", ("cluster_queue",)).inc(name)
    assert first.value("kfed_admitted_workloads_total", {"cluster_queue": "a"}) == 1
    assert first.value("kfed_admitted_workloads_total", {"cluster_queue": "b"}) is None
    assert second.value("kfed_admitted_workloads_total", {"cluster_queue": "b"}) == 1


def test_kfed_metrics_render_in_prometheus_text_format() -> None:
    metrics = Metrics()
    metrics.counter("kfed_admitted_workloads_total", "Admitted.", ("cluster_queue",)).inc("cq-a")
    metrics.histogram("kfed_cycle_seconds", "Cycle.", buckets=(0.1, 1.0)).observe(0.5)
    by_verb = {"get": 3}
    metrics.counter_from("kfed_kube_requests_total", "Requests.", ("verb",), lambda: [((verb,), n) for verb, n in by_verb.items()])
    text = metrics.render()[0].decode()
    assert '# TYPE kfed_admitted_workloads_total counter\nkfed_admitted_workloads_total{cluster_queue="cq-a"} 1.0' in text
    assert 'kfed_cycle_seconds_bucket{le="0.1"} 0.0' in text and 'kfed_cycle_seconds_bucket{le="1.0"} 1.0' in text
    assert 'kfed_cycle_seconds_bucket{le="+Inf"} 1.0' in text and "kfed_cycle_seconds_count 1.0" in text
    assert '# TYPE kfed_kube_requests_total counter\nkfed_kube_requests_total{verb="get"} 3.0' in text
    by_verb["get"] = 5  # read again at the next scrape, from the object that counts
    assert 'kfed_kube_requests_total{verb="get"} 5.0' in metrics.render()[0].decode()
    with pytest.raises(ValueError, match="kfed_kube_requests_total"):
        metrics.counter_from("kfed_kube_requests_total", "Requests.", ("verb",), lambda: [])
    with pytest.raises(ValueError, match="kfed_kube_requests_total"):
        metrics.gauge("kfed_kube_requests_total", "Requests.", ("verb",))
    assert "_created" not in text  # as Kueue's registry: no creation-time series
    # The same name again is the same metric; another type under it is a bug.
    metrics.counter("kfed_admitted_workloads_total", "Admitted.", ("cluster_queue",)).inc("cq-a")
    assert metrics.value("kfed_admitted_workloads_total", {"cluster_queue": "cq-a"}) == 2
    with pytest.raises(ValueError, match="kfed_admitted_workloads_total"):
        metrics.gauge("kfed_admitted_workloads_total", "Admitted.", ("cluster_queue",))


def test_openmetrics_is_served_when_asked_for() -> None:
    metrics = Metrics()
    body, content_type = metrics.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text") and body.decode().endswith("# EOF\n")
    assert metrics.render()[1].startswith("text/plain")


def test_multikueue_dispatches_count_under_kfeds_and_kueues_names() -> None:
    metrics = Metrics()
    metrics.role = ROLE_LEADER
    metrics.counter("kfed_multikueue_workloads_dispatched_total", "Dispatched.", ("cluster_queue", "cluster")).inc("cq", "w1")
    assert metrics.value("kfed_multikueue_workloads_dispatched_total", {"cluster_queue": "cq", "cluster": "w1"}) == 1
    kueue_labels = {"cluster_queue": "cq", "cluster": "w1", "replica_role": "leader"}
    assert metrics.value("multikueue_workloads_dispatched_total", kueue_labels) == 1


# --- gauges from the admission state ---------------------------------------------------------------
def samples_by_name(samples: list[Sample]) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(s.name, s.labels): s.value for s in samples}


def test_cluster_queue_gauges_follow_the_admission_state() -> None:
    state = ready_state(cpu=2)
    for i, name in enumerate(("a", "b", "c")):
        state.upsert_workload(workload(name, cpu="1", at=i), T0)
    run(state)  # a and b fit, c waits
    got = samples_by_name(cluster_queue_samples(state, [Finished("cq", LocalQueueRef("lq", "ns"))], T0))
    assert got[("kueue_cluster_queue_status", ("cq", "active"))] == 1
    assert got[("kueue_cluster_queue_status", ("cq", "pending"))] == 0
    assert got[("kueue_reserving_active_workloads", ("cq",))] == 2
    assert got[("kueue_admitted_active_workloads", ("cq",))] == 2  # no admission checks: admitted at once
    assert got[("kueue_pending_workloads", ("cq", "active"))] + got[("kueue_pending_workloads", ("cq", "inadmissible"))] == 1
    assert got[("kueue_finished_workloads", ("cq",))] == 1
    assert got[("kueue_cluster_queue_info", ("cq", "", ""))] == 1
    # Resource gauges in Kueue's units: cores, not milli-cores; no limit is +Inf.
    assert got[("kueue_cluster_queue_nominal_quota", ("", "cq", "default", "cpu"))] == 2.0
    assert got[("kueue_cluster_queue_resource_reservation", ("", "cq", "default", "cpu"))] == 2.0
    assert got[("kueue_cluster_queue_resource_usage", ("", "cq", "default", "cpu"))] == 2.0
    assert got[("kueue_cluster_queue_borrowing_limit", ("", "cq", "default", "cpu"))] == math.inf
    assert got[("kueue_cluster_queue_lending_limit", ("", "cq", "default", "cpu"))] == math.inf


def test_a_stopped_cluster_queue_is_pending_and_its_workloads_inadmissible() -> None:
    state = ready_state(cpu=2, stopPolicy="Hold")
    state.upsert_workload(workload("a"), T0)
    run(state)
    got = samples_by_name(cluster_queue_samples(state, [], T0))
    assert got[("kueue_cluster_queue_status", ("cq", "pending"))] == 1
    assert got[("kueue_pending_workloads", ("cq", "active"))] == 0
    assert got[("kueue_pending_workloads", ("cq", "inadmissible"))] == 1
    lq = samples_by_name(local_queue_samples(state, [], T0, lambda ref: True))
    assert lq[("kueue_local_queue_pending_workloads", ("lq", "ns", "inadmissible"))] == 1
    assert lq[("kueue_local_queue_status", ("lq", "ns", "False"))] == 1


def test_local_queue_gauges_follow_the_admission_state_and_the_selector() -> None:
    state = ready_state(cpu=2)
    state.upsert_workload(workload("a", cpu="1500m"), T0)
    run(state)
    got = samples_by_name(local_queue_samples(state, [], T0, lambda ref: True))
    assert got[("kueue_local_queue_reserving_active_workloads", ("lq", "ns"))] == 1
    assert got[("kueue_local_queue_admitted_active_workloads", ("lq", "ns"))] == 1
    assert got[("kueue_local_queue_resource_usage", ("lq", "ns", "default", "cpu"))] == 1.5
    assert got[("kueue_local_queue_status", ("lq", "ns", "True"))] == 1
    assert local_queue_samples(state, [], T0, lambda ref: False) == []


# --- what a status write stands for ----------------------------------------------------------------
def admitted_write(name: str = "a") -> tuple[kueue.Workload, StatusWrite]:
    state = ready_state(cpu=2)
    original = workload(name)
    state.upsert_workload(original, T0)
    [write] = run(state)
    return original, write


def test_an_admission_counts_reservation_admission_and_waits() -> None:
    original, write = admitted_write()
    metrics = Metrics()
    record_write(metrics, write, original, lambda cq: ["root"], T0 + timedelta(seconds=3))
    cq = {"cluster_queue": "cq", "priority_class": "", "replica_role": "standalone"}
    lq = {"name": "lq", "namespace": "ns", "priority_class": "", "replica_role": "standalone"}
    assert metrics.value("kueue_quota_reserved_workloads_total", cq) == 1
    assert metrics.value("kueue_admitted_workloads_total", cq) == 1
    assert metrics.value("kueue_admission_wait_time_seconds_sum", cq) == 3.0  # since creation
    assert metrics.value("kueue_admission_wait_time_seconds_bucket", {**cq, "le": "2.5"}) == 0
    assert metrics.value("kueue_admission_wait_time_seconds_bucket", {**cq, "le": "5.0"}) == 1
    assert metrics.value("kueue_admission_checks_wait_time_seconds_count", cq) is None  # no checks
    assert metrics.value("kueue_local_queue_admitted_workloads_total", lq) == 1
    assert (
        metrics.value(
            "kueue_cohort_subtree_admitted_workloads_total", {"cohort": "root", "priority_class": "", "replica_role": "standalone"}
        )
        == 1
    )


def test_a_preemption_counts_once_its_eviction_is_written_under_the_preemptors_queue() -> None:
    original, write = admitted_write()
    admitted = stored(write, original, "2")
    at = (T0 + timedelta(seconds=10)).isoformat()
    status = write.status.model_copy(deep=True)
    status.conditions = [
        *(status.conditions or []),
        Condition.model_validate({"type": "Evicted", "status": "True", "reason": "Preempted", "message": "m", "lastTransitionTime": at}),
        Condition.model_validate(
            {"type": "Preempted", "status": "True", "reason": "InCohortReclamation", "message": "m", "lastTransitionTime": at}
        ),
    ]
    eviction = StatusWrite("ns/a", "ns", "a", "2", status, preempting_cq="cq-other")
    assert preemption_written(eviction, admitted) == ("cq", "InCohortReclamation")
    metrics = Metrics()
    labels = {"preempting_cluster_queue": "cq-other", "reason": "InCohortReclamation", "replica_role": "standalone"}
    record_write(metrics, eviction, admitted, lambda cq: [], T0)
    assert metrics.value("kueue_preempted_workloads_total", labels) == 1
    # A later write on the preempted Workload is not another preemption.
    again = StatusWrite("ns/a", "ns", "a", "3", status.model_copy(deep=True), preempting_cq="cq-other")
    assert preemption_written(again, stored(eviction, admitted, "3")) is None
    record_write(metrics, again, stored(eviction, admitted, "3"), lambda cq: [], T0)
    assert metrics.value("kueue_preempted_workloads_total", labels) == 1
    # A victim picked and admitted again before anything was written: no Preempted in its write.
    assert preemption_written(write, admitted) is None


def test_an_eviction_counts_its_reason_and_the_release_its_latency() -> None:
    original, write = admitted_write()
    admitted = stored(write, original, "2")
    evicted_at = T0 + timedelta(seconds=10)
    condition = {"type": "Evicted", "status": "True", "reason": "DeactivatedDueToAdmissionCheck", "message": "m"}
    eviction_status = write.status.model_copy(deep=True)
    eviction_status.conditions = [
        *(eviction_status.conditions or []),
        Condition.model_validate({**condition, "lastTransitionTime": evicted_at.isoformat()}),
    ]
    eviction = StatusWrite(
        "ns/a",
        "ns",
        "a",
        "2",
        eviction_status,
        events=[EventRecord("ns", "a", "uid-a", "Normal", "EvictedDueToDeactivatedDueToAdmissionCheck", "m")],
    )
    metrics = Metrics()
    record_write(metrics, eviction, admitted, lambda cq: [], evicted_at)
    labels = {
        "cluster_queue": "cq",
        "reason": "Deactivated",
        "underlying_cause": "AdmissionCheck",
        "priority_class": "",
        "replica_role": "standalone",
    }
    assert metrics.value("kueue_evicted_workloads_total", labels) == 1
    evicted = stored(eviction, admitted, "3")
    # A later write on the evicted Workload (its checks reset, say) is not another eviction.
    record_write(metrics, StatusWrite("ns/a", "ns", "a", "3", eviction_status.model_copy(deep=True)), evicted, lambda cq: [], evicted_at)
    assert metrics.value("kueue_evicted_workloads_total", labels) == 1
    # The job integration gives the quota back; Kueue times that from the eviction.
    released = evicted.model_copy(deep=True)
    assert released.status is not None
    released.status.admission = None
    assert eviction_release(evicted, released, evicted_at + timedelta(seconds=4)) == ("cq", "Deactivated", 4.0)
    assert eviction_release(admitted, evicted, evicted_at) is None  # evicted, quota still held
    assert eviction_release(released, released, evicted_at) is None  # nothing given back by this update


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("Preempted", ("Preempted", "")),
        ("ClusterQueueStopped", ("ClusterQueueStopped", "")),
        ("Deactivated", ("Deactivated", "")),
        ("DeactivatedDueToAdmissionCheck", ("Deactivated", "AdmissionCheck")),
        ("DeactivatedDueToRequeuingLimitExceeded", ("Deactivated", "RequeuingLimitExceeded")),
    ],
)
def test_eviction_reasons_split_as_kueue_labels_them(reason: str, expected: tuple[str, str]) -> None:
    assert eviction_labels(reason) == expected


@pytest.mark.parametrize(
    ("pods_ready", "cause"), [(None, "WaitForStart"), ("WaitForStart", "WaitForStart"), ("WaitForRecovery", "WaitForRecovery")]
)
def test_a_pods_ready_timeout_counts_whether_the_pods_never_started_or_did_not_recover(pods_ready: str | None, cause: str) -> None:
    original, write = admitted_write()
    admitted = stored(write, original, "2")
    status = write.status.model_copy(deep=True)
    conditions = [{"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout", "message": "m"}]
    if pods_ready is not None:
        conditions.append({"type": "PodsReady", "status": "False", "reason": pods_ready, "message": "m"})
    status.conditions = [
        *(status.conditions or []),
        *(Condition.model_validate({**cond, "lastTransitionTime": T0.isoformat()}) for cond in conditions),
    ]
    metrics = Metrics()
    record_write(metrics, StatusWrite("ns/a", "ns", "a", "2", status), admitted, lambda cq: [], T0)
    labels = {
        "cluster_queue": "cq",
        "reason": "PodsReadyTimeout",
        "underlying_cause": cause,
        "priority_class": "",
        "replica_role": "standalone",
    }
    assert metrics.value("kueue_evicted_workloads_total", labels) == 1
