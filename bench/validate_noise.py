"""Real no-fault ``sb-fleet validate`` runs on a loopback fleet: how often the gate fails a healthy
fleet, and with ``--slow`` how often it catches a 2x slow host (issue 55, item 6).

    .venv/bin/python bench/validate_noise.py --hosts 6 --runs 5
    .venv/bin/python bench/validate_noise.py --hosts 6 --runs 5 --slow

Each run is a real validate on a real sshd fleet (tests/fleetlib: one sshd per simulated host on
127.0.x.y, each with a hostname of its own, real Ansible), hosts in parallel, the corpus' CPU
parameters (tests/corpus, bench/record_corpus.py) of noop, kernel-launch and gemm-flops, the default
gates: plain validate re-runs a host failed on the fleet's statistics alone before its verdict
(``confirm.json``), so what fails the gate is what the confirmation kept.

``--slow``: as the corpus' slow-host case (tests/fleetlib/corpus.py): every host's sshd in a cpu
cgroup of its own capped at cores/hosts CPUs, and the middle host's group also holds one busy process
for the whole run: half the CPU of a healthy host. Needs root and a cgroup v1 cpu controller.

Prints per run the gate, each failing host's findings and what the confirmation said of each, then the
totals: runs whose gate failed (no fault) or runs in which the slow host failed (``--slow``), and any
healthy host failed. ``--json FILE`` writes them too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from fleetlib import SshFleet  # noqa: E402
from fleetlib.corpus import BusyLoops, CpuGroup, own_names  # noqa: E402
from record_corpus import BENCHMARKS, HEAD, LOCAL  # noqa: E402

SB_FLEET = str(Path(sys.executable).parent / "sb-fleet")
NAMES = ("gemm-flops", "kernel-launch", "noop")  # gemm-flops first, as the corpus (record_corpus.py)


def config_text() -> str:
    body = HEAD
    for name in NAMES:
        body += f"    {name}:\n      enable: true\n      timeout: 180\n{LOCAL}"
        body += f"      parameters: {json.dumps(BENCHMARKS[name])}\n"
    return body


def findings(run_dir: Path) -> dict[str, list[str]]:
    """Each host that did not pass: its verdict and first findings, from report.json."""
    doc = json.loads((run_dir / "report.json").read_text())
    out = {}
    for h in doc.get("hosts") or []:
        if h.get("verdict") != "pass":
            out[h["name"]] = [str(h.get("verdict"))] + [
                f"{i.get('metric')} ({i.get('check')}): {i.get('detail')}"
                for i in (h.get("issues") or [])[:3]
            ]
    return out


def confirmations(run_dir: Path) -> dict[str, list[str]]:
    """What validate's confirmation said of each host it re-ran (confirm.json), one line a finding."""
    p = run_dir / "confirm.json"
    if not p.is_file():
        return {}
    doc = json.loads(p.read_text())
    return {
        h: [f"{c.get('result')}: {r.get('metric')} {r.get('why')}" for r in c.get("replays") or []]
        for h, c in (doc.get("hosts") or {}).items()
    }


def fleet_findings(run_dir: Path) -> list[str]:
    """What the gate can fail on besides a host: inconsistent metrics, two-host disagreements and
    population splits (report.json), each with what its re-run said."""
    doc = json.loads((run_dir / "report.json").read_text())
    out = []
    for kind in ("inconsistent", "disagreements", "populations"):
        for x in doc.get(kind) or []:
            what = x.get("metric") or x.get("family")
            groups = x.get("groups") or x.get("hosts")
            again = x.get("confirmation", "not re-run") if "confirmed" in x else "not re-run"
            out.append(f"{kind}: {what} {json.dumps(groups)[:200]}; re-run: {again}")
    return out


def run_once(fleet: SshFleet, cfg: Path, inv: Path, run_dir: Path, slow: str | None) -> dict:
    groups: list[CpuGroup] = []
    beside = None
    try:
        if slow is not None:
            share = round((os.cpu_count() or 1) / len(fleet.hosts), 3)
            for h in fleet.hosts:
                g = CpuGroup(f"sb-vnoise-{h.name}", shares=1024, cpus=share).__enter__()
                groups.append(g)
                g.add_tree(h.proc.pid)
                if h.name == slow:
                    beside = BusyLoops(1).start()
                    g.add(beside.pids[0])
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        cmd = [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT), check=False)
        wall = time.monotonic() - t0
    finally:
        if beside:
            beside.stop()
        for g in groups:
            g.__exit__(None, None, None)
    if not (run_dir / "report.json").is_file():
        return {"exit": r.returncode, "wall_s": round(wall, 1), "load": load, "error": r.stderr[-800:]}
    doc = json.loads((run_dir / "report.json").read_text())
    return {
        "exit": r.returncode,
        "wall_s": round(wall, 1),
        "load": round(load, 2),
        "gate_passed": bool(doc["gate"]["passed"]),
        "headline": (doc.get("headline") or {}).get("text", ""),
        "not_passed": findings(run_dir),
        "confirmation": confirmations(run_dir),
        "fleet_findings": fleet_findings(run_dir),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=6)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--slow", action="store_true", help="one host at half the CPU of the others")
    ap.add_argument("--subnet", default="127.0.231")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()
    names = {f"host{i + 1:03d}": f"{args.subnet}.{10 + i}" for i in range(args.hosts)}
    slow = f"host{args.hosts // 2 + 1:03d}" if args.slow else None
    tmp = Path(tempfile.mkdtemp(prefix="sbf-vnoise-"))
    os.chmod(tmp, 0o755)
    fleet = SshFleet(args.hosts, base=10, subnet=args.subnet, root=tmp / "fleet")
    fleet.dir.mkdir(parents=True, exist_ok=True)
    os.chmod(fleet.dir, 0o755)
    fleet.sshd_wrap = own_names(fleet.dir, names)
    fleet.start()
    runs: list[dict] = []
    try:
        cfg = fleet.config(config_text(), "vnoise.yaml")
        inv = fleet.inventory()
        for i in range(args.runs):
            got = run_once(fleet, cfg, inv, tmp / f"run{i + 1:02d}", slow)
            runs.append(got)
            failed = [h for h, f in got.get("not_passed", {}).items() if f[0] == "fail"]
            print(
                f"run {i + 1}/{args.runs}: exit {got['exit']}, {got['wall_s']:.0f} s, load {got['load']}; "
                + (
                    f"gate {'passed' if got['gate_passed'] else 'FAILED'}: {got['headline']}"
                    if "gate_passed" in got
                    else f"no report: {got.get('error')}"
                ),
                flush=True,
            )
            for h, f in got.get("not_passed", {}).items():
                print(f"  {h} {f[0]}" + ("" if h != slow else " (the slow host)"), *f[1:], sep="\n    ")
            for h, lines in got.get("confirmation", {}).items():
                print(f"  confirmation of {h}:", *lines, sep="\n    ")
            for line in got.get("fleet_findings", []):
                print(f"  {line}")
            if failed and slow is None:
                print(f"  healthy host(s) failed: {failed}", flush=True)
    finally:
        fleet.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    judged = [r for r in runs if "gate_passed" in r]
    healthy_failed = sum(
        any(f[0] == "fail" and h != slow for h, f in r["not_passed"].items()) for r in judged
    )
    if slow is None:
        total = f"gate failed in {sum(not r['gate_passed'] for r in judged)} of {len(judged)} runs"
    else:
        caught = sum(r["not_passed"].get(slow, ["pass"])[0] == "fail" for r in judged)
        total = f"the slow host {slow} failed in {caught} of {len(judged)} runs"
    print(
        f"{args.hosts} hosts{' with one 2x slow' if slow else ', no fault'}: {total}; a healthy host failed "
        f"in {healthy_failed}; {len(runs) - len(judged)} run(s) without a report"
    )
    if args.json:
        args.json.write_text(json.dumps({"hosts": args.hosts, "slow": slow, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
