"""scripts/check_imports.py finds cycles (also through late imports) and private names across modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_imports.py"


def _pkg(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def _check(pkg: Path) -> tuple[int, str]:
    r = subprocess.run([sys.executable, str(SCRIPT), str(pkg)], capture_output=True, text=True)
    return r.returncode, r.stdout


def test_a_clean_package_passes(tmp_path):
    pkg = _pkg(tmp_path, {"a.py": "from pkg.b import f\n", "b.py": "def f(): pass\n"})
    assert _check(pkg) == (0, "")


def test_a_cycle_through_a_late_import_and_a_private_name_are_found(tmp_path):
    pkg = _pkg(
        tmp_path,
        {
            "a.py": "from pkg.b import g\n",
            "b.py": "def g():\n    from pkg.sub.c import _h\n",
            "sub/__init__.py": "",
            "sub/c.py": "from ..a import g\ndef _h(): pass\n",
        },
    )
    rc, out = _check(pkg)
    assert rc == 1
    assert "import cycle: pkg.a <-> pkg.b <-> pkg.sub.c" in out
    assert "private import: pkg.b imports _h from pkg.sub.c" in out


def test_the_project_itself_is_checked_by_make_lint():
    assert (
        "scripts/check_imports.py sb_fleet benchmarks/sb_bench"
        in (SCRIPT.parents[1] / "Makefile").read_text()
    )
