"""`kfed dashboard` in a real browser (Debian's chromium, headless, driven by Selenium through its
chromedriver) against the e2e federation: jobs submitted with kubectl show up live, one Pending
with its reason and its place in the queue, one Running on worker1; its page explains it, shows
an Event that holds markup as text, and streams its logs; it is cancelled and disappears from
the worker; a ClusterQueue is held and released. A namespace reader sees nothing of another
namespace and cannot cancel there, even with a hand-made POST. Each test fails on any error in
the browser's console, and saves a screenshot of each view: into `KFED_SCREENSHOTS` when set
(`KFED_SCREENSHOTS=docs/images` refreshes the README's), else into a temporary directory, so
that a test run leaves the checkout as it was."""

from __future__ import annotations

import contextlib
import html
import os
import re
import selectors
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from manager.api import kueue
from manager.api.core import Job
from tests.conftest import REPO_ROOT
from tests.e2e.federation import RUNS, Clients, Federation, job_manifest
from tests.e2e.test_cli_reader import namespace_reader
from tests.e2e.test_multikueue import running_where
from tests.harness import eventually
from tests.prerequisites import missing_prerequisite

pytestmark = pytest.mark.e2e

IMAGES = Path(os.environ.get("KFED_SCREENSHOTS") or Path(tempfile.gettempdir()) / "kfed-dashboard-screenshots")
WAIT = 60  # seconds the browser waits for what a page should show
MARKUP = "<script>window.kfedInjected = 1</script>"

with contextlib.suppress(ImportError):
    from selenium import webdriver
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.chrome.webdriver import WebDriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait


@pytest.fixture
def tag() -> str:
    return f"d{uuid.uuid4().hex[:6]}"


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        missing_prerequisite("the browser tests need chromium and its chromedriver: apt-get install -y chromium chromium-driver")
    if "webdriver" not in globals():
        missing_prerequisite("the browser tests need selenium: install kfed's dev extras (hack/bootstrap.sh)")
    options = Options()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1366,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


class Console:
    """The browser's console, read after each page: any error fails the test at the end."""

    def __init__(self, driver: WebDriver) -> None:
        self.driver = driver
        self.errors: list[str] = []

    def check(self) -> None:
        for entry in self.driver.get_log("browser"):  # type: ignore[no-untyped-call]  # selenium leaves it untyped
            if entry.get("level") == "SEVERE":
                self.errors.append(str(entry.get("message")))

    def assert_clean(self) -> None:
        self.check()
        assert self.errors == [], f"the browser's console logged errors: {self.errors}"


@contextlib.contextmanager
def dashboard(kubeconfig: Path, *extra: str) -> Iterator[str]:
    """`kfed dashboard --port 0 --no-browser` as a user runs it (`extra`: more of its options,
    such as `--in-cluster --address=127.0.0.1`); yields the URL it prints."""
    process = subprocess.Popen(
        # A sample a second, so that the Queues view's plots fill within the test.
        [
            sys.executable,
            "-m",
            "manager.cli.main",
            "dashboard",
            "--port",
            "0",
            "--no-browser",
            "--sample-every",
            "1",
            f"--kubeconfig={kubeconfig}",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            ready = selector.select(timeout=30)
        line = process.stdout.readline() if ready else ""
        found = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert found, f"kfed dashboard printed no URL in 30 s: {line!r} (exit {process.poll()})"
        yield found.group(0)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def kubectl(fed: Federation, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(fed.manager.bin_dir / "kubectl"), f"--kubeconfig={fed.manager.kubeconfig_path}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def table(driver: WebDriver) -> dict[str, dict[str, str]]:
    """The jobs table as shown, by job name (read at once: the live update replaces it)."""
    cells = driver.execute_script(
        "return Array.from(document.querySelectorAll('#jobs-table tbody tr'))"
        ".map(tr => Array.from(tr.cells).map(td => td.textContent.trim()))"
    )
    heads = ("namespace", "name", "kind", "queue", "state", "worker", "age", "pos", "reason")
    return {row[1]: dict(zip(heads, row, strict=True)) for row in cells}


def updates(driver: WebDriver) -> int:
    """How many live updates the view's fragment has had since the page loaded."""
    return int(driver.find_element(By.ID, "live").get_attribute("data-updates") or 0)


def wait_for(driver: WebDriver, probe: Any, what: str) -> Any:
    last: list[Any] = []

    def seen(d: WebDriver) -> Any:
        value = probe(d)
        last[:] = [value]
        return value

    try:
        # A live update may replace what a probe is reading (a stream sends its first fragment
        # as soon as the page opens it): that probe is tried again at the next poll.
        return WebDriverWait(driver, WAIT, poll_frequency=0.25, ignored_exceptions=(StaleElementReferenceException,)).until(seen)
    except Exception as err:
        page = driver.find_element(By.TAG_NAME, "body").text[:1500]
        raise AssertionError(f"the browser never showed {what}; last seen: {last[:1]} on {driver.current_url}:\n{page}") from err


def click(driver: WebDriver, by: str, value: str) -> bool:
    """Click what is there now; the live table may replace it between finding and clicking."""
    try:
        driver.find_element(by, value).click()
    except (NoSuchElementException, StaleElementReferenceException):
        return False
    return True


def text_of(driver: WebDriver, selector: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, selector)
    return found[0].text if found else ""


def screenshot(driver: WebDriver, name: str) -> None:
    """Into IMAGES (docs/images/ for the README), from the federation the test runs against."""
    IMAGES.mkdir(parents=True, exist_ok=True)
    size = driver.get_window_size()
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(size["width"], min(max(height, 500), 2400))  # the whole page, as far as is sensible
    try:
        driver.save_screenshot(str(IMAGES / f"dashboard-{name}.png"))
    finally:
        driver.set_window_size(size["width"], size["height"])


def submit(fed: Federation, tmp_path: Path, name: str, manifest: dict[str, Any]) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    kubectl(fed, "create", "-f", str(path))


async def test_a_user_follows_jobs_live_reads_one_and_cancels_it_in_the_browser(
    fed: Federation, kube: Clients, browser: WebDriver, tag: str, tmp_path: Path
) -> None:
    ns = f"{tag}-dash"
    cqs = await kube.queues(ns, manager_cpu=4, worker_cpu={"worker1": 4, "worker2": 0}, labels=RUNS, tag=tag)
    console = Console(browser)
    with dashboard(fed.manager.kubeconfig_path) as url:
        # The Fleet view, in a tab of its own, and the Jobs view are open before anything is
        # submitted: the workers' counts and the jobs come to them live.
        browser.get(f"{url}fleet")
        wait_for(browser, lambda d: text_of(d, "#worker-worker1"), "worker1's card")
        fleet_tab = browser.current_window_handle
        browser.switch_to.new_window("tab")
        browser.get(f"{url}jobs?namespace={ns}")
        wait_for(browser, lambda d: d.find_elements(By.ID, "jobs-table"), "the jobs table")
        assert table(browser) == {}
        chatty = job_manifest("chatty", ns)
        chatty["spec"]["completions"] = 100000  # kwok completes each pod at once: the Job keeps running
        chatty["metadata"]["annotations"] = {"example.com/note": MARKUP}
        submit(fed, tmp_path, "chatty", chatty)
        submit(fed, tmp_path, "too-big", job_manifest("too-big", ns, cpu="10"))
        await eventually(lambda: running_where(kube, ns, "chatty"), timeout=60, what="chatty running on worker1")

        def both(d: WebDriver) -> dict[str, dict[str, str]] | None:
            rows = table(d)
            shown = {name: (row["state"], row["worker"]) for name, row in rows.items()}
            return rows if shown == {"chatty": ("Running", "worker1"), "too-big": ("Pending", "")} else None

        rows = wait_for(browser, both, "chatty Running on worker1 and too-big Pending, without a reload")
        assert rows["too-big"]["reason"] and rows["too-big"]["pos"] == "1", rows["too-big"]
        assert rows["chatty"]["reason"] == "" and rows["chatty"]["queue"] == "user-queue"
        screenshot(browser, "jobs")
        console.check()

        # Fleet: both workers connected, worker1's quota as a bar, its counts updated without a reload.
        jobs_tab = browser.current_window_handle
        browser.switch_to.window(fleet_tab)
        card = wait_for(browser, lambda d: updates(d) >= 1 and text_of(d, "#worker-worker1"), "worker1's card updated live")
        # Other tests of the session may run jobs there too: at least this one runs.
        running = re.search(r"running\n(\d+)", card)
        assert "Active" in card and "cpu" in card and running is not None and int(running.group(1)) >= 1, card
        assert "Active" in text_of(browser, "#worker-worker2")
        screenshot(browser, "fleet")
        console.check()
        browser.close()
        browser.switch_to.window(jobs_tab)

        # The filters are the server's: a state keeps only its jobs.
        browser.get(f"{url}jobs?namespace={ns}&state=Pending")
        wait_for(browser, lambda d: set(table(d)) == {"too-big"}, "only the Pending job")
        console.check()

        # An Event whose message holds markup, as its annotation does: the job's page shows both as text and runs nothing.
        job = await kube.manager.get(Job, "chatty", namespace=ns)
        event = {
            "metadata": {"name": f"chatty.{tag}", "namespace": ns},
            "involvedObject": {"apiVersion": "batch/v1", "kind": "Job", "name": "chatty", "namespace": ns, "uid": job.metadata.uid},
            "reason": "Annotated",
            "message": f"a note {MARKUP}",
            "type": "Normal",
            "source": {"component": "kfed-test"},
        }
        await kube.manager.request("POST", f"/api/v1/namespaces/{ns}/events", body=event)

        # Its page: explain as a page, the timeline, and its logs streamed from worker1.
        browser.get(f"{url}jobs?namespace={ns}")
        wait_for(browser, lambda d: click(d, By.LINK_TEXT, "chatty"), "the link to chatty's page")
        wait_for(browser, lambda d: text_of(d, "#state") == "Running", "chatty's page")
        assert text_of(browser, "#worker") == "worker1"
        verdicts = text_of(browser, "#verdicts")
        assert "worker1 admitted here: the Job runs on this worker" in verdicts, verdicts
        assert text_of(browser, "#next") == "Next: Nothing to do: it runs on worker1."
        timeline = text_of(browser, "#timeline")
        assert f"a note {MARKUP}" in timeline, timeline
        assert f"annotation example.com/note {MARKUP}" in text_of(browser, "#metadata")
        assert browser.execute_script("return window.kfedInjected === undefined") is True
        worker = fed.workers["worker1"].name
        log = wait_for(
            browser, lambda d: f"simulated container log on cluster {worker}" in text_of(d, "#log") and text_of(d, "#log"), "its log lines"
        )
        assert all(line.endswith((f"simulated container log on cluster {worker}", "done")) for line in log.splitlines()), log
        # The page follows the job without a reload (its pods complete and new ones start, each an Event).
        wait_for(browser, lambda d: updates(d) >= 1 and text_of(d, "#state") == "Running", "chatty's page updated live")
        screenshot(browser, "job")
        # The container is chosen on the page.
        browser.get(f"{browser.current_url.split('?')[0]}?container=main")
        wait_for(browser, lambda d: "simulated container log" in text_of(d, "#log"), "the main container's log")
        console.check()

        # The pending one says why it waits.
        browser.get(f"{url}jobs/{ns}/job/too-big")
        wait_for(browser, lambda d: text_of(d, "#state") == "Pending", "too-big's page")
        assert text_of(browser, "#reason"), "a pending job's page says why it waits"
        console.check()

        # Queues: the cohort tree with usage against quota and the LocalQueues, and the plots over
        # time: chatty's admission wait is a point, the usage a line; the plots move live.
        manager_cq = cqs["manager"]
        browser.get(f"{url}queues")
        queue = wait_for(browser, lambda d: text_of(d, f"#cq-{manager_cq}"), "the manager's ClusterQueue")
        assert "user-queue" in queue and "stopPolicy\nNone" in queue, queue
        card = f"#cq-{manager_cq}"
        wait_for(
            browser,
            lambda d: (
                updates(d) >= 1
                and d.find_elements(By.CSS_SELECTOR, f"{card} .plot.waits circle.dot")
                and d.find_elements(By.CSS_SELECTOR, f"{card} .plot.usage polyline")
            ),
            "chatty's admission wait and the usage line, updated live",
        )
        waits = text_of(browser, f"{card} .plot.waits figcaption")
        assert re.fullmatch(r"Admission wait, last \d+ min: 1 admitted; median \d+ s, longest \d+ s", waits), waits
        usage = text_of(browser, f"{card} .plot.usage figcaption")
        assert re.fullmatch(r"Usage against nominal quota, last \d+ min: \S+ cpu: 25 % of nominal.*", usage), usage
        screenshot(browser, "queues")
        console.check()

        # Cancel, asked first, as the user: gone on the manager and on the worker.
        browser.get(f"{url}jobs/{ns}/job/chatty")
        wait_for(browser, lambda d: d.find_elements(By.ID, "cancel"), "the cancel button")[0].click()
        wait_for(browser, lambda d: "Delete job/chatty in namespace" in text_of(d, "#question"), "the confirmation")
        browser.find_element(By.ID, "confirm-button").click()
        wait_for(browser, lambda d: text_of(d, "#done") == f"job/chatty deleted in namespace {ns}", "the cancellation")

        async def gone_everywhere() -> bool:
            remote = await kube.remote_jobs(ns)
            return not any(j.name == "chatty" for jobs in remote.values() for j in jobs)

        await eventually(gone_everywhere, timeout=60, what="chatty gone on the workers")
        browser.get(f"{url}jobs?namespace={ns}")
        wait_for(browser, lambda d: set(table(d)) == {"too-big"}, "chatty gone from the table")
        console.check()

        # Hold the manager's ClusterQueue, then release it, each confirmed.
        browser.get(f"{url}queues")
        for action, policy in (("Hold", "Hold"), ("Release", "None")):
            browser.find_element(By.CSS_SELECTOR, f"#cq-{manager_cq} .actions a").click()
            assert browser.find_element(By.ID, "confirm-button").text == f"Set stopPolicy {policy}", action
            browser.find_element(By.ID, "confirm-button").click()
            wait_for(browser, lambda d, p=policy: text_of(d, "#done") == f"ClusterQueue {manager_cq}: stopPolicy {p}", "the change")
            assert (await kube.manager.get(kueue.ClusterQueue, manager_cq)).spec.stop_policy == policy
            browser.get(f"{url}queues")
        console.assert_clean()
    await kube.manager.delete(Job, "too-big", namespace=ns, propagation="Background")


async def test_a_namespace_reader_sees_nothing_of_another_namespace_and_cannot_cancel_there(
    fed: Federation, kube: Clients, browser: WebDriver, tag: str, tmp_path: Path
) -> None:
    ns, other = f"{tag}-theirs", f"{tag}-mine"
    await kube.queues(ns, manager_cpu=1, worker_cpu={"worker1": 1, "worker2": 0}, labels=RUNS, tag=tag)
    await kube.queues(other, manager_cpu=1, worker_cpu={"worker1": 1, "worker2": 0}, labels=RUNS, tag=f"{tag}o")
    submit(fed, tmp_path, "private", job_manifest("private", ns, cpu="10"))
    submit(fed, tmp_path, "mine", job_manifest("mine", other, cpu="10"))
    await eventually(lambda: kube.manager_workload(ns, "private"), timeout=60, what="the Workload of the private job")
    await eventually(lambda: kube.manager_workload(other, "mine"), timeout=60, what="the Workload of the reader's job")
    reader = await namespace_reader(fed, kube.manager, other, tag, tmp_path)
    console = Console(browser)
    with dashboard(reader) as url:
        # The Jobs view: the reader's namespace only, and why.
        browser.get(f"{url}jobs")
        wait_for(browser, lambda d: set(table(d)) == {"mine"}, "the reader's own job only")
        assert f"the jobs of namespace {other} only" in text_of(browser, "#notes")
        console.check()
        # Asking for the other namespace, or a job there, is the apiserver's refusal.
        for path in (f"jobs?namespace={ns}", f"jobs/{ns}/job/private"):
            browser.get(url + path)
            error = wait_for(browser, lambda d: text_of(d, "#error"), f"the refusal of {path}")
            assert "forbidden" in error and ns in error and "private" not in table(browser), error
        # A refusal is a page with an error status, which the browser may log; nothing else may be there.
        console.check()
        console.errors = [e for e in console.errors if not (" 403 " in e and e.startswith((f"{url}jobs?", f"{url}jobs/{ns}/")))]

        # A hand-made POST with a valid CSRF token: the apiserver refuses the delete.
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(f"{url}jobs") as first:
                assert first.status == 200
            token = next(c.value for c in http.cookie_jar if c.key == "kfed_csrf")
            async with http.post(f"{url}jobs/{ns}/job/private/cancel", data={"csrf": token}) as answer:
                body = html.unescape(await answer.text())
                assert answer.status == 403 and "forbidden" in body and 'cannot delete resource "jobs"' in body, body
        assert (await kube.manager.get(Job, "private", namespace=ns)).name == "private"
        browser.get(f"{url}queues")
        wait_for(browser, lambda d: d.find_elements(By.ID, "local-queues"), "the reader's LocalQueues")
        assert "user-queue" in text_of(browser, "#local-queues")
        console.assert_clean()
    for namespace, name in ((ns, "private"), (other, "mine")):
        await kube.manager.delete(Job, name, namespace=namespace, propagation="Background")
