"""`kfed logs JOB`: the pod logs of a Job, read from whichever cluster runs it: the worker
MultiKueue admitted it on (through the manager's read API, which reads them from the worker for
a user who may read pods' logs in the namespace), or the manager itself when it runs there.
`pod/NAME` is a plain Pod, or a pod group by its name or any of its Pods' names (all its Pods)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from manager.api import kueue
from manager.api.core import Pod
from manager.cli import views
from manager.cli.fleet import (
    JOB_KINDS,
    READS,
    CommandError,
    ObjectName,
    add_cluster_options,
    job_names_help,
    manager_client,
    optional_list,
    parse_object_name,
    run_async,
)
from manager.engine.workload import is_admitted
from manager.kube.client import KubeClient
from manager.kube.errors import KubeError, NotFoundError

DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


def pick_container(pod: Pod, wanted: str | None) -> str:
    """The container to read: --container, else kubectl's default (its annotation, else the first)."""
    names = [container.name for container in pod.spec.containers]
    if wanted:
        if wanted not in names:
            raise CommandError(f'pod {pod.name} has no container "{wanted}": choose one of {", ".join(names)} with --container')
        return wanted
    preferred = (pod.metadata.annotations or {}).get(DEFAULT_CONTAINER_ANNOTATION)
    if preferred in names:
        return str(preferred)
    if not names:
        raise CommandError(f"pod {pod.name} has no containers")
    return names[0]


def where_it_runs(
    wl: kueue.Workload, checks: dict[str, kueue.AdmissionCheck] | None, name: str, namespace: str, *, kind: str = "job"
) -> str:
    """The worker that runs the job ("" for the manager itself), or an error naming what to do."""
    status = wl.status
    if status is not None and status.cluster_name:
        return status.cluster_name
    if is_admitted(wl):
        return ""
    view = views.job_views([wl], checks=checks, local_queues={})[0]
    raise CommandError(
        f"{kind}/{name} is not running on any cluster yet ({view.state}: {view.reason}); see `kfed explain {kind}/{name} -n {namespace}`"
    )


async def _find(manager: KubeClient, target: ObjectName, namespace: str) -> kueue.Workload:
    kind, shown = JOB_KINDS[target.kind], str(target)
    workloads = (await manager.list(kueue.Workload, namespace=namespace)).items
    wl = next((w for w in workloads if kind.adapter.names(w, target.name)), None)
    if wl is not None:
        return wl
    try:
        await manager.get(kind.model, target.name, namespace=namespace)
    except NotFoundError:
        raise CommandError(f'no {kind.kind} "{target.name}" in namespace {namespace} (see `kfed jobs -n {namespace}`)') from None
    raise CommandError(f"{shown} has no Workload: see `kfed explain {shown} -n {namespace}`")


def _pod(item: dict[str, Any], namespace: str) -> Pod:
    """A pod as the read API names it, enough to choose its container as kubectl would."""
    default = item.get("defaultContainer")
    return Pod.model_validate(
        {
            "metadata": {
                "name": item["name"],
                "namespace": namespace,
                "annotations": {DEFAULT_CONTAINER_ANNOTATION: default} if default else None,
            },
            "spec": {"containers": [{"name": name} for name in item.get("containers") or []]},
        }
    )


async def _print(lines: AsyncIterator[str], *, prefix: str) -> bool:
    try:
        async for line in lines:
            sys.stdout.write(f"{prefix}{line}\n")
            sys.stdout.flush()
        return True
    except KubeError as err:
        print(f"error: {err}", file=sys.stderr)
        return False


@dataclass
class LogSource:
    """Where a job's pods run, the pods there, and how to read one container's log."""

    where: str  # "worker NAME" or "the manager"
    pods: list[Pod]
    read: Callable[[Pod, str, bool], AsyncIterator[str]]  # (pod, container, follow) -> lines


async def log_source(manager: KubeClient, target: ObjectName, namespace: str, args: argparse.Namespace) -> LogSource:
    """The job's pods, on the worker MultiKueue admitted it on (read by the manager for the
    user, through kfed's read API) or on the manager itself. The CLI and the dashboard both ask."""
    name, shown = target.name, str(target)
    wl = await _find(manager, target, namespace)
    checks = await optional_list(manager, kueue.AdmissionCheck, args, leaves_out="the state of a job not running is told less exactly")
    cluster = where_it_runs(wl, {c.name: c for c in checks} if checks is not None else None, name, namespace, kind=target.kind)
    if cluster:
        # On a worker: the manager reads it there for us (kfed's read API).
        path = f"{READS}/namespaces/{namespace}/workloads/{wl.name}"
        try:
            answer = await manager.request("GET", f"{path}/pods", what=f"the pods of {shown} on worker {cluster}")
        except KubeError as err:
            raise CommandError(f"{shown} runs on worker {cluster}, but the manager cannot read its pods there: {err}") from None
        where = f"worker {cluster}"

        def remote(pod: Pod, container: str, follow: bool) -> AsyncIterator[str]:
            query = [("pod", pod.name), ("container", container)]
            return manager.stream_lines(f"{path}/log", query=query, follow=follow, what=f"logs of pod {pod.name} on {where}")

        return LogSource(where, [_pod(item, namespace) for item in answer.get("pods") or []], remote)
    query = JOB_KINDS[target.kind].adapter.pod_query(wl)
    listed = (
        await manager.list(Pod, namespace=namespace, label_selector=query.label_selector, field_selector=query.field_selector)
        if query is not None
        else None
    )
    pods = sorted(listed.items if listed is not None else [], key=lambda p: p.name)

    def local(pod: Pod, container: str, follow: bool) -> AsyncIterator[str]:
        return manager.pod_logs(pod.name, namespace=namespace, container=container, follow=follow)

    return LogSource("the manager", pods, local)


@run_async
async def cmd_logs(args: argparse.Namespace) -> int:
    target = parse_object_name(args.name, "job", allowed=tuple(JOB_KINDS))
    shown = str(target)
    namespace = args.namespace or "default"
    manager = await manager_client(args)
    try:
        source = await log_source(manager, target, namespace, args)
        pods, where = source.pods, source.where
        if not pods:
            raise CommandError(f"{shown} runs on {where} but has no pods there yet: try again in a moment")
        chosen = [(pod, pick_container(pod, args.container)) for pod in pods]
        print(f"==> {shown}: {len(pods)} pod(s) on {where}", file=sys.stderr, flush=True)
        several = len(pods) > 1
        calls: list[Any] = [
            _print(source.read(pod, container, args.follow), prefix=f"[pod/{pod.name}/{container}] " if several else "")
            for pod, container in chosen
        ]
        if args.follow:
            results = await asyncio.gather(*calls)  # every pod at once, lines as they come
        else:
            results = [await call for call in calls]  # one pod after the other
        return 0 if all(results) else 1
    finally:
        await manager.close()


def add_command(commands: Any) -> None:
    parser = commands.add_parser("logs", help="the pod logs of a job (a Job, a JobSet, a Pod or pod group), from whichever worker runs it")
    parser.add_argument("name", help=job_names_help())
    parser.add_argument("-f", "--follow", action="store_true", help="keep streaming new lines")
    parser.add_argument("-c", "--container", help="the container (default: the pod's default container, else its first)")
    add_cluster_options(parser, namespaced=True, all_namespaces=False, watch=False)
    parser.set_defaults(func=cmd_logs)
