"""Kueue's LeaderWorkerSet integration, the functional core: one Workload per group, the
webhook's defaulting of the pod templates, the pods made members of their group's serving pod
group, and the job controller's steps for a kind run as pod groups (`plan_job`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Pod, PodStatus
from manager.api.lws import GROUP_INDEX_LABEL, LEADER_NAME_ANNOTATION, SET_NAME_LABEL, LeaderWorkerSet
from manager.cli.views import owner_kind_name
from manager.engine.integrations import lws
from manager.engine.integrations.adapter import PodQuery, component_index
from manager.engine.integrations.plan import CreateWorkload, DeleteWorkload, JobInputs, PatchMember, PatchWorkload, Warn, plan_job
from manager.engine.integrations.pod import (
    GROUP_SERVING_ANNOTATION,
    IS_GROUP_WORKLOAD_ANNOTATION,
    MANAGED_LABEL,
    POD_GROUP_NAME_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    ROLE_HASH_ANNOTATION,
    SCHEDULING_GATE,
    SUSPENDED_BY_PARENT_ANNOTATION,
    PodAdapter,
    compose_group,
)
from manager.engine.integrations.registry import BY_FRAMEWORK, enabled
from manager.engine.jobs import JobConversionError, workload_name
from manager.engine.workload import owner_name
from manager.multikueue.rules.plan import ClusterHealth, may_still_run_on
from tests.unit.test_job_plan import NOW, cond

ADAPTER = BY_FRAMEWORK[lws.FRAMEWORK]
CONTAINER = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}


def leader_worker_set(
    *,
    replicas: int | None = 2,
    size: int | None = 3,
    leader: bool = True,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    rollout: dict[str, Any] | None = None,
) -> LeaderWorkerSet:
    lwt: dict[str, Any] = {"workerTemplate": {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [CONTAINER]}}}
    if size is not None:
        lwt["size"] = size
    if leader:
        lwt["leaderTemplate"] = {"spec": {"containers": [CONTAINER]}}
    spec: dict[str, Any] = {"leaderWorkerTemplate": lwt}
    if replicas is not None:
        spec["replicas"] = replicas
    if rollout is not None:
        spec["rolloutStrategy"] = rollout
    meta: dict[str, Any] = {
        "name": "serve",
        "namespace": "ns",
        "uid": "uid-lws",
        "resourceVersion": "5",
        "labels": {c.QUEUE_NAME_LABEL: "q"} if labels is None else labels,
    }
    if annotations is not None:
        meta["annotations"] = annotations
    obj: dict[str, Any] = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": meta, "spec": spec}
    if status is not None:
        obj["status"] = status
    return LeaderWorkerSet.model_validate(obj)


def lws_pod(name: str, *, index: str | None = "0", worker: bool = False, managed: bool = False, gated: bool = True) -> Pod:
    labels = {SET_NAME_LABEL: "serve", c.QUEUE_NAME_LABEL: "q"}
    if index is not None:
        labels[GROUP_INDEX_LABEL] = index
    if managed:
        labels[MANAGED_LABEL] = "true"
    annotations = {SUSPENDED_BY_PARENT_ANNOTATION: lws.FRAMEWORK, GROUP_SERVING_ANNOTATION: "true"}
    if worker:
        annotations[LEADER_NAME_ANNOTATION] = "serve-0"
    spec: dict[str, Any] = {"containers": [CONTAINER]}
    if gated:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    meta = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "7", "labels": labels, "annotations": annotations}
    return Pod.model_validate({"metadata": meta, "spec": spec})


def group_workload(index: int, lws_obj: LeaderWorkerSet | None = None) -> kueue.Workload:
    job = lws_obj or leader_worker_set()
    name = lws.workload_name_for("serve", "uid-lws", index)
    meta = lws.workload_metadata(job, name, index).to_dict()
    meta["uid"] = f"uid-wl-{index}"
    pod_sets = [ps.to_dict() for ps in lws.pod_sets(job)]
    return kueue.Workload.model_validate({"metadata": meta, "spec": {"queueName": "q", "podSets": pod_sets}})


# --- names -------------------------------------------------------------------------------------------
def test_each_group_has_its_workload_named_after_the_set_its_index_and_uid() -> None:
    assert lws.workload_name_for("serve", "uid-lws", 0) == workload_name(
        "serve-0", "uid-lws", kind="LeaderWorkerSet", group="leaderworkerset.x-k8s.io"
    )
    assert lws.workload_name_for("serve", "uid-lws", 0).startswith("leaderworkerset-serve-0-")
    assert lws.workload_name_for("serve", "uid-lws", 0) != lws.workload_name_for("serve", "uid-lws", 1)
    assert lws.workload_name_for("serve", "uid-lws", 0) != lws.workload_name_for("serve", "uid-other", 0)


@pytest.mark.parametrize(
    ("labels", "annotations", "want"),
    [
        ({c.QUEUE_NAME_LABEL: "q"}, None, "uid-lws"),
        ({c.MULTIKUEUE_ORIGIN_LABEL: "m"}, {lws.MULTIKUEUE_ORIGIN_UID_ANNOTATION: "uid-origin"}, "uid-origin"),
        ({}, {lws.MULTIKUEUE_ORIGIN_UID_ANNOTATION: "uid-origin"}, "uid-lws"),  # not a worker's copy
    ],
)
def test_a_workers_copy_names_its_groups_after_the_origins_uid(
    labels: dict[str, str], annotations: dict[str, str] | None, want: str
) -> None:
    assert lws.owner_uid(leader_worker_set(labels=labels, annotations=annotations)) == want


# --- PodSets ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("leader", "size", "want"),
    [
        (True, 3, [("leader", 1), ("worker", 2)]),
        (True, None, [("leader", 1), ("worker", 0)]),  # size defaults to 1
        (False, 4, [("main", 4)]),
        (False, None, [("main", 1)]),
    ],
)
def test_pod_sets_are_leader_and_workers_or_main(leader: bool, size: int | None, want: list[tuple[str, int]]) -> None:
    assert [(ps.name, ps.count) for ps in lws.pod_sets(leader_worker_set(leader=leader, size=size))] == want


def test_pod_sets_drop_the_lws_controllers_own_keys_but_the_sets_name() -> None:
    job = leader_worker_set(leader=False)
    raw = job.to_dict()
    raw["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"] = {
        "labels": {"app": "w", SET_NAME_LABEL: "serve", GROUP_INDEX_LABEL: "0"},
        "annotations": {"leaderworkerset.sigs.k8s.io/size": "3"},
    }
    template = lws.pod_sets(LeaderWorkerSet.model_validate(raw))[0].template
    assert template["metadata"] == {"labels": {"app": "w", SET_NAME_LABEL: "serve"}}


@pytest.mark.parametrize(
    ("replicas", "size", "where"),
    [(-1, 3, "spec.replicas"), (1_000_001, 3, "spec.replicas"), (1, 0, "spec.leaderWorkerTemplate.size")],
)
def test_bad_counts_are_one_line_naming_the_field(replicas: int, size: int, where: str) -> None:
    with pytest.raises(JobConversionError) as err:
        lws.pod_sets(leader_worker_set(replicas=replicas, size=size))
    assert str(err.value).startswith(f"{where}: Invalid value")
    assert "\n" not in str(err.value)


# --- the webhook -------------------------------------------------------------------------------------------
def test_a_queued_sets_templates_get_the_queue_priority_and_the_parent_annotations() -> None:
    job = leader_worker_set(labels={c.QUEUE_NAME_LABEL: "q", c.PRIORITY_CLASS_LABEL: "high"}).to_dict()
    ops = lws.creation_patch(job)
    parent = {SUSPENDED_BY_PARENT_ANNOTATION: lws.FRAMEWORK, GROUP_SERVING_ANNOTATION: "true"}
    labels = {c.QUEUE_NAME_LABEL: "q", c.PRIORITY_CLASS_LABEL: "high"}
    assert ops == [
        {"op": "add", "path": "/spec/leaderWorkerTemplate/leaderTemplate/metadata", "value": {"labels": labels, "annotations": parent}},
        {"op": "add", "path": "/spec/leaderWorkerTemplate/workerTemplate/metadata/labels", "value": {"app": "w", **labels}},
        {"op": "add", "path": "/spec/leaderWorkerTemplate/workerTemplate/metadata/annotations", "value": parent},
    ]


def test_an_unqueued_set_is_left_alone_and_a_defaulted_one_is_not_patched_again() -> None:
    assert lws.creation_patch(leader_worker_set(labels={}).to_dict()) == []
    job = leader_worker_set(leader=False).to_dict()
    template = job["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    template["metadata"]["labels"][c.QUEUE_NAME_LABEL] = "q"
    template["metadata"]["annotations"] = {SUSPENDED_BY_PARENT_ANNOTATION: lws.FRAMEWORK, GROUP_SERVING_ANNOTATION: "true"}
    assert lws.creation_patch(job) == []


@pytest.mark.parametrize(
    ("replicas", "problems"),
    [
        (2, []),
        (0, []),
        (-1, ["spec.replicas: Invalid value: -1: invalid LeaderWorkerSet replicas: must be >= 0, got -1"]),
        ("two", ['spec.replicas: Invalid value: "two": must be an integer']),
    ],
)
def test_the_webhook_refuses_replicas_out_of_range(replicas: Any, problems: list[str]) -> None:
    assert lws.creation_problems({"spec": {"replicas": replicas}}) == problems


# --- its Workloads ---------------------------------------------------------------------------------------------
def names(*indexes: int) -> list[str]:
    return [lws.workload_name_for("serve", "uid-lws", i) for i in indexes]


@pytest.mark.parametrize(
    ("job", "existing", "create", "delete"),
    [
        (leader_worker_set(replicas=2), [], [0, 1], []),
        (leader_worker_set(replicas=2), names(0), [1], []),
        (leader_worker_set(replicas=1), names(0, 1), [], names(1)),  # scaled down
        (leader_worker_set(replicas=0), names(0), [], names(0)),
        (leader_worker_set(replicas=None), [], [0], []),  # replicas defaults to 1
        (leader_worker_set(replicas=2), ["someone-elses"], [0, 1], ["someone-elses"]),
        # a rolling update with surge keeps (and makes) a Workload for each surge group
        (
            leader_worker_set(
                replicas=2,
                status={"replicas": 3, "updatedReplicas": 1},
                rollout={"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": 1}},
            ),
            names(0, 1, 2),
            [],
            [],
        ),
        (leader_worker_set(replicas=2, status={"replicas": 3, "updatedReplicas": 2}), names(0, 1, 2), [], names(2)),
        # a worker's copy creates none: they come from the manager
        (
            leader_worker_set(labels={c.MULTIKUEUE_ORIGIN_LABEL: "m"}, annotations={lws.MULTIKUEUE_ORIGIN_UID_ANNOTATION: "uid-lws"}),
            names(1),
            [],
            [],
        ),
    ],
)
def test_one_workload_per_group_index(job: LeaderWorkerSet, existing: list[str], create: list[int], delete: list[str]) -> None:
    plan = lws.plan_workloads(job, existing)
    assert [name for name, _ in plan.create] == names(*create)
    assert [index for _, index in plan.create] == create
    assert list(plan.delete) == delete


def test_a_groups_workload_is_a_group_workload_owned_by_the_set_not_as_controller() -> None:
    meta = lws.workload_metadata(leader_worker_set(), "wl", 1)
    assert meta.labels == {c.JOB_UID_LABEL: "uid-lws"}
    assert meta.annotations == {
        IS_GROUP_WORKLOAD_ANNOTATION: "true",
        "kueue.x-k8s.io/job-owner-gvk": "leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet",
        "kueue.x-k8s.io/job-owner-name": "serve",
        "kueue.x-k8s.io/component-workload-index": "1",
    }
    [owner] = meta.owner_references or []
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("LeaderWorkerSet", "serve", "uid-lws", None)
    wl = kueue.Workload.model_validate(
        {"metadata": meta.to_dict(), "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}]}}
    )
    assert component_index(wl) == 1
    assert component_index(wl.model_copy(update={"metadata": wl.metadata.model_copy(update={"annotations": {}})})) is None


# --- its pods ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("pod", "leader", "role"),
    [
        (lws_pod("serve-0"), True, "leader"),
        (lws_pod("serve-0-1", worker=True), True, "worker"),
        (lws_pod("serve-0"), False, "main"),
    ],
)
def test_a_pod_with_its_group_index_joins_its_groups_pod_group(pod: Pod, leader: bool, role: str) -> None:
    group = lws.workload_name_for("serve", "uid-lws", 0)
    patch = lws.pod_group_patch(leader_worker_set(leader=leader), pod)
    assert patch == {
        "metadata": {
            "resourceVersion": "7",
            "labels": {MANAGED_LABEL: "true", POD_GROUP_NAME_LABEL: group, c.PREBUILT_WORKLOAD_LABEL: group, c.QUEUE_NAME_LABEL: "q"},
            "annotations": {c.PREBUILT_WORKLOAD_ANNOTATION: group, POD_GROUP_TOTAL_COUNT_ANNOTATION: "3", ROLE_HASH_ANNOTATION: role},
        }
    }


def test_a_pod_waits_for_its_group_index_and_a_member_is_left_alone() -> None:
    assert lws.pod_group_patch(leader_worker_set(), lws_pod("serve-0", index=None)) is None
    assert lws.pod_group_patch(leader_worker_set(), lws_pod("serve-0", managed=True)) is None
    moved = leader_worker_set(labels={c.QUEUE_NAME_LABEL: "other"})
    assert lws.pod_group_patch(moved, lws_pod("serve-0", managed=True)) == {
        "metadata": {"resourceVersion": "7", "labels": {c.QUEUE_NAME_LABEL: "other"}}
    }
    assert lws.pod_group_patch(moved, lws_pod("serve-0", managed=True, gated=False)) is None  # a running pod keeps its queue


def test_the_pod_webhook_only_gates_a_pod_its_parent_suspends() -> None:
    pod = lws_pod("serve-0").to_dict()
    pod["spec"].pop("schedulingGates")
    assert PodAdapter().creation_patch(pod) == [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": SCHEDULING_GATE}]}]
    assert PodAdapter().creation_patch(lws_pod("serve-0").to_dict()) == []


def test_enabling_the_set_enables_the_pod_integration_for_its_pods_only() -> None:
    registry = enabled([lws.FRAMEWORK])
    [pods] = [adapter for adapter in registry.adapters if isinstance(adapter, PodAdapter)]
    plain = Pod.model_validate({"metadata": {"name": "p", "namespace": "ns", "labels": {c.QUEUE_NAME_LABEL: "q"}}, "spec": {}})
    assert pods.creation_patch(plain.to_dict()) == []
    assert not pods.manages(plain.model_copy(update={"metadata": plain.metadata.model_copy(update={"labels": {MANAGED_LABEL: "true"}})}))
    assert pods.creation_patch({**lws_pod("serve-0").to_dict(), "spec": {}}) != []
    assert enabled([lws.FRAMEWORK, "pod"]).adapters == (ADAPTER, BY_FRAMEWORK["pod"])


def test_a_serving_group_never_finishes_by_its_pods() -> None:
    pods = [lws_pod(f"serve-0-{i}", managed=True) for i in range(3)]
    for pod in pods:
        pod.metadata.labels = {**(pod.metadata.labels or {}), POD_GROUP_NAME_LABEL: "g"}
        pod.metadata.annotations = {**(pod.metadata.annotations or {}), POD_GROUP_TOTAL_COUNT_ANNOTATION: "3"}
        pod.status = PodStatus(phase="Succeeded")
    group = compose_group("ns", "g", pods)
    assert group is not None
    assert BY_FRAMEWORK["pod"].finished(group) is None
    for pod in pods:
        pod.metadata.annotations = {k: v for k, v in (pod.metadata.annotations or {}).items() if k != GROUP_SERVING_ANNOTATION}
    regrouped = compose_group("ns", "g", pods)
    assert regrouped is not None
    finished = BY_FRAMEWORK["pod"].finished(regrouped)
    assert finished is not None and finished.succeeded


# --- the job controller's steps --------------------------------------------------------------------------------
def inputs(job: LeaderWorkerSet | None, owned: list[kueue.Workload], members: list[Pod], **more: Any) -> JobInputs:
    return JobInputs(ADAPTER, job, None, NOW, owned=owned, members=members, **more)


def test_the_controller_creates_each_groups_workload_and_labels_the_pods() -> None:
    plan = plan_job(inputs(leader_worker_set(), [group_workload(0)], [lws_pod("serve-0"), lws_pod("serve-1", index=None)]))
    created = [a for a in plan.actions if isinstance(a, CreateWorkload)]
    assert [a.workload.name for a in created] == names(1)
    wl = created[0].workload
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("leader", 1), ("worker", 2)]
    assert wl.spec.queue_name == "q"
    assert (wl.metadata.annotations or {})["kueue.x-k8s.io/component-workload-index"] == "1"
    assert [a.name for a in plan.actions if isinstance(a, PatchMember)] == ["serve-0"]


def test_the_controller_deletes_the_workloads_of_groups_gone_and_of_a_set_gone() -> None:
    plan = plan_job(inputs(leader_worker_set(replicas=1), [group_workload(0), group_workload(1)], []))
    assert plan.actions == [DeleteWorkload(names(1)[0], "ns", "uid-wl-1")]
    gone = plan_job(inputs(None, [group_workload(0)], []))
    assert gone.actions == [DeleteWorkload(names(0)[0], "ns", "uid-wl-0")]


def test_an_unqueued_set_is_left_alone_and_a_bad_one_warns_and_retries() -> None:
    assert plan_job(inputs(leader_worker_set(labels={}), [group_workload(0)], [lws_pod("serve-0")])).actions == []
    bad = plan_job(inputs(leader_worker_set(size=0), [], []))
    assert bad.retry_with_backoff
    [warn] = bad.actions
    assert isinstance(warn, Warn) and warn.event.message.startswith("spec.leaderWorkerTemplate.size: Invalid value")


def test_its_workloads_wake_it_by_their_owner_annotations() -> None:
    wl = group_workload(1)
    assert ADAPTER.job_keys(wl) == ["ns/serve"]
    assert ADAPTER.names(wl, "serve") and not ADAPTER.names(wl, "other")
    assert ADAPTER.pod_query(wl) == PodQuery(label_selector=f"{SET_NAME_LABEL}=serve")  # every group's pods
    assert ADAPTER.member_of(lws_pod("serve-0")) == "ns/serve"
    plain = Pod.model_validate({"metadata": {"name": "p", "namespace": "ns", "labels": {SET_NAME_LABEL: "serve"}}, "spec": {}})
    assert ADAPTER.member_of(plain) is None


def test_kfed_jobs_names_a_groups_workload_after_its_set() -> None:
    wl = group_workload(1)
    assert owner_name(wl) == "serve"
    assert owner_kind_name(wl) == "LeaderWorkerSet"


def evicted_group(index: int) -> kueue.Workload:
    wl = group_workload(index).to_dict()
    wl["metadata"]["resourceVersion"] = "3"
    pod_sets = [{"name": ps["name"], "flavors": {"cpu": "default"}, "count": ps["count"]} for ps in wl["spec"]["podSets"]]
    wl["status"] = {
        "admission": {"clusterQueue": "cq", "podSetAssignments": pod_sets},
        "conditions": [cond(c.QUOTA_RESERVED), cond(c.ADMITTED), cond(c.EVICTED, reason="Preempted", message="Preempted")],
    }
    return kueue.Workload.model_validate(wl)


def test_an_evicted_group_without_pods_here_gives_its_quota_back_once_no_worker_may_run_it() -> None:
    job, wl = leader_worker_set(replicas=1), evicted_group(0)
    released = plan_job(inputs(job, [wl], []))
    [write] = [a for a in released.actions if isinstance(a, PatchWorkload)]
    assert write.name == wl.name and write.subresource == "status"
    assert c.QUOTA_RESERVED in {cd["type"] for cd in write.patch["status"]["conditions"] if cd["status"] == "False"}
    kept = plan_job(inputs(job, [wl], [], runs_elsewhere_by_name={wl.name: True}))
    assert kept.actions == [] and kept.requeue_after is not None
    member = lws_pod("serve-0", managed=True)
    member.metadata.annotations = {**(member.metadata.annotations or {}), c.PREBUILT_WORKLOAD_ANNOTATION: wl.name}
    assert plan_job(inputs(job, [wl], [member])).actions == []  # its pod group's to stop and release


def test_on_a_worker_a_group_runs_while_its_copy_is_admitted_not_while_the_set_exists() -> None:
    up = [ClusterHealth("w1", True)]
    remote = leader_worker_set()
    kw: dict[str, Any] = {
        "admitted_on": None,
        "clusters": up,
        "jobs": {"w1": remote},
        "now": NOW,
        "worker_lost_timeout": timedelta(minutes=5),
    }
    assert may_still_run_on(**kw, adapter=ADAPTER) is None
    assert may_still_run_on(**kw, admitted_copies=frozenset({"w1"}), adapter=ADAPTER) == "w1"


def test_a_groups_workload_outlives_its_pods_it_goes_with_its_set() -> None:
    """On a MultiKueue manager a group has no pods: the pod integration must not take its
    Workload for an orphan (its set owns it)."""
    wl = group_workload(0)
    pods = BY_FRAMEWORK["pod"]
    [key] = pods.job_keys(wl)
    assert plan_job(JobInputs(pods, None, None, NOW, owned=[wl])).actions == []
    assert key.endswith(wl.name)
