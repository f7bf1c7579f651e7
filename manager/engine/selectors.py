"""Label selectors, node affinity and taints, evaluated the way Kubernetes evaluates them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from manager.api.meta import LabelSelector, Taint, Toleration


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics; a None selector matches nothing (Kueue's namespaceSelector)."""
    if selector is None:
        return False
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.match_expressions or []:
        present = requirement.key in labels
        values = requirement.values or []
        if requirement.operator == "In" and (not present or labels[requirement.key] not in values):
            return False
        if requirement.operator == "NotIn" and present and labels[requirement.key] in values:
            return False
        if requirement.operator == "Exists" and not present:
            return False
        if requirement.operator == "DoesNotExist" and present:
            return False
    return True


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = str(expression.get("key", ""))
    operator = expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def flavor_matches_pod(pod_spec: Mapping[str, Any], flavor_labels: Mapping[str, str]) -> bool:
    """Same as Kueue's flavorSelector: only the flavor's own label keys are considered.

    nodeSelector entries and required affinity expressions on other keys are dropped; a term
    that loses every expression drops the whole affinity (terms are ORed, so it matches all).
    """
    keys = flavor_labels.keys()
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if key in keys and flavor_labels[key] != str(value):
            return False
    affinity = pod_spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_affinity, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not terms:
        return True
    filtered: list[list[Mapping[str, Any]]] = []
    for term in terms:
        expressions = [e for e in (term.get("matchExpressions") or []) if e.get("key") in keys]
        if not expressions:
            return True
        filtered.append(expressions)
    return any(all(_expression_matches(e, flavor_labels) for e in term) for term in filtered)


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """corev1 Toleration.ToleratesTaint."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    operator = toleration.operator or "Equal"
    if operator == "Exists":
        return True
    return (toleration.value or "") == (taint.value or "")


def untolerated_taint(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration covers (PreferNoSchedule never blocks)."""
    for taint in taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def format_taint(taint: Taint) -> str:
    """Go's `%v` of a corev1.Taint, as Kueue's message prints it: `{key value NoSchedule <nil>}`."""
    return f"{{{taint.key} {taint.value or ''} {taint.effect} <nil>}}"
