"""Find or build the binaries of local clusters: the control plane (hack/kube/build.sh) and the
job controllers of `manager.dev.catalog` (hack/jobset/build.sh, ...), each cached by version by
its build script."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


class BinariesError(RuntimeError):
    """The binaries are missing and cannot be built here."""


@dataclass(frozen=True)
class BuildScript:
    """A script under hack/ that builds a directory of binaries once per version (later runs
    find it in the cache) and prints the directory's path as its last line."""

    path: Path  # relative to the repository's root
    directory_variable: str  # names a prepared directory instead (for packagers and CI caches)
    files: tuple[str, ...]  # what the directory holds once built
    what: str  # what it builds, as progress lines and errors name it ("the JobSet controller")


CONTROL_PLANE = BuildScript(
    path=Path("hack/kube/build.sh"),
    directory_variable="KFED_KUBE_BIN_DIR",
    files=("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"),
    what="the control plane",
)


def built_dir(build: BuildScript) -> Path:
    """The directory `build` prints (building on first use), or `$build.directory_variable` when
    set; either must hold every one of its files."""
    override = os.environ.get(build.directory_variable)
    if override:
        directory = Path(override)
    else:
        script = REPO_ROOT / build.path
        if not script.exists():
            raise BinariesError(f"{script} not found: run from a kfed checkout or set {build.directory_variable}")
        try:
            out = subprocess.run(["bash", str(script)], check=True, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
        except subprocess.CalledProcessError as err:
            raise BinariesError(f"building {build.what} failed (exit {err.returncode}); see the output above") from None
        directory = Path(out.stdout.strip().splitlines()[-1])
    missing = [name for name in build.files if not (directory / name).exists()]
    if missing:
        raise BinariesError(f"{directory} lacks {', '.join(missing)}")
    return directory


def binary_dir() -> Path:
    """The directory that holds every control-plane component, building it first if needed.

    `KFED_KUBE_BIN_DIR` points at a prepared directory instead (for packagers and CI caches).
    """
    return built_dir(CONTROL_PLANE)
