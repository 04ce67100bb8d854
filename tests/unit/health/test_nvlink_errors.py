"""NVLink error counters: ``nvidia-smi nvlink -e`` parsed from captured outputs (golden parses beside the
fixtures' asserts), the NVML path on recorded values, bounds on what a host prints, the
``gpu.nvlink_errors`` record, the soak's ``nvlink.*`` counters read from it (health_counters), and the
fake machine's nvidia-smi answering with counters a test bumps."""

from __future__ import annotations

import json
import sys
import time
import types
from dataclasses import asdict
from pathlib import Path

from sb_bench.health.gpu_checks import gpu_records, nvlink_errors_record
from sb_bench.health.gpu_source import (
    COUNTER_MAX,
    GpuInfo,
    GpuState,
    NvlinkErrors,
    NvmlSource,
    parse_nvlink_errors,
    read_gpus,
)
from sb_bench.health.record import Env

from sb_fleet.campaign.stage_judgement import health_counters

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from healthfake import bump_nvlink, make_machine  # noqa: E402

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "health"
GOLD = Path(__file__).resolve().parents[1] / "golden" / "health"


def parsed_json(parsed: dict[int, tuple[NvlinkErrors, ...]]) -> str:
    return (
        json.dumps(
            {str(g): [{**asdict(e), "crc": e.crc} for e in links] for g, links in sorted(parsed.items())},
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )


def test_nvlink_e_driver_layout(golden):
    parsed = parse_nvlink_errors((FIX / "nvidia-smi-nvlink-e.txt").read_text())
    golden(GOLD / "nvidia-smi-nvlink-e.json", parsed_json(parsed))
    assert sorted(parsed) == [0, 1]
    assert [e.link for e in parsed[0]] == [0, 1, 2] and all(e.crc == 0 for e in parsed[0])
    bad = parsed[1][1]
    assert (bad.replay, bad.recovery, bad.crc_total, bad.crc) == (142, 3, 891, 891)
    assert [e.link for e in parsed[1]] == [0, 1]  # link 2: N/A on every counter, not read


def test_nvlink_e_flit_and_data_apart(golden):
    parsed = parse_nvlink_errors((FIX / "nvidia-smi-nvlink-e-flit-data.txt").read_text())
    golden(GOLD / "nvidia-smi-nvlink-e-flit-data.json", parsed_json(parsed))
    l1 = parsed[0][1]
    assert (l1.crc_flit, l1.crc_data, l1.crc_total, l1.crc) == (4, 2, None, 6)  # ECC errors: not read
    assert parsed[0][0].replay == 1 and parsed[1][0].recovery == 5


def test_what_a_host_prints_is_bounded():
    text = (
        "Link 0: Replay Errors: 9\n"  # before any GPU: whose?
        "GPU 0: x\n"
        "\t Link 0: Replay Errors: nan\n"
        "\t Link 0: Recovery Errors: -1\n"
        "\t Link 0: CRC Flit Errors: 1.5\n"
        "\t Link 0: CRC Data Errors: 1e5\n"
        "\t Link 1: Replay Errors: 99999999999999999999\n"  # past 64 bits
        f"\t Link 1: Recovery Errors: {COUNTER_MAX}\n"
        "\t Link 70: Replay Errors: 3\n"  # past the links read
        "\t Link 2: Effective Errors: 4\n"  # a counter not read
        "\t Link 3: Replay Errors: " + "7" * 5000 + "\n"
    )
    parsed = parse_nvlink_errors(text)
    assert [(e.link, e.replay, e.recovery) for e in parsed[0]] == [(1, None, COUNTER_MAX)]
    assert parse_nvlink_errors("") == {} and parse_nvlink_errors("garbage\n\x00\xff") == {}
    # 4 MiB of links (the most Env.run keeps of a tool's output) parse in well under a second
    many = "GPU 0: x\n" + "\t Link 5: Replay Errors: 1\n" * 150_000
    t0 = time.monotonic()
    assert parse_nvlink_errors(many)[0] == (NvlinkErrors(5, replay=1),)
    assert time.monotonic() - t0 < 2.0


class NVMLError(Exception):
    pass


def nvml_with_counters(values: dict[tuple[int, int, int], object]) -> types.SimpleNamespace:
    """The calls NvmlSource makes for one GPU's NVLinks: links 0-3 exist (link 4 on: Invalid Argument, as
    NVML answers past a GPU's links); ``values[(gpu, link, counter)]`` is a counter, else 0; an exception
    instance is raised (NotSupported)."""

    def state(h, link):
        if link >= 4:
            raise NVMLError("Invalid Argument")
        return 1

    def counter(h, link, c):
        v = values.get((h, link, c), 0)
        if isinstance(v, Exception):
            raise v
        return v

    return types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetNvLinkState=state,
        nvmlDeviceGetNvLinkErrorCounter=counter,
    )


def test_nvml_reads_each_link_and_counter():
    # nvmlNvLinkErrorCounter_t: 0 replay, 1 recovery, 2 CRC flit, 3 CRC data
    nvml = nvml_with_counters(
        {
            (0, 1, 0): 5,
            (0, 1, 2): 2,
            (0, 1, 3): 1,
            (0, 2, 1): float("nan"),  # not a count
            (0, 2, 3): -1,
            (0, 3, 0): NVMLError("Not Supported"),
            (0, 3, 1): NVMLError("Not Supported"),
            (0, 3, 2): NVMLError("Not Supported"),
            (0, 3, 3): NVMLError("Not Supported"),
        }
    )
    (g,) = NvmlSource(nvml).read().gpus
    assert g.nvlink_errors is not None
    by = {e.link: e for e in g.nvlink_errors}
    assert sorted(by) == [0, 1, 2]  # link 3: nothing read
    assert (by[1].replay, by[1].recovery, by[1].crc_flit, by[1].crc_data, by[1].crc) == (5, 0, 2, 1, 3)
    assert (by[2].recovery, by[2].crc_data, by[2].crc) == (None, None, 0)
    # NVML without the call (an old pynvml): no counters, not zeros
    del nvml.nvmlDeviceGetNvLinkErrorCounter
    assert NvmlSource(nvml).read().gpus[0].nvlink_errors is None


def gpu(i: int, *errs: NvlinkErrors) -> GpuInfo:
    return GpuInfo(i, "NVIDIA H100 80GB HBM3", nvlink_errors=errs or None)


def test_the_record_warns_on_a_counter_and_carries_each_link():
    st = GpuState(
        "nvml",
        (
            gpu(0, NvlinkErrors(0, 0, 0, 0, 0), NvlinkErrors(1, 0, 0, 0, 0)),
            gpu(1, NvlinkErrors(0, 0, 0, 0, 0), NvlinkErrors(1, replay=12, recovery=0, crc_total=3)),
        ),
    )
    r = nvlink_errors_record(st, 0)
    assert r.check == "gpu.nvlink_errors" and r.verdict == "warn"
    assert r.evidence == "GPU 1 link 1: replay=12, crc=3"
    assert r.value == {"0/0": {}, "0/1": {}, "1/0": {}, "1/1": {"replay": 12, "crc": 3}}
    assert nvlink_errors_record(st, 12).verdict == "pass"  # the profile's gpu.nvlink_error_max
    recs = {x.check: x for x in gpu_records(st, Env(expect={"gpu": {"nvlink_error_max": 20}}))}
    assert recs["gpu.nvlink_errors"].verdict == "pass"
    none = nvlink_errors_record(GpuState("nvml", (gpu(0),)), 0)
    assert none.verdict == "pass" and none.value == {} and "no NVLink error counters read" in none.evidence


def test_health_counters_read_each_link():
    st = GpuState(
        "nvml",
        (
            gpu(
                0,
                NvlinkErrors(0, 0, 0, 0, 0),
                NvlinkErrors(3, replay=4, recovery=None, crc_flit=1, crc_data=2),
            ),
        ),
    )
    doc = json.loads(json.dumps({"checks": [nvlink_errors_record(st, 0).to_json()]}))
    c = health_counters(doc)
    # listed only where not zero: a link read has 0 where it lists none; a counter not read is absent
    assert c == {
        "nvlink.replay[0/0]": 0,
        "nvlink.recovery[0/0]": 0,
        "nvlink.crc[0/0]": 0,
        "nvlink.replay[0/3]": 4,
        "nvlink.crc[0/3]": 3,
    }
    hostile = {"check": "gpu.nvlink_errors", "value": {"0/1": {"replay": float("nan"), "crc": True}, "x": 3}}
    assert health_counters({"checks": [hostile]}) == {"nvlink.recovery[0/1]": 0}


def test_fake_machine_counts_what_a_test_bumps(tmp_path):
    v = make_machine(tmp_path / "m", gpus=2)
    env = Env(Path(v["sb_path_sysfs"]), Path(v["sb_path_procfs"]), Path(v["sb_tool_dir"]))
    before = read_gpus(env)
    assert before.source == "nvidia-smi" and before.gpus[1].nvlink_errors is not None
    assert len(before.gpus[1].nvlink_errors) == 18 and all(
        e.replay == 0 for e in before.gpus[1].nvlink_errors
    )
    bump_nvlink(Path(v["sb_tool_dir"]), 1, 7, "replay", 3)
    bump_nvlink(Path(v["sb_tool_dir"]), 1, 7, "crc_data", 2)
    after = read_gpus(env)
    e = after.gpus[1].nvlink_errors[7]
    assert (e.link, e.replay, e.recovery, e.crc) == (7, 3, 0, 2)
    recs = {r.check: r for r in gpu_records(after, env)}
    assert (
        recs["gpu.nvlink_errors"].verdict == "warn"
        and "GPU 1 link 7: replay=3, crc=2" in recs["gpu.nvlink_errors"].evidence
    )
