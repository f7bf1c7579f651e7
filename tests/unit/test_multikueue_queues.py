"""Queues that follow the manager (`manager.multikueue.rules.queues`), as pure rules: when a config
propagates, what the manager may call its own, what it removes from a worker and when, and how
drift is said."""

from __future__ import annotations

import dataclasses

import pytest

from manager.api.config import Configuration
from manager.api.kueue import LocalQueue
from manager.api.meta import LabelSelector
from manager.multikueue.rules.capacity import fit_on, workload_info
from manager.multikueue.rules.queues import (
    ACCEPT_QUEUES_LABEL,
    PROPAGATE_QUEUES_ANNOTATION,
    Acceptance,
    Held,
    Listing,
    Owned,
    WorkerQueues,
    drift_listing,
    idle_namespaces,
    is_ours,
    kept_condition,
    kept_listing,
    local_queue_manifest,
    manager_selects,
    missing_cluster_queues,
    namespace_manifest,
    others_in,
    ownership_labels,
    plan_cleanup,
    propagation_on,
    queues_condition,
    with_propagated_queue,
    worker_accepts,
)
from manager.multikueue.rules.settings import Settings
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


# What Kubernetes puts in every namespace, and the cleanup never counts as someone else's.
WHAT_EVERY_NAMESPACE_HOLDS = [
    Held("ServiceAccount", "default", "sa-default"),
    Held("ConfigMap", "kube-root-ca.crt", "cm-root"),
    Held("Secret", "default-token-x7k2p", "secret-default", annotations={"kubernetes.io/service-account.name": "default"}),
]


def worker(**kw: object) -> WorkerQueues:
    base: dict[str, object] = {
        "namespaces": [Owned("team-a", "ns-a"), Owned("team-b", "ns-b")],
        "local_queues": [Owned("team-a/user-queue", "lq-a"), Owned("team-b/user-queue", "lq-b")],
        "all_local_queues": ["team-a/user-queue", "team-b/user-queue"],
        "held": {"team-a": WHAT_EVERY_NAMESPACE_HOLDS, "team-b": WHAT_EVERY_NAMESPACE_HOLDS},
    }
    base.update(kw)
    return WorkerQueues(**base)  # type: ignore[arg-type]


def test_unused_queues_and_then_their_empty_namespaces_are_removed() -> None:
    cleanup = plan_cleanup(worker(), needed=[], origin="mgr-a")
    assert [o.name for o in cleanup.local_queues] == ["team-a/user-queue", "team-b/user-queue"]
    assert [o.name for o in cleanup.namespaces] == ["team-a", "team-b"]


def test_a_queue_a_workload_uses_or_the_manager_still_needs_stays_with_its_namespace() -> None:
    cleanup = plan_cleanup(worker(workloads=[("team-a", "user-queue")]), needed=[("team-b", "user-queue")], origin="mgr-a")
    assert cleanup.local_queues == [] and cleanup.namespaces == []


def test_a_namespace_with_our_job_still_stopping_or_someone_elses_queue_stays() -> None:
    with_job = plan_cleanup(worker(jobs=["team-a"]), needed=[], origin="mgr-a")
    assert [o.name for o in with_job.namespaces] == ["team-b"]
    foreign = plan_cleanup(worker(all_local_queues=["team-a/user-queue", "team-b/user-queue", "team-b/theirs"]), needed=[], origin="mgr-a")
    assert [o.name for o in foreign.local_queues] == ["team-a/user-queue", "team-b/user-queue"]
    assert [o.name for o in foreign.namespaces] == ["team-a"]
    assert foreign.kept == [("team-b", "holds LocalQueue theirs, which kfed did not create")]


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


# --- both sides opt in ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("namespace", "labels", "selector", "selected"),
    [
        ("team-a", None, None, True),  # the default: every namespace...
        ("kube-system", None, None, False),  # ...but the control plane's
        ("kube-public", None, None, False),
        ("kfed-system", None, None, False),  # ...and kfed's own
        ("team-a", {"propagate": "yes"}, LabelSelector(match_labels={"propagate": "yes"}), True),
        ("team-b", {"propagate": "no"}, LabelSelector(match_labels={"propagate": "yes"}), False),
        ("team-c", None, LabelSelector(match_labels={"propagate": "yes"}), False),
    ],
)
def test_the_manager_propagates_only_the_namespaces_its_selector_selects(
    namespace: str, labels: dict[str, str] | None, selector: LabelSelector | None, selected: bool
) -> None:
    assert manager_selects(namespace, labels, selector=selector) is selected


OPTED_IN = {ACCEPT_QUEUES_LABEL: "true"}


@pytest.mark.parametrize(
    ("case", "namespace", "labels", "exists", "bound", "expected"),
    [
        ("missing: kfed creates it", "team-a", None, False, False, Acceptance(create_namespace=True)),
        ("the administrator's, opted in", "team-a", OPTED_IN, True, False, Acceptance()),
        ("created by kfed (any manager)", "team-a", ownership_labels("mgr-b"), True, False, Acceptance()),
        ("bound credential: its namespaces were named by binding them", "team-a", None, True, True, Acceptance()),
    ],
)
def test_a_worker_accepts_a_namespace_kfed_creates_or_its_administrator_opted_in(
    case: str, namespace: str, labels: dict[str, str] | None, exists: bool, bound: bool, expected: Acceptance
) -> None:
    assert worker_accepts(namespace, labels, exists=exists, bound=bound) == expected, case


@pytest.mark.parametrize(
    ("case", "namespace", "labels", "exists", "bound", "deny", "why"),
    [
        ("exists without the label", "team-a", {"team": "a"}, True, False, (), 'without the label kfed.dev/accept-queues: "true"'),
        ("label not true", "team-a", {ACCEPT_QUEUES_LABEL: "yes"}, True, False, (), "without the label"),
        ("one kfed mark alone", "team-a", {"app.kubernetes.io/managed-by": "kfed"}, True, False, (), "without the label"),
        ("kube-system, even opted in", "kube-system", OPTED_IN, True, False, (), "never propagated to"),
        ("kube-anything, missing", "kube-node-lease", None, False, False, (), "never propagated to"),
        ("kfed-system", "kfed-system", OPTED_IN, True, False, (), "never propagated to"),
        ("kube-system on a bound credential", "kube-system", None, True, True, (), "never propagated to"),
        ("the deny list, by name", "cert-manager", OPTED_IN, True, False, ("cert-manager",), "deniedNamespaces (cert-manager)"),
        ("the deny list, by prefix", "gpu-operator", None, False, False, ("gpu-*",), "deniedNamespaces (gpu-*)"),
        ("the deny list on a bound credential", "ops", None, True, True, ("ops",), "deniedNamespaces (ops)"),
    ],
)
def test_a_worker_refuses_a_namespace_not_opted_in_or_never_to_be_propagated_to(
    case: str, namespace: str, labels: dict[str, str] | None, exists: bool, bound: bool, deny: tuple[str, ...], why: str
) -> None:
    found = worker_accepts(namespace, labels, exists=exists, bound=bound, deny_list=deny)
    assert not found.create_namespace, case
    assert why in found.refused and f'namespace "{namespace}"' in found.refused, (case, found.refused)


def test_a_name_close_to_the_deny_list_is_not_refused() -> None:
    assert worker_accepts("cert-manager-2", None, exists=False, bound=False, deny_list=("cert-manager",)) == Acceptance(
        create_namespace=True
    )
    assert worker_accepts("kubeflow", None, exists=False, bound=False) == Acceptance(create_namespace=True)  # kube- is the prefix


# --- the cleanup deletes only what kfed created ---------------------------------------------------------
JOB_UID = "job-ours"


@pytest.mark.parametrize(
    ("case", "item", "counted"),
    [
        ("the default ServiceAccount", Held("ServiceAccount", "default", "u1"), False),
        ("another ServiceAccount", Held("ServiceAccount", "builder", "u2"), True),
        ("the root CA ConfigMap", Held("ConfigMap", "kube-root-ca.crt", "u3"), False),
        ("another ConfigMap", Held("ConfigMap", "settings", "u4"), True),
        ("the default ServiceAccount's legacy token", WHAT_EVERY_NAMESPACE_HOLDS[2], False),
        ("another token", Held("Secret", "ci-token", "u5", annotations={"kubernetes.io/service-account.name": "ci"}), True),
        ("an administrator's Secret", Held("Secret", "registry-creds", "u6"), True),
        ("a RoleBinding", Held("RoleBinding", "team-admins", "u7"), True),
        ("a Secret marked as another manager's", Held("Secret", "x", "u8", labels=ownership_labels("mgr-b")), True),
        ("a LocalQueue this manager created", Held("LocalQueue", "user-queue", "u9", labels=ownership_labels("mgr-a")), False),
        ("a copy of this manager's", Held("Workload", "wl", "u10", labels={"kueue.x-k8s.io/multikueue-origin": "mgr-a"}), False),
        ("another manager's copy", Held("Workload", "wl", "u11", labels={"kueue.x-k8s.io/multikueue-origin": "mgr-b"}), True),
        ("our job", Held("Job", "train", JOB_UID), False),
        ("a pod of our job", Held("Pod", "train-0", "u12", owners=(JOB_UID,)), False),
        ("someone's Job", Held("Job", "backup", "u13"), True),
        ("a pod of no one's", Held("Pod", "debug", "u14"), True),
    ],
)
def test_what_kfed_did_not_create_is_counted_and_what_comes_with_a_namespace_is_not(case: str, item: Held, counted: bool) -> None:
    assert others_in([item], origin="mgr-a", ours=[JOB_UID]) == ([f"{item.kind} {item.name}"] if counted else []), case


def test_a_pod_owned_through_a_chain_of_our_objects_is_ours_in_any_order() -> None:
    items = [
        Held("Pod", "ls-0-0", "pod", owners=("child",)),  # listed before its owner
        Held("Job", "ls-0", "child", owners=("jobset",)),
        Held("JobSet", "ls", "jobset"),
    ]
    assert others_in(items, origin="mgr-a", ours=["jobset"]) == []
    assert others_in(items, origin="mgr-a", ours=[]) == ["Job ls-0", "JobSet ls", "Pod ls-0-0"]


def test_an_object_whose_owners_are_gone_is_being_collected_and_not_counted() -> None:
    orphan = Held("Pod", "train-0", "pod", owners=("job-deleted",))
    assert others_in([orphan], origin="mgr-a") == []
    owned_by_theirs = [Held("Pod", "backup-0", "pod", owners=("job-theirs",)), Held("Job", "backup", "job-theirs")]
    assert others_in(owned_by_theirs, origin="mgr-a") == ["Job backup", "Pod backup-0"]


def test_a_namespace_holding_an_administrators_secret_and_rolebinding_is_kept_and_says_why() -> None:
    planted = [*WHAT_EVERY_NAMESPACE_HOLDS, Held("Secret", "registry-creds", "s1"), Held("RoleBinding", "team-admins", "rb1")]
    cleanup = plan_cleanup(worker(held={"team-a": planted, "team-b": WHAT_EVERY_NAMESPACE_HOLDS}), needed=[], origin="mgr-a")
    assert [o.name for o in cleanup.local_queues] == ["team-a/user-queue", "team-b/user-queue"]  # ours still go
    assert [o.name for o in cleanup.namespaces] == ["team-b"]
    assert cleanup.kept == [("team-a", "holds RoleBinding team-admins, Secret registry-creds, which kfed did not create")]


def test_a_namespace_whose_contents_could_not_be_read_is_never_deleted() -> None:
    cleanup = plan_cleanup(worker(held={"team-b": WHAT_EVERY_NAMESPACE_HOLDS}), needed=[], origin="mgr-a")
    assert [o.name for o in cleanup.namespaces] == ["team-b"]
    assert cleanup.kept == [("team-a", "its contents could not be read")]


def test_a_namespace_kfed_still_uses_is_not_read_nor_said_to_be_kept() -> None:
    planted = [Held("Secret", "registry-creds", "s1")]
    busy = worker(held={"team-a": planted, "team-b": []}, jobs=["team-a"])
    assert idle_namespaces(busy, needed=[]) == ["team-b"]  # only it is read
    cleanup = plan_cleanup(busy, needed=[], origin="mgr-a")
    assert [o.name for o in cleanup.namespaces] == ["team-b"] and cleanup.kept == []
    assert idle_namespaces(worker(), needed=[("team-a", "user-queue")]) == ["team-b"]


def test_the_kept_namespaces_condition_names_each_and_why() -> None:
    status, reason, message = kept_condition([("team-a", "holds Secret s, which kfed did not create")])
    assert (status, reason) == ("True", "HoldsObjectsKfedDidNotCreate")
    assert message == "namespace team-a kept: holds Secret s, which kfed did not create"
    assert kept_condition([])[:2] == ("False", "NoneKept")
    many = kept_condition([(f"ns{i}", "its contents could not be read") for i in range(5)])[2]
    assert many.endswith("(and 2 more)") and "ns3" not in many


@pytest.mark.parametrize("count", [1, 3, 5], ids=["one", "all-named", "some-counted"])
def test_what_the_conditions_say_is_read_back_entry_by_entry_with_the_count_of_the_unnamed(count: int) -> None:
    """The read API tells each reader only some entries: it must find each entry's namespace
    in exactly what the writer wrote (one home for both)."""
    drift = missing_cluster_queues([(f"team-{i}/user-queue", f"cq{i}") for i in range(count)], [])
    assert drift_listing(queues_condition(drift)[2]) == Listing(
        tuple((f"team-{i}", drift[i]) for i in range(min(count, 3))), max(0, count - 3)
    )
    kept = [(f"team-{i}", "holds RoleBinding team-admins, Secret s, which kfed did not create") for i in range(count)]
    assert kept_listing(kept_condition(kept)[2]) == Listing(
        tuple((f"team-{i}", f"namespace team-{i} kept: {kept[i][1]}") for i in range(min(count, 3))), max(0, count - 3)
    )


@pytest.mark.parametrize(
    "message",
    [
        "LocalQueue team-a/user-queue points at a ClusterQueue, which the worker does not have",  # not the writer's words
        "LocalQueue team-a/user-queue/x points at ClusterQueue cq, which the worker does not have",
    ],
)
def test_a_drift_entry_whose_namespace_cannot_be_told_is_no_ones(message: str) -> None:
    assert drift_listing(message).entries == ((("", message.removesuffix(", which the worker does not have")),))


# --- the Configuration -----------------------------------------------------------------------------------
def settings_of(propagation: dict[str, object]) -> Settings:
    config = Configuration.model_validate({"multiKueue": {"propagateQueues": True, "queuePropagation": propagation}})
    return Settings.from_configuration(config)


def test_the_configuration_carries_the_selector_and_the_deny_list() -> None:
    found = settings_of({"namespaceSelector": {"matchLabels": {"propagate": "yes"}}, "deniedNamespaces": ["cert-manager", "gpu-*"]})
    assert found.propagation_namespace_selector == LabelSelector(match_labels={"propagate": "yes"})
    assert found.propagation_denied_namespaces == ("cert-manager", "gpu-*")
    default = Settings.from_configuration(Configuration.model_validate({"multiKueue": {"propagateQueues": True}}))
    assert default.propagation_namespace_selector is None and default.propagation_denied_namespaces == ()


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            {"key": "a", "operator": "Equals", "values": ["b"]},
            "multiKueue.queuePropagation.namespaceSelector.matchExpressions[0].operator: Unsupported value: 'Equals': "
            "supported values: In, NotIn, Exists, DoesNotExist",
        ),
        (
            {"key": "a", "operator": "In"},
            "multiKueue.queuePropagation.namespaceSelector.matchExpressions[0].values: Required value: "
            "must be specified when operator is In",
        ),
    ],
)
def test_a_bad_namespace_selector_is_one_line_naming_the_field(expression: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as err:
        settings_of({"namespaceSelector": {"matchExpressions": [expression]}})
    assert str(err.value) == message
