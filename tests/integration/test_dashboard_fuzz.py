"""The dashboard refuses any input with a 4xx whose one line names what was wrong, never a 500
or a traceback: query strings (any names and values, repeated keys, control characters, huge
numbers), forms (missing or unknown fields, a wrong or missing CSRF token, an unparsable body,
any method) and path segments (names that are not DNS labels, percent-encoded junk), on every
route, against a real apiserver: in the cluster as a user of one namespace (each read reviewed
for her) and on a workstation as the cluster's admin (each read made, whatever it names)."""

from __future__ import annotations

import contextlib
import html
import re
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from yarl import URL

from manager.cli.dashboard import pages
from manager.cli.dashboard.reading import Session
from manager.cli.dashboard.server import CSRF_COOKIE, SETTINGS, LocalAccess, Settings, create_app
from manager.dev.local import LocalCluster
from tests.harness import Provider
from tests.integration.controllers import crd_cluster
from tests.integration.test_dashboard_in_cluster import Fleet, serving

pytestmark = pytest.mark.integration

Client = TestClient[web.Request, web.Application]
FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the same examples at every run: a failure is found again
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
TRACEBACK = ("Traceback", 'File "')
MODES = ("in-cluster", "local")
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "dfuzz")


@dataclass
class Target:
    client: Client
    namespace: str  # the user's namespace, where `job` is
    job: str
    cluster_queue: str
    csrf: str
    token: str  # alice's bearer token


@pytest.fixture(params=MODES)
async def target(request: pytest.FixtureRequest, cluster: LocalCluster, tmp_path: Path) -> AsyncIterator[Target]:
    """The in-cluster dashboard with alice signed in (her reads reviewed; none may reach another
    namespace), or the workstation's dashboard as the admin (every read reaches the apiserver)."""
    async with serving(cluster, tmp_path) as fleet, contextlib.AsyncExitStack() as stack:
        client = fleet.dashboard
        if request.param == "local":
            app = create_app(Settings(LocalAccess(Session(fleet.admin, default_namespace=fleet.namespaces["alice"]))))
            client = await stack.enter_async_context(TestClient(TestServer(app)))
            port = client.port
            app[SETTINGS].hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})  # as `kfed dashboard` serves
        found = await client.get("/healthz")
        assert found.status == 200
        csrf = next(c.value for c in client.session.cookie_jar if c.key == CSRF_COOKIE)
        if request.param == "in-cluster":
            await sign_in(fleet, csrf)
        yield Target(client, fleet.namespaces["alice"], "alice-job", fleet.cluster_queue, csrf, fleet.tokens["alice"])


async def sign_in(fleet: Fleet, csrf: str) -> None:
    signed = await fleet.dashboard.post("/login", data={"csrf": csrf, "token": fleet.tokens["alice"]}, allow_redirects=False)
    assert signed.status == 302, await signed.text()


# --- what any answer must be ---------------------------------------------------------------------------
ERROR_LINE = re.compile(r'<p class="error" id="error">(.*?)</p>', re.S)


async def answer(client: Client, method: str, url: str | URL, **options: object) -> tuple[int, str]:
    """The status and the body (a live stream's status only: it is not read); never a 5xx, never a
    traceback; a 4xx says why in one line, on a page or as plain text."""
    async with client.request(method, url, allow_redirects=False, **options) as response:  # type: ignore[arg-type]
        if response.headers.get("Content-Type", "").startswith("text/event-stream"):
            assert response.status == 200, (method, url)
            response.close()
            return response.status, ""
        text = await response.text(errors="replace")
    assert response.status < 500, (method, url, options, response.status, text[:3000])
    assert not any(t in text for t in TRACEBACK), (method, url, text[:3000])
    if 400 <= response.status < 500:
        refusal(response.status, response.headers.get("Content-Type", ""), text)
    return response.status, text


def refusal(status: int, content_type: str, text: str) -> str:
    """The one line a refusal says: a page's error paragraph, or the plain text."""
    if content_type.startswith("text/html"):
        found = ERROR_LINE.search(text)
        assert found is not None, (status, text[:3000])
        line = html.unescape(found.group(1))
    else:
        line = text.removesuffix("\n")
    assert line and "\n" not in line and "\r" not in line, (status, text[:3000])
    return line


def said(text: str) -> str:
    found = ERROR_LINE.search(text)
    return html.unescape(found.group(1)) if found else text.strip()


# --- inputs --------------------------------------------------------------------------------------------
ODD = [
    "",
    " ",
    "\x00",
    "\r\n",
    "\x7f",
    "%00",
    "%zz",
    "../..",
    "a/b",
    "☃",
    "²",
    "٣",
    "-1",
    "0",
    "1e9",
    "0x10",
    "NaN",
    "9" * 5000,
    "Pending",
    "job",
]
values = st.sampled_from(ODD) | st.text(max_size=30) | st.integers(-(10**40), 10**40).map(str)
keys = st.sampled_from([*pages.JobQuery.model_fields, "container", "policy", "token", "csrf", ""]) | st.text(max_size=12)
queries = st.lists(st.tuples(keys, values), max_size=4)  # repeated keys included
segments = st.sampled_from(["x", "Team_A", "a" * 300, "%zz", "%00", "%2F", "..", "%2e%2e", "job", "workload"]) | st.text(
    min_size=1, max_size=30
).map(lambda s: urllib.parse.quote(s, safe=""))


def pages_of(t: Target) -> list[str]:
    """Every GET route, with the user's own objects in its path."""
    job = f"/jobs/{t.namespace}/job/{t.job}"
    return [
        "/",
        "/healthz",
        "/login",
        "/fleet",
        "/fleet/stream",
        "/queues",
        "/queues/stream",
        f"/queues/{t.cluster_queue}/stop-policy",
        "/jobs",
        "/jobs/stream",
        job,
        f"{job}/stream",
        f"{job}/logs",
        f"{job}/cancel",
    ]


# --- the tests -----------------------------------------------------------------------------------------
@FUZZ
@given(route=st.integers(0, 13), query=queries)
async def test_any_query_string_on_any_page_is_answered_or_refused_in_one_line(
    target: Target, route: int, query: list[tuple[str, str]]
) -> None:
    path = pages_of(target)[route]
    status, text = await answer(target.client, "GET", path, params=query)
    if path == "/jobs" and status == 400:
        line = said(text)
        named = line.split(" ", 1)[0].split(":", 1)[0]
        assert named in {*pages.JobQuery.model_fields, "unknown", "state", "kind"}, line
        if named == "unknown":
            assert any(line.startswith(f"unknown parameter {pages._shown(key)}") for key, _ in query), line


@FUZZ
@given(namespace=segments, kind=segments, name=segments, suffix=st.sampled_from(["", "/stream", "/logs", "/cancel"]), query=queries)
async def test_any_job_path_is_answered_or_refused_in_one_line(
    target: Target, namespace: str, kind: str, name: str, suffix: str, query: list[tuple[str, str]]
) -> None:
    await answer(target.client, "GET", URL(f"/jobs/{namespace}/{kind}/{name}{suffix}", encoded=True), params=query)
    await answer(target.client, "GET", URL(f"/queues/{name}/stop-policy", encoded=True), params=query)


forms = st.lists(st.tuples(st.sampled_from(["policy", "token", "csrf", "x", ""]) | st.text(max_size=8), values), max_size=4)
csrf_choices = st.sampled_from(["right", "wrong", "missing", "twice"])


def form_of(t: Target, fields: list[tuple[str, str]], csrf: str) -> bytes:
    """The form as a browser posts it (urlencoded), with the CSRF token as `csrf` says."""
    found = [(k, v) for k, v in fields if k != "csrf"]
    if csrf == "right":
        found.append(("csrf", t.csrf))
    elif csrf == "wrong":
        found.append(("csrf", t.csrf[::-1]))
    elif csrf == "twice":
        found += [("csrf", "x"), ("csrf", t.csrf)]
    return urllib.parse.urlencode(found).encode()


@FUZZ
@given(
    route=st.integers(0, 4),
    segment=segments,
    method=st.sampled_from(["POST", "PUT", "PATCH", "DELETE"]),
    fields=forms,
    csrf=csrf_choices,
)
async def test_any_form_on_any_action_is_done_or_refused_in_one_line(
    target: Target, route: int, segment: str, method: str, fields: list[tuple[str, str]], csrf: str
) -> None:
    path = [
        f"/queues/{segment}/stop-policy",
        f"/jobs/{target.namespace}/job/{segment}/cancel",
        f"/jobs/{segment}/{segment}/{segment}/cancel",
        "/login",
        "/logout",
    ][route]
    status, text = await answer(target.client, method, URL(path, encoded=True), data=form_of(target, fields, csrf), headers=FORM)
    if csrf in ("wrong", "missing", "twice"):
        assert status == 403 and said(text).startswith("refused: the form's CSRF token does not match"), (status, text)
    if route == 0 and method == "POST" and csrf == "right" and status == 400:
        assert said(text).startswith("stopPolicy "), text


@FUZZ
@given(
    route=st.sampled_from(["/queues/q/stop-policy", "/login", "/logout", "/jobs/ns/job/j/cancel"]),
    content_type=st.sampled_from(
        [
            "multipart/form-data",
            "multipart/form-data; boundary=x",
            "application/x-www-form-urlencoded",
            "application/json",
            "text/plain",
            "",
        ]
    ),
    body=st.binary(max_size=200)
    | st.sampled_from([b"--x\r\n\r\n", b"--x\r\nContent-Disposition: form-data\r\n\r\nv\r\n--x--\r\n", b"csrf=%ZZ&a"]),
)
async def test_any_body_of_any_content_type_is_refused_in_one_line(target: Target, route: str, content_type: str, body: bytes) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    await answer(target.client, "POST", route, data=body, headers=headers)


# Header values as a client may send them: printable Latin-1 (a line break or a NUL ends or
# breaks the request line itself, and aiohttp's parser refuses those with its own 400).
header_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40)
HEADER_ODD = [
    "",
    " ",
    "Bearer",
    "Bearer ",
    "Bearer  x",
    "bearer x",
    "Basic YTpi",
    "Bearer " + "a" * 6000,
    "Bearer ü",
    "null",
    "http://[::1",
    "http://[",
    "http://evil.example",
    "https://",
    "//",
    "http://127.0.0.1:99999999",
    "localhost",
    "127.0.0.1",
    "[::1]:80",
    "[",
    "a" * 300,
    "%00",
    "ü",
    "kfed_csrf=",
    "kfed_session=x; kfed_csrf=y",
    '=;;="',
    'kfed_csrf="\\"',
    "multipart/form-data; boundary=",
    'multipart/form-data; boundary="',
    "application/x-www-form-urlencoded; charset=nope",
    "application/x-www-form-urlencoded; charset=utf-16",
    "text/plain; charset=",
    ";;;",
]
header_values = st.sampled_from(HEADER_ODD) | header_text
FUZZED_HEADERS = ("Authorization", "Host", "Origin", "Cookie", "Content-Type")
header_sets = st.dictionaries(st.sampled_from(FUZZED_HEADERS), header_values | st.just("<alice's token>"), max_size=3)


@settings(FUZZ, max_examples=200)  # five headers, nineteen routes
@given(route=st.integers(0, 18), headers=header_sets)
@example(route=14, headers={"Origin": "http://[::1"})  # not a URL: urllib cannot split it
@example(route=16, headers={"Content-Type": "application/x-www-form-urlencoded; charset=nope"})
@example(route=16, headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-16"})
@example(route=8, headers={"Cookie": 'kfed_csrf="\\'})
async def test_any_header_on_any_route_is_answered_or_refused_in_one_line(target: Target, route: int, headers: dict[str, str]) -> None:
    """`Authorization`, `Host`, `Origin`, `Cookie` and `Content-Type`, any of them with any
    value, on every route (each GET, and each action POSTed with the right CSRF token)."""
    job = f"/jobs/{target.namespace}/job/{target.job}"
    actions = [f"/queues/{target.cluster_queue}/stop-policy", f"{job}/cancel", "/login", "/logout", "/jobs"]
    sent = {name: value.replace("<alice's token>", f"Bearer {target.token}") for name, value in headers.items()}
    if route < 14:
        status, text = await answer(target.client, "GET", pages_of(target)[route], headers=sent)
    else:
        form = form_of(target, [("policy", "Hold")], "right")
        status, text = await answer(target.client, "POST", actions[route - 14], data=form, headers={**FORM, **sent})
    if status == 403 and said(text).startswith("host "):
        assert "Host" in sent and " is not served: open http://" in said(text), text


async def test_an_oversized_form_is_refused_in_one_line(target: Target) -> None:
    """aiohttp reads a form of at most 1 MiB (client_max_size): more is a 413, not a 500."""
    status, _ = await answer(target.client, "POST", "/login", data={"csrf": target.csrf, "token": "x" * (2 << 20)})
    assert status == 413


async def test_the_fuzzed_routes_are_every_route_of_the_dashboard(target: Target) -> None:
    """A route added to the server is added here too: the fuzzing covers every one."""
    fuzzed = {"/", "/healthz", "/fleet", "/fleet/stream", "/queues", "/queues/stream", "/jobs", "/jobs/stream"}
    fuzzed |= {"/queues/{name}/stop-policy", *(f"/jobs/{{namespace}}/{{kind}}/{{name}}{s}" for s in ("", "/stream", "/logs", "/cancel"))}
    fuzzed |= {"/favicon.ico", "/static"}  # a redirect, and the package's files
    app = target.client.app
    assert app is not None
    served = {info.get("path") or info.get("formatter") or info.get("prefix") for info in (r.get_info() for r in app.router.resources())}
    assert served - {"/login", "/logout"} == fuzzed
