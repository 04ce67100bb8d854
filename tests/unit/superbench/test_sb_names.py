"""ib-loopback's metric names, old and current, in the fleet analysis (families, siblings, direction)."""

from __future__ import annotations

import numpy as np

from sb_fleet.analysis.detect import category_of, detect
from sb_fleet.analysis.superbench.metric_names import Directions, direction_from_name, parse_metric


def test_current_and_old_ib_loopback_names() -> None:
    # SuperBench's ib-loopback writes '<cmd>_<size>:<ib_index>' (docs: ib-loopback/ib_write_bw_${msg_size});
    # a run with several processes appends ':<rank>'. Older suites wrote 'ib_write_<size>_ib<N>_bw'.
    one = parse_metric("ib-loopback/ib_write_bw_8388608:5")
    two = parse_metric("ib-loopback/ib_write_bw_8388608:5:5")
    old = parse_metric("ib-loopback/ib_write_8388608_ib5_bw")
    assert one.family == two.family == "ib-loopback/ib_write_bw_8388608"
    assert (one.unit, two.unit, old.unit) == ("5", "5:5", "ib5")
    assert old.family == "ib-loopback/ib_write_8388608_ib#_bw"
    for n in ("ib-loopback/ib_write_bw_8388608:5:5", "ib-loopback/ib_read_bw_65536:0", old.full):
        assert direction_from_name(n) == 1
        assert category_of(n) == "RDMA"


def test_a_slow_nic_under_the_current_names_is_found() -> None:
    rng = np.random.default_rng(11)
    cols = [f"ib-loopback/ib_write_bw_8388608:{n}:{n}" for n in range(8)]
    vals = 24.0 * (1 + rng.normal(0, 0.003, size=(40, 8)))
    vals[7, 3] *= 0.8  # one NIC of one host 20% slow
    found = detect(cols, vals, Directions())
    assert sorted(found.issues) == [7]
    assert {i.metric for i in found.issues[7]} == {cols[3]}
