"""The job controllers kfed runs on local clusters, one entry each: what `kfed dev up
--integrations`, the e2e federation, the tests' prerequisites and hack/test.sh know of them.

Each entry names the integrations its controller serves, the build script that makes it, and
the two things a federation does with it: install its CRDs on every cluster, and start its
controller on each worker. The manager runs none of them: there the job kinds are MultiKueue's
to dispatch. How a controller installs and runs is its own module's (`manager.dev.jobset`, ...),
through `manager.dev.controllers`.

`python -m manager.dev.catalog` prints the table for hack/test.sh, one controller a line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from manager.dev import controllers, jobset, kuberay, lws, mpijob, trainer
from manager.dev.binaries import BuildScript, built_dir
from manager.dev.local import Component, LocalCluster


@dataclass(frozen=True)
class LocalController:
    """A job controller that kfed builds from its Go module and runs on local clusters."""

    name: str  # how the tests ask for it (`require_controller`), as its directory under hack/ is named
    integrations: tuple[str, ...]  # the `kfed dev up --integrations` short names it serves, as a person lists them
    project: str  # as a person names the project ("JobSet not built")
    installs: str  # what `kfed dev up` says it installs ("JobSet: its CRD on every cluster, ...")
    build: BuildScript
    install_crds: Callable[[LocalCluster, Path], None]  # on one cluster, from the build's directory
    start_controller: Callable[[LocalCluster, Path], Component]  # on one worker, from the build's directory
    # The other controllers (by name) whose kinds its own make, installed and started before it
    # wherever it is (Kubeflow Trainer's TrainJob makes a JobSet).
    requires: tuple[str, ...] = ()

    def install(self, bin_dir: Path, *, clusters: Sequence[LocalCluster], workers: Sequence[LocalCluster]) -> None:
        """Its CRDs on every cluster of a federation, then its controller on each of `workers`
        (the manager gets only the CRDs: there its kinds are MultiKueue's to dispatch)."""
        for cluster in clusters:
            self.install_crds(cluster, bin_dir)
        for worker in workers:
            self.start_controller(worker, bin_dir)


CONTROLLERS = (
    LocalController(
        name="jobset",
        integrations=("jobset",),
        project="JobSet",
        installs="JobSet: its CRD on every cluster, its controller on each worker",
        build=BuildScript(
            path=Path("hack/jobset/build.sh"),
            directory_variable="KFED_JOBSET_BIN_DIR",
            files=(jobset.JOBSET.binary, str(jobset.CRD_FILE), controllers.WEBHOOK_MANIFESTS),
            what="the JobSet controller",
        ),
        install_crds=jobset.install_crd,
        start_controller=jobset.start_controller,
    ),
    LocalController(
        name="lws",
        integrations=("lws",),
        project="LeaderWorkerSet",
        installs="LeaderWorkerSet: its CRD on every cluster, its controller on each worker",
        build=BuildScript(
            path=Path("hack/lws/build.sh"),
            directory_variable="KFED_LWS_BIN_DIR",
            files=(lws.LWS.binary, str(lws.CRD_FILE), controllers.WEBHOOK_MANIFESTS),
            what="the LeaderWorkerSet controller",
        ),
        install_crds=lws.install_crd,
        start_controller=lws.start_controller,
    ),
    LocalController(
        name="kuberay",
        integrations=("rayjob", "raycluster"),  # one operator serves both kinds
        project="KubeRay",
        installs="KubeRay: the RayCluster and RayJob CRDs on every cluster, its operator on each worker",
        build=BuildScript(
            path=Path("hack/kuberay/build.sh"),
            directory_variable="KFED_KUBERAY_BIN_DIR",
            files=(kuberay.BINARY, *map(str, kuberay.CRD_FILES)),
            what="the KubeRay operator",
        ),
        install_crds=kuberay.install_crds,
        start_controller=kuberay.start_operator,
    ),
    LocalController(
        name="mpijob",
        integrations=("mpijob",),
        project="the MPI Operator",
        installs="MPIJob: its CRD on every cluster, the MPI Operator on each worker",
        build=BuildScript(
            path=Path("hack/mpijob/build.sh"),
            directory_variable="KFED_MPIJOB_BIN_DIR",
            files=(mpijob.BINARY, str(mpijob.CRD_FILE)),  # the operator serves no webhook
            what="the MPI Operator",
        ),
        install_crds=mpijob.install_crd,
        start_controller=mpijob.start_controller,
    ),
    LocalController(
        name="trainer",
        integrations=("trainjob",),
        project="Kubeflow Trainer",
        installs=(
            "TrainJob: the Trainer's CRDs and its torch-distributed ClusterTrainingRuntime on every cluster,"
            " its controller manager on each worker"
        ),
        build=BuildScript(
            path=Path("hack/trainer/build.sh"),
            directory_variable="KFED_TRAINER_BIN_DIR",
            files=(trainer.TRAINER.binary, *map(str, trainer.CRD_FILES), controllers.WEBHOOK_MANIFESTS, str(trainer.RUNTIME_FILE)),
            what="the Kubeflow Trainer controller manager",
        ),
        install_crds=trainer.install_crds,
        start_controller=trainer.start_controller,
        requires=("jobset",),
    ),
)
BY_NAME = {controller.name: controller for controller in CONTROLLERS}


def serving(integrations: Collection[str]) -> list[LocalController]:
    """The controllers that `integrations` (short names) need, with those they require, in the
    table's order (a required one comes first: JobSet's before the Trainer's)."""
    wanted = {controller.name for controller in CONTROLLERS if any(name in integrations for name in controller.integrations)}
    wanted |= {required for name in wanted for required in BY_NAME[name].requires}
    return [controller for controller in CONTROLLERS if controller.name in wanted]


def missing_requirements(names: Collection[str]) -> list[str]:
    """The controllers that the controllers `names` require and that are not among them."""
    return sorted({required for name in names for required in BY_NAME[name].requires} - set(names))


def controller_dir(controller: LocalController) -> Path:
    """The directory with `controller`'s binary, CRDs and manifests, building it first if
    needed; its `build.directory_variable` (KFED_JOBSET_BIN_DIR, ...) points at a prepared one instead."""
    return built_dir(controller.build)


def shell_table() -> str:
    """The table as hack/test.sh reads it: per controller, tab-separated, the variable that
    names its directory, its build script, what it builds, and its integrations as
    `--integrations` takes them."""
    lines = [(c.build.directory_variable, str(c.build.path), c.build.what, ",".join(c.integrations)) for c in CONTROLLERS]
    return "".join("\t".join(fields) + "\n" for fields in lines)


if __name__ == "__main__":
    sys.stdout.write(shell_table())
