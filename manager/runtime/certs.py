"""Webhook serving certificates: the ones given in a directory, or a fresh self-signed pair;
and the bundle kfed keeps in a Secret so that every replica serves the same certificate."""

from __future__ import annotations

import datetime
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


BUNDLE_KEYS = ("tls.crt", "tls.key", "ca.crt")


def new_bundle(*, names: tuple[str, ...], ips: tuple[str, ...], validity: datetime.timedelta) -> dict[str, bytes]:
    """A new CA and a serving certificate signed by it, as the files a Secret holds."""
    authority = pki.new_ca("kfed-webhook-ca", validity=validity)
    serving = pki.issue(authority, names[0] if names else "kfed-webhook", server_names=names, server_ips=ips, validity=validity)
    return {"tls.crt": serving.cert_pem, "tls.key": serving.key_pem, "ca.crt": authority.cert_pem}


def needs_rotation(bundle: dict[str, bytes] | None, *, now: datetime.datetime, before: datetime.timedelta) -> bool:
    """Missing, unreadable, or expiring within `before`: time for a new bundle."""
    if bundle is None or any(not bundle.get(key) for key in BUNDLE_KEYS):
        return True
    try:
        expires = min(pki.not_after(bundle["tls.crt"]), pki.not_after(bundle["ca.crt"]))
    except ValueError:
        return True
    return expires - now < before


def write_bundle(directory: Path, bundle: dict[str, bytes]) -> ServingCert:
    directory.mkdir(parents=True, exist_ok=True)
    for name in BUNDLE_KEYS:
        path = directory / name
        path.write_bytes(bundle[name])
        if name == "tls.key":
            path.chmod(0o600)
    return ServingCert(directory / "tls.crt", directory / "tls.key", bundle["ca.crt"])
