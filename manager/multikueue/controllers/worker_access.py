"""The manager's identity on a worker, made through the worker's API: a ServiceAccount with only
MultiKueue's verbs, its token, and a kubeconfig that uses it (Kueue's setup script, as code).
`kfed register --create-service-account` and `kfed dev up` both make it here."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import time
from typing import Any

from manager.api import constants as c
from manager.api.core import Secret
from manager.api.rbac import Rule
from manager.engine.integrations.registry import ADAPTERS
from manager.kube.client import KubeClient
from manager.kube.errors import AlreadyExistsError, KubeError, NotFoundError
from manager.multikueue.rules.agent_health import AGENT_LEASE_NAME, AGENT_LEASE_NAMESPACE


class WorkerAccessError(Exception):
    """The worker refused or lacked something the ServiceAccount needs; one line, for the user."""


SERVICE_ACCOUNT = "kfed-multikueue"
AGENT_LEASE_ROLE = f"{SERVICE_ACCOUNT}-agent-lease"
TOKEN_WAIT_SECONDS = 5.0  # for the token controller to fill the token Secret in
TOKEN_REQUEST_SECONDS = 365 * 24 * 3600
MANAGED_BY = {"app.kubernetes.io/managed-by": "kfed"}
RBAC_PATH = "/apis/rbac.authorization.k8s.io/v1"
APPLY_PATCH = "application/apply-patch+yaml"

# The manager's identity on a worker: the verbs the manager uses there and no more. Each has
# its code path; tests/e2e/test_worker_access.py compares them with the audit log of a run.
# The ClusterRole is bound cluster-wide, or, when the administrator names the namespaces, by
# a RoleBinding in each (the same rules as deploy/multikueue-worker-access; a test keeps them equal).
# remote.py watches the worker's queues, for the capacity-aware dispatcher and for the refusal
# of a job no worker could ever admit (read only; where the role is bound per namespace, the
# cluster-scoped ones stay unreadable, which the manager asks before trying, and the worker's
# capacity counts as unknown). Optional: register's checklist does not require it.
QUEUE_READ_RULE: dict[str, list[str]] = {
    "apiGroups": [c.GROUP],
    "resources": ["clusterqueues", "cohorts", "localqueues", "resourceflavors"],
    "verbs": ["list", "watch"],
}
# read_api.py: the logs of a job's pods on the worker that runs it, for a user of the manager's
# read API (who must be allowed to read pods' logs in that namespace on the manager): the job's
# pods listed by their label, and one container's log read. Optional, as the queues' read.
LOG_READ_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
]
WORKLOAD_RULES: list[dict[str, list[str]]] = [
    # Each job kind MultiKueue dispatches, as its adapter declares (`worker_rules`): remote.py
    # lists and watches our jobs; workload.py creates one on the winner, and gets it when the name
    # is taken (ours, or a foreign job left alone); deleted with the copy and by gc.py. A worker
    # without a kind's CRD still runs the others.
    *(rule for adapter in ADAPTERS for rule in adapter.worker_rules()),
    # remote.py lists and watches the copies; workload.py creates them, patches them (priority
    # forwarded, our finalizer removed before the delete) and deletes them, as gc.py does.
    {"apiGroups": [c.GROUP], "resources": ["workloads"], "verbs": ["create", "delete", "list", "patch", "watch"]},
    # workload.py: a copy evicted on the manager gets its DeactivationTarget condition.
    {"apiGroups": [c.GROUP], "resources": ["workloads/status"], "verbs": ["patch"]},
    QUEUE_READ_RULE,
    *LOG_READ_RULES,
]
OPTIONAL_RULES = (QUEUE_READ_RULE, *LOG_READ_RULES)  # register's checklist does not require them
# Queues that follow the manager (propagation.py, `kfed register --propagate-queues`): a second
# ClusterRole, granted only to a manager that propagates. It creates the LocalQueue a copy needs
# and deletes the ones it created; cluster-wide it also reads a namespace (is it opted in with
# `kfed.dev/accept-queues`, or kfed's?), creates it, lists its own (by label) and deletes them,
# after listing what each holds (metadata only: an administrator's Secrets, ServiceAccounts,
# RoleBindings and ConfigMaps keep it; its pods and jobs are listed with the role above). A
# credential bound to some namespaces is given those: they exist.
QUEUES_ROLE = f"{SERVICE_ACCOUNT}-queues"
LOCAL_QUEUE_WRITE_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": [c.GROUP], "resources": ["localqueues"], "verbs": ["create", "delete"]},
]
NAMESPACE_WRITE_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create", "delete", "get", "list"]},
    {"apiGroups": [""], "resources": ["configmaps", "secrets", "serviceaccounts"], "verbs": ["list"]},
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"], "verbs": ["list"]},
]


def queue_propagation_rules(worker_namespaces: tuple[str, ...] | None) -> list[dict[str, list[str]]]:
    return [*LOCAL_QUEUE_WRITE_RULES, *(NAMESPACE_WRITE_RULES if worker_namespaces is None else [])]


# Whether the worker's kfed agent runs (remote.py reads its leader-election Lease): that one
# Lease, read only, through a Role in its namespace.
AGENT_LEASE_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [AGENT_LEASE_NAME], "verbs": ["get"]},
]


def required_access(namespaces: tuple[str, ...] | None) -> list[tuple[str, str, str, str, str]]:
    """(group, resource, subresource, verb, namespace) for each right MultiKueue needs: in each
    named namespace, or cluster-wide ("") where the manager watches the whole cluster."""
    optional = [id(rule) for rule in OPTIONAL_RULES]
    accesses = [access for rule in WORKLOAD_RULES if id(rule) not in optional for access in Rule.from_dict(rule).accesses()]
    return [(a.group, a.resource, a.subresource, a.verb, ns) for ns in namespaces or ("",) for a in accesses]


def _rbac(kind: str, name: str, namespace: str | None = None, **content: Any) -> tuple[str, dict[str, Any]]:
    """An RBAC object labelled as kfed's, and the path it is applied at."""
    metadata = {"name": name, **({"namespace": namespace} if namespace else {}), "labels": dict(MANAGED_BY)}
    plural = f"{kind.lower()}s"
    path = f"{RBAC_PATH}/namespaces/{namespace}/{plural}/{name}" if namespace else f"{RBAC_PATH}/{plural}/{name}"
    return path, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata, **content}


def worker_access_rbac(
    namespace: str, worker_namespaces: tuple[str, ...] | None, *, propagate_queues: bool = False
) -> list[tuple[str, dict[str, Any]]]:
    """The RBAC objects of the manager's ServiceAccount (in `namespace`), each with the path it
    is applied at: the ClusterRole bound cluster-wide, or in each of `worker_namespaces`; the
    agent Lease's Role, bound in the Lease's namespace; and with `propagate_queues`, the queues'
    ClusterRole, bound the same way as the first."""
    subjects = [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}]
    role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVICE_ACCOUNT}
    lease_role = {**role, "kind": "Role", "name": AGENT_LEASE_ROLE}
    objects = [
        _rbac("ClusterRole", SERVICE_ACCOUNT, rules=WORKLOAD_RULES),
        _rbac("Role", AGENT_LEASE_ROLE, AGENT_LEASE_NAMESPACE, rules=AGENT_LEASE_RULES),
        _rbac("RoleBinding", AGENT_LEASE_ROLE, AGENT_LEASE_NAMESPACE, roleRef=lease_role, subjects=subjects),
        *_bound(SERVICE_ACCOUNT, worker_namespaces, subjects),
    ]
    if propagate_queues:
        objects.append(_rbac("ClusterRole", QUEUES_ROLE, rules=queue_propagation_rules(worker_namespaces)))
        objects.extend(_bound(QUEUES_ROLE, worker_namespaces, subjects))
    return objects


def _bound(
    cluster_role: str, worker_namespaces: tuple[str, ...] | None, subjects: list[dict[str, str]]
) -> list[tuple[str, dict[str, Any]]]:
    """The bindings of a ClusterRole: cluster-wide, or a RoleBinding in each named namespace."""
    role = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role}
    if worker_namespaces is None:
        return [_rbac("ClusterRoleBinding", cluster_role, roleRef=role, subjects=subjects)]
    return [_rbac("RoleBinding", cluster_role, ns, roleRef=role, subjects=subjects) for ns in worker_namespaces]


async def create_service_account(
    worker: KubeClient,
    kubeconfig: dict[str, Any],
    *,
    namespace: str,
    worker_namespaces: tuple[str, ...] | None = None,
    propagate_queues: bool = False,
    token_wait: float = TOKEN_WAIT_SECONDS,
) -> dict[str, Any]:
    """Kueue's setup script, done through the API: a ServiceAccount with only MultiKueue's
    verbs (in `worker_namespaces` only, when named; with the queues' rights when the manager
    propagates them), a long-lived token for it, and a kubeconfig that uses that token. Run
    again, it brings the rights to what this kfed grants, and removes those it no longer does."""
    for ns in dict.fromkeys([namespace, AGENT_LEASE_NAMESPACE]):
        with contextlib.suppress(AlreadyExistsError):
            await worker.request("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    service_account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace}}
    with contextlib.suppress(AlreadyExistsError):
        await worker.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body=service_account)
    for path, body in worker_access_rbac(namespace, worker_namespaces, propagate_queues=propagate_queues):
        try:
            # Server-side apply: a role left by an earlier kfed gets exactly these rules.
            await worker.request("PATCH", path, query=[("fieldManager", "kfed"), ("force", "true")], body=body, content_type=APPLY_PATCH)
        except NotFoundError:
            ns = body["metadata"].get("namespace", "")
            raise WorkerAccessError(f"--worker-namespace {ns}: namespace not found on the worker (create it and its LocalQueue)") from None
    await _remove_stale_bindings(worker, SERVICE_ACCOUNT, worker_namespaces)
    await _remove_stale_bindings(worker, QUEUES_ROLE, worker_namespaces if propagate_queues else ())
    if not propagate_queues:
        with contextlib.suppress(NotFoundError):
            await worker.request("DELETE", f"{RBAC_PATH}/clusterroles/{QUEUES_ROLE}")
    token_secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": f"{SERVICE_ACCOUNT}-token",
            "namespace": namespace,
            "annotations": {"kubernetes.io/service-account.name": SERVICE_ACCOUNT},
        },
    }
    with contextlib.suppress(AlreadyExistsError):
        await worker.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body=token_secret)
    token = await _issued_token(worker, namespace, token_wait)
    out = copy.deepcopy(kubeconfig)
    out["users"] = [{"name": SERVICE_ACCOUNT, "user": {"token": token}}]
    out["contexts"][0]["context"]["user"] = SERVICE_ACCOUNT
    return out


async def _remove_stale_bindings(worker: KubeClient, name: str, worker_namespaces: tuple[str, ...] | None) -> None:
    """An earlier registration's bindings named `name` that this one does not make: the
    cluster-wide one when namespaces are named now (`()`: none is bound at all), and those in
    namespaces no longer named."""
    if worker_namespaces is not None:
        with contextlib.suppress(NotFoundError):
            await worker.request("DELETE", f"{RBAC_PATH}/clusterrolebindings/{name}")
    ours = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())
    query = [("labelSelector", ours), ("fieldSelector", f"metadata.name={name}")]
    listed = await worker.request("GET", f"{RBAC_PATH}/rolebindings", query=query)
    for item in listed.get("items") or []:
        ns = item["metadata"]["namespace"]
        if worker_namespaces is None or ns not in worker_namespaces:
            with contextlib.suppress(NotFoundError):
                await worker.request("DELETE", f"{RBAC_PATH}/namespaces/{ns}/rolebindings/{name}")


async def _issued_token(worker: KubeClient, namespace: str, wait: float) -> str:
    """The long-lived token the worker's token controller writes into the Secret (Kueue's setup
    script). A cluster without that controller (`kfed dev up` runs no kube-controller-manager
    on its workers) gets a TokenRequest token bound to the same Secret instead: deleting the
    Secret revokes either."""
    secret_name = f"{SERVICE_ACCOUNT}-token"
    deadline = time.monotonic() + wait
    while True:  # poll the Secret with a bound
        secret = await worker.get(Secret, secret_name, namespace=namespace)
        token = base64.b64decode((secret.data or {}).get("token", "")).decode()
        if token:
            return token
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.2)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": TOKEN_REQUEST_SECONDS,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": secret_name, "uid": secret.metadata.uid},
        },
    }
    try:
        answer = await worker.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{SERVICE_ACCOUNT}/token", body=request)
    except KubeError as err:
        raise WorkerAccessError(f"the worker issued no token for ServiceAccount {namespace}/{SERVICE_ACCOUNT}: {err}") from None
    token = str((answer.get("status") or {}).get("token") or "")
    if not token:
        raise WorkerAccessError(f"the worker issued no token for ServiceAccount {namespace}/{SERVICE_ACCOUNT}")
    return token
