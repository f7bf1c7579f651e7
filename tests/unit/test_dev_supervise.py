"""The dev environment's supervisor restarts a controller as a Deployment would (CrashLoopBackOff's shape)."""

from __future__ import annotations

import pytest

from manager.dev.supervise import HEALTHY_RUN_SECONDS, MAX_DELAY_SECONDS, restart_delay


@pytest.mark.parametrize(
    ("consecutive_crashes", "ran_for", "expected"),
    [
        pytest.param(1, 0.5, 1.0, id="first crash waits one second"),
        pytest.param(2, 0.5, 2.0, id="second crash in a row doubles"),
        pytest.param(4, 0.5, 8.0, id="fourth crash in a row"),
        pytest.param(30, 0.5, MAX_DELAY_SECONDS, id="capped at thirty seconds"),
        pytest.param(7, HEALTHY_RUN_SECONDS, 1.0, id="a run that lasted starts over"),
        pytest.param(0, 0.0, 1.0, id="no crash yet"),
    ],
)
def test_restart_delay_follows_crash_loop_backoff(consecutive_crashes: int, ran_for: float, expected: float) -> None:
    assert restart_delay(consecutive_crashes=consecutive_crashes, ran_for=ran_for) == expected
