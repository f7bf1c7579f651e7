"""The fault suite: a fixed mix of Jobs on a manager and two workers of the local harness (real
kube-apiserver and etcd each; the workers run the real Job controller, kube-scheduler and kwok
nodes), while one fault at a time is injected. Prints one table: per fault, how many Jobs ran,
how many were lost, run twice or stuck, and the time the federation took to recover.

    PYTHONPATH=. .venv/bin/python benchmarks/faults.py [--short] [--faults a,b,c]

Every controller runs under `python -m manager.dev.supervise`, so a killed agent or manager
comes back as its Deployment would bring it back. The manager runs as replicas behind one
webhook address (the harness's stand-in for a Service), as in deploy/.

The mix (per fault, in its own namespace): short Jobs (one pod that completes at once), long
Jobs (three completions one after another, each pod annotated
`pod-complete.stage.kwok.x-k8s.io/delay: 20s`, which kwok honours when its pod stages are
installed), a JobSet (a leader Job and a Job of two workers, run by the JobSet controller on
each worker), a pod group of two plain Pods (`kueue.x-k8s.io/pod-group-name` and
`pod-group-total-count`, gated on the manager, created on one worker), and high-priority Jobs
that preempt the low-priority ones on the manager, whose ClusterQueue has less quota than the
mix asks for. Half the mix is submitted before the fault, the other half as it starts
(mid-burst), with one JobSet and one pod group in each half.

The faults (`--faults` takes these names; `--short` runs the quick ones with a small mix):

- freeze-20s, freeze-2m: worker1's apiserver frozen with SIGSTOP. The manager's
  workerLostTimeout is 3 minutes here, longer than every outage of the suite: a worker lost
  for longer has its Jobs moved to another, and since its pods may have kept running (a
  kubelet does not stop them when its apiserver is away), a move may run a Job twice. That is
  the trade an administrator makes with workerLostTimeout, in Kueue as in kfed; the e2e tier
  tests the move itself;
- apiserver-restart: worker1's apiserver killed, and started again 10 s later;
- agent-killed: worker1's agent killed (SIGKILL); its supervisor restarts it;
- manager-killed: the leading manager killed in the middle of the burst;
- leader-failover: a second manager replica started, the leader killed for good, the standby
  takes the lease (the old leader then rejoins as a standby);
- watch-410: etcd compacted on every cluster and every apiserver restarted, so every open
  watch resumes from a compacted revision and gets 410 Gone;
- secret-rotated-broken: worker2's kubeconfig Secret rotated (same credentials, re-encoded),
  then broken (not a kubeconfig) for 20 s, then restored;
- preemption-race: low-priority Jobs preempted by high-priority ones the moment their pod
  runs, so eviction races the Job's completion, or (every other round) the moment the
  manager is seen to reserve their quota, so eviction lands during the dispatch and may race
  the write that admits them.

How the table counts (`judge`, a pure function; tests/unit/test_fault_counting.py):

- Runs are read from the workers' own Pod records: a watch on each worker's pods records
  every pod of the mix that reached Running or Succeeded, with its cluster, when it was first
  seen running and when it ended (a terminal phase or its deletion). A pod belongs to a pod
  group by its label `kueue.x-k8s.io/pod-group-name`, else to a JobSet by
  `jobset.sigs.k8s.io/jobset-name`, else to a Job by `batch.kubernetes.io/job-name`.
- A job is counted in parts, each run exactly once: a Job is one part; a JobSet's parts are
  its child Jobs (by name, `batch.kubernetes.io/job-name`); a pod group's parts are its Pods
  (by name: one index of the group each).
- Each dispatch of a part is one copy of it on a worker: for a Job or a JobSet's child Job,
  one worker Job, told apart by its uid, which its pods carry in
  `batch.kubernetes.io/controller-uid`; for a Pod of a group, the Pod itself (its uid). A job
  "ran twice" if one copy of a part had more pods Succeed than its completions, if more than
  one copy of a part completed (each had as many Succeeded pods as the completions: a group's
  Pod created twice for the same index and Succeeded twice, or a JobSet's child Job completed
  on two workers), or if pods of it ran on two clusters at overlapping times (a JobSet's
  child Jobs' pods or a group's Pods on both workers at once). A copy stopped by a
  legitimate preemption did not complete (the pods it had finished are lost with it, as in
  Kueue: the job starts over) and its pods ended before the next copy's began, so the
  restart is not "twice".
- A job is "lost" if the manager's job is gone (for a pod group: any of its Pods), if it is
  unfinished and its Workload is gone, or if it ended without any pod of it ever running, or
  Failed. A Job ends Complete or Failed, a JobSet Completed or Failed, a pod group when every
  Pod on the manager has Succeeded or Failed (Failed if one has).
- A Job is "stuck" if it is not lost and not finished by the deadline (fault end + 300 s;
  180 s with `--short`).
- Recovery: from the end of the fault until a probe Job, submitted right after the fault
  ended to a ClusterQueue of its own (so it does not queue behind the mix), is Complete on
  the manager.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Job, Lease, Secret
from manager.api.core import Pod as CorePod
from manager.api.jobset import JOBSET_NAME_LABEL, JobSet
from manager.api.meta import OpenModel, Resource
from manager.dev import catalog, federation, jobset
from manager.dev.local import LocalCluster, LocalProvider
from manager.engine.integrations.pod import POD_GROUP_NAME_LABEL, POD_GROUP_TOTAL_COUNT_ANNOTATION
from manager.engine.workload import has_quota_reservation
from manager.kube.client import KubeClient
from manager.kube.errors import AlreadyExistsError, KubeError, NotFoundError, TransientError
from manager.kube.informer import Informer
from tests.e2e.federation import RUNS, Clients, join, kueue_object, secret_manifest, write_config
from tests.integration.controllers import SYSTEM_NAMESPACE, ControllerProcess, ServiceProxy, ensure_namespace, wait_webhooks

REPO = Path(__file__).resolve().parents[1]

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
CONTROLLER_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
LONG_POD_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
WORKER_LOST_TIMEOUT = 180  # seconds; the manager's multiKueue.workerLostTimeout here, above every outage
DEADLINE = 300.0
SHORT_DEADLINE = 180.0
ADMISSION_TIMEOUT = 3  # seconds; the capacity-aware dispatcher's: short, so that a slow admission races its move
# The manager's dispatcher (Configuration multiKueue.dispatcherName), by the name --dispatcher takes.
DISPATCHERS = c.DISPATCHERS_BY_SHORT_NAME
LOW, HIGH = "fault-low", "fault-high"
# The job kinds kfed's processes integrate besides Job (`kfed dev up --integrations`' names).
INTEGRATIONS = ("jobset", "pod")


# --- the counting rules (pure) -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PodRun:
    """One pod of a Job that reached Running or Succeeded on a worker."""

    cluster: str
    copy: str  # the uid of the worker's Job the pod belongs to: one dispatch of the Job
    pod: str
    started: float
    ended: float | None  # None: still running when the records were read
    succeeded: bool
    part: str = ""  # what runs once: the Job itself (""), a JobSet's child Job, a pod group's Pod


@dataclass(frozen=True)
class JobRecord:
    """What the manager and the workers recorded about one Job of the mix."""

    name: str
    completions: int  # of each part
    finished: bool  # Complete or Failed on the manager
    failed: bool
    vanished: bool  # the manager's Job is gone, or it is unfinished and its Workload is gone
    runs: tuple[PodRun, ...]


@dataclass(frozen=True)
class Verdict:
    lost: bool
    twice: bool
    stuck: bool


def ran_on_two_clusters_at_once(runs: Sequence[PodRun]) -> bool:
    """Two pods of one Job, on different clusters, whose running times overlap."""
    for i, first in enumerate(runs):
        for second in runs[i + 1 :]:
            if first.cluster == second.cluster:
                continue
            first_end = first.ended if first.ended is not None else float("inf")
            second_end = second.ended if second.ended is not None else float("inf")
            if first.started < second_end and second.started < first_end:
                return True
    return False


def succeeded_by_copy(runs: Sequence[PodRun]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for run in runs:
        counts[(run.cluster, run.copy)] = counts.get((run.cluster, run.copy), 0) + run.succeeded
    return counts


def part_ran_twice(runs: Sequence[PodRun], completions: int) -> bool:
    """One part's copies: one had more pods Succeed than its completions, or more than one completed."""
    by_copy = succeeded_by_copy(runs)
    completed_copies = sum(1 for count in by_copy.values() if count >= completions)
    return completed_copies > 1 or any(count > completions for count in by_copy.values())


def judge(job: JobRecord) -> Verdict:
    """The rules in the module docstring, for one job (a Job, a JobSet or a pod group)."""
    parts: dict[str, list[PodRun]] = {}
    for run in job.runs:
        parts.setdefault(run.part, []).append(run)
    twice = any(part_ran_twice(runs, job.completions) for runs in parts.values()) or ran_on_two_clusters_at_once(job.runs)
    lost = job.vanished or job.failed or (job.finished and not job.runs)
    stuck = not lost and not job.finished
    return Verdict(lost=lost, twice=twice, stuck=stuck)


@dataclass(frozen=True)
class FaultResult:
    fault: str
    jobs: int
    lost: tuple[str, ...]
    twice: tuple[str, ...]
    stuck: tuple[str, ...]
    recovery: float | None  # seconds; None: the probe never completed
    succeeded_pods: dict[str, int] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)  # the runs of each Job counted bad


def describe_runs(runs: Sequence[PodRun]) -> str:
    """Per copy: where, how many pods ran and succeeded, and when (seconds, monotonic clock)."""
    copies: dict[tuple[str, str], list[PodRun]] = {}
    for run in runs:
        copies.setdefault((run.cluster, run.copy), []).append(run)
    parts = []
    for (cluster, copy), items in sorted(copies.items(), key=lambda kv: min(r.started for r in kv[1])):
        ends = [r.ended for r in items]
        end = "running" if None in ends else f"{max(e for e in ends if e is not None):.1f}"
        succeeded = sum(r.succeeded for r in items)
        parts.append(f"{cluster} copy {copy[:8]}: {len(items)} pods, {succeeded} succeeded, {min(r.started for r in items):.1f}-{end}")
    return "; ".join(parts) or "no pod ran"


def tally(fault: str, jobs: Sequence[JobRecord], recovery: float | None) -> FaultResult:
    verdicts = {job.name: judge(job) for job in jobs}
    return FaultResult(
        fault=fault,
        jobs=len(jobs),
        lost=tuple(sorted(name for name, v in verdicts.items() if v.lost)),
        twice=tuple(sorted(name for name, v in verdicts.items() if v.twice)),
        stuck=tuple(sorted(name for name, v in verdicts.items() if v.stuck)),
        recovery=recovery,
        succeeded_pods={job.name: sum(1 for run in job.runs if run.succeeded) for job in jobs},
        details={job.name: describe_runs(job.runs) for job in jobs if verdicts[job.name] != Verdict(False, False, False)},
    )


def table(results: Sequence[FaultResult]) -> str:
    rows = [("fault", "jobs", "lost", "twice", "stuck", "recovery s")]
    for r in results:
        recovery = f"{r.recovery:.1f}" if r.recovery is not None else "never"
        rows.append((r.fault, str(r.jobs), str(len(r.lost)), str(len(r.twice)), str(len(r.stuck)), recovery))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))) for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        for label, names in (("lost", r.lost), ("twice", r.twice), ("stuck", r.stuck)):
            if names:
                lines.append(f"{r.fault}: {label}: {', '.join(names)}")
        lines += [f"  {name}: {detail}" for name, detail in sorted(r.details.items())]
    return "\n".join(lines)


# --- recording pods on the workers ------------------------------------------------------------------------------
class Pod(Resource, OpenModel):
    VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Pod"
    PLURAL: ClassVar[str] = "pods"
    NAMESPACED: ClassVar[bool] = True


@dataclass
class _Seen:
    cluster: str
    namespace: str
    job: str
    copy: str
    pod: str
    started: float
    ended: float | None = None
    succeeded: bool = False
    part: str = ""


def job_of_pod(name: str, uid: str, labels: dict[str, str]) -> tuple[str, str, str] | None:
    """The job a worker's pod runs for, the part of it and the copy (the module docstring's
    rules): a pod group's Pod is a part of its own, a JobSet's pod belongs to a child Job, a
    Job's pod to the Job. None: a pod of none of them."""
    group = labels.get(POD_GROUP_NAME_LABEL)
    if group:
        return group, name, uid
    job = next((labels[key] for key in JOB_NAME_LABELS if key in labels), None)
    if job is None:
        return None
    copy = next((labels[key] for key in CONTROLLER_UID_LABELS if key in labels), "")
    jobset = labels.get(JOBSET_NAME_LABEL)
    return (jobset, job, copy) if jobset else (job, "", copy)


class PodRecorder:
    """Watches one worker's pods and remembers every one of a job that ran."""

    def __init__(self, cluster: str, client: KubeClient) -> None:
        self.cluster = cluster
        # Every pod: a pod group's have no label in common with Jobs' (job_of_pod tells them apart).
        self.informer: Informer[Pod] = Informer(client, Pod)
        self.seen: dict[str, _Seen] = {}
        self.informer.add_handler(self._on_pod)
        self.task: asyncio.Task[None] | None = None

    def _on_pod(self, kind: str, old: Pod | None, new: Pod | None) -> None:
        now = time.monotonic()
        pod = new or old
        if pod is None:
            return
        uid = pod.metadata.uid or f"{pod.namespace}/{pod.name}"
        if new is None:
            record = self.seen.get(uid)
            if record is not None and record.ended is None:
                record.ended = now
            return
        owner = job_of_pod(pod.name, uid, pod.metadata.labels or {})
        phase = (pod.model_extra or {}).get("status", {}).get("phase")
        if owner is None or phase not in ("Running", "Succeeded", "Failed"):
            return
        record = self.seen.get(uid)
        if record is None:
            if phase == "Failed":
                return  # failed before it ever ran
            job, part, copy = owner
            record = self.seen[uid] = _Seen(self.cluster, pod.namespace or "", job, copy, pod.name, started=now, part=part)
        if phase in ("Succeeded", "Failed") and record.ended is None:
            record.ended = now
            record.succeeded = phase == "Succeeded"

    def start(self) -> None:
        self.task = asyncio.create_task(self.informer.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)

    def runs(self, namespace: str) -> dict[str, list[PodRun]]:
        out: dict[str, list[PodRun]] = {}
        for s in self.seen.values():
            if s.namespace == namespace:
                out.setdefault(s.job, []).append(PodRun(s.cluster, s.copy, s.pod, s.started, s.ended, s.succeeded, part=s.part))
        return out


# --- controllers under the supervisor -----------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


class Supervised(ControllerProcess):
    """A controller started through `python -m manager.dev.supervise`."""

    def argv(self) -> list[str]:
        inner = super().argv()
        return [sys.executable, "-m", "manager.dev.supervise", f"--name={self.component}-{self.identity}", "--", *inner]

    def kill_child(self) -> None:
        """SIGKILL the controller, not its supervisor: a crash its Deployment recovers from."""
        self.signal_child(signal.SIGKILL)

    def signal_child(self, signum: int) -> None:
        """Signal the controller, not its supervisor (SIGSTOP: a process the node stopped scheduling)."""
        if self.process is not None:
            for child in _children(self.process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signum)

    def kill_for_good(self) -> None:
        """SIGKILL the supervisor and then the controller: the replica is gone."""
        if self.process is None:
            return
        children = _children(self.process.pid)
        self.process.kill()
        self.process.wait()
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        self.process = None


# --- the federation ---------------------------------------------------------------------------------------------
@dataclass
class Suite:
    manager: LocalCluster
    workers: dict[str, LocalCluster]
    directory: Path
    replicas: list[Supervised]
    agents: dict[str, Supervised]
    proxy: ServiceProxy
    kube: Clients | None = None
    recorders: dict[str, PodRecorder] = field(default_factory=dict)

    @property
    def clients(self) -> Clients:
        assert self.kube is not None, "the suite's clients are open while it runs"
        return self.kube

    def leader(self) -> Supervised:
        return next(r for r in self.replicas if r.process is not None)


def build(provider: Any, directory: Path, *, dispatcher: str = c.DISPATCHER_ALL_AT_ONCE) -> Suite:
    suffix = uuid.uuid4().hex[:4]
    manager = provider.create([f"faults-manager-{suffix}"])[0]
    w1, w2 = provider.create([f"faults-w1-{suffix}", f"faults-w2-{suffix}"], jobs=True)
    workers = {"worker1": w1, "worker2": w2}
    crds = federation.crd_manifests(REPO / "crds")
    jobset_bin = catalog.controller_dir(catalog.BY_NAME["jobset"])
    for cluster in [manager, w1, w2]:
        federation.install_crds(cluster, crds)
        ensure_namespace(cluster, SYSTEM_NAMESPACE)
        jobset.install_crd(cluster, jobset_bin)
    for worker in (w1, w2):
        jobset.start_controller(worker, jobset_bin)  # supervised: it comes back as its Deployment would
    integrations = federation.kfed_configuration(INTEGRATIONS)["integrations"]
    agents: dict[str, Supervised] = {}
    for name, worker in workers.items():
        agent_config = directory / name / "kueue-config.yaml"
        agent_config.parent.mkdir(parents=True, exist_ok=True)
        agent_config.write_text(yaml.safe_dump(federation.kfed_configuration(INTEGRATIONS)))
        agent = Supervised(worker, directory / name, component="worker_agent", extra=[f"--config={agent_config}"])
        agent.start().wait_ready()
        wait_webhooks(worker, agent)
        agents[name] = agent
    config = directory / "kueue-config.yaml"
    write_config(config, origin=None, more={"integrations": integrations})
    settings = yaml.safe_load(config.read_text())
    settings["multiKueue"]["workerLostTimeout"] = f"{WORKER_LOST_TIMEOUT}s"
    settings["multiKueue"]["dispatcherName"] = dispatcher
    if dispatcher == c.DISPATCHER_CAPACITY_AWARE:
        # Short: a copy not admitted in time is deleted and sent to the other worker while its
        # agent may be admitting it, and a frozen agent strands copies until its lease lapses.
        settings["multiKueue"]["capacityAwareDispatcherConfig"] = {"admissionTimeout": f"{ADMISSION_TIMEOUT}s"}
    config.write_text(yaml.safe_dump(settings))
    join(manager, workers)
    replicas = [
        Supervised(manager, directory / "manager", identity=name, extra=[f"--config={config}"]) for name in ("replica-0", "replica-1")
    ]
    proxy = ServiceProxy([r.webhook_port for r in replicas])
    for replica in replicas:
        replica.extra += [f"--webhook-url={proxy.url}", "--webhook-cert-secret=kfed-webhook-cert"]
    replicas[0].start().wait_ready()
    wait_webhooks(manager, replicas[0], url=proxy.url)
    return Suite(manager, workers, directory, replicas, agents, proxy)


def teardown(suite: Suite) -> None:
    for process in [*suite.replicas, *suite.agents.values()]:
        with contextlib.suppress(Exception):
            process.terminate()
    suite.proxy.close()


# --- the mix ------------------------------------------------------------------------------------------------------
JOB, JOBSET, POD_GROUP = "Job", "JobSet", "PodGroup"
GROUP_SIZE = 2  # Pods in each pod group of the mix


@dataclass(frozen=True)
class MixJob:
    name: str
    completions: int = 1  # of each part (a JobSet's child Job, a group's Pod: 1)
    cpu: str = "1"
    priority: str = LOW
    long: bool = False
    kind: str = JOB


def mix(short: bool) -> tuple[list[MixJob], list[MixJob]]:
    """The jobs before the fault, and those submitted as it starts."""
    shorts, longs, highs = (4, 2, 1) if short else (8, 4, 3)
    before = [
        *(MixJob(f"short-{i}") for i in range(shorts // 2)),
        *(MixJob(f"long-{i}", completions=3, long=True) for i in range(longs)),
        MixJob("jobset-0", cpu="500m", kind=JOBSET),
        MixJob("group-0", cpu="500m", kind=POD_GROUP),
    ]
    during = [
        *(MixJob(f"short-{i}") for i in range(shorts // 2, shorts)),
        MixJob("jobset-1", cpu="500m", kind=JOBSET),
        MixJob("group-1", cpu="500m", kind=POD_GROUP),
        *(MixJob(f"high-{i}", cpu="2", priority=HIGH) for i in range(highs)),
    ]
    return before, during


def job_manifest(job: MixJob, namespace: str) -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": job.cpu}}}],
        }
    }
    if job.long:
        template["metadata"] = {"annotations": {LONG_POD_ANNOTATION: "20s"}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.name,
            "namespace": namespace,
            "labels": {c.QUEUE_NAME_LABEL: "user-queue", c.PRIORITY_CLASS_LABEL: job.priority},
        },
        "spec": {"parallelism": 1, "completions": job.completions, "backoffLimit": 6, "template": template},
    }


def jobset_manifest(job: MixJob, namespace: str) -> dict[str, Any]:
    """A JobSet of a leader Job and two worker Jobs, one pod each (every child Job one part)."""

    def replicated_job(name: str, replicas: int) -> dict[str, Any]:
        pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": job.cpu}}}]}
        return {"name": name, "replicas": replicas, "template": {"spec": {"parallelism": 1, "completions": 1, "template": {"spec": pod}}}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": job.name,
            "namespace": namespace,
            "labels": {c.QUEUE_NAME_LABEL: "user-queue", c.PRIORITY_CLASS_LABEL: job.priority},
        },
        "spec": {"replicatedJobs": [replicated_job("leader", 1), replicated_job("workers", 2)]},
    }


def group_manifests(job: MixJob, namespace: str) -> list[dict[str, Any]]:
    """The plain Pods of a pod group (Kueue's pod-group-name and pod-group-total-count)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job.name}-{index}",
                "namespace": namespace,
                "labels": {c.QUEUE_NAME_LABEL: "user-queue", c.PRIORITY_CLASS_LABEL: job.priority, POD_GROUP_NAME_LABEL: job.name},
                # A bare Pod on a kwok node runs for this, then Succeeds (without it, until deleted).
                "annotations": {POD_GROUP_TOTAL_COUNT_ANNOTATION: str(GROUP_SIZE), LONG_POD_ANNOTATION: "1s"},
            },
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": job.cpu}}}],
            },
        }
        for index in range(GROUP_SIZE)
    ]


def manifests(job: MixJob, namespace: str) -> list[tuple[type[Resource], dict[str, Any]]]:
    """What a user creates on the manager for one job of the mix."""
    if job.kind == JOBSET:
        return [(JobSet, jobset_manifest(job, namespace))]
    if job.kind == POD_GROUP:
        return [(CorePod, manifest) for manifest in group_manifests(job, namespace)]
    return [(Job, job_manifest(job, namespace))]


async def submit(suite: Suite, jobs: Sequence[MixJob], namespace: str, *, timeout: float = 180.0) -> None:
    """Create the jobs on the manager, as a user's script would through a fault: a create the
    apiserver never answered is sent again, and one that exists already was stored before."""
    for model, manifest in [item for job in jobs for item in manifests(job, namespace)]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                await suite.clients.manager.create(model, manifest, namespace=namespace, retry_unreachable_webhook=True)
                break
            except AlreadyExistsError:
                break
            except TransientError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(1)  # the manager's apiserver is down; try again


async def poll(condition: Callable[[], Awaitable[bool]], *, timeout: float, interval: float = 0.5) -> bool:
    """True once `condition()` holds, False at the deadline; errors of an unreachable cluster count as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(KubeError, OSError):
            if await condition():
                return True
        await asyncio.sleep(interval)
    return False


async def job_finished(suite: Suite, namespace: str, name: str, kind: str = JOB) -> bool:
    finished, _failed = await job_state(suite.clients.manager, namespace, MixJob(name, kind=kind))
    return finished


async def job_state(manager: KubeClient, namespace: str, job: MixJob) -> tuple[bool, bool]:
    """Whether the manager's job has ended, and whether it Failed (the module docstring's
    rules); NotFoundError when it is gone (for a pod group: any of its Pods)."""
    if job.kind == JOBSET:
        jobset = await manager.get(JobSet, job.name, namespace=namespace)
        conditions = (jobset.to_dict().get("status") or {}).get("conditions") or []
        failed = any(cond.get("type") == "Failed" and cond.get("status") == "True" for cond in conditions)
        return failed or any(cond.get("type") == "Completed" and cond.get("status") == "True" for cond in conditions), failed
    if job.kind == POD_GROUP:
        phases = []
        for manifest in group_manifests(job, namespace):
            pod = await manager.get(CorePod, manifest["metadata"]["name"], namespace=namespace)
            phases.append(pod.status.phase if pod.status else None)
        return all(phase in ("Succeeded", "Failed") for phase in phases), "Failed" in phases
    current = await manager.get(Job, job.name, namespace=namespace)
    failed = job_condition(current, "Failed")
    return failed or job_condition(current, "Complete"), failed


def job_condition(job: Job, kind: str) -> bool:
    return any(cond.type == kind and cond.status == "True" for cond in (job.status.conditions if job.status else None) or [])


# --- the faults ------------------------------------------------------------------------------------------------------
def _sleep(seconds: float) -> Awaitable[None]:
    # The fault lasts this long by definition; nothing waits on a condition here.
    return asyncio.sleep(seconds)


async def freeze(suite: Suite, seconds: float) -> None:
    apiserver = suite.workers["worker1"].components["kube-apiserver"]
    apiserver.signal(signal.SIGSTOP)
    try:
        await _sleep(seconds)
    finally:
        apiserver.signal(signal.SIGCONT)


async def apiserver_restart(suite: Suite) -> None:
    worker = suite.workers["worker1"]
    worker.kill_component("kube-apiserver")
    await _sleep(10)
    await asyncio.to_thread(worker.start_component, "kube-apiserver")


async def agent_killed(suite: Suite) -> None:
    suite.agents["worker1"].kill_child()


async def agent_frozen(suite: Suite) -> None:
    """worker1's agent stopped (SIGSTOP) for 30 s, its apiserver up: copies sent there are not
    admitted, the capacity-aware dispatcher's admission timeout deletes them and tries worker2,
    and the agent then wakes up to copies gone from under it."""
    agent = suite.agents["worker1"]
    agent.signal_child(signal.SIGSTOP)
    try:
        await _sleep(30)
    finally:
        agent.signal_child(signal.SIGCONT)


async def manager_killed(suite: Suite) -> None:
    await _sleep(1)  # inside the burst, not before it
    suite.leader().kill_child()


async def leader_failover(suite: Suite) -> None:
    old, new = suite.replicas
    await asyncio.to_thread(new.start().wait_ready)
    old.kill_for_good()

    async def new_leads() -> bool:
        lease = await suite.clients.manager.get(Lease, "kfed-manager", namespace=SYSTEM_NAMESPACE)
        return bool(lease.spec.holder_identity == new.identity)

    await poll(new_leads, timeout=60)
    await asyncio.to_thread(old.start().wait_ready)  # back, as a standby
    suite.replicas = [new, old]


async def watch_410(suite: Suite) -> None:
    clusters = [suite.manager, *suite.workers.values()]
    for cluster in clusters:
        cluster.compact_etcd()
    for cluster in clusters:
        cluster.kill_component("kube-apiserver")
    for cluster in clusters:
        await asyncio.to_thread(cluster.start_component, "kube-apiserver")


async def secret_rotated_broken(suite: Suite) -> None:
    good = suite.workers["worker2"].kubeconfig()
    rotated = {**good, "contexts": [{**good["contexts"][0], "name": "rotated"}], "current-context": "rotated"}
    await suite.clients.rotate_secret("worker2", rotated)
    await _sleep(10)
    broken = base64.b64encode(b"this is not a kubeconfig").decode()
    await suite.clients.manager.patch(Secret, "worker2-kubeconfig", {"data": {"kubeconfig": broken}}, namespace=SYSTEM_NAMESPACE)
    await _sleep(20)
    body = secret_manifest("worker2-kubeconfig", good)
    await suite.clients.manager.patch(Secret, "worker2-kubeconfig", {"data": body["data"]}, namespace=SYSTEM_NAMESPACE)


async def preemption_race(suite: Suite, namespace: str, rounds: int) -> list[MixJob]:
    """Each round: a low-priority Job, then a high-priority Job that needs its quota, sent the
    moment a pod of the low one runs (even rounds: the eviction races the Job's completion) or
    the moment the manager is seen to reserve its quota (odd rounds: the eviction lands during
    the dispatch, and may race the check's Ready that admits it). Returns the Jobs it
    submitted."""
    submitted: list[MixJob] = []
    for i in range(rounds):
        low = MixJob(f"race-low-{i}", cpu="4")
        await submit(suite, [low], namespace)
        submitted.append(low)

        async def low_runs(name: str = low.name) -> bool:
            return any(name in r.runs(namespace) for r in suite.recorders.values())

        async def low_reserved(name: str = low.name) -> bool:
            workloads = await suite.clients.manager.list(kueue.Workload, namespace=namespace)
            return any(
                owner.name == name and has_quota_reservation(wl) for wl in workloads.items for owner in wl.metadata.owner_references or []
            )

        await poll(low_runs if i % 2 == 0 else low_reserved, timeout=60, interval=0.05)
        high = MixJob(f"race-high-{i}", cpu="4", priority=HIGH)
        await submit(suite, [high], namespace)
        submitted.append(high)
    return submitted


FAULTS: dict[str, Callable[[Suite], Awaitable[None]]] = {
    "freeze-20s": lambda s: freeze(s, 20),
    "freeze-2m": lambda s: freeze(s, 120),
    "apiserver-restart": apiserver_restart,
    "agent-killed": agent_killed,
    "agent-frozen": agent_frozen,
    "manager-killed": manager_killed,
    "leader-failover": leader_failover,
    "watch-410": watch_410,
    "secret-rotated-broken": secret_rotated_broken,
}
# Per fault, when not 4 cpu on each worker. The frozen agent's worker has the most room, so the
# capacity-aware dispatcher sends it the burst's copies, which the admission timeout then moves.
WORKER_CPU = {"agent-frozen": {"worker1": 8, "worker2": 4}}
RACE = "preemption-race"
ALL = [*FAULTS, RACE]
SHORT = ["preemption-race", "agent-killed", "secret-rotated-broken"]


# --- one fault, start to finish -----------------------------------------------------------------------------------
async def run_fault(suite: Suite, fault: str, *, short: bool) -> FaultResult:
    tag = f"{fault[:12].strip('-')}-{uuid.uuid4().hex[:4]}"
    namespace, probe_ns = f"f-{tag}", f"p-{tag}"
    race = fault == RACE
    worker_cpu = WORKER_CPU.get(fault, {"worker1": 4, "worker2": 4})
    await suite.clients.queues(namespace, manager_cpu=4, worker_cpu=worker_cpu, labels=RUNS, tag=tag)
    await suite.clients.queues(probe_ns, manager_cpu=1, worker_cpu={"worker1": 1, "worker2": 1}, labels=RUNS, tag=f"{tag}p")
    # The manager runs no kube-controller-manager, whose ServiceAccount controller would make the
    # namespace's default ServiceAccount (every real cluster has it; the groups' Pods need it).
    await suite.clients.manager.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", body={"metadata": {"name": "default"}})
    submitted: list[MixJob] = []
    if race:
        submitted = await preemption_race(suite, namespace, 3 if short else 6)
    else:
        before, during = mix(short)
        await submit(suite, before, namespace)
        submitted += before

        async def something_runs() -> bool:
            return any(r.runs(namespace) for r in suite.recorders.values())

        await poll(something_runs, timeout=90)
        burst = asyncio.create_task(submit(suite, during, namespace))
        await FAULTS[fault](suite)
        await burst
        submitted += during
    fault_end = time.monotonic()
    await submit(suite, [MixJob("probe")], probe_ns)
    recovered = await poll(lambda: job_finished(suite, probe_ns, "probe"), timeout=300)
    recovery = time.monotonic() - fault_end if recovered else None
    deadline = fault_end + (SHORT_DEADLINE if short else DEADLINE)

    async def all_finished() -> bool:
        for job in submitted:
            if not await job_finished(suite, namespace, job.name, job.kind):
                return False
        return True

    await poll(all_finished, timeout=max(0.0, deadline - time.monotonic()), interval=2)
    await asyncio.sleep(2)  # let the pod watches deliver the last events
    return tally(fault, await records(suite, namespace, submitted), recovery)


async def records(suite: Suite, namespace: str, submitted: Sequence[MixJob]) -> list[JobRecord]:
    runs: dict[str, list[PodRun]] = {}
    for recorder in suite.recorders.values():
        for name, items in recorder.runs(namespace).items():
            runs.setdefault(name, []).extend(items)
    manager = suite.clients.manager
    workloads = (await manager.list(kueue.Workload, namespace=namespace)).items
    out = []
    for job in submitted:
        try:
            finished, failed = await job_state(manager, namespace, job)
        except NotFoundError:
            out.append(JobRecord(job.name, job.completions, False, False, True, tuple(runs.get(job.name, ()))))
            continue
        if job.kind == POD_GROUP:
            has_workload = any(wl.name == job.name for wl in workloads)  # a group's Workload is named after it
        else:
            model: type[Resource] = JobSet if job.kind == JOBSET else Job
            uid = (await manager.get(model, job.name, namespace=namespace)).metadata.uid
            has_workload = any(ref.uid == uid for wl in workloads for ref in wl.metadata.owner_references or [])
        out.append(JobRecord(job.name, job.completions, finished, failed, not finished and not has_workload, tuple(runs.get(job.name, ()))))
    return out


async def run_suite(
    provider: Any, directory: Path, faults: Sequence[str], *, short: bool, dispatcher: str = c.DISPATCHER_ALL_AT_ONCE
) -> list[FaultResult]:
    suite = await asyncio.to_thread(build, provider, directory, dispatcher=dispatcher)
    try:
        suite.kube = await Clients.open(suite)  # type: ignore[arg-type]
        for name, value in ((LOW, 10), (HIGH, 1000)):
            priority = {**kueue_object("WorkloadPriorityClass", name, {}), "value": value}
            del priority["spec"]
            await suite.clients.manager.create(kueue.WorkloadPriorityClass, priority)
        for name, client in suite.clients.workers.items():
            suite.recorders[name] = PodRecorder(name, client)
            suite.recorders[name].start()
        results = []
        for fault in faults:
            result = await run_fault(suite, fault, short=short)
            print("\n".join(table([result]).splitlines()[2:]), flush=True)
            results.append(result)
        return results
    finally:
        for recorder in suite.recorders.values():
            await recorder.stop()
        if suite.kube is not None:
            await suite.clients.close()
        teardown(suite)


def parse_faults(text: str | None, *, short: bool) -> list[str]:
    if not text:
        return list(SHORT if short else ALL)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ALL]
    if unknown:
        raise SystemExit(f"--faults: unknown fault {', '.join(unknown)}; expected some of {', '.join(ALL)}")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", help=f"comma-separated, from: {', '.join(ALL)}")
    parser.add_argument("--short", action="store_true", help="a small mix and the quick faults (the e2e tier's version)")
    parser.add_argument("--dispatcher", choices=sorted(DISPATCHERS), default="all-at-once", help="the manager's MultiKueue dispatcher")
    args = parser.parse_args(argv)
    faults = parse_faults(args.faults, short=args.short)
    base = Path(tempfile.mkdtemp(prefix="kfed-faults-"))
    provider = LocalProvider(base / "clusters")
    started = time.monotonic()
    try:
        results = asyncio.run(run_suite(provider, base, faults, short=args.short, dispatcher=DISPATCHERS[args.dispatcher]))
    finally:
        provider.delete_all()
    print(
        f"kfed fault suite: 1 manager (2 replicas for leader-failover), 2 workers, dispatcher {args.dispatcher};"
        f" {time.monotonic() - started:.0f} s; logs in {base}"
    )
    print(table(results))
    bad = any(r.lost or r.twice or r.stuck or r.recovery is None for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
