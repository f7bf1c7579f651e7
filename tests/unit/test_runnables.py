"""Leader-only work is a kind of runnable: it starts when the lease is won and stops when it is
lost, and every replica's runnables run regardless (controller-runtime's runnable groups)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from manager.runtime.runnables import Runnable, RunnableGroups, always, leader, to_start, while_leading

pytestmark = pytest.mark.unit


def runnable_names(runnables: list[Runnable]) -> list[str]:
    return [r.name for r in runnables]


async def idle() -> None:
    await asyncio.Event().wait()


@pytest.mark.parametrize(
    ("is_leader", "running", "expected"),
    [
        (False, set(), ["caches"]),
        (True, set(), ["caches", "admission", "gc"]),
        (True, {"caches"}, ["admission", "gc"]),
        (True, {"caches", "admission", "gc"}, []),
        (False, {"admission"}, ["caches"]),
    ],
    ids=[
        "a standby starts every replica's runnables only",
        "the lease holder starts both groups in the order added",
        "a runnable already running is not started again",
        "nothing twice",
        "a standby never starts leader runnables",
    ],
)
def test_to_start(is_leader: bool, running: set[str], expected: list[str]) -> None:
    runnables = [always("caches", idle), leader("admission", idle), leader("gc", idle)]
    assert runnable_names(to_start(runnables, is_leader=is_leader, running=running)) == expected


async def wait_for(condition: Any, what: str) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0)

    try:
        await asyncio.wait_for(poll(), timeout=2)
    except TimeoutError:
        raise AssertionError(f"timed out waiting until {what}") from None


async def test_leader_runnables_start_on_election_and_stop_on_loss() -> None:
    groups = RunnableGroups()
    started: list[str] = []
    cancelled: list[str] = []

    def tracked(name: str) -> Any:
        async def run() -> None:
            started.append(name)
            try:
                await idle()
            finally:
                cancelled.append(name)

        return run

    elected: list[bool] = []
    groups.add(always("caches", tracked("caches")), leader("admission", tracked("admission")))
    groups.on_elected(lambda: elected.append(True))
    groups.start()
    await wait_for(lambda: started == ["caches"], "the standby runs its caches")
    assert groups.running() == {"caches"}

    groups.elected()
    await wait_for(lambda: "admission" in started, "the leader runs admission")
    assert elected == [True]
    assert groups.running() == {"caches", "admission"}

    await groups.lost()
    assert cancelled == ["admission"], "losing the lease stops the leader's runnables before returning"
    assert groups.running() == {"caches"}

    groups.elected()  # won again
    await wait_for(lambda: started.count("admission") == 2, "admission restarts on a new election")

    await groups.stop()
    assert sorted(cancelled) == ["admission", "admission", "caches"]
    assert groups.running() == set()


async def test_a_runnable_added_after_start_joins_its_group() -> None:
    groups = RunnableGroups()
    groups.start()
    groups.add(always("late", idle), leader("late-leader", idle))
    await wait_for(lambda: groups.running() == {"late"}, "a late runnable starts at once")
    groups.elected()
    await wait_for(lambda: groups.running() == {"late", "late-leader"}, "a late leader runnable starts on election")
    await groups.stop()


def test_a_name_is_added_once() -> None:
    groups = RunnableGroups()
    groups.add(always("caches", idle))
    with pytest.raises(ValueError, match="'caches' is added twice"):
        groups.add(leader("caches", idle))


async def test_a_failing_runnable_is_logged_and_leaves_the_others_running(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    groups = RunnableGroups()
    groups.add(always("broken", broken), always("caches", idle))
    groups.start()
    await wait_for(lambda: groups.running() == {"caches"}, "the broken runnable has ended")
    assert "runnable stopped with an error" in caplog.text
    await groups.stop()


class Source:
    def __init__(self) -> None:
        self.handlers: list[Any] = []

    def add_handler(self, handler: Any) -> None:
        self.handlers.append(handler)

    def remove_handler(self, handler: Any) -> None:
        self.handlers.remove(handler)

    def emit(self, value: int) -> None:
        for handler in list(self.handlers):
            handler(value)


async def test_while_leading_feeds_events_only_while_the_lease_is_held() -> None:
    source = Source()
    seen: list[int] = []
    groups = RunnableGroups()
    groups.add(while_leading("counters", source, seen.append))
    groups.start()
    source.emit(1)  # a standby does not count
    groups.elected()
    await wait_for(lambda: source.handlers, "the handler is subscribed")
    source.emit(2)
    await groups.lost()
    source.emit(3)  # nor does a replica that lost the lease
    assert seen == [2]
    assert source.handlers == []
    await groups.stop()


async def test_a_runnable_that_raises_is_reported_once_and_the_others_keep_running_until_stopped() -> None:
    reported: list[tuple[str, str]] = []
    groups = RunnableGroups(on_failure=lambda name, err: reported.append((name, str(err))))

    async def broken() -> None:
        raise RuntimeError("the cache lost its informer")

    groups.add(always("caches", idle), always("broken", broken))
    groups.start()
    await wait_for(lambda: reported, "the failure is reported")
    assert reported == [("broken", "the cache lost its informer")]
    assert groups.failed is not None and groups.failed[0] == "broken"
    assert groups.running() == {"caches"}  # the process stops them, not the group
    await groups.stop()
    assert groups.running() == set()


async def test_a_cancelled_runnable_is_no_failure() -> None:
    reported: list[str] = []
    groups = RunnableGroups(on_failure=lambda name, err: reported.append(name))
    groups.add(leader("admission", idle))
    groups.start()
    groups.elected()
    await wait_for(lambda: groups.running() == {"admission"}, "admission runs")
    await groups.lost()
    await groups.stop()
    assert reported == [] and groups.failed is None
