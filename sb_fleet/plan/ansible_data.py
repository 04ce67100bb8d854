"""Values as Ansible *data*: YAML in which every string is tagged ``!unsafe``, so Ansible never templates it.

Ansible evaluates ``{{ }}`` and ``{% %}`` in every trusted string it reads from a playbook, a vars file or
``-e @file`` (extra vars), and a lookup there runs on the control node. A value that came from a config,
an inventory, a rules file or a host must never get that chance: sb-fleet writes each one as
``!unsafe "..."`` (Ansible's own marking; it survives being passed through variables and filters), and a
shell then gets it through Ansible's ``quote`` filter. See docs/security.md.

:func:`literal` writes one value as a flow-style YAML node, for the playbook templates (the ``data``
filter); :func:`dump` writes a whole vars file; :func:`load` reads either back (tests, checks), the
tag dropped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sb_fleet.plan.run_plan import HostSetup
from sb_fleet.safe_files import atomic_write_text

UNSAFE = "!unsafe"
_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
# Beside the playbooks: each host's workspace and Python as data (``sb_hosts``), read by every playbook.
HOSTS_FILE = "hosts-vars.yml"


def quote(s: str) -> str:
    """``s`` as a YAML double-quoted scalar: printable ASCII as it is, everything else escaped, so no
    character (a line break, a control or non-printable code point) can end or bend the document."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return f'"{s}"'  # nothing to escape (most values): the loop below would copy it as it is
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch in _SHORT:
            out.append(_SHORT[ch])
        elif 0x20 <= o < 0x7F:
            out.append(ch)
        elif o <= 0xFF:
            out.append(f"\\x{o:02x}")
        elif o <= 0xFFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    out.append('"')
    return "".join(out)


def literal(value: Any) -> str:
    """``value`` as one flow-style YAML node with every string (never a key) tagged ``!unsafe``."""
    if isinstance(value, str):
        return f"{UNSAFE} {quote(value)}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{quote(str(k))}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    raise TypeError(f"no Ansible data form for {type(value).__name__}")


def dump(doc: Mapping[str, Any], comment: str = "") -> str:
    """A vars file (one top-level mapping, one variable a line) of ``!unsafe`` data."""
    lines = [f"# {line}" for line in comment.splitlines()]
    for k, v in doc.items():
        if isinstance(v, Mapping) and v:  # one entry a line (a host a line in hosts-vars.yml)
            lines.append(f"{quote(str(k))}:")
            lines += [f"  {quote(str(k2))}: {literal(v2)}" for k2, v2 in v.items()]
        else:
            lines.append(f"{quote(str(k))}: {literal(v)}")
    return "".join(f"{line}\n" for line in lines)


# libyaml's parser where PyYAML was built with it (its wheels are): the same safe constructors, ~10x
# faster than the pure-Python one at reading back a run's playbooks.
_SafeBase: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeBase):
    """SafeLoader that reads ``!unsafe`` as the plain value beneath it."""


def _unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]


_Loader.add_constructor(UNSAFE, _unsafe)


def load(text: str) -> Any:
    """A rendered playbook or vars file read back, ``!unsafe`` values as plain values."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def unsafe_strings(text: str) -> list[str]:
    """Every string in ``text`` tagged ``!unsafe`` (tests: what Ansible will take as data)."""
    found: list[str] = []

    class _Collect(_Loader):
        pass

    def grab(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
        v = _unsafe(loader, node)
        if isinstance(v, str):
            found.append(v)
        return v

    _Collect.add_constructor(UNSAFE, grab)
    yaml.load(text, Loader=_Collect)  # noqa: S506 - a SafeLoader subclass
    return found


def write_hosts_file(setups: Mapping[str, HostSetup], out: Path) -> Path:
    """``out/hosts-vars.yml``: ``sb_hosts``, each host's workspace (``{host}`` substituted) and base Python
    as the plan has them (inventory ``sb_workspace``/``sb_python``, else ``fleet.*``). The playbooks read
    these, never the inventory variables, which Ansible would template: here they are data."""
    doc = {"sb_hosts": {h: {"workspace": s.workspace, "python": s.base_python} for h, s in setups.items()}}
    path = Path(out) / HOSTS_FILE
    atomic_write_text(
        path, dump(doc, "Rendered by sb-fleet: each host's workspace and Python, as data (!unsafe).")
    )
    return path
