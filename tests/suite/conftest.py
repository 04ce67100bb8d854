"""The on-host suite's tests (benchmarks/sb_bench): shared helpers live in suite_helpers.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture
def golden_dir() -> Path:
    return HERE / "micro" / "golden"
