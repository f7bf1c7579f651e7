"""kubernetes_asyncio loaded lean: kfed's processes skip its generated models, and code that
wants the whole client still gets it. Each case runs in a fresh interpreter, since what is
imported is the point."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_manager_and_the_cli_import_no_generated_model() -> None:
    out = run_python(
        """
        import sys
        import manager.__main__, worker_agent.__main__, manager.cli.main
        loaded = [m for m in sys.modules if m.startswith(("kubernetes_asyncio.client.models.", "kubernetes_asyncio.client.api."))]
        print(len(loaded))
        """
    )
    assert out == "0"


def test_the_whole_client_is_still_there_for_who_asks() -> None:
    out = run_python(
        """
        import manager.kube.client
        import kubernetes_asyncio
        from kubernetes_asyncio import client, watch
        api = client.ApiClient.__new__(client.ApiClient)  # the deserializer needs no session
        pod = api._ApiClient__deserialize({"metadata": {"name": "p"}}, "V1Pod")
        print(kubernetes_asyncio.__version__ != "", client.CoreV1Api.__name__, type(pod).__name__, pod.metadata.name, watch.Watch.__name__)
        """
    )
    assert out == "True CoreV1Api V1Pod p Watch"


def test_a_star_import_and_a_model_lookup_load_the_package_on_demand() -> None:
    out = run_python(
        """
        import manager.kube.client
        import kubernetes_asyncio.client.models as models
        print(models.V1ObjectMeta(name="x").name)
        from kubernetes_asyncio.client import *
        print(CoreV1Api.__name__)
        """
    )
    assert out.split() == ["x", "CoreV1Api"]


def test_kubernetes_asyncio_imported_first_is_left_as_it_is() -> None:
    out = run_python(
        """
        import kubernetes_asyncio
        import manager.kube.client
        from kubernetes_asyncio import client
        print(type(client).__name__, "kubernetes_asyncio.client.models.v1_pod" in __import__("sys").modules)
        """
    )
    assert out == "module True"
