"""Job controllers on local clusters (JobSet's, LeaderWorkerSet's, ...), run as an administrator
runs them without cert-manager or a Service in front of them: their CRDs applied server-side
(each is far larger than the annotation a client-side apply keeps), the controller supervised
with the cluster's admin kubeconfig and its own ports on loopback, and, for a controller with
webhooks, a serving certificate for 127.0.0.1 that the harness issues and its webhooks
registered by URL. What differs between controllers is said by each kind's module
(`manager.dev.jobset`, `manager.dev.lws`, ...)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from manager.dev import federation, supervise
from manager.dev.local import ClusterError, Component, LocalCluster, free_port, wait_for, wait_ready, webhooks_by_url
from manager.runtime import pki

WEBHOOK_MANIFESTS = "webhook-manifests.yaml"


def load_crds(bin_dir: Path, files: Sequence[Path]) -> list[dict[str, Any]]:
    """The CRDs a build script left in `bin_dir`; one that holds none is a one-line error."""
    found = []
    for name in files:
        loaded = yaml.safe_load((bin_dir / name).read_text())
        if not isinstance(loaded, dict) or loaded.get("kind") != "CustomResourceDefinition":
            raise ClusterError(f"{bin_dir / name} holds no CustomResourceDefinition")
        found.append(loaded)
    return found


def install_crds(cluster: LocalCluster, bin_dir: Path, files: Sequence[Path]) -> None:
    definitions = load_crds(bin_dir, files)
    for definition in definitions:
        federation.apply(cluster, definition)
    federation.wait_established(cluster, definitions)


def start_supervised(
    cluster: LocalCluster, component: str, argv: list[str], *, health_port: int, health_path: str = "/readyz"
) -> Component:
    """Start a controller supervised (a crash restarts it with the same command, ports and
    certificate), its log under the cluster's directory; return once its health port answers
    200 at `health_path` (controller-runtime's readiness check, unless the controller has only
    another)."""
    process = Component(component, supervise.command(component, argv), cluster.directory / "logs" / f"{component}.log")
    process.start()
    cluster.components[component] = process
    wait_ready(process, health_port, what=f"{cluster.name} {component}", path=health_path)
    return process


def _targets_pods(webhook: dict[str, Any]) -> bool:
    return any("" in rule.get("apiGroups", []) and "pods" in rule.get("resources", []) for rule in webhook.get("rules", []))


@dataclass(frozen=True)
class WebhookedKind:
    """A controller with webhooks and a controller-runtime Configuration file."""

    name: str  # its directory under the cluster's, and in the certificate's names
    shown: str  # as a person names it ("JobSet")
    binary: str  # in the build's directory; also the supervised component's name
    config_api_version: str  # of its Configuration file
    # The release's manifests name their webhook configurations generically; these say whose they are.
    configuration_names: dict[str, str]
    # Its Pod webhooks are narrowed to its own pods, as its release's kustomize patches narrow
    # them (their failurePolicy is Fail: otherwise every Pod would wait on this controller).
    pod_selector: dict[str, Any]
    # Whether a dry-run create shows the apiserver calling its defaulting webhook.
    webhooks_called: Callable[[LocalCluster], bool]
    metrics_read_certificates: bool = False  # its metrics server serves TLS from the same pair
    # Its Configuration file, when it is not the shape `configuration` writes (the JobSet and
    # LWS one): a controller whose strict decoder refuses the fields it does not have (Kubeflow
    # Trainer's) writes its own, from the same ports and directory.
    write_configuration: Callable[..., dict[str, Any]] | None = None
    # Whether it has no setting for its certificates' directory and reads controller-runtime's
    # default, `$TMPDIR/k8s-webhook-server/serving-certs`: then each process gets a TMPDIR of its
    # own under its cluster's directory (one per worker on one machine, each with its own pair).
    certs_in_tmpdir: bool = False

    def configuration(self, *, health_port: int, metrics_port: int, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
        """Its Configuration: everything on loopback, no leader election (one process, and it
        would need a namespace), its certificates from `cert_dir`, and its own management of
        them off (it would wait for a Secret and a Service that do not exist)."""
        if self.write_configuration is not None:
            return self.write_configuration(
                health_port=health_port, metrics_port=metrics_port, webhook_port=webhook_port, cert_dir=cert_dir
            )
        metrics: dict[str, Any] = {"bindAddress": f"127.0.0.1:{metrics_port}"}
        if self.metrics_read_certificates:
            metrics["certDir"] = str(cert_dir)
        return {
            "apiVersion": self.config_api_version,
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": metrics,
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        }

    def webhook_configurations(self, manifests: str, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
        """The release's webhook configurations, each webhook calling `url` + its path with
        `ca_pem`, the Pod webhooks only for this kind's pods."""

        def adapt(webhook: dict[str, Any]) -> dict[str, Any]:
            return {**webhook, "objectSelector": self.pod_selector} if _targets_pods(webhook) else webhook

        return webhooks_by_url(manifests, url, ca_pem, names=self.configuration_names, adapt=adapt)


@dataclass
class WebhookedController:
    """One cluster's controller of a `WebhookedKind`, with its files under the cluster's directory."""

    kind: WebhookedKind
    cluster: LocalCluster
    bin_dir: Path
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    webhook_port: int = field(default_factory=free_port)

    @property
    def directory(self) -> Path:
        return self.cluster.directory / self.kind.name

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def start(self) -> Component:
        """Start the controller supervised, register its webhooks once it serves them, and
        return when the apiserver calls them."""
        kind, cluster = self.kind, self.cluster
        tmpdir = self.directory / "tmp"
        cert_dir = tmpdir / "k8s-webhook-server" / "serving-certs" if kind.certs_in_tmpdir else self.directory / "certs"
        ca = pki.new_ca(f"kfed-{cluster.name}-{kind.name}-webhook-ca")
        pki.write(cert_dir, "tls", pki.issue(ca, f"{kind.name}-webhook", server_ips=("127.0.0.1",)))
        config_file = self.directory / "configuration.yaml"
        config = kind.configuration(
            health_port=self.health_port, metrics_port=self.metrics_port, webhook_port=self.webhook_port, cert_dir=cert_dir
        )
        config_file.write_text(yaml.safe_dump(config))
        # Info, not the development default of Debug, which logs every reconcile.
        argv = [
            *(["env", f"TMPDIR={tmpdir}"] if kind.certs_in_tmpdir else []),
            str(self.bin_dir / kind.binary),
            f"--config={config_file}",
            f"--kubeconfig={cluster.kubeconfig_path}",
            "--zap-log-level=info",
        ]
        process = start_supervised(cluster, kind.binary, argv, health_port=self.health_port)
        try:
            for obj in kind.webhook_configurations((self.bin_dir / WEBHOOK_MANIFESTS).read_text(), self.url, ca.cert_pem):
                federation.apply(cluster, obj)
            wait_for(
                lambda: kind.webhooks_called(cluster), timeout=60, what=f"the apiserver of {cluster.name} calling {kind.shown}'s webhooks"
            )
        except ClusterError as err:
            raise ClusterError(f"{err}; see {process.log}") from None
        return process
