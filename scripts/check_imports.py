#!/usr/bin/env python3
"""Static import checks for a package: no import cycles, and no private name (``_x``) imported from
another module. Usage: check_imports.py PACKAGE_DIR [PACKAGE_DIR ...]; exit 1 when anything is found.

Every ``import``/``from … import`` anywhere in a module counts (also inside functions and
``TYPE_CHECKING`` blocks): a late import hides a cycle, it does not remove it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def modules(pkg_dir: Path) -> dict[str, Path]:
    out = {}
    for f in sorted(pkg_dir.rglob("*.py")):
        parts = f.relative_to(pkg_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> tuple[set[str], list[str]]:
    """(modules of the package that ``name`` imports, private names it imports from them)."""
    deps: set[str] = set()
    private: list[str] = []
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            deps.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_pkg else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in known:
                    deps.add(full)
                elif base in known:
                    deps.add(base)
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.append(f"{name} imports {a.name} from {base}")
    deps.discard(name)
    return deps, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def main(argv: list[str]) -> int:
    bad = 0
    for arg in argv:
        known = modules(Path(arg))
        graph: dict[str, set[str]] = {}
        for name, path in known.items():
            graph[name], private = imports(name, path, known)
            for p in private:
                print(f"private import: {p}")
                bad += 1
        for comp in cycles(graph):
            print("import cycle: " + " <-> ".join(comp))
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
