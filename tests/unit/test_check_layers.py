"""scripts/check_layers.py: the control node's layers import downward only, file names do not repeat, the
top level stays small, and the on-host suite never imports the control node."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_layers.py"


def _tree(root: Path, files: dict[str, str]) -> Path:
    base = {
        "sb_fleet/__init__.py": "",
        "sb_fleet/errors.py": "",
        "sb_fleet/config/__init__.py": "",
        "sb_fleet/config/fleet_config.py": "from sb_fleet.errors import x\n",
        "sb_fleet/fleet/__init__.py": "",
        "sb_fleet/fleet/workflow.py": "from sb_fleet.config.fleet_config import load\n",
        "sb_fleet/report/__init__.py": "",
        "sb_fleet/report/analyse.py": "",
        "sb_fleet/compare/__init__.py": "",
        "sb_fleet/compare/comparison.py": "",
        "benchmarks/sb_bench/__init__.py": "",
        "benchmarks/sb_bench/core/__init__.py": "",
        "benchmarks/sb_bench/core/registry.py": "import json\n",
    }
    for rel, text in {**base, **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _check(root: Path) -> tuple[int, str]:
    r = subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)
    return r.returncode, r.stdout


def test_this_repository_keeps_its_layers():
    assert _check(ROOT) == (0, "")


def test_a_clean_tree_passes(tmp_path):
    assert _check(_tree(tmp_path, {})) == (0, "")


def test_an_upward_import_is_named_with_its_file_line_and_the_order(tmp_path):
    rc, out = _check(
        _tree(
            tmp_path,
            {
                "sb_fleet/config/gatespec.py": "import os\n\ndef f():\n    from sb_fleet.fleet import workflow\n"
            },
        )
    )
    assert rc == 1
    assert (
        "sb_fleet/config/gatespec.py:4: layer 'config' imports sb_fleet.fleet.workflow of layer 'fleet'"
        in out
    )
    assert "core <- config <- plan" in out


def test_two_packages_of_one_layer_do_not_import_each_other(tmp_path):
    rc, out = _check(
        _tree(tmp_path, {"sb_fleet/report/writer.py": "from sb_fleet.compare import comparison\n"})
    )
    assert rc == 1 and "layer 'report' imports sb_fleet.compare.comparison of layer 'compare'" in out


def test_the_suite_never_imports_the_control_node(tmp_path):
    rc, out = _check(
        _tree(tmp_path, {"benchmarks/sb_bench/core/harness.py": "from sb_fleet.errors import E\n"})
    )
    assert rc == 1 and "harness.py:1: the on-host suite imports the control node (sb_fleet.errors.E)" in out


def test_a_repeated_file_name_and_a_crowded_top_level_are_refused(tmp_path):
    extra = {f"sb_fleet/m{i}.py": "" for i in range(8)}
    extra["sb_fleet/fleet/collect.py"] = ""
    extra["sb_fleet/report/collect.py"] = ""
    rc, out = _check(_tree(tmp_path, extra))
    assert rc == 1
    assert "9 modules at the top level (at most 8)" in out
    assert "file name collect.py is used 2 times" in out


def test_a_folder_outside_the_layers_is_refused(tmp_path):
    rc, out = _check(_tree(tmp_path, {"sb_fleet/misc/__init__.py": "", "sb_fleet/misc/thing.py": ""}))
    assert rc == 1 and "folder 'misc' is no layer" in out
