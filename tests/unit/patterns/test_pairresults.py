"""The pair matrix from normalised results named as SuperBench names pattern figures."""

from __future__ import annotations

from pathlib import Path

from sb_fleet.analysis.crossnode.localise import localise
from sb_fleet.analysis.crossnode.pair_results import matrix_from_results, parse_mpi_pattern, pattern_figures
from sb_fleet.config.traffic_patterns import base_key, mpi_pattern_text, pair_wise, round_key

DATA = Path(__file__).parent / "data"


def test_mpi_pattern_file_parses_back_to_the_schedule():
    sched = pair_wise([f"node{i}" for i in range(8)])
    parsed = parse_mpi_pattern(mpi_pattern_text("tcp-bw", sched))
    assert parsed["tcp-bw"][0] == "pair-wise"
    assert [[tuple(g) for g in rnd] for rnd in parsed["tcp-bw"][1]] == [list(r) for r in sched.rounds]
    sb = parse_mpi_pattern((DATA / "mpi_pattern.txt").read_text())
    assert sb["test_benchmark"][0] == "topo-aware"  # the last section of SuperBench's file wins its name
    assert len(sb["test_benchmark"][1]) == 3


def test_round_keys():
    assert round_key("nccl-bw", 3) == "nccl-bw@3" and base_key("nccl-bw@3") == "nccl-bw"
    assert base_key("model-benchmarks:foo") == "model-benchmarks:foo" and base_key("a@b") == "a@b"


def test_matrix_from_results_names_a_slow_host_and_a_timed_out_pair():
    hosts = [f"h{i}" for i in range(6)]
    sched = pair_wise(hosts)
    records: dict[str, dict[str, object]] = {h: {} for h in hosts}
    statuses: dict[str, dict[str, dict[str, object]]] = {h: {} for h in hosts}
    for s, rnd in enumerate(sched.rounds):
        for p, (a, b) in enumerate(rnd):
            if {a, b} == {"h1", "h4"}:
                statuses[a][round_key("tcp-bw", s)] = {
                    "status": "timeout",
                    "reason": "killed at its timeout of 20 s",
                }
                continue
            v = 1.5 * (0.1 if "h2" in (a, b) else 1.0)
            records[a][f"tcp-bw/tcp_{s}_{p}:16777216_bw"] = v
            records[a][f"tcp-bw/tcp_{s}_{p}:16777216_tx_bw"] = v  # not a pair figure: left out
            records[a][f"tcp-bw/tcp_{s}_{p}:1024_bw"] = 9.0  # a smaller size: not the series shown
    m = matrix_from_results(records, sched.rounds, hosts, "tcp-bw", statuses)
    assert m is not None and len(m.pairs) == 15
    assert m.metric == "tcp-bw/tcp_<round>_<pair>:16777216_bw"
    hung = [p for p in m.pairs if p.status != "ok"]
    assert len(hung) == 1 and hung[0].status == "timeout" and "killed at its timeout" in hung[0].reason
    loc = localise(m)
    assert [(c.kind, c.target) for c in loc.culprits] == [("node", "h2"), ("link", "h1 <-> h4")]
    assert len(pattern_figures(records, "tcp-bw")) == 14 * 3
    assert matrix_from_results(records, sched.rounds, hosts, "nccl-bw") is None
