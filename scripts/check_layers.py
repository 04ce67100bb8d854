#!/usr/bin/env python3
"""The layer rule of sb-fleet's control node, and the suite's isolation from it.

Usage: check_layers.py [REPO_ROOT]; exit 1 with one line per offence.

- ``sb_fleet/``: every module belongs to a layer (its first folder; top-level modules are the shared
  core) and imports only from its own layer or the layers below it (``LAYERS``, bottom first). Two
  packages of one layer (``report`` and ``compare``) do not import each other.
- ``sb_fleet/`` has at most ``MAX_TOP_LEVEL`` modules at its top level, and no two modules of the
  package share a file name (``__init__.py`` aside).
- ``benchmarks/sb_bench/`` (the suite that runs on every GPU host) never imports the control node.

Every ``import`` counts, also inside functions and ``TYPE_CHECKING`` blocks: a late import hides a
dependency, it does not remove it.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

# Bottom first. A layer imports only from itself and the layers before it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),  # sb_fleet/*.py: errors, exit codes, host outcomes, safe file writes
    ("config",),  # what the user writes: config, inventory, gates, rules, patterns, container settings
    ("plan",),  # what runs where, and the playbooks rendered from it (pure)
    ("rundir",),  # the run directory: the contract between commands, the normaliser
    ("analysis",),  # the pure judgement: SuperBench rules, fleet statistics, cross-node localisation
    ("history",),  # the store of past runs and regressions against them
    ("campaign",),  # acceptance campaigns: gating between stages, the campaign's state, per-node records
    ("report", "compare"),  # the report files; two fleets side by side
    ("fleet",),  # the I/O edge: executor, SSH, stages, validate's workflow
    ("cli",),  # argument parsing, one function per command
)
MAX_TOP_LEVEL = 8


def layer_of(module: str) -> str:
    """``sb_fleet.plan.render`` -> ``plan``; ``sb_fleet.errors`` and ``sb_fleet`` -> ``core``."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in RANK:
        return parts[1]
    return "core"


RANK = {name: i for i, level in enumerate(LAYERS) for name in level}


def package_modules(pkg_dir: Path) -> dict[str, Path]:
    out = {}
    for f in sorted(pkg_dir.rglob("*.py")):
        parts = f.relative_to(pkg_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def imported(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path`` (``from a import b`` gives ``a.b``)."""
    is_pkg = path.name == "__init__.py"
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_pkg else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            found.extend((node.lineno, f"{base}.{a.name}") for a in node.names)
    return found


def resolve(target: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``target`` names (``a.b.func`` -> ``a.b``)."""
    parts = target.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in known:
            return cand
        parts.pop()
    return None


def check_control_node(root: Path) -> list[str]:
    pkg = root / "sb_fleet"
    known = package_modules(pkg)
    bad: list[str] = []
    for name, path in known.items():
        src = layer_of(name)
        if src == "core" and name != "sb_fleet" and name.count(".") > 1:
            bad.append(f"{path}: folder {name.split('.')[1]!r} is no layer; add it to LAYERS in {__file__}")
            continue
        for line, target in imported(name, path):
            mod = resolve(target, known)
            if mod is None or mod == name:
                continue
            dst = layer_of(mod)
            if RANK[dst] > RANK[src] or (RANK[dst] == RANK[src] and dst != src):
                bad.append(
                    f"{path}:{line}: layer {src!r} imports {mod} of layer {dst!r}; "
                    f"a layer imports only from itself and the layers below it "
                    f"({' <- '.join('/'.join(level) for level in LAYERS)})"
                )
    top = sorted(p.name for p in pkg.glob("*.py") if p.name != "__init__.py")
    if len(top) > MAX_TOP_LEVEL:
        bad.append(f"{pkg}: {len(top)} modules at the top level (at most {MAX_TOP_LEVEL}): {', '.join(top)}")
    by_file: dict[str, list[str]] = defaultdict(list)
    for path in known.values():
        if path.name != "__init__.py":
            by_file[path.name].append(str(path.relative_to(root)))
    for fname, paths in sorted(by_file.items()):
        if len(paths) > 1:
            bad.append(
                f"file name {fname} is used {len(paths)} times: {', '.join(paths)}; name each by what it holds"
            )
    return bad


def check_suite(root: Path) -> list[str]:
    suite = root / "benchmarks" / "sb_bench"
    known = package_modules(suite)
    bad = []
    for name, path in known.items():
        for line, target in imported(name, path):
            if target == "sb_fleet" or target.startswith("sb_fleet."):
                bad.append(
                    f"{path}:{line}: the on-host suite imports the control node ({target}); the suite runs on "
                    f"GPU hosts without sb_fleet: move what it needs into benchmarks/sb_bench"
                )
    return bad


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    bad = check_control_node(root) + check_suite(root)
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
