"""Scale benchmark: ``sb-fleet validate`` with a no-op benchmark on 16/64/256 simulated hosts.

One sshd on 0.0.0.0 answers every loopback address (tests/fleetlib, shared
mode), so hundreds of "hosts" fit on this machine. For each size it times, in
the same run and against the same hosts:

* one plain parallel SSH round (``ssh host true`` from OpenSSH client
  processes, all at once, every login checked, OpenSSH's own settings): the floor any tool pays; and
  the same round with the key exchange order sb-fleet's connections use (``fleet.ssh_kex``: on OpenSSH
  9.0-9.8 its post-quantum default costs ~65 ms of client CPU per connection, sb-fleet prefers
  curve25519), printed beside it;
* ``sb-fleet validate`` end to end (deploy, run, collect, report), with the
  per-stage wall times from its progress lines and, inside each Ansible
  stage, the wall time of every task (from ansible-runner's job events), or, where the stage's one
  command went over sb-fleet's own ssh clients, their span (``ansible/<stage>/direct-exec.json``, "(ssh)");
* the CPU seconds the simulated hosts used (every process under their sshd, from /proc) and the control
  node's (sb-fleet and the processes it waited for): on this machine both share the same cores, while
  on a real fleet the hosts' part runs on the hosts, in parallel;

and prints the ratio validate / SSH round three times: cold (a fresh fleet: the suite travels to every
host), nightly (the same fleet validated again with every SSH master connection closed first, as a run
24 hours later finds them: the nightly gate's case) and warm (again at once, the masters of the run
before still open: ControlPersist). The control node's CPU is printed per host too. The benchmark is
``noop`` (no torch import on the hosts; venv off) so that the time measured is sb-fleet's own.

    .venv/bin/python bench/scale.py                 # 16, 64, 256
    .venv/bin/python bench/scale.py --hosts 64 --json out.json
    .venv/bin/python bench/scale.py --hosts 64 256 --repeat 3   # the nightly case three times: its median

Needs root (it creates the test user and starts sshd), like the integration tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fleetlib import USER, SshFleet, descendants  # noqa: E402

from sb_fleet.fleet.ssh import kex_option, kex_settings  # noqa: E402

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
  ssh_kex: {ssh_kex}
  default_timeout: 120
superbench:
  benchmarks:
    noop:
      enable: true
      timeout: 60
      modes: [{{name: local, proc_num: 1, parallel: no}}]
      parameters: {{num_warmup: 0, num_steps: 1}}
gates:
  fleet: {{enabled: false}}   # noop's step time is scheduler noise, not a host property
health:
  # Each probe's bound on a host (default 10 s, for a hung driver or tool). Here 256 hosts' checks share
  # 2 cores with everything else: a probe waits for a CPU, not for a tool, and at 256 on a slow machine
  # 1-3 hosts a run passed 10 s (host.probe). The checks and their work are the same.
  timeout: 60
"""


# sb-fleet's console entry point, with the CPU its own process used (not its children: Ansible, ssh)
# written to argv[1] at exit: how the control node's CPU splits between sb-fleet and what it runs.
SELF_CPU = """\
import atexit, json, resource, sys
out = sys.argv.pop(1)
def _dump():
    u = resource.getrusage(resource.RUSAGE_SELF)
    with open(out, "w") as f:
        json.dump({"self": round(u.ru_utime + u.ru_stime, 2)}, f)
atexit.register(_dump)
sys.argv[0] = "sb-fleet"
from sb_fleet.cli.main import main
sys.exit(main())
"""


def ssh_round(fleet: SshFleet, options: tuple[str, ...] = ()) -> float:
    """One parallel ``ssh host true`` to every host (``options``: more ``-o`` settings); raises if any login
    fails."""
    base = [
        "ssh",
        *(x for o in options for x in ("-o", o)),
        "-o",
        "BatchMode=yes",
        "-o",
        f"UserKnownHostsFile={fleet.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ControlMaster=no",
        "-o",
        "ControlPath=none",
        "-i",
        str(fleet.client_key),
        "-l",
        USER,
    ]
    t0 = time.monotonic()
    procs = [
        subprocess.Popen(
            [*base, "-p", str(h.port), h.addr, "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for h in fleet.hosts
    ]
    bad = []
    for h, p in zip(fleet.hosts, procs, strict=True):
        _, err = p.communicate()
        if p.returncode != 0:
            bad.append(f"{h.name}: {err.decode(errors='replace').strip()[-200:]}")
    el = time.monotonic() - t0
    if bad:
        raise RuntimeError(f"{len(bad)} SSH login(s) failed: {bad[:3]}")
    return el


STAGE_RE = re.compile(
    r"^(check|check\+deploy|deploy|run|collect)\s+done\s+(\d+)\s+failed\s+(\d+)\s+pending\s+(\d+)\s+([\d.]+)s"
)


def task_times(run_dir: Path) -> dict[str, dict[str, float]]:
    """Per Ansible stage: wall time of each task, from ansible-runner's job events."""
    out: dict[str, dict[str, float]] = {}
    for stage_dir in sorted((run_dir / "ansible").glob("*")):
        direct = stage_dir / "direct-exec.json"  # the one-command play over sb-fleet's own ssh clients
        if direct.exists():
            d = json.loads(direct.read_text())
            hosts = d.get("hosts") or []
            span = round(max((h["end_s"] for h in hosts), default=0.0), 2)
            out[f"{stage_dir.name} (ssh)"] = {"own ssh clients total": span, str(d.get("task")): span}
        evdir = next(iter(sorted((stage_dir / "artifacts").glob("*/job_events"))), None)
        if evdir is None:
            continue
        events = []
        for f in evdir.glob("*.json"):
            try:
                e = json.loads(f.read_text())
            except ValueError:
                continue
            events.append(e)
        events.sort(key=lambda e: e.get("counter", 0))

        def ts(e: dict) -> float:
            from datetime import datetime

            return datetime.fromisoformat(e["created"]).timestamp()

        tasks: dict[str, list[float]] = {}
        start = ts(events[0]) if events else 0.0
        end = ts(events[-1]) if events else 0.0
        for e in events:
            d = e.get("event_data") or {}
            if e.get("event") in (
                "runner_on_ok",
                "runner_on_failed",
                "runner_on_unreachable",
                "runner_on_start",
            ):
                tasks.setdefault(str(d.get("task")), []).append(ts(e))
        row = {"ansible-playbook total": round(end - start, 2)}
        for t, stamps in tasks.items():
            row[t] = round(max(stamps) - min(stamps), 2)
        out[stage_dir.name] = row
    return out


TICK = os.sysconf("SC_CLK_TCK")


def _cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of every CPU since boot (/proc/stat's first line; idle includes iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])


def wait_quiet(idle: float = 0.9, longest: float = 180.0) -> float:
    """Wait until the machine is quiet, at least ``idle`` of its CPU time idle over one second (the fleet
    of the size before still tearing down, another run's leftovers): the load average says the same
    minutes late. Returns the seconds waited; after ``longest`` it goes on and says so."""
    t0 = time.monotonic()
    while True:
        i0, n0 = _cpu_times()
        time.sleep(1.0)
        i1, n1 = _cpu_times()
        if n1 > n0 and (i1 - i0) / (n1 - n0) >= idle:
            return time.monotonic() - t0
        if time.monotonic() - t0 > longest:
            print(f"bench/scale.py: still busy after {longest:.0f}s, timing anyway", file=sys.stderr)
            return time.monotonic() - t0


def tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds (user + system) used so far by the processes under ``roots`` and by the children
    they have reaped (cutime/cstime). An exited child's time moves into its parent's, so the sum over
    the tree is conserved between two samples (a process daemonised out of the tree is lost)."""
    total = 0
    for pid in {*roots, *(d for r in roots for d in descendants(r))}:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime (fields 14-17)
    return total / TICK


def time_validate(fleet: SshFleet, run_dir: Path, forks: int, ssh_kex: str, root: Path = ROOT) -> dict:
    """One ``sb-fleet validate`` on the fleet, with an SSH round timed just before it (ratio in one run);
    ``root``: the checkout whose sb-fleet runs (the working directory comes first on sys.path)."""
    waited = wait_quiet()
    ssh_round(fleet)  # the first login of a fresh sshd/user pays one-off costs; time the next round
    ssh_s = ssh_round(fleet)  # OpenSSH's own settings: the yardstick
    kex = kex_settings(kex_option(ssh_kex))  # the key exchange order sb-fleet's connections use
    kex_s = ssh_round(fleet, kex) if kex else ssh_s
    inv = fleet.inventory()
    cfg = fleet.config(CONFIG.format(forks=forks, ssh_kex=ssh_kex))
    # The simulated hosts' own CPU (sshd sessions, hostprep, the runner, the benchmark) shares this
    # machine's cores with the control node; on a real fleet it runs on the hosts, in parallel.
    sshds = [p.pid for p in fleet.procs]
    hosts0 = tree_cpu_s(sshds)
    ctl0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    own = run_dir.parent / f"{run_dir.name}-self-cpu.json"
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            SELF_CPU,
            str(own),
            "validate",
            "-i",
            str(inv),
            "-c",
            str(cfg),
            "--run-dir",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        cwd=str(root),
        env={**os.environ, "COLUMNS": "200"},
    )
    val_s = time.monotonic() - t0
    ctl1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    hosts_cpu = tree_cpu_s(sshds) - hosts0
    ctl_cpu = (ctl1.ru_utime + ctl1.ru_stime) - (ctl0.ru_utime + ctl0.ru_stime)
    stages = {}
    for line in r.stderr.splitlines():
        m = STAGE_RE.match(line.strip())
        if m:
            stages[m.group(1)] = {"ok": int(m.group(2)), "failed": int(m.group(3)), "s": float(m.group(5))}
    outcomes = (
        json.loads((run_dir / "outcomes.json").read_text())["hosts"]
        if (run_dir / "outcomes.json").exists()
        else {}
    )
    self_cpu = json.loads(own.read_text()) if own.exists() else {}
    res = {
        "self_cpu_s": self_cpu.get("self"),  # sb-fleet's own process: plan, paramiko's collect, the report
        "waited_for_quiet_s": round(waited, 1),
        "ssh_round_s": round(ssh_s, 2),
        "ssh_round_same_kex_s": round(kex_s, 2),  # the round with sb-fleet's key exchange order
        "validate_s": round(val_s, 2),
        "ratio": round(val_s / ssh_s, 2),
        "ratio_same_kex": round(val_s / kex_s, 2),
        "exit_code": r.returncode,
        "hosts_cpu_s": round(hosts_cpu, 1),
        "control_cpu_s": round(ctl_cpu, 1),
        "cores": os.cpu_count(),
        "hosts_ok": sum(1 for v in outcomes.values() if v["outcome"] == "ok"),
        "stages": stages,
        "tasks": task_times(run_dir),
    }
    if r.returncode != 0:
        res["stderr_tail"] = r.stderr[-1500:]
    return res


def close_masters() -> int:
    """Close every SSH master connection sb-fleet keeps (ControlPersist), as 24 hours would: ``ssh -O
    exit`` on each control socket under sb-fleet's control directory, then wait until no master process
    is left. Returns how many were open."""
    from sb_fleet.fleet.ssh import control_dir

    socks = [p for p in control_dir().rglob("*") if p.is_socket()]
    procs = [
        subprocess.Popen(
            ["ssh", "-O", "exit", "-o", f"ControlPath={s}", "sb-fleet-master"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for s in socks
    ]
    for p in procs:
        p.wait()
    prefix = f"ssh: {control_dir()}/"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if cmd.startswith(prefix) and "[mux]" in cmd:
                    left.append(int(d.name))
        if not left:
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"{len(left)} SSH master(s) still running after ssh -O exit")
    return len(socks)


# The simulated hosts' interpreter (--host-python). "bare": a venv of this Python's base interpreter
# with nothing installed, as a host's Python is (the suite's own venv, or the system's): the noop plan
# needs no package on the host. "dev-venv": this development venv itself, as the bench ran until the tenth
# session; its site runs the editable installs' path hooks of sb_fleet and sb_fleet_bench (setuptools'
# finders) at every start, 20-26 ms of CPU a process that no host pays, twice a host per nightly run.
HOST_PYTHONS = ("bare", "dev-venv")
BARE_VENV = Path(tempfile.gettempdir()) / f"sbf-bench-host-python-{sys.version_info[0]}.{sys.version_info[1]}"


def host_python(kind: str) -> str:
    """The simulated hosts' interpreter for ``kind`` (HOST_PYTHONS); the bare venv is made once."""
    if kind == "dev-venv":
        return sys.executable
    if not BARE_VENV.exists():  # made beside it, then renamed into place: never seen half made
        tmp = Path(tempfile.mkdtemp(prefix=f"{BARE_VENV.name}-", dir=BARE_VENV.parent))
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(tmp)], check=True)
        for f in (tmp, *tmp.rglob("*")):  # the fleet's user runs it, whatever the umask
            if not f.is_symlink():
                os.chmod(f, f.stat().st_mode | (0o055 if f.is_dir() else 0o044))
        try:
            tmp.rename(BARE_VENV)
        except OSError:  # another bench made it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    # a fixed name in a shared directory: only one this user made, writable by none else
    st = BARE_VENV.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise RuntimeError(f"{BARE_VENV} is not a directory of this user's, writable by it alone: remove it")
    return str(BARE_VENV / "bin" / "python")


def shared_fleet(n: int, subnet: str, prefix: str, python: str | None = None) -> SshFleet:
    """``n`` simulated hosts on ``subnet``, one sshd answering every address, started; ``python``: the
    hosts' interpreter (default: host_python("bare"))."""
    fleet = SshFleet(
        n,
        base=1,
        shared_sshd=True,
        subnet=subnet,
        check_torch=False,
        root=Path(tempfile.mkdtemp(prefix=prefix)),
        python=python or host_python("bare"),
    )
    fleet.start()
    return fleet


def one_size(
    n: int, forks: int, keep: bool, ssh_kex: str = "cheap-first", repeat: int = 1, host_py: str = "bare"
) -> dict:
    """Cold: the first validate of a fresh fleet (the suite travels to every host). Nightly (``repeat``
    times, the masters closed before each): the same fleet validated again with a new run (the nightly
    gate's case: the suite is already in place). Warm: once more at once, the masters still open."""
    wait_quiet()
    load_before = os.getloadavg()[0]  # the machine before this size's fleet exists (others' work)
    fleet = shared_fleet(n, "127.0.6", "sbf-scale-", host_python(host_py))
    try:
        cold = time_validate(fleet, fleet.dir / "run-cold", forks, ssh_kex)
        nightlies = []
        for i in range(max(1, repeat)):
            closed = close_masters()
            one = time_validate(fleet, fleet.dir / f"run-nightly{i or ''}", forks, ssh_kex)
            one["masters_closed_before"] = closed
            nightlies.append(one)
        # The run whose ratio is the median of the repeats stands for the nightly case; each is kept too.
        nightly = sorted(nightlies, key=lambda r: r["ratio"])[(len(nightlies) - 1) // 2]
        if len(nightlies) > 1:
            nightly = {**nightly, "ratios": [r["ratio"] for r in nightlies]}
        warm = time_validate(fleet, fleet.dir / "run-warm", forks, ssh_kex)
        # Largest resident set of any process validate ran on the control node (sb-fleet, ansible, ssh), MiB.
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        return {
            "hosts": n,
            "forks": forks,
            "ssh_kex": ssh_kex,
            "host_python": host_py,
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "peak_rss_mib_largest_process": round(peak_mib, 1),
            "cold": cold,
            "nightly": nightly,
            "warm": warm,
            "exit_code": max(cold["exit_code"], nightly["exit_code"], warm["exit_code"]),
        }
    finally:
        if not keep:
            fleet.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, nargs="*", default=[16, 64, 256])
    ap.add_argument("--forks", type=int, default=256)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--ssh-kex",
        choices=["cheap-first", "openssh"],
        default="cheap-first",
        help="fleet.ssh_kex of the runs (openssh: OpenSSH's own key exchange order, as before it was set)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the fleet directory (run dir, logs)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="nightly runs per size (each with the masters closed first); the median ratio's run is "
        "printed, with every run's ratio (two runs of the same code differ by ~5%% on a 2-core machine)",
    )
    ap.add_argument(
        "--host-python",
        choices=HOST_PYTHONS,
        default="bare",
        help="the simulated hosts' interpreter: a venv with nothing installed, as a host has (bare), or "
        "this development venv, whose editable installs cost every start 20-26 ms (dev-venv: the "
        "figures before f3b31c9, 2026-11-28)",
    )
    args = ap.parse_args()
    rows = []
    for n in args.hosts:
        row = one_size(n, args.forks, args.keep, args.ssh_kex, args.repeat, args.host_python)
        rows.append(row)
        for kind in ("cold", "nightly", "warm"):
            v = row[kind]
            st = "  ".join(f"{k} {x['s']:.1f}s" for k, x in v["stages"].items())
            print(
                f"{n:4d} hosts {kind}: ssh round {v['ssh_round_s']:6.2f}s  validate {v['validate_s']:6.2f}s  "
                f"ratio {v['ratio']:5.2f}  exit {v['exit_code']}  ok {v['hosts_ok']}/{n}  [{st}]\n"
                f"       (the round with sb-fleet's key exchange order {v['ssh_round_same_kex_s']:.2f}s: "
                f"ratio {v['ratio_same_kex']:.2f}; waited {v['waited_for_quiet_s']:.0f}s for a quiet machine first)",
                flush=True,
            )
            masters = (
                f", {v['masters_closed_before']} SSH master(s) closed before it" if kind == "nightly" else ""
            )
            if v.get("ratios"):
                masters += f"; the median of {len(v['ratios'])} nightly runs, ratios {v['ratios']}"
            print(
                f"       CPU: simulated hosts {v['hosts_cpu_s']:.1f}s (sshd sessions and everything they ran), "
                f"control node {v['control_cpu_s']:.1f}s = {v['control_cpu_s'] / n * 1000:.0f} ms per host "
                f"(sb-fleet, Ansible, ssh clients; not the ControlPersist masters), on {v['cores']} core(s)"
                + masters
                + (
                    f"; of it sb-fleet's own process {v['self_cpu_s']:.1f}s"
                    if v.get("self_cpu_s") is not None
                    else ""
                ),
                flush=True,
            )
            for stage, tasks in v["tasks"].items():
                print(f"       {stage}: " + ", ".join(f"{t} {x:.1f}s" for t, x in tasks.items()), flush=True)
            if v["exit_code"] != 0:
                print(v.get("stderr_tail", ""), flush=True)
        print(
            f"       the hosts' Python: {row['host_python']}; peak RSS {row['peak_rss_mib_largest_process']:.0f} MiB, "
            f"load before {row['load_before']:.1f}, after {row['load_after']:.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["exit_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
