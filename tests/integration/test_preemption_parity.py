"""kfed's preemption decisions are upstream Kueue's in the same state.

Each case in `data/preemption_decisions.jsonl` is a decision kfed's engine logged under Kueue's
own scheduler-performance runner (`compare_kueue.py --decision-logs`, 1,500 Workloads): the
preemptor, its victims, and every Workload then holding quota in its cohort. The last case is
one of them with its victim's eviction already under way. `benchmarks/preemption_replay.py`
rebuilds each state on a real apiserver, starts the pinned upstream Kueue on it, queues the
preemptor, and reads back what Kueue evicted; kfed's engine is given the same state. Both must
take the logged decision: the same victims (queue, priority, size, reason) and the same count of
victims the preemptor waits for.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from benchmarks.preemption_replay import read_decisions, replay
from tests.harness import Provider
from tests.kueue_upstream import require_upstream_kueue

CASES = Path(__file__).parent / "data" / "preemption_decisions.jsonl"


def test_upstream_kueue_takes_each_logged_decision_in_its_state(provider: Provider, tmp_path: Path) -> None:
    bin_dir = require_upstream_kueue()
    decisions = read_decisions(CASES)
    assert len(decisions) == 5, "the cases file holds five decisions"
    (cluster,) = provider.create([f"parity-{uuid.uuid4().hex[:4]}"])
    results = replay(cluster, bin_dir, tmp_path, decisions, timeout=60)
    for result in results:
        decision = result.decision
        expected = (dict(result.logged), len(decision.victims))
        where = f"case {decision.index}: {decision.preemptor} in {decision.cluster_queue}"
        assert (dict(result.kfed.victims), result.kfed.pending) == expected, f"{where}: kfed's engine, {result.kfed.message}"
        assert (dict(result.kueue.victims), result.kueue.pending) == expected, f"{where}: upstream Kueue, {result.kueue.message}"
    under_way = results[-1]
    assert not under_way.logged and under_way.kueue.pending == 1, "a victim already being evicted is not evicted again"
