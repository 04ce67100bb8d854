"""The campaign page's timeline (sb_fleet.report.campaign_report): rounds drawn one bar each, merged only
where they are narrower than a few pixels, a failed round and a gap always visible; the time axis's ticks."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sb_fleet.report.campaign_report import (
    BUCKET_PX,
    MAX_DRAWN,
    _ticks,
    campaign_html,
    drawn_nodes,
    node_html,
    node_view,
    round_list,
    round_spans,
    thinned,
)

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)


def _rounds(
    n: int, length_s: float, failed: tuple[int, ...] = (), gap_after: int | None = None
) -> list[dict]:
    out, t = [], T0
    for i in range(1, n + 1):
        out.append(
            {
                "index": i,
                "start": t.isoformat(),
                "end": (t + timedelta(seconds=length_s)).isoformat(),
                "ok": i not in failed,
            }
        )
        t += timedelta(seconds=length_s)
        if i == gap_after:
            t += timedelta(seconds=length_s * 50)
    return out


def test_wide_rounds_are_a_bar_each():
    spans = round_spans(_rounds(6, 60, failed=(2,)), -T0.timestamp() * 0.5, 0.5)  # 30 px a round
    assert [(ok, idx) for _, _, ok, idx in spans] == [(True, [1]), (False, [2])] + [
        (True, [i]) for i in range(3, 7)
    ]
    assert spans[0][0] == 0.0 and spans[1][0] == 30.0 and all(w == 30.0 for _, w, _, _ in spans)


def test_thousands_of_narrow_rounds_merge_but_a_failed_one_and_a_gap_stay():
    scale = 900 / (4320 * 60)  # 72 hours of 1-minute rounds on 900 pixels: 0.2 px a round
    spans = round_spans(_rounds(4320, 60, failed=(2000,), gap_after=3000), -T0.timestamp() * scale, scale)
    assert [(ok, idx[0], idx[-1]) for _, _, ok, idx in spans] == [
        (True, 1, 1999),
        (False, 2000, 2000),
        (True, 2001, 3000),
        (True, 3001, 4320),  # after a stop of 50 rounds' length: a gap of 10 px
    ]
    assert all(w >= 1.0 for _, w, _, _ in spans)


def test_ticks():
    assert _ticks(200) == [60, 120, 180]
    assert _ticks(72 * 3600) == [k * 12 * 3600 for k in range(1, 7)]
    assert len(_ticks(400 * 86400)) <= 8


def test_every_node_its_own_timeline_row():
    node = {
        "verdict": "rejected",
        "stage_reached": "soak",
        "failed_stage": "soak",
        "reason": "drifted",
        "timeline": [
            {
                "stage": "sanity",
                "attempt": 1,
                "outcome": "passed",
                "start": T0.isoformat(),
                "end": (T0 + timedelta(seconds=30)).isoformat(),
            },
            {
                "stage": "soak",
                "attempt": 1,
                "outcome": "held_out",
                "start": (T0 + timedelta(seconds=30)).isoformat(),
                "end": (T0 + timedelta(seconds=400)).isoformat(),
            },
        ],
    }
    summary = {
        "campaign": {"file": "c.yaml", "digest": "0" * 64, "description": ""},
        "started": T0.isoformat(),
        "updated": T0.isoformat(),
        "finished": True,
        "nodes": {"n<1>": node, "n2": {**node, "verdict": "accepted"}},
    }
    rounds = _rounds(6, 60, failed=(3,))
    doc = {
        "nodes": {},
        "round_times": {str(r["index"]): [r["start"], r["end"]] for r in rounds},
        "rounds": {"n<1>": {"index": [r["index"] for r in rounds], "ok": [r["ok"] for r in rounds]}},
    }
    assert round_list(doc, "n<1>") == rounds and round_list(doc, "n2") == []
    page = campaign_html(summary, {"soak": doc}, T0.timestamp())
    assert (
        page.count('class="node-timeline"') == 2 and 'data-host="n&lt;1&gt;"' in page and "n<1>" not in page
    )
    assert page.count('class="round"') == 6 and "soak round 3: failed" in page
    assert page.count('class="attempt"') == 4  # n2's soak has no rounds: its attempt is a bar of its own


def test_a_plot_of_thousands_of_rounds_keeps_every_spike():
    pts = [(float(i), 1.0) for i in range(1, 4321)]
    pts[2999] = (3000.0, 0.2)  # one slow round
    out = thinned(pts, 220)
    assert len(out) <= 440 and (3000.0, 0.2) in out and out[0] == (1.0, 1.0) and out[-1][0] > 4300
    assert thinned(pts[:100], 220) == pts[:100]


def test_rounds_that_alternate_faster_than_the_pixels_are_at_most_a_bar_per_two_pixels():
    scale = 900 / (4320 * 60)
    every_other = tuple(range(1, 4321, 2))
    spans = round_spans(_rounds(4320, 60, failed=every_other), -T0.timestamp() * scale, scale)
    assert len(spans) <= 900 / BUCKET_PX + 1 and not any(
        ok for _, _, ok, _ in spans
    )  # each holds a failed one
    assert sorted(i for *_, idx in spans for i in idx) == list(range(1, 4321))  # every round in a bar
    blocks = tuple(i for i in range(1, 4321) if (i - 1) // 20 % 2 == 0)  # 20 failed, 20 passed: 4 px each
    spans = round_spans(_rounds(4320, 60, failed=blocks), -T0.timestamp() * scale, scale)
    assert len(spans) <= 900 / BUCKET_PX + 1
    assert sum(not ok for *_, ok, _ in spans) >= 100 and sum(ok for *_, ok, _ in spans) >= 100, spans[:5]


def _big(n_nodes: int, n_rounds: int) -> tuple[dict, dict]:
    """A campaign of ``n_nodes`` whose every other node failed every other round of ``n_rounds``."""
    rounds = _rounds(n_rounds, 60)
    end = (T0 + timedelta(seconds=60 * n_rounds)).isoformat()
    nodes, judged, views = {}, {}, {}
    for k in range(n_nodes):
        host, bad = f"node{k:04d}", k % 2 == 0
        nodes[host] = {
            "verdict": "rejected" if bad else "accepted",
            "stage_reached": "soak",
            "failed_stage": "soak" if bad else None,
            "reason": "failed 2160 of 4320 rounds: " + "round 1 ... " * 40 if bad else "",
            "timeline": [
                {"stage": "soak", "attempt": 1, "outcome": "held_out", "start": T0.isoformat(), "end": end}
            ],
        }
        judged[host] = {
            "passed": not bad,
            "rounds": n_rounds,
            "failed_rounds": list(range(1, n_rounds + 1, 2)) if bad else [],
            "findings": [
                {
                    "kind": "counter",
                    "subject": f"ib.symbol_error[mlx5_{j}/1]",
                    "fails": True,
                    "message": "grew " * 30,
                }
                for j in range(20 if bad else 0)
            ],
            "trends": [],
        }
        pts = {
            "metrics": {"gemm-flops/fp32_flops": [100.0 + (i % 7) for i in range(n_rounds)]},
            "counters": {  # kept next to their changes only (soak_series.CounterSeries)
                f"ib.symbol_error[mlx5_{j}/1]": [
                    [1, "start", 0.0],
                    [9 + j, "start", 5.0],
                    [n_rounds, "end", 5.0],
                ]
                for j in range(20 if bad else 0)
            },
        }
        if k >= 2 * MAX_DRAWN:  # only the drawn nodes (the failed: every other) have their views read
            continue
        views[host] = node_view(
            {
                "index": list(range(1, n_rounds + 1)),
                "ok": [not bad or i % 2 == 0 for i in range(1, n_rounds + 1)],
            }
            | pts
        )
    summary = {
        "campaign": {"file": "c.yaml", "digest": "0" * 64, "description": ""},
        "started": T0.isoformat(),
        "updated": end,
        "finished": True,
        "verdicts": {"rejected": n_nodes // 2, "accepted": n_nodes - n_nodes // 2},
        "nodes": nodes,
    }
    doc = {
        "nodes": judged,
        "round_times": {str(r["index"]): [r["start"], r["end"]] for r in rounds},
        "rounds": views,
    }
    return summary, doc


def test_the_page_is_bounded_whatever_fails():
    """1,000 nodes of 4,320 rounds, every other node failing every other round with 20 counters growing:
    the worst case for the page. Drawn: the first MAX_DRAWN nodes (the failed first); every node's row."""
    summary, doc = _big(1000, 4320)
    drawn = drawn_nodes(summary)
    assert len(drawn) == MAX_DRAWN and all(summary["nodes"][h]["verdict"] == "rejected" for h in drawn)
    doc = {**doc, "rounds": {h: doc["rounds"][h] for h in drawn}}
    page = campaign_html(summary, {"soak": doc}, T0.timestamp(), drawn, links=True)
    assert len(page) < 20e6, len(page)
    assert page.count('class="node-timeline"') == MAX_DRAWN
    assert page.count('<tr><td><a href="campaign-nodes/node') == 2000  # every node's row in both tables
    assert page.count("per round</h3>") == MAX_DRAWN and "and 9 more on" in page  # 12 plots a node here
    assert "1 of 1000 nodes" not in page and f"{MAX_DRAWN} of 1000 nodes drawn" in page
    one = node_html(
        summary, "node0000", {"soak": {**doc, "rounds": {"node0000": doc["rounds"]["node0000"]}}}, 0.0
    )
    assert len(one) < 1e6 and one.count("per round</h3>") == 1 and one.count("<polyline") == 21  # every plot
