"""Slurm's hostlist syntax: ``gpu[001-004,010],cpu1`` <-> host names.

The forms are those of Slurm's ``scontrol show hostnames`` and ``scontrol show hostlist``: a prefix, a
bracket of comma-separated numbers and ranges (``lo-hi``; leading zeros set the width), an optional
suffix, and several brackets in one name (``rack[1-2]-gpu[1-4]``, expanded left to right). Commas outside
brackets separate names. Pure functions; tested against ``scontrol`` itself on a real Slurm.
"""

from __future__ import annotations

import re

from sb_fleet.errors import UsageError

MAX_HOSTS = 1_000_000  # a typo like gpu[1-999999999] is refused, not expanded
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_RANGES = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def split_top(text: str) -> list[str]:
    """``a[1-2,4],b`` -> ``['a[1-2,4]', 'b']``: commas inside brackets stay."""
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"hostlist {text!r}: ']' without '['")
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise UsageError(f"hostlist {text!r}: '[' without ']'")
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


def is_hostlist(part: str) -> bool:
    """Whether ``part`` has a Slurm bracket with a range or a list (``[1-4]``, ``[1,3]``). A bracket of
    one number or letters (``[12]``, ``[ab]``) is left to be a glob's character class."""
    return any(
        ("-" in m.group(1) or "," in m.group(1)) and _RANGES.match(m.group(1))
        for m in _BRACKET.finditer(part)
    )


def _numbers(body: str, where: str) -> list[str]:
    if not _RANGES.match(body):
        raise UsageError(f"hostlist {where!r}: [{body}] is not numbers and ranges like [001-004,010]")
    out: list[str] = []
    for item in body.split(","):
        lo, _, hi = item.partition("-")
        hi = hi or lo
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        a, b = int(lo), int(hi)
        if b < a:
            raise UsageError(f"hostlist {where!r}: range {item} runs backwards")
        if b - a + 1 + len(out) > MAX_HOSTS:
            raise UsageError(f"hostlist {where!r}: more than {MAX_HOSTS} names")
        out.extend(str(n).zfill(width) for n in range(a, b + 1))
    return out


def expand(text: str) -> list[str]:
    """Every name of a hostlist, in order, a repeated name repeated (as ``scontrol show hostnames``)."""
    names: list[str] = []
    for part in split_top(text):
        partial = [""]
        rest = part
        while True:
            m = _BRACKET.search(rest)
            if not m:
                if rest and rest != part:
                    # as Slurm 22.05: text after the last bracket makes the hostlist invalid
                    raise UsageError(f"hostlist {part!r}: nothing may follow the last ']' (Slurm rejects it)")
                partial = [p + rest for p in partial]
                break
            nums = _numbers(m.group(1), part)
            if len(partial) * len(nums) > MAX_HOSTS:
                raise UsageError(f"hostlist {part!r}: more than {MAX_HOSTS} names")
            partial = [p + rest[: m.start()] + n for p in partial for n in nums]
            rest = rest[m.end() :]
        names.extend(partial)
    return names


_TAIL_NUM = re.compile(r"^(.*?)(\d+)$")


def compress(names: list[str]) -> str:
    """A short hostlist for ``names`` (the inverse of :func:`expand` for names with a numeric tail):
    ``['gpu001', 'gpu002', 'gpu004']`` -> ``gpu[001-002,004]``."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for n in names:
        m = _TAIL_NUM.match(n)
        if not m:
            order.append(n)
            continue
        key = (m.group(1), len(m.group(2)) if m.group(2).startswith("0") else 0)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    parts: list[str] = []
    for item in order:
        if isinstance(item, str):
            parts.append(item)
            continue
        prefix, width = item
        nums = sorted(set(groups[item]))
        runs: list[str] = []
        start = prev = nums[0]
        for x in [*nums[1:], None]:
            if x is not None and x == prev + 1:
                prev = x
                continue
            a, b = str(start).zfill(width), str(prev).zfill(width)
            runs.append(a if start == prev else f"{a}-{b}")
            if x is not None:
                start = prev = x
        parts.append(
            f"{prefix}{runs[0]}" if len(runs) == 1 and "-" not in runs[0] else f"{prefix}[{','.join(runs)}]"
        )
    return ",".join(parts)
