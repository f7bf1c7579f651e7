"""LeaderWorkerSet (sigs.k8s.io/lws) on local clusters, for `kfed dev up --integrations lws`.

Every cluster gets the LeaderWorkerSet CRD, applied server-side, and runs the LWS controller,
built by hack/lws/build.sh, as an administrator runs it without cert-manager or a Service in
front of it (as JobSet's, `manager.dev.jobset`): with the cluster's admin kubeconfig, its
internal certificate management off, a serving certificate for 127.0.0.1 that the harness
issues, its webhooks registered by URL (its Pod webhooks only for LWS pods, as its release's
kustomize patches narrow them), and its own health and metrics ports.

Unlike JobSet, the manager runs the controller too: a LeaderWorkerSet has no managedBy, so
Kueue's MultiKueue lets the manager's controller create its (gated) pods and copies the object
to a worker, where it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from manager.api.lws import SET_NAME_LABEL
from manager.dev import federation, supervise
from manager.dev.local import ClusterError, Component, LocalCluster, free_port, wait_for, wait_ready, webhooks_by_url
from manager.runtime import pki

COMPONENT = "lws-controller"
CRD_FILE = Path("crds") / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
WEBHOOK_MANIFESTS = "webhook-manifests.yaml"
LWS_PATH = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{namespace}/leaderworkersets"
# The release's manifests name their webhook configurations generically; these say whose they are.
CONFIGURATION_NAMES = {
    "MutatingWebhookConfiguration": "lws-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "lws-validating-webhook-configuration",
}
LWS_POD_SELECTOR = {"matchExpressions": [{"key": SET_NAME_LABEL, "operator": "Exists"}]}


def crd(bin_dir: Path) -> dict[str, Any]:
    loaded = yaml.safe_load((bin_dir / CRD_FILE).read_text())
    if not isinstance(loaded, dict) or loaded.get("kind") != "CustomResourceDefinition":
        raise ClusterError(f"{bin_dir / CRD_FILE} holds no CustomResourceDefinition")
    return loaded


def install_crd(cluster: LocalCluster, bin_dir: Path) -> None:
    definition = crd(bin_dir)
    federation.apply(cluster, definition)
    federation.wait_established(cluster, [definition])


def configuration(*, health_port: int, metrics_port: int, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """The controller's Configuration (config.lws.x-k8s.io/v1alpha1): everything on loopback, no
    leader election (one process), its certificates from `cert_dir`, its own management of them off."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def _targets_pods(webhook: dict[str, Any]) -> bool:
    return any("" in rule.get("apiGroups", []) and "pods" in rule.get("resources", []) for rule in webhook.get("rules", []))


def webhook_configurations(manifests: str, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, each webhook calling `url` + its path with `ca_pem`,
    the Pod webhooks only for LWS pods."""

    def adapt(webhook: dict[str, Any]) -> dict[str, Any]:
        return {**webhook, "objectSelector": LWS_POD_SELECTOR} if _targets_pods(webhook) else webhook

    return webhooks_by_url(manifests, url, ca_pem, names=CONFIGURATION_NAMES, adapt=adapt)


@dataclass
class LeaderWorkerSetController:
    """The LWS controller of one cluster, with its files under the cluster's directory."""

    cluster: LocalCluster
    bin_dir: Path
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    webhook_port: int = field(default_factory=free_port)

    @property
    def directory(self) -> Path:
        return self.cluster.directory / "lws"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def start(self) -> Component:
        """Start the controller supervised, register its webhooks once it serves them, and return
        when the apiserver calls them."""
        cert_dir = self.directory / "certs"
        ca = pki.new_ca(f"kfed-{self.cluster.name}-lws-webhook-ca")
        pki.write(cert_dir, "tls", pki.issue(ca, "lws-webhook", server_ips=("127.0.0.1",)))
        config_file = self.directory / "configuration.yaml"
        config = configuration(
            health_port=self.health_port, metrics_port=self.metrics_port, webhook_port=self.webhook_port, cert_dir=cert_dir
        )
        config_file.write_text(yaml.safe_dump(config))
        argv = [
            str(self.bin_dir / "lws-controller"),
            f"--config={config_file}",
            f"--kubeconfig={self.cluster.kubeconfig_path}",
            "--zap-log-level=info",
        ]
        process = Component(COMPONENT, supervise.command(COMPONENT, argv), self.cluster.directory / "logs" / f"{COMPONENT}.log")
        process.start()
        self.cluster.components[COMPONENT] = process

        wait_ready(process, self.health_port, what=f"{self.cluster.name} {COMPONENT}")
        try:
            for obj in webhook_configurations((self.bin_dir / WEBHOOK_MANIFESTS).read_text(), self.url, ca.cert_pem):
                federation.apply(self.cluster, obj)
            wait_for(self._webhooks_called, timeout=60, what=f"the apiserver of {self.cluster.name} calling LeaderWorkerSet's webhooks")
        except ClusterError as err:
            raise ClusterError(f"{err}; see {process.log}") from None
        return process

    def _webhooks_called(self) -> bool:
        """LWS's defaulting webhook sets the subdomain policy (the CRD has no such default): a dry
        run shows when the apiserver calls it, so no LeaderWorkerSet created afterwards misses it."""
        pod = {"containers": [{"name": "probe", "image": "busybox"}]}
        probe = {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws-webhook-probe", "namespace": "default"},
            "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": pod}}},
        }
        status, body = self.cluster.request("POST", LWS_PATH.format(namespace="default") + "?dryRun=All", probe)
        return status == 201 and (body["spec"].get("networkConfig") or {}).get("subdomainPolicy") == "Shared"


def start_controller(cluster: LocalCluster, bin_dir: Path) -> Component:
    return LeaderWorkerSetController(cluster, bin_dir).start()
