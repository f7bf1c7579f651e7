"""The live admission state as the controllers drive it: objects in, status writes out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.meta import Condition, is_condition_true, newest_copy, older_resource_version
from manager.controllers.admission import HOLD, REPLACE, SEND, issue_action
from manager.engine.state import AdmissionState
from manager.engine.workload import Cond
from manager.engine.writes import StatusWrite, moves_quota

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def flavor(name: str = "default") -> kueue.ResourceFlavor:
    return kueue.ResourceFlavor.model_validate({"metadata": {"name": name}})


def cluster_queue(name: str = "cq", cpu: int = 2, **spec: Any) -> kueue.ClusterQueue:
    return kueue.ClusterQueue.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}
                ],
                **spec,
            },
        }
    )


def local_queue(name: str = "lq", cq: str = "cq") -> kueue.LocalQueue:
    return kueue.LocalQueue.model_validate({"metadata": {"name": name, "namespace": "ns"}, "spec": {"clusterQueue": cq}})


def workload(
    name: str, *, cpu: str = "1", priority: int = 0, rv: str = "1", owned: bool = False, at: int = 0, **status: Any
) -> kueue.Workload:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "resourceVersion": rv,
        "uid": f"uid-{name}",
        "creationTimestamp": (T0 + timedelta(seconds=at)).isoformat(),
    }
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": f"job-{name}", "controller": True}]
    pod = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}
    return kueue.Workload.model_validate(
        {
            "metadata": meta,
            "spec": {"queueName": "lq", "priority": priority, "podSets": [{"name": "main", "count": 1, "template": pod}]},
            "status": status or None,
        }
    )


def released(write: StatusWrite, original: kueue.Workload, rv: str) -> kueue.Workload:
    """An evicted Workload once its Job stopped: the job integration (or Kueue's runner) cleared
    its reservation, as Kueue's UnsetQuotaReservationWithCondition does (Admitted turns False too)."""
    out = stored(write, original, rv)
    assert out.status is not None
    out.status.admission = None
    for cond in out.status.conditions or []:
        if cond.type in (c.QUOTA_RESERVED, c.ADMITTED):
            cond.status = "False"
    return out


def ready_state(cpu: int = 2, *, release_bare_evictions: bool = False, **cq_spec: Any) -> AdmissionState:
    state = AdmissionState(release_bare_evictions=release_bare_evictions)
    state.upsert_namespace("ns", {})
    state.upsert_flavor(flavor())
    state.upsert_cluster_queue(cluster_queue(cpu=cpu, **cq_spec))
    state.upsert_local_queue(local_queue())
    state.rebuild_if_needed(T0)
    return state


def run(state: AdmissionState, now: datetime = T0) -> list[StatusWrite]:
    while state.cycle(now).changed:
        pass
    return state.flush(now)


def stored(write: StatusWrite, original: kueue.Workload, rv: str) -> kueue.Workload:
    """The Workload as the apiserver would return it after the write."""
    out = original.model_copy(deep=True)
    out.metadata.resource_version = rv
    out.status = write.status
    return out


def test_an_admission_is_written_with_the_resource_version_it_was_computed_from() -> None:
    state = ready_state()
    wl = workload("a", rv="7")
    state.upsert_workload(wl, T0)
    writes = run(state)
    assert [(w.key, w.resource_version, w.admits) for w in writes] == [("ns/a", "7", True)]
    status = writes[0].status
    assert status.admission is not None and status.admission.cluster_queue == "cq"
    assert is_condition_true(status.conditions, c.QUOTA_RESERVED) and is_condition_true(status.conditions, c.ADMITTED)
    assert [e.reason for e in writes[0].events] == ["QuotaReserved", "Admitted"]


def test_a_pending_workload_gets_one_write_with_its_reason_and_no_more_until_it_changes() -> None:
    state = ready_state(cpu=1)
    state.upsert_workload(workload("big", cpu="2"), T0)
    writes = run(state)
    assert len(writes) == 1 and writes[0].status.admission is None
    cond = next(x for x in writes[0].status.conditions or [] if x.type == c.QUOTA_RESERVED)
    assert (cond.status, cond.reason) == ("False", "ExceedsMaxQuota")
    assert "couldn't assign flavors to pod set main" in cond.message
    state.write_succeeded(writes[0], stored(writes[0], workload("big", cpu="2"), "2"))
    state.upsert_workload(stored(writes[0], workload("big", cpu="2"), "2"), T0)
    assert run(state) == []


def test_a_write_held_back_behind_one_in_flight_is_flushed_again_until_sent() -> None:
    state = ready_state(cpu=1)
    state.upsert_workload(workload("big", cpu="2"), T0)
    first = run(state)
    assert len(first) == 1  # in flight: its Pending reason
    # The queue's quota changes before that write returns, and so does the reason.
    state.upsert_cluster_queue(cluster_queue(cpu=1, stopPolicy="Hold"))
    state.rebuild_if_needed(T0)
    state.dirty.add("ns/big")
    second = state.flush(T0)
    assert len(second) == 1 and second[0].status != first[0].status
    state.redo("ns/big")  # the controller holds it back: one write per workload at a time
    # Nothing else changes, yet the held-back write is produced again on the next flush.
    again = state.flush(T0)
    assert [w.status for w in again] == [second[0].status]
    # Once sent and stored, the same view produces no more writes.
    state.write_succeeded(again[0], stored(again[0], workload("big", cpu="2"), "3"))
    state.dirty.add("ns/big")
    assert state.flush(T0) == []


def admitted_by_our_write(state: AdmissionState) -> StatusWrite:
    """Workload a, read at version 7 and admitted by our write, which the apiserver stored as 9."""
    a = workload("a", rv="7")
    state.upsert_workload(a, T0)
    admission = run(state)[0]
    state.write_succeeded(admission, stored(admission, a, "9"))
    return admission


def test_a_watch_event_older_than_our_own_write_changes_nothing() -> None:
    state = ready_state(cpu=1)
    admitted_by_our_write(state)
    # The watch now brings version 8 (a write of ours from before the admission): ignored, so
    # the quota stays with a and b, asking for the same quota, waits.
    state.upsert_workload(workload("a", rv="8"), T0 + timedelta(seconds=1))
    state.upsert_workload(workload("b", rv="3", at=1), T0 + timedelta(seconds=1))
    writes = run(state, T0 + timedelta(seconds=1))
    assert [w.key for w in writes if w.admits] == []
    assert state.infos["ns/a"].reserved and state.infos["ns/a"].obj.metadata.resource_version == "9"


def test_a_lost_race_never_plans_again_from_a_copy_older_than_the_one_held() -> None:
    state = ready_state(cpu=1)
    admission = admitted_by_our_write(state)
    # A later write computed from version 9 loses a race; the cache still has version 7.
    lost = StatusWrite("ns/a", "ns", "a", "9", admission.status)
    state.write_failed(lost, T0 + timedelta(seconds=1), workload("a", rv="7"))
    assert state.infos["ns/a"].reserved and state.infos["ns/a"].obj.metadata.resource_version == "9"
    assert newest_copy(workload("a", rv="7"), None, workload("a", rv="10")).metadata.resource_version == "10"  # type: ignore[union-attr]
    assert newest_copy(None, None) is None


def test_resource_versions_compare_as_integers_only_when_well_formed() -> None:
    assert older_resource_version("8", "9") and older_resource_version("99", "100")
    assert not older_resource_version("9", "9") and not older_resource_version("10", "9")
    # Not the apiserver's integers (KEP-5504's format): never taken as older.
    assert not older_resource_version("08", "9") and not older_resource_version("a", "b") and not older_resource_version("", "9")


def test_a_lost_race_undoes_the_assumed_admission_and_frees_the_quota() -> None:
    state = ready_state(cpu=1)
    state.upsert_workload(workload("a", at=0), T0)
    state.upsert_workload(workload("b", at=1), T0)
    writes = {w.key: w for w in run(state)}
    assert writes["ns/a"].admits and not writes["ns/b"].admits
    # Someone else changed "a" (say, deactivated it): the admission write conflicts.
    changed = workload("a", rv="5", at=0)
    changed.spec.active = False
    state.write_failed(writes["ns/a"], T0, changed)
    later = {w.key: w for w in run(state, T0 + timedelta(seconds=1))}
    assert later["ns/b"].admits  # the quota "a" held in the engine went to "b"


def test_an_evicted_job_workload_keeps_its_quota_until_the_job_integration_releases_it() -> None:
    state = ready_state(cpu=1, preemption={"withinClusterQueue": "LowerPriority"})
    low = workload("low", priority=1, owned=True)
    state.upsert_workload(low, T0)
    first = run(state)[0]
    state.write_succeeded(first, stored(first, low, "2"))
    state.upsert_workload(workload("high", priority=100, owned=True, at=5), T0)
    writes = {w.key: w for w in run(state)}
    victim = writes["ns/low"].status
    assert is_condition_true(victim.conditions, c.EVICTED) and victim.admission is not None  # still holds quota
    assert not writes.get("ns/high") or not writes["ns/high"].admits
    # The Job stopped; its integration cleared the reservation: the preemptor gets the quota.
    state.upsert_workload(released(writes["ns/low"], low, "9"), T0 + timedelta(seconds=2))
    admitted = {w.key for w in run(state, T0 + timedelta(seconds=2)) if w.admits}
    assert admitted == {"ns/high"}


def test_a_victim_still_stopping_is_targeted_again_and_no_other_is_evicted() -> None:
    """Kueue's candidate order puts evicted workloads first, so a preemptor waiting for its victim
    to stop picks the same victim again, at no cost, instead of a new one."""
    state = ready_state(cpu=7, preemption={"withinClusterQueue": "LowerPriority"})
    running = {}
    for at, (name, cpu) in enumerate([("z", "3"), ("y", "3"), ("x", "1")]):  # z reserved first, x last
        wl = workload(name, cpu=cpu, owned=True, at=at)
        state.upsert_workload(wl, T0 + timedelta(seconds=at))
        write = run(state, T0 + timedelta(seconds=at))[0]
        running[name] = stored(write, wl, f"{at + 2}")
        state.write_succeeded(write, running[name])
    state.upsert_workload(workload("high", cpu="3", priority=100, owned=True, at=10), T0 + timedelta(seconds=10))
    # Greedy removal takes x then y; fill-back returns x: y alone is the victim.
    writes = {w.key: w for w in run(state, T0 + timedelta(seconds=10))}
    evicted = {key for key, w in writes.items() if is_condition_true(w.status.conditions, c.EVICTED)}
    assert evicted == {"ns/y"}
    for key in sorted(writes):
        state.write_succeeded(writes[key], stored(writes[key], running.get(key.removeprefix("ns/")) or workload("high"), "20"))
    # y's Job is still stopping; later cycles find y first and evict nobody else.
    later = {w.key: w for w in run(state, T0 + timedelta(seconds=11))}
    assert not any(is_condition_true(w.status.conditions, c.EVICTED) for key, w in later.items() if key != "ns/y")
    high = state.infos["ns/high"]
    assert not high.reserved and high.conditions[c.QUOTA_RESERVED].message.endswith("Pending the preemption of 1 workload(s)")
    assert all(state.infos[f"ns/{name}"].reserved for name in ("x", "y", "z")), "y keeps its quota until its Job stops"


def test_a_bare_victim_keeps_its_quota_until_another_writer_releases_it() -> None:
    """Kueue's lifecycle: the eviction only sets Evicted; the quota goes back once QuotaReserved
    turns False (Kueue's runner writes it for a Workload no job owns), and then the preemptor,
    which waited at its queue's head, is admitted."""
    state = ready_state(cpu=1, preemption={"withinClusterQueue": "LowerPriority"})
    low = workload("low", priority=1)
    state.upsert_workload(low, T0)
    first = run(state)[0]
    admitted_low = stored(first, low, "2")
    state.write_succeeded(first, admitted_low)
    state.upsert_workload(workload("high", priority=100, at=5), T0)
    writes = {w.key: w for w in run(state)}
    assert not writes["ns/high"].admits
    victim = writes["ns/low"].status
    assert victim.admission is not None and is_condition_true(victim.conditions, c.EVICTED)
    evicted_low = stored(writes["ns/low"], admitted_low, "3")
    state.write_succeeded(writes["ns/low"], evicted_low)
    assert not any(w.admits for w in run(state)), "no admission while the victim holds its quota"
    state.upsert_workload(released(writes["ns/low"], evicted_low, "4"), T0)
    assert [w.key for w in run(state) if w.admits] == ["ns/high"]


def test_a_worker_releases_a_bare_copy_at_once_when_preempted() -> None:
    """The worker agent's choice (`release_bare_evictions`): a remote copy no job owns has
    nothing to stop, so its quota goes back with the eviction."""
    state = ready_state(cpu=1, release_bare_evictions=True, preemption={"withinClusterQueue": "LowerPriority"})
    low = workload("low", priority=1)
    state.upsert_workload(low, T0)
    first = run(state)[0]
    state.write_succeeded(first, stored(first, low, "2"))
    state.upsert_workload(workload("high", priority=100, at=5), T0)
    writes = {w.key: w for w in run(state)}
    assert writes["ns/high"].admits
    victim = writes["ns/low"].status
    assert victim.admission is None and is_condition_true(victim.conditions, c.REQUEUED)


def test_hold_and_drain_evicts_and_a_finished_workload_gives_its_quota_back() -> None:
    state = ready_state(cpu=1)
    wl = workload("a")
    state.upsert_workload(wl, T0)
    write = run(state)[0]
    admitted = stored(write, wl, "2")
    state.write_succeeded(write, admitted)
    state.upsert_cluster_queue(cluster_queue(cpu=1, stopPolicy="HoldAndDrain"))
    state.rebuild_if_needed(T0)
    cq_status = state.cluster_queue_status("cq", T0)
    assert cq_status is not None and cq_status.conditions is not None and cq_status.conditions[0].reason == "Stopped"
    finished = admitted.model_copy(deep=True)
    finished.metadata.resource_version = "3"
    assert finished.status is not None and finished.status.conditions is not None
    finished.status.conditions.append(
        finished.status.conditions[0].model_copy(update={"type": c.FINISHED, "status": "True", "reason": "Succeeded"})
    )
    state.upsert_workload(finished, T0)
    cq_status = state.cluster_queue_status("cq", T0)
    assert cq_status is not None and cq_status.reserving_workloads == 0


def test_queue_active_conditions_keep_their_stored_time_until_their_status_changes() -> None:
    """One transition rule for both queues (a restarted manager keeps the times it wrote)."""
    state = ready_state()
    earlier = T0 - timedelta(hours=1)
    active = {"type": "Active", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": earlier.isoformat()}
    stored_cq = cluster_queue().model_copy(update={"status": kueue.ClusterQueueStatus.model_validate({"conditions": [active]})})
    stored_lq = local_queue().model_copy(update={"status": kueue.LocalQueueStatus.model_validate({"conditions": [active]})})
    state.upsert_cluster_queue(stored_cq)
    state.upsert_local_queue(stored_lq)
    cq_status = state.cluster_queue_status("cq", T0)
    assert cq_status is not None and cq_status.conditions is not None
    assert cq_status.conditions[0].last_transition_time == earlier
    lq_conditions = state.local_queue_statuses(T0)["ns/lq"].conditions
    assert lq_conditions is not None and lq_conditions[0].last_transition_time == earlier
    state.upsert_cluster_queue(cluster_queue(stopPolicy="Hold").model_copy(update={"status": stored_cq.status}))
    state.rebuild_if_needed(T0)
    cq_status = state.cluster_queue_status("cq", T0)
    assert cq_status is not None and cq_status.conditions is not None
    assert (cq_status.conditions[0].status, cq_status.conditions[0].last_transition_time) == ("False", T0)


def test_local_queue_status_counts_its_own_workloads() -> None:
    state = ready_state(cpu=1)
    state.upsert_workload(workload("a", at=0), T0)
    state.upsert_workload(workload("b", at=1), T0)
    run(state)
    status = state.local_queue_statuses(T0)["ns/lq"]
    assert (status.pending_workloads, status.reserving_workloads, status.admitted_workloads) == (1, 1, 1)
    assert status.flavors_reservation is not None and str((status.flavors_reservation[0].resources or [])[0].total) == "1"


# --- admission checks ------------------------------------------------------------------------------------
def admission_check(name: str, *, active: bool = True, controller: str = c.MULTIKUEUE_CONTROLLER_NAME) -> kueue.AdmissionCheck:
    conditions = [
        {"type": "Active", "status": "True" if active else "False", "reason": "R", "message": "", "lastTransitionTime": T0.isoformat()}
    ]
    return kueue.AdmissionCheck.model_validate(
        {"metadata": {"name": name}, "spec": {"controllerName": controller}, "status": {"conditions": conditions}}
    )


def checks(*names: str, on_flavors: list[str] | None = None) -> dict[str, Any]:
    rules = [{"name": n, **({"onFlavors": on_flavors} if on_flavors else {})} for n in names]
    return {"admissionChecksStrategy": {"admissionChecks": rules}}


def _active(state: AdmissionState) -> tuple[str, str, str]:
    status = state.cluster_queue_status("cq", T0)
    assert status is not None and status.conditions
    cond = status.conditions[0]
    return cond.status, cond.reason, cond.message


def test_a_cluster_queue_with_a_missing_or_inactive_check_is_inactive() -> None:
    state = ready_state(**checks("mk"))
    assert _active(state) == ("False", "AdmissionCheckNotFound", "Can't admit new workloads: references missing AdmissionCheck(s): mk.")
    state.upsert_admission_check(admission_check("mk", active=False))
    state.rebuild_if_needed(T0)
    assert _active(state) == ("False", "AdmissionCheckInactive", "Can't admit new workloads: references inactive AdmissionCheck(s): mk.")
    state.upsert_admission_check(admission_check("mk"))
    state.rebuild_if_needed(T0)
    assert _active(state)[:2] == ("True", "Ready")


def test_multikueue_constraints_on_a_cluster_queue() -> None:
    state = ready_state(**checks("mk1", "mk2"))
    for name in ("mk1", "mk2"):
        state.upsert_admission_check(admission_check(name))
    state.rebuild_if_needed(T0)
    assert _active(state)[1] == "MultipleMultiKueueAdmissionChecks"
    state = ready_state(**checks("mk", on_flavors=["other"]))
    state.upsert_admission_check(admission_check("mk"))
    state.rebuild_if_needed(T0)
    assert _active(state)[1:] == (
        "MultiKueueAdmissionCheckAppliedPerFlavor",
        "Can't admit new workloads: Cannot specify MultiKueue AdmissionCheck per flavor, found: mk.",
    )


def test_a_retry_check_evicts_and_resets_the_checks_and_the_cluster_nomination() -> None:
    state = ready_state(**checks("mk"))
    state.upsert_admission_check(admission_check("mk"))
    state.rebuild_if_needed(T0)
    wl = workload("a", owned=True)
    state.upsert_workload(wl, T0)
    first = run(state)[0]
    assert [(x.name, x.state) for x in first.status.admission_checks or []] == [("mk", "Pending")]
    admitted = stored(first, wl, "2")
    state.write_succeeded(first, admitted)
    # MultiKueue says the worker was lost.
    retried = admitted.model_copy(deep=True)
    retried.metadata.resource_version = "3"
    assert retried.status is not None and retried.status.admission_checks
    retried.status.admission_checks[0].state = "Retry"
    retried.status.admission_checks[0].message = "Admitting remote lost"
    retried.status.cluster_name = "worker1"
    state.upsert_workload(retried, T0 + timedelta(seconds=1))
    write = run(state, T0 + timedelta(seconds=1))[0]
    evicted = next(x for x in write.status.conditions or [] if x.type == c.EVICTED)
    assert (evicted.status, evicted.reason) == ("True", "AdmissionCheck")
    assert evicted.message == 'Evicted due to AdmissionCheck in Retry state: "mk" (Admitting remote lost)'
    check = (write.status.admission_checks or [])[0]
    assert (check.state, check.message, check.retry_count) == ("Pending", "Reset to Pending after eviction. Previously: Retry", 1)
    assert write.status.cluster_name is None and write.status.nominated_cluster_names is None


def _reserved_with_check(check: str = "mk") -> tuple[AdmissionState, kueue.Workload]:
    """A workload that holds quota with its check Pending, as the cluster stores it."""
    state = ready_state(**checks(check))
    state.upsert_admission_check(admission_check(check))
    state.rebuild_if_needed(T0)
    wl = workload("a", owned=True)
    state.upsert_workload(wl, T0)
    first = run(state)[0]
    reserved = stored(first, wl, "2")
    state.write_succeeded(first, reserved)
    return state, reserved


def test_an_admitted_condition_written_with_the_checks_ready_is_taken_as_written() -> None:
    """MultiKueue writes Admitted with its Ready (one write): the engine agrees, writes nothing
    more, and keeps the written time (waitForPodsReady counts from it)."""
    state, reserved = _reserved_with_check()
    ready = reserved.model_copy(deep=True)
    ready.metadata.resource_version = "3"
    assert ready.status is not None and ready.status.admission_checks and ready.status.conditions
    ready.status.admission_checks[0].state = "Ready"
    written_at = T0 + timedelta(seconds=4)
    admitted = Condition(
        type=c.ADMITTED, status="True", reason="Admitted", message="The workload is admitted", last_transition_time=written_at
    )
    ready.status.conditions = [cond for cond in ready.status.conditions if cond.type != c.ADMITTED] + [admitted]
    later = T0 + timedelta(seconds=5)
    state.upsert_workload(ready, later)
    assert run(state, later) == []
    kept = state.infos["ns/a"].conditions[c.ADMITTED]
    assert (kept.status, kept.last_transition_time) == ("True", written_at)


def test_an_admitted_condition_left_from_an_earlier_admission_is_not_taken_for_the_current_one() -> None:
    """An eviction leaves Admitted True until its release is written; the engine may have
    reserved again in memory by then. The old condition's time must not become the new
    admission's (waitForPodsReady would count from it)."""
    state = ready_state()
    wl = workload("a")
    state.upsert_workload(wl, T0)
    [first] = run(state)
    admitted = stored(first, wl, "2")
    state.write_succeeded(first, admitted)
    info = state.infos["ns/a"]
    again = T0 + timedelta(seconds=30)  # as a second admission in memory leaves them
    info.reserved_at = again
    info.conditions[c.ADMITTED] = Cond("True", "Admitted", "The workload is admitted", again)
    late = admitted.model_copy(deep=True)
    late.metadata.resource_version = "3"  # an event of the old admission, still Admitted since T0
    state.upsert_workload(late, again)
    assert state.infos["ns/a"].conditions[c.ADMITTED].last_transition_time == again


def test_an_admission_after_its_checks_says_how_long_they_took() -> None:
    """Another controller's check turns Ready: the engine writes Admitted, and its Event gives
    the seconds since the reservation, as Kueue's workload controller does."""
    state, reserved = _reserved_with_check("prov")
    ready = reserved.model_copy(deep=True)
    ready.metadata.resource_version = "3"
    assert ready.status is not None and ready.status.admission_checks
    ready.status.admission_checks[0].state = "Ready"
    later = T0 + timedelta(seconds=7)
    state.upsert_workload(ready, later)
    [write] = run(state, later)
    assert is_condition_true(write.status.conditions, c.ADMITTED)
    assert [(e.reason, e.message) for e in write.events] == [
        ("Admitted", "Admitted by ClusterQueue cq, wait time since reservation was 7s")
    ]


def test_a_deactivation_target_evicts_with_its_cause() -> None:
    state = ready_state()
    wl = workload("a", owned=True)
    state.upsert_workload(wl, T0)
    first = run(state)[0]
    admitted = stored(first, wl, "2")
    state.write_succeeded(first, admitted)
    target = admitted.model_copy(deep=True)
    target.metadata.resource_version = "3"
    target.spec.active = False
    assert target.status is not None and target.status.conditions is not None
    target.status.conditions.append(
        target.status.conditions[0].model_copy(
            update={"type": "DeactivationTarget", "status": "True", "reason": "EvictedOnManagerCluster", "message": "Evicted on manager: x"}
        )
    )
    state.upsert_workload(target, T0)
    write = run(state)[0]
    evicted = next(x for x in write.status.conditions or [] if x.type == c.EVICTED)
    assert (evicted.reason, evicted.message) == (
        "DeactivatedDueToEvictedOnManagerCluster",
        "The workload is deactivated due to Evicted on manager: x",
    )
    assert all(x.type != "DeactivationTarget" for x in write.status.conditions or [])


def test_a_refused_workload_reserves_nothing_preempts_nothing_and_is_tried_again_when_asked() -> None:
    """A rule outside the quota tree (MultiKueue's: no worker could ever admit it) keeps a
    workload out: QuotaReserved=False with the rule's message, no preemption even where its
    policy would allow one, and another try once the rule's inputs change."""
    state = ready_state(cpu=1, preemption={"withinClusterQueue": "LowerPriority"})
    low = workload("low", priority=1)
    state.upsert_workload(low, T0)
    first = run(state)[0]
    state.write_succeeded(first, stored(first, low, "2"))
    state.upsert_workload(stored(first, low, "2"), T0)
    refused = {"ns/high"}
    state.set_refusal(lambda wl, cq: "no worker can ever admit it: needs cpu 1" if wl.key in refused else None)
    state.upsert_workload(workload("high", priority=100, at=5), T0)
    writes = {w.key: w for w in run(state)}
    assert set(writes) == {"ns/high"}, "the low-priority workload was not touched: nothing preempted"
    cond = next(x for x in writes["ns/high"].status.conditions or [] if x.type == c.QUOTA_RESERVED)
    assert (cond.status, cond.reason, cond.message) == ("False", "ExceedsMaxQuota", "no worker can ever admit it: needs cpu 1")
    state.write_succeeded(writes["ns/high"], stored(writes["ns/high"], workload("high", priority=100, at=5), "3"))
    # The rule's inputs change: the refused workload is tried again, and now preempts.
    refused.clear()
    state.requeue_refused(["cq"])
    again = {w.key: w for w in run(state, T0 + timedelta(seconds=1))}
    assert is_condition_true(again["ns/low"].status.conditions, c.EVICTED)


def test_a_workload_its_own_queue_can_never_hold_gets_the_queues_reason_before_any_refusal() -> None:
    state = ready_state(cpu=1)
    state.set_refusal(lambda wl, cq: "no worker can ever admit it: needs cpu 2")
    state.upsert_workload(workload("big", cpu="2"), T0)
    cond = next(x for x in run(state)[0].status.conditions or [] if x.type == c.QUOTA_RESERVED)
    assert (cond.reason, cond.message.startswith("couldn't assign flavors to pod set main")) == ("ExceedsMaxQuota", True)


def test_admissions_and_evictions_are_marked_as_moving_quota() -> None:
    """The controller writes those before the messages of workloads that still wait."""
    state = ready_state(cpu=1, preemption={"withinClusterQueue": "LowerPriority"})
    low = workload("low", priority=1)
    state.upsert_workload(low, T0)
    state.upsert_workload(workload("waiting", priority=0, at=1), T0)
    writes = {w.key: w for w in run(state)}
    assert writes["ns/low"].moves_quota and not writes["ns/waiting"].moves_quota
    state.write_succeeded(writes["ns/low"], stored(writes["ns/low"], low, "2"))
    state.upsert_workload(stored(writes["ns/low"], low, "2"), T0)
    state.upsert_workload(workload("high", priority=100, at=2), T0)
    writes = {w.key: w for w in run(state)}
    assert writes["ns/low"].moves_quota, "the eviction of the preempted workload"
    assert not writes["ns/high"].moves_quota, "the preemptor only says that it waits for its victim"


def test_an_admission_replaces_its_workloads_message_still_waiting_to_be_sent() -> None:
    """One write per workload at a time, except that a write that moves quota replaces a
    message of the same workload that has not been sent yet: messages wait behind every
    admission, so holding the admission behind its own message would make it wait too."""
    state = ready_state(cpu=1)
    state.upsert_workload(workload("a", at=0), T0)
    state.upsert_workload(workload("b", at=1), T0)
    writes = {w.key: w for w in run(state)}
    admission, message = writes["ns/a"], writes["ns/b"]
    assert admission.moves_quota and not message.moves_quota
    cases = [
        (admission, False, False, SEND),
        (message, False, False, SEND),
        (admission, True, True, REPLACE),  # its own message has not been sent yet
        (admission, True, False, HOLD),  # the write in flight may have been sent: wait for it
        (message, True, True, HOLD),  # a message never replaces anything
        (message, True, False, HOLD),
    ]
    for write, in_flight, unsent_message, expected in cases:
        assert issue_action(write, in_flight=in_flight, unsent_message=unsent_message) == expected, (write.key, in_flight, unsent_message)


def test_which_status_writes_move_quota_or_start_or_stop_work() -> None:
    def status(*true: str, admitted_in: str | None = None) -> kueue.WorkloadStatus:
        conditions = [
            {"type": kind, "status": "True", "reason": "R", "message": "m", "lastTransitionTime": T0.isoformat()} for kind in true
        ]
        admission = {"clusterQueue": admitted_in, "podSetAssignments": []} if admitted_in else None
        return kueue.WorkloadStatus.model_validate({"conditions": conditions, "admission": admission})

    pending, reserved = status(), status(c.QUOTA_RESERVED, admitted_in="cq")
    cases = [
        (pending, pending, False),  # a new message for a workload that still waits
        (pending, reserved, True),  # quota taken
        (reserved, pending, True),  # quota given back (an eviction already said so, say)
        (reserved, status(c.QUOTA_RESERVED, c.ADMITTED, admitted_in="cq"), True),  # its checks are Ready: the job starts
        (reserved, status(c.QUOTA_RESERVED, c.EVICTED, admitted_in="cq"), True),
        (pending, status("DeactivationTarget"), True),
        (status(c.EVICTED), status(c.EVICTED), False),
    ]
    for current, desired, expected in cases:
        assert moves_quota(current, desired) is expected, (current, desired)


def test_a_pending_condition_another_writer_left_is_not_written_over() -> None:
    # Kueue's scheduler-performance runner (like a job controller) gives an evicted Workload's
    # quota back with its own QuotaReserved=False reason; Kueue's scheduler leaves it until the
    # workload fails again as a head. kfed wrote its own reason back (128 extra status writes in
    # one 1,500-Workload run under that runner, issue #37).
    state = ready_state(cpu=1, preemption={"withinClusterQueue": "LowerPriority"})
    low = workload("low", priority=1)
    state.upsert_workload(low, T0)
    first = run(state)[0]
    state.write_succeeded(first, stored(first, low, "2"))
    state.upsert_workload(workload("high", priority=100, at=5), T0)
    writes = {w.key: w for w in run(state)}
    evicted = stored(writes["ns/low"], low, "3")
    state.write_succeeded(writes["ns/low"], evicted)
    state.upsert_workload(evicted, T0)
    by_runner = released(writes["ns/low"], evicted, "4")
    for cond in by_runner.status.conditions or [] if by_runner.status else []:
        if cond.type == c.QUOTA_RESERVED:
            cond.reason, cond.message = "Pending", "Evicted by the test runner"
    state.upsert_workload(by_runner, T0)
    assert [w.key for w in state.flush(T0)] == [], "the runner's release is left as it is"
    writes = {w.key: w for w in run(state)}
    assert writes["ns/high"].admits
    reason = next(cond.reason for cond in writes["ns/low"].status.conditions or [] if cond.type == c.QUOTA_RESERVED)
    assert reason == "WaitingForQuota", "written again only once it fails as a head again, as Kueue writes it"


def test_a_workload_seen_before_its_local_queue_at_start_is_not_written_as_misconfigured() -> None:
    # The informers fill in any order at start: a Workload may arrive before its LocalQueue.
    # Kueue's controllers start once every cache has synced, so nothing is written then; kfed
    # wrote "LocalQueue lq doesn't exist" on every pending Workload parked with its class (never
    # tried itself) at each start.
    state = AdmissionState()
    state.upsert_namespace("ns", {})
    state.upsert_flavor(flavor())
    for i in range(3):
        state.upsert_workload(workload(f"waiting-{i}", cpu="2", at=i), T0)
    state.upsert_cluster_queue(cluster_queue(cpu=1))
    state.upsert_local_queue(local_queue())
    state.rebuild_if_needed(T0)
    writes = run(state)
    assert [w.key for w in writes] == ["ns/waiting-0"]  # the head tried; its class parked with it, unwritten
    assert all("doesn't exist" not in (c.message or "") for w in writes for c in w.status.conditions or [])
    assert state.infos["ns/waiting-2"].conditions.get(c.QUOTA_RESERVED) is None


def test_a_workload_whose_local_queue_is_truly_missing_is_told_so() -> None:
    state = ready_state()
    wl = workload("lost", cpu="1")
    wl.spec.queue_name = "nowhere"
    state.upsert_workload(wl, T0)
    [write] = run(state)
    cond = next(c for c in write.status.conditions or [] if c.type == "QuotaReserved")
    assert (cond.reason, cond.message) == ("Misconfigured", "LocalQueue nowhere doesn't exist")
