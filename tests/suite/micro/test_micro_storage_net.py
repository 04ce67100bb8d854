"""disk-benchmark (fio) and ib-loopback (perftest): golden parser tests and runs on this host."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from sb_bench.micro import ib_loopback
from sb_bench.micro.disk_benchmark import to_metrics, unsafe_reason
from sb_bench.micro.parsers import ParseError, fio, perftest
from suite_helpers import assert_metrics, run_bench

UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def _golden(path: Path, value) -> None:
    exp = path.with_name(path.name.split(".")[0] + ".expected.json")
    if UPDATE:
        exp.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")
    want = json.loads(exp.read_text())
    assert _approx(value) == _approx(want)


def _approx(v):
    if isinstance(v, float):
        return pytest.approx(v, rel=1e-9)
    if isinstance(v, dict):
        return {k: _approx(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_approx(x) for x in v]
    return v


# -- perftest parser ----------------------------------------------------------------------------------
PERFTEST = sorted((Path(__file__).parent / "golden" / "perftest").glob("*.txt"))


@pytest.mark.parametrize("path", PERFTEST, ids=[p.stem for p in PERFTEST])
def test_perftest_golden(path):
    text = path.read_text()
    try:
        value = [r.to_json() for r in perftest.parse_bw(text)]
    except ParseError as exc:
        value = {"error": perftest.error_summary(text).split(" | ")[0]}
        assert "no perftest bandwidth table" in str(exc) and value["error"] in str(exc)
    _golden(path, value)


def test_perftest_row_for_size():
    rows = perftest.parse_bw(
        (Path(__file__).parent / "golden/perftest/ib_read_bw_report_gbits_all_sizes.txt").read_text()
    )
    assert perftest.row_for(rows, 8388608).avg_gbps == pytest.approx(193.34 / 8)
    with pytest.raises(ParseError, match="no result row for 4096"):
        perftest.row_for(rows, 4096)


# -- fio parser ------------------------------------------------------------------------------------------
FIO = sorted(
    p for p in (Path(__file__).parent / "golden" / "fio").glob("*.json") if ".expected" not in p.name
)


@pytest.mark.parametrize("path", FIO, ids=[p.stem for p in FIO])
def test_fio_golden(path):
    jobs = fio.parse(path.read_text())
    value = {
        "jobs": [
            {
                "name": j.name,
                "error": j.error,
                "block_size": j.block_size,
                "directions": {d: vars(r) for d, r in j.directions.items()},
            }
            for j in jobs
        ],
        "metrics": to_metrics("disk", "rand_read_write" if "randrw" in path.name else "seq_read", jobs[0]),
    }
    _golden(path, value)


def test_fio_parser_errors():
    with pytest.raises(ParseError, match="no JSON"):
        fio.parse("fio: failed to open file\n")
    with pytest.raises(ParseError, match="malformed"):
        fio.parse('{"jobs": [')


# -- disk-benchmark ---------------------------------------------------------------------------------------
def test_disk_benchmark_directory(tmp_path):
    env = run_bench(
        "disk-benchmark",
        directory=str(tmp_path),
        disk_name="scratch",
        tests=["seq_read", "rand_write"],
        runtime=1,
        file_size="8M",
        iodepth=4,
    )
    if env["status"] != "ok" and "O_DIRECT" not in env["reason"] and "Invalid argument" in env["reason"]:
        env = run_bench(
            "disk-benchmark",
            directory=str(tmp_path),
            disk_name="scratch",
            tests=["seq_read", "rand_write"],
            runtime=1,
            file_size="8M",
            iodepth=4,
            direct=False,
        )
    expected = {"scratch_seq_read_bs": "bytes", "scratch_rand_write_bs": "bytes"}
    for t, d in (("seq_read", "read"), ("rand_write", "write")):
        expected.update({f"scratch_{t}_{d}_iops": "IOPS", f"scratch_{t}_{d}_bw": "MB/s"})
        expected.update({f"scratch_{t}_{d}_lat_ns_{q}": "ns" for q in fio.PERCENTILES})
    assert_metrics(env, expected)
    assert env["result"]["scratch_rand_write_bs"] == [4096.0]
    assert list(tmp_path.iterdir()) == []  # its test file is gone


def test_disk_benchmark_without_target_is_skipped():
    env = run_bench("disk-benchmark")
    assert env["status"] == "skipped" and "no target" in env["reason"]


@pytest.fixture
def loop_device(tmp_path):
    """A loop device on a 16 MiB file, detached afterwards (only the one this fixture attached)."""
    if not shutil.which("losetup") or os.geteuid() != 0:
        pytest.skip("needs root and losetup")
    img = tmp_path / "disk.img"
    img.write_bytes(b"\0" * (16 << 20))
    proc = subprocess.run(["losetup", "-f", "--show", str(img)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"no loop device here: {proc.stderr.strip()}")
    dev = proc.stdout.strip()
    yield dev, img
    subprocess.run(["losetup", "-d", dev], check=False)


@pytest.mark.slow
def test_block_device_with_filesystem_is_never_written(loop_device):
    dev, img = loop_device
    if not shutil.which("mkfs.ext4"):
        pytest.skip("no mkfs.ext4")
    subprocess.run(["mkfs.ext4", "-q", "-F", dev], check=True, capture_output=True)
    before = img.read_bytes()
    assert "holds TYPE=ext4" in unsafe_reason(dev)
    env = run_bench(
        "disk-benchmark",
        block_devices=[dev],
        tests=["seq_read", "rand_write"],
        runtime=1,
        file_size="4M",
        iodepth=4,
        direct=False,
    )
    name = os.path.basename(dev)
    assert env["status"] == "ok", env["reason"]
    assert f"{name}_seq_read_read_iops" in env["result"]  # reading is fine, with fio's --readonly
    assert not any(k.startswith(f"{name}_rand_write") for k in env["result"])
    assert "write tests refused" in env["reason"] and "force: true" in env["reason"]
    assert img.read_bytes() == before  # not one byte changed
    # force: true says the data may go: the write test runs.
    env = run_bench(
        "disk-benchmark",
        block_devices=[dev],
        tests=["rand_write"],
        runtime=1,
        file_size="4M",
        iodepth=4,
        direct=False,
        force=True,
    )
    assert env["status"] == "ok" and env["result"][f"{name}_rand_write_write_iops"][0] > 0, env["reason"]


@pytest.mark.slow
def test_blank_block_device_is_written(loop_device):
    dev, _ = loop_device
    assert unsafe_reason(dev) is None
    env = run_bench(
        "disk-benchmark",
        block_devices=[dev],
        tests=["rand_write"],
        runtime=1,
        file_size="4M",
        iodepth=4,
        direct=False,
    )
    assert env["status"] == "ok", env["reason"]
    assert env["result"][f"{os.path.basename(dev)}_rand_write_write_iops"][0] > 0


# -- ib-loopback ----------------------------------------------------------------------------------------------
def test_ib_loopback_skipped_with_reason_here():
    env = run_bench("ib-loopback")
    assert env["status"] == "skipped" and env["return_code"] == 0
    assert "not installed" in env["reason"] or "no RDMA device" in env["reason"]


def test_ib_loopback_wrapper_with_fake_perftest(tmp_path, monkeypatch):
    """The real server/client invocation, against a stand-in ib_write_bw that prints golden output."""
    golden = Path(__file__).parent / "golden/perftest/ib_write_bw_mlx5_hdr.txt"
    fake = tmp_path / "bin" / "ib_write_bw"
    fake.parent.mkdir()
    log = tmp_path / "calls.log"
    fake.write_text(f"""#!/bin/sh
echo "$@" >> {log}
case "$*" in
  *localhost*) cat {golden} ;;
  *) sleep 30 ;;
esac
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    sysfs = tmp_path / "infiniband"
    _ib_sysfs(sysfs, {"mlx5_0": "InfiniBand", "mlx5_1": "InfiniBand"})
    monkeypatch.setattr(ib_loopback, "SYSFS_IB", str(sysfs))
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PROC_RANK", "1")
    monkeypatch.setenv("IB_DEVICES", "0,1")
    env = run_bench("ib-loopback", msg_size=8388608, iters=2000)
    # SuperBench's current name; the golden prints MiB/s: 23672.52 * 2**20 / 1e9 GB/s.
    assert_metrics(env, {"ib_write_bw_8388608:1": "GB/s", "ib_write_bw_8388608_peak:1": "GB/s"})
    assert env["result"]["ib_write_bw_8388608:1"] == [pytest.approx(23672.52 * 1048576 / 1e9)]
    calls = log.read_text().splitlines()
    assert any("-d mlx5_1" in c and "localhost" not in c for c in calls)  # the server
    assert any("-d mlx5_1" in c and c.endswith("localhost") for c in calls)  # the client
    assert all("-s 8388608" in c and "-p 18516" in c and "--report_gbits" in c for c in calls)


def _ib_sysfs(root: Path, devices: dict[str, str]) -> None:
    """A /sys/class/infiniband tree: each device with one port of the given link layer."""
    for name, layer in devices.items():
        port = root / name / "ports" / "1"
        port.mkdir(parents=True)
        (port / "link_layer").write_text(layer + "\n")


def test_rdma_devices_natural_order_and_infiniband_ports_only(tmp_path):
    names = {f"mlx5_{i}": "InfiniBand" for i in range(12)}
    names["mlx5_bond_0"] = "Ethernet"  # the host's Ethernet NIC (RoCE) is no IB port
    names["mlx5_3"] = "Ethernet"
    _ib_sysfs(tmp_path, names)
    devs = ib_loopback.rdma_devices(str(tmp_path))
    assert devs == [f"mlx5_{i}" for i in (0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11)]  # mlx5_10 after mlx5_9
    assert "mlx5_bond_0" in ib_loopback.rdma_devices(str(tmp_path), "any")
    assert ib_loopback.rdma_devices(str(tmp_path), "Ethernet") == ["mlx5_3", "mlx5_bond_0"]


def test_ib_loopback_tests_every_ib_device_by_default(tmp_path, monkeypatch):
    monkeypatch.setattr(ib_loopback, "SYSFS_IB", str(tmp_path))
    _ib_sysfs(tmp_path, {"mlx5_0": "InfiniBand", "mlx5_1": "Ethernet", "mlx5_2": "InfiniBand"})
    for var in ("PROC_RANK", "PROC_NUM", "IB_DEVICES", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    bench = ib_loopback.IbLoopback(ib_loopback.IbLoopback.parse_params({}))
    assert [m.name for m in bench.metrics()] == [
        "ib_write_bw_8388608:0",
        "ib_write_bw_8388608_peak:0",
        "ib_write_bw_8388608:1",
        "ib_write_bw_8388608_peak:1",
    ]
    monkeypatch.setenv("PROC_RANK", "1")
    monkeypatch.setenv("PROC_NUM", "2")  # one device per local process
    assert [m.name for m in bench.metrics()] == ["ib_write_bw_8388608:1", "ib_write_bw_8388608_peak:1"]


def test_perftest_mb_is_mebibytes_by_its_own_message_rate():
    """perftest prints MsgRate (messages/s) beside MB/sec: bytes x rate fixes the unit (MiB, not MB)."""
    text = (Path(__file__).parent / "golden/perftest/ib_write_bw_mlx5_hdr.txt").read_text()
    (row,) = perftest.parse_bw(text)
    assert row.avg_gbps == pytest.approx(row.bytes * row.msg_rate_mpps * 1e6 / 1e9, rel=1e-3)


def test_ib_loopback_device_index_out_of_range(tmp_path, monkeypatch):
    fake = tmp_path / "ib_write_bw"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    _ib_sysfs(tmp_path / "ib", {"mlx5_0": "InfiniBand"})
    monkeypatch.setattr(ib_loopback, "SYSFS_IB", str(tmp_path / "ib"))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    env = run_bench("ib-loopback", ib_index=3)
    assert env["status"] == "skipped" and "device index 3" in env["reason"]


def test_ib_loopback_node_columns_are_superbench_names(tmp_path, monkeypatch):
    """Eight local processes, one IB device each, through the control node's normaliser: the node's
    columns are SuperBench's ``ib-loopback/ib_write_bw_8388608:<device>``, no rank suffix added."""
    from suite_helpers import node_summary

    _ib_sysfs(tmp_path, {f"mlx5_{i}": "InfiniBand" for i in range(8)})
    monkeypatch.setattr(ib_loopback, "SYSFS_IB", str(tmp_path))
    monkeypatch.setenv("PROC_NUM", "8")
    results = []
    for rank in range(8):
        monkeypatch.setenv("PROC_RANK", str(rank))
        bench = ib_loopback.IbLoopback(ib_loopback.IbLoopback.parse_params({}))
        metrics = bench.metrics()
        env = {
            "name": "ib-loopback",
            "rank": rank,
            "return_code": 0,
            "status": "ok",
            "result": {m.name: [20.0 + rank] for m in metrics},
            "reduce_op": {m.name: m.reduce for m in metrics},
        }
        env["result"]["return_code"] = [0]
        results.append(env)
    cols = node_summary(results)
    assert cols["ib-loopback/ib_write_bw_8388608:3"] == 23.0
    assert cols["ib-loopback/ib_write_bw_8388608_peak:7"] == 27.0
    assert not [k for k in cols if k.count(":") > 1]
