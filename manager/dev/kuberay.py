"""KubeRay (github.com/ray-project/kuberay/ray-operator) on local clusters, for `kfed dev up
--integrations rayjob,raycluster`.

Every cluster gets the RayCluster and RayJob CRDs, applied server-side (each is far larger than
the annotation a client-side apply keeps). A worker also runs the KubeRay operator, built by
hack/kuberay/build.sh, as an administrator runs it without a Service in front of it: with the
worker's admin kubeconfig, no leader election (one process, and it would need a namespace),
and its own health and metrics ports on loopback (its defaults :8082 and :8080 would collide
between workers on one machine). Its only webhook validates RayClusters, and only runs with
ENABLE_WEBHOOKS=true: a release installs it only with cert-manager, so it stays off here and
the apiserver's CRD validation is what checks a Ray object, as in KubeRay's default install.

The manager runs no operator: there RayJobs and RayClusters carry managedBy MultiKueue, which
KubeRay leaves alone, and MultiKueue dispatches them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from manager.dev import controllers
from manager.dev.local import Component, LocalCluster, free_port

BINARY = "ray-operator"  # in the build's directory; also the supervised component's name
COMPONENT = BINARY
CRD_FILES = (Path("crds") / "ray.io_rayclusters.yaml", Path("crds") / "ray.io_rayjobs.yaml")


def crds(bin_dir: Path) -> list[dict[str, Any]]:
    return controllers.load_crds(bin_dir, CRD_FILES)


def install_crds(cluster: LocalCluster, bin_dir: Path) -> None:
    controllers.install_crds(cluster, bin_dir, CRD_FILES)


def argv(bin_dir: Path, *, kubeconfig: Path, health_port: int, metrics_port: int) -> list[str]:
    """The operator's command line: everything on loopback, no leader election, console logs."""
    return [
        str(bin_dir / BINARY),
        f"--kubeconfig={kubeconfig}",
        f"--health-probe-bind-address=127.0.0.1:{health_port}",
        f"--metrics-addr=127.0.0.1:{metrics_port}",
        "--enable-leader-election=false",
        "--log-stdout-encoder=console",
    ]


@dataclass
class KubeRayOperator:
    """The KubeRay operator of one worker cluster, its log under the cluster's directory."""

    cluster: LocalCluster
    bin_dir: Path
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)

    def start(self) -> Component:
        """Start the operator supervised (a crash restarts it, with the same ports) and return
        once it is ready."""
        command = argv(self.bin_dir, kubeconfig=self.cluster.kubeconfig_path, health_port=self.health_port, metrics_port=self.metrics_port)
        return controllers.start_supervised(self.cluster, COMPONENT, command, health_port=self.health_port)


def start_operator(cluster: LocalCluster, bin_dir: Path) -> Component:
    return KubeRayOperator(cluster, bin_dir).start()
