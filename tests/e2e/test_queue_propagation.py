"""Queues that follow the manager, end to end: a Job in a namespace that exists only on the
manager runs on a worker when its MultiKueueConfig propagates queues; without it, the worker's
missing LocalQueue keeps it back as in Kueue. What the manager created is removed once unused;
what an administrator created is never changed or deleted (a Secret and a RoleBinding planted in
a namespace the manager created keep that namespace, and `kfed clusters` says so); a worker
namespace its administrator did not opt in gets no LocalQueue; a propagated LocalQueue whose
ClusterQueue a worker lacks shows on the MultiKueueCluster and in `kfed clusters`, named to a
fleet reader only in the namespaces it may read (the others counted, never named).

The session's federation serves these through MultiKueueConfigs of their own: the annotation
turns propagation on for one config while the Configuration leaves it off for the rest."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job, Namespace, RoleBinding, Secret
from manager.api.meta import find_condition
from manager.kube.client import KubeClient
from manager.kube.errors import NotFoundError
from manager.multikueue.rules import reads
from manager.multikueue.rules.capacity import NEVER_FITS
from manager.multikueue.rules.queues import (
    ACCEPT_QUEUES_LABEL,
    KEPT_CONDITION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PROPAGATE_QUEUES_ANNOTATION,
    PROPAGATED_BY_LABEL,
    QUEUES_CONDITION,
    REASON_CLUSTER_QUEUE_MISSING,
)
from tests.conftest import REPO_ROOT
from tests.e2e.federation import LQ, PARKED, RUNS, Clients, Federation, job_manifest, kueue_object
from tests.e2e.test_cli_reader import namespace_reader
from tests.harness import eventually

ORIGIN = c.DEFAULT_MULTIKUEUE_ORIGIN
OURS = {MANAGED_BY_LABEL: MANAGED_BY, PROPAGATED_BY_LABEL: ORIGIN}


@pytest.fixture
def tag() -> str:
    return f"qp{uuid.uuid4().hex[:5]}"


async def federate(kube: Clients, tag: str, *, propagate: bool | None, worker_queues: tuple[str, ...] = ("worker1", "worker2")) -> str:
    """A MultiKueueConfig of both workers (annotated when `propagate` is not None), its check, and
    a ClusterQueue of that name on the manager with the check and on each of `worker_queues`.
    Returns the ClusterQueue's name."""
    annotations = {PROPAGATE_QUEUES_ANNOTATION: str(propagate).lower()} if propagate is not None else None
    config = kueue_object("MultiKueueConfig", tag, {"clusters": ["worker1", "worker2"]})
    if annotations:
        config["metadata"]["annotations"] = annotations
    await kube.manager.create(kueue.MultiKueueConfig, config)
    parameters = {"apiGroup": c.GROUP, "kind": "MultiKueueConfig", "name": tag}
    check = kueue_object("AdmissionCheck", tag, {"controllerName": c.MULTIKUEUE_CONTROLLER_NAME, "parameters": parameters})
    await kube.manager.create(kueue.AdmissionCheck, check)
    await cluster_queue(kube.manager, tag, labels={}, check=tag)
    for worker in worker_queues:
        await cluster_queue(kube.workers[worker], tag, labels=RUNS)
    return tag


async def cluster_queue(client: KubeClient, name: str, *, labels: dict[str, str], check: str | None = None) -> None:
    await client.create(kueue.ResourceFlavor, kueue_object("ResourceFlavor", f"{name}-flavor", {"nodeLabels": labels} if labels else {}))
    flavor = {"name": f"{name}-flavor", "resources": [{"name": "cpu", "nominalQuota": 4}]}
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [flavor]}]}
    if check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    await client.create(kueue.ClusterQueue, kueue_object("ClusterQueue", name, spec))


async def namespace_with_queue(client: KubeClient, ns: str, cq: str, *, labels: dict[str, str] | None = None) -> None:
    await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns, "labels": labels or {}}})
    await client.create(kueue.LocalQueue, kueue_object("LocalQueue", LQ, {"clusterQueue": cq}, namespace=ns))


async def completed(kube: Clients, ns: str, name: str) -> bool:
    job = await kube.manager.get(Job, name, namespace=ns)
    return any(cond.type == "Complete" and cond.status == "True" for cond in (job.status.conditions if job.status else None) or [])


async def find(client: KubeClient, model: type[Any], name: str, namespace: str | None = None) -> Any:
    try:
        return await client.get(model, name, namespace=namespace)
    except NotFoundError:
        return None


async def gone_from_workers(kube: Clients, ns: str, workers: tuple[str, ...] = ("worker1", "worker2")) -> None:
    """The namespace (and so its LocalQueue) removed from each worker: absent, not just terminating."""

    async def gone() -> bool:
        return all([await find(kube.workers[w], Namespace, ns) is None for w in workers])

    await eventually(gone, timeout=90, what=f"namespace {ns} removed from {', '.join(workers)}")


# --- the tests --------------------------------------------------------------------------------------------------
async def test_a_job_in_a_namespace_only_the_manager_has_runs_and_its_queues_go_after(fed: Federation, kube: Clients, tag: str) -> None:
    cq = await federate(kube, tag, propagate=True)
    ns = f"{tag}-only-here"
    await namespace_with_queue(kube.manager, ns, cq)  # on the manager only
    await kube.manager.create(Job, job_manifest("train", ns))

    async def propagated() -> bool:
        found = [await find(client, kueue.LocalQueue, LQ, ns) for client in kube.workers.values()]
        return all(lq is not None for lq in found)

    # Every dispatched copy needed them (AllAtOnce sends one to each worker).
    await eventually(propagated, timeout=60, what=f"LocalQueue {ns}/{LQ} created on both workers")
    for client in kube.workers.values():
        lq = await client.get(kueue.LocalQueue, LQ, namespace=ns)
        created = await client.get(Namespace, ns)
        assert (lq.metadata.labels, lq.spec.cluster_queue) == (OURS, cq)
        assert created.metadata.labels is not None and OURS.items() <= created.metadata.labels.items()
    await eventually(lambda: completed(kube, ns, "train"), timeout=90, what=f"{ns}/train Complete on the manager")
    wl = await kube.manager_workload(ns, "train")
    assert wl is not None and wl.status is not None and wl.status.cluster_name in ("worker1", "worker2")
    # Nothing uses them any more: the namespace and LocalQueue the manager created go.
    await gone_from_workers(kube, ns)


async def test_what_an_administrator_created_is_never_changed_or_deleted(fed: Federation, kube: Clients, tag: str) -> None:
    cq = await federate(kube, tag, propagate=True)
    ns = f"{tag}-admin"
    await namespace_with_queue(kube.manager, ns, cq)
    admin = {"team": "admins"}
    # worker1: the administrator's namespace and LocalQueue; worker2: their namespace only,
    # opted in to receive the manager's queues.
    await namespace_with_queue(kube.workers["worker1"], ns, cq, labels=admin)
    opted_in = {**admin, ACCEPT_QUEUES_LABEL: "true"}
    await kube.workers["worker2"].request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns, "labels": opted_in}})
    admins_queue = await kube.workers["worker1"].get(kueue.LocalQueue, LQ, namespace=ns)
    before: dict[str, Any] = {
        "worker1 namespace": await kube.workers["worker1"].get(Namespace, ns),
        "worker1 LocalQueue": admins_queue,
        "worker2 namespace": await kube.workers["worker2"].get(Namespace, ns),
    }
    await kube.manager.create(Job, job_manifest("train", ns))

    async def ours_in_theirs() -> Any:
        return await find(kube.workers["worker2"], kueue.LocalQueue, LQ, ns)

    made = await eventually(ours_in_theirs, timeout=60, what=f"the manager's LocalQueue in worker2's own namespace {ns}")
    assert made.metadata.labels == OURS
    await eventually(lambda: completed(kube, ns, "train"), timeout=90, what=f"{ns}/train Complete on the manager")

    async def ours_removed() -> bool:
        return await find(kube.workers["worker2"], kueue.LocalQueue, LQ, ns) is None

    # A sweep after the finish removed what the manager created...
    await eventually(ours_removed, timeout=60, what=f"the manager's LocalQueue removed from worker2's {ns}")
    # ...and left every object the administrator made as it was.
    after: dict[str, Any] = {
        "worker1 namespace": await kube.workers["worker1"].get(Namespace, ns),
        "worker1 LocalQueue": await kube.workers["worker1"].get(kueue.LocalQueue, LQ, namespace=ns),
        "worker2 namespace": await kube.workers["worker2"].get(Namespace, ns),
    }
    for what, obj in before.items():
        now = after[what]
        assert now.metadata.uid == obj.metadata.uid, what
        assert now.metadata.labels == obj.metadata.labels, what
        assert now.metadata.deletion_timestamp is None, what
    assert (await kube.workers["worker1"].get(kueue.LocalQueue, LQ, namespace=ns)).spec == admins_queue.spec


async def test_an_administrators_secret_and_rolebinding_keep_the_namespace_the_manager_created(
    fed: Federation, kube: Clients, tag: str
) -> None:
    """A worker administrator plants a Secret and a RoleBinding in a namespace the manager
    created there. Once the job is gone, the manager removes its LocalQueue from both workers and
    the namespace where nothing else is, but keeps the namespace that holds the administrator's
    objects, leaves them as they were, and says in `kfed clusters` which namespace it keeps and why."""
    cq = await federate(kube, tag, propagate=True)
    ns = f"{tag}-planted"
    await namespace_with_queue(kube.manager, ns, cq)  # on the manager only
    job = job_manifest("parked", ns)
    job["spec"]["template"]["spec"]["nodeSelector"] = PARKED  # stays running: the queues stay needed
    await kube.manager.create(Job, job)

    async def propagated() -> bool:
        return all([await find(client, kueue.LocalQueue, LQ, ns) is not None for client in kube.workers.values()])

    await eventually(propagated, timeout=60, what=f"LocalQueue {ns}/{LQ} created on both workers")
    worker1 = kube.workers["worker1"]
    assert OURS.items() <= ((await worker1.get(Namespace, ns)).metadata.labels or {}).items()
    secret = await worker1.create(
        Secret,
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry-creds", "namespace": ns}, "stringData": {"token": "s3cret"}},
        namespace=ns,
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "team-admins", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "team-admin"}],
    }
    role_binding = await worker1.create(RoleBinding, binding, namespace=ns)

    await kube.manager.delete(Job, "parked", namespace=ns, propagation="Background")
    await gone_from_workers(kube, ns, workers=("worker2",))  # nothing else there: it goes

    async def ours_removed() -> bool:
        return await find(worker1, kueue.LocalQueue, LQ, ns) is None

    await eventually(ours_removed, timeout=60, what=f"the manager's LocalQueue removed from worker1's {ns}")
    expected = f"namespace {ns} kept: holds RoleBinding team-admins, Secret registry-creds, which kfed did not create"

    async def said() -> Any:
        cluster = await kube.manager.get(kueue.MultiKueueCluster, "worker1")
        cond = find_condition(cluster.status.conditions if cluster.status else None, KEPT_CONDITION)
        return cond if cond is not None and cond.status == "True" and expected in cond.message else None

    await eventually(said, timeout=60, what=f"worker1's {KEPT_CONDITION} condition naming {ns} and the objects that keep it")
    # Sweeps after the one that said so: the namespace and the administrator's objects are still as they were.
    kept = await worker1.get(Namespace, ns)
    assert kept.metadata.deletion_timestamp is None, kept.metadata
    assert (await worker1.get(Secret, "registry-creds", namespace=ns)).metadata.uid == secret.metadata.uid
    assert (await worker1.get(RoleBinding, "team-admins", namespace=ns)).metadata.uid == role_binding.metadata.uid
    rows = {row["name"]: row for row in json.loads(kfed(fed, "clusters", "-o", "json"))}
    assert expected in (rows["worker1"]["keptNamespaces"] or ""), rows["worker1"]
    table = kfed(fed, "clusters")
    assert "NamespacesKept" in next(line for line in table.splitlines() if line.startswith("worker1")), table


async def test_a_worker_namespace_its_administrator_did_not_opt_in_gets_no_local_queue(kube: Clients, tag: str) -> None:
    """The namespace exists on both workers, unlabelled: the manager propagates it (its
    selector's default), but the workers did not accept it. No LocalQueue is made there, the
    namespaces are left as they were, and the manager's check says why."""
    cq = await federate(kube, tag, propagate=True)
    ns = f"{tag}-not-opted-in"
    await namespace_with_queue(kube.manager, ns, cq)
    before = {}
    for name, client in kube.workers.items():
        await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns, "labels": {"team": "theirs"}}})
        before[name] = await client.get(Namespace, ns)
    await kube.manager.create(Job, job_manifest("train", ns))
    refusal = f'namespace "{ns}" exists on the worker without the label {ACCEPT_QUEUES_LABEL}: "true"'

    async def refused() -> Any:
        wl = await kube.manager_workload(ns, "train")
        checks = (wl.status.admission_checks if wl and wl.status else None) or []
        found = next((check for check in checks if check.name == tag), None)
        return found if found is not None and all(f"{w}: {refusal}" in (found.message or "") for w in kube.workers) else None

    await eventually(refused, timeout=60, what="the manager's check naming both workers' refusal")
    for name, client in kube.workers.items():
        assert await find(client, kueue.LocalQueue, LQ, ns) is None, f"LocalQueue {ns}/{LQ} created on {name}"
        now = await client.get(Namespace, ns)
        assert (now.metadata.uid, now.metadata.labels) == (before[name].metadata.uid, before[name].metadata.labels), name


async def test_with_propagation_off_a_missing_local_queue_keeps_the_job_back_as_in_kueue(kube: Clients, tag: str) -> None:
    """The session's Configuration leaves propagation off; this config does not turn it on."""
    cq = await federate(kube, tag, propagate=None)
    ns = f"{tag}-off"
    await namespace_with_queue(kube.manager, ns, cq)
    await kube.manager.create(Job, job_manifest("train", ns))

    async def refused() -> Any:
        wl = await kube.manager_workload(ns, "train")
        reserved = find_condition(wl.status.conditions if wl and wl.status else None, c.QUOTA_RESERVED)
        return reserved if reserved is not None and reserved.message.startswith(NEVER_FITS) else None

    reserved = await eventually(refused, timeout=60, what="the manager's Workload held back by the refusal")
    assert reserved.status == "False"
    for worker in ("worker1", "worker2"):
        assert f"{worker}: LocalQueue {LQ} doesn't exist" in reserved.message, reserved.message
    for name, client in kube.workers.items():
        assert await find(client, Namespace, ns) is None, f"namespace {ns} created on {name}"


async def test_a_propagated_queue_without_its_cluster_queue_is_reported_and_shown(fed: Federation, kube: Clients, tag: str) -> None:
    cq = await federate(kube, tag, propagate=True, worker_queues=("worker1",))  # worker2 lacks the ClusterQueue
    ns = f"{tag}-drift"
    await namespace_with_queue(kube.manager, ns, cq)
    job = job_manifest("parked", ns)
    job["spec"]["template"]["spec"]["nodeSelector"] = PARKED  # stays running: the queues stay needed
    await kube.manager.create(Job, job)
    expected = f"LocalQueue {ns}/{LQ} points at ClusterQueue {cq}, which the worker does not have"

    async def drift() -> Any:
        cluster = await kube.manager.get(kueue.MultiKueueCluster, "worker2")
        cond = find_condition(cluster.status.conditions if cluster.status else None, QUEUES_CONDITION)
        return cond if cond is not None and cond.status == "False" and cond.message == expected else None

    cond = await eventually(drift, timeout=60, what=f"worker2's {QUEUES_CONDITION} condition naming the missing ClusterQueue")
    assert cond.reason == REASON_CLUSTER_QUEUE_MISSING
    shown = kfed(fed, "clusters", "-o", "json")
    rows = {row["name"]: row for row in json.loads(shown)}
    assert rows["worker2"]["queueDrift"] == expected, rows
    table = kfed(fed, "clusters", "-o", "wide")
    assert REASON_CLUSTER_QUEUE_MISSING in next(line for line in table.splitlines() if line.startswith("worker2")), table
    # The job goes, its queues with it, and the drift with them.
    await kube.manager.delete(Job, "parked", namespace=ns, propagation="Background")
    await gone_from_workers(kube, ns)

    async def in_sync() -> bool:
        cluster = await kube.manager.get(kueue.MultiKueueCluster, "worker2")
        cond = find_condition(cluster.status.conditions if cluster.status else None, QUEUES_CONDITION)
        return cond is not None and cond.status == "True"

    await eventually(in_sync, timeout=60, what=f"worker2's {QUEUES_CONDITION} True again")


async def test_a_fleet_reader_is_named_the_drift_of_the_namespaces_it_may_read_and_an_admin_all(
    fed: Federation, kube: Clients, tag: str, tmp_path: Path
) -> None:
    """Issue #45: a fleet-level read names no namespace that the reader may not read. Two
    namespaces' propagated LocalQueues lack their ClusterQueue on worker2; a ServiceAccount with
    kfed-fleet-reader and the shipped kfed-namespace-reader in the first alone reads `clusters`
    through the apiserver and `kfed clusters`: the first's drift named, the second's counted, its
    name nowhere. The admin, through the same API and on the MultiKueueCluster, is named both."""
    cq = await federate(kube, tag, propagate=True, worker_queues=("worker1",))  # worker2 lacks the ClusterQueue
    mine, theirs = f"{tag}-alpha", f"{tag}-bravo"
    for ns in (mine, theirs):
        await namespace_with_queue(kube.manager, ns, cq)
        job = job_manifest("parked", ns)
        job["spec"]["template"]["spec"]["nodeSelector"] = PARKED  # stays running: the queues stay needed
        await kube.manager.create(Job, job)
    named = {ns: f"LocalQueue {ns}/{LQ} points at ClusterQueue {cq}" for ns in (mine, theirs)}
    expected = f"{named[mine]}; {named[theirs]}, which the worker does not have"

    async def drift() -> Any:
        cluster = await kube.manager.get(kueue.MultiKueueCluster, "worker2")
        cond = find_condition(cluster.status.conditions if cluster.status else None, QUEUES_CONDITION)
        return cond if cond is not None and cond.status == "False" and cond.message == expected else None

    await eventually(drift, timeout=60, what=f"worker2's {QUEUES_CONDITION} condition naming both namespaces' LocalQueues")
    admin = {row["name"]: row for row in json.loads(kfed(fed, "clusters", "-o", "json"))}
    assert admin["worker2"]["queueDrift"] == expected, admin
    served = await kube.manager.request("GET", f"/apis/{reads.GROUP}/{reads.VERSION}/clusters/worker2")
    assert served["queueDrift"] == expected, served

    reader = await namespace_reader(fed, kube.manager, mine, tag, tmp_path)
    client = await KubeClient.from_kubeconfig(yaml.safe_load(reader.read_text()), name="fleet-reader")
    try:
        bodies = {
            path: json.dumps(await client.request("GET", f"/apis/{reads.GROUP}/{reads.VERSION}/{path}"))
            for path in ("clusters", "clusters/worker2")
        }
    finally:
        await client.close()
    bodies |= {" ".join(args): kfed(fed, *args, kubeconfig=reader) for args in (("clusters", "-o", "json"), ("clusters", "-o", "wide"))}
    leaks = {what: body for what, body in bodies.items() if theirs in body or "bravo" in body}
    assert leaks == {}, f"the reader of {mine} was named {theirs}: {leaks}"
    told = f"{named[mine]}, which the worker does not have; and 1 more in namespaces you may not read"
    assert json.loads(bodies["clusters/worker2"])["queueDrift"] == told, bodies["clusters/worker2"]
    assert {row["name"]: row for row in json.loads(bodies["clusters -o json"])}["worker2"]["queueDrift"] == told, bodies
    assert REASON_CLUSTER_QUEUE_MISSING in next(line for line in bodies["clusters -o wide"].splitlines() if line.startswith("worker2"))

    for ns in (mine, theirs):
        await kube.manager.delete(Job, "parked", namespace=ns, propagation="Background")
        await gone_from_workers(kube, ns)


def kfed(fed: Federation, *args: str, kubeconfig: Path | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "manager.cli.main", *args, f"--kubeconfig={kubeconfig or fed.manager.kubeconfig_path}"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout
