"""The Job integration does not act twice on a cache that has not shown its last write, on a
real apiserver.

Seen on workers in the MultiKueue benchmark: the Job the manager created was started 1.65
times per workload, each time with a `Started` event, because a second reconcile (woken by the
Workload's own update) planned from a Job cache that did not show the first start yet. Here the
caches are listed once and not watched, so the second reconcile sees exactly that stale Job.
"""

from __future__ import annotations

from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.meta import format_time, utcnow
from manager.controllers.caches import Caches
from manager.controllers.events import EventRecorder
from manager.controllers.jobs import JobController
from manager.dev.local import LocalCluster
from manager.engine.integrations.registry import BATCH_JOB
from manager.kube.client import KubeClient
from manager.runtime.metrics import Metrics
from tests.harness import Provider
from tests.integration.controllers import crd_cluster
from tests.integration.test_controllers import job_manifest, make_queues

V1B2 = f"{c.GROUP}/v1beta2"


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "jobcache")


def admitted_status(cq: str, flavor: str) -> dict[str, Any]:
    now = format_time(utcnow())
    conditions = [
        {"type": kind, "status": "True", "reason": kind, "message": kind, "lastTransitionTime": now}
        for kind in (c.QUOTA_RESERVED, c.ADMITTED)
    ]
    assigned = [{"name": "main", "count": 1, "flavors": {"cpu": flavor}, "resourceUsage": {"cpu": "1"}}]
    return {"admission": {"clusterQueue": cq, "podSetAssignments": assigned}, "conditions": conditions}


async def test_a_job_is_started_once_while_the_cache_has_not_shown_the_start(kube: KubeClient, names: Any) -> None:
    ns, cq, flavor = names("jc"), names("jc-cq"), names("jc-flavor")
    await make_queues(kube, ns, cq=cq, cpu=4, flavor=flavor, node_labels={})
    # As the MultiKueue manager creates it on a worker: suspended, naming its prebuilt Workload.
    manifest = job_manifest("train", ns)
    manifest["spec"]["suspend"] = True
    manifest["metadata"]["annotations"] = {c.PREBUILT_WORKLOAD_ANNOTATION: "job-train"}
    job = await kube.create(Job, manifest)
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job.name, "uid": job.metadata.uid, "controller": True}
    pod_sets = [{"name": "main", "count": 1, "template": manifest["spec"]["template"]}]
    spec = {"queueName": "user-queue", "podSets": pod_sets}
    metadata = {"name": "job-train", "namespace": ns, "ownerReferences": [owner]}
    wl = await kube.create(kueue.Workload, {"apiVersion": V1B2, "kind": "Workload", "metadata": metadata, "spec": spec})
    await kube.patch(kueue.Workload, wl.name, {"status": admitted_status(cq, flavor)}, namespace=ns, subresource="status")

    caches = Caches.create(kube)
    for informer in caches.all():
        await informer.relist()  # listed once: the caches stay as they are now
    recorder = EventRecorder(kube, component="test")  # not run: its queue holds what was emitted
    controller = JobController(kube, caches, BATCH_JOB, metrics=Metrics(), recorder=recorder)
    key = f"{ns}/{job.name}"
    await controller.reconcile(key)
    started = await kube.get(Job, job.name, namespace=ns)
    assert started.spec.suspend is False
    # Woken again (say, by the Workload's update) before the Job's watch event arrives.
    await controller.reconcile(key)
    events = []
    while not recorder.queue.empty():
        events.append(recorder.queue.get_nowait()["reason"])
    assert events == ["Started"]
    assert (await kube.get(Job, job.name, namespace=ns)).metadata.resource_version == started.metadata.resource_version
