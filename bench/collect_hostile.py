"""Collect time and control-node peak RSS for a 64-host loopback fleet, with and without hostile hosts.

One shared sshd answers 64 addresses (tests/fleetlib). Every host holds 40 small result files. In the
hostile round, one host's listing is a gigabyte (tests/fleetlib/hostile.py's lying ``find``) and
another holds a 2 GB sparse file. Each round runs collect (sb_fleet.fleet.fetch.collect_all, default
budgets) in a fresh process and prints its wall time, the good hosts' slowest time, and its peak RSS.
Target: RSS < 300 MB; the good hosts as fast as without the bad ones, ±20%. Needs root (sshd).

    .venv/bin/python bench/collect_hostile.py [--hosts 64]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def one_round(spec: str) -> None:
    """In a child process: collect every host of ``spec`` (JSON), print JSON figures."""
    from sb_fleet.config.inventory import load_inventory
    from sb_fleet.fleet.fetch import CollectTarget, collect_all
    from sb_fleet.fleet.ssh import SshSettings

    s = json.loads(spec)
    inv = load_inventory(Path(s["inventory"]))
    ssh = SshSettings(known_hosts=Path(s["known_hosts"]), policy="strict", connect_timeout=20)
    targets = [
        CollectTarget(h, s["remote"][h.name], Path(s["out"]) / h.name)
        for h in inv.hosts
        if h.name in s["remote"]
    ]
    t0 = time.monotonic()
    out = collect_all(targets, ssh, 64, 60)
    wall = time.monotonic() - t0
    good = [o.duration_s or 0 for n, o in out.items() if n not in s["bad"]]
    print(
        json.dumps(
            {
                "wall_s": round(wall, 2),
                "good_max_s": round(max(good), 2),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "outcomes": {n: o.outcome.value for n, o in out.items()},
                "bad": {n: out[n].reason for n in s["bad"]},
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        one_round(a.child)
        return
    from fleetlib import SshFleet
    from fleetlib.hostile import install_hostile_find, plant

    bin_dir = Path(tempfile.mkdtemp(prefix="sbf-bench-bin-"))
    install_hostile_find(bin_dir)
    fleet = SshFleet(
        a.hosts, base=10, subnet="127.0.61", shared_sshd=True, check_torch=False, path_prefix=str(bin_dir)
    )
    fleet.start()
    try:
        remote = {}
        for h in fleet.hosts:
            r = Path(h.workspace) / "results"
            for i in range(40):
                (r / f"bench{i % 8}").mkdir(parents=True, exist_ok=True)
                (r / f"bench{i % 8}" / f"rank{i}.json").write_bytes(os.urandom(2048))
            subprocess.run(["chown", "-R", "sbtest:sbtest", h.workspace], check=True)
            remote[h.name] = str(r)
        huge, sparse = fleet.hosts[0].name, fleet.hosts[1].name
        inv = fleet.inventory()
        base = {"inventory": str(inv), "known_hosts": str(fleet.known_hosts), "remote": remote}
        rounds = {}
        for label in ("clean", "hostile"):
            if label == "hostile":
                plant(Path(remote[huge]), "huge 1073741824")
                with open(Path(remote[sparse]) / "core", "wb") as f:
                    f.truncate(2 << 30)
            out = Path(tempfile.mkdtemp(prefix="sbf-bench-out-"))
            spec = {**base, "out": str(out), "bad": [huge, sparse]}
            p = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True
            )
            if p.returncode != 0:
                raise SystemExit(p.stderr[-2000:])
            rounds[label] = json.loads(p.stdout.strip().splitlines()[-1])
            shutil.rmtree(out, ignore_errors=True)
        for label, r in rounds.items():
            print(
                f"{label:8s} {a.hosts} hosts: collect {r['wall_s']:.2f} s, good hosts' slowest {r['good_max_s']:.2f} s, "
                f"peak RSS {r['peak_rss_mb']:.0f} MB"
            )
        for n, why in rounds["hostile"]["bad"].items():
            print(f"  {n}: {why}")
        c, h = rounds["clean"]["good_max_s"], rounds["hostile"]["good_max_s"]
        print(f"good hosts with the bad ones / without: {h / c:.2f} (target 0.8 to 1.2); RSS target < 300 MB")
        print("load:", os.getloadavg())
    finally:
        fleet.cleanup()
        shutil.rmtree(bin_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
