"""The local provider: independent Kubernetes control planes as processes on loopback.

Each cluster has its own etcd, its own kube-apiserver with a generated CA, serving certificate,
client-certificate admin user, RBAC and service-account signing key, and its own kubeconfig.
With `jobs=True` it also runs kube-controller-manager, kube-scheduler and kwok with fake nodes,
so Job pods really go Pending, Running and Succeeded. Every process runs in its own process
group with its own log file. Nothing listens off 127.0.0.1, and nothing connects to a pod or
service IP.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from manager.dev.audit import audit_policy
from manager.dev.binaries import binary_dir
from manager.runtime import pki

LOOPBACK = "127.0.0.1"
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# How fake pods start, run and finish: a Job pod runs for its `pod-complete.stage.kwok.x-k8s.io/delay`
# annotation (0 without it), so a playground Job can hold its quota for as long as it says.
KWOK_POD_STAGES = Path(__file__).with_name("kwok-pod-stages.yaml")
POD_RUN_TIME_ANNOTATION = "pod-complete.stage.kwok.x-k8s.io/delay"
MERGE_PATCH = "application/merge-patch+json"
# A server-side apply body; JSON is YAML, so `request` sends it as it sends any other body.
APPLY_PATCH = "application/apply-patch+yaml"
FRONT_PROXY_CLIENT = "front-proxy-client"  # the name an extension apiserver accepts the proxy's headers from


class ClusterError(RuntimeError):
    """A cluster did not start or stopped answering; the message names the log to read."""


def _ephemeral_ports() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


# Ports handed out by this process, never handed out twice.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, for a server started a moment later. It is chosen at
    random below the kernel's ephemeral range: a port that bind(0) returns comes from that range,
    and any outgoing connection may take it before the server binds it (seen: etcd failing with
    "address already in use" as a cluster started)."""
    low = min(_ephemeral_ports()[0], 32768)
    for _ in range(1000):
        port = random.randrange(max(1024, low - 12000), low)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise ClusterError("no free loopback port below the ephemeral range")


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.2) -> None:
    """Poll `condition` until it holds; raise ClusterError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except Exception:  # noqa: BLE001 - any failure just means "not yet"
            pass
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class Component:
    """One process of a cluster, restartable with the same arguments."""

    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    pid: int | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self.pid = self.process.pid

    def running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return self.pid is not None and pid_alive(self.pid)

    def signal(self, sig: signal.Signals) -> None:
        if self.pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def stop(self, *, timeout: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after `timeout`."""
        if self.pid is None:
            return
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.running():
            self.signal(signal.SIGKILL)
            while self.running():
                time.sleep(0.05)
        self.process = None
        self.pid = None

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.signal(signal.SIGKILL)
        while self.running():
            time.sleep(0.05)
        self.process = None
        self.pid = None


def wait_ready(process: Component, health_port: int, *, what: str, timeout: float = 60, path: str = "/readyz") -> None:
    """Wait until `process` (named `what` in errors) answers 200 on its loopback `path` at
    `health_port`; ClusterError, naming its log, when it does not in `timeout` seconds."""

    def ready() -> bool:
        if not process.running():
            raise ClusterError(f"{what} exited")
        with urllib.request.urlopen(f"http://{LOOPBACK}:{health_port}{path}", timeout=2) as response:
            return bool(response.status == 200)

    try:
        wait_for(ready, timeout=timeout, what=f"{what} ready")
    except ClusterError as err:
        raise ClusterError(f"{err}; see {process.log}") from None


def webhooks_by_url(
    manifests: str,
    url: str,
    ca_pem: bytes,
    *,
    names: dict[str, str],
    adapt: Callable[[dict[str, Any]], dict[str, Any] | None] = lambda webhook: webhook,
) -> list[dict[str, Any]]:
    """A release's webhook configurations (of the kinds in `names`, named by it) registered by
    URL, as a controller runs without a Service in front of it: each webhook calls `url` + its
    Service path and trusts `ca_pem`; `adapt` changes a webhook, or drops it by returning None."""
    ca_bundle = base64.b64encode(ca_pem).decode()
    configurations = []
    for document in yaml.safe_load_all(manifests):
        if not document or document.get("kind") not in names:
            continue
        webhooks = []
        for webhook in document["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            adapted = adapt({**webhook, "clientConfig": {"url": f"{url}{path}", "caBundle": ca_bundle}})
            if adapted is not None:
                webhooks.append(adapted)
        configurations.append(
            {
                "apiVersion": document["apiVersion"],
                "kind": document["kind"],
                "metadata": {"name": names[document["kind"]]},
                "webhooks": webhooks,
            }
        )
    return configurations


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still "exists"; reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        stat = Path(f"/proc/{pid}/stat")
        return stat.exists() and stat.read_text().split()[2] != "Z"


@dataclass
class ClusterDirectory:
    """A development cluster's name and directory, which holds its admin kubeconfig."""

    name: str
    directory: Path

    @property
    def kubeconfig_path(self) -> Path:
        return self.directory / "kubeconfig"

    def kubeconfig(self) -> dict[str, Any]:
        loaded = yaml.safe_load(self.kubeconfig_path.read_text())
        assert isinstance(loaded, dict)
        return loaded


@dataclass
class LocalCluster(ClusterDirectory):
    """One cluster's files, ports and processes."""

    bin_dir: Path
    jobs: bool = False
    nodes: int = 4
    node_cpu: str = "16"
    node_memory: str = "64Gi"
    etcd_port: int = 0
    etcd_peer_port: int = 0
    apiserver_port: int = 0
    kwok_port: int = 0
    # Users whose requests the apiserver writes to an audit log (`audit_log_path`), at Metadata
    # level; none (the default) runs it without one.
    audit_users: tuple[str, ...] = ()
    # The aggregation layer (front-proxy certificates and flags), for a cluster whose apiserver
    # routes an APIService to a local server (kfed's visibility API). Off by default: its
    # certificate watchers take inotify instances, of which a user has 128 by default.
    aggregation: bool = False
    components: dict[str, Component] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.apiserver_port}"

    @property
    def audit_log_path(self) -> Path:
        return self.directory / "logs" / "audit.log"

    @property
    def etcd_url(self) -> str:
        return f"http://{LOOPBACK}:{self.etcd_port}"

    # --- set-up -------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Write certificates, keys and the kubeconfig, and choose ports. Idempotent per directory."""
        pki_dir = self.directory / "pki"
        for port_name in ("etcd_port", "etcd_peer_port", "apiserver_port", "kwok_port"):
            if not getattr(self, port_name):
                setattr(self, port_name, free_port())
        ca = pki.new_ca(f"kfed-{self.name}-ca")
        pki.write(pki_dir, "ca", ca)
        serving = pki.issue(
            ca,
            "kube-apiserver",
            server_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            server_ips=(LOOPBACK,),
        )
        pki.write(pki_dir, "apiserver", serving)
        admin = pki.issue(ca, "kubernetes-admin", organization="system:masters", client=True)
        pki.write(pki_dir, "admin", admin)
        if self.aggregation:
            # As kubeadm sets it up: the apiserver proxies an APIService's requests with this
            # client certificate, and the extension server trusts the user it names in the
            # X-Remote-* headers only from a client this CA signed.
            front_proxy_ca = pki.new_ca(f"kfed-{self.name}-front-proxy-ca")
            pki.write(pki_dir, "front-proxy-ca", front_proxy_ca)
            pki.write(pki_dir, "front-proxy-client", pki.issue(front_proxy_ca, FRONT_PROXY_CLIENT, client=True))
        sa_private, sa_public = pki.service_account_key()
        (pki_dir / "sa.key").write_bytes(sa_private)
        (pki_dir / "sa.key").chmod(0o600)
        (pki_dir / "sa.pub").write_bytes(sa_public)
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": self.name,
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": base64.b64encode(ca.cert_pem).decode(),
                    },
                }
            ],
            "users": [
                {
                    "name": f"{self.name}-admin",
                    "user": {
                        "client-certificate-data": base64.b64encode(admin.cert_pem).decode(),
                        "client-key-data": base64.b64encode(admin.key_pem).decode(),
                    },
                }
            ],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": f"{self.name}-admin"}}],
            "current-context": self.name,
        }
        self.kubeconfig_path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        self.kubeconfig_path.chmod(0o600)
        self._define_components()

    def _define_components(self) -> None:
        pki_dir, logs, b = self.directory / "pki", self.directory / "logs", self.bin_dir
        peer = f"http://{LOOPBACK}:{self.etcd_peer_port}"
        self.components["etcd"] = Component(
            "etcd",
            [
                str(b / "etcd"),
                f"--name={self.name}",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={self.name}={peer}",
                # A test cluster trades durability for speed; etcd's own test setting.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            logs / "etcd.log",
        )
        self.components["kube-apiserver"] = Component(
            "kube-apiserver",
            [
                str(b / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
                f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
                f"--client-ca-file={pki_dir / 'ca.crt'}",
                f"--service-account-key-file={pki_dir / 'sa.pub'}",
                f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.96.0.0/16",
                # The endpoints of the `kubernetes` Service would be a loopback address, which
                # Kubernetes rejects; nothing here connects through that Service anyway.
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                # PodTemplates bypass the watch cache, so that a watch from a compacted revision
                # reaches etcd and gets 410 Gone; the fault tests for relisting rely on it.
                "--watch-cache-sizes=podtemplates#0",
                "--profiling=false",
                "--v=1",
                *self._aggregation_flags(pki_dir),
                *self._audit_flags(),
            ],
            logs / "kube-apiserver.log",
        )
        if not self.jobs:
            return
        kubeconfig = str(self.kubeconfig_path)
        self.components["kube-controller-manager"] = Component(
            "kube-controller-manager",
            [
                str(b / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--service-account-private-key-file={pki_dir / 'sa.key'}",
                f"--root-ca-file={pki_dir / 'ca.crt'}",
                "--controllers=*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service-lb-controller,-route",
                "--concurrent-job-syncs=10",
                "--v=1",
            ],
            logs / "kube-controller-manager.log",
        )
        self.components["kube-scheduler"] = Component(
            "kube-scheduler",
            [
                str(b / "kube-scheduler"),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={free_port()}",
                "--v=1",
            ],
            logs / "kube-scheduler.log",
        )
        self.components["kwok"] = Component(
            "kwok",
            [
                str(b / "kwok"),
                f"--kubeconfig={kubeconfig}",
                f"--config={KWOK_POD_STAGES}",
                f"--config={self._write_kwok_config()}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
                f"--server-address={LOOPBACK}:{self.kwok_port}",
                # The nodes advertise kwok's server as their kubelet, so the apiserver reaches it
                # for `kubectl logs` (over TLS: kwok serves a self-signed certificate there).
                f"--node-port={self.kwok_port}",
                f"--node-ip={LOOPBACK}",
            ],
            logs / "kwok.log",
        )

    def _aggregation_flags(self, pki_dir: Path) -> list[str]:
        if not self.aggregation:
            return []
        return [
            f"--requestheader-client-ca-file={pki_dir / 'front-proxy-ca.crt'}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki_dir / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki_dir / 'front-proxy-client.key'}",
        ]

    def _audit_flags(self) -> list[str]:
        if not self.audit_users:
            return []
        policy = self.directory / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(audit_policy(self.audit_users), sort_keys=False))
        self.audit_log_path.parent.mkdir(parents=True, exist_ok=True)
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log_path}",
            "--audit-log-format=json",
            # The log backend's default, stated: events are written as the requests are served,
            # never from a buffer flushed later, so the log is complete once the requests are.
            "--audit-log-mode=blocking",
        ]

    def _write_kwok_config(self) -> Path:
        """kwok's ClusterLogs: every container of a fake pod logs the same two lines (in the CRI
        log format kubelet reads), naming this cluster, so a log shows where its pod runs."""
        kwok_dir = self.directory / "kwok"
        kwok_dir.mkdir(parents=True, exist_ok=True)
        container_log = kwok_dir / "container.log"
        container_log.write_text(
            f"2026-01-01T00:00:00.000000000Z stdout F simulated container log on cluster {self.name}\n"
            "2026-01-01T00:00:01.000000000Z stdout F done\n"
        )
        config = kwok_dir / "kwok.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kwok.x-k8s.io/v1alpha1",
                    "kind": "ClusterLogs",
                    "metadata": {"name": "simulated"},
                    "spec": {"logs": [{"containers": [], "logsFile": str(container_log), "follow": True}]},
                }
            )
        )
        return config

    # --- running ------------------------------------------------------------------------------

    def start_processes(self) -> None:
        """Start etcd and the apiserver without waiting (so that several clusters start together)."""
        self.components["etcd"].start()
        self.components["kube-apiserver"].start()

    def wait_ready(self, *, timeout: float = 90.0) -> None:
        try:
            wait_for(lambda: self.request("GET", "/readyz")[0] == 200, timeout=timeout, what=f"{self.name} apiserver /readyz")
        except ClusterError as err:
            raise ClusterError(f"{err}; see {self.components['kube-apiserver'].log} and {self.components['etcd'].log}") from None
        if self.jobs:
            for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
                if not self.components[name].running():  # an apiserver restart keeps them
                    self.components[name].start()
            self.create_fake_nodes()
            wait_for(self._nodes_ready_with_kwok, timeout=timeout, what=f"{self.name} fake nodes Ready (see {self.components['kwok'].log})")
            wait_for(self._default_service_account, timeout=timeout, what=f"{self.name} default ServiceAccount")

    def _nodes_ready_with_kwok(self) -> bool:
        """The fake nodes are Ready; kwok started again if it died. kwok v0.7.0 can die as it
        starts, "fatal error: concurrent map writes" while it compiles its stages' CEL (seen in
        CI); nothing then makes the nodes Ready."""
        kwok = self.components["kwok"]
        if not kwok.running():
            kwok.start()
            return False
        return self._nodes_ready()

    @functools.cached_property
    def _ssl_context(self) -> ssl.SSLContext:
        # Built once: the harness polls /readyz many times while a cluster starts.
        pki_dir = self.directory / "pki"
        context = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
        context.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))
        return context

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, timeout: float = 5.0, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """A small admin-authenticated HTTP call to the apiserver, for the harness's own needs."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, context=self._ssl_context, timeout=timeout) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as err:
            raw, status = err.read(), err.code
        try:
            return status, json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return status, raw.decode(errors="replace")

    def create_fake_nodes(self) -> None:
        for i in range(self.nodes):
            name = f"kwok-node-{i}"
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {FAKE_NODE_ANNOTATION: "fake"},
                    "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
                },
                "status": {
                    "allocatable": {"cpu": self.node_cpu, "memory": self.node_memory, "pods": "110"},
                    "capacity": {"cpu": self.node_cpu, "memory": self.node_memory, "pods": "110"},
                },
            }
            status, body = self.request("POST", "/api/v1/nodes", node)
            if status not in (201, 409):
                raise ClusterError(f"{self.name}: creating fake node {name} failed: {status} {body}")
            # Admission taints every new node not-ready; the node lifecycle controller would lift
            # it, but it is off here (kwok nodes have no kubelet to evict), so lift it ourselves.
            status, body = self.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, content_type=MERGE_PATCH)
            if status != 200:
                raise ClusterError(f"{self.name}: untainting fake node {name} failed: {status} {body}")

    def _nodes_ready(self) -> bool:
        status, body = self.request("GET", "/api/v1/nodes")
        if status != 200:
            return False
        ready = [
            n
            for n in body["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
        ]
        return len(ready) >= self.nodes

    def _default_service_account(self) -> bool:
        return self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200

    def stop(self) -> None:
        # Controllers first (kfed's own, then Kubernetes'), etcd last, so nothing logs a storm of
        # connection errors on the way down.
        order = ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
        for name in [n for n in self.components if n not in order] + list(order):
            if name in self.components:
                self.components[name].stop()

    # --- faults -------------------------------------------------------------------------------

    def stop_component(self, name: str) -> None:
        self.components[name].stop()

    def kill_component(self, name: str) -> None:
        self.components[name].kill()

    def start_component(self, name: str, *, wait: bool = True) -> None:
        self.components[name].start()
        if wait and name == "kube-apiserver":
            self.wait_ready()

    def compact_etcd(self) -> int:
        """Compact etcd to its current revision, so that watches from older versions get 410 Gone."""
        key = base64.b64encode(b"/registry").decode()
        revision = int(self._etcd("/v3/kv/range", {"key": key, "limit": 1})["header"]["revision"])
        self._etcd("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def _etcd(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            result = json.loads(response.read())
        assert isinstance(result, dict)
        return result

    # --- state for `kfed dev` -----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "directory": str(self.directory),
            "jobs": self.jobs,
            "server": self.server,
            "etcdPort": self.etcd_port,
            "pids": {name: component.pid for name, component in self.components.items()},
            "logs": {name: str(component.log) for name, component in self.components.items()},
        }


class LocalProvider:
    """Creates and destroys local clusters. `create` starts them all in parallel."""

    name = "local"

    def __init__(self, base_dir: Path, *, bin_dir: Path | None = None) -> None:
        self.base_dir = base_dir
        self.bin_dir = bin_dir or binary_dir()
        self.clusters: dict[str, LocalCluster] = {}

    def create(
        self,
        names: list[str],
        *,
        jobs: bool = False,
        timeout: float = 120.0,
        audit_users: tuple[str, ...] = (),
        aggregation: bool = False,
    ) -> list[LocalCluster]:
        """Start the clusters; with `audit_users`, each apiserver logs those users' requests; with
        `aggregation`, each serves APIServices (the aggregation layer's certificates and flags)."""
        clusters = [
            LocalCluster(name, self.base_dir / name, self.bin_dir, jobs=jobs, audit_users=audit_users, aggregation=aggregation)
            for name in names
        ]
        try:
            for cluster in clusters:
                self.clusters[cluster.name] = cluster
                cluster.prepare()
            for cluster in clusters:
                cluster.start_processes()
            for cluster in clusters:
                cluster.wait_ready(timeout=timeout)
        except BaseException:
            for cluster in clusters:
                cluster.stop()
            raise
        return clusters

    def delete(self, clusters: list[LocalCluster]) -> None:
        """Stop these clusters and drop their etcd data, keeping their logs: a long test session
        starts dozens, and each holds hundreds of MiB that the tests after it need."""
        for cluster in clusters:
            cluster.stop()
            self.clusters.pop(cluster.name, None)
            shutil.rmtree(cluster.directory / "etcd", ignore_errors=True)

    def delete_all(self) -> None:
        for cluster in self.clusters.values():
            cluster.stop()
        self.clusters.clear()
