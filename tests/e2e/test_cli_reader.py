"""The `kfed` commands run by a user whose only rights are the reads of one namespace on the
manager (the shipped ClusterRole kfed-namespace-reader, bound there), the workers' health
(kfed-fleet-reader), and the delete of Jobs there for `cancel`: a ServiceAccount's token in its
own kubeconfig, as such a user holds one. No Secret can be read with it, so every worker read
goes through the manager (issue #33). Each command's output is compared with the admin's."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.api import kueue
from manager.api.core import Job
from manager.kube.client import KubeClient
from manager.kube.errors import ForbiddenError, InvalidError, NotFoundError
from manager.multikueue.rules import reads
from tests.conftest import REPO_ROOT
from tests.e2e.federation import Clients, Federation, job_manifest
from tests.e2e.test_multikueue import running_where
from tests.harness import eventually

RBAC = "/apis/rbac.authorization.k8s.io/v1"
USER_ROLES = REPO_ROOT / "deploy" / "manager" / "user-roles.yaml"


AGE = re.compile(r"\b(\d+d)?(\d+h)?(\d+m)?(\d+s)?\b")
COLUMN_GAP = re.compile(r" {2,}")


def ageless(text: str) -> str:
    """The output with its ages ("3s", "1m20s") masked and its column gaps made one width: the two
    commands run a second apart, and "9s" against "10s" widens the AGE column by one space."""
    masked = AGE.sub(lambda m: "<age>" if m.group(0) else "", text)
    return COLUMN_GAP.sub("  ", masked)


def run(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "manager.cli.main", *args, f"--kubeconfig={kubeconfig}"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )


async def apply(client: KubeClient, path: str, body: dict[str, Any]) -> None:
    query = [("fieldManager", "kfed-test"), ("force", "true")]
    await client.request("PATCH", path, query=query, body=body, content_type="application/apply-patch+yaml")


def binding(kind: str, name: str, role_kind: str, role: str, ns: str, account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, **({"namespace": ns} if kind == "RoleBinding" else {})},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
    }


async def namespace_reader(fed: Federation, admin: KubeClient, ns: str, tag: str, directory: Path) -> Path:
    """A ServiceAccount of `ns` with the shipped user roles (the namespace's reads, the workers'
    health) and the delete of Jobs in `ns`; returns a kubeconfig holding its token."""
    for doc in yaml.safe_load_all(USER_ROLES.read_text()):
        await apply(admin, f"{RBAC}/clusterroles/{doc['metadata']['name']}", doc)
    account = "reader"
    await admin.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", body={"metadata": {"name": account}})
    canceller = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "cancel-jobs", "namespace": ns},
        "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["delete"]}],
    }
    await apply(admin, f"{RBAC}/namespaces/{ns}/roles/cancel-jobs", canceller)
    for name, kind, role in (("reader", "ClusterRole", "kfed-namespace-reader"), ("cancel-jobs", "Role", "cancel-jobs")):
        await apply(admin, f"{RBAC}/namespaces/{ns}/rolebindings/{name}", binding("RoleBinding", name, kind, role, ns, account))
    fleet = f"{tag}-fleet-reader"
    await apply(
        admin, f"{RBAC}/clusterrolebindings/{fleet}", binding("ClusterRoleBinding", fleet, "ClusterRole", "kfed-fleet-reader", ns, account)
    )
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}}
    answer = await admin.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{account}/token", body=request)
    kubeconfig = copy.deepcopy(fed.manager.kubeconfig())
    kubeconfig["users"] = [{"name": account, "user": {"token": answer["status"]["token"]}}]
    for context in kubeconfig["contexts"]:
        context["context"]["user"] = account
        context["context"]["namespace"] = ns  # `kfed status` counts this namespace's jobs
    path = directory / "reader.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    return path


def section(text: str, title: str) -> list[str]:
    """The lines of one table of `kfed status` or `kfed queues`, from its title to a blank line."""
    lines = text.splitlines()
    if title not in lines:
        return []
    start = lines.index(title)
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


@pytest.fixture
def tag() -> str:
    return f"r{uuid.uuid4().hex[:6]}"


async def test_every_read_command_works_for_a_namespace_reader_as_for_the_admin(
    fed: Federation, kube: Clients, tag: str, tmp_path: Path
) -> None:
    ns = f"{tag}-reader"
    cqs = await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 0, "worker2": 4}, labels={"type": "kwok"}, tag=tag)
    manifest = job_manifest("chatty", ns)
    manifest["spec"]["completions"] = 100000  # kwok completes each pod at once: the Job keeps running, its pods there
    await kube.manager.create(Job, manifest)
    await kube.manager.create(Job, job_manifest("too-big", ns, cpu="10"))
    await eventually(lambda: running_where(kube, ns, "chatty"), timeout=60, what="chatty running on a worker")
    admin, reader = fed.manager.kubeconfig_path, await namespace_reader(fed, kube.manager, ns, tag, tmp_path)

    # The reader may read no Secret and list no Workload outside its namespace: nothing else to fall back on.
    denied = run(reader, "jobs", "-A")
    assert denied.returncode == 1 and "forbidden" in denied.stderr.lower(), denied

    # kfed jobs: the same records, the queue position included (Kueue's visibility API).
    async def both_listed() -> Any:
        mine, theirs = run(reader, "jobs", "-n", ns, "-o", "json"), run(admin, "jobs", "-n", ns, "-o", "json")
        if mine.returncode or theirs.returncode:
            return None
        rows = json.loads(mine.stdout)
        states = {row["name"]: row["state"] for row in rows}
        return (mine, rows, json.loads(theirs.stdout)) if states == {"chatty": "Running", "too-big": "Pending"} else None

    mine, rows, theirs = await eventually(both_listed, timeout=60, what="both jobs listed for the reader and the admin")
    assert rows == theirs
    assert next(row for row in rows if row["name"] == "too-big")["position"] == 1
    assert "cannot list AdmissionChecks at cluster scope (forbidden)" in mine.stderr
    assert ageless(run(reader, "jobs", "-n", ns).stdout) == ageless(run(admin, "jobs", "-n", ns).stdout)

    # kfed explain: the workers' verdicts through the manager; only the ClusterQueue line is left out.
    for job in ("chatty", "too-big"):
        mine, theirs = run(reader, "explain", job, "-n", ns), run(admin, "explain", job, "-n", ns)
        assert mine.returncode == 0 and theirs.returncode == 0, (mine.stderr, theirs.stderr)
        left_out = f"  ClusterQueue {cqs['manager']}: "
        assert ageless(mine.stdout).splitlines() == [line for line in ageless(theirs.stdout).splitlines() if not line.startswith(left_out)]
        assert f"ClusterQueue {cqs['manager']} not shown: cannot get clusterqueues (forbidden)" in mine.stderr
    running = run(reader, "explain", "chatty", "-n", ns).stdout.splitlines()
    assert "  worker2  admitted here: the Job runs on this worker" in running and running[-1] == "Next: Nothing to do: it runs on worker2."

    # kfed logs: read by the manager from worker2, for a user who may read pods' logs here.
    worker = fed.workers["worker2"].name
    mine, theirs = run(reader, "logs", "job/chatty", "-n", ns), run(admin, "logs", "job/chatty", "-n", ns)
    assert mine.returncode == 0 and theirs.returncode == 0, (mine.stderr, theirs.stderr)
    # The header names the pods there, whose number changes as kwok completes them.
    assert [re.sub(r"\d+ pod", "N pod", text.splitlines()[-1]) for text in (mine.stderr, theirs.stderr)] == [
        "==> job/chatty: N pod(s) on worker worker2"
    ] * 2
    lines = mine.stdout.splitlines()
    assert lines and all(line.endswith((f"simulated container log on cluster {worker}", "done")) for line in lines), lines
    wrong = run(reader, "logs", "chatty", "-n", ns, "--container", "sidecar")
    assert wrong.returncode == 1 and 'has no container "sidecar": choose one of main with --container' in wrong.stderr

    # The read API itself, asked for a container the pod does not have: the worker's own 400 and
    # its words, through the manager (not a 503, which would say "try again").
    async def refused_by_the_worker() -> InvalidError | None:
        wl = next(w.name for w in (await kube.manager.list(kueue.Workload, namespace=ns)).items if w.name.startswith("job-chatty-"))
        base = f"/apis/{reads.GROUP}/{reads.VERSION}/namespaces/{ns}/workloads/{wl}"
        try:
            pod = (await as_reader.request("GET", f"{base}/pods"))["pods"][0]["name"]
            await as_reader.request("GET", f"{base}/log", query=[("pod", pod), ("container", "sidecar")])
        except InvalidError as err:
            return err
        except NotFoundError:  # the pod completed and went since it was listed: ask again
            return None
        raise AssertionError("a log of a container the pod does not have was served")

    as_reader = await KubeClient.from_kubeconfig(yaml.safe_load(reader.read_text()), name="reader")
    try:
        refused = await eventually(refused_by_the_worker, timeout=60, what="the worker's refusal of an unknown container")
    finally:
        await as_reader.close()
    assert refused.status == 400 and "worker worker2: " in str(refused), refused
    assert "container sidecar is not valid for pod" in str(refused) and "\n" not in str(refused), refused

    # kfed clusters: every worker's health and capacity, from the manager.
    mine, theirs = run(reader, "clusters", "-o", "json"), run(admin, "clusters", "-o", "json")
    assert mine.returncode == 0, mine.stderr
    fields = ("name", "active", "reason", "reachable", "error")
    assert [{k: row[k] for k in fields} for row in json.loads(mine.stdout)] == [
        {k: row[k] for k in fields} for row in json.loads(theirs.stdout)
    ]
    assert {row["name"]: row["reachable"] for row in json.loads(mine.stdout)} == {"worker1": True, "worker2": True}

    # kfed status: the workers as the admin sees them; the jobs of the reader's namespace only.
    mine, theirs = run(reader, "status"), run(admin, "status")
    assert mine.returncode == 0, mine.stderr
    workers = [line.split()[:2] for line in section(theirs.stdout, "Workers")]  # NAME, ACTIVE; then ages
    assert [line.split()[:2] for line in section(mine.stdout, "Workers")] == workers
    assert f"cannot list Workloads at cluster scope (forbidden): the jobs of namespace {ns} only" in mine.stderr
    assert section(mine.stdout, "ClusterQueues") == [] and "Jobs: " in mine.stdout

    # kfed queues: the namespace's LocalQueues as the admin sees them; the ClusterQueues left out with a note.
    mine, theirs = run(reader, "queues", "-n", ns), run(admin, "queues", "-n", ns)
    assert mine.returncode == 0, mine.stderr
    assert section(mine.stdout, "LocalQueues") == section(theirs.stdout, "LocalQueues") != []
    assert "cannot list ClusterQueues at cluster scope (forbidden): ClusterQueues not shown" in mine.stderr

    # kfed cancel: the reader's delete of its Job.
    cancelled = run(reader, "cancel", "too-big", "-n", ns)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == "job/too-big deleted", cancelled
    await kube.manager.delete(Job, "chatty", namespace=ns, propagation="Background")


async def test_a_user_of_another_namespace_reads_nothing_of_this_one_through_the_read_api(
    fed: Federation, kube: Clients, tag: str, tmp_path: Path
) -> None:
    ns, other = f"{tag}-mine", f"{tag}-theirs"
    await kube.queues(ns, manager_cpu=1, worker_cpu={"worker1": 1, "worker2": 0}, labels={"kfed-test/pool": "parked"}, tag=tag)
    await kube.manager.request("POST", "/api/v1/namespaces", body={"metadata": {"name": other}})
    await kube.manager.create(Job, job_manifest("private", ns))
    wl = await eventually(lambda: kube.manager_workload(ns, "private"), timeout=60, what="the Workload of the job")
    outsider = await namespace_reader(fed, kube.manager, other, tag, tmp_path)
    client = await KubeClient.from_kubeconfig(yaml.safe_load(outsider.read_text()), name="outsider")
    try:
        for resource in ("verdicts", "pods", "log"):
            path = f"/apis/reads.kfed.dev/v1alpha1/namespaces/{ns}/workloads/{wl.name}/{resource}"
            with pytest.raises(ForbiddenError) as err:
                await client.request("GET", path, query=[("pod", "x")])
            assert str(err.value).count(ns), err.value
    finally:
        await client.close()
    explained = run(outsider, "explain", "private", "-n", ns)
    assert explained.returncode == 1 and "forbidden" in explained.stderr.lower()
