"""validate's confirmation holds the re-run to the limit that flagged the finding (issue 55, item 6).

A finding reproduces when the re-run value clears the *flag limit* (the one the check flagged it
beyond, which it carries: ``Issue.flag_limit``) computed under the re-run's own noise, and lies beyond
the controls' run-to-run noise; not when it merely comes back to half its first deviation. The
corpus of real runs (tests/corpus/) is the oracle: each no-fault or slow-host run's first pass,
confirmed with the next recorded run of the same fleet as its re-run, and with the re-run validate
recorded with it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import numpy as np
import pytest

from sb_fleet.analysis.evidence import FLAGGED
from sb_fleet.analysis.issues import Issue, flag_limit
from sb_fleet.analysis.majority import majority_check, ref_inflation
from sb_fleet.analysis.superbench.metric_names import Directions
from sb_fleet.config.gatespec import DetectionSettings
from sb_fleet.history.confirm import (
    CONFIRMED,
    FIRST_NOISE,
    FLAKY,
    NO_FLAG_LIMIT,
    ConfirmPlan,
    confirmation_json,
    judge_confirmation,
    recorded,
)

LAUNCH = "kernel-launch/back_to_back_time"  # lower is better
GEMM = "gemm-flops/fp32_flops"  # higher is better
SIX = 5.5 * float(ref_inflation(np.array([5]))[0])  # majority's width at 6 hosts, in noise units


def _finding(metric: str, first: float, limit: float, ref: float = 1.0, check: str = "majority") -> Issue:
    """A majority finding ``first`` off (relative) that was flagged beyond ``limit`` (relative) at 6 hosts."""
    sigma = abs(math.log1p(limit)) / SIX
    fl = flag_limit(limit, sigma, 0.01, SIX, 0.03, log=True)
    assert abs(fl.deviation - limit) < 1e-12
    return Issue(metric, ref * (1 + first), ref, first, check, "KernelLaunch", sigmas=9.0, flag_limit=fl)


def _steady_controls(metric: str, ref: float) -> dict[str, dict[str, float]]:
    return {f"c{i}": {metric: ref * (1 + 0.001 * i)} for i in range(3)}


def test_the_issues_healthy_host_does_not_reproduce_at_half_its_first_deviation() -> None:
    # Issue 55: a real no-fault run of 6 loopback hosts, node4's launch time +37.2% (limit +27.8%), then
    # +19.1% in the re-run: the old rule (half the first deviation, 18.6%) counted it reproduced and the
    # gate failed a healthy host. Controls that kept their places, the re-run's noise as the first run's.
    ref = 0.002354
    f = _finding(LAUNCH, 0.372, 0.278, ref)
    controls = _steady_controls(LAUNCH, ref)
    noise = {"node4": {LAUNCH: f.flag_limit.noise}, **{c: {LAUNCH: 0.01} for c in controls}}
    got = judge_confirmation(
        {"node4": [f]}, {"node4": {LAUNCH: ref * 1.191}}, controls, controls, noise=noise
    )
    r = got["node4"].replays[0]
    assert got["node4"].result == FLAKY, r
    assert r.why == "+37.2% then +19.1% (needed +27.8% under the re-run's noise)"
    assert abs(r.limit - 0.278) < 1e-9 and abs(r.first_limit - 0.278) < 1e-9
    # the old rule, which a finding that carries no limit still falls back to (and says so)
    old = judge_confirmation(
        {"node4": [dataclasses.replace(f, flag_limit=None)]},
        {"node4": {LAUNCH: ref * 1.191}},
        controls,
        controls,
    )
    assert old["node4"].result == CONFIRMED
    assert old["node4"].replays[0].why == f"+37.2% then +19.1% (needed +18.6% {NO_FLAG_LIMIT})"
    # the same host again at +30%: beyond the limit, and the controls kept still: it reproduces
    again = judge_confirmation(
        {"node4": [f]}, {"node4": {LAUNCH: ref * 1.30}}, controls, controls, noise=noise
    )
    assert again["node4"].result == CONFIRMED, again["node4"].replays


def test_the_limit_rises_with_the_reruns_noise_and_never_falls_below_the_first_runs() -> None:
    ref = 0.002354
    f = _finding(LAUNCH, 0.372, 0.278, ref)
    controls = _steady_controls(LAUNCH, ref)
    value = {"node4": {LAUNCH: ref * 1.30}}
    twice = math.expm1(2 * math.log1p(0.278))  # the limit at twice the first run's noise
    # the control hosts' own samples scattered twice as much in the re-run: +30% is inside that
    noisy = {c: {LAUNCH: 2 * f.flag_limit.noise} for c in controls}
    got = judge_confirmation({"node4": [f]}, value, controls, controls, noise=noisy)
    r = got["node4"].replays[0]
    assert got["node4"].result == FLAKY and abs(r.limit - twice) < 1e-9, r
    assert r.why == f"+37.2% then +30.0% (needed {twice:+.1%} under the re-run's noise)"
    # so did the controls among themselves (majority's "other hosts"), their samples quiet
    apart = {"c0": {LAUNCH: ref * 0.8}, "c1": {LAUNCH: ref}, "c2": {LAUNCH: ref * 1.25}}
    quiet = {c: {LAUNCH: 0.001} for c in apart}
    assert judge_confirmation({"node4": [f]}, value, apart, apart, noise=quiet)["node4"].result == FLAKY
    # the flagged host's own scatter does not widen its limit: a fault that makes its samples scatter
    # (a busy neighbour) must not hide behind it (slowhost-6h r06: 1.2% first, 15% in the re-run)
    own = {"node4": {LAUNCH: 5 * f.flag_limit.noise}, **quiet}
    got = judge_confirmation({"node4": [f]}, value, controls, controls, noise=own)
    assert got["node4"].result == CONFIRMED and abs(got["node4"].replays[0].limit - 0.278) < 1e-9
    # a re-run quieter than the first run (a few hosts instead of the fleet) asks no less than it did
    less = judge_confirmation(
        {"node4": [f]}, {"node4": {LAUNCH: ref * 1.25}}, controls, controls, noise=quiet
    )
    assert less["node4"].result == FLAKY and abs(less["node4"].replays[0].limit - 0.278) < 1e-9
    # a re-run that measured no noise (a fleet check: its limit the fleet's spread and the host's own
    # noise, and the controls reported none): the first run's limit, said so
    fleet = Issue(
        LAUNCH,
        ref * 1.2,
        ref,
        0.2,
        "fleet",
        "KernelLaunch",
        flag_limit=flag_limit(1.0, 0.03, 0.03, 5.5, 0.03),
    )
    blind = judge_confirmation({"node4": [fleet]}, {"node4": {LAUNCH: ref * 1.12}}, controls, controls)
    r = blind["node4"].replays[0]
    assert blind["node4"].result == FLAKY and abs(r.limit - 0.165) < 1e-9
    assert r.why == f"+20.0% then +12.0% (needed +16.5% {FIRST_NOISE})"


def test_a_slow_host_still_reproduces_and_a_healed_one_does_not() -> None:
    # slowhost-6h-parallel-quiet r01: host004 at -46.0% (limit -34.6%) and -44.6% in its recorded re-run
    ref = 22.69
    f = _finding(GEMM, -0.460, -0.346, ref)
    controls = _steady_controls(GEMM, ref)
    noise = {"host004": {GEMM: 0.02}}
    got = judge_confirmation(
        {"host004": [f]}, {"host004": {GEMM: ref * (1 - 0.446)}}, controls, controls, noise=noise
    )
    r = got["host004"].replays[0]
    assert got["host004"].result == CONFIRMED, r
    assert r.why.startswith("-46.0% then -44.6% (needed -") and r.limit < 0
    healed = judge_confirmation(
        {"host004": [f]}, {"host004": {GEMM: ref * 0.99}}, controls, controls, noise=noise
    )
    assert healed["host004"].result == FLAKY
    # on the good side by as much: never a repeat
    fast = judge_confirmation(
        {"host004": [f]}, {"host004": {GEMM: ref * 1.6}}, controls, controls, noise=noise
    )
    assert fast["host004"].result == FLAKY


def test_majority_findings_carry_the_limit_their_evidence_shows() -> None:
    rng = np.random.default_rng(7)
    hosts = [f"h{i}" for i in range(6)]
    cols = [LAUNCH, "kernel-launch/torch_launch_time", GEMM]
    v = np.column_stack([base * (1 + 0.02 * rng.standard_normal(6)) for base in (0.0025, 0.003, 30.0)])
    v[3] = [0.0025 * 1.9, 0.003 * 1.8, 30 * 0.5]  # h3: slow on all three
    out = majority_check(cols, v, Directions({}), hosts, DetectionSettings())
    found = {i.metric: i for i in out.issues[3] if i.check == "majority"}
    assert set(found) == set(cols), out.issues
    for ev in out.evidence:
        h = next(h for h in ev.hosts if h.name == "h3")
        assert h.status == FLAGGED
        fl = found[ev.metric].flag_limit
        assert fl is not None and abs(fl.deviation - (h.limit / h.reference - 1)) < 1e-9, (ev.metric, fl, h)
        assert fl.under(fl.noise) == fl.deviation and abs(fl.under(None)) <= abs(fl.deviation)
    comb = next(i for i in out.issues[3] if i.check == "majority-combined")
    assert comb.flag_limit is not None and 0 < -comb.flag_limit.deviation < -comb.deviation


def test_confirm_json_keeps_its_fields_and_adds_the_limits() -> None:
    ref = 0.002354
    f = _finding(LAUNCH, 0.372, 0.278, ref)
    controls = _steady_controls(LAUNCH, ref)
    got = judge_confirmation({"node4": [f]}, {"node4": {LAUNCH: ref * 1.191}}, controls, controls)
    doc = confirmation_json(ConfirmPlan({"node4": ["kernel-launch"]}, list(controls)), got, "/r/confirm")
    rep = doc["hosts"]["node4"]["replays"][0]
    assert {
        "metric",
        "check",
        "first",
        "again",
        "first_value",
        "again_value",
        "reference",
        "reproduced",
        "why",
    } <= set(rep)
    assert abs(rep["limit"] - 0.278) < 1e-9 and abs(rep["first_limit"] - 0.278) < 1e-9
    assert rep["limit_basis"] == "under the re-run's noise"  # the controls' spread, in the re-run
    back = recorded(doc, None).confirmations["node4"].replays[0]
    assert back == got["node4"].replays[0]
    del rep["limit"], rep["first_limit"], rep["limit_basis"]  # a confirm.json from before: still read
    assert recorded(doc, None).confirmations["node4"].replays[0].limit is None


# --- the oracle: the corpus of real runs -------------------------------------------------------------


def _pairs_and_recorded():  # noqa: ANN202 - (case, run, host, faulty, Replay, source)
    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.history import confirm as cf
    from sb_fleet.report.analyse import report
    from tests.synth.corpus import _confirmations, runs

    cases = [f"nofault-{n}h-parallel-quiet" for n in (3, 4, 6, 8)] + ["slowhost-6h-parallel-quiet"]
    by: dict[str, list] = defaultdict(list)
    for r in runs():
        if r.case in cases:
            by[r.case].append(r)
    out = []
    for case, rs in sorted(by.items()):
        rs.sort(key=lambda r: r.path.name)
        firsts = [report(r.path) for r in rs]
        fleets = [load_fleet(r.path) for r in rs]
        for k, (run, first) in enumerate(zip(rs, firsts, strict=True)):
            # the next recorded run of the same fleet (the last one's: the first) as the re-run
            again = fleets[(k + 1) % len(rs)]
            chosen = cf.select_for_confirmation(first.hosts, len(first.hosts)).chosen
            plan = cf.plan_confirmation(first.hosts, only=chosen)
            rerun = cf.rerun_values(again.hosts, again.columns, again.values)
            noise = (
                cf.rerun_values(again.hosts, again.columns, again.noise) if again.noise is not None else None
            )
            fv = cf.rerun_values(first.fleet.hosts, first.fleet.columns, first.fleet.values)
            got = cf.judge_confirmation(
                {h.name: h.issues for h in first.hosts if h.name in plan.benchmarks},
                {h: rerun[h] for h in plan.benchmarks if h in rerun},
                {c: fv[c] for c in plan.controls},
                {c: rerun[c] for c in plan.controls if c in rerun},
                firsts=fv,
                direction=first.fleet.directions.of,
                noise=noise,
            )
            out += [(case, run, h, h == run.fault_host, c, "pair") for h, c in got.items()]
            out += [
                (case, run, h, h == run.fault_host, c, "recorded")
                for h, c in (_confirmations(run, first) or {}).items()
            ]
    return out


@pytest.fixture(scope="module")
def corpus_confirmations():  # noqa: ANN201
    from tests.synth.corpus import CORPUS

    if not CORPUS.is_dir():
        pytest.skip("tests/corpus is not there")
    return _pairs_and_recorded()


def test_no_healthy_hosts_finding_reproduces_in_the_corpus(corpus_confirmations) -> None:  # noqa: ANN001
    healthy = [x for x in corpus_confirmations if not x[3]]
    assert len([x for x in healthy if x[5] == "pair"]) >= 10, "too few first-pass findings to be evidence"
    assert len([x for x in healthy if x[5] == "recorded"]) >= 10
    wrong = [
        f"{case}/{run.path.name} {h} ({src}): {c.sentence()}"
        for case, run, h, _, c, src in healthy
        if c.result == CONFIRMED
    ]
    assert not wrong, wrong


def test_the_slow_host_reproduces_in_the_corpus(corpus_confirmations) -> None:  # noqa: ANN001
    slow = [x for x in corpus_confirmations if x[3]]
    pairs = [x for x in slow if x[5] == "pair"]
    rec = [x for x in slow if x[5] == "recorded"]
    # every re-run validate recorded with the run confirms it (18: r03 recorded none, r07 too noisy)
    assert len(rec) == 18 and all(c.result == CONFIRMED for *_, c, _ in rec), [
        c.sentence() for *_, c, _ in rec
    ]
    # the next recorded run as the re-run (a harsher test: another run, the fault 1.5-2.6x from run to
    # run): 17 of the 19 runs that flagged it. r06 then r07: r07's fleet was 8.8% apart (the controls
    # too), so -34.9% is inside a limit of -42.5% (r07 flagged nobody on its own first pass either);
    # r17 then r18: r17 flagged it just beyond its limit (-48.5% against -45.3%, its own samples
    # scattering 9.6%), r18 measured -44.2%.
    missed = sorted(run.path.name[:3] for _, run, _, _, c, _ in pairs if c.result != CONFIRMED)
    assert len(pairs) == 19 and set(missed) <= {"r06", "r17"}, missed
