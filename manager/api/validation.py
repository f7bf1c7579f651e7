"""Kueue's validation rules as pure functions over the v1beta2 models.

Each rule returns `FieldError`s whose text follows Kubernetes' `field.Error` format
(`Invalid value`, `Duplicate value`, `Unsupported value`, `Required value`, `Too many`), so
the same messages serve `kfed validate`, the validating webhook and the controllers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, LabelSelector, Resource, Toleration
from manager.api.quantity import Quantity, QuantityError

T = TypeVar("T")

_DNS_LABEL = re.compile(DNS_LABEL_PATTERN)
_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class FieldError:
    """One problem at one field path, such as `spec.resourceGroups[0].flavors[1].name`."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def _quote(value: Any) -> str:
    if isinstance(value, Quantity):
        value = value.canonical()
    return json.dumps(value) if isinstance(value, str) else str(value)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, f"Invalid value: {_quote(value)}: {detail}")


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError(path, f"Duplicate value: {_quote(value)}")


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, "Required value" + (f": {detail}" if detail else ""))


def too_many(path: str, count: int, limit: int) -> FieldError:
    return FieldError(path, f"Too many: {count}: must have at most {limit} items")


def not_supported(path: str, value: Any, supported: Iterable[str]) -> FieldError:
    values = ", ".join(json.dumps(v) for v in supported)
    return FieldError(path, f"Unsupported value: {_quote(value)}: supported values: {values}")


# Kubernetes' messages for a name or label not of its format.
_DNS_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc')"
)
_DNS_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com')"
)
_QUALIFIED_NAME_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character, with at most 63 characters"
)
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character, with at most 63 characters"
)


def _format_errors(path: str, value: str, *, limit: int, pattern: re.Pattern[str], message: str) -> list[FieldError]:
    if len(value) > limit:
        return [invalid(path, value, f"must be no more than {limit} characters")]
    return [] if pattern.match(value) else [invalid(path, value, message)]


def dns_label_errors(path: str, value: str) -> list[FieldError]:
    return _format_errors(path, value, limit=63, pattern=_DNS_LABEL, message=_DNS_LABEL_MESSAGE)


def dns_subdomain_errors(path: str, value: str) -> list[FieldError]:
    return _format_errors(path, value, limit=253, pattern=_DNS_SUBDOMAIN, message=_DNS_SUBDOMAIN_MESSAGE)


def label_key_errors(path: str, key: str) -> list[FieldError]:
    """Kubernetes' IsQualifiedName: an optional DNS-subdomain prefix and a name of at most 63 chars."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return [invalid(path, key, "prefix part must be a lowercase RFC 1123 subdomain")]
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return [invalid(path, key, _QUALIFIED_NAME_MESSAGE)]
    return []


def label_value_errors(path: str, value: str) -> list[FieldError]:
    ok = len(value) <= 63 and _LABEL_VALUE.match(value)
    return [] if ok else [invalid(path, value, _LABEL_VALUE_MESSAGE)]


def label_selector_errors(path: str, selector: LabelSelector | None) -> list[FieldError]:
    errors: list[FieldError] = []
    if selector is None:
        return errors
    for key, value in (selector.match_labels or {}).items():
        errors += label_key_errors(f"{path}.matchLabels", key)
        errors += label_value_errors(f"{path}.matchLabels", value)
    for i, requirement in enumerate(selector.match_expressions or []):
        where = f"{path}.matchExpressions[{i}]"
        errors += label_key_errors(f"{where}.key", requirement.key)
        if requirement.operator in ("In", "NotIn") and not requirement.values:
            errors.append(required(f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        if requirement.operator in ("Exists", "DoesNotExist") and requirement.values:
            errors.append(FieldError(f"{where}.values", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    return errors


def _non_negative(path: str, value: Quantity) -> list[FieldError]:
    return [invalid(path, value, "must be greater than or equal to 0")] if value.nanos < 0 else []


def resource_group_errors(
    path: str, groups: list[kueue.ResourceGroup] | None, *, has_parent: bool, parent_word: str, enforce_lending: bool
) -> list[FieldError]:
    """Kueue's resource-group rules, shared by ClusterQueue (`cohort`) and Cohort (`parent`)."""
    errors: list[FieldError] = []
    groups = groups or []
    if len(groups) > c.MAX_RESOURCE_GROUPS:
        errors.append(too_many(path, len(groups), c.MAX_RESOURCE_GROUPS))
    seen_resources: set[str] = set()
    seen_flavors: set[str] = set()
    for i, group in enumerate(groups):
        group_path = f"{path}[{i}]"
        if len(group.covered_resources) > c.MAX_RESOURCES_PER_GROUP:
            errors.append(too_many(f"{group_path}.coveredResources", len(group.covered_resources), c.MAX_RESOURCES_PER_GROUP))
        if len(group.flavors) > c.MAX_FLAVORS_PER_GROUP:
            errors.append(too_many(f"{group_path}.flavors", len(group.flavors), c.MAX_FLAVORS_PER_GROUP))
        for j, resource in enumerate(group.covered_resources):
            where = f"{group_path}.coveredResources[{j}]"
            errors += label_key_errors(where, resource)
            if resource in seen_resources:
                errors.append(duplicate(where, resource))
            seen_resources.add(resource)
        for j, flavor in enumerate(group.flavors):
            flavor_path = f"{group_path}.flavors[{j}]"
            errors += dns_label_errors(f"{flavor_path}.name", flavor.name)
            if flavor.name in seen_flavors:
                errors.append(duplicate(f"{flavor_path}.name", flavor.name))
            seen_flavors.add(flavor.name)
            if len(flavor.resources) != len(group.covered_resources):
                errors.append(
                    invalid(
                        f"{flavor_path}.resources",
                        len(flavor.resources),
                        f"must have the same number of resources as the coveredResources ({len(group.covered_resources)})",
                    )
                )
            for k, quota in enumerate(flavor.resources):
                quota_path = f"{flavor_path}.resources[{k}]"
                if k < len(group.covered_resources) and quota.name != group.covered_resources[k]:
                    errors.append(
                        invalid(
                            f"{quota_path}.name",
                            quota.name,
                            f'must match the name in coveredResources ("{group.covered_resources[k]}" at index {k})',
                        )
                    )
                errors += _non_negative(f"{quota_path}.nominalQuota", quota.nominal_quota)
                for field_name, limit in (("borrowingLimit", quota.borrowing_limit), ("lendingLimit", quota.lending_limit)):
                    if limit is None:
                        continue
                    limit_path = f"{quota_path}.{field_name}"
                    errors += _non_negative(limit_path, limit)
                    if not has_parent:
                        errors.append(invalid(limit_path, limit, f"must be nil when {parent_word} is empty"))
                if quota.lending_limit is not None and enforce_lending and quota.lending_limit > quota.nominal_quota:
                    errors.append(
                        invalid(f"{quota_path}.lendingLimit", quota.lending_limit, "must be less than or equal to the nominalQuota")
                    )
    return errors


def fair_sharing_errors(path: str, fair_sharing: kueue.FairSharing | None) -> list[FieldError]:
    if fair_sharing is None or fair_sharing.weight is None:
        return []
    weight = fair_sharing.weight
    if weight.nanos < 0:
        return [invalid(path, weight, "must be greater than or equal to 0")]
    if 0 < weight.nanos <= 1:  # 0 < weight <= 1n, as Kueue rejects
        return [invalid(path, weight, "When not 0, weight must be > 10e-9")]
    return []


def _flavor_names(groups: list[kueue.ResourceGroup] | None) -> list[str]:
    return [flavor.name for group in groups or [] for flavor in group.flavors]


def cluster_queue_errors(cq: kueue.ClusterQueue) -> list[FieldError]:
    spec = cq.spec
    errors = resource_group_errors(
        "spec.resourceGroups",
        spec.resource_groups,
        has_parent=bool(spec.cohort_name),
        parent_word="cohort",
        enforce_lending=True,
    )
    errors += label_selector_errors("spec.namespaceSelector", spec.namespace_selector)
    preemption = spec.preemption
    if (
        preemption is not None
        and preemption.reclaim_within_cohort == "Never"
        and preemption.borrow_within_cohort is not None
        and (preemption.borrow_within_cohort.policy or "Never") != "Never"
    ):
        errors.append(FieldError("spec.preemption", "Invalid value: reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"))
    fungibility = spec.flavor_fungibility
    if (
        fungibility is not None
        and fungibility.preference is not None
        and (fungibility.when_can_borrow != "TryNextFlavor" or fungibility.when_can_preempt != "TryNextFlavor")
    ):
        errors.append(
            invalid(
                "spec.flavorFungibility.preference",
                fungibility.preference,
                f'preference "{fungibility.preference}" requires both whenCanBorrow and whenCanPreempt to be TryNextFlavor',
            )
        )
    errors += fair_sharing_errors("spec.fairSharing", spec.fair_sharing)
    flavors = _flavor_names(spec.resource_groups)
    strategy = spec.admission_checks_strategy
    for i, rule in enumerate((strategy.admission_checks or []) if strategy else []):
        for j, flavor in enumerate(rule.on_flavors or []):
            if flavor not in flavors:
                errors.append(not_supported(f"spec.admissionChecksStrategy.admissionChecks[{i}].onFlavors[{j}]", flavor, flavors))
    return errors


def cohort_errors(cohort: kueue.Cohort) -> list[FieldError]:
    errors = fair_sharing_errors("spec.fairSharing", cohort.spec.fair_sharing)
    errors += resource_group_errors(
        "spec.resourceGroups",
        cohort.spec.resource_groups,
        has_parent=bool(cohort.spec.parent_name),
        parent_word="parent",
        enforce_lending=False,
    )
    if cohort.spec.parent_name and cohort.spec.parent_name == cohort.name:
        errors.append(invalid("spec.parentName", cohort.spec.parent_name, "a cohort cannot be its own parent"))
    return errors


def local_queue_errors(queue: kueue.LocalQueue) -> list[FieldError]:
    if not queue.spec.cluster_queue:
        return [required("spec.clusterQueue")]
    return dns_subdomain_errors("spec.clusterQueue", queue.spec.cluster_queue)


def _toleration_errors(path: str, toleration: Toleration) -> list[FieldError]:
    errors: list[FieldError] = []
    if not toleration.key and toleration.operator != "Exists":
        errors.append(invalid(f"{path}.operator", toleration.operator or "", "operator must be Exists when `key` is empty"))
    if toleration.toleration_seconds is not None and toleration.effect != "NoExecute":
        errors.append(invalid(f"{path}.effect", toleration.effect or "", "effect must be 'NoExecute' when `tolerationSeconds` is set"))
    if toleration.operator == "Exists" and toleration.value:
        errors.append(invalid(f"{path}.value", toleration.value, "value must be empty when `operator` is 'Exists'"))
    return errors


def resource_flavor_errors(flavor: kueue.ResourceFlavor) -> list[FieldError]:
    errors: list[FieldError] = []
    for key, value in (flavor.spec.node_labels or {}).items():
        errors += label_key_errors("spec.nodeLabels", key)
        errors += label_value_errors(f"spec.nodeLabels[{key}]", value)
    for i, taint in enumerate(flavor.spec.node_taints or []):
        errors += label_key_errors(f"spec.nodeTaints[{i}].key", taint.key)
    for i, toleration in enumerate(flavor.spec.tolerations or []):
        errors += _toleration_errors(f"spec.tolerations[{i}]", toleration)
    if flavor.spec.topology_name and not flavor.spec.node_labels:
        errors.append(required("spec.nodeLabels", "at least one nodeLabel is required when topology is set"))
    return errors


def _present(errors: list[FieldError], value: Any, expected: type[T], path: str, message: str) -> T | None:
    """`value` when it is an `expected`; None when it is missing, or (the error recorded) of another type."""
    if value is None or isinstance(value, expected):
        return value
    errors.append(invalid(path, type(value).__name__, message))
    return None


def _pod_spec_errors(spec: Any, path: str) -> list[FieldError]:
    """The shape of a pod spec's containers and resources (the API server's schema would refuse it)."""
    if not isinstance(spec, dict):
        return [invalid(path, type(spec).__name__, "must be an object")]
    errors: list[FieldError] = []
    for container_list in ("initContainers", "containers"):
        containers = _present(errors, spec.get(container_list), list, f"{path}.{container_list}", "must be a list of containers")
        for j, container in enumerate(containers or []):
            where = f"{path}.{container_list}[{j}]"
            if not isinstance(container, dict):
                errors.append(invalid(where, type(container).__name__, "must be a container object"))
                continue
            resources = _present(errors, container.get("resources"), dict, f"{where}.resources", "must be an object") or {}
            for kind in ("requests", "limits"):
                message = "must be a map of resource name to quantity"
                values = _present(errors, resources.get(kind), dict, f"{where}.resources.{kind}", message) or {}
                for name, raw in values.items():
                    try:
                        Quantity.parse(raw)
                    except (QuantityError, TypeError, ValueError):
                        errors.append(FieldError(f"{where}.resources.{kind}.{name}", f'invalid quantity "{raw}"'))
    return errors


def workload_errors(workload: kueue.Workload) -> list[FieldError]:
    errors: list[FieldError] = []
    names: set[str] = set()
    with_min_count = 0
    for i, pod_set in enumerate(workload.spec.pod_sets):
        path = f"spec.podSets[{i}]"
        if pod_set.name in names:
            errors.append(duplicate(f"{path}.name", pod_set.name))
        names.add(pod_set.name)
        if pod_set.min_count is not None:
            with_min_count += 1
            if pod_set.min_count > pod_set.count:
                errors.append(invalid(f"{path}.minCount", pod_set.min_count, f"must be less than or equal to count ({pod_set.count})"))
        spec = pod_set.template.get("spec", {})
        shape = _pod_spec_errors(spec, f"{path}.template.spec")
        if shape:
            errors += shape
            continue
        for container_list in ("initContainers", "containers"):
            for j, container in enumerate(spec.get(container_list) or []):
                requests = (container.get("resources") or {}).get("requests") or {}
                if c.PODS_RESOURCE in requests:
                    errors.append(
                        invalid(
                            f"{path}.template.spec.{container_list}[{j}].resources.requests[pods]",
                            str(requests[c.PODS_RESOURCE]),
                            'the resource name "pods" is reserved',
                        )
                    )
    if with_min_count > 1:
        errors.append(invalid("spec.podSets", with_min_count, "at most one podSet can use minCount"))
    if workload.spec.priority_class_ref is not None and workload.spec.priority is None:
        errors.append(required("spec.priority", "priority should not be nil when priorityClassRef is set"))
    return errors


def admission_check_errors(check: kueue.AdmissionCheck) -> list[FieldError]:
    if not check.spec.controller_name:
        return [required("spec.controllerName")]
    return []


def multikueue_config_errors(config: kueue.MultiKueueConfig) -> list[FieldError]:
    errors: list[FieldError] = []
    clusters = config.spec.clusters
    if len(clusters) > c.MAX_MULTIKUEUE_CLUSTERS:
        errors.append(too_many("spec.clusters", len(clusters), c.MAX_MULTIKUEUE_CLUSTERS))
    seen: set[str] = set()
    for i, name in enumerate(clusters):
        if name in seen:
            errors.append(duplicate(f"spec.clusters[{i}]", name))
        seen.add(name)
    return errors


def multikueue_cluster_errors(cluster: kueue.MultiKueueCluster) -> list[FieldError]:
    source = cluster.spec.cluster_source
    if (source.kube_config is None) == (source.cluster_profile_ref is None):
        return [invalid("spec.clusterSource", "", "exactly one of kubeConfig or clusterProfileRef must be set")]
    config = source.kube_config
    if config is not None and config.effective_location_type == "Path" and not config.location.startswith("/"):
        return [invalid("spec.clusterSource.kubeConfig.location", config.location, "path must be absolute")]
    if config is not None and config.effective_location_type == "Secret":
        return dns_subdomain_errors("spec.clusterSource.kubeConfig.location", config.location)
    return []


_RULES: dict[str, Callable[[Any], list[FieldError]]] = {
    "ClusterQueue": cluster_queue_errors,
    "Cohort": cohort_errors,
    "LocalQueue": local_queue_errors,
    "ResourceFlavor": resource_flavor_errors,
    "Workload": workload_errors,
    "AdmissionCheck": admission_check_errors,
    "MultiKueueConfig": multikueue_config_errors,
    "MultiKueueCluster": multikueue_cluster_errors,
}


def object_errors(obj: Resource) -> list[FieldError]:
    """Every rule for one v1beta2 object, including its name."""
    errors: list[FieldError] = []
    if obj.GROUP == c.GROUP:
        if not obj.metadata.name and not obj.metadata.generate_name:
            errors.append(required("metadata.name", "name or generateName is required"))
        elif obj.metadata.name:
            check = dns_subdomain_errors if obj.KIND == "Workload" else dns_label_errors
            errors += check("metadata.name", obj.metadata.name)
        if obj.NAMESPACED and obj.metadata.namespace:
            errors += dns_label_errors("metadata.namespace", obj.metadata.namespace)
    rule = _RULES.get(obj.KIND)
    if rule is not None:
        errors += rule(obj)
    return errors
