"""Health-check speed: ``sb-fleet check`` on 256 simulated hosts against one plain parallel SSH round.

One sshd on 0.0.0.0 answers every loopback address (tests/fleetlib, shared mode). Every host is a fake
8x H100 node (tests/healthfake.py: its own sysfs, procfs and tool directory with a fake nvidia-smi), so
each host runs the real checks: one Python process with every probe in a thread, four nvidia-smi calls,
the sysfs/procfs reads. Printed, for each size:

* one plain parallel SSH round (``ssh host true``, every login checked): the floor any tool pays;
* ``sb-fleet check`` end to end (run directory, Ansible, the checks, the verdicts and drift), its wall
  time and the target (the SSH round + 2 s);
* the on-host duration of the checks (from each host's document: median and max);
* the CPU seconds the simulated hosts used and the control node's: on this machine both share the
  same cores, while on a real fleet the hosts' part runs on the hosts, in parallel.

    .venv/bin/python bench/health_speed.py                  # 256 hosts
    .venv/bin/python bench/health_speed.py --hosts 16 64

Needs root (it creates the test user and starts sshd), like the integration tests.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from fleetlib import SshFleet  # noqa: E402
from healthfake import make_machine  # noqa: E402
from scale import ssh_round, tree_cpu_s  # noqa: E402

SB_FLEET = str(Path(sys.executable).parent / "sb-fleet")

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: {forks}
superbench:
  benchmarks:
    noop:
      modes: [{{name: local, proc_num: 1}}]
health:
  profile: h100-sxm-8x-ib400
"""


def one(n: int, forks: int) -> dict:
    fleet = SshFleet(n, shared_sshd=True, check_torch=False).start()
    try:
        machines = {
            h.name: make_machine(fleet.dir / "machines" / h.name, python="/usr/bin/python3")
            for h in fleet.hosts
        }
        inv = fleet.inventory(host_vars=machines)
        cfg = fleet.config(CONFIG.format(forks=forks))
        ssh_round(fleet)  # a fresh sshd/user pays one-off costs on the first login
        ssh_s = ssh_round(fleet)
        run_dir = Path(tempfile.mkdtemp(prefix="sbf-health-")) / "run"
        sshds = [p.pid for p in fleet.procs]
        hosts0 = tree_cpu_s(sshds)
        ctl0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        r = subprocess.run(
            [SB_FLEET, "check", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"],
            capture_output=True,
            text=True,
            cwd=str(ROOT),
        )
        wall = time.monotonic() - t0
        ctl1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        hosts_cpu = tree_cpu_s(sshds) - hosts0
        ctl_cpu = (ctl1.ru_utime + ctl1.ru_stime) - (ctl0.ru_utime + ctl0.ru_stime)
        outcomes = (
            json.loads((run_dir / "outcomes" / "check.json").read_text())["hosts"]
            if r.returncode in (0, 1)
            else []
        )
        durations = []
        for f in (run_dir / "health").glob("*.json"):
            durations.append(json.loads(f.read_text()).get("duration_s") or 0.0)
        ok = sum(1 for o in outcomes if o["outcome"] == "ok")
        return {
            "hosts": n,
            "forks": forks,
            "exit": r.returncode,
            "ok_hosts": ok,
            "ssh_round_s": round(ssh_s, 2),
            "check_s": round(wall, 2),
            "target_s": round(ssh_s + 2, 2),
            "within_target": wall <= ssh_s + 2,
            "on_host_median_s": round(statistics.median(durations), 3) if durations else None,
            "on_host_max_s": round(max(durations), 3) if durations else None,
            "hosts_cpu_s": round(hosts_cpu, 1),
            "control_cpu_s": round(ctl_cpu, 1),
            "stderr_tail": r.stderr[-300:] if r.returncode not in (0, 1) else "",
        }
    finally:
        fleet.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[256])
    ap.add_argument("--forks", type=int, default=256)
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    rows = []
    for n in a.hosts:
        row = one(n, a.forks)
        rows.append(row)
        print(
            f"{n} hosts: ssh round {row['ssh_round_s']} s; sb-fleet check {row['check_s']} s "
            f"(target {row['target_s']} s: {'met' if row['within_target'] else 'NOT met'}); "
            f"{row['ok_hosts']} ok; on-host checks median {row['on_host_median_s']} s, max {row['on_host_max_s']} s; "
            f"CPU: hosts {row['hosts_cpu_s']} s, control node {row['control_cpu_s']} s (same {os.cpu_count()} cores)"
            + (f"; exit {row['exit']}: {row['stderr_tail']}" if row["stderr_tail"] else ""),
            flush=True,
        )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
