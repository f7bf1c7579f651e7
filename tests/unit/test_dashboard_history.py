"""The Queues view's plots over time: what the recorder keeps of each ClusterQueue (usage against
nominal quota, and each admission's wait, counted once), what leaves the window, and the plots'
geometry and words, rendered as SVG with whatever a user wrote kept as text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from manager.api import kueue
from manager.cli.dashboard import history, pages
from manager.cli.dashboard.server import environment
from manager.engine.workload import admission_wait

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def admitted(
    name: str, *, created: datetime, at: datetime, cq: str = "cq", uid: str = "", requeued: datetime | None = None, namespace: str = "ns"
) -> kueue.Workload:
    conditions: list[dict[str, Any]] = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": stamp(at)},
        {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": stamp(at)},
    ]
    if requeued is not None:
        conditions.append(
            {"type": "Requeued", "status": "True", "reason": "Preempted", "message": "", "lastTransitionTime": stamp(requeued)}
        )
    return kueue.Workload.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": uid or name, "creationTimestamp": stamp(created)},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
            "status": {"admission": {"clusterQueue": cq, "podSetAssignments": []}, "conditions": conditions},
        }
    )


def pending(name: str) -> kueue.Workload:
    return kueue.Workload.model_validate(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": stamp(NOW)},
            "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": []}}}]},
        }
    )


@pytest.mark.parametrize(
    ("created", "requeued", "at", "wait"),
    [
        (NOW - timedelta(seconds=90), None, NOW - timedelta(seconds=30), 60.0),
        # Requeued after a preemption: the wait counts from the requeue, as Kueue's metric does.
        (NOW - timedelta(minutes=10), NOW - timedelta(seconds=50), NOW - timedelta(seconds=20), 30.0),
        # A Requeued transition after the admission (a later eviction) does not start this wait.
        (NOW - timedelta(seconds=90), NOW - timedelta(seconds=10), NOW - timedelta(seconds=30), 60.0),
    ],
    ids=["from-creation", "from-the-requeue", "a-later-requeue-ignored"],
)
def test_the_admission_wait_read_back_from_the_workload(created: datetime, requeued: datetime | None, at: datetime, wait: float) -> None:
    assert admission_wait(admitted("w", created=created, at=at, requeued=requeued)) == (at, wait)


def test_a_workload_not_admitted_has_no_wait() -> None:
    assert admission_wait(pending("p")) is None


def test_each_admission_is_counted_once_and_leaves_with_the_window() -> None:
    recorded = history.History()
    first = admitted("a", created=NOW - timedelta(seconds=70), at=NOW - timedelta(seconds=10))
    old = admitted("b", created=NOW - timedelta(hours=3), at=NOW - timedelta(hours=2))  # before the window
    other = admitted("c", created=NOW - timedelta(seconds=40), at=NOW - timedelta(seconds=20), cq="other")
    for _ in range(3):  # the recorder reads the same Workloads at every sample
        recorded.record_admissions([first, old, other, pending("p")], NOW)
        recorded.forget_before(NOW)
    assert [(seconds, key) for _, seconds, key in recorded.waits["cq"]] == [(60.0, "ns/a")]
    assert [key for _, _, key in recorded.waits["other"]] == ["ns/c"]
    later = NOW + timedelta(minutes=61)
    recorded.forget_before(later)
    assert "cq" not in recorded.waits and "other" not in recorded.waits, "an hour after, the points have left the window"
    recorded.record_admissions([first], later)
    assert "cq" not in recorded.waits, "and a Workload admitted before the window does not come back"


def test_usage_is_plotted_as_a_share_of_nominal_quota_with_the_nominal_line() -> None:
    recorded = history.History()
    for minute, used in ((-40, 2000), (-20, 4000), (0, 6000)):  # 4 cpu nominal: 50 %, 100 %, 150 % (borrowing)
        recorded.record_usage("cq", {("f", "cpu"): (used, 4000)}, NOW + timedelta(minutes=minute))
    plot = history.usage_plot(recorded, "cq", NOW)
    (line,) = plot.lines
    points = [tuple(map(float, p.split(","))) for p in line.points.split()]
    assert [x for x, _ in points] == [0.0, 150.0, 300.0], "40 and 20 minutes ago, and now: the 40 minutes recorded fill the axis"
    assert plot.title == "Usage against nominal quota, last 40 min"
    top = history.HEIGHT - 4
    assert [y for _, y in points] == [round(history.HEIGHT - share * top, 1) for share in (50 / 150, 100 / 150, 1.0)]
    assert plot.guide == round(history.HEIGHT - (100 / 150) * top, 1), "the nominal line, at 100 %"
    assert plot.caption == "f cpu: 150 % of nominal"
    assert history.usage_plot(recorded, "none", NOW).caption == "no sample yet"
    long_ago = history.History()
    for at in (NOW - timedelta(hours=2), NOW):
        long_ago.record_usage("cq", {("f", "cpu"): (0, 4000)}, at)
    assert history.usage_plot(long_ago, "cq", NOW).title.endswith("last 60 min"), "never more than the window"
    fresh = history.History()
    fresh.record_usage("cq", {("f", "cpu"): (0, 4000)}, NOW - timedelta(seconds=30))
    assert history.usage_plot(fresh, "cq", NOW).title.endswith("last 2 min"), "a dashboard started just now shows at least two minutes"


def test_the_waits_plot_says_how_many_were_admitted_and_how_long_they_waited() -> None:
    recorded = history.History()
    recorded.record_admissions(
        [
            admitted(f"w{i}", created=NOW - timedelta(seconds=10 + wait), at=NOW - timedelta(seconds=10))
            for i, wait in enumerate((5, 30, 200))
        ],
        NOW,
    )
    plot = history.waits_plot(recorded, "cq", NOW)
    assert plot.caption == "3 admitted; median 30 s, longest 3.3 min"
    assert sorted(dot.y for dot in plot.dots)[0] == round(history.HEIGHT - (history.HEIGHT - 4), 1), "the longest wait is the top"
    recorded.workloads_unreadable = "cannot list Workloads in every namespace: forbidden"
    assert history.waits_plot(recorded, "empty", NOW).caption == recorded.workloads_unreadable


def test_a_queue_card_carries_both_plots_rendered_as_svg_with_names_as_text() -> None:
    recorded = history.History()
    name = "<script>x</script>"
    recorded.record_admissions([admitted(name, created=NOW - timedelta(seconds=12), at=NOW - timedelta(seconds=2))], NOW)
    recorded.record_usage("cq", {("f", "cpu"): (1000, 4000)}, NOW)
    cq = kueue.ClusterQueue.model_validate(
        {
            "metadata": {"name": "cq"},
            "spec": {
                "resourceGroups": [
                    {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": 4}]}]}
                ]
            },
        }
    )
    card = pages.queue_card(cq, [], recorded=recorded, now=NOW, readable={"ns"})
    assert [plot.kind for plot in card.plots] == ["usage", "waits"]
    assert pages.usage_values(cq) == {("f", "cpu"): (0, 4000)}, "what the recorder samples: nothing reserved yet"
    html = environment().get_template("_queue.html").render(q=card, csrf="t")
    assert html.count("<svg") == 2 and "<polyline" in html and 'class="dot"' in html
    assert "<script>x" not in html and "&lt;script&gt;x&lt;/script&gt;" in html, "a Workload's name stays text in the tooltip"
    assert pages.queue_card(cq, []).plots == [], "without a recorder, no plots"


def test_a_plot_names_a_workload_only_to_a_reader_of_its_namespace_and_else_only_aggregates() -> None:
    """The recorder reads every namespace; a reader who may list Workloads in team-a only sees
    team-a's names, and of team-b only that something waited so long (no name, no namespace)."""
    recorded = history.History()
    recorded.record_admissions(
        [
            admitted("ours", created=NOW - timedelta(seconds=40), at=NOW - timedelta(seconds=10), namespace="team-a"),
            admitted("secret-merger", created=NOW - timedelta(seconds=118), at=NOW - timedelta(seconds=10), namespace="team-b"),
        ],
        NOW,
    )
    assert recorded.namespaces(["cq"]) == {"team-a", "team-b"} and recorded.namespaces(["other"]) == set()
    plot = history.waits_plot(recorded, "cq", NOW, readable={"team-a"})
    assert sorted(dot.text for dot in plot.dots) == ["team-a/ours: waited 30 s", "waited 1.8 min"]
    assert plot.caption == "2 admitted; median 1.8 min, longest 1.8 min"
    cq = kueue.ClusterQueue.model_validate({"metadata": {"name": "cq"}, "spec": {}})
    for readable, shown in ((set(), []), ({"team-a"}, ["team-a"]), ({"team-a", "team-b"}, ["team-a", "team-b"])):
        tree = pages.cohort_tree([cq], [], [], recorded=recorded, now=NOW, readable=readable)
        html = environment().get_template("_queue.html").render(q=tree[0].queues[0], csrf="t")
        assert ("team-a" in html, "team-b" in html) == ("team-a" in shown, "team-b" in shown), (readable, html)
        assert ("secret-merger" in html) == ("team-b" in shown), (readable, html)
    unsaid = pages.queue_card(cq, [], recorded=recorded, now=NOW)
    assert all(":" not in dot.text for dot in unsaid.plots[1].dots), "named to no one unless said"
