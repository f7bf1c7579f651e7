"""The dashboard in the cluster (`kfed dashboard --in-cluster`): many users, each named by their
bearer token (TokenReview), and every read and action checked with a SubjectAccessReview for
that user before the dashboard's own identity makes it. The reviews are the manager's aggregated
server's (`manager.controllers.visibility.VisibilityServer`: the same caches and limits), so a
user sees here exactly what the apiserver would let them read themselves.

A browser signs in once by pasting a token (`kubectl create token`, or their OIDC id-token) into
the sign-in form; the dashboard keeps only the reviewed identity, under a random session id in an
HttpOnly, SameSite=Strict cookie, never the token. A proxy in front (oauth2-proxy) may instead
send `Authorization: Bearer` with every request."""

from __future__ import annotations

import asyncio
import base64
import builtins
import json
import math
import secrets
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from manager.api.meta import Resource
from manager.cli.dashboard.reading import Session
from manager.cli.dashboard.server import SETTINGS, render
from manager.controllers.visibility import User, VisibilityServer, forbidden_message
from manager.kube.client import KubeClient, ObjectList
from manager.kube.errors import ForbiddenError, KubeError
from manager.multikueue.rules import reads

R = TypeVar("R", bound=Resource)

SESSION_COOKIE = "kfed_session"
SESSION_SECONDS = 8 * 3600  # a signed-in browser asks again after this at the latest (the token is not kept)
READS_GROUP = reads.GROUP
# The read API's workers, which name namespaces: told again to the user (`_clusters_for_user`).
CLUSTERS_PATH = f"/apis/{reads.GROUP}/{reads.VERSION}/{reads.CLUSTERS}"
VERBS = {"GET": "get", "DELETE": "delete", "PATCH": "patch", "POST": "create", "PUT": "update"}


# --- what a request asks, as a SubjectAccessReview's attributes (pure) -------------------------------
def model_attributes(verb: str, model: type[Resource], *, namespace: str | None = None, name: str | None = None) -> dict[str, str]:
    found = {"group": model.GROUP, "version": model.VERSION, "resource": model.PLURAL, "verb": verb}
    if namespace:
        found["namespace"] = namespace
    if name:
        found["name"] = name
    return found


def path_attributes(method: str, path: str) -> list[dict[str, str]]:
    """The resource attributes an apiserver path asks for (`/api/v1/...` or `/apis/G/V/...`):
    `get` of a named object or subresource, `list` of a collection, and so on. Reading a pod's
    log through kfed's read API also needs `get pods/log` in the namespace, as the read API
    itself asks of its caller."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ValueError(f"not a resource path: {path}")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise ValueError(f"not a resource path: {path}")
    resource, name, subresource = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
    verb = VERBS.get(method.upper(), method.lower())
    if verb == "get" and not name:
        verb = "list"
    found = {"group": group, "version": version, "resource": resource, "verb": verb}
    for key, value in (("subresource", subresource), ("namespace", namespace), ("name", name)):
        if value:
            found[key] = value
    checks = [found]
    if group == READS_GROUP and subresource == "log":
        checks.append({"group": "", "version": "v1", "resource": "pods", "subresource": "log", "verb": "get", "namespace": namespace})
    return checks


def token_expiry(token: str) -> float | None:
    """The `exp` claim (seconds since the epoch) of a JWT (a ServiceAccount's token, an OIDC
    id-token), or None for a token that is not a JWT or has no numeric `exp`. Read without
    verifying the signature: the apiserver has already accepted the token (TokenReview), and
    this only bounds how long the dashboard trusts that answer."""
    parts = token.split(".")
    if len(parts) != 3 or len(parts[1]) > 16384:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode("ascii")))
    except (ValueError, UnicodeError):  # binascii.Error and json's errors are ValueErrors
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float) or not math.isfinite(exp):
        return None
    return float(exp)


def session_seconds(token: str, *, now: float, maximum: float = SESSION_SECONDS) -> float:
    """How long a session signed in with `token` at `now` (seconds since the epoch) lasts: until
    the token's own expiry or `maximum`, whichever comes first (`maximum` for a token without
    `exp`; 0 for one already expired)."""
    exp = token_expiry(token)
    return maximum if exp is None else max(0.0, min(maximum, exp - now))


def default_namespace(user: User) -> str:
    """Where a user who may not list every namespace is shown: a ServiceAccount's own, else default."""
    parts = user.name.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return parts[2]
    return "default"


# --- a client that asks first ----------------------------------------------------------------------------
class GuardedClient(KubeClient):
    """The dashboard's client, for one user: each call is first reviewed for that user (a
    SubjectAccessReview), and refused as the apiserver would refuse it; then made with the
    dashboard's own identity. Only the calls the dashboard makes are here; any other is refused."""

    def __init__(self, inner: KubeClient, reviews: VisibilityServer, user: User) -> None:
        self.inner = inner
        self.reviews = reviews
        self.user = user
        self.api = inner.api
        self.name = f"{inner.name} for {user.name}"

    async def _check(self, *checks: dict[str, str]) -> None:
        for attributes in checks:
            ok, reason = await self.reviews.allowed(self.user, attributes)
            if not ok:
                raise ForbiddenError(forbidden_message(self.user.name, attributes, reason), status=403, reason="Forbidden")

    async def may(self, attributes: dict[str, str]) -> bool:
        """Whether the user (not the dashboard) may: their SubjectAccessReview."""
        ok, _ = await self.reviews.allowed(self.user, attributes)
        return ok

    async def get(self, model: type[R], name: str, *, namespace: str | None = None) -> R:
        await self._check(model_attributes("get", model, namespace=namespace, name=name))
        return await self.inner.get(model, name, namespace=namespace)

    async def list(
        self,
        model: type[R],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> ObjectList[R]:
        await self._check(model_attributes("list", model, namespace=namespace))
        return await self.inner.list(model, namespace=namespace, label_selector=label_selector, field_selector=field_selector, limit=limit)

    async def delete(
        self,
        model: type[R],
        name: str,
        *,
        namespace: str | None = None,
        propagation: str = "Background",
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> None:
        await self._check(model_attributes("delete", model, namespace=namespace, name=name))
        await self.inner.delete(model, name, namespace=namespace, propagation=propagation, uid=uid, resource_version=resource_version)

    async def patch(
        self,
        model: type[R],
        name: str,
        patch: dict[str, Any] | builtins.list[dict[str, Any]],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        content_type: str = "application/merge-patch+json",
    ) -> R:
        attributes = model_attributes("patch", model, namespace=namespace, name=name)
        if subresource:
            attributes["subresource"] = subresource
        await self._check(attributes)
        return await self.inner.patch(model, name, patch, namespace=namespace, subresource=subresource, content_type=content_type)

    async def request(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        await self._check(*path_attributes(method, path))
        answer = await self.inner.request(method, path, **options)
        if method == "GET" and path.split("?")[0].startswith(CLUSTERS_PATH):
            return await self._clusters_for_user(answer)
        return answer

    async def _clusters_for_user(self, answer: dict[str, Any]) -> dict[str, Any]:
        """The read API told `clusters` to the dashboard (its identity made the call): told
        again to the user, by the read API's own rule (`reads.told_answer`), with the user's
        reviews: every named namespace for one who may list MultiKueueClusters (and the
        workers' own words), else those whose LocalQueues the user may list."""
        if await self.may({**reads.CLUSTER_OBJECTS, "verb": "list"}):
            return reads.told_answer(answer, reads.EVERY_NAMESPACE, worker_words=True)
        named = reads.item_namespaces(reads.answer_items(answer))
        allowed = await asyncio.gather(*(self.may({**reads.LIST_LOCAL_QUEUES, "namespace": ns}) for ns in named))
        return reads.told_answer(answer, {ns for ns, ok in zip(named, allowed, strict=True) if ok}, worker_words=False)

    async def stream_lines(
        self, path: str, *, query: Any, follow: bool, what: str, read_timeout: float | None = None
    ) -> AsyncGenerator[str, None]:
        await self._check(*path_attributes("GET", path))
        async for line in self.inner.stream_lines(path, query=query, follow=follow, what=what, read_timeout=read_timeout):
            yield line

    def pod_logs(
        self, name: str, *, namespace: str, container: str | None = None, follow: bool = False, read_timeout: float | None = None
    ) -> AsyncGenerator[str, None]:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/log"
        query = [("container", container)] if container else []
        return self.stream_lines(path, query=query, follow=follow, what=f"logs of pod {namespace}/{name}", read_timeout=read_timeout)

    async def _send(self, *args: Any, **kwargs: Any) -> Any:
        raise ForbiddenError("the dashboard makes no unreviewed request", status=403)

    async def create(self, *args: Any, **kwargs: Any) -> Any:
        raise ForbiddenError("the dashboard creates nothing", status=403)

    async def replace(self, *args: Any, **kwargs: Any) -> Any:
        raise ForbiddenError("the dashboard replaces nothing", status=403)

    async def close(self) -> None:
        """The inner client is the dashboard's, shared by every user: closed with the server."""


# --- who is asking ---------------------------------------------------------------------------------------
@dataclass
class ClusterAccess:
    """Bearer tokens (a header, or the sign-in form once per browser), reviewed by the apiserver."""

    client: KubeClient  # the dashboard's own identity
    reviews: VisibilityServer
    clock: Callable[[], float] = time.monotonic  # the sessions' deadlines
    wall: Callable[[], float] = time.time  # to read a token's `exp` against
    sessions: dict[str, tuple[User, float]] = field(default_factory=dict)

    def session_for(self, user: User) -> Session:
        return Session(GuardedClient(self.client, self.reviews, user), default_namespace=default_namespace(user), user=user.name)

    async def session(self, request: web.Request) -> Session | web.StreamResponse:
        header = request.headers.get("Authorization", "")
        if header:
            if not header.startswith("Bearer "):
                return web.Response(status=401, text="Authorization: expected a bearer token\n")
            try:
                user = await self.reviews.review_token(header[len("Bearer ") :])
            except KubeError:
                return web.Response(status=503, text="cannot review the token with the apiserver; try again\n")
            if user is None:
                return web.Response(status=401, text="the bearer token was not accepted by the apiserver\n")
            return self.session_for(user)
        found = self._signed_in(request)
        if found is not None:
            return self.session_for(found)
        if request.method == "GET" and not request.path.endswith(("/stream", "/logs")):
            raise web.HTTPFound("/login")
        return web.Response(status=401, text="sign in first: /login\n")

    def _signed_in(self, request: web.Request) -> User | None:
        found = self.sessions.get(request.cookies.get(SESSION_COOKIE, ""))
        return found[0] if found is not None and found[1] > self.clock() else None

    async def still_valid(self, request: web.Request) -> bool:
        """Whether the request's session still holds (an open stream asks again): a bearer
        header still accepted by the apiserver (TokenReview, cached 10 s), or a session cookie
        not signed out and not expired."""
        header = request.headers.get("Authorization", "")
        if header:
            try:
                return header.startswith("Bearer ") and await self.reviews.review_token(header[len("Bearer ") :]) is not None
            except KubeError:
                return True  # the apiserver cannot answer now: asked again at the next check
        return self._signed_in(request) is not None

    async def sign_in(self, token: str) -> str | None:
        """A new session id for the token's user, or None when the apiserver does not accept it.
        The session ends at the token's own expiry (its `exp`), or after SESSION_SECONDS."""
        token = token.strip()
        user = await self.reviews.review_token(token)
        if user is None:
            return None
        lasts = session_seconds(token, now=self.wall())
        if lasts <= 0:
            return None
        now = self.clock()
        for key in [k for k, (_, until) in self.sessions.items() if until <= now]:
            del self.sessions[key]
        key = secrets.token_urlsafe(32)
        self.sessions[key] = (user, now + lasts)
        return key

    def sign_out(self, key: str) -> None:
        self.sessions.pop(key, None)


def routes(access: ClusterAccess) -> Callable[[web.Application], None]:
    """The sign-in and sign-out pages (CSRF-checked like every form, by the server's middleware)."""

    async def sign_in_page(request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            return render(request, "login.html", message="")
        form = await request.post()
        try:
            key = await access.sign_in(str(form.get("token", "")))
        except KubeError:
            return render(request, "login.html", status=503, message="cannot review the token with the apiserver; try again")
        if key is None:
            return render(request, "login.html", status=401, message="the apiserver did not accept this token")
        response = web.HTTPFound("/jobs")
        response.set_cookie(SESSION_COOKIE, key, httponly=True, samesite="Strict", secure=request.app[SETTINGS].secure_cookies, path="/")
        raise response

    async def sign_out(request: web.Request) -> web.StreamResponse:
        access.sign_out(request.cookies.get(SESSION_COOKIE, ""))
        response = web.HTTPFound("/login")
        response.del_cookie(SESSION_COOKIE, path="/")
        raise response

    def add(app: web.Application) -> None:
        app.router.add_route("*", "/login", sign_in_page)
        app.router.add_post("/logout", sign_out)

    return add
