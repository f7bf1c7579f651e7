"""The `kfed` command line itself: flags where kubectl takes them, object names as kubectl names
them, an example in every --help, and errors that name the fix."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from manager.api import kueue
from manager.api.core import Pod
from manager.cli.fleet import CommandError, ObjectName, check_context, parse_object_name, queue_problem
from manager.cli.logs import pick_container, where_it_runs
from manager.cli.main import EXAMPLES, _subcommands, build_parser, hoist_global_flags
from tests.conftest import REPO_ROOT

COMMANDS = ["status", "jobs", "explain", "dev", "validate"]


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["--kubeconfig", "F", "status"], ["status", "--kubeconfig", "F"]),
        (["--kubeconfig=F", "-n", "team-a", "jobs", "-A"], ["jobs", "-A", "--kubeconfig=F", "-n", "team-a"]),
        (["-ojson", "--context", "prod", "jobs"], ["jobs", "-ojson", "--context", "prod"]),
        (["jobs", "-n", "team-a"], ["jobs", "-n", "team-a"]),  # already after the command
        (["--version"], ["--version"]),
        (["--kubeconfig", "F"], ["--kubeconfig", "F"]),  # no command: argparse says so
    ],
)
def test_global_flags_before_the_command_are_read_by_the_command(argv: list[str], parsed: list[str]) -> None:
    assert hoist_global_flags(argv, COMMANDS) == parsed


def test_the_parser_takes_global_flags_before_the_command() -> None:
    parser = build_parser()
    args = parser.parse_args(hoist_global_flags(["--kubeconfig", "/tmp/k", "-o", "json", "status"], list(_subcommands(parser))))
    assert (args.command, args.kubeconfig, args.output) == ("status", "/tmp/k", "json")


def _every_parser(parser: argparse.ArgumentParser, path: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for name, sub in _subcommands(parser).items():
        found += _every_parser(sub, f"{path} {name}".strip())
    return found


def test_every_help_shows_one_runnable_example() -> None:
    parsers = _every_parser(build_parser())
    assert len(parsers) > 15
    for path, parser in parsers:
        example = EXAMPLES[path]
        assert parser.epilog is not None and f"example:\n  {example}" in parser.epilog, path
        assert example.startswith(f"kfed {path}".strip()), path
        args = build_parser().parse_args(example.split()[1:])  # it parses: the options exist
        assert args.command == (path.split()[0] if path else "jobs")


def test_version_prints_kfed_and_the_kueue_api_versions_served() -> None:
    result = subprocess.run([sys.executable, "-m", "manager.cli.main", "--version"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("kfed ")
    assert lines[1] == "Kueue API served: kueue.x-k8s.io/v1beta2 (stored), kueue.x-k8s.io/v1beta1"


@pytest.mark.parametrize(
    ("text", "default", "expected"),
    [
        ("train", "", ObjectName("", "train")),
        ("job/train", "", ObjectName("job", "train")),
        ("jobs.batch/train", "", ObjectName("job", "train")),
        ("jobset/sweep", "", ObjectName("jobset", "sweep")),
        ("workload/job-train-abcde", "", ObjectName("workload", "job-train-abcde")),
        ("wl/x", "", ObjectName("workload", "x")),
        ("job/train", "job", ObjectName("job", "train")),
        ("train", "job", ObjectName("job", "train")),
    ],
)
def test_objects_are_named_as_kubectl_names_them(text: str, default: str, expected: ObjectName) -> None:
    assert parse_object_name(text, default) == expected


FORMS = "NAME, job/NAME, jobset/NAME, mpijob/NAME, lws/NAME, pod/NAME, raycluster/NAME, rayjob/NAME, trainjob/NAME or workload/NAME"


@pytest.mark.parametrize(
    ("text", "default", "error"),
    [
        ("deployment/x", "", f'"deployment/x": expected {FORMS}'),
        ("job/", "", f'"job/": expected {FORMS}'),
        ("workload/x", "job", '"workload/x": this command takes Jobs: name them NAME or job/NAME'),
    ],
)
def test_a_wrong_object_name_is_one_line_naming_the_forms(text: str, default: str, error: str) -> None:
    with pytest.raises(CommandError) as err:
        parse_object_name(text, default)
    assert str(err.value) == error


LQ = kueue.LocalQueue.model_validate({"metadata": {"name": "user-queue", "namespace": "team-a"}, "spec": {"clusterQueue": "cq"}})
CQ = kueue.ClusterQueue.model_validate({"metadata": {"name": "cq"}, "spec": {"namespaceSelector": {"matchLabels": {"team": "a"}}}})


@pytest.mark.parametrize(
    ("lq", "others", "cq", "labels", "problem"),
    [
        (LQ, ["user-queue"], CQ, {"team": "a"}, ""),
        (
            None,
            ["team-queue", "batch"],
            None,
            None,
            'LocalQueue "user-queue" does not exist in namespace team-a: create it, or pass --queue with an existing one; '
            "LocalQueues in team-a: batch, team-queue",
        ),
        (
            None,
            [],
            None,
            None,
            'LocalQueue "user-queue" does not exist in namespace team-a: create it, or pass --queue with an existing one; team-a has none',
        ),
        (
            LQ,
            ["user-queue"],
            None,
            {},
            'LocalQueue team-a/user-queue points to ClusterQueue "cq", which does not exist: create it, or fix spec.clusterQueue',
        ),
        (
            LQ,
            ["user-queue"],
            CQ,
            {"team": "b"},
            "ClusterQueue cq does not select namespace team-a (spec.namespaceSelector): "
            "label the namespace to match it, or widen the selector",
        ),
    ],
)
def test_queue_mistakes_name_the_fix(
    lq: kueue.LocalQueue | None, others: list[str], cq: kueue.ClusterQueue | None, labels: dict[str, str] | None, problem: str
) -> None:
    assert queue_problem("team-a", "user-queue", local_queue=lq, others=others, cluster_queue=cq, namespace_labels=labels) == problem


def test_a_kubeconfig_context_that_does_not_exist_names_the_ones_that_do() -> None:
    kubeconfig = {"contexts": [{"name": "dev"}, {"name": "prod"}], "current-context": "dev"}
    check_context(kubeconfig, None, Path("k"))
    check_context(kubeconfig, "prod", Path("k"))
    with pytest.raises(CommandError) as err:
        check_context(kubeconfig, "staging", Path("k"))
    assert str(err.value) == (
        'kubeconfig k has no context "staging" (--context): use one of dev, prod '
        "(list them with `kubectl config get-contexts --kubeconfig k`)"
    )


def pod(*containers: str, default: str | None = None) -> Pod:
    annotations = {"kubectl.kubernetes.io/default-container": default} if default else None
    return Pod.model_validate(
        {"metadata": {"name": "p", "annotations": annotations}, "spec": {"containers": [{"name": n} for n in containers]}}
    )


@pytest.mark.parametrize(
    ("subject", "wanted", "chosen"),
    [
        (pod("main"), None, "main"),
        (pod("main", "sidecar"), None, "main"),  # kubectl's default: the first
        (pod("sidecar", "main", default="main"), None, "main"),  # unless the pod names its default
        (pod("main", "sidecar"), "sidecar", "sidecar"),
    ],
)
def test_logs_reads_the_container_kubectl_would(subject: Pod, wanted: str | None, chosen: str) -> None:
    assert pick_container(subject, wanted) == chosen


def test_logs_of_a_container_the_pod_lacks_names_the_ones_it_has() -> None:
    with pytest.raises(CommandError) as err:
        pick_container(pod("main", "sidecar"), "trainer")
    assert str(err.value) == 'pod p has no container "trainer": choose one of main, sidecar with --container'


def test_logs_of_a_job_not_running_anywhere_says_where_it_stands_and_what_to_run() -> None:
    waiting = kueue.Workload.model_validate(
        {
            "metadata": {"name": "job-train-x", "namespace": "team-a"},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {}}]},
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "False",
                        "reason": "Pending",
                        "message": "insufficient quota",
                        "lastTransitionTime": "2026-11-21T11:00:00Z",
                    }
                ]
            },
        }
    )
    with pytest.raises(CommandError) as err:
        where_it_runs(waiting, {}, "train", "team-a")
    assert str(err.value) == (
        "job/train is not running on any cluster yet (Pending: insufficient quota); see `kfed explain job/train -n team-a`"
    )
    placed = waiting.model_copy(deep=True)
    assert placed.status is not None
    placed.status.cluster_name = "worker2"
    assert where_it_runs(placed, {}, "train", "team-a") == "worker2"
