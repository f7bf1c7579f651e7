"""LeaderWorkerSets on one real cluster with the real LWS controller (sigs.k8s.io/lws v0.7.0,
hack/lws/build.sh), as Kueue's LWS integration runs them: one Workload per group; the pods
the LWS controller's StatefulSets create are gated (kfed's pod webhook, for the pods their
parent suspends), made members of their group's pod group, and ungated group by group as each
group's Workload is admitted, then bound to kwok nodes by the real kube-scheduler; a group
whose Workload waits stays gated, and a higher-priority set preempts a lower one's group."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Pod
from manager.api.lws import GROUP_INDEX_LABEL, SET_NAME_LABEL, LeaderWorkerSet
from manager.api.meta import is_condition_true
from manager.dev import lws as lws_dev
from manager.dev.local import LocalCluster
from manager.engine.integrations.lws import FRAMEWORK, SUSPENDED_BY_PARENT_ANNOTATION, workload_name_for
from manager.engine.integrations.pod import MANAGED_LABEL, POD_GROUP_NAME_LABEL, ROLE_HASH_ANNOTATION, SCHEDULING_GATE
from manager.kube.client import KubeClient
from manager.kube.errors import NotFoundError
from tests.harness import Provider, eventually, require_controller
from tests.integration.controllers import ControllerProcess, crd_cluster, running_manager
from tests.integration.test_controllers import make_queues

KWOK_NODES = {"type": "kwok"}


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    bin_dir = require_controller("lws")
    created = crd_cluster(provider, "lws", jobs=True)  # kube-scheduler, kube-controller-manager and kwok nodes
    lws_dev.install_crd(created, bin_dir)
    lws_dev.start_controller(created, bin_dir)
    return created


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    config = {"integrations": {"frameworks": ["batch/job", FRAMEWORK]}}
    with running_manager(cluster, tmp_path_factory.mktemp("manager"), config=config) as process:
        yield process


def lws_manifest(
    name: str, namespace: str, *, replicas: int, size: int, cpu: str = "1", priority_class: str | None = None
) -> dict[str, Any]:
    labels = {c.QUEUE_NAME_LABEL: "user-queue"}
    if priority_class:
        labels[c.PRIORITY_CLASS_LABEL] = priority_class
    pod = {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "leaderTemplate": {"spec": pod}, "workerTemplate": {"spec": pod}},
        },
    }


def gates(pod: Pod) -> list[str]:
    return [gate.get("name", "") for gate in pod.spec.scheduling_gates or []]


async def pods_of(kube: KubeClient, ns: str, name: str) -> list[Pod]:
    return list((await kube.list(Pod, namespace=ns, label_selector=f"{SET_NAME_LABEL}={name}")).items)


async def workload(kube: KubeClient, ns: str, name: str) -> kueue.Workload | None:
    try:
        return await kube.get(kueue.Workload, name, namespace=ns)
    except NotFoundError:
        return None


def admitted(wl: kueue.Workload | None) -> bool:
    return wl is not None and is_condition_true(wl.status.conditions if wl.status else None, c.ADMITTED)


async def test_a_queued_set_gets_one_workload_per_group_and_only_the_admitted_groups_pods_run(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("lws"), names("lws-cq"), names("kwok")
    await make_queues(kube, ns, cq=cq, cpu=2, flavor=flavor, node_labels=KWOK_NODES)  # room for one group of two
    created = await kube.create(LeaderWorkerSet, lws_manifest("serve", ns, replicas=2, size=2))
    # kfed's webhook marked its templates: their pods are suspended by their parent and queued.
    leader_template = created.to_dict()["spec"]["leaderWorkerTemplate"]["leaderTemplate"].get("metadata") or {}
    assert leader_template["annotations"][SUSPENDED_BY_PARENT_ANNOTATION] == FRAMEWORK
    assert leader_template["labels"][c.QUEUE_NAME_LABEL] == "user-queue"
    uid = created.metadata.uid or ""
    wl_names = [workload_name_for("serve", uid, index) for index in (0, 1)]

    async def both_workloads() -> list[kueue.Workload] | None:
        found = [await workload(kube, ns, name) for name in wl_names]
        return [wl for wl in found if wl is not None] if all(found) else None

    wls = await eventually(both_workloads, timeout=60, what="one Workload per group of the LeaderWorkerSet")
    for wl in wls:
        assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("leader", 1), ("worker", 1)]
        assert any(ref.kind == "LeaderWorkerSet" and ref.uid == uid for ref in wl.metadata.owner_references or [])

    async def one_group_running() -> list[Pod] | None:
        pods = await pods_of(kube, ns, "serve")
        running = [p for p in pods if p.status is not None and p.status.phase == "Running"]
        return pods if len(pods) == 4 and len(running) == 2 else None

    pods = await eventually(one_group_running, timeout=120, what="the pods of one group running on kwok nodes, the other group's gated")
    running = [p for p in pods if p.status is not None and p.status.phase == "Running"]
    waiting = [p for p in pods if p not in running]
    assert {(p.metadata.labels or {})[GROUP_INDEX_LABEL] for p in running} == {"0"} or {
        (p.metadata.labels or {})[GROUP_INDEX_LABEL] for p in running
    } == {"1"}
    for pod in running:
        assert not gates(pod) and pod.spec.node_selector == KWOK_NODES
        assert (pod.spec.node_name or "").startswith("kwok-node-")  # the real kube-scheduler bound it
    for pod in waiting:
        assert gates(pod) == [SCHEDULING_GATE] and not pod.spec.node_name
    for pod in pods:
        labels, annotations = pod.metadata.labels or {}, pod.metadata.annotations or {}
        group = workload_name_for("serve", uid, labels[GROUP_INDEX_LABEL])
        assert labels[MANAGED_LABEL] == "true" and labels[POD_GROUP_NAME_LABEL] == group
        assert annotations[ROLE_HASH_ANNOTATION] in ("leader", "worker")
    running_group = workload_name_for("serve", uid, (running[0].metadata.labels or {})[GROUP_INDEX_LABEL])
    assert admitted(await workload(kube, ns, running_group))
    assert not admitted(await workload(kube, ns, next(name for name in wl_names if name != running_group)))

    await kube.delete(LeaderWorkerSet, "serve", namespace=ns)

    async def all_gone() -> bool:
        return all([await workload(kube, ns, name) is None for name in wl_names]) and not await pods_of(kube, ns, "serve")

    await eventually(all_gone, timeout=90, what="the LeaderWorkerSet's Workloads and pods gone with it")


async def test_a_higher_priority_set_preempts_a_running_group(manager: ControllerProcess, kube: KubeClient, names: Any) -> None:
    ns, cq, flavor = names("lwsp"), names("lwsp-cq"), names("kwok")
    await make_queues(kube, ns, cq=cq, cpu=2, flavor=flavor, node_labels=KWOK_NODES, preemption={"withinClusterQueue": "LowerPriority"})
    low, high = names("low"), names("high")
    for name, value in ((low, 10), (high, 1000)):
        await kube.create(
            kueue.WorkloadPriorityClass,
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value},
        )
    victim = await kube.create(LeaderWorkerSet, lws_manifest("victim", ns, replicas=1, size=2, priority_class=low))
    victim_wl = workload_name_for("victim", victim.metadata.uid or "", 0)

    async def running(name: str) -> list[Pod] | None:
        pods = await pods_of(kube, ns, name)
        up = [p for p in pods if p.status is not None and p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
        return up if len(up) == 2 else None

    first = await eventually(lambda: running("victim"), timeout=120, what="the low-priority group running")
    await kube.create(LeaderWorkerSet, lws_manifest("urgent", ns, replicas=1, size=2, priority_class=high))
    await eventually(lambda: running("urgent"), timeout=120, what="the high-priority group running in the freed quota")

    async def victim_stopped() -> bool:
        wl = await workload(kube, ns, victim_wl)
        pods = await pods_of(kube, ns, "victim")
        first_uids = {p.metadata.uid for p in first}
        # the running pods were deleted; their StatefulSets' new pods wait, gated, for re-admission
        return wl is not None and not admitted(wl) and all(p.metadata.uid not in first_uids and gates(p) for p in pods)

    await eventually(victim_stopped, timeout=90, what="the preempted group's pods deleted and its replacements gated")
