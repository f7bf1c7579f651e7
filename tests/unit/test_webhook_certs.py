"""When kfed makes, extends and rotates its webhook certificate bundle, and what each step trusts."""

from __future__ import annotations

import datetime

import pytest

from manager.runtime import pki
from manager.runtime.certs import (
    ADD_NEXT_CA,
    CREATE,
    KEEP,
    ROTATE,
    certificates,
    issuer_of,
    new_bundle,
    plan_rotation,
    rotated,
    trusts,
)

NOW = datetime.datetime.now(datetime.UTC)
DAY = datetime.timedelta(days=1)
NAMES = ("svc.ns.svc",)


def test_a_missing_partial_or_expired_bundle_is_made_anew() -> None:
    assert plan_rotation(None, now=NOW, before=datetime.timedelta(0)) == CREATE
    bundle = new_bundle(names=NAMES, ips=("127.0.0.1",), validity=DAY)
    assert plan_rotation(bundle, now=NOW, before=datetime.timedelta(hours=1)) == KEEP
    assert plan_rotation({k: v for k, v in bundle.items() if k != "ca.crt"}, now=NOW, before=datetime.timedelta(0)) == CREATE
    assert plan_rotation({**bundle, "tls.crt": b"not a certificate"}, now=NOW, before=datetime.timedelta(0)) == CREATE
    assert plan_rotation(bundle, now=NOW + 2 * DAY, before=datetime.timedelta(0)) == CREATE


def test_a_bundle_is_rotated_within_the_window_before_it_expires() -> None:
    bundle = new_bundle(names=NAMES, ips=(), validity=datetime.timedelta(hours=10))
    now = datetime.datetime.now(datetime.UTC)  # after it was made: it expires at most 10 h from here
    assert plan_rotation(bundle, now=now, before=datetime.timedelta(hours=9)) == KEEP
    assert plan_rotation(bundle, now=now, before=datetime.timedelta(hours=11)) == ROTATE


def test_a_bundle_from_before_the_next_ca_gets_one_and_keeps_its_certificate() -> None:
    old = {k: v for k, v in new_bundle(names=NAMES, ips=(), validity=DAY).items() if not k.startswith("next-")}
    old["ca.crt"] = certificates(old["ca.crt"])[0]
    assert plan_rotation(old, now=NOW, before=datetime.timedelta(hours=1)) == ADD_NEXT_CA


def test_a_new_bundle_trusts_its_ca_and_the_next_one_before_the_next_signs_anything() -> None:
    bundle = new_bundle(names=NAMES, ips=(), validity=DAY)
    trusted = certificates(bundle["ca.crt"])
    assert len(trusted) == 2
    assert issuer_of(bundle["tls.crt"], trusted) == trusted[0]
    assert trusts(bundle["ca.crt"], bundle["next-ca.crt"])
    assert pki.not_after(bundle["next-ca.crt"]) >= pki.not_after(bundle["tls.crt"]) + DAY


@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_each_rotation_serves_a_certificate_from_a_ca_trusted_one_period_before_and_keeps_the_one_served_before(rounds: int) -> None:
    bundle = new_bundle(names=NAMES, ips=(), validity=DAY)
    for _ in range(rounds):
        before = bundle
        bundle = rotated(before, names=NAMES, ips=(), validity=DAY)
        trusted = certificates(bundle["ca.crt"])
        # The new certificate is signed by the CA that the previous bundle already trusted ...
        assert issuer_of(bundle["tls.crt"], trusted) == before["next-ca.crt"]
        assert trusts(before["ca.crt"], before["next-ca.crt"])
        # ... the certificate served until now still verifies (replicas that have not switched) ...
        assert issuer_of(before["tls.crt"], trusted) is not None
        # ... and a new next CA is published: previous, current and next, nothing older.
        assert trusted[-1] == bundle["next-ca.crt"].strip() + b"\n" and len(trusted) == 3
    assert plan_rotation(bundle, now=NOW, before=datetime.timedelta(hours=1)) == KEEP
