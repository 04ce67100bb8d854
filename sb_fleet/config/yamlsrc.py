"""Reading user YAML with line numbers, so errors can point at the line.

``load_yaml`` returns the data and a :class:`LineMap` that answers "which
line holds the value at this path" for pydantic's error locations, including
values that came in through anchors and merge keys (``<<: *default``).
"""

from __future__ import annotations

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
        node = self.root
        best = node.start_mark.line + 1 if node is not None else None
        for part in loc:
            node = _child(node, part)
            if node is None:
                break
            best = node.start_mark.line + 1
        return best


def _child(node: yaml.Node | None, part: Any) -> yaml.Node | None:
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
                found = _child(sub, part)
                if found is not None:
                    return found
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return node.value[part]
    return None


def load_yaml(path: Path, what: str) -> tuple[Any, LineMap]:
    """Parse a YAML file safely; a syntax error becomes an :class:`InputError` with its line."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(path, None, f"{what} file not found", "check the path") from None
    except OSError as exc:
        raise InputError(path, None, f"cannot read the {what} file ({exc.strerror})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        raise InputError(
            path, where, f"not valid YAML: {exc.problem or exc.context}", "fix the syntax at that place"
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(path, None, f"not valid YAML: {' '.join(str(exc).split())}") from None
    return data, LineMap(node)


def pydantic_error(path: Path, lines: LineMap, exc: Any, cls: type[InputError] = InputError) -> InputError:
    """The first error of a pydantic ValidationError as one actionable line."""
    err = exc.errors()[0]
    loc = tuple(err.get("loc", ()))
    field = ".".join(str(p) for p in loc) or "(top level)"
    line = lines.line(loc)
    where = f"line {line}, field {field}" if line else f"field {field}"
    typ = err.get("type", "")
    msg = err.get("msg", "invalid")
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
