"""Host names and groups of a plain INI inventory, read the way Ansible's ``ini`` plugin reads them,
without importing Ansible (which costs ~0.5 s to import and ~0.3 ms a host to parse).

Only for readers that need which hosts exist and their groups, never a host variable (``sb-fleet
report -i``). Everything else reads inventories with Ansible's own code (:mod:`sb_fleet.config.inventory`).

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

import os
import re
import shlex
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


class _Unsupported(Exception):
    """Outside the subset: Ansible reads the file."""


class _Group:
    __slots__ = ("children", "hosts", "name", "parents")

    def __init__(self, name: str):
        self.name = name
        self.children: list[_Group] = []
        self.parents: list[_Group] = []
        self.hosts: list[str] = []

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


def read_names_and_groups(source: str | Path) -> list[tuple[str, tuple[str, ...]]] | None:
    """``[(host, sorted groups)]`` in Ansible's order for ``all``, or None to let Ansible read it."""
    path = Path(source)
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
        return _parse(text.splitlines(), path.suffix == "", _config_free())
    except (_Unsupported, ValueError, KeyError, IndexError, RecursionError):
        return None


def _parse(
    lines: list[str], need_section_first: bool, config_free: bool
) -> list[tuple[str, tuple[str, ...]]]:
    groups: dict[str, _Group] = {"all": _Group("all"), "ungrouped": _Group("ungrouped")}
    _add_child(groups["all"], groups["ungrouped"])
    host_groups: dict[str, list[str]] = {}  # host -> groups it was put in directly, in order
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
            for name in _host_names(tokens[0]):
                g = groups[group]
                if name not in host_groups:
                    host_groups[name] = []
                if group not in host_groups[name]:
                    host_groups[name].append(group)
                    g.hosts.append(name)
        elif state == "vars":
            if "=" not in line:
                raise _Unsupported("vars line")
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
        full[name] = s
        if "ungrouped" in s and s - {"all", "ungrouped"}:
            groups["ungrouped"].hosts.remove(name)
        elif "ungrouped" not in s and s <= {"all"}:
            groups["ungrouped"].hosts.append(name)
    order: list[str] = []
    seen_hosts: set[str] = set()
    for g in _descendants(groups["all"]):
        for h in g.hosts:
            if h not in seen_hosts:
                seen_hosts.add(h)
                order.append(h)
    return [(h, tuple(sorted(full[h] - {"all", "ungrouped"}))) for h in order]


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
