"""`/metrics` of a running `python -m manager`: Kueue's metrics, under Kueue's names and labels,
after real admissions and evictions on the harness apiserver."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from tests.harness import Provider, eventually
from tests.integration.controllers import ControllerProcess, crd_cluster, running_manager
from tests.integration.test_controllers import PARKED, job_manifest, make_queues, workload_of

# The Kueue Configuration a user would pass with --config: the optional ClusterQueue resource
# metrics on (Kueue's `metrics.enableClusterQueueResources`).
CONFIG = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
metrics:
  enableClusterQueueResources: true
"""


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "met", jobs=True)


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    directory = tmp_path_factory.mktemp("metrics-manager")
    config = Path(directory) / "config.yaml"
    config.write_text(CONFIG)
    with running_manager(cluster, directory, extra=[f"--config={config}"]) as process:
        yield process


def scrape(manager: ControllerProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    status, body = manager.get("/metrics")
    assert status == 200, body
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], metric: str, /, **labels: str) -> float | None:
    """The one sample of `metric` whose labels include `labels`."""
    found = [v for (n, have), v in samples.items() if n == metric and set(labels.items()) <= have]
    assert len(found) <= 1, (metric, labels, found)
    return found[0] if found else None


async def test_an_admission_and_an_eviction_show_under_kueues_metric_names(manager: ControllerProcess, kube: KubeClient) -> None:
    suffix = uuid.uuid4().hex[:6]
    ns, cq, flavor = f"met-{suffix}", f"met-cq-{suffix}", f"parked-{suffix}"
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=flavor, node_labels=PARKED)
    await kube.create(Job, job_manifest("train", ns, cpu="1500m"))

    async def admitted() -> kueue.Workload | None:
        wl = await workload_of(kube, await kube.get(Job, "train", namespace=ns))
        conditions = wl.status.conditions if wl is not None and wl.status else None
        return wl if any(cond.type == c.ADMITTED and cond.status == "True" for cond in conditions or []) else None

    await eventually(admitted, timeout=60, what="the Job's Workload admitted")

    def counted() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
        samples = scrape(manager)
        return samples if value(samples, "kueue_admitted_workloads_total", cluster_queue=cq) == 1 else None

    samples = await eventually(counted, timeout=30, what=f'kueue_admitted_workloads_total{{cluster_queue="{cq}"}} 1')
    role = {"replica_role": "leader"}
    assert value(samples, "kueue_admitted_workloads_total", cluster_queue=cq, priority_class="", **role) == 1
    assert value(samples, "kueue_quota_reserved_workloads_total", cluster_queue=cq, priority_class="", **role) == 1
    assert value(samples, "kueue_admission_wait_time_seconds_count", cluster_queue=cq) == 1
    assert value(samples, "kueue_local_queue_admitted_workloads_total", name="user-queue", namespace=ns) == 1
    assert value(samples, "kfed_admitted_workloads_total", cluster_queue=cq) == 1  # kfed's own, unchanged
    assert (value(samples, "kfed_controller_reconcile_total", controller="job", result="success") or 0) >= 1
    resource = {"cohort": "", "cluster_queue": cq, "flavor": flavor, "resource": "cpu", **role}
    assert value(samples, "kueue_cluster_queue_resource_usage", **resource) == 1.5  # cores, as Kueue reports them
    assert value(samples, "kueue_cluster_queue_resource_reservation", **resource) == 1.5
    assert value(samples, "kueue_cluster_queue_nominal_quota", **resource) == 4
    assert value(samples, "kueue_cluster_queue_borrowing_limit", **resource) == float("inf")
    assert value(samples, "kueue_reserving_active_workloads", cluster_queue=cq) == 1
    assert value(samples, "kueue_admitted_active_workloads", cluster_queue=cq) == 1
    assert value(samples, "kueue_pending_workloads", cluster_queue=cq, status="active") == 0
    assert value(samples, "kueue_cluster_queue_status", cluster_queue=cq, status="active") == 1
    assert value(samples, "kueue_local_queue_status", name="user-queue", namespace=ns, active="True") == 1

    # HoldAndDrain evicts the running Job: Kueue counts the eviction with its reason, and the
    # stopped queue reports itself pending and its workload inadmissible.
    await kube.patch(kueue.ClusterQueue, cq, {"spec": {"stopPolicy": "HoldAndDrain"}})

    def drained() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
        samples = scrape(manager)
        evicted = value(samples, "kueue_evicted_workloads_total", cluster_queue=cq, reason="ClusterQueueStopped", underlying_cause="")
        released = value(samples, "kueue_reserving_active_workloads", cluster_queue=cq) == 0
        return samples if evicted == 1 and released else None

    samples = await eventually(drained, timeout=60, what="the eviction counted and the quota released")
    assert value(samples, "kueue_local_queue_evicted_workloads_total", name="user-queue", namespace=ns, reason="ClusterQueueStopped") == 1
    assert value(samples, "kueue_workload_eviction_latency_seconds_count", cluster_queue=cq, reason="ClusterQueueStopped") == 1
    assert value(samples, "kueue_cluster_queue_status", cluster_queue=cq, status="pending") == 1
    assert value(samples, "kueue_pending_workloads", cluster_queue=cq, status="inadmissible") == 1
    assert value(samples, "kueue_cluster_queue_resource_usage", cluster_queue=cq, flavor=flavor, resource="cpu") == 0
