"""Localisation on pair matrices with planted faults (tests/synth/pairs.py). The fault sizes are what
real fabrics show (a link trained down to half or a quarter of its rate, a host at 60%), not values
picked to sit just past the detector's threshold."""

from __future__ import annotations

import itertools

import pytest

from sb_fleet.analysis.crossnode.localise import (
    Bisection,
    LocaliseSettings,
    PairMatrix,
    confirm,
    localise,
    second_pass,
)
from sb_fleet.config.traffic_patterns import pair_wise
from tests.synth.pairs import Faults, pair_matrix

HOSTS = [f"node{i:02d}" for i in range(16)]


def kinds(loc) -> list[tuple[str, str]]:
    return [(c.kind, c.target) for c in loc.culprits]


def test_healthy_fleet_names_nobody():
    loc = localise(pair_matrix(HOSTS, Faults(), seed=3))
    assert loc.culprits == () and loc.bad_pairs == 0 and len(loc.good) == 16


@pytest.mark.parametrize("factor", [0.25, 0.5, 0.6])
def test_slow_node_is_named_with_evidence_and_not_its_partners(factor):
    loc = localise(pair_matrix(HOSTS, Faults(nodes={"node05": factor}), seed=7))
    assert kinds(loc) == [("node", "node05")]
    c = loc.culprits[0]
    assert c.confidence == "high" and (c.bad, c.tested) == (15, 15)
    assert {h for e in c.evidence for h in (e.a, e.b)} == set(HOSTS)
    assert all(abs(e.ratio - factor) < 0.1 for e in c.evidence)
    assert "15 of 15 partners" in c.summary


def test_slow_link_is_a_link_and_neither_end_is_a_bad_node():
    loc = localise(pair_matrix(HOSTS, Faults(links={frozenset(("node03", "node09")): 0.4}), seed=11))
    assert kinds(loc) == [("link", "node03 <-> node09")]
    c = loc.culprits[0]
    assert c.confidence == "high" and c.hosts == ("node03", "node09")
    assert abs(c.evidence[0].ratio - 0.4) < 0.05
    assert "node03" not in loc.culprit_hosts("node")


def test_failed_pair_counts_as_a_link_fault():
    loc = localise(pair_matrix(HOSTS, Faults(failed={frozenset(("node01", "node02"))})))
    assert kinds(loc) == [("link", "node01 <-> node02")]
    assert loc.culprits[0].evidence[0].status == "failed"


def test_node_and_link_together_and_several_bad_nodes():
    faults = Faults(
        nodes={"node00": 0.5, "node07": 0.3, "node12": 0.5},
        links={frozenset(("node02", "node04")): 0.5},
    )
    loc = localise(pair_matrix(HOSTS, faults, seed=5))
    assert sorted(kinds(loc)) == [
        ("link", "node02 <-> node04"),
        ("node", "node00"),
        ("node", "node07"),
        ("node", "node12"),
    ]


def test_nic_fault_is_the_nic_not_the_node():
    nics = [f"mlx5_{i}" for i in range(8)]
    # one rail of node06 at a quarter of its rate: the pair total drops ~9%, which alone would say nothing
    m = pair_matrix(HOSTS, Faults(nics={("node06", "mlx5_3"): 0.25}), nics=nics, seed=2)
    loc = localise(m)
    assert kinds(loc) == [("nic", "node06 NIC mlx5_3")]
    assert loc.culprits[0].confidence == "high"
    assert "other NICs" in loc.culprits[0].summary


def test_every_nic_slow_is_the_node():
    nics = [f"mlx5_{i}" for i in range(4)]
    m = pair_matrix(HOSTS, Faults(nics={("node06", n): 0.5 for n in nics}), nics=nics, seed=2)
    assert kinds(localise(m)) == [("node", "node06")]


def test_path_fault_across_two_leaf_switches():
    rack_a, rack_b, rack_c = HOSTS[:6], HOSTS[6:12], HOSTS[12:]
    leaves = (
        {h: ("leaf-a",) for h in rack_a} | {h: ("leaf-b",) for h in rack_b} | {h: ("leaf-c",) for h in rack_c}
    )
    distance = {a: {b: (0 if a == b else 2 if leaves[a] == leaves[b] else 4) for b in HOSTS} for a in HOSTS}
    m = pair_matrix(HOSTS, Faults(paths=[(set(rack_a), set(rack_b), 0.5)]), seed=4)
    loc = localise(m, distance=distance, leaves=leaves)
    assert kinds(loc) == [("path", "leaf-a <-> leaf-b")]
    c = loc.culprits[0]
    assert (c.bad, c.tested) == (36, 36)
    # without the topology the same matrix cannot be a node verdict: each host is fine with 2/3 or more
    assert not localise(m).culprit_hosts("node")


def test_noise_alone_names_nobody_over_many_fleets():
    for seed in range(30):
        assert localise(pair_matrix(HOSTS, Faults(), seed=seed, noise=0.04)).culprits == (), seed


def test_lower_is_better_metric():
    m = pair_matrix(HOSTS, Faults(nodes={"node10": 0.5}), seed=9)
    lat = PairMatrix(
        "latency",
        m.hosts,
        tuple(type(p)(p.a, p.b, 1000.0 / p.value if p.value else None) for p in m.pairs),
        "us",
        False,
    )
    assert kinds(localise(lat)) == [("node", "node10")]


def test_pair_wise_round_results_in_one_matrix():
    sched = pair_wise(HOSTS)
    pairs = [g for rnd in sched.rounds for g in rnd]
    m = pair_matrix(HOSTS, Faults(nodes={"node15": 0.5}), pairs=pairs)  # type: ignore[arg-type]
    assert kinds(localise(m)) == [("node", "node15")]


def test_second_pass_confirms_a_real_node_and_drops_a_transient_link():
    faults = Faults(nodes={"node05": 0.5}, links={frozenset(("node01", "node02")): 0.4})
    loc = localise(pair_matrix(HOSTS, faults, seed=1))
    rounds = second_pass(loc, HOSTS)
    assert rounds, "a second pass is planned"
    for rnd in rounds:
        flat = [h for p in rnd for h in p]
        assert len(flat) == len(set(flat))
    planned = [p for rnd in rounds for p in rnd]
    assert ("node01", "node02") in planned
    assert sum(1 for p in planned if "node05" in p) == 2
    assert all(set(p) - {"node05", "node01", "node02"} <= set(loc.good) for p in planned)
    # the second pass: node05 still slow, the link is fine now (it was transient)
    again = pair_matrix(HOSTS, Faults(nodes={"node05": 0.5}), seed=2, pairs=planned)
    final = confirm(loc, again)
    by = {c.target: c for c in final.culprits}
    assert by["node05"].confirmed is True and by["node05"].confidence == "high"
    assert by["node01 <-> node02"].confirmed is False and by["node01 <-> node02"].confidence == "low"


def test_second_pass_confirms_a_reproduced_link():
    faults = Faults(links={frozenset(("node01", "node02")): 0.4})
    loc = localise(pair_matrix(HOSTS, faults, seed=1))
    planned = [p for rnd in second_pass(loc, HOSTS) for p in rnd]
    final = confirm(loc, pair_matrix(HOSTS, faults, seed=3, pairs=planned))
    assert final.culprits[0].confirmed is True


def test_two_hosts_only_is_unexplained_not_a_verdict():
    loc = localise(
        pair_matrix(["a", "b", "c"], Faults(failed={frozenset(("a", "b"))}), pairs=[("a", "b"), ("b", "c")])
    )
    # 'a' has no other partner: node or link cannot be told apart
    assert loc.culprits == () and len(loc.unexplained) == 1


def run_bisection(hosts: list[str], bad: set[str]) -> Bisection:
    b = Bisection.start(hosts)
    while not b.done:
        tests = b.tests()
        groups = [g for g, _ in tests]
        flat = [h for g in groups for h in g]
        assert len(flat) == len(set(flat)), "a host in two groups of one round"
        b = b.record({t: not (set(g) & bad) for g, t in tests})
        assert b.rounds <= 2 * len(hosts)
    return b


@pytest.mark.parametrize("n", [4, 5, 6, 7, 8, 13, 16, 33, 64, 1000])
def test_bisection_finds_one_bad_node_in_log2_n_rounds(n):
    hosts = [f"h{i}" for i in range(n)]
    positions = sorted({0, 1, n // 2, n - 1, n // 3})
    for pos in positions:
        b = run_bisection(hosts, {hosts[pos]})
        assert b.culprits == (hosts[pos],)
        assert b.rounds <= Bisection.max_rounds(n), (n, pos, b.rounds)


def test_bisection_two_bad_nodes_and_a_cross_half_fault():
    hosts = [f"h{i}" for i in range(16)]
    b = run_bisection(hosts, {"h2", "h11"})
    assert sorted(b.culprits) == ["h11", "h2"]
    # a fault that needs both halves (a link between them): every half passes, the group is unresolved
    b = Bisection.start(hosts)
    b = b.record({t: True for _g, t in b.tests()})
    assert b.done and b.culprits == () and b.unresolved == (tuple(hosts),)


def test_settings_threshold_is_declared_once():
    loc = localise(
        pair_matrix(HOSTS, Faults(nodes={"node01": 0.85}), seed=1), settings=LocaliseSettings(slow_ratio=0.9)
    )
    assert kinds(loc) == [("node", "node01")]
    assert localise(pair_matrix(HOSTS, Faults(nodes={"node01": 0.85}), seed=1)).culprits == ()


def test_matrix_json_round_trip():
    m = pair_matrix(HOSTS[:4], Faults(failed={frozenset(("node00", "node01"))}), nics=["mlx5_0"])
    assert PairMatrix.from_json(m.to_json()) == m
    with pytest.raises(ValueError, match="schema_version"):
        PairMatrix.from_json({**m.to_json(), "schema_version": 99})


def test_all_pairs_once_helper_is_honest():
    # guard for the generator itself: every pair of the fleet is present once
    m = pair_matrix(HOSTS, Faults())
    assert {p.key for p in m.pairs} == {frozenset(p) for p in itertools.combinations(HOSTS, 2)}
