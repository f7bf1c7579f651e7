"""Whether a worker's kfed admission agent runs, judged from its Lease as the manager sees it."""

from __future__ import annotations

from manager.multikueue.rules.agent_health import AgentLeaseWatch, LeaseSighting

HELD = LeaseSighting("agent-a", "2026-11-23T10:00:00.000000Z", 15)
RENEWED = LeaseSighting("agent-a", "2026-11-23T10:00:02.000000Z", 15)


def test_no_lease_means_unknown_and_the_worker_is_not_judged() -> None:
    watch = AgentLeaseWatch()
    watch.observe(None, now=0.0)
    assert watch.verdict(now=1000.0).running is None


def test_a_lease_renewed_within_its_duration_means_running() -> None:
    watch = AgentLeaseWatch()
    watch.observe(HELD, now=0.0)
    watch.observe(RENEWED, now=10.0)
    assert watch.verdict(now=24.0).running is True


def test_a_lease_unchanged_for_longer_than_its_duration_means_not_running() -> None:
    watch = AgentLeaseWatch()
    watch.observe(HELD, now=0.0)
    watch.observe(HELD, now=10.0)  # read again, not renewed
    verdict = watch.verdict(now=16.0)
    assert verdict.running is False
    assert verdict.message == (
        "the worker's admission agent is not running: its Lease kfed-system/kfed-worker-agent (last held by agent-a) "
        "has not been renewed for 16s, longer than its 15s duration; new workloads are not sent to this worker until it runs again"
    )


def test_a_renewal_after_an_outage_means_running_again() -> None:
    watch = AgentLeaseWatch()
    watch.observe(HELD, now=0.0)
    assert watch.verdict(now=30.0).running is False
    watch.observe(RENEWED, now=31.0)
    assert watch.verdict(now=31.5).running is True


def test_a_released_lease_is_named_as_released() -> None:
    watch = AgentLeaseWatch()
    watch.observe(LeaseSighting(None, "2026-11-23T10:00:00.000000Z", 1), now=0.0)
    verdict = watch.verdict(now=2.0)
    assert verdict.running is False and "(released)" in verdict.message


def test_the_lease_is_read_about_three_times_per_duration_within_bounds() -> None:
    watch = AgentLeaseWatch()
    assert watch.poll_interval() == 5.0  # before any sighting: the 15 s default
    watch.observe(LeaseSighting("a", "t", 4), now=0.0)
    assert watch.poll_interval() == 4 / 3
    watch.observe(LeaseSighting("a", "t2", 1), now=1.0)
    assert watch.poll_interval() == 1.0
