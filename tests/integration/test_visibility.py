"""Kueue's visibility API served by the manager, asked through the manager's apiserver as a user
asks it (`kubectl get --raw`, with the user's own identity): the pending Workloads of a
ClusterQueue and of a LocalQueue in the scheduler's order, seen by an administrator, by a user
of one namespace, and by a user of none. Then the manager's port called directly, as any pod
may call it: Kueue's visibility API and kfed's read API refuse a user of one namespace in
another, a token of another namespace's ServiceAccount, an answer cached for someone else,
`X-Remote-User` without the front proxy's verified certificate, a right taken away after 10 s,
and a bad `limit` or `offset` (a one-line 400)."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.api import kueue
from manager.api.meta import is_condition_true
from manager.dev import federation
from manager.dev.local import LocalCluster, free_port
from manager.kube.client import KubeClient
from manager.runtime import pki
from tests.conftest import REPO_ROOT
from tests.harness import Provider, eventually
from tests.integration.controllers import ControllerProcess, aggregated_cluster, aggregated_manager
from tests.prerequisites import missing_prerequisite

GROUP = "visibility.kueue.x-k8s.io"


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return aggregated_cluster(provider, "vis")


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    with aggregated_manager(cluster, tmp_path_factory.mktemp("visibility")) as process:
        yield process


def raw(cluster: LocalCluster, path: str, *, user: str | None = None) -> tuple[int, Any]:
    """`kubectl get --raw path`, as the admin or (impersonated) as `user`: (0, the answer) or (exit code, stderr)."""
    argv = [str(cluster.bin_dir / "kubectl"), f"--kubeconfig={cluster.kubeconfig_path}", "get", "--raw", path]
    if user is not None:
        argv.append(f"--as={user}")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return (0, json.loads(result.stdout)) if result.returncode == 0 else (result.returncode, result.stderr.strip())


def direct(manager: ControllerProcess, path: str, token: str) -> tuple[int, Any]:
    """GET `path` from the manager's visibility server itself, with a bearer token."""
    port = next(int(a.rsplit(":", 1)[1]) for a in manager.argv() if a.startswith("--visibility-bind-address="))
    context = ssl.create_default_context(cafile=str(manager.directory / f"certs-{manager.identity}" / "ca.crt"))
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def kueue_client(cluster: LocalCluster, *args: str, user: str | None = None) -> tuple[int, Any]:
    """hack/kueue/visibility-client: the same question asked with Kueue's own clientset, so the
    answer is decoded by Kueue's types."""
    binary = os.environ.get("KFED_KUEUE_VISIBILITY_CLIENT", "")
    if not binary or not Path(binary).is_file():
        missing_prerequisite(
            "Kueue's visibility client not built: export "
            "KFED_KUEUE_VISIBILITY_CLIENT=$(bash hack/kueue/build.sh visibility-client)/kueue-visibility-client (hack/test.sh does)"
        )
    argv = [binary, f"--kubeconfig={cluster.kubeconfig_path}", *(["--as", user] if user else []), *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return (0, json.loads(result.stdout)) if result.returncode == 0 else (result.returncode, result.stderr.strip())


def ordered(answer: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in answer["items"]]


def kueue_object(kind: str, metadata: dict[str, str], **content: Any) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": metadata, **content}


def quota(cq: str, cpu: int) -> dict[str, Any]:
    group = {"coveredResources": ["cpu"], "flavors": [{"name": f"{cq}-flavor", "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}
    return {"namespaceSelector": {}, "resourceGroups": [group]}


async def queues(kube: KubeClient, cq: str, namespaces: dict[str, str], cpu: int) -> None:
    await kube.create(kueue.ResourceFlavor, kueue_object("ResourceFlavor", {"name": f"{cq}-flavor"}))
    await kube.create(kueue.ClusterQueue, kueue_object("ClusterQueue", {"name": cq}, spec=quota(cq, cpu)))
    for ns, lq in namespaces.items():
        await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        await kube.create(kueue.LocalQueue, kueue_object("LocalQueue", {"name": lq, "namespace": ns}, spec={"clusterQueue": cq}))


async def workload(kube: KubeClient, ns: str, lq: str, name: str, *, priority: int = 0) -> None:
    pod = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}
    spec = {"queueName": lq, "priority": priority, "podSets": [{"name": "main", "count": 1, "template": {"spec": pod}}]}
    await kube.create(kueue.Workload, kueue_object("Workload", {"name": name, "namespace": ns}, spec=spec))


async def admitted(kube: KubeClient, namespaces: list[str]) -> list[str]:
    found = []
    for ns in namespaces:
        for wl in (await kube.list(kueue.Workload, namespace=ns)).items:
            if is_condition_true(wl.status.conditions if wl.status else None, "QuotaReserved"):
                found.append(wl.name)
    return sorted(found)


async def test_pending_workloads_are_listed_in_admission_order_for_those_who_may_read_them(
    manager: ControllerProcess, cluster: LocalCluster, kube: KubeClient, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:5]
    cq, team_a, team_b = f"vis-{tag}", f"team-a-{tag}", f"team-b-{tag}"
    await queues(kube, cq, {team_a: "lq", team_b: "lq"}, cpu=1)
    await workload(kube, team_a, "lq", "running")
    await eventually(lambda: admitted(kube, [team_a]), timeout=30, what="the first Workload admitted, filling the queue")
    # Distinct priorities: Workloads created within one second tie on their timestamp.
    for ns, name, priority in ((team_a, "a-low", 0), (team_b, "b-low", 2), (team_a, "a-high", 10), (team_b, "b-mid", 5)):
        await workload(kube, ns, "lq", name, priority=priority)

    cq_path = f"/apis/{GROUP}/v1beta2/clusterqueues/{cq}/pendingworkloads"

    async def all_four_listed() -> Any:
        code, answer = raw(cluster, cq_path)
        return answer if code == 0 and len(answer["items"]) == 4 else None

    # The administrator, through the apiserver (the APIService routes to the manager).
    answer = await eventually(all_four_listed, timeout=60, what="the four pending Workloads listed by the visibility API")
    assert answer["kind"] == "PendingWorkloadsSummary" and answer["apiVersion"] == f"{GROUP}/v1beta2"
    assert ordered(answer) == [("a-high", 0, 0), ("b-mid", 1, 0), ("b-low", 2, 1), ("a-low", 3, 1)]
    assert {i["localQueueName"] for i in answer["items"]} == {"lq"} and answer["items"][0]["priority"] == 10
    assert ordered(raw(cluster, cq_path + "?limit=2&offset=1")[1]) == [("b-mid", 1, 0), ("b-low", 2, 1)]
    code, v1beta1 = raw(cluster, cq_path.replace("v1beta2", "v1beta1"))
    assert code == 0 and v1beta1["apiVersion"] == f"{GROUP}/v1beta1" and ordered(v1beta1) == ordered(answer)
    lq_b = f"/apis/{GROUP}/v1beta2/namespaces/{team_b}/localqueues/lq/pendingworkloads"
    assert ordered(raw(cluster, lq_b)[1]) == [("b-mid", 1, 0), ("b-low", 2, 1)]

    # A client built for Kueue, with Kueue's own clientset and types, gets the same answer.
    code, decoded = kueue_client(cluster, "clusterqueue", cq)
    assert code == 0, decoded
    assert [(i["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in decoded["items"]] == ordered(answer)
    assert decoded["items"][0] == {
        "name": "a-high", "namespace": team_a, "localQueueName": "lq", "priority": 10,
        "positionInClusterQueue": 0, "positionInLocalQueue": 0,
    }  # fmt: skip
    code, decoded = kueue_client(cluster, "--version", "v1beta1", "clusterqueue", cq)
    assert code == 0 and len(decoded["items"]) == 4, decoded

    # A user who may read team-a's pending Workloads only: team-a's LocalQueue, nothing else.
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "pending-reader", "namespace": team_a},
        "rules": [{"apiGroups": [GROUP], "resources": ["localqueues/pendingworkloads"], "verbs": ["get"]}],
    }
    binding: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "pending-reader", "namespace": team_a},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pending-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }
    await kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{team_a}/roles", body=role)
    await kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{team_a}/rolebindings", body=binding)
    lq_a = f"/apis/{GROUP}/v1beta2/namespaces/{team_a}/localqueues/lq/pendingworkloads"
    code, mine = raw(cluster, lq_a, user="alice")
    assert code == 0 and ordered(mine) == [("a-high", 0, 0), ("a-low", 3, 1)]
    code, decoded = kueue_client(cluster, "localqueue", team_a, "lq", user="alice")
    assert code == 0 and [i["name"] for i in decoded["items"]] == ["a-high", "a-low"], decoded
    code, refused = kueue_client(cluster, "clusterqueue", cq, user="alice")
    assert code != 0 and "forbidden" in refused.lower(), refused
    for path in (lq_b, cq_path):
        code, refused = raw(cluster, path, user="alice")
        assert code != 0 and "forbidden" in refused.lower(), (path, refused)
    # The manager decides too, by TokenReview and SubjectAccessReview, for a client that calls
    # it directly with a token (a ServiceAccount bound to the same Role).
    await kube.request("POST", f"/api/v1/namespaces/{team_a}/serviceaccounts", body={"metadata": {"name": "reader"}})
    sa_binding = {
        **binding,
        "metadata": {"name": "sa-pending-reader", "namespace": team_a},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": team_a}],
    }
    await kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{team_a}/rolebindings", body=sa_binding)
    token = (
        await kube.request("POST", f"/api/v1/namespaces/{team_a}/serviceaccounts/reader/token", body={"spec": {"expirationSeconds": 600}})
    )["status"]["token"]
    assert direct(manager, lq_a, token)[0] == 200
    assert direct(manager, lq_b, token)[0] == 403
    assert direct(manager, lq_a, "not-a-token")[0] == 401
    # A user of no namespace sees nothing at all.
    for path in (lq_a, lq_b, cq_path):
        code, refused = raw(cluster, path, user="mallory")
        assert code != 0 and "forbidden" in refused.lower(), (path, refused)

    # The positions are the order of admission: as room appears one Workload at a time, they
    # are admitted as listed.
    order = [name for name, _, _ in ordered(answer)]
    seen: list[str] = []
    for step, expected in enumerate(order, start=2):
        await kube.patch(
            kueue.ClusterQueue,
            cq,
            {
                "spec": {
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu"],
                            "flavors": [{"name": f"{cq}-flavor", "resources": [{"name": "cpu", "nominalQuota": step}]}],
                        }
                    ]
                }
            },
        )

        async def one_more(count: int = step) -> list[str] | None:
            now = await admitted(kube, [team_a, team_b])
            return now if len(now) == count else None

        now = await eventually(one_more, timeout=30, what=f"{step} Workloads admitted")
        new = sorted(set(now) - {"running", *seen})
        assert new == [expected], (new, expected)
        seen.append(expected)


async def test_the_visibility_api_is_discoverable_and_a_missing_queue_is_not_found(
    manager: ControllerProcess, cluster: LocalCluster
) -> None:
    code, resources = raw(cluster, f"/apis/{GROUP}/v1beta2")
    assert code == 0 and "clusterqueues/pendingworkloads" in [r["name"] for r in resources["resources"]]
    code, message = raw(cluster, f"/apis/{GROUP}/v1beta2/clusterqueues/no-such-queue/pendingworkloads")
    assert code != 0 and "not found" in message.lower()
    code, message = raw(cluster, f"/apis/{GROUP}/v1beta2/clusterqueues/any/pendingworkloads?limit=-3")
    assert code != 0 and "limit" in message


async def test_a_standby_replica_answers_from_its_own_caches(
    manager: ControllerProcess, cluster: LocalCluster, kube: KubeClient, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:5]
    cq, ns = f"standby-{tag}", f"standby-{tag}"
    await queues(kube, cq, {ns: "lq"}, cpu=0)
    for name, priority in (("first", 5), ("second", 1)):
        await workload(kube, ns, "lq", name, priority=priority)
    standby = ControllerProcess(cluster, tmp_path, identity="replica-standby", extra=federation.visibility_flags(free_port())).start()
    try:
        standby.wait_ready()  # ready: its caches are synced, though it does not lead
        await kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", body={"metadata": {"name": "reader"}})
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"pending-{tag}"},
            "rules": [{"apiGroups": [GROUP], "resources": ["clusterqueues/pendingworkloads"], "verbs": ["get"]}],
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"pending-{tag}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"pending-{tag}"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
        }
        await kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", body=role)
        await kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body=binding)
        token = (await kube.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/reader/token", body={"spec": {}}))["status"]["token"]
        path = f"/apis/{GROUP}/v1beta2/clusterqueues/{cq}/pendingworkloads"

        async def listed_by_the_standby() -> Any:
            code, answer = direct(standby, path, token)
            return answer if code == 200 and len(answer["items"]) == 2 else None

        answer = await eventually(listed_by_the_standby, timeout=30, what="the standby listing both pending Workloads")
        assert ordered(answer) == [("first", 0, 0), ("second", 1, 1)]
        assert not standby.is_leader_log()
    finally:
        standby.terminate()


# --- the manager's port called directly -------------------------------------------------------------------
# The Service in front of the manager is reachable by any pod, so these checks are the only ones a
# caller that skips the apiserver meets: each is asked of the port itself, with real tokens,
# RoleBindings and certificates, and each refusal is shown next to the same request allowed.
READS = "/apis/reads.kfed.dev/v1alpha1"
USER_ROLES = REPO_ROOT / "deploy" / "manager" / "user-roles.yaml"


def call(
    manager: ControllerProcess,
    path: str,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    certificate: tuple[Path, Path] | None = None,
) -> tuple[int, str]:
    """GET `path` from the manager's port, not through the apiserver: (status, body), or (0, why)
    when the TLS handshake refuses the client."""
    port = next(int(a.rsplit(":", 1)[1]) for a in manager.argv() if a.startswith("--visibility-bind-address="))
    context = ssl.create_default_context(cafile=str(manager.directory / f"certs-{manager.identity}" / "ca.crt"))
    if certificate is not None:
        context.load_cert_chain(str(certificate[0]), str(certificate[1]))
    sent = {**(headers or {}), **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers=sent)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:  # ssl.SSLError, a reset: the handshake refused the certificate
        return 0, str(err)


@dataclass
class Tenants:
    """Two namespaces, each with a LocalQueue, a Workload of the same name and a ServiceAccount
    `reader` bound to the shipped kfed-namespace-reader there; B also has a Workload whose name
    A must never see, and A a ServiceAccount bound to nothing."""

    a: str
    b: str
    same: str  # the name of a Workload in both
    secret: str  # B's own
    tokens: dict[str, str]  # "a", "b" (each namespace's reader), "nobody" (in A)


async def service_account_token(kube: KubeClient, namespace: str, name: str) -> str:
    await kube.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body={"metadata": {"name": name}})
    answer = await kube.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body={"spec": {"expirationSeconds": 3600}}
    )
    return str(answer["status"]["token"])


def reader_binding(namespace: str, name: str, subject: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kfed-namespace-reader"},
        "subjects": [subject],
    }


async def two_tenants(kube: KubeClient) -> Tenants:
    tag = uuid.uuid4().hex[:5]
    for doc in yaml.safe_load_all(USER_ROLES.read_text()):
        path = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{doc['metadata']['name']}"
        query = [("fieldManager", "kfed-test"), ("force", "true")]
        await kube.request("PATCH", path, query=query, body=doc, content_type="application/apply-patch+yaml")
    a, b = f"iso-a-{tag}", f"iso-b-{tag}"
    await queues(kube, f"iso-{tag}", {a: "lq", b: "lq"}, cpu=0)  # no room: every Workload stays pending
    same, secret = f"same-{tag}", f"b-secret-{tag}"
    for ns, name in ((a, same), (b, same), (b, secret)):
        await workload(kube, ns, "lq", name)
    tokens = {}
    for key, ns in (("a", a), ("b", b)):
        tokens[key] = await service_account_token(kube, ns, "reader")
        subject = {"kind": "ServiceAccount", "name": "reader", "namespace": ns}
        await kube.request(
            "POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", body=reader_binding(ns, "reader", subject)
        )
    tokens["nobody"] = await service_account_token(kube, a, "nobody")
    return Tenants(a, b, same, secret, tokens)


def tenant_paths(namespace: str, workload_name: str) -> dict[str, str]:
    """Every namespaced read of the manager's port: Kueue's visibility API and kfed's read API."""
    base = f"{READS}/namespaces/{namespace}/workloads/{workload_name}"
    return {
        "pending": f"/apis/{GROUP}/v1beta2/namespaces/{namespace}/localqueues/lq/pendingworkloads",
        "verdicts": f"{base}/verdicts",
        "pods": f"{base}/pods",
        "log": f"{base}/log?pod=p",
    }


async def readable(manager: ControllerProcess, tenants: Tenants) -> None:
    """Wait until the manager's caches hold A's Workload: A's reader is answered 200."""

    async def answered() -> bool:
        code, _ = call(manager, tenant_paths(tenants.a, tenants.same)["verdicts"], token=tenants.tokens["a"])
        return code == 200

    await eventually(answered, timeout=30, what="A's reader answered about A's Workload by the manager's port")


def message_of(body: str) -> str:
    """The message of a Kubernetes Status answer ("" for any other body)."""
    try:
        found = json.loads(body)
    except ValueError:
        return ""
    return str(found.get("message", "")) if isinstance(found, dict) else ""


def refused_as(user: str, code: int, body: str) -> bool:
    return code == 403 and f'is forbidden: User "{user}"' in message_of(body)


async def test_a_user_allowed_in_one_namespace_is_refused_every_read_of_another_on_the_managers_port(
    manager: ControllerProcess, kube: KubeClient
) -> None:
    tenants = await two_tenants(kube)
    await readable(manager, tenants)
    user = f"system:serviceaccount:{tenants.a}:reader"
    # In A, every read passes the checks: the pods and the log of a Workload that runs on no
    # worker are not found, after the checks.
    own = {name: call(manager, path, token=tenants.tokens["a"]) for name, path in tenant_paths(tenants.a, tenants.same).items()}
    assert {name: code for name, (code, _) in own.items()} == {"pending": 200, "verdicts": 200, "pods": 404, "log": 404}, own
    assert tenants.same in own["pending"][1] and tenants.secret not in own["pending"][1]
    # In B, the same reads (B's Workload of the same name, and B's own) are each refused.
    for name in (tenants.same, tenants.secret):
        for what, path in tenant_paths(tenants.b, name).items():
            code, body = call(manager, path, token=tenants.tokens["a"])
            assert refused_as(user, code, body), (what, path, code, body)
            assert f'"{tenants.b}"' in message_of(body) and "items" not in body and "workers" not in body, body
    # The workers' health is kfed-fleet-reader's, not the namespace reader's.
    for path in (f"{READS}/clusters", f"{READS}/clusters/worker1"):
        code, body = call(manager, path, token=tenants.tokens["a"])
        assert refused_as(user, code, body), (path, code, body)


async def test_a_token_of_another_namespaces_service_account_reads_nothing_here(manager: ControllerProcess, kube: KubeClient) -> None:
    tenants = await two_tenants(kube)
    await readable(manager, tenants)
    for key in ("b", "nobody"):
        account = "reader" if key == "b" else "nobody"
        user = f"system:serviceaccount:{tenants.b if key == 'b' else tenants.a}:{account}"
        for what, path in tenant_paths(tenants.a, tenants.same).items():
            code, body = call(manager, path, token=tenants.tokens[key])
            assert refused_as(user, code, body), (key, what, code, body)
    code, body = call(manager, tenant_paths(tenants.a, tenants.same)["verdicts"], token=tenants.tokens["a"] + "x")
    assert code == 401, body  # a token the apiserver does not accept


async def test_a_log_through_the_manager_needs_the_right_to_read_pods_logs_in_its_namespace(
    manager: ControllerProcess, kube: KubeClient
) -> None:
    """`logger` may read kfed's `workloads/log` and `workloads/pods` in every namespace, but pods'
    logs (core `pods/log`) only in A: the manager relays A's logs and no other namespace's."""
    tenants = await two_tenants(kube)
    await readable(manager, tenants)
    tag = tenants.a.removeprefix("iso-a-")
    logger = await service_account_token(kube, tenants.a, "logger")
    subject = {"kind": "ServiceAccount", "name": "logger", "namespace": tenants.a}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"workload-logs-{tag}"},
        "rules": [{"apiGroups": ["reads.kfed.dev"], "resources": ["workloads/log", "workloads/pods"], "verbs": ["get"]}],
    }
    everywhere = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"workload-logs-{tag}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"workload-logs-{tag}"},
        "subjects": [subject],
    }
    await kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", body=role)
    await kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body=everywhere)
    binding = reader_binding(tenants.a, "logger", subject)  # pods/log in A
    await kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{tenants.a}/rolebindings", body=binding)
    user = f"system:serviceaccount:{tenants.a}:logger"
    for what in ("log", "pods"):

        async def past_the_checks(path: str = tenant_paths(tenants.a, tenants.same)[what]) -> bool:
            return call(manager, path, token=logger)[0] == 404  # A's Workload runs on no worker

        await eventually(past_the_checks, timeout=30, what=f"the {what} of A's Workload past the checks")
        code, body = call(manager, tenant_paths(tenants.b, tenants.same)[what], token=logger)
        assert refused_as(user, code, body), (what, code, body)
        assert f'cannot get resource "pods/log" in API group "" in the namespace "{tenants.b}"' in message_of(body), body


async def test_an_answer_for_one_user_and_namespace_is_never_reused_for_another(manager: ControllerProcess, kube: KubeClient) -> None:
    """The reviews are cached 10 s: asked one after the other within that time, the same question
    about a Workload of the same name is answered for each user and each namespace."""
    tenants = await two_tenants(kube)
    await readable(manager, tenants)
    mine, theirs = tenant_paths(tenants.a, tenants.same), tenant_paths(tenants.b, tenants.same)
    for what in ("pending", "verdicts", "log"):
        assert call(manager, mine[what], token=tenants.tokens["a"])[0] in (200, 404), what  # allowed, and kept
        code, body = call(manager, theirs[what], token=tenants.tokens["a"])  # the same user, another namespace
        assert refused_as(f"system:serviceaccount:{tenants.a}:reader", code, body), (what, code, body)
        code, body = call(manager, mine[what], token=tenants.tokens["nobody"])  # the same namespace, another user
        assert refused_as(f"system:serviceaccount:{tenants.a}:nobody", code, body), (what, code, body)
        code, body = call(manager, mine[what], token=tenants.tokens["b"])
        assert refused_as(f"system:serviceaccount:{tenants.b}:reader", code, body), (what, code, body)


async def test_the_front_proxys_headers_are_believed_only_with_its_verified_client_certificate(
    manager: ControllerProcess, cluster: LocalCluster, kube: KubeClient, tmp_path: Path
) -> None:
    tenants = await two_tenants(kube)
    await readable(manager, tenants)
    alice = reader_binding(tenants.a, "alice", {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"})
    await kube.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{tenants.a}/rolebindings", body=alice)
    pki_dir = cluster.directory / "pki"
    proxy = (pki_dir / "front-proxy-client.crt", pki_dir / "front-proxy-client.key")
    front_proxy_ca = pki.KeyPair((pki_dir / "front-proxy-ca.crt").read_bytes(), (pki_dir / "front-proxy-ca.key").read_bytes())
    stranger = pki.write(tmp_path, "stranger", pki.issue(front_proxy_ca, "not-the-front-proxy", client=True))
    other_ca = pki.new_ca("another-ca")
    forged = pki.write(tmp_path, "forged", pki.issue(other_ca, "front-proxy-client", client=True))
    mine, theirs = tenant_paths(tenants.a, tenants.same)["pending"], tenant_paths(tenants.b, tenants.same)["pending"]
    as_alice = {"X-Remote-User": "alice", "X-Remote-Group": "system:authenticated"}
    as_admin = {"X-Remote-User": "kubernetes-admin", "X-Remote-Group": "system:masters"}

    # The front proxy's own certificate: its headers name the user, who is then reviewed.
    async def alice_allowed() -> bool:
        return call(manager, mine, headers=as_alice, certificate=proxy)[0] == 200

    await eventually(alice_allowed, timeout=15, what="alice, named by the front proxy, reading her namespace")
    code, body = call(manager, theirs, headers=as_alice, certificate=proxy)
    assert refused_as("alice", code, body), (code, body)
    # Without a certificate, or with one from another CA, or one the CA gave another client, the
    # same headers name nobody: an administrator spoofed by a pod is refused.
    for certificate in (None, forged, stranger):
        code, body = call(manager, theirs, headers=as_admin, certificate=certificate)
        assert code in (0, 401), (certificate, code, body)
    # With a token too, the token decides, never the headers beside it.
    code, body = call(manager, theirs, headers=as_admin, token=tenants.tokens["a"])
    assert refused_as(f"system:serviceaccount:{tenants.a}:reader", code, body), (code, body)


async def test_a_right_taken_away_stops_working_within_ten_seconds(manager: ControllerProcess, kube: KubeClient) -> None:
    """The reviews' answers are kept 10 s at most, as k8s.io/apiserver's delegating authorizer keeps them."""
    tenants = await two_tenants(kube)
    await readable(manager, tenants)
    path = tenant_paths(tenants.a, tenants.same)["verdicts"]
    assert call(manager, path, token=tenants.tokens["a"])[0] == 200
    await kube.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{tenants.a}/rolebindings/reader")
    started = time.monotonic()

    async def refused() -> bool:
        return call(manager, path, token=tenants.tokens["a"])[0] == 403

    await eventually(refused, timeout=30, what="the reader refused once its RoleBinding is gone")
    assert time.monotonic() - started < 15, "an allowed answer outlived the 10 s cache"


@pytest.mark.parametrize(
    ("query", "parameter"),
    [("limit=%C2%B2", "limit"), ("offset=%D9%A3", "offset"), ("limit=" + "1" * 5000, "limit"), ("limit=-1", "limit")],
    ids=["superscript-two", "arabic-indic-three", "5000-digits", "negative"],
)
async def test_a_bad_limit_or_offset_is_a_one_line_400_naming_it(
    manager: ControllerProcess, cluster: LocalCluster, kube: KubeClient, query: str, parameter: str
) -> None:
    tenants = await two_tenants(kube)
    await readable(manager, tenants)
    path = tenant_paths(tenants.a, tenants.same)["pending"]
    code, body = call(manager, f"{path}?{query}", token=tenants.tokens["a"])
    message = json.loads(body)["message"]
    assert code == 400 and message.startswith(f"{parameter}: Invalid value: ") and "\n" not in message and len(message) < 200, body
    code, said = raw(cluster, f"{path}?{query}")  # through the apiserver, as kubectl asks
    assert code != 0 and f"{parameter}: Invalid value" in said and "Traceback" not in said, said
