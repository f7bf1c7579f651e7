"""Plain Pods on one real cluster (Kueue's pod integration): kfed's webhook gates a queued Pod,
its Workload is admitted, kfed ungates it with the flavor's node labels, and the real
kube-scheduler binds it to a kwok node, where it runs and succeeds; a higher-priority Pod
preempts a running one, which is marked and deleted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Pod
from manager.api.meta import is_condition_true
from manager.dev.local import POD_RUN_TIME_ANNOTATION, LocalCluster
from manager.engine.integrations.pod import (
    MANAGED_LABEL,
    POD_GROUP_NAME_LABEL,
    POD_GROUP_TOTAL_COUNT_ANNOTATION,
    ROLE_HASH_ANNOTATION,
    SCHEDULING_GATE,
)
from manager.kube.client import KubeClient
from manager.kube.errors import KubeError, NotFoundError
from tests.harness import Provider, eventually
from tests.integration.controllers import ControllerProcess, crd_cluster, running_manager
from tests.integration.test_controllers import condition, make_queues

KWOK_NODES = {"type": "kwok"}  # the label every kwok node of the harness has


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "pods", jobs=True)  # kube-scheduler, kube-controller-manager and kwok nodes


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    config = {"integrations": {"frameworks": ["batch/job", "pod"]}}
    with running_manager(cluster, tmp_path_factory.mktemp("manager"), config=config) as process:
        yield process


def pod_manifest(
    name: str, namespace: str, *, queue: str | None = "user-queue", run_time: str = "1s", priority_class: str | None = None
) -> dict[str, Any]:
    labels = {c.QUEUE_NAME_LABEL: queue} if queue else {}
    if priority_class:
        labels[c.PRIORITY_CLASS_LABEL] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": {POD_RUN_TIME_ANNOTATION: run_time}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


async def workload_of(kube: KubeClient, pod: Pod) -> kueue.Workload | None:
    for wl in (await kube.list(kueue.Workload, namespace=pod.namespace)).items:
        if any(ref.uid == pod.metadata.uid and ref.kind == "Pod" for ref in wl.metadata.owner_references or []):
            return wl
    return None


def gates(pod: Pod) -> list[str]:
    return [gate.get("name", "") for gate in pod.spec.scheduling_gates or []]


async def read(kube: KubeClient, name: str, namespace: str) -> Pod | None:
    try:
        return await kube.get(Pod, name, namespace=namespace)
    except NotFoundError:
        return None


async def test_a_queued_pod_is_gated_admitted_ungated_bound_by_the_scheduler_and_finishes_its_workload(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("pods"), names("pods-cq"), names("kwok")
    await make_queues(kube, ns, cq=cq, cpu=2, flavor=flavor, node_labels=KWOK_NODES)
    created = await kube.create(Pod, pod_manifest("single", ns))
    assert gates(created) == [SCHEDULING_GATE]  # kfed's webhook gated it at creation
    assert (created.metadata.labels or {})[MANAGED_LABEL] == "true" and created.metadata.finalizers == [MANAGED_LABEL]
    untouched = await kube.create(Pod, pod_manifest("not-queued", ns, queue=None))
    assert not gates(untouched) and not untouched.metadata.finalizers  # no queue name: Kueue leaves it alone

    async def succeeded() -> Pod | None:
        pod = await kube.get(Pod, "single", namespace=ns)
        return pod if pod.status is not None and pod.status.phase == "Succeeded" else None

    pod = await eventually(succeeded, timeout=90, what="the Pod bound to a kwok node, run and succeeded")
    assert not gates(pod) and pod.spec.node_selector == KWOK_NODES
    assert (pod.spec.node_name or "").startswith("kwok-node-")  # the real kube-scheduler bound it
    assert (pod.metadata.labels or {})[c.PODSET_LABEL] == "main"
    wl = await workload_of(kube, pod)
    assert wl is not None and wl.name.startswith("pod-single-")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("main", 1)]

    async def finished() -> Any:
        current = await workload_of(kube, pod)
        done = current is not None and is_condition_true(current.status.conditions if current.status else None, c.FINISHED)
        latest = await kube.get(Pod, "single", namespace=ns)
        return current if done and not latest.metadata.finalizers else None

    done = await eventually(finished, timeout=60, what="the Workload Finished and the Pod's finalizer gone")
    assert condition(done, c.FINISHED)[:2] == ("True", "Succeeded")  # type: ignore[index]
    await kube.delete(Pod, "single", namespace=ns)
    await eventually(lambda: _gone(kube, done), timeout=60, what="the Workload deleted with its Pod")


async def test_a_running_pod_preempted_by_a_higher_priority_pod_is_marked_and_deleted_and_the_preemptor_runs(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("podp"), names("podp-cq"), names("kwok")
    await make_queues(kube, ns, cq=cq, cpu=1, flavor=flavor, node_labels=KWOK_NODES, preemption={"withinClusterQueue": "LowerPriority"})
    low, high = names("low"), names("high")
    for name, value in ((low, 10), (high, 1000)):
        await kube.create(
            kueue.WorkloadPriorityClass,
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value},
        )
    await kube.create(Pod, pod_manifest("victim", ns, run_time="10m", priority_class=low))

    async def running(name: str) -> Pod | None:
        pod = await read(kube, name, namespace=ns)
        return pod if pod is not None and pod.status is not None and pod.status.phase == "Running" else None

    victim = await eventually(lambda: running("victim"), timeout=90, what="the low-priority Pod running on a kwok node")
    victim_wl = await workload_of(kube, victim)
    assert victim_wl is not None
    seen: dict[str, Any] = {}

    async def victim_marked_and_deleted() -> bool:
        pod = await read(kube, "victim", namespace=ns)
        if pod is not None:
            marks = [cond for cond in (pod.status.conditions if pod.status else None) or [] if cond.type == "TerminationTarget"]
            if marks:
                seen["mark"] = marks[0]
            return False
        return True

    await kube.create(Pod, pod_manifest("urgent", ns, run_time="10m", priority_class=high))
    await eventually(victim_marked_and_deleted, timeout=90, what="the preempted Pod deleted")
    await eventually(lambda: running("urgent"), timeout=90, what="the high-priority Pod running in the freed quota")
    await eventually(lambda: _gone(kube, victim_wl), timeout=60, what="the preempted Pod's Workload gone with it")
    if "mark" in seen:  # the mark is on the Pod only while it is being deleted; seen when the poll catches it
        assert seen["mark"].reason == "WorkloadEvictedDueToPreempted"


async def _gone(kube: KubeClient, wl: kueue.Workload) -> bool:
    try:
        await kube.get(kueue.Workload, wl.name, namespace=wl.namespace)
    except NotFoundError:
        return True
    return False


def group_member(
    name: str, namespace: str, *, group: str, total: int, cpu: str = "1", run_time: str = "1s", **labels: str
) -> dict[str, Any]:
    manifest = pod_manifest(name, namespace, run_time=run_time)
    manifest["metadata"]["labels"] |= {POD_GROUP_NAME_LABEL: group, **labels}
    manifest["metadata"]["annotations"][POD_GROUP_TOTAL_COUNT_ANNOTATION] = str(total)
    manifest["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
    return manifest


async def group_workload(kube: KubeClient, ns: str, group: str) -> kueue.Workload | None:
    try:
        return await kube.get(kueue.Workload, group, namespace=ns)
    except NotFoundError:
        return None


async def test_a_pod_group_gets_one_workload_once_complete_runs_all_its_pods_and_finishes(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("pgrp"), names("pgrp-cq"), names("kwok")
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=flavor, node_labels=KWOK_NODES)
    await kube.create(Pod, group_member("leader", ns, group="train", total=3, cpu="2"))
    await kube.create(Pod, group_member("worker-0", ns, group="train", total=3))
    first = await kube.get(Pod, "leader", namespace=ns)
    assert gates(first) == [SCHEDULING_GATE] and ROLE_HASH_ANNOTATION in (first.metadata.annotations or {})
    incomplete = group_member("stray", ns, group="train", total=3)
    del incomplete["metadata"]["annotations"][POD_GROUP_TOTAL_COUNT_ANNOTATION]
    with pytest.raises(KubeError) as refused:
        await kube.create(Pod, incomplete)
    assert f"metadata.annotations[{POD_GROUP_TOTAL_COUNT_ANNOTATION}]: Required value" in str(refused.value)
    # Two of three: no Workload yet (Kueue creates the group's Workload once it is complete).
    assert await group_workload(kube, ns, "train") is None
    await kube.create(Pod, group_member("worker-1", ns, group="train", total=3))

    async def all_succeeded() -> list[Pod] | None:
        pods = [await kube.get(Pod, name, namespace=ns) for name in ("leader", "worker-0", "worker-1")]
        return pods if all(pod.status is not None and pod.status.phase == "Succeeded" for pod in pods) else None

    pods = await eventually(all_succeeded, timeout=90, what="every Pod of the group bound to a kwok node, run and succeeded")
    assert all((pod.spec.node_name or "").startswith("kwok-node-") and not gates(pod) for pod in pods)
    wl = await group_workload(kube, ns, "train")
    assert wl is not None
    assert sorted(ps.count for ps in wl.spec.pod_sets) == [1, 2]  # two roles: the leader, and the workers
    assert sorted(ref.name for ref in wl.metadata.owner_references or []) == ["leader", "worker-0", "worker-1"]

    async def finished() -> Any:
        current = await group_workload(kube, ns, "train")
        done = current is not None and is_condition_true(current.status.conditions if current.status else None, c.FINISHED)
        latest = [await kube.get(Pod, pod.name, namespace=ns) for pod in pods]
        return current if done and not any(pod.metadata.finalizers for pod in latest) else None

    done = await eventually(finished, timeout=60, what="the group's Workload Finished and every Pod's finalizer gone")
    assert condition(done, c.FINISHED)[:3] == ("True", "Succeeded", "Pods succeeded: 3/3.")  # type: ignore[index]


async def test_a_preempted_pod_group_has_its_running_pods_deleted(manager: ControllerProcess, kube: KubeClient, names: Any) -> None:
    ns, cq, flavor = names("pgp"), names("pgp-cq"), names("kwok")
    await make_queues(kube, ns, cq=cq, cpu=2, flavor=flavor, node_labels=KWOK_NODES, preemption={"withinClusterQueue": "LowerPriority"})
    low, high = names("low"), names("high")
    for name, value in ((low, 10), (high, 1000)):
        await kube.create(
            kueue.WorkloadPriorityClass,
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value},
        )
    for name in ("a", "b"):
        await kube.create(Pod, group_member(name, ns, group="victims", total=2, run_time="10m", **{c.PRIORITY_CLASS_LABEL: low}))

    async def phases(*pods: str) -> list[str | None]:
        found = [await read(kube, name, namespace=ns) for name in pods]
        return [pod.status.phase if pod is not None and pod.status else None for pod in found]

    async def group_running() -> bool:
        return await phases("a", "b") == ["Running", "Running"]

    await eventually(group_running, timeout=90, what="the low-priority group running")
    await kube.create(Pod, pod_manifest("urgent", ns, run_time="10m", priority_class=high))

    async def group_deleted() -> bool:
        return [await read(kube, name, namespace=ns) for name in ("a", "b")] == [None, None]

    await eventually(group_deleted, timeout=90, what="the preempted group's running Pods deleted")
    await eventually(lambda: running_phase(kube, ns, "urgent"), timeout=90, what="the preemptor running")
    await eventually(lambda: _no_workload(kube, ns, "victims"), timeout=60, what="the group's Workload gone with its Pods")


async def running_phase(kube: KubeClient, ns: str, name: str) -> bool:
    pod = await read(kube, name, namespace=ns)
    return pod is not None and pod.status is not None and pod.status.phase == "Running"


async def _no_workload(kube: KubeClient, ns: str, name: str) -> bool:
    return await group_workload(kube, ns, name) is None
