"""Kubeflow's MPIJob (the MPI Operator, github.com/kubeflow/mpi-operator) on local clusters, for
`kfed dev up --integrations mpijob`.

Every cluster gets the MPIJob CRD, applied server-side (it is far larger than the annotation a
client-side apply keeps). A worker also runs the MPI Operator, built by hack/mpijob/build.sh, as
an administrator runs it outside the cluster: with the worker's admin kubeconfig (given as
KUBECONFIG too, which the operator prefers to its flag), its leader-election Lease in
kube-system (its default namespace, mpi-operator, does not exist here) and its health checks on
a port of its own (the release hard-codes :8080, which hack/mpijob/build.sh makes settable, so
that one operator per worker can run on one machine). The operator serves no webhook.

For each MPIJob it runs, the operator makes a launcher batch/v1 Job (which the worker's Job
controller runs) and one Pod per worker, all labelled with the MPIJob's name. On kwok's nodes,
kfed's pod stages (`kwok-pod-stages.yaml`) finish the launcher's pod, as a Job's, after its
`pod-complete.stage.kwok.x-k8s.io/delay`, and keep the worker pods running: the launcher
finishing is what makes an MPIJob Succeeded. The manager runs no operator: there MPIJobs are
MultiKueue's to dispatch (Kueue marks them managed by it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from manager.dev import controllers
from manager.dev.local import ClusterError, Component, LocalCluster, free_port, wait_for

COMPONENT = "mpi-operator"
BINARY = "mpi-operator"
CRD_FILE = Path("crds") / "kubeflow.org_mpijobs.yaml"
LOCK_NAMESPACE = "kube-system"
# The operator's Lease is named after it (cmd/mpi-operator/app/server.go's controllerName).
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{LOCK_NAMESPACE}/leases/mpi-operator"
HEALTH_ADDRESS_VARIABLE = "KFED_MPI_OPERATOR_HEALTH_ADDR"


def crd(bin_dir: Path) -> dict[str, Any]:
    return controllers.load_crds(bin_dir, [CRD_FILE])[0]


def install_crd(cluster: LocalCluster, bin_dir: Path) -> None:
    controllers.install_crds(cluster, bin_dir, [CRD_FILE])


def command(bin_dir: Path, *, kubeconfig: Path, health_port: int) -> list[str]:
    """The operator's command line: its environment first (through env(1), so the supervisor
    can restart it as it is), then its flags."""
    return [
        "env",
        f"KUBECONFIG={kubeconfig}",
        f"{HEALTH_ADDRESS_VARIABLE}=127.0.0.1:{health_port}",
        str(bin_dir / BINARY),
        f"--kubeConfig={kubeconfig}",
        f"--lock-namespace={LOCK_NAMESPACE}",
        # Its default client limits (5 QPS) slow every MPIJob it makes; kfed's test clusters are local.
        "--kube-api-qps=50",
        "--kube-api-burst=100",
    ]


@dataclass
class MPIOperator:
    """The MPI Operator of one cluster, its log under the cluster's directory."""

    cluster: LocalCluster
    bin_dir: Path
    health_port: int = field(default_factory=free_port)

    def start(self) -> Component:
        """Start the operator supervised, and return once it leads (it runs MPIJobs only then).
        Its health server (/healthz; it has no /readyz) answers before it leads, as a standby's
        does: only its Lease says it works."""
        argv = command(self.bin_dir, kubeconfig=self.cluster.kubeconfig_path, health_port=self.health_port)
        process = controllers.start_supervised(self.cluster, COMPONENT, argv, health_port=self.health_port, health_path="/healthz")

        def leading() -> bool:
            if not process.running():
                raise ClusterError(f"{self.cluster.name} {COMPONENT} exited")
            status, body = self.cluster.request("GET", LEASE_PATH)
            return status == 200 and bool(((body or {}).get("spec") or {}).get("holderIdentity"))

        try:
            wait_for(leading, timeout=60, what=f"{self.cluster.name} {COMPONENT} leading (its Lease held)")
        except ClusterError as err:
            raise ClusterError(f"{err}; see {process.log}") from None
        return process


def start_controller(cluster: LocalCluster, bin_dir: Path) -> Component:
    return MPIOperator(cluster, bin_dir).start()
