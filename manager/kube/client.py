"""The I/O gateway: one kubernetes_asyncio ApiClient per cluster, typed calls, typed errors.

Every call is rate limited by the cluster's own token bucket and bounded by a timeout.
Reads (get, list) are retried with tenacity on transient failures and 429s, honouring
Retry-After; writes are never retried here: the controller decides, from a fresh read.
"""

from __future__ import annotations

import builtins
import copy
import importlib.metadata
import ipaddress
import json
import logging
import os
import time
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypedDict, TypeVar, Unpack
from urllib.parse import quote

import aiohttp
from kubernetes_asyncio import client, config
from pydantic import ValidationError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, stop_after_delay
from tenacity.wait import wait_base, wait_exponential, wait_random

from manager.api.core import Pod
from manager.api.meta import ObjectMeta, Resource, format_time
from manager.kube.errors import (
    GoneError,
    KubeError,
    NotFoundError,
    QuietWatchError,
    TransientError,
    error_from_response,
    rejected_by_unreachable_webhook,
)
from manager.kube.ratelimit import DEFERRABLE, REQUEST, TokenBucket

log = logging.getLogger("kfed.kube")


def _package_version() -> str:
    try:
        return importlib.metadata.version("kfed")
    except importlib.metadata.PackageNotFoundError:
        return "dev"  # run from a checkout that was never installed


R = TypeVar("R", bound=Resource)

DEFAULT_QPS = 300.0
DEFAULT_BURST = 500
DEFAULT_TIMEOUT = 30.0
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
USER_AGENT = f"kfed/{_package_version()} (python; kubernetes_asyncio)"
# As kubernetes_asyncio sets it: one watch event of a large object can exceed aiohttp's default.
WATCH_READ_BUFFER = 2**21
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


class RequestOptions(TypedDict, total=False):
    """What a raw request may say besides its method and path (all optional)."""

    query: list[tuple[str, str]]
    body: Any
    content_type: str  # application/json unless said
    what: str  # the call in error messages; "METHOD path" unless said
    deferrable: bool  # waits for a token behind every other request (Events); see ratelimit.py
    accept: str  # application/json unless said (a metadata-only list asks for PartialObjectMetadataList)


class KubeconfigError(ValueError):
    """A kubeconfig the client library cannot load; the message never quotes a credential."""


def api_path(model: type[Resource], *, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
    base = f"/apis/{model.GROUP}/{model.VERSION}" if model.GROUP else f"/api/{model.VERSION}"
    if model.NAMESPACED and namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{model.PLURAL}"
    if name:
        base += f"/{quote(name, safe='')}"
    if subresource:
        base += f"/{subresource}"
    return base


def _describe(model: type[Resource], namespace: str | None, name: str | None) -> str:
    key = f"{namespace}/{name}" if namespace and name else (name or (namespace or ""))
    return f"{model.KIND} {key}".strip()


@dataclass
class ObjectList(Generic[R]):
    items: list[R]
    resource_version: str


@dataclass
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]


class _WaitRetryAfter(wait_base):
    """Retry-After when the server gave one, exponential jitter otherwise."""

    def __init__(self) -> None:
        self.fallback = wait_exponential(multiplier=0.2, max=5.0) + wait_random(0, 0.2)

    def __call__(self, retry_state: Any) -> float:
        outcome = retry_state.outcome
        err = outcome.exception() if outcome is not None else None
        after = getattr(err, "retry_after", None)
        if isinstance(after, (int, float)) and after > 0:
            return float(min(after, 30.0))
        return float(self.fallback(retry_state))


@dataclass
class CallStats:
    """What this client did, for metrics and benchmarks."""

    requests: int = 0
    by_verb: dict[str, int] = field(default_factory=dict)


class KubeClient:
    """Typed access to one cluster. Close it with `await close()`."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        name: str = "cluster",
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.api = api
        # The apiserver names the field manager of our writes after this (managedFields), so an
        # administrator sees "kfed", not the generated client's default.
        api.user_agent = USER_AGENT
        _stop_netrc_lookups(api)
        self.name = name
        self.limiter = TokenBucket(qps, burst)
        self.timeout = timeout
        self.stats = CallStats()
        self.retry_attempts = 5
        # Called with (verb, seconds) after each request that got an answer (metrics per cluster).
        self.observe_latency: Callable[[str, float], None] | None = None

    # --- construction ---------------------------------------------------------------------------
    @classmethod
    async def from_kubeconfig(
        cls,
        kubeconfig: dict[str, Any],
        *,
        name: str = "cluster",
        context: str | None = None,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        where: str = "kubeconfig",
    ) -> KubeClient:
        # What a worker's kubeconfig may hold is decided by manager/multikueue/rules/kubeconfig.py
        # before it gets here; this only loads.
        configuration = client.Configuration()
        try:
            await config.load_kube_config_from_dict(
                config_dict=copy.deepcopy(kubeconfig), context=context, client_configuration=configuration
            )
        except Exception as err:  # noqa: BLE001 - the loader raises many kinds; report them as one
            # The loader's messages can quote file contents; keep only the exception type.
            raise KubeconfigError(f"{where}: cannot load credentials ({type(err).__name__})") from None
        return cls(client.ApiClient(configuration=configuration), name=name, qps=qps, burst=burst)

    @classmethod
    async def in_cluster(cls, *, name: str = "in-cluster", qps: float = DEFAULT_QPS, burst: int = DEFAULT_BURST) -> KubeClient:
        """The pod's service account; kubernetes_asyncio re-reads the projected token when it rotates."""
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration, try_refresh_token=True)  # type: ignore[no-untyped-call]  # noqa: TID251 - into our own Configuration
        return cls(client.ApiClient(configuration=configuration), name=name, qps=qps, burst=burst)

    async def close(self) -> None:
        await self.api.close()

    # --- raw requests ------------------------------------------------------------------------------
    async def _send(
        self, method: str, path: str, *, timeout: float | aiohttp.ClientTimeout | None = None, **options: Unpack[RequestOptions]
    ) -> aiohttp.ClientResponse:
        query, body, what = options.get("query"), options.get("body"), options.get("what", "")
        content_type = options.get("content_type", "application/json")
        accept = options.get("accept", "application/json")
        await self.limiter.acquire(DEFERRABLE if options.get("deferrable") else REQUEST)
        self.stats.requests += 1
        self.stats.by_verb[method] = self.stats.by_verb.get(method, 0) + 1
        request_timeout = timeout if timeout is not None else self.timeout
        started = time.monotonic()
        try:
            response = await self._http(method, path, query, body, content_type, request_timeout, accept=accept)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise TransientError(f"{what}: {type(err).__name__}: {err}".rstrip(": ")) from None
        if self.observe_latency is not None:
            self.observe_latency(method, time.monotonic() - started)
        if response.status >= 300:
            try:
                raw = await response.read()
            finally:
                response.release()
            raise error_from_response(response.status, raw, retry_after=response.headers.get("Retry-After"), what=what)
        return response

    async def _http(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None,
        body: Any,
        content_type: str,
        timeout: float | aiohttp.ClientTimeout | None,
        *,
        accept: str = "application/json",
    ) -> aiohttp.ClientResponse:
        """One request on the ApiClient's session, with its credentials, proxy and TLS server name.
        Not through the generated `call_api`: it walks every body and header to "sanitize" them
        (ours are plain JSON already), which was a twentieth of a busy manager's CPU."""
        api, rest = self.api, self.api.rest_client
        headers = {**api.default_headers, "Content-Type": content_type, "Accept": accept}
        if api.cookie:
            headers["Cookie"] = api.cookie
        await api.update_params_for_auth(headers, [], ["BearerToken"])  # a rotated token is read here
        url = f"{api.configuration.host}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        options: dict[str, Any] = {
            "headers": headers,
            "timeout": timeout if isinstance(timeout, aiohttp.ClientTimeout) else aiohttp.ClientTimeout(total=timeout),
        }
        if body is not None:
            options["data"] = json.dumps(body, separators=(",", ":"), default=_json_value).encode()
        if rest.proxy:
            options["proxy"] = rest.proxy
        if rest.proxy_headers:
            options["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            options["server_hostname"] = rest.server_hostname
        response: aiohttp.ClientResponse = await rest.pool_manager.request(method, url, **options)
        return response

    async def request(self, method: str, path: str, **options: Unpack[RequestOptions]) -> dict[str, Any]:
        """One call, the JSON answer as a dict. Raises a KubeError subclass."""
        what = options.get("what", "")
        sent: RequestOptions = {**options, "what": what or f"{method} {path}"}
        response = await self._send(method, path, **sent)
        try:
            raw = await response.read()
        except (TimeoutError, aiohttp.ClientError) as err:
            raise TransientError(f"{what or path}: reading the answer: {type(err).__name__}") from None
        finally:
            response.release()
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            raise TransientError(f"{what or path}: the answer is not JSON") from None
        return parsed if isinstance(parsed, dict) else {"value": parsed}

    async def _retrying(self, call: Callable[[], Awaitable[Any]]) -> Any:
        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda err: isinstance(err, KubeError) and err.retryable),
            wait=_WaitRetryAfter(),
            stop=stop_after_attempt(self.retry_attempts) | stop_after_delay(60),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await call()
        raise AssertionError("unreachable")  # pragma: no cover

    # --- typed calls -------------------------------------------------------------------------------
    @staticmethod
    def _parse(model: type[R], data: dict[str, Any], what: str) -> R:
        try:
            return model.model_validate(data)
        except ValidationError as err:
            raise KubeError(f"{what}: the apiserver's answer does not match the {model.KIND} schema: {err.errors()[:1]}") from None

    async def get(self, model: type[R], name: str, *, namespace: str | None = None) -> R:
        what = f"get {_describe(model, namespace, name)}"
        data = await self._retrying(lambda: self.request("GET", api_path(model, namespace=namespace, name=name), what=what))
        return self._parse(model, data, what)

    async def serves(self, model: type[Resource]) -> bool:
        """Whether the cluster serves the kind (its group version lists its resource): a CRD
        that is not installed is False. Other failures raise."""
        path = f"/apis/{model.GROUP}/{model.VERSION}" if model.GROUP else f"/api/{model.VERSION}"
        try:
            data = await self._retrying(lambda: self.request("GET", path, what=f"discover {model.KIND}"))
        except NotFoundError:
            return False
        return any(resource.get("name") == model.PLURAL for resource in data.get("resources") or [])

    async def list(
        self,
        model: type[R],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> ObjectList[R]:
        """Every object, page by page (limit/continue), and the list's resourceVersion."""
        what = f"list {model.KIND}"
        items: list[R] = []
        token = ""
        resource_version = ""
        while True:
            query = [("limit", str(limit))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if field_selector:
                query.append(("fieldSelector", field_selector))
            if token:
                query.append(("continue", token))
            page_query = list(query)
            data = await self._retrying(lambda q=page_query: self.request("GET", api_path(model, namespace=namespace), query=q, what=what))  # type: ignore[misc]
            for raw in data.get("items") or []:
                raw.setdefault("apiVersion", f"{model.GROUP}/{model.VERSION}" if model.GROUP else model.VERSION)
                raw.setdefault("kind", model.KIND)
                items.append(self._parse(model, raw, what))
            meta = data.get("metadata") or {}
            resource_version = str(meta.get("resourceVersion") or resource_version)
            token = str(meta.get("continue") or "")
            if not token:
                return ObjectList(items, resource_version)

    async def may(self, attributes: dict[str, str]) -> bool:
        """Whether this client's identity may make a request with these resource attributes
        (`group`, `resource`, `verb`, `namespace`, ...): a SelfSubjectAccessReview, which every
        authenticated identity may ask."""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": attributes}}
        path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        answer = await self.request("POST", path, body=review, what="SelfSubjectAccessReview")
        return bool((answer.get("status") or {}).get("allowed"))

    async def list_metadata(self, model: type[Resource], *, namespace: str | None = None, limit: int = 500) -> builtins.list[ObjectMeta]:
        """Only the metadata of every object (a PartialObjectMetadataList, page by page): what a
        Secret or a ConfigMap holds never leaves the apiserver."""
        what = f"list {model.KIND} (metadata)"
        found: builtins.list[ObjectMeta] = []
        token = ""
        while True:
            query = [("limit", str(limit)), *([("continue", token)] if token else [])]
            data = await self._retrying(
                lambda q=query: self.request("GET", api_path(model, namespace=namespace), query=q, what=what, accept=METADATA_LIST)  # type: ignore[misc]
            )
            found.extend(ObjectMeta.model_validate(raw.get("metadata") or {}) for raw in data.get("items") or [])
            token = str((data.get("metadata") or {}).get("continue") or "")
            if not token:
                return found

    async def create(
        self, model: type[R], obj: R | dict[str, Any], *, namespace: str | None = None, retry_unreachable_webhook: bool = False
    ) -> R:
        """POST. Creates are not idempotent, so they are not retried, except (when asked) after
        the apiserver refused them for want of a reachable webhook: nothing was stored then."""
        body = obj.to_dict() if isinstance(obj, Resource) else obj
        ns = namespace or (body.get("metadata") or {}).get("namespace")
        what = f"create {_describe(model, ns, (body.get('metadata') or {}).get('name'))}"
        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda err: retry_unreachable_webhook and rejected_by_unreachable_webhook(err)),
            wait=wait_exponential(multiplier=0.2, max=5) + wait_random(0, 0.2),
            stop=stop_after_delay(60),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                data = await self.request("POST", api_path(model, namespace=ns), body=body, what=what)
        return self._parse(model, data, what)

    async def replace(self, model: type[R], obj: R) -> R:
        """PUT: the object's resourceVersion is the precondition."""
        what = f"update {_describe(model, obj.namespace, obj.name)}"
        data = await self.request("PUT", api_path(model, namespace=obj.namespace, name=obj.name), body=obj.to_dict(), what=what)
        return self._parse(model, data, what)

    async def patch(
        self,
        model: type[R],
        name: str,
        patch: dict[str, Any] | builtins.list[dict[str, Any]],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
    ) -> R:
        """A merge patch (or JSON patch); put `metadata.resourceVersion` in it for a precondition."""
        what = f"patch {_describe(model, namespace, name)}{'/' + subresource if subresource else ''}"
        path = api_path(model, namespace=namespace, name=name, subresource=subresource)
        data = await self.request("PATCH", path, body=patch, content_type=content_type, what=what)
        return self._parse(model, data, what)

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
        """Delete; `uid`/`resource_version` make it conditional. NotFound is raised, not swallowed."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            body["preconditions"] = preconditions
        what = f"delete {_describe(model, namespace, name)}"
        await self.request("DELETE", api_path(model, namespace=namespace, name=name), body=body, what=what)

    async def watch(
        self,
        model: type[R],
        *,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        read_timeout: float = 60.0,
    ) -> AsyncIterator[WatchEvent]:
        """One watch request: events until the server ends it. Raises GoneError on 410.

        Bookmarks are asked for, so an idle watch still advances its resourceVersion; the
        socket read timeout turns a silently dead connection into a TransientError.
        """
        query = [
            ("watch", "1"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        what = f"watch {model.KIND}"
        response = await self._send(
            "GET",
            api_path(model, namespace=namespace),
            query=query,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=read_timeout),
            what=what,
        )
        try:
            async for line in _stream_lines(response, what=what, keep_partial=False):
                if line.strip():
                    event = json.loads(line)
                    kind = event.get("type", "")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        code = int(obj.get("code") or 0)
                        if code == 410:
                            raise GoneError(f"{what}: {obj.get('message', 'too old resource version')}", status=410)
                        raise error_from_response(code or 500, json.dumps(obj), what=what)
                    yield WatchEvent(kind, obj)
        finally:
            response.release()

    def pod_logs(
        self, name: str, *, namespace: str, container: str | None = None, follow: bool = False, read_timeout: float | None = None
    ) -> AsyncGenerator[str, None]:
        """The log of one container of a Pod, line by line (without the newline). With `follow`
        it streams until the container ends or the caller stops iterating; without, the
        whole log so far. Not retried: a caller that follows decides whether to resume."""
        query = [("container", container)] if container else []
        what = f"logs of {_describe(Pod, namespace, name)}" + (f" container {container}" if container else "")
        path = api_path(Pod, namespace=namespace, name=name, subresource="log")
        return self.stream_lines(path, query=query, follow=follow, read_timeout=read_timeout, what=what)

    async def stream_lines(
        self, path: str, *, query: Sequence[tuple[str, str]], follow: bool, what: str, read_timeout: float | None = None
    ) -> AsyncGenerator[str, None]:
        """A text answer line by line (a log: the pods' own, or the one the manager's read API
        relays), `follow=true` added when following: then no deadline but `read_timeout`."""
        sent = [*query, ("follow", "true")] if follow else [*query]
        response = await self._send(
            "GET",
            path,
            query=sent,
            timeout=aiohttp.ClientTimeout(
                total=None if follow else self.timeout,
                sock_connect=self.timeout,
                sock_read=read_timeout if follow else self.timeout,
            ),
            what=what,
        )
        try:
            async for line in _stream_lines(response, what=what, keep_partial=True):
                yield line.decode(errors="replace")
        finally:
            response.release()


def proxy_from_environment(server: str, env: Mapping[str, str]) -> str | None:
    """The proxy HTTPS_PROXY (or HTTP_PROXY for an http server) names for `server`, unless
    NO_PROXY exempts it. NO_PROXY is read as Go's net/http reads it for client-go: `*`, host
    names and domain suffixes (with or without a leading dot), IP addresses and CIDR ranges,
    each optionally with a port."""
    url = urllib.parse.urlsplit(server)
    scheme = url.scheme or "https"
    proxy = env.get(f"{scheme.upper()}_PROXY") or env.get(f"{scheme}_proxy")
    host = (url.hostname or "").lower()
    if not proxy or not host:
        return None
    port = str(url.port or (443 if scheme == "https" else 80))
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (env.get("NO_PROXY") or env.get("no_proxy") or "").split(","):
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return None
        if "/" in entry:
            try:
                if address is not None and address in ipaddress.ip_network(entry, strict=False):
                    return None
            except ValueError:
                pass
            continue
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and entry_port != port:
            continue
        domain = name.strip("[]").lstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            return None
    return proxy


def _json_value(value: object) -> str:
    """A body value json cannot write itself: a time, as Kubernetes writes metav1.Time."""
    if isinstance(value, datetime):
        return format_time(value)
    raise TypeError(f"a request body cannot hold a {type(value).__name__}")


def _stop_netrc_lookups(api: client.ApiClient) -> None:
    """kubernetes_asyncio's session trusts the environment, so aiohttp looks for a ~/.netrc in a
    worker thread on every request that carries no credentials of aiohttp's own (all of ours:
    the token is a header). That was a quarter of a busy manager's CPU. Resolve the
    environment's proxy for this server once instead (HTTPS_PROXY and NO_PROXY, as client-go
    honours them) and give the session's connection pool to one that does not look."""
    rest = api.rest_client
    if rest.proxy is None:
        rest.proxy = proxy_from_environment(api.configuration.host, os.environ)
    old = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(connector=old.connector, trust_env=False, read_bufsize=WATCH_READ_BUFFER)
    old.detach()


async def api_client_from_kubeconfig(kubeconfig: dict[str, Any], *, context: str | None = None) -> client.ApiClient:
    """A bare ApiClient for one cluster (used by the test harness). The caller closes it."""
    configuration = client.Configuration()
    await config.load_kube_config_from_dict(config_dict=copy.deepcopy(kubeconfig), context=context, client_configuration=configuration)
    return client.ApiClient(configuration=configuration)


async def _stream_lines(response: aiohttp.ClientResponse, *, what: str, keep_partial: bool) -> AsyncIterator[bytes]:
    """The lines of a streamed body, without their newline, split by hand (a watch event can be
    longer than aiohttp's readline limit); `keep_partial` also yields an unterminated last line."""
    buffer = b""
    while True:
        try:
            chunk = await response.content.readany()
        except aiohttp.SocketTimeoutError:
            raise QuietWatchError(f"{what}: nothing heard within the read timeout") from None
        except (TimeoutError, aiohttp.ClientError) as err:
            raise TransientError(f"{what}: {type(err).__name__}") from None
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line
    if buffer and keep_partial:
        yield buffer
