"""MultiKueue records a new winner before it touches any worker, on real apiservers.

The race pinned here: with the AllAtOnce dispatcher two workers can admit their copies of a
Workload in the same second, and the planner breaks the tie by cluster name. A reconcile
planned from a stale manager cache (one that has not yet seen the previous pass record the
check `Ready` and `status.clusterName`) could pick the other worker and create the Job there
too: the Job would run twice. So `WorkloadController._execute` writes a new winner's check
first, with the Workload's resourceVersion as its precondition: a stale pass fails with a
conflict and has deleted and created nothing on any worker.

Here the manager's caches are listed once and not watched, so they are held behind on purpose
while the Workload changes on the apiserver. That is why this is not in the fault suite: it
injects process and network faults, none of which can keep one cache behind on demand.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job, Secret
from manager.api.meta import find_condition, format_time, is_condition_true, utcnow
from manager.controllers.caches import Caches
from manager.dev.local import LocalCluster
from manager.engine.workload import admission_check_state
from manager.kube.client import KubeClient
from manager.kube.errors import ConflictError
from manager.kube.informer import Informer
from manager.multikueue.controllers.workload import WorkloadController
from manager.multikueue.rules.plan import remote_copy
from manager.multikueue.rules.settings import Settings
from manager.runtime.metrics import Metrics
from tests.conftest import client_of
from tests.harness import Provider, eventually
from tests.integration.controllers import SYSTEM_NAMESPACE, cluster_controller, crd_cluster
from tests.integration.test_controllers import job_manifest, make_queues

V1B2 = f"{c.GROUP}/v1beta2"


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "mkmgr")


@pytest.fixture(scope="module")
def worker(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "mkwrk")


@pytest.fixture
async def worker_kube(worker: LocalCluster) -> AsyncIterator[KubeClient]:
    async with client_of(worker, "test-worker") as client:
        yield client


def obj(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"apiVersion": V1B2, "kind": kind, "metadata": {"name": name, **meta}, "spec": spec}


async def test_a_pass_planned_from_a_stale_cache_creates_no_job_and_the_next_one_does(
    kube: KubeClient, worker: LocalCluster, worker_kube: KubeClient, names: Any
) -> None:
    ns, cq, flavor, check, config, member = (names(n) for n in ("mk", "mk-cq", "mk-flavor", "mk-check", "mk-config", "worker"))
    settings = Settings()

    # The manager: queues, the MultiKueue check, its config and the worker's cluster object.
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=flavor, node_labels={})
    params = {"apiGroup": c.GROUP, "kind": "MultiKueueConfig", "name": config}
    await kube.create(
        kueue.AdmissionCheck, obj("AdmissionCheck", check, {"controllerName": c.MULTIKUEUE_CONTROLLER_NAME, "parameters": params})
    )
    await kube.patch(kueue.ClusterQueue, cq, {"spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": check}]}}})
    await kube.create(kueue.MultiKueueConfig, obj("MultiKueueConfig", config, {"clusters": [member]}))
    encoded = base64.b64encode(yaml.safe_dump(worker.kubeconfig()).encode()).decode()
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": member, "namespace": SYSTEM_NAMESPACE}}
    await kube.create(Secret, {**secret, "data": {c.MULTIKUEUE_SECRET_KEY: encoded}})
    source = {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": member}}}
    await kube.create(kueue.MultiKueueCluster, obj("MultiKueueCluster", member, source))

    # The user's Job, handed to MultiKueue, and its Workload with quota reserved, check Pending.
    manifest = job_manifest("job", ns)
    manifest["spec"] |= {"suspend": True, "managedBy": c.MULTIKUEUE_MANAGED_BY}
    job = await kube.create(Job, manifest)
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job.name, "uid": job.metadata.uid, "controller": True}
    pod_sets = [{"name": "main", "count": 1, "template": manifest["spec"]["template"]}]
    wl_spec = {"queueName": "user-queue", "podSets": pod_sets}
    wl = await kube.create(kueue.Workload, obj("Workload", "job-wl", wl_spec, namespace=ns, ownerReferences=[owner]))
    now = format_time(utcnow())
    reserved = {"type": c.QUOTA_RESERVED, "status": "True", "reason": "QuotaReserved", "message": "reserved", "lastTransitionTime": now}
    assigned = [{"name": "main", "count": 1, "flavors": {"cpu": flavor}, "resourceUsage": {"cpu": "1"}}]
    admission = {"clusterQueue": cq, "podSetAssignments": assigned}
    pending = [{"name": check, "state": "Pending", "message": "", "lastTransitionTime": now}]
    status = {"admission": admission, "conditions": [reserved], "admissionChecks": pending}
    wl = await kube.patch(kueue.Workload, wl.name, {"status": status}, namespace=ns, subresource="status")
    key = wl.key

    # The worker: this round's copy (remote_copy marks its dispatch round), admitted there.
    await worker_kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    copy = await worker_kube.create(kueue.Workload, remote_copy(wl, origin=settings.origin, check_name=check), namespace=ns)
    admitted = {**reserved, "type": c.ADMITTED, "reason": "Admitted", "message": "admitted"}
    copy_status = {"admission": admission, "conditions": [reserved, admitted]}
    await worker_kube.patch(kueue.Workload, copy.name, {"status": copy_status}, namespace=ns, subresource="status")

    # The manager's side in this process: caches listed once (not watching), the real
    # MultiKueueCluster controller connecting the worker, and the workload controller.
    caches = Caches.create(kube)
    configs: Informer[kueue.MultiKueueConfig] = Informer(kube, kueue.MultiKueueConfig)
    objects: Informer[kueue.MultiKueueCluster] = Informer(kube, kueue.MultiKueueCluster)
    secrets: Informer[Secret] = Informer(kube, Secret, namespace=SYSTEM_NAMESPACE)
    for informer in [*caches.all(), configs, objects, secrets]:
        await informer.relist()
    clusters = cluster_controller(
        kube,
        objects,
        secrets,
        on_connection_change=lambda remote: controller.on_connection_change(remote),
        on_remote_object=lambda remote, namespace, name: controller.on_remote_object(remote, namespace, name),
    )
    admissions: list[tuple[kueue.Workload, kueue.Workload]] = []
    controller = WorkloadController(
        kube,
        caches,
        settings=settings,
        clusters=clusters,
        configs=configs,
        metrics=Metrics(),
        workers=1,
        on_admitted=lambda before, written: admissions.append((before, written)),
    )
    try:
        await clusters.reconcile(member)
        remote = clusters.remotes[member]
        await eventually(lambda: remote.workload(key), timeout=60, what="the worker connected and its copy cached")

        # The Workload moves on (as the previous pass's write would); the cache has not seen it.
        moved = await kube.patch(kueue.Workload, wl.name, {"metadata": {"labels": {"kfed-test/moved": "yes"}}}, namespace=ns)
        assert wl.metadata.resource_version != moved.metadata.resource_version
        assert caches.workloads.store[key].metadata.resource_version == wl.metadata.resource_version

        with pytest.raises(ConflictError) as stale:
            await controller.reconcile(key)
        assert stale.type is ConflictError, stale.value  # the precondition failed; nothing existed already
        assert (await worker_kube.list(Job, namespace=ns)).items == [], "a stale pass created the Job on the worker"
        assert (await worker_kube.get(kueue.Workload, copy.name, namespace=ns)).metadata.uid == copy.metadata.uid
        unchanged = await kube.get(kueue.Workload, wl.name, namespace=ns)
        state = admission_check_state(unchanged, check)
        assert state is not None and state.state == "Pending" and unchanged.status is not None and not unchanged.status.cluster_name

        # The cache catches up; the next pass records the worker and creates the Job there.
        caches.start()

        def caught_up() -> bool:
            cached = caches.workloads.get(key)
            return cached is not None and cached.metadata.resource_version == moved.metadata.resource_version

        await eventually(caught_up, timeout=30, what="the manager's cache to see the moved Workload")
        await controller.reconcile(key)
        assert [j.name for j in (await worker_kube.list(Job, namespace=ns)).items] == [job.name]
        final = await kube.get(kueue.Workload, wl.name, namespace=ns)
        state = admission_check_state(final, check)
        assert state is not None and state.state == "Ready", state
        assert final.status is not None and final.status.cluster_name == member
        # Its only check is Ready: the same write admitted it (Kueue's workload controller would
        # need a second one), and the admission was handed over to be reported once.
        written = find_condition(final.status.conditions, c.ADMITTED)
        assert written is not None and (written.status, written.reason, written.message) == (
            "True",
            "Admitted",
            "The workload is admitted",
        )
        assert written.last_transition_time == state.last_transition_time
        assert is_condition_true(final.status.conditions, c.QUOTA_RESERVED)
        assert [(before.metadata.resource_version, after.metadata.resource_version) for before, after in admissions] == [
            (moved.metadata.resource_version, final.metadata.resource_version)
        ]
    finally:
        controller.controller.stop()
        await clusters.stop()
        await caches.stop()
