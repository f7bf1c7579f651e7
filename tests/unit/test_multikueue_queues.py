"""Queues that follow the manager (`manager.multikueue.queues`), as pure rules: when a config
propagates, what the manager may call its own, what it removes from a worker and when, and how
drift is said."""

from __future__ import annotations

import dataclasses

import pytest

from manager.api.kueue import LocalQueue
from manager.multikueue.capacity import fit_on, workload_info
from manager.multikueue.queues import (
    PROPAGATE_QUEUES_ANNOTATION,
    Owned,
    WorkerQueues,
    is_ours,
    local_queue_manifest,
    missing_cluster_queues,
    namespace_manifest,
    ownership_labels,
    plan_cleanup,
    propagation_on,
    queues_condition,
    with_propagated_queue,
)
from tests.unit.test_multikueue_capacity import as_read
from tests.unit.test_multikueue_plan import ONE_CPU, local, quotas


@pytest.mark.parametrize(
    ("annotations", "default", "expected"),
    [
        (None, False, False),
        (None, True, True),
        ({PROPAGATE_QUEUES_ANNOTATION: "true"}, False, True),
        ({PROPAGATE_QUEUES_ANNOTATION: " False "}, True, False),
        ({"other": "true"}, False, False),
    ],
)
def test_a_configs_annotation_overrides_the_configuration(annotations: dict[str, str] | None, default: bool, expected: bool) -> None:
    assert propagation_on(annotations, default=default, config_name="mk") is expected


def test_a_bad_annotation_is_one_line_naming_the_config_and_the_field() -> None:
    with pytest.raises(ValueError) as err:
        propagation_on({PROPAGATE_QUEUES_ANNOTATION: "yes"}, default=False, config_name="fleet")
    assert str(err.value) == (
        'multikueueconfig/fleet: metadata.annotations[kfed.dev/propagate-queues]: Invalid value: \'yes\': must be "true" or "false"'
    )


@pytest.mark.parametrize(
    ("labels", "ours"),
    [
        (ownership_labels("mgr-a"), True),
        (ownership_labels("mgr-b"), False),  # another manager's: never removed by this one
        ({"app.kubernetes.io/managed-by": "kfed"}, False),  # one mark alone may be someone else's
        ({"kfed.dev/propagated-by": "mgr-a"}, False),
        (None, False),
    ],
)
def test_only_what_carries_both_marks_of_this_manager_is_its_own(labels: dict[str, str] | None, ours: bool) -> None:
    assert is_ours(labels, "mgr-a") is ours


def test_what_the_manager_creates_carries_its_marks_and_the_managers_cluster_queue_name() -> None:
    ns = namespace_manifest("team-a", origin="mgr-a")
    lq = local_queue_manifest("team-a", "user-queue", cluster_queue="cq", origin="mgr-a")
    assert is_ours(ns["metadata"]["labels"], "mgr-a") and is_ours(lq["metadata"]["labels"], "mgr-a")
    assert (lq["metadata"]["namespace"], lq["metadata"]["name"], lq["spec"]) == ("team-a", "user-queue", {"clusterQueue": "cq"})


def worker(**kw: object) -> WorkerQueues:
    base: dict[str, object] = {
        "namespaces": [Owned("team-a", "ns-a"), Owned("team-b", "ns-b")],
        "local_queues": [Owned("team-a/user-queue", "lq-a"), Owned("team-b/user-queue", "lq-b")],
        "all_local_queues": ["team-a/user-queue", "team-b/user-queue"],
    }
    base.update(kw)
    return WorkerQueues(**base)  # type: ignore[arg-type]


def test_unused_queues_and_then_their_empty_namespaces_are_removed() -> None:
    cleanup = plan_cleanup(worker(), needed=[])
    assert [o.name for o in cleanup.local_queues] == ["team-a/user-queue", "team-b/user-queue"]
    assert [o.name for o in cleanup.namespaces] == ["team-a", "team-b"]


def test_a_queue_a_workload_uses_or_the_manager_still_needs_stays_with_its_namespace() -> None:
    cleanup = plan_cleanup(worker(workloads=[("team-a", "user-queue")]), needed=[("team-b", "user-queue")])
    assert cleanup.local_queues == [] and cleanup.namespaces == []


def test_a_namespace_with_our_job_still_stopping_or_someone_elses_queue_stays() -> None:
    with_job = plan_cleanup(worker(jobs=["team-a"]), needed=[])
    assert [o.name for o in with_job.namespaces] == ["team-b"]
    foreign = plan_cleanup(worker(all_local_queues=["team-a/user-queue", "team-b/user-queue", "team-b/theirs"]), needed=[])
    assert [o.name for o in foreign.local_queues] == ["team-a/user-queue", "team-b/user-queue"]
    assert [o.name for o in foreign.namespaces] == ["team-a"]


def test_drift_names_each_queue_and_its_missing_cluster_queue() -> None:
    drift = missing_cluster_queues([("a/lq", "cq"), ("b/lq", "gone"), ("c/lq", "also-gone")], ["cq"])
    assert drift == ["LocalQueue b/lq points at ClusterQueue gone", "LocalQueue c/lq points at ClusterQueue also-gone"]
    status, reason, message = queues_condition(drift)
    assert (status, reason) == ("False", "ClusterQueueMissing")
    assert message == f"{drift[0]}; {drift[1]}, which the worker does not have"
    assert queues_condition([])[:2] == ("True", "InSync")


def test_a_long_drift_says_how_many_more() -> None:
    drift = [f"LocalQueue ns/lq{i} points at ClusterQueue cq{i}" for i in range(5)]
    assert queues_condition(drift)[2].endswith("cq2 (and 2 more), which the worker does not have")


def manager_queue(cluster_queue: str = "cq") -> LocalQueue:
    return LocalQueue.model_validate({"metadata": {"name": "user-queue", "namespace": "team-z"}, "spec": {"clusterQueue": cluster_queue}})


def test_a_worker_is_judged_with_the_queue_the_manager_would_create_there() -> None:
    base = quotas(4)
    judged = with_propagated_queue(base, manager_queue(), origin="mgr-a")
    added = [lq for lq in judged.local_queues if lq.key == "team-z/user-queue"]
    assert len(added) == 1 and added[0].spec.cluster_queue == "cq" and is_ours(added[0].metadata.labels, "mgr-a")
    assert len(base.local_queues) == 1  # the worker's own view is not changed


def test_a_queue_the_worker_already_has_is_used_as_it_is() -> None:
    base = quotas(4)  # serves ns/user-queue
    theirs = LocalQueue.model_validate({"metadata": {"name": "user-queue", "namespace": "ns"}, "spec": {"clusterQueue": "elsewhere"}})
    assert with_propagated_queue(base, theirs, origin="mgr-a") is base


def test_a_worker_judged_with_the_propagated_queue_is_not_judged_by_its_remembered_specs() -> None:
    """The quota tree remembered for a worker's own queue specs (its spec key) lacks the queue
    the manager would create there: judged with it, the worker must fit, before or after."""
    own = as_read(quotas(4))
    assert own.tree_key is not None  # remembered
    wl = workload_info(local(spec={**ONE_CPU, "queueName": "user-queue"}))
    moved = dataclasses.replace(wl, namespace="team-z")
    assert fit_on(moved, own).missing  # the worker has no team-z/user-queue of its own
    judged = with_propagated_queue(own, manager_queue(), origin="mgr-a")
    assert fit_on(moved, judged).now
    assert fit_on(moved, own).missing  # and the worker's own view is remembered as it is
