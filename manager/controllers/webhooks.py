"""Admission and conversion webhooks, served by aiohttp over TLS.

- Job defaulting, for each enabled job kind (batch/v1 Job, JobSet, ...): a job with the
  queue-name label is created suspended (and marked `managedBy: kueue.x-k8s.io/multikueue`
  when its ClusterQueue dispatches through a MultiKueue admission check and its own
  controller would run it otherwise), as Kueue's job webhooks do.
- Validation of the kueue.x-k8s.io kinds with the foundation's rules; a denial names each
  field path, as the apiserver's own validation does.
- Conversion between v1beta1 and v1beta2 with the one pure conversion module.

The handlers are pure functions of the review (plus a read of the caches); `serve` wraps them.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from aiohttp import web
from pydantic import BaseModel, ValidationError

from manager.api import constants as c
from manager.api import conversion, kueue
from manager.api.manifest import pydantic_field_errors, validate_object
from manager.api.meta import ObjectMeta, OwnerReference
from manager.controllers.caches import Caches
from manager.engine.integrations.adapter import JobAdapter
from manager.engine.integrations.pod import PodTemplateParent
from manager.engine.integrations.registry import BATCH_JOB, DEFAULT, Registry
from manager.engine.jobs import prebuilt_workload_name, queue_name_of
from manager.engine.worker_restriction import SelectionError, job_restriction
from manager.engine.workload import is_multikueue_check
from manager.kube.client import KubeClient, R
from manager.kube.errors import ForbiddenError, KubeError, NotFoundError

log = logging.getLogger("kfed.webhooks")

MUTATE_JOB_PATH = "/mutate-batch-v1-job"
DEFAULT_ADAPTERS = DEFAULT.webhooked
# A kind whose objects kfed's webhook defaults: a job kind, or one queued through its pods alone.
Webhooked: TypeAlias = JobAdapter[Any] | PodTemplateParent
VALIDATE_PATH = "/validate-kueue-x-k8s-io"
CONVERT_PATH = "/convert"
WEBHOOK_READ_TIMEOUT = 5.0  # seconds; the apiserver gives a webhook 10
MUTATING_CONFIGURATION = "kfed-mutating-webhook-configuration"
VALIDATING_CONFIGURATION = "kfed-validating-webhook-configuration"
# Every kfed kind is validated and converted (Kueue's webhooks cover the same set).
KUEUE_PLURALS = sorted(model.PLURAL for model in kueue.KINDS)


def _review(
    request: dict[str, Any], *, allowed: bool, message: str = "", patch: list[dict[str, Any]] | None = None, code: int = 0
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code or 422, "reason": "Invalid", "message": message}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


MESSAGE_LIMIT = 1024  # a refusal's message, cut here (Kubernetes truncates long Status messages too)


def one_line(message: str) -> str:
    """A refusal's message on one line and of bounded length, whatever a user's values hold."""
    flat = " ".join(message.split())
    return flat if len(flat) <= MESSAGE_LIMIT else flat[: MESSAGE_LIMIT - 3] + "..."


def _named(review: Any) -> tuple[str, str]:
    """The kind and name of the object a review is about, read defensively (for a refusal)."""
    request = review.get("request") if isinstance(review, dict) else None
    obj = request.get("object") if isinstance(request, dict) else None
    obj = obj if isinstance(obj, dict) else {}
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    kind, name = obj.get("kind"), meta.get("name") or meta.get("generateName")
    return (kind if isinstance(kind, str) and kind else "object"), (name if isinstance(name, str) else "")


def refusal(review: Any, problems: Sequence[str]) -> dict[str, Any]:
    """The AdmissionReview refusing an object with `problems` (`path: reason` each), in one line
    that names the object, as the apiserver's own validation says it."""
    request = review.get("request") if isinstance(review, dict) else None
    kind, name = _named(review)
    message = one_line(f'{kind} "{name}" is invalid: {"; ".join(problems)}')
    return _review(request if isinstance(request, dict) else {}, allowed=False, message=message)


def shape_problems(model: type[BaseModel], obj: Any, *, path: str = "") -> list[str]:
    """The fields of `obj` of a type its kind's model refuses (`spec: Input should be a valid
    dictionary`, with pydantic's location as the field path): the webhook refuses such an
    object before reading it, as Kueue's webhook fails to decode it."""
    if not isinstance(obj, dict):
        return [f"{path or 'object'}: Invalid value: must be an object"]
    try:
        model.model_validate(obj)
    except ValidationError as err:
        return [f"{path}{error}" if path else str(error) for error in pydantic_field_errors(err)]
    return []


def mutate_path(adapter: Webhooked) -> str:
    """Kueue's defaulting webhook path for a kind, e.g. `/mutate-jobset-x-k8s-io-v1alpha2-jobset`."""
    group = adapter.model.GROUP.replace(".", "-") or "core"
    return f"/mutate-{group}-{adapter.model.VERSION}-{adapter.kind.lower()}"


def queued_job(review: dict[str, Any]) -> tuple[str, str] | None:
    """The (namespace, queue) of a job being created with a queue name; None for anything else."""
    request = review.get("request") or {}
    if request.get("operation") != "CREATE":
        return None
    obj = request.get("object") or {}
    meta = (obj.get("metadata") if isinstance(obj, dict) else None) or {}
    if not isinstance(meta, dict) or shape_problems(ObjectMeta, meta):
        return None  # not an object a queue can be read from: default_job refuses it, naming the field
    queue = queue_name_of(meta.get("labels"), meta.get("annotations"))
    if not queue:
        return None
    return meta.get("namespace") or request.get("namespace") or "", queue


def default_job(
    review: dict[str, Any],
    *,
    uses_multikueue: Callable[[str, str], bool],
    adapter: Webhooked = BATCH_JOB,
    part_of_managed_job: Callable[[list[OwnerReference]], bool] = lambda refs: False,
) -> dict[str, Any]:
    """Suspend a queued job of the adapter's kind at creation (`adapter.creation_patch`);
    `uses_multikueue(namespace, queue)` says whether its ClusterQueue dispatches to worker
    clusters. An object whose controller owner is a managed job kind is part of that job and
    left alone (Kueue's FindAncestorJobManagedByKueue)."""
    request = review.get("request") or {}
    if request.get("operation") in ("CREATE", "UPDATE"):
        problems = shape_problems(adapter.model, request.get("object"))
        if request.get("operation") == "UPDATE" and not problems:
            problems = shape_problems(adapter.model, request.get("oldObject"), path="oldObject.")
        if problems:
            return refusal(review, problems)
    if request.get("operation") == "UPDATE" and isinstance(adapter, PodTemplateParent):
        return _update_parent(request, adapter)
    queued = queued_job(review)
    if queued is None:
        return _review(request, allowed=True)
    namespace, queue = queued
    job = request.get("object") or {}
    meta = job.get("metadata") or {}
    refs = [OwnerReference.model_validate(ref) for ref in meta.get("ownerReferences") or []]
    if part_of_managed_job(refs):
        return _review(request, allowed=True)
    problems = adapter.creation_problems(job)
    try:
        job_restriction(meta.get("annotations"), what=f"{adapter.kind} {namespace}/{meta.get('name') or meta.get('generateName') or ''}")
    except SelectionError as err:
        problems.append(str(err).split(": ", 1)[1])  # the path and the reason; the kind and name lead the denial
    if problems:
        name = meta.get("name") or meta.get("generateName") or ""
        return _review(request, allowed=False, message=f'{adapter.kind} "{name}" is invalid: {"; ".join(problems)}')
    patch: list[dict[str, Any]] = adapter.creation_patch(job)
    if (
        isinstance(adapter, JobAdapter)
        and adapter.can_default_managed_by(adapter.raw_managed_by(job))
        and not prebuilt_workload_name(meta)
        and uses_multikueue(namespace, queue)
    ):
        patch.append(adapter.managed_by_patch(c.MULTIKUEUE_MANAGED_BY))
    return _review(request, allowed=True, patch=patch)


def _update_parent(request: dict[str, Any], parent: PodTemplateParent) -> dict[str, Any]:
    """An update of a kind queued through its pods alone: refused with Kueue's update checks, or
    its pod template marked again from the new labels (a queue set or changed while no pod
    runs reaches the pods its rollout makes)."""
    old, new = request.get("oldObject") or {}, request.get("object") or {}
    problems = parent.update_problems(old, new)
    if problems:
        name = (new.get("metadata") or {}).get("name") or ""
        return _review(request, allowed=False, message=f'{parent.kind} "{name}" is invalid: {"; ".join(problems)}')
    return _review(request, allowed=True, patch=parent.creation_patch(new))


async def queue_uses_multikueue(caches: Caches, client: KubeClient, namespace: str, queue: str) -> bool:
    """Whether a job queued to `namespace/queue` dispatches through a MultiKueue check. The
    caches answer; an object they have not seen yet (a queue created a moment before the job)
    is read from the apiserver, so a job submitted right after its queue is still marked for
    MultiKueue. Kueue's webhook reads only its cache, and leaves such a job to run locally.
    The reads together are bounded well inside the apiserver's 10 s webhook timeout."""
    try:
        async with asyncio.timeout(WEBHOOK_READ_TIMEOUT):
            lq = caches.local_queues.get(f"{namespace}/{queue}") or await _read(client, kueue.LocalQueue, queue, namespace)
            cq_name = lq.spec.cluster_queue if lq else None
            cq = (caches.cluster_queues.get(cq_name) or await _read(client, kueue.ClusterQueue, cq_name)) if cq_name else None
            if cq is None:
                return False
            for name in cq.admission_check_names:
                if is_multikueue_check(caches.admission_checks.get(name) or await _read(client, kueue.AdmissionCheck, name)):
                    return True
            return False
    except TimeoutError:
        log.warning("webhook: cannot read the queue %s/%s in time; the job is not marked for MultiKueue", namespace, queue)
        return False


async def _read(client: KubeClient, model: type[R], name: str, namespace: str | None = None) -> R | None:
    """One object from the apiserver, or None when it does not exist or cannot be read (the
    webhook then answers as for an unknown queue)."""
    try:
        return await client.get(model, name, namespace=namespace)
    except NotFoundError:
        return None
    except KubeError as err:
        log.warning("webhook: cannot read %s %s: %s", model.KIND, name, err)
        return None


def validate(review: dict[str, Any]) -> dict[str, Any]:
    """Kueue's validating webhooks, with the field path of every problem in the denial."""
    request = review.get("request") or {}
    if request.get("operation") not in ("CREATE", "UPDATE"):
        return _review(request, allowed=True)
    obj = request.get("object") or {}
    _, errors = validate_object(obj)
    if not errors:
        return _review(request, allowed=True)
    meta = obj.get("metadata") or {}
    kind = obj.get("kind", "object")
    name = meta.get("name") or meta.get("generateName") or ""
    details = "; ".join(str(err) for err in errors)
    message = f'{kind}.{c.GROUP} "{name}" is invalid: {details}'
    return _review(request, allowed=False, message=message)


def convert_review(review: dict[str, Any]) -> dict[str, Any]:
    request = review.get("request") or {}
    desired = str(request.get("desiredAPIVersion", ""))
    _, _, version = desired.rpartition("/")
    out: dict[str, Any] = {"uid": request.get("uid", "")}
    try:
        out["convertedObjects"] = [conversion.convert(obj, version) for obj in request.get("objects") or []]
        out["result"] = {"status": "Success"}
    except conversion.ConversionError as err:
        out["convertedObjects"] = []
        out["result"] = {"status": "Failure", "message": str(err)}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": out}


def conversion_failure(review: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """The ConversionReview that fails a conversion of malformed objects, saying why."""
    request = review.get("request")
    request = request if isinstance(request, dict) else {}
    result = {"status": "Failure", "message": one_line(f"cannot convert: {'; '.join(problems)}")}
    response = {"uid": request.get("uid", ""), "convertedObjects": [], "result": result}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response}


# --- the server -----------------------------------------------------------------------------------
def _pure(handler: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
    async def run(review: dict[str, Any]) -> dict[str, Any]:
        return handler(review)

    return run


def make_app(
    *, uses_multikueue: Callable[[str, str], Awaitable[bool]], adapters: Sequence[Webhooked] = DEFAULT_ADAPTERS
) -> web.Application:
    """The webhook server. `uses_multikueue(namespace, queue)` may read the cluster: it is
    awaited once per queued job, before the pure handler runs."""

    async def handle(
        request: web.Request,
        handler: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
        refuse: Callable[[dict[str, Any], list[str]], dict[str, Any]] = refusal,
    ) -> web.Response:
        try:
            review = await request.json()
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        except RecursionError:  # the JSON decoder recurses once per level of nesting
            return web.json_response({"error": "the body is nested too deeply"}, status=400)
        if not isinstance(review, dict) or not isinstance(review.get("request") or {}, dict):
            return web.json_response({"error": "the body is not an AdmissionReview or ConversionReview object"}, status=400)
        try:
            return web.json_response(await handler(review))
        except ValidationError as err:  # a field the models refuse, deeper than the first check read
            return web.json_response(refuse(review, [str(error) for error in pydantic_field_errors(err)]))
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as err:
            # A field of a type no check expected: refused, never a 500 (under failurePolicy
            # Fail the user would see only "failed calling webhook").
            kind, name = _named(review)
            log.warning("webhook: refused a malformed object", extra={"key": f"{kind}/{name}", "error": str(err)[:200]})
            return web.json_response(refuse(review, [f"a field has the wrong type ({type(err).__name__}: {err})"]))

    def mutate_job(adapter: Webhooked) -> Callable[[web.Request], Any]:
        async def default(review: dict[str, Any]) -> dict[str, Any]:
            queued = queued_job(review)
            federated = await uses_multikueue(*queued) if queued else False
            return default_job(
                review, uses_multikueue=lambda namespace, queue: federated, adapter=adapter, part_of_managed_job=registry.owns_any
            )

        async def mutate(request: web.Request) -> web.Response:
            return await handle(request, default)

        return mutate

    async def validate_kueue(request: web.Request) -> web.Response:
        return await handle(request, _pure(validate))

    async def convert(request: web.Request) -> web.Response:
        return await handle(request, _pure(convert_review), conversion_failure)

    registry = Registry(tuple(adapter for adapter in adapters if isinstance(adapter, JobAdapter)))
    app = web.Application(client_max_size=8 * 1024 * 1024)
    for adapter in adapters:
        app.router.add_post(mutate_path(adapter), mutate_job(adapter))
    app.router.add_post(VALIDATE_PATH, validate_kueue)
    app.router.add_post(CONVERT_PATH, convert)
    return app


@dataclass
class WebhookEndpoint:
    """Where the apiserver reaches the webhooks: a URL (loopback, for local clusters) or a Service."""

    ca_bundle: bytes
    url: str | None = None
    service_namespace: str | None = None
    service_name: str | None = None
    service_port: int = 443

    def client_config(self, path: str) -> dict[str, Any]:
        config: dict[str, Any] = {"caBundle": base64.b64encode(self.ca_bundle).decode()}
        if self.url:
            config["url"] = self.url.rstrip("/") + path
        else:
            config["service"] = {"namespace": self.service_namespace, "name": self.service_name, "path": path, "port": self.service_port}
        return config


def _configuration(kind: str, name: str, webhooks: list[dict[str, Any]]) -> dict[str, Any]:
    """A webhook configuration, with the settings all of kfed's webhooks share."""
    shared = {"failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [w | shared for w in webhooks],
    }


def webhook_configurations(endpoint: WebhookEndpoint, adapters: Sequence[Webhooked] = DEFAULT_ADAPTERS) -> list[dict[str, Any]]:
    mutating = [
        {
            "name": f"m{adapter.kind.lower()}.kfed.x-k8s.io",
            "clientConfig": endpoint.client_config(mutate_path(adapter)),
            "rules": [
                {
                    "apiGroups": [adapter.model.GROUP],
                    "apiVersions": [adapter.model.VERSION],
                    "operations": list(adapter.webhook_operations),
                    "resources": [adapter.model.PLURAL],
                }
            ],
            # Only queued jobs reach us: a manager that is down never blocks anyone else's jobs.
            "objectSelector": {"matchExpressions": [{"key": c.QUEUE_NAME_LABEL, "operator": "Exists"}]},
            **({"namespaceSelector": selector} if (selector := adapter.webhook_namespace_selector()) else {}),
        }
        for adapter in adapters
    ]
    validating = {
        "name": "vkueue.kfed.x-k8s.io",
        "clientConfig": endpoint.client_config(VALIDATE_PATH),
        "rules": [{"apiGroups": [c.GROUP], "apiVersions": ["v1beta2"], "operations": ["CREATE", "UPDATE"], "resources": KUEUE_PLURALS}],
        "matchPolicy": "Equivalent",
    }
    return [
        _configuration("MutatingWebhookConfiguration", MUTATING_CONFIGURATION, mutating),
        _configuration("ValidatingWebhookConfiguration", VALIDATING_CONFIGURATION, [validating]),
    ]


async def install(client: KubeClient, endpoint: WebhookEndpoint, adapters: Sequence[Webhooked] = DEFAULT_ADAPTERS) -> list[bytes]:
    """Point the CRDs' conversion at us, then create or update the webhook configurations.
    Returns every `caBundle` as the apiserver stored it (what it will trust).

    A CRD is patched only when its conversion settings differ: each change makes the
    apiserver rebuild that kind's storage, which drops every watch on it."""
    stored: list[bytes] = []
    conversion_spec = {
        "strategy": "Webhook",
        "webhook": {"clientConfig": endpoint.client_config(CONVERT_PATH), "conversionReviewVersions": ["v1"]},
    }
    for plural in KUEUE_PLURALS:
        name = f"{plural}.{c.GROUP}"
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        try:
            current = await client.request("GET", path, what=f"get CustomResourceDefinition {name}")
        except NotFoundError:
            log.warning("CRD not installed; conversion not configured", extra={"key": name})
            continue
        if (current.get("spec") or {}).get("conversion") != conversion_spec:
            body = {"spec": {"conversion": conversion_spec}}
            current = await client.request(
                "PATCH", path, body=body, content_type="application/merge-patch+json", what=f"patch CustomResourceDefinition {name}"
            )
        stored.append(_ca_bundle(((current.get("spec") or {}).get("conversion") or {}).get("webhook")))
    for obj in webhook_configurations(endpoint, adapters):
        plural = "mutatingwebhookconfigurations" if obj["kind"].startswith("Mutating") else "validatingwebhookconfigurations"
        base = f"/apis/admissionregistration.k8s.io/v1/{plural}"
        name = obj["metadata"]["name"]
        try:
            answer = await client.request(
                "PATCH",
                f"{base}/{name}",
                body={"webhooks": obj["webhooks"]},
                content_type="application/merge-patch+json",
                what=f"patch {obj['kind']} {name}",
            )
        except NotFoundError:
            # Local clusters (`kfed dev`) have no deploy/ base, so kfed makes them; in a cluster
            # the base ships them and kfed's RBAC may only patch them, by name.
            try:
                answer = await client.request("POST", base, body=obj, what=f"create {obj['kind']} {name}")
            except ForbiddenError:
                raise ForbiddenError(
                    f"{obj['kind']} {name} is missing and kfed may not create it: apply the webhooks.yaml of "
                    "deploy/manager or deploy/worker-agent (or the Helm chart), which ship it"
                ) from None
        stored += [_ca_bundle(webhook) for webhook in answer.get("webhooks") or []]
    return stored


def _ca_bundle(webhook: dict[str, Any] | None) -> bytes:
    """The decoded `clientConfig.caBundle` of a stored webhook (empty when it has none)."""
    encoded = ((webhook or {}).get("clientConfig") or {}).get("caBundle") or ""
    try:
        return base64.b64decode(encoded)
    except ValueError:
        return b""


def server_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context
