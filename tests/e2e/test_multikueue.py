"""MultiKueue end to end: Jobs submitted to the manager run on worker clusters, through real
apiservers, the real Job controller and kwok nodes, with faults injected by stopping a
worker's apiserver, rotating its Secret and restarting the manager."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.faults import JobRecord, PodRecorder, PodRun, describe_runs, judge
from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job, Secret
from manager.api.meta import find_condition, is_condition_true
from manager.engine.workload import admission_check_state
from manager.kube.client import KubeClient
from manager.kube.errors import NotFoundError
from tests.e2e.federation import (
    CHECK,
    GC_INTERVAL,
    PARKED,
    RUNS,
    WORKER_LOST_TIMEOUT,
    Clients,
    Federation,
    build_second_manager,
    job_manifest,
    running,
    secret_manifest,
    watch_workers,
)
from tests.harness import Provider, eventually, watched
from tests.integration.controllers import SYSTEM_NAMESPACE, ControllerProcess
from tests.integration.test_job_integrations import KWOK_RUN_TIME
from tests.integration.test_metrics import scrape
from tests.integration.test_metrics import value as sample_value

DISPATCHERS = {"all-at-once": c.DISPATCHER_ALL_AT_ONCE, "capacity-aware": c.DISPATCHER_CAPACITY_AWARE}


@pytest.fixture(scope="module", params=sorted(DISPATCHERS))
def dispatcher(request: pytest.FixtureRequest) -> str:
    """Every test here runs with Kueue's AllAtOnce dispatcher and with kfed's capacity-aware one."""
    return DISPATCHERS[request.param]


@pytest.fixture(scope="module")
def fed(fed: Federation, dispatcher: str, provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """The tier's shared federation (AllAtOnce), or one of this module's own whose manager
    dispatches capacity-aware."""
    if dispatcher == c.DISPATCHER_ALL_AT_ONCE:
        yield fed
        return
    with running(provider, Path(tmp_path_factory.mktemp("capacity-aware")), multikueue={"dispatcherName": dispatcher}) as created:
        yield created


@pytest.fixture
def tag() -> str:
    return f"t{uuid.uuid4().hex[:6]}"


def cluster_condition(obj: Any) -> tuple[str, str, str] | None:
    cond = find_condition(obj.status.conditions if obj.status else None, c.ACTIVE)
    return (cond.status, cond.reason, cond.message) if cond else None


async def admitted_on(kube: Clients, ns: str, job: str) -> str | None:
    wl = await kube.manager_workload(ns, job)
    check = admission_check_state(wl, CHECK) if wl else None
    if (
        wl is None
        or check is None
        or check.state != "Ready"
        or not is_condition_true(wl.status.conditions if wl.status else None, "Admitted")
    ):
        return None
    return wl.status.cluster_name if wl.status else None


async def running_where(kube: Clients, ns: str, job: str) -> list[str]:
    """The workers holding an unsuspended Job of this name."""
    jobs = await kube.remote_jobs(ns)
    return sorted(worker for worker, items in jobs.items() for j in items if j.name == job and j.spec.suspend is False)


# --- the happy path ------------------------------------------------------------------------------------
async def test_a_job_runs_on_exactly_one_worker_and_its_status_comes_back(kube: Clients, tag: str) -> None:
    ns = f"{tag}-happy"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 4}, labels=RUNS, tag=tag)
    await kube.manager.create(Job, job_manifest("train", ns))

    async def completed() -> Any:
        job = await kube.manager.get(Job, "train", namespace=ns)
        conditions = job.status.conditions if job.status else None
        return job if any(cond.type == "Complete" and cond.status == "True" for cond in conditions or []) else None

    job = await eventually(completed, timeout=90, what="the manager's Job Complete with the worker's status")
    assert job.spec.managed_by == c.MULTIKUEUE_MANAGED_BY  # the manager's Job controller never ran it
    assert job.status is not None and job.status.succeeded == 1 and job.status.start_time is not None
    wl = await kube.manager_workload(ns, "train")
    assert wl is not None and wl.status is not None
    finished = find_condition(wl.status.conditions, c.FINISHED)
    assert finished is not None and (finished.status, finished.reason) == ("True", "Succeeded")
    assert wl.status.cluster_name in ("worker1", "worker2")
    check = admission_check_state(wl, CHECK)
    assert check is not None and check.message == f'The workload was admitted on "{wl.status.cluster_name}"'

    async def cleaned() -> bool:
        jobs, wls = await kube.remote_jobs(ns), await kube.remote_workloads(ns)
        return not any(jobs.values()) and not any(wls.values())

    await eventually(cleaned, timeout=30, what="every remote Job and Workload deleted after the finish")
    # Its one pod was created on the winner, and none anywhere else.
    created = await pods_created(kube, ns, "train")
    assert sorted(created.values()) == [0, 1] and created[wl.status.cluster_name] == 1, created


async def pods_created(kube: Clients, ns: str, job: str, *, reason: str = "SuccessfulCreate") -> dict[str, int]:
    """Per worker, how many pods the Job controller created (or, with reason SuccessfulDelete,
    deleted when the Job was suspended) for the Jobs of this name: its Events outlive the Jobs
    and their pods."""
    out = {}
    for name, client in kube.workers.items():
        events = await client.request(
            "GET", f"/api/v1/namespaces/{ns}/events", query=[("fieldSelector", f"involvedObject.kind=Job,involvedObject.name={job}")]
        )
        out[name] = sum(event.get("count") or 1 for event in events["items"] if event.get("reason") == reason)
    return out


async def make_priority_classes(kube: Clients, tag: str) -> None:
    for name, value in (("low", 10), ("high", 1000)):
        with contextlib.suppress(Exception):
            await kube.manager.create(
                kueue.WorkloadPriorityClass,
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": f"{tag}-{name}"},
                    "value": value,
                },
            )


async def job_completed(kube: Clients, ns: str, name: str) -> Job | None:
    job = await kube.manager.get(Job, name, namespace=ns)
    conditions = job.status.conditions if job.status else None
    return job if any(cond.type == "Complete" and cond.status == "True" for cond in conditions or []) else None


async def test_a_job_with_a_62_character_name_runs_once_and_leaves_nothing_remote(kube: Clients, tag: str) -> None:
    """Its Workload's name (72 characters) fits no label value: the worker finds it by the
    prebuilt-workload-name annotation, as Kueue v0.18 and later do."""
    ns = f"{tag}-long"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 4}, labels=RUNS, tag=tag)
    name = ("long-" + tag + "-" + "x" * 62)[:62]
    await kube.manager.create(Job, job_manifest(name, ns))
    job = await eventually(lambda: job_completed(kube, ns, name), timeout=90, what="the long-named Job Complete on the manager")
    assert job.status is not None and job.status.succeeded == 1

    async def finished() -> kueue.Workload | None:
        wl = await kube.manager_workload(ns, name)
        return wl if wl is not None and is_condition_true(wl.status.conditions if wl.status else None, c.FINISHED) else None

    wl = await eventually(finished, timeout=30, what="the manager's Workload Finished")
    assert wl.status is not None and len(wl.name) > c.LABEL_VALUE_MAX_LENGTH

    async def cleaned() -> bool:
        jobs, wls = await kube.remote_jobs(ns), await kube.remote_workloads(ns)
        return not any(jobs.values()) and not any(wls.values())

    await eventually(cleaned, timeout=30, what="every remote Job and Workload deleted after the finish")
    created = await pods_created(kube, ns, name)
    assert sorted(created.values()) == [0, 1] and created[wl.status.cluster_name or ""] == 1, created


# --- first to admit wins ---------------------------------------------------------------------------------
async def test_the_first_worker_to_admit_wins_and_the_other_copy_is_deleted(kube: Clients, tag: str) -> None:
    ns = f"{tag}-first"
    cqs = await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 0, "worker2": 4}, labels=PARKED, tag=tag)
    await kube.manager.create(Job, job_manifest("one", ns))
    assert await eventually(lambda: admitted_on(kube, ns, "one"), timeout=60, what="admission on a worker") == "worker2"

    async def only_on(worker: str, name: str) -> bool:
        wls = await kube.remote_workloads(ns)
        holders = sorted(w for w, items in wls.items() for wl in items if wl.name.startswith(f"job-{name}-"))
        return holders == [worker]

    await eventually(lambda: only_on("worker2", "one"), timeout=30, what="the copy on worker1 deleted")
    assert await running_where(kube, ns, "one") == ["worker2"]
    # Fill worker2 and free worker1: the next Job goes to worker1.
    await kube.set_quota(kube.workers["worker2"], cqs["worker2"], 1)
    await kube.set_quota(kube.workers["worker1"], cqs["worker1"], 4)
    await kube.manager.create(Job, job_manifest("two", ns))
    assert await eventually(lambda: admitted_on(kube, ns, "two"), timeout=60, what="the second Job admitted") == "worker1"
    await eventually(lambda: only_on("worker1", "two"), timeout=30, what="the second Job's copy only on worker1")


# --- a worker that lacks the LocalQueue ------------------------------------------------------------------
async def test_a_worker_without_the_local_queue_is_reported_on_the_manager_workload(kube: Clients, tag: str) -> None:
    ns = f"{tag}-nolq"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 0, "worker2": 0}, labels=PARKED, tag=tag)
    await kube.workers["worker2"].delete(kueue.LocalQueue, "user-queue", namespace=ns)
    await kube.manager.create(Job, job_manifest("lost", ns))
    # No worker could ever admit it: refused on the manager, with every worker's reason.
    expected = (
        "no worker can ever admit it: needs cpu 1; largest worker offers cpu 0 (worker1); worker2: LocalQueue user-queue doesn't exist"
    )

    async def reported() -> Any:
        wl = await kube.manager_workload(ns, "lost")
        reserved = find_condition(wl.status.conditions if wl and wl.status else None, c.QUOTA_RESERVED)
        return reserved if reserved is not None and reserved.message == expected else None

    reserved = await eventually(reported, timeout=60, what="the manager's Workload naming worker2's missing LocalQueue")
    assert reserved.status == "False"
    assert {worker: len(items) for worker, items in (await kube.remote_workloads(ns)).items()} == {"worker1": 0, "worker2": 0}


# --- losing a worker -------------------------------------------------------------------------------------
async def test_a_lost_worker_is_given_up_after_the_timeout_and_cleaned_when_it_returns(fed: Federation, kube: Clients, tag: str) -> None:
    ns = f"{tag}-lost"
    cqs = await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 0}, labels=PARKED, tag=tag)
    await kube.manager.create(Job, job_manifest("resilient", ns))
    assert await eventually(lambda: admitted_on(kube, ns, "resilient"), timeout=60, what="admission on worker1") == "worker1"
    await eventually(lambda: running_where(kube, ns, "resilient"), timeout=30, what="the Job unsuspended on worker1")
    await kube.set_quota(kube.workers["worker2"], cqs["worker2"], 4)
    fed.stop_apiserver("worker1")
    try:

        async def disconnected() -> Any:
            cluster = await kube.manager.get(kueue.MultiKueueCluster, "worker1")
            cond = cluster_condition(cluster)
            return cond if cond and cond[1] == "ClientConnectionFailed" else None

        status, _, message = await eventually(disconnected, timeout=60, what="worker1 ClientConnectionFailed")
        assert status == "False" and "connection attempts: " in message and "next connection attempt: " in message
        moved = await eventually(lambda: _admitted_elsewhere(kube, ns), timeout=WORKER_LOST_TIMEOUT * 4, what="re-admission on worker2")
        assert moved == "worker2"
        wl = await kube.manager_workload(ns, "resilient")
        check = admission_check_state(wl, CHECK) if wl else None
        assert check is not None and check.retry_count == 1
    finally:
        fed.start_apiserver("worker1")

    async def stale_removed() -> bool:
        jobs = (await kube.workers["worker1"].list(Job, namespace=ns)).items
        wls = (await kube.workers["worker1"].list(kueue.Workload, namespace=ns)).items
        return not jobs and not wls

    await eventually(stale_removed, timeout=90, what="worker1's stale copy and Job deleted after it came back")
    assert await running_where(kube, ns, "resilient") == ["worker2"]


async def _admitted_elsewhere(kube: Clients, ns: str) -> str | None:
    where = await admitted_on(kube, ns, "resilient")
    return where if where != "worker1" else None


async def test_a_short_blip_causes_no_eviction(fed: Federation, kube: Clients, tag: str) -> None:
    ns = f"{tag}-blip"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 0}, labels=PARKED, tag=tag)
    await kube.manager.create(Job, job_manifest("steady", ns))
    assert await eventually(lambda: admitted_on(kube, ns, "steady"), timeout=60, what="admission on worker1") == "worker1"

    async def seen_down() -> bool:
        cond = cluster_condition(await kube.manager.get(kueue.MultiKueueCluster, "worker1"))
        return cond is not None and cond[0] == "False"

    async def back() -> bool:
        cond = cluster_condition(await kube.manager.get(kueue.MultiKueueCluster, "worker1"))
        return cond is not None and cond[:2] == ("True", "Active")

    evictions: list[str] = []

    def record(kind: str, old: Any, new: Any) -> None:
        if new is not None and is_condition_true(new.status.conditions if new.status else None, c.EVICTED):
            evictions.append(new.metadata.resource_version or "")

    async with watched(kube.manager, kueue.Workload, ns, record):
        fed.stop_apiserver("worker1")
        try:
            await eventually(seen_down, timeout=60, what="worker1 seen disconnected")
        finally:
            fed.start_apiserver("worker1")
        await eventually(back, timeout=60, what="worker1 connected again")
        # The manager has looked at the Workload again since the worker came back (a reconcile
        # counted), so "no eviction" is its decision, not a decision not yet taken.
        before = reconciles(fed.process, "multikueue-workload")
        await eventually(
            lambda: reconciles(fed.process, "multikueue-workload") > before, timeout=60, what="a MultiKueue reconcile after the return"
        )
    assert evictions == [], evictions  # not even for a moment
    wl = await kube.manager_workload(ns, "steady")
    assert wl is not None and wl.status is not None
    check = admission_check_state(wl, CHECK)
    assert check is not None and check.state == "Ready" and not check.retry_count
    assert wl.status.cluster_name == "worker1"


# --- credentials -----------------------------------------------------------------------------------------
async def test_secret_rotation_and_an_invalid_secret_show_on_the_cluster_and_recover(fed: Federation, kube: Clients) -> None:
    good = fed.workers["worker2"].kubeconfig()
    insecure = {
        **good,
        "clusters": [{**entry, "cluster": {**entry["cluster"], "insecure-skip-tls-verify": True}} for entry in good["clusters"]],
    }
    await kube.rotate_secret("worker2", insecure)

    async def condition_is(reason: str) -> Any:
        cond = cluster_condition(await kube.manager.get(kueue.MultiKueueCluster, "worker2"))
        return cond if cond is not None and cond[1] == reason else None

    try:
        status, _, message = await eventually(lambda: condition_is("InsecureKubeConfig"), timeout=30, what="InsecureKubeConfig")
        name = good["clusters"][0]["name"]
        assert (status, message) == ("False", f"load client config failed: insecure TLS verification is not allowed for cluster {name}")

        async def check_partly_active() -> Any:
            ac = await kube.manager.get(kueue.AdmissionCheck, CHECK)
            cond = cluster_condition(ac)
            return cond if cond is not None and cond[1] == "SomeActiveClusters" else None

        assert (await eventually(check_partly_active, timeout=30, what="the check SomeActiveClusters"))[2] == "Inactive clusters: [worker2]"
        await kube.manager.delete(Secret, "worker2-kubeconfig", namespace=SYSTEM_NAMESPACE)
        status, _, message = await eventually(lambda: condition_is("BadKubeConfig"), timeout=30, what="BadKubeConfig")
        assert message == 'load client config failed: Secret "worker2-kubeconfig" not found'
    finally:
        with contextlib.suppress(NotFoundError):
            await kube.manager.delete(Secret, "worker2-kubeconfig", namespace=SYSTEM_NAMESPACE)
        await kube.manager.create(Secret, secret_manifest("worker2-kubeconfig", good), namespace=SYSTEM_NAMESPACE)
    assert (await eventually(lambda: condition_is("Active"), timeout=60, what="worker2 Active again"))[2] == "Connected"


# --- the manager restarts ----------------------------------------------------------------------------------
async def test_a_manager_restart_mid_dispatch_makes_no_duplicates_and_dispatch_resumes(
    fed: Federation, kube: Clients, tag: str, dispatcher: str
) -> None:
    ns = f"{tag}-restart"
    cqs = await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 4}, labels=PARKED, tag=tag)
    for worker, client in kube.workers.items():  # both could admit it, and neither does yet
        await kube.set_stop_policy(client, cqs[worker], "Hold")
    await kube.manager.create(Job, job_manifest("survivor", ns))

    async def copies_everywhere() -> bool:
        wls = await kube.remote_workloads(ns)
        return all(len(items) == 1 for items in wls.values())

    async def held_on_the_manager() -> bool:
        # Capacity-aware: no worker has room, so no copy is sent and the check says why.
        wl = await kube.manager_workload(ns, "survivor")
        check = admission_check_state(wl, CHECK) if wl else None
        return check is not None and check.message == "waiting for room on worker1, worker2"

    async with watch_workers(kube, ns, kueue.Workload) as copies, watch_workers(kube, ns, Job) as jobs:
        if dispatcher == c.DISPATCHER_CAPACITY_AWARE:
            await eventually(held_on_the_manager, timeout=60, what="the Workload held on the manager, no worker having room")
        else:
            await eventually(copies_everywhere, timeout=60, what="a copy on each worker, waiting for quota")
        fed.stop_manager(kill=True)
        try:
            await kube.set_stop_policy(kube.workers["worker2"], cqs["worker2"], "None")
        finally:
            fed.start_manager()
        assert await eventually(lambda: admitted_on(kube, ns, "survivor"), timeout=60, what="admission after the restart") == "worker2"

        async def one_job_on_worker2() -> Any:
            jobs = {name: [j.name for j in items] for name, items in (await kube.remote_jobs(ns)).items()}
            wls = {name: len(items) for name, items in (await kube.remote_workloads(ns)).items()}
            return (jobs, wls) if jobs == {"worker1": [], "worker2": ["survivor"]} and wls == {"worker1": 0, "worker2": 1} else None

        await eventually(one_job_on_worker2, timeout=30, what="exactly one remote Job and copy, on worker2")
        assert await running_where(kube, ns, "survivor") == ["worker2"]
    # Across the restart, seen by a watch and not only at the end: one Job ever, on worker2, and
    # never two copies on a worker at once.
    assert jobs.uids["worker1"] == set() and len(jobs.uids["worker2"]) == 1, jobs
    assert max(copies.most_at_once.values()) == 1, copies


# --- a job no worker could ever admit --------------------------------------------------------------------
async def test_a_job_no_worker_could_ever_admit_holds_no_quota_preempts_nothing_and_runs_once_a_worker_grows(
    kube: Clients, tag: str
) -> None:
    ns = f"{tag}-huge"
    cqs = await kube.queues(ns, manager_cpu=12, worker_cpu={"worker1": 8, "worker2": 6}, labels=RUNS, tag=tag)
    await make_priority_classes(kube, tag)
    small = job_manifest("small", ns, cpu="2", priority_class=f"{tag}-low")
    small["spec"]["template"]["metadata"] = {"annotations": {KWOK_RUN_TIME: "600s"}}
    await kube.manager.create(Job, small)
    await eventually(lambda: running_where(kube, ns, "small"), timeout=60, what="the small Job running on a worker")
    # 12 cpu fit the manager's queue only by preempting the small Job; no worker offers 12.
    await kube.manager.create(Job, job_manifest("huge", ns, cpu="12", priority_class=f"{tag}-high"))
    expected = "no worker can ever admit it: needs cpu 12; largest worker offers cpu 8 (worker1), cpu 6 (worker2)"

    def story() -> Awaitable[str]:
        return workload_story(kube, ns, "huge")

    async def refused() -> Any:
        wl = await kube.manager_workload(ns, "huge")
        reserved = find_condition(wl.status.conditions if wl and wl.status else None, c.QUOTA_RESERVED)
        return reserved if reserved is not None and reserved.status == "False" and reserved.message == expected else None

    reserved = await eventually(refused, timeout=60, what="the huge Job refused with each worker's largest offer", explain=story)
    assert reserved.reason == "ExceedsMaxQuota"
    small_wl = await kube.manager_workload(ns, "small")
    assert small_wl is not None and not is_condition_true(small_wl.status.conditions if small_wl.status else None, c.EVICTED)
    assert await running_where(kube, ns, "small"), "the small Job was stopped"
    huge_wl = await kube.manager_workload(ns, "huge")
    assert huge_wl is not None
    copies = {worker: [wl.name for wl in items if wl.name == huge_wl.name] for worker, items in (await kube.remote_workloads(ns)).items()}
    assert copies == {"worker1": [], "worker2": []}
    # worker1's queue grows to 12 cpu: the huge Job is tried again, preempts the small one on
    # the manager, as its policy allows, and runs on worker1.
    await kube.set_quota(kube.workers["worker1"], cqs["worker1"], 12)
    assert await eventually(lambda: running_where(kube, ns, "huge"), timeout=120, what="the huge Job running", explain=story) == ["worker1"]


# --- preemption on the manager -------------------------------------------------------------------------------
async def test_a_job_preempted_on_the_manager_is_stopped_on_its_worker_and_quota_is_freed_on_both(kube: Clients, tag: str) -> None:
    ns = f"{tag}-preempt"
    cqs = await kube.queues(ns, manager_cpu=1, worker_cpu={"worker1": 4, "worker2": 4}, labels=PARKED, tag=tag)
    await make_priority_classes(kube, tag)
    await kube.manager.create(Job, job_manifest("victim", ns, priority_class=f"{tag}-low"))
    first_on = await eventually(lambda: admitted_on(kube, ns, "victim"), timeout=60, what="the low-priority Job admitted")
    await eventually(lambda: running_where(kube, ns, "victim"), timeout=30, what="the victim running on its worker")
    # Evicted once on its worker (deactivated there): dispatched again, its check retried once.
    copy = next(wl for wl in (await kube.workers[first_on].list(kueue.Workload, namespace=ns)).items if wl.name.startswith("job-victim-"))
    await kube.workers[first_on].patch(kueue.Workload, copy.name, {"spec": {"active": False}}, namespace=ns)

    async def dispatched_again() -> str | None:
        wl = await kube.manager_workload(ns, "victim")
        check = admission_check_state(wl, CHECK) if wl else None
        where = await admitted_on(kube, ns, "victim")
        manager_job = await kube.manager.get(Job, "victim", namespace=ns)
        # Running as the manager knows it: its Job reports the worker's active pod.
        active = manager_job.status is not None and (manager_job.status.active or 0) > 0
        return where if check is not None and check.retry_count == 1 and active and await running_where(kube, ns, "victim") else None

    def story() -> Awaitable[str]:
        return workload_story(kube, ns, "victim")

    victim_on = await eventually(dispatched_again, timeout=90, what="the victim retried once and running again", explain=story)
    await kube.manager.create(Job, job_manifest("urgent", ns, priority_class=f"{tag}-high"))

    async def victim_requeued() -> Any:
        wl = await kube.manager_workload(ns, "victim")
        conditions = wl.status.conditions if wl and wl.status else None
        evicted = find_condition(conditions, c.EVICTED)
        reserved = is_condition_true(conditions, c.QUOTA_RESERVED)
        return evicted if evicted is not None and evicted.reason == "Preempted" and not reserved else None

    evicted = await eventually(
        victim_requeued, timeout=90, what="the victim preempted and its quota released on the manager", explain=story
    )
    assert "Preempted to accommodate a workload" in evicted.message
    await eventually(lambda: admitted_on(kube, ns, "urgent"), timeout=60, what="the preemptor admitted")

    async def victim_gone_from(worker: str) -> bool:
        jobs = [j for j in (await kube.workers[worker].list(Job, namespace=ns)).items if j.name == "victim"]
        wls = [w for w in (await kube.workers[worker].list(kueue.Workload, namespace=ns)).items if w.name.startswith("job-victim-")]
        return not jobs and not wls

    await eventually(lambda: victim_gone_from(victim_on), timeout=60, what="the victim's Job and copy gone from its worker", explain=story)
    # Kueue's way: the worker was asked to deactivate its copy and stopped the running Job
    # itself, before the copy and Job went; the running Job was not simply deleted.
    events = await kube.workers[victim_on].request(
        "GET", f"/api/v1/namespaces/{ns}/events", query=[("fieldSelector", "involvedObject.kind=Job,involvedObject.name=victim")]
    )
    stopped = [event["message"] for event in events["items"] if event.get("reason") == "Stopped"]
    assert any("Evicted on manager" in message for message in stopped), [
        (event.get("reason"), event.get("message"), event["involvedObject"].get("uid")) for event in events["items"]
    ]
    victim = await kube.manager.get(Job, "victim", namespace=ns)
    assert victim.spec.suspend is True and not (victim.status and victim.status.active)
    urgent_on = await admitted_on(kube, ns, "urgent")
    expected = "1" if urgent_on == victim_on else "0"

    async def worker_reservation() -> str | None:
        # Written by the agent's periodic status round, after the victim's copy and the
        # preemptor's losing copy (which reserved there too until it was deleted) are gone.
        worker_cq = await kube.workers[victim_on].get(kueue.ClusterQueue, cqs[victim_on])
        reserved = worker_cq.status.flavors_reservation if worker_cq.status else None
        total = str((reserved[0].resources or [])[0].total) if reserved else None
        return total if total == expected else None

    await eventually(worker_reservation, timeout=30, what=f"the victim's worker reserving {expected} cpu")


async def test_short_jobs_under_preemption_churn_each_run_exactly_once(kube: Clients, tag: str) -> None:
    """Short Jobs preempted on the manager while they finish on a worker: each ends Complete
    with exactly one pod that ran, counted from the workers' own pods as they happen (the
    fault suite's recorder and rules); an eviction racing the finish never starts one again."""
    ns = f"{tag}-churn"
    recorders = {name: PodRecorder(name, client) for name, client in kube.workers.items()}
    for recorder in recorders.values():
        recorder.start()
    try:
        await kube.queues(ns, manager_cpu=2, worker_cpu={"worker1": 4, "worker2": 4}, labels=RUNS, tag=tag)
        await make_priority_classes(kube, tag)
        jobs = []
        for level in ("low", "high"):
            for i in range(10):
                name = f"{level}-{i}"
                manifest = job_manifest(name, ns, priority_class=f"{tag}-{level}")
                if level == "low":
                    # Some low Jobs finish at once and some run for a second or two, so that
                    # preemptions both race a finish and stop a running Job.
                    manifest["spec"]["template"]["metadata"] = {"annotations": {KWOK_RUN_TIME: f"{i % 3}s"}}
                await kube.manager.create(Job, manifest)
                jobs.append(name)
            if level == "low":
                # The high Jobs come once low ones hold the manager's quota: they must preempt.
                await eventually(lambda: _any_dispatched(kube, ns, jobs), timeout=60, what="a low Job dispatched to a worker")

        async def all_complete() -> bool:
            return all([await job_completed(kube, ns, name) is not None for name in jobs])

        try:
            await eventually(all_complete, timeout=300, what="every Job Complete on the manager")
        except pytest.fail.Exception:
            stories = [await workload_story(kube, ns, name) for name in jobs if await job_completed(kube, ns, name) is None]
            pytest.fail("Jobs not Complete on the manager after 300s:\n" + "\n".join(stories))

        async def cleaned() -> bool:
            remote_jobs, wls = await kube.remote_jobs(ns), await kube.remote_workloads(ns)
            return not any(remote_jobs.values()) and not any(wls.values())

        await eventually(cleaned, timeout=60, what="every remote Job and Workload deleted")
    finally:
        for recorder in recorders.values():
            await recorder.stop()
    runs: dict[str, list[PodRun]] = {}
    for recorder in recorders.values():
        for name, items in recorder.runs(ns).items():
            runs.setdefault(name, []).extend(items)
    records = [JobRecord(name, 1, True, False, False, tuple(runs.get(name, ()))) for name in jobs]
    wrong = {r.name: describe_runs(r.runs) for r in records if judge(r).twice or sum(run.succeeded for run in r.runs) != 1}
    assert not wrong, "\n".join(f"{name}: {story}" for name, story in wrong.items())
    preempted = 0
    for name in jobs:
        wl = await kube.manager_workload(ns, name)
        assert wl is not None and is_condition_true(wl.status.conditions if wl.status else None, c.FINISHED), name
        preempted += bool(find_condition(wl.status.conditions if wl.status else None, c.PREEMPTED))
    assert preempted > 0, "no Job was preempted: the test exercised no race"


async def _any_dispatched(kube: Clients, ns: str, jobs: list[str]) -> bool:
    for job in jobs:
        wl = await kube.manager_workload(ns, job)
        if wl is not None and wl.status is not None and wl.status.cluster_name:
            return True
    return False


async def workload_story(kube: Clients, ns: str, job: str) -> str:
    """One line on where a Job's Workload stands, on the manager and on each worker, for a
    failure message."""
    wl = await kube.manager_workload(ns, job)
    if wl is None:
        return f"{job}: no Workload"
    status = wl.status
    conditions = ", ".join(f"{cond.type}={cond.status}/{cond.reason}" for cond in (status.conditions if status else None) or [])
    checks = ", ".join(
        f"{check.name}={check.state}/retries={check.retry_count or 0}/{check.message!r}"
        for check in (status.admission_checks if status else None) or []
    )
    requeue = status.requeue_state.to_dict() if status and status.requeue_state else None
    copies = {
        worker: [
            ", ".join(f"{cond.type}={cond.status}" for cond in (copy.status.conditions if copy.status else None) or [])
            for copy in items
            if copy.name == wl.name
        ]
        for worker, items in (await kube.remote_workloads(ns)).items()
    }
    remote_jobs = {worker: [_job_state(j) for j in items if j.name == job] for worker, items in (await kube.remote_jobs(ns)).items()}
    manager_job = _job_state(await kube.manager.get(Job, job, namespace=ns))
    return (
        f"{job}: active={wl.spec.active} cluster={status.cluster_name if status else None} [{conditions}] checks [{checks}] "
        f"requeue={requeue} manager job {manager_job} copies={copies} remote jobs={remote_jobs}"
    )


def _job_state(job: Job) -> str:
    """A Job's suspension, pod counts and conditions, for a failure message."""
    status = job.status
    conditions = ",".join(f"{cond.type}={cond.status}" for cond in (status.conditions if status else None) or [])
    raw = status.to_dict() if status else {}
    counts = " ".join(f"{field}={raw.get(field)}" for field in ("active", "ready", "terminating", "succeeded"))
    return f"(suspend={job.spec.suspend} {counts} [{conditions}])"


# --- the garbage collector -------------------------------------------------------------------------------------
async def test_orphans_are_collected_after_the_worker_returns_and_other_origins_survive(fed: Federation, kube: Clients, tag: str) -> None:
    ns = f"{tag}-gc"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 0}, labels=PARKED, tag=tag)
    # Another manager's objects on worker1: another origin; never ours to touch.
    foreign_wl = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "theirs", "namespace": ns, "labels": {c.MULTIKUEUE_ORIGIN_LABEL: "another-manager"}},
        "spec": {
            "queueName": "user-queue",
            "podSets": [{"name": "main", "count": 1, "template": job_manifest("x", ns)["spec"]["template"]}],
        },
    }
    await kube.workers["worker1"].create(kueue.Workload, foreign_wl, namespace=ns)
    await kube.manager.create(Job, job_manifest("orphan", ns))
    assert await eventually(lambda: admitted_on(kube, ns, "orphan"), timeout=60, what="admission on worker1") == "worker1"
    await eventually(lambda: running_where(kube, ns, "orphan"), timeout=30, what="the Job running on worker1")
    fed.stop_apiserver("worker1")
    try:
        await kube.manager.delete(Job, "orphan", namespace=ns)

        async def manager_side_gone() -> bool:
            return not (await kube.manager.list(kueue.Workload, namespace=ns)).items

        await eventually(manager_side_gone, timeout=30, what="the manager's Workload deleted with its Job")
    finally:
        fed.start_apiserver("worker1")

    async def collected() -> bool:
        jobs = [j.name for j in (await kube.workers["worker1"].list(Job, namespace=ns)).items]
        wls = [w.name for w in (await kube.workers["worker1"].list(kueue.Workload, namespace=ns)).items]
        return jobs == [] and wls == ["theirs"]

    await eventually(collected, timeout=90, what="worker1's orphaned Job and copy collected, the other origin's Workload kept")


# --- what is in the way on a worker ------------------------------------------------------------------------------
async def test_a_foreign_job_with_the_same_name_is_never_touched_and_the_conflict_is_reported(kube: Clients, tag: str) -> None:
    ns = f"{tag}-foreign"
    cqs = await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 0}, labels=PARKED, tag=tag)
    # A Job of worker1's own users, with the same name, not queued and not ours.
    theirs = job_manifest("shared-name", ns)
    theirs["metadata"]["labels"] = {}
    theirs["spec"]["suspend"] = True
    created = await kube.workers["worker1"].create(Job, theirs, namespace=ns)
    await kube.manager.create(Job, job_manifest("shared-name", ns))

    async def reported() -> Any:
        wl = await kube.manager_workload(ns, "shared-name")
        check = admission_check_state(wl, CHECK) if wl else None
        return check if check is not None and "worker1" in check.message and "did not create" in check.message else None

    check = await eventually(reported, timeout=60, what="the conflict on worker1 said on the manager's check")
    assert check.state == "Pending"
    still = await kube.workers["worker1"].get(Job, "shared-name", namespace=ns)
    assert still.metadata.uid == created.metadata.uid and still.spec.suspend is True
    assert c.MULTIKUEUE_ORIGIN_LABEL not in (still.metadata.labels or {})
    # Another worker with room takes it.
    await kube.set_quota(kube.workers["worker2"], cqs["worker2"], 4)
    assert await eventually(lambda: admitted_on(kube, ns, "shared-name"), timeout=60, what="admission on worker2") == "worker2"
    assert (await kube.workers["worker1"].get(Job, "shared-name", namespace=ns)).metadata.uid == created.metadata.uid


# --- two managers share the workers --------------------------------------------------------------------------------
async def test_two_managers_with_different_origins_share_workers_without_touching_each_other(
    fed: Federation, provider: Provider, kube: Clients, tag: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    second = build_second_manager(fed, provider, tmp_path_factory.mktemp("second"), origin="second")
    try:
        other = await KubeClient.from_kubeconfig(second.manager.kubeconfig(), name="test-second")
        try:
            ns = f"{tag}-two"
            await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 8, "worker2": 0}, labels=PARKED, tag=tag)
            await Clients(other, {})._queue(other, ns, f"{tag}-mgr", 4, {}, flavor=f"{tag}-flavor", check=CHECK)
            await kube.manager.create(Job, job_manifest("first", ns))
            await other.create(Job, job_manifest("second", ns), namespace=ns)
            assert (
                await eventually(lambda: admitted_on(kube, ns, "first"), timeout=60, what="the first manager's Job admitted") == "worker1"
            )

            async def both_running() -> Any:
                jobs = {
                    j.name: (j.metadata.labels or {}).get(c.MULTIKUEUE_ORIGIN_LABEL)
                    for j in (await kube.workers["worker1"].list(Job, namespace=ns)).items
                }
                return jobs if jobs == {"first": "multikueue", "second": "second"} else None

            await eventually(both_running, timeout=60, what="each manager's Job on worker1, with its own origin")
            # Two completed GC passes of each manager over worker1 later (counted, not assumed from
            # the time that passed), both Jobs are still there, checked all along.
            managers = {"first": fed.process, "second": second.process}
            before = {name: gc_passes(process, "worker1") for name, process in managers.items()}

            async def two_more_passes_each() -> bool:
                assert await both_running(), "a manager touched the other's objects"
                return all(gc_passes(process, "worker1") >= before[name] + 2 for name, process in managers.items())

            await eventually(two_more_passes_each, timeout=6 * GC_INTERVAL + 30, interval=0.5, what="two GC passes of each manager")
        finally:
            await other.close()
    finally:
        second.stop_manager()


def reconciles(process: ControllerProcess | None, controller: str) -> float:
    """How many reconciles the manager's `controller` has made, whatever their result."""
    assert process is not None
    found = scrape(process)
    return sum(
        v for (name, labels), v in found.items() if name == "kfed_controller_reconcile_total" and ("controller", controller) in labels
    )


def gc_passes(process: ControllerProcess | None, cluster: str) -> float:
    """How many garbage collection passes the manager has completed over `cluster`."""
    assert process is not None
    return sample_value(scrape(process), "kfed_multikueue_gc_passes_total", cluster=cluster) or 0.0


# --- a worker whose admission agent is not running -----------------------------------------------------
async def test_a_worker_whose_agent_stopped_is_reported_and_gets_no_new_workload(fed: Federation, kube: Clients, tag: str) -> None:
    ns = f"{tag}-agent"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 4, "worker2": 4}, labels=RUNS, tag=tag)
    agent = fed.agents["worker2"]
    agent.terminate()  # its apiserver still answers: only the admission side is gone
    try:

        async def reported() -> Any:
            found = cluster_condition(await kube.manager.get(kueue.MultiKueueCluster, "worker2"))
            return found if found and found[:2] == ("False", "AdmissionAgentNotRunning") else None

        _, _, message = await eventually(reported, timeout=60, what="worker2 reported with its agent not running")
        assert message.startswith("the worker's admission agent is not running: its Lease kfed-system/kfed-worker-agent")
        async with watch_workers(kube, ns, kueue.Workload) as copies:
            await kube.manager.create(Job, job_manifest("while-down", ns))
            assert await eventually(lambda: admitted_on(kube, ns, "while-down"), timeout=60, what="admission on worker1") == "worker1"
        # Never sent to the worker that could not admit it, not even for a moment.
        assert copies.names["worker2"] == set() and len(copies.names["worker1"]) == 1, copies
    finally:
        agent.process = None
        agent.start()
        agent.wait_ready()

    async def active_again() -> Any:
        found = cluster_condition(await kube.manager.get(kueue.MultiKueueCluster, "worker2"))
        return found if found and found[:2] == ("True", "Active") else None

    await eventually(active_again, timeout=60, what="worker2 Active again once its agent runs")
