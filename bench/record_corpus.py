"""Record real ``sb-fleet validate`` runs on loopback sshd fleets into tests/corpus (issue 35, item 6).

    .venv/bin/python bench/record_corpus.py --list
    .venv/bin/python bench/record_corpus.py --case nofault-4h-parallel-quiet --runs 1
    .venv/bin/python bench/record_corpus.py --case slowhost-6h-parallel-quiet,tclink-6h-parallel-quiet
    .venv/bin/python bench/record_corpus.py --final            # the whole corpus, runs per case as planned

A case is ``<fault>-<N>h-<parallel|serial>-<quiet|loaded>``. Faults: ``nofault``; ``slowhost``
(every host a CPU slice of its own, one host's shared with a busy process: half the CPU);
``slowpython`` (one host's every Python process runs with PYTHONTRACEMALLOC=1); ``tclink`` (the
first host's traffic shaped with tc htb on lo). N hosts, each its own 127.0.x.y address with its own
sshd, in namespaces of its own with its own hostname (so torch's gloo listens on the host's address).
``serial`` runs validate with ``--forks 1`` (and without the all-node collective); ``loaded`` adds two
busy processes for the run's duration. Every run goes to ``tests/corpus/<case>/<run-id>/``: the run
directory's small files (results and noise summaries, metrics, hosts, outcomes, plan, manifest,
report, confirm) and a ``case.json`` describing the run (hosts, benchmarks, load before and after, the
planted fault, wall time, sb-fleet commit, what the fault did to the numbers, the verdict). Raw
per-rank files, logs and facts are not kept. Needs root (sshd, useradd, unshare, cgroups, tc). Quiet
runs first wait (up to --quiet-wait s) for the CPUs to be measured busy less than --quiet-busy of their time
over 3 s (/proc/stat: what runs now; the 1-minute load average still carries the previous run for minutes).
See tests/corpus/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fleetlib import SshFleet  # noqa: E402
from fleetlib.corpus import (  # noqa: E402
    SLOW_PYTHON_ENV,
    BusyLoops,
    CpuGroup,
    loadavg,
    own_names,
    shaped_link,
    wait_quiet,
)

SB_FLEET = str(Path(sys.executable).parent / "sb-fleet")
CORPUS = ROOT / "tests" / "corpus"

# What every run measures: small CPU parameters, one thread per benchmark process (every "host" shares
# this machine's cores), nccl-bw across all the fleet's nodes (gloo). No gates: the verdict a new user
# gets with the defaults.
BENCHMARKS = {
    # first, and timed for a whole second: a host slowed by its neighbour reaches every later benchmark
    # later, when the other hosts have finished theirs and the machine is quieter (measured: a 2x slow
    # host's GEMM came out 2.4x *faster* than the others' when it ran third with 10 steps of ~10 ms).
    "gemm-flops": {"m": 512, "n": 512, "k": 512, "num_warmup": 2, "duration": 1.0, "precision": ["fp32"]},
    "kernel-launch": {"num_warmup": 100, "num_steps": 2000, "interval": 100},
    "noop": {"num_warmup": 8, "num_steps": 64},
    "nccl-bw": {
        "operation": ["allreduce"],
        "minbytes": "64K",
        "maxbytes": "1M",
        "stepfactor": 4,
        "num_warmup": 2,
        "num_steps": 8,
    },
}

HEAD = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: true
  install_requirements: never
  default_timeout: 180
  forks: 32
  master_port: 31411
  env: {OMP_NUM_THREADS: 1}
superbench:
  benchmarks:
"""
LOCAL = "      modes: [{name: local, proc_num: 1, parallel: false, env: {OMP_NUM_THREADS: 1}}]\n"
ALL_NODES = (
    "      modes: [{name: torch.distributed, proc_num: 1, node_num: all, env: {OMP_NUM_THREADS: 1}}]\n"
)


def benchmarks_for(case: Case) -> dict[str, dict]:
    """Every benchmark, but no collective across nodes when hosts go one at a time: with ``--forks 1``
    sb-fleet starts the all-node group's hosts one after another, and each waits alone for the others
    until its timeout (seen here: every host timed out after 180 s, a 13-minute run)."""
    return {k: v for k, v in BENCHMARKS.items() if not (case.serial and k == "nccl-bw")}


def config_for(case: Case) -> str:
    body = HEAD
    for name, params in benchmarks_for(case).items():
        body += f"    {name}:\n      enable: true\n      timeout: 180\n"
        body += ALL_NODES if name == "nccl-bw" else LOCAL
        body += f"      parameters: {json.dumps(params)}\n"
    return body


# The run directory's files that the corpus keeps (when present).
KEEP = [
    "results-summary.jsonl",
    "noise-summary.jsonl",
    "metrics.json",
    "hosts.json",
    "outcomes.json",
    "plan.json",
    "manifest.json",
    "report.json",
    "confirm.json",
    "confirm/results-summary.jsonl",
    "confirm/noise-summary.jsonl",
    "confirm-splits.json",
    "confirm-splits/results-summary.jsonl",
    "confirm-splits/noise-summary.jsonl",
]

FAULTS = ("nofault", "slowhost", "slowpython", "tclink")
CASE_RE = re.compile(r"^(?P<fault>[a-z]+)-(?P<n>\d+)h-(?P<mode>parallel|serial)-(?P<load>quiet|loaded)$")

# The corpus as issue 35 asks for it: case -> runs.
FINAL = {  # the quiet cases first: a loaded run leaves the machine loaded for the next one
    "nofault-3h-parallel-quiet": 20,
    "nofault-4h-parallel-quiet": 20,
    "nofault-6h-parallel-quiet": 20,
    "nofault-8h-parallel-quiet": 20,
    "nofault-4h-serial-quiet": 3,
    "slowhost-6h-parallel-quiet": 20,
    "slowpython-6h-parallel-quiet": 3,
    "tclink-6h-parallel-quiet": 3,
    "nofault-4h-parallel-loaded": 3,
    "nofault-6h-parallel-loaded": 3,
    "slowhost-6h-parallel-loaded": 4,
}

BACKGROUND = 2  # busy processes of a loaded run
TC_RATE = "200mbit"  # the shaped host's link


@dataclass(frozen=True)
class Case:
    name: str
    fault: str
    hosts: int
    serial: bool
    loaded: bool

    @classmethod
    def parse(cls, name: str) -> Case:
        m = CASE_RE.match(name)
        if not m or m["fault"] not in FAULTS or not 2 <= int(m["n"]) <= 64:
            raise SystemExit(
                f"bad case {name!r}: want <fault>-<N>h-<parallel|serial>-<quiet|loaded>, fault in {FAULTS}"
            )
        return cls(name, m["fault"], int(m["n"]), m["mode"] == "serial", m["load"] == "loaded")

    @property
    def faulty_host(self) -> str | None:
        """The host the fault is planted on. tclink: the first host, rank 0 of the all-node collective:
        on loopback a connection's initiator always has 127.0.0.1 on its side, and gloo's higher ranks
        connect to the lower ranks' listeners, so only rank 0's every connection carries its own address
        (shapeable by address). The other faults: a host in the middle of the fleet."""
        if self.fault == "nofault":
            return None
        if self.fault == "tclink":
            return "host001"
        return f"host{self.hosts // 2 + 1:03d}"


def subnet_for(case: Case) -> str:
    """A /24 of its own per fault kind and size (away from the integration tests' subnets)."""
    return f"127.0.{150 + FAULTS.index(case.fault) * 20 + min(case.hosts, 19)}"


def git_commit() -> dict:
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()

    dirty = [
        line[3:]
        for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
        if line[3:].startswith(("sb_fleet/", "benchmarks/", "playbooks/"))
    ]
    return {"commit": git("rev-parse", "HEAD"), "subject": git("log", "-1", "--format=%s"), "dirty": dirty}


def machine() -> dict:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = Path("/proc/meminfo").read_text().split()[1]
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "mem_gib": round(int(mem) / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def read_summary(path: Path) -> dict[str, dict]:
    if not path.exists():
        return {}
    return {d["node"]: d for d in map(json.loads, path.read_text().splitlines()) if d.get("node")}


def observe(case: Case, run_dir: Path) -> dict:
    """What the fault did to the numbers, from the run's own summary."""
    summary = read_summary(run_dir / "results-summary.jsonl")
    out: dict = {}

    def ratio(metric: str) -> dict | None:
        vals = {n: r.get(metric) for n, r in summary.items() if isinstance(r.get(metric), (int, float))}
        bad = case.faulty_host
        if bad not in vals or len(vals) < 2:
            return None
        others = [v for n, v in vals.items() if n != bad]
        med = statistics.median(others)
        return {
            "metric": metric,
            "host": bad,
            "value": vals[bad],
            "median_others": med,
            "ratio": round(vals[bad] / med, 3) if med else None,
            "others_min": min(others),
            "others_max": max(others),
        }

    metrics = {
        "nofault": [],
        "slowhost": ["gemm-flops/fp32_flops", "noop/step_time", "kernel-launch/torch_launch_time"],
        "slowpython": ["noop/step_time", "kernel-launch/torch_launch_time", "gemm-flops/fp32_flops"],
        "tclink": nccl_keys(summary),
    }[case.fault]
    for m in metrics:
        r = ratio(m)
        if r:
            out[m] = r
    # nccl-bw's busbw at the largest size on every host (a collective: every host measures the same one)
    keys = nccl_keys(summary)
    if keys:
        out["nccl_busbw_largest"] = {"metric": keys[0], **{n: r.get(keys[0]) for n, r in summary.items()}}
    return out


def nccl_keys(summary: dict[str, dict]) -> list[str]:
    """nccl-bw's busbw metrics, largest message first (the sizes are rounded to whole elements per rank)."""
    keys = {k for r in summary.values() for k in r if re.fullmatch(r"nccl-bw/allreduce_\d+_busbw", k)}
    return sorted(keys, key=lambda k: -int(k.split("_")[1]))


def verdict(run_dir: Path) -> dict:
    """The gate, the hosts that did not pass and why, and the report's warnings, from report.json."""
    p = run_dir / "report.json"
    if not p.exists():
        return {"report": False}
    rep = json.loads(p.read_text())
    out: dict = {"gate": rep.get("gate"), "summary": rep.get("summary")}
    hosts = {}
    for h in rep.get("hosts") or []:
        if h.get("verdict") == "pass":
            continue
        issues = [
            {k: i.get(k) for k in ("metric", "check", "severity", "detail")}
            for i in h.get("issues") or []
            if i.get("severity") in ("fail", "incomplete")
        ]
        hosts[h.get("name")] = {"verdict": h.get("verdict"), "reason": h.get("reason"), "issues": issues[:8]}
    out["not_passed"] = hosts
    # compact: report.json beside it has every detail
    if rep.get("too_noisy"):
        out["too_noisy"] = {
            t.get("metric"): [h.get("name") for h in t.get("hosts", [])] for t in rep["too_noisy"]
        }
    for k in ("inconsistent", "populations", "disagreements"):
        if rep.get(k):
            out[k] = [json.dumps(x)[:300] for x in rep[k]]
    out["warnings"] = len(rep.get("warnings") or [])
    return out


def next_run_id(case_dir: Path) -> str:
    """``r<NN>-<UTC time>``, NN one past the highest recorded (runs taken out leave gaps)."""
    taken = [int(m[1]) for p in case_dir.glob("r*") if p.is_dir() and (m := re.match(r"r(\d+)-", p.name))]
    n = max(taken, default=0) + 1
    return f"r{n:02d}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')}"


def store(run_dir: Path, dest: Path) -> list[str]:
    kept = []
    for rel in KEEP:
        src = run_dir / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest / rel)
            kept.append(rel)
    return kept


def record_case(case: Case, runs: int, out: Path, args: argparse.Namespace) -> list[dict]:
    subnet = subnet_for(case)
    names = {f"host{i + 1:03d}": f"{subnet}.{10 + i}" for i in range(case.hosts)}
    tmp = Path(tempfile.mkdtemp(prefix=f"sbf-corpus-{case.name}-"))
    os.chmod(tmp, 0o755)
    host_env = {}
    if case.fault == "slowpython":
        host_env[case.faulty_host] = dict(SLOW_PYTHON_ENV)
    fleet = SshFleet(
        case.hosts,
        base=10,
        subnet=subnet,
        root=tmp / "fleet",
        sshd_wrap=None,
        host_env=host_env,
    )
    fleet.dir.mkdir(parents=True, exist_ok=True)
    os.chmod(fleet.dir, 0o755)
    fleet.sshd_wrap = own_names(fleet.dir, names)
    print(f"== {case.name}: starting {case.hosts} sshd hosts on {subnet}.10+", flush=True)
    fleet.start()
    results = []
    try:
        cfg = fleet.config(config_for(case), "corpus.yaml")
        inv = fleet.inventory()
        for i in range(runs):
            results.append(record_run(case, fleet, cfg, inv, out, tmp, i, runs, args))
    finally:
        fleet.cleanup()
        if not args.keep_run_dirs:
            shutil.rmtree(tmp, ignore_errors=True)
    return results


def record_run(
    case: Case,
    fleet: SshFleet,
    cfg: Path,
    inv: Path,
    out: Path,
    tmp: Path,
    i: int,
    runs: int,
    args: argparse.Namespace,
) -> dict:
    case_dir = out / case.name
    run_id = next_run_id(case_dir)
    run_dir = tmp / "runs" / run_id
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    waited, busy_at_start = 0.0, None
    if not case.loaded:
        waited, busy_at_start = wait_quiet(args.quiet_busy, args.quiet_wait)
    load_before = loadavg()
    fault: dict | None = None
    background = BusyLoops(BACKGROUND) if case.loaded else None
    beside = None
    groups: list[CpuGroup] = []
    shaping = None
    cmd = [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"]
    if case.serial:
        cmd += ["--forks", "1"]
    print(
        f"-- {case.name} run {i + 1}/{runs} ({run_id}): load {load_before[0]:.2f} "
        + (
            f"(waited {waited:.0f}s for quiet: CPUs {busy_at_start:.0%} busy)"
            if busy_at_start is not None
            else ""
        )
        + (" + background load" if case.loaded else ""),
        flush=True,
    )
    try:
        bad = case.faulty_host
        if case.fault == "slowhost":
            share = round((os.cpu_count() or 1) / case.hosts, 3)
            for h in fleet.hosts:
                g = CpuGroup(f"sb-corpus-{h.name}", shares=1024, cpus=share).__enter__()
                groups.append(g)
                g.add_tree(h.proc.pid)
                if h.name == bad:
                    beside = BusyLoops(1).start()
                    g.add(beside.pids[0])
            fault = {
                "kind": "slowhost",
                "host": bad,
                "cpu_slice": share,
                "how": (
                    f"Every host's sshd (and its open sessions) in a cpu cgroup of its own, capped at "
                    f"{share} CPU ({os.cpu_count()} cores / {case.hosts} hosts; v1 cpu.cfs_quota_us over a "
                    "5 ms cpu.cfs_period_us, cpu.shares 1024), as real hosts have CPUs of their own; "
                    f"{bad}'s group also holds one busy Python process (`python -c 'while True: pass'`) for "
                    f"the whole run, so everything {bad} runs shares its slice with it: half the CPU of a "
                    "healthy host. Why slices: with the hosts sharing the cores freely, the slowed host "
                    "reached its GEMM later, when the others had finished and the machine was quieter: in 9 "
                    "trial runs so (it and the busy loop pinned to one CPU with taskset; or one capped group "
                    "holding just the two) its GEMM came out 0.48-3.3x the others' median, 7 of 9 faster."
                ),
            }
        elif case.fault == "slowpython":
            fault = {
                "kind": "slowpython",
                "host": bad,
                "how": (
                    f"{bad}'s sshd sets {SLOW_PYTHON_ENV} in every login session (sshd SetEnv, from the fleet's "
                    "start, for every run of the case): every Python process on that host, Ansible's and the "
                    "benchmarks' alike, traces each memory allocation (a CPython debugging setting). Python-"
                    "bound work runs several times slower (an empty call 5x, small allocations 10x, a torch op "
                    "from Python 1.7x, `import torch` 2.4x, measured alone); C kernels (GEMM, gloo) do not."
                ),
            }
        elif case.fault == "tclink":
            addr = fleet.host(bad).addr
            shaping = shaped_link(addr, TC_RATE)
            tc_cmds = shaping.__enter__()
            fault = {
                "kind": "tclink",
                "host": bad,
                "how": (
                    f"htb on lo: every packet from or to {addr} ({bad}) through a {TC_RATE} class, for the "
                    f"whole run (SSH to it included). {bad} is rank 0 of the all-node nccl-bw: gloo's higher "
                    "ranks connect to lower ranks' listeners and on loopback the connecting side's address is "
                    "127.0.0.1, so only rank 0's connections all carry its own address and are shaped."
                ),
                "tc": tc_cmds,
            }
        if background:
            background.start()
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT))
        wall = time.monotonic() - t0
    finally:
        if background:
            background.stop()
        if beside:
            beside.stop()
        for g in groups:
            g.__exit__(None, None, None)
        if shaping:
            shaping.__exit__(None, None, None)
    load_after = loadavg()
    dest = case_dir / run_id
    dest.mkdir(parents=True, exist_ok=True)
    kept = store(run_dir, dest)
    obs = observe(case, run_dir)
    ver = verdict(run_dir)
    doc = {
        "case": case.name,
        "run_id": run_id,
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "hosts": {h.name: h.addr for h in fleet.hosts},
        "host_count": case.hosts,
        "benchmarks": benchmarks_for(case),
        "nccl_bw_nodes": None if case.serial else "all",
        "parallel": not case.serial,
        "forks": 1 if case.serial else 32,
        "own_hostnames": True,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "quiet_wait": None
        if case.loaded
        else {
            "busy_below": args.quiet_busy,
            "waited_s": waited,
            "busy": busy_at_start,
            "load1": load_before[0],
        },
        "background_load": (
            {
                "added": True,
                "processes": BACKGROUND,
                "how": "python -c 'while True: pass', unpinned, each in a session of its own (so each weighs as much "
                "as a host's benchmark session under autogroup scheduling), for the run",
            }
            if case.loaded
            else {"added": False}
        ),
        "fault": fault,
        "wall_s": round(wall, 1),
        "exit_code": r.returncode,
        "stderr_tail": r.stderr.strip().splitlines()[-5:],
        "sb_fleet": git_commit(),
        "machine": machine(),
        "command": ["sb-fleet", *cmd[1:]],
        "files": kept,
        "observed": obs,
        "verdict": ver,
    }
    (dest / "case.json").write_text(json.dumps(doc, indent=1) + "\n")
    show(doc)
    return doc


def show(doc: dict) -> None:
    ver = doc["verdict"]
    gate = ver.get("gate") or {}
    line = f"   exit {doc['exit_code']}  wall {doc['wall_s']:.0f}s  load after {doc['load_after'][0]:.2f}"
    line += f"  gate passed={gate.get('passed')}  {ver.get('summary')}"
    print(line, flush=True)
    for name, h in ver.get("not_passed", {}).items():
        why = "; ".join(f"{i['metric']}: {i['detail']}" for i in h["issues"][:3]) or h.get("reason")
        print(f"   {name} {h['verdict']}: {why[:300]}", flush=True)
    noisy = ver.get("too_noisy", {})
    if noisy:
        print(f"   too noisy: {len(noisy)} metrics, e.g. {dict(list(noisy.items())[:2])}", flush=True)
    for k in ("inconsistent", "populations", "disagreements"):
        for t in ver.get(k, []):
            print(f"   {k}: {t[:200]}", flush=True)
    for m, o in doc["observed"].items():
        if isinstance(o, dict) and "ratio" in o:
            print(
                f"   {m}: {o['host']} {o['value']:.4g} vs median of others {o['median_others']:.4g} "
                f"= {o['ratio']}x (others {o['others_min']:.4g}..{o['others_max']:.4g})",
                flush=True,
            )
    if not doc["files"] or "report.json" not in doc["files"]:
        print(f"   !! run directory incomplete: {doc['files']}; stderr: {doc['stderr_tail']}", flush=True)


def summarize(root: Path) -> None:
    """Per case: the runs, their gates and verdicts, and what the fault did (from each case.json)."""
    for case_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        docs = [json.loads(m.read_text()) for m in sorted(case_dir.glob("*/case.json"))]
        if not docs:
            continue
        passed = sum(1 for d in docs if (d["verdict"].get("gate") or {}).get("passed"))
        walls = [d["wall_s"] for d in docs]
        print(
            f"{case_dir.name}: {len(docs)} runs, gate passed {passed}/{len(docs)}, wall "
            f"{min(walls):.0f}-{max(walls):.0f}s, load before {min(d['load_before'][0] for d in docs):.2f}-"
            f"{max(d['load_before'][0] for d in docs):.2f}"
        )
        for d in docs:
            ver = d["verdict"]
            gate = ver.get("gate") or {}
            counts = {k: v for k, v in (ver.get("summary") or {}).items() if k != "hosts" and v}
            parts = [f"  {d['run_id']}: gate {'PASSED' if gate.get('passed') else 'FAILED'} {counts}"]
            fault = d.get("fault") or {}
            for m, o in d.get("observed", {}).items():
                if (
                    isinstance(o, dict)
                    and o.get("ratio") is not None
                    and m.split("/")[0] in ("gemm-flops", "noop")
                ):
                    parts.append(f"{m.split('/')[1]} {o['ratio']}x")
            busbw = d.get("observed", {}).get("nccl_busbw_largest")
            if fault.get("kind") == "tclink" and busbw:
                parts.append(f"busbw {busbw.get(fault['host'], 0):.4f} GB/s")
            for name, h in ver.get("not_passed", {}).items():
                first = h["issues"][0] if h["issues"] else {}
                why = first.get("detail") or h.get("reason") or ""
                parts.append(f"{name} {h['verdict']} ({first.get('metric', '')}: {why[:90]})")
            noisy = ver.get("too_noisy") or {}
            if noisy:
                parts.append(f"too noisy: {len(noisy)} metrics")
            for k in ("inconsistent", "populations", "disagreements"):
                if ver.get(k):
                    parts.append(f"{k}: {len(ver[k])}")
            print("; ".join(parts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", default=[], help="case name(s), comma-separated; repeatable")
    ap.add_argument("--final", action="store_true", help="every case of the planned corpus, its planned runs")
    ap.add_argument("--runs", type=int, help="runs per case (default: the planned number, 1 outside it)")
    ap.add_argument("--out", type=Path, default=CORPUS, help="corpus directory (default: tests/corpus)")
    ap.add_argument("--replace", action="store_true", help="delete a case's recorded runs before recording")
    ap.add_argument(
        "--quiet-busy",
        type=float,
        default=0.15,
        help="quiet runs wait until the CPUs are busy less than this fraction of their time (over 3 s)",
    )
    ap.add_argument("--quiet-wait", type=float, default=120.0, help="... for at most this many seconds")
    ap.add_argument("--keep-run-dirs", action="store_true", help="keep the whole run directories (in /tmp)")
    ap.add_argument("--list", action="store_true", help="print the planned cases and exit")
    ap.add_argument("--summary", action="store_true", help="print what the recorded corpus holds and exit")
    args = ap.parse_args()
    if args.summary:
        summarize(args.out)
        return 0
    if args.list:
        for name, n in FINAL.items():
            print(f"{name:<32} {n} runs")
        return 0
    if os.geteuid() != 0:
        print("record_corpus needs root (sshd, useradd, taskset, tc)", file=sys.stderr)
        return 2
    names = [c for arg in args.case for c in arg.split(",") if c]
    if args.final:
        names = list(FINAL) + [n for n in names if n not in FINAL]
    if not names:
        ap.error("name a --case or --final (see --list)")
    cases = [Case.parse(n) for n in names]
    t0 = time.monotonic()
    for case in cases:
        runs = args.runs or FINAL.get(case.name, 1)
        if args.replace:
            shutil.rmtree(args.out / case.name, ignore_errors=True)
        record_case(case, runs, args.out, args)
    print(f"done in {time.monotonic() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
