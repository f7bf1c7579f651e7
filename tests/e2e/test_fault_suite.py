"""The short fault suite (benchmarks/faults.py --short) against real clusters, with each of the
dispatchers that send one copy or all: preemption racing completion, a killed worker agent and
a broken kubeconfig Secret lose no Job, run none twice and leave none stuck, and every raced Job
ran exactly one pod. With the capacity-aware dispatcher, a frozen agent also strands copies
that the admission timeout moves to the other worker while the agent may still admit them."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.faults import RACE, SHORT, run_suite, table
from manager.api import constants as c
from tests.harness import Provider

# By the dispatcher's short name. Capacity-aware dispatch moves a copy that was not admitted
# in time: the frozen agent is its race.
FAULTS = {"all-at-once": SHORT, "capacity-aware": [*SHORT, "agent-frozen"]}


@pytest.mark.parametrize("dispatcher", list(FAULTS))
async def test_the_short_fault_suite_loses_nothing_and_runs_nothing_twice(provider: Provider, tmp_path: Path, dispatcher: str) -> None:
    faults = FAULTS[dispatcher]
    results = await run_suite(provider, tmp_path, faults, short=True, dispatcher=c.DISPATCHERS_BY_SHORT_NAME[dispatcher])
    report = table(results)
    assert [r.fault for r in results] == faults, report
    for result in results:
        assert (result.lost, result.twice, result.stuck) == ((), (), ()), report
        assert result.recovery is not None, report
    race = next(r for r in results if r.fault == RACE)
    assert race.jobs == 6 and race.succeeded_pods == {name: 1 for name in race.succeeded_pods}, race.succeeded_pods
