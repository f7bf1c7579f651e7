"""Flags and environment settings of `python -m manager` and `python -m worker_agent`.

Every flag has an environment variable (`KFED_` + the flag in capitals): a flag given on
the command line wins over the environment, which wins over the default.
"""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass

from manager.kube.leader import LeaderConfig


@dataclass
class Options:
    kubeconfig: str | None
    context: str | None
    namespace: str
    qps: float
    burst: int
    leader_elect: bool
    leader_election_id: str
    lease_duration: float
    renew_deadline: float
    retry_period: float
    identity: str
    health_address: str
    metrics_address: str
    webhooks: bool
    webhook_address: str
    webhook_cert_dir: str | None
    webhook_url: str | None
    webhook_service: str | None
    config: str | None
    log_level: str
    feature_gates: str
    shutdown_timeout: float
    kubeconfig_path_prefix: str
    multikueue_allow_insecure_http: bool
    webhook_cert_secret: str | None
    webhook_cert_validity: str
    webhook_cert_rotate_before: str
    webhook_cert_check_interval: float
    visibility_address: str
    visibility_service: str
    visibility_service_port: int

    def leader_config(self) -> LeaderConfig:
        """The leader election these flags ask for: the Lease --leader-election-id in --namespace, held as --identity."""
        return LeaderConfig(
            self.namespace, self.leader_election_id, self.identity, self.lease_duration, self.renew_deadline, self.retry_period
        )


def _env(name: str, default: str | None) -> str | None:
    return os.environ.get("KFED_" + name.upper().replace("-", "_"), default)


def _bool(value: str | None) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def parse(argv: list[str] | None, *, component: str) -> Options:
    p = argparse.ArgumentParser(prog=f"python -m {component}", description=f"kfed {component}: Kueue's admission loop on one cluster.")
    p.add_argument(
        "--kubeconfig", default=_env("kubeconfig", os.environ.get("KUBECONFIG")), help="kubeconfig file; in-cluster credentials when unset"
    )
    p.add_argument("--context", default=_env("context", None), help="kubeconfig context")
    p.add_argument("--namespace", default=_env("namespace", "kfed-system"), help="where the leader-election Lease lives")
    p.add_argument("--kube-api-qps", dest="qps", type=float, default=float(_env("kube-api-qps", "300") or 300))
    p.add_argument("--kube-api-burst", dest="burst", type=int, default=int(_env("kube-api-burst", "500") or 500))
    p.add_argument(
        "--leader-elect", dest="leader_elect", action=argparse.BooleanOptionalAction, default=_bool(_env("leader-elect", "true"))
    )
    p.add_argument("--leader-election-id", default=_env("leader-election-id", f"kfed-{component.replace('_', '-')}"))
    p.add_argument("--lease-duration", type=float, default=float(_env("lease-duration", "15") or 15))
    p.add_argument("--renew-deadline", type=float, default=float(_env("renew-deadline", "10") or 10))
    p.add_argument("--retry-period", type=float, default=float(_env("retry-period", "2") or 2))
    p.add_argument("--identity", default=_env("identity", f"{socket.gethostname()}_{os.getpid()}"))
    p.add_argument("--health-probe-bind-address", dest="health_address", default=_env("health-probe-bind-address", ":8081"))
    p.add_argument("--metrics-bind-address", dest="metrics_address", default=_env("metrics-bind-address", ":8080"))
    p.add_argument("--webhooks", action=argparse.BooleanOptionalAction, default=_bool(_env("webhooks", "true")))
    p.add_argument("--webhook-bind-address", dest="webhook_address", default=_env("webhook-bind-address", ":9443"))
    p.add_argument("--webhook-cert-dir", default=_env("webhook-cert-dir", None), help="tls.crt, tls.key and ca.crt; generated when absent")
    p.add_argument("--webhook-url", default=_env("webhook-url", None), help="the URL the apiserver calls (local clusters)")
    p.add_argument("--webhook-service", default=_env("webhook-service", None), help="namespace/name of the webhook Service (in a cluster)")
    p.add_argument(
        "--webhook-cert-secret",
        default=_env("webhook-cert-secret", None),
        help="keep the webhook certificate in this Secret of --namespace (made, shared by replicas, rotated)",
    )
    p.add_argument("--webhook-cert-validity", default=_env("webhook-cert-validity", "8760h"), help="lifetime of a new certificate")
    p.add_argument(
        "--webhook-cert-rotate-before", default=_env("webhook-cert-rotate-before", "720h"), help="rotate this long before expiry"
    )
    p.add_argument("--webhook-cert-check-interval", type=float, default=float(_env("webhook-cert-check-interval", "60") or 60))
    p.add_argument("--config", default=_env("config", None), help="a Kueue Configuration file (fairSharing, admissionFairSharing, ...)")
    p.add_argument(
        "--feature-gates",
        default=_env("feature-gates", ""),
        help="Kueue's feature gates, Name=true,Other=false, over the --config file's featureGates",
    )
    p.add_argument("--log-level", default=_env("log-level", "info"), choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--multikueue-kubeconfig-path-prefix",
        dest="kubeconfig_path_prefix",
        default=_env("multikueue-kubeconfig-path-prefix", "/etc/multikueue/kubeconfigs/"),
        help="MultiKueueClusters with locationType Path may only read kubeconfigs under this directory",
    )
    p.add_argument(
        "--multikueue-allow-insecure-http",
        action=argparse.BooleanOptionalAction,
        default=_bool(_env("multikueue-allow-insecure-http", "false")),
        help="accept worker kubeconfigs whose server is http:// (the bearer token travels in clear text; local development only)",
    )
    p.add_argument("--shutdown-timeout", type=float, default=float(_env("shutdown-timeout", "30") or 30))
    p.add_argument(
        "--visibility-bind-address",
        dest="visibility_address",
        default=_env("visibility-bind-address", ""),
        help="serve Kueue's visibility API (visibility.kueue.x-k8s.io) here, as an aggregated API server; off when empty",
    )
    p.add_argument(
        "--visibility-service",
        default=_env("visibility-service", "kfed-system/kfed-visibility"),
        help="namespace/name of the Service its APIServices name (the serving certificate is made for it)",
    )
    p.add_argument(
        "--visibility-service-port",
        type=int,
        default=int(_env("visibility-service-port", "443") or 443),
        help="the Service port the APIServices name",
    )
    args = p.parse_args(argv)
    if args.visibility_address:
        namespace, slash, name = args.visibility_service.partition("/")
        if not (namespace and slash and name) or "/" in name:
            p.error(f"--visibility-service: expected namespace/name, got {args.visibility_service!r}")
        if not args.webhooks:
            p.error("--visibility-bind-address: the visibility API serves the webhooks' certificate; drop --no-webhooks")
    return Options(**vars(args))
