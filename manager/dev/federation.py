"""The ready-to-use federation that `kfed dev up` leaves behind.

Builders here are pure (they return manifests); `install` writes them to local clusters.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import functools
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from manager.api import constants as c
from manager.api import crdgen, kueue
from manager.api.quantity import Quantity
from manager.dev.local import APPLY_PATCH, ClusterError, LocalCluster, wait_for
from manager.kube.client import KubeClient, KubeconfigError
from manager.kube.errors import KubeError
from manager.multikueue.controllers import worker_access
from manager.multikueue.controllers.worker_access import WorkerAccessError

SYSTEM_NAMESPACE = "kfed-system"
WORKER_CPU = 8
WORKER_MEMORY_GI = 32
FLAVOR = "default-flavor"
CLUSTER_QUEUE = "cluster-queue"
LOCAL_QUEUE = "user-queue"
ADMISSION_CHECK = "multikueue"
MULTIKUEUE_CONFIG = "multikueue"
# `kfed dev up --integrations NAME,...`: the job kinds kfed manages besides batch/v1 Job (always
# on, and nameable as `job`), each with its framework name in a Kueue Configuration.
JOB_INTEGRATION = "job"
JOB_FRAMEWORK = "batch/job"


@dataclass(frozen=True)
class Integration:
    framework: str  # its name in a Kueue Configuration's integrations.frameworks
    shown: str  # how `kfed dev up` names it when the federation is ready


INTEGRATIONS = {
    "deployment": Integration(
        "deployment", "Deployments (each pod queued alone, run on a worker; kube-controller-manager makes them, with --jobs)"
    ),
    "jobset": Integration("jobset.x-k8s.io/jobset", "JobSet (its controller runs on each worker)"),
    "lws": Integration(
        "leaderworkerset.x-k8s.io/leaderworkerset", "LeaderWorkerSet (its controller runs on each worker; one Workload per group)"
    ),
    "mpijob": Integration("kubeflow.org/mpijob", "MPIJob (the MPI Operator runs on each worker)"),
    "pod": Integration("pod", "Pods (gated until admitted; kube-scheduler binds them)"),
    "raycluster": Integration("ray.io/raycluster", "RayCluster (the KubeRay operator runs on each worker)"),
    "rayjob": Integration("ray.io/rayjob", "RayJob (the KubeRay operator runs on each worker)"),
    "trainjob": Integration("trainer.kubeflow.org/trainjob", "TrainJob (Kubeflow Trainer and JobSet run on each worker)"),
}
# Kueue's framework names, which `--integrations` takes as well as the short names.
BY_FRAMEWORK = {JOB_FRAMEWORK: JOB_INTEGRATION, **{integration.framework: name for name, integration in INTEGRATIONS.items()}}


def parse_integrations(text: str) -> tuple[str, ...]:
    """The integrations a `--integrations` comma list asks for besides Job (by short name or
    Kueue's framework name), in a stable order; an unknown name is a one-line ValueError."""
    names = [BY_FRAMEWORK.get(name.strip(), name.strip()) for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name != JOB_INTEGRATION and name not in INTEGRATIONS]
    if unknown:
        known = ", ".join([JOB_INTEGRATION, *INTEGRATIONS])
        raise ValueError(f"--integrations: unknown {', '.join(unknown)} (known: {known})")
    return tuple(name for name in INTEGRATIONS if name in names)


def kfed_configuration(integrations: tuple[str, ...], *, propagate_queues: bool = False) -> dict[str, Any]:
    """The Configuration file of kfed's processes (`--config`): the job kinds they manage, in
    Kueue's `integrations.frameworks` list; with `propagate_queues`, the manager keeps the
    namespaces and LocalQueues its Workloads need on the workers (the agents ignore it)."""
    config: dict[str, Any] = {
        "apiVersion": f"{c.CONFIG_GROUP}/v1beta2",
        "kind": "Configuration",
        "integrations": {"frameworks": [JOB_FRAMEWORK, *(INTEGRATIONS[name].framework for name in integrations)]},
    }
    if propagate_queues:
        config["multiKueue"] = {"propagateQueues": True}
    return config


def _cluster_queue(cpu: int, memory_gi: int, *, admission_check: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": FLAVOR,
                        "resources": [
                            {"name": "cpu", "nominalQuota": cpu},
                            {"name": "memory", "nominalQuota": f"{memory_gi}Gi"},
                        ],
                    }
                ],
            }
        ],
    }
    if admission_check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": admission_check}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE}, "spec": spec}


def _common() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": "default"},
            "spec": {"clusterQueue": CLUSTER_QUEUE},
        },
    ]


VISIBILITY_SERVICE = f"{SYSTEM_NAMESPACE}/kfed-visibility"


def visibility_service() -> dict[str, Any]:
    """The Service the visibility APIServices name, for a manager on this machine: an
    ExternalName for localhost (the apiserver resolves it and calls the port the APIService
    names; an Endpoints object may not hold a loopback address)."""
    namespace, _, name = VISIBILITY_SERVICE.partition("/")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }


def visibility_flags(port: int) -> list[str]:
    """Serve Kueue's visibility API on 127.0.0.1:`port`, behind `visibility_service()`."""
    return [
        f"--visibility-bind-address=127.0.0.1:{port}",
        f"--visibility-service={VISIBILITY_SERVICE}",
        f"--visibility-service-port={port}",
    ]


def controller_argv(
    cluster: LocalCluster, component: str, *, health_port: int, webhook_port: int | None, cert_dir: Path, extra: tuple[str, ...] = ()
) -> list[str]:
    """The command line of kfed's controller process (`manager` or `worker_agent`) for a local
    cluster: loopback addresses only; `webhook_port=None` runs it without webhooks."""
    webhooks = (
        [f"--webhook-bind-address=127.0.0.1:{webhook_port}", f"--webhook-cert-dir={cert_dir}"]
        if webhook_port is not None
        else ["--no-webhooks"]
    )
    return [
        sys.executable,
        "-m",
        component,
        f"--kubeconfig={cluster.kubeconfig_path}",
        f"--namespace={SYSTEM_NAMESPACE}",
        f"--health-probe-bind-address=127.0.0.1:{health_port}",
        f"--metrics-bind-address=127.0.0.1:{health_port}",
        *webhooks,
        *extra,
    ]


def worker_objects() -> list[dict[str, Any]]:
    return [*_common(), _cluster_queue(WORKER_CPU, WORKER_MEMORY_GI)]


def manager_objects(workers: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The manager's queues, admission check, MultiKueue config, and one Secret and cluster per worker."""
    objects = [
        *_common(),
        _cluster_queue(WORKER_CPU * len(workers), WORKER_MEMORY_GI * len(workers), admission_check=ADMISSION_CHECK),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": ADMISSION_CHECK},
            "spec": {
                "controllerName": c.MULTIKUEUE_CONTROLLER_NAME,
                "parameters": {"apiGroup": c.GROUP, "kind": "MultiKueueConfig", "name": MULTIKUEUE_CONFIG},
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "MultiKueueConfig",
            "metadata": {"name": MULTIKUEUE_CONFIG},
            "spec": {"clusters": sorted(workers)},
        },
    ]
    for name, kubeconfig in sorted(workers.items()):
        secret = f"{name}-kubeconfig"
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": secret, "namespace": SYSTEM_NAMESPACE},
                "type": "Opaque",
                "data": {c.MULTIKUEUE_SECRET_KEY: base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()},
            }
        )
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "MultiKueueCluster",
                "metadata": {"name": name},
                "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret}}},
            }
        )
    return objects


_ADMISSION = "/apis/admissionregistration.k8s.io/v1"
_BUILTIN_PATHS = {
    ("v1", "Namespace"): "/api/v1/namespaces",
    ("v1", "Secret"): "/api/v1/namespaces/{namespace}/secrets",
    ("v1", "Service"): "/api/v1/namespaces/{namespace}/services",
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): f"{_ADMISSION}/mutatingwebhookconfigurations",
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): f"{_ADMISSION}/validatingwebhookconfigurations",
    # The runtime a local Kubeflow Trainer's TrainJobs name (`manager.dev.trainer`).
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes",
}
# The field manager of what `kfed dev up` applies server-side.
FIELD_MANAGER = "kfed-dev"


def collection_path(obj: dict[str, Any]) -> str:
    """The REST collection an object is created in."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    namespace = obj.get("metadata", {}).get("namespace", "default")
    if (api_version, kind) in _BUILTIN_PATHS:
        return _BUILTIN_PATHS[(api_version, kind)].format(namespace=namespace)
    if api_version == "apiextensions.k8s.io/v1":
        return "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    model = kueue.KIND_BY_NAME[kind]
    if model.NAMESPACED:
        return f"/apis/{api_version}/namespaces/{namespace}/{model.PLURAL}"
    return f"/apis/{api_version}/{model.PLURAL}"


def create(cluster: LocalCluster, obj: dict[str, Any]) -> None:
    """Create an object; one that already exists counts as created."""
    status, body = cluster.request("POST", collection_path(obj), obj)
    if status not in (200, 201, 409):
        message = body.get("message") if isinstance(body, dict) else body
        raise ClusterError(f"{cluster.name}: creating {obj['kind']}/{obj['metadata']['name']} failed: {message}")


def apply(cluster: LocalCluster, obj: dict[str, Any]) -> None:
    """Apply an object server-side (create or update), as `kubectl apply --server-side --force-conflicts`
    would: a CRD too large for a client-side apply's last-applied annotation still fits."""
    path = f"{collection_path(obj)}/{obj['metadata']['name']}?fieldManager={FIELD_MANAGER}&force=true"
    status, body = cluster.request("PATCH", path, obj, timeout=60.0, content_type=APPLY_PATCH)
    if status not in (200, 201):
        message = body.get("message") if isinstance(body, dict) else body
        raise ClusterError(f"{cluster.name}: applying {obj['kind']}/{obj['metadata']['name']} failed: {message}")


def crd_manifests(crds_dir: Path | None = None) -> list[dict[str, Any]]:
    """The CRDs from crds/ when given, else generated from the models (the same content)."""
    if crds_dir is not None and crds_dir.is_dir():
        loaded = [yaml.safe_load(path.read_text()) for path in sorted(crds_dir.glob("*.yaml"))]
    else:
        loaded = [yaml.safe_load(text) for text in crdgen.render_all().values()]
    return [obj for obj in loaded if obj.get("kind") == "CustomResourceDefinition"]  # not crds/kustomization.yaml


def install_crds(cluster: LocalCluster, crds: list[dict[str, Any]], *, timeout: float = 60.0) -> None:
    for crd in crds:
        create(cluster, crd)
    wait_established(cluster, crds, timeout=timeout)


def wait_established(cluster: LocalCluster, crds: list[dict[str, Any]], *, timeout: float = 60.0) -> None:
    """Every CRD Established and its API group served."""

    def established() -> bool:
        for crd in crds:
            status, body = cluster.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd['metadata']['name']}")
            conditions = (body or {}).get("status", {}).get("conditions", []) if status == 200 else []
            if not any(cond["type"] == "Established" and cond["status"] == "True" for cond in conditions):
                return False
        return True

    wait_for(established, timeout=timeout, what=f"{cluster.name} CRDs Established")
    # Discovery lags Established by a moment, and a new resource answers 429 "storage is
    # (re)initializing" until its watch cache is filled: wait until every one is served.
    for path in served_paths(crds):
        wait_for(functools.partial(_served, cluster, path), timeout=timeout, what=f"{cluster.name} serving {path}")


def _served(cluster: LocalCluster, path: str) -> bool:
    return cluster.request("GET", path)[0] == 200


def served_paths(crds: list[dict[str, Any]]) -> list[str]:
    """For each served version of the CRDs: its discovery path (`/apis/GROUP/VERSION`), then a
    one-item list of its resource."""
    paths: list[str] = []
    for crd in crds:
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                group_version = f"/apis/{spec['group']}/{version['name']}"
                paths += [group_version, f"{group_version}/{spec['names']['plural']}?limit=1"]
    return list(dict.fromkeys(paths))


def least_privilege_kubeconfig(worker: LocalCluster, *, propagate_queues: bool = False) -> dict[str, Any]:
    """What the manager gets for a worker: the kubeconfig `kfed register --create-service-account`
    makes (a ServiceAccount with only MultiKueue's verbs and its token, and the queues' rights
    with `propagate_queues`, as `--propagate-queues` grants them), never the worker's
    system:masters certificate. The same function, run on its own event loop in a thread so
    that callers inside a loop (benchmarks) can use this synchronous installer too."""

    async def issue() -> dict[str, Any]:
        admin = worker.kubeconfig()
        client = await KubeClient.from_kubeconfig(admin, name=f"dev/{worker.name}")
        try:
            # Only a worker with Job controllers runs the token controller; the others get a
            # TokenRequest token at once.
            wait = worker_access.TOKEN_WAIT_SECONDS if worker.jobs else 0.0
            return await worker_access.create_service_account(
                client, admin, namespace=SYSTEM_NAMESPACE, propagate_queues=propagate_queues, token_wait=wait
            )
        finally:
            await client.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        try:
            return pool.submit(asyncio.run, issue()).result()
        except (WorkerAccessError, KubeError, KubeconfigError) as err:
            raise ClusterError(f"{worker.name}: cannot make the manager's ServiceAccount: {err}") from None


def install(manager: LocalCluster, workers: list[LocalCluster], crds: list[dict[str, Any]], *, propagate_queues: bool = False) -> float:
    """Install CRDs and the federation's objects (the manager's credential for each worker
    with the queues' rights, for a manager that propagates them); returns the seconds it took."""
    started = time.monotonic()
    for cluster in [manager, *workers]:
        install_crds(cluster, crds)
    for worker in workers:
        for obj in worker_objects():
            create(worker, obj)
    credentials = {worker.name: least_privilege_kubeconfig(worker, propagate_queues=propagate_queues) for worker in workers}
    for obj in manager_objects(credentials):
        create(manager, obj)
    return time.monotonic() - started


def quota_summary(workers: int) -> str:
    cpu = Quantity.from_value(WORKER_CPU * workers)
    return f"{cpu} cpu, {WORKER_MEMORY_GI * workers}Gi memory"


# Paths inside a checkout, as the README and the printed next steps give them.
SAMPLE_JOB = "examples/jobs/sample-job.yaml"
LONG_JOB = "examples/jobs/long-job.yaml"


def next_steps(
    *,
    elapsed: float,
    directory: Path,
    workers: int,
    jobs: bool,
    repo_root: Path | None,
    cwd: Path,
    path_dirs: list[Path],
    integrations: tuple[str, ...] = (),
) -> str:
    """What `kfed dev up` prints when the federation is ready: commands that run as printed.

    `path_dirs` go in front of PATH (where `kfed`, and `kubectl` if the shell has none, live).
    `repo_root` is the checkout with examples/ (None without one): its paths are relative, so the
    steps start with `cd` when elsewhere.
    """
    commands: list[tuple[str, str]] = []
    if repo_root is not None and cwd != repo_root:
        commands.append((f"cd {repo_root}", "the example paths are relative to the checkout"))
    commands.append((f"export KUBECONFIG={directory / 'manager.kubeconfig'}", ""))
    if path_dirs:
        what = "kfed" if len(path_dirs) == 1 else "kfed and the control plane's kubectl"
        commands.append((f"export PATH={':'.join(str(d) for d in path_dirs)}:$PATH", f"puts {what} on the PATH"))
    commands.append(("kubectl get clusterqueues,localqueues,multikueueclusters", ""))
    if repo_root is not None and jobs:
        commands.append((f"kubectl create -f {SAMPLE_JOB}", "3 pods of 1 cpu that run for 10 s on a worker"))
        commands.append((f"kubectl create -f {LONG_JOB}", "8 cpu for 2 minutes; a third copy waits for quota"))
    elif repo_root is not None:
        commands.append((f"kubectl create -f {SAMPLE_JOB}", "admitted and dispatched; pods run only with `kfed dev up --jobs`"))
    commands.append(("kubectl get jobs,workloads", ""))
    commands.append((f"kfed dev status --dir {directory}", ""))
    commands.append((f"kfed dev down --dir {directory}", "stops every process"))
    width = max(len(command) for command, _ in commands)
    more = [] if repo_root is None else ["", "More setups to try (cohorts, preemption, fair sharing, MultiKueue): examples/README.md"]
    kinds = ["batch/v1 Job", *(INTEGRATIONS[name].shown for name in integrations)]
    lines = [f"  {command:<{width}}  # {comment}" if comment else f"  {command}" for command, comment in commands]
    return "\n".join(
        [
            "",
            f"kfed dev federation is up in {elapsed:.0f}s: manager + {workers} worker(s), files in {directory}",
            f"The manager's ClusterQueue \"{CLUSTER_QUEUE}\" holds {quota_summary(workers)}; each worker's holds "
            f"{WORKER_CPU} cpu and {WORKER_MEMORY_GI}Gi. Worker kubeconfigs: {directory}/worker<i>.kubeconfig.",
            f"Job kinds: {', '.join(kinds)}.",
            "Queues follow the manager (multiKueue.propagateQueues): a namespace and LocalQueue made on the manager are made "
            "on a worker when a job there needs them.",
            "",
            "Next:",
            *lines,
            *more,
        ]
    )
