"""The TrainJob adapter's pure rules (Kubeflow Trainer v2.2.1, Kueue v0.19.2's
pkg/controller/jobs/trainjob): its PodSets from the runtime it names, the webhook's patches,
starting through Kueue's runtime patch, restoring, finishing, and the copy a worker gets and
the status that comes back."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import OwnerReference, Resource
from manager.api.trainjob import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from manager.controllers.webhooks import default_job
from manager.engine.integrations.adapter import PodQuery, construct_workload, related_index_value
from manager.engine.integrations.registry import BY_FRAMEWORK, enabled
from manager.engine.integrations.trainjob import strategic_merge
from manager.engine.jobs import JobConversionError, admitted_pod_sets, workload_name
from tests.unit.test_controller_logic import patch_of, review
from tests.unit.test_job_integrations import GPU_A
from tests.unit.test_mpijob_integration import merged

TRAINJOB = BY_FRAMEWORK["trainer.kubeflow.org/trainjob"]
KUEUE_PATCH = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}


def torch_distributed(**ml_policy: Any) -> ClusterTrainingRuntime:
    """The release's `torch-distributed` ClusterTrainingRuntime (hack/trainer/build.sh copies it)."""
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch"}]}}},
        },
    }
    return ClusterTrainingRuntime.model_validate(
        {
            "metadata": {"name": "torch-distributed"},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {}, **ml_policy}, "template": {"spec": {"replicatedJobs": [node]}}},
        }
    )


def with_initializer(runtime: ClusterTrainingRuntime) -> ClusterTrainingRuntime:
    """A runtime whose dataset initializer runs 2 replicas of 3 pods before the trainer."""
    raw = runtime.to_dict()
    init = {
        "name": "dataset-initializer",
        "replicas": 2,
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
            "spec": {"parallelism": 3, "template": {"spec": {"containers": [{"name": "dataset-initializer", "image": "init"}]}}},
        },
    }
    raw["spec"]["template"]["spec"]["replicatedJobs"].insert(0, init)
    return ClusterTrainingRuntime.model_validate(raw)


def a_trainjob(*, trainer: dict[str, Any] | None = None, patches: list[dict[str, Any]] | None = None, **spec: Any) -> TrainJob:
    return TrainJob.model_validate(
        {
            "metadata": {"name": "tj", "namespace": "ns", "uid": "u", "resourceVersion": "7", "labels": {c.QUEUE_NAME_LABEL: "q"}},
            "spec": {
                "runtimeRef": {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"},
                "suspend": True,
                "managedBy": "trainer.kubeflow.org/trainjob-controller",
                "runtimePatches": patches if patches is not None else [copy.deepcopy(KUEUE_PATCH)],
                **({"trainer": trainer} if trainer is not None else {}),
                **spec,
            },
        }
    )


def loaded(job: TrainJob, *runtimes: Resource) -> TrainJob:
    """The job as the shell gives it to the adapter: with the runtime it names, from the caches."""
    by_key = {(type(r), r.key): r for r in runtimes}
    found: TrainJob = TRAINJOB.with_related(job, find=lambda model, key: by_key.get((model, key)))
    return found


CPU_2 = {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}


def trainjob_workload(job: TrainJob) -> kueue.Workload:
    wl = construct_workload(TRAINJOB, job, workload_priority_classes={}, priority_classes={})
    wl.metadata.name = "trainjob-tj-abcde"
    assignments = [{"name": ps.name, "flavors": {"cpu": "gpu-a"}, "count": ps.count} for ps in wl.spec.pod_sets]
    wl.status = kueue.WorkloadStatus.model_validate({"admission": {"clusterQueue": "cq", "podSetAssignments": assignments}})
    return wl


def patched(job: TrainJob, patch: dict[str, Any]) -> TrainJob:
    return TrainJob.model_validate(merged(job.to_dict(), patch)).with_runtime(job.runtime)


def json_patched(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `add` operations (`-` appends to a list), failing when a parent is missing."""
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add"
        *parents, last = op["path"].strip("/").split("/")
        target: Any = out
        for key in parents:
            target = target[key]
        if last == "-":
            target.append(op["value"])
        else:
            target[last] = op["value"]
    return out


# --- the Workload ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("trainer", "ml_policy", "count"),
    [
        (None, {}, 1),  # torch-distributed: mlPolicy.numNodes 1
        ({"numNodes": 3}, {}, 3),  # the TrainJob's numNodes wins
        (None, {"numNodes": 4}, 4),
        ({"resourcesPerNode": CPU_2}, {"numNodes": None}, 1),  # no numNodes anywhere: 1
    ],
)
def test_a_trainjob_asks_for_one_pod_set_per_replicated_job_of_its_runtime(
    trainer: dict[str, Any] | None, ml_policy: dict[str, Any], count: int
) -> None:
    job = loaded(a_trainjob(trainer=trainer), torch_distributed(**ml_policy))
    wl = construct_workload(TRAINJOB, job, workload_priority_classes={}, priority_classes={})
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("node", count)]
    assert wl.metadata.name == workload_name("tj", "u", kind="TrainJob", group="trainer.kubeflow.org")
    assert wl.metadata.name.startswith("trainjob-tj-")
    [owner] = wl.metadata.owner_references or []
    assert (owner.api_version, owner.kind, owner.name, owner.controller) == ("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", True)


def test_the_trainer_steps_node_container_gets_the_trainjobs_image_command_and_resources_per_node() -> None:
    job = loaded(a_trainjob(trainer={"image": "mine", "command": ["train"], "resourcesPerNode": CPU_2}), torch_distributed())
    [pod_set] = TRAINJOB.pod_sets(job)
    assert pod_set.template == {
        "spec": {"containers": [{"name": "node", "image": "mine", "command": ["train"], "resources": CPU_2}]},
    }


def test_other_steps_count_their_replicas_times_their_parallelism_and_keep_their_template() -> None:
    job = loaded(a_trainjob(trainer={"numNodes": 2, "resourcesPerNode": CPU_2}), with_initializer(torch_distributed()))
    pod_sets = TRAINJOB.pod_sets(job)
    assert [(ps.name, ps.count) for ps in pod_sets] == [("dataset-initializer", 6), ("node", 2)]
    assert pod_sets[0].template == {"spec": {"containers": [{"name": "dataset-initializer", "image": "init"}]}}


def test_other_managers_runtime_patches_are_in_the_pod_sets_and_kueues_is_not() -> None:
    user = {
        "manager": "example.com/user",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "metadata": {"labels": {"team": "a"}},
                                        "spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "node", "env": []}]},
                                    }
                                }
                            },
                        }
                    ]
                }
            }
        },
    }
    kueue_started: dict[str, Any] = copy.deepcopy(KUEUE_PATCH)
    kueue_started["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] = [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}}}
    ]
    job = loaded(a_trainjob(patches=[user, kueue_started]), torch_distributed())
    [pod_set] = TRAINJOB.pod_sets(job)
    assert pod_set.template == {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "node", "image": "pytorch/pytorch", "env": []}]},
    }


def test_strategic_merge_merges_maps_and_named_lists_and_replaces_other_lists() -> None:
    base = {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}], "tolerations": [{"key": "k"}], "m": {"a": 1}}
    patch = {
        "containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}, {"name": "b"}],
        "tolerations": [{"key": "t"}],
        "m": {"b": 2},
    }
    assert strategic_merge(base, patch) == {
        "containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}, {"name": "b"}],
        "tolerations": [{"key": "t"}],
        "m": {"a": 1, "b": 2},
    }
    assert base["m"] == {"a": 1}  # nothing changed in place


def test_a_training_runtime_is_found_in_the_trainjobs_namespace() -> None:
    namespaced = TrainingRuntime.model_validate(
        {"metadata": {"name": "mine", "namespace": "ns"}, "spec": torch_distributed().to_dict()["spec"]}
    )
    elsewhere = TrainingRuntime.model_validate({"metadata": {"name": "mine", "namespace": "other"}, "spec": {}})
    job = a_trainjob(runtimeRef={"name": "mine", "apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime"})
    assert [ps.name for ps in TRAINJOB.pod_sets(loaded(job, namespaced, elsewhere, torch_distributed()))] == ["node"]
    with pytest.raises(JobConversionError, match=r"^spec\.runtimeRef: Not found: runtime 'mine' not found$"):
        TRAINJOB.pod_sets(loaded(job, elsewhere, torch_distributed()))


@pytest.mark.parametrize(
    ("ref", "error"),
    [
        ({"name": "torch-distributed", "apiGroup": "example.com", "kind": "ClusterTrainingRuntime"}, r"unsupported runtime: example\.com/"),
        ({"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org", "kind": "Other"}, r"unsupported runtime: .*/Other$"),
    ],
)
def test_a_trainjob_naming_an_unknown_runtime_kind_gets_no_workload(ref: dict[str, Any], error: str) -> None:
    with pytest.raises(JobConversionError, match=error):
        TRAINJOB.pod_sets(loaded(a_trainjob(runtimeRef=ref), torch_distributed()))


def test_a_trainjob_whose_runtime_is_missing_gets_no_workload_yet() -> None:
    with pytest.raises(JobConversionError, match=r"^spec\.runtimeRef: Not found: runtime 'torch-distributed' not found$"):
        construct_workload(TRAINJOB, loaded(a_trainjob()), workload_priority_classes={}, priority_classes={})


# --- the webhook -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "multikueue", "expected"),
    [
        ({}, False, {"suspend": True, "runtimePatches": [KUEUE_PATCH]}),
        (
            {"runtimePatches": [{"manager": "example.com/user"}]},
            False,
            {"suspend": True, "runtimePatches": [{"manager": "example.com/user"}, KUEUE_PATCH]},
        ),
        ({"suspend": True, "runtimePatches": [KUEUE_PATCH]}, False, {"suspend": True, "runtimePatches": [KUEUE_PATCH]}),
        # The CRD defaults managedBy to the Trainer's controller, which Kueue may replace.
        (
            {"managedBy": "trainer.kubeflow.org/trainjob-controller"},
            True,
            {"suspend": True, "runtimePatches": [KUEUE_PATCH], "managedBy": c.MULTIKUEUE_MANAGED_BY},
        ),
    ],
)
def test_the_trainjob_webhook_suspends_a_queued_trainjob_with_kueues_runtime_patch_and_hands_multikueue_ones_over(
    spec: dict[str, Any], multikueue: bool, expected: dict[str, Any]
) -> None:
    queued = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "ns", "labels": {c.QUEUE_NAME_LABEL: "q"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
    }
    response = default_job(review(queued), uses_multikueue=lambda ns, q: multikueue, adapter=TRAINJOB)
    assert response["response"]["allowed"]
    got = json_patched(queued, patch_of(response))["spec"]
    assert {key: got[key] for key in expected} == expected


# --- running and stopping ----------------------------------------------------------------------------
def test_starting_a_trainjob_fills_kueues_runtime_patch_and_unsuspends_it_in_one_write() -> None:
    user = {"manager": "example.com/user", "time": "2026-01-01T00:00:00Z"}
    job = loaded(a_trainjob(trainer={"numNodes": 2}, patches=[user, copy.deepcopy(KUEUE_PATCH)]), torch_distributed())
    wl = trainjob_workload(job)
    patch = TRAINJOB.start_patch(job, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))
    assert patch["metadata"] == {"resourceVersion": "7"}  # the list goes whole: only over what was read
    started = patched(job, patch)
    assert started.spec.suspend is False
    patches = started.to_dict()["spec"]["runtimePatches"]
    assert patches[0] == user
    [node] = patches[1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]
    assert node["name"] == "node"
    assert pod["spec"] == {"nodeSelector": {"pool": "a"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    assert pod["metadata"]["labels"][c.PODSET_LABEL] == "node"
    assert pod["metadata"]["annotations"] == {c.WORKLOAD_ANNOTATION: "trainjob-tj-abcde"}
    # Kueue's own patch never counts in the pods it asks for.
    assert TRAINJOB.pod_sets(started) == TRAINJOB.pod_sets(job)


def test_a_trainjob_without_kueues_runtime_patch_gets_one_on_start() -> None:
    job = loaded(a_trainjob(patches=[]), torch_distributed())
    wl = trainjob_workload(job)
    started = patched(job, TRAINJOB.start_patch(job, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A})))
    [kueue_patch] = started.to_dict()["spec"]["runtimePatches"]
    assert kueue_patch["manager"] == "kueue.x-k8s.io/manager"


def test_starting_with_other_pod_sets_than_the_runtime_has_fails_to_start() -> None:
    job = loaded(a_trainjob(), with_initializer(torch_distributed()))
    wl = trainjob_workload(loaded(a_trainjob(), torch_distributed()))
    with pytest.raises(JobConversionError, match=r"expecting 2 admitted PodSets, got 1$"):
        TRAINJOB.start_patch(job, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))


def test_a_stopped_trainjob_gets_kueues_runtime_patch_emptied_and_then_needs_no_restore() -> None:
    job = loaded(a_trainjob(patches=[{"manager": "example.com/user"}, copy.deepcopy(KUEUE_PATCH)]), torch_distributed())
    wl = trainjob_workload(job)
    started = patched(job, TRAINJOB.start_patch(job, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A})))
    stopped = patched(started, TRAINJOB.suspend_patch(started))
    assert TRAINJOB.is_suspended(stopped)
    restore = TRAINJOB.restore_patch(stopped, wl)
    assert restore is not None and restore["metadata"] == {"resourceVersion": "7"}
    restored = patched(stopped, restore)
    assert restored.to_dict()["spec"]["runtimePatches"] == [{"manager": "example.com/user"}, KUEUE_PATCH]
    assert TRAINJOB.restore_patch(restored, wl) is None
    assert TRAINJOB.restore_patch(loaded(a_trainjob(patches=[])), wl) is None


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], None),
        ([{"type": "Suspended", "status": "True"}], None),
        ([{"type": "Complete", "status": "True", "message": "jobset completed"}], (True, "jobset completed")),
        ([{"type": "Failed", "status": "True", "message": "jobset failed"}], (False, "jobset failed")),
        ([{"type": "Complete", "status": "False"}, {"type": "Failed", "status": "True"}], (False, "TrainJob failed")),
    ],
)
def test_a_trainjob_finishes_with_its_complete_or_failed_condition(
    conditions: list[dict[str, Any]], expected: tuple[bool, str] | None
) -> None:
    job = TrainJob.model_validate({**a_trainjob().to_dict(), "status": {"conditions": conditions}})
    finished = TRAINJOB.finished(job)
    assert (None if finished is None else (finished.succeeded, finished.message)) == expected


def test_a_trainjob_is_active_while_its_jobs_are_and_ready_when_they_all_are() -> None:
    runtime = torch_distributed()
    job = loaded(TrainJob.model_validate({**a_trainjob().to_dict(), "status": {"jobsStatus": [{"name": "node", "active": 1}]}}), runtime)
    assert TRAINJOB.active_count(job) == 1 and not TRAINJOB.releasable(job)
    assert not TRAINJOB.pods_ready(job)
    ready = loaded(
        TrainJob.model_validate({**job.to_dict(), "status": {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}}), runtime
    )
    assert TRAINJOB.pods_ready(ready)
    assert not TRAINJOB.pods_ready(loaded(ready))  # its runtime unknown
    assert TRAINJOB.active_count(a_trainjob()) == 0


# --- MultiKueue ------------------------------------------------------------------------------------
def test_a_worker_gets_the_whole_spec_without_managed_by_or_kueues_runtime_patch() -> None:
    user = {"manager": "example.com/user"}
    job = a_trainjob(patches=[user, copy.deepcopy(KUEUE_PATCH)], trainer={"numNodes": 2})
    job.spec.managed_by = c.MULTIKUEUE_MANAGED_BY
    remote = TRAINJOB.remote_object(job, workload_name="trainjob-tj-abcde", origin="mgr")
    assert "managedBy" not in remote["spec"]
    assert remote["spec"]["runtimePatches"] == [user]
    assert remote["spec"]["trainer"] == {"numNodes": 2} and remote["spec"]["suspend"] is True
    assert remote["metadata"]["labels"][c.MULTIKUEUE_ORIGIN_LABEL] == "mgr"
    assert remote["metadata"]["labels"][c.PREBUILT_WORKLOAD_LABEL] == "trainjob-tj-abcde"
    only_kueues = TRAINJOB.remote_object(a_trainjob(), workload_name="w", origin="mgr")
    assert "runtimePatches" not in only_kueues["spec"]


def test_a_worker_trainjobs_status_comes_back_whole_and_a_lost_one_has_no_active_job() -> None:
    status = {
        "conditions": [{"type": "Complete", "status": "True", "reason": "Completed"}],
        "jobsStatus": [{"name": "node", "active": 2, "ready": 2}],
    }
    remote = TrainJob.model_validate({**a_trainjob().to_dict(), "status": status})
    assert TRAINJOB.status_update(a_trainjob(), remote) == (status, False)
    assert TRAINJOB.lost_pods_status(remote) == {"status": {"jobsStatus": [{"name": "node", "active": 0, "ready": 0}]}}


# --- its kind among the others -----------------------------------------------------------------------
def test_a_jobset_a_trainjob_owns_is_part_of_that_job_when_trainjobs_are_managed() -> None:
    owner = OwnerReference(api_version="trainer.kubeflow.org/v1alpha1", kind="TrainJob", name="tj", uid="u", controller=True)
    assert enabled(["jobset.x-k8s.io/jobset", "trainer.kubeflow.org/trainjob"]).owns_any([owner])
    assert not enabled(["jobset.x-k8s.io/jobset"]).owns_any([owner])


def test_a_trainjob_is_indexed_by_the_runtime_it_names_so_that_the_runtime_wakes_it() -> None:
    cluster_runtime = torch_distributed()
    assert TRAINJOB.related_index_values(a_trainjob()) == [related_index_value(ClusterTrainingRuntime, cluster_runtime.key)]
    local = a_trainjob(runtimeRef={"name": "mine", "apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime"})
    # A TrainingRuntime of the TrainJob's namespace, under its namespaced key; never a cluster runtime of that name.
    assert TRAINJOB.related_index_values(local) == [related_index_value(TrainingRuntime, "ns/mine")]
    assert related_index_value(TrainingRuntime, "ns/mine") != related_index_value(ClusterTrainingRuntime, "ns/mine")


def test_the_trainjob_kind_reads_its_runtimes_and_finds_its_pods_by_jobset_name() -> None:
    assert TRAINJOB.related_models() == (ClusterTrainingRuntime, TrainingRuntime)
    rules = TRAINJOB.controller_rules()
    assert {
        "apiGroups": ["trainer.kubeflow.org"],
        "resources": ["clustertrainingruntimes", "trainingruntimes"],
        "verbs": ["get", "list", "watch"],
    } in rules
    assert TRAINJOB.cli_names() == ("trainjob", "trainjobs", "trainjob.trainer.kubeflow.org", "trainjobs.trainer.kubeflow.org")
    wl = trainjob_workload(loaded(a_trainjob(), torch_distributed()))
    assert TRAINJOB.pod_query(wl) == PodQuery(label_selector="jobset.sigs.k8s.io/jobset-name=tj")
