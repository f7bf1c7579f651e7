"""The kind provider: the same interface as `local`, with kind clusters in containers.

It needs a running container engine. Where there is none (as on kfed's CI machines), it says
so in one line and the tests that asked for it are skipped with that line, never silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from manager.dev.binaries import REPO_ROOT
from manager.dev.local import ClusterDirectory


class ProviderUnavailableError(RuntimeError):
    """The provider cannot run on this machine; the message says why in one line."""


def _kind_version() -> str:
    for line in (REPO_ROOT / "hack" / "kube" / "versions.env").read_text().splitlines():
        if line.startswith("KIND_VERSION="):
            return line.split("=", 1)[1].strip()
    return "v0.30.0"


def unavailable_reason() -> str | None:
    """None when kind can run here, else one line saying what is missing."""
    engine = shutil.which("docker") or shutil.which("podman")
    if engine is None:
        return "kind provider skipped: no container engine (docker or podman) is installed"
    try:
        probe = subprocess.run([engine, "info"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"kind provider skipped: `{Path(engine).name} info` failed: {err}"
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return f"kind provider skipped: no container engine is running (`{Path(engine).name} info`: {reason})"
    return None


def kind_binary() -> str:
    """The kind CLI: on PATH, or `go install`ed into kfed's cache."""
    found = shutil.which("kind")
    if found:
        return found
    cache = Path(os.environ.get("KFED_CACHE_DIR", Path.home() / ".cache" / "kfed")) / f"kind-{_kind_version()}"
    target = cache / "kind"
    if not target.exists():
        subprocess.run(["go", "install", f"sigs.k8s.io/kind@{_kind_version()}"], check=True, env={**os.environ, "GOBIN": str(cache)})
    return str(target)


@dataclass
class KindCluster(ClusterDirectory):
    jobs: bool = True

    @property
    def container(self) -> str:
        return f"kfed-{self.name}-control-plane"

    def stop(self) -> None:
        subprocess.run([kind_binary(), "delete", "cluster", "--name", f"kfed-{self.name}"], check=False)

    # Fault helpers: a kind cluster's control plane lives in one container.
    def stop_component(self, name: str) -> None:
        subprocess.run(["docker", "pause", self.container], check=True)

    def kill_component(self, name: str) -> None:
        self.stop_component(name)

    def start_component(self, name: str, *, wait: bool = True) -> None:
        subprocess.run(["docker", "unpause", self.container], check=True)

    def compact_etcd(self) -> int:
        script = (
            "rev=$(ETCDCTL_API=3 etcdctl --cacert=/etc/kubernetes/pki/etcd/ca.crt --cert=/etc/kubernetes/pki/etcd/server.crt"
            " --key=/etc/kubernetes/pki/etcd/server.key endpoint status -w json | sed -E 's/.*\"revision\":([0-9]+).*/\\1/');"
            " ETCDCTL_API=3 etcdctl --cacert=/etc/kubernetes/pki/etcd/ca.crt --cert=/etc/kubernetes/pki/etcd/server.crt"
            " --key=/etc/kubernetes/pki/etcd/server.key compact $rev >/dev/null; echo $rev"
        )
        out = subprocess.run(["docker", "exec", self.container, "sh", "-c", script], check=True, capture_output=True, text=True)
        return int(out.stdout.strip())


class KindProvider:
    name = "kind"

    def __init__(self, base_dir: Path) -> None:
        reason = unavailable_reason()
        if reason:
            raise ProviderUnavailableError(reason)
        self.base_dir = base_dir
        self.clusters: dict[str, KindCluster] = {}

    def create(self, names: list[str], *, jobs: bool = True, timeout: float = 300.0, aggregation: bool = True) -> list[KindCluster]:
        """Start the clusters (kubeadm always sets up the aggregation layer: `aggregation` is accepted and always on)."""
        clusters = []
        for name in names:
            cluster = KindCluster(name, self.base_dir / name, jobs)
            cluster.directory.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [
                    kind_binary(),
                    "create",
                    "cluster",
                    "--name",
                    f"kfed-{name}",
                    "--kubeconfig",
                    str(cluster.kubeconfig_path),
                    "--wait",
                    f"{int(timeout)}s",
                ],
                check=True,
            )
            self.clusters[name] = cluster
            clusters.append(cluster)
        return clusters

    def delete(self, clusters: list[KindCluster]) -> None:
        for cluster in clusters:
            cluster.stop()
            self.clusters.pop(cluster.name, None)

    def delete_all(self) -> None:
        for cluster in self.clusters.values():
            cluster.stop()
        self.clusters.clear()
