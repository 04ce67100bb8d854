"""Rendering of ``check.yml``: the health checks of every host in one SSH exec (``raw``), self-contained.

The host needs only a Python 3 interpreter: the checks (``sb_bench.health``, standard library) travel
inline as a base64 zip in the command's argv, are imported from a private temp file that is removed once
imported, and print one JSON document. Each host's rules are its profile's (``sb_health_profile``, else
``health.profile``), rendered here as base64 JSON; its roots and tool directory come from the inventory
(``sb_path_sysfs``, ``sb_path_procfs``, ``sb_tool_dir``, data), its Python from the plan's hosts file
(``hosts-vars.yml``, data); the arguments are built per host in Python (sb_fleet.plan.host_exec) and handed
to the play as data. Every value reaches the shell through Ansible's ``quote`` filter.
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from pathlib import Path
from typing import Any

from sb_fleet.config.fleet_config import Config
from sb_fleet.config.health_profiles import HealthProfile, resolve_profiles
from sb_fleet.plan.ansible_data import HOSTS_FILE
from sb_fleet.plan.resources import suite_dir
from sb_fleet.plan.templates import template_env
from sb_fleet.safe_files import atomic_write_json, atomic_write_text

CHECK_PLAYBOOK = "check.yml"
PROFILES_FILE = "health-profiles.json"
NO_PROFILE = "-"  # the key of the empty expectations (no profile)

# ``python3 -c BOOT PAYLOAD ARGS...``: the zip to a private temp file, every module of the checks
# imported from it, the file removed, then the checks run (the runner ends the process itself).
BOOT = (
    "import base64,os,sys,tempfile\n"
    "fd,p=tempfile.mkstemp(suffix='.zip')\n"
    "with os.fdopen(fd,'wb') as f: f.write(base64.b64decode(sys.argv[1]))\n"
    "sys.path.insert(0,p)\n"
    "try:\n"
    " from sb_bench.health import record,pci_bus,gpu_source,gpu_checks,xid,infiniband,system,runner\n"
    "finally:\n"
    " os.unlink(p)\n"
    "runner.main(sys.argv[2:])\n"
)


def health_payload(src: Path | None = None) -> bytes:
    """A reproducible zip of ``sb_bench/__init__.py`` and ``sb_bench/health/*.py``."""
    src = src or suite_dir()
    files = [src / "sb_bench" / "__init__.py", *sorted((src / "sb_bench" / "health").glob("*.py"))]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            info = zipfile.ZipInfo(str(f.relative_to(src)), date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, f.read_bytes())
    return buf.getvalue()


def expectations_b64(profile: HealthProfile | None) -> str:
    d: dict[str, Any] = profile.expectations() if profile is not None else {"profile": None}
    return base64.b64encode(json.dumps(d, sort_keys=True).encode()).decode()


def health_vars(config: Config, out: Path, config_dir: Path) -> dict[str, Any]:
    """The health checks' part of the run's rendering (``health``: check.yml's payload, and in
    exec-hosts.json the checks' arguments: sb_fleet.plan.host_exec.health_args), and ``health-profiles.json`` written under ``out`` (the
    profiles the run was created with)."""
    h = config.health
    profiles = resolve_profiles(h, config_dir)
    expect = {NO_PROFILE: expectations_b64(None)}
    expect.update({name: expectations_b64(p) for name, p in sorted(profiles.items())})
    atomic_write_json(
        out / PROFILES_FILE, {n: p.model_dump(mode="json") for n, p in sorted(profiles.items())}
    )
    return {
        "default_profile": h.profile or NO_PROFILE,
        "expect": expect,
        "payload": base64.b64encode(health_payload()).decode(),
        "boot": BOOT,
        "timeout": h.timeout,
        "exec_timeout": h.exec_timeout,
    }


def render_check(health: dict[str, Any], out: Path) -> Path:
    """Write ``check.yml`` (``health``: :func:`health_vars`)."""
    pb = out / CHECK_PLAYBOOK
    atomic_write_text(
        pb,
        template_env().get_template("check.yml.j2").render(hosts_file=HOSTS_FILE, health=health),
    )
    return pb
