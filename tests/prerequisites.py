"""The one rule for a test that cannot run here, and the CI check that no test was skipped unlisted.

Under CI (`CI=true`, which `.ci/run` sets), a missing prerequisite fails the test: a skip would
hide that it never ran. Elsewhere it skips with the one line that says what to build. At the end
of a CI run, a skipped test that `tests/allowed_skips.txt` does not list, with its reason, fails
the whole run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

ALLOWED_SKIPS = Path(__file__).with_name("allowed_skips.txt")


def in_ci() -> bool:
    """True in a CI run: `CI=true`, as CI systems and `.ci/run` set it (not merely non-empty)."""
    return os.environ.get("CI") == "true"


def missing_prerequisite(reason: str) -> NoReturn:
    """A test that needs something hack/test.sh builds or installs (upstream Kueue, JobSet, Go,
    ...) and lacks it: a failure under CI, a skip elsewhere."""
    if in_ci():
        pytest.fail(reason)
    pytest.skip(reason)


def allowed_skips(text: str) -> dict[str, str]:
    """`tests/allowed_skips.txt`: one `node id prefix | reason` a line; `#` starts a comment.
    A line without a reason is refused: every allowed skip says why it is allowed."""
    allowed: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        prefix, _, reason = (part.strip() for part in line.partition("|"))
        if not prefix or not reason:
            raise ValueError(f"{ALLOWED_SKIPS.name}:{number}: expected 'node id prefix | reason', got {raw!r}")
        allowed[prefix] = reason
    return allowed


def unlisted(skipped: list[str], allowed: dict[str, str]) -> list[str]:
    """The skipped node ids that no allowed prefix covers."""
    return [nodeid for nodeid in skipped if not any(nodeid.startswith(prefix) for prefix in allowed)]
