"""`kfed register NAME --kubeconfig FILE`: onboard a worker cluster in one step, and
`kfed unregister NAME`.

Register validates the worker's kubeconfig with the manager's own rules. It then connects
and checks that the worker serves Kueue's API and that this identity may do what MultiKueue
does there (SelfSubjectAccessReview). It also checks that the namespaces and LocalQueues of
the manager's queues exist there. It prints the checklist, and only when every item passes
creates the Secret and the MultiKueueCluster and adds the cluster to a MultiKueueConfig.
`--create-service-account` first makes a least-privilege ServiceAccount on the worker and
registers a token kubeconfig for it, as Kueue's setup script does.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Namespace, Secret
from manager.api.manifest import YamlRefusedError, iter_yaml
from manager.cli.fleet import CommandError, Reporter, manager_client, run_async
from manager.engine.workload import is_multikueue_check
from manager.kube.client import KubeClient, KubeconfigError
from manager.kube.errors import AlreadyExistsError, ForbiddenError, KubeError, NotFoundError
from manager.multikueue.kubeconfig import KubeconfigRejectedError, validate_kubeconfig

SERVICE_ACCOUNT = "kfed-multikueue"
TOKEN_WAIT_SECONDS = 5.0  # for the token controller to fill the token Secret in
TOKEN_REQUEST_SECONDS = 365 * 24 * 3600
# What MultiKueue does on a worker (Kueue's multikueue-setup RBAC): nothing more.
REQUIRED_ACCESS: tuple[tuple[str, str, str, str], ...] = (
    ("kueue.x-k8s.io", "workloads", "", "create"),
    ("kueue.x-k8s.io", "workloads", "", "delete"),
    ("kueue.x-k8s.io", "workloads", "", "get"),
    ("kueue.x-k8s.io", "workloads", "", "list"),
    ("kueue.x-k8s.io", "workloads", "", "watch"),
    ("kueue.x-k8s.io", "workloads", "", "patch"),
    ("kueue.x-k8s.io", "workloads", "status", "patch"),
    ("batch", "jobs", "", "create"),
    ("batch", "jobs", "", "delete"),
    ("batch", "jobs", "", "get"),
    ("batch", "jobs", "", "list"),
    ("batch", "jobs", "", "watch"),
    ("kueue.x-k8s.io", "clusterqueues", "", "list"),
    ("kueue.x-k8s.io", "localqueues", "", "list"),
)

# The manager's identity on a worker (Kueue's multikueue-setup): the same rules as
# deploy/multikueue-worker-access/rbac.yaml (a unit test keeps them equal).
WORKER_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
    # JobSets, for a manager whose integrations.frameworks enables them (not required: a
    # worker without the JobSet CRD still runs Jobs).
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets/status"], "verbs": ["get"]},
    {"apiGroups": [c.GROUP], "resources": ["workloads"], "verbs": ["create", "delete", "get", "list", "watch", "update", "patch"]},
    {"apiGroups": [c.GROUP], "resources": ["workloads/status"], "verbs": ["get", "patch", "update"]},
    {"apiGroups": [c.GROUP], "resources": ["clusterqueues", "localqueues"], "verbs": ["get", "list", "watch"]},
    # Whether the worker's kfed agent runs (its leader-election Lease); that one Lease, read only.
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kfed-worker-agent"], "verbs": ["get"]},
]


@dataclass(frozen=True)
class Check:
    ok: bool
    what: str
    detail: str = ""


def checklist_text(name: str, checks: list[Check]) -> str:
    lines = [f"Worker cluster {name}:"]
    for check in checks:
        mark = "ok  " if check.ok else "FAIL"
        lines.append(f"  [{mark}] {check.what}" + (f": {check.detail}" if check.detail else ""))
    return "\n".join(lines) + "\n"


def select_context(kubeconfig: dict[str, Any], context: str | None, *, where: str) -> dict[str, Any]:
    """The kubeconfig cut down to one context (the Secret holds only what the manager needs)."""
    chosen = context or kubeconfig.get("current-context")
    contexts = {e.get("name"): e.get("context") or {} for e in kubeconfig.get("contexts") or [] if isinstance(e, dict)}
    if chosen not in contexts:
        raise CommandError(f"{where}: contexts: context {chosen!r} not found")
    ctx = contexts[chosen]

    def pick(section: str, name: str) -> list[dict[str, Any]]:
        found = [e for e in kubeconfig.get(section) or [] if isinstance(e, dict) and e.get("name") == name]
        if not found:
            raise CommandError(f"{where}: contexts[{chosen}]: {section[:-1]} {name!r} not found")
        return found

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": chosen,
        "contexts": [{"name": chosen, "context": ctx}],
        "clusters": pick("clusters", ctx.get("cluster", "")),
        "users": pick("users", ctx.get("user", "")),
    }


async def _can(client: KubeClient, group: str, resource: str, subresource: str, verb: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"group": group, "resource": resource, "subresource": subresource, "verb": verb}},
    }
    answer = await client.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review)
    return bool((answer.get("status") or {}).get("allowed"))


async def check_worker(worker: KubeClient, manager: KubeClient, *, config: str) -> list[Check]:
    checks: list[Check] = []
    try:
        await worker.request("GET", "/version")
        checks.append(Check(True, "reachable"))
    except KubeError as err:
        return [Check(False, "reachable", str(err))]
    try:
        discovery = await worker.request("GET", f"/apis/{c.GROUP}/{c.STORAGE_VERSION}")
        kinds = {r.get("name") for r in discovery.get("resources") or []}
        missing = sorted({"workloads", "clusterqueues", "localqueues"} - kinds)
        checks.append(
            Check(not missing, f"Kueue's API ({c.GROUP}/{c.STORAGE_VERSION})", f"missing {', '.join(missing)}" if missing else "")
        )
    except NotFoundError:
        checks.append(Check(False, f"Kueue's API ({c.GROUP}/{c.STORAGE_VERSION})", "not served: install the CRDs (kfed's crds/ or Kueue)"))
        return checks
    denied = []
    for group, resource, sub, verb in REQUIRED_ACCESS:
        if not await _can(worker, group, resource, sub, verb):
            denied.append(f"{verb} {resource}{'/' + sub if sub else ''}")
    checks.append(Check(not denied, "access MultiKueue needs", f"denied: {', '.join(denied)}" if denied else ""))
    # The worker will serve the ClusterQueues whose MultiKueue check uses this config.
    checks_of_config = {
        check.name
        for check in (await manager.list(kueue.AdmissionCheck)).items
        if is_multikueue_check(check) and check.spec.parameters is not None and check.spec.parameters.name == config
    }
    served = {cq.name for cq in (await manager.list(kueue.ClusterQueue)).items if checks_of_config.intersection(cq.admission_check_names)}
    wanted = sorted({lq.key for lq in (await manager.list(kueue.LocalQueue)).items if lq.spec.cluster_queue in served})
    try:
        theirs = {lq.key for lq in (await worker.list(kueue.LocalQueue)).items}
    except KubeError as err:
        checks.append(Check(False, "LocalQueues of the manager's MultiKueue queues", str(err)))
        return checks
    absent = [key for key in wanted if key not in theirs]
    detail = f"missing {', '.join(absent)} (create the namespace and LocalQueue there)" if absent else f"{len(wanted)} present"
    checks.append(Check(not absent, "LocalQueues of the manager's MultiKueue queues", detail))
    return checks


def _load(path: str, context: str | None) -> dict[str, Any]:
    try:
        raw = Path(path).expanduser().read_bytes()
    except OSError as err:
        raise CommandError(f"cannot read kubeconfig {path}: {err.strerror}") from None
    try:
        # The worker rules apply to the context chosen, so parse first and validate the cut.
        documents = [data for data in iter_yaml(raw) if data is not None]
    except (YamlRefusedError, yaml.YAMLError):
        raise CommandError(f"kubeconfig {path} is not valid YAML") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise CommandError(f"kubeconfig {path}: expected a mapping")
    kubeconfig = select_context(documents[0], context, where=path)
    try:
        validate_kubeconfig(kubeconfig)
    except KubeconfigRejectedError as err:
        raise CommandError(f"kubeconfig {path} is refused ({err.reason}): {err}") from None
    return kubeconfig


async def create_service_account(
    worker: KubeClient, kubeconfig: dict[str, Any], *, namespace: str, token_wait: float = TOKEN_WAIT_SECONDS
) -> dict[str, Any]:
    """Kueue's setup script, done through the API: a ServiceAccount with only MultiKueue's
    verbs, a long-lived token for it, and a kubeconfig that uses that token."""
    objects = [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        (
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace}},
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": SERVICE_ACCOUNT},
                "rules": WORKER_RULES,
            },
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": SERVICE_ACCOUNT},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVICE_ACCOUNT},
                "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}],
            },
        ),
        (
            f"/api/v1/namespaces/{namespace}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "kubernetes.io/service-account-token",
                "metadata": {
                    "name": f"{SERVICE_ACCOUNT}-token",
                    "namespace": namespace,
                    "annotations": {"kubernetes.io/service-account.name": SERVICE_ACCOUNT},
                },
            },
        ),
    ]
    for path, body in objects:
        with contextlib.suppress(AlreadyExistsError):
            await worker.request("POST", path, body=body)
    token = await _issued_token(worker, namespace, token_wait)
    out = copy.deepcopy(kubeconfig)
    out["users"] = [{"name": SERVICE_ACCOUNT, "user": {"token": token}}]
    out["contexts"][0]["context"]["user"] = SERVICE_ACCOUNT
    return out


async def _issued_token(worker: KubeClient, namespace: str, wait: float) -> str:
    """The long-lived token the worker's token controller writes into the Secret (Kueue's setup
    script). A cluster without that controller (`kfed dev up` runs no kube-controller-manager
    on its workers) gets a TokenRequest token bound to the same Secret instead: deleting the
    Secret revokes either."""
    secret_name = f"{SERVICE_ACCOUNT}-token"
    deadline = time.monotonic() + wait
    while True:  # poll the Secret with a bound
        secret = await worker.get(Secret, secret_name, namespace=namespace)
        token = base64.b64decode((secret.data or {}).get("token", "")).decode()
        if token:
            return token
        if time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.2)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": TOKEN_REQUEST_SECONDS,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": secret_name, "uid": secret.metadata.uid},
        },
    }
    try:
        answer = await worker.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{SERVICE_ACCOUNT}/token", body=request)
    except KubeError as err:
        raise CommandError(f"the worker issued no token for ServiceAccount {namespace}/{SERVICE_ACCOUNT}: {err}") from None
    token = str((answer.get("status") or {}).get("token") or "")
    if not token:
        raise CommandError(f"the worker issued no token for ServiceAccount {namespace}/{SERVICE_ACCOUNT}")
    return token


async def manager_cluster_uid(client: KubeClient) -> str | None:
    """The uid of the cluster's kube-system namespace, which identifies a cluster; None when
    this identity may not read it."""
    try:
        return (await client.get(Namespace, "kube-system")).metadata.uid
    except (ForbiddenError, NotFoundError):
        return None


@run_async
async def cmd_register(args: argparse.Namespace) -> int:
    kubeconfig = _load(args.worker_kubeconfig, args.worker_context)
    manager = await manager_client(args)
    try:
        try:
            worker = await KubeClient.from_kubeconfig(kubeconfig, name=args.name, where=args.worker_kubeconfig)
        except KubeconfigError as err:
            raise CommandError(str(err)) from None
        worker.retry_attempts = 1
        try:
            own = await manager_cluster_uid(manager)
            if own is not None and own == await manager_cluster_uid(worker):
                raise CommandError(
                    f"{args.worker_kubeconfig} points at the manager's own cluster (kube-system has uid {own} on both); "
                    "a worker must be another cluster"
                )
            if args.create_service_account and not args.dry_run:
                kubeconfig = await create_service_account(worker, kubeconfig, namespace=args.system_namespace)
                await worker.close()
                worker = await KubeClient.from_kubeconfig(kubeconfig, name=args.name, where="the new ServiceAccount's kubeconfig")
            checks = await check_worker(worker, manager, config=args.config)
        finally:
            await worker.close()
        report = Reporter(args.output)
        for line in checklist_text(args.name, checks).splitlines():
            report.say(line)
        listed = [{"ok": check.ok, "check": check.what, "detail": check.detail} for check in checks]
        if not all(check.ok for check in checks):
            print(f"error: worker cluster {args.name} is not ready; nothing was created", file=sys.stderr)
            report.done(cluster=args.name, ready=False, checks=listed)
            return 1
        if args.dry_run:
            report.say("dry run: nothing was created")
        else:
            await _create_registration(manager, args, kubeconfig, report)
        report.done(cluster=args.name, ready=True, checks=listed, dryRun=args.dry_run)
        return 0
    finally:
        await manager.close()


async def _create_registration(manager: KubeClient, args: argparse.Namespace, kubeconfig: dict[str, Any], report: Reporter) -> None:
    secret_name = f"{args.name}-kubeconfig"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name, "namespace": args.system_namespace, "labels": {"app.kubernetes.io/managed-by": "kfed"}},
        "data": {c.MULTIKUEUE_SECRET_KEY: base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()},
    }
    try:
        await manager.create(Secret, secret, namespace=args.system_namespace)
    except AlreadyExistsError:
        await manager.patch(Secret, secret_name, {"data": secret["data"]}, namespace=args.system_namespace)
    report.say(f"secret/{secret_name} written in {args.system_namespace}")
    cluster = {
        "apiVersion": f"{c.GROUP}/{c.STORAGE_VERSION}",
        "kind": "MultiKueueCluster",
        "metadata": {"name": args.name},
        "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret_name}}},
    }
    try:
        await manager.create(kueue.MultiKueueCluster, cluster)
        report.say(f"multikueuecluster/{args.name} created")
    except AlreadyExistsError:
        report.say(f"multikueuecluster/{args.name} already exists")
    try:
        config = await manager.get(kueue.MultiKueueConfig, args.config)
        clusters = list(config.spec.clusters)
        if args.name not in clusters:
            await manager.patch(
                kueue.MultiKueueConfig,
                args.config,
                {"metadata": {"resourceVersion": config.metadata.resource_version}, "spec": {"clusters": [*clusters, args.name]}},
            )
        report.say(f"multikueueconfig/{args.config} lists {args.name}")
    except NotFoundError:
        body = {
            "apiVersion": f"{c.GROUP}/{c.STORAGE_VERSION}",
            "kind": "MultiKueueConfig",
            "metadata": {"name": args.config},
            "spec": {"clusters": [args.name]},
        }
        await manager.create(kueue.MultiKueueConfig, body)
        report.say(f"multikueueconfig/{args.config} created with {args.name}")


@run_async
async def cmd_unregister(args: argparse.Namespace) -> int:
    manager = await manager_client(args)
    report = Reporter(args.output)
    try:
        for config in (await manager.list(kueue.MultiKueueConfig)).items:
            if args.name in config.spec.clusters:
                remaining = [name for name in config.spec.clusters if name != args.name]
                if not remaining:
                    print(f"warning: multikueueconfig/{config.name} would have no clusters left; delete it yourself", file=sys.stderr)
                    continue
                await manager.patch(kueue.MultiKueueConfig, config.name, {"spec": {"clusters": remaining}})
                report.say(f"multikueueconfig/{config.name} no longer lists {args.name}")
        try:
            cluster = await manager.get(kueue.MultiKueueCluster, args.name)
        except NotFoundError:
            raise CommandError(f"multikueuecluster/{args.name} not found") from None
        ref = cluster.spec.cluster_source.kube_config
        await manager.delete(kueue.MultiKueueCluster, args.name)
        report.say(f"multikueuecluster/{args.name} deleted")
        if ref is not None and ref.effective_location_type == "Secret":
            try:
                await manager.delete(Secret, ref.location, namespace=args.system_namespace)
                report.say(f"secret/{ref.location} deleted")
            except NotFoundError:
                pass
        report.done(cluster=args.name, unregistered=True)
        return 0
    finally:
        await manager.close()


def add_commands(commands: Any) -> None:
    register = commands.add_parser("register", help="onboard a worker cluster: check it, then create its Secret and MultiKueueCluster")
    register.add_argument("name", help="the MultiKueueCluster name")
    register.add_argument("--kubeconfig", dest="worker_kubeconfig", required=True, help="the worker's kubeconfig file")
    register.add_argument("--context", dest="worker_context", help="the context in the worker's kubeconfig")
    register.add_argument("--config", default="multikueue", help="the MultiKueueConfig to add the cluster to (created if missing)")
    register.add_argument("--dry-run", action="store_true", help="only print the checklist")
    register.add_argument(
        "--create-service-account", action="store_true", help="make a least-privilege ServiceAccount on the worker and use its token"
    )
    register.add_argument("--manager-kubeconfig", dest="kubeconfig", help="the manager's kubeconfig (default: $KUBECONFIG)")
    register.add_argument("--manager-context", dest="context", help="the manager's kubeconfig context")
    register.add_argument(
        "--system-namespace", default="kfed-system", help="where the Secret goes on the manager (and the ServiceAccount on the worker)"
    )
    register.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    register.set_defaults(func=cmd_register)

    unregister = commands.add_parser("unregister", help="remove a worker cluster: its MultiKueueCluster, Secret and config entries")
    unregister.add_argument("name")
    unregister.add_argument("--kubeconfig")
    unregister.add_argument("--context")
    unregister.add_argument("--system-namespace", default="kfed-system")
    unregister.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    unregister.set_defaults(func=cmd_unregister)
