"""The nightly gate through Slurm at scale: ``sb-fleet validate`` with ``fleet.launcher: slurm`` against
one ``srun -N <N> true`` round over the same nodes (issue 56).

A real Slurm on this machine (tests/fleetlib/slurm.py: a private munged, slurmctld and one ``slurmd -N``
per node, each node its own loopback NodeAddr and port), the fleet taken from it (``-i
slurm:partition=gpu``), the suite's ``noop`` benchmark, no health checks, the fleet statistics off: what is
measured is the launcher's own cost. Per size:

- ``srun round``: ``srun -N <N> --partition=gpu true`` (an allocation and one step on every node), the
  median of three;
- ``cold``: the first validate (the suite transferred to every node's workspace);
- ``nightly``: three more validates with the suite in place, the median, and its ratio to the srun round;
- the control node's CPU per node (this process's children: sb-fleet, Ansible, srun; not slurmd or
  slurmstepd, which are the nodes' here) and slurmctld's RPCs (``sdiag``, reset before each nightly run):
  the total per node and the three most frequent types.

Needs root and Debian's slurmctld, slurmd, slurm-client and munge (.ci/apt-packages.txt). Usage::

    python bench/slurm_scale.py --nodes 16 64 [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.fleetlib.slurm import SlurmCluster  # noqa: E402

SB_FLEET = ROOT / ".venv" / "bin" / "sb-fleet"
PYTHON = ROOT / ".venv" / "bin" / "python"
CONFIG = """\
version: v0.4
fleet:
  launcher: slurm
  python: {python}
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: {forks}
  workspace: {workspace}/{{host}}
superbench:
  benchmarks:
    noop:
      timeout: 120
      modes: [{{name: local, proc_num: 1}}]
      parameters: {{sleep: 0}}
health: {{enabled: false}}
gates:
  fleet: {{enabled: false}}
slurm:
  partition: gpu
  grant_timeout: 300
  host_vars: {{sb_python: {python}}}
"""
_RPC = re.compile(r"^\s*(REQUEST_\w+|MESSAGE_\w+|RESPONSE_\w+)\s*\(\s*\d+\)\s*count:(\d+)", re.M)


def addrs(n: int) -> list[str]:
    return [f"127.0.{60 + i // 250}.{1 + i % 250}" for i in range(n)]


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def rpcs(c: SlurmCluster) -> dict[str, int]:
    """slurmctld's RPC counts by message type since the last ``sdiag --reset``."""
    out = c.sh("sdiag", check=False).stdout
    return {m.group(1): int(m.group(2)) for m in _RPC.finditer(out)}


def timed(argv: list[str], env: dict[str, str], timeout: float = 1800) -> tuple[float, float, int, str]:
    """(wall s, the control node's CPU s, exit code, the output's tail) of one command."""
    c0, t0 = children_cpu(), time.perf_counter()
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return time.perf_counter() - t0, children_cpu() - c0, r.returncode, (r.stdout + r.stderr)[-2000:]


def one_size(n: int, work: Path) -> dict:
    (work / f"slurm-{n}").mkdir(parents=True, exist_ok=True)
    c = SlurmCluster(addrs(n), root=work / f"slurm-{n}")
    t0 = time.perf_counter()
    c.start()
    started = time.perf_counter() - t0
    try:
        ws = work / f"ws-{n}"
        cfg = work / f"config-{n}.yaml"
        cfg.write_text(CONFIG.format(python=PYTHON, forks=max(64, n), workspace=ws))
        srun = []
        for _ in range(3):
            wall, _, rc, tail = timed(
                ["srun", f"-N{n}", "--partition=gpu", "--exclusive", "true"], c.env, 300
            )
            if rc != 0:
                raise RuntimeError(f"srun -N{n} true failed: {tail}")
            srun.append(wall)
        runs: list[dict] = []
        for i in range(4):
            c.sh("sdiag", "--reset", check=False)
            run_dir = work / f"run-{n}-{i}"
            argv = [str(SB_FLEET), "validate", "-i", "slurm:partition=gpu", "-c", str(cfg)]
            wall, cpu, rc, tail = timed([*argv, "--run-dir", str(run_dir), "--quiet"], c.env)
            got = rpcs(c)
            hosts = json.loads((run_dir / "report.json").read_text())["hosts"] if rc in (0, 1) else []
            passed = sum(1 for h in hosts if h["verdict"] == "pass")
            runs.append(
                {"wall": wall, "cpu": cpu, "rc": rc, "passed": passed, "rpcs": got, "tail": tail[-400:]}
            )
            print(
                f"  {n} nodes, validate {'cold' if i == 0 else 'nightly'} {i}: {wall:.2f} s, exit {rc}, "
                f"{passed}/{n} passed, control CPU {cpu:.1f} s, RPCs {sum(got.values())}",
                flush=True,
            )
        nightly = runs[1:]
        med = statistics.median(r["wall"] for r in nightly)
        rpc_total = statistics.median(sum(r["rpcs"].values()) for r in nightly)
        top: dict[str, int] = {}
        for k, v in nightly[-1]["rpcs"].items():
            top[k] = v
        return {
            "nodes": n,
            "cluster_start_s": started,
            "srun_round_s": statistics.median(srun),
            "srun_rounds": srun,
            "cold_s": runs[0]["wall"],
            "nightly_s": med,
            "nightly": [r["wall"] for r in nightly],
            "ratio": med / statistics.median(srun),
            "cpu_per_node_ms": 1000 * statistics.median(r["cpu"] for r in nightly) / n,
            "rpcs_per_node": rpc_total / n,
            "top_rpcs": sorted(top.items(), key=lambda kv: -kv[1])[:3],
            "all_passed": all(r["passed"] == n for r in runs),
            "exits": [r["rc"] for r in runs],
        }
    finally:
        c.stop()
        shutil.rmtree(work / f"ws-{n}", ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("slurmctld") is None:
        print("needs root and Slurm's daemons (slurmctld slurmd slurm-client munge)", file=sys.stderr)
        return 2
    load = os.getloadavg()[0]
    print(f"load {load:.1f} at the start; {os.cpu_count()} CPUs")
    work = Path(tempfile.mkdtemp(prefix="sbf-slurm-scale-"))
    os.chmod(work, 0o755)
    out = []
    try:
        for n in a.nodes:
            out.append(one_size(n, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"{'nodes':>6} {'srun -N':>8} {'cold':>8} {'nightly':>8} {'ratio':>6} {'CPU/node':>9} "
        f"{'RPCs/node':>10}  top RPCs"
    )
    for x in out:
        top = ", ".join(f"{k} {v}" for k, v in x["top_rpcs"])
        print(
            f"{x['nodes']:>6} {x['srun_round_s']:>7.2f}s {x['cold_s']:>7.1f}s {x['nightly_s']:>7.2f}s "
            f"{x['ratio']:>5.1f}x {x['cpu_per_node_ms']:>7.0f}ms {x['rpcs_per_node']:>10.1f}  {top}"
            + ("" if x["all_passed"] else f"  (not every node passed: exits {x['exits']})")
        )
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
