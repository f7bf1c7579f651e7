"""The short fault suite (benchmarks/faults.py --short) against real clusters: preemption racing
completion, a killed worker agent and a broken kubeconfig Secret lose no Job, run none twice and
leave none stuck, and every raced Job ran exactly one pod."""

from __future__ import annotations

from pathlib import Path

from benchmarks.faults import RACE, SHORT, run_suite, table
from tests.harness import Provider


async def test_the_short_fault_suite_loses_nothing_and_runs_nothing_twice(provider: Provider, tmp_path: Path) -> None:
    results = await run_suite(provider, tmp_path, SHORT, short=True)
    report = table(results)
    assert [r.fault for r in results] == SHORT, report
    for result in results:
        assert (result.lost, result.twice, result.stuck) == ((), (), ()), report
        assert result.recovery is not None, report
    race = next(r for r in results if r.fault == RACE)
    assert race.jobs == 6 and race.succeeded_pods == {name: 1 for name in race.succeeded_pods}, race.succeeded_pods
