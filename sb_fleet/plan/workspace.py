"""A host's workspace path: ``sb_workspace`` or ``fleet.workspace``, with ``{host}`` the inventory name.

The playbooks substitute ``{host}`` on every host, and ``cleanup --workspaces`` deletes the result, so an
inventory name that is not one plain path component (``a/b``, ``..``, a space, a Jinja marker) would
put a host's workspace somewhere else, or delete it there. Such a name is refused when the run is planned.
"""

from __future__ import annotations

import re

from sb_fleet.config.fleet_config import Config
from sb_fleet.config.inventory import Host, Inventory
from sb_fleet.errors import InventoryError

HOST_PLACEHOLDER = "{host}"
# Letters, digits and . _ - : @ + (DNS names, IPv4/IPv6 addresses, user@host); not . or - first, no "..".
_SAFE_CHAR = re.compile(r"[A-Za-z0-9_.:@+-]")


def workspace_template(host: Host, config: Config) -> str:
    """The host's workspace as configured, before ``{host}`` is substituted."""
    return str(host.vars.get("sb_workspace") or config.fleet.workspace)


def unsafe_reason(name: str) -> str | None:
    """Why ``name`` cannot stand for ``{host}`` in a path, or None when it can."""
    if not name:
        return "it is empty"
    if len(name.encode()) > 255:
        return "it is longer than a file name may be (255 bytes)"
    if "/" in name:
        return "it contains '/'"
    if ".." in name:
        return "it contains '..'"
    if name[0] in ".-":
        return f"it starts with {name[0]!r}"
    bad = [c for c in name if not _SAFE_CHAR.fullmatch(c)]
    if bad:
        return f"it contains {bad[0]!r}"
    return None


def check_workspace_names(config: Config, inventory: Inventory) -> None:
    """Refuse the first host whose name is unsafe in the path its workspace template puts it in."""
    for host in inventory.hosts:
        template = workspace_template(host, config)
        if HOST_PLACEHOLDER not in template:
            continue
        why = unsafe_reason(host.name)
        if why:
            source = ", ".join(inventory.sources)
            via = "its sb_workspace" if host.vars.get("sb_workspace") else "fleet.workspace"
            raise InventoryError(
                source,
                f"host {host.name!r}",
                f"the name cannot stand for {{host}} in the workspace {template} ({via}): {why}",
                "set sb_workspace for this host to a path without {host}, or rename the host "
                "to letters, digits and . _ - : @ + only",
            )
