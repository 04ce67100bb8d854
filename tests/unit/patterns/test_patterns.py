"""Pattern expansion against SuperBench's own test data (tests/unit/patterns/data/README.md), plus the
properties every schedule must have whatever its size."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest
from pydantic import ValidationError

from sb_fleet.config.traffic_patterns import (
    PatternSpec,
    Schedule,
    all_nodes,
    estimate_cost,
    expand,
    k_batch,
    mpi_pattern_text,
    pair_wise,
    round_count,
)
from sb_fleet.errors import ConfigError
from sb_fleet.plan.topology import host_topology, load_host_topology, parse_ibnetdiscover, parse_ibstat

DATA = Path(__file__).parent / "data"
NODES8 = [f"node{i}" for i in range(8)]


def sb_pattern_sections() -> dict[str, str]:
    """SuperBench's mpi_pattern.txt, split into its per-pattern sections (each with its blank line)."""
    text = (DATA / "mpi_pattern.txt").read_text()
    sections = {}
    for block in text.split("\n\n"):
        if block.strip():
            kind = block.splitlines()[0].split("pattern_type: ")[1]
            sections[kind] = block + "\n\n"
    return sections


def fixture_topology():
    return load_host_topology(
        str(DATA / "ib_traffic_topo_aware_ibnetdiscover.txt"), str(DATA / "ib_traffic_topo_aware_ibstat.txt")
    )


def hostfile() -> list[str]:
    return (DATA / "ib_traffic_topo_aware_hostfile").read_text().split()


def test_all_nodes_pair_wise_and_k_batch_match_superbench_mpi_pattern_file():
    want = sb_pattern_sections()
    assert mpi_pattern_text("test_benchmark", all_nodes(NODES8)) == want["all-nodes"]
    assert mpi_pattern_text("test_benchmark", pair_wise(NODES8)) == want["pair-wise"]
    assert mpi_pattern_text("test_benchmark", k_batch(NODES8, 3)) == want["k-batch"]


def test_topo_aware_matches_superbench_expected_pairs_and_mpi_pattern_file():
    topo = fixture_topology()
    hosts = hostfile()
    spec = PatternSpec(type="topo-aware", ibstat="x", ibnetdiscover="y", min_dist=2, max_dist=6)
    sched = expand(spec, hosts, topo.order, topo.distance)
    assert mpi_pattern_text("test_benchmark", sched) == sb_pattern_sections()["topo-aware"]
    # the same pairs as host indexes, as SuperBench's expected config states them
    index = {h: i for i, h in enumerate(hosts)}
    rows = [";".join(",".join(str(index[h]) for h in g) for g in rnd) for rnd in sched.rounds]
    assert rows == (DATA / "ib_traffic_topo_aware_expected_config").read_text().split()
    assert sched.labels == ("distance 2", "distance 4", "distance 6")
    for label, rnd in zip(sched.labels, sched.rounds, strict=True):
        d = int(label.split()[1])
        assert all(topo.distance[a][b] == d for a, b in rnd)


def test_topology_distances_and_leaves_from_captured_ibnetdiscover():
    topo = fixture_topology()
    assert topo.order == tuple(hostfile())  # this capture lists the HCAs in hostfile order
    d = topo.distance
    assert d["vma414bbc00005I"]["vma414bbc00005J"] == 2  # same leaf switch
    assert d["vma414bbc00005I"]["vma414bbc00005K"] == 4  # two leaves under one L2 switch
    assert d["vma414bbc00005I"]["vma414bbc00005Q"] == 6  # through the spine
    assert all(d[a][a] == 0 for a in topo.order)
    assert all(d[a][b] == d[b][a] for a in topo.order for b in topo.order)
    assert topo.leaves["vma414bbc00005I"] == ("MF0;rmd70-0101-0919-01ib0:MQM8700/U1",)


def test_ibnetdiscover_parser_skips_aggregation_nodes_and_reads_every_link():
    fabric = parse_ibnetdiscover((DATA / "ib_traffic_topo_aware_ibnetdiscover.txt").read_text())
    kinds = [d.kind for d in fabric.devices.values()]
    assert kinds.count("switch") == 8 and kinds.count("hca") == 10
    assert len(fabric.hosts()) == 10 and "Mellanox" not in " ".join(fabric.hosts())
    spine = fabric.devices["S-0ff08c43213b3f30"]
    assert spine.links == {
        1: ("S-0ff08c432172aa1a", 21),
        2: ("S-0ff08c432172a97a", 21),
        41: ("H-0ff08c43213b3f38", 1),
    }
    guids = parse_ibstat((DATA / "ib_traffic_topo_aware_ibstat.txt").read_text())
    assert guids["043f720300e61112"] == "vma414bbc00005R"
    assert len(guids) == 10


def test_ibstat_reads_ibstat_own_guid_lines():
    text = "VM_hostname gpu1\nCA 'mlx5_0'\n\tCA type: MT4123\n\tSystem image GUID: 0x0ff08c4321664e96\n"
    assert parse_ibstat(text) == {"0ff08c4321664e96": "gpu1"}


@pytest.mark.parametrize(
    "text, where",
    [
        ("VM_hostname a\nnot-a-guid\n", "line 2"),
        ("0ff08c4321664e96\n", "line 1"),
        ("VM_hostname\n", "line 1"),
    ],
)
def test_bad_ibstat_names_the_line(text, where):
    with pytest.raises(ConfigError, match=where):
        parse_ibstat(text, "guids.txt")


def test_bad_ibnetdiscover_names_the_line():
    text = 'Switch 41 "S-0ff08c43213b3f30" # "spine"\n[1 "S-x"[2]\n'
    with pytest.raises(ConfigError, match=r"fab.txt: line 2: a port line"):
        parse_ibnetdiscover(text, "fab.txt")
    with pytest.raises(ConfigError, match="no host HCA"):
        parse_ibnetdiscover('Switch 41 "S-0ff08c43213b3f30" # "spine"\n', "fab.txt")


def test_missing_topology_file_is_one_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the pattern's ibnetdiscover file"):
        load_host_topology(str(tmp_path / "nope.txt"), str(DATA / "ib_traffic_topo_aware_ibstat.txt"))


def test_hosts_off_the_fabric_sit_out_with_the_reason():
    topo = fixture_topology()
    hosts = [*hostfile(), "elsewhere"]
    spec = PatternSpec(type="topo-aware", ibstat="x", ibnetdiscover="y")
    sched = expand(spec, hosts, topo.order, topo.distance)
    assert sched.unused()[-1] == "elsewhere"
    assert "topology" in (sched.why_idle or {})["elsewhere"]


def every_pair_once(sched: Schedule) -> None:
    seen = [frozenset(g) for rnd in sched.rounds for g in rnd]
    assert len(seen) == len(set(seen))
    assert set(seen) == {frozenset(p) for p in combinations(sched.hosts, 2)}
    for rnd in sched.rounds:
        flat = [h for g in rnd for h in g]
        assert len(flat) == len(set(flat)), "a host twice in one round"
        assert all(len(g) == 2 for g in rnd)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8, 9, 16, 31, 32, 64, 101])
def test_pair_wise_every_pair_exactly_once_in_n_minus_1_rounds(n):
    hosts = [f"h{i:03d}" for i in range(n)]
    sched = pair_wise(hosts)
    every_pair_once(sched)
    want_rounds = n - 1 if n % 2 == 0 else n
    assert len(sched.rounds) == want_rounds == round_count("pair-wise", n)
    if n % 2 == 0:
        assert all(len(rnd) == n // 2 for rnd in sched.rounds)  # nobody idles
    else:
        assert all(len(sched.idle(r)) == 1 for r in range(len(sched.rounds)))  # one bye per round
        assert sorted(sched.idle(r)[0] for r in range(n)) == hosts  # each host sits out once


@pytest.mark.parametrize("n, k", [(8, 3), (8, 2), (8, 8), (10, 4), (3, 4), (7, 1)])
def test_k_batch_disjoint_groups_of_k_remainder_sits_out(n, k):
    hosts = [f"h{i}" for i in range(n)]
    sched = k_batch(hosts, k)
    groups = [g for rnd in sched.rounds for g in rnd]
    assert all(len(g) == k for g in groups)
    assert len(groups) == n // k
    flat = [h for g in groups for h in g]
    assert len(flat) == len(set(flat))
    assert list(sched.unused()) == hosts[n - n % k :]
    assert len(sched.rounds) == round_count("k-batch", n, k)


def test_pattern_spec_checks_what_each_type_needs():
    with pytest.raises(ValidationError, match="batch"):
        PatternSpec.model_validate({"type": "k-batch"})
    with pytest.raises(ValidationError, match="ibnetdiscover"):
        PatternSpec.model_validate({"type": "topo-aware", "ibstat": "a"})
    with pytest.raises(ValidationError, match="larger than max_dist"):
        PatternSpec.model_validate(
            {"type": "topo-aware", "ibstat": "a", "ibnetdiscover": "b", "min_dist": 6, "max_dist": 2}
        )
    with pytest.raises(ValidationError, match="extra"):
        PatternSpec.model_validate({"type": "pair-wise", "batchh": 2})
    with pytest.raises(ValidationError):
        PatternSpec.model_validate({"type": "ring"})


def test_cost_is_rounds_times_per_round_time():
    cost = estimate_cost(pair_wise([f"h{i}" for i in range(32)]), 45, "the benchmark's timeout")
    assert (cost.rounds, cost.groups, cost.total_s) == (31, 31 * 16, 31 * 45)
    assert "31 round(s)" in cost.describe() and "23.2 min" in cost.describe()
    big = estimate_cost(k_batch([f"h{i}" for i in range(1000)], 8), 45)
    assert (big.rounds, big.groups) == (1, 125)


def test_topo_aware_uses_its_own_hosts_via_host_topology():
    # two racks of two hosts: the fabric's host names differ from the fleet's, the GUID list maps them
    ibnet = "\n".join(
        [
            'Switch 4 "S-00000000000000aa" # "leaf-a"',
            '[1] "H-0000000000000001"[1] # "p1 mlx5_0"',
            '[2] "H-0000000000000002"[1] # "p2 mlx5_0"',
            '[4] "S-00000000000000cc"[1] # "spine"',
            'Switch 4 "S-00000000000000bb" # "leaf-b"',
            '[1] "H-0000000000000003"[1] # "p3 mlx5_0"',
            '[2] "H-0000000000000004"[1] # "p4 mlx5_0"',
            '[4] "S-00000000000000cc"[2] # "spine"',
            'Switch 4 "S-00000000000000cc" # "spine"',
            '[1] "S-00000000000000aa"[4]',
            '[2] "S-00000000000000bb"[4]',
            *[f'Ca 1 "H-000000000000000{i}" # "p{i} mlx5_0"' for i in range(1, 5)],
        ]
    )
    guids = "".join(f"VM_hostname gpu{i}\n000000000000000{i}\n" for i in range(1, 5))
    topo = host_topology(parse_ibnetdiscover(ibnet), parse_ibstat(guids))
    assert topo.distance["gpu1"] == {"gpu1": 0, "gpu2": 2, "gpu3": 4, "gpu4": 4}
    spec = PatternSpec(type="topo-aware", ibstat="x", ibnetdiscover="y", min_dist=2, max_dist=4)
    sched = expand(spec, ["gpu1", "gpu2", "gpu3", "gpu4"], topo.order, topo.distance)
    assert sched.rounds == ((("gpu1", "gpu2"), ("gpu3", "gpu4")), (("gpu1", "gpu3"), ("gpu2", "gpu4")))
