"""The in-cluster dashboard's plots against a real apiserver: the recorder reads every
namespace's Workloads with the dashboard's own ServiceAccount, and a user who may list
ClusterQueues sees the admission waits of every namespace, but the names (namespace and
Workload) only of those where the apiserver lets that user list Workloads; of the others,
only how long they waited and the caption's aggregates."""

from __future__ import annotations

import contextlib
import copy
import html
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from manager.api import kueue
from manager.api.meta import format_time
from manager.cli.dashboard.incluster import ClusterAccess, routes
from manager.cli.dashboard.reading import Session
from manager.cli.dashboard.server import LocalAccess, Settings, create_app
from manager.controllers.visibility import VisibilityServer
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from tests.harness import Provider, eventually
from tests.integration.controllers import crd_cluster
from tests.integration.test_dashboard_in_cluster import RBAC, apply, as_user, bind, install_roles, token

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "plots")


async def admitted_workload(admin: KubeClient, namespace: str, name: str, *, cq: str, waited: timedelta) -> None:
    """A Workload admitted to `cq` just now, after waiting `waited` since its creation (as
    Kueue writes it: QuotaReserved and Admitted at the admission)."""
    spec = {
        "queueName": "user-queue",
        "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}],
    }
    created = await admin.create(
        kueue.Workload,
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": namespace}, "spec": spec},
        namespace=namespace,
    )
    assert created.metadata.creation_timestamp is not None
    at = format_time(created.metadata.creation_timestamp + waited)
    conditions = [
        {"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": at} for kind in ("QuotaReserved", "Admitted")
    ]
    assignment = {"name": "main", "count": 1, "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}}
    status = {"admission": {"clusterQueue": cq, "podSetAssignments": [assignment]}, "conditions": conditions}
    await admin.patch(kueue.Workload, name, {"status": status}, namespace=namespace, subresource="status")


@dataclass
class Admissions:
    admin: KubeClient
    tokens: dict[str, str]  # user -> bearer token
    namespaces: dict[str, str]  # user -> their namespace
    tag: str


@contextlib.asynccontextmanager
async def admissions(cluster: LocalCluster) -> AsyncIterator[Admissions]:
    """Users alice (namespace A) and bob (namespace B), each a kfed-namespace-reader there, and
    both allowed to list ClusterQueues; one Workload of each namespace admitted to the same
    ClusterQueue (alice's after 30 s, bob's after 108 s)."""
    tag = uuid.uuid4().hex[:5]
    admin = await KubeClient.from_kubeconfig(cluster.kubeconfig(), name="admin")
    await install_roles(admin)
    queue_reader = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"{tag}-queue-reader"},
        "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues", "cohorts"], "verbs": ["get", "list"]}],
    }
    await apply(admin, f"{RBAC}/clusterroles/{tag}-queue-reader", queue_reader)
    namespaces = {"alice": f"{tag}-a", "bob": f"{tag}-b"}
    tokens, subjects = {}, []
    for user, ns in namespaces.items():
        await admin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        tokens[user] = await token(admin, ns, user)
        await apply(admin, f"{RBAC}/namespaces/{ns}/rolebindings/reader", bind("reader", ns, "ClusterRole", "kfed-namespace-reader", user))
        subjects.append({"kind": "ServiceAccount", "name": user, "namespace": ns})
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{tag}-queue-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{tag}-queue-reader"},
        "subjects": subjects,
    }
    await apply(admin, f"{RBAC}/clusterrolebindings/{tag}-queue-reader", binding)
    cq = f"{tag}-cq"
    await admin.create(
        kueue.ClusterQueue, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": {}}
    )
    await admitted_workload(admin, namespaces["alice"], f"{tag}-alices-run", cq=cq, waited=timedelta(seconds=30))
    await admitted_workload(admin, namespaces["bob"], f"{tag}-secret-merger-project", cq=cq, waited=timedelta(seconds=108))
    try:
        yield Admissions(admin, tokens, namespaces, tag)
    finally:
        await admin.close()


@pytest.fixture
async def plots(cluster: LocalCluster) -> AsyncIterator[tuple[TestClient[Any, Any], dict[str, str], dict[str, str], str]]:
    """The in-cluster dashboard with its recorder (the dashboard's own identity), serving the
    users of `admissions`. Yields (dashboard, tokens, namespaces, tag)."""
    async with admissions(cluster) as world:
        kubeconfig = copy.deepcopy(cluster.kubeconfig())  # the dashboard's own identity
        kubeconfig["users"] = [{"name": "kfed-dashboard", "user": {"token": await token(world.admin, "kfed-system", "kfed-dashboard")}}]
        for context in kubeconfig["contexts"]:
            context["context"]["user"] = "kfed-dashboard"
        identity = await KubeClient.from_kubeconfig(kubeconfig, name="kfed-dashboard")
        access = ClusterAccess(identity, VisibilityServer(identity, lambda name: None, dict))
        app = create_app(Settings(access, extra_routes=[routes(access)], recorder=identity, sample_every=0.2))
        async with TestClient(TestServer(app)) as client:
            yield client, world.tokens, world.namespaces, world.tag
        await identity.close()


async def test_a_plot_names_only_the_workloads_of_namespaces_the_user_may_list(
    plots: tuple[TestClient[Any, Any], dict[str, str], dict[str, str], str],
) -> None:
    dashboard, tokens, namespaces, tag = plots

    async def queues_page(user: str) -> str:
        answer = await dashboard.get("/queues", headers={"Authorization": f"Bearer {tokens[user]}"})
        assert answer.status == 200, await answer.text()
        return html.unescape(await answer.text())

    async def both_recorded() -> str | None:
        page = await queues_page("alice")
        return page if "2 admitted" in page else None

    page = await eventually(both_recorded, timeout=30, what="both admissions in the ClusterQueue's waits plot")
    assert f"{namespaces['alice']}/{tag}-alices-run: waited 30 s" in page, page
    assert "waited 1.8 min" in page, "bob's wait is shown, without a name"
    assert namespaces["bob"] not in page and "secret-merger-project" not in page, page
    theirs = await queues_page("bob")
    assert f"{namespaces['bob']}/{tag}-secret-merger-project: waited 1.8 min" in theirs
    assert namespaces["alice"] not in theirs and "alices-run" not in theirs


async def test_on_a_workstation_a_plot_names_only_the_workloads_of_namespaces_the_user_may_list(cluster: LocalCluster) -> None:
    """`kfed dashboard` on alice's workstation, with her own credentials (namespace A only).

    Her recorder reads with her rights too (as the command wires it): it may not list every
    namespace's Workloads, so the plot names none of bob's, and says why. The filter itself is
    then shown deciding with her own SelfSubjectAccessReviews: with the plots recorded by a
    reader of every namespace, she sees her Workload's name and of bob's only how long it
    waited and the caption's aggregates."""
    async with admissions(cluster) as world, contextlib.AsyncExitStack() as stack:
        mine, theirs = world.namespaces["alice"], world.namespaces["bob"]
        alice = await as_user(cluster, world.tokens["alice"], "alice")
        stack.push_async_callback(alice.close)

        async def queues_page(recorder: KubeClient, enough: str) -> str:
            app = create_app(Settings(LocalAccess(Session(alice, default_namespace=mine)), recorder=recorder, sample_every=0.2))
            dashboard = await stack.enter_async_context(TestClient(TestServer(app)))

            async def shown() -> str | None:
                answer = await dashboard.get("/queues")
                assert answer.status == 200, await answer.text()
                page = html.unescape(await answer.text())
                return page if enough in page else None

            found: str = await eventually(shown, timeout=30, what=f"{enough!r} on the queues page")
            return found

        own = await queues_page(alice, "cannot list Workloads in every namespace")
        assert f"{world.tag}-cq" in own and theirs not in own and "secret-merger-project" not in own, own

        page = await queues_page(world.admin, "2 admitted")
        assert f"{mine}/{world.tag}-alices-run: waited 30 s" in page, page
        assert "waited 1.8 min" in page and "median" in page, "bob's wait is shown, without a name"
        assert theirs not in page and "secret-merger-project" not in page, page
