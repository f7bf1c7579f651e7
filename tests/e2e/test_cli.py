"""The `kfed` fleet commands, run as a user runs them, against the federation."""

from __future__ import annotations

import base64
import json
import queue
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.api import kueue
from manager.api.core import Job, Secret
from manager.api.meta import find_condition
from manager.dev.local import LocalCluster
from manager.kube.errors import NotFoundError
from tests.conftest import REPO_ROOT
from tests.e2e.federation import PARKED, Clients, Federation, job_manifest
from tests.e2e.test_multikueue import running_where
from tests.harness import eventually
from tests.integration.controllers import SYSTEM_NAMESPACE


def kfed(manager: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "manager.cli.main", *args, f"--kubeconfig={manager.kubeconfig_path}"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )


def jobs_json(manager: LocalCluster, ns: str) -> dict[str, dict[str, Any]]:
    result = kfed(manager, "jobs", "-n", ns, "-o", "json")
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}


def jobs_table(manager: LocalCluster, ns: str) -> dict[str, list[str]] | None:
    """`kfed jobs -n NS` as printed: each row's columns by its first (`KIND/NAME`); None when the
    command failed."""
    result = kfed(manager, "jobs", "-n", ns)
    if result.returncode != 0:
        return None
    return {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}


def status_in(rows: dict[str, list[str]] | None, name: str) -> str:
    """The STATUS column of `name`'s row in a `jobs_table`; "" without one."""
    return (rows or {}).get(name, ["", "", ""])[2]


@pytest.fixture
def tag() -> str:
    return f"c{uuid.uuid4().hex[:6]}"


async def test_jobs_shows_a_pending_job_with_quota_numbers_a_dispatching_one_and_a_running_one_with_its_cluster(
    fed: Federation, kube: Clients, tag: str
) -> None:
    ns = f"{tag}-cli"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 0}, labels=PARKED, tag=tag)
    await kube.manager.create(Job, job_manifest("runs", ns, labels={"app": "train"}))
    await kube.manager.create(Job, job_manifest("too-big", ns, cpu="10"))

    async def settled() -> Any:
        rows = jobs_json(fed.manager, ns)
        return rows if rows.get("runs", {}).get("state") == "Running" and rows.get("too-big", {}).get("state") == "Pending" else None

    rows = await eventually(settled, timeout=60, what="one Job running and one pending in `kfed jobs`")
    assert (rows["runs"]["cluster"], rows["runs"]["queue"], rows["runs"]["namespace"]) == ("worker1", "user-queue", ns)
    assert rows["too-big"]["position"] == 1
    assert "insufficient quota for cpu" in rows["too-big"]["reason"] and "request (10) > maximum capacity (4)" in rows["too-big"]["reason"]
    running = kfed(fed.manager, "jobs", "-n", ns, "--state", "running")
    assert running.returncode == 0 and "runs" in running.stdout and "too-big" not in running.stdout
    # -l selects by the Job's own labels (the Workload does not carry them).
    labelled = kfed(fed.manager, "jobs", "-n", ns, "-l", "app=train", "-o", "yaml")
    assert labelled.returncode == 0, labelled.stderr
    assert [row["name"] for row in yaml.safe_load(labelled.stdout)] == ["runs"]
    why = kfed(fed.manager, "explain", "job/too-big", "-n", ns)
    assert why.returncode == 0, why.stderr
    assert why.stdout.splitlines()[-1].startswith(f"Next: It asks for more than ClusterQueue {tag}-mgr can ever give")
    assert "  worker1  not nominated yet: the manager has not reserved quota" in why.stdout
    running_why = kfed(fed.manager, "explain", "runs", "-n", ns)
    assert running_why.stdout.splitlines()[-1] == "Next: Nothing to do: it runs on worker1."
    table = kfed(fed.manager, "jobs", "-n", ns)
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split() == ["NAME", "QUEUE", "STATE", "CLUSTER", "AGE", "POS", "REASON"]
    assert max(len(line) for line in table.stdout.splitlines()) <= 80 and "…" in table.stdout  # the long reason is cut
    wide = kfed(fed.manager, "jobs", "-n", ns, "-o", "wide")
    assert "request (10) > maximum capacity (4)" in wide.stdout


async def test_a_job_waiting_because_a_worker_lacks_its_local_queue_says_so(fed: Federation, kube: Clients, tag: str) -> None:
    ns = f"{tag}-cli-nolq"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 1, "worker2": 0}, labels=PARKED, tag=tag)
    await kube.manager.create(Job, job_manifest("blocker", ns))
    await eventually(lambda: running_where(kube, ns, "blocker"), timeout=60, what="the blocker running on worker1")
    await kube.workers["worker2"].delete(kueue.LocalQueue, "user-queue", namespace=ns)
    await kube.manager.create(Job, job_manifest("stuck", ns))

    async def explained() -> Any:
        row = jobs_json(fed.manager, ns).get("stuck")
        return row if row and "worker2: LocalQueue user-queue doesn't exist" in row["reason"] else None

    row = await eventually(explained, timeout=60, what="`kfed jobs` naming worker2's missing LocalQueue")
    assert row["state"] == "Dispatching"
    why = kfed(fed.manager, "explain", "stuck", "-n", ns)
    assert why.returncode == 0, why.stderr
    lines = why.stdout.splitlines()
    assert lines[1] == "State: Dispatching"
    assert "  worker1  waiting: couldn't assign flavors to pod set main: insufficient unused quota" in "\n".join(lines)
    assert lines[-1] == f"Next: Create LocalQueue user-queue in namespace {ns} on worker2, as on the manager."


async def test_a_job_no_worker_could_ever_admit_is_pending_with_each_workers_offer_and_the_missing_queue(
    fed: Federation, kube: Clients, tag: str
) -> None:
    ns = f"{tag}-cli-never"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 1, "worker2": 0}, labels=PARKED, tag=tag)
    await kube.workers["worker2"].delete(kueue.LocalQueue, "user-queue", namespace=ns)
    await kube.manager.create(Job, job_manifest("wide", ns, cpu="2"))
    expected = (
        "no worker can ever admit it: needs cpu 2; largest worker offers cpu 1 (worker1); worker2: LocalQueue user-queue doesn't exist"
    )

    async def refused() -> Any:
        row = jobs_json(fed.manager, ns).get("wide")
        return row if row and row["reason"] == expected else None

    row = await eventually(refused, timeout=60, what="`kfed jobs` with the refusal")
    assert row["state"] == "Pending"
    lines = kfed(fed.manager, "explain", "wide", "-n", ns).stdout.splitlines()
    assert f"  waiting for quota: {expected}" in lines
    assert lines[-1] == f"Next: Create LocalQueue user-queue in namespace {ns} on worker2, as on the manager."


async def test_status_and_clusters_show_every_worker_and_an_unreachable_one(fed: Federation, kube: Clients) -> None:
    clusters = kfed(fed.manager, "clusters", "-o", "json")
    assert clusters.returncode == 0, clusters.stderr
    rows = {row["name"]: row for row in json.loads(clusters.stdout)}
    assert set(rows) == {"worker1", "worker2"}
    assert rows["worker1"]["active"] == "True" and rows["worker1"]["reachable"] is True
    assert isinstance(rows["worker1"]["running"], int) and isinstance(rows["worker1"]["pending"], int)
    assert all(use["nominal"] >= use["reserved"] for use in rows["worker1"]["usage"].values())
    fed.stop_apiserver("worker2")
    try:

        async def unreachable() -> Any:
            result = kfed(fed.manager, "clusters", "-o", "json")
            row = {r["name"]: r for r in json.loads(result.stdout)}["worker2"]
            return row if row["active"] == "False" and row["error"] and row["error"].startswith("unreachable") else None

        row = await eventually(unreachable, timeout=60, what="worker2 shown unreachable")
        assert row["reason"] == "ClientConnectionFailed"
        # Global flags before the command, as kubectl takes them.
        status = subprocess.run(
            [sys.executable, "-m", "manager.cli.main", "--kubeconfig", str(fed.manager.kubeconfig_path), "status"],
            capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        assert "worker2" in status.stdout and "ClientConnectio" in status.stdout and "Jobs: " in status.stdout
        assert max(len(line) for line in status.stdout.splitlines()) <= 80
    finally:
        fed.start_apiserver("worker2")


def test_a_missing_kubeconfig_is_one_clear_line_and_a_non_zero_exit(tmp_path: Any) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "manager.cli.main", "jobs", f"--kubeconfig={tmp_path / 'nope'}"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: cannot read kubeconfig {tmp_path / 'nope'}: No such file or directory"]


def test_a_context_the_kubeconfig_lacks_names_the_ones_it_has(fed: Federation) -> None:
    result = kfed(fed.manager, "--context", "staging", "jobs")
    assert result.returncode == 1
    contexts = ", ".join(context["name"] for context in fed.manager.kubeconfig()["contexts"])
    assert result.stderr.strip().splitlines() == [
        f'error: kubeconfig {fed.manager.kubeconfig_path} has no context "staging" (--context): use one of {contexts} '
        f"(list them with `kubectl config get-contexts --kubeconfig {fed.manager.kubeconfig_path}`)"
    ]


# --- register ---------------------------------------------------------------------------------------------
def register(fed: Federation, name: str, kubeconfig: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "manager.cli.main", "register", name,
            f"--kubeconfig={kubeconfig}", f"--manager-kubeconfig={fed.manager.kubeconfig_path}", *extra,
        ],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip


async def test_register_checks_a_good_worker_then_creates_its_secret_and_cluster(fed: Federation, kube: Clients, tag: str) -> None:
    name, config = f"{tag}-w2", f"{tag}-config"
    dry = register(fed, name, fed.workers["worker2"].kubeconfig_path, f"--config={config}", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "[FAIL]" not in dry.stdout and "[ok  ] access MultiKueue needs" in dry.stdout
    assert "dry run: nothing was created" in dry.stdout
    with pytest.raises(NotFoundError):
        await kube.manager.get(kueue.MultiKueueCluster, name)
    done = register(fed, name, fed.workers["worker2"].kubeconfig_path, f"--config={config}", "--create-service-account")
    assert done.returncode == 0, done.stdout + done.stderr
    secret = await kube.manager.get(Secret, f"{name}-kubeconfig", namespace=SYSTEM_NAMESPACE)
    stored = yaml.safe_load(base64.b64decode((secret.data or {})["kubeconfig"]))
    assert list(stored["users"][0]["user"]) == ["token"]  # the ServiceAccount's token, not the admin certificate
    assert (await kube.manager.get(kueue.MultiKueueConfig, config)).spec.clusters == [name]

    async def connected() -> bool:
        cluster = await kube.manager.get(kueue.MultiKueueCluster, name)
        cond = find_condition(cluster.status.conditions if cluster.status else None, "Active")
        return cond is not None and cond.status == "True"

    await eventually(connected, timeout=60, what="the registered worker connected with its least-privilege token")
    gone = subprocess.run(
        [sys.executable, "-m", "manager.cli.main", "unregister", name, f"--kubeconfig={fed.manager.kubeconfig_path}"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
    )  # fmt: skip
    assert gone.returncode == 0, gone.stderr
    with pytest.raises(NotFoundError):
        await kube.manager.get(kueue.MultiKueueCluster, name)


async def test_register_refuses_a_worker_without_crds_and_creates_nothing(fed: Federation, provider: Any, kube: Clients, tag: str) -> None:
    bare = provider.create([f"bare-{tag}"])[0]
    result = register(fed, f"{tag}-bare", bare.kubeconfig_path)
    assert result.returncode == 1
    assert "[FAIL] Kueue's API (kueue.x-k8s.io/v1beta2): not served: install the CRDs" in result.stdout
    assert "nothing was created" in result.stderr
    with pytest.raises(NotFoundError):
        await kube.manager.get(kueue.MultiKueueCluster, f"{tag}-bare")
    with pytest.raises(NotFoundError):
        await kube.manager.get(Secret, f"{tag}-bare-kubeconfig", namespace=SYSTEM_NAMESPACE)


def test_register_refuses_a_kubeconfig_with_an_exec_plugin(fed: Federation, tmp_path: Path) -> None:
    kubeconfig = fed.workers["worker1"].kubeconfig()
    kubeconfig["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}}
    path = tmp_path / "exec.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    result = register(fed, "with-exec", path)
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: kubeconfig {path} is refused (InsecureKubeConfig): exec plugins are not allowed"


# --- submit and cancel -------------------------------------------------------------------------------------
async def test_submit_waits_for_the_job_to_finish_and_cancel_deletes_jobs(fed: Federation, kube: Clients, tag: str, tmp_path: Path) -> None:
    ns = f"{tag}-submit"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 4}, labels={"type": "kwok"}, tag=tag)
    manifest = job_manifest("hello", ns)
    del manifest["metadata"]["labels"]  # kfed submit --queue adds the label
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    done = kfed(fed.manager, "submit", "-f", str(path), "--queue", "user-queue", "--wait", "-o", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert (result["job"], result["namespace"], result["queue"], result["state"]) == ("hello", ns, "user-queue", "Succeeded")
    assert any(message.endswith(("on worker1", "on worker2")) or " on worker" in message for message in result["messages"])
    assert result["messages"][-1] == "succeeded=1 failed=0"
    wrong = kfed(fed.manager, "submit", "-f", str(path), "--queue", "no-such-queue")
    assert wrong.returncode == 1
    assert wrong.stderr.strip() == (
        f'error: LocalQueue "no-such-queue" does not exist in namespace {ns}: create it, or pass --queue with an existing one; '
        f"LocalQueues in {ns}: user-queue"
    )
    unlabelled = kfed(fed.manager, "submit", "-f", str(path))
    assert unlabelled.returncode == 1 and "give --queue NAME, or add the label kueue.x-k8s.io/queue-name: NAME" in unlabelled.stderr
    dry = kfed(fed.manager, "cancel", "job/hello", "-n", ns, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    context = fed.manager.kubeconfig()["current-context"]
    workload = (await kube.manager.list(kueue.Workload, namespace=ns)).items[0].name
    assert dry.stdout.strip() == (
        f"job/hello in namespace {ns} on context {context} ({fed.manager.server}) would be deleted and workload/{workload} "
        "(dry run: nothing changed)"
    )
    assert (await kube.manager.get(Job, "hello", namespace=ns)).name == "hello"
    gone = kfed(fed.manager, "cancel", "hello", "-n", ns)
    assert gone.returncode == 0 and gone.stdout.strip() == "job/hello deleted"
    missing = kfed(fed.manager, "cancel", "hello", "-n", ns)
    assert missing.returncode == 1 and missing.stderr.strip() == f"error: job/hello not found in {ns}"


# --- watch and logs ------------------------------------------------------------------------------------------
class Lines:
    """A running `kfed` whose output lines are read in the background, to wait on with a deadline."""

    def __init__(self, manager: LocalCluster, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "manager.cli.main", *args, f"--kubeconfig={manager.kubeconfig_path}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, predicate: Any, *, timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError(f"timed out waiting for {what}; output so far: {self.seen}")

    def stop(self) -> str:
        self.process.terminate()
        _, err = self.process.communicate(timeout=30)
        return err


async def test_jobs_watch_prints_each_row_that_changes(fed: Federation, kube: Clients, tag: str) -> None:
    ns = f"{tag}-watch"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 0}, labels=PARKED, tag=tag)
    watch = Lines(fed.manager, "jobs", "-n", ns, "-w", "--interval", "0.5")
    try:
        watch.wait_for(lambda line: line == "No resources found.", timeout=60, what="the empty listing")
        await kube.manager.create(Job, job_manifest("watched", ns))
        watch.wait_for(lambda line: line.split()[:1] == ["NAME"], timeout=60, what="the table's heading")
        running = watch.wait_for(lambda line: line.split()[:3] == ["watched", "user-queue", "Running"], timeout=60, what="the Running row")
        assert running.split()[3] == "worker1"
        assert all(len(line) <= 80 for line in watch.seen)
    finally:
        watch.stop()


async def test_logs_streams_the_pods_of_a_job_from_the_worker_that_runs_it(fed: Federation, kube: Clients, tag: str) -> None:
    ns = f"{tag}-logs"
    await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 0, "worker2": 4}, labels={"type": "kwok"}, tag=tag)
    manifest = job_manifest("chatty", ns)
    # kwok completes each pod at once; many completions keep the Job running (and its pods there).
    manifest["spec"]["completions"] = 100000
    await kube.manager.create(Job, manifest)
    worker = fed.workers["worker2"].name
    try:

        async def logged() -> Any:
            result = kfed(fed.manager, "logs", "job/chatty", "-n", ns)
            return result if result.returncode == 0 else None

        result = await eventually(logged, timeout=90, what="`kfed logs` reading the Job's pods on worker2")
        assert result.stderr.startswith("==> job/chatty: ") and "on worker worker2" in result.stderr
        lines = result.stdout.splitlines()
        assert lines and all(line.endswith((f"simulated container log on cluster {worker}", "done")) for line in lines), (
            lines
        )  # kwok's log of worker2, not worker1's or the manager's
        wrong = kfed(fed.manager, "logs", "chatty", "-n", ns, "--container", "sidecar")
        assert wrong.returncode == 1 and 'has no container "sidecar": choose one of main with --container' in wrong.stderr
        follow = Lines(fed.manager, "logs", "chatty", "-n", ns, "-f", "-c", "main")
        try:
            follow.wait_for(lambda line: line.endswith(f"simulated container log on cluster {worker}"), timeout=60, what="a followed line")
            assert follow.process.poll() is None  # -f keeps streaming
        finally:
            follow.stop()
    finally:
        await kube.manager.delete(Job, "chatty", namespace=ns, propagation="Background")
    missing = kfed(fed.manager, "logs", "nothing-here", "-n", ns)
    assert missing.returncode == 1 and missing.stderr.strip() == f'error: no Job "nothing-here" in namespace {ns} (see `kfed jobs -n {ns}`)'


async def test_a_preempted_job_says_who_preempted_it_and_why_without_uids(fed: Federation, kube: Clients, tag: str) -> None:
    ns = f"{tag}-cli-preempt"
    await kube.queues(ns, manager_cpu=1, worker_cpu={"worker1": 4, "worker2": 4}, labels=PARKED, tag=tag)
    for name, value in (("low", 10), ("high", 1000)):
        await kube.manager.create(
            kueue.WorkloadPriorityClass,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": f"{tag}-{name}"},
                "value": value,
            },
        )
    await kube.manager.create(Job, job_manifest("victim", ns, priority_class=f"{tag}-low"))
    await eventually(
        lambda: jobs_json(fed.manager, ns).get("victim", {}).get("state") == "Running", timeout=60, what="the low-priority Job running"
    )
    await kube.manager.create(Job, job_manifest("urgent", ns, priority_class=f"{tag}-high"))

    async def preempted() -> Any:
        row = jobs_json(fed.manager, ns).get("victim", {})
        return row if row.get("state") == "Preempted" else None

    row = await eventually(preempted, timeout=90, what="the victim shown Preempted")
    sentence = f"preempted by {ns}/urgent (priority 1000) to make room in ClusterQueue {tag}-mgr"
    assert row["reason"] == sentence
    workloads = (await kube.manager.list(kueue.Workload, namespace=ns)).items
    uid = next(w.metadata.uid for w in workloads if w.name.startswith("job-urgent-"))
    assert row["preemptedBy"]["uid"] == uid and row["preemptedBy"]["name"] == "urgent" and uid in row["message"]
    wide = kfed(fed.manager, "jobs", "-n", ns, "-o", "wide")
    assert sentence in wide.stdout and str(uid) not in wide.stdout
    why = kfed(fed.manager, "explain", "job/victim", "-n", ns)
    assert why.returncode == 0, why.stderr
    assert f"  {sentence}" in why.stdout.splitlines() and str(uid) not in why.stdout
