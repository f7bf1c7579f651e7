"""Choosing workers, end to end with each of the three dispatchers: a job's
`kfed.dev/worker-selector` (on the MultiKueueClusters' labels) and `kfed.dev/allowed-workers`, and
a MultiKueueConfig's `kfed.dev/cluster-selector`. The job runs only where it may (no copy, even
for a moment, anywhere else), the manager's read API says why each other worker was left out, a
job no allowed worker may run is refused with a line per worker, and a restriction that cannot
be read is refused at submission in one line."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.meta import find_condition
from manager.engine.worker_restriction import ALLOWED_WORKERS_ANNOTATION, WORKER_SELECTOR_ANNOTATION
from manager.kube.errors import KubeError
from manager.multikueue.rules.selection import CLUSTER_SELECTOR_ANNOTATION
from tests.e2e.federation import CONFIG, RUNS, Clients, Federation, job_manifest, running, watch_workers
from tests.e2e.test_multikueue import running_where
from tests.harness import Provider, eventually

DISPATCHERS = [c.DISPATCHER_ALL_AT_ONCE, c.DISPATCHER_INCREMENTAL, c.DISPATCHER_CAPACITY_AWARE]


@pytest.fixture(scope="module", params=DISPATCHERS, ids=["all-at-once", "incremental", "capacity-aware"])
def fed(request: pytest.FixtureRequest, provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """A federation per dispatcher, its workers labelled by region on the manager."""
    settings: dict[str, Any] = {"dispatcherName": request.param}
    with running(provider, Path(tmp_path_factory.mktemp("selection")), multikueue=settings) as created:
        yield created


@pytest.fixture
def tag() -> str:
    return f"s{uuid.uuid4().hex[:6]}"


async def label_workers(kube: Clients) -> None:
    for name, region in (("worker1", "eu"), ("worker2", "us")):
        await kube.manager.patch(kueue.MultiKueueCluster, name, {"metadata": {"labels": {"region": region}}})


def restricted(name: str, ns: str, annotations: dict[str, str]) -> dict[str, Any]:
    manifest = job_manifest(name, ns)
    manifest["metadata"]["annotations"] = annotations
    return manifest


async def verdicts(kube: Clients, ns: str, job: str) -> dict[str, str]:
    wl = await kube.manager_workload(ns, job)
    assert wl is not None
    path = f"/apis/reads.kfed.dev/v1alpha1/namespaces/{ns}/workloads/{wl.name}/verdicts"
    found = await kube.manager.request("GET", path)
    return {worker["name"]: worker["verdict"] for worker in found["workers"]}


async def test_a_job_runs_only_on_the_workers_it_allows_and_is_told_why_not_elsewhere(kube: Clients, tag: str) -> None:
    ns = f"{tag}-only"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 4}, labels=RUNS, tag=tag)
    await label_workers(kube)
    async with watch_workers(kube, ns, kueue.Workload) as seen:
        await kube.manager.create(Job, restricted("us-only", ns, {WORKER_SELECTOR_ANNOTATION: "region=us"}))
        await kube.manager.create(Job, restricted("named", ns, {ALLOWED_WORKERS_ANNOTATION: "worker1"}))
        assert await eventually(lambda: running_where(kube, ns, "us-only"), timeout=60, what="us-only running") == ["worker2"]
        assert await eventually(lambda: running_where(kube, ns, "named"), timeout=60, what="named running") == ["worker1"]
    us_only = await kube.manager_workload(ns, "us-only")
    named = await kube.manager_workload(ns, "named")
    assert us_only is not None and named is not None
    # Never a copy where it may not go, not even for a moment.
    assert us_only.name not in seen.names["worker1"] and named.name not in seen.names["worker2"], seen
    assert (await verdicts(kube, ns, "us-only"))["worker1"] == "excluded by the job's selector region=us"
    assert (await verdicts(kube, ns, "named"))["worker2"] == f"excluded by the job's {ALLOWED_WORKERS_ANNOTATION}"


async def test_a_job_no_allowed_worker_may_run_is_refused_worker_by_worker(kube: Clients, tag: str) -> None:
    ns = f"{tag}-none"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 4}, labels=RUNS, tag=tag)
    await label_workers(kube)
    await kube.manager.create(Job, restricted("asia", ns, {WORKER_SELECTOR_ANNOTATION: "region=asia"}))
    expected = (
        "no worker can ever admit it: worker1: excluded by the job's selector region=asia; "
        "worker2: excluded by the job's selector region=asia"
    )

    async def refused() -> Any:
        wl = await kube.manager_workload(ns, "asia")
        reserved = find_condition(wl.status.conditions if wl and wl.status else None, c.QUOTA_RESERVED)
        return reserved if reserved is not None and reserved.status == "False" and reserved.message == expected else None

    await eventually(refused, timeout=60, what="the job refused with each worker's exclusion")
    assert {worker: len(items) for worker, items in (await kube.remote_workloads(ns)).items()} == {"worker1": 0, "worker2": 0}


async def test_the_configs_cluster_selector_narrows_every_job_and_a_bad_restriction_is_refused(kube: Clients, tag: str) -> None:
    ns = f"{tag}-cfg"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 4}, labels=RUNS, tag=tag)
    await label_workers(kube)
    await kube.manager.patch(kueue.MultiKueueConfig, CONFIG, {"metadata": {"annotations": {CLUSTER_SELECTOR_ANNOTATION: "region=eu"}}})
    try:
        await kube.manager.create(Job, job_manifest("plain", ns))
        assert await eventually(lambda: running_where(kube, ns, "plain"), timeout=60, what="plain running") == ["worker1"]
        assert (await verdicts(kube, ns, "plain"))["worker2"] == "excluded by the MultiKueueConfig's cluster selector region=eu"
    finally:
        await kube.manager.patch(kueue.MultiKueueConfig, CONFIG, {"metadata": {"annotations": {CLUSTER_SELECTOR_ANNOTATION: None}}})
    with pytest.raises(KubeError) as err:
        await kube.manager.create(Job, restricted("typo", ns, {WORKER_SELECTOR_ANNOTATION: "region in eu"}))
    assert f'Job "typo" is invalid: metadata.annotations[{WORKER_SELECTOR_ANNOTATION}]: "region in eu": expected' in str(err.value)
