"""`kfed simulate` end to end: the repository's examples, the output formats, golden tables, bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from manager.cli.main import main
from tests.conftest import EXAMPLE_FILES, EXAMPLES

GOLDEN = Path(__file__).parent / "golden"
# "single-queue", "jobs/sample-job", "config/fair-sharing", ...
EXAMPLE = {str(p.relative_to(EXAMPLES).with_suffix("")): p for p in EXAMPLE_FILES}


def job(
    name: str,
    queue: str,
    *,
    namespace: str = "default",
    cpu: str = "1",
    parallelism: int = 1,
    labels: dict[str, str] | None = None,
    created: int = 0,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"kueue.x-k8s.io/queue-name": queue, **(labels or {})},
            "creationTimestamp": f"2026-03-01T12:{created // 60:02d}:{created % 60:02d}Z",
        },
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
                }
            },
        },
    }


def write(tmp_path: Path, name: str, docs: list[dict[str, Any]]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return path


def simulate(capsys: pytest.CaptureFixture[str], *paths: Path, output: str = "json", extra: tuple[str, ...] = ()) -> tuple[int, Any, str]:
    args = ["simulate", *[arg for p in paths for arg in ("-f", str(p))], "-o", output, *extra]
    code = main(args)
    captured = capsys.readouterr()
    if code == 0 and output == "json":
        return code, json.loads(captured.out), captured.err
    return code, captured.out, captured.err


def workloads(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["name"]: item for item in result["items"] if item["kind"] == "Workload"}


def cluster_queue(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(item for item in result["items"] if item["kind"] == "ClusterQueue" and item["metadata"]["name"] == name)


def condition(item: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in item["status"]["conditions"] if c["type"] == kind)


def reserved_cpu(cq: dict[str, Any]) -> str:
    return str(cq["status"]["flavorsReservation"][0]["resources"][0]["total"])


def test_single_queue_admits_the_sample_job(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, _ = simulate(capsys, EXAMPLE["single-queue"], EXAMPLE["jobs/sample-job"])
    assert code == 0
    (wl,) = workloads(result).values()
    assert wl["metadata"]["name"].startswith("job-sample-job-")
    assert wl["status"]["admission"] == {
        "clusterQueue": "cluster-queue",
        "podSetAssignments": [
            {
                "name": "main",
                "flavors": {"cpu": "default-flavor", "memory": "default-flavor"},
                "resourceUsage": {"cpu": "3", "memory": "600Mi"},
                "count": 3,
            }
        ],
    }
    assert condition(wl, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue cluster-queue"
    assert condition(wl, "Admitted")["status"] == "True"
    cq = cluster_queue(result, "cluster-queue")
    assert cq["status"]["flavorsReservation"] == [
        {
            "name": "default-flavor",
            "resources": [{"name": "cpu", "total": "3", "borrowed": "0"}, {"name": "memory", "total": "600Mi", "borrowed": "0"}],
        }
    ]
    assert (cq["status"]["reservingWorkloads"], cq["status"]["admittedWorkloads"], cq["status"]["pendingWorkloads"]) == (1, 1, 0)


def test_sample_job_alone_has_no_local_queue(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, _ = simulate(capsys, EXAMPLE["jobs/sample-job"])
    assert code == 0
    (wl,) = workloads(result).values()
    assert condition(wl, "QuotaReserved") | {"lastTransitionTime": None} == {
        "type": "QuotaReserved",
        "status": "False",
        "reason": "Misconfigured",
        "message": "LocalQueue user-queue doesn't exist",
        "lastTransitionTime": None,
    }


def test_cohort_borrowing_example_admits_21_cpu_for_team_a(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    jobs = write(tmp_path, "jobs.yaml", [job(f"train-{i:02d}", "team-a-queue", namespace="team-a", created=i) for i in range(25)])
    code, result, _ = simulate(capsys, EXAMPLE["cohort-borrowing"], jobs)
    assert code == 0
    admitted = [name for name, wl in workloads(result).items() if wl.get("status", {}).get("admission")]
    assert len(admitted) == 21
    team_a = cluster_queue(result, "team-a-cq")
    assert team_a["status"]["flavorsReservation"][0]["resources"][0] == {"name": "cpu", "total": "21", "borrowed": "12"}


def test_cohort_borrowing_example_jobs_five_run_and_one_waits(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, _ = simulate(capsys, EXAMPLE["cohort-borrowing"], EXAMPLE["jobs/team-a-jobs"])
    assert code == 0
    by_name = workloads(result)
    admitted = sorted(name.rsplit("-", 1)[0] for name, wl in by_name.items() if wl.get("status", {}).get("admission"))
    assert admitted == [f"job-train-{i}" for i in range(1, 6)]
    waiting = next(wl for name, wl in by_name.items() if name.startswith("job-train-6-"))
    assert condition(waiting, "QuotaReserved")["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default-flavor, 3 more needed"
    )
    cpu = cluster_queue(result, "team-a-cq")["status"]["flavorsReservation"][0]["resources"][0]
    assert cpu == {"name": "cpu", "total": "20", "borrowed": "11"}


def test_borrowing_and_lending_limits_example(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # team-a: min(8 + borrowingLimit 8, guaranteed 4 + cohort (4 + 8)) = 16; team-b: min(16 + 4, 8 + 12) = 20.
    code, result, _ = simulate(capsys, EXAMPLE["borrowing-and-lending-limits"], EXAMPLE["jobs/limits-jobs"])
    assert code == 0
    assert reserved_cpu(cluster_queue(result, "limits-team-a-cq")) == "16"
    assert sum(1 for wl in workloads(result).values() if wl.get("status", {}).get("admission")) == 8
    code, result, _ = simulate(
        capsys,
        EXAMPLE["borrowing-and-lending-limits"],
        write(tmp_path, "b.yaml", [job(f"b{i:02d}", "limits-queue", namespace="team-b", created=i) for i in range(25)]),
    )
    assert code == 0
    assert reserved_cpu(cluster_queue(result, "limits-team-b-cq")) == "20"


def test_preemption_example_reclaims_for_the_high_priority_job(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Before the training job arrives the notebooks borrow all of training-cq's 16 cpu.
    code, result, _ = simulate(capsys, EXAMPLE["preemption"], EXAMPLE["jobs/notebooks"])
    assert code == 0
    assert reserved_cpu(cluster_queue(result, "notebooks-cq")) == "32"
    running = write(tmp_path, "running.yaml", list(workloads(result).values()))
    code, result, _ = simulate(capsys, EXAMPLE["preemption"], running, EXAMPLE["jobs/training"])
    assert code == 0
    by_name = workloads(result)
    preempted = sorted(
        name for name, wl in by_name.items() if any(c["type"] == "Preempted" and c["status"] == "True" for c in wl["status"]["conditions"])
    )
    assert len(preempted) == 2 and all(name.startswith("job-notebook-") for name in preempted)
    assert {condition(by_name[n], "Preempted")["reason"] for n in preempted} == {"InCohortReclamation"}
    training_wl = next(wl for name, wl in by_name.items() if name.startswith("job-training-"))
    assert training_wl["spec"]["priority"] == 1000
    assert condition(training_wl, "Admitted")["status"] == "True"
    assert reserved_cpu(cluster_queue(result, "training-cq")) == "16"
    assert reserved_cpu(cluster_queue(result, "notebooks-cq")) == "16"


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_resource_groups_example(capsys: pytest.CaptureFixture[str], version: str) -> None:
    code, result, _ = simulate(capsys, EXAMPLE[f"resource-groups-{version}"], EXAMPLE["jobs/gpu-jobs"])
    assert code == 0
    flavors = {
        name.rsplit("-", 1)[0]: wl["status"]["admission"]["podSetAssignments"][0]["flavors"] for name, wl in workloads(result).items()
    }
    assert flavors == {
        "job-gpu-1": {"cpu": "spot", "nvidia.com/gpu": "vendor1", "pods": "spot"},
        "job-gpu-2": {"cpu": "on-demand", "nvidia.com/gpu": "vendor2", "pods": "on-demand"},
    }
    assert all(item["apiVersion"] == "kueue.x-k8s.io/v1beta2" for item in result["items"])


def test_fair_sharing_example_shares_the_cohort_by_weight(capsys: pytest.CaptureFixture[str]) -> None:
    setup = (EXAMPLE["fair-sharing"], EXAMPLE["jobs/fair-sharing-jobs"])
    code, result, _ = simulate(capsys, EXAMPLE["config/fair-sharing"], *setup)
    assert code == 0
    assert (reserved_cpu(cluster_queue(result, "fair-team-a-cq")), reserved_cpu(cluster_queue(result, "fair-team-b-cq"))) == ("4", "8")
    # Without the Configuration the weights mean nothing: each cycle admits one head per queue,
    # and neither queue has nominal quota to reclaim, so the cohort ends up split evenly.
    code, result, _ = simulate(capsys, *setup)
    assert code == 0
    assert (reserved_cpu(cluster_queue(result, "fair-team-a-cq")), reserved_cpu(cluster_queue(result, "fair-team-b-cq"))) == ("6", "6")


def test_multikueue_manager_example_reserves_quota_and_waits_for_the_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, err = simulate(capsys, EXAMPLE["multikueue-manager"], EXAMPLE["jobs/sample-job"])
    assert code == 0
    assert "skipped kueue.x-k8s.io/v1beta2 AdmissionCheck" in err
    (wl,) = workloads(result).values()
    assert condition(wl, "QuotaReserved")["status"] == "True"
    assert condition(wl, "Admitted")["reason"] == "UnsatisfiedAdmissionChecks"
    assert wl["status"]["admissionChecks"][0]["name"] == "multikueue"
    assert wl["status"]["admissionChecks"][0]["state"] == "Pending"


def test_whole_examples_directory_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code, result, err = simulate(capsys, EXAMPLES)
    assert code == 0
    assert result["kind"] == "List" and result["apiVersion"] == "v1"
    kinds = [(item["kind"], item["metadata"].get("namespace", ""), item["metadata"]["name"]) for item in result["items"]]
    assert kinds == sorted(kinds)
    queues = [name for kind, _, name in kinds if kind == "ClusterQueue"]
    assert queues == [
        "cluster-queue",
        "fair-team-a-cq",
        "fair-team-b-cq",
        "gpu-cluster-queue",
        "limits-team-a-cq",
        "limits-team-b-cq",
        "notebooks-cq",
        "team-a-cq",
        "team-b-cq",
        "training-cq",
    ]
    # The single-queue and MultiKueue setups define the same `cluster-queue`: the later file wins.
    assert "examples/single-queue.yaml[1] ClusterQueue/cluster-queue: replaces the definition at" in err


def test_yaml_output_is_the_same_list(capsys: pytest.CaptureFixture[str]) -> None:
    _, as_json, _ = simulate(capsys, EXAMPLE["single-queue"], EXAMPLE["jobs/sample-job"])
    code, text, _ = simulate(capsys, EXAMPLE["single-queue"], EXAMPLE["jobs/sample-job"], output="yaml")
    assert code == 0 and yaml.safe_load(text) == as_json


def test_cycles_flag_runs_exactly_that_many_cycles(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    jobs = write(tmp_path, "jobs.yaml", [job(f"j{i}", "user-queue", created=i) for i in range(3)])
    code, text, _ = simulate(capsys, EXAMPLE["single-queue"], jobs, output="table", extra=("--cycles", "2"))
    assert code == 0
    assert "2 cycle(s): 2 admitted, 0 quota reserved, 1 pending" in text


def golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("KFED_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"table output changed; review and rerun with KFED_UPDATE_GOLDEN=1 to accept ({path})"


def test_table_golden_examples_directory(capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = simulate(capsys, EXAMPLES, output="table")
    assert code == 0
    golden("examples", text)


def test_table_golden_borrowing_and_waiting(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    jobs = write(tmp_path, "jobs.yaml", [job(f"train-{i:02d}", "team-a-queue", namespace="team-a", cpu="4", created=i) for i in range(7)])
    code, text, _ = simulate(capsys, EXAMPLE["cohort-borrowing"], jobs, output="table")
    assert code == 0
    golden("cohort-borrowing", text)


def over_limit_job() -> dict[str, Any]:
    broken = job("j", "q", cpu="2")
    broken["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1"}
    return broken


@pytest.mark.parametrize(
    ("docs", "expected"),
    [
        (
            [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "ClusterQueue",
                    "metadata": {"name": "cq"},
                    "spec": {
                        "resourceGroups": [
                            {"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "9x"}]}]}
                        ]
                    },
                }
            ],
            'bad.yaml[0] ClusterQueue/cq: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: invalid quantity "9x"',
        ),
        (
            [job("j", "q", labels={"kueue.x-k8s.io/priority-class": "missing"})],
            'bad.yaml[0] Job/default/j: metadata.labels[kueue.x-k8s.io/priority-class]: WorkloadPriorityClass "missing" not found',
        ),
        (
            [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "Workload",
                    "metadata": {"name": "w", "namespace": "default"},
                    "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": "nope"}}}]},
                }
            ],
            'bad.yaml[0] Workload/default/w: spec.podSets[0].template.spec.containers: Invalid value: "str": must be a list of containers',
        ),
        (
            [over_limit_job()],
            "bad.yaml[0] Job/default/j: spec.template.spec.containers[0].resources.requests.cpu: "
            "must be less than or equal to the cpu limit",
        ),
    ],
    ids=["invalid quantity", "unknown priority class", "containers not a list", "request above limit"],
)
def test_bad_input_exits_1_with_a_located_message_and_no_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, docs: list[dict[str, Any]], expected: str
) -> None:
    path = write(tmp_path, "bad.yaml", docs)
    code, _, err = simulate(capsys, path, output="table")
    assert code == 1
    assert expected in err.replace(str(tmp_path) + "/", "")
    assert "Traceback" not in err


def test_bad_container_resources_are_located(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    broken = job("j", "user-queue")
    broken["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    code, _, err = simulate(capsys, EXAMPLE["single-queue"], write(tmp_path, "bad.yaml", [broken]), output="table")
    assert code == 1
    assert "Traceback" not in err
    assert "Job/default/j" in err and "cpu" in err


def test_negative_cycles_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = simulate(capsys, EXAMPLE["single-queue"], output="table", extra=("--cycles", "-1"))
    assert code == 1 and "--cycles" in err


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_release_delay_that_is_no_number_of_seconds_is_rejected(capsys: pytest.CaptureFixture[str], value: str) -> None:
    code, _, err = simulate(capsys, EXAMPLE["single-queue"], output="table", extra=("--release-after", value))
    assert code == 1 and err.strip() == "--release-after: must be a number of seconds, zero or more"


def test_release_after_keeps_the_victims_quota_while_their_jobs_stop(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The preemption example, with the notebooks' jobs taking 5 s to stop: after 3 cycles the
    training job still waits for its victims, which still hold their quota."""
    code, result, _ = simulate(capsys, EXAMPLE["preemption"], EXAMPLE["jobs/notebooks"])
    assert code == 0
    running = write(tmp_path, "running.yaml", list(workloads(result).values()))
    slow_stop = ("--release-after", "5", "--cycles", "3")
    code, result, _ = simulate(capsys, EXAMPLE["preemption"], running, EXAMPLE["jobs/training"], extra=slow_stop)
    assert code == 0
    training_wl = next(wl for name, wl in workloads(result).items() if name.startswith("job-training-"))
    assert condition(training_wl, "QuotaReserved")["reason"] == "WaitingForPreemptedWorkloads"
    assert reserved_cpu(cluster_queue(result, "notebooks-cq")) == "32"


# --- agreement with Kueue: preemption across queues, one charge per admission ---------------------

KUEUE_V1BETA2 = "kueue.x-k8s.io/v1beta2"


def cq_doc(
    name: str, cohort: str, cpu: str, *, borrowing_limit: str | None = None, preemption: dict[str, str] | None = None
) -> dict[str, Any]:
    resource = {"name": "cpu", "nominalQuota": cpu}
    if borrowing_limit is not None:
        resource["borrowingLimit"] = borrowing_limit
    spec: dict[str, Any] = {
        "cohortName": cohort,
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [resource]}]}],
    }
    if preemption:
        spec["preemption"] = preemption
    return {"apiVersion": KUEUE_V1BETA2, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def queue_docs(*cq_names: str) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [{"apiVersion": KUEUE_V1BETA2, "kind": "ResourceFlavor", "metadata": {"name": "default"}}]
    for cq in cq_names:
        meta = {"namespace": "default", "name": f"lq-{cq}"}
        docs.append({"apiVersion": KUEUE_V1BETA2, "kind": "LocalQueue", "metadata": meta, "spec": {"clusterQueue": cq}})
    return docs


def running_workload(name: str, cq: str, cpu: str, priority: int, created: int) -> dict[str, Any]:
    at = f"2026-03-01T12:00:{created:02d}Z"
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": KUEUE_V1BETA2,
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": at},
        "spec": {
            "queueName": f"lq-{cq}",
            "priority": priority,
            "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [container]}}}],
        },
        "status": {
            "admission": {
                "clusterQueue": cq,
                "podSetAssignments": [{"name": "main", "count": 1, "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": cpu}}],
            },
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": at},
                {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": at},
            ],
        },
    }


def preempted_reasons(result: dict[str, Any]) -> dict[str, str]:
    return {
        name: condition(wl, "Preempted")["reason"]
        for name, wl in workloads(result).items()
        if any(c["type"] == "Preempted" and c["status"] == "True" for c in wl["status"].get("conditions", []))
    }


def test_preemptor_over_nominal_takes_its_own_and_a_cohort_borrowers_workload(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Kueue's "preempt from all ClusterQueues in cohort": c1 holds 5 of its 6 cpu, c2 borrows 1.
    # The incoming 4 cpu put c1 over nominal; only evicting c1-low (own queue) together with
    # c2-low (the borrower) makes room without borrowing.
    c1_policy = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "LowerPriority"}
    docs = queue_docs("c1", "c2") + [
        cq_doc("c1", "cohort", "6", borrowing_limit="6", preemption=c1_policy),
        cq_doc("c2", "cohort", "6", borrowing_limit="6", preemption={"withinClusterQueue": "Never", "reclaimWithinCohort": "Any"}),
        running_workload("c1-low", "c1", "3", -1, 0),
        running_workload("c1-mid", "c1", "2", 0, 1),
        running_workload("c2-low", "c2", "3", -1, 2),
        running_workload("c2-mid", "c2", "4", 0, 3),
        job("incoming", "lq-c1", cpu="4", created=30),
    ]
    code, result, _ = simulate(capsys, write(tmp_path, "mixed.yaml", docs))
    assert code == 0
    assert preempted_reasons(result) == {"c1-low": "InClusterQueue", "c2-low": "InCohortReclamation"}
    admitted = sorted(name for name, wl in workloads(result).items() if wl.get("status", {}).get("admission"))
    assert admitted[:2] == ["c1-mid", "c2-mid"] and len(admitted) == 3
    assert admitted[2].startswith("job-incoming-")
    assert reserved_cpu(cluster_queue(result, "c1")) == "6"


def test_two_heads_that_fill_the_cohort_exactly_are_admitted_in_one_cycle(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    docs = queue_docs("team-a", "team-b") + [
        cq_doc("team-a", "co", "4"),
        cq_doc("team-b", "co", "0"),
        job("a", "lq-team-a", cpu="2", created=0),
        job("b", "lq-team-b", cpu="2", created=1),
    ]
    code, text, _ = simulate(capsys, write(tmp_path, "exact.yaml", docs), output="table", extra=("--cycles", "1"))
    assert code == 0
    assert "1 cycle(s): 2 admitted, 0 quota reserved, 0 pending" in text
    assert "no longer fits" not in text


def test_simulate_queues_a_job_named_only_by_the_queue_name_annotation(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The one queue-name rule (label, then Kueue's deprecated annotation) serves simulate too,
    as it serves the manager's webhook and job controller."""
    job = yaml.safe_load((EXAMPLES / "jobs" / "sample-job.yaml").read_text())
    queue = job["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    job["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/queue-name"] = queue
    path = tmp_path / "annotated-job.yaml"
    path.write_text(yaml.safe_dump(job))
    code, result, _ = simulate(capsys, EXAMPLE["single-queue"], path)
    assert code == 0
    [wl] = workloads(result).values()
    assert wl["spec"]["queueName"] == queue
