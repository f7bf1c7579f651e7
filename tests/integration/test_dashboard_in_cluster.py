"""`kfed dashboard --in-cluster` against a real apiserver: the dashboard reads with its own
ServiceAccount (deploy/dashboard's least-privilege role) and checks every read and action with a
SubjectAccessReview for the user its bearer token names. Users of one namespace see its jobs and
none of another's, cannot cancel there even with a hand-made POST carrying a valid CSRF token,
and cannot hold a ClusterQueue without the right; a token the apiserver does not accept gets
nothing; a browser signs in once with a form and keeps only a session cookie."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import html
import selectors
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from manager.api import kueue
from manager.api.core import JOB_NAME_LABEL, Job
from manager.cli.dashboard.incluster import SESSION_COOKIE, ClusterAccess, routes, token_expiry
from manager.cli.dashboard.reading import Session
from manager.cli.dashboard.server import CSRF_COOKIE, RECHECK_SECONDS, SESSION_ENDED, LocalAccess, Settings, Sleep, create_app
from manager.controllers.visibility import VisibilityServer
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from manager.kube.errors import AlreadyExistsError, NotFoundError
from tests.conftest import REPO_ROOT
from tests.harness import Provider
from tests.integration.controllers import crd_cluster

pytestmark = pytest.mark.integration

RBAC = "/apis/rbac.authorization.k8s.io/v1"
DASHBOARD = REPO_ROOT / "deploy" / "dashboard" / "dashboard.yaml"
USER_ROLES = REPO_ROOT / "deploy" / "manager" / "user-roles.yaml"


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "dash")


async def apply(client: KubeClient, path: str, body: dict[str, Any]) -> None:
    query = [("fieldManager", "kfed-test"), ("force", "true")]
    await client.request("PATCH", path, query=query, body=body, content_type="application/apply-patch+yaml")


async def install_roles(admin: KubeClient) -> None:
    """The in-cluster dashboard's ClusterRoles and bindings, and the user roles, as deploy/ has them."""
    for doc in yaml.safe_load_all(DASHBOARD.read_text()):
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            plural = "clusterroles" if doc["kind"] == "ClusterRole" else "clusterrolebindings"
            await apply(admin, f"{RBAC}/{plural}/{doc['metadata']['name']}", doc)
    for doc in yaml.safe_load_all(USER_ROLES.read_text()):
        await apply(admin, f"{RBAC}/clusterroles/{doc['metadata']['name']}", doc)


async def token(admin: KubeClient, namespace: str, account: str) -> str:
    """A ServiceAccount's token (the account made if it is not there yet)."""
    with contextlib.suppress(AlreadyExistsError):
        await admin.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body={"metadata": {"name": account}})
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = await admin.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token", body=request)
    return str(answer["status"]["token"])


def bind(name: str, namespace: str, role_kind: str, role: str, account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }


async def job_with_workload(admin: KubeClient, namespace: str, name: str, *, note: str = "") -> None:
    job = await admin.create(
        Job,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
            "spec": {
                "suspend": True,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}},
            },
        },
    )
    await admin.create(
        kueue.Workload,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": f"job-{name}",
                "namespace": namespace,
                "annotations": {"note": note} if note else {},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job.metadata.uid, "controller": True}],
            },
            "spec": {
                "queueName": "user-queue",
                "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}],
            },
        },
    )


@dataclass
class Fleet:
    admin: KubeClient
    dashboard: TestClient[web.Request, web.Application]
    tokens: dict[str, str]  # user -> bearer token
    namespaces: dict[str, str]  # user -> their namespace
    cluster_queue: str
    kubeconfig: Path  # the dashboard's own identity
    access: ClusterAccess  # its clocks may be moved on by a test


@contextlib.asynccontextmanager
async def serving(cluster: LocalCluster, tmp_path: Path, *, sleep: Sleep | None = None) -> AsyncIterator[Fleet]:
    """Two users (alice, bob), each with a namespace, a job and the reader role there, and the
    in-cluster dashboard serving them (`sleep`: its clock for refreshes and session rechecks)."""
    tag = uuid.uuid4().hex[:5]
    admin = await KubeClient.from_kubeconfig(cluster.kubeconfig(), name="admin")
    await install_roles(admin)
    dashboard_token = await token(admin, "kfed-system", "kfed-dashboard")
    namespaces = {"alice": f"{tag}-a", "bob": f"{tag}-b"}
    tokens = {}
    for user, ns in namespaces.items():
        await admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        tokens[user] = await token(admin, ns, user)
        canceller = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "cancel-jobs", "namespace": ns},
            "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["delete"]}],
        }
        await apply(admin, f"{RBAC}/namespaces/{ns}/roles/cancel-jobs", canceller)
        for name, kind, role in (("reader", "ClusterRole", "kfed-namespace-reader"), ("cancel", "Role", "cancel-jobs")):
            await apply(admin, f"{RBAC}/namespaces/{ns}/rolebindings/{name}", bind(name, ns, kind, role, user))
        await job_with_workload(admin, ns, f"{user}-job", note="<script>window.x=1</script>")
    cq = f"{tag}-cq"
    await admin.create(
        kueue.ClusterQueue, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {}}
    )
    kubeconfig = copy.deepcopy(cluster.kubeconfig())
    kubeconfig["users"] = [{"name": "kfed-dashboard", "user": {"token": dashboard_token}}]
    for context in kubeconfig["contexts"]:
        context["context"]["user"] = "kfed-dashboard"
    identity = await KubeClient.from_kubeconfig(kubeconfig, name="kfed-dashboard")
    path = tmp_path / "dashboard.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    access = ClusterAccess(identity, VisibilityServer(identity, lambda name: None, dict))
    app = create_app(Settings(access, extra_routes=[routes(access)]), sleep=sleep)
    async with TestClient(TestServer(app)) as client:
        yield Fleet(admin, client, tokens, namespaces, cq, path, access)
    await identity.close()
    await admin.close()


@pytest.fixture
async def fleet(cluster: LocalCluster, tmp_path: Path) -> AsyncIterator[Fleet]:
    async with serving(cluster, tmp_path) as served:
        yield served


def bearer(fleet: Fleet, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {fleet.tokens[user]}"}


async def csrf(fleet: Fleet) -> str:
    answer = await fleet.dashboard.get("/healthz")
    assert answer.status == 200
    return next(c.value for c in fleet.dashboard.session.cookie_jar if c.key == CSRF_COOKIE)


async def test_each_user_sees_the_jobs_of_their_namespace_and_none_of_another(fleet: Fleet) -> None:
    mine, theirs = fleet.namespaces["alice"], fleet.namespaces["bob"]
    answer = await fleet.dashboard.get("/jobs", headers=bearer(fleet, "alice"))
    page = html.unescape(await answer.text())
    assert answer.status == 200, page
    assert "alice-job" in page and "bob-job" not in page
    assert f"the jobs of namespace {mine} only" in page  # a ServiceAccount's own namespace
    assert f"system:serviceaccount:{mine}:alice" in page

    for path in (f"/jobs?namespace={theirs}", f"/jobs/{theirs}/job/bob-job", f"/jobs/{theirs}/job/bob-job/logs"):
        refused = await fleet.dashboard.get(path, headers=bearer(fleet, "alice"))
        text = html.unescape(await refused.text())
        assert refused.status == 403, (path, text)
        assert f'User "system:serviceaccount:{mine}:alice" cannot list resource "workloads"' in text, text
        assert "bob-job" not in text.replace(path, "")

    own = await fleet.dashboard.get(f"/jobs/{mine}/job/alice-job", headers=bearer(fleet, "alice"))
    assert own.status == 200, await own.text()
    # The fleet's workers and the ClusterQueues are not hers to read: left out, saying why.
    queues = html.unescape(await (await fleet.dashboard.get("/queues", headers=bearer(fleet, "alice"))).text())
    assert "cannot list ClusterQueues at cluster scope (forbidden)" in queues and fleet.cluster_queue not in queues


async def test_a_user_cannot_cancel_in_another_namespace_even_by_hand_but_can_in_their_own(fleet: Fleet) -> None:
    mine, theirs = fleet.namespaces["alice"], fleet.namespaces["bob"]
    token = await csrf(fleet)
    crafted = await fleet.dashboard.post(f"/jobs/{theirs}/job/bob-job/cancel", data={"csrf": token}, headers=bearer(fleet, "alice"))
    text = html.unescape(await crafted.text())
    assert crafted.status == 403 and f'cannot delete resource "jobs" in API group "batch" in the namespace "{theirs}"' in text, text
    assert (await fleet.admin.get(Job, "bob-job", namespace=theirs)).name == "bob-job"

    done = await fleet.dashboard.post(f"/jobs/{mine}/job/alice-job/cancel", data={"csrf": token}, headers=bearer(fleet, "alice"))
    assert done.status == 200 and f"job/alice-job deleted in namespace {mine}" in await done.text()
    with pytest.raises(NotFoundError):
        await fleet.admin.get(Job, "alice-job", namespace=mine)

    held = await fleet.dashboard.post(
        f"/queues/{fleet.cluster_queue}/stop-policy", data={"csrf": token, "policy": "Hold"}, headers=bearer(fleet, "alice")
    )
    assert held.status == 403 and 'cannot patch resource "clusterqueues"' in html.unescape(await held.text())
    assert (await fleet.admin.get(kueue.ClusterQueue, fleet.cluster_queue)).spec.stop_policy in (None, "None")


async def test_an_unknown_token_gets_nothing_and_a_browser_signs_in_once_with_a_form(fleet: Fleet) -> None:
    nobody = await fleet.dashboard.get("/jobs", allow_redirects=False)
    assert nobody.status == 302 and nobody.headers["Location"] == "/login"
    forged = await fleet.dashboard.get("/jobs", headers={"Authorization": "Bearer not-a-token"})
    assert forged.status == 401 and "not accepted" in await forged.text()

    token = await csrf(fleet)
    wrong = await fleet.dashboard.post("/login", data={"csrf": token, "token": "not-a-token"})
    assert wrong.status == 401 and "did not accept this token" in await wrong.text()
    signed = await fleet.dashboard.post("/login", data={"csrf": token, "token": fleet.tokens["bob"]}, allow_redirects=False)
    assert signed.status == 302 and signed.headers["Location"] == "/jobs"
    cookie = signed.cookies[SESSION_COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and fleet.tokens["bob"] not in cookie.value
    page = html.unescape(await (await fleet.dashboard.get("/jobs")).text())
    assert "bob-job" in page and "alice-job" not in page
    assert "<script>window.x=1</script>" not in await (await fleet.dashboard.get(f"/jobs/{fleet.namespaces['bob']}/job/bob-job")).text()

    out = await fleet.dashboard.post("/logout", data={"csrf": token}, allow_redirects=False)
    assert out.status == 302
    after = await fleet.dashboard.get("/jobs", allow_redirects=False)
    assert after.status == 302 and after.headers["Location"] == "/login"


async def test_the_in_cluster_command_serves_users_by_their_tokens(fleet: Fleet) -> None:
    """`kfed dashboard --in-cluster` as the chart runs it (its identity from a kubeconfig here)."""
    argv = [sys.executable, "-m", "manager.cli.main", "dashboard", "--in-cluster", "--no-browser", "--address=127.0.0.1", "--port=0"]
    process = subprocess.Popen([*argv, f"--kubeconfig={fleet.kubeconfig}"], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            line = process.stdout.readline() if selector.select(timeout=30) else ""
        assert "reading as each user's bearer token, checked with SubjectAccessReview" in line, line
        url = line.split()[2]
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{url}healthz") as health:
                assert health.status == 200
            async with http.get(f"{url}jobs", headers=bearer(fleet, "bob")) as page:
                text = await page.text()
                assert page.status == 200 and "bob-job" in text and "alice-job" not in text, text
            async with http.get(f"{url}jobs", allow_redirects=False) as anonymous:
                assert anonymous.status == 302
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_a_jobs_page_leaves_out_the_cluster_queue_a_user_may_not_get(fleet: Fleet) -> None:
    """The dashboard's own identity may read every ClusterQueue; alice may not get hers, so her
    job's page does not show it (the dashboard's review of each `get`)."""
    mine = fleet.namespaces["alice"]
    await fleet.admin.create(
        kueue.LocalQueue,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "user-queue", "namespace": mine},
            "spec": {"clusterQueue": fleet.cluster_queue},
        },
    )
    answer = await fleet.dashboard.get(f"/jobs/{mine}/job/alice-job", headers=bearer(fleet, "alice"))
    page = html.unescape(await answer.text())
    assert answer.status == 200, page
    assert f"ClusterQueue {fleet.cluster_queue} not shown: cannot get clusterqueues (forbidden)" in page, page


async def test_a_log_stream_is_refused_to_a_user_who_may_not_read_logs(fleet: Fleet) -> None:
    """carol may read her namespace's jobs and pods but not their logs: the stream of her job's
    log says the apiserver's refusal, though the dashboard's own identity may read logs."""
    namespace = f"{fleet.namespaces['alice']}-c"
    await fleet.admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    reader = next(doc for doc in yaml.safe_load_all(USER_ROLES.read_text()) if doc["metadata"]["name"] == "kfed-namespace-reader")
    no_logs = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "no-logs", "namespace": namespace},
        "rules": [rule for rule in reader["rules"] if rule["resources"] != ["pods/log"]],
    }
    await apply(fleet.admin, f"{RBAC}/namespaces/{namespace}/roles/no-logs", no_logs)
    carol = await token(fleet.admin, namespace, "carol")
    await apply(fleet.admin, f"{RBAC}/namespaces/{namespace}/rolebindings/no-logs", bind("no-logs", namespace, "Role", "no-logs", "carol"))
    await job_with_workload(fleet.admin, namespace, "carol-job")
    admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    await fleet.admin.patch(
        kueue.Workload, "job-carol-job", {"status": {"conditions": [admitted]}}, namespace=namespace, subresource="status"
    )  # admitted on the manager itself: its pods are read there
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "carol-job-0", "namespace": namespace, "labels": {JOB_NAME_LABEL: "carol-job"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]},
    }
    await token(fleet.admin, namespace, "default")  # no controller makes it here, and a pod needs it
    await fleet.admin.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod)
    answer = await fleet.dashboard.get(f"/jobs/{namespace}/job/carol-job/logs", headers={"Authorization": f"Bearer {carol}"})
    text = html.unescape(await answer.text())
    assert answer.status == 403 and not answer.headers["Content-Type"].startswith("text/event-stream"), text
    assert f'User "system:serviceaccount:{namespace}:carol" cannot get resource "pods/log"' in text, text


async def as_user(cluster: LocalCluster, bearer_token: str, name: str) -> KubeClient:
    """A client with a user's own credentials, as their kubeconfig on a workstation would have."""
    kubeconfig = copy.deepcopy(cluster.kubeconfig())
    kubeconfig["users"] = [{"name": name, "user": {"token": bearer_token}}]
    for context in kubeconfig["contexts"]:
        context["context"]["user"] = name
    return await KubeClient.from_kubeconfig(kubeconfig, name=name)


@pytest.mark.parametrize("mode", ["in-cluster", "workstation"])
async def test_a_stream_of_another_namespaces_job_is_refused_before_it_starts(cluster: LocalCluster, fleet: Fleet, mode: str) -> None:
    """alice opens the live updates of bob's job, of bob's namespace's jobs, and of bob's job's
    log, by hand: each is a 403 with the apiserver's refusal, not a stream (whose 200 would say
    only that it started), and names nothing of bob's; a job that is not there is a 404. In the
    cluster (her reviewed token) and on a workstation (the dashboard with her own credentials)."""
    mine, theirs = fleet.namespaces["alice"], fleet.namespaces["bob"]
    async with contextlib.AsyncExitStack() as stack:
        dashboard, headers = fleet.dashboard, bearer(fleet, "alice")
        if mode == "workstation":
            alice = await as_user(cluster, fleet.tokens["alice"], "alice")
            stack.push_async_callback(alice.close)
            app = create_app(Settings(LocalAccess(Session(alice, default_namespace=mine))))
            dashboard, headers = await stack.enter_async_context(TestClient(TestServer(app))), {}
        refused = {
            f"/jobs/{theirs}/job/bob-job/stream": "workloads",
            f"/jobs/stream?namespace={theirs}": "workloads",
            f"/jobs/{theirs}/job/bob-job/logs": "workloads",
        }
        for path, resource in refused.items():
            async with asyncio.timeout(30), dashboard.get(path, headers=headers) as answer:
                assert not answer.headers["Content-Type"].startswith("text/event-stream"), (path, answer.status)
                text = html.unescape(await answer.text())
            assert answer.status == 403, (path, answer.status, text)
            assert f'cannot list resource "{resource}"' in text and f'in the namespace "{theirs}"' in text, (path, text)
            assert "bob-job" not in text.replace(path, ""), (path, text)
        async with asyncio.timeout(30), dashboard.get(f"/jobs/{mine}/job/nobody/stream", headers=headers) as absent:
            text = html.unescape(await absent.text())
            assert absent.status == 404 and "nobody" in text, text
        # Her own job's live updates: a stream, its first update at once.
        async with asyncio.timeout(30), dashboard.get(f"/jobs/{mine}/job/alice-job/stream", headers=headers) as own:
            assert own.status == 200 and own.headers["Content-Type"] == "text/event-stream"
            first = (await own.content.readuntil(b"\n\n")).decode()
            assert first.startswith("event: fragment\n") and "alice-job" in first and "bob-job" not in first, first


async def test_a_browsers_session_ends_at_its_tokens_expiry(fleet: Fleet) -> None:
    """bob's token expires in an hour; signed in a minute before that, his session lasts that
    minute, not the dashboard's 8 hours (the clocks are the dashboard's, moved by the test)."""
    expires = token_expiry(fleet.tokens["bob"])
    assert expires is not None and expires - time.time() > 600
    started = time.monotonic()
    fleet.access.wall = lambda: expires - 60
    form = await csrf(fleet)
    signed = await fleet.dashboard.post("/login", data={"csrf": form, "token": fleet.tokens["bob"]}, allow_redirects=False)
    assert signed.status == 302 and signed.headers["Location"] == "/jobs"
    fleet.access.clock = lambda: started + 30
    assert (await fleet.dashboard.get("/jobs", allow_redirects=False)).status == 200
    fleet.access.clock = lambda: started + 90
    expired = await fleet.dashboard.get("/jobs", allow_redirects=False)
    assert expired.status == 302 and expired.headers["Location"] == "/login"
    stream = await fleet.dashboard.get("/jobs/stream")
    assert stream.status == 401 and "sign in first" in await stream.text()


async def test_an_open_live_view_ends_at_sign_out_within_one_recheck(cluster: LocalCluster, tmp_path: Path) -> None:
    """bob signs in with the form and opens the live Jobs view; he signs out (in another tab):
    the stream, still open, ends with the `end` event at the recheck of his session under way
    when he signed out, and no later one (the dashboard's clock runs 50 times faster here)."""
    signed_out = asyncio.Event()
    rechecks_begun_after: list[float] = []

    async def faster(seconds: float) -> None:
        if seconds == RECHECK_SECONDS and signed_out.is_set():
            rechecks_begun_after.append(seconds)
        await asyncio.sleep(seconds / 50)

    async with serving(cluster, tmp_path, sleep=faster) as fleet:
        form = await csrf(fleet)
        signed = await fleet.dashboard.post("/login", data={"csrf": form, "token": fleet.tokens["bob"]}, allow_redirects=False)
        assert signed.status == 302
        async with asyncio.timeout(60), fleet.dashboard.get("/jobs/stream") as stream:
            assert stream.status == 200 and stream.headers["Content-Type"] == "text/event-stream"
            first = (await stream.content.readuntil(b"\n\n")).decode()
            assert first.startswith("event: fragment\n") and "bob-job" in first and "alice-job" not in first, first
            out = await fleet.dashboard.post("/logout", data={"csrf": form}, allow_redirects=False)
            assert out.status == 302
            signed_out.set()
            rest = (await stream.content.read()).decode()  # to the stream's end: the deadline above if it never comes
        assert rest.endswith(f"event: end\ndata: {SESSION_ENDED}\n\n"), rest
        assert rechecks_begun_after == [], "the stream outlived the recheck under way at sign-out"
