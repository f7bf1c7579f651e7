"""Tenant isolation, end to end (issue #45). Two tenants share one ClusterQueue, each with a
namespace, a LocalQueue and jobs of two kinds (batch Jobs, one running on a worker and one too
big to be admitted, and a plain Pod running on a worker), every name of tenant B carrying a
marker of its own. Tenant A, a ServiceAccount with the shipped kfed-namespace-reader in its
namespace, kfed-fleet-reader, and the right to list ClusterQueues (so that it sees the shared
queue's counts and plots), then reads through every door a user has:

- every read command of the CLI, and its watch and log-follow streams;
- Kueue's visibility API and kfed's read API, through the manager's apiserver (`kubectl get
  --raw` with A's kubeconfig) and directly on the manager's port with A's token;
- the dashboard on a workstation (`kfed dashboard` with A's kubeconfig) and in the cluster
  (`kfed dashboard --in-cluster`, A's bearer token): every page and every stream.

Every answer is searched for B's names and the test fails naming the answer and the name it
found; aggregates (the shared ClusterQueue's counts, the plots' waits) may count B's work but
never name it. Then A asks for B's objects by name through each door, and each is refused (403)
or not found (404), the refusal naming nothing of B's that A did not ask about."""

from __future__ import annotations

import asyncio
import functools
import html
import json
import selectors
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from manager.api import kueue
from manager.api.core import Job, Pod
from manager.cli.dashboard.server import CSRF_COOKIE
from tests.conftest import REPO_ROOT, client_of
from tests.e2e.federation import CHECK, RUNS, Clients, Federation, job_manifest, kueue_object, owned_workload, running
from tests.e2e.test_cli_reader import RBAC, apply, namespace_reader, run
from tests.e2e.test_dashboard_browser import dashboard
from tests.harness import Provider, eventually
from tests.integration.test_dashboard_in_cluster import install_roles, token
from tests.integration.test_pod_integration import pod_manifest
from tests.integration.test_visibility import READS, call

pytestmark = pytest.mark.e2e

VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
STREAM_SECONDS = 10.0  # the longest a stream is read for: its first update comes at once


@pytest.fixture(scope="module")
def fed(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """This module's own federation, with kfed integrating plain Pods as well as Jobs."""
    with running(provider, Path(tmp_path_factory.mktemp("tenants")), integrations=("pod",)) as created:
        yield created


@dataclass(frozen=True)
class Tenant:
    namespace: str
    queue: str  # its LocalQueue
    job: str  # a batch Job that runs on worker1
    big: str  # a batch Job too big for the quota: pending
    pod: str  # a plain Pod that runs on worker1
    workloads: dict[str, str]  # each job's Workload, by job name

    def names(self) -> list[str]:
        return [self.namespace, self.queue, self.job, self.big, self.pod, *self.workloads.values()]


@dataclass(frozen=True)
class World:
    a: Tenant
    b: Tenant
    marker: str  # in every name of B's, and in nothing else
    cluster_queue: str  # the manager's ClusterQueue, shared by both
    kubeconfig: Path  # tenant A's
    token: str  # tenant A's ServiceAccount token
    dashboard_kubeconfig: Path  # the in-cluster dashboard's own identity


def tenant(prefix: str) -> Tenant:
    return Tenant(prefix, f"{prefix}-queue", f"{prefix}-merger", f"{prefix}-huge", f"{prefix}-pod", {})


def found_of_b(world: World, body: str, *, asked: str = "") -> list[str]:
    """B's names in `body` (the marker standing for any other), leaving out those `asked` named."""
    names = [name for name in dict.fromkeys([*world.b.names(), world.marker]) if name not in asked]
    return [name for name in names if name in body]


def assert_no_name_of_b(world: World, bodies: dict[str, str]) -> None:
    leaks = {what: found for what, body in bodies.items() if (found := found_of_b(world, body))}
    assert leaks == {}, f"tenant A was shown tenant B's names: {leaks}"


async def shared_queue(kube: Clients, tag: str, tenants: list[Tenant]) -> str:
    """One ClusterQueue on every cluster (8 cpu on the manager and worker1, none on worker2), the
    manager's with the MultiKueue check, and each tenant's namespace and LocalQueue pointing to it."""
    flavor, cq = f"{tag}-flavor", f"{tag}-shared"
    for cluster, client in {"manager": kube.manager, **kube.workers}.items():
        for t in tenants:
            await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": t.namespace}})
        await client.create(
            kueue.ResourceFlavor, kueue_object("ResourceFlavor", flavor, {} if cluster == "manager" else {"nodeLabels": RUNS})
        )
        cpu = 0 if cluster == "worker2" else 8
        group = {"coveredResources": ["cpu"], "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": cpu}]}]}
        spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [group]}
        if cluster == "manager":
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": CHECK}]}
        await client.create(kueue.ClusterQueue, kueue_object("ClusterQueue", cq, spec))
        for t in tenants:
            await client.create(kueue.LocalQueue, kueue_object("LocalQueue", t.queue, {"clusterQueue": cq}, namespace=t.namespace))
    for t in tenants:  # no ServiceAccount controller on the manager, and a Pod needs its namespace's default one
        await kube.manager.request("POST", f"/api/v1/namespaces/{t.namespace}/serviceaccounts", body={"metadata": {"name": "default"}})
    return cq


async def submit(kube: Clients, t: Tenant) -> Tenant:
    """The tenant's jobs, running (or pending) as they should; the tenant with its Workloads' names."""
    running_job = job_manifest(t.job, t.namespace, queue=t.queue)
    running_job["spec"]["completions"] = 100000  # kwok completes each pod at once: the Job keeps running
    await kube.manager.create(Job, running_job)
    await kube.manager.create(Job, job_manifest(t.big, t.namespace, queue=t.queue, cpu="10"))
    await kube.manager.create(Pod, pod_manifest(t.pod, t.namespace, queue=t.queue, run_time="3600s"))

    async def every_workload() -> dict[str, str] | None:
        found = {}
        for model, name in ((Job, t.job), (Job, t.big), (Pod, t.pod)):
            wl = await owned_workload(kube.manager, model, t.namespace, name)
            if wl is None:
                return None
            found[name] = wl.name
        return found

    workloads = await eventually(every_workload, timeout=60, what=f"the Workloads of {t.namespace}'s jobs")

    async def both_running() -> bool:
        jobs = (await kube.remote(Job, t.namespace, t.job))["worker1"]
        pods = (await kube.remote(Pod, t.namespace, t.pod))["worker1"]
        return any(j.spec.suspend is False for j in jobs) and any(p.status is not None and p.status.phase == "Running" for p in pods)

    await eventually(both_running, timeout=90, what=f"{t.namespace}'s Job and Pod running on worker1")
    return Tenant(t.namespace, t.queue, t.job, t.big, t.pod, workloads)


async def build_world(fed: Federation, directory: Path) -> World:
    tag = uuid.uuid4().hex[:6]
    a, b = tenant(f"alpha-{tag}"), tenant(f"bravo-{tag}")
    kube = await Clients.open(fed)
    try:
        cq = await shared_queue(kube, tag, [a, b])
        a, b = await submit(kube, a), await submit(kube, b)
        kubeconfig = await namespace_reader(fed, kube.manager, a.namespace, tag, directory)
        # A may also read the ClusterQueues (their counts, and the dashboard's plots), as a tenant often may.
        queue_reader = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{tag}-queue-reader"},
            "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues", "cohorts"], "verbs": ["get", "list"]}],
        }
        await apply(kube.manager, f"{RBAC}/clusterroles/{tag}-queue-reader", queue_reader)
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{tag}-queue-reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{tag}-queue-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": a.namespace}],
        }
        await apply(kube.manager, f"{RBAC}/clusterrolebindings/{tag}-queue-reader", binding)
        # The in-cluster dashboard's identity, with deploy/dashboard's roles.
        await install_roles(kube.manager)
        own = yaml.safe_load(fed.manager.kubeconfig_path.read_text())
        own["users"] = [{"name": "kfed-dashboard", "user": {"token": await token(kube.manager, "kfed-system", "kfed-dashboard")}}]
        for context in own["contexts"]:
            context["context"]["user"] = "kfed-dashboard"
        dashboard_kubeconfig = directory / "dashboard.kubeconfig"
        dashboard_kubeconfig.write_text(yaml.safe_dump(own))
        dashboard_kubeconfig.chmod(0o600)
    finally:
        await kube.close()
    a_token = str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])
    return World(a, b, f"bravo-{tag}", cq, kubeconfig, a_token, dashboard_kubeconfig)


@pytest.fixture(scope="module")
def world(fed: Federation, tmp_path_factory: pytest.TempPathFactory) -> World:
    """The two tenants and A's credentials, made once for the module's tests."""
    return asyncio.run(build_world(fed, tmp_path_factory.mktemp("tenant-a")))


# --- the CLI ---------------------------------------------------------------------------------------------
def follow(kubeconfig: Path, *args: str, enough: Callable[[str], bool]) -> str:
    """A streaming command (`-w`, `-f`), its output read until `enough` of it or STREAM_SECONDS,
    then stopped; stdout and stderr together."""
    argv = [sys.executable, "-m", "manager.cli.main", *args, f"--kubeconfig={kubeconfig}"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT)
    out = ""
    deadline = time.monotonic() + STREAM_SECONDS
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            while not enough(out) and (left := deadline - time.monotonic()) > 0:
                if selector.select(timeout=left):
                    line = process.stdout.readline()
                    if not line:
                        break
                    out += line
    finally:
        process.terminate()
        process.wait(timeout=10)
    return out


def output(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


async def test_tenant_a_sees_no_name_of_tenant_b_in_any_cli_output_and_is_refused_bs_jobs_by_name(fed: Federation, world: World) -> None:
    a, b, reader = world.a, world.b, world.kubeconfig
    ns = ("-n", a.namespace)
    commands = [
        ("jobs",),  # the namespace "default": refused
        ("jobs", *ns, "-o", "json"),
        ("jobs", *ns, "-o", "wide"),
        ("jobs", *ns, "-o", "yaml"),
        ("jobs", *ns, "--queue", a.queue),
        ("workloads", *ns, "-o", "json"),
        ("status",),
        ("status", "-o", "json"),
        ("clusters", "-o", "wide"),
        ("clusters", "-o", "json"),
        ("queues", *ns),
        ("queues", *ns, "-o", "json"),
        ("queues", *ns, "-o", "wide"),
        ("explain", a.job, *ns, "-o", "wide"),
        ("explain", f"pod/{a.pod}", *ns),
        ("explain", a.big, *ns, "-o", "json"),
        ("explain", f"workload/{a.workloads[a.job]}", *ns),
        ("logs", f"job/{a.job}", *ns),
        ("logs", f"pod/{a.pod}", *ns),
        ("jobs", "-A"),  # refused as a whole: A may list Workloads in its namespace only
        ("queues", "-A"),
        ("cancel", "--dry-run", a.big, *ns),
    ]
    bodies = {" ".join(command): output(run(reader, *command)) for command in commands}
    # The streams: the jobs table watched, and a log followed.
    bodies["jobs -w"] = follow(reader, "jobs", *ns, "-w", "--interval", "1", enough=lambda out: out.count(a.job) >= 2)
    bodies["logs -f"] = follow(reader, "logs", "-f", f"job/{a.job}", *ns, enough=lambda out: out.count("\n") >= 5)
    # What A reads is there: its own jobs, their verdicts and logs, and the shared queue's counts.
    listed = {row["name"]: row["state"] for row in json.loads(run(reader, "jobs", *ns, "-o", "json").stdout)}
    assert listed == {a.job: "Running", a.big: "Pending", a.pod: "Running"}, listed
    assert "worker1  admitted here" in bodies[f"explain {a.job} -n {a.namespace} -o wide"], bodies[
        f"explain {a.job} -n {a.namespace} -o wide"
    ]
    assert "simulated container log" in bodies[f"logs job/{a.job} -n {a.namespace}"] and "simulated container log" in bodies["logs -f"]
    queues = bodies[f"queues -n {a.namespace} -o wide"]
    assert world.cluster_queue in queues and a.queue in queues, queues
    assert_no_name_of_b(world, bodies)

    # B's objects by name: each a one-line refusal (forbidden) or not found, naming nothing else of B's.
    tries = [
        ("jobs", "-n", b.namespace),
        ("queues", "-n", b.namespace),
        ("explain", b.job, "-n", b.namespace),
        ("explain", f"pod/{b.pod}", "-n", b.namespace),
        ("explain", f"workload/{b.workloads[b.job]}", "-n", b.namespace),
        ("logs", f"job/{b.job}", "-n", b.namespace),
        ("logs", f"pod/{b.pod}", "-n", b.namespace),
        ("cancel", b.job, "-n", b.namespace),
        # B's names in A's namespace: not found, as any name A made up.
        ("explain", b.job, *ns),
        ("logs", f"job/{b.job}", *ns),
    ]
    for command in tries:
        done = run(reader, *command)
        said = done.stderr.lower()
        assert done.returncode != 0 and ("forbidden" in said or "not found" in said or said.startswith("error: no ")), (command, done)
        assert found_of_b(world, output(done), asked=" ".join(command)) == [], (command, done)
    async with client_of(fed.manager, "test-admin") as kube:
        assert (await kube.get(Job, b.job, namespace=b.namespace)).name == b.job, "B's job was not cancelled"


# --- Kueue's visibility API and kfed's read API --------------------------------------------------------
def through_apiserver(fed: Federation, kubeconfig: Path, path: str) -> tuple[int, str]:
    """`kubectl get --raw PATH` as the kubeconfig's user: (200, the answer) or the apiserver's
    status code (403, 404; else 0) and what kubectl printed."""
    argv = [str(fed.manager.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", "get", "--raw", path]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode == 0:
        return 200, done.stdout
    code = 403 if "(Forbidden)" in done.stderr else 404 if "(NotFound)" in done.stderr else 0
    return code, done.stdout + done.stderr


def workload_paths(t: Tenant, workload: str, pod: str) -> dict[str, str]:
    base = f"{READS}/namespaces/{t.namespace}/workloads/{workload}"
    return {"verdicts": f"{base}/verdicts", "pods": f"{base}/pods", "log": f"{base}/log?pod={pod}&container=main"}


async def test_tenant_a_sees_no_name_of_tenant_b_in_the_visibility_and_read_apis_through_the_apiserver_or_on_the_managers_port(
    fed: Federation, world: World
) -> None:
    a, b = world.a, world.b
    assert fed.process is not None
    manager = fed.process
    doors: dict[str, Callable[[str], tuple[int, str]]] = {
        "apiserver": lambda path: through_apiserver(fed, world.kubeconfig, path),
        "port": lambda path: call(manager, path, token=world.token),
    }

    # A's running jobs' pods on worker1, as the read API names them.
    async def pods_of(workload: str) -> list[str] | None:
        code, body = call(manager, workload_paths(a, workload, "")["pods"], token=world.token)
        return ([pod["name"] for pod in json.loads(body)["pods"]] or None) if code == 200 else None

    pods: dict[str, str] = {}
    for name in (a.job, a.pod):
        found = await eventually(functools.partial(pods_of, a.workloads[name]), timeout=60, what=f"the pods of {name} on worker1")
        pods[name] = found[0]
    expected = {
        "local queue's pending": (f"{VISIBILITY}/namespaces/{a.namespace}/localqueues/{a.queue}/pendingworkloads", 200),
        "cluster queue's pending": (f"{VISIBILITY}/clusterqueues/{world.cluster_queue}/pendingworkloads", 403),
        "visibility discovery": (VISIBILITY, 200),
        "reads discovery": (READS, 200),
        "clusters": (f"{READS}/clusters", 200),
        "worker1": (f"{READS}/clusters/worker1", 200),
        **{
            f"{what} of {name}": (path, 200)
            for name, pod in pods.items()
            for what, path in workload_paths(a, a.workloads[name], pod).items()
        },
        f"verdicts of {a.big}": (workload_paths(a, a.workloads[a.big], "")["verdicts"], 200),
    }
    bodies: dict[str, str] = {}
    for door, ask in doors.items():
        answers = {what: ask(path) for what, (path, _) in expected.items()}
        assert {what: code for what, (code, _) in answers.items()} == {what: code for what, (_, code) in expected.items()}, (door, answers)
        bodies.update({f"{door}: {what}": body for what, (_, body) in answers.items()})
        pending = json.loads(answers["local queue's pending"][1])
        assert [item["metadata"]["name"] for item in pending["items"]] == [a.workloads[a.big]], pending
        assert "simulated container log" in answers[f"log of {a.job}"][1] and "simulated container log" in answers[f"log of {a.pod}"][1]
        assert json.loads(answers[f"verdicts of {a.job}"][1])["metadata"]["name"] == a.workloads[a.job]
    assert_no_name_of_b(world, bodies)

    # B's objects by name, through both doors: refused, naming nothing of B's beyond what was asked.
    tries = {
        "B's local queue's pending": f"{VISIBILITY}/namespaces/{b.namespace}/localqueues/{b.queue}/pendingworkloads",
        **{f"{what} of {name}": path for name, wl in b.workloads.items() for what, path in workload_paths(b, wl, "x").items()},
        "B's Workload asked in A's namespace": workload_paths(a, b.workloads[b.job], "x")["verdicts"],
    }
    for door, ask in doors.items():
        for what, path in tries.items():
            code, body = ask(path)
            assert code in (403, 404), (door, what, code, body)
            assert found_of_b(world, body, asked=path) == [], (door, what, body)


# --- the dashboard ---------------------------------------------------------------------------------------
async def read(http: aiohttp.ClientSession, url: str, headers: dict[str, str], enough: Callable[[str], bool]) -> tuple[int, str]:
    """GET a page (its text), or a stream of server-sent events read until `enough` of it, its
    end, or STREAM_SECONDS: (status, text unescaped)."""
    async with http.get(url, headers=headers) as answer:
        if answer.content_type != "text/event-stream":
            return answer.status, html.unescape(await answer.text())
        text, deadline = "", time.monotonic() + STREAM_SECONDS
        while not enough(text) and "event: end" not in text and (left := deadline - time.monotonic()) > 0:
            try:
                chunk = await asyncio.wait_for(answer.content.readany(), left)
            except TimeoutError:
                break
            if not chunk:
                break
            text += chunk.decode()
        return answer.status, html.unescape(text)


async def sweep(url: str, headers: dict[str, str], world: World, *, plots: bool) -> None:
    """Every page and stream of the dashboard at `url` as tenant A, then B's objects by name.
    `plots`: the dashboard records every namespace's admissions (in the cluster), so the shared
    ClusterQueue's waits count B's two admissions beside A's, naming only A's."""
    a, b = world.a, world.b
    job, pod, big = (f"/jobs/{a.namespace}/{kind}/{name}" for kind, name in (("job", a.job), ("pod", a.pod), ("job", a.big)))
    pages: dict[str, Callable[[str], bool]] = {
        "/": lambda text: a.job in text and a.pod in text and a.big in text,
        "/jobs?state=Pending": lambda text: a.big in text,
        f"/jobs?namespace={a.namespace}&queue={a.queue}": lambda text: a.job in text,
        "/fleet": lambda text: "worker1" in text,
        "/queues": lambda text: world.cluster_queue in text and a.queue in text,
        job: lambda text: "worker1" in text and a.workloads[a.job] in text,
        pod: lambda text: "worker1" in text,
        big: lambda text: "Pending" in text,
        f"/jobs/{a.namespace}/workload/{a.workloads[a.job]}": lambda text: a.job in text,
        f"{job}?container=main": lambda text: "worker1" in text,
        # The streams: each view's live updates, and the logs.
        "/jobs/stream": lambda text: a.job in text,
        "/fleet/stream": lambda text: "worker1" in text,
        "/queues/stream": lambda text: world.cluster_queue in text,
        f"{job}/stream": lambda text: "event: fragment" in text,
        f"{pod}/stream": lambda text: "event: fragment" in text,
        f"{job}/logs": lambda text: "simulated container log" in text,
        f"{pod}/logs": lambda text: "simulated container log" in text,
    }
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        if plots:

            async def both_tenants_admissions() -> str | None:
                code, text = await read(http, f"{url}queues", headers, lambda _: True)
                return text if code == 200 and "4 admitted" in text else None

            shown = await eventually(both_tenants_admissions, timeout=90, what="the four admissions in the shared ClusterQueue's plot")
            assert f"{a.namespace}/{a.workloads[a.job]}: waited" in shown and f"{a.namespace}/{a.workloads[a.pod]}: waited" in shown
        # Each page and stream until it shows what A should see there (a stream's first update
        # may come late on a loaded machine); every body read on the way is searched for B's.
        seen: dict[str, str] = {}

        async def shows_as_own(path: str, enough: Callable[[str], bool]) -> tuple[int, str] | None:
            code, text = await read(http, url + path.lstrip("/"), headers, enough)
            seen[path] = seen.get(path, "") + text
            return (code, text) if code == 200 and enough(text) else None

        async def last_read(path: str) -> str:
            return seen.get(path, "")[-2000:]

        for path, enough in pages.items():
            await eventually(
                functools.partial(shows_as_own, path, enough),
                timeout=90,
                what=f"{path} showing what A should see there",
                explain=functools.partial(last_read, path),
            )
        assert_no_name_of_b(world, seen)

        # B's objects by name: refused or not found, naming nothing else of B's.
        theirs = [f"/jobs/{b.namespace}/{kind}/{name}" for kind, name in (("job", b.job), ("pod", b.pod), ("job", b.big))]
        tries = [
            f"/jobs?namespace={b.namespace}",
            *theirs,
            f"/jobs/{b.namespace}/workload/{b.workloads[b.job]}",
            f"{theirs[0]}/logs",
            f"{theirs[1]}/logs",
            f"/jobs/{a.namespace}/job/{b.job}",  # B's name in A's namespace
        ]
        for path in tries:
            code, text = await read(http, url + path.lstrip("/"), headers, lambda _: True)
            assert code in (403, 404), (path, code, text)
            assert found_of_b(world, text, asked=path) == [], (path, text)
        # The live updates of B's job and of B's namespace: refused before the stream starts.
        for path in (f"{theirs[0]}/stream", f"/jobs/stream?namespace={b.namespace}"):
            code, text = await read(http, url + path.lstrip("/"), headers, lambda text: "event: fragment" in text)
            assert code in (403, 404) and "event: " not in text, (path, code, text)
            assert found_of_b(world, text, asked=path) == [], (path, text)
        # A hand-made cancel of B's job, with a valid CSRF token: refused by the apiserver.
        async with http.get(f"{url}healthz", headers=headers) as health:
            assert health.status == 200
        form = {"csrf": next(c.value for c in http.cookie_jar if c.key == CSRF_COOKIE)}
        async with http.post(f"{url}{theirs[0].lstrip('/')}/cancel", data=form, headers=headers) as refused:
            text = html.unescape(await refused.text())
            assert refused.status == 403 and 'cannot delete resource "jobs"' in text, text
            assert found_of_b(world, text, asked=theirs[0]) == [], text


async def test_tenant_a_sees_no_name_of_tenant_b_on_any_page_or_stream_of_the_dashboard_on_a_workstation(world: World) -> None:
    with dashboard(world.kubeconfig) as url:
        await sweep(url, {}, world, plots=False)


async def test_tenant_a_sees_no_name_of_tenant_b_on_any_page_stream_or_plot_of_the_dashboard_in_the_cluster(
    fed: Federation, world: World
) -> None:
    """The in-cluster dashboard reads every namespace with its own identity (and records every
    admission for its plots): what A is shown is filtered by A's SubjectAccessReviews."""
    async with client_of(fed.manager, "test-admin") as kube:
        before = (await kube.get(Job, world.b.job, namespace=world.b.namespace)).metadata.uid
    with dashboard(world.dashboard_kubeconfig, "--in-cluster", "--address=127.0.0.1") as url:
        await sweep(url, {"Authorization": f"Bearer {world.token}"}, world, plots=True)
    async with client_of(fed.manager, "test-admin") as kube:
        assert (await kube.get(Job, world.b.job, namespace=world.b.namespace)).metadata.uid == before, "B's job was cancelled"
