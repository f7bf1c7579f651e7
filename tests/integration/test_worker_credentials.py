"""Worker kubeconfig Secrets the manager must refuse, seen as a user sees them: the
MultiKueueCluster's `Active` condition written by `python -m manager` on a real apiserver,
`kfed clusters` listing every cluster with the broken one's error, and `kfed register`
refusing the manager's own cluster."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.api import constants as c
from manager.api import kueue
from manager.api.core import Secret
from manager.api.meta import find_condition
from manager.dev.local import LocalCluster
from manager.kube.client import KubeClient
from tests.conftest import REPO_ROOT
from tests.harness import Provider, eventually
from tests.integration.controllers import SYSTEM_NAMESPACE, ControllerProcess, crd_cluster, running_manager

INSECURE = "InsecureKubeConfig"
BAD = "BadKubeConfig"


@pytest.fixture(scope="module")
def cluster(provider: Provider) -> LocalCluster:
    return crd_cluster(provider, "cred")


@pytest.fixture(scope="module")
def manager(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    with running_manager(cluster, tmp_path_factory.mktemp("manager")) as process:
        yield process


def token_kubeconfig(server: str, **cluster_fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "w",
        "clusters": [{"name": "worker", "cluster": {"server": server, **cluster_fields}}],
        "users": [{"name": "sa", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "w", "context": {"cluster": "worker", "user": "sa"}}],
    }


def with_user(**fields: Any) -> dict[str, Any]:
    kubeconfig = token_kubeconfig("https://worker.example.com:6443")
    kubeconfig["users"][0]["user"].update(fields)
    return kubeconfig


def encoded(content: bytes) -> str:
    return base64.b64encode(content).decode()


# (name, the Secret's data, the condition's reason and message)
CASES: list[tuple[str, dict[str, str], str, str]] = [
    (
        "http",
        {"kubeconfig": encoded(yaml.safe_dump(token_kubeconfig("http://worker.example.com:8080")).encode())},
        INSECURE,
        "clusters[worker].cluster.server: Forbidden: must be an https:// URL; the bearer token would be sent in clear text",
    ),
    (
        "metadata",
        {"kubeconfig": encoded(yaml.safe_dump(token_kubeconfig("https://169.254.169.254")).encode())},
        INSECURE,
        "clusters[worker].cluster.server: Forbidden: link-local and cloud metadata addresses are not allowed",
    ),
    (
        "linklocal6",
        {"kubeconfig": encoded(yaml.safe_dump(token_kubeconfig("https://[fe80::1]:6443")).encode())},
        INSECURE,
        "clusters[worker].cluster.server: Forbidden: link-local and cloud metadata addresses are not allowed",
    ),
    (
        "aws6",
        {"kubeconfig": encoded(yaml.safe_dump(token_kubeconfig("https://[fd00:ec2::254]")).encode())},
        INSECURE,
        "clusters[worker].cluster.server: Forbidden: link-local and cloud metadata addresses are not allowed",
    ),
    (
        "proxy",
        {
            "kubeconfig": encoded(
                yaml.safe_dump(token_kubeconfig("https://worker.example.com", **{"proxy-url": "http://proxy:3128"})).encode()
            )
        },
        INSECURE,
        "clusters[worker].cluster.proxy-url: Forbidden: proxies are not allowed",
    ),
    (
        "certfile",
        {"kubeconfig": encoded(yaml.safe_dump(with_user(**{"client-certificate": "/etc/tls.crt"})).encode())},
        INSECURE,
        "users[sa].user.client-certificate: Forbidden: file paths are not allowed, use client-certificate-data",
    ),
    (
        "keyfile",
        {"kubeconfig": encoded(yaml.safe_dump(with_user(**{"client-key": "/etc/tls.key"})).encode())},
        INSECURE,
        "users[sa].user.client-key: Forbidden: file paths are not allowed, use client-key-data",
    ),
    (
        "userinfo",
        {"kubeconfig": encoded(yaml.safe_dump(token_kubeconfig("https://admin:hunter2@worker.example.com")).encode())},
        INSECURE,
        "clusters[worker].cluster.server: Forbidden: credentials in the URL are not allowed",
    ),
    (
        "notyaml",
        {"kubeconfig": encoded(b"kind: Config\nclusters: a: b\n")},
        BAD,
        "failed to parse kubeconfig(apiconfig): the content is not valid YAML (line 2)",
    ),
    (
        "nokey",
        {"config": encoded(yaml.safe_dump(token_kubeconfig("https://worker.example.com")).encode())},
        BAD,
        'key "kubeconfig" not found in secret "{secret}"',
    ),
    (
        "nocontext",
        {"kubeconfig": encoded(yaml.safe_dump({**token_kubeconfig("https://worker.example.com"), "current-context": ""}).encode())},
        INSECURE,
        "invalid configuration: no configuration has been provided, try setting current-context",
    ),
    (
        "notutf8",
        {"kubeconfig": encoded(b"kind: \xff\xfe\n")},
        BAD,
        "failed to parse kubeconfig(apiconfig): not UTF-8: byte 0xff at offset 6",
    ),
]


async def condition(kube: KubeClient, name: str) -> tuple[str, str, str] | None:
    cluster = await kube.get(kueue.MultiKueueCluster, name)
    cond = find_condition(cluster.status.conditions if cluster.status else None, c.ACTIVE)
    return (cond.status, cond.reason, cond.message) if cond else None


async def register_broken(kube: KubeClient, name: str, data: dict[str, str]) -> str:
    secret = f"{name}-kubeconfig"
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret, "namespace": SYSTEM_NAMESPACE}, "data": data}
    await kube.create(Secret, body, namespace=SYSTEM_NAMESPACE)
    source = {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret}}}
    await kube.create(
        kueue.MultiKueueCluster,
        {"apiVersion": f"{c.GROUP}/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": name}, "spec": source},
    )
    return secret


async def test_each_refused_kubeconfig_sets_a_condition_naming_the_field_and_the_cli_shows_every_cluster(
    cluster: LocalCluster, manager: ControllerProcess, kube: KubeClient
) -> None:
    suffix = uuid.uuid4().hex[:4]
    expected: dict[str, tuple[str, str, str]] = {}
    for case, data, reason, message in CASES:
        name = f"{case}-{suffix}"
        secret = await register_broken(kube, name, data)
        expected[name] = ("False", reason, "load client config failed: " + message.format(secret=secret))

    async def all_conditions() -> dict[str, Any] | None:
        seen = {name: await condition(kube, name) for name in expected}
        return seen if all(seen.values()) else None

    seen = await eventually(all_conditions, timeout=60, what="an Active condition on every refused cluster")
    assert seen == expected
    assert not any("t0k3n" in str(value) or "hunter2" in str(value) for value in seen.values())

    # `kfed clusters` and `kfed status` list every cluster, each broken one with its condition's
    # message naming the field. This manager serves no read API (its apiserver has no aggregation
    # layer), so the CLI says so on stderr and shows the MultiKueueClusters alone.
    result = subprocess.run(
        [sys.executable, "-m", "manager.cli.main", "clusters", "-o", "json", f"--kubeconfig={cluster.kubeconfig_path}"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(expected) <= set(rows)
    for name, (_, reason, message) in expected.items():
        assert (rows[name]["active"], rows[name]["reason"]) == ("False", reason)
        assert (rows[name]["message"], rows[name]["error"]) == (message, None)
    assert "not read through the manager" in result.stderr
    status = subprocess.run(
        [sys.executable, "-m", "manager.cli.main", "status", f"--kubeconfig={cluster.kubeconfig_path}"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert all(name in status.stdout for name in expected) and "Traceback" not in status.stderr


async def test_a_fixed_secret_clears_the_refusal(cluster: LocalCluster, manager: ControllerProcess, kube: KubeClient) -> None:
    name = f"fixed-{uuid.uuid4().hex[:4]}"
    kubeconfig = token_kubeconfig("http://127.0.0.1:1")
    secret = await register_broken(kube, name, {"kubeconfig": encoded(yaml.safe_dump(kubeconfig).encode())})
    assert (await eventually(lambda: condition(kube, name), timeout=60, what="refused"))[1] == INSECURE
    # Port 1 on loopback refuses connections: with https the kubeconfig passes and the
    # connection is what fails.
    fixed = copy.deepcopy(kubeconfig)
    fixed["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    await kube.patch(Secret, secret, {"data": {"kubeconfig": encoded(yaml.safe_dump(fixed).encode())}}, namespace=SYSTEM_NAMESPACE)

    async def connection_failed() -> Any:
        cond = await condition(kube, name)
        return cond if cond is not None and cond[1] == "ClientConnectionFailed" else None

    await eventually(connection_failed, timeout=60, what="the refusal replaced by a connection attempt")


def test_register_refuses_the_managers_own_cluster(cluster: LocalCluster, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "manager.cli.main", "register", "myself", f"--kubeconfig={cluster.kubeconfig_path}",
            f"--manager-kubeconfig={cluster.kubeconfig_path}", "--create-service-account",
        ],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip
    _, namespace = cluster.request("GET", "/api/v1/namespaces/kube-system")
    uid = namespace["metadata"]["uid"]
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: {cluster.kubeconfig_path} points at the manager's own cluster (kube-system has uid {uid} on both); "
        "a worker must be another cluster"
    )
    # Nothing was made on it: no ServiceAccount for the manager.
    status, _ = cluster.request("GET", f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts/kfed-multikueue")
    assert status == 404
