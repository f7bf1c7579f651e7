"""Kueue's pod integration for single Pods: the adapter, the webhook's defaulting, and the job
reconciler's steps (`plan_job`) for a kind that is gated instead of suspended and stopped by
deletion instead of suspension."""

from __future__ import annotations

from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Pod
from manager.controllers.webhooks import WebhookEndpoint, default_job, webhook_configurations
from manager.engine.integrations.plan import CreateWorkload, DeleteJob, DeleteWorkload, PatchJob, PatchWorkload
from manager.engine.integrations.pod import (
    GROUP_KEY_PREFIX,
    IS_GROUP_WORKLOAD_ANNOTATION,
    MANAGED_LABEL,
    POD_GROUP_NAME_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    RETRIABLE_IN_GROUP_ANNOTATION,
    ROLE_HASH_ANNOTATION,
    SCHEDULING_GATE,
    TERMINATION_TARGET,
    PodGroup,
    compose_group,
    role_hash,
)
from manager.engine.integrations.registry import BY_FRAMEWORK, enabled
from manager.engine.jobs import admitted_pod_sets, workload_name
from tests.unit.test_job_plan import NOW, POD, cond, kinds, plan, status_of, workload

POD_ADAPTER = BY_FRAMEWORK["pod"]
GATE = {"name": SCHEDULING_GATE}


def pod(
    *,
    gated: bool = True,
    phase: str | None = None,
    labels: dict[str, str] | None = None,
    deleting: bool = False,
    conditions: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> Pod:
    meta: dict[str, Any] = {
        "name": "p",
        "namespace": "ns",
        "uid": "uid-p",
        "resourceVersion": "9",
        "labels": {c.QUEUE_NAME_LABEL: "q", MANAGED_LABEL: "true"} if labels is None else labels,
        "finalizers": [MANAGED_LABEL],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-11-21T11:59:00Z"
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if conditions is not None:
        status["conditions"] = conditions
    return Pod.model_validate(
        {"metadata": meta, "spec": {**POD, **({"schedulingGates": [GATE]} if gated else {}), **spec}, "status": status}
    )


def mk_workload(p: Pod, **kwargs: Any) -> kueue.Workload:
    return workload(POD_ADAPTER, p, **kwargs)


GPU_A = kueue.ResourceFlavor.model_validate(
    {
        "metadata": {"name": "default"},
        "spec": {"nodeLabels": {"pool": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }
)


# --- the adapter -----------------------------------------------------------------------------------
def test_a_pods_workload_is_one_pod_set_of_one_pod_named_as_kueue_names_it() -> None:
    p = pod(nodeSelector={"user": "choice"})
    [pod_set] = POD_ADAPTER.pod_sets(p)
    assert (pod_set.name, pod_set.count) == ("main", 1)
    assert pod_set.template["spec"]["nodeSelector"] == {"user": "choice"}
    assert workload_name("p", "uid-p", kind="Pod", group="").startswith("pod-p-")


@pytest.mark.parametrize(
    ("gated", "phase", "suspended"),
    [(True, None, True), (False, "Running", False), (False, "Pending", False), (False, "Succeeded", True), (False, "Failed", True)],
)
def test_a_pod_is_suspended_while_gated_or_once_terminated(gated: bool, phase: str | None, suspended: bool) -> None:
    p = pod(gated=gated, phase=phase)
    assert POD_ADAPTER.is_suspended(p) is suspended
    assert POD_ADAPTER.releasable(p) is suspended


def test_starting_a_pod_removes_only_kueues_gate_and_adds_the_flavors_node_labels_tolerations_and_pod_labels() -> None:
    p = pod(nodeSelector={"user": "choice"}, schedulingGates=[GATE, {"name": "other"}])
    wl = mk_workload(p, admitted=True)
    patch = POD_ADAPTER.start_patch(p, wl, admitted_pod_sets(wl, {"default": GPU_A}))
    assert patch["spec"]["schedulingGates"] == [{"name": "other"}]
    assert patch["spec"]["nodeSelector"] == {"user": "choice", "pool": "a"}
    assert patch["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert patch["metadata"]["resourceVersion"] == "9"
    assert patch["metadata"]["labels"][c.PODSET_LABEL] == "main"


@pytest.mark.parametrize(("phase", "succeeded"), [("Succeeded", True), ("Failed", False)])
def test_a_pod_finishes_with_its_phase(phase: str, succeeded: bool) -> None:
    finished = POD_ADAPTER.finished(pod(gated=False, phase=phase))
    assert finished is not None and finished.succeeded is succeeded
    assert POD_ADAPTER.finished(pod(gated=False, phase="Running")) is None


def test_the_pod_for_a_worker_keeps_its_spec_and_names_the_prebuilt_workload_and_origin() -> None:
    remote = POD_ADAPTER.remote_object(pod(), workload_name="pod-p-1", origin="mk")
    assert remote["kind"] == "Pod" and remote["apiVersion"] == "v1"
    assert remote["metadata"]["labels"][c.PREBUILT_WORKLOAD_LABEL] == "pod-p-1"
    assert remote["metadata"]["labels"][c.MULTIKUEUE_ORIGIN_LABEL] == "mk"
    assert "finalizers" not in remote["metadata"]
    assert remote["spec"]["containers"] == POD["containers"]


def test_a_worker_pods_status_comes_back_keeping_the_managers_gated_condition_until_it_is_scheduled() -> None:
    gated = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    local = pod(conditions=[gated])
    unscheduled = pod(gated=False, phase="Pending", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}])
    status, deferred = POD_ADAPTER.status_update(local, unscheduled)
    assert not deferred and status is not None
    assert status["phase"] == "Pending" and status["conditions"] == [gated]
    running = pod(gated=False, phase="Running", conditions=[{"type": "PodScheduled", "status": "True"}])
    status, _ = POD_ADAPTER.status_update(local, running)
    assert status == {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}


def test_a_pod_is_always_multikueues_to_hand_over_and_never_gets_a_managed_by() -> None:
    assert POD_ADAPTER.managed_by(pod()) == c.MULTIKUEUE_MANAGED_BY
    assert not POD_ADAPTER.can_default_managed_by(None)


def test_the_pod_framework_is_enabled_by_kueues_name() -> None:
    assert [a.framework for a in enabled(["batch/job", "pod"]).adapters] == ["batch/job", "pod"]
    assert POD_ADAPTER.cli_names()[:3] == ("pod", "pods")


# --- the webhook -----------------------------------------------------------------------------------
def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"request": {"uid": "u", "operation": "CREATE", "namespace": "ns", "object": obj}}


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    import base64
    import json

    raw = answer["response"].get("patch")
    return json.loads(base64.b64decode(raw)) if raw else []


def test_a_queued_pod_is_gated_marked_managed_and_given_the_finalizer_at_creation() -> None:
    obj = {"metadata": {"name": "p", "labels": {c.QUEUE_NAME_LABEL: "q"}}, "spec": {"containers": [{"name": "c"}]}}
    ops = {op["path"]: op["value"] for op in patch_of(default_job(review(obj), uses_multikueue=lambda ns, q: True, adapter=POD_ADAPTER))}
    assert ops == {
        "/metadata/labels": {c.QUEUE_NAME_LABEL: "q", MANAGED_LABEL: "true"},
        "/metadata/finalizers": [MANAGED_LABEL],
        "/spec/schedulingGates": [GATE],
    }


def test_a_pod_copied_to_a_worker_is_not_gated_twice() -> None:
    labels = {c.QUEUE_NAME_LABEL: "q", MANAGED_LABEL: "true"}
    obj = {"metadata": {"name": "p", "labels": labels}, "spec": {"schedulingGates": [GATE]}}
    ops = patch_of(default_job(review(obj), uses_multikueue=lambda ns, q: False, adapter=POD_ADAPTER))
    assert ops == [{"op": "add", "path": "/metadata/finalizers", "value": [MANAGED_LABEL]}]


@pytest.mark.parametrize(
    ("labels", "refs"),
    [
        ({}, []),  # not queued (kfed has no manageJobsWithoutQueueName)
        ({c.QUEUE_NAME_LABEL: "q"}, [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}]),
    ],
    ids=["without-queue-name", "part-of-a-managed-job"],
)
def test_a_pod_kueue_does_not_manage_is_not_touched(labels: dict[str, str], refs: list[dict[str, Any]]) -> None:
    obj = {"metadata": {"name": "p", "labels": labels, "ownerReferences": refs}, "spec": {}}
    registry = enabled(["batch/job", "pod"])
    answer = default_job(review(obj), uses_multikueue=lambda ns, q: False, adapter=POD_ADAPTER, part_of_managed_job=registry.owns_any)
    assert answer["response"]["allowed"] and patch_of(answer) == []


def test_the_pod_webhook_leaves_the_system_namespaces_alone() -> None:
    mutating, _ = webhook_configurations(WebhookEndpoint(b"ca", url="https://x"), enabled(["pod"]).adapters)
    [hook] = mutating["webhooks"]
    assert hook["rules"][0]["resources"] == ["pods"] and hook["rules"][0]["apiGroups"] == [""]
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kfed-system"]
    assert hook["objectSelector"]["matchExpressions"] == [{"key": c.QUEUE_NAME_LABEL, "operator": "Exists"}]


# --- the reconciler's steps ------------------------------------------------------------------------
def test_a_gated_queued_pod_gets_its_workload_and_stays_gated() -> None:
    result = plan(POD_ADAPTER, pod(), None)
    assert kinds(result) == ["CreateWorkload"]
    [create] = result.actions
    assert isinstance(create, CreateWorkload) and create.workload.spec.pod_sets[0].count == 1


def test_a_pod_without_the_managed_label_is_left_alone() -> None:
    assert kinds(plan(POD_ADAPTER, pod(labels={c.QUEUE_NAME_LABEL: "q"}), None)) == []


def test_an_admitted_gated_pod_is_ungated() -> None:
    p = pod()
    result = plan(POD_ADAPTER, p, mk_workload(p, admitted=True))
    [start] = result.actions
    assert isinstance(start, PatchJob) and start.patch["spec"]["schedulingGates"] is None


def test_a_pod_dispatched_through_multikueue_stays_gated_on_the_manager() -> None:
    p = pod()
    assert kinds(plan(POD_ADAPTER, p, mk_workload(p, admitted=True), multikueue=True)) == []


def test_a_running_pod_whose_workload_was_evicted_is_marked_and_deleted() -> None:
    p = pod(gated=False, phase="Running")
    evicted = cond(c.EVICTED, reason="Preempted", message="Preempted to accommodate a workload")
    result = plan(POD_ADAPTER, p, mk_workload(p, admitted=True, conditions=[evicted]))
    assert kinds(result) == ["PatchJob", "DeleteJob"]
    mark, delete = result.actions
    assert isinstance(mark, PatchJob) and mark.subresource == "status"
    [target] = [cond for cond in mark.patch["status"]["conditions"] if cond["type"] == TERMINATION_TARGET]
    assert (target["status"], target["reason"]) == ("True", "WorkloadEvictedDueToPreempted")
    assert isinstance(delete, DeleteJob) and delete.event.reason == "Stopped"


def test_an_evicted_gated_pod_stays_gated_and_gives_its_quota_back() -> None:
    p = pod()
    evicted = cond(c.EVICTED, reason="Preempted")
    result = plan(POD_ADAPTER, p, mk_workload(p, admitted=True, conditions=[evicted]))
    assert kinds(result) == ["PatchWorkload"]
    assert status_of(result)["admission"] is None


def test_a_finished_pod_finishes_its_workload_then_lets_its_finalizer_go() -> None:
    p = pod(gated=False, phase="Succeeded")
    result = plan(POD_ADAPTER, p, mk_workload(p, admitted=True))
    assert kinds(result) == ["PatchWorkload", "PatchJob"]
    assert status_of(result)["conditions"][-1]["reason"] == "Succeeded"
    finalize = result.actions[1]
    assert isinstance(finalize, PatchJob) and finalize.patch["metadata"] == {"resourceVersion": "9", "finalizers": None}


def test_a_pod_being_deleted_lets_its_finalizer_go_and_its_workload_goes_when_it_is_gone() -> None:
    p = pod(gated=False, phase="Running", deleting=True)
    assert kinds(plan(POD_ADAPTER, p, mk_workload(p, admitted=True))) == ["PatchJob"]
    wl = mk_workload(p, admitted=True)
    gone = plan(POD_ADAPTER, None, None, owned=[wl])
    assert [type(a) for a in gone.actions] == [DeleteWorkload]


def test_a_pod_of_a_finished_workload_lets_its_finalizer_go() -> None:
    p = pod(gated=False, phase="Running")
    done = cond(c.FINISHED, reason="Succeeded")
    result = plan(POD_ADAPTER, p, mk_workload(p, admitted=True, conditions=[done]))
    assert kinds(result) == ["PatchJob"]
    assert not any(isinstance(a, PatchWorkload) for a in result.actions)


def test_now_is_the_one_clock() -> None:
    mark = POD_ADAPTER.termination_status_patch(pod(gated=False), reason="R", message="m", now=NOW)
    assert mark is not None and mark["status"]["conditions"][-1]["lastTransitionTime"] == "2026-11-21T12:00:00Z"


# --- pod groups ------------------------------------------------------------------------------------
WORKER = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
LEADER = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}


def member(name: str, spec: dict[str, Any], *, total: int = 3, gated: bool = True, phase: str | None = None, **meta: Any) -> Pod:
    labels = {c.QUEUE_NAME_LABEL: "q", MANAGED_LABEL: "true", POD_GROUP_NAME_LABEL: "g"}
    annotations = {POD_GROUP_TOTAL_COUNT_ANNOTATION: str(total), **meta.pop("annotations", {})}
    metadata = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1", "labels": labels}
    metadata |= {"annotations": annotations, "finalizers": [MANAGED_LABEL], **meta}
    body = {**spec, **({"schedulingGates": [GATE]} if gated else {}), **({"nodeName": "n"} if not gated else {})}
    return Pod.model_validate({"metadata": metadata, "spec": body, "status": {"phase": phase} if phase else {}})


def group(*pods: Pod) -> PodGroup:
    composed = compose_group("ns", "g", pods)
    assert composed is not None
    return composed


def test_a_grouped_pod_gets_its_role_hash_at_creation_and_belongs_to_its_group() -> None:
    total = {POD_GROUP_TOTAL_COUNT_ANNOTATION: "3"}
    obj = {"metadata": {"name": "a", "labels": {c.QUEUE_NAME_LABEL: "q", POD_GROUP_NAME_LABEL: "g"}, "annotations": total}, "spec": WORKER}
    ops = {op["path"]: op["value"] for op in patch_of(default_job(review(obj), uses_multikueue=lambda ns, q: False, adapter=POD_ADAPTER))}
    assert ops["/metadata/annotations"] == {**total, ROLE_HASH_ANNOTATION: role_hash(WORKER)}
    assert role_hash(WORKER) != role_hash(LEADER) and len(role_hash(WORKER)) == 8
    assert POD_ADAPTER.job_key(member("a", WORKER)) == f"ns/{GROUP_KEY_PREFIX}g"
    assert POD_ADAPTER.workload_key_for(f"ns/{GROUP_KEY_PREFIX}g") == "ns/g"
    assert not POD_ADAPTER.manages(member("a", WORKER)), "a grouped Pod is handled as its group"


def test_a_group_waits_without_a_workload_until_all_its_pods_are_there() -> None:
    incomplete = group(member("a", LEADER), member("b", WORKER))
    assert POD_ADAPTER.incomplete(incomplete)
    assert kinds(plan(POD_ADAPTER, incomplete, None)) == []
    whole = group(member("a", LEADER), member("b", WORKER), member("c", WORKER))
    result = plan(POD_ADAPTER, whole, None)
    [create] = result.actions
    assert isinstance(create, CreateWorkload)
    wl = create.workload
    assert wl.name == "g" and (wl.metadata.annotations or {})[IS_GROUP_WORKLOAD_ANNOTATION] == "true"
    assert [ref.name for ref in wl.metadata.owner_references or []] == ["a", "b", "c"]
    assert not any(ref.controller for ref in wl.metadata.owner_references or [])
    assert sorted((ps.name, ps.count) for ps in wl.spec.pod_sets) == sorted([(role_hash(LEADER), 1), (role_hash(WORKER), 2)])
    assert POD_ADAPTER.job_keys(wl) == [f"ns/{GROUP_KEY_PREFIX}g"]


def test_an_admitted_group_ungates_each_pod_with_its_roles_pod_set_and_no_more_than_its_count() -> None:
    pods = group(member("a", LEADER), member("b", WORKER), member("c", WORKER), member("d", WORKER))  # d: one too many
    wl = kueue.Workload.model_validate(
        {
            "metadata": {"name": "g", "namespace": "ns", "resourceVersion": "3"},
            "spec": {"queueName": "q", "podSets": [ps.to_dict() for ps in POD_ADAPTER.pod_sets(pods)]},
            "status": {
                "admission": {
                    "clusterQueue": "cq",
                    "podSetAssignments": [
                        {"name": ps.name, "flavors": {"cpu": "default"}, "count": ps.count} for ps in POD_ADAPTER.pod_sets(pods)
                    ],
                },
                "conditions": [cond(c.QUOTA_RESERVED), cond(c.ADMITTED)],
            },
        }
    )
    result = plan(POD_ADAPTER, pods, wl, flavors={"default": GPU_A})
    started = [action for action in result.actions if isinstance(action, PatchJob)]
    assert [action.name for action in started] == ["a", "b", "c"]
    assert all(action.patch["spec"]["nodeSelector"] == {"pool": "a"} for action in started)


def test_an_evicted_group_deletes_its_running_pods_and_leaves_its_gated_ones_gated() -> None:
    pods = group(member("a", LEADER, gated=False, phase="Running"), member("b", WORKER), member("c", WORKER, gated=False, phase="Running"))
    evicted = cond(c.EVICTED, reason="Preempted")
    wl = kueue.Workload.model_validate(
        {
            "metadata": {"name": "g", "namespace": "ns", "resourceVersion": "3"},
            "spec": {"queueName": "q", "podSets": [ps.to_dict() for ps in POD_ADAPTER.pod_sets(pods)]},
            "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": []}, "conditions": [cond(c.QUOTA_RESERVED), evicted]},
        }
    )
    result = plan(POD_ADAPTER, pods, wl)
    deleted = [action.name for action in result.actions if isinstance(action, DeleteJob)]
    assert deleted == ["a", "c"]


@pytest.mark.parametrize(
    ("phases", "annotations", "expected"),
    [
        (["Succeeded", "Succeeded", "Succeeded"], {}, (True, "Pods succeeded: 3/3.")),
        (["Succeeded", "Failed", "Running"], {}, None),
        (["Succeeded", "Failed", "Failed"], {}, None),  # retriable: waits for replacement Pods
        (["Succeeded", "Failed", "Failed"], {RETRIABLE_IN_GROUP_ANNOTATION: "false"}, (False, "Pods succeeded: 1/3.")),
    ],
)
def test_a_group_finishes_when_its_total_succeeded_or_an_unretriable_one_stopped(
    phases: list[str], annotations: dict[str, str], expected: tuple[bool, str] | None
) -> None:
    pods = group(
        *(member(name, WORKER, gated=False, phase=phase, annotations=annotations) for name, phase in zip("abc", phases, strict=True))
    )
    finished = POD_ADAPTER.finished(pods)
    assert (None if finished is None else (finished.succeeded, finished.message)) == expected


def test_a_deleted_pod_of_a_group_lets_its_finalizer_go_and_a_finished_group_lets_all_go() -> None:
    pods = group(member("a", WORKER, gated=False, phase="Running", deletionTimestamp="2026-11-21T11:00:00Z"), member("b", WORKER))
    assert [(name) for name, _ in POD_ADAPTER.finalize_patches(pods, deleting_only=True)] == ["a"]
    assert [(name) for name, _ in POD_ADAPTER.finalize_patches(pods)] == ["a", "b"]


@pytest.mark.parametrize(
    ("labels", "annotations", "problem"),
    [
        ({MANAGED_LABEL: "false"}, {}, f"metadata.labels[{MANAGED_LABEL}]: Forbidden"),
        ({POD_GROUP_NAME_LABEL: "g"}, {}, f"metadata.annotations[{POD_GROUP_TOTAL_COUNT_ANNOTATION}]: Required value"),
        ({}, {POD_GROUP_TOTAL_COUNT_ANNOTATION: "2"}, f"metadata.labels[{POD_GROUP_NAME_LABEL}]: Required value"),
        ({POD_GROUP_NAME_LABEL: "g"}, {POD_GROUP_TOTAL_COUNT_ANNOTATION: "0"}, 'Invalid value: "0"'),
        ({POD_GROUP_NAME_LABEL: "g", c.PREBUILT_WORKLOAD_LABEL: "other"}, {POD_GROUP_TOTAL_COUNT_ANNOTATION: "2"}, "should be equal"),
    ],
    ids=["managed-not-true", "group-without-total", "total-without-group", "total-not-positive", "prebuilt-not-the-group"],
)
def test_a_pod_kueue_would_refuse_is_refused_at_creation_naming_the_field(
    labels: dict[str, str], annotations: dict[str, str], problem: str
) -> None:
    obj = {"metadata": {"name": "p", "labels": {c.QUEUE_NAME_LABEL: "q", **labels}, "annotations": annotations}, "spec": WORKER}
    answer = default_job(review(obj), uses_multikueue=lambda ns, q: False, adapter=POD_ADAPTER)
    assert not answer["response"]["allowed"]
    message = answer["response"]["status"]["message"]
    assert message.startswith('Pod "p" is invalid: ') and problem in message


def test_a_group_that_lost_its_workload_has_its_running_pods_deleted_even_when_some_are_gone() -> None:
    pods = group(member("a", LEADER, gated=False, phase="Running"), member("b", WORKER))  # c is gone: incomplete
    result = plan(POD_ADAPTER, pods, None)
    assert [action.name for action in result.actions if isinstance(action, DeleteJob)] == ["a"]
    assert not any(isinstance(action, CreateWorkload) for action in result.actions)


# --- where `kfed logs pod/NAME` finds the pods ---------------------------------------------------------
def test_kfed_logs_finds_a_single_pod_by_its_own_name_and_a_group_by_its_label() -> None:
    single = mk_workload(pod())
    assert POD_ADAPTER.names(single, "p") and not POD_ADAPTER.names(single, "other")
    query = POD_ADAPTER.pod_query(single)
    assert query is not None and (query.label_selector, query.field_selector) == (None, "metadata.name=p")

    meta = POD_ADAPTER.workload_metadata(group(member("a", LEADER), member("b", WORKER), member("c", WORKER)))
    grouped = kueue.Workload.model_validate({"metadata": meta.model_dump(by_alias=True, exclude_none=True)})
    assert grouped.name == "g" and not any(ref.controller for ref in grouped.metadata.owner_references or [])
    assert [POD_ADAPTER.names(grouped, name) for name in ("g", "a", "c", "p")] == [True, True, True, False]
    query = POD_ADAPTER.pod_query(grouped)
    assert query is not None and (query.label_selector, query.field_selector) == (f"{POD_GROUP_NAME_LABEL}=g", None)


def test_kfed_logs_finds_a_jobs_or_jobsets_pods_by_the_label_valued_with_its_name() -> None:
    jobset = BY_FRAMEWORK["jobset.x-k8s.io/jobset"]
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train", "uid": "u", "controller": True}
    wl = kueue.Workload.model_validate({"metadata": {"name": "jobset-train-1", "namespace": "ns", "ownerReferences": [owner]}})
    query = jobset.pod_query(wl)
    assert query is not None and query.label_selector == "jobset.sigs.k8s.io/jobset-name=train" and jobset.names(wl, "train")
    assert POD_ADAPTER.pod_query(wl) is None and BY_FRAMEWORK["batch/job"].pod_query(wl) is None
