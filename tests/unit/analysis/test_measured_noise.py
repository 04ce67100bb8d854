"""Issue 35: verdicts from measured noise (each value's own noise from the run's noise-summary.jsonl).

The values here are written by hand in the shapes the real corpus shows (tests/corpus/): contended
hosts whose own samples scatter, steady hosts, two steady groups with no majority. What decides is
the run's own evidence: the same fleet is judged with and without its noise file.
"""

from __future__ import annotations

import json
from pathlib import Path

from sb_fleet.report.analyse import report, write_reports

KL = "kernel-launch/back_to_back_time"
GF = "gemm-flops/fp32_flops"


def run_dir(
    tmp: Path, values: dict[str, dict[str, float]], noise: dict[str, dict[str, float]] | None
) -> Path:
    run = tmp / "run"
    run.mkdir(exist_ok=True)
    (run / "manifest.json").write_text('{"schema_version": 1}')
    (run / "results-summary.jsonl").write_text(
        "".join(json.dumps({"node": h, **m}) + "\n" for h, m in values.items())
    )
    p = run / "noise-summary.jsonl"
    if noise is None:
        p.unlink(missing_ok=True)
    else:
        p.write_text("".join(json.dumps({"node": h, **m}) + "\n" for h, m in noise.items()))
    return run


def test_a_contended_host_whose_own_samples_scatter_is_not_condemned_and_the_report_says_so(tmp_path):
    # The issue's case: kernel-launch +140% on one host of four; every host's samples scatter by 40-70%.
    values = {"a": {KL: 0.010}, "b": {KL: 0.011}, "c": {KL: 0.0105}, "d": {KL: 0.024}}
    noise = {"a": {KL: 0.4}, "b": {KL: 0.5}, "c": {KL: 0.45}, "d": {KL: 0.7}}
    before = report(run_dir(tmp_path, values, None))
    assert {h.name for h in before.hosts if h.verdict == "fail"} == {"d"}  # the prior alone: a false alarm
    r = report(run_dir(tmp_path, values, noise))
    assert all(h.verdict == "pass" for h in r.hosts)
    assert r.gate.passed  # too noisy passes with a warning by default ...
    assert [m.metric for m in r.too_noisy] == [KL] and "d" in r.too_noisy[0].hosts
    assert any("too noisy to judge" in w for w in r.warnings)
    write_reports(r, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "All hosts passed" not in md and "## Too noisy to judge" in md  # ... never "All hosts passed"
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["too_noisy"][0]["metric"] == KL and doc["too_noisy"][0]["hosts"][0]["source"]


def test_too_noisy_can_be_made_to_fail_the_gate(tmp_path):
    from sb_fleet.config.gatespec import Gates

    values = {"a": {KL: 0.010}, "b": {KL: 0.011}, "c": {KL: 0.0105}, "d": {KL: 0.012}}
    noise = {h: {KL: 0.5} for h in values}
    r = report(run_dir(tmp_path, values, noise), gates=Gates.model_validate({"fleet": {"too_noisy": "fail"}}))
    assert not r.gate.passed and "too noisy" in r.gate.policy


def test_a_steadily_slow_host_among_steady_hosts_fails(tmp_path):
    # A busy process beside one host's GEMM: its samples are steady, at half the rate.
    values = {h: {GF: v} for h, v in zip("abcdef", [61.0, 63.5, 60.2, 62.8, 59.9, 30.5], strict=True)}
    noise = {h: {GF: 0.03} for h in values}
    r = report(run_dir(tmp_path, values, noise))
    assert {h.name for h in r.hosts if h.verdict == "fail"} == {"f"}
    issue = next(h for h in r.hosts if h.name == "f").issues[0]
    assert issue.check == "majority" and "noise 3.0%" in issue.detail  # judged with the measured noise


def test_a_slow_host_among_noisy_peers_is_too_noisy_not_a_silent_pass(tmp_path):
    # The issue's loaded machine: healthy hosts 47-93 GFLOPS, the busy one at 39.8, "All hosts passed".
    values = {h: {GF: v} for h, v in zip("abcdef", [47.0, 93.0, 71.0, 55.0, 82.0, 39.8], strict=True)}
    noise = {h: {GF: 0.25} for h in values}
    r = report(run_dir(tmp_path, values, noise))
    failed = {h.name for h in r.hosts if h.verdict == "fail"}
    noisy_hosts = {h for m in r.too_noisy for h in m.hosts}
    assert failed == {"f"} or "f" in noisy_hosts or r.inconsistent
    write_reports(r, tmp_path / "out")
    assert "All hosts passed" not in (tmp_path / "out" / "report.md").read_text()


def test_steady_hosts_in_two_groups_with_no_majority_are_inconsistent(tmp_path):
    values = {"a": {GF: 60.0}, "b": {GF: 61.0}, "c": {GF: 120.0}, "d": {GF: 121.0}}
    noise = {h: {GF: 0.01} for h in values}
    r = report(run_dir(tmp_path, values, noise))
    assert all(h.verdict == "pass" for h in r.hosts)  # no host is judged on it ...
    assert not r.gate.passed and "inconsistent" in r.gate.policy  # ... but the gate fails, naming groups
    (inc,) = r.inconsistent
    assert inc.groups == (("a", "b"), ("c", "d"))
    from sb_fleet.report.headline import headline

    assert headline(r).text() == (  # every output's headline: the reason, not a warning instead of it
        "gate failed: 1 metric(s) inconsistent (steady hosts disagree, no majority): first gemm-flops/fp32_flops"
    )
    from sb_fleet.config.gatespec import Gates

    warn = report(
        run_dir(tmp_path, values, noise), gates=Gates.model_validate({"fleet": {"inconsistent": "warn"}})
    )
    assert warn.gate.passed and warn.inconsistent
    # The same two groups whose own samples scatter by 40%: they agree within their noise.
    noisy = {h: {GF: 0.4} for h in values}
    r2 = report(run_dir(tmp_path, values, noisy))
    assert not r2.inconsistent and r2.gate.passed and r2.too_noisy
    assert (
        headline(r2).text().startswith("gate passed with warnings: ")
        and "too noisy to judge" in headline(r2).text()
    )


def test_an_inconsistency_fails_the_gate_only_if_validates_re_run_shows_it_again(tmp_path):
    from sb_fleet.history.confirm import inconsistency_shows_again

    values = {"a": {GF: 60.0}, "b": {GF: 61.0}, "c": {GF: 120.0}, "d": {GF: 121.0}}
    noise = {h: {GF: 0.01} for h in values}
    first = report(run_dir(tmp_path, values, noise))
    (inc,) = first.inconsistent
    moved = {"a": {GF: 118.0}, "b": {GF: 61.0}, "c": {GF: 62.0}, "d": {GF: 119.0}}  # other pairs now
    checks = {inc.key: inconsistency_shows_again(inc, moved)}
    r = report(run_dir(tmp_path, values, noise), split_checks=checks)
    assert r.gate.passed, r.gate.policy
    (cleared,) = r.inconsistent  # still reported, with the re-run's word
    assert cleared.confirmed is False and not cleared.standing
    assert "too noisy here to judge" in cleared.sentence() and cleared.to_json()["confirmed"] is False
    kept = {"a": {GF: 59.0}, "b": {GF: 62.0}, "c": {GF: 119.0}, "d": {GF: 122.0}}
    checks = {inc.key: inconsistency_shows_again(inc, kept)}
    r = report(run_dir(tmp_path, values, noise), split_checks=checks)
    assert not r.gate.passed and "inconsistent" in r.gate.policy
    assert "showed again" in r.inconsistent[0].sentence()


def test_two_hosts_that_differ_within_their_measured_noise_are_no_finding(tmp_path):
    values = {"a": {GF: 60.0}, "b": {GF: 75.0}}
    assert not report(run_dir(tmp_path, values, None)).gate.passed  # 25% apart at a 1% prior
    r = report(run_dir(tmp_path, values, {"a": {GF: 0.08}, "b": {GF: 0.1}}))
    assert r.gate.passed and not r.disagreements
    steady = report(run_dir(tmp_path, values, {"a": {GF: 0.005}, "b": {GF: 0.004}}))
    assert not steady.gate.passed and steady.disagreements


def test_a_metric_the_majority_reports_and_a_host_lacks_makes_it_incomplete(tmp_path):
    """The issue's offline SuperBench summary: four hosts, one lacking mem-bw/h2d_bw (absent, then null)."""
    full = {"mem-bw/return_code": 0, "mem-bw/h2d_bw": 26.0, "mem-bw/d2h_bw": 25.0}
    for lacking in ({"mem-bw/return_code": 0, "mem-bw/d2h_bw": 25.1}, {**full, "mem-bw/h2d_bw": None}):
        lines = [{"node": f"n{i}", **full} for i in range(3)] + [{"node": "n3", **lacking}]
        p = tmp_path / "results-summary.jsonl"
        p.write_text("".join(json.dumps(x) + "\n" for x in lines))
        r = report(p)
        verdicts = {h.name: h.verdict for h in r.hosts}
        assert verdicts == {"n0": "pass", "n1": "pass", "n2": "pass", "n3": "incomplete"}
        issue = next(h for h in r.hosts if h.name == "n3").issues[0]
        assert issue.check == "missing-metric" and "mem-bw/h2d_bw missing" in issue.detail
        assert not r.gate.passed


def test_populations_split_only_on_steady_groups_far_apart(tmp_path):
    lo = [60.0, 60.5, 59.8, 60.2, 60.1]
    hi = [66.0, 66.3, 65.8, 66.1, 65.9]  # 10% apart
    values = {f"h{i}": {GF: v} for i, v in enumerate(lo + hi)}
    steady = report(run_dir(tmp_path, values, {h: {GF: 0.003} for h in values}))
    assert steady.populations and not steady.gate.passed
    scattered = report(run_dir(tmp_path, values, {h: {GF: 0.05} for h in values}))  # 5% noise per host
    assert not scattered.populations


def test_fleet_statistics_judge_a_host_within_its_own_scatter_too_noisy_not_failed(tmp_path):
    # 25 hosts (fleet statistics alone, no majority agreement): one 30% low. Steady: it fails; its own
    # samples scattering by 20%: the deviation is inside them, said too noisy, not failed.
    rng = __import__("numpy").random.default_rng(35)
    vals = {f"h{i:02d}": {GF: float(60 * (1 + 0.005 * rng.standard_normal()))} for i in range(25)}
    vals["h24"][GF] = 42.0
    steady = report(run_dir(tmp_path, vals, {h: {GF: 0.005} for h in vals}))
    assert {h.name for h in steady.hosts if h.verdict == "fail"} == {"h24"}
    scatter = {h: {GF: 0.005} for h in vals}
    scatter["h24"] = {GF: 0.2}
    r = report(run_dir(tmp_path, vals, scatter))
    assert all(h.verdict == "pass" for h in r.hosts)
    assert [(m.metric, m.hosts) for m in r.too_noisy] == [(GF, ("h24",))]


def test_with_history_a_host_is_judged_with_its_night_to_night_variation(tmp_path):
    import datetime as dt

    store = tmp_path / "history.duckdb"
    swing = [60.0, 47.0, 74.0, 52.0, 69.0, 56.0, 64.0]  # host d, night after night (its samples said so)

    def night(i: int, d_value: float, d_noise: float) -> Path:
        run = tmp_path / f"night{i}"
        run_dir(tmp_path, {"a": {GF: 60.0}, "b": {GF: 60.3}, "c": {GF: 59.8}, "d": {GF: d_value}}, None)
        (tmp_path / "run").rename(run)
        when = dt.datetime(2026, 11, 1, 2, tzinfo=dt.timezone.utc) + dt.timedelta(days=i)
        (run / "manifest.json").write_text(
            json.dumps(
                {"schema_version": 2, "tool": "sb-fleet", "run_id": f"n{i}", "created": when.isoformat()}
            )
        )
        noise = {"a": {GF: 0.005}, "b": {GF: 0.005}, "c": {GF: 0.005}, "d": {GF: d_noise}}
        (run / "noise-summary.jsonl").write_text(
            "".join(json.dumps({"node": h, **m}) + "\n" for h, m in noise.items())
        )
        return run

    for i, v in enumerate(swing):
        r = report(night(i, v, 0.2), history=store)
        assert r.gate.passed, r.gate.policy
    tonight = night(len(swing), 42.0, 0.005)  # -30%, and tonight's own samples are steady
    without = report(tonight)
    assert {h.name for h in without.hosts if h.verdict == "fail"} == {"d"}
    tonight2 = night(len(swing) + 1, 42.0, 0.005)
    r = report(tonight2, history=store)
    assert all(h.verdict == "pass" for h in r.hosts), [h.issues for h in r.hosts]
    assert any("d" in m.hosts for m in r.too_noisy)


def test_a_population_split_that_does_not_show_again_in_the_confirmation_run_does_not_fail_the_gate(tmp_path):
    from sb_fleet.history.confirm import split_shows_again

    # 8 healthy hosts on 2 shared cores: 4 got the busy core, 4 the other, steady within the run.
    vals = [18.0, 18.3, 18.2, 18.3, 22.4, 21.9, 22.0, 22.4]
    values = {f"h{i}": {GF: v} for i, v in enumerate(vals)}
    noise = {h: {GF: 0.02} for h in values}
    first = report(run_dir(tmp_path, values, noise))
    (sp,) = first.populations
    assert not first.gate.passed and "population split" in first.gate.policy
    # The re-run: the same hosts, other co-runners. The groups overlap: no population.
    shuffled = {
        h: {GF: v} for h, v in zip(values, [22.1, 18.2, 22.3, 18.1, 18.4, 22.0, 21.8, 18.3], strict=True)
    }
    ok, how = split_shows_again(sp, shuffled)
    assert not ok and "did not show again" in how
    r = report(run_dir(tmp_path, values, noise), split_checks={sp.key: (ok, how)})
    assert r.gate.passed and r.populations[0].confirmed is False
    assert any("did not show again" in w for w in r.warnings)
    # A real second population (another GPU model) shows again: the gate fails as before.
    same = {h: {GF: v * 1.01} for h, v in zip(values, vals, strict=True)}
    ok2, how2 = split_shows_again(sp, {h: {GF: x[GF]} for h, x in same.items()})
    assert ok2 and "showed again" in how2
    r2 = report(run_dir(tmp_path, values, noise), split_checks={sp.key: (ok2, how2)})
    assert not r2.gate.passed and r2.populations[0].confirmed is True
    # A host the re-run did not measure: the split stands (never cleared without evidence).
    partial = {h: v for h, v in same.items() if h != "h0"}
    assert split_shows_again(sp, partial)[0]
