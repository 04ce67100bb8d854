"""Speed of ``sb-fleet report`` on large fleets: wall time, peak memory and each output's share.

Each size runs the installed command in a fresh process (start-up and imports included), with ``-i``
(an inventory of every host, the missing ones too), on a SuperBench results-summary.jsonl of ~150
metrics per host with planted faults, writing every output (report.json, report.md, report.html,
junit.xml, quarantine.txt, metrics.prom), and reads the child's peak RSS from wait4(). Generation is
not timed. Python's bytecode caches are allowed (PYTHONDONTWRITEBYTECODE is dropped for the child) and
one untimed run comes first, as on a user's install, where pip compiles the package once.

Then, in another fresh process, the same report's stages are timed one by one (the analysis, then each
output: rendered and written as ``sb-fleet report`` does), so each output's share of the whole shows.
With ``--before DIR`` (another checkout, e.g. ``git archive <commit> sb_fleet | tar -x -C DIR``) the two
trees' runs alternate on the same fleet. Usage::

    python bench/analysis_speed.py [--sizes 1000,5000,10000] [--repeat 3] [--before DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

OUTPUTS = ("json", "md", "html", "junit", "quarantine", "prom")


def command() -> list[str]:
    exe = Path(sys.executable).parent / "sb-fleet"
    if exe.is_file():
        return [str(exe)]
    return [sys.executable, "-c", "from sb_fleet.cli.main import main; main()"]


def child_env(tree: Path) -> dict[str, str]:
    """The child's environment: bytecode caches on, ``tree``'s sb_fleet first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def run_once(tree: Path, src: Path, inv: Path, out: Path) -> tuple[float, float, float]:
    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    args = [*command(), "report", str(src), "-i", str(inv), "--out", str(out), "-q"]
    proc = subprocess.Popen(args, env=child_env(tree))
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"sb-fleet report failed with exit code {proc.returncode}")
    return wall, usage.ru_maxrss / 1024.0, usage.ru_utime + usage.ru_stime


def stages(src: Path, inv: Path, out: Path) -> dict[str, float]:
    """In this process (a fresh one): the seconds of the report's analysis and of each output, rendered
    and written as ``sb-fleet report`` does (figures_of and the plots' start are the html's share).

    Where the tree renders metrics.prom's benchmark families in a child beside the analysis
    (sb_fleet/report/writers/prom_early.py), ``prom`` is what this process still spends on the file (the
    other families, the wait for the child, the append and fsync) and ``prom_beside`` the child's share,
    timed again here afterwards (it is not in the total: it runs on the other core)."""
    import datetime as dt

    t0 = time.perf_counter()
    from sb_fleet.analysis.figures.measured import figures_of
    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.report.analyse import report
    from sb_fleet.report.writers import figures_html, plot_worker, quarantine
    from sb_fleet.report.writers import report_html as html
    from sb_fleet.report.writers import report_json as json_report
    from sb_fleet.report.writers import report_junit as junit
    from sb_fleet.report.writers import report_markdown as markdown
    from sb_fleet.report.writers import report_prometheus as prom
    from sb_fleet.safe_files import atomic_write_bytes

    try:
        from sb_fleet.report.writers import prom_early
    except ImportError:  # a tree from before it
        prom_early = None
    try:
        from sb_fleet.gc_pause import collector_paused
    except ImportError:  # a tree from before it
        collector_paused = contextlib.nullcontext

    out.mkdir(parents=True, exist_ok=True)
    took: dict[str, float] = {"imports": time.perf_counter() - t0}
    print(f"sb_fleet from {Path(prom.__file__).parents[3]}", file=sys.stderr)

    def timed(key: str, name: str, make: object) -> None:
        t = time.perf_counter()
        data = make()  # type: ignore[operator]
        atomic_write_bytes(out / name, data, mode=0o644)
        took[key] = took.get(key, 0.0) + time.perf_counter() - t

    settings = prom.PromSettings()
    with contextlib.ExitStack() as stack:
        stack.enter_context(collector_paused())  # as sb-fleet report does, where the tree has it
        stack.enter_context(plot_worker.started(src))
        t = time.perf_counter()
        fleet = load_fleet(src)
        part = None
        if prom_early is not None:
            part = stack.enter_context(prom_early.started(fleet, settings, out / "metrics.prom"))
            result = report(src, inventory=inv, loaded=fleet)
        else:
            result = report(src, inventory=inv)
        took["analysis"] = time.perf_counter() - t
        t = time.perf_counter()
        figs = figures_of(result.fleet)
        plots = figures_html.start_plots(figs)
        took["html"] = time.perf_counter() - t
        t = time.perf_counter()
        doc = json_report.build(result, figs)
        took["json"] = time.perf_counter() - t
        generated = dt.datetime.fromisoformat(doc["generated"])
        if part is not None:
            t = time.perf_counter()
            rest = prom.series(result, settings, prom.identity(result, generated), benchmarks=False)
            if not part.finish(rest.render(settings.openmetrics)):
                raise SystemExit("the benchmark families' child did not answer")
            took["prom"] = time.perf_counter() - t
        timed("json", "report.json", lambda: json_report.dumps(doc))
        timed("md", "report.md", lambda: markdown.render(result, figs).encode())
        timed("html", "report.html", lambda: html.render(result, doc, figs, plots).encode())
        timed("junit", "junit.xml", lambda: junit.render(result).encode())
        timed("quarantine", "quarantine.txt", lambda: quarantine.render(result).encode())
        if part is None:
            timed("prom", "metrics.prom", lambda: prom.render(result, settings, generated))
        else:
            t = time.perf_counter()
            prom.benchmark_series(result.fleet, settings).render(settings.openmetrics, end=False)
            took["prom_beside"] = time.perf_counter() - t
    return took


def shares(tree: Path, src: Path, inv: Path, out: Path) -> dict[str, float] | None:
    """:func:`stages` in a fresh process of ``tree``; None when that tree cannot run it."""
    code = (
        "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "from analysis_speed import stages; "
        "print(json.dumps(stages(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))))"
    )
    args = [sys.executable, "-c", code, str(ROOT / "bench"), str(src), str(inv), str(out)]
    p = subprocess.run(args, env=child_env(tree), capture_output=True, text=True, cwd=tree)
    if p.returncode != 0:
        print(f"  ({tree}: the stages could not be timed: {p.stderr.strip().splitlines()[-1:]})")
        return None
    if f"sb_fleet from {tree}" not in p.stderr:
        raise SystemExit(f"the stages of {tree} ran another tree's sb_fleet: {p.stderr.strip()}")
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,10000")
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs per size and tree; the best wall and cpu time are shown"
    )
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--before", type=Path, help="another checkout to time beside this one")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))  # here only: stages() imports the sb_fleet of the tree it times
    from tests.synth.fleet import generate

    sizes = [int(x) for x in args.sizes.split(",")]
    trees = {"this": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    rows = []
    parts: dict[tuple[str, int], dict[str, float] | None] = {}
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sb-fleet-bench-") as d:
        for n in sizes:
            fleet = generate(n, seed=args.seed + n)
            src = Path(d) / f"fleet-{n}.jsonl"
            src.write_text(fleet.text)
            inv = Path(d) / f"inventory-{n}.ini"
            inv.write_text("[gpu]\n" + "\n".join(fleet.hosts) + "\n")
            metrics = len(json.loads(fleet.lines[0])) - 1
            runs: dict[str, list[tuple[float, float, float]]] = {t: [] for t in trees}
            for tree in trees.values():  # untimed: bytecode caches written, files in the page cache
                run_once(tree, src, inv, Path(d) / f"out-{n}")
            for _ in range(args.repeat):  # the trees alternate: the machine's drift is shared
                for name, tree in trees.items():
                    runs[name].append(run_once(tree, src, inv, Path(d) / f"out-{n}"))
            out_mb = sum(p.stat().st_size for p in (Path(d) / f"out-{n}").iterdir()) / 1e6
            size_mb = src.stat().st_size / 1e6
            for name, tree in trees.items():
                best = min(r[0] for r in runs[name])
                peak = max(r[1] for r in runs[name])
                cpu = min(r[2] for r in runs[name])
                rows.append((name, n, metrics, size_mb, best, cpu, peak, out_mb))
                parts[(name, n)] = shares(tree, src, inv, Path(d) / f"stages-{n}")
    load_end = os.getloadavg()
    print(
        f"load average (1, 5, 15 min): {' '.join(f'{x:.1f}' for x in load_start)} at the start, "
        f"{' '.join(f'{x:.1f}' for x in load_end)} at the end, on {os.cpu_count()} cores "
        f"(other work on the machine inflates wall time)"
    )
    print(
        f"{'tree':>6} {'hosts':>7} {'metrics':>8} {'input MB':>9} {'wall s':>8} {'cpu s':>7} "
        f"{'peak RSS MB':>12} {'cpu us/host':>12} {'outputs MB':>11}"
    )
    for name, n, m, size_mb, wall, cpu, peak, out_mb in rows:
        print(
            f"{name:>6} {n:>7} {m:>8} {size_mb:>9.1f} {wall:>8.2f} {cpu:>7.2f} {peak:>12.0f} "
            f"{cpu / n * 1e6:>12.0f} {out_mb:>11.1f}"
        )
    print(
        "\nstages, one run in a fresh process (s; share of their total; the plots' helper beside them;"
        " beside: metrics.prom's benchmark families, rendered by a child during the analysis, not in the total):"
    )
    keys = ("imports", "analysis", *OUTPUTS)
    print(f"{'tree':>6} {'hosts':>7} " + " ".join(f"{k:>14}" for k in keys) + f" {'total':>7} {'beside':>7}")
    for (name, n), took in parts.items():
        if took is None:
            continue
        total = sum(took.get(k, 0.0) for k in keys)
        cells = " ".join(f"{took.get(k, 0.0):>6.3f} {100 * took.get(k, 0.0) / total:>5.1f}%" for k in keys)
        beside = f"{took['prom_beside']:>7.3f}" if "prom_beside" in took else f"{'-':>7}"
        print(f"{name:>6} {n:>7} {cells} {total:>7.2f} {beside}")
    this = [r for r in rows if r[0] == "this"]
    if len(this) >= 2:
        first, last = this[0], this[-1]
        # Cost per extra host: the slope between the smallest and largest fleet (start-up cancels out).
        slope = (last[5] - first[5]) / (last[1] - first[1]) * 1e6
        print(
            f"growth: {last[1] / first[1]:.0f}x hosts -> {last[5] / first[5]:.1f}x cpu; {slope:.0f} us cpu per extra host"
        )


if __name__ == "__main__":
    main()
