"""LeaderWorkerSets through MultiKueue, with the real LWS controller (v0.7.0) on each worker:
submitted to the manager, a LeaderWorkerSet gets one Workload per group there; every group
runs on one and the same worker (Kueue's component Workloads), its status comes back, and
nothing is left on the workers once it is deleted (`kfed cancel lws/NAME`). A group preempted
on the manager is taken off its worker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Pod
from manager.api.lws import SET_NAME_LABEL, LeaderWorkerSet
from manager.api.meta import find_condition
from manager.engine.integrations.lws import workload_name_for
from tests.e2e.federation import RUNS, Clients, Federation, running
from tests.e2e.test_cli import kfed
from tests.e2e.test_multikueue import make_priority_classes
from tests.harness import Provider, eventually, require_controller


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation: LWS's CRD everywhere, its controller on the workers, and
    kfed integrating LeaderWorkerSets (the tier's `kube` fixture opens its clients on it)."""
    lws_bin = require_controller("lws")
    with running(provider, Path(tmp_path_factory.mktemp("lws")), controllers={"lws": lws_bin}) as created:
        yield created


def lws_manifest(name: str, namespace: str, *, replicas: int, size: int, priority_class: str | None = None) -> dict[str, Any]:
    labels = {c.QUEUE_NAME_LABEL: "user-queue"}
    if priority_class:
        labels[c.PRIORITY_CLASS_LABEL] = priority_class
    pod = {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "leaderTemplate": {"spec": pod}, "workerTemplate": {"spec": pod}},
        },
    }


async def where(kube: Clients, ns: str, name: str) -> dict[str, dict[str, Any]]:
    """Per worker: our LWS there, its Workload copies and its running pods."""
    found: dict[str, dict[str, Any]] = {}
    for worker, client in kube.workers.items():
        sets = [s for s in (await client.list(LeaderWorkerSet, namespace=ns)).items if s.name == name]
        copies = [
            wl.name for wl in (await client.list(kueue.Workload, namespace=ns)).items if wl.name.startswith(f"leaderworkerset-{name}-")
        ]
        pods = (await client.list(Pod, namespace=ns, label_selector=f"{SET_NAME_LABEL}={name}")).items
        up = [p for p in pods if p.status is not None and p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
        found[worker] = {"sets": sets, "copies": sorted(copies), "running": up}
    return found


async def story(kube: Clients, ns: str, name: str) -> str:
    """What the manager's Workloads and each worker hold, for a failed wait."""
    lines = []
    for wl in (await kube.manager.list(kueue.Workload, namespace=ns)).items:
        checks = [(ch.name, ch.state, ch.message) for ch in (wl.status.admission_checks if wl.status else None) or []]
        lines.append(f"manager {wl.name}: cluster={wl.status.cluster_name if wl.status else None} checks={checks}")
    for worker, client in kube.workers.items():
        for wl in (await client.list(kueue.Workload, namespace=ns)).items:
            conds = [(cd.type, cd.status, cd.reason) for cd in (wl.status.conditions if wl.status else None) or []]
            lines.append(f"{worker} copy {wl.name}: {conds}")
        for pod in (await client.list(Pod, namespace=ns)).items:
            gates = [g.get("name") for g in pod.spec.scheduling_gates or []]
            lines.append(f"{worker} pod {pod.name}: {pod.status.phase if pod.status else None} gates={gates} labels={pod.metadata.labels}")
        sets = [s.name for s in (await client.list(LeaderWorkerSet, namespace=ns)).items]
        lines.append(f"{worker} sets: {sets}")
    return "\n".join(lines)


async def manager_workloads(kube: Clients, ns: str, names: list[str]) -> list[kueue.Workload] | None:
    found = [wl for wl in (await kube.manager.list(kueue.Workload, namespace=ns)).items if wl.name in names]
    return found if len(found) == len(names) else None


async def test_a_set_submitted_to_the_manager_runs_all_its_groups_on_one_worker_and_its_status_comes_back(
    fed: Federation, kube: Clients
) -> None:
    ns = f"lw{uuid.uuid4().hex[:6]}"
    await kube.queues(ns, manager_cpu=8, worker_cpu={"worker1": 8, "worker2": 8}, labels=RUNS, tag=ns)
    created = await kube.manager.create(LeaderWorkerSet, lws_manifest("serve", ns, replicas=2, size=2))
    names = [workload_name_for("serve", created.metadata.uid or "", index) for index in (0, 1)]
    wls = await eventually(lambda: manager_workloads(kube, ns, names), timeout=30, what="one Workload per group on the manager")
    assert all([(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("leader", 1), ("worker", 1)] for wl in wls)

    async def all_groups_running_on_one_worker() -> str | None:
        found = await where(kube, ns, "serve")
        on = [worker for worker, seen in found.items() if seen["sets"] or seen["copies"]]
        return on[0] if len(on) == 1 and len(found[on[0]]["running"]) == 4 and found[on[0]]["copies"] == sorted(names) else None

    worker = await eventually(
        all_groups_running_on_one_worker,
        timeout=120,
        what="both groups' pods running on one worker",
        explain=lambda: story(kube, ns, "serve"),
    )
    remote = (await where(kube, ns, "serve"))[worker]["sets"][0]
    assert (remote.metadata.labels or {}).get(c.MULTIKUEUE_ORIGIN_LABEL)
    for wl in (await manager_workloads(kube, ns, names)) or []:
        assert (wl.status.cluster_name if wl.status else None) == worker

    async def status_back() -> LeaderWorkerSet | None:
        lws = await kube.manager.get(LeaderWorkerSet, "serve", namespace=ns)
        return lws if lws.status is not None and lws.status.ready_replicas == 2 else None

    await eventually(status_back, timeout=90, what="the worker's status (2 ready groups) on the manager's LeaderWorkerSet")

    listed = kfed(fed.manager, "jobs", "-n", ns)
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert listed.returncode == 0 and [row[0] for row in rows] == ["serve", "serve"], listed.stdout + listed.stderr  # one per group
    assert all(worker in row for row in rows), listed.stdout
    explained = kfed(fed.manager, "explain", "lws/serve", "-n", ns)
    assert explained.returncode == 0 and worker in explained.stdout, explained.stdout + explained.stderr
    logs = kfed(fed.manager, "logs", "lws/serve", "-n", ns)
    assert logs.returncode == 0 and f"4 pod(s) on worker {worker}" in logs.stderr, logs.stdout + logs.stderr  # every group's
    cancelled = kfed(fed.manager, "cancel", "lws/serve", "-n", ns)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == "lws/serve deleted", cancelled.stdout + cancelled.stderr

    async def nothing_left() -> bool:
        found = await where(kube, ns, "serve")
        left = [wl for wl in (await kube.manager.list(kueue.Workload, namespace=ns)).items if wl.name in names]
        return not left and not any(seen["sets"] or seen["copies"] or seen["running"] for seen in found.values())

    await eventually(nothing_left, timeout=90, what="no Workload, LeaderWorkerSet, copy or pod left anywhere")


async def test_a_preempted_group_is_taken_off_its_worker_and_the_preemptor_runs(kube: Clients) -> None:
    ns = f"lp{uuid.uuid4().hex[:6]}"
    # Room for one group of two on the manager; each worker could take both sets.
    await kube.queues(ns, manager_cpu=2, worker_cpu={"worker1": 8, "worker2": 8}, labels=RUNS, tag=ns)
    await make_priority_classes(kube, ns)
    victim = await kube.manager.create(LeaderWorkerSet, lws_manifest("victim", ns, replicas=1, size=2, priority_class=f"{ns}-low"))
    victim_wl = workload_name_for("victim", victim.metadata.uid or "", 0)

    async def running_on(name: str) -> str | None:
        found = await where(kube, ns, name)
        on = [worker for worker, seen in found.items() if len(seen["running"]) == 2]
        return on[0] if len(on) == 1 else None

    first_on = await eventually(lambda: running_on("victim"), timeout=120, what="the low-priority set running on a worker")
    await kube.manager.create(LeaderWorkerSet, lws_manifest("urgent", ns, replicas=1, size=2, priority_class=f"{ns}-high"))

    async def victim_preempted() -> Any:
        wl = await kube.manager.get(kueue.Workload, victim_wl, namespace=ns)
        evicted = find_condition(wl.status.conditions if wl.status else None, c.EVICTED)
        return evicted if evicted is not None and evicted.reason == "Preempted" else None

    await eventually(victim_preempted, timeout=90, what="the victim's group preempted on the manager")

    async def victim_off_its_worker() -> bool:
        seen = (await where(kube, ns, "victim"))[first_on]
        return not seen["sets"] and not seen["copies"] and not seen["running"]

    await eventually(victim_off_its_worker, timeout=90, what="the victim's LeaderWorkerSet, copy and pods gone from its worker")
    await eventually(lambda: running_on("urgent"), timeout=120, what="the preemptor's group running on a worker")
