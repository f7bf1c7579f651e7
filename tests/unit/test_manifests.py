"""Loading, validating, converting and round-tripping Kueue manifests."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from manager.api import conversion
from manager.api.manifest import load_text
from tests.conftest import EXAMPLE_FILES, EXAMPLES


def example_id(path: Any) -> str:
    return str(path.relative_to(EXAMPLES))


def errors_of(text: str, source: str = "team-a.yaml") -> list[str]:
    return [str(error) for error in load_text(text, source).errors]


def cluster_queue(spec: dict[str, Any], name: str = "team-a-cq") -> str:
    return yaml.safe_dump({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec})


def group(resources: list[str], flavors: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"coveredResources": resources, "flavors": [{"name": n, "resources": r} for n, r in flavors.items()]}


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=example_id)
def test_every_example_is_valid(path: Any) -> None:
    loaded = load_text(path.read_text(), path.name)
    assert [str(e) for e in loaded.errors] == []
    assert loaded.objects


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=example_id)
def test_every_example_round_trips_through_both_versions(path: Any) -> None:
    for document in yaml.safe_load_all(path.read_text()):
        start = conversion.convert(document, "v1beta1")
        assert conversion.convert(conversion.convert(start, "v1beta2"), "v1beta1") == start
        hub = conversion.convert(document, "v1beta2")
        assert conversion.convert(conversion.convert(hub, "v1beta1"), "v1beta2") == hub


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=example_id)
def test_models_write_back_exactly_what_they_read(path: Any) -> None:
    loaded = load_text(path.read_text(), path.name)
    for document, obj in loaded.objects:
        if document.data["apiVersion"].endswith("v1beta2") or document.data["apiVersion"] == "batch/v1":
            assert obj.to_dict() == document.data  # type: ignore[attr-defined]


def test_conversion_renames_cohort_and_admission_checks() -> None:
    v1 = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"cohort": "all", "admissionChecks": ["mk"], "flavorFungibility": {"whenCanBorrow": "Borrow"}},
    }
    v2 = conversion.convert(v1, "v1beta2")
    assert v2["spec"] == {
        "cohortName": "all",
        "admissionChecksStrategy": {"admissionChecks": [{"name": "mk"}]},
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch"},
    }


def test_conversion_maps_workload_priority_class_to_a_reference() -> None:
    v1 = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "d"},
        "spec": {
            "podSets": [{"name": "main", "count": 1, "template": {}}],
            "priorityClassName": "high",
            "priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
            "priority": 1000,
        },
        "status": {"accumulatedPastExexcutionTimeSeconds": 5},
    }
    v2 = conversion.convert(v1, "v1beta2")
    assert v2["spec"]["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    assert "priorityClassName" not in v2["spec"]
    assert v2["status"] == {"accumulatedPastExecutionTimeSeconds": 5}
    assert conversion.convert(v2, "v1beta1") == v1


def test_conversion_moves_multikueue_cluster_kubeconfig_under_cluster_source() -> None:
    v1 = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "MultiKueueCluster",
        "metadata": {"name": "w1"},
        "spec": {"kubeConfig": {"location": "w1-secret", "locationType": "Secret"}},
    }
    v2 = conversion.convert(v1, "v1beta2")
    assert v2["spec"] == {"clusterSource": {"kubeConfig": {"location": "w1-secret", "locationType": "Secret"}}}
    assert conversion.convert(v2, "v1beta1") == v1


def test_v1beta1_manifest_is_validated_in_its_own_field_names() -> None:
    text = yaml.safe_dump(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {"cohortName": "x"},
        }
    )
    assert errors_of(text) == ["team-a.yaml[0] ClusterQueue/cq: spec.cohortName: unknown field"]


# --- Kueue's validation rules, one broken manifest each, with the exact text ------------------


def test_invalid_quantity_names_file_document_object_and_field() -> None:
    spec = {"resourceGroups": [group(["cpu"], {"a": [{"name": "cpu", "nominalQuota": 1}], "b": [{"name": "cpu", "nominalQuota": "9x"}]})]}
    text = "---\n" + cluster_queue({}, "first") + "---\n" + cluster_queue({}, "second") + "---\n" + cluster_queue(spec)
    assert errors_of(text) == [
        'team-a.yaml[2] ClusterQueue/team-a-cq: spec.resourceGroups[0].flavors[1].resources[0].nominalQuota: invalid quantity "9x"'
    ]


def test_flavor_belongs_to_at_most_one_resource_group() -> None:
    spec = {
        "resourceGroups": [
            group(["cpu"], {"default": [{"name": "cpu", "nominalQuota": 1}]}),
            group(["memory"], {"default": [{"name": "memory", "nominalQuota": "1Gi"}]}),
        ]
    }
    assert errors_of(cluster_queue(spec)) == [
        'team-a.yaml[0] ClusterQueue/team-a-cq: spec.resourceGroups[1].flavors[0].name: Duplicate value: "default"'
    ]


def test_resource_belongs_to_at_most_one_resource_group() -> None:
    spec = {
        "resourceGroups": [
            group(["cpu"], {"a": [{"name": "cpu", "nominalQuota": 1}]}),
            group(["cpu"], {"b": [{"name": "cpu", "nominalQuota": 1}]}),
        ]
    }
    assert errors_of(cluster_queue(spec)) == [
        'team-a.yaml[0] ClusterQueue/team-a-cq: spec.resourceGroups[1].coveredResources[0]: Duplicate value: "cpu"'
    ]


def test_flavor_resources_must_match_covered_resources_in_order() -> None:
    spec = {
        "resourceGroups": [group(["cpu", "memory"], {"a": [{"name": "memory", "nominalQuota": 1}, {"name": "cpu", "nominalQuota": 1}]})]
    }
    assert errors_of(cluster_queue(spec)) == [
        'team-a.yaml[0] ClusterQueue/team-a-cq: spec.resourceGroups[0].flavors[0].resources[0].name: Invalid value: "memory": '
        'must match the name in coveredResources ("cpu" at index 0)',
        'team-a.yaml[0] ClusterQueue/team-a-cq: spec.resourceGroups[0].flavors[0].resources[1].name: Invalid value: "cpu": '
        'must match the name in coveredResources ("memory" at index 1)',
    ]


def test_flavor_must_list_every_covered_resource() -> None:
    spec = {"resourceGroups": [group(["cpu", "memory"], {"a": [{"name": "cpu", "nominalQuota": 1}]})]}
    assert errors_of(cluster_queue(spec)) == [
        "team-a.yaml[0] ClusterQueue/team-a-cq: spec.resourceGroups[0].flavors[0].resources: Invalid value: 1: "
        "must have the same number of resources as the coveredResources (2)"
    ]


def test_at_most_16_flavors_per_resource_group() -> None:
    flavors = {f"f{i}": [{"name": "cpu", "nominalQuota": 1}] for i in range(17)}
    assert errors_of(cluster_queue({"resourceGroups": [group(["cpu"], flavors)]})) == [
        "team-a.yaml[0] ClusterQueue/team-a-cq: spec.resourceGroups[0].flavors: Too many: 17: must have at most 16 items"
    ]


def test_at_most_16_covered_resources_per_resource_group() -> None:
    names = [f"example.com/r{i}" for i in range(17)]
    spec = {"resourceGroups": [group(names, {"a": [{"name": n, "nominalQuota": 1} for n in names]})]}
    assert errors_of(cluster_queue(spec)) == [
        "team-a.yaml[0] ClusterQueue/team-a-cq: spec.resourceGroups[0].coveredResources: Too many: 17: must have at most 16 items"
    ]


def test_borrowing_and_lending_limits_need_a_cohort() -> None:
    spec: dict[str, Any] = {
        "resourceGroups": [group(["cpu"], {"a": [{"name": "cpu", "nominalQuota": 4, "borrowingLimit": 2, "lendingLimit": 1}]})]
    }
    assert errors_of(cluster_queue(spec)) == [
        'team-a.yaml[0] ClusterQueue/team-a-cq: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: Invalid value: "2": '
        "must be nil when cohort is empty",
        'team-a.yaml[0] ClusterQueue/team-a-cq: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "1": '
        "must be nil when cohort is empty",
    ]
    spec["cohortName"] = "shared"
    assert errors_of(cluster_queue(spec)) == []


def test_lending_limit_cannot_exceed_nominal_quota() -> None:
    spec = {
        "cohortName": "shared",
        "resourceGroups": [group(["cpu"], {"a": [{"name": "cpu", "nominalQuota": "4", "lendingLimit": "4500m"}]})],
    }
    assert errors_of(cluster_queue(spec)) == [
        'team-a.yaml[0] ClusterQueue/team-a-cq: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "4500m": '
        "must be less than or equal to the nominalQuota"
    ]


def test_names_are_dns_labels() -> None:
    assert errors_of(cluster_queue({}, name="Team_A")) == [
        'team-a.yaml[0] ClusterQueue/Team_A: metadata.name: Invalid value: "Team_A": a lowercase RFC 1123 label must consist '
        "of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character "
        "(e.g. 'my-name', or '123-abc')"
    ]


def test_multikueue_config_lists_at_most_20_clusters() -> None:
    config = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "MultiKueueConfig",
        "metadata": {"name": "mk"},
        "spec": {"clusters": [f"w{i}" for i in range(21)]},
    }
    assert errors_of(yaml.safe_dump(config)) == [
        "team-a.yaml[0] MultiKueueConfig/mk: spec.clusters: Too many: 21: must have at most 20 items"
    ]


def test_multikueue_config_clusters_are_unique() -> None:
    config = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "MultiKueueConfig",
        "metadata": {"name": "mk"},
        "spec": {"clusters": ["w1", "w2", "w1"]},
    }
    assert errors_of(yaml.safe_dump(config)) == ['team-a.yaml[0] MultiKueueConfig/mk: spec.clusters[2]: Duplicate value: "w1"']


def test_every_error_in_the_input_is_reported() -> None:
    bad_enum = cluster_queue({"queueingStrategy": "Fastest"}, "one")
    bad_field = cluster_queue({"cohrt": "x"}, "two")
    errors = errors_of("---\n".join([bad_enum, bad_field]))
    assert errors == [
        'team-a.yaml[0] ClusterQueue/one: spec.queueingStrategy: Unsupported value: "Fastest": supported values: '
        '"StrictFIFO", "BestEffortFIFO"',
        "team-a.yaml[1] ClusterQueue/two: spec.cohrt: unknown field",
    ]


def test_yaml_syntax_error_is_reported_with_its_line() -> None:
    assert errors_of("kind: ClusterQueue\nmetadata: {name: [\n") == [
        "team-a.yaml[0]: invalid YAML: line 3: did not find expected node content"
    ]


def test_preemption_policy_combination_is_rejected() -> None:
    spec = {"preemption": {"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}}}
    assert errors_of(cluster_queue(spec)) == [
        "team-a.yaml[0] ClusterQueue/team-a-cq: spec.preemption: Invalid value: reclaimWithinCohort=Never and "
        "borrowWithinCohort.Policy!=Never"
    ]


def test_local_queue_needs_a_cluster_queue() -> None:
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": "ns"}, "spec": {}}
    assert errors_of(yaml.safe_dump(queue)) == ["team-a.yaml[0] LocalQueue/ns/q: spec.clusterQueue: Required value"]
