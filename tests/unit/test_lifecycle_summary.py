"""`benchmarks/lifecycle.py`'s figures of a run's eviction lifecycle, on hand-made traces."""

from __future__ import annotations

from benchmarks.lifecycle import Transition, summarize


def cohort_of(cluster_queue: str) -> str:
    return cluster_queue.split("-")[0]  # "co1-a" is in cohort "co1"


def evicted(at: float, name: str, cq: str, by: str) -> Transition:
    return Transition(at, "evicted", f"ns/{name}", f"uid-{name}", cq, by)


def released(at: float, name: str, cq: str) -> Transition:
    return Transition(at, "released", f"ns/{name}", f"uid-{name}", cq)


def admitted(at: float, name: str, cq: str) -> Transition:
    return Transition(at, "admitted", f"ns/{name}", f"uid-{name}", cq)


def test_kueues_lifecycle_one_eviction_the_preemptor_admitted_after_the_release() -> None:
    summary = summarize([evicted(0.0, "b1", "co1-b", "uid-a1"), released(1.0, "b1", "co1-b"), admitted(1.05, "a1", "co1-a")], cohort_of)
    assert (summary.evictions, summary.waves, summary.largest_wave) == (1, 1, 1)
    assert summary.eviction_to_admission_median == 1.05
    assert summary.evictions_while_another_victim_held == 0
    assert (summary.preemptors, summary.preemptors_admitted_before_their_last_release) == (1, 0)


def test_an_immediate_release_shows_as_a_wave_and_as_evictions_while_a_victim_is_held() -> None:
    """Two preemptors of one cohort evicting 20 ms apart, the second while the first's victim
    still holds its quota; the first admitted before its victim's release."""
    trace = [
        evicted(0.00, "b1", "co1-b", "uid-a1"),
        admitted(0.01, "a1", "co1-a"),
        evicted(0.02, "b2", "co1-b", "uid-a2"),
        evicted(0.50, "c1", "co2-c", "uid-d1"),  # another cohort: a wave of its own
        released(1.00, "b1", "co1-b"),
        released(1.02, "b2", "co1-b"),
        admitted(1.03, "a2", "co1-a"),
    ]
    summary = summarize(trace, cohort_of)
    assert (summary.evictions, summary.waves, summary.largest_wave) == (3, 2, 2)
    assert summary.evictions_while_another_victim_held == 1
    assert (summary.preemptors, summary.preemptors_admitted_before_their_last_release) == (2, 1)
    assert summary.eviction_to_admission_median == (0.01 + 1.01) / 2


def test_a_victim_evicted_again_by_the_same_preemptor_is_not_counted_as_held_by_another() -> None:
    trace = [evicted(0.0, "b1", "co1-b", "uid-a1"), evicted(0.3, "b2", "co1-b", "uid-a1")]
    assert summarize(trace, cohort_of).evictions_while_another_victim_held == 0


def test_a_victim_that_finished_instead_of_being_released_gives_its_quota_back_with_its_end() -> None:
    trace = [
        evicted(0.0, "b1", "co1-b", "uid-a1"),
        Transition(0.2, "finished", "ns/b1", "uid-b1", "co1-b"),
        admitted(0.3, "a1", "co1-a"),
        evicted(0.4, "b2", "co1-b", "uid-a2"),
    ]
    summary = summarize(trace, cohort_of)
    assert summary.preemptors_admitted_before_their_last_release == 0
    assert summary.evictions_while_another_victim_held == 0
