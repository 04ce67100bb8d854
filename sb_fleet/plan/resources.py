"""Where sb-fleet's own files are: playbook templates, the on-host suite, shipped configs and inventories.

In a checkout (or an editable install) they sit beside the package; a wheel
installs them under ``<prefix>/share/sb-fleet``.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

from sb_fleet.errors import SbFleetError

_PARTS = ("playbooks", "benchmarks", "configs", "inventories")


@lru_cache(maxsize=1)
def root() -> Path:
    here = Path(__file__).resolve().parents[2]  # sb_fleet/plan/resources.py -> the checkout
    for cand in (here, Path(sys.prefix) / "share" / "sb-fleet"):
        if all((cand / p).is_dir() for p in _PARTS):
            return cand
    raise SbFleetError(
        f"cannot find sb-fleet's data files ({', '.join(_PARTS)}) beside {here} or under "
        f"{sys.prefix}/share/sb-fleet; reinstall sb-fleet"
    )


def playbooks_dir() -> Path:
    return root() / "playbooks"


def suite_dir() -> Path:
    return root() / "benchmarks"


def default_inventory() -> Path:
    return root() / "inventories" / "default.ini"


def default_config() -> Path:
    return root() / "configs" / "cpu.yaml"


def import_suite() -> None:
    """Make the on-host suite's torch-free modules (registry, runner spec) importable here."""
    p = str(suite_dir())
    if p not in sys.path:
        sys.path.insert(0, p)
