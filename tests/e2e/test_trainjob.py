"""TrainJobs (Kubeflow Trainer v2, trainer.kubeflow.org/v1alpha1) with the real Trainer
controller manager (v2.2.1) and JobSet controller on each worker.

On one cluster (submitted to a worker): a queued TrainJob waits suspended until its Workload
is admitted, starts with the flavor's node labels (through Kueue's runtime patch, which the
Trainer writes into the JobSet it makes, so its pods run with them), is preempted by a
higher-priority TrainJob (suspended, its pods gone, Kueue's patch emptied again), and runs
again once the preemptor completes. Through MultiKueue (submitted to the manager): it runs on
exactly one worker, its status comes back, it completes, and nothing (TrainJob, JobSet,
Workload copy, pod) is left on the workers; a TrainJob preempted on the manager is suspended
there and taken off its worker, then runs again; `kfed jobs/explain/logs/cancel trainjob/NAME`
work.

Every TrainJob names the release's `torch-distributed` ClusterTrainingRuntime, which every
cluster has. Its pods run on kwok's nodes for the `pod-complete.stage.kwok.x-k8s.io/delay` a
runtime patch of the test's own gives them (a patch of another manager than Kueue's), then
succeed: the Job, then the JobSet, then the TrainJob complete.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Event, Pod
from manager.api.jobset import JOBSET_NAME_LABEL, JobSet
from manager.api.meta import find_condition
from manager.api.trainjob import CONTROLLER_NAME, KUEUE_PATCH_MANAGER, ClusterTrainingRuntime, TrainingRuntime, TrainJob
from manager.dev.trainer import RUNTIME
from manager.kube.client import KubeClient
from tests.e2e.federation import RUNS, Clients, Federation, finished_workload, owned_workload, running
from tests.e2e.test_cli import jobs_json, jobs_table, kfed
from tests.e2e.test_multikueue import make_priority_classes
from tests.harness import Provider, eventually, require_controller
from tests.integration.test_job_integrations import KWOK_RUN_TIME

TEST_PATCH_MANAGER = "kfed.dev/e2e"


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation: the Trainer's and JobSet's CRDs and the torch-distributed
    runtime everywhere, their controllers on the workers, and kfed integrating TrainJobs (and
    JobSets: those a TrainJob makes must stay the TrainJob's)."""
    controllers = {"jobset": require_controller("jobset"), "trainer": require_controller("trainer")}
    with running(provider, Path(tmp_path_factory.mktemp("trainjob")), controllers=controllers) as created:
        yield created


def trainjob_manifest(
    name: str, ns: str, *, nodes: int = 2, cpu: str = "1", run_time: str = "5s", priority_class: str | None = None
) -> dict[str, Any]:
    """A queued TrainJob of `nodes` training nodes of `cpu` each, which run for `run_time` on kwok."""
    labels = {c.QUEUE_NAME_LABEL: "user-queue"}
    if priority_class:
        labels[c.PRIORITY_CLASS_LABEL] = priority_class
    pod = {"metadata": {"annotations": {KWOK_RUN_TIME: run_time}}}
    run_time_patch = {
        "manager": TEST_PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": pod}}}]}}},
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": nodes, "resourcesPerNode": {"requests": {"cpu": cpu}}},
            "runtimePatches": [run_time_patch],
        },
    }


def condition(job: TrainJob, kind: str) -> bool:
    return any(cond.type == kind and cond.status == "True" for cond in (job.status.conditions if job.status else None) or [])


def active(job: TrainJob) -> int:
    return sum(status.active or 0 for status in (job.status.jobs_status if job.status else None) or [])


def kueue_patch(job: TrainJob) -> dict[str, Any] | None:
    return next((p for p in job.spec.runtime_patches or [] if p.get("manager") == KUEUE_PATCH_MANAGER), None)


def kueue_replicated_jobs(job: TrainJob) -> list[dict[str, Any]]:
    patch = kueue_patch(job) or {}
    return list(((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec", {}).get("replicatedJobs") or [])


async def pods_of(client: KubeClient, ns: str, name: str) -> list[Pod]:
    return [pod for pod in (await client.list(Pod, namespace=ns)).items if (pod.metadata.labels or {}).get(JOBSET_NAME_LABEL) == name]


# --- one cluster ---------------------------------------------------------------------------------------
async def test_a_trainjob_on_a_single_cluster_waits_suspended_starts_with_its_flavor_and_is_preempted(kube: Clients) -> None:
    """Kueue on one cluster: worker1's own queue, with room for one TrainJob of 2 nodes, admits them."""
    ns = f"tj{uuid.uuid4().hex[:6]}"
    worker, cq = await kube.single_cluster_queue(ns, cpu=3, labels=RUNS)
    # Held: the TrainJob must wait, suspended, with no pod, until its queue admits it.
    await worker.patch(kueue.ClusterQueue, cq, {"spec": {"stopPolicy": "Hold"}})
    created = await worker.create(TrainJob, trainjob_manifest("victim", ns, run_time="600s", priority_class=f"{ns}-low"))
    assert created.spec.suspend is True, "queued TrainJobs are created suspended"
    assert created.spec.managed_by == CONTROLLER_NAME, "no MultiKueue check on this queue: the CRD's default stays"
    assert kueue_patch(created) is not None and kueue_replicated_jobs(created) == [], "Kueue's empty runtime patch, added at creation"
    wl = await eventually(lambda: owned_workload(worker, TrainJob, ns, "victim"), timeout=30, what="a Workload for TrainJob victim")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("node", 2)]
    [container] = wl.spec.pod_sets[0].template["spec"]["containers"]
    assert container["resources"] == {"requests": {"cpu": "1"}}, "resourcesPerNode on the node container"

    async def suspended_by_the_trainer() -> TrainJob | None:
        job = await worker.get(TrainJob, "victim", namespace=ns)
        return job if condition(job, "Suspended") else None

    await eventually(suspended_by_the_trainer, timeout=30, what="the Trainer seeing TrainJob victim suspended")
    assert await pods_of(worker, ns, "victim") == [], "no pod while it waits"
    await worker.patch(kueue.ClusterQueue, cq, {"spec": {"stopPolicy": "None"}})

    async def victim_running() -> list[Pod] | None:
        job = await worker.get(TrainJob, "victim", namespace=ns)
        pods = [pod for pod in await pods_of(worker, ns, "victim") if pod.status and pod.status.phase == "Running"]
        return pods if job.spec.suspend is False and len(pods) == 2 else None

    pods = await eventually(victim_running, timeout=90, what="TrainJob victim admitted, resumed and its 2 node pods Running")
    started = await worker.get(TrainJob, "victim", namespace=ns)
    [patched] = kueue_replicated_jobs(started)
    assert patched["name"] == "node"
    assert patched["template"]["spec"]["template"]["spec"]["nodeSelector"] == RUNS
    for pod in pods:
        assert pod.spec.node_selector == RUNS, f"{pod.name}: the flavor's node labels, got {pod.spec.node_selector}"
        assert (pod.metadata.labels or {}).get(c.PODSET_LABEL) == "node"
        assert (pod.metadata.annotations or {}).get(KWOK_RUN_TIME) == "600s", "the test's own runtime patch is kept"
    jobset = await worker.get(JobSet, "victim", namespace=ns)
    assert [ref.kind for ref in jobset.metadata.owner_references or []] == ["TrainJob"]
    assert not [w for w in (await worker.list(kueue.Workload, namespace=ns)).items if w.name.startswith("jobset-")], (
        "the JobSet a TrainJob makes is the TrainJob's: no Workload of its own"
    )

    # A higher-priority TrainJob preempts it: suspended, its pods gone, Kueue's patch emptied.
    await worker.create(TrainJob, trainjob_manifest("urgent", ns, run_time="3s", priority_class=f"{ns}-high"))

    async def preempted() -> TrainJob | None:
        victim_wl = await owned_workload(worker, TrainJob, ns, "victim")
        evicted = find_condition(victim_wl.status.conditions if victim_wl and victim_wl.status else None, c.EVICTED)
        job = await worker.get(TrainJob, "victim", namespace=ns)
        return job if evicted is not None and evicted.reason == "Preempted" and job.spec.suspend is True else None

    await eventually(preempted, timeout=60, what="TrainJob victim preempted and suspended")

    async def stopped() -> TrainJob | None:
        job = await worker.get(TrainJob, "victim", namespace=ns)
        left = [pod for pod in await pods_of(worker, ns, "victim") if pod.metadata.deletion_timestamp is None]
        return job if not left and active(job) == 0 and kueue_replicated_jobs(job) == [] else None

    await eventually(stopped, timeout=90, what="TrainJob victim's pods gone and Kueue's runtime patch emptied again")

    async def completed(name: str) -> TrainJob | None:
        job = await worker.get(TrainJob, name, namespace=ns)
        return job if condition(job, "Complete") else None

    await eventually(lambda: completed("urgent"), timeout=120, what="TrainJob urgent Complete")
    await finished_workload(worker, TrainJob, ns, "urgent")
    # With the quota back the victim runs again (its pods run 600 s).
    await eventually(victim_running, timeout=120, what="TrainJob victim admitted again and its pods Running")
    await worker.delete(TrainJob, "victim", namespace=ns)
    await worker.delete(TrainJob, "urgent", namespace=ns)


# --- MultiKueue -------------------------------------------------------------------------------------------
async def test_a_trainjob_submitted_to_the_manager_runs_on_one_worker_its_status_comes_back_and_nothing_is_left(kube: Clients) -> None:
    ns = f"tm{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 8, "worker2": 8}, labels=RUNS, tag=ns)
    created = await kube.manager.create(TrainJob, trainjob_manifest("pretrain", ns, run_time="10s"))
    # Kueue's defaulting webhook: a TrainJob queued through MultiKueue is managed by it.
    assert created.spec.managed_by == c.MULTIKUEUE_CONTROLLER_NAME
    assert created.spec.suspend is True

    wl = await eventually(
        lambda: owned_workload(kube.manager, TrainJob, ns, "pretrain"), timeout=30, what="a Workload for TrainJob pretrain"
    )
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("node", 2)]

    async def running_on() -> list[str]:
        return [worker for worker, items in (await kube.remote(TrainJob, ns, "pretrain")).items() if items]

    workers = await eventually(running_on, timeout=60, what="the TrainJob created on a worker")
    assert len(workers) == 1, f"TrainJob pretrain on {workers}"
    remote = (await kube.remote(TrainJob, ns, "pretrain"))[workers[0]][0]
    labels = remote.metadata.labels or {}
    assert labels.get(c.PREBUILT_WORKLOAD_LABEL) == wl.name
    assert labels.get(c.MULTIKUEUE_ORIGIN_LABEL)
    assert remote.spec.managed_by == CONTROLLER_NAME, "managedBy cleared: the worker's Trainer runs it"
    managers = [p.get("manager") for p in remote.spec.runtime_patches or []]
    assert managers.count(KUEUE_PATCH_MANAGER) == 1 and TEST_PATCH_MANAGER in managers, managers

    async def manager_active() -> TrainJob | None:
        job = await kube.manager.get(TrainJob, "pretrain", namespace=ns)
        return job if active(job) > 0 else None

    await eventually(manager_active, timeout=90, what="the manager's TrainJob with an active job, from its worker's status")
    pods = await pods_of(kube.workers[workers[0]], ns, "pretrain")
    assert len(pods) == 2 and all(pod.spec.node_selector == RUNS for pod in pods), [p.spec.node_selector for p in pods]
    assert await pods_of(kube.manager, ns, "pretrain") == [], "the manager runs no pod of it"
    assert (await kube.manager.list(JobSet, namespace=ns)).items == [], "no Trainer on the manager: no JobSet there"

    async def manager_complete() -> TrainJob | None:
        job = await kube.manager.get(TrainJob, "pretrain", namespace=ns)
        return job if condition(job, "Complete") else None

    done = await eventually(manager_complete, timeout=120, what="the manager's TrainJob Complete, from its worker's status")
    assert [s.succeeded for s in (done.status.jobs_status if done.status else None) or []] == [1]
    finished = await finished_workload(kube.manager, TrainJob, ns, "pretrain")
    assert (finished.status.cluster_name if finished.status else None) == workers[0]

    async def nothing_left() -> dict[str, list[str]] | None:
        left = await kube.leftovers(ns, TrainJob, JobSet)
        return None if any(left.values()) else left

    await eventually(nothing_left, timeout=90, what="no TrainJob, JobSet, Workload copy or pod left on the workers")
    await kube.manager.delete(TrainJob, "pretrain", namespace=ns)

    async def gone_from_the_manager() -> bool:
        return (
            not (await kube.manager.list(TrainJob, namespace=ns)).items
            and not (await kube.manager.list(kueue.Workload, namespace=ns)).items
        )

    await eventually(gone_from_the_manager, timeout=60, what="the TrainJob and its Workload gone from the manager")
    assert not any((await kube.leftovers(ns, TrainJob, JobSet)).values())


async def test_a_trainjob_made_before_its_runtime_is_queued_as_soon_as_the_runtime_appears(kube: Clients) -> None:
    """The manager runs no Trainer, so no webhook refuses a TrainJob whose runtime is not there
    yet: it waits, with a FailedCreateWorkload event at each try, and the runtime's creation
    wakes it at once (as Kueue's TrainJob reconciler, which watches the runtimes), however long
    its retries have been backing off."""
    ns = f"tr{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 8, "worker2": 8}, labels=RUNS, tag=ns)
    manifest = trainjob_manifest("early", ns, run_time="5s")
    manifest["spec"]["runtimeRef"] = {"name": "late", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}
    await kube.manager.create(TrainJob, manifest)

    async def failed_tries() -> list[Event] | None:
        events = [
            e
            for e in (await kube.manager.list(Event, namespace=ns)).items
            if e.involved_object.name == "early" and e.reason == "FailedCreateWorkload"
        ]
        # Nine tries: the retries' backoff has grown to 25.6 s, past the deadline below.
        return events if len(events) >= 9 else None

    [event, *_] = await eventually(failed_tries, timeout=60, what="nine FailedCreateWorkload events for TrainJob early")
    assert "spec.runtimeRef" in (event.message or "") and "'late' not found" in (event.message or ""), event.message
    assert await owned_workload(kube.manager, TrainJob, ns, "early") is None

    cluster_runtime = await kube.manager.get(ClusterTrainingRuntime, RUNTIME)
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "late", "namespace": ns},
        "spec": cluster_runtime.to_dict()["spec"],
    }
    for client in kube.workers.values():
        await client.create(TrainingRuntime, runtime)
    await kube.manager.create(TrainingRuntime, runtime)
    wl = await eventually(lambda: owned_workload(kube.manager, TrainJob, ns, "early"), timeout=10, what="a Workload for TrainJob early")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("node", 2)]

    async def manager_complete() -> TrainJob | None:
        job = await kube.manager.get(TrainJob, "early", namespace=ns)
        return job if condition(job, "Complete") else None

    await eventually(manager_complete, timeout=120, what="TrainJob early Complete on a worker, with its namespace's runtime")
    await kube.manager.delete(TrainJob, "early", namespace=ns)


async def test_a_trainjob_preempted_on_the_manager_is_suspended_taken_off_its_worker_and_runs_again(kube: Clients) -> None:
    ns = f"tp{uuid.uuid4().hex[:6]}"
    # Room for one TrainJob of 2 cpu on the manager; each worker could take both.
    await kube.queues(ns, manager_cpu=2, worker_cpu={"worker1": 6, "worker2": 6}, labels=RUNS, tag=ns)
    await make_priority_classes(kube, ns)
    await kube.manager.create(TrainJob, trainjob_manifest("victim", ns, run_time="20s", priority_class=f"{ns}-low"))

    async def victim_running() -> str | None:
        where = await kube.remote(TrainJob, ns, "victim")
        job = await kube.manager.get(TrainJob, "victim", namespace=ns)
        on = [worker for worker, items in where.items() if items]
        return on[0] if len(on) == 1 and active(job) > 0 else None

    first_on = await eventually(victim_running, timeout=90, what="the low-priority TrainJob running on a worker, as the manager sees it")
    victim_wl = await owned_workload(kube.manager, TrainJob, ns, "victim")
    assert victim_wl is not None
    await kube.manager.create(TrainJob, trainjob_manifest("urgent", ns, run_time="5s", priority_class=f"{ns}-high"))

    async def victim_preempted() -> Any:
        wl = await owned_workload(kube.manager, TrainJob, ns, "victim")
        evicted = find_condition(wl.status.conditions if wl and wl.status else None, c.EVICTED)
        job = await kube.manager.get(TrainJob, "victim", namespace=ns)
        return evicted if evicted is not None and evicted.reason == "Preempted" and job.spec.suspend is True else None

    evicted = await eventually(victim_preempted, timeout=90, what="the victim preempted and its TrainJob suspended on the manager")
    assert "Preempted to accommodate a workload" in evicted.message

    async def victim_gone_from_its_worker() -> bool:
        on_worker = (await kube.remote(TrainJob, ns, "victim"))[first_on]
        copies = [w for w in (await kube.workers[first_on].list(kueue.Workload, namespace=ns)).items if w.name == victim_wl.name]
        return not on_worker and not copies

    await eventually(victim_gone_from_its_worker, timeout=60, what="the victim's TrainJob and Workload copy gone from its worker")

    async def both_complete() -> bool:
        jobs = [await kube.manager.get(TrainJob, name, namespace=ns) for name in ("urgent", "victim")]
        return all(condition(job, "Complete") for job in jobs)

    await eventually(both_complete, timeout=180, what="the preemptor, then the victim, Complete")

    async def nothing_left() -> dict[str, list[str]] | None:
        left = await kube.leftovers(ns, TrainJob, JobSet)
        return None if any(left.values()) else left

    await eventually(nothing_left, timeout=90, what="nothing left on the workers")


async def test_kfed_lists_explains_logs_and_cancels_a_trainjob(fed: Federation, kube: Clients) -> None:
    ns = f"tc{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=6, worker_cpu={"worker1": 0, "worker2": 6}, labels=RUNS, tag=ns)
    await kube.manager.create(TrainJob, trainjob_manifest("finetune", ns, run_time="600s"))

    async def running_on_worker2() -> bool:
        where = await kube.remote(TrainJob, ns, "finetune")
        job = await kube.manager.get(TrainJob, "finetune", namespace=ns)
        return bool(where["worker2"]) and not where["worker1"] and active(job) > 0

    await eventually(running_on_worker2, timeout=90, what="TrainJob finetune active on worker2")

    async def listed() -> Any:
        rows = jobs_table(fed.manager, ns)
        return rows if rows is not None and ("trainjob/finetune" in rows or "finetune" in rows) else None

    rows = await eventually(listed, timeout=60, what="`kfed jobs` listing the TrainJob")
    row = rows.get("trainjob/finetune") or rows["finetune"]
    assert "worker2" in row, row
    records = {r["name"]: r for r in jobs_json(fed.manager, ns).values()}
    assert (records["finetune"]["kind"], records["finetune"]["cluster"]) == ("TrainJob", "worker2")

    explained = kfed(fed.manager, "explain", "trainjob/finetune", "-n", ns)
    assert explained.returncode == 0, explained.stderr
    assert "worker2" in explained.stdout

    async def logged() -> Any:
        result = kfed(fed.manager, "logs", "trainjob/finetune", "-n", ns)
        return result if result.returncode == 0 and result.stderr.startswith("==> trainjob/finetune: 2 pod(s) on worker worker2") else None

    logs = await eventually(logged, timeout=60, what="`kfed logs` reading the TrainJob's 2 pods on worker2")
    lines = logs.stdout.splitlines()
    assert lines and all(line.startswith("[pod/finetune-node-0-") for line in lines), lines

    cancelled = kfed(fed.manager, "cancel", "trainjob/finetune", "-n", ns)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == "trainjob/finetune deleted", cancelled.stdout + cancelled.stderr

    async def gone_everywhere() -> bool:
        on_manager = (await kube.manager.list(TrainJob, namespace=ns)).items
        return not on_manager and not any((await kube.leftovers(ns, TrainJob, JobSet)).values())

    await eventually(gone_everywhere, timeout=90, what="the TrainJob gone from the manager, and nothing of it left on worker2")
