"""Every Workload condition write's one home (`manager.engine.workload`'s patch builders), one
behaviour per case: the resourceVersion guard, Kubernetes' SetStatusCondition transition rule,
and what each Kueue setter writes besides its condition."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from manager.api import constants as c
from manager.api.kueue import Workload
from manager.engine.workload import (
    DEACTIVATION_TARGET,
    admitted_patch,
    deactivation_patch,
    finish_patch,
    pods_ready_patch,
    release_patch,
    requeue_patch,
)
from manager.multikueue.rules.plan import CheckUpdate, check_patch

T0 = "2026-11-21T11:00:00Z"
NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
NOW_TEXT = "2026-11-21T12:00:00Z"


def cond(kind: str, status: str = "True", reason: str = "R", message: str = "", at: str = T0) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


def workload(*conditions: dict[str, Any], checks: list[dict[str, Any]] | None = None, **status: Any) -> Workload:
    return Workload.model_validate(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "wl", "namespace": "ns", "resourceVersion": "7", "generation": 3},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
            "status": {"conditions": list(conditions), "admissionChecks": checks or [], **status},
        }
    )


def by_type(patch: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["type"]: entry for entry in patch["status"]["conditions"]}


def when(entry: dict[str, Any]) -> str:
    value = entry["lastTransitionTime"]
    return value if isinstance(value, str) else value.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("build", "kind", "expected"),
    [
        (lambda wl: finish_patch(wl, reason="Succeeded", message="done", now=NOW), c.FINISHED, ("True", "Succeeded", "done")),
        (lambda wl: requeue_patch(wl, reason="BackoffFinished", message="m", now=NOW), c.REQUEUED, ("True", "BackoffFinished", "m")),
        (
            lambda wl: deactivation_patch(wl, reason="EvictedOnManagerCluster", message="Evicted on manager: x", now=NOW),
            DEACTIVATION_TARGET,
            ("True", "EvictedOnManagerCluster", "Evicted on manager: x"),
        ),
        (lambda wl: admitted_patch(wl, admitted=("True", "Admitted", "ok"), now=NOW), c.ADMITTED, ("True", "Admitted", "ok")),
        (lambda wl: pods_ready_patch(wl, pods_ready=("False", "WaitForStart", "w"), now=NOW), c.PODS_READY, ("False", "WaitForStart", "w")),
    ],
)
def test_each_setter_writes_its_condition_guarded_by_the_resource_version_and_keeps_the_others(
    build: Any, kind: str, expected: tuple[str, str, str]
) -> None:
    wl = workload(cond(c.QUOTA_RESERVED))
    patch = build(wl)
    assert patch["metadata"] == {"resourceVersion": "7"}
    conditions = by_type(patch)
    assert (conditions[kind]["status"], conditions[kind]["reason"], conditions[kind]["message"]) == expected
    assert when(conditions[kind]) == NOW_TEXT, "a new condition (or a changed status) is stamped now"
    assert when(conditions[c.QUOTA_RESERVED]) == T0, "the others are kept as they were"
    assert list(conditions)[-1] == kind


@pytest.mark.parametrize(("old_status", "expected_time"), [("True", T0), ("False", NOW_TEXT)])
def test_a_condition_keeps_its_transition_time_while_its_status_stays(old_status: str, expected_time: str) -> None:
    wl = workload(cond(c.ADMITTED, old_status, reason="Old"))
    entry = by_type(admitted_patch(wl, admitted=("True", "Admitted", "ok"), now=NOW))[c.ADMITTED]
    assert (entry["reason"], when(entry)) == ("Admitted", expected_time)


def test_a_message_is_cut_to_the_apis_limit() -> None:
    entry = by_type(finish_patch(workload(), reason="Failed", message="x" * 40_000, now=NOW))[c.FINISHED]
    assert len(entry["message"]) == 32768


def test_the_deactivation_target_names_the_generation_it_was_asked_for() -> None:
    patch = deactivation_patch(workload(), reason="EvictedOnManagerCluster", message="m", now=NOW)
    assert by_type(patch)[DEACTIVATION_TARGET]["observedGeneration"] == 3


@pytest.mark.parametrize(("requeue_at", "cleared"), [("2026-11-21T11:30:00Z", True), (None, False)])
def test_a_requeue_clears_the_backoffs_requeue_at(requeue_at: str | None, cleared: bool) -> None:
    state: dict[str, Any] = {"requeueState": {"count": 1, "requeueAt": requeue_at}} if requeue_at else {}
    patch = requeue_patch(workload(cond(c.REQUEUED, "False"), **state), reason="BackoffFinished", message="m", now=NOW)
    assert ("requeueState" in patch["status"]) is cleared
    if cleared:
        assert patch["status"]["requeueState"] == {"requeueAt": None}


@pytest.mark.parametrize(
    ("evicted", "checks", "requeued", "admitted_reason"),
    [
        (cond(c.EVICTED, reason="Preempted", message="by x"), [], ("True", "Preempted", "by x"), "NoReservation"),
        (cond(c.EVICTED, reason="NodeFailures", message="n"), [], ("True", "NodeFailures", "n"), "NoReservation"),
        (
            cond(c.EVICTED, reason="AdmissionCheck", message="retry"),
            [{"name": "mk", "state": "Pending", "message": "", "lastTransitionTime": T0}],
            ("False", "AdmissionCheck", "retry"),
            "NoReservationUnsatisfiedChecks",
        ),
        (None, [], ("False", "Pending", "The workload was evicted"), "NoReservation"),
    ],
)
def test_a_release_gives_the_quota_back_and_requeues_as_the_eviction_says(
    evicted: dict[str, Any] | None, checks: list[dict[str, Any]], requeued: tuple[str, str, str], admitted_reason: str
) -> None:
    wl = workload(cond(c.QUOTA_RESERVED), *([evicted] if evicted else []), checks=checks)
    patch = release_patch(wl, now=NOW)
    conditions = by_type(patch)
    assert patch["status"]["admission"] is None
    assert (conditions[c.QUOTA_RESERVED]["status"], conditions[c.QUOTA_RESERVED]["reason"]) == ("False", "Pending")
    assert (conditions[c.ADMITTED]["status"], conditions[c.ADMITTED]["reason"]) == ("False", admitted_reason)
    assert (conditions[c.REQUEUED]["status"], conditions[c.REQUEUED]["reason"], conditions[c.REQUEUED]["message"]) == requeued


@pytest.mark.parametrize(("admitted", "accumulated"), [(cond(c.ADMITTED, at=T0), 3600 + 100), (cond(c.ADMITTED, "False"), None)])
def test_a_release_counts_the_time_it_ran_into_its_past_execution_time(admitted: dict[str, Any], accumulated: int | None) -> None:
    patch = release_patch(workload(cond(c.QUOTA_RESERVED), admitted, accumulatedPastExecutionTimeSeconds=100), now=NOW)
    assert patch["status"].get("accumulatedPastExecutionTimeSeconds") == accumulated


# --- the MultiKueue check's write (`check_patch`) ------------------------------------------------------
def mk(state: str) -> list[dict[str, Any]]:
    return [
        {"name": "mk", "state": state, "message": "", "lastTransitionTime": T0},
        {"name": "prov", "state": "Ready", "message": "", "lastTransitionTime": T0},
    ]


@pytest.mark.parametrize(
    ("before", "update", "moved"),
    [
        ("Pending", CheckUpdate("Pending", "waiting"), False),
        ("Pending", CheckUpdate("Retry", "lost"), True),
        ("Ready", CheckUpdate("Ready", 'The workload was admitted on "w2"', cluster_name="w2"), True),
        ("Retry", CheckUpdate("Retry", "again"), True),
    ],
)
def test_the_checks_transition_time_moves_with_its_state_or_on_ready_and_retry(before: str, update: CheckUpdate, moved: bool) -> None:
    patch = check_patch(workload(checks=mk(before)), check_name="mk", update=update, nominate=None, now=NOW)
    checks = {entry["name"]: entry for entry in patch["status"]["admissionChecks"]}
    assert (checks["mk"]["state"], checks["mk"]["message"]) == (update.state, update.message)
    assert (when(checks["mk"]) == NOW_TEXT) is moved
    assert when(checks["prov"]) == T0


def test_a_ready_records_the_winner_clears_the_nomination_and_brings_admitted() -> None:
    update = CheckUpdate("Ready", "won", cluster_name="w1", clear_nominated=True, admitted=("True", "Admitted", "The workload is admitted"))
    patch = check_patch(workload(cond(c.QUOTA_RESERVED), checks=mk("Pending")), check_name="mk", update=update, nominate=["w1"], now=NOW)
    status = patch["status"]
    assert (status["clusterName"], status["nominatedClusterNames"]) == ("w1", None)
    assert by_type(patch)[c.ADMITTED]["status"] == "True" and patch["metadata"] == {"resourceVersion": "7"}


@pytest.mark.parametrize(("nominate", "expected"), [(["w1", "w2"], ["w1", "w2"]), ([], None)])
def test_a_nomination_alone_writes_only_the_nomination(nominate: list[str], expected: list[str] | None) -> None:
    patch = check_patch(workload(checks=mk("Pending")), check_name="mk", update=None, nominate=nominate, now=NOW)
    assert patch["status"] == {"nominatedClusterNames": expected}
