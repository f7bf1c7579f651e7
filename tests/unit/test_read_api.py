"""kfed's read API (`reads.kfed.dev`): what the manager answers for the workers, and that the CLI
shows from it exactly what it showed when it read the workers itself."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.cli import views
from manager.cli.explain import explain, explanation_text
from manager.controllers.visibility import (
    ALLOWED_FOR,
    AUTHENTICATED_FOR,
    DENIED_FOR,
    VISIBILITY_GROUP,
    ReviewCache,
    api_services,
    forbidden_message,
)
from manager.kube.errors import ForbiddenError, InvalidError, KubeError, NotFoundError, TransientError
from manager.multikueue.controllers.read_api import POD_LOG, attributes, worker_error
from manager.multikueue.rules import reads
from manager.multikueue.rules.capacity import WorkerQuotas
from manager.multikueue.rules.queues import KEPT_CONDITION, QUEUES_CONDITION, kept_condition, missing_cluster_queues, queues_condition
from tests.unit.test_cli_explain import CQ, MK, cond, copy, workload

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def cluster_object(status: str, reason: str, message: str = "") -> kueue.MultiKueueCluster:
    return kueue.MultiKueueCluster.model_validate(
        {
            "metadata": {"name": "worker1"},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": "w1"}}},
            "status": {"conditions": [cond("Active", status, reason, message)]},
        }
    )


def worker_cq(nominal: str, reserved: str) -> kueue.ClusterQueue:
    group = {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": nominal}]}]}
    return kueue.ClusterQueue.model_validate(
        {
            "metadata": {"name": "cq"},
            "spec": {"resourceGroups": [group]},
            "status": {"flavorsReservation": [{"name": "f", "resources": [{"name": "cpu", "total": reserved}]}]},
        }
    )


def our_copy(name: str, *conditions: dict[str, Any]) -> kueue.Workload:
    found = copy(*conditions)
    found.metadata.name = name
    found.metadata.labels = {c.MULTIKUEUE_ORIGIN_LABEL: "multikueue"}
    return found


def test_a_workers_health_and_capacity_read_back_are_what_the_cli_printed_from_the_worker() -> None:
    copies = [our_copy("a", cond("Admitted", "True")), our_copy("b"), our_copy("done", cond("Finished", "True"))]
    seen = reads.WorkerSighting(cluster_object("True", "Active"), connected=True, copies=copies, cluster_queues=[worker_cq("8", "3")])
    item = reads.cluster_item(seen, origin="multikueue", readable=(), worker_words=True)
    shown = views.worker_view_from(item)
    direct = views.worker_view(seen.cluster)
    views.add_worker_queues(direct, [worker_cq("8", "3")], copies, origin="multikueue")
    direct.reachable = True
    assert shown == direct
    assert (shown.running, shown.pending, shown.usage) == (1, 1, {"cpu": (3000, 8000)})
    assert shown.flavors == {("f", "cpu"): (3000, 8000, 0)}, "and per flavor, with what is borrowed"


def propagating_worker(drifted: list[str], kept: list[str]) -> kueue.MultiKueueCluster:
    """worker1, Active, whose propagated LocalQueue `user-queue` in each of `drifted` lacks its
    ClusterQueue, and which keeps each of `kept`: its conditions as the manager writes them."""
    drift = queues_condition(missing_cluster_queues([(f"{ns}/user-queue", "gpu") for ns in drifted], []))
    keeps = kept_condition([(ns, "holds Secret creds, which kfed did not create") for ns in kept])
    conditions = [cond("Active", "True", "Active"), cond(QUEUES_CONDITION, *drift), cond(KEPT_CONDITION, *keeps)]
    spec = {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": "w1"}}}
    return kueue.MultiKueueCluster.model_validate({"metadata": {"name": "worker1"}, "spec": spec, "status": {"conditions": conditions}})


def drift_of(*namespaces: str) -> str:
    return "; ".join(f"LocalQueue {ns}/user-queue points at ClusterQueue gpu" for ns in namespaces)


def kept_of(*namespaces: str) -> str:
    return "; ".join(f"namespace {ns} kept: holds Secret creds, which kfed did not create" for ns in namespaces)


WHICH = ", which the worker does not have"
UNREAD = "in namespaces you may not read"


@pytest.mark.parametrize(
    ("drifted", "kept", "readable", "drift_shown", "kept_shown"),
    [
        pytest.param(
            ["team-a", "team-b"], ["team-b"], {"team-a", "team-b"}, drift_of("team-a", "team-b") + WHICH, kept_of("team-b"), id="reads-all"
        ),
        pytest.param(
            ["team-a", "team-b"], ["team-b"], {"team-a"}, f"{drift_of('team-a')}{WHICH}; and 1 more {UNREAD}", f"1 {UNREAD}", id="reads-one"
        ),
        pytest.param(["team-a", "team-b", "team-c"], [], set(), f"3 {UNREAD}", "", id="reads-none"),
        pytest.param([], [], set(), "", "", id="in-sync"),
        pytest.param(
            ["team-a", "team-b", "team-c", "team-d", "team-e"],
            ["team-a"],
            {"team-c"},
            f"{drift_of('team-c')} (and 2 more){WHICH}; and 2 more {UNREAD}",
            f"1 {UNREAD}",
            id="past-the-named-ones-counted-as-the-writer-counted",
        ),
        pytest.param(["team-b"], [], {"team-a", "team-b/x", "team"}, f"1 {UNREAD}", "", id="no-prefix-match"),
    ],
)
def test_clusters_names_to_a_reader_only_the_namespaces_it_may_read_and_counts_the_others(
    drifted: list[str], kept: list[str], readable: set[str], drift_shown: str, kept_shown: str
) -> None:
    cluster = propagating_worker(drifted, kept)
    assert reads.namespaces_named([cluster]) == sorted({*drifted[:3], *kept}), "each named namespace is asked about once"
    item = reads.cluster_item(
        reads.WorkerSighting(cluster, connected=True, copies=[]), origin="multikueue", readable=readable, worker_words=False
    )
    assert (item["queueDrift"], item["keptNamespaces"]) == (drift_shown, kept_shown)
    hidden = {*drifted, *kept} - readable
    assert not any(ns in json.dumps(item) for ns in hidden), "no namespace of another tenant, anywhere in the answer"


def test_a_reader_who_may_read_every_namespace_named_sees_what_the_administrator_sees_on_the_object() -> None:
    cluster = propagating_worker(["team-a", "team-b"], ["team-c"])
    item = reads.cluster_item(
        reads.WorkerSighting(cluster, connected=True, copies=[]),
        origin="multikueue",
        readable=reads.namespaces_named([cluster]),
        worker_words=True,
    )
    shown, direct = views.worker_view_from(item), views.worker_view(cluster)
    assert (shown.queue_drift, shown.kept_namespaces) == (direct.queue_drift, direct.kept_namespaces) != ("", "")


def test_a_workers_capacity_per_flavor_sums_its_queues_and_what_they_borrow() -> None:
    lender = worker_cq("8", "2")
    borrower = kueue.ClusterQueue.model_validate(
        {
            "metadata": {"name": "cq2"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "4"}]},
                            {"name": "spot", "resources": [{"name": "cpu", "nominalQuota": "16"}]},
                        ],
                    }
                ]
            },
            "status": {"flavorsReservation": [{"name": "f", "resources": [{"name": "cpu", "total": "6", "borrowed": "2"}]}]},
        }
    )
    assert reads.flavor_usage([lender, borrower]) == {("f", "cpu"): (8000, 12000, 2000), ("spot", "cpu"): (0, 16000, 0)}
    assert reads.worker_usage([lender, borrower]) == {"cpu": (8000, 28000)}


def test_a_worker_the_manager_is_not_connected_to_is_unreachable_with_the_last_error() -> None:
    seen = reads.WorkerSighting(cluster_object("False", "ClientConnectionFailed"), connected=False, error="dial tcp: refused")
    shown = views.worker_view_from(reads.cluster_item(seen, origin="multikueue", readable=(), worker_words=True))
    assert (shown.reachable, shown.error, shown.reason) == (False, "unreachable: dial tcp: refused", "ClientConnectionFailed")
    assert views.cluster_rows([shown], now=NOW)[0]["RUNNING"] == "-"


def test_a_worker_s_own_words_are_told_only_to_a_reader_of_its_multikueue_cluster() -> None:
    """A worker's refusal may name the namespace it refused: a fleet reader who may not read the
    MultiKueueCluster (where the same words are) gets the reason and the counts, not the words."""
    cluster = cluster_object("False", "ClientConnectionFailed")
    cluster.status.conditions[0].message = 'pods is forbidden: cannot list resource "pods" in the namespace "team-b"'  # type: ignore[union-attr,index]
    seen = reads.WorkerSighting(cluster, connected=False, error='forbidden in the namespace "team-b"')
    told = reads.cluster_item(seen, origin="multikueue", readable=(), worker_words=False)
    assert "team-b" not in json.dumps(told)
    assert (told["reason"], told["reachable"], told["error"], told["message"]) == (
        "ClientConnectionFailed",
        False,
        f"unreachable ({reads.WITHHELD})",
        reads.WITHHELD,
    )
    whole = reads.cluster_item(seen, origin="multikueue", readable=reads.EVERY_NAMESPACE, worker_words=True)
    assert "team-b" in whole["error"] and "team-b" in whole["message"]


def test_the_verdicts_the_manager_serves_explain_the_job_as_the_workers_copies_did() -> None:
    wl = workload(
        {
            "conditions": [cond("QuotaReserved", "True")],
            "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "flavors": {"cpu": "f"}}]},
            "admissionChecks": [{"name": "mk", "state": "Pending", "message": "", "lastTransitionTime": "2026-11-21T11:00:00Z"}],
            "nominatedClusterNames": ["worker1", "worker2"],
        }
    )
    remotes = [
        reads.Remote("worker1", True, copy=copy(cond("QuotaReserved", "False", "Pending", "LocalQueue user-queue doesn't exist"))),
        reads.Remote("worker2", False, "ClientConnectionFailed", error="dial tcp: refused"),
    ]
    lq = kueue.LocalQueue.model_validate({"metadata": {"name": "user-queue", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}})
    view = views.job_views([wl], checks={"mk": MK}, local_queues={lq.key: lq})[0]
    document = reads.verdicts_document(wl, remotes)
    assert document["nominated"] == ["worker1", "worker2"] and document["quotaReserved"] is True
    from_api = explanation_text(explain(view=view, wl=wl, cq=CQ, verdicts=reads.verdicts_from(document)))
    from_copies = explanation_text(explain(view=view, wl=wl, cq=CQ, remotes=remotes))
    assert from_api == from_copies
    assert "Next: Create LocalQueue user-queue in namespace ns on worker1, as on the manager." in from_api


def test_each_worker_offers_what_its_queues_could_ever_give_the_resources_asked_for() -> None:
    wl = workload({})
    wl.spec.pod_sets[0].template = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}}
    lq = kueue.LocalQueue.model_validate({"metadata": {"name": "user-queue", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}})
    flavor = kueue.ResourceFlavor.model_validate({"metadata": {"name": "f"}})
    quotas = WorkerQuotas(flavors=[flavor], cluster_queues=[worker_cq("8", "3")], local_queues=[lq])
    assert reads.largest_offers(wl, quotas) == {"cpu": 8000}
    assert reads.largest_offers(wl, None) == {}
    assert reads.largest_offers(wl, WorkerQuotas()) == {}  # no LocalQueue: nothing to offer through
    document = reads.verdicts_document(wl, [reads.Remote("worker1", True, offers={"cpu": 8000})])
    assert document["workers"][0]["largestOffer"] == {"cpu": "8"}


@pytest.mark.parametrize(
    ("checked", "message"),
    [
        (
            attributes("get", reads.VERDICTS, namespace="team-a", name="wl"),
            'workloads.reads.kfed.dev "wl" is forbidden: User "alice" cannot get resource "workloads/verdicts" '
            'in API group "reads.kfed.dev" in the namespace "team-a"',
        ),
        (
            attributes("list", reads.CLUSTERS),
            'clusters.reads.kfed.dev is forbidden: User "alice" cannot list resource "clusters" in API group "reads.kfed.dev"',
        ),
        (
            {**POD_LOG, "namespace": "team-a"},
            'pods is forbidden: User "alice" cannot get resource "pods/log" in API group "" in the namespace "team-a"',
        ),
    ],
)
def test_a_refusal_names_the_user_the_verb_the_resource_and_the_namespace(checked: dict[str, str], message: str) -> None:
    assert forbidden_message("alice", checked) == message


def test_the_read_api_gets_its_own_api_service_beside_the_visibility_ones() -> None:
    found = api_services(
        ca_bundle=b"ca", namespace="kfed-system", name="kfed-visibility", port=443, groups=[VISIBILITY_GROUP, (reads.GROUP, reads.VERSIONS)]
    )
    assert [obj["metadata"]["name"] for obj in found] == [
        "v1beta2.visibility.kueue.x-k8s.io",
        "v1beta1.visibility.kueue.x-k8s.io",
        "v1alpha1.reads.kfed.dev",
    ]
    listed = {r["name"]: r for r in reads.resource_list(reads.VERSION)["resources"]}
    assert listed[reads.CLUSTERS]["namespaced"] is False and listed[reads.CLUSTERS]["verbs"] == ["get", "list"]
    assert all(listed[name]["namespaced"] for name in (reads.VERDICTS, reads.PODS, reads.LOG))


@pytest.mark.parametrize("ttl", [ALLOWED_FOR, DENIED_FOR, AUTHENTICATED_FOR], ids=["allowed", "denied", "authenticated"])
def test_a_review_is_used_again_for_ten_seconds_at_most_as_the_apiservers_delegating_caches(ttl: float) -> None:
    now = [0.0]
    cache = ReviewCache(clock=lambda: now[0])
    cache.put(("alice", "team-a"), (True, ""), ttl=ttl)
    now[0] = 9.9
    assert cache.get(("alice", "team-a")) == (True, "")
    now[0] = 10.0  # k8s.io/apiserver's delegating authenticator and authorizer: 10 s
    assert cache.get(("alice", "team-a")) is None


@pytest.mark.parametrize(
    ("err", "code", "reason"),
    [
        (InvalidError("logs of Pod team-a/p container nope: container nope is not valid for pod p", status=400), 400, "BadRequest"),
        (NotFoundError('logs of Pod team-a/p: pods "p" not found', status=404), 404, "NotFound"),
        (TransientError("logs of Pod team-a/p: connection reset", status=0), 503, "ServiceUnavailable"),
        (ForbiddenError("logs of Pod team-a/p: forbidden", status=403), 503, "ServiceUnavailable"),
    ],
)
def test_a_workers_refusal_of_a_log_keeps_its_meaning_and_its_words(err: KubeError, code: int, reason: str) -> None:
    answer = worker_error("worker1", err)
    assert answer.status == code
    assert answer.body is not None and isinstance(answer.body, bytes)
    body = json.loads(answer.body)
    assert (body["code"], body["reason"], body["message"]) == (code, reason, f"worker worker1: {err}")


def test_the_in_cluster_dashboard_tells_clusters_to_its_user_as_the_read_api_would_have() -> None:
    """The dashboard reads `clusters` with its own identity, which may read every namespace; told
    again to a user of team-a, the answer is the one the read API gives that user directly."""
    cluster = propagating_worker(["team-a", "team-b"], ["team-a", "team-c"])
    seen = reads.WorkerSighting(cluster, connected=True, copies=[])
    to_dashboard = reads.cluster_item(seen, origin="multikueue", readable=reads.EVERY_NAMESPACE, worker_words=True)
    answer = reads.clusters_document([to_dashboard])
    assert reads.item_namespaces(reads.answer_items(answer)) == ["team-a", "team-b", "team-c"]
    told = reads.told_answer(answer, {"team-a"}, worker_words=False)
    direct = reads.cluster_item(seen, origin="multikueue", readable={"team-a"}, worker_words=False)
    assert told == reads.clusters_document([direct])
    assert "team-b" not in json.dumps(told) and "team-c" not in json.dumps(told)
    assert reads.told_answer(reads.cluster_document(to_dashboard), {"team-a"}, worker_words=False) == reads.cluster_document(direct)


def test_what_was_counted_for_one_reader_stays_counted_when_told_to_another() -> None:
    cluster = propagating_worker(["team-a", "team-b", "team-c"], [])
    seen = reads.WorkerSighting(cluster, connected=True, copies=[])
    # The dashboard itself may not read team-c: the read API counts it for the dashboard.
    to_dashboard = reads.cluster_item(seen, origin="multikueue", readable={"team-a", "team-b"}, worker_words=True)
    assert to_dashboard["queueDrift"] == f"{drift_of('team-a', 'team-b')}{WHICH}; and 1 more {UNREAD}"
    told = reads.told_to(to_dashboard, {"team-a"}, worker_words=False)
    assert told["queueDrift"] == f"{drift_of('team-a')}{WHICH}; and 2 more {UNREAD}"
    assert reads.told_to(to_dashboard, set(), worker_words=False)["queueDrift"] == f"3 {UNREAD}"
