"""Find or build the binaries of local clusters: the control plane (hack/kube/build.sh) and the
JobSet and LeaderWorkerSet controllers, the KubeRay operator and the MPI Operator
(hack/jobset/build.sh, hack/lws/build.sh, hack/kuberay/build.sh, hack/mpijob/build.sh), each
cached by version by its script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "kube" / "build.sh"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
JOBSET_BUILD_SCRIPT = REPO_ROOT / "hack" / "jobset" / "build.sh"
# What hack/jobset/build.sh leaves in its directory.
JOBSET_FILES = ("jobset-controller", "crds/jobset.x-k8s.io_jobsets.yaml", "webhook-manifests.yaml")
LWS_BUILD_SCRIPT = REPO_ROOT / "hack" / "lws" / "build.sh"
# What hack/lws/build.sh leaves in its directory.
LWS_FILES = ("lws-controller", "crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml", "webhook-manifests.yaml")
KUBERAY_BUILD_SCRIPT = REPO_ROOT / "hack" / "kuberay" / "build.sh"
# What hack/kuberay/build.sh leaves in its directory.
KUBERAY_FILES = ("ray-operator", "crds/ray.io_rayclusters.yaml", "crds/ray.io_rayjobs.yaml")
MPIJOB_BUILD_SCRIPT = REPO_ROOT / "hack" / "mpijob" / "build.sh"
# What hack/mpijob/build.sh leaves in its directory (the operator serves no webhook).
MPIJOB_FILES = ("mpi-operator", "crds/kubeflow.org_mpijobs.yaml")


class BinariesError(RuntimeError):
    """The binaries are missing and cannot be built here."""


def _built(*, override_variable: str, script: Path, required: tuple[str, ...], what: str) -> Path:
    """The directory `script` prints (building on first use), or `$override_variable` when set;
    either must hold every path in `required`."""
    override = os.environ.get(override_variable)
    if override:
        directory = Path(override)
    else:
        if not script.exists():
            raise BinariesError(f"{script} not found: run from a kfed checkout or set {override_variable}")
        try:
            out = subprocess.run(["bash", str(script)], check=True, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
        except subprocess.CalledProcessError as err:
            raise BinariesError(f"building {what} failed (exit {err.returncode}); see the output above") from None
        directory = Path(out.stdout.strip().splitlines()[-1])
    missing = [name for name in required if not (directory / name).exists()]
    if missing:
        raise BinariesError(f"{directory} lacks {', '.join(missing)}")
    return directory


def binary_dir() -> Path:
    """The directory that holds every control-plane component, building it first if needed.

    `KFED_KUBE_BIN_DIR` points at a prepared directory instead (for packagers and CI caches).
    """
    return _built(override_variable="KFED_KUBE_BIN_DIR", script=BUILD_SCRIPT, required=COMPONENTS, what="the control plane")


def jobset_dir() -> Path:
    """The directory with the JobSet controller, its CRD and its webhook manifests, building it
    first if needed. `KFED_JOBSET_BIN_DIR` points at a prepared directory instead."""
    return _built(override_variable="KFED_JOBSET_BIN_DIR", script=JOBSET_BUILD_SCRIPT, required=JOBSET_FILES, what="the JobSet controller")


def lws_dir() -> Path:
    """The directory with the LeaderWorkerSet controller, its CRD and its webhook manifests,
    building it first if needed. `KFED_LWS_BIN_DIR` points at a prepared directory instead."""
    return _built(override_variable="KFED_LWS_BIN_DIR", script=LWS_BUILD_SCRIPT, required=LWS_FILES, what="the LeaderWorkerSet controller")


def kuberay_dir() -> Path:
    """The directory with the KubeRay operator and its RayCluster and RayJob CRDs, building it
    first if needed. `KFED_KUBERAY_BIN_DIR` points at a prepared directory instead."""
    return _built(
        override_variable="KFED_KUBERAY_BIN_DIR", script=KUBERAY_BUILD_SCRIPT, required=KUBERAY_FILES, what="the KubeRay operator"
    )


def mpijob_dir() -> Path:
    """The directory with the MPI Operator and the MPIJob CRD, building it first if needed.
    `KFED_MPIJOB_BIN_DIR` points at a prepared directory instead."""
    return _built(override_variable="KFED_MPIJOB_BIN_DIR", script=MPIJOB_BUILD_SCRIPT, required=MPIJOB_FILES, what="the MPI Operator")
