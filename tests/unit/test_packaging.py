"""What `pip install .` (the image's install, Dockerfile) ships: every file the code reads at run
time. A template left out of the package data makes the in-cluster dashboard fail on its first
page, while every test that runs from the source tree passes."""

from __future__ import annotations

import fnmatch
import tomllib

from tests.conftest import REPO_ROOT


def test_every_file_besides_python_under_a_package_is_in_its_package_data() -> None:
    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_data: dict[str, list[str]] = setuptools.get("package-data", {})
    missing = []
    for package in ("manager", "worker_agent"):
        root = REPO_ROOT / package
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.suffix in {".py", ".pyc"} or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(root).as_posix()
            if not any(fnmatch.fnmatch(relative, pattern) for pattern in package_data.get(package, [])):
                missing.append(f"{package}/{relative}")
    assert not missing, f"not in [tool.setuptools.package-data], so not in the image: {missing}"
