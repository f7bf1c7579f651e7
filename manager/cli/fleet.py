"""`kfed status`, `kfed clusters`, `kfed queues`, `kfed jobs`, `kfed submit` and `kfed cancel`:
the fleet seen from the manager cluster, as the user (the workers' own numbers through the
manager's read API, never a worker's credential). Reading is here; what is shown is `views.py`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job, Namespace
from manager.api.manifest import ManifestError, object_documents, queue_label_errors
from manager.api.meta import Resource, utcnow
from manager.cli import views
from manager.engine.integrations.adapter import JobAdapter
from manager.engine.integrations.registry import ADAPTERS
from manager.engine.jobs import job_queue_name
from manager.engine.selectors import selector_matches
from manager.engine.workload import controller_owner, is_finished, is_preempted
from manager.kube.client import KubeClient, KubeconfigError
from manager.kube.errors import ForbiddenError, KubeError, NotFoundError

WORKER_TIMEOUT = 3.0  # seconds a worker gets to answer before it is shown as unreachable


class CommandError(Exception):
    """A one-line error for the user; the command exits 1."""


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
    check_context(data, args.context, path)
    try:
        client = await KubeClient.from_kubeconfig(data, name="kfed", context=args.context, where=str(path))
    except KubeconfigError as err:
        raise CommandError(str(err)) from None
    client.retry_attempts = 2
    return client


@contextlib.asynccontextmanager
async def manager_session(args: argparse.Namespace) -> AsyncIterator[KubeClient]:
    """The manager's client for one command, closed when the command ends."""
    client = await manager_client(args)
    try:
        yield client
    finally:
        await client.close()


def check_context(kubeconfig: Any, context: str | None, path: Path) -> None:
    """A context the kubeconfig does not have is named with the ones it has."""
    if not isinstance(kubeconfig, dict) or not isinstance(kubeconfig.get("contexts"), list):
        return
    names = [str(e.get("name")) for e in kubeconfig["contexts"] if isinstance(e, dict) and e.get("name")]
    chosen = context or kubeconfig.get("current-context")
    if chosen and names and chosen not in names:
        where = "--context" if context else "current-context"
        raise CommandError(
            f'kubeconfig {path} has no context "{chosen}" ({where}): use one of {", ".join(names)} '
            f"(list them with `kubectl config get-contexts --kubeconfig {path}`)"
        )


def table_width() -> int:
    """The terminal's width when printing to one; 80 columns into a pipe or a file."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size((views.TABLE_WIDTH, 24)).columns
    return views.TABLE_WIDTH


def present(
    args: argparse.Namespace, *, rows: list[dict[str, str]], records: list[dict[str, Any]], empty: str = "No resources found."
) -> Shown:
    """Records for -o json|yaml, else the table (whole values with -o wide); rows and records
    come in the same order."""
    if args.output in ("json", "yaml"):
        return Shown(views.dump(records, output=args.output))
    text = views.render(rows, width=table_width(), wide=args.output == "wide", empty=empty)
    return Shown(text, tuple(json.dumps(record, sort_keys=True) for record in records))


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
# Every read is the user's own, through the manager's apiserver: the manager's objects, Kueue's
# visibility API and kfed's read API (`reads.kfed.dev`), which the manager answers for the
# workers. No command but `register` touches a worker's credential.
READS = "/apis/reads.kfed.dev/v1alpha1"


def note(args: argparse.Namespace, line: str) -> None:
    """One line on stderr about something left out (a read the user may not make), said once
    per command even when --watch reads again."""
    said: set[str] = vars(args).setdefault("notes_said", set())
    if line not in said:
        said.add(line)
        sink: list[str] | None = vars(args).get("note_sink")  # the dashboard shows them on the page
        if sink is not None:
            sink.append(line)
        else:
            print(f"kfed: {line}", file=sys.stderr, flush=True)


async def optional_list(client: KubeClient, model: type[Any], args: argparse.Namespace, *, leaves_out: str) -> list[Any] | None:
    """The cluster-scoped objects of `model`, or None, with a note saying what `leaves_out`,
    where the user may not list them (a namespace reader)."""
    try:
        return list((await client.list(model)).items)
    except ForbiddenError:
        note(args, f"cannot list {model.KIND}s at cluster scope (forbidden): {leaves_out}")
        return None


async def read_manager(
    client: KubeClient, namespace: str | None, args: argparse.Namespace, *, cluster_queues: bool = True
) -> dict[str, Any]:
    """The Workloads and LocalQueues of `namespace` (every namespace for None), the
    AdmissionChecks, and the ClusterQueues if asked. Only the namespace is asked for what is
    namespaced; a cluster-scoped list the user may not make is left out with a note."""
    found = await asyncio.gather(
        client.list(kueue.Workload, namespace=namespace),
        client.list(kueue.LocalQueue, namespace=namespace),
        optional_list(client, kueue.AdmissionCheck, args, leaves_out="a job waiting for workers may show as QuotaReserved"),
        optional_list(client, kueue.ClusterQueue, args, leaves_out="ClusterQueues not shown") if cluster_queues else _nothing(),
        return_exceptions=True,  # every read ends before the first failure is raised
    )
    for failure in found:
        if isinstance(failure, BaseException):
            raise failure
    workloads, lqs, checks, cqs = found
    known = workloads.items
    if namespace is not None and any(is_preempted(w) for w in known):
        # A preemptor may sit in another namespace.
        everyone = await optional_list(client, kueue.Workload, args, leaves_out="a preemptor in another namespace is not named")
        known = everyone if everyone is not None else known
    return {
        "known": known,
        "workloads": workloads.items,
        "checks": {check.name: check for check in checks} if checks is not None else None,
        "local_queues": {lq.key: lq for lq in lqs.items},
        "cluster_queues": cqs,
    }


async def _nothing() -> None:
    return None


VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"


async def read_positions(
    client: KubeClient, workloads: Sequence[kueue.Workload], *, unavailable: list[str] | None = None
) -> dict[str, int]:
    """Each pending Workload's position in its ClusterQueue (from 1), from the manager's
    visibility API: the engine's own order, one home for it. Asked per LocalQueue, which a
    namespace reader may read; a queue the API cannot answer for (not served, or not readable
    by this user) gives no positions, and why goes to `unavailable`."""
    pending: dict[tuple[str, str], int] = {}
    for wl in workloads:
        if wl.spec.queue_name and not (wl.status and wl.status.admission) and not is_finished(wl):
            key = (wl.namespace, wl.spec.queue_name)
            pending[key] = pending.get(key, 0) + 1

    async def ask(namespace: str, queue: str, count: int) -> list[tuple[str, int]]:
        path = f"{VISIBILITY}/namespaces/{namespace}/localqueues/{queue}/pendingworkloads"
        try:
            answer = await client.request("GET", path, query=[("limit", str(count))], what=f"pending workloads of {namespace}/{queue}")
        except KubeError as err:
            if unavailable is not None:
                unavailable.append(f"{namespace}/{queue}: {err}")
            return []
        return [(f"{namespace}/{i['metadata']['name']}", int(i["positionInClusterQueue"]) + 1) for i in answer.get("items") or []]

    found = await asyncio.gather(*(ask(ns, queue, count) for (ns, queue), count in sorted(pending.items())))
    return dict(pair for pairs in found for pair in pairs)


async def read_workers(client: KubeClient, args: argparse.Namespace) -> list[views.WorkerView] | None:
    """Each worker's health and capacity, as the manager knows them (kfed's read API). Where the
    API cannot answer, the workers' MultiKueueClusters alone, with why; None when the user may
    read neither."""
    try:
        answer = await client.request("GET", f"{READS}/clusters", what="the workers' health (reads.kfed.dev clusters)")
        return [views.worker_view_from(item) for item in answer.get("items") or []]
    except KubeError as err:
        unread = f"not read through the manager: {err}"
    try:
        clusters = (await client.list(kueue.MultiKueueCluster)).items
    except ForbiddenError:
        note(args, f"workers not shown: {unread}")
        return None
    note(args, f"workers' use and copies {unread}")
    found = []
    for cluster in clusters:
        view = views.worker_view(cluster)
        if view.active == "True":
            view.error = unread  # an inactive worker's own condition says why, and stays shown
        found.append(view)
    return found


def context_namespace(args: argparse.Namespace) -> str:
    """The namespace of the kubeconfig's context (kubectl's default for -n), else default."""
    try:
        data = yaml.safe_load(kubeconfig_path(args).read_text())
    except (OSError, yaml.YAMLError):
        return "default"
    if not isinstance(data, dict):
        return "default"
    chosen = args.context or data.get("current-context")
    for entry in data.get("contexts") or []:
        if isinstance(entry, dict) and entry.get("name") == chosen and isinstance(entry.get("context"), dict):
            return str(entry["context"].get("namespace") or "default")
    return "default"


def _namespace(args: argparse.Namespace) -> str | None:
    return None if getattr(args, "all_namespaces", False) else (args.namespace or "default")


# --- commands ------------------------------------------------------------------------------------------
def _filter(rows: list[views.JobView], args: argparse.Namespace, labelled: set[tuple[str, str]] | None) -> list[views.JobView]:
    out = []
    for row in rows:
        if args.queue and row.queue != args.queue:
            continue
        if args.state and row.state.lower() != args.state.lower():
            continue
        if args.cluster and row.cluster != args.cluster:
            continue
        if labelled is not None and (row.namespace, row.name) not in labelled:
            continue
        out.append(row)
    return out


async def _labelled_jobs(client: KubeClient, args: argparse.Namespace, workloads: list[kueue.Workload]) -> set[tuple[str, str]] | None:
    """The (namespace, name) of the Jobs `-l` selects: it filters by the Job's labels, which the
    user wrote, not the Workload's."""
    if not args.selector:
        return None
    jobs = await client.list(Job, namespace=_namespace(args), label_selector=args.selector)
    selected = {(job.namespace, job.name) for job in jobs.items}
    owners = [(wl.namespace, controller_owner(wl)) for wl in workloads]
    owned_by_job = {(namespace, owner.name) for namespace, owner in owners if owner is not None and owner.kind == "Job"}
    return selected & owned_by_job


@dataclass(frozen=True)
class Shown:
    """What a listing command prints, and what --watch compares to know it changed: one key per
    table row (its record, without ages), or the whole text."""

    text: str
    keys: tuple[str, ...] | None = None

    def identity(self) -> tuple[str, ...]:
        return self.keys if self.keys is not None else (self.text,)


async def _refresh(args: argparse.Namespace, produce: Callable[[KubeClient], Coroutine[Any, Any, Shown]]) -> int:
    """Print what `produce` makes from the manager; with --watch, again whenever it changes."""
    async with manager_session(args) as client:
        last: Shown | None = None
        while True:
            shown = await produce(client)
            if last is None or shown.identity() != last.identity():
                _show(shown, last, args)
                last = shown
            if not getattr(args, "watch", False):
                return 0
            await asyncio.sleep(args.interval)  # --watch reads the manager again every --interval


def _show(shown: Shown, previous: Shown | None, args: argparse.Namespace) -> None:
    """With --watch, a terminal redraws the whole screen; a pipe gets, like `kubectl get -w`,
    the table once and then each row that changed (the whole table again if its columns did)."""
    lines, before = shown.text.splitlines(), previous.text.splitlines() if previous else []
    if previous is None or not getattr(args, "watch", False):
        sys.stdout.write(shown.text)
    elif sys.stdout.isatty():
        sys.stdout.write("\x1b[H\x1b[2J" + shown.text)
    elif shown.keys is None or previous.keys is None or lines[:1] != before[:1] or len(lines) != len(shown.keys) + 1:
        sys.stdout.write(shown.text)
    else:
        seen = set(previous.keys)
        sys.stdout.write("".join(line + "\n" for line, key in zip(lines[1:], shown.keys, strict=True) if key not in seen))
    sys.stdout.flush()


@run_async
async def cmd_jobs(args: argparse.Namespace) -> int:
    async def produce(client: KubeClient) -> Shown:
        state = await read_manager(client, _namespace(args), args, cluster_queues=False)
        unavailable: list[str] = []
        positions = await read_positions(client, state["workloads"], unavailable=unavailable)
        if unavailable:
            note(args, f"queue positions unavailable for {unavailable[0]}")
        rows = views.job_views(
            state["workloads"], checks=state["checks"], local_queues=state["local_queues"], known=state["known"], positions=positions
        )
        rows = _filter(rows, args, await _labelled_jobs(client, args, state["workloads"]))
        table = views.job_rows(rows, now=utcnow(), wide=args.output == "wide", all_namespaces=_namespace(args) is None)
        return present(args, rows=table, records=views.job_records(rows))

    return await _refresh(args, produce)


@run_async
async def cmd_queues(args: argparse.Namespace) -> int:
    async def produce(client: KubeClient) -> Shown:
        state = await read_manager(client, _namespace(args), args)
        lqs, cqs = state["local_queues"].values(), state["cluster_queues"]
        if args.output in ("json", "yaml"):
            return Shown(views.dump(views.queue_records(cqs or [], lqs), output=args.output))
        return Shown(views.queues_text(cqs, lqs, width=table_width(), wide=args.output == "wide"))

    return await _refresh(args, produce)


@run_async
async def cmd_clusters(args: argparse.Namespace) -> int:
    async def produce(client: KubeClient) -> Shown:
        workers = await read_workers(client, args) or []
        return present(
            args,
            rows=views.cluster_rows(workers, now=utcnow(), wide=args.output == "wide"),
            records=views.cluster_records(workers),
            empty="No worker clusters registered.",
        )

    return await _refresh(args, produce)


async def _fleet_state(client: KubeClient, args: argparse.Namespace) -> dict[str, Any]:
    """`kfed status`'s reads: every namespace's jobs, or, for a user who may not list Workloads
    at cluster scope, those of the kubeconfig context's namespace, with a note."""
    try:
        return await read_manager(client, None, args)
    except ForbiddenError:
        namespace = context_namespace(args)
        note(args, f"cannot list Workloads at cluster scope (forbidden): the jobs of namespace {namespace} only")
        return await read_manager(client, namespace, args)


@run_async
async def cmd_status(args: argparse.Namespace) -> int:
    async def produce(client: KubeClient) -> Shown:
        state = await _fleet_state(client, args)
        workers = await read_workers(client, args)
        jobs = views.job_views(state["workloads"], checks=state["checks"], local_queues=state["local_queues"])
        manager = f"{client.api.configuration.host} (reachable)"
        cqs = state["cluster_queues"]
        data = views.status_data(manager=manager, workers=workers or [], cluster_queues=cqs or [], jobs=jobs)
        if args.output in ("json", "yaml"):
            return Shown(views.dump(data, output=args.output))
        text = views.status_text(
            manager=manager, workers=workers, cluster_queues=cqs, jobs=jobs, now=utcnow(), width=table_width(), wide=args.output == "wide"
        )
        return Shown(text, (json.dumps(data, sort_keys=True),))  # --watch redraws when something but the ages changed

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
    try:
        queue = job_queue_name(Job.model_validate(job))
    except ValueError as err:
        raise CommandError(f"{args.filename}: not a valid Job: {str(err).splitlines()[0]}") from None
    if not queue:
        raise CommandError(
            f"{args.filename}: metadata.labels[{c.QUEUE_NAME_LABEL}]: Required value: "
            f"give --queue NAME, or add the label {c.QUEUE_NAME_LABEL}: NAME (see `kfed queues` for the LocalQueues)"
        )
    for problem in queue_label_errors(job):
        raise CommandError(str(ManifestError(document, problem)))
    namespace = args.namespace or metadata.get("namespace") or "default"
    metadata["namespace"] = namespace
    client = await manager_client(args)
    report = Reporter(args.output)
    try:
        await check_queue(client, namespace, queue)
        created = await client.create(Job, job, namespace=namespace, retry_unreachable_webhook=True)
        report.say(f"job/{created.name} submitted to queue {queue} in {namespace}")
        code, state = (await _follow(client, namespace, created, report, args)) if args.wait else (0, "Submitted")
        report.done(job=created.name, namespace=namespace, queue=queue, state=state)
        return code
    finally:
        await client.close()


def missing_local_queue(namespace: str, queue: str) -> str:
    return f'LocalQueue "{queue}" does not exist in namespace {namespace}: create it, or pass --queue with an existing one'


def missing_cluster_queue(namespace: str, queue: str, cluster_queue: str) -> str:
    return (
        f'LocalQueue {namespace}/{queue} points to ClusterQueue "{cluster_queue}", which does not exist: '
        "create it, or fix spec.clusterQueue"
    )


def namespace_not_selected(namespace: str, cluster_queue: str) -> str:
    return (
        f"ClusterQueue {cluster_queue} does not select namespace {namespace} (spec.namespaceSelector): "
        "label the namespace to match it, or widen the selector"
    )


def queue_problem(
    namespace: str,
    queue: str,
    *,
    local_queue: kueue.LocalQueue | None,
    others: list[str],
    cluster_queue: kueue.ClusterQueue | None,
    namespace_labels: dict[str, str] | None,
) -> str:
    """Why a Job sent to `queue` in `namespace` would never be admitted, naming the fix; or ""."""
    if local_queue is None:
        known = f"; LocalQueues in {namespace}: {', '.join(sorted(others))}" if others else f"; {namespace} has none"
        return missing_local_queue(namespace, queue) + known
    cq_name = local_queue.spec.cluster_queue or ""
    if cluster_queue is None:
        return missing_cluster_queue(namespace, queue, cq_name)
    if namespace_labels is not None and not selector_matches(cluster_queue.spec.namespace_selector, namespace_labels):
        return namespace_not_selected(namespace, cq_name)
    return ""


async def check_queue(client: KubeClient, namespace: str, queue: str) -> None:
    """Refuse, before creating anything, a Job that would wait forever for a queue mistake."""
    lqs = (await client.list(kueue.LocalQueue, namespace=namespace)).items
    lq = next((q for q in lqs if q.name == queue), None)
    cq = None
    labels: dict[str, str] | None = None
    if lq is not None:
        try:
            cq = await client.get(kueue.ClusterQueue, lq.spec.cluster_queue or "")
        except NotFoundError:
            cq = None
        try:
            labels = (await client.get(Namespace, namespace)).metadata.labels or {}
        except NotFoundError:
            raise CommandError(f"namespace {namespace} does not exist: create it (kubectl create namespace {namespace})") from None
    problem = queue_problem(namespace, queue, local_queue=lq, others=[q.name for q in lqs], cluster_queue=cq, namespace_labels=labels)
    if problem:
        raise CommandError(problem)


async def _follow(client: KubeClient, namespace: str, job: Job, report: Reporter, args: argparse.Namespace) -> tuple[int, str]:
    """Print each state change until the Job finishes; exit 0 on success, 1 on failure."""
    last = ""
    while True:
        state = await read_manager(client, namespace, args, cluster_queues=False)
        mine = [wl for wl in state["workloads"] if any(ref.uid == job.metadata.uid for ref in wl.metadata.owner_references or [])]
        if mine:
            view = views.job_views(mine, checks=state["checks"], local_queues=state["local_queues"])[0]
            line = f"{view.state}" + (f" on {view.cluster}" if view.cluster else "") + (f": {view.reason}" if view.reason else "")
            if line != last:
                report.say(f"{utcnow().strftime('%H:%M:%S')} {line}")
                last = line
            if view.state in ("Succeeded", "Failed"):
                current = await client.get(Job, job.name, namespace=namespace)
                status = current.status
                if status is not None:
                    report.say(f"succeeded={status.succeeded or 0} failed={status.failed or 0}")
                return (0 if view.state == "Succeeded" else 1), view.state
        await asyncio.sleep(1.0)  # the polling interval of --wait


async def _selected(client: KubeClient, namespace: str, selector: str) -> list[ObjectName]:
    """The jobs of every kind that `-l` selects; a kind whose CRD the manager lacks has none."""
    names = []
    for key, kind in JOB_KINDS.items():
        try:
            listed = await client.list(kind.model, namespace=namespace, label_selector=selector)
        except NotFoundError:
            continue
        names += [ObjectName(key, obj.name) for obj in listed.items]
    return names


@run_async
async def cmd_cancel(args: argparse.Namespace) -> int:
    client = await manager_client(args)
    namespace = args.namespace or "default"
    where = f"{_cluster_name(args)} ({client.api.configuration.host})"
    try:
        if args.selector:
            targets = await _selected(client, namespace, args.selector)
        else:
            targets = [parse_object_name(name, "job", allowed=tuple(JOB_KINDS)) for name in args.names]
        if not targets:
            raise CommandError(f"nothing to cancel: name them ({job_names_help()}) or give -l SELECTOR")
        report = Reporter(args.output)
        deleted, missing = [], []
        for target in targets:
            kind, shown = JOB_KINDS[target.kind], str(target)
            if args.dry_run:
                try:
                    job = await client.get(kind.model, target.name, namespace=namespace)
                except NotFoundError:
                    print(f"error: {shown} not found in {namespace}", file=sys.stderr)
                    missing.append(shown)
                    continue
                workloads = [
                    wl.name
                    for wl in (await client.list(kueue.Workload, namespace=namespace)).items
                    if any(ref.uid == job.metadata.uid for ref in wl.metadata.owner_references or [])
                ]
                follows = f" and workload/{', workload/'.join(workloads)}" if workloads else ""
                report.say(f"{shown} in namespace {namespace} on {where} would be deleted{follows} (dry run: nothing changed)")
                deleted.append(shown)
                continue
            try:
                await client.delete(kind.model, target.name, namespace=namespace, propagation="Background")
                report.say(f"{shown} deleted")
                deleted.append(shown)
            except NotFoundError:
                print(f"error: {shown} not found in {namespace}", file=sys.stderr)
                missing.append(shown)
        report.done(namespace=namespace, cluster=where, deleted=deleted, notFound=missing, dryRun=args.dry_run)
        return 1 if missing else 0
    finally:
        await client.close()


def _cluster_name(args: argparse.Namespace) -> str:
    """The kubeconfig context a command acts on, as `kubectl config current-context` names it."""
    if args.context:
        return f"context {args.context}"
    try:
        data = yaml.safe_load(kubeconfig_path(args).read_text())
    except (OSError, yaml.YAMLError):
        return "the manager"
    current = data.get("current-context") if isinstance(data, dict) else None
    return f"context {current}" if current else "the manager"


@dataclass(frozen=True)
class ObjectName:
    kind: str  # job, jobset or workload; "" for a bare name
    name: str

    def __str__(self) -> str:
        """kubectl's `kind/NAME`."""
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class JobKind:
    """A kind of job the CLI acts on: its Kubernetes kind, model, and its adapter (which says
    which Workload `kind/NAME` names and where that job's pods are)."""

    kind: str
    model: type[Resource]
    adapter: JobAdapter[Any]


# The job kinds of the CLI's `job/` and `jobset/` names, as their adapters declare them: one
# home for what each command needs, and a new adapter is a new CLI kind.
JOB_KINDS = {adapter.cli_name: JobKind(adapter.kind, adapter.model, adapter) for adapter in ADAPTERS}
WORKLOAD_NAMES = ("workload", "workloads", "wl", "workload.kueue.x-k8s.io", "workloads.kueue.x-k8s.io")
OBJECT_KINDS = {
    **{name: adapter.cli_name for adapter in ADAPTERS for name in adapter.cli_names()},
    **dict.fromkeys(WORKLOAD_NAMES, "workload"),
}


def job_names_help() -> str:
    """`NAME or job/NAME (a Job), jobset/NAME (a JobSet)`, for every kind the adapters declare."""
    return "NAME or " + ", ".join(f"{name}/NAME (a {kind.kind})" for name, kind in JOB_KINDS.items())


def parse_object_name(text: str, default: str = "", *, allowed: tuple[str, ...] = ()) -> ObjectName:
    """kubectl's naming: `job/NAME`, `jobset/NAME`, `workload/NAME`, or a bare NAME (of kind
    `default`). With `allowed`, only those kinds are accepted."""
    kind, slash, name = text.partition("/")
    if not slash:
        return ObjectName(default, text)
    if kind.lower() not in OBJECT_KINDS or not name or "/" in name:
        forms = ", ".join(f"{name}/NAME" for name in JOB_KINDS)
        raise CommandError(f'"{text}": expected NAME, {forms} or workload/NAME')
    resolved = OBJECT_KINDS[kind.lower()]
    accepted = allowed or ((default,) if default else ())
    if accepted and resolved not in accepted:
        forms = " or ".join(f"{k}/NAME" for k in accepted)
        raise CommandError(
            f'"{text}": this command takes {" and ".join(JOB_KINDS[k].kind + "s" for k in accepted)}: name them NAME or {forms}'
        )
    return ObjectName(resolved, name)


def add_cluster_options(
    parser: argparse.ArgumentParser, *, namespaced: bool = False, all_namespaces: bool = True, watch: bool = True
) -> None:
    """The options every command that reads the fleet takes (kubectl's conventions)."""
    parser.add_argument("--kubeconfig", help="the manager's kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    # Once where the CLI read the workers' kubeconfigs; it reads none now. Still taken.
    parser.add_argument("--system-namespace", default="kfed-system", help=argparse.SUPPRESS)
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
        jobs = commands.add_parser(name, help="jobs and where they stand (squeue-like)" if name == "jobs" else "the same as jobs")
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

    cancel = commands.add_parser("cancel", help="delete jobs of any kind (and their Workloads, everywhere)")
    cancel.add_argument("names", nargs="*", help=job_names_help())
    cancel.add_argument("-l", "--selector", help="label selector")
    cancel.add_argument("-n", "--namespace")
    cancel.add_argument("--dry-run", action="store_true")
    cancel.add_argument("--kubeconfig")
    cancel.add_argument("--context")
    cancel.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table")
    cancel.set_defaults(func=cmd_cancel)
