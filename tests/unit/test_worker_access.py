"""The manager's identity on a worker: the RBAC `kfed register` applies, cluster-wide or in the
namespaces an administrator names, and the annotation that tells the manager those namespaces."""

from __future__ import annotations

from typing import Any

import pytest

from manager.api.rbac import Grant, Request, allows, grants_for, service_account_user
from manager.multikueue.controllers.worker_access import required_access, worker_access_rbac
from manager.multikueue.rules.plan import WORKER_NAMESPACES_ANNOTATION, worker_namespaces

SA = service_account_user("kfed-system", "kfed-multikueue")
GROUPS = ("system:serviceaccounts", "system:serviceaccounts:kfed-system", "system:authenticated")


def grants(worker_namespaces: tuple[str, ...] | None) -> list[Grant]:
    objects = [body for _, body in worker_access_rbac("kfed-system", worker_namespaces)]

    def of(kind: str) -> list[dict[str, Any]]:
        return [obj for obj in objects if obj["kind"] == kind]

    return grants_for(
        SA,
        GROUPS,
        cluster_roles=of("ClusterRole"),
        roles=of("Role"),
        cluster_role_bindings=of("ClusterRoleBinding"),
        role_bindings=of("RoleBinding"),
    )


def test_cluster_wide_access_is_one_clusterrolebinding_and_the_lease_role() -> None:
    applied = [(path, body["kind"]) for path, body in worker_access_rbac("kfed-system", None)]
    assert applied == [
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles/kfed-multikueue", "ClusterRole"),
        ("/apis/rbac.authorization.k8s.io/v1/namespaces/kfed-system/roles/kfed-multikueue-agent-lease", "Role"),
        ("/apis/rbac.authorization.k8s.io/v1/namespaces/kfed-system/rolebindings/kfed-multikueue-agent-lease", "RoleBinding"),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kfed-multikueue", "ClusterRoleBinding"),
    ]
    resolved = grants(None)
    assert allows(resolved, Request("watch", "kueue.x-k8s.io", "workloads"))  # the manager watches the whole cluster
    assert allows(resolved, Request("get", "coordination.k8s.io", "leases", namespace="kfed-system", name="kfed-worker-agent"))
    assert not allows(resolved, Request("get", "coordination.k8s.io", "leases", namespace="team-a", name="kfed-worker-agent"))


def test_named_namespaces_get_rolebindings_and_nothing_cluster_wide() -> None:
    applied = [(path, body["kind"]) for path, body in worker_access_rbac("kfed-system", ("team-a", "team-b"))]
    assert ("/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings/kfed-multikueue", "RoleBinding") in applied
    assert ("/apis/rbac.authorization.k8s.io/v1/namespaces/team-b/rolebindings/kfed-multikueue", "RoleBinding") in applied
    assert "ClusterRoleBinding" not in [kind for _, kind in applied]
    resolved = grants(("team-a", "team-b"))
    assert allows(resolved, Request("create", "batch", "jobs", namespace="team-a"))
    assert allows(resolved, Request("watch", "batch", "jobs", namespace="team-b"))
    assert not allows(resolved, Request("create", "batch", "jobs", namespace="team-c"))
    assert not allows(resolved, Request("watch", "batch", "jobs"))


def test_register_checks_each_right_where_the_manager_uses_it() -> None:
    everywhere = required_access(None)
    assert ("kueue.x-k8s.io", "workloads", "status", "patch", "") in everywhere
    assert {ns for *_, ns in everywhere} == {""}
    scoped = required_access(("a", "b"))
    assert len(scoped) == 2 * len(everywhere) and {ns for *_, ns in scoped} == {"a", "b"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("team-a", ("team-a",)), (" team-b, team-a ,team-b", ("team-a", "team-b"))],
)
def test_the_annotation_names_the_namespaces_the_manager_uses(value: str | None, expected: tuple[str, ...] | None) -> None:
    annotations = {WORKER_NAMESPACES_ANNOTATION: value} if value is not None else {}
    assert worker_namespaces(annotations) == expected


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("Team_A", "metadata.annotations[kfed.dev/worker-namespaces]: Invalid value: 'Team_A': \"Team_A\" is not a namespace name"),
        (" , ", "metadata.annotations[kfed.dev/worker-namespaces]: Invalid value: ' , ': names no namespace"),
    ],
)
def test_a_bad_annotation_is_refused_naming_it(value: str, error: str) -> None:
    with pytest.raises(ValueError) as caught:
        worker_namespaces({WORKER_NAMESPACES_ANNOTATION: value})
    assert str(caught.value) == error


def propagation_grants(worker_namespaces: tuple[str, ...] | None, *, propagate: bool) -> list[Grant]:
    objects = [body for _, body in worker_access_rbac("kfed-system", worker_namespaces, propagate_queues=propagate)]
    kinds = ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
    found = {kind: [obj for obj in objects if obj["kind"] == kind] for kind in kinds}
    return grants_for(
        SA,
        GROUPS,
        cluster_roles=found["ClusterRole"],
        roles=found["Role"],
        cluster_role_bindings=found["ClusterRoleBinding"],
        role_bindings=found["RoleBinding"],
    )


QUEUE_WRITES = [
    Request("create", "kueue.x-k8s.io", "localqueues", namespace="team-a"),
    Request("delete", "kueue.x-k8s.io", "localqueues", namespace="team-a", name="user-queue"),
]
NAMESPACE_WRITES = [
    Request("create", "", "namespaces"),
    Request("delete", "", "namespaces", name="team-a"),
    Request("list", "", "namespaces"),
]


def test_the_queues_rights_are_granted_only_to_a_manager_that_propagates() -> None:
    without = propagation_grants(None, propagate=False)
    assert not any(allows(without, request) for request in QUEUE_WRITES + NAMESPACE_WRITES)
    cluster_wide = propagation_grants(None, propagate=True)
    assert all(allows(cluster_wide, request) for request in QUEUE_WRITES + NAMESPACE_WRITES)
    assert not allows(cluster_wide, Request("update", "kueue.x-k8s.io", "localqueues", namespace="team-a", name="user-queue"))
    assert not allows(cluster_wide, Request("create", "kueue.x-k8s.io", "clusterqueues"))


def test_with_named_namespaces_only_their_queues_are_writable_and_no_namespace() -> None:
    named = propagation_grants(("team-a",), propagate=True)
    assert all(allows(named, request) for request in QUEUE_WRITES)
    assert not allows(named, Request("create", "kueue.x-k8s.io", "localqueues", namespace="team-b"))
    assert not any(allows(named, request) for request in NAMESPACE_WRITES)
    applied = [(path, body["kind"]) for path, body in worker_access_rbac("kfed-system", ("team-a",), propagate_queues=True)]
    assert ("/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings/kfed-multikueue-queues", "RoleBinding") in applied
