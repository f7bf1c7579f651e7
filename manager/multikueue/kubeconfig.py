"""Which worker kubeconfigs the manager accepts, with Kueue's rules and messages (pure).

A kubeconfig Secret is written by whoever registers a worker; the manager must not let it
run programs, read local files or skip TLS. Bearer tokens and inline certificate data are
the supported credentials (service account tokens and client certificates).
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import yaml

REASON_BAD = "BadKubeConfig"
REASON_INSECURE = "InsecureKubeConfig"
DEFAULT_PATH_PREFIX = "/etc/multikueue/kubeconfigs/"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class KubeconfigRejectedError(ValueError):
    """Why a kubeconfig cannot be used, with the MultiKueueCluster condition reason to show."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _insecure(message: str) -> KubeconfigRejectedError:
    return KubeconfigRejectedError(REASON_INSECURE, message)


def parse_kubeconfig(raw: bytes) -> dict[str, Any]:
    """Parse and validate a kubeconfig; raises KubeconfigRejectedError (never quoting credentials)."""
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        kind = "not UTF-8" if isinstance(err, UnicodeDecodeError) else "not valid YAML"
        raise _insecure(f"failed to parse kubeconfig(apiconfig): the content is {kind}") from None
    if not isinstance(data, dict):
        raise _insecure("failed to parse kubeconfig(apiconfig): expected a mapping")
    validate_kubeconfig(data)
    return data


def _named(data: dict[str, Any], section: str, inner: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for entry in data.get(section) or []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            body = entry.get(inner)
            out[entry["name"]] = body if isinstance(body, dict) else {}
    return out


def _is_valid_host(server: str) -> bool:
    """Kueue's isValidHostname: the URL's host is an IP address or a DNS-1123 subdomain."""
    try:
        host = urlsplit(server).hostname or ""
    except ValueError:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    host = host.lower()
    return 0 < len(host) <= 253 and all(_DNS_LABEL.match(label) for label in host.split("."))


def validate_kubeconfig(data: dict[str, Any]) -> None:
    """Kueue's validateKubeconfig: every user and cluster entry, then the current context's."""
    users = _named(data, "users", "user")
    clusters = _named(data, "clusters", "cluster")
    for user in users.values():
        if user.get("tokenFile"):
            raise _insecure("tokenFile is not allowed")
    for name, cluster in clusters.items():
        if cluster.get("insecure-skip-tls-verify"):
            raise _insecure(f"insecure TLS verification is not allowed for cluster {name}")
        if cluster.get("certificate-authority"):
            raise _insecure(f"certificate-authority file paths are not allowed, use certificate-authority-data for cluster {name}")
        if not cluster.get("server"):
            raise _insecure(f"server URL is required for cluster {name}")
    contexts = _named(data, "contexts", "context")
    current = data.get("current-context")
    if not current or current not in contexts:
        raise _insecure("invalid configuration: no configuration has been provided, try setting current-context")
    context = contexts[current]
    found = clusters.get(context.get("cluster") or "")
    user = users.get(context.get("user") or "", {})
    if found is None:
        raise _insecure(f'invalid configuration: context "{current}": cluster "{context.get("cluster")}" not found')
    if user.get("bearerTokenFile"):
        raise _insecure("bearerTokenFile is not allowed")
    if not _is_valid_host(str(found.get("server"))):
        raise _insecure("untrusted server endpoint")
    if user.get("username") or user.get("password"):
        raise _insecure("basic auth is not allowed")
    if user.get("exec"):
        raise _insecure("exec plugins are not allowed")
    if user.get("auth-provider"):
        raise _insecure("auth providers are not allowed")


def check_kubeconfig_path(raw: str, prefix: str, *, realpath: Callable[[str], str] = posixpath.realpath) -> str:
    """Kueue's validateKubeConfigPath: an absolute path with no `..`, under `prefix` once
    symlinks are resolved. Returns the resolved path; raises KubeconfigRejectedError."""
    not_allowed = "kubeconfig path is not under the allowed prefix"
    if not raw:
        raise KubeconfigRejectedError(REASON_BAD, "kubeconfig path must not be empty")
    cleaned = posixpath.normpath(raw)
    if ".." in cleaned.split("/"):
        raise KubeconfigRejectedError(REASON_BAD, f'{not_allowed}: path contains ".."')
    if not cleaned.startswith("/"):
        raise KubeconfigRejectedError(REASON_BAD, f"{not_allowed}: path must be absolute")
    allowed = realpath(prefix.rstrip("/") or "/")
    resolved = realpath(cleaned)
    if not (resolved.rstrip("/") + "/").startswith(allowed.rstrip("/") + "/"):
        raise KubeconfigRejectedError(REASON_BAD, f'{not_allowed}: "{resolved}" is not under "{allowed}"')
    return resolved
