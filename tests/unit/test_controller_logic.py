"""Pure pieces of the I/O shell: Job patches, webhook reviews, error mapping, the token
bucket, metrics exposition, log redaction and kubeconfig checks."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.controllers.webhooks import convert_review, default_job, validate
from manager.engine.jobs import (
    admitted_pod_metadata,
    admitted_without_reservation,
    eviction_can_release,
    job_stopped,
    prebuilt_workload_metadata,
    prebuilt_workload_name,
    requeued_follow_up,
    requeued_on_release,
    restore_job_patch,
    start_job_patch,
    suspend_job_patch,
    workload_for_job,
    workload_name,
)
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
from manager.kube.ratelimit import TokenBucket
from manager.runtime.logs import REDACTED, JsonFormatter


def job(**spec: Any) -> Job:
    template = {"spec": {"nodeSelector": {"user": "choice"}, "containers": [{"name": "c"}]}}
    return Job.model_validate(
        {"metadata": {"name": "j", "namespace": "ns"}, "spec": {"parallelism": 4, "completions": 4, "template": template, **spec}}
    )


def admitted_workload(count: int = 4) -> kueue.Workload:
    template = {"spec": {"nodeSelector": {"user": "choice"}, "containers": [{"name": "c"}]}}
    return kueue.Workload.model_validate(
        {
            "metadata": {"name": "job-j-abcde", "namespace": "ns"},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 4, "template": template}]},
            "status": {
                "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "gpu-a"}, "count": count}]}
            },
        }
    )


GPU_A = kueue.ResourceFlavor.model_validate(
    {
        "metadata": {"name": "gpu-a"},
        "spec": {"nodeLabels": {"pool": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }
)


def test_starting_a_job_adds_the_flavor_node_labels_and_tolerations_to_what_the_user_wrote() -> None:
    patch = start_job_patch(job(suspend=True), admitted_workload(), {"gpu-a": GPU_A})
    assert patch["spec"]["suspend"] is False
    assert patch["spec"]["template"]["spec"]["nodeSelector"] == {"user": "choice", "pool": "a"}
    assert patch["spec"]["template"]["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "parallelism" not in patch["spec"]


def test_a_partially_admitted_job_runs_with_the_admitted_count_and_gets_it_back_when_stopped() -> None:
    started = start_job_patch(job(suspend=True), admitted_workload(count=2), {"gpu-a": GPU_A})
    assert started["spec"]["parallelism"] == 2
    running = job(suspend=True, parallelism=2)
    running.spec.template.spec.node_selector = {"user": "choice", "pool": "a"}
    restored = restore_job_patch(running, admitted_workload(count=2))
    assert restored == {"spec": {"template": {"spec": {"nodeSelector": {"user": "choice"}, "tolerations": None}}, "parallelism": 4}}
    assert suspend_job_patch() == {"spec": {"suspend": True}}


def test_a_job_already_as_the_user_wrote_it_needs_no_restore() -> None:
    assert restore_job_patch(job(suspend=True), admitted_workload()) is None


def test_the_pods_of_an_admitted_job_get_kueues_labels_and_annotation_and_lose_them_when_stopped() -> None:
    wl = admitted_workload()
    patch = start_job_patch(job(suspend=True), wl, {"gpu-a": GPU_A})
    assert patch["spec"]["template"]["metadata"] == {
        "labels": {c.PODSET_LABEL: "main", c.LOCAL_QUEUE_LABEL: "q", c.CLUSTER_QUEUE_LABEL: "cq"},
        "annotations": {c.WORKLOAD_ANNOTATION: "job-j-abcde"},
    }
    running = job(suspend=True)
    running.spec.template.metadata = Job.model_validate(
        {"spec": {"template": {"metadata": {"labels": {c.PODSET_LABEL: "main", "controller-uid": "u"}}}}}
    ).spec.template.metadata
    restored = restore_job_patch(running, wl)
    assert restored == {"spec": {"template": {"metadata": {"labels": {c.PODSET_LABEL: None}}}}}  # the Job controller's label stays


@pytest.mark.parametrize(
    ("labels", "cluster_queue", "checks", "want_labels", "want_annotations"),
    [
        # a worker's copy of a MultiKueue workload marks its pods as such
        ({c.MULTIKUEUE_ORIGIN_LABEL: "mk"}, "cq", [], {c.MULTIKUEUE_WORKER_POD_LABEL: "true", c.CLUSTER_QUEUE_LABEL: "cq"}, {}),
        # a ClusterQueue name that is no valid label value is left out
        ({}, "Team.CQ", [], {}, {}),
        # an admission check's podSetUpdates add their labels and annotations
        (
            {},
            "cq",
            [{"name": "prov", "state": "Ready", "podSetUpdates": [{"name": "main", "labels": {"l": "v"}, "annotations": {"a": "b"}}]}],
            {"l": "v", c.CLUSTER_QUEUE_LABEL: "cq"},
            {"a": "b"},
        ),
    ],
)
def test_admitted_pod_metadata_is_kueues_pod_set_info(
    labels: dict[str, str], cluster_queue: str, checks: list[Any], want_labels: dict[str, str], want_annotations: dict[str, str]
) -> None:
    wl = admitted_workload()
    wl.metadata.labels = labels
    assert wl.status is not None and wl.status.admission is not None
    wl.status.admission.cluster_queue = cluster_queue
    wl.status.admission_checks = [kueue.AdmissionCheckState.model_validate(check) for check in checks] or None
    got_labels, got_annotations = admitted_pod_metadata(wl)
    assert got_labels == {c.PODSET_LABEL: "main", c.LOCAL_QUEUE_LABEL: "q", **want_labels}
    assert got_annotations == {c.WORKLOAD_ANNOTATION: "job-j-abcde", **want_annotations}


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({}, {c.PREBUILT_WORKLOAD_ANNOTATION: "from-annotation"}, "from-annotation"),  # Kueue v0.18+ writes only this
        ({c.PREBUILT_WORKLOAD_LABEL: "from-label"}, {}, "from-label"),  # older Kueue, and the gate off
        ({c.PREBUILT_WORKLOAD_LABEL: "label"}, {c.PREBUILT_WORKLOAD_ANNOTATION: "annotation"}, "annotation"),  # the annotation first
        ({}, {}, ""),
    ],
)
def test_the_prebuilt_workload_name_is_read_from_the_annotation_then_the_label(
    labels: dict[str, str], annotations: dict[str, str], expected: str
) -> None:
    meta = {"name": "j", "labels": labels, "annotations": annotations}
    assert prebuilt_workload_name(meta) == expected
    assert prebuilt_workload_name(Job.model_validate({"metadata": meta}).metadata) == expected


@pytest.mark.parametrize(
    ("length", "has_label"),
    [(63, True), (64, False), (73, False)],
)
def test_the_prebuilt_name_is_an_annotation_and_a_label_only_where_it_fits(length: int, has_label: bool) -> None:
    name = "w" * length
    labels, annotations = prebuilt_workload_metadata(name)
    assert annotations == {c.PREBUILT_WORKLOAD_ANNOTATION: name}
    assert labels == ({c.PREBUILT_WORKLOAD_LABEL: name} if has_label else {})


LONG_OWNER = (
    "marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-social-media-engagement-"
    "tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-lead-senior-architect-validation-checked-approved-by-"
    "legal-and-ops-dept"
)


@pytest.mark.parametrize(
    ("job_name", "expected"),
    [
        # the values Kueue's own tests expect of GetWorkloadNameForOwnerWithGVK (ShortWorkloadNames off, its default)
        ("name", "job-name-ef3a1"),
        (LONG_OWNER, f"{('job-' + LONG_OWNER)[:247]}-218b8"),
    ],
)
def test_workload_names_are_kueues(job_name: str, expected: str) -> None:
    assert workload_name(job_name, "uid") == expected
    assert len(workload_name(job_name, "uid")) <= 253


def test_a_workloads_pod_template_drops_the_job_controllers_uid_labels() -> None:
    labelled = Job.model_validate(
        {
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "labels": {c.QUEUE_NAME_LABEL: "q"}},
            "spec": {
                "template": {
                    "metadata": {
                        "labels": {
                            "app": "x",
                            "controller-uid": "u",
                            "job-name": "j",
                            "batch.kubernetes.io/controller-uid": "u",
                            "batch.kubernetes.io/job-name": "j",
                        }
                    },
                    "spec": {"containers": [{"name": "c"}]},
                }
            },
        }
    )
    wl = workload_for_job(labelled, job_uid="u", workload_priority_classes={}, priority_classes={})
    assert wl.spec.pod_sets[0].template["metadata"]["labels"] == {"app": "x", "batch.kubernetes.io/job-name": "j"}


@pytest.mark.parametrize(
    ("reason", "requeued"),
    [
        ("Preempted", True),
        ("NodeFailures", True),
        ("AdmissionCheck", False),
        ("PodsReadyTimeout", False),
        ("Deactivated", False),
        ("DeactivatedDueToEvictedOnManagerCluster", False),
        ("InactiveWorkload", False),
    ],
)
def test_requeued_on_release_is_true_only_after_preemption_or_node_failures(reason: str, requeued: bool) -> None:
    assert requeued_on_release(reason) is requeued


@pytest.mark.parametrize(
    ("reason", "active", "requeue_at", "expected"),
    [
        ("AdmissionCheck", True, None, ("BackoffFinished", "The workload backoff was finished")),
        ("PodsReadyTimeout", True, "2026-11-21T11:00:00Z", ("BackoffFinished", "The workload backoff was finished")),
        ("PodsReadyTimeout", True, "2099-01-01T00:00:00Z", None),  # the backoff has not run out
        ("Deactivated", True, None, ("Reactivated", "The workload was reactivated")),
        ("Deactivated", False, None, None),  # still deactivated
        ("DeactivatedDueToAdmissionCheck", True, None, None),  # Kueue matches the bare reason only
    ],
)
def test_requeued_false_turns_true_as_kueues_workload_controller_does(
    reason: str, active: bool, requeue_at: str | None, expected: Any
) -> None:
    wl = admitted_workload()
    status: dict[str, Any] = {
        "conditions": [
            {"type": c.REQUEUED, "status": "False", "reason": reason, "message": "m", "lastTransitionTime": "2026-11-21T11:00:00Z"}
        ]
    }
    if requeue_at:
        status["requeueState"] = {"requeueAt": requeue_at}
    wl.status = kueue.WorkloadStatus.model_validate(status)
    wl.spec.active = active
    assert requeued_follow_up(wl, datetime(2026, 11, 21, 12, tzinfo=UTC)) == expected


@pytest.mark.parametrize(
    ("completions", "status", "releases"),
    [
        (1, {}, True),  # never ran, or stopped before any pod finished
        (4, {"succeeded": 2, "failed": 1}, True),  # stopped half way: it runs again from its Workload
        (1, {"active": 1}, False),  # its pods are still going
        (1, {"terminating": 1}, False),  # a terminating pod may yet succeed
        (1, {"succeeded": 1}, False),  # done, its Complete condition not written yet
        (None, {"succeeded": 1}, False),  # without completions, one success is done
        (2, {"succeeded": 1, "uncountedTerminatedPods": {"succeeded": ["u"]}}, False),  # done, not counted yet
        (4, {"conditions": [{"type": "SuccessCriteriaMet", "status": "True"}]}, False),
        (4, {"conditions": [{"type": "FailureTarget", "status": "True"}]}, False),  # its failure is decided
    ],
)
def test_an_evicted_job_gives_its_quota_back_only_when_stopped_unfinished(
    completions: int | None, status: dict[str, Any], releases: bool
) -> None:
    evicted = job(suspend=True, completions=completions, parallelism=1)
    evicted.status = Job.model_validate({"status": status}).status
    assert eviction_can_release(evicted) is releases


@pytest.mark.parametrize(
    ("suspend", "status", "stopped"),
    [
        (True, {}, True),
        (False, {}, False),  # unsuspended: about to run, or running
        (True, {"active": 1}, False),  # suspended, its pod not gone yet
        (True, {"succeeded": 1}, False),  # finishing
        (True, {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}, False),  # finished: it ends Finished
        # Resumed, and the Job controller has not seen the suspension yet: its counts are old.
        (True, {"conditions": [{"type": "Suspended", "status": "False", "reason": "JobResumed"}]}, False),
        (True, {"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]}, True),
    ],
)
def test_a_worker_job_is_stopped_only_when_suspended_with_no_pod_and_unfinished(
    suspend: bool, status: dict[str, Any], stopped: bool
) -> None:
    remote = job(suspend=suspend, completions=1, parallelism=1)
    remote.status = Job.model_validate({"status": status}).status
    assert job_stopped(remote) is stopped


def test_admitted_without_reservation_names_unready_checks() -> None:
    wl = admitted_workload()
    assert admitted_without_reservation(wl) == ("NoReservation", "The workload has no reservation")
    assert wl.status is not None
    wl.status.admission_checks = [kueue.AdmissionCheckState(name="mk", state="Pending")]
    assert admitted_without_reservation(wl) == (
        "NoReservationUnsatisfiedChecks",
        "The workload has no reservation and not all checks ready",
    )


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
