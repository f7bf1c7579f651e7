"""The fault suite's counting rules (benchmarks/faults.py `judge`): lost, run twice and stuck,
judged from the manager's job (a Job, a JobSet or a pod group) and the workers' pod records."""

from __future__ import annotations

import pytest

from benchmarks.faults import ALL, FaultResult, JobRecord, PodRun, Verdict, job_of_pod, judge, parse_faults, table, tally


def run(
    cluster: str, started: float, ended: float | None, *, succeeded: bool = True, pod: str = "p", copy: str = "", part: str = ""
) -> PodRun:
    return PodRun(cluster=cluster, copy=copy or f"{cluster}-copy", pod=pod, started=started, ended=ended, succeeded=succeeded, part=part)


def member(cluster: str, started: float, ended: float | None, index: str, *, uid: str = "", succeeded: bool = True) -> PodRun:
    """A pod group's Pod: its part is its name (the group's index), its copy the Pod itself."""
    return run(cluster, started, ended, succeeded=succeeded, pod=index, copy=uid or f"{cluster}-{index}", part=index)


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
        # A JobSet: its parts are its child Jobs, each run once.
        pytest.param(
            job(
                *(
                    run("w1", 0, 1, pod=f"{part}-p", copy=f"uid-{part}", part=part)
                    for part in ("js-leader-0", "js-workers-0", "js-workers-1")
                )
            ),
            OK,
            id="a jobset's three child Jobs each completed once on one worker",
        ),
        pytest.param(
            job(run("w1", 0, 1, pod="a", copy="uid-1", part="js-leader-0"), run("w2", 3, 4, pod="b", copy="uid-2", part="js-leader-0")),
            Verdict(False, True, False),
            id="a jobset's child Job completed on two workers",
        ),
        pytest.param(
            job(run("w1", 0, 10, succeeded=False, pod="a", part="js-leader-0"), run("w2", 5, 6, pod="b", part="js-workers-0")),
            Verdict(False, True, False),
            id="a jobset's child Jobs' pods on two workers at once",
        ),
        pytest.param(
            job(run("w1", 0, 4, succeeded=False, pod="a", part="js-leader-0"), run("w2", 5, 6, pod="b", part="js-leader-0")),
            OK,
            id="a jobset preempted on w1, then run whole on w2: not twice",
        ),
        # A pod group: its parts are its Pods (one index each).
        pytest.param(job(member("w1", 0, 1, "g-0"), member("w1", 0, 1, "g-1")), OK, id="a pod group's two Pods each succeeded once"),
        pytest.param(
            job(member("w1", 0, 1, "g-0", uid="first"), member("w1", 2, 3, "g-0", uid="second"), member("w1", 0, 1, "g-1")),
            Verdict(False, True, False),
            id="a pod group's Pod created twice for one index and succeeded twice",
        ),
        pytest.param(
            job(member("w1", 0, 10, "g-0", succeeded=False), member("w2", 5, 6, "g-1")),
            Verdict(False, True, False),
            id="a pod group's Pods on two workers at once",
        ),
        pytest.param(
            job(member("w1", 0, 4, "g-0", succeeded=False), member("w2", 5, 6, "g-0"), member("w2", 5, 6, "g-1")),
            OK,
            id="a pod group preempted on w1, then run whole on w2: not twice",
        ),
    ],
)
def test_judge(record: JobRecord, expected: Verdict) -> None:
    assert judge(record) == expected


@pytest.mark.parametrize(
    ("name", "labels", "expected"),
    [
        pytest.param("j-x", {"batch.kubernetes.io/job-name": "j", "batch.kubernetes.io/controller-uid": "u"}, ("j", "", "u"), id="a Job's"),
        pytest.param(
            "js-leader-0-x",
            {
                "batch.kubernetes.io/job-name": "js-leader-0",
                "batch.kubernetes.io/controller-uid": "u",
                "jobset.sigs.k8s.io/jobset-name": "js",
            },
            ("js", "js-leader-0", "u"),
            id="a JobSet's, by its child Job",
        ),
        pytest.param("g-1", {"kueue.x-k8s.io/pod-group-name": "g"}, ("g", "g-1", "pod-uid"), id="a pod group's, by its own name"),
        pytest.param("lone", {"app": "x"}, None, id="none of the mix's"),
    ],
)
def test_a_workers_pod_is_counted_for_its_job_part_and_copy(name: str, labels: dict[str, str], expected: object) -> None:
    assert job_of_pod(name, "pod-uid", labels) == expected


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
