"""When kfed makes a new webhook certificate bundle."""

from __future__ import annotations

import datetime

from manager.runtime.certs import needs_rotation, new_bundle

NOW = datetime.datetime.now(datetime.UTC)


def test_a_missing_or_partial_bundle_is_replaced() -> None:
    assert needs_rotation(None, now=NOW, before=datetime.timedelta(0))
    bundle = new_bundle(names=("svc.ns.svc",), ips=("127.0.0.1",), validity=datetime.timedelta(days=1))
    assert not needs_rotation(bundle, now=NOW, before=datetime.timedelta(hours=1))
    assert needs_rotation({k: v for k, v in bundle.items() if k != "ca.crt"}, now=NOW, before=datetime.timedelta(0))
    assert needs_rotation({**bundle, "tls.crt": b"not a certificate"}, now=NOW, before=datetime.timedelta(0))


def test_a_bundle_is_rotated_within_the_window_before_it_expires() -> None:
    bundle = new_bundle(names=("svc.ns.svc",), ips=(), validity=datetime.timedelta(hours=10))
    now = datetime.datetime.now(datetime.UTC)  # after it was made: it expires at most 10 h from here
    assert not needs_rotation(bundle, now=now, before=datetime.timedelta(hours=9))
    assert needs_rotation(bundle, now=now, before=datetime.timedelta(hours=11))
    assert needs_rotation(bundle, now=now + datetime.timedelta(hours=10, minutes=1), before=datetime.timedelta(0))
