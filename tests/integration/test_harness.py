"""The local harness gives real, isolated clusters that accept kfed's CRDs and run Jobs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from manager.api import conversion, kueue
from manager.dev import federation
from manager.dev.local import POD_RUN_TIME_ANNOTATION
from tests.conftest import EXAMPLE_FILES, EXAMPLES, REPO_ROOT
from tests.harness import api_for, batch_api, core_api, custom_api, error_message, eventually

# The manifests a user applies to a cluster; examples/config/ holds controller Configurations.
CLUSTER_EXAMPLES = [path for path in EXAMPLE_FILES if path.parent != EXAMPLES / "config"]


@pytest.fixture(scope="module")
def crd_cluster(manager_cluster: Any) -> Any:
    federation.install_crds(manager_cluster, federation.crd_manifests(REPO_ROOT / "crds"))
    return manager_cluster


async def create_object(api: client.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    """Create any object of the examples through the generic custom-objects or core APIs."""
    meta = obj["metadata"]
    if obj["apiVersion"] == "batch/v1":
        job: Any = await batch_api(api).create_namespaced_job(meta.get("namespace", "default"), obj)
        return dict(api.sanitize_for_serialization(job))
    group, version = obj["apiVersion"].split("/")
    model = kueue.KIND_BY_NAME[obj["kind"]]
    custom = custom_api(api)
    if model.NAMESPACED:
        created: Any = await custom.create_namespaced_custom_object(group, version, meta["namespace"], model.PLURAL, obj)
    else:
        created = await custom.create_cluster_custom_object(group, version, model.PLURAL, obj)
    return dict(created)


async def delete_object(api: client.ApiClient, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    if obj["kind"] == "Job":
        await batch_api(api).delete_namespaced_job(meta["name"], meta["namespace"], propagation_policy="Background")
        return
    group, version = obj["apiVersion"].split("/")
    model = kueue.KIND_BY_NAME[obj["kind"]]
    custom = custom_api(api)
    if model.NAMESPACED:
        await custom.delete_namespaced_custom_object(group, version, meta["namespace"], model.PLURAL, meta["name"])
    else:
        await custom.delete_cluster_custom_object(group, version, model.PLURAL, meta["name"])


async def ensure_namespace(api: client.ApiClient, name: str) -> None:
    try:
        await core_api(api).create_namespace({"metadata": {"name": name}})
    except ApiException as err:
        if err.status != 409:
            raise


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
@pytest.mark.parametrize("path", CLUSTER_EXAMPLES, ids=lambda p: str(p.relative_to(EXAMPLES)))
async def test_every_example_applies_to_a_real_apiserver(crd_cluster: Any, path: Any, version: str) -> None:
    documents = [conversion.convert(d, version) for d in yaml.safe_load_all(path.read_text())]
    async with api_for(crd_cluster) as api:
        created = []
        try:
            for document in documents:
                if document["kind"] == "Namespace":  # shared by several examples: kept
                    await ensure_namespace(api, document["metadata"]["name"])
                    continue
                namespace = document["metadata"].get("namespace")
                if namespace:
                    await ensure_namespace(api, namespace)
                result = await create_object(api, document)
                assert result["metadata"]["uid"]
                assert result["apiVersion"] == document["apiVersion"]
                created.append({**document, "metadata": {**document["metadata"], "name": result["metadata"]["name"]}})
        finally:
            for document in reversed(created):
                await delete_object(api, document)


INVALID = [
    (
        "limits-without-cohort",
        {
            "kind": "ClusterQueue",
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 1, "borrowingLimit": 1}]}],
                    }
                ]
            },
        },
        # Kueue's CRD refuses a borrowingLimit without a cohort (a lendingLimit it accepts).
        "borrowingLimit must be nil when cohort is empty",
    ),
    (
        "resources-not-matching-covered",
        {
            "kind": "ClusterQueue",
            "spec": {
                "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{"name": "f", "resources": [{"name": "cpu"}]}]}]
            },
        },
        "flavors must have the same number of resources as the coveredResources",
    ),
    ("unknown-strategy", {"kind": "ClusterQueue", "spec": {"queueingStrategy": "Fastest"}}, 'Unsupported value: "Fastest"'),
    ("bad-quantity", {"kind": "ResourceFlavor", "spec": {}}, None),
    ("duplicate-clusters", {"kind": "MultiKueueConfig", "spec": {"clusters": ["a", "a"]}}, "must be unique"),
    ("too-many-clusters", {"kind": "MultiKueueConfig", "spec": {"clusters": [f"w{i}" for i in range(21)]}}, "Too many: 21"),
    (
        "two-cluster-sources",
        {
            "kind": "MultiKueueCluster",
            "spec": {"clusterSource": {"kubeConfig": {"location": "s"}, "clusterProfileRef": {"name": "p"}}},
        },
        "exactly one of kubeConfig or clusterProfileRef must be set",
    ),
]


@pytest.mark.parametrize(("name", "obj", "message"), [i for i in INVALID if i[2]], ids=[i[0] for i in INVALID if i[2]])
async def test_server_side_schema_rejects_invalid_objects(crd_cluster: Any, name: str, obj: dict[str, Any], message: str) -> None:
    document = {"apiVersion": "kueue.x-k8s.io/v1beta2", "metadata": {"name": name}, **obj}
    async with api_for(crd_cluster) as api:
        with pytest.raises(ApiException) as raised:
            await create_object(api, document)
    assert raised.value.status == 422
    assert message in error_message(raised.value)


async def test_server_rejects_an_invalid_quantity(crd_cluster: Any) -> None:
    document = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "bad-quantity"},
        "spec": {
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "9x"}]}]}
            ]
        },
    }
    async with api_for(crd_cluster) as api:
        with pytest.raises(ApiException) as raised:
            await create_object(api, document)
    assert raised.value.status == 422
    assert "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in error_message(raised.value)


async def test_three_clusters_are_isolated(worker_clusters: Callable[[int], list[Any]]) -> None:
    clusters = worker_clusters(3)
    name = f"probe-{uuid.uuid4().hex[:8]}"
    async with api_for(clusters[0]) as api:
        await core_api(api).create_namespaced_config_map("default", {"metadata": {"name": name}})
        found = await core_api(api).read_namespaced_config_map(name, "default")
        assert found.metadata.name == name
    for other in clusters[1:]:
        async with api_for(other) as api:
            with pytest.raises(ApiException) as raised:
                await core_api(api).read_namespaced_config_map(name, "default")
            assert raised.value.status == 404
    servers = {c.kubeconfig()["clusters"][0]["cluster"]["server"] for c in clusters}
    assert len(servers) == 3
    assert all(server.startswith("https://127.0.0.1:") for server in servers)


async def test_watch_from_a_compacted_revision_gets_410_gone(manager_cluster: Any) -> None:
    name = f"gone-{uuid.uuid4().hex[:8]}"
    template = {"metadata": {"name": name}, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    async with api_for(manager_cluster) as api:
        core = core_api(api)
        created = await core.create_namespaced_pod_template("default", template)
        old_version = created.metadata.resource_version
        for i in range(1, 4):
            await core.patch_namespaced_pod_template(name, "default", {"metadata": {"labels": {"n": str(i)}}})
        manager_cluster.compact_etcd()
        response = await core.list_namespaced_pod_template(
            "default", watch=True, resource_version=old_version, timeout_seconds=10, _preload_content=False
        )
        first = json.loads(await response.content.readline())
        response.release()
    assert first["type"] == "ERROR"
    assert first["object"]["code"] == 410
    assert first["object"]["reason"] in ("Expired", "Gone")


async def test_a_real_job_runs_to_completion(jobs_cluster: Any) -> None:
    name = f"job-{uuid.uuid4().hex[:8]}"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
                }
            },
        },
    }
    async with api_for(jobs_cluster) as api:
        batch = batch_api(api)
        await batch.create_namespaced_job("default", job)

        async def complete() -> Any:
            current = await batch.read_namespaced_job(name, "default")
            conditions = {c.type: c.status for c in current.status.conditions or []}
            return current.status if conditions.get("Complete") == "True" else None

        status = await eventually(complete, timeout=120, what=f"Job {name} Complete")
        assert status.succeeded == 2
        pods = await core_api(api).list_namespaced_pod("default", label_selector=f"job-name={name}")
        assert {p.status.phase for p in pods.items} == {"Succeeded"}
        assert all(p.spec.node_name.startswith("kwok-node-") for p in pods.items)


def timed_job(name: str, run_time: str | None) -> dict[str, Any]:
    """A one-pod Job; with `run_time` its pod runs that long (kwok's annotation, and `sleep` on real nodes)."""
    seconds = int(run_time.rstrip("s")) if run_time else 0
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {
                "metadata": {"annotations": {POD_RUN_TIME_ANNOTATION: run_time} if run_time else {}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["sleep", str(seconds)]}],
                },
            }
        },
    }


async def test_an_annotated_pod_runs_for_its_run_time_and_a_plain_one_completes(jobs_cluster: Any) -> None:
    timed, plain = f"timed-{uuid.uuid4().hex[:8]}", f"plain-{uuid.uuid4().hex[:8]}"
    async with api_for(jobs_cluster) as api:
        batch, core = batch_api(api), core_api(api)
        await batch.create_namespaced_job("default", timed_job(timed, "6s"))
        await batch.create_namespaced_job("default", timed_job(plain, None))

        async def pod_of(job: str) -> Any:
            pods = await core.list_namespaced_pod("default", label_selector=f"job-name={job}")
            return pods.items[0] if pods.items else None

        async def running() -> Any:
            pod = await pod_of(timed)
            return pod if pod is not None and pod.status.phase == "Running" else None

        seen_running = await eventually(running, timeout=60, what=f"Job {timed}'s pod Running")
        assert seen_running.status.container_statuses[0].state.running is not None

        async def complete(job: str) -> Any:
            current = await batch.read_namespaced_job(job, "default")
            conditions = {c.type: c.status for c in current.status.conditions or []}
            return current.status if conditions.get("Complete") == "True" else None

        assert (await eventually(lambda: complete(plain), timeout=60, what=f"Job {plain} Complete")).succeeded == 1
        assert (await eventually(lambda: complete(timed), timeout=60, what=f"Job {timed} Complete")).succeeded == 1
        pod = await pod_of(timed)
        assert pod.status.phase == "Succeeded"
        finished: datetime = pod.status.container_statuses[0].state.terminated.finished_at
        ran_for = (finished - pod.status.start_time).total_seconds()
        assert 5 <= ran_for < 30, f"the annotated pod ran {ran_for}s, not about 6s"
