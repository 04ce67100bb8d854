"""What an acceptance campaign's soak costs the control node, beyond its rounds' own validate runs: the state
saved after every round, the soak's judgement over every round, the records and the report; measured at
50-200 nodes x 20-200 rounds and extrapolated to a 72-hour soak of 1-minute rounds (4,320) on 1,000 nodes.

The rounds are real-shaped: a finished campaign's directory (``--template``, e.g. the one
``SB_FLEET_ACCEPT_SOAK=10m/1m pytest tests/integration/test_accept.py --basetemp=DIR`` leaves in
``DIR/test_a_campaign_gates_soaks_an0/campaign``) gives its soak rounds' run directories, each node's files
in them (report rows, figures with their measured noise, the health document with its counters), and
each synthetic node is one of its nodes renamed (node ``k`` is template node ``k mod n``; round ``r`` is
template round ``r mod m``): the judgement reads, parses and judges what it would on a real fleet. Each
case builds in a process of its own, and the soak's end (judgement, records, pages) runs in a fresh process (its peak RSS is what the soak's end takes). The disk a round takes is read from the
template's real round directories (per node and per round).

Every round goes through the runner's hook as it finishes (the state saved, the round's line written to the
soak's series file, its run directory compacted: sb_fleet/campaign/round_compaction.py, ``keep_rounds:
failed``), the judgement reads the series file, the records and the pages are written: each case prints the
hook's CPU a round, the judgement's, the memory, and the campaign directory's size after it all (a file's
apparent size; the synthetic rounds hold each node's health document, raw results and facts, the round's
shared files; their playbooks are not copied, the first round is counted whole from the template's).
``CAMPAIGN_COST_KEEP_PAGES=DIR`` keeps each case's campaign.html and campaign-nodes/ there.

Usage::

    python bench/campaign_cost.py --template DIR [--hosts 10 40] [--rounds 500 2000] [--cases 1000x20]

What a round's validate itself costs the control node (SSH, Ansible, collect, the round's report) is
measured by bench/scale.py (docs/speed.md); this script prints it beside its own figures for the total.
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
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_HOSTS, TARGET_ROUNDS = 1000, 4320  # 72 hours of 1-minute rounds
# The files of a round's run directory the judgement reads (report rows, figures, noise, the hosts and their
# outcomes); health/<host>.json is linked per node.
SHARED = [
    "manifest.json",
    "report.json",
    "results-summary.jsonl",
    "noise-summary.jsonl",
    "hosts.json",
    "invalid-values.json",
    "outcomes.json",
    "outcomes/run.json",
    "outcomes/check.json",
    "outcomes/collect.json",
    "outcomes/benchmarks.json",
    "outcomes/deploy.json",
]

# The round's files that do not grow with its nodes (a compacted round keeps them; the playbooks and the
# suite's archive go)
FIXED = ["config.yaml", "config.json", "metrics.json"]

CAMPAIGN = """\
version: 1
description: campaign_cost synthetic soak
stages:
  - name: soak
    kind: soak
    benchmarks: [gemm-flops]
    duration: {rounds}m
    round: 1m
    watch: [gpu.xid, gpu.row_remap, ib.symbol_error, ib.link_downed]
    max_failed_rounds: 0
    drift: {{k: 3, min_change: 0.05, min_rounds: 5, metrics: [gemm-flops/fp32_flops]}}
"""


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _expand(doc: Any, mapping: dict[str, list[str]]) -> Any:
    """``doc`` with every per-host entry (a dict keyed by template host names, a list item naming one in
    ``name``/``host``/``node``) replicated for the synthetic hosts that map to it, names replaced."""

    def renamed(entry: Any, old: str, new: str) -> Any:
        return json.loads(json.dumps(entry).replace(f'"{old}"', f'"{new}"').replace(f"/{old}", f"/{new}"))

    if isinstance(doc, dict):
        if doc and set(doc) & set(mapping) and all(k in mapping for k in doc):
            return {new: renamed(v, old, new) for old, v in doc.items() for new in mapping[old]}
        return {k: _expand(v, mapping) for k, v in doc.items()}
    if isinstance(doc, list):
        out: list[Any] = []
        for item in doc:
            key = next(
                (
                    item[k]
                    for k in ("name", "host", "node")
                    if isinstance(item, dict) and item.get(k) in mapping
                ),
                None,
            )
            if key is None:
                out.append(_expand(item, mapping))
            else:
                out += [renamed(item, key, new) for new in mapping[key]]
        return out
    return doc


def _expand_file(src: Path, dst: Path, mapping: dict[str, list[str]]) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.suffix == ".jsonl":
        lines = []
        for line in src.read_text().splitlines():
            row = json.loads(line)
            old = row.get("node")
            lines += (
                [json.dumps({**row, "node": new}) for new in mapping.get(old, [])]
                if old in mapping
                else [line]
            )
        dst.write_text("\n".join(lines) + "\n")
    else:
        dst.write_text(json.dumps(_expand(json.loads(src.read_text()), mapping)))


def _link(src: Path | str, dst: Path | str) -> None:
    """A hard link, or a copy where the template is on another file system (TMPDIR=/dev/shm)."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _template(campaign_dir: Path) -> tuple[list[Path], Path, list[str]]:
    state = json.loads((campaign_dir / "campaign-state.json").read_text())
    ((stage, rounds),) = state["soak_rounds"].items()
    hosts = rounds[0].get("hosts")
    dirs = [campaign_dir / r["run_dir"] for r in rounds]
    closing = sorted(campaign_dir.glob(f"runs/{stage}-closing-check*"))[-1]
    return dirs, closing, list(hosts)


def build(work: Path, template: Path, n_hosts: int, n_rounds: int) -> tuple[Path, list[str]]:
    """A synthetic campaign directory's soak rounds (run directories only; the state is built by the case)."""
    dirs, closing, tmpl_hosts = _template(template)
    hosts = [f"n{k:05d}" for k in range(n_hosts)]
    mapping: dict[str, list[str]] = {h: [] for h in tmpl_hosts}
    for k, h in enumerate(hosts):
        mapping[tmpl_hosts[k % len(tmpl_hosts)]].append(h)
    d = work / "campaign"
    d.mkdir(mode=0o700)
    expanded: dict[Path, Path] = {}
    for src in [*dirs, closing]:
        out = work / "expanded" / src.name
        for name in SHARED:
            if (src / name).is_file():
                _expand_file(src / name, out / name, mapping)
        (out / "health").mkdir(parents=True, exist_ok=True)
        for old, news in mapping.items():
            for new in news:
                if (src / "health" / f"{old}.json").is_file():  # none where the node failed the round
                    _link(src / "health" / f"{old}.json", out / "health" / f"{new}.json")
                if (src / "facts" / f"{old}.json").is_file():
                    (out / "facts").mkdir(exist_ok=True)
                    _link(src / "facts" / f"{old}.json", out / "facts" / f"{new}.json")
                if (
                    src / "raw" / old
                ).is_dir():  # its raw results (what a compacted round keeps of a failed node)
                    shutil.copytree(src / "raw" / old, out / "raw" / new, copy_function=_link)
        for name in FIXED:
            if (src / name).is_file() and not (out / name).exists():
                _link(src / name, out / name)
        expanded[src] = out
    for r in range(1, n_rounds + 1):
        src = expanded[dirs[(r - 1) % len(dirs)]]
        shutil.copytree(src, d / "runs" / f"soak-round-{r:04d}", copy_function=os.link)
    shutil.copytree(expanded[closing], d / "runs" / "soak-closing-check", copy_function=os.link)
    return d, hosts


def case(template: Path, n_hosts: int, n_rounds: int) -> dict[str, Any]:
    """One (hosts, rounds) case, in this process: build, then time the machinery on it."""
    from sb_fleet.campaign.campaign_state import CampaignState, RoundRecord, save_state
    from sb_fleet.campaign.round_columns import series_file
    from sb_fleet.campaign.round_compaction import RoundCompactor
    from sb_fleet.config.campaign_spec import load_campaign
    from sb_fleet.report.campaign_report import NODE_PAGES

    work = Path(tempfile.mkdtemp(prefix="sbf-campaign-cost-"))
    try:
        d, hosts = build(work, template, n_hosts, n_rounds)
        cfile = work / "campaign.yaml"
        cfile.write_text(CAMPAIGN.format(rounds=n_rounds))
        campaign = load_campaign(cfile)
        stage = campaign.spec.stages[0]
        t0 = datetime(2026, 11, 29, tzinfo=timezone.utc)
        state = CampaignState.new(campaign, hosts, t0)
        state.start_stage(stage.name, hosts, 1, t0)
        save_state(d, state)
        saves: list[tuple[float, float]] = []
        compactions: list[tuple[float, float]] = []
        full_bytes = _bytes(d)
        compactor = RoundCompactor(d, stage)
        for r in range(1, n_rounds + 1):
            start, end = t0 + timedelta(minutes=r - 1), t0 + timedelta(minutes=r - 1, seconds=50)
            rec = RoundRecord(r, start.isoformat(), end.isoformat(), f"runs/soak-round-{r:04d}", list(hosts))
            c0, w0 = time.process_time(), time.perf_counter()
            state.record_round(stage.name, rec, end)
            save_state(d, state)
            saves.append((time.process_time() - c0, time.perf_counter() - w0))
            c0, w0 = time.process_time(), time.perf_counter()
            compactor.catch_up(state.soak_rounds[stage.name])  # the runner's hook: the line, then compaction
            compactions.append((time.process_time() - c0, time.perf_counter() - w0))
        del compactor
        state_bytes = (d / "campaign-state.json").stat().st_size
        runs_bytes = _bytes(d / "runs")
        series_bytes = (d / series_file(stage.name)).stat().st_size
        build_rss = _rss_mb()
        # The soak's end in a process of its own: its peak RSS is the judgement's, records' and pages' alone
        # (this process's holds the synthetic build), as accept's would be at the soak's end.
        out = subprocess.run(
            [sys.executable, __file__, "--template", str(template), "--judge", str(d), str(cfile)],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-3000:])
        end = json.loads(out.stdout.strip().splitlines()[-1])
        pages = d / NODE_PAGES
        sizes = {
            "runs_full": full_bytes,
            "runs_compacted": runs_bytes,
            "series": series_bytes,
            "node_pages": _bytes(pages),
            "node_page_max": max((p.stat().st_size for p in pages.iterdir()), default=0),
            "campaign_dir": _bytes(d),
            "state": (d / "campaign-state.json").stat().st_size,
            "soak_json": (d / "soak-soak.json").stat().st_size
            + (d / "soak-soak-rounds.jsonl").stat().st_size,
            "acceptance": sum(p.stat().st_size for p in (d / "acceptance").iterdir()),
            "campaign_html": (d / "campaign.html").stat().st_size,
            "campaign_md": (d / "campaign.md").stat().st_size,
        }
        return {
            "hosts": n_hosts,
            "rounds": n_rounds,
            "save_cpu_last": sum(c for c, _ in saves[-5:]) / min(5, len(saves)),
            "save_wall_last": sum(w for _, w in saves[-5:]) / min(5, len(saves)),
            "save_cpu_total": sum(c for c, _ in saves),
            "compact_cpu_mean": sum(c for c, _ in compactions) / len(compactions),
            "compact_wall_mean": sum(w for _, w in compactions) / len(compactions),
            "compact_cpu_total": sum(c for c, _ in compactions),
            "state_bytes_before_judgement": state_bytes,
            "build_rss_mb": build_rss,
            **end,
            "sizes": sizes,
        }
    finally:
        keep = os.environ.get("CAMPAIGN_COST_KEEP_PAGES")
        if keep and (work / "campaign" / "campaign.html").is_file():
            dst = Path(keep) / f"{n_hosts}x{n_rounds}"
            shutil.rmtree(dst, ignore_errors=True)
            dst.mkdir(parents=True)
            shutil.copy(work / "campaign" / "campaign.html", dst)
            shutil.copytree(work / "campaign" / NODE_PAGES, dst / NODE_PAGES)
        shutil.rmtree(work, ignore_errors=True)


def soak_end(d: Path, cfile: Path) -> dict[str, Any]:
    """The soak's end on a built campaign directory, in this (fresh) process: the judgement over every
    round, the stage's gate, the records and the pages; their CPU, wall time and this process's peak RSS."""
    from sb_fleet.campaign.acceptance_record import write_records
    from sb_fleet.campaign.campaign_state import load_state, save_state
    from sb_fleet.campaign.gating import gate_stage, soak_outcome
    from sb_fleet.config.campaign_spec import load_campaign
    from sb_fleet.fleet.campaign_run import soak_evidence, soak_judgement
    from sb_fleet.report.campaign_report import write_campaign_report

    campaign = load_campaign(cfile)
    stage = campaign.spec.stages[0]
    state = load_state(d, campaign.digest)
    hosts = list(state.hosts)
    n_rounds = len(state.soak_rounds[stage.name])
    rss0 = _rss_mb()
    c0, w0 = time.process_time(), time.perf_counter()
    judged = soak_judgement(d, state, stage, hosts, d / "runs" / "soak-closing-check")
    judge_cpu, judge_wall = time.process_time() - c0, time.perf_counter() - w0
    rss_judged = _rss_mb()
    assert len(judged) == len(hosts) and all(n.rounds == n_rounds for n in judged.values()), (
        "not every round read"
    )
    judged_trends = sum(1 for n in judged.values() for t in n.trends if t.metric == "gemm-flops/fp32_flops")
    round_dirs = {r.index: r.run_dir for r in state.soak_rounds[stage.name]}
    outcomes = {
        h: soak_outcome(n, soak_evidence(n, round_dirs, "soak-soak.json", "runs/soak-closing-check"))
        for h, n in judged.items()
    }
    c0, w0 = time.process_time(), time.perf_counter()
    t_end = datetime(2026, 11, 29, tzinfo=timezone.utc) + timedelta(minutes=n_rounds)
    state.apply(gate_stage(stage, hosts, outcomes), t_end)
    state.finish_stage(stage.name, t_end)
    state.finish(t_end)
    save_state(d, state)
    write_records(d, state, campaign, t_end.isoformat(), None)
    write_campaign_report(d, state, campaign, t_end.isoformat())
    records_cpu, records_wall = time.process_time() - c0, time.perf_counter() - w0
    verdicts: dict[str, int] = {}
    for n in state.hosts.values():
        verdicts[n.status] = verdicts.get(n.status, 0) + 1
    return {
        "judge_cpu": judge_cpu,
        "judge_wall": judge_wall,
        "rss_before_mb": rss0,
        "rss_peak_mb": rss_judged,
        "records_report_cpu": records_cpu,
        "records_report_wall": records_wall,
        "peak_rss_mb": _rss_mb(),
        "judged_trends": judged_trends,
        "verdicts": verdicts,
    }


def _bytes(path: Path) -> int:
    """The apparent size of every file under ``path`` (a hard link counted as the file it stands for)."""
    return sum(p.lstat().st_size for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink())


def round_disk(template: Path) -> dict[str, float]:
    """A real round's run directory on disk: its bytes per node (the node's own files and its share of the
    shared ones) and per round (the playbooks, the suite's archive, Ansible's artifacts)."""
    dirs, _closing, hosts = _template(template)
    per_host, fixed = [], []
    for rd in dirs:
        own = 0
        total = 0
        for p in rd.rglob("*"):
            if not p.is_file():
                continue
            size = p.stat().st_size
            total += size
            parts = p.relative_to(rd).parts
            if parts[0] in ("playbooks", "ansible", "inventory") or p.name in (
                "config.yaml",
                "config.json",
                "plan.json",
            ):
                continue
            own += size
        per_host.append(own / len(hosts))
        fixed.append(total - own)
    return {"per_host_round": sum(per_host) / len(per_host), "per_round": sum(fixed) / len(fixed)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--template", type=Path, required=True, help="a finished campaign's directory")
    ap.add_argument("--hosts", type=int, nargs="+", default=[10, 40])
    ap.add_argument("--rounds", type=int, nargs="+", default=[500, 2000])
    ap.add_argument(
        "--cases", nargs="+", default=["1000x20"], help="more cases besides --hosts x --rounds: NODESxROUNDS"
    )
    ap.add_argument("--case", type=int, nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--judge", type=Path, nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help="write every case's figures here")
    args = ap.parse_args()
    if args.case:
        print(json.dumps(case(args.template, *args.case)))
        return 0
    if args.judge:
        print(json.dumps(soak_end(*args.judge)))
        return 0
    results = []
    print(
        f"{'hosts':>6} {'rounds':>6} {'save/round':>11} {'round hook':>11} {'judge CPU':>10} {'per host-round':>15} "
        f"{'peak RSS':>9} {'records+report':>15} {'series':>8} {'runs kept':>10} {'dir':>9} {'html':>8}"
    )
    grid = [(h, r) for h in args.hosts for r in args.rounds]
    grid += [(int(a), int(b)) for a, b in (c.split("x") for c in args.cases or [])]
    for h, r in grid:
        out = subprocess.run(
            [sys.executable, __file__, "--template", str(args.template), "--case", str(h), str(r)],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            return 1
        x = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(x)
        hr, z = h * r, x["sizes"]
        print(
            f"{h:>6} {r:>6} {x['save_cpu_last'] * 1000:>9.1f}ms {x['compact_cpu_mean'] * 1000:>9.1f}ms "
            f"{x['judge_cpu']:>9.2f}s {x['judge_cpu'] / hr * 1e6:>12.0f} us {x['peak_rss_mb']:>7.0f}MB "
            f"{x['records_report_cpu']:>14.2f}s {z['series'] / 1e6:>6.1f}MB {z['runs_compacted'] / 1e6:>8.1f}MB "
            f"{z['campaign_dir'] / 1e6:>7.1f}MB {z['campaign_html'] / 1e6:>6.2f}MB",
            flush=True,
        )
    disk = round_disk(args.template)
    n, R = TARGET_HOSTS, TARGET_ROUNDS

    def fit(get, hosts: int = n, rounds: int = R) -> float:  # noqa: ANN001
        """y = a + b nodes + c rounds + e nodes x rounds, least squares over every case; at hosts x rounds."""
        import numpy as np

        x = np.array([[1.0, c["hosts"], c["rounds"], c["hosts"] * c["rounds"]] for c in results])
        y = np.array([get(c) for c in results], dtype=float)
        coef = np.linalg.lstsq(x, y, rcond=None)[0]
        return float(coef @ np.array([1.0, hosts, rounds, hosts * rounds]))

    def per_node_round(get) -> float:  # noqa: ANN001
        """The figure per node-round of the largest case (the least fixed cost in it)."""
        c = max(results, key=lambda c: c["hosts"] * c["rounds"])
        return float(get(c)) / (c["hosts"] * c["rounds"])

    judge_cpu = fit(lambda x: x["judge_cpu"])
    judge_cpu_hi = per_node_round(lambda x: x["judge_cpu"]) * n * R
    judge_mem = fit(lambda x: x["rss_peak_mb"] - x["rss_before_mb"])
    peak = fit(lambda x: x["peak_rss_mb"])
    peak_hi = per_node_round(lambda x: x["peak_rss_mb"]) * n * R
    records = fit(lambda x: x["records_report_cpu"])
    hook = fit(lambda x: x["compact_cpu_mean"] + x["save_cpu_last"])  # CPU-s a round at n nodes
    hook_wall = fit(lambda x: x["compact_wall_mean"] + x["save_wall_last"])
    series = per_node_round(lambda x: x["sizes"]["series"]) * n * R
    soak_json = per_node_round(lambda x: x["sizes"]["soak_json"]) * n * R
    # the compacted rounds: what each round keeps (its fixed files and marker) and what each node keeps (its
    # files of at most 20 rounds, a bound the long cases reach), fitted; the first round whole besides
    kept = fit(lambda x: x["sizes"]["runs_compacted"])
    first = disk["per_host_round"] * n + disk["per_round"]
    rest = fit(lambda x: x["sizes"]["campaign_dir"] - x["sizes"]["runs_compacted"] - x["sizes"]["series"])
    total = kept + first + series + rest
    html_at_n = [c["sizes"]["campaign_html"] for c in results if c["hosts"] == n]
    html = max(html_at_n) if html_at_n else fit(lambda x: x["sizes"]["campaign_html"])
    state = fit(lambda x: x["sizes"]["state"])
    full = disk["per_host_round"] * n * R + disk["per_round"] * R
    print()
    print(
        f"a real round's run directory: {disk['per_host_round'] / 1e3:.1f} KB per node, "
        f"{disk['per_round'] / 1e3:.0f} KB per round (playbooks, the suite's archive, Ansible's artifacts): "
        f"{full / 1e9:.0f} GB at {n} nodes x {R} rounds, kept whole"
    )
    hs, rs = [c["hosts"] for c in results], [c["rounds"] for c in results]
    print(
        f"extrapolated to {n} nodes x {R} rounds ({len(results)} cases, {min(hs)}-{max(hs)} nodes x "
        f"{min(rs)}-{max(rs)} rounds; fits a + b nodes + c rounds + e nodes x rounds, or the largest per "
        "node-round):"
    )
    print(
        f"  after each round: the state saved, the round's line written and its directory compacted: "
        f"{hook:.2f} CPU-s ({hook_wall:.2f} s wall) at {n} nodes, {hook * R / 60:.0f} CPU-min over the soak (the save at the soak's end)"
    )
    print(
        f"  the soak's judgement at its end: {judge_cpu / 60:.1f} CPU-min (at the largest per node-round: "
        f"{judge_cpu_hi / 60:.1f}), {judge_mem / 1024:.2f} GB of memory above the process's at its start; "
        f"the soak's end (judgement, records, pages) in a process of its own: peak {peak / 1024:.2f} GB "
        f"(fitted; at the largest case's per node-round {peak_hi / 1024:.2f} GB, an upper bound: the "
        f"interpreter's own ~40 MB scaled too); records and report {records / 60:.1f} CPU-min"
    )
    print(
        f"  the campaign directory: {total / 1e9:.1f} GB: the series file {series / 1e9:.2f} GB, the compacted "
        f"rounds {kept / 1e9:.2f} GB and the first round whole {first / 1e9:.2f} GB, the rest (soak json "
        f"{soak_json / 1e9:.2f} GB, state {state / 1e6:.0f} MB, records, pages) {rest / 1e9:.2f} GB"
    )
    print(f"  campaign.html: {html / 1e6:.1f} MB ({'measured' if html_at_n else 'fitted'} at {n} nodes)")
    if args.json:
        args.json.write_text(json.dumps({"cases": results, "disk": disk}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
