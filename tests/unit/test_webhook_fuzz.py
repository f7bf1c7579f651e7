"""The webhook server answers every body it is sent with a review or a 400, never a 500: an object
of any kind whose fields have the wrong type (`spec` a string, `replicas` a list, a pod template a
number) is refused with `allowed: false` and one line naming the object and the field, as the
apiserver's own validation says it. Under `failurePolicy: Fail` a 500 would show the user only
"failed calling webhook". The handlers are tested in process (aiohttp's test client): they need
no apiserver."""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from manager.api import constants as c
from manager.controllers.webhooks import CONVERT_PATH, VALIDATE_PATH, Webhooked, make_app, mutate_path
from manager.engine.integrations.registry import ADAPTERS, PARENTS

pytestmark = pytest.mark.unit

KINDS: tuple[Webhooked, ...] = (*ADAPTERS, *PARENTS)


def aliases(model: type[BaseModel], seen: set[type[BaseModel]] | None = None) -> set[str]:
    """Every field name (as written in YAML) of a model and the models inside it."""
    seen = seen if seen is not None else set()
    if model in seen:
        return set()
    seen.add(model)
    names: set[str] = set()
    for name, info in model.model_fields.items():
        names.add(info.alias or name)
        stack = [info.annotation]
        while stack:
            annotation = stack.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                names |= aliases(annotation, seen)
            stack.extend(typing.get_args(annotation))
    return names


VOCABULARY = sorted(set().union(*(aliases(kind.model) for kind in KINDS)))

scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=8)
# JSON built from the kinds' own field names, so that a wrong type lands on a field that exists.
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(VOCABULARY), inner, max_size=4),
    max_leaves=12,
)


def review(obj: Any, *, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "u-1", "operation": operation, "namespace": "team-a", "object": obj}
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def queued(kind: Webhooked, spec: Any) -> dict[str, Any]:
    api_version = f"{kind.model.GROUP}/{kind.model.VERSION}" if kind.model.GROUP else kind.model.VERSION
    metadata = {"name": "fuzzed", "namespace": "team-a", "labels": {c.QUEUE_NAME_LABEL: "user-queue"}}
    return {"apiVersion": api_version, "kind": kind.kind, "metadata": metadata, "spec": spec}


@pytest.fixture
async def webhooks() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    async def never(namespace: str, queue: str) -> bool:
        return False

    async with TestClient(TestServer(make_app(uses_multikueue=never, adapters=KINDS))) as client:
        yield client


async def answer(client: TestClient[web.Request, web.Application], path: str, body: Any) -> dict[str, Any]:
    """The server's answer, which must be a review (200) or a one-line 400; never a 500."""
    response = await client.post(path, json=body)
    assert response.status in (200, 400), (path, body, response.status, await response.text())
    found: dict[str, Any] = await response.json()
    return found


def refused_in_one_line_naming(found: dict[str, Any], kind: str, field: str) -> None:
    response = found["response"]
    assert response["allowed"] is False, response
    message = response["status"]["message"]
    assert 400 <= response["status"]["code"] < 500 and "\n" not in message
    assert message.startswith(f'{kind} "fuzzed" is invalid: {field}'), message


@pytest.mark.parametrize(
    ("framework", "spec", "field"),
    [
        ("leaderworkerset.x-k8s.io/leaderworkerset", "a string", "spec: Invalid value"),
        ("leaderworkerset.x-k8s.io/leaderworkerset", {"replicas": [2]}, "spec.replicas: Invalid value"),
        ("leaderworkerset.x-k8s.io/leaderworkerset", {"leaderWorkerTemplate": {"size": "four"}}, "spec.leaderWorkerTemplate.size"),
        ("ray.io/rayjob", {"rayClusterSpec": "x"}, "spec.rayClusterSpec: Invalid value"),
        ("ray.io/rayjob", 7, "spec: Invalid value"),
        ("kubeflow.org/mpijob", {"mpiReplicaSpecs": ["Launcher"]}, "spec.mpiReplicaSpecs: Invalid value"),
        ("kubeflow.org/mpijob", "x", "spec: Invalid value"),
        ("trainer.kubeflow.org/trainjob", {"trainer": "x"}, "spec.trainer: Invalid value"),
        ("trainer.kubeflow.org/trainjob", [], "spec: Invalid value"),
        ("batch/job", {"template": 3}, "spec.template: Invalid value"),
        ("jobset.x-k8s.io/jobset", {"replicatedJobs": "x"}, "spec.replicatedJobs: Invalid value"),
    ],
)
async def test_a_wrongly_typed_field_is_refused_naming_the_object_and_the_field(
    webhooks: TestClient[web.Request, web.Application], framework: str, spec: Any, field: str
) -> None:
    kind = next(k for k in KINDS if k.framework == framework)
    refused_in_one_line_naming(await answer(webhooks, mutate_path(kind), review(queued(kind, spec))), kind.kind, field)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
async def test_an_object_that_is_not_an_object_is_refused(webhooks: TestClient[web.Request, web.Application], kind: Webhooked) -> None:
    for obj in ("a string", [1, 2], 3):
        found = await answer(webhooks, mutate_path(kind), review(obj))
        refused = found["response"]
        assert (
            refused["allowed"] is False and refused["status"]["message"] == 'object "" is invalid: object: Invalid value: must be an object'
        )


FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
@FUZZ
@given(spec=values, operation=st.sampled_from(["CREATE", "UPDATE"]), old=st.none() | values)
async def test_any_spec_of_any_kind_gets_a_review_never_a_500(
    webhooks: TestClient[web.Request, web.Application], kind: Webhooked, spec: Any, operation: str, old: Any
) -> None:
    found = await answer(webhooks, mutate_path(kind), review(queued(kind, spec), operation=operation, old=old))
    response = found["response"]
    if not response["allowed"]:
        message = response["status"]["message"]
        assert "\n" not in message and message.startswith(f'{kind.kind} "fuzzed" is invalid: '), message


@FUZZ
@given(body=values, path=st.sampled_from([VALIDATE_PATH, CONVERT_PATH, *(mutate_path(kind) for kind in KINDS)]))
async def test_any_json_body_on_any_path_gets_a_review_or_a_400(
    webhooks: TestClient[web.Request, web.Application], body: Any, path: str
) -> None:
    await answer(webhooks, path, body)


@FUZZ
@given(obj=values, path=st.sampled_from([VALIDATE_PATH, CONVERT_PATH]))
async def test_any_kueue_object_or_conversion_gets_a_review(
    webhooks: TestClient[web.Request, web.Application], obj: Any, path: str
) -> None:
    if path == CONVERT_PATH:
        body = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "u", "desiredAPIVersion": "kueue.x-k8s.io/v1beta1", "objects": [obj]},
        }
        found = await answer(webhooks, path, body)
        assert found["response"]["result"]["status"] in ("Success", "Failure")
    else:
        found = await answer(webhooks, path, review(obj))
        assert isinstance(found["response"]["allowed"], bool)
