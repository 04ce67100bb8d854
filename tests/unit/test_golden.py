"""The golden helper itself: a missing or different golden fails; only the switch writes one."""

from __future__ import annotations

import pytest

from tests.golden import GoldenMismatch, check_golden


def test_missing_golden_fails_and_is_not_written(tmp_path):
    path = tmp_path / "g" / "x.txt"
    with pytest.raises(GoldenMismatch, match="missing.*--update-goldens"):
        check_golden(path, "a\n")
    assert not path.exists()


def test_different_golden_fails_with_a_diff(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("a\nb\n")
    with pytest.raises(GoldenMismatch, match=r"(?s)-b\n\+c"):
        check_golden(path, "a\nc\n")
    assert path.read_text() == "a\nb\n"
    check_golden(path, "a\nb\n")


def test_update_writes_on_purpose(tmp_path):
    path = tmp_path / "g" / "x.txt"
    check_golden(path, "new\n", update=True)
    assert path.read_text() == "new\n"
    check_golden(path, "new\n")


def test_the_fixture_honours_the_command_line_switch(golden, request, tmp_path):
    path = tmp_path / "absent.txt"
    if request.config.getoption("--update-goldens"):
        golden(path, "x")
        assert path.read_text() == "x"
    else:
        with pytest.raises(GoldenMismatch):
            golden(path, "x")
