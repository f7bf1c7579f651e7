"""The manager's identity on a worker grants exactly what the manager does there, read from the
worker apiserver's own audit log.

Two workers run with an audit log of the ServiceAccount `kfed register --create-service-account`
makes: one registered for the whole cluster, one for two named namespaces. Through each, the
manager runs what MultiKueue does: a Job dispatched that runs and finishes, a Job preempted on
the manager while it runs on the worker, a Job whose name a foreign Job already holds there, the
garbage collection of orphans, and all the while the watches of Workloads and Jobs and the reads
of the agent's Lease. Then every request of the ServiceAccount in the log is held against the
RBAC objects on the worker, resolved as the RBAC authorizer resolves them: each was allowed,
none was refused, and every right of the role was used."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job, Namespace
from manager.api.meta import find_condition, is_condition_true
from manager.api.rbac import Grant, Request, Rule, allows, grants_for, service_account_user, unused_rights
from manager.dev import federation
from manager.dev.audit import AuditEntry, denied_to, groups_of, read_audit_log, requests_of
from manager.dev.local import LocalCluster, LocalProvider
from manager.engine.integrations.registry import ADAPTERS, BATCH_JOB
from manager.engine.workload import admission_check_state
from manager.kube.client import KubeClient
from manager.kube.errors import NotFoundError
from manager.multikueue.controllers import worker_access
from manager.multikueue.rules.agent_health import AGENT_LEASE_NAMESPACE
from manager.multikueue.rules.plan import WORKER_NAMESPACES_ANNOTATION
from manager.multikueue.rules.queues import PROPAGATE_QUEUES_ANNOTATION
from tests.conftest import REPO_ROOT
from tests.e2e.federation import LQ, job_manifest, kueue_object, write_config
from tests.harness import Provider, eventually
from tests.integration.controllers import SYSTEM_NAMESPACE, ControllerProcess, ensure_namespace, wait_webhooks

SA = service_account_user(SYSTEM_NAMESPACE, worker_access.SERVICE_ACCOUNT)
# The roles `kfed register` makes; the others the ServiceAccount has are every identity's
# (discovery, SelfSubjectAccessReview), which register's checklist uses.
QUEUES_ROLE = f"ClusterRole {worker_access.QUEUES_ROLE}"  # `kfed register --propagate-queues` only
OURS = (f"ClusterRole {worker_access.SERVICE_ACCOUNT}", f"Role {AGENT_LEASE_NAMESPACE}/{worker_access.AGENT_LEASE_ROLE}", QUEUES_ROLE)
# Rights of our roles that the flow below does not use, each with the code path that needs
# it. The worker's queues are read
# (manager/multikueue/controllers/remote.py, `_watch_quotas`) where the credential can list ClusterQueues,
# which the manager asks first: a credential bound to some namespaces never reads them.
QUEUES = ("clusterqueues", "cohorts", "localqueues", "resourceflavors")
QUEUE_RIGHTS = tuple(f"{verb} kueue.x-k8s.io/{plural} " for verb in ("list", "watch") for plural in QUEUES)
# The logs of a job's pods: read only when a user asks the manager's read API for them.
LOG_RIGHTS = ("list core/pods ", "get core/pods/log ")
# Every job kind but the batch Job goes through the same paths as Jobs (its adapter in
# manager/engine/integrations/), for a manager that enables it, and through MultiKueue in its
# own test (tests/e2e/test_jobset.py, test_pods.py, test_lws.py, test_ray.py, test_mpijob.py,
# test_trainjob.py); this flow runs batch/v1 Jobs. Their rights on the worker role come from their adapters.
OTHER_KINDS_RIGHTS = tuple(
    f"{access.describe()} "
    for adapter in ADAPTERS
    if adapter is not BATCH_JOB
    for rule in adapter.worker_rules()
    for access in Rule.from_dict(rule).accesses()
)
ALLOWED_UNUSED: tuple[str, ...] = QUEUE_RIGHTS + LOG_RIGHTS + OTHER_KINDS_RIGHTS
PARKED = {"kfed-test/pool": "parked"}  # no node has it: the pod stays Pending, the Job active
ORIGIN = c.DEFAULT_MULTIKUEUE_ORIGIN


@dataclass
class AuditedFederation:
    manager: LocalCluster
    workers: dict[str, LocalCluster]
    processes: list[ControllerProcess]


@pytest.fixture(scope="module")
def audited(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuditedFederation]:
    if not isinstance(provider, LocalProvider):
        pytest.skip("the audit log needs the local harness's apiserver flags (KFED_TEST_PROVIDER=local)")
    directory = Path(tmp_path_factory.mktemp("worker-access"))
    suffix = uuid.uuid4().hex[:4]
    manager = provider.create([f"wa-manager-{suffix}"])[0]
    wide, scoped = provider.create([f"wa-wide-{suffix}", f"wa-scoped-{suffix}"], jobs=True, audit_users=(SA,))
    fed = AuditedFederation(manager, {"wide": wide, "scoped": scoped}, [])
    crds = federation.crd_manifests(REPO_ROOT / "crds")
    try:
        for cluster in [manager, wide, scoped]:
            federation.install_crds(cluster, crds)
            ensure_namespace(cluster, SYSTEM_NAMESPACE)
        for name, worker in fed.workers.items():
            agent = ControllerProcess(worker, directory / name, component="worker_agent").start()
            fed.processes.append(agent)
            agent.wait_ready()
            wait_webhooks(worker, agent)
        config = directory / "kueue-config.yaml"
        write_config(config, origin=None)
        process = ControllerProcess(manager, directory, extra=[f"--config={config}"]).start()
        fed.processes.append(process)
        process.wait_ready()
        wait_webhooks(manager, process)
        yield fed
    finally:
        for process in fed.processes:
            process.terminate()


@dataclass
class Kube:
    manager: KubeClient
    worker: KubeClient  # the worker's administrator, for the test's own reads and set-up


@pytest.fixture
async def clients(audited: AuditedFederation) -> AsyncIterator[dict[str, KubeClient]]:
    opened = {"manager": await KubeClient.from_kubeconfig(audited.manager.kubeconfig(), name="test-manager")}
    for name, worker in audited.workers.items():
        opened[name] = await KubeClient.from_kubeconfig(worker.kubeconfig(), name=f"test-{name}")
    try:
        yield opened
    finally:
        for client in opened.values():
            await client.close()


# --- set-up, as an administrator does it ----------------------------------------------------------------
async def queues(kube: Kube, namespaces: list[str], tag: str, *, worker_namespaces: list[str]) -> None:
    """On the manager, a ClusterQueue of 1 cpu with the MultiKueue check of config `tag` and
    lower-priority preemption, and a LocalQueue in each namespace; on the worker, a roomy queue
    in `worker_namespaces`."""
    check = kueue_object("AdmissionCheck", tag, {"controllerName": c.MULTIKUEUE_CONTROLLER_NAME, "parameters": config_ref(tag)})
    await kube.manager.create(kueue.AdmissionCheck, check)
    for name, cpu in ((f"{tag}-low", 10), (f"{tag}-high", 1000)):
        priority = {"apiVersion": f"{c.GROUP}/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": cpu}
        await kube.manager.create(kueue.WorkloadPriorityClass, priority)
    await _queue(kube.manager, namespaces, tag, cpu=1, check=tag)
    await _queue(kube.worker, worker_namespaces, tag, cpu=8)


def config_ref(tag: str) -> dict[str, str]:
    return {"apiGroup": c.GROUP, "kind": "MultiKueueConfig", "name": tag}


async def _queue(client: KubeClient, namespaces: list[str], tag: str, *, cpu: int, check: str | None = None) -> None:
    await client.create(kueue.ResourceFlavor, kueue_object("ResourceFlavor", f"{tag}-flavor", {}))
    flavor = {"name": f"{tag}-flavor", "resources": [{"name": "cpu", "nominalQuota": cpu}]}
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [flavor]}]}
    if check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    await client.create(kueue.ClusterQueue, kueue_object("ClusterQueue", tag, spec))
    for ns in namespaces:
        await local_queue(client, ns, tag)


async def local_queue(client: KubeClient, ns: str, cluster_queue: str) -> None:
    await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    await client.create(kueue.LocalQueue, kueue_object("LocalQueue", LQ, {"clusterQueue": cluster_queue}, namespace=ns))


def kfed_register(fed: AuditedFederation, worker: str, tag: str, *extra: str) -> str:
    result = subprocess.run(
        [
            sys.executable, "-m", "manager.cli.main", "register", worker,
            f"--kubeconfig={fed.workers[worker].kubeconfig_path}", f"--manager-kubeconfig={fed.manager.kubeconfig_path}",
            f"--config={tag}", "--create-service-account", *extra,
        ],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


async def connected(kube: Kube, worker: str) -> None:
    async def active() -> bool:
        cluster = await kube.manager.get(kueue.MultiKueueCluster, worker)
        return is_condition_true(cluster.status.conditions if cluster.status else None, c.ACTIVE)

    await eventually(active, timeout=60, what=f"{worker} connected with its ServiceAccount token")


# --- what MultiKueue does through the worker ------------------------------------------------------------------
def job(name: str, ns: str, *, priority: str | None = None, parked: bool = False) -> dict[str, Any]:
    manifest = job_manifest(name, ns, priority_class=priority)
    if parked:
        manifest["spec"]["template"]["spec"]["nodeSelector"] = PARKED
    return manifest


async def manager_workload(kube: Kube, ns: str, name: str) -> kueue.Workload | None:
    try:
        owner = await kube.manager.get(Job, name, namespace=ns)
    except NotFoundError:
        return None
    for wl in (await kube.manager.list(kueue.Workload, namespace=ns)).items:
        if any(ref.uid == owner.metadata.uid for ref in wl.metadata.owner_references or []):
            return wl
    return None


async def completed(kube: Kube, ns: str, name: str) -> bool:
    found = await kube.manager.get(Job, name, namespace=ns)
    return any(cond.type == "Complete" and cond.status == "True" for cond in (found.status.conditions if found.status else None) or [])


async def ours_on_worker(kube: Kube, ns: str) -> list[str]:
    """Our Jobs and copies on the worker, by kind and name."""
    selector = f"{c.MULTIKUEUE_ORIGIN_LABEL}={ORIGIN}"
    jobs = (await kube.worker.list(Job, namespace=ns, label_selector=selector)).items
    copies = (await kube.worker.list(kueue.Workload, namespace=ns, label_selector=selector)).items
    return sorted([f"job/{j.name}" for j in jobs] + [f"workload/{w.name}" for w in copies])


async def delete_job(kube: Kube, ns: str, name: str) -> None:
    await kube.manager.delete(Job, name, namespace=ns, propagation="Background")

    async def gone() -> bool:
        return not [wl for wl in (await kube.manager.list(kueue.Workload, namespace=ns)).items if wl.name.startswith(f"job-{name}-")]

    await eventually(gone, timeout=30, what=f"the manager's Workload of {ns}/{name} gone with its Job")


async def nothing_of_ours_left(kube: Kube, ns: str) -> None:
    async def empty() -> bool:
        return not await ours_on_worker(kube, ns)

    await eventually(empty, timeout=60, what=f"no Job or copy of ours left in {ns} on the worker")


async def run_and_finish(kube: Kube, ns: str) -> None:
    """Dispatched, run, its status copied back, and its Job and copy deleted on the worker."""
    await kube.manager.create(Job, job("done", ns))
    await eventually(lambda: completed(kube, ns, "done"), timeout=90, what=f"{ns}/done Complete on the manager")
    await nothing_of_ours_left(kube, ns)


async def preempted_while_running(kube: Kube, ns: str, tag: str) -> None:
    """A running low-priority Job, its priority changed, then preempted on the manager: its
    copy on the worker gets the new priority (a patch), is deactivated (a status patch), its
    Job stopped there, then both deleted."""
    await kube.manager.create(Job, job("low", ns, priority=f"{tag}-low", parked=True))

    async def running() -> bool:
        try:
            theirs = await kube.worker.get(Job, "low", namespace=ns)
        except NotFoundError:
            return False
        return theirs.spec.suspend is False

    await eventually(running, timeout=90, what=f"{ns}/low running on the worker")
    # Its priority raised on the manager (still below the preemptor's) reaches the copy: a
    # patch of the copy's spec.
    wl = await manager_workload(kube, ns, "low")
    assert wl is not None
    await kube.manager.patch(kueue.Workload, wl.name, {"spec": {"priority": 20}}, namespace=ns)

    async def forwarded() -> bool:
        return (await kube.worker.get(kueue.Workload, wl.name, namespace=ns)).spec.priority == 20

    await eventually(forwarded, timeout=30, what=f"the new priority of {ns}/low on its copy")
    await kube.manager.create(Job, job("high", ns, priority=f"{tag}-high"))

    async def preempted() -> bool:
        wl = await manager_workload(kube, ns, "low")
        conditions = wl.status.conditions if wl and wl.status else None
        evicted = find_condition(conditions, c.EVICTED)
        return evicted is not None and evicted.reason == "Preempted" and not is_condition_true(conditions, c.QUOTA_RESERVED)

    await eventually(preempted, timeout=90, what=f"{ns}/low preempted on the manager and its quota released")
    await eventually(lambda: completed(kube, ns, "high"), timeout=90, what=f"{ns}/high Complete on the manager")
    await delete_job(kube, ns, "low")
    await nothing_of_ours_left(kube, ns)


async def name_taken_by_a_foreign_job(kube: Kube, ns: str, tag: str) -> None:
    """The worker's own Job holds the name: the manager reads it, sees it is not ours, and
    leaves it alone."""
    theirs = job("taken", ns)
    theirs["metadata"]["labels"] = {}
    theirs["spec"]["suspend"] = True
    foreign = await kube.worker.create(Job, theirs, namespace=ns)
    await kube.manager.create(Job, job("taken", ns))

    async def reported() -> bool:
        wl = await manager_workload(kube, ns, "taken")
        check = admission_check_state(wl, tag) if wl else None
        return check is not None and "did not create" in check.message

    await eventually(reported, timeout=90, what=f"the foreign Job {ns}/taken reported on the manager")
    await delete_job(kube, ns, "taken")
    await nothing_of_ours_left(kube, ns)
    assert (await kube.worker.get(Job, "taken", namespace=ns)).metadata.uid == foreign.metadata.uid


async def orphans_collected(kube: Kube, ns: str) -> None:
    """A copy and a Job of our origin whose manager Workload does not exist: the garbage
    collector deletes both."""
    labels = {c.MULTIKUEUE_ORIGIN_LABEL: ORIGIN}
    template = job_manifest("orphan", ns)["spec"]["template"]
    copy = kueue_object("Workload", "orphan", {"queueName": LQ, "podSets": [{"name": "main", "count": 1, "template": template}]}, ns)
    copy["metadata"]["labels"] = labels
    await kube.worker.create(kueue.Workload, copy, namespace=ns)
    orphan = job("orphan", ns)
    orphan["metadata"]["labels"] = {**labels, c.PREBUILT_WORKLOAD_LABEL: "orphan"}
    orphan["spec"]["suspend"] = True
    await kube.worker.create(Job, orphan, namespace=ns)
    await nothing_of_ours_left(kube, ns)


async def multikueue_flow(kube: Kube, ns: str, tag: str) -> None:
    await run_and_finish(kube, ns)
    await preempted_while_running(kube, ns, tag)
    await name_taken_by_a_foreign_job(kube, ns, tag)
    await orphans_collected(kube, ns)


# --- the audit ----------------------------------------------------------------------------------------------
@dataclass
class Audit:
    entries: list[AuditEntry]
    used: set[Request]
    grants: list[Grant]

    @property
    def ours(self) -> list[Grant]:
        return [grant for grant in self.grants if grant.role in OURS]

    def unused(self) -> list[str]:
        return [right for right in unused_rights(self.ours, self.used) if not right.startswith(ALLOWED_UNUSED)]

    def verbs(self) -> list[str]:
        return sorted({request.access.describe() for request in self.used if request.is_resource})


async def audit(cluster: LocalCluster, admin: KubeClient) -> Audit:
    entries = read_audit_log(cluster.audit_log_path.read_text().splitlines(), where=str(cluster.audit_log_path))
    rbac = {}
    for field, plural in (
        ("cluster_roles", "clusterroles"),
        ("roles", "roles"),
        ("cluster_role_bindings", "clusterrolebindings"),
        ("role_bindings", "rolebindings"),
    ):
        rbac[field] = (await admin.request("GET", f"/apis/rbac.authorization.k8s.io/v1/{plural}"))["items"]
    grants = grants_for(SA, groups_of(entries, SA), **rbac)
    return Audit(entries, requests_of(entries, SA), grants)


async def audited_until_every_right_shows(cluster: LocalCluster, admin: KubeClient, *, timeout: float = 20.0) -> Audit:
    """The log once it holds a use of every right, or as it is at the deadline (the assertions
    then name what is missing): an event is written as its request is served, so the last ones
    may trail what the flow saw by a moment, and the Lease is read every few seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = await audit(cluster, admin)
        if not found.unused() or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.5)  # the polling interval of this wait


def check_exactly_the_role(found: Audit) -> None:
    print(f"\nrights used by {SA}: {found.verbs()}")  # for the record of a run (pytest -s)
    assert found.used, "the audit log holds no request of the manager's ServiceAccount"
    assert denied_to(found.entries, SA) == [], "requests refused (403)"
    assert [r.describe() for r in sorted(found.used) if not allows(found.grants, r)] == [], "requests no binding allows"
    assert found.unused() == [], f"rights of the role that the manager never used; it used: {found.verbs()}"


# --- the tests ----------------------------------------------------------------------------------------------------
async def test_the_cluster_wide_role_grants_exactly_the_verbs_the_manager_uses(
    audited: AuditedFederation, clients: dict[str, KubeClient]
) -> None:
    tag = f"wide{uuid.uuid4().hex[:4]}"
    kube = Kube(clients["manager"], clients["wide"])
    ns = f"{tag}-a"
    await queues(kube, [ns], tag, worker_namespaces=[ns])
    kfed_register(audited, "wide", tag)
    await connected(kube, "wide")
    await multikueue_flow(kube, ns, tag)
    found = await audited_until_every_right_shows(audited.workers["wide"], kube.worker)
    check_exactly_the_role(found)
    assert any(g.binding == f"ClusterRoleBinding {worker_access.SERVICE_ACCOUNT}" for g in found.ours)


async def test_named_namespaces_get_the_job_and_workload_rights_from_rolebindings_only(
    audited: AuditedFederation, clients: dict[str, KubeClient]
) -> None:
    tag = f"ns{uuid.uuid4().hex[:4]}"
    kube = Kube(clients["manager"], clients["scoped"])
    first, second, unnamed = f"{tag}-a", f"{tag}-b", f"{tag}-c"
    await queues(kube, [first, second], tag, worker_namespaces=[first, second, unnamed])
    out = kfed_register(audited, "scoped", tag, f"--worker-namespace={first}", f"--worker-namespace={second}")
    assert f"uses the worker's namespaces {first},{second} only" in out
    cluster = await kube.manager.get(kueue.MultiKueueCluster, "scoped")
    assert (cluster.metadata.annotations or {})[WORKER_NAMESPACES_ANNOTATION] == f"{first},{second}"
    await connected(kube, "scoped")
    # One manager ClusterQueue of 1 cpu serves both: one namespace after the other.
    await run_and_finish(kube, second)
    await multikueue_flow(kube, first, tag)
    # A namespace the credential does not cover: the copy is not sent, and the reason is shown.
    await local_queue(kube.manager, unnamed, tag)
    await kube.manager.create(Job, job("elsewhere", unnamed))

    async def refused() -> str | None:
        wl = await manager_workload(kube, unnamed, "elsewhere")
        check = admission_check_state(wl, tag) if wl else None
        return check.message if check is not None and "not among the worker's namespaces" in check.message else None

    message = await eventually(refused, timeout=60, what=f"{unnamed}/elsewhere held back with the reason")
    assert f'namespace "{unnamed}" is not among the worker\'s namespaces ({WORKER_NAMESPACES_ANNOTATION})' in message
    await delete_job(kube, unnamed, "elsewhere")
    found = await audited_until_every_right_shows(audited.workers["scoped"], kube.worker)
    check_exactly_the_role(found)
    # The Job and Workload rights come from a RoleBinding in each named namespace, never from
    # a ClusterRoleBinding, and every request for them was in one of those namespaces.
    workload_role = f"ClusterRole {worker_access.SERVICE_ACCOUNT}"
    assert sorted(g.binding for g in found.grants if g.role == workload_role) == [
        f"RoleBinding {first}/{worker_access.SERVICE_ACCOUNT}",
        f"RoleBinding {second}/{worker_access.SERVICE_ACCOUNT}",
    ]
    for request in sorted(r for r in found.used if r.group in ("batch", c.GROUP)):
        assert request.namespace in (first, second), request.describe()
        binding = f"RoleBinding {request.namespace}/{worker_access.SERVICE_ACCOUNT}"
        assert any(g.allows(request) for g in found.grants if g.binding == binding)


async def test_a_manager_that_propagates_queues_is_granted_the_queues_rights_and_uses_each(
    audited: AuditedFederation, clients: dict[str, KubeClient]
) -> None:
    """Registered with --propagate-queues, for a config that propagates: a Job in a namespace
    that exists only on the manager runs on the worker (its namespace and LocalQueue made there
    first), and once it is gone the manager removes both. Every right of the queues' role was
    used, none refused; without the flag (the tests above) the role is not there at all."""
    tag = f"pq{uuid.uuid4().hex[:4]}"
    kube = Kube(clients["manager"], clients["wide"])
    ns = f"{tag}-a"
    await queues(kube, [ns], tag, worker_namespaces=[])  # the worker has the ClusterQueue only
    kfed_register(audited, "wide", tag, "--propagate-queues")
    await kube.manager.patch(kueue.MultiKueueConfig, tag, {"metadata": {"annotations": {PROPAGATE_QUEUES_ANNOTATION: "true"}}})
    await connected(kube, "wide")
    await run_and_finish(kube, ns)

    async def removed_from_worker() -> bool:
        try:
            await kube.worker.get(Namespace, ns)
        except NotFoundError:
            return True
        return False

    await delete_job(kube, ns, "done")
    await eventually(removed_from_worker, timeout=60, what=f"the propagated namespace {ns} removed from the worker once unused")
    found = await audited_until_every_right_shows(audited.workers["wide"], kube.worker)
    assert denied_to(found.entries, SA) == [], "requests refused (403)"
    queue_grants = [grant for grant in found.grants if grant.role == QUEUES_ROLE]
    assert [grant.binding for grant in queue_grants] == [f"ClusterRoleBinding {worker_access.QUEUES_ROLE}"]
    assert unused_rights(queue_grants, found.used) == [], f"rights of the queues' role never used; used: {found.verbs()}"
