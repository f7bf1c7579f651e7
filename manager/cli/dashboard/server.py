"""The dashboard's web server (aiohttp): thin handlers that read as the user (`reading.py`), ask
`pages.py` what to show, and render it with Jinja2 (autoescaped: whatever a user wrote, in an
annotation or an Event, stays text).

Safe by default: a Content-Security-Policy that allows only the package's own script and style,
no token in any URL, CSRF protection on every action (a SameSite=Strict cookie whose value each
form echoes, and the Origin checked), and in local mode only requests naming 127.0.0.1 or
localhost as their Host (no DNS rebinding)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
import secrets
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Protocol

import jinja2
from aiohttp import web

from manager.api import kueue
from manager.api.meta import utcnow
from manager.cli.dashboard import history, pages, reading
from manager.cli.dashboard.reading import Session
from manager.cli.fleet import JOB_KINDS, CommandError, ObjectName
from manager.cli.logs import log_source
from manager.kube.client import KubeClient
from manager.kube.errors import ForbiddenError, KubeError, NotFoundError, UnauthorizedError
from manager.kube.informer import Informer

log = logging.getLogger("kfed.dashboard")

CSRF_COOKIE = "kfed_csrf"
CSRF_FIELD = "csrf"
REFRESH_SECONDS = 2.0  # how often a live view reads the manager again
RECHECK_SECONDS = 30.0  # how often an open stream asks again whether its session still holds
SESSION_ENDED = "the session ended (signed out or expired): sign in again"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # not no-referrer: with it Chrome sends `Origin: null` on a form POST
    "Cache-Control": "no-store",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Sleep = Callable[[float], Awaitable[None]]
ViewValues = tuple[dict[str, Any], list[str]]  # what a view's template is given, and its notes


class Access(Protocol):
    """Who the request is from, as a Session to read with; or the response that refuses it."""

    async def session(self, request: web.Request) -> Session | web.StreamResponse: ...

    async def still_valid(self, request: web.Request) -> bool:
        """Whether the session `session` gave for this request still holds (not signed out,
        not expired): an open stream asks again every RECHECK_SECONDS and ends when not."""
        ...


@dataclass
class LocalAccess:
    """`kfed dashboard` on a workstation: one user, their kubeconfig's."""

    session_: Session

    async def session(self, request: web.Request) -> Session | web.StreamResponse:
        return self.session_

    async def still_valid(self, request: web.Request) -> bool:
        return True  # the kubeconfig's user, for as long as the command runs


@dataclass
class Settings:
    access: Access
    hosts: frozenset[str] = frozenset()  # the Host headers accepted (empty: any, in the cluster behind its Service)
    secure_cookies: bool = False
    refresh: float = REFRESH_SECONDS
    extra_routes: list[Callable[[web.Application], None]] = field(default_factory=list)
    # The plots' recorder reads with this client (the user's own, or in the cluster the
    # dashboard's; the plots are shown only to those who may list ClusterQueues, and name a
    # Workload only to a user who may list Workloads in its namespace); None: no plots.
    recorder: KubeClient | None = None
    sample_every: float = history.SAMPLE_SECONDS


SETTINGS = web.AppKey("settings", Settings)
JINJA = web.AppKey("jinja", jinja2.Environment)
SLEEP: web.AppKey[Sleep] = web.AppKey("sleep")
HISTORY = web.AppKey("history", history.History)
CSRF = web.RequestKey("csrf", str)
SESSION = web.RequestKey("session", Session)


def environment() -> jinja2.Environment:
    templates = files("manager.cli.dashboard") / "templates"
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates)),
        autoescape=True,  # every value is escaped; nothing is marked safe
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["query"] = lambda params: urllib.parse.urlencode(params)
    return env


def static_directory() -> Path:
    return Path(str(files("manager.cli.dashboard") / "static"))


# --- middlewares ---------------------------------------------------------------------------------------
def one_line(code: int, text: str) -> web.Response:
    return web.Response(status=code, text=text + "\n", content_type="text/plain")


def origin_refusal(origin: str | None, host: str) -> str:
    """Why a form sent with this `Origin` header to `host` is refused ("" when it is not): it
    came from another site, or the header is not a URL at all (`http://[::1`, which urllib
    cannot split). A request without the header (an older browser, a script) is not refused
    here: the CSRF token decides."""
    if origin is None:
        return ""
    try:
        sent_from = urllib.parse.urlsplit(origin).netloc
    except ValueError:
        return f"refused: the Origin header {' '.join(origin.split())!r} is not a URL"
    return "" if sent_from == host else "refused: the request came from another site (Origin)"


@web.middleware
async def security(request: web.Request, handler: Handler) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    if settings.hosts and request.host not in settings.hosts:
        # Same as kubectl proxy's --accept-hosts: a page of another site that resolves its own
        # name to 127.0.0.1 (DNS rebinding) is refused.
        return one_line(403, f'host "{request.host}" is not served: open http://{sorted(settings.hosts)[0]}/')
    token = request.cookies.get(CSRF_COOKIE, "")
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        refused = origin_refusal(request.headers.get("Origin"), request.host)
        if refused:
            return one_line(403, refused)
        try:
            form = await request.post()
        except (ValueError, LookupError) as err:  # a multipart body without its boundary, or broken in it; a charset unknown
            return one_line(400, f"form: cannot be read as {request.content_type}: {' '.join(str(err).split())}")
        sent = str(form.get(CSRF_FIELD, ""))
        if not token or not hmac.compare_digest(sent, token):
            return one_line(403, "refused: the form's CSRF token does not match (reload the page and try again)")
    if not token:
        token = secrets.token_urlsafe(32)
    request[CSRF] = token
    response = await handler(request)
    if not response.prepared:
        for key, value in SECURITY_HEADERS.items():
            response.headers.setdefault(key, value)
        if CSRF_COOKIE not in request.cookies:
            response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="Strict", secure=settings.secure_cookies, path="/")
    return response


# --- rendering -----------------------------------------------------------------------------------------
def render(request: web.Request, template: str, *, status: int = 200, notes: list[str] | None = None, **values: Any) -> web.Response:
    env = request.app[JINJA]
    session = request.get(SESSION)
    text = env.get_template(template).render(
        csrf=request[CSRF],
        notes=notes or [],
        user=session.user if session else "",
        path=request.path,
        **values,
    )
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


def status_of(err: Exception) -> int:
    """The page's status for a failed read or action: the dashboard's own refusal of its input
    (400); the apiserver's refusal as its status (a name it finds invalid, as 400 or 422: the
    user's input, never a 5xx); 502 only when the apiserver could not answer."""
    codes: tuple[tuple[type[Exception], int], ...] = (
        (ForbiddenError, 403),
        (NotFoundError, 404),
        (UnauthorizedError, 401),
        (CommandError, 400),
        (pages.QueryError, 400),
    )
    code = next((status for kind, status in codes if isinstance(err, kind)), 502)
    if code == 502 and isinstance(err, KubeError) and 400 <= err.status < 500:
        return err.status
    return code


def failure(request: web.Request, err: Exception) -> web.Response:
    """The apiserver's own words for a refusal, on a page."""
    code = status_of(err)
    return render(request, "error.html", status=code, message=str(err), code=code)


def page(handler: Callable[[web.Request, Session], Awaitable[web.StreamResponse]]) -> Handler:
    """A handler that reads as the request's user; a refusal or a bad request is one line on a page."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        settings = request.app[SETTINGS]
        session = await settings.access.session(request)
        if not isinstance(session, Session):
            return session
        request[SESSION] = session
        try:
            return await handler(request, session)
        except (KubeError, CommandError, pages.QueryError) as err:
            return failure(request, err)

    return wrapped


# --- views ---------------------------------------------------------------------------------------------
async def index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/jobs")


async def favicon(request: web.Request) -> web.StreamResponse:
    raise web.HTTPMovedPermanently("/static/favicon.svg")


async def healthz(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok\n")


async def _fleet(request: web.Request, session: Session) -> ViewValues:
    reads = session.args()
    workers, cqs = await reading.read_fleet(session, reads)
    now = utcnow()
    values = {
        "workers": pages.worker_cards(workers or [], now=now) if workers is not None else None,
        "manager_queues": [pages.queue_card(cq, []) for cq in sorted(cqs, key=lambda q: q.name)] if cqs is not None else None,
    }
    return values, reads.notes


ViewRead = Callable[[web.Request, Session], Awaitable[ViewValues]]


def live_view(template: str, fragment: str, read: ViewRead) -> tuple[Handler, Handler]:
    """A view's page and its stream of server-sent updates, both from the same read."""

    @page
    async def whole(request: web.Request, session: Session) -> web.StreamResponse:
        values, notes = await read(request, session)
        return render(request, template, notes=notes, **values)

    @page
    async def stream(request: web.Request, session: Session) -> web.StreamResponse:
        return await live(request, fragment, lambda: read(request, session))

    return whole, stream


fleet, fleet_stream = live_view("fleet.html", "_fleet.html", _fleet)


async def _queues(request: web.Request, session: Session) -> ViewValues:
    reads = session.args()
    found = await reading.read_queues(session, reads)
    recorded = request.app[HISTORY] if request.app[SETTINGS].recorder is not None else None
    shown = [cq.name for cq in found.cluster_queues or []]
    # The plots are recorded from every namespace: a Workload is named only to a user who may list Workloads in its namespace.
    readable = await reading.readable_namespaces(session, recorded.namespaces(shown)) if recorded is not None else set()
    tree = pages.cohort_tree(
        found.cluster_queues or [], found.cohorts, found.local_queues, recorded=recorded, now=utcnow(), readable=readable
    )
    return {"tree": tree, "readable": found.cluster_queues is not None, "local_queues": found.local_queues}, reads.notes


queues, queues_stream = live_view("queues.html", "_queues.html", _queues)


async def _jobs_page(request: web.Request, session: Session) -> tuple[pages.JobsPage, list[str]]:
    query = pages.parse_job_query(request.query)
    reads = session.args()
    jobs = await reading.read_jobs(session, reads, query.namespace)
    return pages.jobs_page(jobs, query, now=utcnow()), reads.notes


@page
async def jobs(request: web.Request, session: Session) -> web.StreamResponse:
    found, notes = await _jobs_page(request, session)
    return render(request, "jobs.html", notes=notes, jobs=found)


@page
async def jobs_stream(request: web.Request, session: Session) -> web.StreamResponse:

    async def values() -> ViewValues:
        found, notes = await _jobs_page(request, session)
        return {"jobs": found}, notes

    return await live(request, "_jobs_table.html", values)


def refused_before_streaming(err: Exception) -> bool:
    """Whether a stream's first read failing with `err` refuses the stream (its status, before
    any event): the user's own input or rights (a 4xx: forbidden, not found, a bad filter), as
    the page's read would be refused. An apiserver that cannot answer (a 5xx) does not: the
    stream starts and says so, and reads again; a browser's EventSource never reconnects to a
    stream answered with an error status."""
    return status_of(err) < 500


async def live(
    request: web.Request, fragment: str, read: Callable[[], Awaitable[ViewValues]], *, first: ViewValues | None = None
) -> web.StreamResponse:
    """Server-sent events: the view's fragment again, rendered on the server, whenever it changes.

    The first read (or `first`, read by the caller) is made before the stream starts, so a user
    who may not read what it shows gets the refusal as the answer's status (403, 404), not a 200
    whose one update is the refusal. Then a read every `refresh`, each sent when it changed."""
    settings = request.app[SETTINGS]
    env = request.app[JINJA]
    current: ViewValues | KubeError
    if first is not None:
        current = first
    else:
        try:
            current = await read()
        except KubeError as err:
            if refused_before_streaming(err):
                raise
            current = err
    response = await sse_response(request)

    def fragment_html(found: ViewValues | KubeError) -> str:
        if isinstance(found, KubeError):
            return env.get_template("_notes.html").render(notes=[f"cannot read the manager: {found}"])
        values, notes = found
        return env.get_template(fragment).render(notes=notes, csrf=request[CSRF], **values)

    async def updates() -> None:
        nonlocal current
        last = ""
        while True:
            # The page that opened the stream was rendered just now: the first update waits a
            # period too, so that a page is not redrawn (and what a reader holds of it replaced)
            # as soon as it opens. The read above only decided whether the stream may start.
            await request.app[SLEEP](settings.refresh)
            try:
                current = await read()
            except KubeError as err:
                current = err
            html = fragment_html(current)
            if html != last:
                await send_event(response, "fragment", html)
                last = html

    with contextlib.suppress(ConnectionResetError):  # the page was closed
        await while_signed_in(request, response, updates)
    return response


async def while_signed_in(request: web.Request, response: web.StreamResponse, stream: Callable[[], Awaitable[None]]) -> None:
    """Run `stream` (which writes a stream's events to `response`) while the request's session
    holds, asking again every RECHECK_SECONDS: once it no longer does (signed out, expired, a
    token the apiserver no longer accepts), the stream stops and ends with an `end` event, so
    a right lost is not kept by a page left open."""
    access, sleep = request.app[SETTINGS].access, request.app[SLEEP]
    task: asyncio.Future[None] = asyncio.ensure_future(stream())
    try:
        while not task.done():
            tick: asyncio.Future[None] = asyncio.ensure_future(sleep(RECHECK_SECONDS))
            await asyncio.wait({task, tick}, return_when=asyncio.FIRST_COMPLETED)
            tick.cancel()
            if not task.done() and not await access.still_valid(request):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await send_event(response, "end", SESSION_ENDED)
                return
        task.result()  # the stream's own end, or its error (a closed page: ConnectionResetError)
    finally:
        task.cancel()


async def sse_response(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store", **_headers_only()})
    await response.prepare(request)
    return response


def _headers_only() -> dict[str, str]:
    return {k: v for k, v in SECURITY_HEADERS.items() if k != "Cache-Control"}


def event_text(event: str, data: str) -> str:
    """One server-sent event: each line of `data` its own `data:` field. A line ends at CRLF, CR
    or LF, as the specification's parser reads it, so a carriage return in a log line or an
    annotation can never start a field of its own or end the event."""
    lines = "".join(f"data: {line}\n" for line in re.split(r"\r\n|\r|\n", data))
    return f"event: {event}\n{lines}\n"


async def send_event(response: web.StreamResponse, event: str, data: str) -> None:
    await response.write(event_text(event, data).encode())


def _target(request: web.Request) -> tuple[str, ObjectName]:
    info = request.match_info
    return info["namespace"], reading.target_of(info["kind"], info["name"])


async def _job(request: web.Request, session: Session) -> ViewValues | str:
    """What a job's page shows, or why there is no such job."""
    namespace, target = _target(request)
    reads = session.args()
    found = await reading.read_job(session, reads, namespace, target)
    if isinstance(found, str):
        return found
    container = request.query.get("container", "")
    if container and container not in found.containers:
        raise CommandError(f'no container "{container}" in the pods of {target}: choose one of {", ".join(found.containers)}')
    moments = pages.timeline(workload=found.workload, job=found.job, events=found.events, created=found.found.view.created)
    owner = found.job.metadata if found.job is not None else found.workload.metadata
    base = pages.job_path(namespace, target.kind, target.name)
    stream = f"{base}/logs" + (f"?{urllib.parse.urlencode({'container': container})}" if container else "")
    values = {
        "found": found.found,
        "target": str(target),
        "kind": target.kind,
        "namespace": namespace,
        "base": base,
        "moments": moments,
        "metadata": pages.metadata_items(owner.labels, owner.annotations),
        "where": found.logs.where if found.logs else "",
        "pods": [pod.name for pod in found.logs.pods] if found.logs else [],
        "containers": found.containers,
        "container": container,
        "logs_error": found.logs_error,
        "stream": stream if found.logs and found.logs.pods else "",
        "cancellable": target.kind in JOB_KINDS,
    }
    return values, reads.notes


@page
async def job(request: web.Request, session: Session) -> web.StreamResponse:
    found = await _job(request, session)
    if isinstance(found, str):
        return render(request, "error.html", status=404, message=found, code=404)
    values, notes = found
    return render(request, "job.html", notes=notes, **values)


@page
async def job_stream(request: web.Request, session: Session) -> web.StreamResponse:
    """The page's state, verdicts and timeline again (its log has a stream of its own). A job
    the user may not read, or that is not there, is refused as its page is, before the stream
    starts."""
    first = await _job(request, session)
    if isinstance(first, str):
        return render(request, "error.html", status=404, message=first, code=404)

    async def read() -> ViewValues:
        found = await _job(request, session)
        if isinstance(found, str):  # gone since the stream started (cancelled, finished and deleted)
            return {"found": None}, [found]
        return found

    return await live(request, "_job_details.html", read, first=first)


@page
async def job_logs(request: web.Request, session: Session) -> web.StreamResponse:
    """Server-sent events: the job's log lines as they come (`kfed logs -f`), then `end`."""
    namespace, target = _target(request)
    # Every read before the stream starts, so that a refusal is the answer's status: the job's
    # pods, then the right to read their logs (the log itself is read only as it comes).
    source = await log_source(session.client, target, namespace, session.args().args)
    await reading.may_read_logs(session, namespace, target)
    container = request.query.get("container") or None
    response = await sse_response(request)

    async def lines() -> None:
        try:
            async for line in reading.log_lines(source, container):
                await send_event(response, "line", line)
        except (KubeError, CommandError) as err:
            await send_event(response, "line", f"error: {err}")
        await send_event(response, "end", "")

    with contextlib.suppress(ConnectionResetError):  # the page was closed
        await while_signed_in(request, response, lines)
    return response


@page
async def cancel(request: web.Request, session: Session) -> web.StreamResponse:
    namespace, target = _target(request)
    base = pages.job_path(namespace, target.kind, target.name)
    if request.method == "GET":
        return render(
            request,
            "confirm.html",
            title=f"Cancel {target} in {namespace}?",
            action=f"{base}/cancel",
            fields={},
            question=f"Delete {target} in namespace {namespace}? Its Workload and its copies on the workers follow.",
            button="Cancel the job",
            back=base,
        )
    said = await reading.cancel(session, namespace, target)
    return render(request, "done.html", message=f"{said} in namespace {namespace}", back="/jobs")


@page
async def stop_policy(request: web.Request, session: Session) -> web.StreamResponse:
    name = request.match_info["name"]
    if request.method == "GET":
        policy = request.query.get("policy", "Hold")
        if policy not in reading.STOP_POLICIES:
            raise CommandError(f'stopPolicy "{policy}": expected one of {", ".join(reading.STOP_POLICIES)}')
        what = "release (admit again)" if policy == "None" else f"hold ({policy})"
        return render(
            request,
            "confirm.html",
            title=f"{what.capitalize()} ClusterQueue {name}?",
            action=f"/queues/{name}/stop-policy",
            fields={"policy": policy},
            question=f"Set spec.stopPolicy of ClusterQueue {name} to {policy}?",
            button=f"Set stopPolicy {policy}",
            back="/queues",
        )
    form = await request.post()
    policy = str(form.get("policy", ""))
    await reading.set_stop_policy(session, name, policy)
    return render(request, "done.html", message=f"ClusterQueue {name}: stopPolicy {policy}", back="/queues")


async def record(app: web.Application) -> None:
    """The plots' recorder: every `sample_every` seconds, each ClusterQueue's usage (a few
    objects, listed); and each Workload admitted, as the watch of Workloads sees it (one list,
    then only the changes: listing every Workload at every sample cost the manager's apiserver
    a full list per sample). Both kept for the window shown. A read that fails is tried again at
    the next sample; what it could not read is said under the plot."""
    settings, recorded, sleep = app[SETTINGS], app[HISTORY], app[SLEEP]
    client = settings.recorder
    assert client is not None
    workloads: Informer[kueue.Workload] = Informer(client, kueue.Workload)
    workloads.add_handler(lambda kind, old, new: recorded.record_admissions([new], utcnow()) if new is not None else None)
    watching: asyncio.Task[None] | None = None
    try:
        while True:
            now = utcnow()
            try:
                for cq in (await client.list(kueue.ClusterQueue)).items:
                    recorded.record_usage(cq.name, pages.usage_values(cq), now)
            except KubeError as err:
                log.warning("the plots' recorder cannot list ClusterQueues: %s", err)
            if watching is None or watching.done():
                watching, recorded.workloads_unreadable = await _watch_workloads(workloads, watching)
            recorded.forget_before(now)
            await sleep(settings.sample_every)
    finally:
        if watching is not None:
            watching.cancel()


async def _watch_workloads(workloads: Informer[kueue.Workload], ended: asyncio.Task[None] | None) -> tuple[asyncio.Task[None] | None, str]:
    """(the watch of every Workload, started again from a fresh list; why it cannot be, or "")."""
    if ended is not None and not ended.cancelled() and ended.exception() is not None:
        log.warning("the plots' recorder lost its watch of Workloads: %s", ended.exception())
    try:
        await workloads.relist()
    except KubeError as err:
        return None, f"cannot list Workloads in every namespace: {err}"
    return asyncio.create_task(workloads.watch_until_error()), ""


async def recorder_context(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(record(app)) if app[SETTINGS].recorder is not None else None
    yield
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def create_app(settings: Settings, *, sleep: Sleep | None = None) -> web.Application:

    app = web.Application(middlewares=[security])
    app[SETTINGS] = settings
    app[JINJA] = environment()
    app[SLEEP] = sleep or asyncio.sleep
    app[HISTORY] = history.History()
    app.cleanup_ctx.append(recorder_context)
    job_base = "/jobs/{namespace}/{kind}/{name}"
    app.router.add_get("/", index)
    app.router.add_get("/favicon.ico", favicon)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/fleet", fleet)
    app.router.add_get("/fleet/stream", fleet_stream)
    app.router.add_get("/queues", queues)
    app.router.add_get("/queues/stream", queues_stream)
    app.router.add_route("*", "/queues/{name}/stop-policy", stop_policy)
    app.router.add_get("/jobs", jobs)
    app.router.add_get("/jobs/stream", jobs_stream)
    app.router.add_get(job_base, job)
    app.router.add_get(job_base + "/logs", job_logs)
    app.router.add_get(job_base + "/stream", job_stream)
    app.router.add_route("*", job_base + "/cancel", cancel)
    app.router.add_static("/static", static_directory(), append_version=False)
    for extra in settings.extra_routes:
        extra(app)
    return app
