"""Capacity-aware dispatch, pure: where a Workload fits among the workers, by the engine's
flavor assignment on each worker's own queues."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from typing import Any

import pytest

from manager.api import constants as c
from manager.api.config import Configuration
from manager.api.kueue import ClusterQueue, Cohort, LocalQueue, ResourceFlavor, Workload
from manager.multikueue.rules.capacity import (
    Fit,
    WorkerQuotas,
    choose_worker,
    fit_on,
    fit_when_empty,
    may_free_room,
    never_fits,
    never_fits_message,
    total_requests,
    workload_info,
)
from manager.multikueue.rules.settings import Settings

pytestmark = pytest.mark.unit

V = "kueue.x-k8s.io/v1beta2"
CONFIG_VERSION = "config.kueue.x-k8s.io/v1beta2"
TWO_MINUTES = {"admissionTimeout": "2m"}


def workload(cpu: str, *, count: int = 1, ns: str = "team", queue: str = "user-queue") -> Workload:
    template = {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": cpu}}}]}}
    return Workload.model_validate(
        {
            "apiVersion": V,
            "kind": "Workload",
            "metadata": {"name": "wl", "namespace": ns},
            "spec": {"queueName": queue, "podSets": [{"name": "main", "count": count, "template": template}]},
        }
    )


def worker(
    nominal: int, *, used: int = 0, cohort: str | None = None, borrowing_limit: int | None = None, peers: tuple[tuple[str, int], ...] = ()
) -> WorkerQuotas:
    """One ClusterQueue `cq` (and optional cohort peers, each with only nominal quota) serving
    team/user-queue, with `used` cpu reserved."""

    def cq(name: str, cpu: int, used_cpu: int = 0, limit: int | None = None) -> ClusterQueue:
        resource: dict[str, Any] = {"name": "cpu", "nominalQuota": cpu}
        if limit is not None:
            resource["borrowingLimit"] = limit
        spec: dict[str, Any] = {
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [resource]}]}]
        }
        if cohort:
            spec["cohortName"] = cohort
        status = {"flavorsReservation": [{"name": "default", "resources": [{"name": "cpu", "total": str(used_cpu), "borrowed": "0"}]}]}
        return ClusterQueue.model_validate(
            {"apiVersion": V, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec, "status": status}
        )

    queues = [cq("cq", nominal, used, borrowing_limit)] + [cq(name, cpu) for name, cpu in peers]
    return WorkerQuotas(
        flavors=[ResourceFlavor.model_validate({"apiVersion": V, "kind": "ResourceFlavor", "metadata": {"name": "default"}, "spec": {}})],
        cluster_queues=queues,
        cohorts=[Cohort.model_validate({"apiVersion": V, "kind": "Cohort", "metadata": {"name": cohort}, "spec": {}})] if cohort else [],
        local_queues=[
            LocalQueue.model_validate(
                {
                    "apiVersion": V,
                    "kind": "LocalQueue",
                    "metadata": {"name": "user-queue", "namespace": "team"},
                    "spec": {"clusterQueue": "cq"},
                }
            )
        ],
    )


@pytest.mark.parametrize(
    ("cpu", "quotas", "now", "ever"),
    [
        ("2", worker(8), True, True),
        ("2", worker(8, used=7), False, True),  # room only once running work finishes
        ("12", worker(8), False, False),  # more than the queue could ever give
        ("12", worker(8, cohort="pool", peers=(("other", 8),)), True, True),  # borrowed from the cohort
        ("12", worker(8, cohort="pool", peers=(("other", 8),), borrowing_limit=2), False, False),  # within its borrowing limit
    ],
)
def test_a_workload_fits_a_worker_as_that_workers_engine_would_admit_it(cpu: str, quotas: WorkerQuotas, now: bool, ever: bool) -> None:
    fit = fit_on(workload_info(workload(cpu)), quotas)
    assert (fit.now, fit.ever) == (now, ever), fit.reason


def test_copies_sent_and_not_yet_admitted_count_against_the_worker() -> None:
    info = workload_info(workload("4"))
    assert fit_on(info, worker(8)).now
    assert not fit_on(info, worker(8), in_flight=[("cq", {("default", "cpu"): 5000})]).now
    # A copy in flight to another ClusterQueue of the worker (no cohort shared) takes nothing here.
    assert fit_on(info, worker(8, peers=(("other", 8),)), in_flight=[("other", {("default", "cpu"): 8000})]).now


def test_our_reserved_copies_count_while_the_workers_queue_status_lags() -> None:
    info = workload_info(workload("4"))
    reported = worker(8, used=2)  # the status does not show our second copy yet
    ours = [("cq", {("default", "cpu"): 2000}), ("cq", {("default", "cpu"): 4000})]
    assert fit_on(info, reported).now
    assert not fit_on(info, reported, reserved=ours).now
    # Once the status shows more than our copies (other users' work), the status counts.
    assert not fit_on(info, worker(8, used=6), reserved=[("cq", {("default", "cpu"): 2000})]).now


def test_an_inactive_queue_admits_nothing_now() -> None:
    """A ClusterQueue whose flavor is missing on the worker is inactive there."""
    quotas = dataclasses.replace(worker(8), flavors=[])
    fit = fit_on(workload_info(workload("1")), quotas)
    assert (fit.now, fit.ever) == (False, True) and fit.reason.startswith("ClusterQueue cq is inactive")


def test_a_worker_without_the_workloads_local_queue_is_no_fit_and_is_named() -> None:
    info = workload_info(workload("1", queue="other-queue"))
    fit = fit_on(info, worker(8))
    assert not fit.ever and fit.missing and fit.reason == "LocalQueue other-queue doesn't exist"
    message = choose_worker({"w1": fit, "w2": fit_on(workload_info(workload("1")), worker(0))}, needs=total_requests(info)).message
    assert message == "needs cpu 1; largest worker offers cpu 0 (w2); w1: LocalQueue other-queue doesn't exist"


def test_the_worker_with_the_most_room_left_wins_then_the_first_name() -> None:
    info = workload_info(workload("2"))
    fits = {"w1": fit_on(info, worker(8, used=4)), "w2": fit_on(info, worker(8)), "w3": fit_on(info, worker(8))}
    assert choose_worker(fits, needs=total_requests(info)).worker == "w2"
    assert choose_worker(fits, needs=total_requests(info), skip=["w2"]).worker == "w3"


def test_a_workload_that_fits_nowhere_now_waits_and_one_that_never_fits_says_each_workers_largest_offer() -> None:
    busy = workload_info(workload("4"))
    waiting = choose_worker({"w1": fit_on(busy, worker(8, used=6)), "w2": fit_on(busy, worker(4, used=1))}, needs=total_requests(busy))
    assert (waiting.worker, waiting.never, waiting.message) == (None, False, "waiting for room on w1, w2")

    huge = workload_info(workload("6", count=2))
    fits = {"worker1": fit_on(huge, worker(8)), "worker2": fit_on(huge, worker(6))}
    never = choose_worker(fits, needs=total_requests(huge))
    assert never.worker is None and never.never
    assert never.message == "needs cpu 12; largest worker offers cpu 8 (worker1), cpu 6 (worker2)"


@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        pytest.param(
            {"worker1": worker(8), "worker2": worker(6)},
            "no worker can ever admit it: needs cpu 12; largest worker offers cpu 8 (worker1), cpu 6 (worker2)",
            id="too large for every worker",
        ),
        pytest.param({"worker1": worker(8, used=8), "worker2": worker(12, used=12)}, None, id="fits a worker once it is empty"),
        pytest.param({"worker1": worker(8), "worker2": None}, None, id="a worker whose queues are unknown may be the one"),
        pytest.param({}, None, id="no worker configured: another problem, said elsewhere"),
        pytest.param({"worker1": worker(8, cohort="pool", peers=(("other", 8),))}, None, id="what the worker's cohort lends counts"),
    ],
)
def test_the_refusal_names_each_workers_largest_offer_and_only_refuses_when_sure(
    workers: dict[str, WorkerQuotas | None], expected: str | None
) -> None:
    assert never_fits(workload_info(workload("6", count=2)), workers) == expected


def test_what_a_worker_could_ever_give_ignores_what_runs_there() -> None:
    info = workload_info(workload("4"))
    assert fit_when_empty(info, worker(8, used=8)).ever and not fit_on(info, worker(8, used=8)).now


def test_with_no_worker_connected_the_message_says_so() -> None:
    assert never_fits_message({"cpu": 1000}, {}) == "needs cpu 1; no worker is connected"


def test_fit_results_are_values() -> None:
    assert Fit(True, True) == Fit(True, True)


@pytest.mark.parametrize(
    ("multikueue", "expected"),
    [
        ({"dispatcherName": c.DISPATCHER_CAPACITY_AWARE}, timedelta(seconds=30)),
        (
            {"dispatcherName": c.DISPATCHER_CAPACITY_AWARE, "capacityAwareDispatcherConfig": {"admissionTimeout": "2m"}},
            timedelta(minutes=2),
        ),
        (
            {"capacityAwareDispatcherConfig": TWO_MINUTES},
            f"multiKueue.capacityAwareDispatcherConfig: Invalid value: only valid with dispatcherName {c.DISPATCHER_CAPACITY_AWARE}",
        ),
    ],
)
def test_the_admission_timeout_is_read_from_the_configuration(multikueue: dict[str, Any], expected: timedelta | str) -> None:
    config = Configuration.model_validate(
        {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "multiKueue": multikueue}
    )
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=re.escape(expected)):
            Settings.from_configuration(config)
    else:
        assert Settings.from_configuration(config).admission_timeout == expected


def as_read(quotas: WorkerQuotas, *, generation: int = 1) -> WorkerQuotas:
    """The worker's objects as an apiserver gives them: each with a uid and a generation."""

    def read(obj: Any) -> Any:
        return obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"uid": f"uid-{obj.name}", "generation": generation})})

    return WorkerQuotas(
        flavors=[read(o) for o in quotas.flavors],
        cluster_queues=[read(o) for o in quotas.cluster_queues],
        cohorts=[read(o) for o in quotas.cohorts],
        local_queues=[read(o) for o in quotas.local_queues],
    )


def test_a_worker_seen_with_the_same_specs_gives_the_same_fits_whatever_ran_before() -> None:
    """The quota tree built for the same specs is reused: each fit takes its usage out again, so
    a full worker seen first never makes the same worker, emptier, look full (or the reverse)."""
    full, half, empty = (as_read(worker(8, used=used)) for used in (7, 4, 0))
    assert full.tree_key is not None and full.tree_key == empty.tree_key  # usage is status: the same tree
    info = workload_info(workload("3"))
    unread = {"full": worker(8, used=7), "half": worker(8, used=4), "empty": worker(8)}  # built anew for each fit
    fresh = {name: fit_on(info, quotas) for name, quotas in unread.items()}
    for order in (("full", "half", "empty", "full"), ("empty", "full", "half", "half")):
        seen = [fit_on(info, {"full": full, "half": half, "empty": empty}[name]) for name in order]
        assert seen == [fresh[name] for name in order]
    sent = [("cq", {("default", "cpu"): 3000})]
    assert not fit_on(info, half, in_flight=sent).now and fit_on(info, half).now  # in-flight usage is not kept either


def test_a_spec_change_is_a_new_quota_tree() -> None:
    """A ClusterQueue's new quota raises its generation: the tree remembered for the old one is
    not used for the new (objects without a uid or generation are never remembered)."""
    info = workload_info(workload("6"))
    small = as_read(worker(4))
    assert not fit_on(info, small).ever
    grown = as_read(worker(8), generation=2)
    assert grown.tree_key != small.tree_key
    assert fit_on(info, grown).now
    assert worker(8).tree_key is None


def cq_status(*totals: tuple[str, str]) -> ClusterQueue:
    reservation = [{"name": flavor, "resources": [{"name": "cpu", "total": total, "borrowed": "0"}]} for flavor, total in totals]
    return ClusterQueue.model_validate(
        {"apiVersion": V, "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {}, "status": {"flavorsReservation": reservation}}
    )


@pytest.mark.parametrize(
    ("kind", "old", "new", "frees"),
    [
        ("ClusterQueue", cq_status(("a", "4")), cq_status(("a", "5")), False),  # an admission there
        ("ClusterQueue", cq_status(("a", "4")), cq_status(("a", "3")), True),  # a Workload finished
        ("ClusterQueue", cq_status(("a", "4"), ("b", "1")), cq_status(("a", "6")), True),  # moved off flavor b
        ("ClusterQueue", None, cq_status(("a", "1")), True),  # a new queue
        ("ClusterQueue", cq_status(("a", "1")), None, True),
        ("LocalQueue", object(), object(), False),  # a LocalQueue's status: nothing a fit reads
    ],
)
def test_only_a_status_change_that_gives_quota_back_wakes_the_waiting(kind: str, old: Any, new: Any, frees: bool) -> None:
    assert may_free_room(kind, old, new) is frees
