"""Ansible inventories, read by Ansible's own inventory code.

INI or YAML, groups, ranges such as ``gpu[001:128]``, group and host vars:
whatever ``ansible-inventory`` accepts. The result is a list of frozen
:class:`Host` values in inventory order. Variables whose names look secret
(passwords, tokens, keys' passphrases) are kept out of everything written to
the run directory (:meth:`Host.public_vars`).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sb_fleet.config.hostlist import expand, is_hostlist, split_top
from sb_fleet.config.inventory_ini import (
    QUIET_ANSIBLE_ENV,
    RESERVED_NAMES,
    host_line_problems,
    read_inventory,
    read_names_and_groups,
)
from sb_fleet.config.yamlsrc import parse_yaml, read_capped
from sb_fleet.errors import InventoryError

SECRET_VAR = re.compile(
    r"(pass(word)?|passphrase|token|secret|credential|api_?key)$|^ansible_become_pass", re.I
)

# Variables sb-fleet reads from an inventory (documented in the README).
SB_VARS = ("sb_workspace", "sb_python", "sb_path_sysfs")


@dataclass(frozen=True)
class Host:
    name: str
    groups: tuple[str, ...]
    vars: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def address(self) -> str:
        return str(self.vars.get("ansible_host") or self.name)

    @property
    def port(self) -> int:
        return int(self.vars.get("ansible_port") or self.vars.get("ansible_ssh_port") or 22)

    @property
    def user(self) -> str | None:
        u = self.vars.get("ansible_user") or self.vars.get("ansible_ssh_user")
        return str(u) if u else None

    @property
    def connection(self) -> str:
        return str(self.vars.get("ansible_connection") or "ssh")

    @property
    def is_local(self) -> bool:
        return self.connection == "local"

    def public_vars(self) -> dict[str, Any]:
        """The host's variables with secret ones masked, for files and logs."""
        return {k: ("***" if SECRET_VAR.search(k) else v) for k, v in sorted(self.vars.items())}

    def has_secrets(self) -> bool:
        return any(SECRET_VAR.search(k) for k in self.vars)


@dataclass(frozen=True)
class Inventory:
    sources: tuple[str, ...]
    hosts: tuple[Host, ...]

    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def get(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def limit(self, pattern: str | None) -> Inventory:
        if not pattern:
            return self
        wanted = _limit_names(self, pattern)
        return Inventory(self.sources, tuple(h for h in self.hosts if h.name in wanted))

    def to_json(self) -> dict:
        return {
            "schema_version": 1,
            "sources": list(self.sources),
            "hosts": [
                {"name": h.name, "groups": list(h.groups), "vars": h.public_vars()} for h in self.hosts
            ],
        }


def _quiet_ansible_env() -> None:
    for k, v in QUIET_ANSIBLE_ENV.items():  # a user's own setting of any of them stands
        os.environ.setdefault(k, v)


def load_inventory(path: str | Path | list[str | Path], with_vars: bool = True) -> Inventory:
    """Read one or more inventory sources; any problem is an :class:`InventoryError`.

    ``with_vars=False`` reads only names and groups, skipping Ansible's per-host variable
    resolution (host_vars/group_vars, vars plugins), which dominates on 10,000-host inventories:
    for a report, which needs to know which hosts exist, not how to reach them. A plain INI file
    is then read without Ansible (:mod:`sb_fleet.config.inventory_ini`; anything else still goes to Ansible).
    With variables, so is a plain INI file that no ``host_vars``/``group_vars`` directory or Ansible
    setting could add to (read_inventory), as the nightly run's start would otherwise import Ansible
    (~0.2 s of CPU) for it.
    """
    sources = [str(p) for p in (path if isinstance(path, list) else [path])]
    for s in sources:
        if not Path(s).exists():
            raise InventoryError(s, None, "inventory not found", "check the path given to -i/--inventory")
        check_source(Path(s))
    _quiet_ansible_env()
    if not with_vars and len(sources) == 1:
        # Names and groups only: a plain INI file is read without Ansible (see inventory_ini).
        fast = read_names_and_groups(sources[0])
        if fast:
            return Inventory(tuple(sources), tuple(Host(n, g, {}) for n, g in fast))
    if with_vars and len(sources) == 1:
        # A plain INI file that nothing else adds variables to: read as Ansible would (see inventory_ini).
        full = read_inventory(sources[0])
        if full:
            read = tuple(Host(n, g, {k: _plain(v) for k, v in hv.items()}) for n, g, hv in full)
            for h in read:
                _check_host(sources[0], h)
            return Inventory(tuple(sources), read)
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            inv = InventoryManager(loader=loader, sources=sources)
        varman = VariableManager(loader=loader, inventory=inv)
        hosts = []
        for h in inv.get_hosts("all"):
            hv = varman.get_vars(host=h, include_hostvars=False) if with_vars else {}
            keep = {
                k: v
                for k, v in hv.items()
                if not k.startswith(
                    ("ansible_play", "group_names", "groups", "inventory_", "omit", "playbook_dir")
                )
            }
            keep = {
                k: _plain(v)
                for k, v in keep.items()
                if k
                not in (
                    "ansible_version",
                    "ansible_check_mode",
                    "ansible_diff_mode",
                    "ansible_forks",
                    "ansible_config_file",
                    "ansible_verbosity",
                    "ansible_run_tags",
                    "ansible_skip_tags",
                    "ansible_inventory_sources",
                    "ansible_facts",
                )
            }
            groups = tuple(sorted(g.name for g in h.get_groups() if g.name not in ("all", "ungrouped")))
            hosts.append(Host(h.name, groups, keep))
    except Exception as exc:  # Ansible raises bare Exceptions on some inventories too
        if isinstance(exc, MemoryError):
            raise
        msg = " ".join(str(exc.message if hasattr(exc, "message") else exc).split())
        detail = _parse_detail(captured.getvalue())
        if detail:
            msg = f"{detail} ({msg})"
        raise InventoryError(
            ",".join(sources),
            None,
            f"Ansible cannot read the inventory: {msg[:400]}",
            "fix the inventory (try: ansible-inventory -i FILE --list)",
        ) from None
    if not hosts:
        raise InventoryError(
            ",".join(sources), None, "the inventory has no hosts", "add hosts or fix the file"
        )
    for h in hosts:
        _check_host(sources[0], h)
    return Inventory(tuple(sources), tuple(hosts))


def check_source(path: Path) -> None:
    """What sb-fleet refuses in an inventory file before Ansible reads it (a directory's files are
    Ansible's to read): more than :data:`MAX_FILE_BYTES`, YAML aliases that expand past the bound, a key
    given twice in a YAML mapping, and a host declared twice in an INI file, each naming the line(s)."""
    if not path.is_file():
        return
    text = read_capped(path, "inventory", InventoryError)
    stripped = text.lstrip()
    if path.suffix in (".yml", ".yaml", ".json") or (path.suffix != ".ini" and not stripped.startswith("[")):
        try:
            doc, _node = parse_yaml(text, path, "inventory", InventoryError)
        except InventoryError as exc:
            if path.suffix in (".yml", ".yaml", ".json"):
                raise
            if "not valid YAML" not in exc.message:  # an INI file without a section: Ansible decides
                raise
        else:
            name = _reserved_in_yaml(doc)
            if name is not None:
                raise _reserved_error(path, None, name)
    if path.suffix not in (".yml", ".yaml", ".json"):
        reserved, dup = host_line_problems(text)
        if reserved is not None:
            raise _reserved_error(path, f"line {reserved[1]}", reserved[0])
        if dup is not None:
            name, first, second = dup
            raise InventoryError(
                path,
                f"line {second}",
                f"host {name} is declared again (first on line {first}: {path}:{first})",
                "declare each host once: Ansible would silently keep only one of its definitions",
            )


def _reserved_error(path: Path, where: str | None, name: str) -> InventoryError:
    return InventoryError(
        path,
        where,
        f"a host is named {name!r}, the name of one of Ansible's implicit groups ({', '.join(sorted(RESERVED_NAMES))})",
        "rename the host and reach it with ansible_host: Ansible would drop it or take it for the group",
    )


def _reserved_in_yaml(doc: Any, depth: int = 0) -> str | None:
    """The first host a YAML inventory (groups of ``hosts`` and ``children``) names after an implicit group."""
    if not isinstance(doc, dict) or depth > 64:
        return None
    for group in doc.values():
        if not isinstance(group, dict):
            continue
        hosts = group.get("hosts")
        if isinstance(hosts, dict):
            for name in hosts:
                if isinstance(name, str) and name in RESERVED_NAMES:
                    return name
        found = _reserved_in_yaml(group.get("children"), depth + 1)
        if found is not None:
            return found
    return None


def _parse_detail(text: str) -> str:
    """The most specific line of Ansible's parse warnings (the plugin's own reason)."""
    lines = [" ".join(ln.split()) for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("Failed to parse inventory:") or "Invalid" in ln or "line" in ln.lower():
            return ln.replace("[WARNING]: ", "")
    return ""


def _plain(v: Any) -> Any:
    """Ansible's tagged/unsafe strings and templates as plain Python values."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (bool, int, float)) or v is None:
        return v
    return str(v)


def _check_host(source: str, h: Host) -> None:
    port = h.vars.get("ansible_port")
    if port is not None:
        try:
            ok = 0 < int(port) < 65536
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise InventoryError(
                source,
                f"host {h.name}",
                f"ansible_port {port!r} is not a TCP port",
                "set a number from 1 to 65535",
            )
    for var in SB_VARS:
        val = h.vars.get(var)
        if val is not None and (not isinstance(val, str) or "\n" in val or "\0" in val or not val.strip()):
            raise InventoryError(
                source, f"host {h.name}", f"{var} must be a one-line path", "fix the variable"
            )
    sysfs = h.vars.get("sb_path_sysfs")
    # Reaches the benchmark's environment through Ansible, which would expand template syntax in it.
    if sysfs is not None and (not str(sysfs).startswith("/") or re.search(r"[{}%#]", str(sysfs))):
        raise InventoryError(
            source,
            f"host {h.name}",
            f"sb_path_sysfs {str(sysfs)[:80]!r} is not a plain absolute path",
            "give the directory where the host's sysfs is mounted, e.g. /sys or /host/sys",
        )
    for var, val in h.vars.items():  # every sb-fleet variable (sb_*) is data, never a template
        if not var.startswith("sb_"):
            continue
        items = val if isinstance(val, list) else [val]
        bad = [v for v in items if isinstance(v, str) and any(m in v for m in ("{{", "{%", "{#"))]
        if bad and not (isinstance(val, str) and is_playbook_python(val)):
            raise InventoryError(
                source,
                f"host {h.name}",
                f"{var} holds a Jinja template ({str(bad[0])[:80]!r}): sb-fleet takes its variables as data and "
                "never templates them",
                "write the path itself (sb_python may be {{ ansible_playbook_python }}: sb-fleet's own Python)",
            )


_PLAYBOOK_PYTHON = re.compile(r"^\{\{\s*ansible_playbook_python\s*\}\}$")


def is_playbook_python(value: str) -> bool:
    """``{{ ansible_playbook_python }}``: the one template sb_python may be (the default inventory's),
    which sb-fleet resolves itself to the Python it runs on, as Ansible would on a local host."""
    return bool(_PLAYBOOK_PYTHON.match(value.strip()))


def _limit_names(inv: Inventory, pattern: str) -> set[str]:
    """Host names, group names and globs separated by ``,`` or ``:`` (Ansible's way), and Slurm hostlists
    (``gpu[001-004,010]``: a bracket with a range or a list; :mod:`sb_fleet.config.hostlist`)."""
    import fnmatch

    out: set[str] = set()
    for top in split_top(pattern):
        parts = expand(top) if is_hostlist(top) else re.split(r"[,:]", top)
        for part in parts:
            part = part.strip()
            if not part:
                continue
            for h in inv.hosts:
                if fnmatch.fnmatchcase(h.name, part) or part in h.groups:
                    out.add(h.name)
    return out
