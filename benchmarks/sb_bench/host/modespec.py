"""The values of a SuperBench mode (``proc_num``, ``node_num``, ``parallel``), as SuperBench's config schema
allows them, parsed for the runner and the mpi launcher. Pure, stdlib only."""

from __future__ import annotations

from typing import Any


class SpecError(Exception):
    """A step spec or mode value the runner cannot run."""


def count(value: Any, what: str, default: int = 1) -> int:
    """A positive count from a mode (``proc_num``, a numeric ``node_num``), as SuperBench's schema allows:
    an int, or a string of digits (a hand-written spec); absent means ``default``."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise SpecError(f"{what} must be a positive integer, not {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and value.strip().isdigit():
        n = int(value.strip())
    else:
        raise SpecError(f"{what} must be a positive integer, not {value!r}")
    if n < 1:
        raise SpecError(f"{what} must be at least 1, not {n}")
    return n


def node_count(value: Any, group_nodes: int | None) -> int:
    """How many nodes a torch.distributed mode spans. SuperBench: ``node_num: 1`` is this node alone,
    anything else (``all`` or a number) runs across nodes; sb-fleet's plan hands each node its group's
    size (``--nnodes``), which is what ``all`` means, and which a number must match."""
    if isinstance(value, str) and value.strip().lower() == "all":
        if group_nodes is None:
            raise SpecError("node_num 'all' needs --nnodes (the node group's size, from sb-fleet's plan)")
        return group_nodes
    n = count(value, "node_num")
    if n > 1 and group_nodes is not None and group_nodes != n:
        raise SpecError(f"node_num {n} but this node's group has {group_nodes} nodes (--nnodes)")
    return n


def flag(value: Any, what: str, default: bool = True) -> bool:
    """A yes/no mode key (``parallel``): a bool, or yes/no/true/false/1/0 as a string."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in ("yes", "true", "on", "1"):
        return True
    if text in ("no", "false", "off", "0"):
        return False
    raise SpecError(f"{what} must be yes or no, not {value!r}")
