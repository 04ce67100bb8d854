"""A plain INI inventory read the way Ansible's ``ini`` plugin and its variable manager read it,
without importing Ansible (~0.2 s of CPU to import, ~0.5 ms a host to parse and resolve).

:func:`read_names_and_groups` gives which hosts exist and their groups (``sb-fleet report -i``);
:func:`read_inventory` adds each host's variables, resolved as Ansible resolves them for a host
outside a play: ``all``'s, then each of the host's groups' by depth and name, then the host's own
lines, each value read as the ini plugin reads it (a Python literal, else the text). It declines
(``None``) wherever anything else could add or change a variable: a ``host_vars`` or ``group_vars``
directory beside the file (Ansible's ``host_group_vars`` plugin), any
Ansible configuration (a config file, an ``ANSIBLE_*`` setting of the environment that sb-fleet did
not set itself), ``ansible_group_priority``, a variable name that is not an identifier, a value
that is a set or bytes.

The reader accepts a conservative subset of what Ansible accepts and returns ``None`` for anything
outside it, so the caller hands the file to Ansible, which then decides (and words any error):

* one file, named ``*.ini``, or with no extension and a ``[section]`` as its first entry (Ansible's
  YAML plugin tries extension-less files first; a document that starts with ``[`` is never a mapping);
* UTF-8, not vault-encrypted; Ansible's default inventory plugins (``ANSIBLE_INVENTORY_ENABLED``);
* group names that no ``TRANSFORM_INVALID_GROUP_CHARS`` setting would change;
* host patterns without a port, plain or with numeric ranges (``gpu[001:128]``, ``a[1:9:2]b[0:1]``);
* ``[g]``, ``[g:vars]`` and ``[g:children]`` sections, declared in any order, no dependency loops.

Host order is Ansible's for ``all`` (groups in declaration order, breadth first); where Ansible's own
order depends on set iteration (children of several groups at one depth), the set of hosts and
their groups is the same. tests/unit/test_inventory_ini.py checks the reader against Ansible.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import warnings
from collections.abc import Iterator
from pathlib import Path

# Ansible's ini plugin's section and group-name lines (plugins/inventory/ini.py).
_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:\#.*)?$")
_GROUPNAME = re.compile(r"^([^:\]\s]+)\s*(?:\#.*)?$")
# A group name no transform setting touches (Ansible's INVALID_VARIABLE_NAMES never matches it).
_SAFE_GROUP = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A host pattern with numeric ranges and no port.
_RANGED = re.compile(r"^(?:[^\[\]:|]*\[\d+:\d+(?::\d+)?\])+[^\[\]:|]*$")
_SHLEX_CHARS = frozenset("'\"\\#")
_WS = re.compile(r"[ \t\r\n]+")
DEFAULT_PLUGINS = "host_list,yaml,ini,auto,toml"
# Ansible's implicit groups: a host of that name is dropped or mis-filed (and clashes with --limit all).
RESERVED_NAMES = frozenset({"all", "ungrouped"})


# The settings sb-fleet gives Ansible in its own environment before it reads an inventory
# (inventory.py's load_inventory), none of which changes a variable: any other ANSIBLE_* setting may,
# so Ansible reads the file then.
QUIET_ANSIBLE_ENV = {
    # Unparseable inventories must be errors, not a warning and an empty fleet.
    "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
    "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
    "ANSIBLE_DEPRECATION_WARNINGS": "False",
    "ANSIBLE_LOCALHOST_WARNING": "False",
    "ANSIBLE_INVENTORY_ENABLED": DEFAULT_PLUGINS,
}
_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Unsupported(Exception):
    """Outside the subset: Ansible reads the file."""


class _Group:
    __slots__ = ("children", "hosts", "name", "parents", "vars")

    def __init__(self, name: str):
        self.name = name
        self.children: list[_Group] = []
        self.parents: list[_Group] = []
        self.hosts: list[str] = []
        self.vars: dict[str, object] = {}

    def ancestors(self) -> set[str]:
        out: set[str] = set()
        todo = list(self.parents)
        while todo:
            g = todo.pop()
            if g.name not in out:
                out.add(g.name)
                todo.extend(g.parents)
        return out


def expand_range(pattern: str) -> list[str]:
    """``gpu[01:03]`` -> gpu01, gpu02, gpu03 (Ansible's numeric host ranges; several ranges multiply)."""
    head, rest = pattern.split("[", 1)
    nrange, tail = rest.split("]", 1)
    bounds = nrange.split(":")
    beg, end = bounds[0], bounds[1]
    step = int(bounds[2]) if len(bounds) == 3 else 1
    if step == 0:
        raise _Unsupported("range step 0")
    width = len(beg) if beg[0] == "0" and len(beg) > 1 else 0
    if width and width != len(end):
        raise _Unsupported("unequal range formats")
    out: list[str] = []
    for i in range(int(beg), int(end) + 1, step):
        name = f"{head}{str(i).zfill(width) if width else i}{tail}"
        out.extend(expand_range(name) if "[" in name else [name])
    return out


def _host_names(token: str) -> list[str]:
    if "[" not in token:
        if token == "---" or ":" in token:
            raise _Unsupported("a port, an IPv6 address or a YAML marker")
        return [token]
    if not _RANGED.match(token):
        raise _Unsupported("host pattern")
    return expand_range(token)


def _group_ok(name: str, config_free: bool) -> bool:
    return bool(_SAFE_GROUP.match(name)) or config_free


def _config_free() -> bool:
    """No Ansible configuration that could rename groups (a config file or the environment)."""
    if os.environ.get("ANSIBLE_TRANSFORM_INVALID_GROUP_CHARS") or os.environ.get("ANSIBLE_CONFIG"):
        return False
    places = [Path("ansible.cfg"), Path("~/.ansible.cfg").expanduser(), Path("/etc/ansible/ansible.cfg")]
    return not any(p.exists() for p in places)


def _own_settings_only() -> bool:
    """No Ansible setting in the environment but those sb-fleet gives it."""
    return not any(k.startswith("ANSIBLE_") and k not in QUIET_ANSIBLE_ENV for k in os.environ)


def _no_vars_dirs(path: Path) -> bool:
    """No ``host_vars``/``group_vars`` beside the inventory file, where Ansible's host_group_vars plugin
    looks for a host outside a play (not in the working directory: tests/unit/test_inventory_ini.py)."""
    return not any((path.parent / sub).exists() for sub in ("host_vars", "group_vars"))


def read_names_and_groups(source: str | Path) -> list[tuple[str, tuple[str, ...]]] | None:
    """``[(host, sorted groups)]`` in Ansible's order for ``all``, or None to let Ansible read it."""
    got = _read(Path(source), with_vars=False)
    return None if got is None else [(h, g) for h, g, _ in got]


def read_inventory(source: str | Path) -> list[tuple[str, tuple[str, ...], dict[str, object]]] | None:
    """``[(host, sorted groups, variables)]`` in Ansible's order for ``all``, each host's variables as
    Ansible's variable manager resolves them outside a play (its magic variables left out), or None to
    let Ansible read the file."""
    path = Path(source)
    config_free = _config_free()
    if not config_free or not _own_settings_only() or not _no_vars_dirs(path):
        return None
    return _read(path, with_vars=True, config_free=config_free)


def _read(
    path: Path, with_vars: bool, config_free: bool | None = None
) -> list[tuple[str, tuple[str, ...], dict[str, object]]] | None:
    if os.environ.get("ANSIBLE_INVENTORY_ENABLED", DEFAULT_PLUGINS) != DEFAULT_PLUGINS:
        return None
    if path.suffix not in ("", ".ini") or not path.is_file():
        return None
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if text.startswith("$ANSIBLE_VAULT"):
        return None
    try:
        free = _config_free() if config_free is None else config_free
        return _parse(text.splitlines(), path.suffix == "", free, with_vars)
    except (_Unsupported, ValueError, KeyError, IndexError, RecursionError, MemoryError):
        return None


def _ini_value(text: str) -> object:
    """A value as the ini plugin reads it: a Python literal (``ast.literal_eval``), else the text;
    tuples as lists, ``...`` and complex numbers as their text; sets and bytes are declined."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value: object = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    return _coerced(value)


def _coerced(value: object) -> object:
    if isinstance(value, (list, tuple)):
        return [_coerced(v) for v in value]
    if isinstance(value, dict):
        return {k: _coerced(v) for k, v in value.items()}
    if value is ...:
        return "..."
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, (set, frozenset, bytes)):
        raise _Unsupported("a set or bytes value")  # Ansible's own conversion words or orders these
    return value


def _var(key: str, text: str) -> tuple[str, object]:
    if not _VAR_NAME.match(key) or key == "ansible_group_priority":
        raise _Unsupported("a variable Ansible treats apart")
    return key, _ini_value(text)


def _parse(
    lines: list[str], need_section_first: bool, config_free: bool, with_vars: bool = False
) -> list[tuple[str, tuple[str, ...], dict[str, object]]]:
    groups: dict[str, _Group] = {"all": _Group("all"), "ungrouped": _Group("ungrouped")}
    _add_child(groups["all"], groups["ungrouped"])
    host_groups: dict[str, list[str]] = {}  # host -> groups it was put in directly, in order
    host_vars: dict[str, dict[str, object]] = {}  # host -> its own lines' variables, later lines last
    pending: dict[str, dict] = {}
    group, state = "ungrouped", "hosts"
    first = True
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = _SECTION.match(line)
        if first and need_section_first and not m:
            raise _Unsupported("an extension-less file that does not start with a section")
        first = False
        if m:
            group, st = m.group(1), m.group(2) or "hosts"
            if st not in ("hosts", "children", "vars") or not _group_ok(group, config_free):
                raise _Unsupported("section")
            if group == "ungrouped" and st == "children":
                raise _Unsupported("children of ungrouped")
            if group not in groups:
                if st == "vars" and group not in pending:
                    pending[group] = {"state": st, "parents": []}
                groups[group] = _Group(group)
            if group in pending and st != "vars":
                if pending[group]["state"] == "children":
                    _add_pending_children(group, pending, groups)
                elif pending[group]["state"] == "vars":
                    del pending[group]
            state = st
            continue
        if line.startswith("[") and line.endswith("]"):
            raise _Unsupported("invalid section")
        if state == "hosts":
            tokens = shlex.split(line, comments=True) if _SHLEX_CHARS.intersection(line) else _WS.split(line)
            if not tokens or not tokens[0] or any("=" not in t for t in tokens[1:]):
                raise _Unsupported("host line")
            line_vars = dict(_var(*t.split("=", 1)) for t in tokens[1:]) if with_vars else {}
            for name in _host_names(tokens[0]):
                g = groups[group]
                if name not in host_groups:
                    host_groups[name] = []
                    host_vars[name] = {}
                if group not in host_groups[name]:
                    host_groups[name].append(group)
                    g.hosts.append(name)
                host_vars[name].update(line_vars)
        elif state == "vars":
            if "=" not in line:
                raise _Unsupported("vars line")
            if with_vars:
                k, v = _var(*(e.strip() for e in line.split("=", 1)))
                groups[group].vars[k] = v
        else:
            gm = _GROUPNAME.match(line)
            if not gm:
                raise _Unsupported("children line")
            child = gm.group(1)
            if child not in groups:
                if child not in pending:
                    pending[child] = {"state": "children", "parents": [group]}
                else:
                    pending[child]["parents"].append(group)
            else:
                _add_child(groups[group], groups[child])
    if pending:
        raise _Unsupported("undeclared group")  # Ansible words the error
    # Reconcile as Ansible does: every group without a parent is a child of all; hosts in no group
    # but all are ungrouped, and ungrouped hosts that are in another group are not.
    for g in list(groups.values()):
        if g.name != "all" and not g.parents:
            _add_child(groups["all"], g)
    full: dict[str, set[str]] = {}
    for name, direct in host_groups.items():
        s = set(direct)
        for d in direct:
            s |= groups[d].ancestors()
        full[name] = s | {"all"}
        if "ungrouped" in s and s - {"all", "ungrouped"}:
            groups["ungrouped"].hosts.remove(name)
            full[name].discard("ungrouped")
        elif "ungrouped" not in s and s <= {"all"}:
            groups["ungrouped"].hosts.append(name)
            full[name].add("ungrouped")
    order: list[str] = []
    seen_hosts: set[str] = set()
    for g in _descendants(groups["all"]):
        for h in g.hosts:
            if h not in seen_hosts:
                seen_hosts.add(h)
                order.append(h)
    named = [(h, tuple(sorted(full[h] - {"all", "ungrouped"}))) for h in order]
    if not with_vars:
        return [(h, g, {}) for h, g in named]
    depth = _depths(groups)
    return [(h, g, _host_vars(full[h], depth, groups, host_vars[h])) for h, g in named]


def _depths(groups: dict[str, _Group]) -> dict[str, int]:
    """Each group's depth as Ansible keeps it: the longest path down from ``all``."""
    depth: dict[str, int] = {}

    def of(g: _Group) -> int:
        if g.name not in depth:
            depth[g.name] = max((of(p) + 1 for p in g.parents), default=0)
        return depth[g.name]

    for g in groups.values():
        of(g)
    return depth


def _host_vars(
    member_of: set[str], depth: dict[str, int], groups: dict[str, _Group], own: dict[str, object]
) -> dict[str, object]:
    """The variable manager's order: ``all``'s variables, then the host's other groups' by (depth, name),
    deeper and later ones winning, then the host's own."""
    out: dict[str, object] = {}
    for name in sorted(member_of, key=lambda n: (depth[n], n)):
        out.update(groups[name].vars)
    out.update(own)
    return out


def _add_child(parent: _Group, child: _Group) -> None:
    if parent is child or child.name in parent.ancestors():
        raise _Unsupported("dependency loop")  # Ansible words the error
    if child not in parent.children:
        parent.children.append(child)
        if parent.name not in (p.name for p in child.parents):
            child.parents.append(parent)


def _add_pending_children(group: str, pending: dict[str, dict], groups: dict[str, _Group]) -> None:
    for parent in pending[group]["parents"]:
        _add_child(groups[parent], groups[group])
        if parent in pending and pending[parent]["state"] == "children":
            _add_pending_children(parent, pending, groups)
    del pending[group]


def _descendants(root: _Group) -> list[_Group]:
    """``root``, its children, then each further generation (Ansible's ``get_descendants`` order)."""
    ordered = [root, *root.children]
    seen = {id(root), *(id(c) for c in root.children)}
    level = list(root.children)
    while level:
        nxt: list[_Group] = []
        for g in level:
            for c in g.children:
                if id(c) not in seen:
                    seen.add(id(c))
                    ordered.append(c)
                    nxt.append(c)
        level = nxt
    return ordered


def _host_lines(text: str) -> Iterator[tuple[str, int, list[str], bool]]:
    """Each host line of an INI inventory's host sections as (group, line number, host names, has
    variables). Lines this reader cannot follow are skipped (Ansible reads them)."""
    group, state = "ungrouped", "hosts"
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = _SECTION.match(line)
        if m:
            group, state = m.group(1), m.group(2) or "hosts"
            continue
        if state != "hosts":
            continue
        try:
            tokens = shlex.split(line, comments=True) if _SHLEX_CHARS.intersection(line) else _WS.split(line)
            if not tokens or not tokens[0]:
                continue
            names = _host_names(tokens[0])
        except (_Unsupported, ValueError, IndexError):
            continue
        yield group, no, names, any("=" in t for t in tokens[1:])


def duplicate_hosts(text: str) -> tuple[str, int, int] | None:
    """The first host an INI inventory declares twice, as (name, first line, second line), or None.

    Twice means: on two host lines of one group (``[gpu]`` listing ``gpu[01:04]`` and ``gpu03``), or on
    host lines of two groups that both give it variables (``ansible_host=`` twice: Ansible keeps one
    and drops the other without a word). Listing a host in several groups without variables is how
    Ansible puts it in them, and is fine. Lines this reader cannot follow are skipped (Ansible reads them)."""
    return host_line_problems(text)[1]


def host_line_problems(text: str) -> tuple[tuple[str, int] | None, tuple[str, int, int] | None]:
    """The first host an INI inventory names after one of Ansible's implicit groups (``all``,
    ``ungrouped``: Ansible drops or mis-files it) as (name, line), and :func:`duplicate_hosts`'s
    finding, in one pass over the host lines (a 10,000-host inventory's lines are split once)."""
    seen: dict[tuple[str, str], int] = {}  # (group, host) -> line
    with_vars: dict[str, int] = {}  # host -> line that gave it variables
    reserved: tuple[str, int] | None = None
    dup: tuple[str, int, int] | None = None
    for group, no, names, has_vars in _host_lines(text):
        for name in names:
            if reserved is None and name in RESERVED_NAMES:
                reserved = name, no
            if dup is not None:
                continue
            first = seen.get((group, name))
            if first is not None:
                dup = name, first, no
                continue
            seen[(group, name)] = no
            if has_vars:
                if name in with_vars:
                    dup = name, with_vars[name], no
                else:
                    with_vars[name] = no
        if reserved is not None and dup is not None:
            break
    return reserved, dup
