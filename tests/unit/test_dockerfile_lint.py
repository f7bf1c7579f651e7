"""The documented Dockerfile check (hack/lint_dockerfile.py) catches what #8 forbids."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT


def checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lint_dockerfile", REPO_ROOT / "hack" / "lint_dockerfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GOOD = "FROM python:3.11-slim AS build\nRUN pip install .\nFROM python:3.11-slim\nCOPY --from=build /a /a\nUSER 65532:65532\n"


def test_the_projects_dockerfile_passes() -> None:
    assert checker().lint((REPO_ROOT / "Dockerfile").read_text()) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("FROM python:3.11-slim\nUSER 65532\n", "1: use a multi-stage build"),
        (GOOD.replace("USER 65532:65532\n", ""), "the final stage must set a non-root USER"),
        (GOOD.replace("USER 65532:65532", "USER root"), "the final stage must set a non-root USER"),
        (GOOD.replace("FROM python:3.11-slim\n", "FROM python\n"), "FROM python: pin a tag (not latest)"),
        (GOOD + "ADD x /x\n", "use COPY, not ADD"),
        (GOOD + "RUN apt-get install -y gcc\n", "no build tools or package installs in the final stage"),
        (GOOD + "ENV API_TOKEN=abc\n", "no secrets in ENV"),
        (GOOD + "RUNN echo\n", "unknown instruction 'RUNN'"),
    ],
)
def test_forbidden_things_are_named_with_their_line(text: str, problem: str) -> None:
    assert any(problem in found for found in checker().lint(text)), checker().lint(text)
