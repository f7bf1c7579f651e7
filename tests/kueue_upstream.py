"""Upstream Kueue as a process beside a harness cluster, for the interoperability tests.

`hack/kueue/build.sh` builds the pinned release's manager and prints a directory holding it,
the release's CRDs (crds/) and its webhook manifests; `hack/test.sh` exports that directory as
KFED_KUEUE_BIN. Kueue runs here as an administrator runs it without cert-manager's Service
plumbing: with an admin kubeconfig (a test dependency, so no RBAC of its own), its internal
certificate management off, a serving certificate for 127.0.0.1 that this module issues, and its
webhooks registered by URL.

Kueue reads its metrics certificate from a fixed path, `/etc/kueue/metrics/certs`. The harness
never writes there: each Kueue runs in a private mount namespace (util-linux `unshare`) whose
`/etc` is the host's, entry by entry, plus a `kueue/` directory from the test's own directory.
Its visibility server (`UpstreamKueue(visibility_port=...)`) reads its serving certificate from
`/visibility`, at the root: that Kueue also gets a root of its own, the host's entries bound into
a tmpfs, beside a `visibility/` directory from the test's own directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from manager.dev import federation
from manager.dev.local import ClusterError, Component, LocalCluster, free_port, wait_for, wait_ready, webhooks_by_url
from manager.runtime import pki
from tests.prerequisites import missing_prerequisite

KUEUE_NAMESPACE = "kueue-system"
# Only the Job integration is on, so only the webhooks for Jobs and Kueue's own kinds are
# registered: the others would intercept kinds the harness lacks, or every Pod.
WEBHOOK_GROUPS = frozenset({"batch", "kueue.x-k8s.io"})
# With internal certificate management off, Kueue reads its metrics serving certificate from
# this fixed path (cert-manager mounts it in a real install); it does not start without one.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# Run in a private mount namespace: the host's /etc is bound at $1/host-etc, $1/etc gets a link
# to each of its entries (its own kueue/ aside), and $1/etc is bound over /etc. Nothing outside
# $1 is written, and the mounts vanish with the process (unshare makes them private).
_PRIVATE_ETC = r"""set -e
root=$1; shift
mkdir -p "$root/host-etc"
mount --rbind /etc "$root/host-etc"
for entry in "$root"/host-etc/* "$root"/host-etc/.[!.]*; do
  name=${entry##*/}
  if [ "$name" != kueue ] && [ -e "$entry" -o -L "$entry" ] && [ ! -e "$root/etc/$name" ]; then ln -s "$entry" "$root/etc/$name"; fi
done
mount --bind "$root/etc" /etc
if [ -n "$VISIBILITY_DIR" ]; then
  new="$root/new-root"
  mkdir -p "$new"
  mount -t tmpfs kfed-root "$new"
  for entry in /* /.[!.]*; do
    [ -e "$entry" ] || [ -L "$entry" ] || continue
    name=${entry##*/}
    if [ -L "$entry" ]; then ln -s "$(readlink "$entry")" "$new/$name"
    elif [ -d "$entry" ]; then mkdir "$new/$name"; mount --rbind "$entry" "$new/$name"
    else : > "$new/$name"; mount --bind "$entry" "$new/$name"; fi
  done
  mkdir -p "$new/visibility"
  mount --bind "$VISIBILITY_DIR" "$new/visibility"
  exec chroot "$new" "$@"
fi
exec "$@"
"""
CONFIGURATION_NAMES = {
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}


def require_upstream_kueue() -> Path:
    """The directory hack/kueue/build.sh printed. Missing, it fails the test under CI and skips it elsewhere."""
    value = os.environ.get("KFED_KUEUE_BIN", "")
    if value and (Path(value) / "kueue").is_file():
        return Path(value)
    missing_prerequisite("upstream Kueue not built: export KFED_KUEUE_BIN=$(bash hack/kueue/build.sh) (hack/test.sh does)")


def configuration(
    *,
    health_port: int,
    metrics_port: int,
    webhook_port: int,
    cert_dir: Path,
    multikueue: dict[str, Any] | None = None,
    client_connection: dict[str, Any] | None = None,
    feature_gates: dict[str, bool] | None = None,
) -> dict[str, Any]:
    """Kueue's Configuration for one process on loopback: Jobs only, no leader election, no
    visibility server (it would listen on every interface), the certificates from `cert_dir`;
    `client_connection` sets its client's QPS and burst (Kueue's default: 300 and 500), one
    token bucket shared by every request (cmd/kueue sets the client's RateLimiter);
    `feature_gates` are added to the gates set here."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": {"VisibilityOnDemand": False, **(feature_gates or {})},
    }
    if multikueue is not None:
        config["multiKueue"] = multikueue
    if client_connection is not None:
        config["clientConnection"] = client_connection
    return config


def webhook_configurations(manifests: str, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations for the kinds in WEBHOOK_GROUPS, each calling `url` + its path."""

    def adapt(webhook: dict[str, Any]) -> dict[str, Any] | None:
        return webhook if {group for rule in webhook["rules"] for group in rule["apiGroups"]} <= WEBHOOK_GROUPS else None

    return webhooks_by_url(manifests, url, ca_pem, names=CONFIGURATION_NAMES, adapt=adapt)


def with_private_etc(
    root: Path, argv: list[str], *, visibility: Path | None = None, environment: dict[str, str] | None = None
) -> list[str]:
    """`argv` run with `root/etc/kueue/...` seen at `/etc/kueue/...`, in a mount namespace of its
    own, with a metrics certificate for 127.0.0.1 issued into it (and `visibility`, when given,
    seen at `/visibility`, in a root of its own). A user namespace maps the caller to root there,
    so this needs no privilege where the kernel allows user namespaces."""
    unshare = shutil.which("unshare")
    if unshare is None:
        missing_prerequisite("upstream Kueue runs in a private mount namespace: `unshare` (util-linux) is not installed")
    probe = subprocess.run([unshare, "--user", "--map-root-user", "--mount", "true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        missing_prerequisite(f"upstream Kueue runs in a private mount namespace, which this kernel refuses: {probe.stderr.strip()}")
    certs = root / "etc" / METRICS_CERT_DIR.relative_to("/etc")
    ca = pki.new_ca("kfed-test-kueue-metrics-ca")
    pki.write(certs, "tls", pki.issue(ca, "kueue-metrics", server_ips=("127.0.0.1",)))
    env = shutil.which("env") or "/usr/bin/env"
    mounts = [unshare, "--user", "--map-root-user", "--mount", "/bin/sh", "-c", _PRIVATE_ETC, "private-etc", str(root), *argv]
    extra = [f"{name}={value}" for name, value in sorted((environment or {}).items())]
    return [env, f"VISIBILITY_DIR={visibility or ''}", *extra, *mounts]


@dataclass
class UpstreamKueue:
    """One upstream Kueue manager for one harness cluster, with its own ports, files and log."""

    cluster: LocalCluster
    directory: Path
    bin_dir: Path
    multikueue: dict[str, Any] | None = None
    # Without webhooks (a benchmark whose objects arrive as the webhooks would leave them), the
    # apiserver never calls Kueue on the measured path.
    webhooks: bool = True
    log_level: str = "2"  # zap: a level name (info, error) or a verbosity above 0
    client_connection: dict[str, Any] | None = None
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    webhook_port: int = field(default_factory=free_port)
    # Kueue's feature gates beyond the defaults this module sets.
    feature_gates: dict[str, bool] = field(default_factory=dict)
    # Serve Kueue's visibility API on 127.0.0.1:visibility_port, with a serving certificate for
    # these names (the Service its APIServices name); None: no visibility server.
    visibility_port: int | None = None
    visibility_names: tuple[str, ...] = ()
    # Environment variables for the process (the worker-limits build reads its clients' limits there).
    environment: dict[str, str] = field(default_factory=dict)
    process: Component | None = None
    _ca_pem: bytes = b""

    @property
    def ca_pem(self) -> bytes:
        """The CA of the serving certificates `prepare` issued (webhooks, visibility server)."""
        return self._ca_pem

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def install_crds(self) -> None:
        """Kueue's own CRDs, applied server-side (the Workload CRD is too large for a client-side apply)."""
        kubectl = self.cluster.bin_dir / "kubectl"
        argv = [str(kubectl), f"--kubeconfig={self.cluster.kubeconfig_path}", "apply", "--server-side", "-f", str(self.bin_dir / "crds")]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise ClusterError(f"{self.cluster.name}: applying Kueue's CRDs failed: {result.stderr.strip()}")
        crds = [yaml.safe_load(path.read_text()) for path in sorted((self.bin_dir / "crds").glob("*.yaml"))]
        federation.wait_established(self.cluster, crds)

    def start(self) -> UpstreamKueue:
        """Install the CRDs, start Kueue, and register its webhooks once it serves them."""
        self.process = self.prepare()
        self.process.start()
        wait_ready(self.process, self.health_port, what=f"upstream Kueue on {self.cluster.name}", timeout=90)
        if not self.webhooks:
            return self
        self.register_webhooks()
        return self

    def prepare(self) -> Component:
        """Install the CRDs, Kueue's namespace, its certificates and Configuration: the
        process, not started (a benchmark starts it at the moment its runner starts)."""
        self.install_crds()
        federation.create(self.cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}})
        cert_dir = self.directory / "certs"
        ca = pki.new_ca(f"kfed-test-kueue-{self.cluster.name}-ca")
        pki.write(cert_dir, "tls", pki.issue(ca, "kueue-webhook", server_ips=("127.0.0.1",)))
        config_file = self.directory / "kueue-config.yaml"
        config = configuration(
            health_port=self.health_port,
            metrics_port=self.metrics_port,
            webhook_port=self.webhook_port,
            cert_dir=cert_dir,
            multikueue=self.multikueue,
            client_connection=self.client_connection,
            feature_gates=self.feature_gates,
        )
        visibility_dir = None
        if self.visibility_port is not None:
            visibility_dir = self.directory / "visibility"
            pki.write(
                visibility_dir, "tls", pki.issue(ca, "kueue-visibility", server_names=self.visibility_names, server_ips=("127.0.0.1",))
            )
            config["featureGates"]["VisibilityOnDemand"] = True
            config["visibilityServer"] = {"bindAddress": "127.0.0.1", "bindPort": self.visibility_port}
        config_file.write_text(yaml.safe_dump(config))
        argv = [
            str(self.bin_dir / "kueue"),
            f"--config={config_file}",
            f"--kubeconfig={self.cluster.kubeconfig_path}",
            f"--zap-log-level={self.log_level}",
        ]
        argv = with_private_etc(self.directory / "private-etc", argv, visibility=visibility_dir, environment=self.environment)
        self._ca_pem = ca.cert_pem
        return Component("kueue", argv, self.directory / "kueue.log")

    def register_webhooks(self) -> None:
        for obj in webhook_configurations((self.bin_dir / "webhook-manifests.yaml").read_text(), self.url, self._ca_pem):
            plural = obj["kind"].lower() + "s"
            status, body = self.cluster.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", obj)
            if status != 201:
                raise ClusterError(f"{self.cluster.name}: registering {obj['kind']}/{obj['metadata']['name']} failed: {body}")
        wait_for(self._webhooks_called, timeout=60, what=f"the apiserver of {self.cluster.name} calling Kueue's webhooks")

    def _webhooks_called(self) -> bool:
        """Kueue's Job webhook suspends a queued Job: a dry run shows when the apiserver calls it."""
        probe = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "kueue-webhook-probe", "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "probe"}},
            "spec": {
                "suspend": False,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "probe", "image": "busybox"}]}},
            },
        }
        status, body = self.cluster.request("POST", "/apis/batch/v1/namespaces/default/jobs?dryRun=All", probe)
        return status == 201 and body["spec"].get("suspend") is True

    def tail(self, lines: int = 40) -> str:
        log = self.directory / "kueue.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
