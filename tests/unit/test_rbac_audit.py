"""RBAC decided as the apiserver decides it, and an audit log read into the requests it shows."""

from __future__ import annotations

import json
from typing import Any

import pytest

from manager.api.rbac import Access, Grant, Request, Rule, allows, grants_for, service_account_user, unused_rights
from manager.dev.audit import AuditLogError, audit_policy, denied_to, groups_of, read_audit_log, requests_of
from manager.engine.integrations.registry import BY_FRAMEWORK
from manager.multikueue.controllers.worker_access import WORKLOAD_RULES

SA = service_account_user("kfed-system", "kfed-multikueue")
SA_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kfed-system", "system:authenticated")


def rule(**fields: Any) -> Rule:
    return Rule.from_dict(fields)


# --- a rule allows a request ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "request_", "allowed"),
    [
        ({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}, Request("create", "batch", "jobs", namespace="a"), True),
        ({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}, Request("delete", "batch", "jobs"), False),
        ({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}, Request("get", "", "jobs"), False),
        # a subresource is its own resource: jobs does not give jobs/status, nor the other way round
        ({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}, Request("get", "batch", "jobs", "status"), False),
        ({"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]}, Request("get", "batch", "jobs"), False),
        ({"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]}, Request("get", "batch", "jobs", "status"), True),
        ({"apiGroups": ["batch"], "resources": ["*/status"], "verbs": ["get"]}, Request("get", "batch", "jobs", "status"), True),
        ({"apiGroups": ["batch"], "resources": ["jobs/*"], "verbs": ["get"]}, Request("get", "batch", "jobs", "status"), False),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, Request("patch", "x.io", "things", "scale"), True),
        # resourceNames: only those objects, and never a request without a name (list, create)
        (
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["agent"], "verbs": ["get"]},
            Request("get", "coordination.k8s.io", "leases", namespace="n", name="agent"),
            True,
        ),
        (
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["agent"], "verbs": ["get"]},
            Request("get", "coordination.k8s.io", "leases", namespace="n", name="other"),
            False,
        ),
        (
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["agent"], "verbs": ["list"]},
            Request("list", "coordination.k8s.io", "leases", namespace="n"),
            False,
        ),
        # non-resource URLs: exact, or a prefix ending in *; a resource rule never matches a path
        ({"nonResourceURLs": ["/version"], "verbs": ["get"]}, Request("get", path="/version"), True),
        ({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}, Request("get", path="/apis/batch/v1"), True),
        ({"nonResourceURLs": ["/apis"], "verbs": ["get"]}, Request("get", path="/apis/batch/v1"), False),
        ({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]}, Request("get", path="/version"), False),
    ],
)
def test_a_rule_allows_exactly_what_rbac_allows(raw: dict[str, Any], request_: Request, allowed: bool) -> None:
    assert Rule.from_dict(raw).allows(request_) is allowed


def test_a_rolebinding_applies_only_in_its_namespace_and_never_to_urls() -> None:
    rules = (rule(apiGroups=["batch"], resources=["jobs"], verbs=["get"]), rule(nonResourceURLs=["*"], verbs=["get"]))
    local = Grant("RoleBinding a/x", "ClusterRole x", rules, namespace="a")
    assert local.allows(Request("get", "batch", "jobs", namespace="a", name="j"))
    assert not local.allows(Request("get", "batch", "jobs", namespace="b", name="j"))
    assert not local.allows(Request("get", "batch", "jobs"))  # cluster-wide: only a ClusterRoleBinding
    assert not local.allows(Request("get", path="/version"))
    everywhere = Grant("ClusterRoleBinding x", "ClusterRole x", rules)
    assert everywhere.allows(Request("get", "batch", "jobs")) and everywhere.allows(Request("get", path="/version"))


# --- resolving bindings ----------------------------------------------------------------------------------
def meta(name: str, namespace: str | None = None) -> dict[str, str]:
    return {"name": name, **({"namespace": namespace} if namespace else {})}


def binding(kind: str, name: str, role_kind: str, role: str, subjects: list[dict[str, str]], ns: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "metadata": meta(name, ns), "roleRef": {"kind": role_kind, "name": role}, "subjects": subjects}


JOBS = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}
VERSION = {"nonResourceURLs": ["/version"], "verbs": ["get"]}
OURS = {"kind": "ServiceAccount", "name": "kfed-multikueue"}
LEASE = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["agent"], "verbs": ["get"]}


def test_grants_follow_bindings_to_the_service_account_its_groups_and_its_roles() -> None:
    grants = grants_for(
        SA,
        SA_GROUPS,
        cluster_roles=[{"metadata": meta("jobs"), "rules": [JOBS]}, {"metadata": meta("basic"), "rules": [VERSION]}],
        roles=[{"metadata": meta("lease", "kfed-system"), "rules": [LEASE]}, {"metadata": meta("lease", "other"), "rules": [JOBS]}],
        cluster_role_bindings=[
            binding("ClusterRoleBinding", "basic", "ClusterRole", "basic", [{"kind": "Group", "name": "system:authenticated"}]),
            binding("ClusterRoleBinding", "someone", "ClusterRole", "jobs", [{"kind": "User", "name": "alice"}]),
            binding("ClusterRoleBinding", "missing", "ClusterRole", "gone", [{"kind": "User", "name": SA}]),
        ],
        role_bindings=[
            binding("RoleBinding", "jobs", "ClusterRole", "jobs", [{**OURS, "namespace": "kfed-system"}], "a"),
            # a ServiceAccount subject without a namespace is the binding's own namespace's
            binding("RoleBinding", "lease", "Role", "lease", [OURS], "kfed-system"),
            binding("RoleBinding", "lease", "Role", "lease", [OURS], "other"),
        ],
    )  # fmt: skip
    assert sorted((g.binding, g.role, g.namespace) for g in grants) == [
        ("ClusterRoleBinding basic", "ClusterRole basic", None),
        ("RoleBinding a/jobs", "ClusterRole jobs", "a"),
        ("RoleBinding kfed-system/lease", "Role kfed-system/lease", "kfed-system"),
    ]
    assert allows(grants, Request("create", "batch", "jobs", namespace="a"))
    assert not allows(grants, Request("create", "batch", "jobs", namespace="b"))
    assert allows(grants, Request("get", "coordination.k8s.io", "leases", namespace="kfed-system", name="agent"))
    assert not allows(grants, Request("get", "coordination.k8s.io", "leases", namespace="other", name="agent"))


# --- unused rights ------------------------------------------------------------------------------------------
JOBS_AND_STATUS = rule(apiGroups=["batch"], resources=["jobs", "jobs/status"], verbs=["get", "list"])


def test_each_right_of_a_role_that_no_request_used_through_its_bindings_is_named() -> None:
    jobs = (JOBS_AND_STATUS,)
    grants = [
        Grant("RoleBinding a/x", "ClusterRole x", jobs, namespace="a"),
        Grant("RoleBinding b/x", "ClusterRole x", jobs, namespace="b"),
        Grant("RoleBinding kfed-system/l", "Role kfed-system/l", (Rule.from_dict(LEASE),), namespace="kfed-system"),
    ]
    used = [
        Request("get", "batch", "jobs", namespace="a", name="j"),  # one binding of the role is enough
        Request("list", "batch", "jobs", namespace="c"),  # outside every binding: uses nothing
        Request("get", "coordination.k8s.io", "leases", namespace="other", name="agent"),
    ]
    assert unused_rights(grants, used) == [
        "list batch/jobs (ClusterRole x, bound by RoleBinding a/x, RoleBinding b/x)",
        "get batch/jobs/status (ClusterRole x, bound by RoleBinding a/x, RoleBinding b/x)",
        "list batch/jobs/status (ClusterRole x, bound by RoleBinding a/x, RoleBinding b/x)",
        "get coordination.k8s.io/leases agent (Role kfed-system/l, bound by RoleBinding kfed-system/l)",
    ]


def test_a_wildcard_right_is_refused_as_unlistable() -> None:
    with pytest.raises(ValueError, match=r"has a wildcard \(\*\)"):
        rule(apiGroups=["batch"], resources=["*"], verbs=["get"]).accesses()


def test_a_rule_lists_its_rights_as_group_resource_subresource_verb() -> None:
    assert rule(apiGroups=["kueue.x-k8s.io"], resources=["workloads/status"], verbs=["patch"]).accesses() == [
        Access("kueue.x-k8s.io", "workloads", "status", "patch")
    ]


# --- the audit log ------------------------------------------------------------------------------------------
def event(verb: str, uri: str, *, ref: dict[str, str] | None = None, code: int | None = 200, user: str = SA, audit_id: str = "1") -> str:
    out: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": audit_id,
        "stage": "ResponseComplete" if code is not None else "ResponseStarted",
        "requestURI": uri,
        "verb": verb,
        "user": {"username": user, "groups": list(SA_GROUPS)},
    }
    if ref is not None:
        out["objectRef"] = ref
    if code is not None:
        out["responseStatus"] = {"metadata": {}, "code": code}
    return json.dumps(out)


POD = {"resource": "pods", "namespace": "a", "name": "p", "apiVersion": "v1"}
LOG = [
    event("list", "/apis/batch/v1/jobs?labelSelector=x%3Dy&limit=500", ref={"resource": "jobs", "apiGroup": "batch", "apiVersion": "v1"}),
    event("watch", "/apis/batch/v1/jobs?watch=true", ref={"resource": "jobs", "apiGroup": "batch", "apiVersion": "v1"}, code=None),
    "",
    event(
        "patch",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/a/workloads/w/status",
        ref={"resource": "workloads", "namespace": "a", "name": "w", "apiGroup": "kueue.x-k8s.io", "subresource": "status"},
    ),
    event("get", "/api/v1/namespaces/a/pods/p", ref=POD, code=403),
    event("get", "/api/v1/namespaces/a/pods/p", ref=POD, code=403, audit_id="2"),
    event("get", "/version?timeout=32s"),
    event("get", "/api/v1/nodes", ref={"resource": "nodes", "apiVersion": "v1"}, user="system:admin"),
]  # fmt: skip


def test_the_audit_log_gives_each_request_of_the_user_once() -> None:
    entries = read_audit_log(LOG)
    assert sorted(requests_of(entries, SA)) == [
        Request("get", path="/version"),
        Request("get", "", "pods", namespace="a", name="p"),
        Request("list", "batch", "jobs"),
        Request("patch", "kueue.x-k8s.io", "workloads", "status", namespace="a", name="w"),
        Request("watch", "batch", "jobs"),
    ]
    assert {r.access for r in requests_of(entries, SA) if r.is_resource} == {
        Access("", "pods", "", "get"),
        Access("batch", "jobs", "", "list"),
        Access("batch", "jobs", "", "watch"),
        Access("kueue.x-k8s.io", "workloads", "status", "patch"),
    }
    assert groups_of(entries, SA) == SA_GROUPS


def test_the_audit_log_gives_the_requests_refused_with_403() -> None:
    assert denied_to(read_audit_log(LOG), SA) == [Request("get", "", "pods", namespace="a", name="p")]
    assert denied_to(read_audit_log(LOG), "system:admin") == []


def test_a_line_that_is_not_an_audit_event_is_named() -> None:
    with pytest.raises(AuditLogError, match=r"^audit\.log:2: not JSON"):
        read_audit_log([LOG[0], "{oops"], where="audit.log")
    with pytest.raises(AuditLogError, match=r"^audit log:1: not an audit Event$"):
        read_audit_log(['{"kind": "Policy"}'])


def test_the_policy_logs_metadata_for_the_named_users_only() -> None:
    assert audit_policy([SA]) == {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": [SA]}, {"level": "None"}],
    }


# --- the manager's role on a worker: the logs of a job's pods, and nothing else of pods ------------------
@pytest.mark.parametrize(
    ("request_", "allowed"),
    [
        (Request("list", "", "pods", namespace="team-a"), True),  # the job's pods, by their label
        (Request("get", "", "pods", "log", namespace="team-a", name="p"), True),  # one container's log
        (Request("get", "", "pods", namespace="team-a", name="p"), False),
        (Request("watch", "", "pods", namespace="team-a"), False),
        (Request("create", "", "pods", "exec", namespace="team-a", name="p"), False),
        (Request("get", "", "pods", "attach", namespace="team-a", name="p"), False),
        (Request("delete", "", "pods", namespace="team-a", name="p"), False),
    ],
)
def test_the_worker_role_reads_pods_logs_and_nothing_else_of_pods(request_: Request, allowed: bool) -> None:
    # Beyond what the Pod kind itself needs to run a Pod there (its adapter's worker rules).
    pod_kind = BY_FRAMEWORK["pod"].worker_rules()
    rules = tuple(Rule.from_dict(r) for r in WORKLOAD_RULES if r not in pod_kind)
    grant = Grant("ClusterRoleBinding kfed-multikueue", "ClusterRole kfed-multikueue", rules)
    assert grant.allows(request_) is allowed
