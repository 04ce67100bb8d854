"""Where the control node's CPU goes in validate's nightly exec: Ansible's floor beside sb-fleet's play.

On one simulated fleet (tests/fleetlib, one sshd for every loopback address), after a cold and a nightly
``sb-fleet validate`` have put the suite in place, the nightly run's own ``deploy.yml`` is replayed with
``ansible-playbook`` exactly as ansible-runner ran it (its ``artifacts/deploy/command``: argv and
environment), and beside it:

* ``sb-fleet's play, command constant``: the same play with its raw command replaced by ``echo hi``, so the
  hosts do nothing and what is left is Ansible's and the play's own cost on the control node;
* ``sb-fleet's play, each command echoed``: the same, each host's command (built by sb-fleet, an extra
  variable) looked up and echoed back: the play's cost with its real per-host data and output;
* ``one raw task, no variables``: the same inventory, limit, extra variables and forks, a play of one
  ``raw: 'echo hi'`` task: Ansible's floor per host;
* one plain parallel SSH round (``ssh host true``, every login checked): a new connection's cost.

Each is timed with every SSH master closed first (the nightly case) and, with ``--warm``, with the masters
of the run before open. Printed: wall time and the control node's CPU per host (ansible-playbook, its
workers and the ssh clients). The hosts' CPU is not counted (run the command constant to leave it out).

    .venv/bin/python bench/ansible_floor.py --hosts 64
    .venv/bin/python bench/ansible_floor.py --hosts 64 --warm --repeat 3

Needs root (it creates the test user and starts sshd), like the integration tests. It closes every
sb-fleet SSH master on this machine (as bench/scale.py does): run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from scale import CONFIG, SB_FLEET, close_masters, shared_fleet, ssh_round  # noqa: E402

from sb_fleet.fleet.ssh import kex_option, kex_settings  # noqa: E402

TRIVIAL = "- hosts: all\n  gather_facts: false\n  strategy: free\n  tasks:\n    - raw: 'echo hi'\n"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


RAW = 'ansible.builtin.raw: "{{ sb_exec[inventory_hostname] }}"\n'


def constant_command(play: str, raw: str = "ansible.builtin.raw: 'echo hi'\n") -> str:
    """The play with its raw task's command replaced by ``raw`` (``echo hi``; nothing else changed)."""
    if play.count(RAW) != 1:
        raise SystemExit("deploy.yml has no raw task of the expected shape: update bench/ansible_floor.py")
    return play.replace(RAW, raw)


def echoed_command(play: str) -> str:
    """The play with each host's command (built by sb-fleet) looked up and echoed, not run."""
    return constant_command(play, 'ansible.builtin.raw: "echo {{ sb_exec[inventory_hostname] | quote }}"\n')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--forks", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--warm", action="store_true", help="also time with the masters of the run before open")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--ssh-kex", choices=["cheap-first", "openssh"], default="cheap-first")
    args = ap.parse_args()
    n = args.hosts
    fleet = shared_fleet(n, "127.0.11", "sbf-floor-")
    rows = []
    try:
        inv, cfg = fleet.inventory(), fleet.config(CONFIG.format(forks=args.forks, ssh_kex=args.ssh_kex))
        for name in ("cold", "nightly"):  # the suite in place, and a nightly run whose play to replay
            r = subprocess.run(
                [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(fleet.dir / name)],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                raise SystemExit(f"validate ({name}) failed: {r.stderr[-1500:]}")
        cmd = json.loads((fleet.dir / "nightly/ansible/deploy/artifacts/deploy/command").read_text())
        env = {**os.environ, **cmd["env"]}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), *cmd["command"][1:]]
        pb = Path(argv[-1])
        ours = pb.read_text()
        trivial = fleet.dir / "trivial.yml"
        trivial.write_text(TRIVIAL)
        variants = {
            "sb-fleet's play, command constant": (pb, constant_command(ours)),
            "sb-fleet's play, each command echoed": (pb, echoed_command(ours)),
            "one raw task, no variables": (trivial, TRIVIAL),
        }
        for masters in ("closed", "open") if args.warm else ("closed",):
            for _ in range(args.repeat):
                for label, (path, text) in variants.items():
                    path.write_text(text)
                    if masters == "closed":
                        close_masters()
                    c0, t0 = children_cpu(), time.monotonic()
                    r = subprocess.run([*argv[:-1], str(path)], env=env, capture_output=True, text=True)
                    wall, cpu = time.monotonic() - t0, children_cpu() - c0
                    if r.returncode != 0:
                        raise SystemExit(f"{label}: ansible-playbook exit {r.returncode}: {r.stdout[-1000:]}")
                    rows.append(
                        {
                            "play": label,
                            "masters": masters,
                            "wall_s": round(wall, 2),
                            "cpu_ms_per_host": round(1000 * cpu / n),
                        }
                    )
                    print(
                        f"{n} hosts, masters {masters:6}  {label:36}  wall {wall:5.1f}s  control CPU {1000 * cpu / n:4.0f} ms/host",
                        flush=True,
                    )
            pb.write_text(ours)
        ssh_round(fleet)
        kex = kex_settings(kex_option(args.ssh_kex))
        rounds = {"one parallel ssh round": ()}
        if kex:
            rounds["... with sb-fleet's key exchange"] = kex
        for _ in range(args.repeat):
            for label, opts in rounds.items():
                c0 = children_cpu()
                s = ssh_round(fleet, opts)
                cpu = children_cpu() - c0
                rows.append(
                    {
                        "play": label,
                        "masters": "none",
                        "wall_s": round(s, 2),
                        "cpu_ms_per_host": round(1000 * cpu / n),
                    }
                )
                print(
                    f"{n} hosts, new connections  {label:36}  wall {s:5.1f}s  control CPU {1000 * cpu / n:4.0f} ms/host"
                )
    finally:
        fleet.cleanup()
    if args.json:
        args.json.write_text(json.dumps({"hosts": n, "forks": args.forks, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
