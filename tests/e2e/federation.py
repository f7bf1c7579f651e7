"""A whole federation on the harness: a manager cluster running `python -m manager` and two
workers (Jobs really run: kube-controller-manager, kube-scheduler, kwok) running
`python -m worker_agent`, joined by kubeconfig Secrets, MultiKueueClusters, a
MultiKueueConfig and an AdmissionCheck, as an administrator would set it up."""

from __future__ import annotations

import base64
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job, Pod, Secret
from manager.api.meta import Resource, is_condition_true
from manager.dev import catalog, federation
from manager.dev.local import LocalCluster, free_port
from manager.kube.client import KubeClient
from tests.conftest import REPO_ROOT
from tests.harness import eventually, watched
from tests.integration.controllers import SYSTEM_NAMESPACE, ControllerProcess, ensure_namespace, wait_webhooks
from tests.integration.test_controllers import job_manifest as job_manifest

R = TypeVar("R", bound=Resource)

CHECK = "mk"
CONFIG = "mk"
# seconds: short, so that the tests can wait it out, and above an apiserver restart plus the
# reconnection attempts at 0, 5 and 15 s
WORKER_LOST_TIMEOUT = 25
GC_INTERVAL = 2
RUNS = {"type": "kwok"}  # the fake nodes' label: pods schedule and complete
PARKED = {"kfed-test/pool": "parked"}  # no node has it: pods stay Pending, the Job stays active
LQ = "user-queue"


def kueue_object(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": f"{c.GROUP}/v1beta2", "kind": kind, "metadata": metadata, "spec": spec}


def secret_manifest(name: str, kubeconfig: dict[str, Any], namespace: str = SYSTEM_NAMESPACE) -> dict[str, Any]:
    encoded = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"kubeconfig": encoded},
    }


@dataclass
class Federation:
    manager: LocalCluster
    workers: dict[str, LocalCluster]
    directory: Path
    process: ControllerProcess | None = None
    agents: dict[str, ControllerProcess] = field(default_factory=dict)

    @property
    def config_file(self) -> Path:
        return self.directory / "kueue-config.yaml"

    def start_manager(self) -> ControllerProcess:
        """Start the manager and wait until it serves the cluster's webhooks: a restarted
        manager listens on a new port, and it points the configurations there once it leads."""
        # Kueue's visibility API too (`kfed jobs` reads positions from it), behind the Service build() made.
        extra = [f"--config={self.config_file}", *federation.visibility_flags(free_port())]
        self.process = ControllerProcess(self.manager, self.directory, extra=extra).start()
        self.process.wait_ready()
        wait_webhooks(self.manager, self.process)
        return self.process

    def stop_apiserver(self, worker: str) -> None:
        self.workers[worker].stop_component("kube-apiserver")

    def start_apiserver(self, worker: str) -> None:
        """Bring a worker's apiserver back. Its agent exits when it cannot renew its lease
        (as client-go's leader election does); restart it, as its Deployment would.
        Kubernetes' own controllers come back with it: while their apiserver was away, each of
        their watches backed off (client-go's reflectors, up to half a minute apiece), and CI saw
        a later test's Job wait over a minute on that worker for its namespace's ServiceAccount
        and its pod. Restarted, they list at once."""
        cluster = self.workers[worker]
        for name in ("kwok", "kube-scheduler", "kube-controller-manager"):
            if name in cluster.components:
                cluster.stop_component(name)
        cluster.start_component("kube-apiserver")  # its wait_ready starts them again and waits for the nodes
        agent = self.agents[worker]
        if agent.exit_code() is not None or agent.process is None:
            agent.process = None
            agent.start()
        agent.wait_ready()
        wait_webhooks(self.workers[worker], agent)

    def stop_manager(self, *, kill: bool = False) -> None:
        if self.process is not None:
            if kill:
                self.process.kill()
            else:
                self.process.terminate()
            self.process = None


def build(
    provider: Any,
    directory: Path,
    *,
    worker_config: dict[str, Any] | None = None,
    controllers: Mapping[str, Path] | None = None,
    integrations: tuple[str, ...] = (),
    multikueue: dict[str, Any] | None = None,
    manager_config: dict[str, Any] | None = None,
    manager_controllers: bool = False,
) -> Federation:
    """The federation; `worker_config` is a Kueue Configuration for the workers' agents.
    `controllers` maps a local job controller's name (`manager.dev.catalog`: jobset, lws,
    kuberay, mpijob, trainer) to its build's directory (`tests.harness.require_controller`): every
    cluster gets its CRDs, each worker its controller, and kfed's processes integrate the kinds
    it serves as well as Jobs, as `kfed dev up --integrations` sets them up. `integrations`
    names more job kinds kfed's processes integrate (`kfed dev up --integrations`' short names,
    such as `pod`). `manager_config` adds sections to the manager's Configuration
    (`featureGates`, ...). With `manager_controllers` the manager runs Kubernetes' own
    controllers too (kube-controller-manager, and kube-scheduler with kwok nodes, as `kfed dev
    up --jobs` does): a Deployment there makes its pods."""
    wanted = controllers or {}
    unknown = sorted(set(wanted) - set(catalog.BY_NAME))
    if unknown:
        raise ValueError(f"unknown local controllers {', '.join(unknown)} (known: {', '.join(catalog.BY_NAME)})")
    missing = catalog.missing_requirements(wanted)
    if missing:
        raise ValueError(f"the local controllers asked for also need {', '.join(missing)}")
    chosen = [(controller, wanted[controller.name]) for controller in catalog.CONTROLLERS if controller.name in wanted]
    suffix = uuid.uuid4().hex[:4]
    manager = provider.create([f"mk-manager-{suffix}"], aggregation=True, jobs=manager_controllers)[0]
    w1, w2 = provider.create([f"mk-w1-{suffix}", f"mk-w2-{suffix}"], jobs=True)
    fed = Federation(manager, {"worker1": w1, "worker2": w2}, directory)
    crds = federation.crd_manifests(REPO_ROOT / "crds")
    for cluster in [manager, w1, w2]:
        federation.install_crds(cluster, crds)
        ensure_namespace(cluster, SYSTEM_NAMESPACE)
    federation.create(manager, federation.visibility_service())
    # The served kinds in the order `kfed dev up --integrations` lists them in its Configuration.
    served = {name for controller, _ in chosen for name in controller.integrations}
    names = (*integrations, *(name for name in federation.INTEGRATIONS if name in served))
    more: dict[str, Any] = {"integrations": federation.kfed_configuration(names)["integrations"]} if names else {}
    for controller, controller_bin in chosen:  # as `kfed dev up --integrations`: the controllers on the workers only
        controller.install(controller_bin, clusters=[manager, w1, w2], workers=[w1, w2])
    for name, worker in fed.workers.items():
        extra = []
        if worker_config is not None or more:
            (directory / name).mkdir(parents=True, exist_ok=True)
            path = directory / name / "kueue-config.yaml"
            config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", **more, **(worker_config or {})}
            path.write_text(yaml.safe_dump(config))
            extra.append(f"--config={path}")
        agent = ControllerProcess(worker, directory / name, component="worker_agent", extra=extra).start()
        agent.wait_ready()
        wait_webhooks(worker, agent)
        fed.agents[name] = agent
    write_config(fed.config_file, origin=None, more={**more, **(manager_config or {})}, multikueue=multikueue)
    join(manager, fed.workers)
    fed.start_manager()
    return fed


@contextlib.contextmanager
def running(provider: Any, directory: Path, **options: Any) -> Iterator[Federation]:
    """A federation (`build`'s options) for the length of the block, stopped and its clusters
    deleted after it."""
    created = build(provider, directory, **options)
    try:
        yield created
    finally:
        stop(created)
        provider.delete([created.manager, *created.workers.values()])


def stop(fed: Federation) -> None:
    fed.stop_manager()
    for agent in fed.agents.values():
        agent.terminate()


async def owned_workload(client: KubeClient, model: type[Resource], namespace: str, name: str) -> kueue.Workload | None:
    """The Workload the job `name` of `model` owns, or None."""
    owner = await client.get(model, name, namespace=namespace)
    for wl in (await client.list(kueue.Workload, namespace=namespace)).items:
        if any(ref.uid == owner.metadata.uid and ref.kind == model.KIND for ref in wl.metadata.owner_references or []):
            return wl
    return None


async def finished_workload(client: KubeClient, model: type[Resource], namespace: str, name: str) -> kueue.Workload:
    """The Workload of job `name`, once Finished. A job's end and its Workload's Finished are two
    writes, in that order, as in Kueue (the job integration, or MultiKueue after copying the
    worker's job status): a test that saw the job end waits for the second."""

    async def finished() -> kueue.Workload | None:
        wl = await owned_workload(client, model, namespace, name)
        return wl if wl is not None and is_condition_true(wl.status.conditions if wl.status else None, c.FINISHED) else None

    wl: kueue.Workload = await eventually(finished, timeout=30, what=f"the Workload of {model.KIND} {namespace}/{name} Finished")
    return wl


class Clients:
    """kfed's own gateway to every cluster of the federation, for one test."""

    def __init__(self, manager: KubeClient, workers: dict[str, KubeClient]) -> None:
        self.manager = manager
        self.workers = workers

    @classmethod
    async def open(cls, fed: Federation) -> Clients:
        manager = await KubeClient.from_kubeconfig(fed.manager.kubeconfig(), name="test-manager")
        workers = {name: await KubeClient.from_kubeconfig(w.kubeconfig(), name=f"test-{name}") for name, w in fed.workers.items()}
        return cls(manager, workers)

    async def close(self) -> None:
        for client in [self.manager, *self.workers.values()]:
            await client.close()

    async def queues(
        self, namespace: str, *, manager_cpu: int, worker_cpu: dict[str, int], labels: dict[str, str], tag: str
    ) -> dict[str, str]:
        """A namespace, a flavor and a ClusterQueue and LocalQueue on every cluster; the
        manager's queue carries the MultiKueue check. Returns the ClusterQueue names."""
        names = {"manager": f"{tag}-mgr", **{w: f"{tag}-{w}" for w in self.workers}}
        await self._queue(self.manager, namespace, names["manager"], manager_cpu, {}, flavor=f"{tag}-flavor", check=CHECK)
        for worker, client in self.workers.items():
            await self._queue(client, namespace, names[worker], worker_cpu[worker], labels, flavor=f"{tag}-flavor")
        return names

    @staticmethod
    async def _queue(
        client: KubeClient, ns: str, cq: str, cpu: int, labels: dict[str, str], *, flavor: str, check: str | None = None
    ) -> None:
        await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
        await client.create(kueue.ResourceFlavor, kueue_object("ResourceFlavor", flavor, {"nodeLabels": labels} if labels else {}))
        spec: dict[str, Any] = {
            "namespaceSelector": {},
            "resourceGroups": [
                {"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}
            ],
        }
        if check:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
            spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
        await client.create(kueue.ClusterQueue, kueue_object("ClusterQueue", cq, spec))
        await client.create(kueue.LocalQueue, kueue_object("LocalQueue", LQ, {"clusterQueue": cq}, namespace=ns))

    async def remote(self, model: type[R], namespace: str, name: str) -> dict[str, list[R]]:
        """Per worker, the objects of `model` named `name` in `namespace` (a MultiKueue copy)."""
        return {
            worker: [obj for obj in (await client.list(model, namespace=namespace)).items if obj.name == name]
            for worker, client in self.workers.items()
        }

    async def remote_copies(self, namespace: str, workload: str) -> dict[str, int]:
        """Per worker, how many copies of the Workload it holds."""
        return {
            worker: sum(wl.name == workload for wl in (await client.list(kueue.Workload, namespace=namespace)).items)
            for worker, client in self.workers.items()
        }

    async def leftovers(self, namespace: str, *models: type[Resource]) -> dict[str, list[str]]:
        """Per worker, what is left in `namespace`: every object of `models`, Workload copy and
        live pod, as `kind/NAME`."""
        left: dict[str, list[str]] = {}
        for worker, client in self.workers.items():
            names = [f"{m.KIND.lower()}/{o.name}" for m in models for o in (await client.list(m, namespace=namespace)).items]
            names += [f"workload/{o.name}" for o in (await client.list(kueue.Workload, namespace=namespace)).items]
            names += [f"pod/{o.name}" for o in (await client.list(Pod, namespace=namespace)).items if o.metadata.deletion_timestamp is None]
            left[worker] = names
        return left

    async def single_cluster_queue(self, namespace: str, *, cpu: int, labels: dict[str, str]) -> tuple[KubeClient, str]:
        """Kueue on one cluster: `namespace` queued on worker1 alone (`cpu` of its flavor, none
        on the others), preempting lower priorities within its ClusterQueue, with the
        WorkloadPriorityClasses `NAMESPACE-low` (10) and `NAMESPACE-high` (1000) there.
        Returns worker1's client and its ClusterQueue's name."""
        names = await self.queues(
            namespace, manager_cpu=0, worker_cpu={w: cpu if w == "worker1" else 0 for w in self.workers}, labels=labels, tag=namespace
        )
        worker = self.workers["worker1"]
        await worker.patch(kueue.ClusterQueue, names["worker1"], {"spec": {"preemption": {"withinClusterQueue": "LowerPriority"}}})
        for level, value in (("low", 10), ("high", 1000)):
            wpc = {"apiVersion": f"{c.GROUP}/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": f"{namespace}-{level}"}}
            await worker.create(kueue.WorkloadPriorityClass, {**wpc, "value": value})
        return worker, names["worker1"]

    async def set_quota(self, client: KubeClient, cq: str, cpu: int) -> None:
        current = await client.get(kueue.ClusterQueue, cq)
        groups = current.spec.to_dict()["resourceGroups"]
        groups[0]["flavors"][0]["resources"][0]["nominalQuota"] = cpu
        await client.patch(kueue.ClusterQueue, cq, {"spec": {"resourceGroups": groups}})

    async def set_stop_policy(self, client: KubeClient, cq: str, policy: str) -> None:
        """Hold a ClusterQueue (`Hold`: it admits nothing new, yet could) or let it go (`None`)."""
        await client.patch(kueue.ClusterQueue, cq, {"spec": {"stopPolicy": policy}})

    async def manager_workload(self, namespace: str, job: str) -> kueue.Workload | None:
        owner = await self.manager.get(Job, job, namespace=namespace)
        for wl in (await self.manager.list(kueue.Workload, namespace=namespace)).items:
            if any(ref.uid == owner.metadata.uid for ref in wl.metadata.owner_references or []):
                return wl
        return None

    async def remote_jobs(self, namespace: str) -> dict[str, list[Job]]:
        return {name: (await client.list(Job, namespace=namespace)).items for name, client in self.workers.items()}

    async def remote_workloads(self, namespace: str) -> dict[str, list[kueue.Workload]]:
        return {name: (await client.list(kueue.Workload, namespace=namespace)).items for name, client in self.workers.items()}

    async def rotate_secret(self, worker: str, kubeconfig: dict[str, Any]) -> None:
        body = secret_manifest(f"{worker}-kubeconfig", kubeconfig)
        await self.manager.patch(Secret, f"{worker}-kubeconfig", {"data": body["data"]}, namespace=SYSTEM_NAMESPACE)


def build_second_manager(fed: Federation, provider: Any, directory: Path, *, origin: str) -> Federation:
    """Another manager cluster with its own origin, joined to the same workers."""
    manager = provider.create([f"mk-manager2-{uuid.uuid4().hex[:4]}"], aggregation=True)[0]
    second = Federation(manager, fed.workers, directory)
    federation.install_crds(manager, federation.crd_manifests(REPO_ROOT / "crds"))
    ensure_namespace(manager, SYSTEM_NAMESPACE)
    federation.create(manager, federation.visibility_service())
    write_config(second.config_file, origin=origin)
    join(manager, fed.workers)
    second.start_manager()
    return second


def write_config(path: Path, *, origin: str | None, more: dict[str, Any] | None = None, multikueue: dict[str, Any] | None = None) -> None:
    """The manager's Kueue Configuration: short GC and worker-lost periods, so tests can wait
    them out, and the sections in `more`."""
    section: dict[str, Any] = {"gcInterval": f"{GC_INTERVAL}s", "workerLostTimeout": f"{WORKER_LOST_TIMEOUT}s", **(multikueue or {})}
    if origin:
        section["origin"] = origin
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "multiKueue": section, **(more or {})}
    path.write_text(yaml.safe_dump(config))


def join(manager: LocalCluster, workers: dict[str, LocalCluster], *, namespace: str = SYSTEM_NAMESPACE) -> None:
    """What an administrator applies on a manager: a Secret (in the manager's `namespace`) and a
    MultiKueueCluster per worker, a MultiKueueConfig listing them, and the AdmissionCheck that uses it."""
    for name, worker in workers.items():
        federation.create(manager, secret_manifest(f"{name}-kubeconfig", worker.kubeconfig(), namespace))
        source = {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": f"{name}-kubeconfig"}}}
        federation.create(manager, kueue_object("MultiKueueCluster", name, source))
    federation.create(manager, kueue_object("MultiKueueConfig", CONFIG, {"clusters": sorted(workers)}))
    parameters = {"apiGroup": c.GROUP, "kind": "MultiKueueConfig", "name": CONFIG}
    federation.create(
        manager, kueue_object("AdmissionCheck", CHECK, {"controllerName": c.MULTIKUEUE_CONTROLLER_NAME, "parameters": parameters})
    )


@dataclass
class Sightings:
    """Every object of one kind that each worker held while a block ran, however briefly: a watch
    sees a duplicate that existed for a moment, where a poll that waits for the final state
    cannot."""

    names: dict[str, set[str]]
    uids: dict[str, set[str]]
    most_at_once: dict[str, int]


@contextlib.asynccontextmanager
async def watch_workers(kube: Clients, ns: str, model: type[Any]) -> AsyncIterator[Sightings]:
    """Watch `model` in `ns` on every worker while the block runs (a failed watch fails the block)."""
    seen = Sightings({w: set() for w in kube.workers}, {w: set() for w in kube.workers}, {w: 0 for w in kube.workers})
    live: dict[str, set[str]] = {w: set() for w in kube.workers}

    def recorder(worker: str) -> Any:
        def record(kind: str, old: Any, new: Any) -> None:
            if new is None:
                live[worker].discard(old.metadata.uid)
                return
            seen.names[worker].add(new.name)
            seen.uids[worker].add(new.metadata.uid)
            live[worker].add(new.metadata.uid)
            seen.most_at_once[worker] = max(seen.most_at_once[worker], len(live[worker]))

        return record

    async with contextlib.AsyncExitStack() as stack:
        for worker, client in kube.workers.items():
            await stack.enter_async_context(watched(client, model, ns, recorder(worker)))
        yield seen
