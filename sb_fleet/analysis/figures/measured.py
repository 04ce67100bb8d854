"""The measured figures of a loaded fleet: what the run directory adds to the summary, then
:func:`sb_fleet.analysis.figures.figures.build_figures`.

A run directory adds each host's facts (nominal peaks, :mod:`sb_fleet.analysis.figures.peaks`) and its raw result
files (``raw/<host>/results/<key>/rank<N>.json``): the per-run values of a benchmark that ran
``run_count`` > 1 times (the summary keeps their mean) and the GEMM shape (``params``). A
results-summary.jsonl alone gives the summary's numbers only (SuperBench's own per-run columns
``<bench>/<run>/<metric>`` are read from the summary itself).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from sb_fleet import bounded_json
from sb_fleet.analysis.figures.figures import Figures, build_figures
from sb_fleet.analysis.figures.peaks import host_peaks, load_facts
from sb_fleet.analysis.fleet_results import Fleet
from sb_fleet.safe_files import safe_name

MAX_RAW_HOSTS = 500  # above this many hosts, per-run values are not read (report time stays flat)


def _read(p: Path) -> dict[str, Any] | None:
    try:
        data = bounded_json.read(p)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_run_files(
    run_dir: Path, hosts: list[str], columns: list[str]
) -> tuple[dict[str, dict[str, list[float]]], dict[str, tuple[int, int, int]]]:
    """Per-run values by summary column, and the GEMM shape, of each host's raw result files.

    A rank file's metric goes to the summary column ``<key>/<metric>:<rank>`` when the summary has
    it, else ``<key>/<metric>`` (a metric the node reduced, or a one-rank node): the summary's names
    decide, so the normaliser's naming rule is not repeated here.
    """
    known = set(columns)
    runs: dict[str, dict[str, list[float]]] = {}
    shapes: dict[str, tuple[int, int, int]] = {}
    for h in hosts:
        root = run_dir / "raw" / safe_name(h) / "results"
        if not root.is_dir():
            continue
        per: dict[str, list[float]] = {}
        for f in sorted(root.rglob("rank*.json")):
            data = _read(f)
            if data is None:
                continue
            key = f.parent.relative_to(root).as_posix()
            rank = f.stem[4:]
            result = data.get("result")
            if isinstance(result, dict) and int(data.get("run_count") or 0) > 1:
                for metric, vals in result.items():
                    if metric == "return_code" or not isinstance(vals, list) or len(vals) < 2:
                        continue
                    col = f"{key}/{metric}:{rank}"
                    if col not in known:
                        col = f"{key}/{metric}"
                    if col in known and col not in per:
                        per[col] = [
                            float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(v)
                        ]
            params = data.get("params")
            if key == "gemm-flops" and isinstance(params, dict) and h not in shapes:
                mnk = [params.get(x) for x in ("m", "n", "k")]
                m0 = mnk[0]
                if isinstance(m0, int) and m0 > 0:
                    n0 = mnk[1] if isinstance(mnk[1], int) and mnk[1] > 0 else m0
                    k0 = mnk[2] if isinstance(mnk[2], int) and mnk[2] > 0 else m0
                    shapes[h] = (m0, n0, k0)
        if per:
            runs[h] = per
    return runs, shapes


def figures_of(fleet: Fleet) -> Figures:
    """The figures of a fleet, with what its run directory (if any) adds."""
    peaks = {}
    runs: dict[str, dict[str, list[float]]] = {}
    shapes: dict[str, tuple[int, int, int]] = {}
    notes: list[str] = []
    if fleet.run_dir is not None:
        facts = load_facts(fleet.run_dir, fleet.hosts)
        peaks = {h: host_peaks(f) for h, f in facts.items()}
        if len(fleet.hosts) <= MAX_RAW_HOSTS:
            runs, shapes = load_run_files(fleet.run_dir, fleet.hosts, fleet.columns)
        else:
            notes.append(
                f"{len(fleet.hosts)} hosts: per-run values of the raw result files not read "
                f"(at most {MAX_RAW_HOSTS}); run-to-run spread only where the summary has per-run columns"
            )
        if fleet.hosts and not facts:
            notes.append("no facts/<host>.json in the run directory: no nominal peaks, no % of peak")
        said: dict[str, list[str]] = {}  # one line per distinct note, however many hosts share it
        for h, hp in peaks.items():
            for n in hp.notes:
                said.setdefault(n, []).append(h)
        for n, who in said.items():
            more = f" and {len(who) - 1} more host(s)" if len(who) > 1 else ""
            notes.append(f"{who[0]}{more}: {n}")
    figs = build_figures(fleet.hosts, fleet.columns, fleet.values, fleet.directions, peaks, runs, shapes)
    if notes:
        from dataclasses import replace

        figs = replace(figs, notes=figs.notes + tuple(notes[:20]))
    return figs
