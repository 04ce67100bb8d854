"""hostprep's component facts: GPU identities from nvidia-smi's CSV query and NIC GUIDs from sysfs.

The inputs are in the published formats: ``nvidia-smi --query-gpu=index,uuid,serial,pci.bus_id
--format=csv,noheader`` (one line per GPU, ", "-separated, "[N/A]" when a field is not reported) and
the kernel's ``/sys/class/infiniband/<dev>/{node_guid,ports/<n>/{state,rate,link_layer}}``.
"""

from __future__ import annotations

from pathlib import Path

from sb_bench.host.hostprep import parse_gpu_ids, read_ib_nics

from sb_fleet.history.components import gpu_keys, nic_keys

NVIDIA_SMI = """\
0, GPU-3e1c2f5a-77d1-3f0b-9c4e-1a2b3c4d5e6f, 1324021034567, 00000000:07:00.0
1, GPU-8b0d9e11-2c43-5d6e-8f70-0a1b2c3d4e5f, 1324021034568, 00000000:0B:00.0
2, GPU-c0ffee00-1111-2222-3333-444455556666, [N/A], 00000000:48:00.0
"""


def test_parse_gpu_ids() -> None:
    gpus = parse_gpu_ids(NVIDIA_SMI + "\nNo devices were found\n")
    assert gpus == [
        {
            "index": 0,
            "uuid": "GPU-3e1c2f5a-77d1-3f0b-9c4e-1a2b3c4d5e6f",
            "serial": "1324021034567",
            "pci_bus_id": "00000000:07:00.0",
        },
        {
            "index": 1,
            "uuid": "GPU-8b0d9e11-2c43-5d6e-8f70-0a1b2c3d4e5f",
            "serial": "1324021034568",
            "pci_bus_id": "00000000:0B:00.0",
        },
        {
            "index": 2,
            "uuid": "GPU-c0ffee00-1111-2222-3333-444455556666",
            "serial": "",
            "pci_bus_id": "00000000:48:00.0",
        },
    ]
    # what the history keys them by
    assert gpu_keys({"gpus": gpus})[2] == "gpu:GPU-c0ffee00-1111-2222-3333-444455556666"
    assert parse_gpu_ids("") == []


def _port(dev: Path, n: int, state: str, rate: str, layer: str) -> None:
    p = dev / "ports" / str(n)
    p.mkdir(parents=True)
    (p / "state").write_text(state + "\n")
    (p / "rate").write_text(rate + "\n")
    (p / "link_layer").write_text(layer + "\n")


def test_read_ib_nics_from_a_sysfs_tree(tmp_path: Path) -> None:
    for i, guid in enumerate(("0c42:a103:0065:2a2c", "0c42:a103:0065:2a2d")):
        dev = tmp_path / f"mlx5_{i}"
        dev.mkdir()
        (dev / "node_guid").write_text(guid + "\n")
        _port(dev, 1, "4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand")
    _port(tmp_path / "mlx5_1", 2, "1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand")
    nics = read_ib_nics(tmp_path)
    assert [n["name"] for n in nics] == ["mlx5_0", "mlx5_1"]
    assert nics[0]["node_guid"] == "0c42:a103:0065:2a2c"
    assert nics[1]["ports"] == [
        {"port": 1, "state": "4: ACTIVE", "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand"},
        {"port": 2, "state": "1: DOWN", "rate": "10 Gb/sec (4X SDR)", "link_layer": "InfiniBand"},
    ]
    assert nic_keys({"nics": nics})["ib1"] == "nic:0c42:a103:0065:2a2d"
    assert read_ib_nics(tmp_path / "absent") == []


def test_parse_gpu_ids_on_output_captured_from_an_h100() -> None:
    """Captured with ``nvidia-smi --query-gpu=index,uuid,serial,pci.bus_id --format=csv,noheader``."""
    text = (Path(__file__).parent / "fixtures" / "nvidia-smi-gpu-ids-h100.csv").read_text()
    assert parse_gpu_ids(text) == [
        {
            "index": 0,
            "uuid": "GPU-7a9f3d33-2433-54be-de45-a6c31626639e",
            "serial": "1753024036091",
            "pci_bus_id": "00000000:00:06.0",
        }
    ]
