"""`kfed status`, `kfed clusters`, `kfed queues`, `kfed jobs`, `kfed submit` and `kfed cancel`:
the fleet seen from the manager cluster (and, for the workers' own numbers, through the
kubeconfig Secrets the manager holds). Reading is here; what is shown is `views.py`."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job, Secret
from manager.api.manifest import ManifestError, object_documents, queue_label_errors
from manager.cli import views
from manager.kube.client import KubeClient, KubeconfigError
from manager.kube.errors import KubeError, NotFoundError
from manager.multikueue.kubeconfig import REASON_BAD, KubeconfigRejectedError, parse_kubeconfig

WORKER_TIMEOUT = 3.0  # seconds a worker gets to answer before it is shown as unreachable


class CommandError(Exception):
    """A one-line error for the user; the command exits 1."""


def _now() -> datetime:
    return datetime.now(UTC)


def kubeconfig_path(args: argparse.Namespace) -> Path:
    """kubectl's order: --kubeconfig, then $KUBECONFIG (the first file), then ~/.kube/config."""
    if args.kubeconfig:
        return Path(args.kubeconfig).expanduser()
    env = os.environ.get("KUBECONFIG")
    if env:
        return Path(env.split(os.pathsep)[0]).expanduser()
    return Path("~/.kube/config").expanduser()


async def manager_client(args: argparse.Namespace) -> KubeClient:
    path = kubeconfig_path(args)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise CommandError(f"cannot read kubeconfig {path}: {err.strerror}") from None
    except yaml.YAMLError:
        raise CommandError(f"kubeconfig {path} is not valid YAML") from None
    try:
        client = await KubeClient.from_kubeconfig(data, name="kfed", context=args.context, where=str(path))
    except KubeconfigError as err:
        raise CommandError(str(err)) from None
    client.retry_attempts = 2
    return client


class Reporter:
    """What a command that changes things says: lines for a person (`-o table`), or one JSON or
    YAML document at the end with every line and the command's result."""

    def __init__(self, output: str) -> None:
        self.output = output if output in ("json", "yaml") else "table"
        self.messages: list[str] = []

    def say(self, line: str) -> None:
        self.messages.append(line)
        if self.output == "table":
            print(line, flush=True)

    def done(self, **result: Any) -> None:
        if self.output == "table":
            return
        document = {**result, "messages": self.messages}
        sys.stdout.write(json.dumps(document, indent=2) + "\n" if self.output == "json" else yaml.safe_dump(document, sort_keys=False))


def run_async(func: Callable[[argparse.Namespace], Coroutine[Any, Any, int]]) -> Callable[[argparse.Namespace], int]:
    def runner(args: argparse.Namespace) -> int:
        try:
            return asyncio.run(func(args))
        except CommandError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        except KubeError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1

    return runner


# --- reading -----------------------------------------------------------------------------------------
async def read_manager(client: KubeClient, namespace: str | None) -> dict[str, Any]:
    workloads, checks, lqs, cqs, clusters = await asyncio.gather(
        client.list(kueue.Workload, namespace=namespace),
        client.list(kueue.AdmissionCheck),
        client.list(kueue.LocalQueue, namespace=namespace),
        client.list(kueue.ClusterQueue),
        _optional(client.list(kueue.MultiKueueCluster)),
    )
    return {
        "workloads": workloads.items,
        "checks": {check.name: check for check in checks.items},
        "local_queues": {lq.key: lq for lq in lqs.items},
        "cluster_queues": cqs.items,
        "clusters": clusters.items if clusters is not None else [],
    }


async def _optional(call: Coroutine[Any, Any, Any]) -> Any:
    try:
        return await call
    except (NotFoundError, KubeError):
        return None


async def read_worker(client: KubeClient, cluster: kueue.MultiKueueCluster, *, system_namespace: str, origin: str) -> views.WorkerView:
    """The worker's own ClusterQueues and our copies there, through the kubeconfig the manager
    holds for it. Any failure is shown on the row, never raised."""
    view = views.worker_view(cluster)
    ref = cluster.spec.cluster_source.kube_config
    if ref is None or ref.effective_location_type != "Secret":
        view.error = "kubeconfig is not in a Secret"
        return view
    try:
        secret = await client.get(Secret, ref.location, namespace=system_namespace)
        encoded = (secret.data or {}).get(c.MULTIKUEUE_SECRET_KEY)
        if encoded is None:
            raise KubeconfigRejectedError(REASON_BAD, f'key "{c.MULTIKUEUE_SECRET_KEY}" not found in secret "{ref.location}"')
        kubeconfig = parse_kubeconfig(base64.b64decode(encoded))
        worker = await KubeClient.from_kubeconfig(kubeconfig, name=cluster.name, where=f"Secret {ref.location}")
    except (KubeError, KubeconfigRejectedError, KubeconfigError, ValueError) as err:
        view.error = f"cannot use its kubeconfig: {err}"
        return view
    worker.retry_attempts = 1
    worker.timeout = WORKER_TIMEOUT
    try:
        cqs, wls = await asyncio.wait_for(
            asyncio.gather(
                worker.list(kueue.ClusterQueue), worker.list(kueue.Workload, label_selector=f"{c.MULTIKUEUE_ORIGIN_LABEL}={origin}")
            ),
            timeout=WORKER_TIMEOUT,
        )
        views.add_worker_queues(view, cqs.items, wls.items, origin=origin)
        view.reachable = True
    except (KubeError, TimeoutError) as err:
        view.error = "unreachable" if isinstance(err, TimeoutError) else f"unreachable: {err}"
    finally:
        await worker.close()
    return view


async def read_workers(client: KubeClient, clusters: list[kueue.MultiKueueCluster], args: argparse.Namespace) -> list[views.WorkerView]:
    return list(
        await asyncio.gather(*(read_worker(client, cl, system_namespace=args.system_namespace, origin=args.origin) for cl in clusters))
    )


def _namespace(args: argparse.Namespace) -> str | None:
    return None if getattr(args, "all_namespaces", False) else (args.namespace or "default")


# --- commands ------------------------------------------------------------------------------------------
def _filter(rows: list[views.JobView], args: argparse.Namespace, workloads: list[kueue.Workload]) -> list[views.JobView]:
    labels = {wl.key: wl.metadata.labels or {} for wl in workloads}
    selector = dict(part.split("=", 1) for part in args.selector.split(",")) if args.selector else {}
    out = []
    for row in rows:
        if args.queue and row.queue != args.queue:
            continue
        if args.state and row.state.lower() != args.state.lower():
            continue
        if args.cluster and row.cluster != args.cluster:
            continue
        if selector and any(labels.get(f"{row.namespace}/{row.workload}", {}).get(k) != v for k, v in selector.items()):
            continue
        out.append(row)
    return out


async def _refresh(args: argparse.Namespace, produce: Callable[[KubeClient], Coroutine[Any, Any, str]]) -> int:
    """Print what `produce` makes from the manager; with --watch, again every --interval."""
    client = await manager_client(args)
    try:
        while await _show(await produce(client), args):
            pass
        return 0
    finally:
        await client.close()


@run_async
async def cmd_jobs(args: argparse.Namespace) -> int:
    async def produce(client: KubeClient) -> str:
        state = await read_manager(client, _namespace(args))
        rows = views.job_views(state["workloads"], checks=state["checks"], local_queues=state["local_queues"])
        rows = _filter(rows, args, state["workloads"])
        return views.render(views.job_rows(rows, now=_now(), wide=args.output == "wide"), output=_table(args.output))

    return await _refresh(args, produce)


@run_async
async def cmd_queues(args: argparse.Namespace) -> int:
    async def produce(client: KubeClient) -> str:
        state = await read_manager(client, _namespace(args))
        return views.render(views.queue_rows(state["cluster_queues"], state["local_queues"].values()), output=_table(args.output))

    return await _refresh(args, produce)


@run_async
async def cmd_clusters(args: argparse.Namespace) -> int:
    async def produce(client: KubeClient) -> str:
        workers = await read_workers(client, (await client.list(kueue.MultiKueueCluster)).items, args)
        return views.render(views.cluster_rows(workers, now=_now()), output=_table(args.output), empty="No worker clusters registered.")

    return await _refresh(args, produce)


@run_async
async def cmd_status(args: argparse.Namespace) -> int:
    async def produce(client: KubeClient) -> str:
        state = await read_manager(client, None)
        workers = await read_workers(client, state["clusters"], args)
        jobs = views.job_views(state["workloads"], checks=state["checks"], local_queues=state["local_queues"])
        manager = f"{client.api.configuration.host} (reachable)"
        now = _now()
        if args.output in ("json", "yaml"):
            data = views.status_data(manager=manager, workers=workers, cluster_queues=state["cluster_queues"], jobs=jobs, now=now)
            return views.render([data], output=args.output)
        return views.status_text(manager=manager, workers=workers, cluster_queues=state["cluster_queues"], jobs=jobs, now=now)

    return await _refresh(args, produce)


@run_async
async def cmd_submit(args: argparse.Namespace) -> int:
    source = "<stdin>" if args.filename == "-" else args.filename
    try:
        raw = sys.stdin.buffer.read() if args.filename == "-" else Path(args.filename).read_bytes()
    except OSError as err:
        raise CommandError(f"cannot read {args.filename}: {err.strerror or err}") from None
    documents, errors = object_documents(raw, source)
    if errors:
        raise CommandError(str(errors[0]))
    jobs = [d for d in documents if d.kind == "Job" and str(d.data.get("apiVersion", "")).startswith("batch/")]
    if len(jobs) != 1:
        raise CommandError(f"{args.filename}: expected exactly one batch/v1 Job, found {len(jobs)}")
    document = jobs[0]
    job = document.data
    metadata = job.setdefault("metadata", {})
    labels = metadata.setdefault("labels", {})
    if args.queue:
        labels[c.QUEUE_NAME_LABEL] = args.queue
    if not labels.get(c.QUEUE_NAME_LABEL):
        raise CommandError(f"{args.filename}: metadata.labels[{c.QUEUE_NAME_LABEL}]: Required value: give --queue")
    for problem in queue_label_errors(job):
        raise CommandError(str(ManifestError(document, problem)))
    namespace = args.namespace or metadata.get("namespace") or "default"
    metadata["namespace"] = namespace
    client = await manager_client(args)
    report = Reporter(args.output)
    try:
        created = await client.create(Job, job, namespace=namespace, retry_unreachable_webhook=True)
        report.say(f"job/{created.name} submitted to queue {labels[c.QUEUE_NAME_LABEL]} in {namespace}")
        code, state = (await _follow(client, namespace, created, report)) if args.wait else (0, "Submitted")
        report.done(job=created.name, namespace=namespace, queue=labels[c.QUEUE_NAME_LABEL], state=state)
        return code
    finally:
        await client.close()


async def _follow(client: KubeClient, namespace: str, job: Job, report: Reporter) -> tuple[int, str]:
    """Print each state change until the Job finishes; exit 0 on success, 1 on failure."""
    last = ""
    while True:
        state = await read_manager(client, namespace)
        mine = [wl for wl in state["workloads"] if any(ref.uid == job.metadata.uid for ref in wl.metadata.owner_references or [])]
        if mine:
            view = views.job_views(mine, checks=state["checks"], local_queues=state["local_queues"])[0]
            line = f"{view.state}" + (f" on {view.cluster}" if view.cluster else "") + (f": {view.reason}" if view.reason else "")
            if line != last:
                report.say(f"{datetime.now(UTC).strftime('%H:%M:%S')} {line}")
                last = line
            if view.state in ("Succeeded", "Failed"):
                current = await client.get(Job, job.name, namespace=namespace)
                status = current.status
                if status is not None:
                    report.say(f"succeeded={status.succeeded or 0} failed={status.failed or 0}")
                return (0 if view.state == "Succeeded" else 1), view.state
        await asyncio.sleep(1.0)  # the polling interval of --wait


@run_async
async def cmd_cancel(args: argparse.Namespace) -> int:
    client = await manager_client(args)
    namespace = args.namespace or "default"
    try:
        if args.selector:
            listed = await client.list(Job, namespace=namespace, label_selector=args.selector)
            names = [job.name for job in listed.items]
        else:
            names = list(args.names)
        if not names:
            raise CommandError("nothing to cancel: name Jobs or give -l SELECTOR")
        report = Reporter(args.output)
        deleted, missing = [], []
        for name in names:
            if args.dry_run:
                report.say(f"job/{name} would be deleted (dry run)")
                continue
            try:
                await client.delete(Job, name, namespace=namespace, propagation="Background")
                report.say(f"job/{name} deleted")
                deleted.append(name)
            except NotFoundError:
                print(f"error: job/{name} not found in {namespace}", file=sys.stderr)
                missing.append(name)
        report.done(namespace=namespace, deleted=deleted, notFound=missing, dryRun=args.dry_run)
        return 1 if missing else 0
    finally:
        await client.close()


def _table(output: str) -> str:
    return "table" if output == "wide" else output


async def _show(text: str, args: argparse.Namespace) -> bool:
    """Print; with --watch clear the screen first and return True to go round again."""
    if getattr(args, "watch", False):
        sys.stdout.write("\x1b[H\x1b[2J" + text)
        sys.stdout.flush()
        await asyncio.sleep(args.interval)  # the refresh period of --watch
        return True
    sys.stdout.write(text)
    return False


def add_cluster_options(
    parser: argparse.ArgumentParser, *, namespaced: bool = False, all_namespaces: bool = True, watch: bool = True
) -> None:
    """The options every command that reads the fleet takes (kubectl's conventions)."""
    parser.add_argument("--kubeconfig", help="the manager's kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    parser.add_argument("--system-namespace", default="kfed-system", help="where the worker kubeconfig Secrets are")
    parser.add_argument("--origin", default=c.DEFAULT_MULTIKUEUE_ORIGIN, help="the manager's MultiKueue origin")
    if namespaced:
        parser.add_argument("-n", "--namespace")
        if all_namespaces:
            parser.add_argument("-A", "--all-namespaces", action="store_true")
    if watch:
        parser.add_argument("-w", "--watch", action="store_true", help="refresh in place")
        parser.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes with --watch")


def add_commands(commands: Any) -> None:
    status = commands.add_parser("status", help="the fleet on one screen: manager, workers, queues, jobs")
    add_cluster_options(status)
    status.set_defaults(func=cmd_status)

    clusters = commands.add_parser("clusters", help="worker clusters: connection, workloads and quota use")
    add_cluster_options(clusters)
    clusters.set_defaults(func=cmd_clusters)

    queues = commands.add_parser("queues", help="ClusterQueues and LocalQueues")
    add_cluster_options(queues, namespaced=True)
    queues.set_defaults(func=cmd_queues)

    for name in ("jobs", "workloads"):
        jobs = commands.add_parser(name, help="jobs and where they stand (squeue-like)")
        add_cluster_options(jobs, namespaced=True)
        jobs.add_argument("--queue", help="only this LocalQueue")
        jobs.add_argument("--state", choices=[s.lower() for s in views.STATES] + list(views.STATES), help="only this state")
        jobs.add_argument("--cluster", help="only jobs on this worker cluster")
        jobs.add_argument("-l", "--selector", help="label selector (k=v,k2=v2)")
        jobs.set_defaults(func=cmd_jobs)

    submit = commands.add_parser("submit", help="submit a batch/v1 Job to a queue")
    submit.add_argument("-f", "--filename", required=True, help="the Job manifest, or -")
    submit.add_argument("--queue", help="the LocalQueue (sets the kueue.x-k8s.io/queue-name label)")
    submit.add_argument("-n", "--namespace")
    submit.add_argument("--wait", action="store_true", help="follow the Job to the end")
    submit.add_argument("--kubeconfig")
    submit.add_argument("--context")
    submit.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    submit.set_defaults(func=cmd_submit)

    cancel = commands.add_parser("cancel", help="delete Jobs (and their Workloads, everywhere)")
    cancel.add_argument("names", nargs="*")
    cancel.add_argument("-l", "--selector", help="label selector")
    cancel.add_argument("-n", "--namespace")
    cancel.add_argument("--dry-run", action="store_true")
    cancel.add_argument("--kubeconfig")
    cancel.add_argument("--context")
    cancel.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    cancel.set_defaults(func=cmd_cancel)
