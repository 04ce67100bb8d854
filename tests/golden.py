"""Golden files that fail when missing: a golden is written only on purpose.

Use the ``golden`` fixture (from tests/conftest.py) in a test::

    def test_rendering(golden):
        golden(Path(__file__).parent / "golden" / "deploy.yml", rendered_text)

``golden(path, actual)`` compares ``actual`` (text) with the file at ``path``. When the file is
missing or differs the test FAILS, naming the file and the command that rewrites it. Run
``pytest --update-goldens <tests>`` after an intended change: the fixture then (re)writes each
golden it is handed and the test still passes, and ``git diff`` shows what changed. Nothing
writes a golden without that switch, so a golden deleted by mistake is a red test, not a new
file that agrees with whatever the code produces today.

``check_golden`` is the same check as a plain function, for helpers outside pytest's fixtures.
"""

from __future__ import annotations

import difflib
from pathlib import Path

UPDATE_OPTION = "--update-goldens"


class GoldenMismatch(AssertionError):
    """A golden file is missing or differs from what the code produces."""


def check_golden(path: Path, actual: str, *, update: bool = False) -> None:
    """Compare ``actual`` with the golden file ``path``; with ``update`` write it instead."""
    path = Path(path)
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != actual:
            path.write_text(actual)
        return
    if not path.exists():
        raise GoldenMismatch(
            f"golden file {path} is missing: write it on purpose with `pytest {UPDATE_OPTION}` and review it"
        )
    want = path.read_text()
    if actual != want:
        diff = "".join(
            difflib.unified_diff(
                want.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=f"{path} (golden)",
                tofile="actual",
                n=2,
            )
        )
        raise GoldenMismatch(
            f"{path} differs from what the code produces (`pytest {UPDATE_OPTION}` after an intended "
            f"change):\n{diff[:4000]}"
        )
