"""Which component a value belongs to: GPU by UUID, NIC by GUID, else the host."""

from __future__ import annotations

import numpy as np

from sb_fleet.history.components import column_kind, gpu_keys, map_components, nic_keys


def test_gpu_keys_prefer_uuid_then_serial_and_skip_placeholders() -> None:
    facts = {
        "gpus": [
            {"index": 0, "uuid": "GPU-aaaa", "serial": "1320"},
            {"index": 1, "uuid": "", "serial": "1321"},
            {"index": 2, "uuid": "[N/A]", "serial": "[N/A]"},
            {"index": "3", "uuid": "GPU-bad-index"},
        ]
    }
    assert gpu_keys(facts) == {0: "gpu:GPU-aaaa", 1: "gpu-serial:1321"}
    assert gpu_keys(None) == {}
    assert gpu_keys({"gpus": "nonsense"}) == {}


def test_nic_keys_by_name_and_by_position() -> None:
    facts = {
        "nics": [
            {"name": "mlx5_1", "node_guid": "0c42:a103:0001:0002"},
            {"name": "mlx5_0", "node_guid": "0c42:a103:0001:0001"},
            {"name": "mlx5_2", "node_guid": "0000:0000:0000:0000"},  # no GUID: not a component
        ]
    }
    keys = nic_keys(facts)
    assert keys["mlx5_0"] == keys["ib0"] == "nic:0c42:a103:0001:0001"
    assert keys["mlx5_1"] == keys["ib1"] == "nic:0c42:a103:0001:0002"
    assert "mlx5_2" not in keys and "ib2" not in keys


def test_column_kinds() -> None:
    assert column_kind("gemm-flops/fp16_tc_flops:3").kind == "gpu"
    assert column_kind("gemm-flops/fp16_tc_flops:3").component_metric == "gemm-flops/fp16_tc_flops"
    k = column_kind("ib-loopback/ib_write_8388608_ib3_bw")
    assert (k.kind, k.token, k.component_metric) == ("nic", "ib3", "ib-loopback/ib_write_8388608_ib#_bw")
    assert column_kind("mem-bw/h2d_bw").kind == "host"


def test_a_moved_gpu_keeps_its_component_and_cpu_hosts_are_their_own() -> None:
    cols = ["gemm-flops/fp16_tc_flops:0", "gemm-flops/fp16_tc_flops:1", "mem-bw/h2d_bw"]
    night1 = map_components(
        ["a", "b"],
        cols,
        {"a": {"gpus": [{"index": 0, "uuid": "GPU-x"}, {"index": 1, "uuid": "GPU-y"}]}, "b": {}},
    )
    # GPU-x moved from host a, index 0, to host b, index 1
    night2 = map_components(
        ["a", "b"],
        cols,
        {"a": {"gpus": [{"index": 0, "uuid": "GPU-new"}]}, "b": {"gpus": [{"index": 1, "uuid": "GPU-x"}]}},
    )

    def cell(m, r, c):  # noqa: ANN001, ANN202
        return m.components[int(m.comp[r, c])], m.metrics[int(m.metric[r, c])]

    assert cell(night1, 0, 0) == ("gpu:GPU-x", "gemm-flops/fp16_tc_flops")
    assert cell(night2, 1, 1) == ("gpu:GPU-x", "gemm-flops/fp16_tc_flops")  # same history key
    assert cell(night2, 0, 0) == ("gpu:GPU-new", "gemm-flops/fp16_tc_flops")  # replaced: a new history
    assert cell(night1, 1, 0) == ("host:b", "gemm-flops/fp16_tc_flops:0")  # no facts: the host
    assert cell(night2, 0, 1) == ("host:a", "gemm-flops/fp16_tc_flops:1")  # index 1 unknown on a
    assert cell(night1, 0, 2) == ("host:a", "mem-bw/h2d_bw")
    assert night1.comp.dtype == np.int32 and night1.comp.shape == (2, 3)
