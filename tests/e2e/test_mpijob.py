"""MPIJobs (kubeflow.org/v2beta1) with the real MPI Operator (v0.6.0) on each worker.

On one cluster (submitted to a worker): a queued MPIJob waits suspended until its Workload is
admitted, starts with the flavor's node labels in its launcher's and workers' templates, is
preempted by suspending it (the operator deletes its worker pods and suspends its launcher
Job), and finishes once its launcher Job succeeds. Through MultiKueue (submitted to the
manager): it runs on exactly one worker, its status comes back, nothing is left on the workers
after it finished or was deleted (`kfed cancel mpijob/NAME`), and a preempted MPIJob is
suspended on the manager and removed from its worker, then runs again.

On kwok's nodes the launcher's pod, a Job's, runs for its `pod-complete.stage.kwok.x-k8s.io/delay`
then succeeds, which makes the MPIJob Succeeded; the worker pods run until the operator removes
them (cleanPodPolicy Running).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job, Pod
from manager.api.meta import find_condition
from manager.api.mpijob import JOB_NAME_LABEL, MPIJob
from manager.kube.client import KubeClient
from tests.e2e.federation import RUNS, Clients, Federation, finished_workload, job_manifest, owned_workload, running
from tests.e2e.test_cli import jobs_json, jobs_table, kfed, status_in
from tests.e2e.test_multikueue import make_priority_classes
from tests.harness import Provider, eventually, require_controller
from tests.integration.test_job_integrations import KWOK_RUN_TIME


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation: the MPIJob CRD everywhere, the MPI Operator on the workers,
    and kfed integrating MPIJobs (the tier's `kube` fixture opens its clients on it)."""
    mpijob_bin = require_controller("mpijob")
    with running(provider, Path(tmp_path_factory.mktemp("mpijob")), controllers={"mpijob": mpijob_bin}) as created:
        yield created


def mpijob_manifest(
    name: str, namespace: str, *, workers: int = 2, cpu: str = "1", run_time: str = "2s", priority_class: str | None = None
) -> dict[str, Any]:
    """A queued MPIJob: a launcher and `workers` workers of `cpu` each; on kwok nodes the
    launcher runs for `run_time`, the workers until the operator removes them."""
    labels = {c.QUEUE_NAME_LABEL: "user-queue"}
    if priority_class:
        labels[c.PRIORITY_CLASS_LABEL] = priority_class

    def replica(replicas: int, annotations: dict[str, str]) -> dict[str, Any]:
        container = {"name": "mpi", "image": "mpioperator/mpi-pi:openmpi", "resources": {"requests": {"cpu": cpu}}}
        return {
            "replicas": replicas,
            "restartPolicy": "Never",
            "template": {"metadata": {"labels": {"app": name}, "annotations": annotations}, "spec": {"containers": [container]}},
        }

    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {"Launcher": replica(1, {KWOK_RUN_TIME: run_time}), "Worker": replica(workers, {})},
        },
    }


def condition(job: MPIJob, kind: str) -> bool:
    return any(cond.type == kind and cond.status == "True" for cond in (job.status.conditions if job.status else None) or [])


def active(job: MPIJob) -> int:
    statuses = (job.status.replica_statuses if job.status else None) or {}
    return sum(status.active or 0 for status in statuses.values() if status is not None)


async def pods_of(client: KubeClient, ns: str, name: str) -> list[Pod]:
    return [pod for pod in (await client.list(Pod, namespace=ns)).items if (pod.metadata.labels or {}).get(JOB_NAME_LABEL) == name]


def templates(job: MPIJob) -> dict[str, dict[str, Any]]:
    return {kind: spec["template"] for kind, spec in job.to_dict()["spec"]["mpiReplicaSpecs"].items()}


# --- one cluster ---------------------------------------------------------------------------------------
async def test_an_mpijob_on_a_single_cluster_waits_suspended_starts_with_its_flavor_is_preempted_and_finishes(kube: Clients) -> None:
    """Kueue on one cluster: worker1's own queue, with room for one MPIJob, admits them."""
    ns = f"ml{uuid.uuid4().hex[:6]}"
    worker, cq = await kube.single_cluster_queue(ns, cpu=3, labels=RUNS)
    # Held: the MPIJob must wait, suspended, with no pod, until its queue admits it.
    await worker.patch(kueue.ClusterQueue, cq, {"spec": {"stopPolicy": "Hold"}})
    created = await worker.create(MPIJob, mpijob_manifest("victim", ns, run_time="600s", priority_class=f"{ns}-low"))
    assert created.to_dict()["spec"]["runPolicy"].get("suspend") is True, "queued MPIJobs are created suspended"
    assert "managedBy" not in created.to_dict()["spec"]["runPolicy"], "no MultiKueue check on this queue"
    wl = await eventually(lambda: owned_workload(worker, MPIJob, ns, "victim"), timeout=30, what="a Workload for MPIJob victim")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("launcher", 1), ("worker", 2)]

    async def suspended_by_the_operator() -> MPIJob | None:
        job = await worker.get(MPIJob, "victim", namespace=ns)
        return job if condition(job, "Suspended") else None

    await eventually(suspended_by_the_operator, timeout=30, what="the MPI Operator seeing MPIJob victim suspended")
    assert await pods_of(worker, ns, "victim") == [], "no pod while it waits"
    await worker.patch(kueue.ClusterQueue, cq, {"spec": {"stopPolicy": "None"}})

    async def running() -> MPIJob | None:
        job = await worker.get(MPIJob, "victim", namespace=ns)
        return job if job.spec.run_policy.suspend is False and condition(job, "Running") else None

    started = await eventually(running, timeout=90, what="MPIJob victim admitted, resumed and Running (its launcher and 2 workers)")
    for kind, template in templates(started).items():
        assert template["spec"].get("nodeSelector") == RUNS, f"{kind}: the flavor's node labels, got {template['spec'].get('nodeSelector')}"
        assert template["metadata"]["labels"][c.PODSET_LABEL] == kind.lower()
    pods = await pods_of(worker, ns, "victim")
    assert sorted(pod.name for pod in pods if pod.metadata.name and "-worker-" in pod.metadata.name) == [
        "victim-worker-0",
        "victim-worker-1",
    ]
    workers = [pod for pod in pods if "-worker-" in (pod.metadata.name or "")]
    assert all((pod.spec.node_selector or {}).get("type") == RUNS["type"] for pod in workers), "the worker pods run with the flavor"
    # The MPI Operator v0.6.0 made the launcher Job when the MPIJob was created (suspended) and, on
    # resuming it, only unsuspends it: the launcher keeps the template it was made with, without
    # the flavor's node labels (later releases sync its scheduling directives). Kueue has the same.
    launcher_job = await worker.get(Job, "victim-launcher", namespace=ns)
    assert "nodeSelector" not in launcher_job.to_dict()["spec"]["template"]["spec"]

    # A higher-priority MPIJob preempts it: suspended, its worker pods deleted, its templates restored.
    await worker.create(MPIJob, mpijob_manifest("urgent", ns, run_time="3s", priority_class=f"{ns}-high"))

    async def preempted() -> MPIJob | None:
        victim_wl = await owned_workload(worker, MPIJob, ns, "victim")
        evicted = find_condition(victim_wl.status.conditions if victim_wl and victim_wl.status else None, c.EVICTED)
        job = await worker.get(MPIJob, "victim", namespace=ns)
        return job if evicted is not None and evicted.reason == "Preempted" and job.spec.run_policy.suspend is True else None

    await eventually(preempted, timeout=60, what="MPIJob victim preempted and suspended")

    async def stopped() -> MPIJob | None:
        job = await worker.get(MPIJob, "victim", namespace=ns)
        workers_left = [pod for pod in await pods_of(worker, ns, "victim") if "-worker-" in (pod.metadata.name or "")]
        restored = all("nodeSelector" not in template["spec"] for template in templates(job).values())
        return job if not workers_left and restored and active(job) == 0 else None

    await eventually(stopped, timeout=60, what="MPIJob victim's worker pods deleted by the operator and its templates restored")
    launcher = await worker.get(Job, "victim-launcher", namespace=ns)
    assert launcher.spec.suspend is True, "the operator suspends the launcher Job with the MPIJob"

    async def succeeded(name: str) -> MPIJob | None:
        job = await worker.get(MPIJob, name, namespace=ns)
        return job if condition(job, "Succeeded") else None

    await eventually(lambda: succeeded("urgent"), timeout=120, what="MPIJob urgent Succeeded")
    await finished_workload(worker, MPIJob, ns, "urgent")
    # With the quota back the victim runs again, and its launcher (600 s) keeps it Running.
    await eventually(running, timeout=90, what="MPIJob victim admitted again and Running")
    await worker.delete(MPIJob, "victim", namespace=ns)


# --- MultiKueue -------------------------------------------------------------------------------------------
async def test_an_mpijob_submitted_to_the_manager_runs_on_one_worker_and_its_status_comes_back(kube: Clients) -> None:
    ns = f"mj{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 8, "worker2": 8}, labels=RUNS, tag=ns)
    created = await kube.manager.create(MPIJob, mpijob_manifest("pi", ns, run_time="10s"))
    # Kueue's defaulting webhook: an MPIJob queued through MultiKueue is managed by it.
    assert created.to_dict()["spec"]["runPolicy"]["managedBy"] == c.MULTIKUEUE_CONTROLLER_NAME
    assert created.to_dict()["spec"]["runPolicy"]["suspend"] is True

    wl = await eventually(lambda: owned_workload(kube.manager, MPIJob, ns, "pi"), timeout=30, what="a Workload for MPIJob pi")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("launcher", 1), ("worker", 2)]

    async def running_on() -> list[str]:
        where = await kube.remote(MPIJob, ns, "pi")
        return [worker for worker, items in where.items() if items]

    workers = await eventually(running_on, timeout=60, what="the MPIJob created on a worker")
    assert len(workers) == 1, f"MPIJob pi on {workers}"
    remote = (await kube.remote(MPIJob, ns, "pi"))[workers[0]][0]
    labels = remote.metadata.labels or {}
    assert labels.get(c.PREBUILT_WORKLOAD_LABEL) == wl.name
    assert labels.get(c.MULTIKUEUE_ORIGIN_LABEL)
    assert "managedBy" not in remote.to_dict()["spec"]["runPolicy"], "the worker's MPI Operator runs it"

    async def manager_running() -> MPIJob | None:
        job = await kube.manager.get(MPIJob, "pi", namespace=ns)
        return job if condition(job, "Running") and active(job) == 3 else None

    await eventually(manager_running, timeout=90, what="the manager's MPIJob Running with 3 active pods, from its worker's status")
    assert await pods_of(kube.manager, ns, "pi") == [], "the manager runs no pod of it"

    async def manager_succeeded() -> MPIJob | None:
        job = await kube.manager.get(MPIJob, "pi", namespace=ns)
        return job if condition(job, "Succeeded") else None

    done = await eventually(manager_succeeded, timeout=120, what="the manager's MPIJob Succeeded, from its worker's status")
    status = done.to_dict()["status"]
    assert status["replicaStatuses"]["Launcher"].get("succeeded") == 1
    assert status.get("completionTime")
    finished = await finished_workload(kube.manager, MPIJob, ns, "pi")
    assert (finished.status.cluster_name if finished.status else None) == workers[0]

    async def nothing_left() -> bool:
        jobs = await kube.remote(MPIJob, ns, "pi")
        copies = await kube.remote_copies(ns, wl.name)
        return not any(jobs.values()) and not any(copies.values())

    await eventually(nothing_left, timeout=60, what="no MPIJob and no Workload copy left on the workers")


async def test_a_preempted_mpijob_is_suspended_removed_from_its_worker_and_runs_again(kube: Clients) -> None:
    ns = f"mp{uuid.uuid4().hex[:6]}"
    # Room for one MPIJob of 3 cpu on the manager; each worker could take both.
    await kube.queues(ns, manager_cpu=3, worker_cpu={"worker1": 6, "worker2": 6}, labels=RUNS, tag=ns)
    await make_priority_classes(kube, ns)
    await kube.manager.create(MPIJob, mpijob_manifest("victim", ns, run_time="20s", priority_class=f"{ns}-low"))

    async def victim_running() -> str | None:
        where = await kube.remote(MPIJob, ns, "victim")
        job = await kube.manager.get(MPIJob, "victim", namespace=ns)
        on = [worker for worker, items in where.items() if items]
        return on[0] if len(on) == 1 and active(job) > 0 else None

    first_on = await eventually(victim_running, timeout=90, what="the low-priority MPIJob running on a worker, as the manager sees it")
    victim_wl = await owned_workload(kube.manager, MPIJob, ns, "victim")
    assert victim_wl is not None
    await kube.manager.create(MPIJob, mpijob_manifest("urgent", ns, priority_class=f"{ns}-high"))

    async def victim_preempted() -> Any:
        wl = await owned_workload(kube.manager, MPIJob, ns, "victim")
        evicted = find_condition(wl.status.conditions if wl and wl.status else None, c.EVICTED)
        job = await kube.manager.get(MPIJob, "victim", namespace=ns)
        return evicted if evicted is not None and evicted.reason == "Preempted" and job.spec.run_policy.suspend is True else None

    evicted = await eventually(victim_preempted, timeout=90, what="the victim preempted and its MPIJob suspended on the manager")
    assert "Preempted to accommodate a workload" in evicted.message

    async def victim_gone_from_its_worker() -> bool:
        return not (await kube.remote(MPIJob, ns, "victim"))[first_on] and not (await kube.remote_copies(ns, victim_wl.name))[first_on]

    await eventually(victim_gone_from_its_worker, timeout=60, what="the victim's MPIJob and copy gone from its worker")

    async def both_succeeded() -> bool:
        jobs = [await kube.manager.get(MPIJob, name, namespace=ns) for name in ("urgent", "victim")]
        return all(condition(job, "Succeeded") for job in jobs)

    await eventually(both_succeeded, timeout=180, what="the preemptor, then the victim, Succeeded")
    urgent_wl = await owned_workload(kube.manager, MPIJob, ns, "urgent")
    assert urgent_wl is not None

    async def nothing_left() -> bool:
        left = [await kube.remote(MPIJob, ns, name) for name in ("urgent", "victim")]
        copies = [await kube.remote_copies(ns, wl.name) for wl in (urgent_wl, victim_wl)]
        return not any(items for where in left for items in where.values()) and not any(n for cp in copies for n in cp.values())

    await eventually(nothing_left, timeout=60, what="nothing left on the workers")


async def test_kfed_lists_explains_logs_and_cancels_an_mpijob(fed: Federation, kube: Clients) -> None:
    ns = f"mc{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=6, worker_cpu={"worker1": 0, "worker2": 6}, labels=RUNS, tag=ns)
    await kube.manager.create(MPIJob, mpijob_manifest("pretrain", ns, run_time="600s"))
    await kube.manager.create(Job, job_manifest("waiting", ns, cpu="4"))  # 3 + 4 cpu > 6: waits on the manager

    async def running_on_worker2() -> bool:
        where = await kube.remote(MPIJob, ns, "pretrain")
        job = await kube.manager.get(MPIJob, "pretrain", namespace=ns)
        return bool(where["worker2"]) and not where["worker1"] and condition(job, "Running")

    await eventually(running_on_worker2, timeout=90, what="MPIJob pretrain Running on worker2")

    async def listed() -> Any:
        rows = jobs_table(fed.manager, ns)
        return rows if status_in(rows, "mpijob/pretrain") == "Running" else None

    rows = await eventually(listed, timeout=60, what="`kfed jobs` listing the MPIJob Running")
    assert rows["mpijob/pretrain"][3] == "worker2"
    assert rows["job/waiting"][2] == "Pending"
    records = {r["name"]: r for r in jobs_json(fed.manager, ns).values()}
    assert (records["pretrain"]["kind"], records["pretrain"]["cluster"]) == ("MPIJob", "worker2")

    explained = kfed(fed.manager, "explain", "mpijob/pretrain", "-n", ns)
    assert explained.returncode == 0, explained.stderr
    assert "worker2" in explained.stdout

    logs = kfed(fed.manager, "logs", "mpijob/pretrain", "-n", ns)
    assert logs.returncode == 0, logs.stderr
    # The launcher's pod and the two workers', found by the operator's labels on worker2.
    assert logs.stderr.startswith("==> mpijob/pretrain: 3 pod(s) on worker worker2"), logs.stderr
    lines = logs.stdout.splitlines()
    worker = fed.workers["worker2"].name
    # Several pods: each line names its pod; kwok's log of worker2, not worker1's or the manager's.
    assert lines and all(line.startswith("[pod/pretrain-") for line in lines), lines
    assert all(line.endswith((f"simulated container log on cluster {worker}", "done")) for line in lines), lines
    logged_pods = {line.split("/")[1] for line in lines}
    assert {"pretrain-worker-0", "pretrain-worker-1"} <= logged_pods and any(p.startswith("pretrain-launcher-") for p in logged_pods)

    dry = kfed(fed.manager, "cancel", "mpijob/pretrain", "-n", ns, "--dry-run")
    assert dry.returncode == 0 and dry.stdout.startswith(f"mpijob/pretrain in namespace {ns} on "), dry.stdout + dry.stderr
    cancelled = kfed(fed.manager, "cancel", "mpijob/pretrain", "-n", ns)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == "mpijob/pretrain deleted", cancelled.stdout + cancelled.stderr

    async def gone_everywhere() -> bool:
        on_manager = [job for job in (await kube.manager.list(MPIJob, namespace=ns)).items if job.name == "pretrain"]
        remote = await kube.remote(MPIJob, ns, "pretrain")
        copies = [wl for items in (await kube.remote_workloads(ns)).values() for wl in items if wl.name.startswith("mpijob-pretrain")]
        pods = await pods_of(kube.workers["worker2"], ns, "pretrain")
        return not on_manager and not any(remote.values()) and not copies and not pods

    await eventually(gone_everywhere, timeout=90, what="the MPIJob, its copy and its pods gone from the manager and from worker2")
    # Its quota is free: the waiting Job runs now.
    await eventually(lambda: _dispatched(kube, ns, "waiting"), timeout=60, what="the waiting Job admitted after the cancel")


async def _dispatched(kube: Clients, ns: str, job: str) -> bool:
    wl = await kube.manager_workload(ns, job)
    return bool(wl is not None and wl.status is not None and wl.status.cluster_name)
