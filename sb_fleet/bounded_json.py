"""JSON from untrusted sources (a host's result files, a results summary), parsed within bounds.

Hosts are suspect: a file they send may be nested a million levels deep, hold a number with ten
thousand digits, or be a gigabyte long. Every such input gives a :class:`ValueError` naming the
problem, never a ``RecursionError``, ``MemoryError`` or ``OverflowError``, so that one bad file costs
only itself, and costs it again (the same way) each time a run is read.

Bounds (constants: a result file that passes them is far past any real one):

* :data:`MAX_JSON_BYTES` bytes per document (64 MiB);
* :data:`MAX_JSON_DEPTH` levels of nesting (64; SuperBench's result files have 4);
* integers of more than :data:`MAX_INT_DIGITS` digits parse as ``±inf`` (past the double range, which
  readers report as an invalid value), as floats past that range (``1e400``) already do.

NaN and ±Infinity are accepted by the parser; whoever reads numbers decides (the normaliser makes
them invalid values of their metric).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

MAX_JSON_BYTES = 64 << 20
MAX_JSON_DEPTH = 64
MAX_INT_DIGITS = 300


def _int(text: str) -> int | float:
    digits = len(text) - (text[0] in "+-")
    if digits > MAX_INT_DIGITS:
        return -math.inf if text.startswith("-") else math.inf
    return int(text)


def nesting_depth(obj: Any) -> int:
    """How deeply lists and objects nest in a parsed document (iterative: any depth is safe)."""
    deepest = 0
    todo: list[tuple[Any, int]] = [(obj, 1)]
    while todo:
        o, d = todo.pop()
        if isinstance(o, dict):
            items: Any = o.values()
        elif isinstance(o, list):
            items = o
        else:
            continue
        deepest = max(deepest, d)
        if deepest > MAX_JSON_DEPTH:
            break
        todo.extend((x, d + 1) for x in items)
    return deepest


def loads(data: bytes | str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parse one JSON document within the bounds; :class:`ValueError` (one line) when outside them."""
    raw = data.encode(errors="surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise ValueError(f"{len(raw)} bytes: larger than the {max_bytes}-byte limit for a JSON document")
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        doc = json.loads(text, parse_int=_int)
    except RecursionError:  # the C parser stops cleanly at the interpreter's recursion limit
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    if nesting_depth(doc) > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return doc


def read(path: Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Read and parse one JSON file within the bounds (never more than ``max_bytes`` + 1 read);
    :class:`OSError` when unreadable, :class:`ValueError` when outside the bounds or not JSON."""
    with open(path, "rb") as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise ValueError(f"larger than the {max_bytes}-byte limit for a JSON document")
    return loads(raw, max_bytes)


def read_or_none(path: Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """:func:`read`, or None where the file is missing, unreadable, outside the bounds or not JSON: for
    documents a caller may lack (a run cut off, a host that sent nothing) and treats as absent."""
    try:
        return read(path, max_bytes)
    except (OSError, ValueError):
        return None
