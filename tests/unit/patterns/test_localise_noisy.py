"""Localisation on noisy fabrics: healthy pairs 4x apart (pair-wise tcp-bw over loopback hosts on a shared
machine measured 0.33-1.46 GB/s), faults the size the issue measured (a host shaped to 300 Mbit/s gave
0.019 GB/s with every partner, 18-78x slower) or that real fabrics show (a rail at a quarter of its rate).

No fault size here was picked to sit just past a bar: each is what a real fault gives, and each case is
run over many generated fabrics (seeds), the fault on every host position in turn. A global threshold
drawn from the noisy spread (the old design: 0.0036 GB/s in the issue's run) names none of these nodes.
"""

from __future__ import annotations

import math

import pytest

from sb_fleet.analysis.crossnode.localise import Localisation, confirm, localise, second_pass
from sb_fleet.config.traffic_patterns import pair_wise
from tests.synth.pairs import Faults, pair_matrix

SPREAD = 4.0  # the best healthy pair 4x the worst
SEEDS = range(50)


def fleet(n: int) -> tuple[list[str], list[list[tuple[str, str]]]]:
    hosts = [f"node{i:02d}" for i in range(n)]
    return hosts, [list(r) for r in pair_wise(hosts).rounds]  # type: ignore[misc]


def kinds(loc: Localisation) -> list[tuple[str, str]]:
    return [(c.kind, c.target) for c in loc.culprits]


# the issue's run, re-typed as a generator: healthy pairs log-uniform over 0.33-1.46 GB/s, one host's
# every pair capped at 0.019 GB/s (its traffic shaped both ways)
ISSUE_BASE = math.sqrt(0.33 * 1.46)
ISSUE_SPREAD = 1.46 / 0.33


def issue_run(n: int, slow: str, seed: int) -> Localisation:
    hosts, rounds = fleet(n)
    m = pair_matrix(
        hosts, Faults(caps={slow: 0.019}), seed=seed, base=ISSUE_BASE, spread=ISSUE_SPREAD, rounds=rounds
    )
    return localise(m)


@pytest.mark.parametrize("n", [6, 8])
def test_the_issues_shaped_host_is_named_at_6_and_8_hosts(n):
    hosts, _ = fleet(n)
    exact = 0
    for seed in SEEDS:
        slow = hosts[seed % n]
        loc = issue_run(n, slow, seed)
        node = [c for c in loc.culprits if c.kind == "node" and c.target == slow]
        assert node, (seed, kinds(loc), loc.notes)  # always named
        c = node[0]
        assert (c.bad, c.tested) == (n - 1, n - 1) and c.confidence == "high", (seed, c)
        assert f"slow with {n - 1} of {n - 1} partners" in c.summary
        assert all(e.value is not None and e.value < 0.021 for e in c.evidence)
        exact += kinds(loc) == [("node", slow)]
    # nothing else named, in (nearly) every fabric: 6 hosts leave 10 healthy pairs to judge the spread by
    assert exact >= (48 if n == 6 else 50), exact


@pytest.mark.parametrize("n", [6, 8, 16])
def test_a_node_18x_slow_with_every_partner_is_named_over_noisy_pairs(n):
    hosts, rounds = fleet(n)
    exact = 0
    for seed in SEEDS:
        slow = hosts[seed % n]
        m = pair_matrix(hosts, Faults(nodes={slow: 1 / 18}), seed=seed, spread=SPREAD, rounds=rounds)
        loc = localise(m)
        assert slow in loc.culprit_hosts("node"), (seed, kinds(loc))
        exact += kinds(loc) == [("node", slow)]
    assert exact >= (48 if n == 6 else 50), exact


def test_two_slow_nodes_in_eight_hosts():
    hosts, rounds = fleet(8)
    for seed in range(30):
        a, b = hosts[seed % 8], hosts[(seed + 3) % 8]
        loc = localise(
            pair_matrix(hosts, Faults(nodes={a: 1 / 18, b: 1 / 18}), seed=seed, spread=SPREAD, rounds=rounds)
        )
        assert sorted(kinds(loc)) == sorted([("node", a), ("node", b)]), (seed, kinds(loc))


@pytest.mark.parametrize("n, most", [(6, 1), (8, 1), (16, 0)])
def test_noise_alone_names_nobody(n, most):
    hosts, rounds = fleet(n)
    named = [
        seed
        for seed in SEEDS
        if localise(pair_matrix(hosts, Faults(), seed=seed, spread=SPREAD, rounds=rounds)).culprits
    ]
    assert len(named) <= most, named


def test_load_that_comes_and_goes_by_round_names_nobody_and_hides_no_node():
    hosts, rounds = fleet(8)
    for seed in range(30):
        kw = {"seed": seed, "spread": 3.0, "rounds": rounds, "round_spread": 2.0}
        assert localise(pair_matrix(hosts, Faults(), **kw)).culprits == (), seed
        slow = hosts[seed % 8]
        assert kinds(localise(pair_matrix(hosts, Faults(nodes={slow: 1 / 18}), **kw))) == [("node", slow)], (
            seed
        )


def test_a_bad_link_is_the_link_and_neither_host():
    hosts, rounds = fleet(16)
    for seed in SEEDS:
        a, b = hosts[seed % 16], hosts[(seed + 5) % 16]
        loc = localise(
            pair_matrix(
                hosts, Faults(links={frozenset((a, b)): 1 / 18}), seed=seed, spread=SPREAD, rounds=rounds
            )
        )
        assert [(c.kind, set(c.hosts)) for c in loc.culprits] == [("link", {a, b})], (seed, kinds(loc))
    hosts, rounds = fleet(8)
    found = 0
    for seed in SEEDS:
        a, b = hosts[seed % 8], hosts[(seed + 3) % 8]
        loc = localise(
            pair_matrix(
                hosts, Faults(links={frozenset((a, b)): 1 / 18}), seed=seed, spread=SPREAD, rounds=rounds
            )
        )
        assert not loc.culprit_hosts("node"), (seed, kinds(loc))
        found += [(c.kind, set(c.hosts)) for c in loc.culprits] == [("link", {a, b})]
    # one pair against 4x noise, each end judged from 6 other pairs: most, not all
    assert found >= 45, found


@pytest.mark.parametrize("n", [8, 16])
def test_a_bad_nic_is_the_nic_over_noisy_pairs(n):
    hosts, rounds = fleet(n)
    nics = [f"mlx5_{i}" for i in range(8)]
    for seed in range(30):
        h = hosts[seed % n]
        m = pair_matrix(
            hosts, Faults(nics={(h, "mlx5_3"): 0.25}), seed=seed, spread=SPREAD, rounds=rounds, nics=nics
        )
        assert kinds(localise(m)) == [("nic", f"{h} NIC mlx5_3")], seed


def test_second_pass_confirms_on_a_noisy_fabric_even_at_another_load():
    hosts, rounds = fleet(8)
    for seed in range(30):
        slow = hosts[seed % 8]
        faults = Faults(caps={slow: 0.019})
        loc = localise(
            pair_matrix(hosts, faults, seed=seed, base=ISSUE_BASE, spread=ISSUE_SPREAD, rounds=rounds)
        )
        planned = [p for rnd in second_pass(loc, hosts) for p in rnd]
        assert sum(1 for p in planned if slow in p) == 2
        # the second pass runs when the machine is busier: every healthy pair at half its figure
        again = pair_matrix(
            hosts, faults, seed=seed + 1000, base=ISSUE_BASE / 2, spread=ISSUE_SPREAD, pairs=planned
        )
        final = confirm(loc, again)
        assert [(c.target, c.confirmed) for c in final.culprits] == [(slow, True)], seed
        # a fault that went away: the node is not reproduced
        gone = pair_matrix(
            hosts, Faults(), seed=seed + 2000, base=ISSUE_BASE, spread=ISSUE_SPREAD, pairs=planned
        )
        assert [(c.target, c.confirmed) for c in confirm(loc, gone).culprits] == [(slow, False)], seed


def test_localisation_json_keeps_what_the_second_pass_needs():
    hosts, rounds = fleet(6)
    loc = issue_run(6, hosts[2], 1)
    back = Localisation.from_json(loc.to_json())
    assert back == loc and back.bar == loc.bar and back.references == loc.references
    # a localisation written before bar/references were kept still reads, and confirm falls back
    old = {k: v for k, v in loc.to_json().items() if k not in ("bar", "references", "nic_bar")}
    assert Localisation.from_json(old).bar is None


# A real run (tests/integration/test_patterns.py::test_link_fault_names_the_pair_and_neither_host, on a
# shared 2-core machine): 6 loopback hosts, the link host002 <-> host005 shaped to 200 Mbit/s, and
# round 4 hit by load from elsewhere, all three of its pairs 3-5x down. (round, a, b, GB/s)
LOADED_ROUND = [
    (0, "host001", "host006", 0.2377),
    (0, "host002", "host005", 0.0125),
    (0, "host003", "host004", 0.4547),
    (1, "host001", "host002", 0.4967),
    (1, "host003", "host006", 0.4033),
    (1, "host004", "host005", 0.3499),
    (2, "host001", "host003", 0.4098),
    (2, "host004", "host002", 0.3530),
    (2, "host005", "host006", 0.2373),
    (3, "host001", "host004", 0.2923),
    (3, "host005", "host003", 0.3456),
    (3, "host006", "host002", 0.2541),
    (4, "host001", "host005", 0.0866),
    (4, "host006", "host004", 0.1282),
    (4, "host002", "host003", 0.0875),
]


def test_a_round_under_load_of_its_own_is_taken_out_and_the_link_still_named():
    from sb_fleet.analysis.crossnode.localise import PairMatrix, PairResult

    hosts = tuple(f"host00{i}" for i in range(1, 7))
    pairs = tuple(PairResult(a, b, v, round=r, index=i % 3) for i, (r, a, b, v) in enumerate(LOADED_ROUND))
    loc = localise(PairMatrix("tcp-bw", hosts, pairs, "GB/s"))
    assert kinds(loc) == [("link", "host002 <-> host005")], (kinds(loc), loc.notes)
    assert loc.culprits[0].confidence == "high"
    assert any("1 round(s) ran under a load of their own" in n for n in loc.notes), loc.notes
    # without the rounds the loaded round's spread hides the link: the rounds are what tells them apart
    flat = PairMatrix("tcp-bw", hosts, tuple(PairResult(p.a, p.b, p.value) for p in pairs), "GB/s")
    assert ("link", "host002 <-> host005") not in kinds(localise(flat))
