"""Tiers are marked by folder: tests/unit, tests/integration, tests/e2e (`pytest -m unit`, ...)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_EXAMPLES = REPO_ROOT.parent / "shared" / "examples"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).relative_to(REPO_ROOT / "tests").parts[0]
        if tier in ("unit", "integration", "e2e"):
            item.add_marker(getattr(pytest.mark, tier))
