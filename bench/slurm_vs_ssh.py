"""A 4-node ``validate`` with ``launcher: slurm`` against the same with SSH + Ansible (issue 25).

A real Slurm cluster on this machine (tests/fleetlib/slurm.py: slurmctld, four slurmd on loopback) whose
nodes' addresses are a real sshd fleet (one sshd answering them all). The same fleet (``-i
slurm:partition=gpu``), config and benchmark (a small CPU GEMM, so the launch cost shows) are validated
alternately each way, ``--rounds`` times; printed: each way's wall times (median and each) and
the machine's load. Every SSH round is a nightly's: no live master connection (each
run's control sockets are in a fresh XDG_RUNTIME_DIR).

    .venv/bin/python bench/slurm_vs_ssh.py             # 3 rounds
    .venv/bin/python bench/slurm_vs_ssh.py --rounds 5

Needs root and Slurm's daemons (slurmctld slurmd slurm-client munge), like the integration tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from fleetlib import SshFleet  # noqa: E402

from tests.fleetlib.slurm import SlurmCluster  # noqa: E402

SB_FLEET = str(Path(sys.executable).parent / "sb-fleet")

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  install_requirements: never
  min_free_disk_gb: 0
  default_timeout: 300
superbench:
  benchmarks:
    gemm-flops:
      modes: [{name: local, proc_num: 1, env: {OMP_NUM_THREADS: 1}}]
      parameters: {m: 64, n: 64, k: 64, num_warmup: 1, num_steps: 2, min_time: 0.1, precision: [fp32]}
gates:
  fleet: {enabled: false}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("slurmctld") is None:
        print("needs root and Slurm's daemons (slurmctld slurmd slurm-client munge)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="sbf-slurm-bench-"))
    fleet = SshFleet(4, base=10, subnet="127.0.13", shared_sshd=True)
    fleet.start()
    cluster = SlurmCluster([h.addr for h in fleet.hosts], prefix="sbnode")
    try:
        cluster.start()
        base = yaml.safe_load(fleet.config(CONFIG).read_text())
        base["slurm"] = {
            "host_vars": {
                "ansible_user": "sbtest",
                "ansible_port": fleet.hosts[0].port,
                "ansible_ssh_private_key_file": str(fleet.client_key),
                "ansible_python_interpreter": "/usr/bin/python3",
                "sb_python": fleet.python,
            }
        }
        configs = {}
        for way in ("ssh", "slurm"):
            doc = json.loads(json.dumps(base))
            doc["fleet"]["launcher"] = way
            configs[way] = work / f"{way}.yaml"
            configs[way].write_text(yaml.safe_dump(doc))
        times: dict[str, list[float]] = {"ssh": [], "slurm": []}
        loads = []
        for i in range(args.rounds):
            for way in ("ssh", "slurm") if i % 2 == 0 else ("slurm", "ssh"):
                run = work / f"{way}-{i}"
                xdg = work / f"xdg-{way}-{i}"  # fresh SSH control sockets: no live master connection
                xdg.mkdir(mode=0o700)
                t0 = time.monotonic()
                r = subprocess.run(
                    [SB_FLEET, "validate", "-i", "slurm:partition=gpu", "-c", str(configs[way]),
                     "--run-dir", str(run), "--quiet"],
                    capture_output=True, text=True, timeout=1200, env={**cluster.env, "XDG_RUNTIME_DIR": str(xdg)},
                )  # fmt: skip
                took = time.monotonic() - t0
                loads.append(os.getloadavg()[0])
                if r.returncode != 0:
                    print(f"{way} round {i}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
                    return 1
                times[way].append(took)
        print(f"4-node validate, gemm-flops 64^3 on CPU, {args.rounds} round(s) each way, alternating")
        print(
            f"load average (1 min) during the rounds: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores"
        )
        for way in ("ssh", "slurm"):
            ts = times[way]
            print(
                f"  {way:5s}: median {statistics.median(ts):6.1f} s  (each: {', '.join(f'{t:.1f}' for t in ts)})"
            )
        ratio = statistics.median(times["slurm"]) / statistics.median(times["ssh"])
        print(f"  slurm / ssh: {ratio:.2f}")
        return 0
    finally:
        cluster.stop()
        fleet.cleanup()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
