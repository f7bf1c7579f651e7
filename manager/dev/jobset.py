"""JobSet (sigs.k8s.io/jobset) on local clusters, for `kfed dev up --integrations jobset`.

Every cluster gets the JobSet CRD, applied server-side (it is far larger than the annotation a
client-side apply keeps). A worker also runs the JobSet controller, built by hack/jobset/build.sh,
as an administrator runs it without cert-manager or a Service in front of it: with the worker's
admin kubeconfig, its internal certificate management off (it would wait for a Secret and a
Service that do not exist), a serving certificate for 127.0.0.1 that the harness issues, its
webhooks registered by URL, and its own health and metrics ports (its default :8081 is kfed's).
The manager runs no JobSet controller: there JobSets are MultiKueue's to dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from manager.api.jobset import JOBSET_NAME_LABEL
from manager.dev import federation, supervise
from manager.dev.local import ClusterError, Component, LocalCluster, free_port, wait_for, wait_ready, webhooks_by_url
from manager.runtime import pki

COMPONENT = "jobset-controller"
CRD_FILE = Path("crds") / "jobset.x-k8s.io_jobsets.yaml"
WEBHOOK_MANIFESTS = "webhook-manifests.yaml"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets"
# The release's manifests name their webhook configurations generically; these say whose they are.
CONFIGURATION_NAMES = {
    "MutatingWebhookConfiguration": "jobset-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "jobset-validating-webhook-configuration",
}
# The release's kustomize patches narrow its Pod webhooks to JobSet pods (their failurePolicy is
# Fail, so without this every Pod on the cluster would wait on the JobSet controller).
JOBSET_POD_SELECTOR = {"matchExpressions": [{"key": JOBSET_NAME_LABEL, "operator": "Exists"}]}


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
    """The controller's Configuration (config.jobset.x-k8s.io/v1alpha1): everything on loopback,
    no leader election (one process, and it would need a namespace), certificates from `cert_dir`
    (its metrics server reads the same pair, which is why it is named there too)."""
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}", "certDir": str(cert_dir)},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def _targets_pods(webhook: dict[str, Any]) -> bool:
    return any("" in rule.get("apiGroups", []) and "pods" in rule.get("resources", []) for rule in webhook.get("rules", []))


def webhook_configurations(manifests: str, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, each webhook calling `url` + its path with `ca_pem`,
    the Pod webhooks only for JobSet pods."""

    def adapt(webhook: dict[str, Any]) -> dict[str, Any]:
        return {**webhook, "objectSelector": JOBSET_POD_SELECTOR} if _targets_pods(webhook) else webhook

    return webhooks_by_url(manifests, url, ca_pem, names=CONFIGURATION_NAMES, adapt=adapt)


@dataclass
class JobSetController:
    """The JobSet controller of one worker cluster, with its files under the cluster's directory."""

    cluster: LocalCluster
    bin_dir: Path
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    webhook_port: int = field(default_factory=free_port)

    @property
    def directory(self) -> Path:
        return self.cluster.directory / "jobset"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def start(self) -> Component:
        """Start the controller supervised (a crash restarts it, with the same ports and
        certificate), register its webhooks once it serves them, and return when the apiserver
        calls them."""
        cert_dir = self.directory / "certs"
        ca = pki.new_ca(f"kfed-{self.cluster.name}-jobset-webhook-ca")
        pki.write(cert_dir, "tls", pki.issue(ca, "jobset-webhook", server_ips=("127.0.0.1",)))
        config_file = self.directory / "configuration.yaml"
        config = configuration(
            health_port=self.health_port, metrics_port=self.metrics_port, webhook_port=self.webhook_port, cert_dir=cert_dir
        )
        config_file.write_text(yaml.safe_dump(config))
        # Info, not the development default of Debug, which logs every reconcile.
        argv = [
            str(self.bin_dir / "jobset-controller"),
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
            wait_for(self._webhooks_called, timeout=60, what=f"the apiserver of {self.cluster.name} calling JobSet's webhooks")
        except ClusterError as err:
            raise ClusterError(f"{err}; see {process.log}") from None
        return process

    def _webhooks_called(self) -> bool:
        """JobSet's defaulting webhook turns on DNS hostnames (the CRD has no such default): a
        dry run shows when the apiserver calls it, so no JobSet created afterwards misses it."""
        pod = {"restartPolicy": "Never", "containers": [{"name": "probe", "image": "busybox"}]}
        probe = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "jobset-webhook-probe", "namespace": "default"},
            "spec": {"replicatedJobs": [{"name": "probe", "template": {"spec": {"template": {"spec": pod}}}}]},
        }
        status, body = self.cluster.request("POST", JOBSETS.format(namespace="default") + "?dryRun=All", probe)
        return status == 201 and body["spec"].get("network", {}).get("enableDNSHostnames") is True


def start_controller(cluster: LocalCluster, bin_dir: Path) -> Component:
    return JobSetController(cluster, bin_dir).start()
