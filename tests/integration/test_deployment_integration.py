"""Deployments on one real cluster, as Kueue's deployment integration runs them: the real
Deployment and ReplicaSet controllers (kube-controller-manager) make the pods, kfed's webhook has
marked their template, so each pod is gated, queued alone (one Workload per pod), ungated with
its flavor's node labels once admitted and bound by the real kube-scheduler to a kwok node; a pod
whose Workload waits stays gated; a higher-priority pod preempts one, whose ReplicaSet makes a
new pod that waits gated; the Workloads go with the pods when the Deployment is deleted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.apps import Deployment
from manager.api.core import Pod
from manager.dev.local import LocalCluster
from manager.engine.integrations.pod import MANAGED_LABEL, SCHEDULING_GATE, SUSPENDED_BY_PARENT_ANNOTATION
from manager.kube.client import KubeClient
from manager.kube.errors import KubeError
from tests.harness import Provider, eventually
from tests.integration.controllers import ControllerProcess, crd_cluster, running_manager
from tests.integration.test_controllers import make_queues
from tests.integration.test_lws_integration import admitted, gates

KWOK_NODES = {"type": "kwok"}


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "deploy", jobs=True)  # kube-controller-manager, kube-scheduler and kwok nodes


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    config = {"integrations": {"frameworks": ["batch/job", "deployment"]}}
    with running_manager(cluster, tmp_path_factory.mktemp("manager"), config=config) as process:
        yield process


def deployment_manifest(name: str, ns: str, *, replicas: int, cpu: str = "1", priority_class: str | None = None) -> dict[str, Any]:
    labels = {c.QUEUE_NAME_LABEL: "user-queue", **({c.PRIORITY_CLASS_LABEL: priority_class} if priority_class else {})}
    container = {"name": "main", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
        },
    }


def running(pod: Pod) -> bool:
    return pod.status is not None and pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None


async def pods_of(kube: KubeClient, ns: str, name: str) -> list[Pod]:
    return [p for p in (await kube.list(Pod, namespace=ns, label_selector=f"app={name}")).items if p.metadata.deletion_timestamp is None]


async def workloads_by_pod(kube: KubeClient, ns: str) -> dict[str, kueue.Workload]:
    """Each Workload of `ns` by the name of the Pod that is its controller owner."""
    found = {}
    for wl in (await kube.list(kueue.Workload, namespace=ns)).items:
        owner = next((ref for ref in wl.metadata.owner_references or [] if ref.controller and ref.kind == "Pod"), None)
        if owner is not None:
            found[owner.name] = wl
    return found


async def test_each_pod_of_a_queued_deployment_is_queued_alone_and_runs_once_admitted(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("dep"), names("dep-cq"), names("kwok")
    await make_queues(kube, ns, cq=cq, cpu=2, flavor=flavor, node_labels=KWOK_NODES)  # room for two of its three pods
    created = await kube.create(Deployment, deployment_manifest("web", ns, replicas=3))
    template = created.spec.template.metadata
    assert template is not None and (template.annotations or {}).get(SUSPENDED_BY_PARENT_ANNOTATION) == "deployment"
    assert (template.labels or {}) == {"app": "web", c.QUEUE_NAME_LABEL: "user-queue", MANAGED_LABEL: "true"}

    async def two_running_one_gated() -> list[Pod] | None:
        pods = await pods_of(kube, ns, "web")
        up = [p for p in pods if running(p)]
        return pods if len(pods) == 3 and len(up) == 2 else None

    pods = await eventually(two_running_one_gated, timeout=120, what="two of the Deployment's pods running, the third gated")
    wls = await workloads_by_pod(kube, ns)
    assert sorted(wls) == sorted(p.name for p in pods), "one Workload per pod, owned by it"
    for pod in pods:
        wl = wls[pod.name]
        assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("main", 1)]
        if running(pod):
            assert admitted(wl) and not gates(pod) and pod.spec.node_selector == KWOK_NODES
            assert (pod.spec.node_name or "").startswith("kwok-node-"), "the real kube-scheduler bound it"
        else:
            assert not admitted(wl) and gates(pod) == [SCHEDULING_GATE] and not pod.spec.node_name

    async def two_ready() -> Deployment | None:
        dep = await kube.get(Deployment, "web", namespace=ns)
        return dep if dep.status is not None and dep.status.ready_replicas == 2 else None

    await eventually(two_ready, timeout=60, what="the Deployment reporting its two admitted pods ready")
    # Kueue's update checks: a Deployment with a ready pod keeps its queue.
    with pytest.raises(KubeError) as refused:
        await kube.patch(Deployment, "web", {"metadata": {"labels": {c.QUEUE_NAME_LABEL: "other-queue"}}}, namespace=ns)
    assert f'metadata.labels[{c.QUEUE_NAME_LABEL}]: Invalid value: "other-queue": field is immutable' in str(refused.value)
    # One with none takes a new queue, and its template follows, for the pods its rollout makes.
    await kube.create(Deployment, deployment_manifest("idle", ns, replicas=0))
    moved = await kube.patch(Deployment, "idle", {"metadata": {"labels": {c.QUEUE_NAME_LABEL: "other-queue"}}}, namespace=ns)
    assert moved.spec.template.metadata is not None and (moved.spec.template.metadata.labels or {})[c.QUEUE_NAME_LABEL] == "other-queue"

    await kube.delete(Deployment, "web", namespace=ns)

    async def all_gone() -> bool:
        return not await pods_of(kube, ns, "web") and not (await kube.list(kueue.Workload, namespace=ns)).items

    await eventually(all_gone, timeout=120, what="the Deployment's pods and their Workloads gone with it")


async def test_a_preempted_pod_is_replaced_by_a_gated_one(manager: ControllerProcess, kube: KubeClient, names: Any) -> None:
    ns, cq, flavor = names("depp"), names("depp-cq"), names("kwok")
    await make_queues(kube, ns, cq=cq, cpu=2, flavor=flavor, node_labels=KWOK_NODES, preemption={"withinClusterQueue": "LowerPriority"})
    low, high = names("low"), names("high")
    for name, value in ((low, 10), (high, 1000)):
        body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}
        await kube.create(kueue.WorkloadPriorityClass, body)
    await kube.create(Deployment, deployment_manifest("victim", ns, replicas=2, priority_class=low))

    async def all_running(name: str, count: int) -> list[Pod] | None:
        pods = await pods_of(kube, ns, name)
        return pods if len([p for p in pods if running(p)]) == count else None

    first = await eventually(lambda: all_running("victim", 2), timeout=120, what="the low-priority Deployment's two pods running")
    await kube.create(Deployment, deployment_manifest("urgent", ns, replicas=1, priority_class=high))
    await eventually(lambda: all_running("urgent", 1), timeout=120, what="the high-priority pod running in the freed quota")

    async def one_replaced() -> list[Pod] | None:
        pods = await pods_of(kube, ns, "victim")
        first_names = {p.name for p in first}
        replaced = [p for p in pods if p.name not in first_names]
        kept = [p for p in pods if p.name in first_names and running(p)]
        return replaced if len(pods) == 2 and len(kept) == 1 and len(replaced) == 1 and gates(replaced[0]) else None

    [replacement] = await eventually(one_replaced, timeout=90, what="one victim pod preempted and its replacement gated")
    [preempted] = [p.name for p in first if p.name not in {pod.name for pod in await pods_of(kube, ns, "victim")}]

    async def workloads_follow_the_pods() -> dict[str, kueue.Workload] | None:
        wls = await workloads_by_pod(kube, ns)
        return wls if replacement.name in wls and preempted not in wls else None

    wls = await eventually(workloads_follow_the_pods, timeout=60, what="the replacement's own Workload, the preempted pod's gone")
    assert not admitted(wls[replacement.name]), "the replacement waits for quota"
