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

from manager.api.manifest import YamlRefusedError, iter_yaml

REASON_BAD = "BadKubeConfig"
REASON_INSECURE = "InsecureKubeConfig"
DEFAULT_PATH_PREFIX = "/etc/multikueue/kubeconfigs/"
MAX_KUBECONFIG_BYTES = 1 << 20  # a Secret holds at most 1 MiB
# Where a bearer token must never go: link-local addresses (the cloud metadata services among
# them) and AWS's IPv6 metadata address.
FORBIDDEN_NETWORKS = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
    ipaddress.ip_network("fd00:ec2::254/128"),
)
METADATA_HOSTNAMES = frozenset({"metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"})

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)


class KubeconfigRejectedError(ValueError):
    """Why a kubeconfig cannot be used, with the MultiKueueCluster condition reason to show."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _insecure(message: str) -> KubeconfigRejectedError:
    return KubeconfigRejectedError(REASON_INSECURE, message)


def _bad(message: str) -> KubeconfigRejectedError:
    return KubeconfigRejectedError(REASON_BAD, message)


def parse_kubeconfig(raw: bytes, *, allow_http: bool = False) -> dict[str, Any]:
    """The one check of a worker kubeconfig, as the manager reads it from a Secret or a file:
    parse it, then apply the rules; raises KubeconfigRejectedError (never quoting
    credentials). Content that is not a kubeconfig at all is BadKubeConfig. The reader is the
    manifests' one, with its limits on size, depth and aliases. The MultiKueueCluster
    controller, `kfed register` (through `validate_kubeconfig`) and the CLI all call it."""
    if len(raw) > MAX_KUBECONFIG_BYTES:
        raise _bad(f"failed to parse kubeconfig(apiconfig): larger than {MAX_KUBECONFIG_BYTES} bytes")
    try:
        documents = [data for data in iter_yaml(raw) if data is not None]
    except YamlRefusedError as err:
        raise _bad(f"failed to parse kubeconfig(apiconfig): {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise _bad(f"failed to parse kubeconfig(apiconfig): the content is not valid YAML{where}") from None
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise _bad("failed to parse kubeconfig(apiconfig): expected one mapping")
    _check_rules(documents[0], allow_http=allow_http)
    return documents[0]


def validate_kubeconfig(data: dict[str, Any], *, allow_http: bool = False) -> None:
    """`parse_kubeconfig` over a kubeconfig not yet stored: serialised as `kfed register` writes
    it into the Secret, it passes the same checks (size and reader limits included) as the
    manager applies when it reads the Secret."""
    try:
        raw = yaml.safe_dump(data).encode()
    except yaml.YAMLError:
        raise _bad("failed to parse kubeconfig(apiconfig): the content cannot be written as YAML") from None
    parse_kubeconfig(raw, allow_http=allow_http)


def _named(data: dict[str, Any], section: str, inner: str) -> dict[str, dict[str, Any]]:
    entries = data.get(section)
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise _bad(f"{section}: Invalid value: expected a list")
    out: dict[str, dict[str, Any]] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise _bad(f"{section}[{i}].name: Required value")
        body = entry.get(inner)
        if body is not None and not isinstance(body, dict):
            raise _bad(f"{section}[{entry['name']}].{inner}: Invalid value: expected a mapping")
        out[entry["name"]] = body or {}
    return out


def _host(server: str) -> str | None:
    try:
        return urlsplit(server).hostname
    except ValueError:
        return None


def _is_valid_host(host: str) -> bool:
    """Kueue's isValidHostname: the URL's host is an IP address or a DNS-1123 subdomain."""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    host = host.lower()
    return 0 < len(host) <= 253 and all(_DNS_LABEL.match(label) for label in host.split("."))


def _forbidden_address(host: str) -> bool:
    """Link-local and cloud metadata addresses, also as a resolver reads them: a name whose last
    label is a number (`2852039166`, `169.254.43518`, `0xa9.0xfe.0xa9.0xfe`) is an IPv4 address."""
    if host.lower() in METADATA_HOSTNAMES:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return bool(_NUMERIC_LABEL.match(host.rsplit(".", 1)[-1]))
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in FORBIDDEN_NETWORKS)


def _check_server(name: str, server: str, *, allow_http: bool) -> None:
    field = f"clusters[{name}].cluster.server"
    try:
        parts = urlsplit(server)
    except ValueError:
        raise _insecure(f"{field}: Invalid value: not a URL") from None
    if parts.username is not None or parts.password is not None:
        raise _insecure(f"{field}: Forbidden: credentials in the URL are not allowed")
    if parts.scheme != "https" and not (allow_http and parts.scheme == "http"):
        raise _insecure(f"{field}: Forbidden: must be an https:// URL; the bearer token would be sent in clear text")
    if parts.hostname and _forbidden_address(parts.hostname):
        raise _insecure(f"{field}: Forbidden: link-local and cloud metadata addresses are not allowed")


def _check_rules(data: dict[str, Any], *, allow_http: bool = False) -> None:
    """Kueue's validateKubeconfig (its messages), then kfed's own rules, which name the field:
    an https:// server that is not link-local or a metadata address and has no credentials in
    it, no proxy-url, no client certificate or key file. `allow_http` (the manager's
    --multikueue-allow-insecure-http flag) permits http:// servers."""
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
    if not _is_valid_host(_host(str(found.get("server"))) or ""):
        raise _insecure("untrusted server endpoint")
    if user.get("username") or user.get("password"):
        raise _insecure("basic auth is not allowed")
    if user.get("exec"):
        raise _insecure("exec plugins are not allowed")
    if user.get("auth-provider"):
        raise _insecure("auth providers are not allowed")
    for name, cluster in clusters.items():
        _check_server(name, str(cluster.get("server")), allow_http=allow_http)
        if cluster.get("proxy-url"):
            raise _insecure(f"clusters[{name}].cluster.proxy-url: Forbidden: proxies are not allowed")
    for name, entry in users.items():
        for key in ("client-certificate", "client-key"):
            if entry.get(key):
                raise _insecure(f"users[{name}].user.{key}: Forbidden: file paths are not allowed, use {key}-data")


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
