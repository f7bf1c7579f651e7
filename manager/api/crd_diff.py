"""Where kfed's CRDs would behave differently from upstream Kueue's, schema by schema.

kfed may declare more than Kueue (extra fields, fewer rules) but must never refuse an object
that Kueue's CRD accepts, must default the same fields to the same values, and must declare
the same list and map markers (they decide Server-Side Apply ownership). `schema_findings`
walks an upstream OpenAPI v3 schema and kfed's side by side and says, per field path, where
kfed is narrower or differs; `crd_findings` does it for whole CRDs, version by version.

Pure functions on plain dicts (the parsed YAML), so they are table-tested on small schemas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Schema = Mapping[str, Any]

_LOWER_BOUNDS = ("minimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "maxLength", "maxItems", "maxProperties")
# Absent markers mean these values to the apiserver and to Server-Side Apply.
_MARKER_DEFAULTS = {"x-kubernetes-list-type": "atomic", "x-kubernetes-map-type": "granular"}
_COMBINATORS = ("anyOf", "oneOf", "allOf", "not")


def _preserves(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def _int_or_string(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-int-or-string"))


def _rules(schema: Schema) -> list[str]:
    # Runs of blanks mean nothing in CEL outside string literals, and Kueue's rules have some.
    return [" ".join(rule["rule"].split()) for rule in schema.get("x-kubernetes-validations", [])]


def _marker(schema: Schema, key: str) -> Any:
    value = schema.get(key)
    if value is None and key in _MARKER_DEFAULTS and (key != "x-kubernetes-list-type" or schema.get("type") == "array"):
        return _MARKER_DEFAULTS[key]
    return value


def _type_findings(path: str, upstream: Schema, kfed: Schema) -> list[str]:
    if _int_or_string(upstream):
        if _int_or_string(kfed) or ("type" not in kfed and _preserves(kfed)):
            return []
        return [f"{path}: upstream takes an integer or a string, kfed only {kfed.get('type', 'untyped')}"]
    up_type, kfed_type = upstream.get("type"), kfed.get("type")
    if kfed_type is None or kfed_type == up_type:
        return []
    if _int_or_string(kfed) and up_type in ("integer", "string"):
        return []
    if (up_type, kfed_type) == ("integer", "number"):
        return []
    return [f"{path}: type {kfed_type}, upstream {up_type}"]


def _bound_findings(path: str, upstream: Schema, kfed: Schema) -> list[str]:
    findings = []
    for key in _LOWER_BOUNDS:
        if key in kfed and (key not in upstream or kfed[key] > upstream[key]):
            findings.append(f"{path}: {key} {kfed[key]}, upstream {upstream.get(key, 'none')}")
    for key in _UPPER_BOUNDS:
        if key in kfed and (key not in upstream or kfed[key] < upstream[key]):
            findings.append(f"{path}: {key} {kfed[key]}, upstream {upstream.get(key, 'none')}")
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if kfed.get(key) and not upstream.get(key):
            findings.append(f"{path}: {key}, upstream inclusive")
    return findings


def _value_findings(path: str, upstream: Schema, kfed: Schema) -> list[str]:
    findings = []
    if "enum" in kfed:
        missing = [value for value in upstream.get("enum", []) if value not in kfed["enum"]]
        if "enum" not in upstream:
            findings.append(f"{path}: enum {kfed['enum']}, upstream takes any value")
        elif missing:
            findings.append(f"{path}: enum lacks {missing}")
    if "pattern" in kfed and kfed["pattern"] != upstream.get("pattern"):
        findings.append(f"{path}: pattern {kfed['pattern']!r}, upstream {upstream.get('pattern', 'none')!r}")
    if "format" in kfed and kfed["format"] != upstream.get("format"):
        findings.append(f"{path}: format {kfed['format']}, upstream {upstream.get('format', 'none')}")
    if upstream.get("nullable") and not kfed.get("nullable"):
        findings.append(f"{path}: not nullable, upstream is")
    for key in _COMBINATORS:
        if key in kfed and kfed[key] != upstream.get(key):
            findings.append(f"{path}: {key} differs from upstream")
    if upstream.get("default") != kfed.get("default"):
        findings.append(f"{path}: default {kfed.get('default')!r}, upstream {upstream.get('default')!r}")
    return findings


def _marker_findings(path: str, upstream: Schema, kfed: Schema) -> list[str]:
    findings = []
    for key in ("x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type"):
        if _marker(upstream, key) != _marker(kfed, key):
            findings.append(f"{path}: {key} {_marker(kfed, key)}, upstream {_marker(upstream, key)}")
    extra_rules = [rule for rule in _rules(kfed) if rule not in _rules(upstream)]
    findings.extend(f"{path}: validation rule not in upstream: {rule}" for rule in extra_rules)
    extra_required = [name for name in kfed.get("required", []) if name not in upstream.get("required", [])]
    if extra_required:
        findings.append(f"{path}: requires {extra_required}, upstream does not")
    return findings


def _unseen_findings(path: str, upstream: Schema) -> list[str]:
    """What kfed misses in a subtree it keeps but does not declare: defaults and list markers."""
    findings = []
    if "default" in upstream:
        findings.append(f"{path}: not declared, so upstream's default {upstream['default']!r} is not applied")
    for key in ("x-kubernetes-list-type", "x-kubernetes-map-type"):
        if key in upstream and upstream[key] != _MARKER_DEFAULTS[key]:
            findings.append(f"{path}: not declared, so upstream's {key} {upstream[key]} is not applied")
    for name, child in upstream.get("properties", {}).items():
        findings.extend(_unseen_findings(f"{path}.{name}", child))
    if isinstance(upstream.get("items"), Mapping):
        findings.extend(_unseen_findings(f"{path}[]", upstream["items"]))
    if isinstance(upstream.get("additionalProperties"), Mapping):
        findings.extend(_unseen_findings(f"{path}{{}}", upstream["additionalProperties"]))
    return findings


def _child_findings(path: str, upstream: Schema, kfed: Schema, opaque: frozenset[str]) -> list[str]:
    findings = []
    kfed_properties: Mapping[str, Any] = kfed.get("properties", {})
    for name, child in upstream.get("properties", {}).items():
        child_path = f"{path}.{name}" if path else name
        if name in kfed_properties:
            findings.extend(_findings(child_path, child, kfed_properties[name], opaque))
        elif _preserves(kfed):
            findings.extend(_unseen_findings(child_path, child))
        elif "additionalProperties" in kfed:
            findings.extend(_findings(child_path, child, kfed["additionalProperties"], opaque))
        else:
            findings.append(f"{child_path}: missing (kfed prunes it)")
    findings += _nested_findings(
        path,
        upstream,
        kfed,
        opaque,
        key="additionalProperties",
        suffix="{}",
        pruned=f"{path}: upstream takes any key, kfed prunes undeclared ones",
    )
    if _preserves(upstream) and not _preserves(kfed):
        findings.append(f"{path}: upstream keeps unknown fields, kfed prunes them")
    findings += _nested_findings(path, upstream, kfed, opaque, key="items", suffix="[]", pruned=f"{path}[]: items missing")
    return findings


def _nested_findings(path: str, upstream: Schema, kfed: Schema, opaque: frozenset[str], *, key: str, suffix: str, pruned: str) -> list[str]:
    """The findings of the schema nested under `key` (a map's values, a list's items), or
    `pruned` when upstream declares it and kfed neither declares it nor keeps unknown fields."""
    if not isinstance(upstream.get(key), Mapping):
        return []
    if isinstance(kfed.get(key), Mapping):
        return _findings(f"{path}{suffix}", upstream[key], kfed[key], opaque)
    return [] if _preserves(kfed) else [pruned]


def _findings(path: str, upstream: Schema, kfed: Schema, opaque: frozenset[str]) -> list[str]:
    if path in opaque:
        return [] if _preserves(kfed) else [f"{path}: listed as kept whole, but kfed does not preserve it"]
    return [
        *_type_findings(path, upstream, kfed),
        *_bound_findings(path, upstream, kfed),
        *_value_findings(path, upstream, kfed),
        *_marker_findings(path, upstream, kfed),
        *_child_findings(path, upstream, kfed, opaque),
    ]


def schema_findings(upstream: Schema, kfed: Schema, opaque: Iterable[str] = ()) -> list[str]:
    """Every place where kfed's schema refuses, defaults or merges differently from upstream's.

    `opaque` names paths (`spec.podSets[].template`) that kfed deliberately keeps whole with
    `x-kubernetes-preserve-unknown-fields`: kfed accepts anything there, and what upstream
    declares beneath them is not compared.
    """
    return _findings("", upstream, kfed, frozenset(opaque))


def _versions(crd: Schema) -> dict[str, Schema]:
    return {version["name"]: version for version in crd["spec"]["versions"] if version.get("served")}


def crd_findings(upstream: Schema, kfed: Schema, opaque: Iterable[str] = ()) -> list[str]:
    """`schema_findings` for every version upstream serves, plus scope, versions and subresources."""
    name = upstream["metadata"]["name"]
    findings = []
    if upstream["spec"]["scope"] != kfed["spec"]["scope"]:
        findings.append(f"{name}: scope {kfed['spec']['scope']}, upstream {upstream['spec']['scope']}")
    kfed_versions = _versions(kfed)
    for version_name, version in _versions(upstream).items():
        if version_name not in kfed_versions:
            findings.append(f"{name}: version {version_name} not served")
            continue
        kfed_version = kfed_versions[version_name]
        if version.get("subresources", {}) != kfed_version.get("subresources", {}):
            findings.append(
                f"{name} {version_name}: subresources {kfed_version.get('subresources')}, upstream {version.get('subresources')}"
            )
        for finding in schema_findings(version["schema"]["openAPIV3Schema"], kfed_version["schema"]["openAPIV3Schema"], opaque):
            findings.append(f"{name} {version_name} {finding}")
    return findings
