"""The dashboard's reads and actions: the CLI's own, as the user, through the manager's apiserver
(its objects, Kueue's visibility API, kfed's read API). What the user may not read is left out
with a note, as the CLI leaves it out; what they may not do, the apiserver refuses."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from manager.api import kueue
from manager.api.core import Event, Job
from manager.cli import explain, logs, views
from manager.cli.fleet import (
    JOB_KINDS,
    CommandError,
    ObjectName,
    optional_list,
    read_manager,
    read_positions,
    read_workers,
)
from manager.kube.client import KubeClient
from manager.kube.errors import ForbiddenError, KubeError, NotFoundError

STOP_POLICIES = ("None", "Hold", "HoldAndDrain")


@dataclass
class Session:
    """One user's view of the manager: their own client (in the cluster, one that checks each
    call with a SubjectAccessReview for them) and the namespace shown when they may not list
    every namespace."""

    client: KubeClient
    default_namespace: str = "default"
    user: str = ""  # who, for the page's header ("" for the kubeconfig's user)

    def args(self) -> Reads:
        return Reads(argparse.Namespace(note_sink=[], kubeconfig=None, context=None))


@dataclass
class Reads:
    """The CLI's arguments for one page's reads; its notes say what was left out."""

    args: argparse.Namespace

    @property
    def notes(self) -> list[str]:
        found: list[str] = self.args.note_sink
        return found


async def readable_namespaces(session: Session, namespaces: Iterable[str]) -> set[str]:
    """Those of `namespaces` where the session's user may list Workloads, as the apiserver
    decides it for that user (in the cluster, their SubjectAccessReview; on a workstation, a
    SelfSubjectAccessReview with their own credentials). A review that fails counts as no."""
    found = set()
    for namespace in sorted(set(namespaces)):
        attributes = {"group": kueue.Workload.GROUP, "version": kueue.Workload.VERSION, "resource": kueue.Workload.PLURAL}
        try:
            allowed = await session.client.may({**attributes, "verb": "list", "namespace": namespace})
        except KubeError:
            allowed = False
        if allowed:
            found.add(namespace)
    return found


# --- jobs ----------------------------------------------------------------------------------------------
async def read_jobs(session: Session, reads: Reads, namespace: str) -> list[views.JobView]:
    """Every job of `namespace` ("" for all the user may list: every namespace, else the
    default one, with a note), with queue positions."""
    client, args = session.client, reads.args
    if namespace:
        state = await read_manager(client, namespace, args, cluster_queues=False)
    else:
        try:
            state = await read_manager(client, None, args, cluster_queues=False)
        except ForbiddenError:
            reads.notes.append(
                f"cannot list Workloads at cluster scope (forbidden): the jobs of namespace {session.default_namespace} only"
            )
            state = await read_manager(client, session.default_namespace, args, cluster_queues=False)
    unavailable: list[str] = []
    positions = await read_positions(client, state["workloads"], unavailable=unavailable)
    if unavailable:
        reads.notes.append(f"queue positions unavailable for {unavailable[0]}")
    return views.job_views(
        state["workloads"], checks=state["checks"], local_queues=state["local_queues"], known=state["known"], positions=positions
    )


# --- fleet and queues ----------------------------------------------------------------------------------
async def read_fleet(session: Session, reads: Reads) -> tuple[list[views.WorkerView] | None, list[kueue.ClusterQueue] | None]:
    """The workers (kfed's read API) and the manager's own ClusterQueues."""
    workers, cqs = await asyncio.gather(
        read_workers(session.client, reads.args),
        optional_list(session.client, kueue.ClusterQueue, reads.args, leaves_out="the manager's quota not shown"),
    )
    return workers, cqs


@dataclass
class QueuesRead:
    cluster_queues: list[kueue.ClusterQueue] | None
    cohorts: list[kueue.Cohort]
    local_queues: list[kueue.LocalQueue]


async def read_queues(session: Session, reads: Reads) -> QueuesRead:
    client, args = session.client, reads.args
    cqs = await optional_list(client, kueue.ClusterQueue, args, leaves_out="ClusterQueues not shown")
    cohorts: list[kueue.Cohort] = []
    if cqs is not None:
        try:
            cohorts = await optional_list(client, kueue.Cohort, args, leaves_out="the cohorts' parents not shown") or []
        except NotFoundError:  # an apiserver without the Cohort CRD
            cohorts = []
    try:
        lqs = (await client.list(kueue.LocalQueue)).items
    except ForbiddenError:
        reads.notes.append(f"cannot list LocalQueues at cluster scope (forbidden): those of namespace {session.default_namespace} only")
        lqs = (await client.list(kueue.LocalQueue, namespace=session.default_namespace)).items
    return QueuesRead(cqs, cohorts, lqs)


async def set_stop_policy(session: Session, name: str, policy: str) -> kueue.ClusterQueue:
    """Hold (or release: `None`) a ClusterQueue, as the user: the apiserver decides."""
    if policy not in STOP_POLICIES:
        raise CommandError(f'stopPolicy "{policy}": expected one of {", ".join(STOP_POLICIES)}')
    return await session.client.patch(kueue.ClusterQueue, name, {"spec": {"stopPolicy": policy}})


# --- a job ---------------------------------------------------------------------------------------------
@dataclass
class JobRead:
    """What a job's page shows: `explain`'s findings, its Workload and Job, their Events, and
    its pods where it runs (or why they cannot be read)."""

    found: explain.Explanation
    workload: kueue.Workload
    job: Job | None
    events: list[Event]
    logs: logs.LogSource | None = None
    logs_error: str = ""
    containers: list[str] = field(default_factory=list)


def target_of(kind: str, name: str) -> ObjectName:
    """A job's page names it as the CLI does: job/NAME, jobset/NAME, workload/NAME."""
    if kind != "workload" and kind not in JOB_KINDS:
        raise CommandError(f'"{kind}/{name}": expected {", ".join(f"{k}/NAME" for k in JOB_KINDS)} or workload/NAME')
    return ObjectName(kind, name)


async def read_events(client: KubeClient, reads: Reads, namespace: str, names: list[str]) -> list[Event]:
    found: list[Event] = []
    for name in dict.fromkeys(names):
        try:
            found += (await client.list(Event, namespace=namespace, field_selector=f"involvedObject.name={name}")).items
        except ForbiddenError:
            reads.notes.append(f"cannot list Events in {namespace} (forbidden): the timeline shows conditions only")
            return found
    return found


async def read_job(session: Session, reads: Reads, namespace: str, target: ObjectName) -> JobRead | str:
    client = session.client
    gathered = await explain.gather(client, reads.args, namespace, target)
    if isinstance(gathered, str):
        return gathered
    found, wl = gathered
    job: Job | None = None
    if found.view.kind == "Job":
        try:
            job = await client.get(Job, found.view.name, namespace=namespace)
        except (NotFoundError, ForbiddenError):
            job = None
    events = await read_events(client, reads, namespace, [found.view.name, wl.name])
    read = JobRead(found, wl, job, events)
    kind = found.view.kind.lower()
    if kind in JOB_KINDS:
        try:
            read.logs = await logs.log_source(client, ObjectName(kind, found.view.name), namespace, reads.args)
            read.containers = sorted({c.name for pod in read.logs.pods for c in pod.spec.containers})
        except (CommandError, KubeError) as err:
            read.logs_error = str(err)
    return read


LOG_ATTRIBUTES = {"group": "", "version": "v1", "resource": "pods", "subresource": "log", "verb": "get"}


async def may_read_logs(session: Session, namespace: str, target: ObjectName) -> None:
    """Raise ForbiddenError when the user may not read pods' logs in `namespace` (the right any
    log of a job needs, on the manager or through kfed's read API on a worker), as the apiserver
    decides for them: a log stream is refused before it starts, not with its one line. A review
    that cannot be made refuses nothing: the log's own read then says why."""
    try:
        allowed = await session.client.may({**LOG_ATTRIBUTES, "namespace": namespace})
    except KubeError:
        return
    if not allowed:
        who = f'User "{session.user}"' if session.user else "You"
        raise ForbiddenError(
            f'{who} cannot get resource "pods/log" in API group "" in the namespace "{namespace}": the logs of {target} are not shown',
            status=403,
            reason="Forbidden",
        )


async def log_lines(source: logs.LogSource, container: str | None) -> AsyncIterator[str]:
    """Every pod's log lines as they come, `[pod/NAME/CONTAINER] ` first when there are several
    (as `kfed logs -f` prints them); a pod's read error ends its part with one line."""
    chosen = [(pod, logs.pick_container(pod, container)) for pod in source.pods]
    several = len(chosen) > 1
    queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=1000)

    async def one(pod: Any, name: str) -> None:
        prefix = f"[pod/{pod.name}/{name}] " if several else ""
        try:
            async for line in source.read(pod, name, True):
                await queue.put(prefix + line)
        except KubeError as err:
            await queue.put(f"{prefix}error: {err}")
        finally:
            await queue.put(None)

    tasks = [asyncio.create_task(one(pod, name)) for pod, name in chosen]
    try:
        open_streams = len(tasks)
        while open_streams:
            line = await queue.get()
            if line is None:
                open_streams -= 1
            else:
                yield line
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def cancel(session: Session, namespace: str, target: ObjectName) -> str:
    """Delete the job, as `kfed cancel` does: its Workload and remote copies follow."""
    kind = JOB_KINDS.get(target.kind)
    if kind is None:
        raise CommandError(f"{target}: only jobs can be cancelled ({', '.join(f'{k}/NAME' for k in JOB_KINDS)})")
    await session.client.delete(kind.model, target.name, namespace=namespace, propagation="Background")
    return f"{target} deleted"
