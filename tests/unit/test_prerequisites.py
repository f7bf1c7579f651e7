"""The CI rules for tests that cannot run: a missing prerequisite fails, and an unlisted skip fails the run."""

from __future__ import annotations

import pytest

from tests.prerequisites import ALLOWED_SKIPS, allowed_skips, missing_prerequisite, unlisted


def test_a_missing_prerequisite_fails_the_test_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="JobSet not built"):
        missing_prerequisite("JobSet not built")


@pytest.mark.parametrize("value", ["", "1", "yes", "True"])
def test_a_missing_prerequisite_skips_outside_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="Go is not installed"):
        missing_prerequisite("Go is not installed")


def test_a_skip_is_allowed_only_by_a_listed_prefix() -> None:
    allowed = allowed_skips("# comment\ntests/a.py::test_x | why it may skip\n\ntests/b.py | the whole file, and why  # trailing\n")
    assert allowed == {"tests/a.py::test_x": "why it may skip", "tests/b.py": "the whole file, and why"}
    skipped = ["tests/a.py::test_x", "tests/a.py::test_y", "tests/b.py::test_z[1]"]
    assert unlisted(skipped, allowed) == ["tests/a.py::test_y"]


@pytest.mark.parametrize("line", ["tests/a.py::test_x", "tests/a.py::test_x |", "| a reason alone"])
def test_an_allowed_skip_without_its_reason_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match=r"allowed_skips.txt:1: expected 'node id prefix \| reason'"):
        allowed_skips(line)


def test_the_committed_list_is_short_and_every_entry_names_a_test_file() -> None:
    allowed = allowed_skips(ALLOWED_SKIPS.read_text())
    assert len(allowed) <= 5
    for prefix in allowed:
        assert (ALLOWED_SKIPS.parent.parent / prefix.split("::")[0]).is_file(), prefix
