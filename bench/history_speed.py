"""Speed of the history store at scale: 10,000 hosts x ~150 metrics per night for a year of nights.

The first night is recorded through the real path (``report(..., history=STORE)``); the nights of the
year in between are bulk-inserted with the store's own ``append`` (the same rows the real path writes:
every value keyed by host, metric and cell (component and component metric), every host's verdict, the
fleet medians), with 0.5% night-to-night noise and 1% of the hosts failing on a night. The last night
is a run directory again (20 hosts regressed by 5%, inside the fleet spread) and goes through
``report(..., history=STORE)``: the figures are the time to record that night and the time of the
report's history queries (own baselines over the window, fleet medians, verdict sequences, trends).
Usage::

    python bench/history_speed.py [--hosts 10000] [--nights 365] [--store PATH]

Goals (issue 13): recording one night <= 5 s, a report's history queries <= 2 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sb_fleet.history.history_store import open_store  # noqa: E402
from sb_fleet.report.analyse import report  # noqa: E402
from tests.synth.fleet import generate  # noqa: E402

GPUS, NICS = 8, 8


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def write_run(
    run: Path, night: int, when: dt.datetime, hosts: list[str], lines: list[str], unique: bool = False
) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": 2,
                "tool": "sb-fleet",
                "run_id": f"night-{night:03d}" + (f"-{os.getpid()}" if unique else ""),
                "created": when.isoformat(timespec="seconds"),
                "commands": [],
            }
        )
    )
    (run / "hosts.json").write_text(json.dumps({"schema_version": 1, "hosts": [{"name": h} for h in hosts]}))
    facts = run / "facts"
    facts.mkdir(exist_ok=True)
    for i, h in enumerate(hosts):
        f = {
            "host": h,
            "gpu_model": "NVIDIA A100-SXM4-80GB",
            "driver_version": "550.54.15",
            "gpus": [{"index": g, "uuid": f"GPU-{i:05d}-{g}", "serial": f"{i:05d}{g}"} for g in range(GPUS)],
            "nics": [{"name": f"mlx5_{n}", "node_guid": f"0c42:a103:{i:04x}:{n:04x}"} for n in range(NICS)],
        }
        (facts / f"{h}.json").write_text(json.dumps(f))
    (run / "results-summary.jsonl").write_text("\n".join(lines) + "\n")
    return run


def year(
    store: Path,
    d: Path,
    args: argparse.Namespace,
    rng: np.random.Generator,
    start: dt.datetime,
    hosts: list[str],
    lines: list[str],
) -> None:
    """Night 0 through the real path, then the nights of the year bulk-appended."""
    run0 = write_run(d / "night-000", 0, start, hosts, lines)
    t = time.perf_counter()
    r0 = report(run0, history=store)
    assert r0.history is not None
    print(
        f"night 0 through report(): {time.perf_counter() - t:.1f} s "
        f"(record {r0.history.record_seconds:.2f} s; {len(r0.fleet.columns)} metrics per host)",
        flush=True,
    )

    # The year in between: the same rows the real path writes, bulk-appended.
    t = time.perf_counter()
    with open_store(store) as st:
        base = st.sql("SELECT host, metric, cell, value FROM vals WHERE run = 1").fetchnumpy()
        fam = st.sql("SELECT family, median, n FROM fleet WHERE run = 1").fetchnumpy()
        layout = st.one("SELECT layout FROM runs WHERE run = 1")[0]  # the same cells in the same order
        hr = st.sql("SELECT host, gpu_model, facts FROM host_runs WHERE run = 1").fetchnumpy()
        n_vals, n_hosts = len(base["value"]), len(hr["host"])
        host_pos = {int(h): i for i, h in enumerate(hr["host"])}
        val_host_pos = np.array([host_pos[int(h)] for h in base["host"]], dtype=np.int64)
        for night in range(1, args.nights - 1):
            run = night + 1
            when = (start + dt.timedelta(days=night)).replace(tzinfo=None)
            failed = rng.random(n_hosts) < 0.01
            st.run(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    run,
                    f"night-{night:03d}",
                    f"bulk-{night}",
                    "bulk",
                    when,
                    when,
                    None,
                    "{}",
                    n_hosts,
                    True,
                    layout,
                ],
            )
            st.append(
                "host_runs",
                run=np.full(n_hosts, run, dtype=np.int32),
                host=hr["host"],
                verdict=np.where(failed, "fail", "pass").astype(object),
                outcome=np.full(n_hosts, "ok", dtype=object),
                reason=np.full(n_hosts, "", dtype=object),
                gpu_model=hr["gpu_model"],
                facts=hr["facts"],
                issues=np.full(n_hosts, None, dtype=object),
            )
            st.append(
                "vals",
                run=np.full(n_vals, run, dtype=np.int32),
                host=base["host"],
                metric=base["metric"],
                cell=base["cell"],
                ok=~failed[val_host_pos],
                value=base["value"] * (1 + rng.normal(0, 0.005, n_vals)),
            )
            st.append(
                "fleet",
                run=np.full(len(fam["family"]), run, dtype=np.int32),
                family=fam["family"],
                median=fam["median"] * (1 + rng.normal(0, 0.001, len(fam["family"]))),
                n=fam["n"],
            )
            if night % 60 == 0:
                print(f"  bulk night {night}: {time.perf_counter() - t:.0f} s", flush=True)
        st.run("CHECKPOINT")
        rows = st.one("SELECT count(*) FROM vals")[0]
    size = os.path.getsize(store) / 1e9
    print(
        f"bulk-inserted {args.nights - 2} nights in {time.perf_counter() - t:.0f} s: {rows:,} values, "
        f"store {size:.2f} GB",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=10000)
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--seed", type=int, default=20261123)
    ap.add_argument("--store", type=Path, help="keep the store here (default: a temporary directory)")
    ap.add_argument(
        "--reuse", action="store_true", help="--store exists: skip the year, time one more last night on it"
    )
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"before: {uptime()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="sb-fleet-history-bench-") as tmp:
        d = Path(tmp)
        store = args.store or d / "history.duckdb"
        reused = bool(args.reuse and store.exists())
        if store.exists() and not reused:
            raise SystemExit(f"{store} exists; give a new path (or --reuse)")
        t = time.perf_counter()
        synth = generate(args.hosts, args.seed, fault_fraction=0.0)
        hosts = synth.hosts
        start = dt.datetime(2025, 11, 23, 2, 0, tzinfo=dt.timezone.utc)
        print(f"generated a {args.hosts}-host night in {time.perf_counter() - t:.1f} s", flush=True)
        if not reused:
            year(store, d, args, rng, start, hosts, synth.lines)

        # The last night: a run directory again, 20 hosts regressed by 5% on one GPU's fp16 GEMM.
        last = args.nights - 1
        regressed = sorted(rng.choice(len(hosts), size=20, replace=False).tolist())
        lines, truth = [], set()
        for i, line in enumerate(synth.lines):  # the lines are in random order: the truth by name
            row = json.loads(line)
            for k, v in row.items():
                if isinstance(v, float):
                    row[k] = v * (1 + float(rng.normal(0, 0.005)))
            if i in regressed:
                row["gemm-flops/fp16_tc_flops:2"] = row["gemm-flops/fp16_tc_flops:2"] * 0.95
                truth.add(row["node"])
            lines.append(json.dumps(row))
        when = start + dt.timedelta(days=last, seconds=int(time.time()) % 86400 if reused else 0)
        run_last = write_run(d / f"night-{last:03d}", last, when, hosts, lines, reused)
        print(f"before the last night: {uptime()}", flush=True)
        t = time.perf_counter()
        r = report(run_last, history=store)
        total = time.perf_counter() - t
        v = r.history
        assert v is not None
        flagged = {g.host for g in v.regressions}
        print(
            f"last night ({args.hosts} hosts x {len(r.fleet.columns)} metrics, store of {args.nights - 1} nights):\n"
            f"  record one night:        {v.record_seconds:.2f} s   (goal <= 5 s)\n"
            f"  report history queries:  {v.query_seconds:.2f} s   (goal <= 2 s; window {len(v.window)} runs)\n"
            f"  facts read and keyed:    {v.prepare_seconds:.2f} s   ({args.hosts} facts files, GPU/NIC keys)\n"
            f"  whole report() call:     {total:.2f} s   (analysis of the fleet included)\n"
            f"  history steps (s):       {v.laps}\n"
            f"  regressed hosts found:   {len(flagged & truth)}/{len(truth)}, other hosts flagged: "
            f"{len(flagged - truth)}",
            flush=True,
        )
        if os.environ.get("HISTORY_BENCH_DEBUG"):
            for g in v.regressions:
                if g.host not in truth:
                    print("  extra:", g)
            print("  missed:", sorted(truth - flagged))
            for h in sorted(truth - flagged):
                print(
                    "   ",
                    [(i.check, i.metric, i.deviation) for x in r.hosts if x.name == h for i in x.issues][:3],
                )
        for cmd in (["history", str(store), "--last", "10"], ["history", str(store), "--host", hosts[0]]):
            t = time.perf_counter()
            p = subprocess.run(
                [str(Path(sys.executable).parent / "sb-fleet"), *cmd], capture_output=True, text=True
            )
            print(
                f"  sb-fleet {' '.join(cmd[:1] + cmd[2:])}: {time.perf_counter() - t:.2f} s (exit {p.returncode})"
            )
        print(f"after: {uptime()}", flush=True)


if __name__ == "__main__":
    main()
