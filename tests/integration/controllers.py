"""Running `python -m manager` / `python -m worker_agent` against a harness cluster, as a user would."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Secret
from manager.dev import federation
from manager.dev.local import LocalCluster, free_port, wait_for
from manager.kube.client import KubeClient
from manager.kube.informer import Informer
from manager.multikueue.controllers.clusters import ClusterController
from manager.multikueue.controllers.remote import RemoteCluster
from manager.multikueue.rules.settings import Settings
from manager.runtime.metrics import Metrics
from tests.conftest import REPO_ROOT

SYSTEM_NAMESPACE = "kfed-system"


class ControllerProcess:
    """One controller process with its own ports and log file."""

    def __init__(
        self,
        cluster: LocalCluster,
        directory: Path,
        *,
        component: str = "manager",
        identity: str = "replica-0",
        extra: list[str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.component = component
        self.identity = identity
        self.directory = directory
        self.health_port = free_port()
        self.webhook_port = free_port()
        self.log = directory / f"{component}-{identity}.log"
        self.extra = extra or []
        self.process: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        timings = ("--lease-duration=4", "--renew-deadline=3", "--retry-period=0.5", "--log-level=debug")
        return federation.controller_argv(
            self.cluster,
            self.component,
            health_port=self.health_port,
            webhook_port=None if "--no-webhooks" in self.extra else self.webhook_port,
            cert_dir=self.directory / ("certs-" + self.identity),
            extra=(f"--identity={self.identity}", *timings, *(e for e in self.extra if e != "--no-webhooks")),
        )

    def start(self) -> ControllerProcess:
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv(), stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        return self

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def wait_ready(self, timeout: float = 60.0) -> None:
        def ready() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"{self.component} exited with {self.process.returncode}; log:\n{self.tail()}")
            return self.get("/readyz")[0] == 200

        wait_for(ready, timeout=timeout, what=f"{self.component} {self.identity} /readyz (log: {self.log})")

    def is_leader_log(self) -> bool:
        return "became leader" in self.log.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def records(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def terminate(self, timeout: float = 30.0) -> int:
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self.process = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def exit_code(self) -> int | None:
        return self.process.poll() if self.process is not None else None


class ServiceProxy:
    """What a Service in front of the replicas' webhook ports does in a real cluster: each new
    connection goes to the next replica that accepts one, so webhooks keep answering while any
    replica lives (the local harness has no kube-proxy; this forwards bytes, nothing more)."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"https://127.0.0.1:{self.port}"
        self.next = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _connect(self) -> socket.socket | None:
        for _ in range(len(self.backends)):
            port = self.backends[self.next % len(self.backends)]
            self.next += 1
            try:
                return socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError:
                continue  # this replica is gone: an endpoint that is not ready
        return None

    def _serve(self, client: socket.socket) -> None:
        backend = self._connect()
        if backend is None:
            client.close()
            return
        backend.settimeout(None)
        threading.Thread(target=self._pipe, args=(backend, client), daemon=True).start()
        self._pipe(client, backend)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed = True
        self.listener.close()


def wait_webhooks(cluster: LocalCluster, process: ControllerProcess, timeout: float = 60.0, *, url: str | None = None) -> None:
    """The configurations point at this process, or at `url` (the leader installs them)."""
    url = url or f"https://127.0.0.1:{process.webhook_port}"

    def installed() -> bool:
        status, body = cluster.request(
            "GET", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kfed-mutating-webhook-configuration"
        )
        return status == 200 and body["webhooks"][0]["clientConfig"].get("url", "").startswith(url)

    wait_for(installed, timeout=timeout, what=f"webhooks pointing at {url}")
    # Each CRD's storage is rebuilt when its conversion changes; wait until v1beta1 reads
    # (which go through the conversion webhook) answer for every kind.
    for plural in ("resourceflavors", "clusterqueues", "cohorts", "localqueues", "workloads", "workloadpriorityclasses", "admissionchecks"):
        wait_for(_served(cluster, plural), timeout=timeout, what=f"v1beta1 {plural} served")


def _served(cluster: LocalCluster, plural: str) -> Callable[[], bool]:
    def served() -> bool:
        return bool(cluster.request("GET", f"/apis/kueue.x-k8s.io/v1beta1/{plural}")[0] == 200)

    return served


def ensure_namespace(cluster: LocalCluster, name: str) -> None:
    status, body = cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert status in (201, 409), body


def now() -> float:
    return time.monotonic()


def crd_cluster(provider: Any, prefix: str, *, jobs: bool = False, aggregation: bool = False) -> LocalCluster:
    """A fresh harness cluster with kfed's CRDs and the system namespace."""
    created: LocalCluster = provider.create([f"{prefix}{uuid.uuid4().hex[:4]}"], jobs=jobs, aggregation=aggregation)[0]
    federation.install_crds(created, federation.crd_manifests(REPO_ROOT / "crds"))
    ensure_namespace(created, SYSTEM_NAMESPACE)
    return created


@contextlib.contextmanager
def running_manager(
    cluster: LocalCluster, directory: Path, *, extra: list[str] | None = None, config: dict[str, Any] | None = None
) -> Iterator[ControllerProcess]:
    """`python -m manager` on the cluster, ready and with its webhooks registered; stopped after.
    `config` holds the sections of its Kueue Configuration file (`--config`)."""
    if config is not None:
        path = directory / "config.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": f"{c.CONFIG_GROUP}/v1beta2", "kind": "Configuration", **config}))
        extra = [*(extra or []), f"--config={path}"]
    process = ControllerProcess(cluster, directory, extra=extra).start()
    try:
        process.wait_ready()
        wait_webhooks(cluster, process)
        yield process
    finally:
        process.terminate()


def aggregated_cluster(provider: Any, prefix: str) -> LocalCluster:
    """A cluster whose apiserver aggregates the manager's APIs (Kueue's visibility API and kfed's
    read API) from the manager that `aggregated_manager` runs."""
    created = crd_cluster(provider, prefix, aggregation=True)
    federation.create(created, federation.visibility_service())
    return created


@contextlib.contextmanager
def aggregated_manager(cluster: LocalCluster, directory: Path) -> Iterator[ControllerProcess]:
    """`running_manager` serving the aggregated APIs on a free port."""
    with running_manager(cluster, directory, extra=federation.visibility_flags(free_port())) as process:
        yield process


def cluster_controller(
    kube: KubeClient,
    clusters: Informer[kueue.MultiKueueCluster],
    secrets: Informer[Secret],
    *,
    on_connection_change: Callable[[RemoteCluster], None] = lambda remote: None,
    on_remote_object: Callable[[RemoteCluster, str, str], None] = lambda remote, namespace, name: None,
) -> ClusterController:
    """The real MultiKueueCluster controller in this process, over caches the test drives (the
    manager's namespace, default settings, a client limit of 50 QPS to each worker)."""
    settings = Settings()
    return ClusterController(
        kube,
        namespace=SYSTEM_NAMESPACE,
        origin=settings.origin,
        qps=50,
        burst=100,
        path_prefix=settings.kubeconfig_path_prefix,
        clusters=clusters,
        secrets=secrets,
        metrics=Metrics(),
        on_connection_change=on_connection_change,
        on_remote_object=on_remote_object,
    )
