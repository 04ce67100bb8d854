"""Reading user YAML with line numbers, so errors can point at the line.

``load_yaml`` returns the data and a :class:`LineMap` that answers "which
line holds the value at this path" for pydantic's error locations, including
values that came in through anchors and merge keys (``<<: *default``).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from sb_fleet.errors import InputError


class LineMap:
    def __init__(self, root: yaml.Node | None):
        self.root = root

    def line(self, loc: Sequence[Any]) -> int | None:
        """1-based line of the deepest node along ``loc`` that exists."""
        pos = self.position(loc)
        return pos[0] if pos is not None else None

    def position(self, loc: Sequence[Any]) -> tuple[int, int] | None:
        """(line, column), 1-based, of the deepest node along ``loc`` that exists."""
        node = self.root
        if node is None:
            return None
        best = (node.start_mark.line + 1, node.start_mark.column + 1)
        for part in loc:
            node = child_node(node, part)
            if node is None:
                break
            best = (node.start_mark.line + 1, node.start_mark.column + 1)
        return best


def child_node(node: yaml.Node | None, part: Any) -> yaml.Node | None:
    """The value at key or index ``part`` of ``node``, through merge keys (``<<: *x``); None if absent."""
    if isinstance(node, yaml.MappingNode):
        merges = []
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                if k.value == str(part):
                    return v
                if k.tag == "tag:yaml.org,2002:merge":
                    merges.append(v)
        for m in merges:
            for sub in m.value if isinstance(m, yaml.SequenceNode) else [m]:
                found = child_node(sub, part)
                if found is not None:
                    return found
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return node.value[part]
    return None


# Bounds on what a user's file may make sb-fleet read (docs/security.md). A config, rules file or inventory
# of a real fleet is far below both; a file past them is refused at load, before any host is touched.
MAX_FILE_BYTES = 16 << 20
# Nodes of the document with every alias expanded: an alias bomb (nine aliases of nine aliases ...) is a
# few hundred bytes that expand to billions of values, in memory and in every copy written. Refused past
# this many values when the aliases multiply the nodes written by more than ALIAS_GROWTH.
MAX_EXPANDED_NODES = 200_000
ALIAS_GROWTH = 4  # ...and more than this many times the nodes written: refused
# An integer past 64 bits is no setting's value (and past 4300 digits Python refuses to convert it).
MAX_INT_DIGITS = 19


def read_capped(path: Path, what: str, cls: type[InputError] = InputError) -> str:
    """The text of a user's file, refused past :data:`MAX_FILE_BYTES` (before it is read)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_FILE_BYTES:
                raise cls(
                    path,
                    None,
                    f"the {what} is {size} bytes, more than sb-fleet reads ({MAX_FILE_BYTES} bytes)",
                    "is this the right file?",
                )
            data = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise cls(path, None, f"{what} file not found", "check the path") from None
    except IsADirectoryError:
        raise cls(path, None, f"the {what} path is a directory", "give a file") from None
    except OSError as exc:
        raise cls(path, None, f"cannot read the {what} file ({exc.strerror})") from None
    if len(data) > MAX_FILE_BYTES:  # a file that grew, or a device
        raise cls(path, None, f"the {what} is more than {MAX_FILE_BYTES} bytes", "is this the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise cls(path, None, f"the {what} is not UTF-8 text ({exc.reason})") from None


def check_bounds(node: yaml.Node | None, path: Path, what: str, cls: type[InputError] = InputError) -> None:
    """Refuse a document whose aliases expand past :data:`MAX_EXPANDED_NODES`, or refer to themselves,
    and any number that is not finite (``1.0e+400`` is infinity to YAML): one line naming the line."""
    if node is None:
        return
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def line(n: yaml.Node) -> str:
        return f"line {n.start_mark.line + 1}"

    def size(n: yaml.Node) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise cls(path, line(n), "a YAML alias refers to the value that holds it", "remove the loop")
        total = 1
        if isinstance(n, yaml.ScalarNode):
            digits = n.value.replace("_", "").lstrip("+-")
            if n.tag == "tag:yaml.org,2002:int" and len(digits) > MAX_INT_DIGITS:
                raise cls(
                    path,
                    line(n),
                    f"the integer {n.value[:24]}... ({len(digits)} digits) is too large for any setting",
                    f"write at most {MAX_INT_DIGITS} digits (or quote it if it is text)",
                )
            if n.tag == "tag:yaml.org,2002:float" and not math.isfinite(_float(n.value)):
                raise cls(
                    path,
                    line(n),
                    f"{n.value} is not a finite number",
                    "write a number within ±1.7e308 (or quote it if it is text)",
                )
        else:
            active.add(key)
            if isinstance(n, yaml.MappingNode):
                _no_duplicate_keys(n, path, cls)
            children = n.value if isinstance(n, yaml.SequenceNode) else [c for kv in n.value for c in kv]
            for c in children:
                total += size(c)
            active.discard(key)
        sizes[key] = total
        return total

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20_000))
    try:
        total = size(node)  # memoised: costs the nodes written, whatever they expand to
    except RecursionError:
        raise cls(path, None, f"the {what} is nested too deeply", "flatten it") from None
    finally:
        sys.setrecursionlimit(old)
    # A big file written out (a 10,000-host inventory) is bounded by its size; what aliases multiply is not.
    if total > MAX_EXPANDED_NODES and total > ALIAS_GROWTH * len(sizes):
        raise cls(
            path,
            line(node),
            f"the {what} expands to {_count(total)} values through its YAML aliases, from {len(sizes)} "
            f"written (an alias bomb?)",
            "write the values out, or use fewer nested aliases",
        )


def _count(n: int) -> str:
    return str(n) if n < 10**12 else f"about 10^{len(str(n)) - 1}"


def _no_duplicate_keys(n: yaml.MappingNode, path: Path, cls: type[InputError]) -> None:
    """YAML takes the last of two equal keys and drops the first without a word: refused, both named."""
    seen: dict[str, yaml.Node] = {}
    for k, _v in n.value:
        if not isinstance(k, yaml.ScalarNode) or k.tag == "tag:yaml.org,2002:merge":
            continue
        first = seen.get(k.value)
        if first is not None:
            raise cls(
                path,
                f"line {k.start_mark.line + 1}",
                f"{k.value!r} is given twice in one mapping (first on line {first.start_mark.line + 1})",
                "keep one of them",
            )
        seen[k.value] = k


def _float(text: str) -> float:
    """A YAML 1.1 float scalar's value (PyYAML's rules: underscores, ``.inf``, ``.nan``, sexagesimal)."""
    t = text.replace("_", "").lower()
    if t in (".inf", "+.inf", "-.inf"):
        return math.inf
    if t == ".nan":
        return math.nan
    try:
        return float(t)
    except ValueError:
        return 0.0  # base 60 (``1:30.5``): finite


def parse_yaml(
    text: str, path: Path, what: str, cls: type[InputError] = InputError
) -> tuple[Any, yaml.Node | None]:
    """Parse YAML text safely and within bounds (:func:`check_bounds`): (data, its node tree)."""
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            check_bounds(node, path, what, cls)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        raise cls(
            path, where, f"not valid YAML: {exc.problem or exc.context}", "fix the syntax at that place"
        ) from None
    except yaml.YAMLError as exc:
        raise cls(path, None, f"not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise cls(path, None, f"the {what} is nested too deeply", "flatten it") from None
    return data, node


def load_yaml(path: Path, what: str, cls: type[InputError] = InputError) -> tuple[Any, LineMap]:
    """Parse a YAML file safely and within bounds; any problem is a ``cls`` error with its line."""
    path = Path(path)
    data, node = parse_yaml(read_capped(path, what, cls), path, what, cls)
    return data, LineMap(node)


def pydantic_error(path: Path, lines: LineMap, exc: Any, cls: type[InputError] = InputError) -> InputError:
    """The first error of a pydantic ValidationError as one actionable line."""
    err = exc.errors()[0]
    loc = tuple(err.get("loc", ()))
    field = ".".join(str(p) for p in loc) or "(top level)"
    line = lines.line(loc)
    where = f"line {line}, field {field}" if line else f"field {field}"
    typ = err.get("type", "")
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    hint: str | None
    if typ == "extra_forbidden":
        msg, hint = f"unknown key {loc[-1]!r}", "remove it or fix its spelling"
    elif typ == "missing":
        msg, hint = "required key is missing", "add it"
    else:
        inp = err.get("input")
        hint = f"got {inp!r}" if inp is not None and not isinstance(inp, (dict, list)) else None
    more = len(exc.errors()) - 1
    if more:
        msg += f" (and {more} more error{'s' if more > 1 else ''})"
    return cls(path, where, msg, hint)
