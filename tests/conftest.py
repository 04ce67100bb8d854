"""Shared test configuration. Fleet fixtures live in tests/integration/conftest.py.

``--update-goldens`` lets the ``golden`` fixture (tests/golden.py) write golden files; without it a
missing or different golden fails its test.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The on-host suite is a separate distribution; make it importable without installing it.
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

from tests.golden import UPDATE_OPTION, check_golden  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        UPDATE_OPTION,
        action="store_true",
        default=False,
        help="write the golden files the tests compare against (review them with git diff)",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[Path, str], None]:
    """``golden(path, actual)``: fail unless ``actual`` equals the golden file at ``path``
    (written only under ``pytest --update-goldens``). See tests/golden.py."""
    update = bool(request.config.getoption(UPDATE_OPTION))

    def check(path: Path, actual: str) -> None:
        check_golden(path, actual, update=update)

    return check
