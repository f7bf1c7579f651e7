"""The dashboard's pages decided from known objects (filters, paging, bars, the cohort tree, a
job's timeline), rendered with everything a user wrote kept as text, and its server's defences:
the Content-Security-Policy, the CSRF check on every action, and the Host check of local mode."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from manager.api import kueue
from manager.api.core import Event
from manager.cli import views
from manager.cli.dashboard import incluster, pages
from manager.cli.dashboard.reading import Session
from manager.cli.dashboard.server import (
    CONTENT_SECURITY_POLICY,
    CSRF_COOKIE,
    LocalAccess,
    Settings,
    create_app,
    environment,
    origin_refusal,
    refused_before_streaming,
    status_of,
)
from manager.cli.explain import explain, find_workload
from manager.cli.fleet import ObjectName
from manager.controllers.visibility import User
from manager.kube.client import KubeClient, ObjectList
from manager.kube.errors import ConflictError, ForbiddenError, InvalidError, NotFoundError, TooManyRequestsError, TransientError
from manager.multikueue.rules.reads import Verdict

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
SCRIPT = "<script>alert(1)</script>"


def view(
    name: str, *, state: str = "Pending", namespace: str = "ns", queue: str = "q", cluster: str = "", kind: str = "Job", **more: Any
) -> views.JobView:
    return views.JobView(
        namespace=namespace,
        name=name,
        workload=f"job-{name}",
        queue=queue,
        cluster_queue="cq",
        state=state,
        cluster=cluster,
        created=NOW - timedelta(minutes=5),
        reason=more.pop("reason", ""),
        priority=0,
        kind=kind,
        **more,
    )


def cluster_queue(
    name: str, *, cohort: str = "", used: str = "3", borrowed: str | None = None, stop: str | None = None
) -> kueue.ClusterQueue:
    usage: dict[str, Any] = {"name": "cpu", "total": used}
    if borrowed is not None:
        usage["borrowed"] = borrowed
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 4, "borrowingLimit": 2, "lendingLimit": 1}]}],
            }
        ]
    }
    if cohort:
        spec["cohortName"] = cohort
    if stop:
        spec["stopPolicy"] = stop
    return kueue.ClusterQueue.model_validate(
        {
            "metadata": {"name": name},
            "spec": spec,
            "status": {"flavorsReservation": [{"name": "f", "resources": [usage]}], "pendingWorkloads": 2},
        }
    )


# --- the jobs table ------------------------------------------------------------------------------------
def test_job_filters_parse_the_query_string_and_refuse_a_bad_one_in_one_line() -> None:
    query = pages.parse_job_query({"namespace": "team-a", "state": "running", "page": "2"})
    assert (query.namespace, query.state, query.page) == ("team-a", "Running", 2)
    for bad, said in (
        ({"state": "Sleeping"}, 'state "Sleeping": expected one of Pending, QuotaReserved'),
        ({"page": "0"}, "page: Input should be greater than or equal to 1"),
        ({"page": "two"}, "page: Input should be a valid integer"),
        ({"namespace": "Team A"}, "namespace: String should match pattern"),
        ({"kind": "CronJob"}, f'kind "CronJob": expected one of {", ".join(pages.KINDS)}'),
        ({"token": "x"}, 'unknown parameter "token"'),
    ):
        with pytest.raises(pages.QueryError) as err:
            pages.parse_job_query(bad)
        assert str(err.value).startswith(said) and "\n" not in str(err.value), err.value


def test_the_jobs_page_filters_then_pages_on_the_server() -> None:
    jobs = [view(f"j{i:04}", state="Running" if i % 2 else "Pending", cluster="worker1" if i % 2 else "") for i in range(5000)]
    page = pages.jobs_page(jobs, pages.parse_job_query({"state": "Running", "page": "3"}), now=NOW)
    assert (page.total, page.pages, page.page, len(page.rows)) == (2500, 50, 3, 50)
    assert page.rows[0].name == "j0201"
    assert all(r.state == "Running" and r.cluster == "worker1" for r in page.rows)
    assert (page.first, page.last) == (101, 150)
    assert page.query.params(page=4) == {"state": "Running", "page": "4"}
    past = pages.jobs_page(jobs, pages.parse_job_query({"page": "999"}), now=NOW)
    assert past.page == 100 and past.rows[-1].name == "j4999"


def test_a_job_row_links_to_its_page_and_carries_its_queue_position() -> None:
    row = pages.job_row(view("train", position=3), now=NOW)
    assert (row.href, row.position, row.age) == ("/jobs/ns/job/train", "3", "5m")
    assert pages.job_row(view("set", kind="JobSet"), now=NOW).href == "/jobs/ns/jobset/set"
    assert pages.job_row(view("lone", kind="Workload"), now=NOW).href == "/jobs/ns/workload/job-lone"


# --- quota ---------------------------------------------------------------------------------------------
def test_a_cluster_queue_bar_shows_use_borrowing_and_both_limits() -> None:
    [(flavor, [bar])] = pages.cluster_queue_bars(cluster_queue("cq", used="5", borrowed="1"))
    assert flavor == "f"
    assert (bar.used, bar.own, bar.borrowed, bar.nominal, bar.scale) == (5000, 4000, 1000, 4000, 5000)
    assert bar.text == "5 / 4, borrowed 1, borrowing limit 2, lending limit 1"


def test_a_worker_card_says_why_it_is_not_connected() -> None:
    down = views.WorkerView("worker2", active="False", reason="ClientConnectionFailed", message="dial tcp: refused")
    lost = views.WorkerView("worker3", active="True", reachable=False, error="unreachable: timeout")
    up = views.WorkerView(
        "worker1",
        active="True",
        reachable=True,
        running=2,
        pending=1,
        usage={"cpu": (2000, 8000)},
        flavors={("on-demand", "cpu"): (1000, 4000, 0), ("spot", "cpu"): (1000, 4000, 500)},
    )
    older = views.WorkerView("worker4", active="True", reachable=True, usage={"cpu": (2000, 8000)})  # a read API without flavors
    cards = {c.name: c for c in pages.worker_cards([down, lost, up, older], now=NOW)}
    assert (cards["worker2"].connected, cards["worker2"].status, cards["worker2"].why) == (
        False,
        "Not active: ClientConnectionFailed",
        "dial tcp: refused",
    )
    assert (cards["worker3"].status, cards["worker3"].running) == ("Unreachable", "-")
    assert (cards["worker1"].connected, cards["worker1"].running) == (True, "2")
    assert [(flavor, [bar.text for bar in bars]) for flavor, bars in cards["worker1"].flavors] == [
        ("on-demand", ["1 / 4"]),
        ("spot", ["1 / 4, borrowed 500m"]),
    ]
    assert [(flavor, [bar.text for bar in bars]) for flavor, bars in cards["worker4"].flavors] == [("", ["2 / 8"])]


def test_the_cohort_tree_nests_cohorts_by_parent_and_keeps_loose_queues_last() -> None:
    cohorts = [kueue.Cohort.model_validate({"metadata": {"name": "team"}, "spec": {"parentName": "org"}})]
    lq = kueue.LocalQueue.model_validate({"metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "a"}})
    tree = pages.cohort_tree([cluster_queue("a", cohort="team"), cluster_queue("b", cohort="org"), cluster_queue("c")], cohorts, [lq])
    assert [n.name for n in tree] == ["org", ""]
    org = tree[0]
    assert [q.name for q in org.queues] == ["b"] and [child.name for child in org.children] == ["team"]
    team = org.children[0]
    assert [q.name for q in team.queues] == ["a"] and team.queues[0].local_queues[0]["NAME"] == "lq"
    assert [q.name for q in tree[1].queues] == ["c"]
    held = pages.queue_card(cluster_queue("h", stop="Hold"), [])
    assert (held.status, held.stop_policy, held.pending) == ("Stopped (Hold)", "Hold", 2)


# --- a job's page --------------------------------------------------------------------------------------
def workload(message: str) -> kueue.Workload:
    return kueue.Workload.model_validate(
        {
            "metadata": {
                "name": "job-train",
                "namespace": "ns",
                "annotations": {"note": SCRIPT},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}],
            },
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}]},
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "False",
                        "reason": "Pending",
                        "message": message,
                        "lastTransitionTime": "2026-11-28T11:58:00Z",
                    }
                ]
            },
        }
    )


def event(reason: str, message: str, when: str, kind: str = "Job") -> Event:
    return Event.model_validate(
        {
            "metadata": {"name": f"e-{reason}", "namespace": "ns"},
            "involvedObject": {"kind": kind, "name": "train"},
            "reason": reason,
            "message": message,
            "type": "Warning" if reason == "Failed" else "Normal",
            "lastTimestamp": when,
        }
    )


def test_a_jobs_timeline_runs_from_submission_through_conditions_and_events_in_order() -> None:
    moments = pages.timeline(
        workload=workload("waiting"),
        job=None,
        events=[event("Suspended", "job suspended", "2026-11-28T11:57:30Z"), event("Failed", "boom", "2026-11-28T11:59:00Z")],
        created=datetime(2026, 11, 28, 11, 57, tzinfo=UTC),
    )
    assert [(m.source, m.what) for m in moments] == [
        ("Job", "Created"),
        ("Job", "Suspended"),
        ("Workload", "QuotaReserved=False"),
        ("Job", "Failed"),
    ]
    assert moments[-1].warning and moments[2].message == "Pending: waiting"


def test_what_a_user_wrote_stays_text_on_every_page() -> None:
    wl = workload(f"couldn't assign flavors {SCRIPT}")
    [jv] = views.job_views([wl], checks={}, local_queues={})
    found = explain(view=jv, wl=wl, cq=None, verdicts={"worker1": (True, Verdict(f"waiting: {SCRIPT}"))})
    env = environment()
    common = {"csrf": "t", "notes": [f"note {SCRIPT}"], "user": SCRIPT, "path": "/jobs"}
    job_page = env.get_template("job.html").render(
        **common,
        found=found,
        target="job/train",
        kind="job",
        namespace="ns",
        base="/jobs/ns/job/train",
        moments=pages.timeline(workload=wl, job=None, events=[event("Created", f"made {SCRIPT}", "2026-11-28T11:57:30Z")]),
        metadata=pages.metadata_items({"app": "x"}, wl.metadata.annotations),
        where="worker worker1",
        pods=["p"],
        containers=[SCRIPT],
        container="",
        logs_error="",
        stream="/jobs/ns/job/train/logs",
        cancellable=True,
    )
    jobs_page = env.get_template("jobs.html").render(**common, jobs=pages.jobs_page([jv], pages.JobQuery(), now=NOW))
    for html in (job_page, jobs_page):
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert [src for src in re.findall(r"<script[^>]*>", html)] == ['<script src="/static/dashboard.js" defer>']
    assert html.count("&lt;script&gt;") >= 2
    assert job_page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5  # reason, verdict, Event, annotation, container


def test_a_long_annotation_is_cut_and_labels_come_first() -> None:
    items = pages.metadata_items({"b": "2", "a": "1"}, {"kubectl.kubernetes.io/last-applied-configuration": "x" * 1000})
    assert [(what, key) for what, key, _ in items] == [
        ("label", "a"),
        ("label", "b"),
        ("annotation", "kubectl.kubernetes.io/last-applied-configuration"),
    ]
    assert items[-1][2] == "x" * pages.ANNOTATION_SHOWN + "…"


# --- the server's defences -----------------------------------------------------------------------------
class NoAccess:
    """Every request refused before any read: the defences come first."""

    async def session(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=401, text="no session")

    async def still_valid(self, request: web.Request) -> bool:
        return False


@pytest.fixture
async def server() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    settings = Settings(NoAccess())
    app = create_app(settings)
    async with TestClient(TestServer(app)) as client:
        settings.hosts = frozenset({f"127.0.0.1:{client.port}"})
        yield client


async def test_every_answer_carries_the_content_security_policy_and_a_csrf_cookie(server: TestClient[web.Request, web.Application]) -> None:
    answer = await server.get("/healthz", headers={"Host": f"127.0.0.1:{server.port}"})
    assert answer.status == 200
    assert answer.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY and "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert answer.headers["X-Frame-Options"] == "DENY"
    cookie = answer.cookies[CSRF_COOKIE]
    assert cookie["httponly"] and cookie["samesite"] == "Strict"
    css = await server.get("/static/dashboard.css", headers={"Host": f"127.0.0.1:{server.port}"})
    assert css.status == 200 and css.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


async def test_an_action_without_the_forms_csrf_token_or_from_another_site_is_refused(
    server: TestClient[web.Request, web.Application],
) -> None:
    host = {"Host": f"127.0.0.1:{server.port}"}
    first = await server.get("/healthz", headers=host)
    token = first.cookies[CSRF_COOKIE].value
    cancel = "/jobs/ns/job/train/cancel"
    missing = await server.post(cancel, data={}, headers=host)
    assert missing.status == 403 and "CSRF token does not match" in await missing.text()
    wrong = await server.post(cancel, data={"csrf": "guess"}, headers=host)
    assert wrong.status == 403
    elsewhere = await server.post(cancel, data={"csrf": token}, headers={**host, "Origin": "http://evil.example"})
    assert elsewhere.status == 403 and "another site" in await elsewhere.text()
    passed = await server.post(cancel, data={"csrf": token}, headers={**host, "Origin": f"http://127.0.0.1:{server.port}"})
    assert passed.status == 401  # past the defences, to the user's session (none here)


@pytest.mark.parametrize(
    ("origin", "refused"),
    [
        (None, ""),
        ("http://127.0.0.1:8000", ""),
        ("http://evil.example", "refused: the request came from another site (Origin)"),
        ("null", "refused: the request came from another site (Origin)"),
        ("http://[::1", "refused: the Origin header 'http://[::1' is not a URL"),
    ],
)
def test_a_form_from_another_site_or_an_origin_that_is_no_url_is_refused_in_one_line(origin: str | None, refused: str) -> None:
    assert origin_refusal(origin, "127.0.0.1:8000") == refused


@pytest.mark.parametrize(
    ("err", "refused"),
    [
        (ForbiddenError("no", status=403), True),
        (NotFoundError("gone", status=404), True),
        (InvalidError("bad name", status=422), True),
        (TransientError("apiserver down", status=503), False),
        (TransientError("no connection", status=0), False),
    ],
)
def test_a_streams_first_read_refused_for_the_user_refuses_the_stream_and_an_apiserver_down_does_not(err: Exception, refused: bool) -> None:
    assert refused_before_streaming(err) is refused


@pytest.mark.parametrize("content_type", ["multipart/form-data", "multipart/form-data; boundary=x"])
async def test_a_form_that_cannot_be_read_is_a_one_line_400_not_a_500(
    server: TestClient[web.Request, web.Application], content_type: str
) -> None:
    """Found by the dashboard's fuzzing: a multipart body without its boundary made a 500."""
    answer = await server.post("/login", data=b"--y\r\n", headers={"Host": f"127.0.0.1:{server.port}", "Content-Type": content_type})
    text = await answer.text()
    assert answer.status == 400 and text.startswith("form: cannot be read as multipart/form-data: ") and text.count("\n") == 1, text


class NoJobs:
    """A manager with no Job and no Workload in any namespace."""

    async def list(self, model: type[Any], **options: Any) -> ObjectList[Any]:
        return ObjectList([], "1")

    async def get(self, model: type[Any], name: str, *, namespace: str | None = None) -> Any:
        raise NotFoundError(f'{model.PLURAL} "{name}" not found', status=404, reason="NotFound")


async def test_a_job_that_is_not_there_is_a_404_page_and_the_clis_one_line_error() -> None:
    """Asking for a job by a name that is not there (another tenant's, in one's own namespace)
    is not found, as every other answer of the dashboard for what is not there."""
    app = create_app(Settings(LocalAccess(Session(cast(KubeClient, NoJobs()), default_namespace="ns"))))
    async with TestClient(TestServer(app)) as client:
        for path in ("/jobs/ns/job/theirs", "/jobs/ns/workload/theirs", "/jobs/ns/pod/theirs"):
            answer = await client.get(path)
            assert answer.status == 404, (path, answer.status, await answer.text())
    with pytest.raises(NotFoundError, match=r'^no Job "theirs" in namespace ns \(see `kfed jobs -n ns`\)$'):
        await find_workload(cast(KubeClient, NoJobs()), ObjectName("job", "theirs"), "ns", [])


async def test_local_mode_refuses_a_host_it_does_not_serve(server: TestClient[web.Request, web.Application]) -> None:
    answer = await server.get("/jobs", headers={"Host": "attacker.example:80"})
    assert answer.status == 403
    assert (await answer.text()).strip() == f'host "attacker.example:80" is not served: open http://127.0.0.1:{server.port}/'


# --- in the cluster: what each call asks of the user's rights ------------------------------------------
@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        (
            "GET",
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/a/workloads",
            [{"group": "kueue.x-k8s.io", "resource": "workloads", "verb": "list", "namespace": "a"}],
        ),
        (
            "GET",
            "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq",
            [{"group": "kueue.x-k8s.io", "resource": "clusterqueues", "verb": "get", "name": "cq"}],
        ),
        (
            "DELETE",
            "/apis/batch/v1/namespaces/a/jobs/j",
            [{"group": "batch", "resource": "jobs", "verb": "delete", "namespace": "a", "name": "j"}],
        ),
        (
            "GET",
            "/api/v1/namespaces/a/pods/p/log",
            [{"group": "", "resource": "pods", "subresource": "log", "verb": "get", "namespace": "a", "name": "p"}],
        ),
        ("GET", "/api/v1/namespaces/a", [{"group": "", "resource": "namespaces", "verb": "get", "name": "a"}]),
        (
            "GET",
            "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/a/localqueues/q/pendingworkloads",
            [
                {
                    "group": "visibility.kueue.x-k8s.io",
                    "resource": "localqueues",
                    "subresource": "pendingworkloads",
                    "verb": "get",
                    "namespace": "a",
                    "name": "q",
                }
            ],
        ),
        (
            "GET",
            "/apis/reads.kfed.dev/v1alpha1/namespaces/a/workloads/w/log",
            [
                {"group": "reads.kfed.dev", "resource": "workloads", "subresource": "log", "verb": "get", "namespace": "a", "name": "w"},
                {"group": "", "resource": "pods", "subresource": "log", "verb": "get", "namespace": "a"},
            ],
        ),
    ],
)
def test_each_apiserver_path_is_reviewed_as_the_request_it_is(method: str, path: str, expected: list[dict[str, str]]) -> None:
    found = incluster.path_attributes(method, path)
    assert [{k: v for k, v in check.items() if k != "version"} for check in found] == expected


def test_a_path_that_names_no_resource_is_refused_and_a_user_lands_in_their_own_namespace() -> None:
    for path in ("/healthz", "/apis/batch", "/api/v1/namespaces/a/pods/p/log/extra"):
        with pytest.raises(ValueError, match="not a resource path"):
            incluster.path_attributes("GET", path)
    assert incluster.default_namespace(User("system:serviceaccount:team-a:alice")) == "team-a"
    assert incluster.default_namespace(User("alice@example.com")) == "default"


def test_local_mode_refuses_to_serve_the_users_credentials_beyond_loopback_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from manager.cli.main import main

    assert main(["dashboard", "--address", "0.0.0.0", "--no-browser", "--kubeconfig", "/nonexistent"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --address 0.0.0.0: kfed dashboard serves your own credentials"), err
    assert main(["dashboard", "--port", "70000", "--no-browser"]) == 1
    assert capsys.readouterr().err == "error: --port 70000: expected a port number from 0 to 65535\n"


_PARAMETER = st.sampled_from(["namespace", "queue", "state", "worker", "kind", "page", "per_page"]) | st.text(max_size=12)
_VALUE = st.text(max_size=80) | st.integers(min_value=-(10**12), max_value=10**12).map(str) | st.just("9" * 5000)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_PARAMETER, _VALUE, max_size=5))
def test_any_query_string_of_the_jobs_view_is_a_query_or_a_one_line_refusal(params: dict[str, str]) -> None:
    """Whatever a URL carries, the Jobs view gets its filters or refuses in one line that names
    the parameter, never an exception it would answer with a 500."""
    try:
        query = pages.parse_job_query(params)
    except pages.QueryError as err:
        message = str(err)
        assert "\n" not in message and "\r" not in message and message
        assert message.split(" ", 1)[0].rstrip(":") in ("unknown", *params), (params, message)
        return
    assert 1 <= query.page <= 1_000_000 and query.state in ("", *views.STATES)


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (InvalidError("jobs.batch \"%zz\" is invalid: metadata.name: may not contain '%'", status=400), 400),
        (InvalidError('ClusterQueue.kueue.x-k8s.io "q" is invalid: spec.stopPolicy: Unsupported value', status=422), 422),
        (ConflictError("the object has been modified", status=409), 409),
        (TooManyRequestsError("too many requests", status=429), 429),
        (ForbiddenError("forbidden", status=403), 403),
        (NotFoundError("not found", status=404), 404),
        (pages.QueryError("page: Input should be a valid integer"), 400),
        (TransientError("connection refused", status=0), 502),
        (TransientError("etcdserver: request timed out", status=504), 502),
    ],
)
def test_a_refusal_of_the_users_input_by_the_apiserver_is_a_4xx_and_only_an_unreachable_one_a_502(err: Exception, code: int) -> None:
    """A name the apiserver finds invalid (a cancel of `/jobs/ns/job/%25zz`) is the user's input:
    found by the dashboard's fuzzing as a 502, it is the apiserver's own 400 or 422."""
    assert status_of(err) == code
