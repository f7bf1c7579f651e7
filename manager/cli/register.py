"""`kfed register NAME --kubeconfig FILE`: onboard a worker cluster in one step, and
`kfed unregister NAME`.

Register validates the worker's kubeconfig with the manager's own rules. It then connects
and checks that the worker serves Kueue's API and that this identity may do what MultiKueue
does there (SelfSubjectAccessReview). It also checks that the namespaces and LocalQueues of
the manager's queues exist there. It prints the checklist, and only when every item passes
creates the Secret and the MultiKueueCluster and adds the cluster to a MultiKueueConfig.
`--create-service-account` first makes a least-privilege ServiceAccount on the worker and
registers a token kubeconfig for it, as Kueue's setup script does.

It is the one command that truly handles a worker's credential (the worker's kubeconfig, and
the Secret it writes on the manager), so it is an administrator's: every other command reads
the workers through the manager's read API with the user's own rights.
"""

from __future__ import annotations

import argparse
import base64
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Namespace, Secret
from manager.api.manifest import YamlRefusedError, iter_yaml
from manager.api.meta import DNS_LABEL_PATTERN
from manager.cli.fleet import CommandError, Reporter, manager_client, manager_session, run_async
from manager.engine.workload import is_multikueue_check
from manager.kube.access import can_i
from manager.kube.client import KubeClient, KubeconfigError
from manager.kube.errors import AlreadyExistsError, ForbiddenError, KubeError, NotFoundError
from manager.multikueue.controllers.worker_access import WorkerAccessError, create_service_account, required_access
from manager.multikueue.rules import federation
from manager.multikueue.rules.kubeconfig import KubeconfigRejectedError, validate_kubeconfig
from manager.multikueue.rules.plan import WORKER_NAMESPACES_ANNOTATION


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


LOCAL_QUEUES = "LocalQueues of the manager's MultiKueue queues"


async def check_worker(
    worker: KubeClient,
    manager: KubeClient,
    *,
    config: str,
    namespaces: tuple[str, ...] | None = None,
    admin: KubeClient | None = None,
    propagate_queues: bool = False,
) -> list[Check]:
    """The checklist for `worker`, the identity the manager will use there. `namespaces`: the
    only ones it may use (None: the whole cluster). The LocalQueues are read by `admin` when
    given (the manager's identity may not read them: MultiKueue never does); with
    `propagate_queues` the missing ones are the manager's to create, not a failure."""
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
    for group, resource, sub, verb, ns in required_access(namespaces):
        if not await can_i(worker, group=group, resource=resource, subresource=sub, verb=verb, namespace=ns):
            denied.append(f"{verb} {resource}{'/' + sub if sub else ''}" + (f" in {ns}" if ns else ""))
    checks.append(Check(not denied, "access MultiKueue needs", f"denied: {', '.join(denied)}" if denied else ""))
    # The worker will serve the ClusterQueues whose MultiKueue check uses this config.
    checks_of_config = {
        check.name
        for check in (await manager.list(kueue.AdmissionCheck)).items
        if is_multikueue_check(check) and federation.config_name(check) == config
    }
    served = {cq.name for cq in (await manager.list(kueue.ClusterQueue)).items if checks_of_config.intersection(cq.admission_check_names)}
    wanted = sorted({lq.key for lq in (await manager.list(kueue.LocalQueue)).items if lq.spec.cluster_queue in served})
    if namespaces is not None:
        outside = sorted({key.partition("/")[0] for key in wanted} - set(namespaces))
        detail = f"{', '.join(outside)} not among --worker-namespace (their jobs could not run there)" if outside else ""
        checks.append(Check(not outside, "namespaces of the manager's MultiKueue queues", detail))
    try:
        theirs = {lq.key for lq in (await (admin or worker).list(kueue.LocalQueue)).items}
    except ForbiddenError:
        checks.append(Check(True, LOCAL_QUEUES, "not checked: this identity may not list them (MultiKueue does not need to)"))
        return checks
    except KubeError as err:
        checks.append(Check(False, LOCAL_QUEUES, str(err)))
        return checks
    absent = [key for key in wanted if key not in theirs]
    if absent and propagate_queues:
        detail = f"missing {', '.join(absent)}: the manager creates them when a job needs them (--propagate-queues)"
        checks.append(Check(True, LOCAL_QUEUES, detail))
        return checks
    detail = f"missing {', '.join(absent)} (create the namespace and LocalQueue there)" if absent else f"{len(wanted)} present"
    checks.append(Check(not absent, LOCAL_QUEUES, detail))
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
    namespaces = _worker_namespaces(args.worker_namespaces)
    manager = await manager_client(args)
    try:
        try:
            worker = await KubeClient.from_kubeconfig(kubeconfig, name=args.name, where=args.worker_kubeconfig)
        except KubeconfigError as err:
            raise CommandError(str(err)) from None
        worker.retry_attempts = 1
        admin: KubeClient | None = None
        try:
            own = await manager_cluster_uid(manager)
            if own is not None and own == await manager_cluster_uid(worker):
                raise CommandError(
                    f"{args.worker_kubeconfig} points at the manager's own cluster (kube-system has uid {own} on both); "
                    "a worker must be another cluster"
                )
            if args.propagate_queues and not args.create_service_account:
                raise CommandError("--propagate-queues grants rights to the ServiceAccount that --create-service-account makes: give both")
            if args.create_service_account and not args.dry_run:
                try:
                    kubeconfig = await create_service_account(
                        worker,
                        kubeconfig,
                        namespace=args.system_namespace,
                        worker_namespaces=namespaces,
                        propagate_queues=args.propagate_queues,
                    )
                except WorkerAccessError as err:
                    raise CommandError(str(err)) from None
                admin = worker
                worker = await KubeClient.from_kubeconfig(kubeconfig, name=args.name, where="the new ServiceAccount's kubeconfig")
            checks = await check_worker(
                worker, manager, config=args.config, namespaces=namespaces, admin=admin, propagate_queues=args.propagate_queues
            )
        finally:
            for client in (worker, admin):
                if client is not None:
                    await client.close()
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
            await _create_registration(manager, args, kubeconfig, namespaces, report)
        report.done(cluster=args.name, ready=True, checks=listed, dryRun=args.dry_run)
        return 0
    finally:
        await manager.close()


def _worker_namespaces(given: list[str] | None) -> tuple[str, ...] | None:
    if not given:
        return None
    for name in given:
        if len(name) > 63 or not re.fullmatch(DNS_LABEL_PATTERN, name):
            raise CommandError(f"--worker-namespace {name!r}: not a namespace name")
    return tuple(sorted(set(given)))


async def _create_registration(
    manager: KubeClient, args: argparse.Namespace, kubeconfig: dict[str, Any], namespaces: tuple[str, ...] | None, report: Reporter
) -> None:
    secret_name = f"{args.name}-kubeconfig"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name, "namespace": args.system_namespace, "labels": {"app.kubernetes.io/managed-by": "kfed"}},
        "data": {c.MULTIKUEUE_SECRET_KEY: base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()},
    }
    try:
        try:
            await manager.create(Secret, secret, namespace=args.system_namespace)
        except AlreadyExistsError:
            await manager.patch(Secret, secret_name, {"data": secret["data"]}, namespace=args.system_namespace)
    except ForbiddenError:
        raise CommandError(
            f"kfed register writes the worker's credential: it needs to create and patch Secrets in {args.system_namespace} "
            "on the manager, an administrator's right (the other kfed commands need only read rights)"
        ) from None
    report.say(f"secret/{secret_name} written in {args.system_namespace}")
    # The namespaces the worker's credential may use, for the manager to watch only those.
    scope = ",".join(namespaces) if namespaces is not None else None
    cluster = {
        "apiVersion": f"{c.GROUP}/{c.STORAGE_VERSION}",
        "kind": "MultiKueueCluster",
        "metadata": {"name": args.name, **({"annotations": {WORKER_NAMESPACES_ANNOTATION: scope}} if scope else {})},
        "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret_name}}},
    }
    try:
        await manager.create(kueue.MultiKueueCluster, cluster)
        report.say(f"multikueuecluster/{args.name} created")
    except AlreadyExistsError:
        await manager.patch(kueue.MultiKueueCluster, args.name, {"metadata": {"annotations": {WORKER_NAMESPACES_ANNOTATION: scope}}})
        report.say(f"multikueuecluster/{args.name} already exists")
    if scope:
        report.say(f"multikueuecluster/{args.name} uses the worker's namespaces {scope} only")
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
    report = Reporter(args.output)
    async with manager_session(args) as manager:
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


def add_commands(commands: Any) -> None:
    register = commands.add_parser(
        "register",
        help="onboard a worker cluster: check it, then create its Secret and MultiKueueCluster (an administrator's command: "
        "it needs the worker's own kubeconfig, and to write Secrets in kfed-system on the manager)",
    )
    register.add_argument("name", help="the MultiKueueCluster name")
    register.add_argument("--kubeconfig", dest="worker_kubeconfig", required=True, help="the worker's kubeconfig file")
    register.add_argument("--context", dest="worker_context", help="the context in the worker's kubeconfig")
    register.add_argument("--config", default="multikueue", help="the MultiKueueConfig to add the cluster to (created if missing)")
    register.add_argument("--dry-run", action="store_true", help="only print the checklist")
    register.add_argument(
        "--create-service-account", action="store_true", help="make a least-privilege ServiceAccount on the worker and use its token"
    )
    register.add_argument(
        "--worker-namespace",
        dest="worker_namespaces",
        action="append",
        metavar="NAMESPACE",
        help="a worker namespace the manager may use, and the only ones it then uses there (repeatable; default: the whole "
        "cluster); with --create-service-account the Job and Workload rights are granted there only, by RoleBindings",
    )
    register.add_argument(
        "--propagate-queues",
        action="store_true",
        help="with --create-service-account: also grant what a manager that propagates queues does on the worker "
        "(create and delete its LocalQueues; cluster-wide, its namespaces too)",
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
