"""Kueue's visibility API (`visibility.kueue.x-k8s.io`, v1beta2 and v1beta1), served by the
manager as an aggregated API server, as Kueue serves it: the apiserver proxies
`/apis/visibility.kueue.x-k8s.io/...` here through the APIServices this module installs, so any
client built for Kueue (and kubectl) asks the manager's apiserver, with the user's own identity.

The answers come from the engine's own queues, in memory (`manager.engine.visibility`), so they
are in the order the scheduler admits in, on every replica, standby included.

The same server serves other groups handed to it (`ApiGroup`): the manager's MultiKueue adds
kfed's read API (`reads.kfed.dev`, `manager.multikueue.controllers.read_api`), authorized the same way.

Authentication and authorization are delegated to the apiserver, as every aggregated server's
are (k8s.io/apiserver's delegating authenticator and authorizer):
- the apiserver's front proxy presents a client certificate signed by the request-header CA and
  names the user in the `X-Remote-*` headers; the CA, the allowed client names and the header
  names come from the ConfigMap `kube-system/extension-apiserver-authentication`;
- a client that calls this server directly with a bearer token is authenticated by TokenReview;
- every request for a resource is authorized by a SubjectAccessReview for the user, so a user
  who may read one namespace's LocalQueue sees that LocalQueue's pending Workloads and nothing
  of other tenants.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import ssl
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web

from manager.api.kueue import LocalQueue
from manager.engine import visibility
from manager.engine.workload import WorkloadInfo
from manager.kube.client import KubeClient
from manager.kube.errors import KubeError, NotFoundError

log = logging.getLogger("kfed.visibility")

AUTHENTICATION_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")
APISERVICE_PATH = "/apis/apiregistration.k8s.io/v1/apiservices"


@dataclass(frozen=True)
class RequestHeaders:
    """How the apiserver's front proxy names the user (kube-system/extension-apiserver-authentication)."""

    client_ca: str
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)


def request_headers_from(data: dict[str, str]) -> RequestHeaders | None:
    """The request-header settings the apiserver publishes, or None where it has none."""
    ca = data.get("requestheader-client-ca-file", "")
    if not ca.strip():
        return None

    def names(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        raw = data.get(key)
        if not raw:
            return default
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if not isinstance(parsed, list):
            namespace, name = AUTHENTICATION_CONFIGMAP
            raise ValueError(f"ConfigMap {namespace}/{name}: data.{key}: expected a JSON list of names, got {raw[:80]!r}")
        return tuple(str(item) for item in parsed)

    return RequestHeaders(
        client_ca=ca,
        allowed_names=names("requestheader-allowed-names", ()),
        username_headers=names("requestheader-username-headers", ("X-Remote-User",)),
        group_headers=names("requestheader-group-headers", ("X-Remote-Group",)),
        extra_prefixes=names("requestheader-extra-headers-prefix", ("X-Remote-Extra-",)),
    )


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)
    uid: str = ""


def user_from_headers(config: RequestHeaders, headers: Any) -> User | None:
    """The user the front proxy names (`headers` is a case-insensitive multi-dict)."""
    name = next((headers.get(h) for h in config.username_headers if headers.get(h)), None)
    if not name:
        return None
    groups = tuple(g for h in config.group_headers for g in headers.getall(h, []))
    extra: dict[str, list[str]] = {}
    for key in headers:
        for prefix in config.extra_prefixes:
            if key.lower().startswith(prefix.lower()):
                extra.setdefault(urllib.parse.unquote(key[len(prefix) :]).lower(), []).extend(headers.getall(key))
    return User(name, groups, extra)


def common_name(peercert: dict[str, Any] | None) -> str | None:
    """The CN of a verified client certificate, as ssl's getpeercert() gives it."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def status(code: int, reason: str, message: str) -> web.Response:
    """A Kubernetes Status, as every apiserver answers a failure."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}
    return web.json_response(body, status=code)


def forbidden_message(user: str, attributes: Mapping[str, str], reason: str = "") -> str:
    """The apiserver's words for a refusal, e.g. `pods "p" is forbidden: User "alice" cannot get
    resource "pods/log" in API group "" in the namespace "team-a"`."""
    resource, group = attributes["resource"], attributes.get("group", "")
    subresource, name, namespace = attributes.get("subresource", ""), attributes.get("name", ""), attributes.get("namespace", "")
    kind = f"{resource}.{group}" if group else resource
    what = f'{kind} "{name}"' if name else kind
    full = f"{resource}/{subresource}" if subresource else resource
    where = f' in the namespace "{namespace}"' if namespace else ""
    message = f'{what} is forbidden: User "{user}" cannot {attributes.get("verb", "get")} resource "{full}" in API group "{group}"{where}'
    return message + (f": {reason}" if reason else "")


@dataclass(frozen=True)
class ApiGroup:
    """Another API group the aggregated server serves (kfed's read API): its name and versions,
    for its APIServices and discovery, and what adds its routes to the server's app (its
    handlers authorize with `VisibilityServer.guard`)."""

    name: str
    versions: tuple[str, ...]
    routes: Callable[[VisibilityServer, web.Application], None]


# How long a review's answer is used again: k8s.io/apiserver's delegating defaults
# (authenticatorfactory's CacheTTL, authorizerfactory's AllowCacheTTL and DenyCacheTTL, 10 s
# each). A flood of requests then costs the apiserver one review per identity and question,
# not one per request (the reviews share the manager's client with its lease), and a right
# taken away, or a token revoked, stops working within 10 s (docs/install.md says so).
AUTHENTICATED_FOR = 10.0
ALLOWED_FOR = 10.0
DENIED_FOR = 10.0
REVIEWS_AT_ONCE = 8  # reviews in flight to the apiserver at most; the others wait their turn


class ReviewCache:
    """Answers kept until their time runs out, the oldest dropped first beyond `limit`."""

    def __init__(self, *, limit: int = 4096, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self._items: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()

    def get(self, key: Hashable) -> Any | None:
        found = self._items.get(key)
        if found is None:
            return None
        if found[0] <= self.clock():
            del self._items[key]
            return None
        return found[1]

    def put(self, key: Hashable, value: Any, *, ttl: float) -> None:
        self._items[key] = (self.clock() + ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)


class VisibilityServer:
    """The aggregated API server's app, over the admission state's pending queues."""

    def __init__(
        self,
        client: KubeClient,
        pending: Callable[[str], Sequence[WorkloadInfo] | None],
        local_queues: Callable[[], Mapping[str, LocalQueue]],
        groups: Sequence[ApiGroup] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.groups = tuple(groups)
        self.pending = pending
        self.local_queues = local_queues
        self.request_headers: RequestHeaders | None = None
        self._authenticated = ReviewCache(clock=clock)
        self._decisions = ReviewCache(clock=clock)
        self._reviews = asyncio.Semaphore(REVIEWS_AT_ONCE)

    async def load_request_headers(self) -> RequestHeaders | None:
        """Read how the apiserver's front proxy authenticates (once, at start)."""
        namespace, name = AUTHENTICATION_CONFIGMAP
        try:
            found = await self.client.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        except NotFoundError:
            log.warning("no front-proxy settings: only bearer tokens are accepted", extra={"key": f"{namespace}/{name}"})
            return None
        self.request_headers = request_headers_from(found.get("data") or {})
        return self.request_headers

    def ssl_context(self, cert_file: str, key_file: str) -> ssl.SSLContext:
        """TLS with the serving certificate; a client certificate is asked for, and verified
        against the request-header CA when one is presented (the front proxy's)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert_file, key_file)
        if self.request_headers is not None:
            context.verify_mode = ssl.CERT_OPTIONAL
            context.load_verify_locations(cadata=self.request_headers.client_ca)
        return context

    # --- who asks, and may they ---------------------------------------------------------------------
    async def authenticate(self, request: web.Request) -> User | None:
        config = self.request_headers
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        if config is not None and peer:
            name = common_name(peer)
            if config.allowed_names and name not in config.allowed_names:
                return None
            return user_from_headers(config, request.headers)
        token = request.headers.get("Authorization", "")
        if not token.startswith("Bearer "):
            return None
        return await self.review_token(token[len("Bearer ") :])

    async def review_token(self, token: str) -> User | None:
        """The user a bearer token names (TokenReview), or None; answers are kept for a while by
        the token's hash, never the token itself. The dashboard's in-cluster mode asks it too."""
        if not token:
            return None
        key = hashlib.sha256(f"Bearer {token}".encode()).hexdigest()  # the token itself is never kept
        cached = self._authenticated.get(key)
        if cached is not None:
            return cached if isinstance(cached, User) else None
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        async with self._reviews:
            answer = await self.client.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=review, what="TokenReview")
        result = answer.get("status") or {}
        info = result.get("user") or {}
        user: User | None = None
        if result.get("authenticated"):
            groups, extra = tuple(info.get("groups") or ()), dict(info.get("extra") or {})
            user = User(str(info.get("username", "")), groups, extra, str(info.get("uid", "")))
        self._authenticated.put(key, user or "unauthenticated", ttl=AUTHENTICATED_FOR)  # a refusal is kept too
        return user

    async def allowed(self, user: User, attributes: dict[str, str]) -> tuple[bool, str]:
        key = (
            user.name,
            user.groups,
            user.uid,
            tuple(sorted((k, tuple(v)) for k, v in user.extra.items())),
            tuple(sorted(attributes.items())),
        )
        cached = self._decisions.get(key)
        if cached is not None:
            return cast(tuple[bool, str], cached)
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups), "resourceAttributes": attributes}
        if user.extra:
            spec["extra"] = user.extra
        if user.uid:
            spec["uid"] = user.uid
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        async with self._reviews:
            answer = await self.client.request(
                "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review, what="SubjectAccessReview"
            )
        result = answer.get("status") or {}
        decision = (bool(result.get("allowed")), str(result.get("reason") or ""))
        self._decisions.put(key, decision, ttl=ALLOWED_FOR if decision[0] else DENIED_FOR)
        return decision

    async def guard(self, request: web.Request, *checks: dict[str, str]) -> web.Response | None:
        """None when the caller may make this request (every one of `checks`, each the resource
        attributes of a SubjectAccessReview); else the Status to answer with."""
        try:
            user = await self.authenticate(request)
            if user is None:
                return status(401, "Unauthorized", "Unauthorized")
            for attributes in checks:
                ok, reason = await self.allowed(user, attributes)
                if not ok:
                    return status(403, "Forbidden", forbidden_message(user.name, attributes, reason))
        except KubeError as err:
            log.warning("cannot review a request of the aggregated API", extra={"error": str(err)})
            return status(503, "ServiceUnavailable", "cannot review the request with the apiserver; try again")
        return None

    async def permitted(self, request: web.Request, checks: Sequence[dict[str, str]]) -> list[bool] | web.Response:
        """Which of `checks` the caller may, in order (each the resource attributes of a
        SubjectAccessReview, its answer kept as `guard`'s are); else the Status to answer with."""
        try:
            user = await self.authenticate(request)
            if user is None:
                return status(401, "Unauthorized", "Unauthorized")
            answers = await asyncio.gather(*(self.allowed(user, attributes) for attributes in checks))
        except KubeError as err:
            log.warning("cannot review a request of the aggregated API", extra={"error": str(err)})
            return status(503, "ServiceUnavailable", "cannot review the request with the apiserver; try again")
        return [ok for ok, _ in answers]

    # --- the resources ------------------------------------------------------------------------------
    async def cluster_queue(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]

        def items(page: visibility.Page) -> list[dict[str, Any]] | web.Response:
            ordered = self.pending(name)
            if ordered is None:
                return status(404, "NotFound", f'clusterqueue.{visibility.GROUP} "{name}" not found')
            return visibility.in_cluster_queue(ordered, page)

        return await self._pending_workloads(request, "clusterqueues", {"name": name}, items)

    async def local_queue(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["name"]

        def items(page: visibility.Page) -> list[dict[str, Any]] | web.Response:
            lq = self.local_queues().get(f"{namespace}/{name}")
            if lq is None:
                return status(404, "NotFound", f'localqueue.{visibility.GROUP} "{name}" not found')
            return visibility.in_local_queue(self.pending(lq.spec.cluster_queue or "") or [], namespace, name, page)

        return await self._pending_workloads(request, "localqueues", {"name": name, "namespace": namespace}, items)

    async def _pending_workloads(
        self,
        request: web.Request,
        resource: str,
        target: dict[str, str],
        items: Callable[[visibility.Page], list[dict[str, Any]] | web.Response],
    ) -> web.Response:
        """The pendingworkloads subresource of `target`: authorized, paged, then answered."""
        version = request.match_info["version"]
        attributes = {"group": visibility.GROUP, "version": version, "resource": resource, "subresource": "pendingworkloads"}
        refused = await self.guard(request, {**attributes, **target, "verb": "get"})
        if refused is not None:
            return refused
        try:
            page = visibility.page_of(dict(request.query))
        except visibility.VisibilityQueryError as err:
            return status(400, "BadRequest", str(err))
        found = items(page)
        return found if isinstance(found, web.Response) else web.json_response(visibility.summary(version, found))

    def app(self) -> web.Application:
        app = web.Application()
        base = f"/apis/{visibility.GROUP}"
        versions = "{version:" + "|".join(visibility.VERSIONS) + "}"
        add_discovery(app, visibility.GROUP, visibility.VERSIONS, visibility.group_document, visibility.resource_list)
        app.router.add_get(f"{base}/{versions}/clusterqueues/{{name}}/pendingworkloads", self.cluster_queue)
        app.router.add_get(f"{base}/{versions}/namespaces/{{namespace}}/localqueues/{{name}}/pendingworkloads", self.local_queue)
        for group in self.groups:
            group.routes(self, app)
        return app


def add_discovery(
    app: web.Application,
    group: str,
    versions: Sequence[str],
    group_document: Callable[[], dict[str, Any]],
    resource_list: Callable[[str], dict[str, Any]],
) -> None:
    """An aggregated API group's discovery, public as the apiserver's own (system:discovery):
    the group's document, and each served version's resources (any other version: NotFound)."""

    async def group_handler(request: web.Request) -> web.Response:
        return web.json_response(group_document())

    async def version_handler(request: web.Request) -> web.Response:
        version = request.match_info["version"]
        if version not in versions:
            return status(404, "NotFound", f"the server could not find the requested resource: {group}/{version}")
        return web.json_response(resource_list(version))

    app.router.add_get(f"/apis/{group}", group_handler)
    app.router.add_get(f"/apis/{group}/{{version}}", version_handler)


VISIBILITY_GROUP = (visibility.GROUP, visibility.VERSIONS)


def api_services(
    *, ca_bundle: bytes, namespace: str, name: str, port: int, groups: Sequence[tuple[str, tuple[str, ...]]] = (VISIBILITY_GROUP,)
) -> list[dict[str, Any]]:
    """The APIServices that route each served version of each group to the Service in front of
    the manager."""
    return [
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{version}.{group}", "labels": {"app.kubernetes.io/managed-by": "kfed"}},
            "spec": {
                "group": group,
                "version": version,
                # Kueue's own values: its group sorts after the built-in ones, v1beta2 first.
                "groupPriorityMinimum": 100,
                "versionPriority": 100 - index,
                "caBundle": base64.b64encode(ca_bundle).decode(),
                "service": {"namespace": namespace, "name": name, "port": port},
            },
        }
        for group, versions in groups
        for index, version in enumerate(versions)
    ]


async def install_api_services(
    client: KubeClient,
    *,
    ca_bundle: bytes,
    namespace: str,
    name: str,
    port: int,
    groups: Sequence[tuple[str, tuple[str, ...]]] = (VISIBILITY_GROUP,),
) -> list[bytes]:
    """Point the APIServices at the Service with the current CA (patched by name, created where
    missing, as the webhook configurations are). Returns each `caBundle` as the apiserver stored
    it, which the certificate rotation waits on as it does on the webhooks'."""
    stored = []
    for obj in api_services(ca_bundle=ca_bundle, namespace=namespace, name=name, port=port, groups=groups):
        path = f"{APISERVICE_PATH}/{obj['metadata']['name']}"
        try:
            answer = await client.request(
                "PATCH", path, body={"spec": obj["spec"]}, content_type="application/merge-patch+json", what=f"patch APIService {path}"
            )
        except NotFoundError:
            answer = await client.request("POST", APISERVICE_PATH, body=obj, what=f"create APIService {obj['metadata']['name']}")
        stored.append(base64.b64decode((answer.get("spec") or {}).get("caBundle") or ""))
    return stored
