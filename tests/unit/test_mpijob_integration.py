"""The MPIJob adapter's pure rules (kubeflow.org/v2beta1, Kueue's pkg/controller/jobs/mpijob):
its PodSets, the webhook's patches, starting with the flavors, restoring, finishing, and the
copy a worker gets and the status that comes back."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import PriorityClass
from manager.api.mpijob import MPIJob
from manager.controllers.webhooks import default_job
from manager.engine.integrations.adapter import PodQuery, construct_workload
from manager.engine.integrations.registry import BY_FRAMEWORK, enabled
from manager.engine.jobs import JobConversionError, admitted_pod_sets, workload_name
from tests.unit.test_controller_logic import patch_of, review
from tests.unit.test_job_integrations import GPU_A

MPIJOB = BY_FRAMEWORK["kubeflow.org/mpijob"]


def an_mpijob(*, workers: int | None = 2, **run_policy: Any) -> MPIJob:
    def replica(replicas: int | None) -> dict[str, Any]:
        template = {"spec": {"nodeSelector": {"user": "choice"}, "containers": [{"name": "c", "image": "mpi"}]}}
        return {"template": template, "restartPolicy": "Never", **({"replicas": replicas} if replicas is not None else {})}

    specs = {"Launcher": replica(None)}  # replicas defaults to 1
    if workers is not None:
        specs["Worker"] = replica(workers)
    return MPIJob.model_validate(
        {
            "metadata": {"name": "pi", "namespace": "ns", "uid": "u", "resourceVersion": "7", "labels": {c.QUEUE_NAME_LABEL: "q"}},
            "spec": {
                "slotsPerWorker": 1,
                "runPolicy": {"suspend": True, "cleanPodPolicy": "Running", **run_policy},
                "mpiReplicaSpecs": specs,
            },
        }
    )


def mpijob_workload(job: MPIJob) -> kueue.Workload:
    wl = construct_workload(MPIJOB, job, workload_priority_classes={}, priority_classes={})
    wl.metadata.name = "mpijob-pi-abcde"
    assignments = [{"name": ps.name, "flavors": {"cpu": "gpu-a"}, "count": ps.count} for ps in wl.spec.pod_sets]
    wl.status = kueue.WorkloadStatus.model_validate({"admission": {"clusterQueue": "cq", "podSetAssignments": assignments}})
    return wl


def merged(target: Any, patch: Any) -> Any:
    """RFC 7386: what the apiserver makes of a merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(out.get(key), value)
    return out


def patched(job: MPIJob, patch: dict[str, Any]) -> MPIJob:
    return MPIJob.model_validate(merged(job.to_dict(), patch))


def json_patched(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `add` operations, which fail (KeyError) when a parent is missing, as the apiserver's do."""
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add"
        *parents, last = op["path"].strip("/").split("/")
        target = out
        for key in parents:
            target = target[key]
        target[last] = op["value"]
    return out


# --- the Workload ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        (2, [("launcher", 1), ("worker", 2)]),  # Kueue's order: Launcher, then Worker
        (None, [("launcher", 1)]),  # a launcher that is its own worker
        (0, [("launcher", 1), ("worker", 0)]),
    ],
)
def test_an_mpijob_asks_for_one_pod_set_per_replica_type_launcher_first(workers: int | None, expected: list[tuple[str, int]]) -> None:
    job = an_mpijob(workers=workers)
    wl = construct_workload(MPIJOB, job, workload_priority_classes={}, priority_classes={})
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == expected
    assert wl.spec.pod_sets[0].template == {"spec": {"nodeSelector": {"user": "choice"}, "containers": [{"name": "c", "image": "mpi"}]}}
    assert wl.metadata.name == workload_name("pi", "u", kind="MPIJob", group="kubeflow.org")
    assert wl.metadata.name.startswith("mpijob-pi-")
    [owner] = wl.metadata.owner_references or []
    assert (owner.api_version, owner.kind, owner.name, owner.controller) == ("kubeflow.org/v2beta1", "MPIJob", "pi", True)


def test_the_order_of_the_replica_specs_as_written_does_not_change_the_pod_sets() -> None:
    raw = an_mpijob().to_dict()
    specs = raw["spec"]["mpiReplicaSpecs"]
    raw["spec"]["mpiReplicaSpecs"] = {"Worker": specs["Worker"], "Launcher": specs["Launcher"]}
    assert [ps.name for ps in MPIJOB.pod_sets(MPIJob.model_validate(raw))] == ["launcher", "worker"]


@pytest.mark.parametrize(
    ("specs", "error"),
    [
        ({}, r"^spec\.mpiReplicaSpecs: Required value: an MPIJob needs a Launcher or a Worker$"),
        ({"Launcher": None}, r"^spec\.mpiReplicaSpecs: Required value"),
        ({"Launcher": {}, "Chief": {}}, r"^spec\.mpiReplicaSpecs\[Chief\]: Unsupported value: the replica types are Launcher and Worker$"),
    ],
)
def test_an_mpijob_without_a_known_replica_type_gets_no_workload(specs: dict[str, Any], error: str) -> None:
    job = MPIJob.model_validate({"metadata": {"name": "pi", "namespace": "ns"}, "spec": {"mpiReplicaSpecs": specs}})
    with pytest.raises(JobConversionError, match=error):
        MPIJOB.pod_sets(job)


def test_an_mpijob_takes_its_scheduling_policys_priority_class_before_its_templates() -> None:
    high = PriorityClass.model_validate({"metadata": {"name": "high"}, "value": 1000})
    low = PriorityClass.model_validate({"metadata": {"name": "low"}, "value": 10})
    classes = {"high": high, "low": low}
    job = an_mpijob()
    worker = job.spec.mpi_replica_specs["Worker"]
    assert worker is not None
    worker.template.spec.priority_class_name = "low"
    assert construct_workload(MPIJOB, job, workload_priority_classes={}, priority_classes=classes).spec.priority == 10
    job = an_mpijob(schedulingPolicy={"priorityClass": "high"})
    worker = job.spec.mpi_replica_specs["Worker"]
    assert worker is not None
    worker.template.spec.priority_class_name = "low"
    wl = construct_workload(MPIJOB, job, workload_priority_classes={}, priority_classes=classes)
    assert wl.spec.priority == 1000 and wl.spec.priority_class_ref is not None and wl.spec.priority_class_ref.name == "high"
    with pytest.raises(JobConversionError, match=r'^spec\.runPolicy\.schedulingPolicy\.priorityClass: PriorityClass "high" not found$'):
        construct_workload(MPIJOB, job, workload_priority_classes={}, priority_classes={"low": low})
    launcher = an_mpijob()
    assert launcher.spec.mpi_replica_specs["Launcher"] is not None
    launcher.spec.mpi_replica_specs["Launcher"].template.spec.priority_class_name = "missing"
    with pytest.raises(JobConversionError, match=r"^spec\.mpiReplicaSpecs\[Launcher\]\.template\.spec\.priorityClassName: "):
        construct_workload(MPIJOB, launcher, workload_priority_classes={}, priority_classes=classes)


# --- the webhook -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "multikueue", "expected_run_policy"),
    [
        ({}, False, {"suspend": True}),  # no runPolicy: made
        ({"runPolicy": {"cleanPodPolicy": "All"}}, False, {"cleanPodPolicy": "All", "suspend": True}),
        ({"runPolicy": {"suspend": True}}, False, {"suspend": True}),
        ({}, True, {"suspend": True, "managedBy": c.MULTIKUEUE_MANAGED_BY}),
        ({"runPolicy": {"suspend": True}}, True, {"suspend": True, "managedBy": c.MULTIKUEUE_MANAGED_BY}),
        # The operator's own name is Kueue's to replace; another controller's is left alone.
        ({"runPolicy": {"managedBy": "kubeflow.org/mpi-operator"}}, True, {"suspend": True, "managedBy": c.MULTIKUEUE_MANAGED_BY}),
        ({"runPolicy": {"managedBy": "example.com/other"}}, True, {"suspend": True, "managedBy": "example.com/other"}),
    ],
)
def test_the_mpijob_webhook_suspends_a_queued_mpijob_through_its_run_policy_and_hands_multikueue_ones_over(
    spec: dict[str, Any], multikueue: bool, expected_run_policy: dict[str, Any]
) -> None:
    queued = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": "ns", "labels": {c.QUEUE_NAME_LABEL: "q"}},
        "spec": {"mpiReplicaSpecs": {"Launcher": {}}, **spec},
    }
    response = default_job(review(queued), uses_multikueue=lambda ns, q: multikueue, adapter=MPIJOB)
    assert response["response"]["allowed"]
    assert json_patched(queued, patch_of(response))["spec"]["runPolicy"] == expected_run_policy


# --- running and stopping ----------------------------------------------------------------------------
def test_starting_an_mpijob_gives_each_replica_type_its_pod_sets_flavor_and_kueues_pod_labels() -> None:
    job = an_mpijob()
    wl = mpijob_workload(job)
    patch = MPIJOB.start_patch(job, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))
    assert patch["metadata"] == {"resourceVersion": "7"}  # the tolerations go whole: only over what was read
    assert patch["spec"]["runPolicy"] == {"suspend": False}
    started = patched(job, patch)
    assert started.spec.run_policy.suspend is False
    for kind, name in (("Launcher", "launcher"), ("Worker", "worker")):
        replica = started.spec.mpi_replica_specs[kind]
        assert replica is not None
        assert replica.template.spec.node_selector == {"user": "choice", "pool": "a"}
        assert replica.template.spec.tolerations is not None
        assert [t.model_dump(exclude_none=True) for t in replica.template.spec.tolerations] == [
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
        assert replica.template.metadata is not None and replica.template.metadata.labels is not None
        assert replica.template.metadata.labels[c.PODSET_LABEL] == name
        assert replica.template.metadata.annotations == {c.WORKLOAD_ANNOTATION: "mpijob-pi-abcde"}
    assert started.to_dict()["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == 2  # the rest as it was
    assert started.to_dict()["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


def test_a_started_mpijob_gets_its_templates_back_when_stopped_and_none_when_they_are_as_written() -> None:
    job = an_mpijob()
    wl = mpijob_workload(job)
    started = patched(job, MPIJOB.start_patch(job, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A})))
    stopped = patched(started, MPIJOB.suspend_patch(started))
    assert MPIJOB.suspend_patch(started) == {"spec": {"runPolicy": {"suspend": True}}}
    assert MPIJOB.is_suspended(stopped) and not MPIJOB.is_suspended(started)
    restore = MPIJOB.restore_patch(stopped, wl)
    assert restore is not None and restore["metadata"] == {"resourceVersion": "7"}
    restored = patched(stopped, restore).to_dict()["spec"]["mpiReplicaSpecs"]
    for replica in restored.values():
        # Its labels and annotations removed, the template keeps an empty metadata: the same template.
        assert replica["template"].pop("metadata") == {}
    assert restored == job.to_dict()["spec"]["mpiReplicaSpecs"]
    assert MPIJOB.restore_patch(job, wl) is None


def test_an_mpijob_whose_template_has_another_value_for_a_flavor_label_is_not_started() -> None:
    job = an_mpijob()
    worker = job.spec.mpi_replica_specs["Worker"]
    assert worker is not None
    worker.template.spec.node_selector = {"pool": "b"}
    wl = mpijob_workload(job)
    with pytest.raises(JobConversionError, match=r'^spec\.mpiReplicaSpecs\[Worker\]\.template\.spec\.nodeSelector: conflict for "pool"'):
        MPIJOB.start_patch(job, wl, admitted_pod_sets(wl, {"gpu-a": GPU_A}))


def test_an_mpijob_admitted_for_other_pod_sets_is_neither_started_nor_restored() -> None:
    job = an_mpijob()
    wl = mpijob_workload(job)
    with pytest.raises(JobConversionError, match=r"^spec\.mpiReplicaSpecs: expecting 2 admitted PodSets, got 1$"):
        MPIJOB.start_patch(job, wl, admitted_pod_sets(wl, {})[:1])
    launcher_only = an_mpijob(workers=None)
    assert MPIJOB.restore_patch(launcher_only, wl) is None


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], None),
        ([{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}], None),
        ([{"type": "Succeeded", "status": "False"}], None),
        (
            [{"type": "Succeeded", "status": "True", "message": "MPIJob ns/pi successfully completed."}],
            (True, "MPIJob ns/pi successfully completed."),
        ),
        ([{"type": "Succeeded", "status": "True"}], (True, "MPIJob finished successfully")),
        ([{"type": "Failed", "status": "True", "message": "1/2 workers are evicted"}], (False, "1/2 workers are evicted")),
        # The first of them that is True decides, as Kueue reads them.
        ([{"type": "Failed", "status": "True", "message": "evicted"}, {"type": "Succeeded", "status": "True"}], (False, "evicted")),
    ],
)
def test_an_mpijob_finishes_with_its_succeeded_or_failed_condition(
    conditions: list[dict[str, Any]], expected: tuple[bool, str] | None
) -> None:
    job = patched(an_mpijob(), {"status": {"conditions": conditions}})
    finished = MPIJOB.finished(job)
    assert (None if finished is None else (finished.succeeded, finished.message)) == expected


@pytest.mark.parametrize(
    ("status", "active", "ready"),
    [
        ({}, 0, False),
        ({"replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": 1}}}, 2, False),
        (
            {
                "replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": 2}},
                "conditions": [{"type": "Running", "status": "True"}],
            },
            3,
            True,
        ),
        (
            {"replicaStatuses": {"Launcher": {"succeeded": 1}, "Worker": {}}, "conditions": [{"type": "Running", "status": "False"}]},
            0,
            False,
        ),
    ],
)
def test_an_mpijobs_running_pods_are_counted_and_it_is_ready_when_running(status: dict[str, Any], active: int, ready: bool) -> None:
    job = patched(an_mpijob(suspend=False), {"status": status})
    assert MPIJOB.active_count(job) == active
    assert MPIJOB.releasable(job) is (active == 0)
    assert MPIJOB.pods_ready(job) is ready


# --- MultiKueue ------------------------------------------------------------------------------------------
def test_the_mpijob_for_a_worker_is_the_whole_mpijob_handed_to_its_operator() -> None:
    job = an_mpijob(managedBy=c.MULTIKUEUE_MANAGED_BY)
    assert MPIJOB.managed_by(job) == c.MULTIKUEUE_MANAGED_BY
    remote = MPIJOB.remote_object(job, workload_name="mpijob-pi-abcde", origin="east")
    assert (remote["apiVersion"], remote["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    assert remote["metadata"] == {
        "name": "pi",
        "namespace": "ns",
        "labels": {c.QUEUE_NAME_LABEL: "q", c.MULTIKUEUE_ORIGIN_LABEL: "east", c.PREBUILT_WORKLOAD_LABEL: "mpijob-pi-abcde"},
        "annotations": {c.PREBUILT_WORKLOAD_ANNOTATION: "mpijob-pi-abcde"},
    }
    assert remote["spec"]["runPolicy"] == {"suspend": True, "cleanPodPolicy": "Running"}  # managedBy cleared
    assert remote["spec"]["mpiReplicaSpecs"] == job.to_dict()["spec"]["mpiReplicaSpecs"]
    assert job.spec.run_policy.managed_by == c.MULTIKUEUE_MANAGED_BY  # the manager's own is untouched


def test_a_worker_mpijobs_status_comes_back_whole_every_time() -> None:
    local = an_mpijob()
    status = {
        "conditions": [{"type": "Running", "status": "True", "reason": "MPIJobRunning"}],
        "replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": 2}},
        "startTime": "2026-11-28T11:00:00Z",
    }
    remote = patched(an_mpijob(), {"status": status})
    assert MPIJOB.status_update(local, remote) == (status, False)
    assert MPIJOB.lost_pods_status(remote) == {"status": {"replicaStatuses": {"Launcher": {"active": 0}, "Worker": {"active": 0}}}}
    assert MPIJOB.active_count(patched(remote, MPIJOB.lost_pods_status(remote))) == 0


@pytest.mark.parametrize(
    ("managed_by", "can"),
    [(None, True), ("kubeflow.org/mpi-operator", True), (c.MULTIKUEUE_MANAGED_BY, False), ("example.com/other", False)],
)
def test_only_an_mpijob_its_own_operator_would_run_is_handed_to_multikueue(managed_by: str | None, can: bool) -> None:
    assert MPIJOB.can_default_managed_by(managed_by) is can


# --- naming ------------------------------------------------------------------------------------------------
def test_kfed_finds_an_mpijobs_pods_by_its_name_and_the_operators_as_kueue_does() -> None:
    wl = mpijob_workload(an_mpijob())
    assert MPIJOB.pod_query(wl) == PodQuery(
        label_selector="training.kubeflow.org/job-name=pi,training.kubeflow.org/operator-name=mpi-operator"
    )
    assert MPIJOB.names(wl, "pi") and not MPIJOB.names(wl, "other")
    assert MPIJOB.cli_names() == ("mpijob", "mpijobs", "mpijob.kubeflow.org", "mpijobs.kubeflow.org")


def test_the_configuration_enables_mpijobs_by_kueues_framework_name() -> None:
    registry = enabled(["batch/job", "kubeflow.org/mpijob"])
    assert registry.by_gvk("kubeflow.org/v2beta1, Kind=MPIJob") is MPIJOB
    assert "kubeflow.org/v2beta1, Kind=MPIJob" in registry.multikueue_kinds
