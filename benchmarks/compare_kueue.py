"""kfed and upstream Kueue side by side, on the same harness, one after the other, in one invocation.

Two parts (`--parts`, both by default):

- **baseline**: Kueue's scheduler performance harness (test/performance/scheduler: its runner,
  in its in-cluster mode, and minimalkueue) against kfed's `benchmarks/admission.py` (its runner
  and `python -m manager`), with the same generator shape (5 cohorts x 6 ClusterQueues; small,
  medium and large Workloads) at `--scale` of Kueue's baseline (15,000 Workloads at 1.0).
  With `--systems ...,kfed-by-kueue-runner`, Kueue's runner also runs against kfed's manager
  (the same process and limits), a cross-check of the definitions: both managers timed by the
  same Go program, printed as a second table against Kueue's. With `kueue-full`, Kueue's runner
  also runs against Kueue's full manager (cmd/kueue, as `tests/kueue_upstream.py` runs it),
  given kfed's client limit through its Configuration's clientConnection (one bucket, as
  cmd/kueue shares one among its clients) and waitForPodsReady off: the fair comparison of
  the two managers, printed as a third table (minimalkueue stays the column Kueue publishes).
  `--decision-logs` has each manager log its preemption decisions (read them with
  `benchmarks/preemption_decisions.py`).
- **multikueue**: a burst of `--jobs` suspended Jobs on a manager with 3 workers: Kueue's
  manager and a Kueue on each worker against kfed's manager and 3 worker agents
  (`benchmarks/multikueue.py`). kfed's dispatcher is `--dispatcher`, Kueue's `--kueue-dispatcher`.
  Kueue's manager is `hack/kueue/build.sh worker-limits`: v0.19.2 with one line changed so that
  its clients to the workers get `--qps` and `--burst` like every other client here (the release
  leaves them at client-go's 5 QPS, burst 10, with no setting; v0.20 raised the default).

Every cluster is the local harness (manager/dev/local.py: a real kube-apiserver and etcd), with
an audit log (level Metadata) on its apiserver so that requests are counted the same way for
both systems, by the identity that sent them: each sender gets its own client certificate (the
controllers the admin's, the benchmark runners `bench-runner`, a MultiKueue manager
`multikueue-manager` on its workers). Watches are not counted.

Upstream Kueue is the release pinned in hack/kueue/versions.env, built from its Go module by
`hack/kueue/build.sh` (manager), `hack/kueue/build.sh worker-limits` (the MultiKueue part's
manager) and `hack/kueue/build.sh perf` (runner and minimalkueue), each cached by version;
KFED_KUEUE_BIN, KFED_KUEUE_WORKER_LIMITS_BIN and KFED_KUEUE_PERF_BIN skip the build.

Client limits: minimalkueue hard-codes 50 QPS and burst 100, per kind it writes (client-go keeps
a token bucket per REST client, controller-runtime makes one per kind: Workloads, Events,
ClusterQueues and LocalQueues), so kfed's manager, whose one bucket covers every request (Events
served after the other requests), gets four times that in the baseline:
200 QPS, burst 400 (`--baseline-qps`/`--baseline-burst` change kfed's only; the table prints the
rate each controller used). In the MultiKueue part
both managers and worker controllers get `--qps`/`--burst`; Kueue's clients to its workers keep
client-go's default (5 QPS, burst 10 per worker), which Kueue does not let one configure. Both
runners are unlimited (5,000 QPS).

    .venv/bin/python benchmarks/compare_kueue.py                       # baseline at 0.1 (1,500), burst of 300 Jobs
    .venv/bin/python benchmarks/compare_kueue.py --scale 1 --jobs 1000 # the full sizes
    .venv/bin/python benchmarks/compare_kueue.py --parts baseline --systems kueue,kueue-full,kfed-by-kueue-runner
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import admission
import lifecycle
import multikueue
from procstats import cpu_by_kind, cpu_seconds, proc_stats

from manager.dev import federation
from manager.dev.local import Component, LocalCluster, LocalProvider, free_port, wait_for
from manager.kube.client import KubeClient
from manager.runtime import pki
from tests.kueue_upstream import KUEUE_NAMESPACE, UpstreamKueue

REPO = Path(__file__).resolve().parents[1]
RUNNER_USER = "bench-runner"
TRACE_USER = "bench-trace"  # the lifecycle trace's watch (benchmarks/lifecycle.py)
REMOTE_USER = "multikueue-manager"
ADMIN_USER = "kubernetes-admin"  # the harness's admin certificate: what the controllers use
MINIMALKUEUE_QPS, MINIMALKUEUE_BURST = 50, 100  # hard-coded in minimalkueue
# client-go keeps a token bucket per REST client, and controller-runtime makes one per kind: the
# kinds minimalkueue writes (Workloads, Events, ClusterQueues, LocalQueues) each get 50 QPS.
MINIMALKUEUE_KINDS = 4
CLIENT_GO_DEFAULT = "5/10"  # client-go's QPS/burst for a rest.Config without one: Kueue's clients to its workers
RUNNER_QPS = 5000
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    # One line per request, when it completes; the body is not logged (KFED_AUDIT_LEVEL=Request
    # logs it, to see what each write said).
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": os.environ.get("KFED_AUDIT_LEVEL", "Metadata")}],
}


# --- the harness: audited clusters, and one client certificate per sender -------------------------


def start_clusters(provider: LocalProvider, names: list[str]) -> list[LocalCluster]:
    """As LocalProvider.create, with an audit log on each apiserver."""
    clusters = [LocalCluster(name, provider.base_dir / name, provider.bin_dir) for name in names]
    try:
        for cluster in clusters:
            provider.clusters[cluster.name] = cluster
            cluster.prepare()
            policy = cluster.directory / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump(AUDIT_POLICY))
            cluster.components["kube-apiserver"].argv += [
                f"--audit-policy-file={policy}",
                f"--audit-log-path={audit_path(cluster)}",
                "--audit-log-format=json",
                "--audit-log-maxsize=0",  # no rotation: the whole run stays in one file
            ]
        for cluster in clusters:
            cluster.start_processes()
        for cluster in clusters:
            cluster.wait_ready()
    except BaseException:
        for cluster in clusters:
            cluster.stop()
        raise
    return clusters


def audit_path(cluster: LocalCluster) -> Path:
    return cluster.directory / "logs" / "audit.log"


def identity_kubeconfig(cluster: LocalCluster, user: str) -> dict[str, Any]:
    """The cluster's kubeconfig with a client certificate of its own for `user` (an administrator)."""
    pki_dir = cluster.directory / "pki"
    ca = pki.KeyPair((pki_dir / "ca.crt").read_bytes(), (pki_dir / "ca.key").read_bytes())
    pair = pki.issue(ca, user, organization="system:masters", client=True)
    kubeconfig = cluster.kubeconfig()
    kubeconfig["users"][0]["user"] = {
        "client-certificate-data": base64.b64encode(pair.cert_pem).decode(),
        "client-key-data": base64.b64encode(pair.key_pem).decode(),
    }
    return kubeconfig


def write_kubeconfig(path: Path, kubeconfig: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    return path


def requests_by_user(cluster: LocalCluster, start: float, end: float) -> Counter[str]:
    """Completed requests other than watches, by user, received within [start, end] (epoch
    seconds). Each user's requests by verb and resource go to requests-<cluster>.json beside the
    audit log, to see what a sender spends its requests on."""
    counts: Counter[str] = Counter()
    detail: Counter[str] = Counter()
    path = audit_path(cluster)
    if not path.exists():
        return counts
    with path.open() as log:
        for line in log:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line still being written
            if event.get("verb") == "watch" or event.get("stage") not in ("ResponseComplete", "Panic"):
                continue
            received = datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
            if start <= received <= end:
                user = event.get("user", {}).get("username", "?")
                counts[user] += 1
                ref = event.get("objectRef", {})
                what = "/".join(x for x in (ref.get("resource"), ref.get("subresource")) if x) or event.get("requestURI", "?")
                detail[f"{user} {event['verb']} {what} {event.get('responseStatus', {}).get('code', '?')}"] += 1
    report = {key: n for key, n in sorted(detail.items(), key=lambda kv: -kv[1])}
    (path.parent / f"requests-{cluster.name}.json").write_text(json.dumps(report, indent=1))
    return counts


def apiserver_cpu(base: Path) -> float:
    return cpu_by_kind(base).get("kube-apiserver", 0.0)


# --- figures ----------------------------------------------------------------------------------------


@dataclass
class Figures:
    """One system's run of one part, in the units both parts print."""

    system: str
    workloads: int
    wall: float
    admission_by_class: dict[str, float]  # average seconds to (first) admission
    reservation: list[float]  # seconds to quota reservation, per workload
    admission: list[float]  # seconds to admission, per workload
    preemptions: int
    requests: dict[str, int]  # by sender, over the run
    controller_cpu: float  # seconds
    controller_rss: int  # peak, bytes
    apiserver_cpu: float  # seconds, every apiserver of the run
    limits: str
    extra: dict[str, tuple[float, str]] = field(default_factory=dict)  # more rows: value and unit
    lifecycle: lifecycle.Lifecycle | None = None  # the baseline's eviction lifecycle, from a watch

    @property
    def admitted_per_second(self) -> float:
        return len(self.admission) / self.wall if self.wall else 0.0


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else (values[0] if values else 0.0)


def print_table(title: str, kfed: Figures | None, kueue: Figures | None) -> None:
    """Both systems side by side, and kfed / Kueue."""
    rows: list[tuple[str, Callable[[Figures], float], str]] = [
        ("workloads", lambda f: f.workloads, "{:.0f}"),
        ("wall time (s)", lambda f: f.wall, "{:.1f}"),
        ("admitted per second", lambda f: f.admitted_per_second, "{:.1f}"),
    ]
    classes = sorted({cls for f in (kfed, kueue) if f for cls in f.admission_by_class}, key=_class_order)
    for cls in classes:
        rows.append((f"avg time to admission, {cls} (s)", _class_wait(cls), "{:.2f}"))
    rows += [
        ("P95 quota reservation (s)", lambda f: p95(f.reservation), "{:.2f}"),
        ("P95 admission (s)", lambda f: p95(f.admission), "{:.2f}"),
        ("preemptions", lambda f: f.preemptions, "{:.0f}"),
        ("API requests per workload", lambda f: sum(f.requests.values()) / max(f.workloads, 1), "{:.1f}"),
    ]
    senders = sorted({s for f in (kfed, kueue) if f for s in f.requests})
    for sender in senders:
        rows.append((f"  from {sender}", _sender_requests(sender), "{:.1f}"))
    rows += [
        ("controller CPU per workload (ms)", lambda f: 1000 * f.controller_cpu / max(f.workloads, 1), "{:.1f}"),
        ("controller peak RSS (MiB)", lambda f: f.controller_rss / 2**20, "{:.0f}"),
        ("apiserver CPU (s)", lambda f: f.apiserver_cpu, "{:.1f}"),
    ]
    extras = sorted({name for f in (kfed, kueue) if f for name in f.extra})
    for name in extras:
        rows.append((name, _extra(name), "{:.1f}"))
    print(f"\n{title}")
    print(f"| {'figure':<40} | {'kfed':>10} | {'Kueue':>10} | {'kfed/Kueue':>10} |")
    print(f"| {'-' * 40} | {'-' * 10}: | {'-' * 10}: | {'-' * 10}: |")
    for label, get, fmt in rows:
        a = get(kfed) if kfed else float("nan")
        b = get(kueue) if kueue else float("nan")
        ratio = f"{a / b:.2f}" if b and a == a and b == b else "-"
        print(f"| {label:<40} | {fmt.format(a):>10} | {fmt.format(b):>10} | {ratio:>10} |")
    lives = [f.lifecycle if f else None for f in (kfed, kueue)]
    if any(lives):
        print(f"| {'eviction lifecycle (benchmarks/lifecycle.py)':<40} | {'kfed':>10} | {'Kueue':>10} |")
        rows_of = [dict(life.rows()) if life else {} for life in lives]
        for label in dict.fromkeys(label for rows in rows_of for label in rows):
            print(f"| {label} | {rows_of[0].get(label, '-'):>10} | {rows_of[1].get(label, '-'):>10} |")
    for f in (kfed, kueue):
        if f is not None:
            print(f"  {f.system} client limits: {f.limits}")


def traced_lifecycle(cluster: LocalCluster, trace: lifecycle.Trace) -> lifecycle.Lifecycle:
    """The run's eviction lifecycle, its cohorts read from the cluster's ClusterQueues."""
    status, body = cluster.request("GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues")
    queues = body.get("items", []) if status == 200 and isinstance(body, dict) else []
    return lifecycle.summarize(trace.transitions, lifecycle.cohorts(queues))


def _class_wait(cls: str) -> Callable[[Figures], float]:
    return lambda f: f.admission_by_class.get(cls, float("nan"))


def _sender_requests(sender: str) -> Callable[[Figures], float]:
    return lambda f: f.requests.get(sender, 0) / max(f.workloads, 1)


def _extra(name: str) -> Callable[[Figures], float]:
    return lambda f: f.extra.get(name, (float("nan"), ""))[0]


def _class_order(cls: str) -> tuple[int, str]:
    order = {name: i for i, (name, *_) in enumerate(admission.CLASSES)}
    return order.get(cls, len(order)), cls


# --- part 1: the scheduler performance baseline ----------------------------------------------------


def generator_config(scale: float) -> dict[str, Any]:
    """Kueue's baseline generator configuration (configs/baseline/generator.yaml) with each
    class's count scaled as admission.py scales it."""
    sets = [
        {
            "count": round(count * scale),
            "creationIntervalMs": round(interval * 1000),
            "workloads": [{"className": cls, "runtimeMs": round(runtime * 1000), "priority": priority, "request": str(cpu)}],
        }
        for cls, cpu, count, interval, runtime, priority in admission.CLASSES
        if round(count * scale) > 0
    ]
    queues = {
        "className": "cq",
        "count": admission.QUEUES_PER_COHORT,
        "nominalQuota": str(admission.NOMINAL),
        "borrowingLimit": "100",
        "reclaimWithinCohort": "Any",
        "withinClusterQueue": "LowerPriority",
        "workloadsSets": sets,
    }
    return {"cohorts": [{"className": "cohort", "count": admission.COHORTS, "queuesSets": [queues]}]}


def kfed_limits(args: argparse.Namespace, runner: str) -> str:
    """kfed's client limits in the baseline, as the tables print them."""
    bucket = f"manager {args.baseline_qps:g} QPS, burst {args.baseline_burst}, one bucket for all requests, Events last"
    return f"{bucket}; {runner} {RUNNER_QPS}"


async def baseline_kfed(base: Path, args: argparse.Namespace) -> Figures:
    provider = LocalProvider(base)
    try:
        (cluster,) = start_clusters(provider, ["kfed-baseline"])
        admission.install_kfed(cluster)  # the Workload CRD, before the trace watches Workloads
        with lifecycle.WatchedTrace(identity_kubeconfig(cluster, TRACE_USER)) as trace:
            result = await admission.run_baseline(
                cluster,
                base,
                scale=args.scale,
                qps=args.baseline_qps,
                burst=args.baseline_burst,
                timeout=args.timeout,
                runner_kubeconfig=identity_kubeconfig(cluster, RUNNER_USER),
            )
        by_user = requests_by_user(cluster, result.started_at, result.started_at + result.wall)
        waits = result.waits()
        return Figures(
            system="kfed",
            workloads=result.total,
            wall=result.wall,
            admission_by_class={cls: statistics.fmean(w) for cls, *_ in admission.CLASSES if (w := result.waits(cls))},
            reservation=waits,  # no admission checks: reservation is admission
            admission=waits,
            preemptions=result.preemptions,
            requests={"the controller": by_user.get(ADMIN_USER, 0), "the runner": by_user.get(RUNNER_USER, 0)},
            controller_cpu=result.manager_cpu,
            controller_rss=result.manager_peak_rss,
            apiserver_cpu=result.spent.get("kube-apiserver", 0.0),
            limits=kfed_limits(args, "runner"),
            extra={"controller API requests per second": (by_user.get(ADMIN_USER, 0) / result.wall, "")},
            lifecycle=traced_lifecycle(cluster, trace),
        )
    finally:
        provider.delete_all()


def baseline_kueue(base: Path, args: argparse.Namespace, perf_dir: Path) -> Figures:
    """Kueue's own harness: minimalkueue, and its runner."""

    def minimalkueue(cluster: LocalCluster) -> Component:
        UpstreamKueue(cluster, base / "kueue", perf_dir).install_crds()
        argv = [str(perf_dir / "minimalkueue"), f"--kubeconfig={cluster.kubeconfig_path}", f"--zap-log-level={kueue_log_level(args)}"]
        return Component("minimalkueue", argv, base / "minimalkueue.log")

    limits = (
        f"minimalkueue {MINIMALKUEUE_QPS} QPS, burst {MINIMALKUEUE_BURST} (hard-coded), one bucket per kind it writes "
        f"(Workloads, Events, ClusterQueues, LocalQueues); runner {RUNNER_QPS}"
    )
    return baseline_with_kueue_runner(base, args, perf_dir, system="Kueue", controller=minimalkueue, limits=limits)


def baseline_kueue_full(base: Path, args: argparse.Namespace, perf_dir: Path, bin_dir: Path) -> Figures:
    """Kueue's runner against Kueue's full manager (cmd/kueue, as the interoperability tests
    run it, webhooks off), configured as kfed's manager is: its Configuration's
    clientConnection gives it kfed's one bucket (cmd/kueue shares one token bucket among all
    its clients), and waitForPodsReady is off (the v1beta2 Configuration turns it on unless
    the DisableWaitForPodsReady gate is set; minimalkueue and kfed's baseline run without it)."""

    def kueue_manager(cluster: LocalCluster) -> Component:
        kueue_process = UpstreamKueue(
            cluster,
            base / "kueue",
            bin_dir,
            webhooks=False,
            log_level=kueue_log_level(args),
            client_connection={"qps": args.baseline_qps, "burst": args.baseline_burst},
            feature_gates=NO_WAIT_FOR_PODS_READY,
        )
        return kueue_process.prepare()

    limits = (
        f"Kueue's manager {args.baseline_qps:g} QPS, burst {args.baseline_burst} (clientConnection), one bucket for all "
        f"requests; runner {RUNNER_QPS}"
    )
    return baseline_with_kueue_runner(base, args, perf_dir, system="Kueue-full", controller=kueue_manager, limits=limits)


# The v1beta2 Configuration turns waitForPodsReady on unless this gate is set; kfed's manager
# and minimalkueue run without it, and in the MultiKueue burst no pod ever runs.
NO_WAIT_FOR_PODS_READY = {"DisableWaitForPodsReady": True}


def kueue_log_level(args: argparse.Namespace) -> str:
    """zap's level for Kueue's managers: 3 logs each preemption ("Preempted") and each
    evaluated head, 2 each Workload update (what `preemption_decisions.py` reads)."""
    return "3" if args.decision_logs else "error"


def baseline_kfed_by_kueue_runner(base: Path, args: argparse.Namespace, perf_dir: Path) -> Figures:
    """The cross-check of the definitions: Kueue's runner, in its in-cluster mode, against
    kfed's manager (the same process and limits as `baseline_kfed`), so that both systems'
    times are taken by one and the same Go program."""

    def kfed_manager(cluster: LocalCluster) -> Component:
        admission.install_kfed(cluster)
        argv = admission.manager_argv(cluster, base, port=free_port(), qps=args.baseline_qps, burst=args.baseline_burst)
        if args.decision_logs:
            argv.append("--log-level=debug")  # the engine's "preemption decision" records
        return Component("manager", argv, base / "manager.log")

    limits = kfed_limits(args, "Kueue's runner")
    return baseline_with_kueue_runner(base, args, perf_dir, system="kfed", controller=kfed_manager, limits=limits)


def baseline_with_kueue_runner(
    base: Path,
    args: argparse.Namespace,
    perf_dir: Path,
    *,
    system: str,
    controller: Callable[[LocalCluster], Component],
    limits: str,
) -> Figures:
    """Kueue's runner (test/performance/scheduler, in-cluster mode) against `controller`, a
    process started on the cluster at the moment the runner is, as upstream's harness does."""
    provider = LocalProvider(base)
    process: Component | None = None
    runner: subprocess.Popen[bytes] | None = None
    trace_watch: lifecycle.WatchedTrace | None = None
    try:
        (cluster,) = start_clusters(provider, [f"{system.lower()}-baseline"])
        process = controller(cluster)
        out = base / "runner-output"
        out.mkdir()
        config = base / "generator.yaml"
        config.write_text(yaml.safe_dump(generator_config(args.scale), sort_keys=False))
        runner_kubeconfig = write_kubeconfig(base / "runner.kubeconfig", identity_kubeconfig(cluster, RUNNER_USER))
        apiserver_before = apiserver_cpu(base)
        trace_watch = lifecycle.WatchedTrace(identity_kubeconfig(cluster, TRACE_USER))
        trace = trace_watch.start()
        start = time.time()
        process.start()
        assert process.pid is not None
        runner_argv = [
            str(perf_dir / "runner"),
            f"--generatorConfig={config}",
            f"-o={out}",
            f"--timeout={int(args.timeout)}s",
            f"--qps={RUNNER_QPS}",
            f"--burst={RUNNER_QPS}",
            "--zap-log-level=error",
        ]
        # The runner's test utilities look for Kueue's checkout at start-up (PROJECT_DIR, else a
        # Makefile upward); it reads nothing from there in this mode.
        runner_env = {**os.environ, "KUBECONFIG": str(runner_kubeconfig), "PROJECT_DIR": str(perf_dir / "module")}
        with (base / "runner.log").open("wb") as log:
            runner = subprocess.Popen(runner_argv, stdout=log, stderr=subprocess.STDOUT, env=runner_env)
        summary = out / "summary.yaml"
        # The runner writes its summary as soon as the recorder is done (every ClusterQueue
        # empty), before it cleans up; that is the end of the run.
        wait_for(lambda: summary.exists() or runner.poll() is not None, timeout=args.timeout + 60, what="the Kueue runner's summary")
        end = time.time()
        trace_watch.stop()
        cpu, rss = proc_stats(process.pid)
        apiserver = apiserver_cpu(base) - apiserver_before
        if not summary.exists():
            raise RuntimeError(f"the Kueue runner exited with {runner.returncode} and no summary; see {base / 'runner.log'}")
        wait_for(lambda: (out / "wlStates.csv").exists() and runner.poll() is not None, timeout=120, what="the Kueue runner's CSVs")
        with (out / "wlStates.csv").open() as f:
            states = list(csv.DictReader(f))
        waits = [int(row["ms to admitted"]) / 1000 for row in states]
        by_class: dict[str, list[float]] = {}
        for row in states:
            by_class.setdefault(row["class name"], []).append(int(row["ms to admitted"]) / 1000)
        by_user = requests_by_user(cluster, start, end)
        return Figures(
            system=system,
            workloads=len(states),
            wall=end - start,
            admission_by_class={cls: statistics.fmean(w) for cls, w in by_class.items()},
            reservation=waits,
            admission=waits,
            preemptions=sum(int(row["num evictions"]) for row in states),
            requests={"the controller": by_user.get(ADMIN_USER, 0), "the runner": by_user.get(RUNNER_USER, 0)},
            controller_cpu=cpu,
            controller_rss=rss,
            apiserver_cpu=apiserver,
            limits=limits,
            extra={"controller API requests per second": (by_user.get(ADMIN_USER, 0) / (end - start), "")},
            lifecycle=traced_lifecycle(cluster, trace),
        )
    finally:
        if trace_watch is not None:
            trace_watch.stop()
        if runner is not None and runner.poll() is None:
            runner.terminate()
            runner.wait(timeout=60)
        if process is not None:
            process.stop()
        provider.delete_all()


# --- part 2: the MultiKueue burst ------------------------------------------------------------------


def burst_figures(
    system: str, result: multikueue.Burst, clusters: list[LocalCluster], controller_cpu: float, controller_rss: int, apiserver: float
) -> tuple[Figures, dict[str, int]]:
    manager, workers = clusters[0], clusters[1:]
    end = time.time()
    start = end - (time.monotonic() - result.started)
    on_manager = requests_by_user(manager, start, end)
    on_workers: Counter[str] = Counter()
    for worker in workers:
        on_workers.update(requests_by_user(worker, start, end))
    requests = {
        "the manager, to its apiserver": on_manager.get(ADMIN_USER, 0),
        "the manager, to the workers": on_workers.get(REMOTE_USER, 0),
        "the worker controllers": on_workers.get(ADMIN_USER, 0),
        "the runner": on_manager.get(RUNNER_USER, 0),
    }
    admission_times = result.admission()
    figures = Figures(
        system=system,
        workloads=result.jobs,
        wall=result.wall,
        admission_by_class={"all (one priority)": statistics.fmean(admission_times)} if admission_times else {},
        reservation=result.reservation(),
        admission=admission_times,
        preemptions=0,
        requests=requests,
        controller_cpu=controller_cpu,
        controller_rss=controller_rss,
        apiserver_cpu=apiserver,
        limits="",
    )
    return figures, requests


async def multikueue_kfed(base: Path, args: argparse.Namespace) -> Figures:
    provider = LocalProvider(base)
    try:
        clusters = start_clusters(provider, ["kfed-manager", *(f"kfed-{name}" for name in multikueue.worker_names(args.workers))])
        worker_kubeconfigs = {worker.name: identity_kubeconfig(worker, REMOTE_USER) for worker in clusters[1:]}
        result = await multikueue.run_kfed(
            clusters[0],
            clusters[1:],
            base,
            args,
            runner_kubeconfig=identity_kubeconfig(clusters[0], RUNNER_USER),
            worker_kubeconfigs=worker_kubeconfigs,
        )
        figures, _ = burst_figures(
            "kfed", result.burst, clusters, result.manager_cpu, result.manager_peak_rss, result.spent.get("kube-apiserver", 0.0)
        )
        figures.extra["worker controllers' CPU per workload (ms)"] = (1000 * result.agent_cpu / max(figures.workloads, 1), "ms")
        figures.extra["worker controller peak RSS (MiB)"] = (result.agent_peak_rss / 2**20, "MiB")
        limits = f"manager and agents {args.qps:g} QPS, burst {args.burst} (to the workers too)"
        figures.limits = f"dispatcher {args.dispatcher}; {limits}; runner {RUNNER_QPS}"
        return figures
    finally:
        provider.delete_all()


def kueue_manager_objects(workers: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """What kfed's benchmark creates on its manager (a Secret and a MultiKueueCluster per worker,
    the MultiKueueConfig and the check `mk`), with the Secrets in Kueue's namespace."""
    out = []
    for obj in federation.manager_objects(workers):
        if obj["kind"] not in ("Secret", "MultiKueueCluster", "MultiKueueConfig", "AdmissionCheck"):
            continue
        if obj["kind"] == "Secret":
            obj["metadata"]["namespace"] = KUEUE_NAMESPACE
        if obj["kind"] == "AdmissionCheck":
            obj["metadata"]["name"] = "mk"
        out.append(obj)
    return out


async def multikueue_kueue(base: Path, args: argparse.Namespace, bin_dir: Path) -> Figures:
    provider = LocalProvider(base)
    kueues: list[UpstreamKueue] = []
    try:
        clusters = start_clusters(provider, ["kueue-manager", *(f"kueue-{name}" for name in multikueue.worker_names(args.workers))])
        manager, workers = clusters[0], clusters[1:]
        connection = {"qps": args.qps, "burst": args.burst}
        for worker in workers:
            kueue_worker = UpstreamKueue(
                worker,
                base / f"{worker.name}-kueue",
                bin_dir,
                webhooks=False,
                log_level="error",
                client_connection=connection,
                feature_gates=NO_WAIT_FOR_PODS_READY,
            )
            kueues.append(kueue_worker)
            kueue_worker.start()
            client = await KubeClient.from_kubeconfig(worker.kubeconfig(), name="runner", qps=RUNNER_QPS, burst=RUNNER_QPS)
            await multikueue.setup(client, multikueue.queue_objects(None))
            await client.close()
        dispatcher = {"dispatcherName": multikueue.DISPATCHERS[args.kueue_dispatcher]}
        kueue_manager = UpstreamKueue(
            manager,
            base / "manager-kueue",
            bin_dir,
            multikueue=dispatcher,
            webhooks=False,
            log_level="error",
            client_connection=connection,
            feature_gates=NO_WAIT_FOR_PODS_READY,
            # The worker-limits build's clients to the workers: the same limits as kfed's.
            environment={"KFED_KUEUE_WORKER_QPS": f"{args.qps:g}", "KFED_KUEUE_WORKER_BURST": str(args.burst)},
        )
        kueues.append(kueue_manager)
        kueue_manager.start()
        runner = await KubeClient.from_kubeconfig(
            identity_kubeconfig(manager, RUNNER_USER), name="runner", qps=RUNNER_QPS, burst=RUNNER_QPS
        )
        try:
            await multikueue.setup(runner, multikueue.queue_objects("mk"))
            names = dict(zip(multikueue.worker_names(len(workers)), workers, strict=True))
            for obj in kueue_manager_objects({name: identity_kubeconfig(worker, REMOTE_USER) for name, worker in names.items()}):
                federation.create(manager, obj)

            def connected() -> bool:
                status, body = manager.request("GET", "/apis/kueue.x-k8s.io/v1beta2/admissionchecks/mk")
                conds = (body or {}).get("status", {}).get("conditions", []) if status == 200 else []
                if not any(cond["type"] == "Active" and cond["status"] == "True" for cond in conds):
                    return False
                status, body = manager.request("GET", "/apis/kueue.x-k8s.io/v1beta2/multikueueclusters")
                return status == 200 and all(
                    any(cond["type"] == "Active" and cond["status"] == "True" for cond in item.get("status", {}).get("conditions", []))
                    for item in body["items"]
                )

            wait_for(connected, timeout=90, what="Kueue's MultiKueue check Active with every worker connected")
            pids = [k.process.pid for k in kueues if k.process is not None and k.process.pid is not None]
            manager_pid = pids[-1]
            cpu_before = {pid: cpu_seconds(pid) for pid in pids}
            apiserver_before = apiserver_cpu(base)
            result = await multikueue.burst(runner, jobs=args.jobs, submitters=args.submitters, timeout=args.timeout)
            cpu_after = {pid: cpu_seconds(pid) for pid in pids}
            apiserver = apiserver_cpu(base) - apiserver_before
            manager_cpu, manager_rss = cpu_after[manager_pid] - cpu_before[manager_pid], proc_stats(manager_pid)[1]
            worker_cpu = sum(cpu_after[pid] - cpu_before[pid] for pid in pids[:-1])
            worker_rss = max(proc_stats(pid)[1] for pid in pids[:-1])
        finally:
            await runner.close()
        figures, _ = burst_figures("Kueue", result, clusters, manager_cpu, manager_rss, apiserver)
        figures.extra["worker controllers' CPU per workload (ms)"] = (1000 * worker_cpu / max(figures.workloads, 1), "ms")
        figures.extra["worker controller peak RSS (MiB)"] = (worker_rss / 2**20, "MiB")
        figures.limits = (
            f"dispatcher {args.kueue_dispatcher}; manager and worker Kueues {args.qps:g} QPS, burst {args.burst}; "
            f"the manager's clients to its workers {args.qps:g} QPS, burst {args.burst} (hack/kueue/build.sh worker-limits; "
            f"v0.19.2 itself has {CLIENT_GO_DEFAULT}, client-go's default, and no setting); runner {RUNNER_QPS}"
        )
        return figures
    finally:
        for k in reversed(kueues):
            k.stop()
        provider.delete_all()


# --- the invocation --------------------------------------------------------------------------------


def build(target: str, env: str) -> Path:
    """The directory hack/kueue/build.sh prints (cached by version), or $env when set."""
    if os.environ.get(env):
        return Path(os.environ[env])
    argv = ["bash", str(REPO / "hack" / "kueue" / "build.sh"), *([target] if target != "manager" else [])]
    result = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"building upstream Kueue ({' '.join(argv)}) failed with exit code {result.returncode}")
    return Path(result.stdout.strip().splitlines()[-1])


async def attempt(what: str, run: Callable[[], Awaitable[Figures]]) -> Figures | None:
    """One system's run of one part; a failure is reported and the other runs go on."""
    try:
        return await run()
    except Exception as err:  # noqa: BLE001 - any failure of one run is reported, not fatal to the others
        print(f"{what} could not run: {type(err).__name__}: {err}")
        return None


async def main(args: argparse.Namespace) -> None:
    parts = set(args.parts.split(","))
    systems = set(args.systems.split(","))
    base = Path(tempfile.mkdtemp(prefix="kfed-compare-"))
    print(f"files: {base}")
    if "baseline" in parts:
        kfed_figures = kueue_figures = crossed = None
        if "kueue" in systems:

            async def kueue_baseline() -> Figures:
                return baseline_kueue(base / "kueue-baseline", args, build("perf", "KFED_KUEUE_PERF_BIN"))

            kueue_figures = await attempt("Kueue's scheduler performance baseline", kueue_baseline)
        if "kfed" in systems:
            kfed_figures = await attempt("kfed's baseline", lambda: baseline_kfed(base / "kfed-baseline", args))
        either = kfed_figures or kueue_figures
        if either is not None:
            print_table(f"Scheduler performance baseline: {either.workloads} Workloads (scale {args.scale:g})", kfed_figures, kueue_figures)
        if "kfed-by-kueue-runner" in systems:

            async def cross_check() -> Figures:
                return baseline_kfed_by_kueue_runner(base / "kfed-by-kueue-runner", args, build("perf", "KFED_KUEUE_PERF_BIN"))

            crossed = await attempt("Kueue's runner against kfed's manager", cross_check)
            print_table(f"Cross-check: Kueue's runner against kfed's manager (kfed column), scale {args.scale:g}", crossed, kueue_figures)
        if "kueue-full" in systems:

            async def full() -> Figures:
                perf_dir = build("perf", "KFED_KUEUE_PERF_BIN")
                return baseline_kueue_full(base / "kueue-full-baseline", args, perf_dir, build("manager", "KFED_KUEUE_BIN"))

            full_figures = await attempt("Kueue's runner against Kueue's full manager", full)
            print_table(
                f"Kueue's runner: kfed's manager (kfed column) against Kueue's full manager at the same client limit, scale {args.scale:g}",
                crossed,
                full_figures,
            )
    if "multikueue" in parts:
        kfed_figures = kueue_figures = None
        if "kueue" in systems:

            async def kueue_multikueue() -> Figures:
                bin_dir = build("worker-limits", "KFED_KUEUE_WORKER_LIMITS_BIN")
                return await multikueue_kueue(base / "kueue-multikueue", args, bin_dir)

            kueue_figures = await attempt("Kueue's MultiKueue burst", kueue_multikueue)
        if "kfed" in systems:
            kfed_figures = await attempt("kfed's MultiKueue burst", lambda: multikueue_kfed(base / "kfed-multikueue", args))
        print_table(f"MultiKueue burst: {args.jobs} suspended Jobs, 1 manager and {args.workers} workers", kfed_figures, kueue_figures)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="baseline,multikueue", help="baseline, multikueue, or both (comma-separated)")
    parser.add_argument(
        "--systems",
        default="kfed,kueue",
        help="kfed, kueue, kfed-by-kueue-runner (Kueue's runner against kfed's manager), kueue-full (Kueue's runner against "
        "Kueue's full manager, with kfed's client limit), comma-separated",
    )
    parser.add_argument(
        "--decision-logs",
        action="store_true",
        help="log every preemption decision: Kueue's managers at zap level 3, kfed's at debug (for preemption_decisions.py)",
    )
    parser.add_argument("--scale", type=float, default=0.1, help="of Kueue's baseline (1.0: 15,000 Workloads)")
    parser.add_argument(
        "--baseline-qps", type=float, default=MINIMALKUEUE_KINDS * MINIMALKUEUE_QPS, help="kfed's manager in the baseline (one bucket)"
    )
    parser.add_argument("--baseline-burst", type=int, default=MINIMALKUEUE_KINDS * MINIMALKUEUE_BURST)
    parser.add_argument("--jobs", type=int, default=300, help="Jobs in the MultiKueue burst")
    parser.add_argument("--workers", type=int, default=3, help="worker clusters in the MultiKueue part (Kueue caps a config at 20)")
    parser.add_argument("--qps", type=float, default=300, help="every controller's client in the MultiKueue part")
    parser.add_argument("--burst", type=int, default=500)
    parser.add_argument("--submitters", type=int, default=50, help="concurrent creates while submitting the burst")
    parser.add_argument("--dispatcher", choices=sorted(multikueue.DISPATCHERS), default="all-at-once", help="kfed's")
    parser.add_argument("--kueue-dispatcher", choices=["all-at-once", "incremental"], default="all-at-once")
    parser.add_argument("--timeout", type=float, default=900)
    asyncio.run(main(parser.parse_args()))
