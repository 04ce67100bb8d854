"""Wall time of ``sb-fleet validate`` with the CPU config: the default one-machine fleet and a 4-host SSH fleet.

    .venv/bin/python bench/spine_validate.py [--repeat 2]

The 4-host fleet is real sshd on 127.0.5.10-13 (tests/fleetlib) logging in as
an unprivileged user; every host runs the CPU config's gemm-flops. Prints each
stage's wall time (from the progress lines) and the total. Needs root.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fleetlib import SshFleet  # noqa: E402

SB_FLEET = str(Path(sys.executable).parent / "sb-fleet")
STAGE = re.compile(r"^(deploy|run|collect)\s+done\s+(\d+)\s+failed\s+(\d+).*?([\d.]+)s", re.M)


def timed(args: list[str]) -> tuple[float, dict[str, float], int]:
    t0 = time.monotonic()
    r = subprocess.run([SB_FLEET, *args], capture_output=True, text=True)
    wall = time.monotonic() - t0
    stages = {m.group(1): float(m.group(4)) for m in STAGE.finditer(r.stderr)}
    return wall, stages, r.returncode


def show(label: str, wall: float, stages: dict[str, float], rc: int) -> None:
    parts = "  ".join(f"{k} {v:5.1f}s" for k, v in stages.items())
    print(f"{label:<22} total {wall:6.1f}s  [{parts}]  exit {rc}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sbf-bench-"))
    for i in range(args.repeat):
        show("default fleet (local)", *timed(["validate", "--run-dir", str(tmp / f"default{i}")]))
    fleet = SshFleet(4, base=10, subnet="127.0.5").start()
    try:
        cfg = fleet.config(
            (ROOT / "configs" / "cpu.yaml")
            .read_text()
            .replace("  venv: true", f"  venv: true\n  known_hosts: {fleet.known_hosts}"),
            "cpu-fleet.yaml",
        )
        inv = fleet.inventory()
        for i in range(args.repeat):
            show(
                "4-host SSH fleet",
                *timed(["validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp / f"fleet{i}")]),
            )
    finally:
        fleet.cleanup()
    print(
        f"machine: {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores; "
        f"load {Path('/proc/loadavg').read_text().split()[:3]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
