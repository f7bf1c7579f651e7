"""Each kind's REST name: derived from its kind as Kubernetes derives it, and the same in both
of Kueue's versions."""

from __future__ import annotations

import pytest

from manager.api import core, kueue, v1beta1
from manager.api.meta import plural_of


@pytest.mark.parametrize(
    ("kind", "plural"),
    [("Workload", "workloads"), ("WorkloadPriorityClass", "workloadpriorityclasses"), ("Policy", "policies"), ("Gateway", "gateways")],
)
def test_a_plural_follows_kubernetes_rule(kind: str, plural: str) -> None:
    assert plural_of(kind) == plural


def test_every_kind_is_served_under_its_kubernetes_plural() -> None:
    assert {kind.KIND: kind.PLURAL for kind in kueue.KINDS} == {
        "ResourceFlavor": "resourceflavors",
        "ClusterQueue": "clusterqueues",
        "Cohort": "cohorts",
        "LocalQueue": "localqueues",
        "WorkloadPriorityClass": "workloadpriorityclasses",
        "Workload": "workloads",
        "AdmissionCheck": "admissionchecks",
        "MultiKueueConfig": "multikueueconfigs",
        "MultiKueueCluster": "multikueueclusters",
    }
    assert all((kind.PLURAL, kind.VERSION) == (kueue.KIND_BY_NAME[kind.KIND].PLURAL, "v1beta1") for kind in v1beta1.KINDS)
    core_kinds = (core.Job, core.Pod, core.Namespace, core.Secret, core.PriorityClass, core.Lease, core.LimitRange)
    assert [kind.PLURAL for kind in core_kinds] == ["jobs", "pods", "namespaces", "secrets", "priorityclasses", "leases", "limitranges"]
