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
# The CA that signs the next serving certificate. It is in `ca.crt`, the trust bundle given to
# the apiserver, a whole rotation period before any certificate it signs is served.
NEXT_CA_KEYS = ("next-ca.crt", "next-ca.key")
SECRET_KEYS = BUNDLE_KEYS + NEXT_CA_KEYS
_PEM_END = b"-----END CERTIFICATE-----"

# What the lease holder does with the Secret's bundle (`plan_rotation`).
CREATE = "create"  # nothing usable (missing, unreadable, or the served certificate expired)
ADD_NEXT_CA = "add-next-ca"  # a bundle from before the next CA existed: publish one first
ROTATE = "rotate"  # the served certificate expires within `before`: serve one from the next CA
KEEP = "keep"


def _ca_name() -> str:
    """A name of its own for each CA: a trust bundle holds up to three, and a verifier that
    looks a CA up by name alone (OpenSSL) must find the one that signed."""
    return f"kfed-webhook-ca-{pki.new_serial():x}"


def _ca_validity(validity: datetime.timedelta) -> datetime.timedelta:
    """A CA is trusted as the next one for a rotation period, signs the served certificate for
    one more, and stays trusted as the previous one for a third: three certificate lifetimes
    cover it."""
    return 3 * validity


def new_bundle(*, names: tuple[str, ...], ips: tuple[str, ...], validity: datetime.timedelta) -> dict[str, bytes]:
    """A CA, a serving certificate signed by it, and the next CA; `ca.crt` trusts both CAs."""
    authority = pki.new_ca(_ca_name(), validity=_ca_validity(validity))
    serving = pki.issue(authority, names[0] if names else "kfed-webhook", server_names=names, server_ips=ips, validity=validity)
    bundle = {"tls.crt": serving.cert_pem, "tls.key": serving.key_pem, "ca.crt": authority.cert_pem}
    return with_next_ca(bundle, validity=validity)


def with_next_ca(bundle: dict[str, bytes], *, validity: datetime.timedelta) -> dict[str, bytes]:
    """The bundle with a new next CA, added to the trust bundle; the served certificate stays."""
    following = pki.new_ca(_ca_name(), validity=_ca_validity(validity))
    trust = bundle["ca.crt"] if bundle["ca.crt"].endswith(b"\n") else bundle["ca.crt"] + b"\n"
    return {**bundle, "ca.crt": trust + following.cert_pem, "next-ca.crt": following.cert_pem, "next-ca.key": following.key_pem}


def rotated(bundle: dict[str, bytes], *, names: tuple[str, ...], ips: tuple[str, ...], validity: datetime.timedelta) -> dict[str, bytes]:
    """The next CA signs the new serving certificate; a new next CA is made. The trust bundle
    becomes three CAs: the one that signed the certificate served until now (replicas that have
    not switched yet still serve it), the one that signs the new certificate, and the new next
    CA. Any older CA is dropped now, a whole period after anything it signed was last served."""
    authority = pki.KeyPair(bundle["next-ca.crt"], bundle["next-ca.key"])
    serving = pki.issue(authority, names[0] if names else "kfed-webhook", server_names=names, server_ips=ips, validity=validity)
    previous = issuer_of(bundle["tls.crt"], certificates(bundle["ca.crt"]))
    trust = (previous or b"") + authority.cert_pem
    return with_next_ca({"tls.crt": serving.cert_pem, "tls.key": serving.key_pem, "ca.crt": trust}, validity=validity)


def certificates(pem: bytes) -> list[bytes]:
    """Each certificate of a PEM bundle, in order."""
    return [part.strip() + b"\n" + _PEM_END + b"\n" for part in pem.split(_PEM_END) if part.strip()]


def issuer_of(cert_pem: bytes, authorities: list[bytes]) -> bytes | None:
    """The one of `authorities` that signed `cert_pem`, or None."""
    for authority in authorities:
        if pki.signed_by(cert_pem, authority):
            return authority
    return None


def trusts(trust_bundle: bytes, ca_pem: bytes) -> bool:
    """Whether a trust bundle holds this CA certificate."""
    return ca_pem.strip() in {cert.strip() for cert in certificates(trust_bundle)}


def plan_rotation(bundle: dict[str, bytes] | None, *, now: datetime.datetime, before: datetime.timedelta) -> str:
    """CREATE, ADD_NEXT_CA, ROTATE or KEEP for the Secret's bundle at `now`."""
    if bundle is None or any(not bundle.get(key) for key in BUNDLE_KEYS):
        return CREATE
    try:
        expires = pki.not_after(bundle["tls.crt"])
    except ValueError:
        return CREATE
    if expires <= now:
        return CREATE
    if any(not bundle.get(key) for key in NEXT_CA_KEYS):
        return ADD_NEXT_CA
    return ROTATE if expires - now < before else KEEP


def write_bundle(directory: Path, bundle: dict[str, bytes]) -> ServingCert:
    directory.mkdir(parents=True, exist_ok=True)
    for name in BUNDLE_KEYS:
        path = directory / name
        path.write_bytes(bundle[name])
        if name == "tls.key":
            path.chmod(0o600)
    return ServingCert(directory / "tls.crt", directory / "tls.key", bundle["ca.crt"])
