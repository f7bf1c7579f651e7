"""Find or build the control-plane binaries (hack/kube/build.sh caches them by version)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "kube" / "build.sh"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")


class BinariesError(RuntimeError):
    """The binaries are missing and cannot be built here."""


def binary_dir() -> Path:
    """The directory that holds every component, building it first if needed.

    `KFED_KUBE_BIN_DIR` points at a prepared directory instead (for packagers and CI caches).
    """
    override = os.environ.get("KFED_KUBE_BIN_DIR")
    if override:
        directory = Path(override)
    else:
        if not BUILD_SCRIPT.exists():
            raise BinariesError(f"{BUILD_SCRIPT} not found: run from a kfed checkout or set KFED_KUBE_BIN_DIR")
        try:
            out = subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
        except subprocess.CalledProcessError as err:
            raise BinariesError(f"building the control plane failed (exit {err.returncode}); see the output above") from None
        directory = Path(out.stdout.strip().splitlines()[-1])
    missing = [name for name in COMPONENTS if not (directory / name).exists()]
    if missing:
        raise BinariesError(f"{directory} lacks {', '.join(missing)}")
    return directory
