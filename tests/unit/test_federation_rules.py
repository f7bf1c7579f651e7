"""The federation's shared rules (`manager.multikueue.rules.federation`), by table: the one
answer every controller and the read API get to "which MultiKueueConfig" and "which check"."""

from __future__ import annotations

from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.multikueue.rules import federation


def check(
    name: str = "mk", *, parameters: dict[str, Any] | None = None, controller: str = c.MULTIKUEUE_CONTROLLER_NAME
) -> kueue.AdmissionCheck:
    spec: dict[str, Any] = {"controllerName": controller}
    if parameters is not None:
        spec["parameters"] = parameters
    return kueue.AdmissionCheck.model_validate({"metadata": {"name": name}, "spec": spec})


GOOD = {"apiGroup": c.GROUP, "kind": "MultiKueueConfig", "name": "fleet"}


@pytest.mark.parametrize(
    ("case", "parameters", "named"),
    [
        ("Kueue's group and kind", GOOD, "fleet"),
        ("another group", {**GOOD, "apiGroup": "example.com"}, None),
        ("another kind", {**GOOD, "kind": "ProvisioningRequestConfig"}, None),
        ("no parameters", None, None),
    ],
)
def test_an_admission_check_names_a_multikueue_config_only_by_kueues_group_and_kind(
    case: str, parameters: dict[str, Any] | None, named: str | None
) -> None:
    assert federation.config_name(check(parameters=parameters)) == named, case


def test_no_check_names_no_config() -> None:
    assert federation.config_name(None) is None


def test_the_config_of_a_check_is_found_through_its_reference_and_none_when_any_link_is_missing() -> None:
    config = kueue.MultiKueueConfig.model_validate({"metadata": {"name": "fleet"}, "spec": {"clusters": ["w1"]}})
    checks = {"mk": check(parameters=GOOD), "other-group": check("other-group", parameters={**GOOD, "apiGroup": "x.io"})}
    configs = {"fleet": config}
    assert federation.config_of_check("mk", checks.get, configs.get) is config
    assert federation.config_of_check("other-group", checks.get, configs.get) is None
    assert federation.config_of_check("missing", checks.get, configs.get) is None
    assert federation.config_of_check(None, checks.get, configs.get) is None
    no_configs: dict[str, kueue.MultiKueueConfig] = {}
    assert federation.config_of_check("mk", checks.get, no_configs.get) is None


def workload(*states: str) -> kueue.Workload:
    return kueue.Workload.model_validate(
        {
            "metadata": {"name": "wl", "namespace": "ns"},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
            "status": {
                "admissionChecks": [
                    {"name": s, "state": "Pending", "message": "", "lastTransitionTime": "2026-12-07T00:00:00Z"} for s in states
                ]
            },
        }
    )


def cluster_queue(*checks: str) -> kueue.ClusterQueue:
    return kueue.ClusterQueue.model_validate(
        {"metadata": {"name": "cq"}, "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": name} for name in checks]}}}
    )


def test_a_workloads_multikueue_check_is_one_of_its_states_else_one_its_cluster_queue_names() -> None:
    checks = {"mk": check(parameters=GOOD), "mk2": check("mk2", parameters=GOOD), "prov": check("prov", controller="example.com/prov")}
    assert federation.workload_check(workload("prov", "mk2"), cluster_queue("mk"), checks) == "mk2"
    assert federation.workload_check(workload(), cluster_queue("prov", "mk"), checks) == "mk"
    assert federation.workload_check(workload("prov"), None, checks) is None
