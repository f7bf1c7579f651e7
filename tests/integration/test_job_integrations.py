"""The job integration for a kind beyond batch/v1 Job, on a real cluster: JobSet, with its real
CRD and no JobSet controller (as Kueue's own JobSet integration tests: the JobSet's status is
written by hand, standing in for its controller)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.jobset import JobSet
from manager.api.meta import is_condition_true
from manager.dev import federation, jobset
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from manager.kube.errors import NotFoundError
from tests.harness import Provider, eventually, require_controller
from tests.integration.controllers import ControllerProcess, crd_cluster, running_manager
from tests.integration.test_controllers import condition, make_queues

PARKED = {"kfed-test/pool": "parked"}


def jobset_crd() -> dict[str, Any]:
    """JobSet's CRD from the directory hack/jobset/build.sh printed (KFED_JOBSET_BIN_DIR).
    Missing, it fails the test under CI and skips it elsewhere."""
    return jobset.crd(require_controller("jobset"))


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "jset")


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    crd = jobset_crd()
    directory = tmp_path_factory.mktemp("manager")
    config = directory / "config.yaml"
    frameworks = ["batch/job", "jobset.x-k8s.io/jobset"]
    config.write_text(
        yaml.safe_dump({"apiVersion": f"{c.CONFIG_GROUP}/v1beta2", "kind": "Configuration", "integrations": {"frameworks": frameworks}})
    )
    with running_manager(cluster, directory, extra=[f"--config={config}"]) as process:
        # kfed became ready without the JobSet API; as Kueue does, it starts the JobSet
        # controller once the CRD is installed.
        federation.install_crds(cluster, [crd])
        yield process


KWOK_RUN_TIME = "pod-complete.stage.kwok.x-k8s.io/delay"  # how long a pod runs on a kwok node


def jobset_manifest(
    name: str, namespace: str, *, cpu: str = "1", priority_class: str | None = None, run_time: str | None = None
) -> dict[str, Any]:
    """A queued JobSet: a leader (1 pod) and 2 worker Jobs of 2 pods each, 5 pods of `cpu` each;
    on kwok nodes each pod runs for `run_time` (at once without it)."""
    labels = {c.QUEUE_NAME_LABEL: "user-queue"}
    if priority_class:
        labels[c.PRIORITY_CLASS_LABEL] = priority_class
    annotations = {KWOK_RUN_TIME: run_time} if run_time else {}

    def replicated_job(rjob: str, replicas: int, parallelism: int) -> dict[str, Any]:
        pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}
        metadata = {"labels": {"app": rjob}, "annotations": annotations}
        job = {"parallelism": parallelism, "completions": parallelism, "template": {"metadata": metadata, "spec": pod}}
        return {"name": rjob, "replicas": replicas, "template": {"spec": job}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"replicatedJobs": [replicated_job("leader", 1, 1), replicated_job("workers", 2, 2)]},
    }


async def workload_of(kube: KubeClient, js: JobSet) -> kueue.Workload | None:
    for wl in (await kube.list(kueue.Workload, namespace=js.namespace)).items:
        if any(ref.uid == js.metadata.uid and ref.kind == "JobSet" for ref in wl.metadata.owner_references or []):
            return wl
    return None


def pod_templates(js: JobSet) -> dict[str, Any]:
    return {rjob.name: rjob.template.spec.template for rjob in js.spec.replicated_jobs}


async def test_a_queued_jobset_is_admitted_as_one_pod_set_per_replicated_job_started_with_its_flavor_and_finished(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("js"), names("js-cq"), names("parked")
    await make_queues(kube, ns, cq=cq, cpu=5, flavor=flavor, node_labels=PARKED)
    created = await eventually(lambda: _create(kube, jobset_manifest("train", ns)), timeout=60, what="the JobSet API served")
    assert created.spec.suspend is True  # kfed's webhook suspended it at creation

    async def started() -> Any:
        js = await kube.get(JobSet, "train", namespace=ns)
        wl = await workload_of(kube, js)
        admitted = wl is not None and is_condition_true(wl.status.conditions if wl.status else None, c.ADMITTED)
        return (js, wl) if admitted and js.spec.suspend is False else None

    js, wl = await eventually(started, timeout=60, what="the JobSet admitted and unsuspended")
    assert wl.name.startswith("jobset-train-")
    assert [(ps.name, ps.count) for ps in wl.spec.pod_sets] == [("leader", 1), ("workers", 4)]  # replicas x parallelism
    for name, template in pod_templates(js).items():
        assert template.spec.node_selector == PARKED, name
        assert template.metadata is not None and template.metadata.labels == {"app": name, c.PODSET_LABEL: name} | {
            c.LOCAL_QUEUE_LABEL: "user-queue",
            c.CLUSTER_QUEUE_LABEL: cq,
        }

    # What the JobSet controller would write when every Job succeeded.
    done = {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed successfully"}
    done |= {"lastTransitionTime": "2026-11-21T12:00:00Z"}
    await kube.patch(JobSet, "train", {"status": {"conditions": [done], "terminalState": "Completed"}}, namespace=ns, subresource="status")

    async def finished() -> Any:
        current = await kube.get(kueue.Workload, wl.name, namespace=ns)
        return current if is_condition_true(current.status.conditions if current.status else None, c.FINISHED) else None

    assert condition(await eventually(finished, timeout=60, what="the Workload Finished"), c.FINISHED) == (
        "True",
        "Succeeded",
        "jobset completed successfully",
    )
    await kube.delete(JobSet, "train", namespace=ns)

    async def gone() -> bool:
        try:
            await kube.get(kueue.Workload, wl.name, namespace=ns)
        except NotFoundError:
            return True
        return False

    await eventually(gone, timeout=60, what="the Workload deleted with its JobSet")


async def test_a_preempted_jobset_is_suspended_given_its_templates_back_and_its_quota_goes_to_the_preemptor(
    manager: ControllerProcess, kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor = names("jsp"), names("jsp-cq"), names("parked")
    await make_queues(kube, ns, cq=cq, cpu=5, flavor=flavor, node_labels=PARKED, preemption={"withinClusterQueue": "LowerPriority"})
    low, high = names("low"), names("high")
    for name, value in ((low, 10), (high, 1000)):
        await kube.create(
            kueue.WorkloadPriorityClass,
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value},
        )
    await eventually(lambda: _create(kube, jobset_manifest("victim", ns, priority_class=low)), timeout=60, what="the JobSet API served")

    async def running(name: str) -> Any:
        js = await kube.get(JobSet, name, namespace=ns)
        return js if js.spec.suspend is False else None

    await eventually(lambda: running("victim"), timeout=60, what="the low-priority JobSet started")
    await kube.create(JobSet, jobset_manifest("urgent", ns, priority_class=high))

    async def preempted() -> Any:
        victim = await kube.get(JobSet, "victim", namespace=ns)
        wl = await workload_of(kube, victim)
        requeued = condition(wl, c.REQUEUED)
        return (victim, wl) if victim.spec.suspend is True and requeued is not None and requeued[0] == "True" else None

    victim, wl = await eventually(preempted, timeout=60, what="the victim suspended, its quota released and requeued")
    assert condition(wl, c.EVICTED)[:2] == ("True", "Preempted")  # type: ignore[index]
    assert condition(wl, c.QUOTA_RESERVED)[0] == "False"  # type: ignore[index]
    for name, template in pod_templates(victim).items():
        assert template.spec.node_selector in (None, {}), name  # back to what the user wrote
        assert template.metadata is not None and template.metadata.labels == {"app": name}, name
    await eventually(lambda: running("urgent"), timeout=60, what="the high-priority JobSet started in the freed quota")


async def _create(kube: KubeClient, manifest: dict[str, Any]) -> JobSet | None:
    """Create, or None while the apiserver does not serve JobSets yet (the CRD just landed)."""
    try:
        return await kube.create(JobSet, manifest)
    except NotFoundError:
        return None
