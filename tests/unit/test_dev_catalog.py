"""The one table of job controllers kfed runs locally (manager/dev/catalog.py): what `kfed dev up
--integrations` starts, what hack/test.sh builds, and what a test that lacks one says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from manager.dev import catalog, federation
from manager.dev.binaries import REPO_ROOT, BinariesError, built_dir
from tests.harness import require_controller


def test_every_integration_a_controller_serves_is_one_kfed_dev_up_takes_and_only_one_controller_serves_it() -> None:
    served = [name for controller in catalog.CONTROLLERS for name in controller.integrations]
    assert all(name in federation.INTEGRATIONS for name in served)
    assert len(served) == len(set(served))


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("job", []),
        ("pod", []),
        ("jobset", ["jobset"]),
        ("leaderworkerset.x-k8s.io/leaderworkerset", ["lws"]),
        ("ray.io/rayjob", ["kuberay"]),
        ("raycluster,rayjob", ["kuberay"]),  # one operator for both kinds
        ("mpijob,pod,jobset", ["jobset", "mpijob"]),  # in the table's order
        # A TrainJob makes a JobSet: the Trainer brings JobSet's controller, started before it.
        ("trainjob", ["jobset", "trainer"]),
        ("trainer.kubeflow.org/trainjob,jobset", ["jobset", "trainer"]),
    ],
)
def test_kfed_dev_up_runs_the_controllers_of_the_integrations_asked_for(text: str, names: list[str]) -> None:
    assert [controller.name for controller in catalog.serving(federation.parse_integrations(text))] == names


def test_hack_test_sh_reads_each_controllers_variable_build_script_and_what_it_builds() -> None:
    rows = [line.split("\t") for line in catalog.shell_table().splitlines()]
    assert rows == [
        ["KFED_JOBSET_BIN_DIR", "hack/jobset/build.sh", "the JobSet controller", "jobset"],
        ["KFED_LWS_BIN_DIR", "hack/lws/build.sh", "the LeaderWorkerSet controller", "lws"],
        ["KFED_KUBERAY_BIN_DIR", "hack/kuberay/build.sh", "the KubeRay operator", "rayjob,raycluster"],
        ["KFED_MPIJOB_BIN_DIR", "hack/mpijob/build.sh", "the MPI Operator", "mpijob"],
        ["KFED_TRAINER_BIN_DIR", "hack/trainer/build.sh", "the Kubeflow Trainer controller manager", "trainjob"],
    ]
    assert all((REPO_ROOT / script).is_file() for _, script, _, _ in rows)
    assert 'python" -m manager.dev.catalog' in (REPO_ROOT / "hack" / "test.sh").read_text()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("jobset", "JobSet not built: export KFED_JOBSET_BIN_DIR=$(bash hack/jobset/build.sh) (hack/test.sh does)"),
        ("lws", "LeaderWorkerSet not built: export KFED_LWS_BIN_DIR=$(bash hack/lws/build.sh) (hack/test.sh does)"),
        ("kuberay", "KubeRay not built: export KFED_KUBERAY_BIN_DIR=$(bash hack/kuberay/build.sh) (hack/test.sh does)"),
        ("mpijob", "the MPI Operator not built: export KFED_MPIJOB_BIN_DIR=$(bash hack/mpijob/build.sh) (hack/test.sh does)"),
        ("trainer", "Kubeflow Trainer not built: export KFED_TRAINER_BIN_DIR=$(bash hack/trainer/build.sh) (hack/test.sh does)"),
    ],
)
def test_a_test_without_a_controllers_build_says_in_one_line_what_to_build(
    name: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)  # under CI a missing prerequisite fails instead
    controller = catalog.BY_NAME[name]
    (tmp_path / controller.build.files[0]).write_text("")  # a directory with the binary only
    monkeypatch.setenv(controller.build.directory_variable, str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match=f"^{re.escape(message)}$"):
        require_controller(name)


def test_a_controllers_prepared_directory_is_used_as_it_is_and_must_hold_every_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    controller = catalog.BY_NAME["mpijob"]
    monkeypatch.setenv(controller.build.directory_variable, str(tmp_path))
    with pytest.raises(BinariesError, match=r"lacks mpi-operator, crds/kubeflow\.org_mpijobs\.yaml$"):
        built_dir(controller.build)
    for file in controller.build.files:
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).write_text("")
    assert catalog.controller_dir(controller) == tmp_path
    assert require_controller("mpijob") == tmp_path


def test_a_federation_asking_for_the_trainer_without_jobset_is_told_what_it_lacks() -> None:
    assert catalog.missing_requirements(["trainer"]) == ["jobset"]
    assert catalog.missing_requirements(["trainer", "jobset"]) == []
