"""Deployments (Kueue's deployment integration): queued pod by pod, through the marks the
webhook puts on the pod template; no Workload of the Deployment's own."""

from __future__ import annotations

import copy
from typing import Any

from manager.api import constants as c
from manager.api.core import Pod
from manager.controllers.webhooks import WebhookEndpoint, default_job, webhook_configurations
from manager.engine.integrations.deployment import DeploymentParent
from manager.engine.integrations.pod import MANAGED_LABEL, SCHEDULING_GATE, SUSPENDED_BY_PARENT_ANNOTATION, PodAdapter
from manager.engine.integrations.registry import BY_FRAMEWORK, PARENTS_BY_FRAMEWORK, enabled
from tests.unit.test_mpijob_integration import json_patched
from tests.unit.test_pod_integration import patch_of

DEPLOYMENT = PARENTS_BY_FRAMEWORK["deployment"]


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"request": {"uid": "u", "operation": "CREATE", "namespace": "ns", "object": obj}}


def deployment(*, labels: dict[str, str] | None = None, template_meta: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    if template_meta is not None:
        template["metadata"] = template_meta
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "labels": labels if labels is not None else {c.QUEUE_NAME_LABEL: "q"}, **meta},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template},
    }


def test_enabling_deployments_enables_the_pod_integration_for_the_pods_a_parent_suspends() -> None:
    registry = enabled(["batch/job", "deployment"])
    assert registry.parents == (DEPLOYMENT,) and isinstance(DEPLOYMENT, DeploymentParent)
    assert [a.framework for a in registry.adapters] == ["batch/job", "pod"]
    [pods] = [a for a in registry.adapters if isinstance(a, PodAdapter)]
    assert pods.only_suspended_by_parent and pods is not BY_FRAMEWORK["pod"]
    assert registry.webhooked == (*registry.adapters, DEPLOYMENT)
    # Asked for by its name too, the pod integration handles every queued pod.
    assert enabled(["deployment", "pod"]).adapters == (BY_FRAMEWORK["pod"],)


def test_the_deployment_webhook_takes_queued_deployments_outside_the_system_namespaces() -> None:
    mutating, _ = webhook_configurations(WebhookEndpoint(b"ca", url="https://x"), enabled(["batch/job", "deployment"]).webhooked)
    hook = next(h for h in mutating["webhooks"] if h["name"] == "mdeployment.kfed.x-k8s.io")
    assert hook["rules"] == [
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}
    ]
    job_hook = next(h for h in mutating["webhooks"] if h["name"] == "mjob.kfed.x-k8s.io")
    assert job_hook["rules"][0]["operations"] == ["CREATE"], "a job kind's updates are not seen (Kueue's checks of them: not yet)"
    assert hook["clientConfig"]["url"] == "https://x/mutate-apps-v1-deployment"
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kfed-system"]
    assert hook["objectSelector"]["matchExpressions"] == [{"key": c.QUEUE_NAME_LABEL, "operator": "Exists"}]


def test_a_queued_deployment_gets_its_pod_template_marked_and_nothing_else() -> None:
    obj = deployment(labels={c.QUEUE_NAME_LABEL: "q", c.PRIORITY_CLASS_LABEL: "high"}, template_meta={"labels": {"app": "web"}})
    # Even on a queue of a MultiKueue check: a Deployment has no managedBy; its pods go to the workers.
    answer = default_job(review(obj), uses_multikueue=lambda ns, q: True, adapter=DEPLOYMENT)
    assert answer["response"]["allowed"]
    marked = json_patched(obj, patch_of(answer))
    assert marked["metadata"] == obj["metadata"] and marked["spec"]["replicas"] == 3
    assert marked["spec"]["template"]["metadata"] == {
        "labels": {"app": "web", c.QUEUE_NAME_LABEL: "q", MANAGED_LABEL: "true", c.PRIORITY_CLASS_LABEL: "high"},
        "annotations": {SUSPENDED_BY_PARENT_ANNOTATION: "deployment"},
    }


def test_a_template_without_metadata_gets_it_and_a_marked_one_is_left_as_it_is() -> None:
    obj = deployment()
    ops = DEPLOYMENT.creation_patch(obj)
    assert ops == [
        {
            "op": "add",
            "path": "/spec/template/metadata",
            "value": {
                "labels": {c.QUEUE_NAME_LABEL: "q", MANAGED_LABEL: "true"},
                "annotations": {SUSPENDED_BY_PARENT_ANNOTATION: "deployment"},
            },
        }
    ]
    assert DEPLOYMENT.creation_patch(json_patched(obj, ops)) == []
    assert DEPLOYMENT.creation_patch(deployment(labels={})) == [], "not queued: not touched"


def test_each_pod_of_a_marked_template_is_gated_and_queued_alone_by_the_implicit_pod_integration() -> None:
    marked = json_patched(deployment(), DEPLOYMENT.creation_patch(deployment()))
    template = marked["spec"]["template"]
    raw_pod = {"metadata": {"name": "web-5d9c-x2", "namespace": "ns", **template["metadata"]}, "spec": template["spec"]}
    [pods] = [a for a in enabled(["deployment"]).adapters if isinstance(a, PodAdapter)]
    ops = patch_of(default_job(review(raw_pod), uses_multikueue=lambda ns, q: False, adapter=pods))
    assert ops == [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": SCHEDULING_GATE}]}], "gated, no finalizer"
    assert pods.manages(Pod.model_validate(raw_pod)), "a single Pod's Workload of its own"
    plain = {"metadata": {"name": "p", "namespace": "ns", "labels": {c.QUEUE_NAME_LABEL: "q"}}, "spec": template["spec"]}
    assert patch_of(default_job(review(plain), uses_multikueue=lambda ns, q: False, adapter=pods)) == [], (
        "a queued pod of no parent is left alone when only deployments are enabled"
    )


def test_a_bad_queue_name_or_an_elastic_deployment_is_refused_naming_the_field() -> None:
    answer = default_job(
        review(deployment(labels={c.QUEUE_NAME_LABEL: "Bad_Queue"})), uses_multikueue=lambda ns, q: False, adapter=DEPLOYMENT
    )
    assert not answer["response"]["allowed"]
    message = answer["response"]["status"]["message"]
    assert message.startswith(f'Deployment "web" is invalid: metadata.labels[{c.QUEUE_NAME_LABEL}]: Invalid value: "Bad_Queue": ')
    not_elastic = deployment(annotations={"kueue.x-k8s.io/elastic-job": "false"})
    assert default_job(review(not_elastic), uses_multikueue=lambda ns, q: False, adapter=DEPLOYMENT)["response"]["allowed"]
    elastic = deployment(annotations={"kueue.x-k8s.io/elastic-job": "true"})
    answer = default_job(review(elastic), uses_multikueue=lambda ns, q: False, adapter=DEPLOYMENT)
    assert answer["response"]["status"]["message"] == (
        'Deployment "web" is invalid: metadata.annotations[kueue.x-k8s.io/elastic-job]: Forbidden: '
        'elastic job is not supported for "apps/v1, Kind=Deployment"'
    )


def update(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    request = {"uid": "u", "operation": "UPDATE", "namespace": "ns", "object": new, "oldObject": old}
    return default_job({"request": request}, uses_multikueue=lambda ns, q: False, adapter=DEPLOYMENT)


def with_status(obj: dict[str, Any], ready: int) -> dict[str, Any]:
    return {**obj, "status": {"replicas": 3, "readyReplicas": ready}}


def message(answer: dict[str, Any]) -> str:
    assert not answer["response"]["allowed"]
    return str(answer["response"]["status"]["message"])


def test_a_queue_changed_while_no_pod_is_ready_is_written_into_the_template() -> None:
    old = json_patched(deployment(), DEPLOYMENT.creation_patch(deployment()))
    new = copy.deepcopy(old)
    new["metadata"]["labels"][c.QUEUE_NAME_LABEL] = "other"
    answer = update(with_status(old, 0), new)
    assert answer["response"]["allowed"]
    assert json_patched(new, patch_of(answer))["spec"]["template"]["metadata"]["labels"][c.QUEUE_NAME_LABEL] == "other"
    # Queued only now: its template is marked as at creation.
    answer = update(with_status(deployment(labels={}), 0), deployment())
    assert json_patched(deployment(), patch_of(answer))["spec"]["template"]["metadata"]["annotations"] == {
        SUSPENDED_BY_PARENT_ANNOTATION: "deployment"
    }


def test_a_running_deployment_keeps_its_queue_and_never_loses_it_or_its_priority_class() -> None:
    old = deployment(labels={c.QUEUE_NAME_LABEL: "q", c.PRIORITY_CLASS_LABEL: "low"})
    moved = deployment(labels={c.QUEUE_NAME_LABEL: "other", c.PRIORITY_CLASS_LABEL: "low"})
    assert message(update(with_status(old, 1), moved)) == (
        f'Deployment "web" is invalid: metadata.labels[{c.QUEUE_NAME_LABEL}]: Invalid value: "other": field is immutable'
    )
    unqueued = deployment(labels={c.PRIORITY_CLASS_LABEL: "low"})
    assert message(update(with_status(old, 0), unqueued)) == (
        f'Deployment "web" is invalid: metadata.labels[{c.QUEUE_NAME_LABEL}]: Invalid value: "": field is immutable'
    ), "a queue is never removed, even while no pod is ready"
    plain = deployment()
    classed = deployment(labels={c.QUEUE_NAME_LABEL: "q", c.PRIORITY_CLASS_LABEL: "high"})
    assert message(update(with_status(plain, 2), classed)).endswith(
        f'metadata.labels[{c.PRIORITY_CLASS_LABEL}]: Invalid value: "high": '
        "WorkloadPriorityClass cannot be added to a non-suspended workload"
    )
    assert update(with_status(plain, 0), classed)["response"]["allowed"], "added while no pod is ready"
    assert message(update(with_status(old, 0), deployment())).endswith(
        f'metadata.labels[{c.PRIORITY_CLASS_LABEL}]: Invalid value: "": WorkloadPriorityClass cannot be removed from a workload'
    )
    scaled = copy.deepcopy(old)
    scaled["spec"]["replicas"] = 5
    assert update(with_status(old, 3), scaled)["response"]["allowed"], "scaling a running Deployment is fine"
