"""Worker kubeconfigs are validated as Kueue validates them, with Kueue's messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from manager.multikueue.kubeconfig import (
    REASON_BAD,
    REASON_INSECURE,
    KubeconfigRejectedError,
    check_kubeconfig_path,
    parse_kubeconfig,
)

GOOD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "w",
    "clusters": [{"name": "worker", "cluster": {"server": "https://worker.example.com:6443", "certificate-authority-data": "Q0E="}}],
    "users": [{"name": "sa", "user": {"token": "t0k3n"}}],
    "contexts": [{"name": "w", "context": {"cluster": "worker", "user": "sa"}}],
}


def with_(section: str, **fields: Any) -> bytes:
    data = copy.deepcopy(GOOD)
    key = "cluster" if section == "clusters" else "user"
    data[section][0][key].update(fields)
    return yaml.safe_dump(data).encode()


def test_a_token_and_inline_ca_data_are_accepted() -> None:
    assert parse_kubeconfig(yaml.safe_dump(GOOD).encode())["current-context"] == "w"
    assert parse_kubeconfig(with_("clusters", server="https://10.0.0.7:6443"))  # an IP address is a trusted host


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (with_("users", tokenFile="/var/run/token"), "tokenFile is not allowed"),
        (with_("clusters", **{"insecure-skip-tls-verify": True}), "insecure TLS verification is not allowed for cluster worker"),
        (
            with_("clusters", **{"certificate-authority": "/etc/ca.crt"}),
            "certificate-authority file paths are not allowed, use certificate-authority-data for cluster worker",
        ),
        (with_("clusters", server=""), "server URL is required for cluster worker"),
        (with_("clusters", server="https://bad_host!:6443"), "untrusted server endpoint"),
        (with_("users", username="admin", password="secret"), "basic auth is not allowed"),
        (with_("users", exec={"command": "aws"}), "exec plugins are not allowed"),
        (with_("users", **{"auth-provider": {"name": "gcp"}}), "auth providers are not allowed"),
        (b"- not\n- a mapping\n", "failed to parse kubeconfig(apiconfig): expected a mapping"),
        (b"clusters: [unclosed", "failed to parse kubeconfig(apiconfig): the content is not valid YAML"),
    ],
)
def test_unsafe_kubeconfigs_are_rejected_with_kueues_message(raw: bytes, message: str) -> None:
    with pytest.raises(KubeconfigRejectedError) as caught:
        parse_kubeconfig(raw)
    assert (caught.value.reason, str(caught.value)) == (REASON_INSECURE, message)
    assert "t0k3n" not in str(caught.value) and "secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("relative/worker", "kubeconfig path is not under the allowed prefix: path must be absolute"),
        ("../kubeconfigs/w1", 'kubeconfig path is not under the allowed prefix: path contains ".."'),
        ("/etc/multikueue/kubeconfigs/../../shadow", 'kubeconfig path is not under the allowed prefix: "/etc/shadow" is not under'),
        (
            "/etc/other/worker",
            'kubeconfig path is not under the allowed prefix: "/etc/other/worker" is not under "/etc/multikueue/kubeconfigs"',
        ),
        ("/etc/multikueue/kubeconfigs-evil/w", "kubeconfig path is not under the allowed prefix"),
    ],
)
def test_path_locations_must_stay_under_the_prefix(path: str, message: str) -> None:
    with pytest.raises(KubeconfigRejectedError) as caught:
        check_kubeconfig_path(path, "/etc/multikueue/kubeconfigs/", realpath=lambda p: p)
    assert caught.value.reason == REASON_BAD and str(caught.value).startswith(message)


def test_a_symlink_out_of_the_prefix_is_refused_and_a_file_under_it_accepted() -> None:
    links = {"/etc/multikueue/kubeconfigs/evil": "/root/.kube/config"}
    with pytest.raises(KubeconfigRejectedError):
        check_kubeconfig_path("/etc/multikueue/kubeconfigs/evil", "/etc/multikueue/kubeconfigs/", realpath=lambda p: links.get(p, p))
    assert check_kubeconfig_path("/etc/multikueue/kubeconfigs/w1", "/etc/multikueue/kubeconfigs/", realpath=lambda p: p).endswith("/w1")
