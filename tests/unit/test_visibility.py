"""Kueue's visibility answers from the engine's queues: the pending Workloads of a ClusterQueue
or a LocalQueue in the scheduler's order, with Kueue's positions (from 0), limit and offset."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from manager.api.kueue import Workload
from manager.engine import visibility
from manager.engine.simulate import Simulation
from manager.engine.visibility import Page, VisibilityQueryError, in_cluster_queue, in_local_queue, page_of
from manager.engine.workload import WorkloadInfo
from tests.unit.scenario import cluster_queue, flavor, local_queue, sources, workload


def queued() -> tuple[WorkloadInfo, ...]:
    """Five Workloads waiting in a ClusterQueue with no room, from two LocalQueues."""
    objs = [
        flavor("default-flavor"),
        cluster_queue("cq", {"default-flavor": {"cpu": 1}}),
        local_queue("a", "cq"),
        local_queue("b", "cq"),
        workload("running", "a", {"cpu": "1"}, admitted=("cq", {"cpu": "default-flavor"}), created=0),
        workload("a-old", "a", {"cpu": "1"}, created=1),
        workload("b-old", "b", {"cpu": "1"}, created=2),
        workload("a-new", "a", {"cpu": "1"}, created=3),
        workload("b-urgent", "b", {"cpu": "1"}, created=4, priority=100),
        workload("a-newest", "a", {"cpu": "1"}, created=5),
    ]
    simulation = Simulation(sources(objs))
    simulation.run(2)
    return simulation.scheduler.queues["cq"].in_order()


def positions(items: list[dict[str, object]]) -> list[tuple[object, object, object]]:
    return [(i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in items]  # type: ignore[index]


def test_a_cluster_queue_lists_its_pending_workloads_in_the_schedulers_order_from_position_0() -> None:
    items = in_cluster_queue(queued(), Page())
    assert positions(items) == [("b-urgent", 0, 0), ("a-old", 1, 0), ("b-old", 2, 1), ("a-new", 3, 1), ("a-newest", 4, 2)]
    assert items[0]["priority"] == 100 and items[0]["localQueueName"] == "b"
    assert items[0]["metadata"] == {"name": "b-urgent", "namespace": "default", "creationTimestamp": "2026-03-01T12:00:04Z"}


def test_a_page_keeps_the_positions_of_the_whole_queue() -> None:
    assert positions(in_cluster_queue(queued(), Page(limit=2, offset=2))) == [("b-old", 2, 1), ("a-new", 3, 1)]
    assert in_cluster_queue(queued(), Page(limit=10, offset=9)) == []


def test_a_local_queue_lists_only_its_own_with_both_positions() -> None:
    ordered = queued()
    assert positions(in_local_queue(ordered, "default", "a", Page())) == [("a-old", 1, 0), ("a-new", 3, 1), ("a-newest", 4, 2)]
    assert positions(in_local_queue(ordered, "default", "a", Page(limit=1, offset=1))) == [("a-new", 3, 1)]
    assert in_local_queue(ordered, "other", "a", Page()) == []


@pytest.mark.parametrize(
    ("query", "expected"),
    [({}, Page(1000, 0)), ({"limit": "5"}, Page(5, 0)), ({"offset": "7", "limit": ""}, Page(1000, 7))],
)
def test_limit_and_offset_default_as_kueues(query: dict[str, str], expected: Page) -> None:
    assert page_of(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        {"limit": "-1"},
        {"offset": "x"},
        {"limit": "\u00b2"},  # superscript two: str.isdigit() says yes, int() raises
        {"offset": "\u0663"},  # Arabic-Indic three: int() reads it as 3
        {"limit": "1" * 5000},  # int() of 5,000 digits raises past Python's digit limit
        {"limit": "1234567890"},
        {"offset": " 7"},
        {"limit": "7\n8"},
    ],
)
def test_a_bad_limit_or_offset_is_refused_in_one_short_line_naming_it(query: dict[str, str]) -> None:
    name = next(iter(query))
    with pytest.raises(VisibilityQueryError, match=rf"^{name}: Invalid value") as refused:
        page_of(query)
    message = str(refused.value)
    assert "\n" not in message and len(message) < 200, message


def test_the_largest_limit_and_offset_read_are_nine_digits() -> None:
    assert page_of({"limit": "999999999", "offset": "000000001"}) == Page(999999999, 1)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["limit", "offset", "other"]), st.text(max_size=30) | st.integers(0, 10**12).map(str)))
def test_any_query_is_a_page_or_a_one_line_refusal_naming_the_parameter(query: dict[str, str]) -> None:
    try:
        page = page_of(query)
    except VisibilityQueryError as err:
        assert str(err).split(":", 1)[0] in ("limit", "offset") and "\n" not in str(err)
    else:
        assert 0 <= page.limit <= 999_999_999 and 0 <= page.offset <= 999_999_999


def test_discovery_lists_both_resources_as_kueues_server_does() -> None:
    names = [r["name"] for r in visibility.resource_list("v1beta2")["resources"]]
    assert names == ["clusterqueues", "clusterqueues/pendingworkloads", "localqueues", "localqueues/pendingworkloads"]
    assert visibility.group_document()["preferredVersion"]["version"] == "v1beta2"


def test_the_order_follows_every_change_of_the_queue_though_it_is_sorted_once_per_change() -> None:
    objs = [
        flavor("default-flavor"),
        cluster_queue("cq", {"default-flavor": {"cpu": 1}}),
        local_queue("a", "cq"),
        workload("running", "a", {"cpu": "1"}, admitted=("cq", {"cpu": "default-flavor"}), created=0),
        workload("old", "a", {"cpu": "1"}, created=1),
        workload("new", "a", {"cpu": "1"}, created=2),
    ]
    simulation = Simulation(sources(objs))
    simulation.run(2)
    queue = simulation.scheduler.queues["cq"]
    first = queue.in_order()
    assert [info.name for info in first] == ["old", "new"]
    assert queue.in_order() is first  # unchanged queue: the same answer, not sorted again
    urgent = next(s.obj for s in sources([workload("urgent", "a", {"cpu": "1"}, created=3, priority=9)]))
    assert isinstance(urgent, Workload)
    simulation.state.upsert_workload(urgent, simulation.start)
    assert [info.name for info in queue.in_order()] == ["urgent", "old", "new"]
    head = queue.pop(cycle=99)
    assert head is not None and [info.name for info in queue.in_order()] == ["old", "new"]  # in flight
    queue.requeue(head, "NoFit")
    assert [info.name for info in queue.in_order()] == ["urgent", "old", "new"]
    queue.delete("default/old")
    assert [info.name for info in queue.in_order()] == ["urgent", "new"]
