"""`kfed explain JOB|WORKLOAD`: why a job is where it is, on the manager and on each worker,
ending with one line a person can act on. The verdicts are pure (`explain`); `cmd_explain`
reads what they need."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job
from manager.api.meta import find_condition
from manager.cli import views
from manager.cli.fleet import (
    JOB_KINDS,
    READS,
    ObjectName,
    add_cluster_options,
    job_names_help,
    manager_client,
    missing_cluster_queue,
    missing_local_queue,
    namespace_not_selected,
    note,
    optional_list,
    parse_object_name,
    read_positions,
    run_async,
)
from manager.engine.jobs import job_queue_name
from manager.engine.preemption import satisfies_policy
from manager.engine.requests import RequestError
from manager.engine.workload import (
    MISSING_CLUSTER_QUEUE,
    MISSING_LOCAL_QUEUE,
    MISSING_NAMESPACE,
    NAMESPACE_NOT_SELECTED,
    WorkloadInfo,
    build_info,
    has_quota_reservation,
    is_finished,
    is_preempted,
    misconfiguration,
    workload_priority,
)
from manager.kube.client import KubeClient
from manager.kube.errors import ForbiddenError, KubeError, NotFoundError
from manager.multikueue.rules.capacity import NEVER_FITS, workers_lacking_the_local_queue
from manager.multikueue.rules.reads import Remote, Verdict, verdicts_from, worker_verdict

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# The engine's words (as Kueue's flavor assigner) for a resource no resource group of the
# ClusterQueue covers.
_UNCOVERED = re.compile(r"resource (\S+) unavailable in ClusterQueue")


def uncovered_resources(reason: str) -> list[str]:
    """The resources a pending Workload asks for that its ClusterQueue does not cover at all."""
    return list(dict.fromkeys(_UNCOVERED.findall(reason)))


def next_step(
    state: str,
    *,
    reason: str,
    cluster_queue: str,
    cq: kueue.ClusterQueue | None,
    namespace: str,
    queue: str,
    reachable: bool,
    verdicts: Mapping[str, Verdict],
    winner: str,
) -> str:
    """The one line to act on."""
    if state == "Succeeded":
        return "Nothing to do: it finished successfully."
    if state == "Failed":
        return f"It failed: {reason or 'see the Job'}. Fix the cause and submit it again."
    if state == "Running":
        return f"Nothing to do: it runs on {winner}." if winner else "Nothing to do: it runs."
    if state in ("Evicted", "Preempted"):
        return f"It was {state.lower()} and will be queued again; nothing to do unless it keeps happening."
    if state == "Pending" and reason.startswith(NEVER_FITS):  # MultiKueue's refusal names workers' queues
        lacking = workers_lacking_the_local_queue(reason)
        if lacking:
            return f"Create LocalQueue {queue} in namespace {namespace} on {', '.join(lacking)}, as on the manager."
        return "No worker could ever admit it: lower its requests, or raise a worker's quota to what it needs."
    # The engine's Misconfigured messages, each with its fix.
    problem = misconfiguration(reason) if state == "Pending" else ""
    if problem == MISSING_LOCAL_QUEUE:
        return f"{missing_local_queue(namespace, queue)}."
    if problem == MISSING_CLUSTER_QUEUE:
        return f"{missing_cluster_queue(namespace, queue, cluster_queue)}."
    if problem == NAMESPACE_NOT_SELECTED:
        return f"{namespace_not_selected(namespace, cluster_queue)}."
    if cq is not None and (cq.spec.stop_policy or "None") != "None":
        return f"ClusterQueue {cluster_queue} is stopped (stopPolicy {cq.spec.stop_policy}); set stopPolicy: None to let jobs in."
    active = find_condition(cq.status.conditions if cq and cq.status else None, c.ACTIVE) if cq else None
    if active is not None and active.status == "False":
        return f"ClusterQueue {cluster_queue} is inactive ({active.reason}): {active.message}"
    uncovered = uncovered_resources(reason) if state == "Pending" else []
    if uncovered:
        return (
            f"ClusterQueue {cluster_queue} has no quota for {', '.join(uncovered)}, so no finish will help: add "
            f"{'them' if len(uncovered) > 1 else 'it'} to a resourceGroup's coveredResources, with a nominalQuota in a flavor, "
            "or remove the request from the job."
        )
    if state == "Pending" and ("maximum capacity" in reason or "exceeds" in reason.lower()):
        return f"It asks for more than ClusterQueue {cluster_queue} can ever give: lower its requests or raise the queue's nominalQuota."
    if state == "Pending":
        return f"It waits for quota in ClusterQueue {cluster_queue}: running jobs must finish first, or raise its quota."
    missing_queue = [name for name, verdict in verdicts.items() if verdict.problem == MISSING_LOCAL_QUEUE]
    if missing_queue:
        return f"Create LocalQueue {queue} in namespace {namespace} on {', '.join(missing_queue)}, as on the manager."
    missing_ns = [name for name, verdict in verdicts.items() if verdict.problem == MISSING_NAMESPACE]
    if missing_ns:
        return f"Create namespace {namespace} and LocalQueue {queue} on {', '.join(missing_ns)}."
    if not reachable:
        return "No worker is reachable: see `kfed clusters` and fix the connections."
    return "Every reachable worker is busy: it runs when one of them has room (or add quota on a worker)."


def _borrowing(cq: kueue.ClusterQueue) -> bool:
    """Its status shows quota borrowed from the cohort (what reclaimWithinCohort takes back)."""
    for flavor in (cq.status.flavors_reservation if cq.status else None) or []:
        if any(usage.borrowed is not None and usage.borrowed.milli > 0 for usage in flavor.resources or []):
            return True
    return False


def _info(wl: kueue.Workload) -> WorkloadInfo | None:
    """The engine's view of a Workload, so that its preemption rule decides (None: unreadable)."""
    try:
        return build_info(wl, priority=workload_priority(wl), created=wl.metadata.creation_timestamp or EPOCH)
    except RequestError:
        return None


@dataclass(frozen=True, order=True)
class Candidate:
    """A workload the job could preempt, in Kueue's candidate order (lowest priority first)."""

    priority: int
    workload: str  # namespace/name
    borrowing_in: str = ""  # the cohort's ClusterQueue it borrows in; "" when in the job's own queue

    def text(self) -> str:
        where = f", borrowing in {self.borrowing_in}" if self.borrowing_in else ""
        return f"{self.workload} (priority {self.priority}{where})"


def preemption_candidates(
    wl: kueue.Workload,
    cq: kueue.ClusterQueue | None,
    others: Sequence[kueue.Workload],
    cluster_queues: Mapping[str, kueue.ClusterQueue] | None = None,
) -> list[Candidate]:
    """Workloads this one could preempt, lowest priority first as Kueue's candidate order starts:
    in its own ClusterQueue (withinClusterQueue), and in the other ClusterQueues of its cohort
    that are borrowing (reclaimWithinCohort). A hint from status, not the scheduler's decision."""
    if cq is None:
        return []
    preemption = cq.spec.preemption
    within = (preemption.within_cluster_queue if preemption else None) or "Never"
    reclaim = (preemption.reclaim_within_cohort if preemption else None) or "Never"
    borrowing = {
        name
        for name, other_cq in (cluster_queues or {}).items()
        if name != cq.name and cq.spec.cohort_name and other_cq.spec.cohort_name == cq.spec.cohort_name and _borrowing(other_cq)
    }
    me = _info(wl)
    if me is None:
        return []
    found = []
    for other in others:
        admission = other.status.admission if other.status else None
        if other.key == wl.key or admission is None:
            continue
        if is_finished(other):
            continue
        them = _info(other)
        if them is None:
            continue
        if admission.cluster_queue == cq.name and satisfies_policy(me, them, within):
            found.append(Candidate(them.priority, other.key))
        elif admission.cluster_queue in borrowing and satisfies_policy(me, them, reclaim):
            found.append(Candidate(them.priority, other.key, admission.cluster_queue))
    return sorted(found)


@dataclass(frozen=True)
class Explanation:
    """What `kfed explain` found: the text and the JSON are both rendered from this."""

    view: views.JobView
    cluster: str  # the worker that runs it
    manager: list[str]  # the manager's findings, one per line
    workers: dict[str, Verdict]  # worker -> its verdict, by name
    next: str  # the one line to act on
    candidates: list[Candidate] = field(default_factory=list)


def explain(
    *,
    view: views.JobView,
    wl: kueue.Workload,
    cq: kueue.ClusterQueue | None,
    remotes: Sequence[Remote] = (),
    verdicts: Mapping[str, tuple[bool, Verdict]] | None = None,
    candidates: Sequence[Candidate] = (),
) -> Explanation:
    """The findings, from what each worker holds (`remotes`), or from the verdicts the manager
    already made of it (`verdicts`: worker -> (reachable, verdict), kfed's read API)."""
    status = wl.status
    nominated = list((status.nominated_cluster_names if status else None) or [])
    winner = (status.cluster_name or "") if status else ""
    reserved = has_quota_reservation(wl)
    manager = []
    if view.state in ("Pending",):
        manager.append(f"waiting for quota: {view.reason}")
    elif reserved and view.state not in ("Preempted", "Evicted"):
        manager.append(
            f"quota reserved in ClusterQueue {status.admission.cluster_queue if status and status.admission else view.cluster_queue}"
        )
    else:
        manager.append(view.reason or view.state)
    if cq is not None:
        manager.append(f"ClusterQueue {cq.name}: {views.usage_text(cq) or 'no quota'} (reserved/nominal)")
        if (cq.spec.stop_policy or "None") != "None":
            manager.append(f"ClusterQueue {cq.name} is stopped (stopPolicy {cq.spec.stop_policy})")
    if view.state == "Pending" and not view.reason.startswith(NEVER_FITS):  # a refused job never preempts
        manager.append(
            "preemption candidates: "
            + (
                ", ".join(candidate.text() for candidate in candidates)
                if candidates
                else "none (nothing its preemption policy allows it to take, in its queue or its cohort)"
            )
        )
    for check in (status.admission_checks if status else None) or []:
        manager.append(f"admission check {check.name}: {check.state}" + (f" ({check.message})" if check.message else ""))
    if verdicts is None:
        verdicts = {r.cluster: (r.active, worker_verdict(r, nominated=nominated, winner=winner, reserved=reserved)) for r in remotes}
    said = {name: verdict for name, (_, verdict) in sorted(verdicts.items())}
    step = next_step(
        view.state,
        reason=view.reason,
        cluster_queue=view.cluster_queue,
        cq=cq,
        namespace=view.namespace,
        queue=view.queue,
        reachable=any(active for active, _ in verdicts.values()),
        verdicts=said,
        winner=winner,
    )
    return Explanation(view=view, cluster=winner, manager=manager, workers=said, next=step, candidates=list(candidates))


def explanation_text(found: Explanation) -> str:
    view = found.view
    lines = [
        f"Job {view.namespace}/{view.name} (Workload {view.workload}), queue {view.queue} -> ClusterQueue {view.cluster_queue or '?'}",
        f"State: {view.state}"
        + (f" on {found.cluster}" if found.cluster else "")
        + (f", position {view.position} in its ClusterQueue" if view.position else ""),
        "",
        "Manager:",
        *(f"  {line}" for line in found.manager),
    ]
    if found.workers:
        width = max(len(name) for name in found.workers)
        lines += ["", "Workers:", *(f"  {name.ljust(width)}  {verdict.text}" for name, verdict in found.workers.items())]
    lines += ["", f"Next: {found.next}"]
    return "\n".join(lines) + "\n"


def explanation_record(found: Explanation) -> dict[str, Any]:
    view = found.view
    return {
        "job": f"{view.namespace}/{view.name}",
        "namespace": view.namespace,
        "name": view.name,
        "workload": view.workload,
        "queue": view.queue,
        "clusterQueue": view.cluster_queue,
        "state": view.state,
        "reason": view.reason,
        "message": view.detail,
        "preemptedBy": view.preemptor.record() if view.preemptor else None,
        "position": view.position,
        "cluster": found.cluster,
        "manager": found.manager,
        "preemptionCandidates": [candidate.text() for candidate in found.candidates],
        "workers": {name: verdict.text for name, verdict in found.workers.items()},
        "next": found.next,
    }


# --- the command ----------------------------------------------------------------------------------------
async def worker_verdicts(client: KubeClient, wl: kueue.Workload, args: argparse.Namespace) -> dict[str, tuple[bool, Verdict]]:
    """Each worker's verdict on the Workload, as the manager knows it (kfed's read API): worker
    -> (reachable, verdict). Left out, with a note, where the API cannot answer."""
    path = f"{READS}/namespaces/{wl.namespace}/workloads/{wl.name}/verdicts"
    try:
        answer = await client.request("GET", path, what=f"the workers' verdicts on workload {wl.key} (reads.kfed.dev)")
    except KubeError as err:
        note(args, f"workers' verdicts not shown: {err}")
        return {}
    return verdicts_from(answer)


async def find_workload(client: KubeClient, target: ObjectName, namespace: str, workloads: list[kueue.Workload]) -> kueue.Workload | str:
    """The Workload of `target`, or a line saying why there is none."""
    if target.kind in ("", "workload"):
        wl = next((w for w in workloads if w.name == target.name), None)
        if wl is not None or target.kind == "workload":
            return wl or f'no Workload "{target.name}" in namespace {namespace} (see `kfed jobs -n {namespace} -o wide`)'
    kind = JOB_KINDS.get(target.kind)
    if kind is not None and kind.model is not Job:  # a Job is also found by its bare name, below
        owned = [w for w in workloads if kind.adapter.names(w, target.name)]
        return owned[0] if owned else f"no Workload for {target} in namespace {namespace}"
    try:
        job = await client.get(Job, target.name, namespace=namespace)
    except NotFoundError:
        what = "Job" if target.kind == "job" else "Job or Workload"
        # Not found, as the apiserver says it: the CLI's one line, and the dashboard's 404.
        message = f'no {what} "{target.name}" in namespace {namespace} (see `kfed jobs -n {namespace}`)'
        raise NotFoundError(message, status=404, reason="NotFound") from None
    wl = next((w for w in workloads if any(ref.uid == job.metadata.uid for ref in w.metadata.owner_references or [])), None)
    if wl is not None:
        return wl
    if job_queue_name(job):
        return f"Job {namespace}/{target.name}: it has no Workload yet (is the manager running?)"
    return (
        f"Job {namespace}/{target.name}: it has no {c.QUEUE_NAME_LABEL} label, so kfed does not queue it; "
        f"add the label (kubectl label job {target.name} -n {namespace} {c.QUEUE_NAME_LABEL}=QUEUE) or submit it with "
        f"`kfed submit --queue QUEUE`"
    )


async def gather(
    client: KubeClient, args: argparse.Namespace, namespace: str, target: ObjectName
) -> tuple[Explanation, kueue.Workload] | str:
    """Everything `explain` reads of a job, as the user, and its findings; or a line saying why
    there is nothing to explain. The CLI prints it; the dashboard's job page shows it."""
    workloads = (await client.list(kueue.Workload, namespace=namespace)).items
    wl = await find_workload(client, target, namespace, workloads)
    if isinstance(wl, str):
        return wl
    listed = await optional_list(client, kueue.AdmissionCheck, args, leaves_out="the admission checks are not named")
    checks = {ac.name: ac for ac in listed} if listed is not None else None
    lqs = {lq.key: lq for lq in (await client.list(kueue.LocalQueue, namespace=namespace)).items}
    preempted = is_preempted(wl)
    everyone: list[kueue.Workload] = []
    if preempted or not wl.status or not wl.status.admission:
        leaves_out = "a preemptor or a preemption candidate in another namespace is not named"
        everyone = await optional_list(client, kueue.Workload, args, leaves_out=leaves_out) or workloads
    positions = await read_positions(client, [wl])
    view = views.job_views([wl], checks=checks, local_queues=lqs, known=everyone, positions=positions)[0]
    cq = None
    if view.cluster_queue:
        try:
            cq = await client.get(kueue.ClusterQueue, view.cluster_queue)
        except NotFoundError:
            cq = None
        except ForbiddenError:
            note(args, f"ClusterQueue {view.cluster_queue} not shown: cannot get clusterqueues (forbidden)")
    verdicts = await worker_verdicts(client, wl, args)
    cohort_queues: dict[str, kueue.ClusterQueue] = {}
    if view.state == "Pending" and cq and cq.spec.cohort_name:
        cohort_queues = {q.name: q for q in await optional_list(client, kueue.ClusterQueue, args, leaves_out="the cohort not shown") or []}
    candidates = preemption_candidates(wl, cq, everyone, cohort_queues) if view.state == "Pending" else []
    return explain(view=view, wl=wl, cq=cq, verdicts=verdicts, candidates=candidates), wl


@run_async
async def cmd_explain(args: argparse.Namespace) -> int:
    namespace = args.namespace or "default"
    target = parse_object_name(args.name)
    client = await manager_client(args)
    try:
        found = await gather(client, args, namespace, target)
        if isinstance(found, str):
            print(found)
            return 0
        found_out = found[0]
        if args.output in ("json", "yaml"):
            sys.stdout.write(views.dump(explanation_record(found_out), output=args.output))
        else:
            sys.stdout.write(explanation_text(found_out))
        return 0
    finally:
        await client.close()


def add_command(commands: Any) -> None:
    parser = commands.add_parser("explain", help="why a job is where it is, on the manager and on each worker")
    parser.add_argument("name", help=f"{job_names_help()}, or workload/NAME")
    add_cluster_options(parser, namespaced=True, all_namespaces=False, watch=False)
    parser.set_defaults(func=cmd_explain)
