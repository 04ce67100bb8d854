"""Shared test configuration. Fleet fixtures live in tests/integration/conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The on-host suite is a separate distribution; make it importable without installing it.
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))
