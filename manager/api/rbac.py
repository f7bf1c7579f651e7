"""Kubernetes RBAC, decided as the apiserver's RBAC authorizer decides it (pure).

What an identity may do is the rules of the roles its bindings name: a ClusterRoleBinding applies
its role everywhere, a RoleBinding only to requests in its own namespace (and never to
non-resource URLs). A rule allows a request when its verb, API group, resource (with
subresource) and, if the rule names any, the object's name match. `grants_for` resolves the
bindings of one user, `allows` decides one request, and `unused_rights` lists each right a role
gives that no request used: together they compare a role with what an audit log shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

ALL = "*"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def service_account_user(namespace: str, name: str) -> str:
    """The user name a ServiceAccount's token authenticates as."""
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


class Access(NamedTuple):
    """What a right is about, without where: (apiGroup, resource, subresource, verb)."""

    group: str
    resource: str
    subresource: str
    verb: str

    def describe(self) -> str:
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {self.group or 'core'}/{resource}"


@dataclass(frozen=True, order=True)
class Request:
    """One request as the authorizer sees it: a resource request names a resource, a
    non-resource request (`/version`, discovery) only a path."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)

    @property
    def access(self) -> Access:
        return Access(self.group, self.resource, self.subresource, self.verb)

    def describe(self) -> str:
        if not self.is_resource:
            return f"{self.verb} {self.path}"
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.access.describe()}{named}{where}"


@dataclass(frozen=True)
class Rule:
    """One PolicyRule."""

    verbs: tuple[str, ...]
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Rule:
        def field(name: str) -> tuple[str, ...]:
            return tuple(str(value) for value in raw.get(name) or ())

        return cls(
            verbs=field("verbs"),
            api_groups=field("apiGroups"),
            resources=field("resources"),
            resource_names=field("resourceNames"),
            non_resource_urls=field("nonResourceURLs"),
        )

    def allows(self, request: Request) -> bool:
        if not _matches(self.verbs, request.verb):
            return False
        if not request.is_resource:
            return any(_url_matches(url, request.path) for url in self.non_resource_urls)
        return (
            _matches(self.api_groups, request.group)
            and self._resource_matches(request)
            and (not self.resource_names or request.name in self.resource_names)
        )

    def _resource_matches(self, request: Request) -> bool:
        combined = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
        for resource in self.resources:
            if resource in (ALL, combined):
                return True
            # `*/status` matches the status of every resource; `jobs/*` matches nothing (as in RBAC).
            if request.subresource and resource == f"{ALL}/{request.subresource}":
                return True
        return False

    def accesses(self) -> list[Access]:
        """Each resource right this rule gives. A wildcard gives rights no list can hold: it is
        refused (ValueError), since a least-privilege role never needs one."""
        wild = [value for value in (*self.verbs, *self.api_groups, *self.resources) if ALL in value]
        if wild:
            raise ValueError(f"rule {self.describe()} has a wildcard ({', '.join(wild)})")
        out: list[Access] = []
        for group in self.api_groups:
            for combined in self.resources:
                resource, _, subresource = combined.partition("/")
                out.extend(Access(group, resource, subresource, verb) for verb in self.verbs)
        return out

    def describe(self) -> str:
        parts = [f"verbs={list(self.verbs)}"]
        if self.non_resource_urls:
            parts.append(f"nonResourceURLs={list(self.non_resource_urls)}")
        else:
            parts += [f"apiGroups={list(self.api_groups)}", f"resources={list(self.resources)}"]
        if self.resource_names:
            parts.append(f"resourceNames={list(self.resource_names)}")
        return "{" + ", ".join(parts) + "}"


def _matches(allowed: Sequence[str], value: str) -> bool:
    return ALL in allowed or value in allowed


def _url_matches(rule_url: str, path: str) -> bool:
    if rule_url in (ALL, path):
        return True
    return rule_url.endswith(ALL) and path.startswith(rule_url.rstrip(ALL))


@dataclass(frozen=True)
class Grant:
    """A role's rules as one binding applies them: everywhere (`namespace` None, a
    ClusterRoleBinding) or to resource requests in one namespace (a RoleBinding)."""

    binding: str  # "ClusterRoleBinding x" or "RoleBinding ns/x"
    role: str  # "ClusterRole x" or "Role ns/x"
    rules: tuple[Rule, ...]
    namespace: str | None = None

    def applies_to(self, request: Request) -> bool:
        return self.namespace is None or (request.is_resource and request.namespace == self.namespace)

    def allows(self, request: Request) -> bool:
        return self.applies_to(request) and any(rule.allows(request) for rule in self.rules)


def allows(grants: Iterable[Grant], request: Request) -> bool:
    return any(grant.allows(request) for grant in grants)


def _names_user(subject: Mapping[str, Any], binding_namespace: str, user: str, groups: Sequence[str]) -> bool:
    kind, name = subject.get("kind"), subject.get("name", "")
    if kind == "User":
        return bool(name == user)
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return bool(namespace) and service_account_user(namespace, name) == user
    return False


def grants_for(
    user: str,
    groups: Sequence[str],
    *,
    cluster_roles: Iterable[Mapping[str, Any]],
    roles: Iterable[Mapping[str, Any]],
    cluster_role_bindings: Iterable[Mapping[str, Any]],
    role_bindings: Iterable[Mapping[str, Any]],
) -> list[Grant]:
    """Every grant of `user` (a member of `groups`), from the RBAC objects as the API returns
    them. A binding whose role does not exist grants nothing, as in RBAC."""
    by_cluster_role = {role["metadata"]["name"]: role for role in cluster_roles}
    by_role = {(role["metadata"].get("namespace", ""), role["metadata"]["name"]): role for role in roles}
    out: list[Grant] = []
    scoped: list[tuple[Mapping[str, Any], str | None]] = [(b, None) for b in cluster_role_bindings]
    scoped += [(b, b["metadata"].get("namespace", "")) for b in role_bindings]
    for binding, namespace in scoped:
        if not any(_names_user(subject, namespace or "", user, groups) for subject in binding.get("subjects") or []):
            continue
        ref = binding.get("roleRef") or {}
        name = ref.get("name", "")
        if ref.get("kind") == "ClusterRole":
            role, role_name = by_cluster_role.get(name), f"ClusterRole {name}"
        elif namespace is not None:
            role, role_name = by_role.get((namespace, name)), f"Role {namespace}/{name}"
        else:
            continue  # a ClusterRoleBinding cannot name a Role
        if role is None:
            continue
        where = f"RoleBinding {namespace}/" if namespace is not None else "ClusterRoleBinding "
        rules = tuple(Rule.from_dict(rule) for rule in role.get("rules") or [])
        out.append(Grant(f"{where}{binding['metadata']['name']}", role_name, rules, namespace))
    return out


def unused_rights(grants: Iterable[Grant], used: Iterable[Request]) -> list[str]:
    """Each resource right a role gives that no request in `used` exercised through it: through
    one of the role's bindings (in its namespace) and that rule (on its named objects). Each is
    described for a reader, with the role and its bindings."""
    requests = list(used)
    by_role: dict[str, list[Grant]] = {}
    for grant in grants:
        by_role.setdefault(grant.role, []).append(grant)
    out = []
    for role, bound in by_role.items():
        for rule in bound[0].rules:  # the bindings of one role share its rules
            for access in rule.accesses():
                if not any(r.access == access and rule.allows(r) and any(g.applies_to(r) for g in bound) for r in requests):
                    names = f" {'/'.join(rule.resource_names)}" if rule.resource_names else ""
                    out.append(f"{access.describe()}{names} ({role}, bound by {', '.join(g.binding for g in bound)})")
    return out
