"""Pure pieces of the I/O shell: webhook reviews, error mapping, the token bucket, metrics
exposition, log redaction and kubeconfig checks."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
from typing import Any

import pytest

from manager.api import constants as c
from manager.controllers.admission import fruitless_round_pause
from manager.controllers.webhooks import (
    MUTATE_JOB_PATH,
    WebhookEndpoint,
    convert_review,
    default_job,
    mutate_path,
    validate,
    webhook_configurations,
)
from manager.engine.integrations.registry import BATCH_JOB, JOBSET
from manager.kube.client import KubeClient, proxy_from_environment
from manager.kube.errors import (
    AlreadyExistsError,
    ConflictError,
    GoneError,
    InvalidError,
    NotFoundError,
    TooManyRequestsError,
    TransientError,
    error_from_response,
    rejected_by_unreachable_webhook,
)
from manager.kube.leader import LeaderConfig
from manager.kube.ratelimit import DEFERRABLE, REQUEST, TokenBucket, TurnSemaphore
from manager.runtime import options
from manager.runtime.logs import REDACTED, JsonFormatter


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u1", "operation": operation, "object": obj}}


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    raw = response["response"].get("patch")
    return json.loads(base64.b64decode(raw)) if raw else []


def test_the_job_webhook_suspends_queued_jobs_and_marks_multikueue_ones() -> None:
    queued = {"metadata": {"name": "j", "namespace": "ns", "labels": {c.QUEUE_NAME_LABEL: "q"}}, "spec": {}}
    response = default_job(review(queued), uses_multikueue=lambda ns, q: False)
    assert response["response"]["allowed"] and response["response"]["uid"] == "u1"
    assert patch_of(response) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    federated = default_job(review(queued), uses_multikueue=lambda ns, q: (ns, q) == ("ns", "q"))
    assert {"op": "add", "path": "/spec/managedBy", "value": c.MULTIKUEUE_MANAGED_BY} in patch_of(federated)
    unqueued = default_job(review({"metadata": {"name": "j"}, "spec": {}}), uses_multikueue=lambda ns, q: True)
    assert patch_of(unqueued) == []


@pytest.mark.parametrize(
    ("managed_by", "handed_over"),
    [
        (None, True),
        ("jobset.sigs.k8s.io/jobset-controller", True),  # its own controller: Kueue's CanDefaultManagedBy
        ("example.com/other-controller", False),  # someone else runs it: left alone
    ],
)
def test_the_jobset_webhook_suspends_queued_jobsets_and_hands_multikueue_ones_over(managed_by: str | None, handed_over: bool) -> None:
    spec = {"managedBy": managed_by} if managed_by else {}
    queued = {"metadata": {"name": "js", "namespace": "ns", "labels": {c.QUEUE_NAME_LABEL: "q"}}, "spec": spec}
    patch = patch_of(default_job(review(queued), uses_multikueue=lambda ns, q: True, adapter=JOBSET))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in patch
    assert ({"op": "add", "path": "/spec/managedBy", "value": c.MULTIKUEUE_MANAGED_BY} in patch) is handed_over


def test_each_enabled_job_kind_gets_kueues_defaulting_webhook() -> None:
    endpoint = WebhookEndpoint(b"ca", url="https://127.0.0.1:9443")
    mutating, _ = webhook_configurations(endpoint, [BATCH_JOB, JOBSET])
    paths = [webhook["clientConfig"]["url"] for webhook in mutating["webhooks"]]
    assert paths == ["https://127.0.0.1:9443/mutate-batch-v1-job", "https://127.0.0.1:9443/mutate-jobset-x-k8s-io-v1alpha2-jobset"]
    assert mutating["webhooks"][1]["rules"] == [
        {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "operations": ["CREATE"], "resources": ["jobsets"]}
    ]
    assert mutate_path(BATCH_JOB) == MUTATE_JOB_PATH


def test_the_validating_webhook_names_each_field_path() -> None:
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "bad"},
        "spec": {
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": "a", "resources": [{"name": "cpu", "nominalQuota": 1}]}]},
                {"coveredResources": ["cpu"], "flavors": [{"name": "b", "resources": [{"name": "cpu", "nominalQuota": 1}]}]},
            ]
        },
    }
    response = validate(review(cq))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].startswith('ClusterQueue.kueue.x-k8s.io "bad" is invalid: ')
    assert 'spec.resourceGroups[1].coveredResources[0]: Duplicate value: "cpu"' in response["status"]["message"]
    assert validate(review(cq, "DELETE"))["response"]["allowed"] is True


def test_the_conversion_webhook_converts_every_object_to_the_desired_version() -> None:
    request: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "c1",
            "desiredAPIVersion": "kueue.x-k8s.io/v1beta2",
            "objects": [
                {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "x"}, "spec": {"cohort": "team"}}
            ],
        },
    }
    response = convert_review(request)["response"]
    assert response["uid"] == "c1" and response["result"]["status"] == "Success"
    assert response["convertedObjects"][0]["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert response["convertedObjects"][0]["spec"]["cohortName"] == "team"
    request["request"]["desiredAPIVersion"] = "kueue.x-k8s.io/v9"
    assert convert_review(request)["response"]["result"]["status"] == "Failure"


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (404, "NotFound", NotFoundError),
        (409, "AlreadyExists", AlreadyExistsError),
        (409, "Conflict", ConflictError),
        (410, "Expired", GoneError),
        (422, "Invalid", InvalidError),
        (429, "TooManyRequests", TooManyRequestsError),
        (503, "ServiceUnavailable", TransientError),
    ],
)
def test_apiserver_answers_map_to_typed_errors(status: int, reason: str, expected: type[Exception]) -> None:
    body = json.dumps({"kind": "Status", "message": "the message", "reason": reason, "details": {"causes": [{"field": "spec.x"}]}})
    err = error_from_response(status, body, retry_after="3", what="patch Workload ns/w")
    assert type(err) is expected
    assert str(err) == "patch Workload ns/w: the message"
    if isinstance(err, (TooManyRequestsError, TransientError)):
        assert err.retry_after == 3.0 and err.retryable
    if isinstance(err, InvalidError):
        assert err.causes == [{"field": "spec.x"}]


def test_the_token_bucket_allows_a_burst_then_paces_at_qps() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=3, clock=lambda: now[0])
    for _ in range(3):
        assert bucket.delay() == 0
        bucket._tokens -= 1
    assert bucket.delay() == pytest.approx(0.1)
    now[0] += 0.05
    assert bucket.delay() == pytest.approx(0.05)
    now[0] += 10
    assert bucket.delay() == 0 and bucket._tokens == 3  # never more than the burst is saved


def test_acquiring_past_the_burst_waits_for_refill() -> None:
    async def scenario() -> float:
        bucket = TokenBucket(qps=1000, burst=2)
        for _ in range(5):
            await bucket.acquire()
        return bucket.waited_seconds

    assert asyncio.run(scenario()) > 0


def test_logs_are_json_with_the_key_and_never_a_credential() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("kfed.test-redaction")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("cluster unreachable", extra={"key": "worker1", "token": "s3cr3t", "kubeconfig": "apiVersion: v1"})
    entry = json.loads(stream.getvalue())
    assert entry["msg"] == "cluster unreachable" and entry["key"] == "worker1" and entry["level"] == "warning"
    assert entry["token"] == REDACTED and entry["kubeconfig"] == REDACTED
    assert "s3cr3t" not in stream.getvalue()


def test_only_a_refused_webhook_call_makes_a_create_safe_to_send_again() -> None:
    unreachable = error_from_response(
        500,
        json.dumps(
            {
                "kind": "Status",
                "reason": "InternalError",
                "message": 'Internal error occurred: failed calling webhook "mjob.kfed.x-k8s.io": failed to call webhook: '
                'Post "https://kfed-webhook-service.kfed-system.svc:443/mutate-batch-v1-job": connection refused',
            }
        ),
        what="create Job ns/train",
    )
    assert rejected_by_unreachable_webhook(unreachable)
    # A 500 for any other reason may have stored the object; a webhook's own "no" is final.
    assert not rejected_by_unreachable_webhook(error_from_response(500, "etcdserver: request timed out"))
    denied = error_from_response(400, json.dumps({"kind": "Status", "reason": "BadRequest", "message": 'admission webhook "v" denied'}))
    assert not rejected_by_unreachable_webhook(denied)


@pytest.mark.parametrize(
    ("server", "no_proxy", "expected"),
    [
        ("https://10.0.0.1:6443", "", "http://proxy.corp:3128"),
        ("https://10.0.0.1:6443", "10.0.0.1", None),
        ("https://10.0.0.1:6443", ".internal, 10.0.0.0/8", None),  # CIDR, as Go reads NO_PROXY
        ("https://10.0.0.1:6443", "10.0.0.1:443", "http://proxy.corp:3128"),  # another port
        ("https://api.worker1.internal:6443", ".internal", None),
        ("https://api.worker1.internal:6443", "internal", None),
        ("https://notinternal:6443", "internal", "http://proxy.corp:3128"),
        ("https://anything:6443", "*", None),
        ("http://127.0.0.1:8080", "", None),  # no HTTP_PROXY set
    ],
)
def test_the_environments_proxy_for_a_server(server: str, no_proxy: str, expected: str | None) -> None:
    env = {"HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": no_proxy}
    assert proxy_from_environment(server, env) == expected


def test_a_client_takes_the_proxy_once_and_never_reads_netrc(monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes_asyncio import client as k8s_client

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", "")

    async def build() -> tuple[object, bool]:
        configuration = k8s_client.Configuration()
        configuration.host = "https://10.0.0.1:6443"
        kube = KubeClient(k8s_client.ApiClient(configuration=configuration))
        try:
            rest = kube.api.rest_client
            return rest.proxy, rest.pool_manager.trust_env
        finally:
            await kube.close()

    proxy, trusts_env = asyncio.run(build())
    assert proxy == "http://proxy.corp:3128"
    assert trusts_env is False  # so aiohttp does not stat ~/.netrc in a thread per request


def test_a_task_that_swallowed_a_cancellation_is_cancelled_again_until_it_ends() -> None:
    from manager.runtime.tasks import cancel_and_wait

    swallowed = 0

    async def loop_that_loses_one_cancel() -> None:
        # What asyncio.wait_for does on Python 3.11 when the cancel races its completion.
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed += 1

    async def scenario() -> bool:
        task = asyncio.create_task(loop_that_loses_one_cancel())
        await asyncio.sleep(0)
        await asyncio.wait_for(cancel_and_wait([task]), timeout=5)  # one cancel alone would hang
        return task.cancelled()

    assert asyncio.run(scenario())
    assert swallowed == 1


def test_the_leader_election_flags_name_the_lease_and_its_timing() -> None:
    argv = ["--namespace", "ns", "--leader-election-id", "lease", "--identity", "me", "--lease-duration", "30"]
    argv += ["--renew-deadline", "20", "--retry-period", "4"]
    assert options.parse(argv, component="manager").leader_config() == LeaderConfig("ns", "lease", "me", 30.0, 20.0, 4.0)


def test_a_deferrable_request_waits_behind_every_other_request() -> None:
    """Events are deferrable: when the bucket is empty, writes queued after them go first."""

    async def scenario() -> list[str]:
        bucket = TokenBucket(qps=5, burst=1)  # 200 ms to the next token: everyone queues first
        await bucket.acquire()  # the bucket is empty now
        order: list[str] = []

        async def take(name: str, turn: int) -> None:
            await bucket.acquire(turn)
            order.append(name)

        event = asyncio.create_task(take("event", DEFERRABLE))
        await asyncio.sleep(0)  # the Event queues first
        writes = [asyncio.create_task(take(f"write-{i}", REQUEST)) for i in range(3)]
        await asyncio.gather(event, *writes)
        return order

    assert asyncio.run(scenario()) == ["write-0", "write-1", "write-2", "event"]


def test_a_cancelled_waiter_gives_its_turn_to_the_next() -> None:
    async def scenario() -> list[str]:
        bucket = TokenBucket(qps=200, burst=1)
        await bucket.acquire()
        order: list[str] = []

        async def take(name: str) -> None:
            await bucket.acquire()
            order.append(name)

        first = asyncio.create_task(take("first"))
        second = asyncio.create_task(take("second"))
        await asyncio.sleep(0)
        first.cancel()
        await second
        return order

    assert asyncio.run(scenario()) == ["second"]


def test_the_write_semaphore_lets_quota_moves_ahead_of_waiting_messages() -> None:
    """An admission issued after a hundred "still pending" messages is written before them."""

    async def scenario() -> list[str]:
        gate = TurnSemaphore(1)
        order: list[str] = []
        release = asyncio.Event()

        async def write(name: str, turn: int) -> None:
            async with gate.hold(turn):
                if name == "busy":
                    await release.wait()
                order.append(name)

        busy = asyncio.create_task(write("busy", REQUEST))
        await asyncio.sleep(0)  # it holds the only place
        waiting = [asyncio.create_task(write(f"pending-{i}", DEFERRABLE)) for i in range(3)]
        admission = asyncio.create_task(write("admission", REQUEST))
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(busy, admission, *waiting)
        return order

    assert asyncio.run(scenario()) == ["busy", "admission", "pending-0", "pending-1", "pending-2"]


def test_a_cancelled_semaphore_waiter_hands_its_place_on() -> None:
    async def scenario() -> bool:
        gate = TurnSemaphore(1)
        holder = gate.hold()
        await holder.__aenter__()
        queued = asyncio.create_task(gate.hold().__aenter__())
        handed = asyncio.create_task(gate.hold().__aenter__())
        await asyncio.sleep(0)  # both wait for the only place
        queued.cancel()  # cancelled while waiting: skipped
        await holder.__aexit__(None, None, None)  # the place goes to the next waiter...
        handed.cancel()  # ...which is cancelled before it takes it: the place comes back
        await asyncio.gather(queued, handed, return_exceptions=True)
        async with gate.hold():  # free again: taken at once
            return True

    assert asyncio.run(asyncio.wait_for(scenario(), timeout=5))


def test_a_round_that_admits_nothing_is_followed_by_kueues_scheduler_pause() -> None:
    # Kueue's UntilWithBackoff: 1 ms after a fruitless cycle, doubling to at most 10 ms.
    assert [fruitless_round_pause(n) for n in range(6)] == [0.0, 0.001, 0.002, 0.004, 0.008, 0.010]
    assert fruitless_round_pause(10_000) == 0.010
