"""A fake powercap tree whose package counter advances at a fixed power, for tests on hosts without RAPL.

``make_tree(root)`` lays out ``<root>/class/powercap`` as Linux does (a package and a DRAM domain of
socket 0, the ``core`` subdomain, the ``intel-rapl-mmio`` duplicate of the package); ``python
tests/fleetlib/powercap.py <root> <watts> [<wrap_uj>]`` then rewrites the package counter every few
milliseconds from the monotonic clock (each write a rename, so a reader never sees half a number),
until it is killed. The benchmark reads it as it reads a real counter, through ``SB_PATH_SYSFS``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

PERIOD_S = 0.004


def make_tree(root: Path, wrap_uj: int = 262143328850) -> Path:
    """Create ``<root>/class/powercap`` with zeroed counters; the package counter's file."""
    base = root / "class" / "powercap"
    zones = {
        "intel-rapl:0": "package-0",
        "intel-rapl:0:0": "core",
        "intel-rapl:0:1": "dram",
        "intel-rapl-mmio:0": "package-0",
    }
    for zone, name in zones.items():
        d = base / zone
        d.mkdir(parents=True, exist_ok=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text("0\n")
        (d / "max_energy_range_uj").write_text(f"{wrap_uj}\n")
    (base / "intel-rapl").mkdir(exist_ok=True)  # the control type's own directory: no counter
    return base / "intel-rapl:0" / "energy_uj"


def write_counter(path: Path, uj: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{uj}\n")
    os.replace(tmp, path)


def run(root: Path, watts: float, wrap_uj: int) -> None:
    counter = make_tree(root, wrap_uj)
    # The mmio interface mirrors the package counter, as on real hosts: a reader adding both reads double.
    mirror = root / "class" / "powercap" / "intel-rapl-mmio:0" / "energy_uj"
    t0 = time.monotonic()
    while True:
        uj = int((time.monotonic() - t0) * watts * 1e6) % wrap_uj
        write_counter(counter, uj)
        write_counter(mirror, uj)
        time.sleep(PERIOD_S)


if __name__ == "__main__":
    run(Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 262143328850)
