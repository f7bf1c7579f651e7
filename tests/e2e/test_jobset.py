"""JobSets through MultiKueue, with the real JobSet controller on each worker: a researcher
submits a JobSet to the manager; it is queued there, runs on exactly one worker, its status
comes back, and nothing is left on the workers. A preempted JobSet is suspended on the manager
and removed from its worker, then runs again once there is room."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.jobset import JobSet
from manager.api.meta import find_condition, is_condition_true
from manager.kube.client import KubeClient
from tests.e2e.federation import RUNS, Clients, Federation, finished_workload, job_manifest, running
from tests.e2e.test_cli import jobs_json, jobs_table, kfed, status_in
from tests.e2e.test_multikueue import make_priority_classes
from tests.harness import Provider, eventually, require_controller
from tests.integration.test_job_integrations import jobset_manifest
from tests.integration.test_job_integrations import workload_of as workload_of_jobset


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation: JobSet's CRD everywhere, its controller on the workers, and
    kfed integrating JobSets (the tier's `kube` fixture opens its clients on it)."""
    jobset_bin = require_controller("jobset")
    with running(provider, Path(tmp_path_factory.mktemp("jobset")), controllers={"jobset": jobset_bin}) as created:
        yield created


async def workload_of(client: KubeClient, ns: str, name: str) -> kueue.Workload | None:
    return await workload_of_jobset(client, await client.get(JobSet, name, namespace=ns))


def completed(js: JobSet) -> bool:
    return any(cond.type == "Completed" and cond.status == "True" for cond in (js.status.conditions if js.status else None) or [])


async def test_a_jobset_submitted_to_the_manager_runs_on_one_worker_and_its_status_comes_back(kube: Clients) -> None:
    ns = f"js{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 8, "worker2": 8}, labels=RUNS, tag=ns)
    created = await kube.manager.create(JobSet, jobset_manifest("train", ns, run_time="3s"))
    # Kueue's defaulting webhook: a JobSet queued through MultiKueue is managed by it.
    assert created.to_dict()["spec"]["managedBy"] == c.MULTIKUEUE_CONTROLLER_NAME

    wl = await eventually(lambda: workload_of(kube.manager, ns, "train"), timeout=30, what="a Workload for JobSet train")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("leader", 1), ("workers", 4)]

    async def running_on() -> list[str]:
        where = await kube.remote(JobSet, ns, "train")
        return [worker for worker, items in where.items() if items]

    workers = await eventually(running_on, timeout=60, what="the JobSet created on a worker")
    assert len(workers) == 1, f"JobSet train on {workers}"
    remote = (await kube.remote(JobSet, ns, "train"))[workers[0]][0]
    labels = remote.metadata.labels or {}
    assert labels.get(c.PREBUILT_WORKLOAD_LABEL) == wl.name
    assert labels.get(c.MULTIKUEUE_ORIGIN_LABEL)
    assert "managedBy" not in remote.to_dict()["spec"], "the worker's JobSet controller runs it"

    async def manager_completed() -> JobSet | None:
        js = await kube.manager.get(JobSet, "train", namespace=ns)
        return js if completed(js) else None

    done = await eventually(manager_completed, timeout=120, what="the manager's JobSet Completed, from its worker's status")
    status = done.to_dict()["status"]
    assert status.get("terminalState") == "Completed"
    succeeded = {rj["name"]: rj.get("succeeded", 0) for rj in status.get("replicatedJobsStatus", [])}
    assert succeeded == {"leader": 1, "workers": 2}
    finished = await finished_workload(kube.manager, JobSet, ns, "train")
    assert (finished.status.cluster_name if finished.status else None) == workers[0]

    async def nothing_left() -> bool:
        jobsets = await kube.remote(JobSet, ns, "train")
        copies = await kube.remote_copies(ns, wl.name)
        return not any(jobsets.values()) and not any(copies.values())

    await eventually(nothing_left, timeout=60, what="no JobSet and no Workload copy left on the workers")


async def test_a_preempted_jobset_is_suspended_removed_from_its_worker_and_runs_again(kube: Clients) -> None:
    ns = f"jp{uuid.uuid4().hex[:6]}"
    # Room for one JobSet of 5 cpu on the manager; each worker could take both.
    await kube.queues(ns, manager_cpu=5, worker_cpu={"worker1": 10, "worker2": 10}, labels=RUNS, tag=ns)
    await make_priority_classes(kube, ns)
    await kube.manager.create(JobSet, jobset_manifest("victim", ns, run_time="20s", priority_class=f"{ns}-low"))

    async def victim_running() -> str | None:
        where = await kube.remote(JobSet, ns, "victim")
        js = await kube.manager.get(JobSet, "victim", namespace=ns)
        active = sum(rj.get("active", 0) for rj in (js.to_dict().get("status") or {}).get("replicatedJobsStatus", []))
        on = [worker for worker, items in where.items() if items]
        return on[0] if len(on) == 1 and active > 0 else None

    first_on = await eventually(victim_running, timeout=90, what="the low-priority JobSet running on a worker, as the manager sees it")
    victim_wl = await workload_of(kube.manager, ns, "victim")
    assert victim_wl is not None
    await kube.manager.create(JobSet, jobset_manifest("urgent", ns, priority_class=f"{ns}-high"))

    async def victim_preempted() -> Any:
        wl = await workload_of(kube.manager, ns, "victim")
        conditions = wl.status.conditions if wl and wl.status else None
        evicted = find_condition(conditions, c.EVICTED)
        js = await kube.manager.get(JobSet, "victim", namespace=ns)
        suspended = js.to_dict()["spec"].get("suspend") is True
        return evicted if evicted is not None and evicted.reason == "Preempted" and suspended else None

    evicted = await eventually(victim_preempted, timeout=90, what="the victim preempted and its JobSet suspended on the manager")
    assert "Preempted to accommodate a workload" in evicted.message

    async def victim_gone_from_its_worker() -> bool:
        return not (await kube.remote(JobSet, ns, "victim"))[first_on] and not (await kube.remote_copies(ns, victim_wl.name))[first_on]

    await eventually(victim_gone_from_its_worker, timeout=60, what="the victim's JobSet and copy gone from its worker")

    async def both_completed() -> bool:
        jobsets = [await kube.manager.get(JobSet, name, namespace=ns) for name in ("urgent", "victim")]
        return all(completed(js) for js in jobsets)

    await eventually(both_completed, timeout=180, what="the preemptor, then the victim, Completed")
    urgent_wl = await workload_of(kube.manager, ns, "urgent")
    assert urgent_wl is not None

    async def nothing_left() -> bool:
        left = [await kube.remote(JobSet, ns, name) for name in ("urgent", "victim")]
        copies = [await kube.remote_copies(ns, wl.name) for wl in (urgent_wl, victim_wl)]
        return not any(items for where in left for items in where.values()) and not any(n for cp in copies for n in cp.values())

    await eventually(nothing_left, timeout=60, what="nothing left on the workers")


async def test_a_jobset_on_a_single_cluster_is_admitted_with_its_flavor_and_completes(kube: Clients) -> None:
    """Kueue on one cluster: the worker's own queue admits a JobSet submitted to it, which runs
    there through the JobSet controller with the admitted flavor's node labels."""
    ns = f"jl{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=0, worker_cpu={"worker1": 8, "worker2": 0}, labels=RUNS, tag=ns)
    worker = kube.workers["worker1"]
    created = await worker.create(JobSet, jobset_manifest("local", ns, run_time="2s"))
    assert created.to_dict()["spec"].get("suspend") is True, "queued JobSets are created suspended"
    assert "managedBy" not in created.to_dict()["spec"], "no MultiKueue check on this queue"

    async def admitted() -> JobSet | None:
        js = await worker.get(JobSet, "local", namespace=ns)
        return js if js.to_dict()["spec"].get("suspend") is False else None

    started = await eventually(admitted, timeout=60, what="the JobSet admitted and resumed")
    for rjob in started.to_dict()["spec"]["replicatedJobs"]:
        selector = rjob["template"]["spec"]["template"]["spec"].get("nodeSelector", {})
        assert selector.get("type") == RUNS["type"], f"{rjob['name']}: the flavor's node labels, got {selector}"

    async def done() -> JobSet | None:
        js = await worker.get(JobSet, "local", namespace=ns)
        return js if completed(js) else None

    await eventually(done, timeout=120, what="the JobSet Completed on its cluster")

    async def finished() -> kueue.Workload | None:
        # The job controller writes Finished after it sees the JobSet's terminal condition.
        wl = await workload_of(worker, ns, "local")
        return wl if wl is not None and is_condition_true(wl.status.conditions if wl.status else None, c.FINISHED) else None

    wl = await eventually(finished, timeout=30, what="its Workload Finished")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("leader", 1), ("workers", 4)]


async def test_kfed_lists_explains_logs_and_cancels_a_jobset(fed: Federation, kube: Clients) -> None:
    ns = f"jc{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 0, "worker2": 8}, labels=RUNS, tag=ns)
    await kube.manager.create(JobSet, jobset_manifest("pretrain", ns, run_time="120s"))
    manifest = job_manifest("waiting", ns, cpu="4")  # 5 + 4 cpu > 8: waits on the manager
    await kube.manager.create(Job, manifest)

    async def running_on_worker2() -> bool:
        where = await kube.remote(JobSet, ns, "pretrain")
        return bool(where["worker2"]) and not where["worker1"]

    await eventually(running_on_worker2, timeout=90, what="JobSet pretrain on worker2")

    async def listed() -> Any:
        rows = jobs_table(fed.manager, ns)
        return rows if status_in(rows, "jobset/pretrain") == "Running" else None

    rows = await eventually(listed, timeout=60, what="`kfed jobs` listing the JobSet Running")
    assert rows["jobset/pretrain"][3] == "worker2"
    assert rows["job/waiting"][2] == "Pending"
    records = {r["name"]: r for r in jobs_json(fed.manager, ns).values()}
    assert (records["pretrain"]["kind"], records["pretrain"]["cluster"]) == ("JobSet", "worker2")
    assert records["waiting"]["kind"] == "Job"

    explained = kfed(fed.manager, "explain", "jobset/pretrain", "-n", ns)
    assert explained.returncode == 0, explained.stderr
    assert "worker2" in explained.stdout

    async def logged() -> Any:
        result = kfed(fed.manager, "logs", "jobset/pretrain", "-n", ns)
        return result if result.returncode == 0 else None

    logs = await eventually(logged, timeout=60, what="`kfed logs` reading the JobSet's pods on worker2")
    assert logs.stderr.startswith("==> jobset/pretrain: 5 pod(s) on worker worker2"), logs.stderr
    lines = logs.stdout.splitlines()
    worker = fed.workers["worker2"].name
    # Several pods: each line names its pod; kwok's log of worker2, not worker1's or the manager's.
    assert lines and all(line.startswith("[pod/pretrain-") for line in lines), lines
    assert all(line.endswith((f"simulated container log on cluster {worker}", "done")) for line in lines), lines

    dry = kfed(fed.manager, "cancel", "jobset/pretrain", "-n", ns, "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith(f"jobset/pretrain in namespace {ns} on "), dry.stdout + dry.stderr
    cancelled = kfed(fed.manager, "cancel", "jobset/pretrain", "-n", ns)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == "jobset/pretrain deleted", cancelled.stdout + cancelled.stderr

    async def gone_everywhere() -> bool:
        on_manager = [js for js in (await kube.manager.list(JobSet, namespace=ns)).items if js.name == "pretrain"]
        remote = await kube.remote(JobSet, ns, "pretrain")
        copies = [wl for items in (await kube.remote_workloads(ns)).values() for wl in items if wl.name.startswith("jobset-pretrain")]
        return not on_manager and not any(remote.values()) and not copies

    await eventually(gone_everywhere, timeout=60, what="the JobSet gone from the manager and from worker2")
    # Its quota is free: the waiting Job runs now.
    await eventually(lambda: _dispatched(kube, ns, "waiting"), timeout=60, what="the waiting Job admitted after the cancel")


async def _dispatched(kube: Clients, ns: str, job: str) -> bool:
    wl = await kube.manager_workload(ns, job)
    return bool(wl is not None and wl.status is not None and wl.status.cluster_name)
