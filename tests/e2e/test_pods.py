"""Plain Pods through MultiKueue (Kueue's pod integration and its MultiKueue adapter): a Pod
submitted to the manager stays gated there, runs on exactly one worker (where the real
kube-scheduler binds it to a kwok node), its status comes back, and nothing is left on the
workers. A Pod preempted by a higher-priority Pod is removed from its worker and waits, gated,
on the manager. `kfed logs pod/NAME` reads a Pod's log, or every Pod's of a group, from its worker
through the manager's read API."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api.core import Pod
from manager.api.meta import find_condition, is_condition_true
from manager.engine.integrations.pod import MANAGED_LABEL, SCHEDULING_GATE
from manager.kube.client import KubeClient
from tests.e2e.federation import RUNS, Clients, Federation, finished_workload, running
from tests.e2e.test_cli import kfed
from tests.e2e.test_multikueue import make_priority_classes
from tests.harness import Provider, eventually
from tests.integration.test_pod_integration import gates, group_member, group_workload, pod_manifest, workload_of


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation, with kfed integrating Pods on the manager and the workers."""
    with running(provider, Path(tmp_path_factory.mktemp("pods")), integrations=("pod",)) as created:
        yield created


async def namespace_with_queues(kube: Clients, ns: str, *, manager_cpu: int) -> None:
    await kube.queues(ns, manager_cpu=manager_cpu, worker_cpu={"worker1": 4, "worker2": 4}, labels=RUNS, tag=ns)
    # The manager runs no kube-controller-manager, whose ServiceAccount controller would make
    # the namespace's default ServiceAccount (every real cluster has it; Pods need it).
    await kube.manager.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", body={"metadata": {"name": "default"}})


async def manager_pod(kube: Clients, ns: str, name: str) -> Pod:
    return await kube.manager.get(Pod, name, namespace=ns)


def phase(pod: Pod) -> str | None:
    return pod.status.phase if pod.status else None


async def test_a_pod_submitted_to_the_manager_runs_on_one_worker_and_its_status_comes_back(kube: Clients) -> None:
    ns = f"pd{uuid.uuid4().hex[:6]}"
    await namespace_with_queues(kube, ns, manager_cpu=4)
    created = await kube.manager.create(Pod, pod_manifest("single", ns, run_time="3s"))
    assert gates(created) == [SCHEDULING_GATE] and created.metadata.finalizers == [MANAGED_LABEL]

    wl = await eventually(lambda: workload_of(kube.manager, created), timeout=30, what="a Workload for Pod single")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("main", 1)]

    async def running_on() -> list[str]:
        where = await kube.remote(Pod, ns, "single")
        return [worker for worker, items in where.items() if items]

    workers = await eventually(running_on, timeout=60, what="the Pod created on a worker")
    assert len(workers) == 1, f"Pod single on {workers}"
    [remote] = (await kube.remote(Pod, ns, "single"))[workers[0]]
    labels = remote.metadata.labels or {}
    assert labels.get(c.PREBUILT_WORKLOAD_LABEL) == wl.name
    assert labels.get(c.MULTIKUEUE_ORIGIN_LABEL)

    async def manager_succeeded() -> Pod | None:
        pod = await manager_pod(kube, ns, "single")
        return pod if phase(pod) == "Succeeded" else None

    done = await eventually(manager_succeeded, timeout=120, what="the manager's Pod Succeeded, from its worker's status")
    assert gates(done) == [SCHEDULING_GATE], "the manager's Pod never runs there: it stays gated"
    finished = await finished_workload(kube.manager, Pod, ns, "single")
    assert (finished.status.cluster_name if finished.status else None) == workers[0]

    async def nothing_left() -> bool:
        pods = await kube.remote(Pod, ns, "single")
        copies = await kube.remote_copies(ns, wl.name)
        return not any(pods.values()) and not any(copies.values())

    await eventually(nothing_left, timeout=60, what="no Pod and no Workload copy left on the workers")
    await eventually(lambda: _finalized(kube.manager, ns, "single"), timeout=30, what="the manager's finished Pod without kfed's finalizer")


async def test_a_pod_preempted_by_a_higher_priority_pod_leaves_its_worker_and_waits_gated_on_the_manager(kube: Clients) -> None:
    ns = f"pp{uuid.uuid4().hex[:6]}"
    await namespace_with_queues(kube, ns, manager_cpu=1)  # room for one Pod on the manager; each worker has 4
    await make_priority_classes(kube, ns)
    await kube.manager.create(Pod, pod_manifest("victim", ns, run_time="10m", priority_class=f"{ns}-low"))

    async def running_on_a_worker(name: str) -> str | None:
        where = await kube.remote(Pod, ns, name)
        on = [worker for worker, items in where.items() if items]
        return on[0] if len(on) == 1 and phase(await manager_pod(kube, ns, name)) == "Running" else None

    first_on = await eventually(lambda: running_on_a_worker("victim"), timeout=90, what="the low-priority Pod running on a worker")
    victim = await manager_pod(kube, ns, "victim")
    victim_wl = await workload_of(kube.manager, victim)
    assert victim_wl is not None
    await kube.manager.create(Pod, pod_manifest("urgent", ns, run_time="10m", priority_class=f"{ns}-high"))

    async def victim_preempted() -> Any:
        wl = await workload_of(kube.manager, victim)
        evicted = find_condition(wl.status.conditions if wl and wl.status else None, c.EVICTED)
        return evicted if evicted is not None and evicted.reason == "Preempted" else None

    evicted = await eventually(victim_preempted, timeout=90, what="the victim's Workload preempted on the manager")
    assert "Preempted to accommodate a workload" in evicted.message

    async def victim_gone_from_its_worker() -> bool:
        return not (await kube.remote(Pod, ns, "victim"))[first_on] and not (await kube.remote_copies(ns, victim_wl.name))[first_on]

    await eventually(victim_gone_from_its_worker, timeout=90, what="the victim's Pod and copy gone from its worker")
    await eventually(lambda: running_on_a_worker("urgent"), timeout=90, what="the high-priority Pod running on a worker")
    waiting = await manager_pod(kube, ns, "victim")
    assert gates(waiting) == [SCHEDULING_GATE] and waiting.metadata.deletion_timestamp is None, "the victim waits, gated"
    assert not any((await kube.remote(Pod, ns, "victim")).values()), "the victim runs nowhere while the preemptor holds the quota"

    for name in ("urgent", "victim"):
        await kube.manager.delete(Pod, name, namespace=ns)

    async def nothing_left() -> bool:
        pods = [await kube.remote(Pod, ns, name) for name in ("urgent", "victim")]
        left = [pod for where in pods for items in where.values() for pod in items]
        copies = [wl for items in (await kube.remote_workloads(ns)).values() for wl in items]
        on_manager = (await kube.manager.list(Pod, namespace=ns)).items
        return not left and not copies and not on_manager

    await eventually(nothing_left, timeout=90, what="both Pods gone from the manager and nothing left on the workers")


async def _finalized(client: KubeClient, ns: str, name: str) -> bool:
    return MANAGED_LABEL not in ((await client.get(Pod, name, namespace=ns)).metadata.finalizers or [])


async def test_a_pod_group_submitted_to_the_manager_runs_whole_on_one_worker_and_its_statuses_come_back(kube: Clients) -> None:
    ns = f"pg{uuid.uuid4().hex[:6]}"
    await namespace_with_queues(kube, ns, manager_cpu=4)
    members = ("leader", "worker-0", "worker-1")
    for name in members:
        await kube.manager.create(Pod, group_member(name, ns, group="train", total=3, cpu="2" if name == "leader" else "1", run_time="3s"))

    wl = await eventually(lambda: group_workload(kube.manager, ns, "train"), timeout=30, what="the group's Workload on the manager")
    assert sorted(ps.count for ps in wl.spec.pod_sets) == [1, 2]

    async def where() -> dict[str, list[str]]:
        found = {worker: [pod.name for pod in (await client.list(Pod, namespace=ns)).items] for worker, client in kube.workers.items()}
        return {worker: sorted(names) for worker, names in found.items() if names}

    async def whole_on_a_worker() -> dict[str, list[str]] | None:
        found = await where()
        return found if sum(len(names) for names in found.values()) == len(members) else None

    placed = await eventually(whole_on_a_worker, timeout=90, what="every Pod of the group created on a worker")
    assert list(placed.values()) == [sorted(members)], f"the group is split or misplaced: {placed}"

    async def all_succeeded_on_the_manager() -> list[Pod] | None:
        pods = [await manager_pod(kube, ns, name) for name in members]
        return pods if all(phase(pod) == "Succeeded" for pod in pods) else None

    pods = await eventually(all_succeeded_on_the_manager, timeout=120, what="every manager Pod Succeeded, from its worker's status")
    assert all(gates(pod) == [SCHEDULING_GATE] for pod in pods), "the manager's Pods stay gated"

    async def finished_and_nothing_left() -> bool:
        current = await group_workload(kube.manager, ns, "train")
        done = current is not None and is_condition_true(current.status.conditions if current.status else None, c.FINISHED)
        copies = [wl for items in (await kube.remote_workloads(ns)).values() for wl in items]
        return done and not await where() and not copies

    await eventually(finished_and_nothing_left, timeout=90, what="the group's Workload Finished and nothing left on the workers")


async def test_a_preempted_pod_group_leaves_its_worker_whole_and_waits_gated_on_the_manager(kube: Clients) -> None:
    ns = f"pq{uuid.uuid4().hex[:6]}"
    await namespace_with_queues(kube, ns, manager_cpu=2)
    await make_priority_classes(kube, ns)
    low = {c.PRIORITY_CLASS_LABEL: f"{ns}-low"}
    for name in ("a", "b"):
        await kube.manager.create(Pod, group_member(name, ns, group="victims", total=2, run_time="10m", **low))

    async def group_running() -> bool:
        return [phase(await manager_pod(kube, ns, name)) for name in ("a", "b")] == ["Running", "Running"]

    await eventually(group_running, timeout=90, what="the low-priority group running on a worker, as the manager sees it")
    urgent = pod_manifest("urgent", ns, run_time="10m", priority_class=f"{ns}-high")
    urgent["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
    await kube.manager.create(Pod, urgent)

    async def group_gone_from_the_workers() -> bool:
        left = [await kube.remote(Pod, ns, name) for name in ("a", "b")]
        return not any(items for where in left for items in where.values())

    await eventually(group_gone_from_the_workers, timeout=90, what="the preempted group's Pods gone from their worker")
    wl = await group_workload(kube.manager, ns, "victims")
    assert wl is not None
    evicted = find_condition(wl.status.conditions if wl.status else None, c.EVICTED)
    assert evicted is not None and evicted.reason == "Preempted"
    for name in ("a", "b"):
        waiting = await manager_pod(kube, ns, name)
        assert gates(waiting) == [SCHEDULING_GATE] and waiting.metadata.deletion_timestamp is None, f"{name} waits, gated"
    placed = await eventually(lambda: _running_somewhere(kube, ns, "urgent"), timeout=90, what="the preemptor running on a worker")
    assert placed


async def _running_somewhere(kube: Clients, ns: str, name: str) -> bool:
    where = await kube.remote(Pod, ns, name)
    return sum(len(items) for items in where.values()) == 1 and phase(await manager_pod(kube, ns, name)) == "Running"


async def test_kfed_logs_reads_a_pod_and_a_pod_groups_pods_from_the_worker_that_runs_them(fed: Federation, kube: Clients) -> None:
    ns = f"pl{uuid.uuid4().hex[:6]}"
    await namespace_with_queues(kube, ns, manager_cpu=4)
    await kube.manager.create(Pod, pod_manifest("lone", ns, run_time="10m"))
    for name in ("g-0", "g-1"):
        await kube.manager.create(Pod, group_member(name, ns, group="pair", total=2, run_time="10m"))

    async def running_on(names: tuple[str, ...]) -> str | None:
        pods = [await manager_pod(kube, ns, name) for name in names]
        where = {worker for name in names for worker, items in (await kube.remote(Pod, ns, name)).items() if items}
        return next(iter(where)) if len(where) == 1 and all(phase(pod) == "Running" for pod in pods) else None

    lone_on = await eventually(lambda: running_on(("lone",)), timeout=90, what="Pod lone running on a worker")
    pair_on = await eventually(lambda: running_on(("g-0", "g-1")), timeout=90, what="the group's Pods running on one worker")

    def read(target: str) -> Any:
        async def logged() -> Any:
            result = kfed(fed.manager, "logs", target, "-n", ns)
            return result if result.returncode == 0 else None

        return eventually(logged, timeout=60, what=f"`kfed logs {target}` reading from its worker")

    lone = await read("pod/lone")
    assert lone.stderr.startswith(f"==> pod/lone: 1 pod(s) on worker {lone_on}"), lone.stderr
    assert lone.stdout.splitlines() == [f"simulated container log on cluster {fed.workers[lone_on].name}", "done"], lone.stdout
    for target in ("pod/pair", "pod/g-1"):  # a group by its name, or by any of its Pods' names
        pair = await read(target)
        assert pair.stderr.startswith(f"==> {target}: 2 pod(s) on worker {pair_on}"), pair.stderr
        prefixes = sorted({line.split(" ", 1)[0] for line in pair.stdout.splitlines()})
        assert prefixes == ["[pod/g-0/main]", "[pod/g-1/main]"], pair.stdout
        assert f"[pod/g-0/main] simulated container log on cluster {fed.workers[pair_on].name}" in pair.stdout.splitlines()
    missing = kfed(fed.manager, "logs", "pod/nothing-here", "-n", ns)
    assert missing.returncode == 1 and missing.stderr.strip() == f'error: no Pod "nothing-here" in namespace {ns} (see `kfed jobs -n {ns}`)'
    for name in ("lone", "g-0", "g-1"):
        await kube.manager.delete(Pod, name, namespace=ns)
