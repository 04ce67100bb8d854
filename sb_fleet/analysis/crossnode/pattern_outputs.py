"""A pattern run's own files in the run directory, written after collect (offline, from raw/ alone):

* ``mpi_pattern.txt``: every pattern entry's rounds in SuperBench's format (its ``./output`` file);
* ``pairs/<entry>.json``: the pair matrix (each pair's figure, round and group, or why it has none),
  the localisation (node, NIC, path or link culprits with evidence and confidence), and the second
  pass that would confirm them (rounds of suspects paired with known-good hosts).

The report renders ``pairs/*.json`` as heatmaps (sb_fleet/analysis/crossnode/pair_map.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sb_fleet.analysis.crossnode.localise import localise, second_pass
from sb_fleet.analysis.crossnode.pair_results import matrix_from_results
from sb_fleet.config.traffic_patterns import PatternSpec
from sb_fleet.errors import SbFleetError
from sb_fleet.plan.pattern_plan import load_topology
from sb_fleet.plan.run_plan import Plan
from sb_fleet.rundir.normalize import summarize_host
from sb_fleet.rundir.rundir import RunDir
from sb_fleet.safe_files import atomic_write_text, safe_name

PAIRS_DIR = "pairs"


def write_pattern_outputs(rd: RunDir, plan: Plan) -> list[Path]:
    """Write the files above for every pattern entry of ``plan``; the paths written."""
    if not plan.patterns:
        return []
    written = [rd.path / "mpi_pattern.txt"]
    atomic_write_text(written[0], "".join(p["mpi_pattern"] for p in plan.patterns.values()))
    records, statuses = round_records(rd, plan.hosts)
    for key, info in plan.patterns.items():
        matrix = matrix_from_results(records, info["rounds"], plan.hosts, key, statuses)
        if matrix is None:
            continue
        distance = leaves = None
        if info.get("pattern"):
            try:
                topo = load_topology(PatternSpec.model_validate(info["pattern"]))
            except (SbFleetError, ValueError):
                topo = None  # the fabric files are gone: the verdicts go without path culprits
            if topo is not None:
                distance, leaves = topo.distance, topo.leaves
        loc = localise(matrix, distance, leaves)
        doc = {
            "entry": key,
            "pattern": info.get("type"),
            "launcher": info.get("launcher"),
            "matrix": matrix.to_json(),
            "localisation": loc.to_json(),
            "second_pass": [[list(p) for p in rnd] for rnd in second_pass(loc, plan.hosts)],
        }
        rd.sub(PAIRS_DIR)
        written.append(rd.write_json(f"{PAIRS_DIR}/{safe_name(key)}.json", doc))
    return written


Records = dict[str, dict[str, object]]  # host -> metric -> value
Statuses = dict[str, dict[str, dict[str, object]]]  # host -> entry or round key -> {"status", "reason"}


def round_records(rd: RunDir, hosts: Sequence[str]) -> tuple[Records, Statuses]:
    """Every collected host's metrics and entry statuses with each pattern round kept apart."""
    records: Records = {}
    statuses: Statuses = {}
    for h in hosts:
        raw = rd.path / "raw" / safe_name(h)
        if not raw.is_dir():
            continue
        rec = summarize_host(h, raw, merge_rounds=False)
        records[h] = dict(rec.metrics)
        statuses[h] = {k: st.to_json() for k, st in rec.statuses.items()}
    return records, statuses
