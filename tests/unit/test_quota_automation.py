"""Kueue's MultiKueue manager quota automation (KEP-9988) as kfed decides it: which manager
ClusterQueues it applies to, the conditions and messages Kueue v0.19.2 writes, and the quota: per
resource, the nominal quotas of the related worker ClusterQueues (reached by LocalQueue namespace
and name) summed over flavors and over the connected workers the config names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.api import kueue
from manager.api.config import MULTIKUEUE_MANAGER_QUOTA_AUTOMATION, parse_feature_gates
from manager.controllers.run import load_configuration
from manager.multikueue.rules import quota_automation as qa
from manager.multikueue.rules.capacity import WorkerQuotas

pytestmark = pytest.mark.unit


def manager_cq(*, flavors: int = 1, covered: tuple[str, ...] = ("cpu", "memory"), checks: tuple[str, ...] = ("mk",)) -> kueue.ClusterQueue:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": list(covered),
                "flavors": [{"name": f"f{i}", "resources": [{"name": r, "nominalQuota": "1"} for r in covered]} for i in range(flavors)],
            }
        ]
    }
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": name} for name in checks]}
    return kueue.ClusterQueue.model_validate({"metadata": {"name": "team"}, "spec": spec})


def check(name: str = "mk", controller: str = "kueue.x-k8s.io/multikueue") -> kueue.AdmissionCheck:
    return kueue.AdmissionCheck.model_validate(
        {
            "metadata": {"name": name},
            "spec": {"controllerName": controller, "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "cfg"}},
        }
    )


def config(mode: str | None = "Automated", clusters: tuple[str, ...] = ("w1", "w2")) -> kueue.MultiKueueConfig:
    spec: dict[str, Any] = {"clusters": list(clusters)}
    if mode is not None:
        spec["quotaManagement"] = mode
    return kueue.MultiKueueConfig.model_validate({"metadata": {"name": "cfg"}, "spec": spec})


def worker_cq(name: str, quotas: dict[str, dict[str, str]]) -> kueue.ClusterQueue:
    """`quotas`: flavor -> resource -> nominal quota, one ResourceGroup per flavor."""
    groups = [
        {
            "coveredResources": list(resources),
            "flavors": [{"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in resources.items()]}],
        }
        for flavor, resources in quotas.items()
    ]
    return kueue.ClusterQueue.model_validate({"metadata": {"name": name}, "spec": {"resourceGroups": groups}})


def lq(namespace: str, name: str, cq: str) -> kueue.LocalQueue:
    return kueue.LocalQueue.model_validate({"metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cq}})


# The KEP's example: worker1 has cq1 (6 cpu, 24Gi) behind lq1 and cq2 (7 cpu, 28Gi) behind lq2;
# worker2 has cq (8 cpu, 32Gi, and GPUs in two flavors) behind both.
WORKER1 = WorkerQuotas(
    cluster_queues=[
        worker_cq("cq1", {"default": {"cpu": "6", "memory": "24Gi"}}),
        worker_cq("cq2", {"default": {"cpu": "7", "memory": "28Gi"}}),
        worker_cq("unrelated", {"default": {"cpu": "100", "memory": "1Ti"}}),
    ],
    local_queues=[lq("ns", "lq1", "cq1"), lq("ns", "lq2", "cq2"), lq("other", "lq1", "unrelated")],
)
WORKER2 = WorkerQuotas(
    cluster_queues=[
        worker_cq("cq", {"default": {"cpu": "8", "memory": "32Gi"}, "gpu-a4": {"nvidia.com/gpu": "5"}, "gpu-h100": {"nvidia.com/gpu": "7"}})
    ],
    local_queues=[lq("ns", "lq1", "cq"), lq("ns", "lq2", "cq")],
)
LOCAL = [("ns", "lq1"), ("ns", "lq2")]


def quotas(decision: qa.QuotaDecision) -> dict[str, str] | None:
    return {r.name: str(r.nominal_quota) for r in decision.resources} if decision.resources is not None else None


def test_the_keps_example_sums_every_related_queue_over_flavors_and_workers() -> None:
    decision = qa.decide(manager_cq(covered=("cpu", "memory", "nvidia.com/gpu")), check(), config(), LOCAL, {"w1": WORKER1, "w2": WORKER2})
    assert decision.condition == qa.AUTOMATED
    assert quotas(decision) == {"cpu": "21", "memory": "84Gi", "nvidia.com/gpu": "12"}


@pytest.mark.parametrize(
    ("workers", "cpu"),
    [
        ({"w1": WORKER1, "w2": WORKER2}, "21"),
        ({"w1": WORKER1, "w2": None}, "13"),  # worker2 left (not connected): its quota leaves with it
        ({"w1": None, "w2": None}, "0"),
        ({"w2": WORKER2}, "8"),  # worker1 not registered yet
    ],
    ids=["both", "worker2-gone", "none-connected", "worker1-unknown"],
)
def test_the_quota_follows_the_connected_workers(workers: dict[str, WorkerQuotas | None], cpu: str) -> None:
    w2 = WORKER2 if workers.get("w2") else None
    covered = ("cpu", "memory", "nvidia.com/gpu") if w2 else ("cpu", "memory")
    decision = qa.decide(manager_cq(covered=covered), check(), config(), LOCAL, workers)
    found = quotas(decision)
    assert found is not None and found["cpu"] == cpu


def test_a_worker_the_config_does_not_name_counts_for_nothing() -> None:
    decision = qa.decide(manager_cq(), check(), config(clusters=("w1",)), LOCAL, {"w1": WORKER1, "w2": WORKER2})
    assert quotas(decision) == {"cpu": "13", "memory": "52Gi"}


@pytest.mark.parametrize(
    ("cq", "the_check", "the_config", "condition"),
    [
        (manager_cq(checks=()), None, config(), None),
        (manager_cq(), check(), None, qa.CONFIG_NOT_FOUND),
        (manager_cq(), check(), config(mode=None), qa.NOT_REQUESTED),
        (manager_cq(), check(), config(mode="Manual"), qa.NOT_REQUESTED),
        (manager_cq(flavors=2), check(), config(), qa.NOT_ONE_FLAVOR),
        (
            manager_cq(covered=("cpu",)),
            check(),
            config(),
            (
                "False",
                "UnsupportedConfiguration",
                "manager-side coveredResources is missing resources configured on workers: [memory nvidia.com/gpu]",
            ),
        ),
    ],
    ids=["not-multikueue", "config-missing", "unset", "manual", "two-flavors", "a-resource-not-covered"],
)
def test_kueues_conditions_and_the_quota_left_alone(
    cq: kueue.ClusterQueue,
    the_check: kueue.AdmissionCheck | None,
    the_config: kueue.MultiKueueConfig | None,
    condition: qa.ConditionState | None,
) -> None:
    decision = qa.decide(cq, the_check, the_config, LOCAL, {"w1": WORKER1, "w2": WORKER2})
    assert decision == qa.QuotaDecision(condition), "the queue keeps its own quota"


def test_only_a_multikueue_check_in_the_strategy_enrolls_the_queue() -> None:
    checks = {"mk": check(), "prov": check("prov", controller="kueue.x-k8s.io/provisioning-request")}
    assert qa.multikueue_check(manager_cq(checks=("prov", "mk")), checks) == checks["mk"]
    assert qa.multikueue_check(manager_cq(checks=("prov",)), checks) is None


def test_a_quota_already_in_step_is_not_written_again_and_limits_are_dropped_as_kueue_does() -> None:
    def in_step(**limit: str) -> kueue.ClusterQueue:
        cq = manager_cq()
        group = cq.spec.resource_groups[0]  # type: ignore[index]
        resources = [{"name": "cpu", "nominalQuota": "13000m", **limit}, {"name": "memory", "nominalQuota": "52Gi"}]
        group.flavors[0] = kueue.FlavorQuotas.model_validate({"name": "f0", "resources": resources})
        return cq

    assert qa.decide(in_step(), check(), config(clusters=("w1",)), LOCAL, {"w1": WORKER1}) == qa.QuotaDecision(qa.AUTOMATED)
    limited = in_step(borrowingLimit="2")
    decision = qa.decide(limited, check(), config(clusters=("w1",)), LOCAL, {"w1": WORKER1})
    assert quotas(decision) == {"cpu": "13", "memory": "52Gi"}
    patch = qa.spec_patch(limited, decision.resources or [])
    flavor = patch["spec"]["resourceGroups"][0]["flavors"][0]  # type: ignore[index]
    assert flavor == {"name": "f0", "resources": [{"name": "cpu", "nominalQuota": "13"}, {"name": "memory", "nominalQuota": "52Gi"}]}


@pytest.mark.parametrize(
    ("flag", "in_file", "enabled"),
    [
        ("", None, False),  # Kueue's alpha default
        ("MultiKueueManagerQuotaAutomation=true", None, True),
        ("MultiKueueManagerQuotaAutomation=false", True, False),  # the flag wins over the file
        ("", True, True),
        (" MultiKueueManagerQuotaAutomation = TRUE , Other=false", None, True),
    ],
)
def test_the_gate_comes_from_the_configuration_or_kueues_flag(tmp_path: Path, flag: str, in_file: bool | None, enabled: bool) -> None:
    path = None
    if in_file is not None:
        path = tmp_path / "config.yaml"
        gates = {"MultiKueueManagerQuotaAutomation": in_file}
        path.write_text(yaml.safe_dump({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "featureGates": gates}))
    config = load_configuration(str(path) if path else None, flag)
    assert config.feature_enabled(MULTIKUEUE_MANAGER_QUOTA_AUTOMATION) is enabled


@pytest.mark.parametrize("flag", ["MultiKueueManagerQuotaAutomation", "=true", "MultiKueueManagerQuotaAutomation=yes"])
def test_a_malformed_feature_gate_is_one_line_naming_the_pair(flag: str) -> None:
    with pytest.raises(ValueError, match=r'^--feature-gates: ".*": expected Name=true or Name=false$'):
        parse_feature_gates(flag)
