"""validate --confirm as pure functions: what to run again where, and whether a finding reproduced."""

from __future__ import annotations

import numpy as np

from sb_fleet.analysis.issues import INCOMPLETE, Issue
from sb_fleet.analysis.majority import Disagreement, Inconsistency
from sb_fleet.analysis.populations import PopulationSplit
from sb_fleet.analysis.verdict import after_confirmation, judge
from sb_fleet.history.confirm import (
    CONFIRMED,
    FLAKY,
    benchmark_of,
    control_ratio,
    inconsistency_shows_again,
    judge_confirmation,
    plan_confirmation,
    recheck,
    rerun_noise,
    rerun_values,
    select_for_confirmation,
    split_shows_again,
)

GEMM = "gemm-flops/fp16_tc_flops:3"
NCCL = "nccl-bw/allreduce_8589934592_busbw"
RC = "kernel-launch/return_code"


def _slow(metric: str, value: float, reference: float, check: str = "fleet") -> Issue:
    return Issue(metric, value, reference, (value - reference) / reference, check, "GEMM")


def _hosts():  # noqa: ANN202
    hosts = [judge(f"node{i:02d}", True, [], "ok", gpu_model="A100") for i in range(10)]
    hosts[2] = judge(
        "node02",
        True,
        [_slow(GEMM, 90.0, 100.0), _slow(NCCL, 150.0, 180.0, "history")],
        "ok",
        gpu_model="A100",
    )
    hosts[5] = judge(
        "node05", True, [Issue(RC, 1.0, None, None, "rule:rc", "RC", INCOMPLETE)], "ok", gpu_model="A100"
    )
    hosts[7] = judge("node07", False, [], "unreachable", gpu_model="A100")  # missing: nothing to re-run
    hosts.append(judge("h100-0", True, [], "ok", gpu_model="H100"))
    return hosts


def test_benchmark_of_a_column() -> None:
    assert benchmark_of(GEMM) == "gemm-flops"
    assert (
        benchmark_of("model-benchmarks:bert/pytorch-bert-large/fp16_train_throughput")
        == "model-benchmarks:bert"
    )


def test_plan_reruns_the_findings_benchmarks_and_a_few_controls_of_the_same_model() -> None:
    plan = plan_confirmation(_hosts(), controls=3)
    assert plan.benchmarks == {"node02": ["gemm-flops", "nccl-bw"]}  # fail only by default
    assert len(plan.controls) == 3 and all(c.startswith("node") for c in plan.controls)
    assert not {"node02", "node05", "node07"} & set(plan.controls)
    assert plan == plan_confirmation(_hosts(), controls=3)  # deterministic
    both = plan_confirmation(_hosts(), controls=2, verdicts=("fail", "incomplete"))
    assert both.benchmarks == {"node02": ["gemm-flops", "nccl-bw"], "node05": ["kernel-launch"]}
    assert both.all_benchmarks == ["gemm-flops", "kernel-launch", "nccl-bw"]
    assert plan_confirmation([h for h in _hosts() if h.verdict == "pass"]).benchmarks == {}


def test_a_finding_that_does_not_reproduce_is_flaky_and_one_that_does_is_confirmed() -> None:
    findings = {
        "a": [_slow(GEMM, 90.0, 100.0)],  # -10% ...
        "b": [_slow(GEMM, 90.0, 100.0)],
        "c": [_slow(GEMM, 90.0, 100.0), _slow(NCCL, 150.0, 180.0)],
    }
    rerun = {"a": {GEMM: 99.5}, "b": {GEMM: 91.0}, "c": {GEMM: 99.0, NCCL: 151.0}}
    got = judge_confirmation(findings, rerun, {}, {})
    assert got["a"].result == FLAKY  # ... then -0.5%
    assert got["b"].result == CONFIRMED  # ... then -9%
    assert got["c"].result == CONFIRMED  # the GEMM was flaky, the all-reduce was not
    assert [r.reproduced for r in got["c"].replays] == [False, True]
    assert "did not reproduce" in got["a"].sentence()


def test_a_finding_that_did_not_reproduce_clears_the_failure_but_not_what_the_host_failed_to_report() -> None:
    # CI, 11-28: a host failed on throughput noise alone, its finding gone in the re-run: flaky. A host
    # that had also never reported its power must stay incomplete, not turn flaky (which the gate skips).
    missing = Issue("gemm-flops/fp32_power", None, None, None, "missing-metric", "Energy", INCOMPLETE)
    noisy = judge("a", True, [_slow(GEMM, 90.0, 100.0)], "ok")
    bare = judge("b", True, [_slow(GEMM, 90.0, 100.0), missing], "ok")
    slow = judge("c", True, [_slow(GEMM, 90.0, 100.0)], "ok")
    got = judge_confirmation(
        {"a": noisy.issues[:1], "b": bare.issues[:1], "c": slow.issues[:1]},
        {"a": {GEMM: 99.5}, "b": {GEMM: 99.5}, "c": {GEMM: 91.0}},
        {},
        {},
    )
    after = {
        h.name: after_confirmation(h, got[h.name].result == FLAKY, got[h.name].sentence())
        for h in (noisy, bare, slow)
    }
    assert (noisy.verdict, bare.verdict, slow.verdict) == ("fail", "fail", "fail")
    assert {n: h.verdict for n, h in after.items()} == {"a": "flaky", "b": "incomplete", "c": "fail"}
    assert all("reproduce" in h.reason for h in after.values()), after
    assert after["b"].issues == bare.issues  # the findings stay on record, with the note saying how they went
    ok = judge("d", True, [], "ok")
    assert after_confirmation(ok, True, "x") is ok  # only a failure is re-judged


def test_controls_take_out_a_change_of_the_whole_environment() -> None:
    findings = {"a": [_slow(GEMM, 90.0, 100.0)]}
    rerun = {"a": {GEMM: 91.0}}
    # every control is 9% slower in the re-run (a throttled room): a stays at its first relative place
    first = {f"c{i}": {f"gemm-flops/fp16_tc_flops:{g}": 100.0 + g for g in range(8)} for i in range(3)}
    again = {h: {m: v * 0.91 for m, v in vals.items()} for h, vals in first.items()}
    assert abs(control_ratio(GEMM, first, again) - 0.91) < 1e-12
    got = judge_confirmation(findings, rerun, first, again)
    assert got["a"].result == FLAKY  # 91 against 91: nothing specific to a
    assert control_ratio(GEMM, {}, {}) == 1.0


LAUNCH = "kernel-launch/back_to_back_time"  # lower is better


def test_a_repeat_within_the_controls_run_to_run_noise_does_not_condemn() -> None:
    # The 3-host corpus run nofault-3h-parallel-quiet r13 (shared cores, no fault): host002's launch
    # time +80.5% first, +43.2% in the re-run, while its two healthy controls moved against each other by
    # a quarter between the runs. Half the first deviation came back, but no more than the controls moved.
    findings = {"host002": [_slow(LAUNCH, 0.004249, 0.002354, "majority")]}
    first = {"host001": {LAUNCH: 0.002330}, "host003": {LAUNCH: 0.002377}}
    again = {"host001": {LAUNCH: 0.004631}, "host003": {LAUNCH: 0.005995}}
    sigma, n = rerun_noise(lambda m: m == LAUNCH, first, again)
    assert n == 2 and 0.18 < sigma < 0.22  # |ln(4.631/2.330) - ln(5.995/2.377)| / 1.128
    got = judge_confirmation(findings, {"host002": {LAUNCH: 0.007598}}, first, again)
    assert got["host002"].result == FLAKY, got["host002"].replays
    assert "within the run-to-run noise the 2 control host(s) measured" in got["host002"].replays[0].why
    # The same repeat against controls that kept their places (2% apart both times) reproduces.
    steady = {"host001": {LAUNCH: 0.004631}, "host003": {LAUNCH: 0.004631 * 2.377 / 2.330 * 1.02}}
    assert (
        judge_confirmation(findings, {"host002": {LAUNCH: 0.007598}}, first, steady)["host002"].result
        == CONFIRMED
    )


def test_run_to_run_noise_needs_two_controls_and_takes_out_their_common_shift() -> None:
    first = {f"c{i}": {GEMM: 100.0 + i} for i in range(4)}
    assert rerun_noise(lambda m: m == GEMM, {"c0": first["c0"]}, {"c0": {GEMM: 50.0}}) is None
    shifted = {h: {GEMM: v[GEMM] * 0.5} for h, v in first.items()}  # everyone half as fast: no noise
    sigma, n = rerun_noise(lambda m: m == GEMM, first, shifted)
    assert n == 4 and sigma < 1e-9


def _inc(groups, centers, noise=(0.01, 0.01), threshold=6.0):  # noqa: ANN001, ANN202
    return Inconsistency(GEMM, groups, centers, noise, threshold=threshold, min_deviation=0.02)


def test_groups_show_again_only_when_they_keep_apart() -> None:
    groups = (("a", "b"), ("c", "d"))  # lowest first, 13% apart; told apart at 6 x hypot(1%, 1%) = 8.5%
    inc = _inc(groups, (42.25, 47.75))
    same = {"a": {GEMM: 42.0}, "b": {GEMM: 42.5}, "c": {GEMM: 47.5}, "d": {GEMM: 48.0}}
    ok, how = inconsistency_shows_again(inc, same)
    assert ok and how.startswith("showed again") and "needed 8.5%" in how, how
    shuffled = {"a": {GEMM: 47.0}, "b": {GEMM: 42.5}, "c": {GEMM: 43.0}, "d": {GEMM: 48.0}}
    ok, how = inconsistency_shows_again(inc, shuffled)
    assert not ok and "overlap" in how, how
    closer = {"a": {GEMM: 42.0}, "b": {GEMM: 42.5}, "c": {GEMM: 44.5}, "d": {GEMM: 45.0}}  # 6% apart
    ok, how = inconsistency_shows_again(inc, closer)
    assert not ok and "closer than the 8.5% that told them apart" in how, how
    ok, how = inconsistency_shows_again(inc, {"a": {GEMM: 1.0}})
    assert ok and "stands" in how  # not measured again: never cleared without evidence


def test_a_re_run_must_clear_the_limit_that_told_the_groups_apart_not_half_the_first_gap() -> None:
    """Issue 55's no-fault run: node4's kernel-launch time was +37.2% from the others (limit +27.8%),
    then +19.1% in the re-run: half the first gap (18.6%) counted it as shown again."""
    groups = (("node1", "node2", "node3"), ("node4",))
    inc = _inc(groups, (10.0, 13.72), noise=(0.0328, 0.0328))  # 6 x hypot = 27.8%
    rerun = {"node1": {GEMM: 9.9}, "node2": {GEMM: 10.0}, "node3": {GEMM: 10.1}, "node4": {GEMM: 11.91}}
    ok, how = inconsistency_shows_again(inc, rerun)
    assert not ok and "+19% apart (first 37%)" in how and "27.8%" in how, how
    old = Inconsistency(GEMM, groups, (10.0, 13.72), (0.0328, 0.0328))  # a record without its limit
    ok, how = inconsistency_shows_again(old, rerun)
    assert ok and "half the first deviation" in how, how
    # As far apart as the first run, but the re-run's own samples scatter by 5%: the limit grows with it.
    far = {**rerun, "node4": {GEMM: 14.0}}
    assert inconsistency_shows_again(inc, far)[0]
    noisy = {h: {GEMM: 0.05} for h in far}
    ok, how = inconsistency_shows_again(inc, far, noisy)
    assert not ok and "42.4%" in how and "under the re-run's noise (5.0%, 5.0%)" in how, how
    quiet = {h: {GEMM: 0.001} for h in far}  # a quieter re-run never asks less than the first run did
    ok, how = inconsistency_shows_again(inc, {**rerun, "node4": {GEMM: 12.5}}, quiet)
    assert not ok and "27.8%" in how, how


def test_two_hosts_disagree_again_only_beyond_the_limit_that_flagged_them() -> None:
    d = Disagreement(GEMM, ("a", "b"), (100.0, 80.0), -0.2, 10.0, (0.01, 0.02), 6.0, 0.02)
    assert d.groups == (("b",), ("a",))
    need = d.rerun_need([None, None])
    assert abs(need - 6 * np.hypot(0.02, 0.01)) < 1e-12  # the lower host's noise first
    got = recheck([], [d], {"a": {GEMM: 100.0}, "b": {GEMM: 90.0}})
    assert got[d.key][0] is False  # 11% < 13.4%
    got = recheck([], [d], {"a": {GEMM: 100.0}, "b": {GEMM: 85.0}})
    assert got[d.key][0] is True  # 17.6%


def test_a_population_split_shows_again_only_with_the_hole_it_needed() -> None:
    lo, hi = ("a", "b", "c"), ("d", "e", "f")
    sp = PopulationSplit("", (lo, hi), "gemm-flops/fp16_tc_flops", (100.0, 120.0), 0.15, ("x",), 0.12, 4.0)
    vals = dict(zip(lo + hi, (99.0, 100.0, 101.0, 119.0, 120.0, 121.0), strict=True))
    ok, how = split_shows_again(sp, {h: {GEMM: v} for h, v in vals.items()})
    assert ok and "needed 12.7%" in how, how  # hole 17.8% > e^0.12 - 1
    vals.update(d=108.0)  # still apart, but the hole (6.9%) is narrower than the split needed
    ok, how = split_shows_again(sp, {h: {GEMM: v} for h, v in vals.items()})
    assert not ok and "where the split needed 12.7%" in how, how
    vals.update(d=99.5)
    ok, how = split_shows_again(sp, {h: {GEMM: v} for h, v in vals.items()})
    assert not ok and "overlap" in how, how


def test_no_evidence_never_clears_a_host() -> None:
    findings = {"gone": [_slow(GEMM, 90.0, 100.0)], "silent": [_slow(GEMM, 90.0, 100.0)]}
    got = judge_confirmation(findings, {"silent": {}}, {}, {})
    assert got["gone"].result == CONFIRMED and got["gone"].replays[0].why == "no results in the re-run"
    assert got["silent"].result == CONFIRMED and got["silent"].replays[0].why == "not reported again"


def test_return_codes_reproduce_when_the_benchmark_fails_again() -> None:
    findings = {
        "a": [Issue(RC, 1.0, None, None, "rule:rc", "RC", INCOMPLETE)],
        "b": [Issue(RC, 124.0, None, None, "completeness", "RC", INCOMPLETE)],
    }
    got = judge_confirmation(findings, {"a": {RC: 0.0}, "b": {RC: 124.0}}, {}, {})
    assert got["a"].result == FLAKY and got["b"].result == CONFIRMED


def test_rerun_values_from_a_matrix() -> None:
    vals = rerun_values(["x", "y"], [GEMM, NCCL], np.array([[1.0, np.nan], [2.0, 3.0]]))
    assert vals == {"x": {GEMM: 1.0}, "y": {GEMM: 2.0, NCCL: 3.0}}


def test_confirm_config_narrows_the_run_to_the_findings_benchmarks() -> None:
    from sb_fleet.history.confirm import confirm_config

    cfg = {
        "version": "v0.4",
        "superbench": {"enable": None, "benchmarks": {"gemm-flops": {}, "nccl-bw": {}, "noop": {}}},
    }
    out = confirm_config(cfg, ["nccl-bw", "gemm-flops", "not-in-config"])
    assert out is not None and out["superbench"]["enable"] == ["nccl-bw", "gemm-flops"]
    assert (
        out["superbench"]["benchmarks"] == cfg["superbench"]["benchmarks"]
        and cfg["superbench"]["enable"] is None
    )
    assert confirm_config(cfg, ["other"]) is None


# --- plain validate: confirm the hosts failed on fleet statistics alone, bounded -------------------------


def _host(name: str, *issues: Issue, model: str = "A100"):  # noqa: ANN202
    return judge(name, True, list(issues), "ok", gpu_model=model)


def _stat(metric: str, dev: float, sigmas: float, check: str = "majority") -> Issue:
    return Issue(metric, 100.0 * (1 + dev), 100.0, dev, check, "GEMM", sigmas=sigmas)


def test_the_bound_is_every_host_of_a_rack_else_max_of_two_and_five_percent_and_a_ceiling() -> None:
    from sb_fleet.history.confirm import confirm_limit

    assert [confirm_limit(n) for n in (1, 4, 19, 20, 39, 40, 59, 60, 1000)] == [1, 4, 19, 2, 2, 2, 2, 3, 50]
    assert confirm_limit(1000, max_hosts=10) == 10 and confirm_limit(8, max_hosts=3) == 3
    assert confirm_limit(4, min_hosts=0, all_below=0) == 0
    assert confirm_limit(100, max_percent=20, min_hosts=1) == 20


def test_only_hosts_failed_on_statistics_alone_are_chosen_worst_first_within_the_bound() -> None:
    from sb_fleet.history.confirm import on_statistics_alone, select_for_confirmation

    hosts = [_host(f"ok{i}") for i in range(6)]
    hosts += [
        _host("maj-mild", _stat(GEMM, -0.10, 6.0)),
        _host("maj-worst", _stat(GEMM, -0.40, 30.0), _stat(NCCL, -0.1, 7.0, "fleet")),
        _host("comb", Issue("gemm-flops/*:3", None, None, -0.2, "majority-combined", "GEMM", sigmas=12.0)),
        _host("sib", _stat(GEMM, -0.3, 9.0, "sibling"), _stat(GEMM, -0.2, 8.0, "sibling-combined")),
        # an explicit reason beside a statistical one: never re-run by the default
        _host("limit", _stat(GEMM, -0.5, 50.0), Issue(GEMM, 50.0, 80.0, -0.375, "floor", "GEMM")),
        _host("rule", Issue(GEMM, 50.0, None, None, "rule:gemm", "GEMM")),
        _host("base", Issue(GEMM, 50.0, 100.0, -0.5, "baseline", "GEMM")),
        _host("hist", _stat(GEMM, -0.3, 40.0), Issue(GEMM, 70.0, 100.0, -0.3, "history", "GEMM")),
        _host("rc", _stat(GEMM, -0.3, 40.0), Issue(RC, 1.0, None, None, "return_code", "RC", INCOMPLETE)),
        _host("sku", Issue(GEMM, 50.0, 100.0, -0.5, "sku", "GEMM")),
        judge("gone", False, [], "unreachable", gpu_model="A100"),  # missing: no result to re-run
    ]
    alone = sorted(h.name for h in hosts if on_statistics_alone(h))
    assert alone == ["comb", "maj-mild", "maj-worst", "sib"]
    sel = select_for_confirmation(hosts, 2)
    assert sel.chosen == ("maj-worst", "comb") and sel.beyond == ("sib", "maj-mild")
    assert sel.explicit == ("base", "hist", "limit", "rc", "rule", "sku")
    assert sel.to_json()["not_confirmed"] == ["sib", "maj-mild"] and sel.to_json()["limit"] == 2
    everyone = select_for_confirmation(hosts, 10)
    assert everyone.chosen == ("maj-worst", "comb", "sib", "maj-mild") and not everyone.beyond
    plan = plan_confirmation(hosts, controls=2, only=sel.chosen)
    assert plan.benchmarks == {"maj-worst": ["gemm-flops", "nccl-bw"], "comb": ["gemm-flops"]}
    assert len(plan.controls) == 2 and all(c.startswith("ok") for c in plan.controls)
    assert select_for_confirmation([h for h in hosts if h.verdict == "pass"], 2).chosen == ()


def test_a_combined_finding_is_seen_again_as_the_mean_of_its_metrics() -> None:
    cols = [f"gemm-flops/{p}_flops:3" for p in ("fp16_tc", "bf16_tc", "fp32")]
    firsts = {f"n{i}": dict.fromkeys(cols, 100.0) for i in range(4)}
    firsts["bad"] = dict.fromkeys(cols, 80.0)  # -20% on every measurement of GPU 3
    finding = Issue("gemm-flops/*:3", None, None, -0.2, "majority-combined", "GEMM", sigmas=10.0)

    def up(_m: str) -> int:
        return 1

    controls = {"n0": firsts["n0"], "n1": firsts["n1"]}
    healed = judge_confirmation(
        {"bad": [finding]},
        {"bad": dict.fromkeys(cols, 99.0)},
        controls,
        controls,
        firsts=firsts,
        direction=up,
    )
    still = judge_confirmation(
        {"bad": [finding]},
        {"bad": dict.fromkeys(cols, 81.0)},
        controls,
        controls,
        firsts=firsts,
        direction=up,
    )
    assert healed["bad"].result == FLAKY and still["bad"].result == CONFIRMED
    r = still["bad"].replays[0]
    assert abs(r.first + 0.2) < 1e-9 and abs(r.again + 0.19) < 1e-9 and "3 metric(s)" in r.why
    # without the first run's values a combined finding is never cleared
    blind = judge_confirmation({"bad": [finding]}, {"bad": dict.fromkeys(cols, 99.0)}, {}, {})
    assert blind["bad"].result == CONFIRMED


def test_replays_carry_both_measurements_into_confirm_json() -> None:
    from sb_fleet.history.confirm import ConfirmPlan, confirmation_json, select_for_confirmation

    got = judge_confirmation({"a": [_slow(GEMM, 90.0, 100.0)]}, {"a": {GEMM: 99.5}}, {}, {})
    sel = select_for_confirmation([_host("a", _stat(GEMM, -0.1, 6.0))], 2)
    doc = confirmation_json(
        ConfirmPlan({"a": ["gemm-flops"]}, ["c"]), got, "/r/confirm", "auto", 12.3456, sel
    )
    rep = doc["hosts"]["a"]["replays"][0]
    assert (rep["first_value"], rep["again_value"], rep["reference"]) == (90.0, 99.5, 100.0)
    assert doc["mode"] == "auto" and doc["seconds"] == 12.346 and doc["selection"]["chosen"] == ["a"]


def test_the_report_shows_both_measurements_and_the_time_it_took() -> None:
    from sb_fleet.report.writers.report_markdown import confirmation_line, confirmation_section

    doc = {
        "mode": "auto",
        "seconds": 21.4,
        "selection": {"chosen": ["a"], "not_confirmed": ["b"], "explicit": ["c"], "limit": 1},
        "plan": {"benchmarks": {"a": ["noop"]}, "controls": ["d", "e"]},
        "hosts": {
            "a": {
                "result": "flaky",
                "replays": [
                    {
                        "metric": "noop/step_time",
                        "check": "majority",
                        "first": 1.5,
                        "again": 0.01,
                        "first_value": 7500.0,
                        "again_value": 3030.0,
                        "reproduced": False,
                        "why": "+150.0% then +1.0% (needed +75.0%)",
                    }
                ],
            }
        },
    }
    line = confirmation_line(doc)
    assert "1 host(s) re-run with 2 control host(s) in 21.4 s" in line and "1 not confirmed" in line
    md = "\n".join(confirmation_section(doc))
    assert "| a | flaky | `noop/step_time` | majority | 7500 | +150.0% | 3030 | +1.0% | no |" in md
    assert "Not confirmed (over the bound of 1 host(s)" in md and "b" in md and "Not re-run" in md


def test_validate_confirms_by_default_and_hosts_over_the_bound_are_judged_unconfirmed(
    monkeypatch,  # noqa: ANN001
) -> None:
    from types import SimpleNamespace

    from sb_fleet.config.gatespec import Gates
    from sb_fleet.fleet import workflow as wf

    hosts = [_host(f"ok{i}") for i in range(3)]
    hosts += [_host(n, _stat(GEMM, -0.1 * s, 6.0 * s)) for n, s in (("w1", 3), ("w2", 2), ("w3", 1))]
    run = SimpleNamespace(config=SimpleNamespace(gates=Gates()))
    seen: dict = {"analyses": []}

    def fake_confirm(_run, _opts, first, mode):  # noqa: ANN001, ANN202
        seen["mode"] = mode
        sel = select_for_confirmation(first.hosts, 2)
        return {}, {"mode": mode, "selection": sel.to_json()}

    def fake_analyse(*args):  # noqa: ANN002, ANN202
        seen["analyses"].append(args[2:])  # (confirmations, split checks, hosts over the bound)
        return SimpleNamespace(
            hosts=list(hosts), confirmation=None, populations=[], inconsistent=[], disagreements=[]
        )

    monkeypatch.setattr(wf, "analyse_run", fake_analyse)
    monkeypatch.setattr(wf, "confirm", fake_confirm)

    def fake_report(_run, _opts, result=None) -> int:  # noqa: ANN001
        seen["result"] = result
        return 0

    monkeypatch.setattr(wf, "report", fake_report)
    assert wf.verdict(run, wf.Options()) == 0 and seen["mode"] == "auto"
    # the final analysis is told which hosts the bound left out: it judges them (analysis.verdict)
    assert seen["analyses"] == [(), ({}, None, ("w3",))]
    assert seen["result"].confirmation["selection"]["limit"] == 2
    assert wf.confirm_mode(run, wf.Options(auto_confirm=False)) is None
    assert wf.confirm_mode(run, wf.Options(confirm=True, auto_confirm=False)) == "explicit"
    off = SimpleNamespace(config=SimpleNamespace(gates=Gates.model_validate({"confirm": {"auto": False}})))
    assert wf.confirm_mode(off, wf.Options()) is None


def test_confirm_and_no_confirm_together_are_a_usage_error() -> None:
    from click.testing import CliRunner

    from sb_fleet.cli.main import main

    r = CliRunner().invoke(main, ["validate", "--confirm", "--no-confirm", "--dry-run"])
    assert r.exit_code == 2 and "contradict" in r.output, r.output
