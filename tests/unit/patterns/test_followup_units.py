"""The pure parts of validate's pattern follow-ups: a plan that runs given rounds (a second pass or a
bisection round), groups of any size judged from results, and the fabric findings that fail a host or
the gate. The follow-ups themselves run on a real fleet in tests/integration/test_patterns.py."""

from __future__ import annotations

import json

import pytest

from sb_fleet.analysis.crossnode.fabric import judge_fabric
from sb_fleet.analysis.crossnode.localise import (
    Bisection,
    PairMatrix,
    PairResult,
    confirm,
    localise,
    second_pass,
)
from sb_fleet.analysis.crossnode.pair_results import group_results
from sb_fleet.config.traffic_patterns import pair_wise, round_key
from sb_fleet.plan.run_plan import GivenRounds, Plan
from tests.unit.patterns.test_pattern_plan import plan_for

PAIRWISE = (
    "    tcp-bw:\n      timeout: 30\n      modes: [{name: mpi, proc_num: 1, pattern: {type: pair-wise}}]\n"
)


def test_given_rounds_replace_the_pattern_and_keep_superbench_indexes(tmp_path):
    rounds = [[["node0", "node3"], ["node1", "node4"]], [["node0", "node5"]]]
    given = {"tcp-bw": GivenRounds.of("second-pass", rounds)}
    base = plan_for(tmp_path, PAIRWISE)
    plan = plan_for(tmp_path, PAIRWISE, given=given)
    assert len(base.steps) == 5 and len(plan.steps) == 2
    assert [s.entries[0].key for s in plan.steps] == ["tcp-bw@0", "tcp-bw@1"]
    assert [[list(g.hosts) for g in s.groups] for s in plan.steps] == rounds
    assert [g.mode_index for g in plan.steps[0].groups] == ["0,0", "0,1"]
    assert plan.steps[1].left_out == ("node1", "node2", "node3", "node4")
    assert plan.patterns["tcp-bw"]["type"] == "second-pass"
    assert plan.patterns["tcp-bw"]["mpi_pattern"].startswith(
        "benchmark_name: tcp-bw pattern_type: second-pass\n"
    )
    assert Plan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def test_given_rounds_on_a_torchrun_entry_make_each_group_the_world(tmp_path):
    body = "    nccl-bw:\n      timeout: 30\n      modes: [{name: torch.distributed, proc_num: 1, node_num: all}]\n"
    plan = plan_for(
        tmp_path, body, given={"nccl-bw": GivenRounds.of("bisection", [[["node0", "node1", "node2"]]])}
    )
    (step,) = plan.steps
    assert step.entries[0].modes[0]["node_num"] == "all" and step.groups[0].hosts == (
        "node0",
        "node1",
        "node2",
    )
    assert step.groups[0].mode_index == "0,0"


def test_given_rounds_naming_an_unknown_host_are_refused(tmp_path):
    with pytest.raises(ValueError, match="nodeX"):
        plan_for(tmp_path, PAIRWISE, given={"tcp-bw": GivenRounds.of("second-pass", [[["node0", "nodeX"]]])})


def test_groups_of_any_size_are_judged_from_figures_and_statuses():
    rounds = [[["a", "b", "c"], ["d", "e"], ["f", "g"], ["h", "i"]]]
    key = "tcp-bw"
    r0 = round_key(key, 0)
    records = {"a": {f"{key}/tcp_0_0:1024_bw": 1.0}, "d": {}, "f": {f"{key}/tcp_0_2:1024_bw": 2.0}}
    statuses = {
        "a": {r0: {"status": "ok"}},
        "d": {r0: {"status": "ok"}},
        "e": {r0: {"status": "timeout", "reason": "killed at its timeout of 20 s"}},
        "f": {r0: {"status": "ok"}},
    }
    got = {r.hosts: (r.passed, r.status, r.reason) for r in group_results(records, rounds, key, statuses)}
    assert got[("a", "b", "c")] == (True, "ok", "")
    assert got[("d", "e")] == (False, "timeout", "e: killed at its timeout of 20 s")
    assert got[("f", "g")] == (True, "ok", "")
    assert got[("h", "i")] == (False, "failed", "no result from any member")
    # a group whose members ran but left no figure where the benchmark names its figures
    statuses["h"] = {r0: {"status": "ok"}}
    (last,) = [r for r in group_results(records, rounds, key, statuses) if r.hosts == ("h", "i")]
    assert (last.passed, last.reason) == (False, "no figure for this group")
    # skipped everywhere (no CUDA here): not a failure
    skipped = {"x": {key: {"status": "skipped", "reason": "needs CUDA"}}}
    (s,) = group_results({}, [[["x", "y"]]], key, skipped)
    assert (s.passed, s.status, s.reason) == (True, "skipped", "needs CUDA")


def _matrix(hosts, slow=(), link=(), value=10.0, factor=0.4):
    pairs = []
    for s, rnd in enumerate(pair_wise(hosts).rounds):
        for p, (a, b) in enumerate(rnd):
            v = value * (factor if (a in slow or b in slow or {a, b} == set(link)) else 1.0)
            pairs.append(PairResult(a, b, v, "ok", s, p))
    return PairMatrix("tcp-bw/tcp_<round>_<pair>:1024_bw", tuple(hosts), tuple(pairs), "GB/s", True)


def _second(loc, hosts, slow=(), link=()):
    """The second pass's matrix, measured with the same fault (or without it)."""
    pairs = []
    for s, rnd in enumerate(second_pass(loc, hosts)):
        for p, (a, b) in enumerate(rnd):
            bad = a in slow or b in slow or {a, b} == set(link)
            pairs.append(PairResult(a, b, 4.0 if bad else 10.0, "ok", s, p))
    return PairMatrix("tcp-bw/tcp_<round>_<pair>:1024_bw", tuple(hosts), tuple(pairs), "GB/s", True)


HOSTS = [f"h{i}" for i in range(8)]


def _docs(loc, matrix, after=None):
    pairs = {"tcp-bw": {"entry": "tcp-bw", "matrix": matrix.to_json(), "localisation": loc.to_json()}}
    follow = (
        None if after is None else {"entries": {"tcp-bw": {"second_pass": {"localisation": after.to_json()}}}}
    )
    return pairs, follow


def test_a_node_reproduced_in_the_second_pass_fails_that_host_only():
    m = _matrix(HOSTS, slow=("h2",))
    loc = localise(m)
    after = confirm(loc, _second(loc, HOSTS, slow=("h2",)))
    view = judge_fabric(*_docs(loc, m, after))
    issues = view.host_issues()
    assert list(issues) == ["h2"]
    (i,) = issues["h2"]
    assert i.check == "pattern" and i.category == "Fabric" and i.severity == "fail"
    assert (
        i.reference == pytest.approx(10.0)
        and i.value == pytest.approx(4.0)
        and i.deviation == pytest.approx(-0.6)
    )
    assert "reproduced in the second pass" in i.detail
    assert view.gate_failure is None and view.warnings() == []
    assert "| tcp-bw | node | h2 | high | reproduced | yes |" in view.markdown()


def test_a_node_not_reproduced_is_a_warning_and_fails_nothing():
    m = _matrix(HOSTS, slow=("h2",))
    loc = localise(m)
    after = confirm(loc, _second(loc, HOSTS))  # the second pass is clean: a transient
    view = judge_fabric(*_docs(loc, m, after))
    assert view.host_issues() == {} and view.gate_failure is None
    assert len(view.warnings()) == 1 and "NOT reproduced" in view.warnings()[0]


def test_without_a_second_pass_a_high_confidence_culprit_counts():
    m = _matrix(HOSTS, slow=("h5",))
    loc = localise(m)
    view = judge_fabric(*_docs(loc, m))
    assert list(view.host_issues()) == ["h5"]


def test_a_link_fails_the_gate_and_neither_host():
    m = _matrix(HOSTS, link=("h1", "h4"))
    loc = localise(m)
    assert [(c.kind, c.hosts) for c in loc.culprits] == [("link", ("h1", "h4"))]
    after = confirm(loc, _second(loc, HOSTS, link=("h1", "h4")))
    view = judge_fabric(*_docs(loc, m, after))
    assert view.host_issues() == {}
    assert view.gate_failure == "fabric: link h1 <-> h4"


def test_bisection_culprits_fail_their_hosts_and_unresolved_groups_the_gate():
    hosts = [f"n{i}" for i in range(6)]
    b = Bisection.start(hosts)
    while not b.done:
        b = b.record({t: "n4" not in t for _g, t in b.tests()})
    assert b.culprits == ("n4",) and b.rounds <= Bisection.max_rounds(6)
    follow = {
        "entries": {
            "tcp-bw": {
                "bisection": {
                    "hosts": hosts,
                    "first": {"status": "timeout"},
                    "culprits": list(b.culprits),
                    "unresolved": [["n0", "n1"]],
                    "rounds_run": b.rounds,
                }
            }
        }
    }
    view = judge_fabric({}, follow)
    assert list(view.host_issues()) == ["n4"]
    assert "bisection: n4 fails with known-good partners" in view.host_issues()["n4"][0].detail
    assert view.gate_failure == "fabric: unresolved n0, n1"
