"""Real ``sb-fleet validate`` runs of a rack-sized loopback fleet with a config of your choice (issue 47).

Each run is a real validate on a real sshd fleet (one sshd per simulated host on 127.0.x.y, real
Ansible, the suite on CPU with torch), no fault planted. Optionally hosts that never answer are added
to the inventory (an address nothing listens on). Prints, per run, the gate, each host's verdict, what
failed the gate (report.json's headline) and any figure that came back without timed samples of its
own (a collapsed window), then the totals:

    .venv/bin/python bench/rack_runs.py --hosts 4 --config configs/cpu.yaml --unreachable 1 --runs 3

A healthy host failed by such a run is a false alarm: the totals count them.
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

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fleetlib import SshFleet  # noqa: E402

SB_FLEET = str(ROOT / ".venv" / "bin" / "sb-fleet")


def config_text(path: Path, fleet: SshFleet) -> str:
    """The config with the fleet's known_hosts and a rendezvous port of its own."""
    doc = yaml.safe_load(path.read_text())
    doc.setdefault("fleet", {})
    doc["fleet"]["known_hosts"] = str(fleet.known_hosts)
    doc["fleet"]["master_port"] = fleet.master_port
    doc["fleet"]["python"] = "/usr/bin/python3"
    return yaml.safe_dump(doc, sort_keys=False)


def unsampled(run_dir: Path) -> list[str]:
    """(host, metric) of every figure whose window gave no samples while the same metric has them on
    another host: read from noise-summary.jsonl (what the analysis reads)."""
    path = run_dir / "noise-summary.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    have: dict[str, set[str]] = {}
    for r in rows:
        host = str(r.get("node", ""))
        have[host] = {k for k, v in r.items() if k != "node" and v is not None}
    results = run_dir / "results-summary.jsonl"
    out = []
    if results.is_file():
        measured = {k for ks in have.values() for k in ks}
        for line in results.read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            host = str(r.get("node", ""))
            for k, v in r.items():
                if k in measured and v is not None and k not in have.get(host, set()):
                    out.append(f"{host} {k}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "cpu.yaml")
    ap.add_argument("--unreachable", type=int, default=0, help="inventory hosts that never answer")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--subnet", default="127.0.141")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sbf-rack-"))
    os.chmod(tmp, 0o755)
    fleet = SshFleet(args.hosts, base=10, subnet=args.subnet, root=tmp / "fleet")
    fleet.start()
    totals = {"runs": 0, "gate_failed": 0, "healthy_failed": 0, "unsampled": 0}
    try:
        cfg = fleet.dir / "rack.yaml"
        cfg.write_text(config_text(args.config, fleet))
        dead = [(f"dead{i + 1}", f"{args.subnet}.{250 - i}", 22) for i in range(args.unreachable)]
        inv = fleet.inventory(extra_hosts=dead)
        for i in range(args.runs):
            run_dir = tmp / f"run{i + 1:02d}"
            t0 = time.monotonic()
            cmd = [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"]
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT), check=False)
            wall = time.monotonic() - t0
            doc = json.loads((run_dir / "report.json").read_text())
            verdicts = {h["name"]: h["verdict"] for h in doc["hosts"]}
            healthy_failed = [h for h, v in verdicts.items() if v == "fail" and not h.startswith("dead")]
            gaps = unsampled(run_dir)
            totals["runs"] += 1
            totals["gate_failed"] += not doc["gate"]["passed"]
            totals["healthy_failed"] += bool(healthy_failed)
            totals["unsampled"] += len(gaps)
            load = os.getloadavg()[0]
            print(
                f"run {i + 1}/{args.runs}: exit {r.returncode}, {wall:.0f} s, load {load:.2f}; "
                f"{doc['headline']['text']}\n  verdicts {verdicts}"
                + (f"\n  healthy hosts failed: {healthy_failed}" if healthy_failed else "")
                + (f"\n  figures without samples of their own: {gaps}" if gaps else ""),
                flush=True,
            )
    finally:
        fleet.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"{args.hosts} hosts (+{args.unreachable} unreachable), {args.config.name}: {totals['runs']} runs, gate "
        f"failed in {totals['gate_failed']}, a healthy host failed in {totals['healthy_failed']}, "
        f"{totals['unsampled']} figure(s) without samples of their own"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
