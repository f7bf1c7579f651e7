"""The fault suite's counting rules (benchmarks/faults.py `judge`): lost, run twice and stuck,
judged from the manager's Job and the workers' pod records."""

from __future__ import annotations

import pytest

from benchmarks.faults import ALL, FaultResult, JobRecord, PodRun, Verdict, judge, parse_faults, table, tally


def run(cluster: str, started: float, ended: float | None, *, succeeded: bool = True, pod: str = "p", copy: str = "") -> PodRun:
    return PodRun(cluster=cluster, copy=copy or f"{cluster}-copy", pod=pod, started=started, ended=ended, succeeded=succeeded)


def job(*runs: PodRun, completions: int = 1, finished: bool = True, failed: bool = False, vanished: bool = False) -> JobRecord:
    return JobRecord("j", completions, finished, failed, vanished, tuple(runs))


OK = Verdict(lost=False, twice=False, stuck=False)


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        pytest.param(job(run("w1", 0, 1)), OK, id="one pod succeeded once"),
        pytest.param(
            job(run("w1", 0, 1, pod="a"), run("w1", 1, 2, pod="b"), run("w1", 2, 3, pod="c"), completions=3),
            OK,
            id="three completions, three pods",
        ),
        pytest.param(
            job(run("w1", 0, 1, pod="a"), run("w2", 5, 6, pod="b")), Verdict(False, True, False), id="succeeded twice on two clusters"
        ),
        pytest.param(
            job(run("w1", 0, 1, pod="a"), run("w1", 2, 3, pod="b")), Verdict(False, True, False), id="succeeded twice on one cluster"
        ),
        pytest.param(
            job(run("w1", 0, 4, succeeded=False, pod="a"), run("w2", 5, 6, pod="b")), OK, id="preempted on w1, then ran on w2: not twice"
        ),
        pytest.param(
            job(run("w1", 0, 4, succeeded=False, pod="a"), run("w1", 5, 6, pod="b")), OK, id="preempted and restarted on the same worker"
        ),
        pytest.param(
            job(run("w1", 0, 10, succeeded=False, pod="a"), run("w2", 5, 6, pod="b")),
            Verdict(False, True, False),
            id="running on two clusters at overlapping times",
        ),
        pytest.param(
            job(run("w1", 0, None, succeeded=False, pod="a"), run("w2", 5, None, succeeded=False, pod="b"), finished=False),
            Verdict(False, True, True),
            id="still running on two clusters at the deadline",
        ),
        pytest.param(
            job(
                run("w2", 0, 1, pod="a"),
                run("w2", 1, 2, pod="b"),
                run("w1", 3, 4, pod="c"),
                run("w1", 4, 5, pod="d"),
                run("w1", 5, 6, pod="e"),
                completions=3,
            ),
            OK,
            id="preempted after 2 of 3 completions, then all 3 again on another worker: not twice",
        ),
        pytest.param(
            job(run("w1", 0, 1, pod="a", copy="first"), run("w1", 2, 3, pod="b", copy="second")),
            Verdict(False, True, False),
            id="two copies on one worker both completed",
        ),
        pytest.param(
            job(run("w1", 0, 1, pod="a"), run("w1", 1, 2, pod="b"), completions=1),
            Verdict(False, True, False),
            id="one copy with more pods succeeded than its completions",
        ),
        pytest.param(job(finished=True), Verdict(True, False, False), id="finished without ever running"),
        pytest.param(job(run("w1", 0, 1, succeeded=False), finished=True, failed=True), Verdict(True, False, False), id="failed"),
        pytest.param(job(finished=False, vanished=True), Verdict(True, False, False), id="its Job or Workload disappeared"),
        pytest.param(job(finished=False), Verdict(False, False, True), id="never ran, not finished: stuck"),
        pytest.param(job(run("w1", 0, None, succeeded=False), finished=False), Verdict(False, False, True), id="still running: stuck"),
        pytest.param(job(run("w1", 0, 1), run("w2", 1, 2, succeeded=False, pod="b")), OK, id="end and start touching are not overlapping"),
    ],
)
def test_judge(record: JobRecord, expected: Verdict) -> None:
    assert judge(record) == expected


def test_tally_names_the_jobs_and_counts_succeeded_pods_per_job() -> None:
    records = [
        JobRecord("fine", 1, True, False, False, (run("w1", 0, 1),)),
        JobRecord("double", 1, True, False, False, (run("w1", 0, 1, pod="a"), run("w2", 0.5, 2, pod="b"))),
        JobRecord("gone", 1, False, False, True, ()),
        JobRecord("late", 1, False, False, False, ()),
    ]
    result = tally("agent-killed", records, 12.34)
    assert result == FaultResult(
        fault="agent-killed",
        jobs=4,
        lost=("gone",),
        twice=("double",),
        stuck=("late",),
        recovery=12.34,
        succeeded_pods={"fine": 1, "double": 2, "gone": 0, "late": 0},
        details={
            "double": "w1 copy w1-copy: 1 pods, 1 succeeded, 0.0-1.0; w2 copy w2-copy: 1 pods, 1 succeeded, 0.5-2.0",
            "gone": "no pod ran",
            "late": "no pod ran",
        },
    )


def test_the_table_has_one_row_per_fault_and_names_the_bad_jobs() -> None:
    results = [
        FaultResult("agent-killed", 9, (), (), (), 3.25),
        FaultResult("freeze-2m", 9, ("short-1",), (), ("long-0", "long-1"), None, details={"short-1": "no pod ran"}),
    ]
    assert table(results).splitlines() == [
        "fault         jobs  lost  twice  stuck  recovery s",
        "------------  ----  ----  -----  -----  ----------",
        "agent-killed     9     0      0      0         3.2",
        "freeze-2m        9     1      0      2       never",
        "freeze-2m: lost: short-1",
        "freeze-2m: stuck: long-0, long-1",
        "  short-1: no pod ran",
    ]


def test_faults_option() -> None:
    assert parse_faults(None, short=False) == ALL
    assert parse_faults("agent-killed, freeze-20s", short=False) == ["agent-killed", "freeze-20s"]
    with pytest.raises(SystemExit, match="--faults: unknown fault nope; expected some of freeze-20s"):
        parse_faults("agent-killed,nope", short=False)
