"""How fast the dashboard's Jobs view renders at 5,000 jobs, and how big the page is.

A manager cluster on the local harness with the CRDs, a LocalQueue, and N Workloads (default
5,000), each owned by a Job as the job integration makes them. `kfed dashboard --port 0` runs as
a user runs it (its own process, the admin's kubeconfig); the script then asks for the Jobs view
over HTTP as a browser would and prints the time to the whole answer and its size: the first
request (cold), then the median and worst of --runs; the last page; 500 rows a page; a filter
that keeps one job; and the first server-sent event of the live table. With chromium and its
chromedriver installed it also loads the view in headless chromium and prints the browser's own
navigation timing (until the load event) and the transferred size.

    .venv/bin/python benchmarks/dashboard.py [--jobs 5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from manager.api import kueue
from manager.dev import federation
from manager.dev.local import LocalProvider
from manager.kube.client import KubeClient

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"


def workload(index: int) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": f"train-{index:05d}", "uid": str(uuid.uuid4()), "controller": True}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"job-train-{index:05d}", "namespace": NAMESPACE, "ownerReferences": [owner]},
        "spec": {"queueName": federation.LOCAL_QUEUE, "podSets": [{"name": "main", "count": 1, "template": pod}]},
    }


async def fill(client: KubeClient, count: int, *, concurrency: int = 64) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with gate:
            await client.create(kueue.Workload, workload(index), namespace=NAMESPACE)

    await asyncio.gather(*(one(i) for i in range(count)))


def start_dashboard(kubeconfig: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "manager.cli.main", "dashboard", "--port", "0", "--no-browser", f"--kubeconfig={kubeconfig}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        ready = selector.select(timeout=60)
    line = process.stdout.readline() if ready else ""
    found = re.search(r"http://127\.0\.0\.1:\d+/", line)
    if not found:
        process.kill()
        raise SystemExit(f"kfed dashboard printed no URL: {line!r}")
    return process, found.group(0)


async def fetch(http: aiohttp.ClientSession, url: str) -> tuple[float, int, int]:
    """(seconds to the whole answer, its size in bytes, rows in the table)."""
    started = time.monotonic()
    async with http.get(url) as answer:
        body = await answer.read()
        if answer.status != 200:
            raise SystemExit(f"{url}: {answer.status} {body[:200]!r}")
    return time.monotonic() - started, len(body), body.count(b"<tr data-job=")


async def first_event(http: aiohttp.ClientSession, url: str) -> float:
    started = time.monotonic()
    async with http.get(url) as answer:
        async for line in answer.content:
            if line.startswith(b"event: jobs"):
                return time.monotonic() - started
    raise SystemExit("the live table sent no event")


def in_browser(url: str, runs: int) -> list[tuple[float, int]] | None:
    """(ms until the load event, bytes transferred) of the Jobs view in headless chromium."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    found = []
    try:
        for _ in range(runs):
            driver.get(url)
            timing = driver.execute_script(
                "const n = performance.getEntriesByType('navigation')[0]; return [n.loadEventEnd - n.startTime, n.transferSize];"
            )
            found.append((float(timing[0]), int(timing[1])))
    finally:
        driver.quit()
    return found


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


async def main(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="kfed-dashboard-bench-"))
    provider = LocalProvider(base)
    manager = provider.create(["manager"])[0]
    process = None
    try:
        federation.install_crds(manager, federation.crd_manifests(REPO / "crds"))
        federation.create(manager, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        federation.create(
            manager,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": federation.LOCAL_QUEUE, "namespace": NAMESPACE},
                "spec": {"clusterQueue": federation.CLUSTER_QUEUE},
            },
        )
        started = time.monotonic()
        client = await KubeClient.from_kubeconfig(manager.kubeconfig(), name="bench", qps=5000, burst=5000)
        await fill(client, args.jobs)
        await client.close()
        print(f"created {args.jobs} Workloads owned by Jobs in {time.monotonic() - started:.1f} s")
        process, url = start_dashboard(manager.kubeconfig_path)
        view = f"{url}jobs"
        async with aiohttp.ClientSession() as http:
            cold = await fetch(http, view)
            warm = [await fetch(http, view) for _ in range(args.runs)]
            last = [await fetch(http, f"{view}?page={args.jobs // 50}") for _ in range(args.runs)]
            wide = [await fetch(http, f"{view}?per_page=500") for _ in range(args.runs)]
            one = [await fetch(http, f"{view}?queue=none") for _ in range(args.runs)]
            live = [await first_event(http, f"{url}jobs/stream") for _ in range(args.runs)]  # after one refresh period (2 s)
        print(f"kfed dashboard, Jobs view: {args.jobs} jobs on the manager, {args.runs} runs each (HTTP, as a browser asks)")
        print(f"  first request (cold):           {ms(cold[0])}, {cold[1] / 1024:.1f} KiB, {cold[2]} rows")
        for name, found in (("page 1 of 50 rows", warm), ("last page", last), ("500 rows a page", wide), ("a filter that keeps none", one)):
            times = [t for t, _, _ in found]
            size = f"{found[0][1] / 1024:.1f} KiB, {found[0][2]} rows"
            print(f"  {name + ':':<32}median {ms(statistics.median(times))}, worst {ms(max(times))}, {size}")
        print(f"  {'live table, first event:':<32}median {ms(statistics.median(live))}, worst {ms(max(live))}")
        browser = in_browser(view, args.runs)
        if browser is None:
            print("  (no chromium and chromedriver: the browser's own timing is not measured)")
        else:
            loads = [t for t, _ in browser]
            size = f"{browser[0][1] / 1024:.1f} KiB transferred"
            print(f"  {'chromium, until load event:':<32}median {statistics.median(loads):.0f} ms, worst {max(loads):.0f} ms, {size}")
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=10)
        provider.delete_all()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    asyncio.run(main(parser.parse_args()))
