"""RayJobs and RayClusters, with the real KubeRay operator (ray-operator v1.5.0) on each worker.

Through MultiKueue: submitted to the manager, a RayJob or RayCluster is queued there, runs on
exactly one worker (KubeRay makes its cluster's pods there, with the flavor's node labels), its
status comes back, and nothing is left on the workers once it ends or is deleted; a preempted
RayJob is suspended on the manager and taken off its worker, then runs again. On one cluster:
a RayJob submitted to a worker waits suspended, starts with its flavor, and is preempted by
suspending it (KubeRay deletes its cluster).

On kwok nodes no Ray process runs: a RayCluster's pods run and turn ready, and a RayJob's
submitter Job completes at once, but no Ray job ever reports to it. KubeRay then fails the
RayJob 30 s after its submitter finished ("did not reach terminal state"): that is the only
end a RayJob reaches here, and the tests use it; a RayJob that succeeds is not run.
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
from manager.api.ray import CLUSTER_LABEL, RayCluster, RayJob
from manager.kube.client import KubeClient
from tests.e2e.federation import RUNS, Clients, Federation, finished_workload, job_manifest, owned_workload, running
from tests.e2e.test_cli import jobs_json, jobs_table, kfed, status_in
from tests.e2e.test_multikueue import make_priority_classes
from tests.harness import Provider, eventually, require_controller
from tests.integration.test_job_integrations import KWOK_RUN_TIME

IMAGE = "rayproject/ray:2.46.0"  # never pulled: kwok runs no container


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation: KubeRay's CRDs everywhere, its operator on the workers, and
    kfed integrating RayJobs and RayClusters (the tier's `kube` fixture opens its clients on it)."""
    kuberay_bin = require_controller("kuberay")
    with running(provider, Path(tmp_path_factory.mktemp("ray")), controllers={"kuberay": kuberay_bin}) as created:
        yield created


def pod_template(container: str, cpu: str, *, run_time: str | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"containers": [{"name": container, "image": IMAGE, "resources": {"requests": {"cpu": cpu}}}]}}
    if run_time:
        template["metadata"] = {"annotations": {KWOK_RUN_TIME: run_time}}
    return template


def cluster_spec(*, cpu: str = "1", workers: int = 2) -> dict[str, Any]:
    """A head and one worker group of `workers` pods, `cpu` each."""
    group = {
        "groupName": "workers",
        "replicas": workers,
        "minReplicas": 0,
        "maxReplicas": workers,
        "rayStartParams": {},
        "template": pod_template("ray-worker", cpu),
    }
    return {"headGroupSpec": {"rayStartParams": {}, "template": pod_template("ray-head", cpu)}, "workerGroupSpecs": [group]}


def labels_for(priority_class: str | None) -> dict[str, str]:
    labels = {c.QUEUE_NAME_LABEL: "user-queue"}
    if priority_class:
        labels[c.PRIORITY_CLASS_LABEL] = priority_class
    return labels


def rayjob_manifest(name: str, ns: str, *, priority_class: str | None = None, submitter_run_time: str | None = None) -> dict[str, Any]:
    """A queued RayJob in K8sJobMode: head (1 cpu), 2 workers (1 cpu each) and a submitter
    (500m cpu), 3.5 cpu in all. Its submitter Job's pod is done at once on kwok, or, with
    `submitter_run_time`, runs that long (and the RayJob as long). The submitter template is
    given because KubeRay's default one asks for memory, which the tests' queues do not cover."""
    submitter = pod_template("ray-job-submitter", "500m", run_time=submitter_run_time)
    submitter["spec"]["restartPolicy"] = "Never"
    spec: dict[str, Any] = {
        "entrypoint": "python -c 'print(42)'",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": cluster_spec(),
        "submitterPodTemplate": submitter,
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": ns, "labels": labels_for(priority_class)},
        "spec": spec,
    }


def raycluster_manifest(name: str, ns: str, *, priority_class: str | None = None, workers: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": ns, "labels": labels_for(priority_class)},
        "spec": cluster_spec(workers=workers),
    }


async def where(kube: Clients, model: Any, ns: str, name: str) -> dict[str, Any]:
    """Per worker: our object there (or None)."""
    found: dict[str, Any] = {}
    for worker, client in kube.workers.items():
        found[worker] = next((obj for obj in (await client.list(model, namespace=ns)).items if obj.name == name), None)
    return found


async def story(kube: Clients, ns: str) -> str:
    """What the manager's Workloads and each worker hold, for a failed wait."""
    lines = []
    for wl in (await kube.manager.list(kueue.Workload, namespace=ns)).items:
        checks = [(ch.name, ch.state, ch.message) for ch in (wl.status.admission_checks if wl.status else None) or []]
        conds = [(cd.type, cd.status, cd.reason) for cd in (wl.status.conditions if wl.status else None) or []]
        lines.append(f"manager {wl.name}: cluster={wl.status.cluster_name if wl.status else None} checks={checks} conditions={conds}")
    for job in (await kube.manager.list(RayJob, namespace=ns)).items:
        lines.append(f"manager rayjob/{job.name}: suspend={job.spec.suspend} status={job.to_dict().get('status')}")
    for worker, names in (await kube.leftovers(ns, RayJob, RayCluster)).items():
        lines.append(f"{worker}: {names}")
        for job in (await kube.workers[worker].list(RayJob, namespace=ns)).items:
            lines.append(f"{worker} rayjob/{job.name}: suspend={job.spec.suspend} deployment={deployment_status(job)}")
    return "\n".join(lines)


async def cluster_pods(client: KubeClient, ns: str, cluster: str) -> list[Pod]:
    """The pods KubeRay made for a Ray cluster, running and not going."""
    pods = (await client.list(Pod, namespace=ns, label_selector=f"{CLUSTER_LABEL}={cluster}")).items
    return [p for p in pods if p.status is not None and p.status.phase == "Running" and p.metadata.deletion_timestamp is None]


def deployment_status(job: RayJob | None) -> str | None:
    return job.status.job_deployment_status if job is not None and job.status is not None else None


# --- through MultiKueue ----------------------------------------------------------------------------
async def test_a_rayjob_submitted_to_the_manager_runs_on_one_worker_its_status_comes_back_and_nothing_is_left(kube: Clients) -> None:
    ns = f"rj{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 8, "worker2": 8}, labels=RUNS, tag=ns)
    created = await kube.manager.create(RayJob, rayjob_manifest("train", ns))
    # Kueue's defaulting webhook: suspended, and managed by MultiKueue (KubeRay leaves it alone).
    assert created.spec.suspend is True
    assert created.spec.managed_by == c.MULTIKUEUE_CONTROLLER_NAME

    wl = await eventually(lambda: owned_workload(kube.manager, RayJob, ns, "train"), timeout=30, what="a Workload for RayJob train")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("head", 1), ("workers", 2), ("submitter", 1)]

    async def running_on() -> str | None:
        found = await where(kube, RayJob, ns, "train")
        on = [worker for worker, job in found.items() if job is not None]
        return on[0] if len(on) == 1 and deployment_status(found[on[0]]) == "Running" else None

    worker = await eventually(running_on, timeout=120, what="RayJob train running on one worker", explain=lambda: story(kube, ns))
    assert [w for w, job in (await where(kube, RayJob, ns, "train")).items() if job is not None] == [worker]
    remote = (await where(kube, RayJob, ns, "train"))[worker]
    labels = remote.metadata.labels or {}
    assert labels.get(c.PREBUILT_WORKLOAD_LABEL) == wl.name and labels.get(c.MULTIKUEUE_ORIGIN_LABEL)
    assert remote.spec.managed_by is None, "the worker's KubeRay operator runs it"
    # KubeRay made its cluster's pods on the winner, with the worker flavor's node labels.
    cluster = remote.status.ray_cluster_name if remote.status else None
    assert cluster and cluster.startswith("train-")
    pods = await eventually(lambda: cluster_pods(kube.workers[worker], ns, cluster), timeout=60, what="the RayJob's cluster pods running")
    assert all(RUNS.items() <= (p.spec.node_selector or {}).items() for p in pods), [p.spec.node_selector for p in pods]

    async def status_back() -> RayJob | None:
        job = await kube.manager.get(RayJob, "train", namespace=ns)
        return job if job.status is not None and job.status.ray_cluster_name == cluster else None

    back = await eventually(status_back, timeout=60, what="the worker's RayJob status on the manager's")
    assert deployment_status(back) in ("Running", "Failed")

    # No Ray job ever reports on kwok: KubeRay fails the RayJob 30 s after its submitter finished,
    # and that end comes back to the manager and finishes its Workload.
    async def manager_failed() -> RayJob | None:
        job = await kube.manager.get(RayJob, "train", namespace=ns)
        return job if deployment_status(job) == "Failed" else None

    done = await eventually(manager_failed, timeout=120, what="the manager's RayJob Failed, from its worker's status")
    assert done.status is not None and "submitter finished" in (done.status.message or "")
    finished = await finished_workload(kube.manager, RayJob, ns, "train")
    assert finished.status is not None and finished.status.cluster_name == worker
    condition = find_condition(finished.status.conditions, c.FINISHED)
    assert condition is not None and condition.reason == "Failed" and "submitter finished" in (condition.message or "")

    async def nothing_left() -> bool:
        return not any((await kube.leftovers(ns, RayJob, RayCluster)).values())

    await eventually(
        nothing_left, timeout=90, what="no RayJob, RayCluster, Workload copy or pod left on the workers", explain=lambda: story(kube, ns)
    )


async def test_a_preempted_rayjob_is_suspended_taken_off_its_worker_and_runs_again(kube: Clients) -> None:
    ns = f"rp{uuid.uuid4().hex[:6]}"
    # Room for one RayJob of 3.5 cpu on the manager; each worker could take both.
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 8, "worker2": 8}, labels=RUNS, tag=ns)
    await make_priority_classes(kube, ns)
    await kube.manager.create(RayJob, rayjob_manifest("victim", ns, priority_class=f"{ns}-low", submitter_run_time="600s"))

    async def running_on(name: str) -> str | None:
        found = await where(kube, RayJob, ns, name)
        job = await kube.manager.get(RayJob, name, namespace=ns)
        on = [worker for worker, remote in found.items() if remote is not None]
        return on[0] if len(on) == 1 and deployment_status(job) == "Running" else None

    first_on = await eventually(
        lambda: running_on("victim"), timeout=120, what="the low-priority RayJob running on a worker, as the manager sees it"
    )
    victim_wl = await owned_workload(kube.manager, RayJob, ns, "victim")
    assert victim_wl is not None
    await kube.manager.create(RayJob, rayjob_manifest("urgent", ns, priority_class=f"{ns}-high"))

    async def victim_preempted() -> Any:
        wl = await owned_workload(kube.manager, RayJob, ns, "victim")
        evicted = find_condition(wl.status.conditions if wl and wl.status else None, c.EVICTED)
        job = await kube.manager.get(RayJob, "victim", namespace=ns)
        return evicted if evicted is not None and evicted.reason == "Preempted" and job.spec.suspend is True else None

    evicted = await eventually(
        victim_preempted, timeout=90, what="the victim preempted and suspended on the manager", explain=lambda: story(kube, ns)
    )
    assert "Preempted to accommodate a workload" in (evicted.message or "")

    async def victim_gone_from_its_worker() -> bool:
        job = (await where(kube, RayJob, ns, "victim"))[first_on]
        copies = [wl for wl in (await kube.workers[first_on].list(kueue.Workload, namespace=ns)).items if wl.name == victim_wl.name]
        return job is None and not copies

    await eventually(
        victim_gone_from_its_worker, timeout=90, what="the victim's RayJob and copy gone from its worker", explain=lambda: story(kube, ns)
    )
    urgent_on = await eventually(lambda: running_on("urgent"), timeout=120, what="the preemptor running on a worker")
    assert urgent_on in kube.workers

    # The preemptor ends (KubeRay fails it, see the module's docstring); the victim runs again.
    await eventually(
        lambda: running_on("victim"), timeout=180, what="the victim running again once the preemptor ended", explain=lambda: story(kube, ns)
    )
    urgent = await kube.manager.get(RayJob, "urgent", namespace=ns)
    assert deployment_status(urgent) == "Failed"

    for name in ("urgent", "victim"):
        await kube.manager.delete(RayJob, name, namespace=ns)

    async def nothing_left() -> bool:
        return not any((await kube.leftovers(ns, RayJob, RayCluster)).values())

    await eventually(nothing_left, timeout=90, what="nothing left on the workers after both are deleted", explain=lambda: story(kube, ns))


async def test_kfed_lists_explains_and_cancels_a_raycluster_and_a_rayjob(fed: Federation, kube: Clients) -> None:
    ns = f"rc{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 0, "worker2": 8}, labels=RUNS, tag=ns)
    created = await kube.manager.create(RayCluster, raycluster_manifest("serve", ns, workers=1))  # 2 cpu
    assert created.spec.suspend is True and created.spec.managed_by == c.MULTIKUEUE_CONTROLLER_NAME
    await kube.manager.create(RayJob, rayjob_manifest("tune", ns, submitter_run_time="600s"))  # 3.5 cpu

    async def cluster_ready() -> RayCluster | None:
        rc = await kube.manager.get(RayCluster, "serve", namespace=ns)
        return rc if rc.status is not None and rc.status.state == "ready" else None

    await eventually(
        cluster_ready, timeout=120, what="the manager's RayCluster ready, from worker2's status", explain=lambda: story(kube, ns)
    )
    assert (await where(kube, RayCluster, ns, "serve"))["worker1"] is None
    remote = (await where(kube, RayCluster, ns, "serve"))["worker2"]
    assert remote is not None and remote.spec.managed_by is None
    assert len(await cluster_pods(kube.workers["worker2"], ns, "serve")) == 2

    async def listed() -> Any:
        rows = jobs_table(fed.manager, ns)
        return rows if all(status_in(rows, name) == "Running" for name in ("raycluster/serve", "rayjob/tune")) else None

    rows = await eventually(listed, timeout=90, what="`kfed jobs` listing the RayCluster and the RayJob Running")
    assert rows["raycluster/serve"][3] == "worker2" and rows["rayjob/tune"][3] == "worker2"
    # Created once both hold their quota (the manager reserves in the order their Workloads
    # appear, not the order their jobs were created): 2 + 3.5 + 4 cpu > 8, so it waits there.
    await kube.manager.create(Job, job_manifest("waiting", ns, cpu="4"))

    async def waiting_listed() -> Any:
        rows = jobs_table(fed.manager, ns)
        return rows if status_in(rows, "job/waiting") == "Pending" else None

    rows = await eventually(waiting_listed, timeout=30, what="`kfed jobs` listing the Job Pending behind the Ray jobs' quota")
    assert rows["rayjob/tune"][2] == "Running"
    records = {r["name"]: r for r in jobs_json(fed.manager, ns).values()}
    assert (records["serve"]["kind"], records["serve"]["cluster"]) == ("RayCluster", "worker2")
    assert (records["tune"]["kind"], records["tune"]["cluster"]) == ("RayJob", "worker2")

    for target in ("raycluster/serve", "rayjob/tune"):
        explained = kfed(fed.manager, "explain", target, "-n", ns)
        assert explained.returncode == 0 and "worker2" in explained.stdout, explained.stdout + explained.stderr
        dry = kfed(fed.manager, "cancel", target, "-n", ns, "--dry-run")
        assert dry.returncode == 0 and dry.stdout.startswith(f"{target} in namespace {ns} on "), dry.stdout + dry.stderr
        cancelled = kfed(fed.manager, "cancel", target, "-n", ns)
        assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"{target} deleted", cancelled.stdout + cancelled.stderr

    async def gone_everywhere() -> bool:
        on_manager = (await kube.manager.list(RayCluster, namespace=ns)).items + (await kube.manager.list(RayJob, namespace=ns)).items
        left = await kube.leftovers(ns, RayJob, RayCluster)
        # The waiting Job may be on a worker by now: only Ray's objects and their copies count.
        ray_left = [name for names in left.values() for name in names if not name.startswith(("workload/job-", "pod/waiting-"))]
        return not on_manager and not ray_left

    await eventually(gone_everywhere, timeout=90, what="both gone from the manager and from worker2", explain=lambda: story(kube, ns))

    async def dispatched() -> bool:
        wl = await kube.manager_workload(ns, "waiting")
        return bool(wl is not None and wl.status is not None and wl.status.cluster_name)

    await eventually(dispatched, timeout=60, what="the waiting Job admitted after the cancels")


# --- on one cluster --------------------------------------------------------------------------------
async def test_a_rayjob_on_a_single_cluster_waits_suspended_starts_with_its_flavor_and_is_preempted_by_suspending(kube: Clients) -> None:
    """Kueue on one cluster: the worker's own queue admits a RayJob submitted to it, which KubeRay
    runs there with the admitted flavor's node labels; a higher-priority RayCluster preempts it:
    it is suspended, KubeRay deletes its cluster, and its templates are as written again."""
    ns = f"rl{uuid.uuid4().hex[:6]}"
    worker, _ = await kube.single_cluster_queue(ns, cpu=4, labels=RUNS)
    blocker = job_manifest("blocker", ns, cpu="4", priority_class=f"{ns}-high")
    blocker["spec"]["template"]["metadata"] = {"annotations": {KWOK_RUN_TIME: "600s"}}  # holds the quota until deleted
    await worker.create(Job, blocker)

    created = await worker.create(RayJob, rayjob_manifest("local", ns, priority_class=f"{ns}-low", submitter_run_time="600s"))
    assert created.spec.suspend is True, "queued RayJobs are created suspended"
    assert created.spec.managed_by is None, "no MultiKueue check on this queue"

    # While the blocker holds the quota, the RayJob waits suspended and KubeRay makes nothing.
    wl = await eventually(lambda: owned_workload(worker, RayJob, ns, "local"), timeout=30, what="a Workload for the RayJob on worker1")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("head", 1), ("workers", 2), ("submitter", 1)]

    async def pending() -> kueue.Workload | None:
        current = await owned_workload(worker, RayJob, ns, "local")
        quota = find_condition(current.status.conditions if current and current.status else None, c.QUOTA_RESERVED)
        return current if quota is not None and quota.status == "False" else None

    await eventually(pending, timeout=30, what="the RayJob's Workload pending for quota")
    job = await worker.get(RayJob, "local", namespace=ns)
    assert job.spec.suspend is True
    assert not (await worker.list(RayCluster, namespace=ns)).items, "KubeRay makes no cluster for a suspended RayJob"
    await worker.delete(Job, "blocker", namespace=ns)

    async def started() -> RayJob | None:
        current = await worker.get(RayJob, "local", namespace=ns)
        return current if current.spec.suspend is False and deployment_status(current) == "Running" else None

    running = await eventually(started, timeout=120, what="the RayJob admitted, resumed and Running", explain=lambda: story(kube, ns))
    spec = running.to_dict()["spec"]
    templates = [spec["rayClusterSpec"]["headGroupSpec"]["template"], spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"]]
    for template in [*templates, spec["submitterPodTemplate"]]:
        assert template["spec"].get("nodeSelector") == RUNS, template
    cluster = running.status.ray_cluster_name if running.status else None
    assert cluster
    pods = await eventually(lambda: cluster_pods(worker, ns, cluster), timeout=60, what="the RayJob's cluster pods running")
    assert len(pods) == 3 and all(p.spec.node_selector == RUNS for p in pods)

    # A higher-priority RayCluster preempts it: suspended, its cluster deleted, its templates as written.
    await worker.create(RayCluster, raycluster_manifest("urgent", ns, priority_class=f"{ns}-high"))

    async def preempted() -> RayJob | None:
        current = await worker.get(RayJob, "local", namespace=ns)
        return current if current.spec.suspend is True and deployment_status(current) == "Suspended" else None

    stopped = await eventually(
        preempted, timeout=90, what="the RayJob suspended by preemption and Suspended by KubeRay", explain=lambda: story(kube, ns)
    )
    evicted_wl = await owned_workload(worker, RayJob, ns, "local")
    evicted = find_condition(evicted_wl.status.conditions if evicted_wl and evicted_wl.status else None, c.EVICTED)
    assert evicted is not None and evicted.reason == "Preempted"
    restored = stopped.to_dict()["spec"]["rayClusterSpec"]
    assert "nodeSelector" not in restored["headGroupSpec"]["template"]["spec"]
    assert "nodeSelector" not in restored["workerGroupSpecs"][0]["template"]["spec"]

    async def cluster_gone() -> bool:
        return not [rc for rc in (await worker.list(RayCluster, namespace=ns)).items if rc.name == cluster]

    await eventually(cluster_gone, timeout=60, what="KubeRay deleting the preempted RayJob's cluster")

    async def urgent_ready() -> RayCluster | None:
        rc = await worker.get(RayCluster, "urgent", namespace=ns)
        return rc if rc.spec.suspend is False and rc.status is not None and rc.status.state == "ready" else None

    ready = await eventually(urgent_ready, timeout=120, what="the preemptor RayCluster started and ready", explain=lambda: story(kube, ns))
    head = ready.to_dict()["spec"]["headGroupSpec"]["template"]
    assert head["spec"].get("nodeSelector") == RUNS and head["metadata"]["labels"][c.PODSET_LABEL] == "head"
