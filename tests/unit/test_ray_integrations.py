"""Kueue's RayCluster and RayJob integrations (KubeRay, ray.io/v1), the functional core: the
PodSets of a Ray cluster (head, worker groups, a RayJob's submitter), the start and restore
patches, when a RayJob is finished and active, the webhook's checks, and the objects MultiKueue
creates on a worker and copies back."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.ray import RayCluster, RayJob
from manager.engine.integrations.adapter import construct_workload
from manager.engine.integrations.raycluster import RayClusterAdapter, merge_patch
from manager.engine.integrations.rayjob import RayJobAdapter
from manager.engine.integrations.registry import BY_FRAMEWORK, enabled
from manager.engine.jobs import JobConversionError, admitted_pod_sets, workload_name

RAYCLUSTER = BY_FRAMEWORK["ray.io/raycluster"]
RAYJOB = BY_FRAMEWORK["ray.io/rayjob"]
assert isinstance(RAYCLUSTER, RayClusterAdapter) and isinstance(RAYJOB, RayJobAdapter)

GPU_A = kueue.ResourceFlavor.model_validate(
    {
        "metadata": {"name": "gpu-a"},
        "spec": {"nodeLabels": {"pool": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    }
)
TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


def pod(cpu: str = "1", **spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.46.0", "resources": {"requests": {"cpu": cpu}}}], **spec}}


def cluster_spec(**more: Any) -> dict[str, Any]:
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": pod("2", nodeSelector={"user": "choice"})},
        "workerGroupSpecs": [
            {"groupName": "small", "rayStartParams": {}, "template": pod("1")},  # replicas defaults to 1
            {
                "groupName": "Big",
                "replicas": 2,
                "numOfHosts": 3,
                "minReplicas": 0,
                "maxReplicas": 5,
                "rayStartParams": {},
                "template": pod(),
            },
        ],
        **more,
    }


def a_cluster(*, annotations: dict[str, str] | None = None, **spec: Any) -> RayCluster:
    meta: dict[str, Any] = {"name": "rc", "namespace": "ns", "uid": "u", "resourceVersion": "7", "labels": {c.QUEUE_NAME_LABEL: "q"}}
    if annotations:
        meta["annotations"] = annotations
    return RayCluster.model_validate({"metadata": meta, "spec": {"suspend": True, **cluster_spec(**spec)}})


def a_rayjob(*, cluster: dict[str, Any] | None = None, **spec: Any) -> RayJob:
    meta = {"name": "rj", "namespace": "ns", "uid": "u", "resourceVersion": "9", "labels": {c.QUEUE_NAME_LABEL: "q"}}
    body = {
        "suspend": True,
        "entrypoint": "python -c 'print(1)'",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": cluster or cluster_spec(),
    }
    return RayJob.model_validate({"metadata": meta, "spec": {**body, **spec}})


def admitted(adapter: Any, job: Any, name: str) -> kueue.Workload:
    wl = construct_workload(adapter, job, workload_priority_classes={}, priority_classes={})
    wl.metadata.name = name
    assignments = [{"name": ps.name, "flavors": {"cpu": "gpu-a"}, "count": ps.count} for ps in wl.spec.pod_sets]
    wl.status = kueue.WorkloadStatus.model_validate({"admission": {"clusterQueue": "cq", "podSetAssignments": assignments}})
    return wl


def applied(model: Any, job: Any, patch: dict[str, Any]) -> Any:
    """The object after a merge patch (RFC 7386), as the apiserver stores it."""

    def merge(target: Any, change: Any) -> Any:
        if not isinstance(change, dict):
            return copy.deepcopy(change)
        out = dict(target) if isinstance(target, dict) else {}
        for key, value in change.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merge(out.get(key), value)
        return out

    return model.model_validate(merge(job.to_dict(), patch))


# --- the PodSets -----------------------------------------------------------------------------------
def test_a_raycluster_asks_for_its_head_then_each_worker_group_of_replicas_times_hosts() -> None:
    wl = construct_workload(RAYCLUSTER, a_cluster(), workload_priority_classes={}, priority_classes={})
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("head", 1), ("small", 1), ("big", 6)]
    assert wl.metadata.name == workload_name("rc", "u", kind="RayCluster", group="ray.io")
    assert wl.metadata.name.startswith("raycluster-rc-")
    owner = wl.metadata.owner_references[0] if wl.metadata.owner_references else None
    assert owner is not None and (owner.api_version, owner.kind, owner.controller) == ("ray.io/v1", "RayCluster", True)
    assert wl.spec.pod_sets[0].template == pod("2", nodeSelector={"user": "choice"})


@pytest.mark.parametrize(
    ("annotations", "spec", "head_containers"),
    [
        # GCS fault tolerance: the head reserves at least the Redis cleanup Job's requests.
        ({"ray.io/ft-enabled": "True"}, {}, [{"name": "ray", "requests": {"cpu": "2", "memory": "256Mi"}}]),
        (
            None,
            {"gcsFaultToleranceOptions": {"redisAddress": "redis:6379"}},
            [{"name": "ray", "requests": {"cpu": "2", "memory": "256Mi"}}],
        ),
        ({"ray.io/ft-enabled": "false"}, {}, [{"name": "ray", "requests": {"cpu": "2"}}]),
        # In-tree autoscaling: KubeRay's autoscaler sidecar, with its default or given resources.
        (
            None,
            {"enableInTreeAutoscaling": True},
            [{"name": "ray", "requests": {"cpu": "2"}}, {"name": "autoscaler", "requests": {"cpu": "500m", "memory": "512Mi"}}],
        ),
        (
            None,
            {"enableInTreeAutoscaling": True, "autoscalerOptions": {"resources": {"requests": {"cpu": "1"}}}},
            [{"name": "ray", "requests": {"cpu": "2"}}, {"name": "autoscaler", "requests": {"cpu": "1"}}],
        ),
    ],
)
def test_the_head_pod_set_holds_what_kuberay_adds_to_the_head(
    annotations: dict[str, str] | None, spec: dict[str, Any], head_containers: list[dict[str, Any]]
) -> None:
    head = RAYCLUSTER.pod_sets(a_cluster(annotations=annotations, **spec))[0]
    got = [{"name": ct["name"], "requests": ct["resources"]["requests"]} for ct in head.template["spec"]["containers"]]
    assert got == head_containers


def test_the_redis_cleanup_requests_never_lower_what_the_head_asks() -> None:
    spec = cluster_spec()
    spec["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "4", "memory": "1Gi"}
    rc = RayCluster.model_validate({"metadata": {"name": "rc", "namespace": "ns"}, "spec": {**spec, "gcsFaultToleranceOptions": {}}})
    head = RAYCLUSTER.pod_sets(rc)[0]
    assert head.template["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "4", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("mode", "names", "head_containers"),
    [
        (None, ["head", "small", "big", "submitter"], ["ray"]),  # the CRD's default, K8sJobMode
        ("K8sJobMode", ["head", "small", "big", "submitter"], ["ray"]),
        ("HTTPMode", ["head", "small", "big"], ["ray"]),
        ("InteractiveMode", ["head", "small", "big"], ["ray"]),
        ("SidecarMode", ["head", "small", "big"], ["ray", "ray-job-submitter"]),
    ],
)
def test_a_rayjob_asks_for_its_clusters_pod_sets_and_its_submitters(mode: str | None, names: list[str], head_containers: list[str]) -> None:
    job = a_rayjob(submissionMode=mode) if mode else a_rayjob()
    pod_sets = RAYJOB.pod_sets(job)
    assert [ps.name for ps in pod_sets] == names
    assert [ct["name"] for ct in pod_sets[0].template["spec"]["containers"]] == head_containers
    assert [ps.count for ps in pod_sets][:3] == [1, 1, 6]


def test_a_rayjobs_default_submitter_is_kuberays_with_the_heads_image() -> None:
    submitter = RAYJOB.pod_sets(a_rayjob())[-1]
    assert (submitter.name, submitter.count) == ("submitter", 1)
    assert submitter.template == {
        "spec": {
            "containers": [
                {
                    "name": "ray-job-submitter",
                    "image": "rayproject/ray:2.46.0",
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}},
                }
            ],
            "restartPolicy": "Never",
        }
    }
    own = pod("100m", restartPolicy="Never")
    assert RAYJOB.pod_sets(a_rayjob(submitterPodTemplate=own))[-1].template == own


def test_a_rayjob_workload_is_named_and_owned_as_kueues() -> None:
    wl = construct_workload(RAYJOB, a_rayjob(), workload_priority_classes={}, priority_classes={})
    assert wl.metadata.name == workload_name("rj", "u", kind="RayJob", group="ray.io") and wl.metadata.name.startswith("rayjob-rj-")
    owner = wl.metadata.owner_references[0] if wl.metadata.owner_references else None
    assert owner is not None and (owner.api_version, owner.kind, owner.name) == ("ray.io/v1", "RayJob", "rj")


@pytest.mark.parametrize(
    ("adapter", "obj", "path"),
    [
        (RAYJOB, {"spec": {"suspend": True, "entrypoint": "x"}}, "spec.rayClusterSpec: Required value"),
        (
            RAYCLUSTER,
            {"spec": cluster_spec(workerGroupSpecs=[{"groupName": "head", "template": pod()}])},
            "spec.workerGroupSpecs[0].groupName: Forbidden",
        ),
    ],
)
def test_a_ray_object_kueue_cannot_make_a_workload_of_is_one_error_naming_the_field(adapter: Any, obj: dict[str, Any], path: str) -> None:
    job = adapter.model.model_validate({"metadata": {"name": "x", "namespace": "ns"}, **obj})
    with pytest.raises(JobConversionError) as err:
        adapter.pod_sets(job)
    assert str(err.value).startswith(path)
    assert "\n" not in str(err.value)


# --- the webhook's checks --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "problems"),
    [
        ({"shutdownAfterJobFinishes": True, "rayClusterSpec": cluster_spec()}, []),
        ({"clusterSelector": {"ray.io/cluster": "shared"}}, []),  # not Kueue's: it runs on an existing cluster
        (
            {"clusterSelector": {"ray.io/cluster": "shared"}, "rayClusterSpec": cluster_spec()},
            ["spec.clusterSelector: Invalid value: a kueue managed job should not use an existing cluster"],
        ),
        ({}, ["spec.rayClusterSpec: Required value: rayClusterSpec is required for Kueue-managed jobs that don't use clusterSelector"]),
        (
            {"rayClusterSpec": cluster_spec(enableInTreeAutoscaling=True)},
            [
                "spec.shutdownAfterJobFinishes: Invalid value: false: a kueue managed job should delete the cluster after finishing",
                "spec.rayClusterSpec.enableInTreeAutoscaling: Invalid value: true: a kueue managed job should only use autoscaling "
                "when workload slicing is enabled",
            ],
        ),
        (
            {"shutdownAfterJobFinishes": True, "rayClusterSpec": cluster_spec(workerGroupSpecs=[{"groupName": "head"}] * 18)},
            ["spec.rayClusterSpec.workerGroupSpecs: Too many: 19: must have at most 18 items"]
            + [f'spec.rayClusterSpec.workerGroupSpecs[{i}].groupName: Forbidden: "head" is reserved for the head group' for i in range(18)],
        ),
    ],
)
def test_the_webhook_refuses_a_queued_rayjob_kueue_would_refuse(spec: dict[str, Any], problems: list[str]) -> None:
    assert RAYJOB.creation_problems({"spec": spec}) == problems


def test_a_rayjob_on_an_existing_cluster_is_not_queued() -> None:
    assert RAYJOB.manages(a_rayjob())
    assert not RAYJOB.manages(RayJob.model_validate({"spec": {"clusterSelector": {"ray.io/cluster": "shared"}}}))


def test_the_webhook_suspends_a_queued_raycluster_and_rayjob_at_creation() -> None:
    assert RAYCLUSTER.creation_patch({"spec": {}}) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert RAYJOB.creation_patch({"spec": {"suspend": True}}) == []


# --- starting and stopping -------------------------------------------------------------------------
def test_starting_a_raycluster_gives_each_group_its_pod_sets_flavor_and_kueues_pod_labels() -> None:
    rc = a_cluster()
    wl = admitted(RAYCLUSTER, rc, "raycluster-rc-abcde")
    patch = RAYCLUSTER.start_patch(rc, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))
    assert patch["metadata"] == {"resourceVersion": "7"}  # the whole worker list is written: only over what was read
    assert patch["spec"]["suspend"] is False
    started = applied(RayCluster, rc, patch)
    templates = {"head": started.to_dict()["spec"]["headGroupSpec"]["template"]}
    templates |= {g["groupName"].lower(): g["template"] for g in started.to_dict()["spec"]["workerGroupSpecs"]}
    for name, template in templates.items():
        assert template["spec"]["nodeSelector"] == ({"user": "choice", "pool": "a"} if name == "head" else {"pool": "a"}), name
        assert template["spec"]["tolerations"] == [TOLERATION]
        assert template["metadata"]["labels"][c.PODSET_LABEL] == name
        assert template["metadata"]["annotations"] == {c.WORKLOAD_ANNOTATION: "raycluster-rc-abcde"}
    big = started.to_dict()["spec"]["workerGroupSpecs"][1]
    assert (big["replicas"], big["numOfHosts"], big["maxReplicas"]) == (2, 3, 5)  # the rest as it was

    # Stopped: every template as the Workload recorded it; nothing to restore when they are.
    restore = RAYCLUSTER.restore_patch(started, wl)
    assert restore is not None and restore["metadata"] == {"resourceVersion": "7"}
    assert applied(RayCluster, started, restore).to_dict()["spec"] == {**rc.to_dict()["spec"], "suspend": False}
    assert RAYCLUSTER.restore_patch(rc, wl) is None


def test_an_admitted_value_that_differs_from_the_template_is_a_conflict_naming_the_field() -> None:
    raw = a_cluster().to_dict()
    raw["spec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"] = {"pool": "b"}
    rc = RayCluster.model_validate(raw)
    wl = admitted(RAYCLUSTER, rc, "raycluster-rc-abcde")
    with pytest.raises(JobConversionError) as err:
        RAYCLUSTER.start_patch(rc, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))
    assert (
        str(err.value) == 'spec.headGroupSpec.template.spec.nodeSelector: conflict for nodeSelector: "pool" is "b", the admission sets "a"'
    )


def test_a_ray_object_admitted_for_other_pod_sets_is_not_started() -> None:
    rc, rj = a_cluster(), a_rayjob()
    wl = admitted(RAYCLUSTER, rc, "raycluster-rc-abcde")
    with pytest.raises(JobConversionError, match="expecting 3 admitted PodSets, got 2"):
        RAYCLUSTER.start_patch(rc, wl, admitted_pod_sets(wl, {})[:2])
    wl = admitted(RAYJOB, rj, "rayjob-rj-abcde")
    with pytest.raises(JobConversionError, match="expecting 4 admitted PodSets, got 3"):
        RAYJOB.start_patch(rj, wl, admitted_pod_sets(wl, {})[:3])
    other = admitted(RAYCLUSTER, a_cluster(workerGroupSpecs=[]), "raycluster-rc-abcde")
    assert RAYCLUSTER.restore_patch(rc, other) is None


def test_starting_a_rayjob_writes_the_submitter_kuberay_would_run_with_its_flavor_and_stopping_keeps_it_as_recorded() -> None:
    rj = a_rayjob()
    wl = admitted(RAYJOB, rj, "rayjob-rj-abcde")
    patch = RAYJOB.start_patch(rj, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))
    assert patch["metadata"] == {"resourceVersion": "9"} and patch["spec"]["suspend"] is False
    started = applied(RayJob, rj, patch).to_dict()["spec"]
    head = started["rayClusterSpec"]["headGroupSpec"]["template"]
    assert head["spec"]["nodeSelector"] == {"user": "choice", "pool": "a"}
    assert head["metadata"]["labels"][c.PODSET_LABEL] == "head"
    submitter = started["submitterPodTemplate"]
    assert submitter["spec"]["containers"][0]["name"] == "ray-job-submitter"
    assert submitter["spec"]["nodeSelector"] == {"pool": "a"} and submitter["spec"]["tolerations"] == [TOLERATION]
    assert submitter["metadata"]["labels"][c.PODSET_LABEL] == "submitter"

    stopped = applied(RayJob, applied(RayJob, rj, patch), {"spec": {"suspend": True}})
    restore = RAYJOB.restore_patch(stopped, wl)
    assert restore is not None
    back = applied(RayJob, stopped, restore).to_dict()["spec"]
    assert back["rayClusterSpec"] == rj.to_dict()["spec"]["rayClusterSpec"]
    # Kueue leaves the default submitter it wrote in place, as the Workload recorded it.
    assert back["submitterPodTemplate"] == wl.spec.pod_sets[-1].template
    assert RAYJOB.restore_patch(applied(RayJob, stopped, restore), wl) is None


def test_starting_a_sidecar_rayjob_writes_no_submitter() -> None:
    rj = a_rayjob(submissionMode="SidecarMode")
    wl = admitted(RAYJOB, rj, "rayjob-rj-abcde")
    patch = RAYJOB.start_patch(rj, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))
    assert "submitterPodTemplate" not in patch["spec"]
    # The head's template is the user's: KubeRay adds the sidecar to the pod, not to the spec.
    head = applied(RayJob, rj, patch).to_dict()["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    assert [ct["name"] for ct in head["spec"]["containers"]] == ["ray"]


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ({"a": 1, "b": {"c": 2, "d": 3}}, {"a": 1, "b": {"c": 2}}, {"b": {"d": None}}),
        ({"l": [1, 2]}, {"l": [1, 2, 3]}, {"l": [1, 2, 3]}),
        ({"a": 1}, {"a": 1}, {}),
        ({}, {"m": {"k": "v"}}, {"m": {"k": "v"}}),
    ],
)
def test_a_merge_patch_removes_keys_with_null_and_replaces_lists_whole(old: Any, new: Any, patch: Any) -> None:
    assert merge_patch(old, new) == patch


# --- finished, active, ready -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "finished", "active"),
    [
        ({}, None, 0),
        ({"jobDeploymentStatus": "Initializing", "jobStatus": ""}, None, 1),
        ({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, None, 1),
        ({"jobDeploymentStatus": "Suspending"}, None, 1),
        ({"jobDeploymentStatus": "Suspended"}, None, 0),
        ({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "message": "done"}, (True, "done"), 1),
        ({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, (True, "RayJob finished successfully"), 1),
        ({"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}, (False, "RayJob failed"), 1),
        ({"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "message": "exit 1"}, (False, "exit 1"), 1),
        ({"jobDeploymentStatus": "ValidationFailed", "message": "bad spec"}, None, 1),
    ],
)
def test_a_rayjob_finishes_and_runs_by_its_deployment_status(
    status: dict[str, Any], finished: tuple[bool, str] | None, active: int
) -> None:
    rj = a_rayjob(suspend=False)
    rj.status = RayJob.model_validate({"status": status}).status
    done = RAYJOB.finished(rj)
    assert (None if done is None else (done.succeeded, done.message)) == finished
    assert RAYJOB.active_count(rj) == active


@pytest.mark.parametrize(("state", "active"), [(None, 0), ("ready", 1), ("failed", 0), ("suspended", 0)])
def test_a_raycluster_never_finishes_and_runs_while_ready(state: str | None, active: int) -> None:
    rc = a_cluster(suspend=False)
    rc.status = RayCluster.model_validate({"status": {"state": state} if state else {}}).status
    assert RAYCLUSTER.finished(rc) is None
    assert RAYCLUSTER.active_count(rc) == active
    assert RAYCLUSTER.pods_ready(rc) is (state == "ready")


def test_a_rayjobs_pods_are_ready_when_its_cluster_is() -> None:
    rj = a_rayjob(suspend=False)
    assert not RAYJOB.pods_ready(rj)
    rj.status = RayJob.model_validate({"status": {"rayClusterStatus": {"state": "ready"}}}).status
    assert RAYJOB.pods_ready(rj)


def test_a_worker_rayjob_is_stopped_once_suspended_there() -> None:
    rj = a_rayjob()
    rj.status = RayJob.model_validate({"status": {"jobDeploymentStatus": "Suspending"}}).status
    assert not RAYJOB.stopped(rj)
    rj.status = RayJob.model_validate({"status": {"jobDeploymentStatus": "Suspended"}}).status
    assert RAYJOB.stopped(rj)


# --- MultiKueue ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("adapter", "job", "name"), [(RAYCLUSTER, a_cluster, "rc"), (RAYJOB, a_rayjob, "rj")])
def test_the_ray_object_for_a_worker_is_the_whole_spec_handed_to_kuberay(adapter: Any, job: Any, name: str) -> None:
    obj = job(managedBy=c.MULTIKUEUE_MANAGED_BY)
    remote = adapter.remote_object(obj, workload_name="wl-abcde", origin="east")
    assert (remote["apiVersion"], remote["kind"]) == ("ray.io/v1", adapter.kind)
    assert remote["metadata"] == {
        "name": name,
        "namespace": "ns",
        "labels": {c.QUEUE_NAME_LABEL: "q", c.MULTIKUEUE_ORIGIN_LABEL: "east", c.PREBUILT_WORKLOAD_LABEL: "wl-abcde"},
        "annotations": {c.PREBUILT_WORKLOAD_ANNOTATION: "wl-abcde"},
    }
    want = obj.to_dict()["spec"]
    want.pop("managedBy")
    assert remote["spec"] == want


def test_a_worker_ray_objects_status_comes_back_whole_every_time() -> None:
    status = {
        "jobDeploymentStatus": "Running",
        "jobStatus": "RUNNING",
        "rayClusterName": "rj-x1y2z",
        "rayClusterStatus": {"state": "ready"},
    }
    remote = a_rayjob()
    remote.status = RayJob.model_validate({"status": status}).status
    assert RAYJOB.status_update(a_rayjob(), remote) == (status, False)
    assert RAYJOB.lost_pods_status(remote) == {"status": {"jobDeploymentStatus": "Suspended"}}
    cluster = a_cluster()
    cluster.status = RayCluster.model_validate({"status": {"state": "ready", "readyWorkerReplicas": 7}}).status
    assert RAYCLUSTER.status_update(a_cluster(), cluster) == ({"state": "ready", "readyWorkerReplicas": 7}, False)
    assert RAYCLUSTER.active_count(applied(RayCluster, cluster, RAYCLUSTER.lost_pods_status(cluster))) == 0


@pytest.mark.parametrize(
    ("managed_by", "can"), [(None, True), ("ray.io/kuberay-operator", True), (c.MULTIKUEUE_MANAGED_BY, False), ("example.com/x", False)]
)
def test_only_a_ray_object_kuberay_would_run_is_handed_to_multikueue(managed_by: str | None, can: bool) -> None:
    assert RAYJOB.can_default_managed_by(managed_by) is can
    assert RAYCLUSTER.can_default_managed_by(managed_by) is can


def test_the_configuration_enables_the_ray_kinds_by_kueues_framework_names() -> None:
    registry = enabled(["batch/job", "ray.io/rayjob", "ray.io/raycluster"])
    assert registry.multikueue_kinds == {"batch/v1, Kind=Job", "ray.io/v1, Kind=RayJob", "ray.io/v1, Kind=RayCluster"}
    assert RAYJOB.cli_names() == ("rayjob", "rayjobs", "rayjob.ray.io", "rayjobs.ray.io")
    assert RAYCLUSTER.cli_names() == ("raycluster", "rayclusters", "raycluster.ray.io", "rayclusters.ray.io")
