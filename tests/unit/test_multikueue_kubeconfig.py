"""Worker kubeconfigs are validated as Kueue validates them, with Kueue's messages."""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from manager.cli import register
from manager.cli.fleet import CommandError
from manager.cli.register import _load as register_load
from manager.multikueue.controllers import clusters
from manager.multikueue.rules import kubeconfig
from manager.multikueue.rules.kubeconfig import (
    MAX_KUBECONFIG_BYTES,
    REASON_BAD,
    REASON_INSECURE,
    KubeconfigRejectedError,
    check_kubeconfig_path,
    parse_kubeconfig,
)
from manager.runtime import options
from tests.conftest import REPO_ROOT

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


# Every refusal, with its message (Kueue's, then kfed's own rules that name the field).
UNSAFE: list[tuple[bytes, str]] = [
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
    (with_("users", bearerTokenFile="/var/run/token"), "bearerTokenFile is not allowed"),
    (
        yaml.safe_dump({**GOOD, "current-context": "elsewhere"}).encode(),
        "invalid configuration: no configuration has been provided, try setting current-context",
    ),
    (
        yaml.safe_dump({k: v for k, v in GOOD.items() if k != "current-context"}).encode(),
        "invalid configuration: no configuration has been provided, try setting current-context",
    ),
    # kfed's own rules name the field.
    (
        with_("clusters", server="http://worker.example.com:6443"),
        "clusters[worker].cluster.server: Forbidden: must be an https:// URL; the bearer token would be sent in clear text",
    ),
    (
        with_("clusters", server="https://169.254.169.254"),
        "clusters[worker].cluster.server: Forbidden: link-local and cloud metadata addresses are not allowed",
    ),
    (
        with_("clusters", server="https://169.254.10.1:6443"),
        "clusters[worker].cluster.server: Forbidden: link-local and cloud metadata addresses are not allowed",
    ),
    (
        with_("clusters", server="https://[fe80::1]:6443"),
        "clusters[worker].cluster.server: Forbidden: link-local and cloud metadata addresses are not allowed",
    ),
    (
        with_("clusters", server="https://[fd00:ec2::254]"),
        "clusters[worker].cluster.server: Forbidden: link-local and cloud metadata addresses are not allowed",
    ),
    (
        with_("clusters", server="https://[::ffff:169.254.169.254]"),
        "clusters[worker].cluster.server: Forbidden: link-local and cloud metadata addresses are not allowed",
    ),
    (
        with_("clusters", server="https://2852039166"),  # 169.254.169.254 as a resolver reads it
        "clusters[worker].cluster.server: Forbidden: link-local and cloud metadata addresses are not allowed",
    ),
    (
        with_("clusters", server="https://metadata.google.internal"),
        "clusters[worker].cluster.server: Forbidden: link-local and cloud metadata addresses are not allowed",
    ),
    (
        with_("clusters", **{"proxy-url": "http://proxy.example.com:3128"}),
        "clusters[worker].cluster.proxy-url: Forbidden: proxies are not allowed",
    ),
    (
        with_("users", **{"client-certificate": "/etc/kfed/tls.crt"}),
        "users[sa].user.client-certificate: Forbidden: file paths are not allowed, use client-certificate-data",
    ),
    (
        with_("users", **{"client-key": "/etc/kfed/tls.key"}),
        "users[sa].user.client-key: Forbidden: file paths are not allowed, use client-key-data",
    ),
    (
        with_("clusters", server="https://admin:secret@worker.example.com:6443"),
        "clusters[worker].cluster.server: Forbidden: credentials in the URL are not allowed",
    ),
]


@pytest.mark.parametrize(("raw", "message"), UNSAFE)
def test_unsafe_kubeconfigs_are_rejected_naming_the_field(raw: bytes, message: str) -> None:
    with pytest.raises(KubeconfigRejectedError) as caught:
        parse_kubeconfig(raw)
    assert (caught.value.reason, str(caught.value)) == (REASON_INSECURE, message)
    assert "t0k3n" not in str(caught.value) and "secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"- not\n- a mapping\n", "failed to parse kubeconfig(apiconfig): expected one mapping"),
        (b"", "failed to parse kubeconfig(apiconfig): expected one mapping"),
        (b"kind: Config\nclusters: a: b\n", "failed to parse kubeconfig(apiconfig): the content is not valid YAML (line 2)"),
        (b"token: \xff\xfe", "failed to parse kubeconfig(apiconfig): not UTF-8: byte 0xff at offset 7"),
        (b"a: " + b"[" * 20000 + b"]" * 20000, "failed to parse kubeconfig(apiconfig): nested deeper than 128 levels"),
        (b"clusters: 7\n", "clusters: Invalid value: expected a list"),
        (b"users: [{user: {token: t0k3n}}]\n", "users[0].name: Required value"),
        (b"clusters: [{name: w, cluster: https://x}]\n", "clusters[w].cluster: Invalid value: expected a mapping"),
        (b"x" * (1024 * 1024 + 1), "failed to parse kubeconfig(apiconfig): larger than 1048576 bytes"),
    ],
)
def test_content_that_is_not_a_kubeconfig_is_a_bad_kubeconfig(raw: bytes, message: str) -> None:
    with pytest.raises(KubeconfigRejectedError) as caught:
        parse_kubeconfig(raw)
    assert (caught.value.reason, str(caught.value)) == (REASON_BAD, message)
    assert "t0k3n" not in str(caught.value)


def test_an_alias_bomb_is_refused_at_once() -> None:
    lines = ['a: &a ["t0k3n","t0k3n","t0k3n","t0k3n","t0k3n","t0k3n","t0k3n","t0k3n","t0k3n"]']
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    with pytest.raises(KubeconfigRejectedError) as caught:
        parse_kubeconfig("\n".join(lines).encode())
    assert caught.value.reason == REASON_BAD
    assert str(caught.value).startswith("failed to parse kubeconfig(apiconfig): aliases expand the document beyond")


def test_http_and_loopback_are_accepted_only_behind_the_flag() -> None:
    plain = with_("clusters", server="http://127.0.0.1:8080")
    with pytest.raises(KubeconfigRejectedError):
        parse_kubeconfig(plain)
    assert parse_kubeconfig(plain, allow_http=True)
    # The flag permits http, never the other refusals.
    with pytest.raises(KubeconfigRejectedError) as caught:
        parse_kubeconfig(with_("clusters", server="http://169.254.169.254"), allow_http=True)
    assert "link-local" in str(caught.value)
    with pytest.raises(KubeconfigRejectedError):
        parse_kubeconfig(with_("clusters", server="ftp://worker.example.com"), allow_http=True)


def test_a_certificate_given_inline_and_a_name_with_digits_are_accepted() -> None:
    inline = with_("users", **{"client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ"})
    assert parse_kubeconfig(inline)["users"][0]["user"]["client-key-data"] == "S0VZ"
    assert parse_kubeconfig(with_("clusters", server="https://worker-1.example.com:6443"))
    assert parse_kubeconfig(with_("clusters", server="https://10.0.0.7"))


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


def test_http_workers_need_the_managers_explicit_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KFED_MULTIKUEUE_ALLOW_INSECURE_HTTP", raising=False)
    assert options.parse([], component="manager").multikueue_allow_insecure_http is False
    assert options.parse(["--multikueue-allow-insecure-http"], component="manager").multikueue_allow_insecure_http is True
    monkeypatch.setenv("KFED_MULTIKUEUE_ALLOW_INSECURE_HTTP", "true")
    assert options.parse([], component="manager").multikueue_allow_insecure_http is True


# --- every caller uses the one check --------------------------------------------------------------
# Register picks the context first (its --context), and names a missing one in its own words.
UNSAFE_IN_CONTEXT = [(raw, message) for raw, message in UNSAFE if "current-context" not in message]


@pytest.mark.parametrize(("raw", "message"), UNSAFE_IN_CONTEXT)
def test_register_refuses_each_kubeconfig_the_manager_refuses(raw: bytes, message: str, tmp_path: Path) -> None:
    path = tmp_path / "worker.kubeconfig"
    path.write_bytes(raw)
    with pytest.raises(CommandError) as caught:
        register_load(str(path), None)
    assert str(caught.value) == f"kubeconfig {path} is refused ({REASON_INSECURE}): {message}"


def test_register_refuses_a_kubeconfig_too_large_for_the_managers_reader(tmp_path: Path) -> None:
    """The strictest rule wins: what register would store must pass the manager's size limit."""
    path = tmp_path / "worker.kubeconfig"
    path.write_bytes(with_("users", token="t" * MAX_KUBECONFIG_BYTES))
    with pytest.raises(CommandError) as caught:
        register_load(str(path), None)
    assert f"is refused ({REASON_BAD}): failed to parse kubeconfig(apiconfig): larger than" in str(caught.value)
    assert "ttttt" not in str(caught.value)


def test_register_accepts_what_the_manager_accepts(tmp_path: Path) -> None:
    path = tmp_path / "worker.kubeconfig"
    path.write_bytes(yaml.safe_dump(GOOD).encode())
    assert parse_kubeconfig(yaml.safe_dump(register_load(str(path), None)).encode())["current-context"] == "w"


def _calls(module: ModuleType, qualname: str) -> set[str]:
    """The names a function calls, read from its source."""
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part)
    tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
    return {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def test_the_controller_and_the_cli_read_worker_kubeconfigs_through_the_one_check() -> None:
    # I/O functions (a real apiserver exercises them in tests/integration/test_worker_credentials.py);
    # here: each reaches the rules only through parse_kubeconfig.
    assert "parse_kubeconfig" in _calls(clusters, "ClusterController._load")
    assert "validate_kubeconfig" in _calls(register, "_load")


def test_only_register_handles_a_worker_credential_in_the_cli() -> None:
    """Every other command reads the workers through the manager's read API, as the user: no
    Secret is read, and no worker kubeconfig parsed (issue #33)."""
    handling = sorted(
        path.name
        for path in (REPO_ROOT / "manager" / "cli").glob("*.py")
        if any(word in path.read_text() for word in ("Secret", "parse_kubeconfig", "from_kubeconfig(kubeconfig"))
    )
    assert handling == ["register.py"]


def test_no_other_module_holds_a_kubeconfig_rule() -> None:
    home = Path(kubeconfig.__file__).resolve()
    rules = ("tokenFile", "insecure-skip-tls-verify", "auth-provider", "proxy-url", "169.254", "exec plugins")
    copies = [
        f"{path.relative_to(REPO_ROOT)}: {rule}"
        for path in sorted((REPO_ROOT / "manager").rglob("*.py"))
        if path.resolve() != home
        for rule in rules
        if rule in path.read_text()
    ]
    assert copies == []
