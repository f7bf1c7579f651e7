"""Webhook serving certificates: the ones given in a directory, or a fresh self-signed pair."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from manager.runtime import pki


@dataclass(frozen=True)
class ServingCert:
    cert_file: Path
    key_file: Path
    ca_pem: bytes


def ensure_serving_cert(directory: Path, *, names: tuple[str, ...], ips: tuple[str, ...]) -> ServingCert:
    """Use `tls.crt`, `tls.key` and `ca.crt` from `directory` when all are there (a mounted
    Secret); otherwise write a new CA and a serving certificate for `names` and `ips`."""
    cert, key, ca = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    if cert.exists() and key.exists() and ca.exists():
        return ServingCert(cert, key, ca.read_bytes())
    directory.mkdir(parents=True, exist_ok=True)
    authority = pki.new_ca("kfed-webhook-ca")
    serving = pki.issue(authority, names[0] if names else "kfed-webhook", server_names=names, server_ips=ips)
    cert.write_bytes(serving.cert_pem)
    key.write_bytes(serving.key_pem)
    key.chmod(0o600)
    ca.write_bytes(authority.cert_pem)
    return ServingCert(cert, key, authority.cert_pem)
