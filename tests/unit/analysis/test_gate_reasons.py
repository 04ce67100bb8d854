"""Issue 47: only confirmed evidence fails the gate, every output names what did, and the evidence a
rack-sized verdict used is kept per metric (value, own noise, reference, limit)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sb_fleet.analysis.issues import Issue
from sb_fleet.analysis.majority import majority_check
from sb_fleet.analysis.superbench.metric_names import Directions
from sb_fleet.analysis.verdict import FAILV, UNCONFIRMED, judge, not_confirmed
from sb_fleet.history.confirm import confirm_limit, recheck
from sb_fleet.report.analyse import report, write_reports
from sb_fleet.report.headline import headline

LAUNCH = "kernel-launch/back_to_back_time:0"
GEMM = "gemm-flops/fp32_flops:0"


def write(tmp: Path, rows: list[dict]) -> Path:
    p = tmp / "results-summary.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p


def eight_hosts_bimodal() -> list[dict]:
    """The issue's 8-host run: six hosts launch at ~0.0027 ms, two at 0.0269 and 0.0452 (68% apart);
    GEMM steady everywhere."""
    launch = [0.00270, 0.00272, 0.00268, 0.02688, 0.04524, 0.00271, 0.00269, 0.00273]
    return [
        {"node": f"node{i + 1}", LAUNCH: v, GEMM: 25.0 * (1 + 0.004 * ((i % 3) - 1))}
        for i, v in enumerate(launch)
    ]


def test_a_disagreement_inside_a_split_that_did_not_show_again_does_not_fail_the_gate(tmp_path: Path) -> None:
    src = write(tmp_path, eight_hosts_bimodal())
    first = report(src)
    assert len(first.populations) == 1 and set(first.populations[0].groups[1]) == {"node4", "node5"}
    assert [d.hosts for d in first.disagreements] == [("node4", "node5")]
    assert not first.gate.passed  # unconfirmed: the split and the disagreement both stand
    assert {r.kind for r in first.gate.reasons} == {"populations", "disagreements"}

    sp = first.populations[0]
    rerun = {
        f"node{i + 1}": {LAUNCH: v}
        for i, v in enumerate([0.0027, 0.024, 0.0027, 0.0028, 0.041, 0.0027, 0.0027, 0.0026])
    }
    checks = recheck(first.populations, [*first.inconsistent, *first.disagreements], rerun)
    assert checks[sp.key][0] is False  # node2 joined the upper group, node4 left it: the groups overlap
    final = report(src, split_checks=checks)
    assert final.gate.passed, final.gate.policy
    assert final.gate.reasons == ()
    (d,) = final.disagreements
    assert d.confirmed is False and "did not show again" in d.confirmation
    head = headline(final)
    assert head.passed and not head.failed_by
    assert any("did not show again" in n for n in head.notes)
    md = (write_reports(final, tmp_path / "out")[1]).read_text()
    assert (
        "## Populations (1 split(s): none showed again in validate's re-run: the gate does not fail on them)"
        in md
    )
    assert (
        "## Two hosts disagree (1 metric(s): not shown again by validate's re-run: the gate does not fail on them)"
        in md
    )
    assert "Failed by" not in md


def test_a_split_that_shows_again_fails_the_gate_and_the_headline_says_so_first(tmp_path: Path) -> None:
    src = write(tmp_path, eight_hosts_bimodal())
    first = report(src)
    rerun = {
        f"node{i + 1}": {LAUNCH: v}
        for i, v in enumerate([0.0027, 0.0027, 0.0027, 0.027, 0.044, 0.0027, 0.0027, 0.0026])
    }
    final = report(
        src, split_checks=recheck(first.populations, [*first.inconsistent, *first.disagreements], rerun)
    )
    assert not final.gate.passed
    head = headline(final)
    assert head.failed_by[0].startswith("1 unexpected population split(s)")
    assert any("node4 and node5 disagree" in f for f in head.failed_by)
    doc = json.loads(write_reports(final, tmp_path / "out")[0].read_text())
    assert doc["headline"]["failed_by"] == list(head.failed_by)
    assert [r["kind"] for r in doc["gate"]["reasons"]] == ["populations", "disagreements"]
    junit = (tmp_path / "out" / "junit.xml").read_text()
    assert "gate failed: 1 unexpected population split(s)" in junit


def test_too_noisy_is_a_warning_beside_the_reason_never_instead_of_it(tmp_path: Path) -> None:
    rows = [{"node": f"h{i}", GEMM: 25.0, "mem-bw/h2d_bw:0": 26.0 + 0.01 * i} for i in range(5)]
    rows[2][GEMM] = 12.0  # a host at half the GEMM rate: failed by majority agreement
    r = report(write(tmp_path, rows))
    head = headline(r)
    assert not head.passed
    assert head.failed_by[0].startswith("1 of 5 host(s) counted as fail/incomplete/missing (0 allowed): h2 (")
    assert head.text().startswith("gate failed: 1 of 5 host(s)")


def test_evidence_keeps_each_hosts_value_noise_reference_and_limit() -> None:
    rng = np.random.default_rng(7)
    n = 6
    vals = 25.0 * (1 + 0.01 * rng.standard_normal((n, 2)))
    vals[3, 0] *= 0.5  # host h3 at half the rate on the first metric
    noise = np.full((n, 2), 0.01)
    noise[1, 1] = np.nan  # h1 measured no noise of its own on the second metric
    res = majority_check(
        [GEMM, "gemm-flops/fp64_flops:0"], vals, Directions(), [f"h{i}" for i in range(n)], noise=noise
    )
    first, second = res.evidence
    assert first.metric == GEMM and first.status == "flagged"
    by = {h.name: h for h in first.hosts}
    assert by["h3"].status == "flagged" and by["h3"].value < by["h3"].limit  # beyond its limit, drawn so
    for name, h in by.items():
        assert h.noise == 0.01 and h.sigma is not None and h.sigma >= 0.01
        if name != "h3":
            assert h.status == "ok" and h.value > h.limit  # within it
        assert h.limit < h.reference and h.limit_hi is None  # higher is better: one limit, below
    assert second.status == "ok"
    assert {h.name: h.noise for h in second.hosts}["h1"] is None
    assert first.to_json()["hosts"][3]["status"] == "flagged"


def test_a_small_fleet_re_runs_every_candidate_and_a_large_one_is_bounded() -> None:
    assert confirm_limit(4) == 4 and confirm_limit(19) == 19
    assert confirm_limit(20) == 2 and confirm_limit(200) == 10
    assert confirm_limit(8, all_below=0) == 2  # the old bound, when asked for


def test_a_host_over_the_bound_is_unconfirmed_only_on_statistics_alone() -> None:
    stat = Issue("gemm-flops/fp32_flops:0", 12.0, 25.0, -0.52, "majority", "GEMM")
    rule = Issue("gemm-flops/fp32_flops:0", 12.0, 25.0, -0.52, "rule:gemm", "GEMM")
    h = judge("h", True, [stat], "ok")
    assert h.verdict == FAILV and not_confirmed(h, "note").verdict == UNCONFIRMED
    explicit = judge("h", True, [stat, rule], "ok")
    assert not_confirmed(explicit, "note").verdict == FAILV  # a rule says so: it stays failed


def test_an_unconfirmed_host_does_not_fail_the_gate_and_is_said(tmp_path: Path) -> None:
    rows = [{"node": f"h{i}", GEMM: 25.0 * (1 + 0.002 * (i % 5))} for i in range(40)]
    for i in (3, 11, 17):
        rows[i][GEMM] = 12.0 + 0.1 * i
    src = write(tmp_path, rows)
    first = report(src)
    failed = sorted(h.name for h in first.hosts if h.verdict == "fail")
    assert failed == ["h11", "h17", "h3"] and not first.gate.passed
    final = report(src, unconfirmed=["h17"], confirmations={})
    assert {h.name: h.verdict for h in final.hosts if h.verdict != "pass"} == {
        "h3": "fail",
        "h11": "fail",
        "h17": "unconfirmed",
    }
    head = headline(final)
    assert head.failed_by[0].startswith("2 of 40 host(s)") and "h17" not in head.failed_by[0]
    assert any("1 host(s) unconfirmed" in n for n in head.notes)


def test_a_figure_every_host_shares_is_neither_judged_nor_too_noisy() -> None:
    """An all-node collective reports one figure on every rank: no host can be told from another by it."""
    n = 5
    bw = "nccl-bw/allreduce_1048576_busbw"
    vals = np.column_stack([np.full(n, 0.0508), 25.0 * (1 + 0.002 * np.arange(n))])
    noise = np.column_stack([np.full(n, 0.18), np.full(n, 0.01)])  # 18% own noise: too noisy if judged
    res = majority_check([bw, GEMM], vals, Directions(), [f"h{i}" for i in range(n)], noise=noise)
    assert not res.noisy and not res.issues and not res.inconsistent
    assert [e.metric for e in res.evidence] == [GEMM]
    vals[2, 0] = 0.0254  # one rank reports another figure: judged again
    again = majority_check([bw, GEMM], vals, Directions(), [f"h{i}" for i in range(n)], noise=noise)
    assert [e.metric for e in again.evidence] == [bw, GEMM]


def test_a_figure_without_samples_of_its_own_never_borrows_the_others_noise() -> None:
    """Issue 47's shared-home run: node1's launch time had one sample (no noise of its own) and was failed
    at 76 noise sigmas of the other hosts' spread. Its noise is unknown: said so, and no sigma count."""
    launch = "kernel-launch/torch_launch_time"
    vals = np.array([[0.1093], [0.0034], [0.0041], [0.0037]])
    noise = np.array([[np.nan], [0.037], [0.041], [0.035]])
    res = majority_check([launch], vals, Directions(), ["node1", "node2", "node3", "node4"], noise=noise)
    (issue,) = res.issues[0]
    assert issue.sigmas is None and "its own noise unknown" in issue.detail
    assert "spread across hosts" not in issue.detail
    (ev,) = res.evidence
    assert {h.name: h.noise for h in ev.hosts}["node1"] is None


def test_fleet_statistics_do_not_call_a_shared_figure_too_noisy(tmp_path: Path) -> None:
    """From 8 hosts the fleet check runs too: the same rule (the corpus's healthy 8-host runs said 9 such
    nccl-bw figures too noisy on every host)."""
    from tests.unit.analysis.test_measured_noise import run_dir

    bw = "nccl-bw/allreduce_1048576_busbw"
    hosts = [f"host{i:03d}" for i in range(1, 9)]
    values = {h: {bw: 0.0508, GEMM: 25.0 * (1 + 0.002 * i)} for i, h in enumerate(hosts)}
    noise = {h: {bw: 0.18, GEMM: 0.01} for h in hosts}
    r = report(run_dir(tmp_path, values, noise))
    assert r.gate.passed and not r.too_noisy
    values["host003"][bw] = 0.0254  # one host reports another figure: judged, and its noise counts
    r2 = report(run_dir(tmp_path, values, noise))
    assert any(m.metric == bw for m in r2.too_noisy) or any(h.verdict == "fail" for h in r2.hosts)
