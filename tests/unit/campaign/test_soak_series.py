"""A soak's rounds kept in columns (sb_fleet.campaign.soak_series): judging a node from them finds what
judging its every reading finds, the counters' readings kept only next to a change."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from sb_fleet.analysis.soak import Measurement, SoakCriteria, SoakRound, judge_node
from sb_fleet.campaign.campaign_state import RoundRecord
from sb_fleet.campaign.soak_series import (
    END,
    START,
    CounterSeries,
    NodeSeries,
    judge_series,
    node_rounds,
    series_json,
)

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)
CRIT = SoakCriteria(drift_min_rounds=5)


def _records(n: int) -> list[RoundRecord]:
    return [
        RoundRecord(
            i,
            (T0 + timedelta(minutes=i - 1)).isoformat(),
            (T0 + timedelta(minutes=i - 1, seconds=50)).isoformat(),
            f"runs/soak-round-{i:02d}",
            ["h"],
        )
        for i in range(1, n + 1)
    ]


def test_a_counter_keeps_its_first_and_last_reading_and_those_next_to_a_change():
    cs = CounterSeries()
    for pos, v in enumerate([0, 0, 0, 7, 7, 7, 3, 3]):
        cs.add(pos, START, v)
    assert cs.readings() == [
        (0, START, 0),
        (2, START, 0),
        (3, START, 7),
        (5, START, 7),
        (6, START, 3),
        (7, START, 3),
    ]
    flat = CounterSeries()
    for pos in range(1000):
        flat.add(pos, START, 5)
    assert flat.readings() == [(0, START, 5), (999, START, 5)]


def test_judging_from_the_columns_finds_what_every_reading_finds():
    rng = random.Random(7)
    for trial in range(40):
        n = rng.randint(5, 40)
        records = _records(n)
        full: list[SoakRound] = []
        s = NodeSeries()
        counters = {"ib.symbol_error[mlx5_0/1]": 0.0, "gpu.xid": 0.0, "gpu.row_remap[0]": 3.0}
        for pos, rec in enumerate(records):
            readings = {}
            for when in (START, END):
                for k in counters:
                    r = rng.random()
                    if r < 0.05:
                        counters[k] += rng.randint(1, 5)
                    elif r < 0.07:
                        counters[k] = 0.0  # cleared
                readings[when] = dict(counters)
            ok = rng.random() > 0.1
            v = 100.0 * (1 - 0.01 * pos * (trial % 2)) * (1 + rng.gauss(0, 0.01))
            s.add_round(
                pos,
                ok,
                "" if ok else f"round {rec.index}: failed",
                {"gemm-flops/fp32_flops": v},
                {"gemm-flops/fp32_flops": 0.01},
                0,
            )
            s.add_counters(pos, START, readings[START])
            s.add_counters(pos, END, readings[END])
            full.append(
                SoakRound(
                    index=rec.index,
                    start=datetime.fromisoformat(rec.start),
                    end=datetime.fromisoformat(rec.end),
                    ok=ok,
                    reason="" if ok else f"round {rec.index}: failed",
                    metrics={"gemm-flops/fp32_flops": Measurement(v, 0.01)},
                    counters=readings[END],
                    counters_start=readings[START],
                )
            )
        a = judge_node("h", full, CRIT).to_dict()
        b = judge_node("h", node_rounds(s, records), CRIT).to_dict()
        # the same findings (kinds, subjects, verdicts, rounds, growth, first and last, steps) and trends
        assert a["passed"] == b["passed"] and a["failed_rounds"] == b["failed_rounds"]
        assert [(f["kind"], f["subject"], f["fails"], f["rounds"], f["message"]) for f in a["findings"]] == [
            (f["kind"], f["subject"], f["fails"], f["rounds"], f["message"]) for f in b["findings"]
        ], trial
        assert [t["change"] for t in a["trends"]] == [t["change"] for t in b["trends"]]


def test_the_columns_as_json():
    records = _records(3)
    s = NodeSeries()
    s.add_round(0, True, "", {"m/x_flops": 2.0}, {}, 0)
    s.add_round(1, False, "round 2: failed", {}, {}, 2)
    s.add_round(2, True, "", {"m/x_flops": 4.0, "m/y_bw": 1.0}, {"m/y_bw": 0.02}, 0)
    s.add_counters(0, START, {"gpu.xid": 0})
    s.add_counters(2, END, {"gpu.xid": 1})
    doc = series_json(s, records)
    assert doc == {
        "index": [1, 2, 3],
        "ok": [True, False, True],
        "reasons": {"2": "round 2: failed"},
        "metrics": {"m/x_flops": [2.0, None, 4.0], "m/y_bw": [None, None, 1.0]},
        "throttled_windows": {"2": 2},
        "counters": {"gpu.xid": [[1, "start", 0], [3, "end", 1]]},
    }
    rounds = node_rounds(s, records)
    assert [r.throttled_windows for r in rounds] == [0, 2, 0] and rounds[2].metrics["m/y_bw"].noise == 0.02


def _fleet_rounds(names: str, rounds: int, speed, sigma: float, seed: int) -> dict[str, NodeSeries]:  # noqa: ANN001
    """Nodes sharing a fleet reference, each round's figure 100 x ``speed(host, position)`` with Gaussian
    noise of ``sigma``, every round passed; the fleet's medians settled."""
    from sb_fleet.campaign.soak_series import FleetReference, add_fleet_round

    rng = random.Random(seed)
    fleet = FleetReference()
    nodes = {h: NodeSeries(fleet=fleet) for h in names}
    for pos in range(rounds):
        vals = {h: {"g/fp32_flops": 100.0 * speed(h, pos) * (1 + rng.gauss(0, sigma))} for h in nodes}
        for h, s in nodes.items():
            s.add_round(pos, True, "", vals[h], {}, 0)
        add_fleet_round(fleet, pos, list(vals.values()))
    fleet.settle()
    return nodes


def test_a_round_every_node_is_slow_in_is_not_a_nodes_drift():
    """Five nodes; in round 3 the whole machine is slow (every figure at 40%); node e loses 5% a round. Judged
    against the fleet's median of each round, e fails and the others pass; judged alone, the shared slow
    round is noise enough to hide e's loss."""
    records = _records(8)
    nodes = _fleet_rounds(
        "abcde", 8, lambda h, pos: (0.4 if pos == 2 else 1.0) * (1 - 0.05 * pos if h == "e" else 1.0), 0.01, 3
    )
    crit = SoakCriteria(drift_min_rounds=5, drift_min_change=0.05)
    judged = {h: (n.passed, basis) for h, n, basis in judge_series(nodes, records, crit)}
    assert judged == {h: (h != "e", "relative") for h in "abcde"}
    # judged as measured, the shared slow round is noise enough to hide e's loss
    assert judge_node("e", node_rounds(nodes["e"], records, relative=False), crit).passed


def test_a_fleet_median_that_moves_without_the_node_still_fails_it_as_measured():
    """e is capped and loses 8% a round; the others share what it leaves, and in round 2 one of them is
    absent and the rest run 30% faster: the fleet's median moves, e does not follow it. Relative to the
    fleet the jump adds to e's noise; as measured e fails, and the fleet did not move with it: e fails on
    either basis (``relative``, or ``both`` where only the measured one caught it); the others pass."""
    from sb_fleet.campaign.soak_series import FleetReference, add_fleet_round

    records = _records(6)
    rng = random.Random(5)
    fleet = FleetReference()
    nodes = {h: NodeSeries(fleet=fleet) for h in "abcde"}
    for pos in range(6):
        vals = {}
        for h in nodes:
            if h == "c" and pos == 1:
                continue
            speed = (1.3 if pos == 1 else 1.0) * (1 + 0.02 * pos) if h != "e" else (1 - 0.08 * pos)
            vals[h] = {"g/fp32_flops": 100.0 * speed * (1 + rng.gauss(0, 0.01))}
        for h, s in nodes.items():
            s.add_round(pos, h in vals, "" if h in vals else "absent", vals.get(h, {}), {}, 0)
        add_fleet_round(fleet, pos, list(vals.values()))
    fleet.settle()
    crit = SoakCriteria(drift_min_rounds=5, drift_min_change=0.05)
    judged = {h: (n.passed, basis) for h, n, basis in judge_series(nodes, records, crit)}
    assert judged["e"][0] is False and judged["e"][1] in ("relative", "both"), judged
    assert all(judged[h][0] for h in "abd"), judged


def test_a_slowdown_every_node_shares_rejects_none_and_a_nodes_own_step_is_caught():
    """Six nodes; from round 5 of 8 the whole fleet runs at 60% (load on the machine), and node f also
    falls to half of the fleet's speed from round 4. As measured every node stepped down; relative to the
    fleet's median of each round only f did: f fails with the step and the round it began, the rest pass."""
    records = _records(8)
    nodes = _fleet_rounds(
        "abcdef",
        8,
        lambda h, pos: (0.6 if pos >= 4 else 1.0) * (0.5 if h == "f" and pos >= 3 else 1.0),
        0.03,
        11,
    )
    crit = SoakCriteria(drift_min_rounds=6, drift_min_change=0.05)
    judged = {h: n for h, n, _basis in judge_series(nodes, records, crit)}
    assert [h for h, n in judged.items() if not n.passed] == ["f"]
    (f,) = judged["f"].failures
    assert f.values["model"] == "step" and f.values["since_round"] == 4
    # as measured alone, the fleet's own slowdown fails every node
    assert all(
        not judge_node(h, node_rounds(s, records, relative=False), crit).passed for h, s in nodes.items()
    )
