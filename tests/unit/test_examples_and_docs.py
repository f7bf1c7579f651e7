"""A fresh clone stands alone: the files the docs name exist, and `kfed dev up`'s next steps run."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import stat
from pathlib import Path

import pytest

from manager.cli import dev
from manager.dev import federation
from tests.conftest import EXAMPLE_FILES, EXAMPLES, REPO_ROOT

DOCS = [REPO_ROOT / "README.md", EXAMPLES / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
# `-f PATH`, `--filename PATH`, `-k DIR` (kustomize), as written in a command.
FILE_FLAG = re.compile(r"(?:^|\s)(?:-f|--filename|-k)[ =]([^\s`|;)]+)")


def file_arguments(text: str) -> list[str]:
    """The paths a text passes to -f/-k, without stdin (`-`) and placeholders (`JOB.yaml`, `PATH...`)."""
    found = [match.group(1).rstrip(".,:") for match in FILE_FLAG.finditer(text)]
    return [arg for arg in found if arg != "-" and not Path(arg).stem.isupper() and not arg.startswith(("<", "$"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_path_a_doc_passes_to_a_command_exists(doc: Path) -> None:
    missing = [arg for arg in file_arguments(doc.read_text(encoding="utf-8")) if not (REPO_ROOT / arg).exists()]
    assert missing == [], f"{doc.relative_to(REPO_ROOT)} names files that a fresh clone lacks"


def test_the_file_arguments_are_found_where_they_are_written() -> None:
    text = "kubectl create -f examples/jobs/sample-job.yaml  # x\n`kubectl apply --server-side -k crds/`):\n"
    text += "kfed submit -f JOB.yaml\napply -f -"
    assert file_arguments(text) == ["examples/jobs/sample-job.yaml", "crds/"]


def test_nothing_refers_to_a_directory_beside_the_repository() -> None:
    beside, joined = "/".join(("..", "shared")), " / ".join(("parent", '"shared"'))
    roots = ["README.md", "docs", "examples", "hack", "manager", "worker_agent", "tests", "deploy", "benchmarks", "Dockerfile"]
    offenders = []
    for root in roots:
        base = REPO_ROOT / root
        for path in [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            if beside in text or joined in text:
                offenders.append(str(path.relative_to(REPO_ROOT)))
    assert offenders == []


def test_the_examples_readme_describes_every_example() -> None:
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    undescribed = [str(p.relative_to(EXAMPLES)) for p in EXAMPLE_FILES if f"`{p.relative_to(EXAMPLES)}`" not in readme]
    assert undescribed == []


def printed_commands(text: str) -> list[str]:
    """The command lines of `kfed dev up`'s next steps, without their comments."""
    lines = text.split("\nNext:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [line.split("  # ", 1)[0].strip() for line in lines if line.startswith("  ")]


def executable_stub(directory: Path, name: str) -> Path:
    """Stands for a built binary in a directory given to PATH; only found, never run."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.parametrize("kubectl_in_shell", [True, False], ids=["kubectl on PATH", "no kubectl"])
@pytest.mark.parametrize("cwd", ["repository root", "elsewhere"])
def test_dev_up_next_steps_name_files_and_programs_that_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kubectl_in_shell: bool, cwd: str
) -> None:
    bin_dir = tmp_path / "control-plane"
    executable_stub(bin_dir, "kubectl")
    shell_path = os.environ.get("PATH", "")
    if kubectl_in_shell:
        executable_stub(tmp_path / "usr-bin", "kubectl")
        shell_path = f"{tmp_path / 'usr-bin'}:{shell_path}"
    else:
        shell_path = ":".join(d for d in shell_path.split(":") if d and not (Path(d) / "kubectl").exists())
    monkeypatch.setenv("PATH", shell_path)
    state_dir = tmp_path / "dev"
    start = REPO_ROOT if cwd == "repository root" else tmp_path
    text = federation.next_steps(
        elapsed=8, directory=state_dir, workers=2, jobs=True, repo_root=REPO_ROOT, cwd=start, path_dirs=dev._path_dirs(bin_dir)
    )
    commands = printed_commands(text)
    assert commands[-2:] == [f"kfed dev status --dir {state_dir}", f"kfed dev down --dir {state_dir}"]
    here, path = start, shell_path
    for command in commands:
        words = shlex.split(command)
        if words[0] == "cd":
            here = Path(words[1])
            assert here.is_dir()
            continue
        if words[0] == "export":
            name, value = words[1].split("=", 1)
            if name == "PATH":
                assert value.endswith(":$PATH")
                path = value.removesuffix("$PATH") + path
            else:
                assert name == "KUBECONFIG" and value == str(state_dir / "manager.kubeconfig")
            continue
        assert shutil.which(words[0], path=path), f"{words[0]} (from `{command}`) is not on the PATH the steps set"
        for flag, arg in itertools.pairwise(words):
            if flag == "-f":
                assert (here / arg).is_file(), f"`{command}` run from {here}: {arg} does not exist"
    assert any(command.startswith("kubectl create -f examples/jobs/long-job.yaml") for command in commands)
    assert (commands[0] == f"cd {REPO_ROOT}") == (cwd == "elsewhere")


def test_next_steps_without_a_checkout_name_no_example_files(tmp_path: Path) -> None:
    text = federation.next_steps(elapsed=8, directory=tmp_path, workers=1, jobs=True, repo_root=None, cwd=tmp_path, path_dirs=[])
    assert not any("-f " in command or command.startswith("cd ") for command in printed_commands(text))


LINKED_DOCS = [*DOCS, REPO_ROOT / "benchmarks" / "README.md"]
# `[text](target)` and `![alt](target)`, the target without a title.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens."""
    anchors = set()
    for line in text.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


@pytest.mark.parametrize("doc", LINKED_DOCS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_in_a_doc_resolves(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        dangling = bool(anchor) and linked.suffix == ".md" and anchor not in heading_anchors(linked.read_text(encoding="utf-8"))
        if not linked.exists() or dangling:
            broken.append(target)
    assert broken == [], f"{doc.relative_to(REPO_ROOT)} links to what does not exist"


def test_links_and_anchors_are_read_as_github_reads_them() -> None:
    assert LINK.findall("see [a](docs/x.md#b-c) and ![img](i.png) and [w](https://x.y)") == ["docs/x.md#b-c", "i.png", "https://x.y"]
    assert heading_anchors("## MultiKueue: the federation\n### `kfed simulate`, offline") == {
        "multikueue-the-federation",
        "kfed-simulate-offline",
    }
