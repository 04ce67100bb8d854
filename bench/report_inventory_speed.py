"""Speed of ``sb-fleet report -i`` on a 10,000-host INI inventory and a 10,000-line results file.

Three ways, side by side in one run, each the installed command in a fresh process (start-up and
imports included), best of ``--repeat`` runs, with the child's CPU time from wait4():

* ``no inventory``: ``report results-summary.jsonl`` (the analysis alone);
* ``-i via Ansible``: the same inventory named ``hosts.txt``, which sb-fleet's own INI reader does not
  take, so Ansible's inventory code reads it (the reader before this change);
* ``-i hosts.ini``: sb-fleet's INI reader for names and groups (sb_fleet/config/inventory_ini.py).

Prints the machine's load (``uptime``) before and after: the machine is shared, so wall times move
with it; CPU time moves less. Usage::

    python bench/report_inventory_speed.py [--hosts 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.synth.fleet import generate  # noqa: E402


def command() -> list[str]:
    exe = Path(sys.executable).parent / "sb-fleet"
    return (
        [str(exe)] if exe.is_file() else [sys.executable, "-c", "from sb_fleet.cli.main import main; main()"]
    )


def run_once(args: list[str], out: Path) -> tuple[float, float]:
    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    proc = subprocess.Popen([*command(), "report", *args, "--out", str(out), "-q"])
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if rc not in (0, 1):
        raise SystemExit(f"sb-fleet report {' '.join(args)} failed with exit code {rc}")
    return wall, usage.ru_utime + usage.ru_stime


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=20261123)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sbf-bench-inv-") as d:
        work = Path(d)
        fleet = generate(args.hosts, seed=args.seed)
        src = work / "results-summary.jsonl"
        src.write_text("\n".join(fleet.lines) + "\n")
        lines = ["[gpu]"] + [
            f"{h} ansible_host=10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255} sb_workspace=/scratch/sbf"
            for i, h in enumerate(fleet.hosts)
        ]
        lines += ["", "[gpu:vars]", "ansible_user=svc", "ansible_python_interpreter=/usr/bin/python3"]
        ini = work / "hosts.ini"
        ini.write_text("\n".join(lines) + "\n")
        txt = work / "hosts.txt"  # Ansible reads it as INI; sb-fleet's reader leaves it to Ansible
        shutil.copy(ini, txt)
        cases = [
            ("no inventory", [str(src)]),
            ("-i via Ansible", [str(src), "-i", str(txt)]),
            ("-i hosts.ini", [str(src), "-i", str(ini)]),
        ]
        print(f"load before: {uptime()}")
        print(f"{args.hosts} hosts, {len(fleet.lines)} result lines, best of {args.repeat}")
        print(f"{'case':<16} {'wall s':>7} {'cpu s':>7}")
        results = {}
        for _ in range(args.repeat):  # interleaved, so a load spike costs every case alike
            for name, a in cases:
                wall, cpu = run_once(a, work / "out")
                best = results.get(name, (float("inf"), float("inf")))
                results[name] = (min(best[0], wall), min(best[1], cpu))
        for name, _ in cases:
            wall, cpu = results[name]
            print(f"{name:<16} {wall:7.2f} {cpu:7.2f}")
        base = results["no inventory"]
        for name in ("-i via Ansible", "-i hosts.ini"):
            print(f"inventory cost, {name}: {results[name][1] - base[1]:+.2f} s cpu")
        print(f"load after: {uptime()}")


if __name__ == "__main__":
    main()
