"""The manager's aggregated APIs (Kueue's visibility API and kfed's read API) refuse any input
with a 4xx whose one line says what was wrong, never a 500 or a traceback: any path segment
(namespace, name, cluster name: any text, percent-encoded junk, very long), any query string (any
names and values, repeated keys, control characters, huge numbers) on every route, asked through
the apiserver's aggregation as the admin and on the manager's port with a token that may read
everything (so each request gets past the checks to the handler); and on the port, any
`Authorization` header."""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from yarl import URL

from manager.controllers.visibility import VisibilityServer
from manager.dev.local import LocalCluster
from manager.engine import visibility
from manager.kube.client import KubeClient
from manager.kube.errors import ConflictError
from manager.multikueue.controllers.read_api import ReadApi
from manager.multikueue.rules import reads
from tests.harness import Provider, eventually
from tests.integration.controllers import ControllerProcess, aggregated_cluster, aggregated_manager
from tests.integration.test_visibility import service_account_token

pytestmark = pytest.mark.integration

FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,  # the same examples at every run: a failure is found again
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
VIS = f"/apis/{visibility.GROUP}"
READS = f"/apis/{reads.GROUP}"

# Every route of the manager's aggregated server (as aiohttp names it), and the path the fuzzing
# asks for it, with {version}, {namespace} and {name} filled by fuzzed segments. No route needs a
# worker to answer here: no Workload of this cluster runs on one, so `pods` and `log` end in a
# 404 after their checks (a worker that cannot be reached is a documented 503, never met here).
ROUTES = {
    VIS: VIS,
    f"{VIS}/{{version}}": f"{VIS}/{{version}}",
    f"{VIS}/{{version}}/clusterqueues/{{name}}/pendingworkloads": f"{VIS}/{{version}}/clusterqueues/{{name}}/pendingworkloads",
    f"{VIS}/{{version}}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads": (
        f"{VIS}/{{version}}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads"
    ),
    READS: READS,
    f"{READS}/{{version}}": f"{READS}/{{version}}",
    f"{READS}/{reads.VERSION}/clusters": f"{READS}/{reads.VERSION}/clusters",
    f"{READS}/{reads.VERSION}/clusters/{{name}}": f"{READS}/{reads.VERSION}/clusters/{{name}}",
    **{
        f"{READS}/{reads.VERSION}/namespaces/{{namespace}}/workloads/{{name}}/{sub}": (
            f"{READS}/{reads.VERSION}/namespaces/{{namespace}}/workloads/{{name}}/{sub}"
        )
        for sub in ("verdicts", "pods", "log")
    },
}
TEMPLATES = sorted(ROUTES.values())


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return aggregated_cluster(provider, "afuzz")


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    with aggregated_manager(cluster, tmp_path_factory.mktemp("api-fuzz")) as process:
        yield process


class Servers:
    """An HTTP session to the apiserver (as its admin) and to the manager's port (with a token
    bound to cluster-admin)."""

    def __init__(self, cluster: LocalCluster, manager: ControllerProcess, token: str) -> None:
        pki_dir = cluster.directory / "pki"
        self.apiserver_tls = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
        self.apiserver_tls.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))
        self.apiserver = cluster.server
        port = next(int(a.rsplit(":", 1)[1]) for a in manager.argv() if a.startswith("--visibility-bind-address="))
        self.port_tls = ssl.create_default_context(cafile=str(manager.directory / f"certs-{manager.identity}" / "ca.crt"))
        self.port = f"https://127.0.0.1:{port}"
        self.token = token
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def ask(self, where: str, path: str, *, authorization: str | None = None) -> tuple[int, str]:
        """GET `path` (already percent-encoded) through the apiserver or on the port: the status
        and body, checked as every answer must be."""
        if where == "apiserver":
            base, tls, headers = self.apiserver, self.apiserver_tls, {}
        else:
            base, tls = self.port, self.port_tls
            headers = {"Authorization": f"Bearer {self.token}" if authorization is None else authorization}
        async with self.session.get(URL(base + path, encoded=True), ssl=tls, headers=headers, allow_redirects=False) as response:
            text = await response.text(errors="replace")
        checked(where, path, response.status, text)
        return response.status, text


def checked(where: str, path: str, code: int, text: str) -> None:
    """Never a 5xx, never a traceback; a 4xx says why in one line."""
    assert code < 500, (where, path, code, text[:2000])
    assert "Traceback" not in text and 'File "' not in text, (where, path, text[:2000])
    if 400 <= code < 500:
        line = message_of(text)
        assert line and "\n" not in line and "\r" not in line, (where, path, code, text[:2000])


def message_of(text: str) -> str:
    """A Status's message, or the plain text's one line."""
    try:
        found = json.loads(text)
    except ValueError:
        return text.removesuffix("\n")
    return str(found.get("message", "")) if isinstance(found, dict) else text


@pytest.fixture
async def servers(cluster: LocalCluster, manager: ControllerProcess, kube: KubeClient) -> AsyncIterator[Servers]:
    namespace = "api-fuzz"
    with contextlib.suppress(ConflictError):  # made by an earlier test of this module
        await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    token = await _admin_token(kube, namespace)
    found = Servers(cluster, manager, token)
    try:

        async def served() -> bool:
            async with found.session.get(f"{found.apiserver}{READS}/{reads.VERSION}/clusters", ssl=found.apiserver_tls) as response:
                return response.status == 200

        await eventually(served, timeout=60, what="the read API served through the apiserver's aggregation")
        yield found
    finally:
        await found.session.close()


async def _admin_token(kube: KubeClient, namespace: str) -> str:
    """A token of a new ServiceAccount bound to cluster-admin."""
    name = f"fuzzer-{uuid.uuid4().hex[:5]}"
    token = await service_account_token(kube, namespace, name)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }
    await kube.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", body=binding)
    return token


# --- inputs --------------------------------------------------------------------------------------------
ODD = ["", " ", "\x00", "\r\n", "\x7f", "%00", "%zz", "../..", "a/b", "☃", "²", "٣", "-1", "0", "1e9", "0x10", "NaN", "9" * 5000, "true"]
values = st.sampled_from(ODD) | st.text(max_size=30) | st.integers(-(10**40), 10**40).map(str)
keys = st.sampled_from(["limit", "offset", "pod", "container", "follow", "watch", "", "limit[]"]) | st.text(max_size=12)
queries = st.lists(st.tuples(keys, values), max_size=4)  # repeated keys included
raw_queries = st.sampled_from(["", "%zz", "limit=%ff%fe", "&&==&", "limit", "offset=1&offset=%00&limit=2&limit=", "a=" + "%41" * 3000])
segments = st.sampled_from(
    ["x", "Team_A", "a" * 300, "a" * 5000, "%zz", "%00", "%2F", "..", "%2e%2e", "v1beta2", "v1alpha1", "default", "%ff", "%C2%B2"]
) | st.text(min_size=1, max_size=30).map(lambda s: urllib.parse.quote(s, safe=""))
authorizations = st.sampled_from(
    [
        "",
        "Bearer",
        "Bearer ",
        "Bearer  x",
        "bearer x",
        "Basic YTpi",
        "Bearer " + "x" * 20000,
        "Bearer \t",
        "Bearer ☃".encode().decode("latin-1"),
    ]
) | st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40).map(lambda s: "Bearer " + s)


def path_of(template: str, version: str, namespace: str, name: str, query: list[tuple[str, str]], raw: str) -> str:
    path = template.format(version=version, namespace=namespace, name=name)
    encoded = "&".join(x for x in (urllib.parse.urlencode(query), raw) if x)
    return f"{path}?{encoded}" if encoded else path


versions = st.sampled_from([*visibility.VERSIONS, reads.VERSION]) | segments


# --- the tests -----------------------------------------------------------------------------------------
@FUZZ
@given(
    route=st.integers(0, len(TEMPLATES) - 1),
    version=versions,
    namespace=segments,
    name=segments,
    query=queries,
    raw=raw_queries,
)
async def test_any_path_and_query_string_on_any_route_is_answered_or_refused_in_one_line(
    servers: Servers, route: int, version: str, namespace: str, name: str, query: list[tuple[str, str]], raw: str
) -> None:
    path = path_of(TEMPLATES[route], version, namespace, name, query, raw)
    for where in ("apiserver", "port"):
        await servers.ask(where, path)


# Each route fuzzed on its own (not one route drawn per example): a route's own parameters get
# every example. A planted 500 on a bad `limit` went unfound with the routes drawn at random.
@pytest.mark.parametrize("template", TEMPLATES)
@FUZZ
@given(query=queries)
async def test_any_query_string_on_a_served_object_is_answered_or_refused_in_one_line(
    servers: Servers, template: str, query: list[tuple[str, str]]
) -> None:
    """The version served, the namespace that exists: the query reaches the handler's parsing."""
    version = reads.VERSION if template.startswith(READS) else visibility.VERSIONS[0]
    path = path_of(template, version, "api-fuzz", "x", query, "")
    for where in ("apiserver", "port"):
        code, text = await servers.ask(where, path)
        if code == 400 and "pendingworkloads" in template:
            assert re.match(r"(limit|offset): Invalid value: ", message_of(text)), text


@FUZZ
@given(route=st.integers(0, len(TEMPLATES) - 1), authorization=authorizations)
async def test_any_authorization_header_on_the_port_is_refused_in_one_line(servers: Servers, route: int, authorization: str) -> None:
    template = TEMPLATES[route]
    version = reads.VERSION if template.startswith(READS) else visibility.VERSIONS[0]
    code, text = await servers.ask("port", path_of(template, version, "api-fuzz", "x", [], ""), authorization=authorization)
    if template.count("/") > 3:  # a resource, not discovery (public): reviewed, and no token names anyone
        # A header the apiserver reads as no token at all ("Bearer  x": an empty token before the
        # second space) is system:anonymous in its TokenReview, as in its own requests: refused.
        # A header longer than aiohttp reads (8190 bytes) is its own one-line 400, before any handler.
        anonymous = code == 403 and 'User "system:anonymous"' in message_of(text)
        too_long = code == 400 and len(authorization) > 8190
        assert code == 401 or anonymous or too_long, (template, authorization[:100], code, text[:500])


def served_routes() -> set[str]:
    """The routes of the manager's aggregated server, from the app it builds (every group the
    manager adds: Kueue's visibility API and MultiKueue's read API)."""
    unused = cast(Any, None)
    read_api = ReadApi(caches=unused, configs=unused, cluster_objects=unused, clusters=unused, origin="", adapters=())
    app = VisibilityServer(unused, lambda name: None, dict, [read_api.group()]).app()
    found = set()
    for resource in app.router.resources():
        info = resource.get_info()
        found.add(str(info.get("path") or info.get("formatter") or info.get("prefix")))
    return found


def test_the_fuzzed_routes_are_every_route_of_the_managers_api() -> None:
    """A route added to the server is added here too: the fuzzing covers every one."""
    canonical = {re.sub(r"\{version:[^}]*\}", "{version}", route) for route in served_routes()}
    assert canonical == set(ROUTES)


async def test_the_fuzzed_resources_are_every_resource_the_running_manager_lists(servers: Servers) -> None:
    """The running manager lists no resource the fuzzing does not ask for (its discovery)."""
    fuzzed = {t.split(f"/{reads.VERSION}/", 1)[1] for t in TEMPLATES if t.startswith(f"{READS}/{reads.VERSION}/")}
    fuzzed = {re.sub(r"\{\w+\}/?", "", t).replace("namespaces/", "").rstrip("/") for t in fuzzed}
    code, text = await servers.ask("port", f"{READS}/{reads.VERSION}")
    assert code == 200
    listed = {r["name"] for r in json.loads(text)["resources"]}
    assert listed - {"workloads"} == fuzzed, listed  # "workloads": the subresources' parent, not served
    code, text = await servers.ask("port", f"{VIS}/{visibility.VERSIONS[0]}")
    assert code == 200
    listed = {r["name"] for r in json.loads(text)["resources"]} - {"clusterqueues", "localqueues"}  # the parents, not served
    assert listed == {"clusterqueues/pendingworkloads", "localqueues/pendingworkloads"}, listed
