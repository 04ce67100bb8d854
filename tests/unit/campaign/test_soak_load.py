"""A soak round's load: the campaign key ``load:`` checked, each node's command quoted, its telemetry reduced
(sb_bench.host.load_telemetry, against the fake machine's nvidia-smi with a planted throttle), its summary
read back, and its throttled windows counted into the node's round (sb_fleet.campaign.soak_series)."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sb_bench.health.record import Env
from sb_bench.host.load_telemetry import SmiTelemetry, Summary, open_source, parse_smi

from sb_fleet.campaign.campaign_state import RoundRecord
from sb_fleet.campaign.soak_load import (
    LoadLimits,
    busy_seconds,
    host_entries,
    load_doc,
    load_failure,
    load_seconds,
    load_throttled_windows,
    parse_summary,
)
from sb_fleet.campaign.soak_series import extract_round, read_series
from sb_fleet.config.campaign_spec import CampaignError, Load, parse_campaign
from sb_fleet.fleet.round_load import load_command

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from healthfake import bump_nvlink, make_machine, plant_throttle  # noqa: E402

SOAK = """version: 1
stages:
  - {name: single, kind: single_node, benchmarks: [gemm-flops]}
  - name: soak
    kind: soak
    benchmarks: [gemm-flops]
    duration: 2m
    round: 20s
"""


def _load(extra: str) -> Load | None:
    return parse_campaign(SOAK + "    " + extra + "\n", Path("c.yaml")).spec.stages[1].load


def test_the_load_key_takes_a_kind_or_a_mapping_and_defaults():
    assert _load("load: cpu-gemm") == Load(kind="cpu-gemm")
    ld = _load("load: {kind: gpu-burn, interval: 2s, margin: 1s, size: 4096}")
    assert ld is not None and (ld.kind, ld.interval, ld.margin, ld.size) == ("gpu-burn", 2.0, 1.0, 4096)
    assert parse_campaign(SOAK, Path("c.yaml")).spec.stages[1].load is None  # no key: the nodes idle


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ("load: {kind: burn}", "field stages.1.load.kind: Input should be 'gpu-burn' or 'cpu-gemm'"),
        (
            "load: {kind: cpu-gemm, intervl: 2s}",
            "line 9, column 28, field stages.1.load.intervl: unknown key",
        ),
        ("load: {kind: cpu-gemm, interval: 0.5s}", "not between 1s and 10m"),
        ("load: {kind: cpu-gemm, margin: 20s}", "must fit in a round of 20s"),
        ("load: {kind: cpu-gemm, threads: -1}", "field stages.1.load.threads"),
        ("load: 7", "field stages.1.load: Input should be a valid dictionary"),
    ],
)
def test_a_bad_load_is_one_error_naming_the_line_and_field(extra, said):
    with pytest.raises(CampaignError) as e:
        parse_campaign(SOAK + "    " + extra + "\n", Path("c.yaml"))
    assert said in str(e.value) and "c.yaml" in str(e.value)


def test_the_load_is_for_soak_stages_only():
    text = SOAK.replace("benchmarks: [gemm-flops]}", "benchmarks: [gemm-flops], load: cpu-gemm}")
    with pytest.raises(CampaignError, match="'load' is for soak stages, not single_node"):
        parse_campaign(text, Path("c.yaml"))


def test_the_load_runs_to_the_rounds_end_less_the_margin():
    assert load_seconds(1000.0, 60.0, 3.0, 1012.0) == 45.0
    assert load_seconds(1000.0, 60.0, 3.0, 1056.5) == 0.0  # under a second left: none
    assert load_seconds(1000.0, 60.0, 3.0, 1100.0) == 0.0  # the benchmarks ran past the round


def test_a_nodes_command_is_data_every_value_quoted():
    ws = "/tmp/w s/$(touch /tmp/pwned)"
    doc = {
        "hosts": {"n1": {"workspace": ws, "python": "/usr/bin/python3", "suite_python": "venv/bin/python"}}
    }
    line = load_command(doc, "n1", "run-1", Load(kind="cpu-gemm", interval="2s"), 17.04, {"A": "b c;d"})
    assert line.startswith("exec env SB_FLEET_TAG=run-1/n1 /bin/sh -c ")
    script = shlex.split(line)[-1]  # what /bin/sh -c runs
    words = shlex.split(script)
    assert words[:2] == ["cd", ws] and "exec" in words
    tail = words[words.index("exec") + 1 :]
    assert tail[:5] == ["env", "PYTHONPATH=suite", "A=b c;d", "venv/bin/python", "-m"]
    assert tail[5:11] == ["sb_bench.host.burn", "--kind", "cpu-gemm", "--seconds", "17.0", "--interval"]


def test_smi_rows_become_samples_and_the_summary_counts_throttled_windows():
    fields = (
        ("index", "index", "int"),
        ("temperature.gpu", "gpu_temperature", "float"),
        ("clocks.sm", "gpu_sm_clock", "float"),
        ("power.draw", "gpu_power", "float"),
        ("clocks_throttle_reasons.hw_thermal_slowdown", "hw_thermal_slowdown", "active"),
        ("clocks_throttle_reasons.sw_power_cap", "sw_power_cap", "active"),
    )
    calm = parse_smi(
        "0, 60, 1980, 650.5, Not Active, Active\n1, 62, 1975, [N/A], Not Active, Not Active\n", fields
    )
    hot = parse_smi(
        "0, 88, 1410, 700, Active, Not Active\n1, 70, 1980, 690, Not Active, Not Active\n", fields
    )
    assert calm["0"]["gpu_throttle_reasons"] == ["sw_power_cap"] and "gpu_power" not in calm["1"]
    s = Summary(interval=5.0)
    for t, gpus in enumerate([calm, hot, hot, calm]):
        s.add(t * 5.0, gpus)
    doc = s.to_json()
    # a power cap is how a GPU under load runs: reported, never a throttled window
    assert doc["throttled_windows"] == 2 and doc["throttled_s"] == 10.0
    assert doc["reasons_s"] == {"hw_thermal_slowdown": 10.0, "sw_power_cap": 10.0}
    assert (doc["max_temp_c"], doc["min_sm_mhz"], doc["samples"], doc["gpus"]) == (88.0, 1410.0, 4, 2)
    assert doc["mean_power_w"] == round((650.5 + 1390 * 2 + 650.5) / 4, 1)
    assert Summary(1.0).to_json()["samples"] == 0  # no source: no numbers, none made up


def test_the_fake_machines_planted_throttle_is_seen_only_in_its_window(tmp_path):
    roots = make_machine(tmp_path / "m", gpus=2)
    env = Env(Path(roots["sb_path_sysfs"]), Path(roots["sb_path_procfs"]), Path(roots["sb_tool_dir"]))
    src, why = open_source(env)
    assert isinstance(src, SmiTelemetry) and not why
    before = src.sample()
    assert set(before) == {"0", "1"} and before["0"]["gpu_sm_clock"] == 1980.0
    assert before["0"]["gpu_throttle_reasons"] == []
    plant_throttle(Path(roots["sb_tool_dir"]), time.time() - 1, 60, gpus=[1])
    during = src.sample()
    assert (
        during["1"]["gpu_throttle_reasons"] == ["hw_thermal_slowdown"]
        and not during["0"]["gpu_throttle_reasons"]
    )
    assert not src.dropped  # the fake answers every field the load asks


def test_a_summary_line_is_read_back_and_kept_in_columns():
    doc = {
        "start": 10.0,
        "end": 40.0,
        "gemms": 5,
        "problem": "",
        "telemetry": {
            "throttled_windows": 3,
            "max_temp_c": 88.0,
            "reasons_s": {"hw_thermal_slowdown": 15.0},
            "counters": {"xid": [0, 1]},
        },
    }
    out = "sb-load: 1\nsb-load: 2\nSB_LOAD_SUMMARY " + json.dumps(doc) + "\n"
    assert parse_summary(out) == doc
    assert parse_summary("sb-load: 1\nSB_LOAD_SUMMARY {broken\n") is None
    assert parse_summary("SB_LOAD_SUMMARY [1]") is None
    # a host's hostile line: nested past any real summary, or longer than one: no summary, no traceback
    assert parse_summary("SB_LOAD_SUMMARY " + "[" * 60_000) is None
    assert parse_summary('SB_LOAD_SUMMARY {"a": "' + "x" * (70 << 10) + '"}') is None
    calm = {"start": 11.0, "end": 40.0, "telemetry": {"throttled_windows": 0, "counters": {}}}
    entries = {
        "a": {"outcome": "ok", "reason": "", "summary": doc},
        "b": {"outcome": "ok", "reason": "", "summary": calm},
        "c": {"outcome": "unreachable", "reason": "no route", "summary": None},
    }
    stored = json.loads(json.dumps(load_doc("cpu-gemm", "S", "E", 30.0, None, entries)))
    assert stored["hosts"] == ["a", "b", "c"] and stored["columns"]["throttled_windows"] == [3, 0, None]
    assert set(stored["notes"]) == {"a", "c"}  # words only where a node has them
    back = host_entries(stored)
    assert load_throttled_windows(back["a"]) == 3 and busy_seconds(back["a"]) == 30.0
    assert back["a"]["counters"] == {"xid": [0, 1]} and back["a"]["reasons_s"] == {
        "hw_thermal_slowdown": 15.0
    }
    assert back["c"]["outcome"] == "unreachable" and back["c"]["reason"] == "no route"
    assert load_throttled_windows(back["c"]) == 0 and busy_seconds(back["c"]) == 0.0
    assert load_throttled_windows(None) == 0 and load_throttled_windows({"throttled_windows": "9"}) == 0
    assert host_entries({"hosts": 3}) == {} and host_entries([]) == {}


def test_the_rounds_load_adds_its_throttled_windows_to_that_node_and_round(tmp_path):
    stage = parse_campaign(SOAK + "    load: cpu-gemm\n", Path("c.yaml")).spec.stages[1]
    records = [
        RoundRecord(
            i, f"2026-12-07T10:0{i}:00+00:00", f"2026-12-07T10:0{i}:10+00:00", f"runs/r{i}", ["a", "b"]
        )
        for i in (1, 2, 3)
    ]
    for i in (1, 2, 3):
        (tmp_path / "runs" / f"r{i}").mkdir(parents=True)
    entries = {
        "a": {"outcome": "ok", "summary": {"telemetry": {"throttled_windows": 4}}},
        "b": {"outcome": "ok", "summary": {"telemetry": {"throttled_windows": 0}}},
    }
    doc = load_doc("cpu-gemm", "S", "E", 17.0, None, entries)
    (tmp_path / "runs" / "r2" / "load.json").write_text(json.dumps(doc))
    series = read_series(tmp_path, records, stage, ["a", "b"], tmp_path / "closing")
    assert series["a"].throttled == {1: 4}  # round 2 (its position 1), node a only
    assert series["b"].throttled == {}


def _burn(tmp_path: Path, *args: str, roots: dict[str, str] | None = None) -> subprocess.Popen:
    roots = roots or make_machine(tmp_path / "m", gpus=2)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sb_bench.host.burn",
            "--kind",
            "cpu-gemm",
            "--interval",
            "1",
            "--threads",
            "1",
        ]
        + ["--size", "128", "--tool-dir", roots["sb_tool_dir"], *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).resolve().parents[3] / "benchmarks"),
    )


def test_the_load_ends_by_its_own_deadline_with_its_summary(tmp_path):
    t0 = time.monotonic()
    p = _burn(tmp_path, "--seconds", "2.5")
    out, _ = p.communicate(timeout=60)
    took = time.monotonic() - t0
    s = parse_summary(out)
    assert p.returncode == 0 and s is not None, out[-2000:]
    assert s["ended_by"] == "deadline" and 2.5 <= s["end"] - s["start"] < 4.5 and took < 20, (s, took)
    assert s["gemms"] > 0 and s["errors"] == 0 and s["telemetry_source"] == "nvidia-smi", s
    assert s["telemetry"]["samples"] >= 2 and s["telemetry"]["gpus"] == 2, s
    assert out.splitlines()[0].startswith("sb-load: ")


def test_sigterm_ends_the_load_at_once_with_its_summary(tmp_path):
    p = _burn(tmp_path, "--seconds", "120")
    assert p.stdout is not None
    assert p.stdout.readline().startswith("sb-load: ")  # sampling: the load is on
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=30)
    s = parse_summary(out)
    assert p.returncode == 0 and s is not None and s["ended_by"] == "stop", out[-2000:]
    assert time.monotonic() - t0 < 10


def test_wrong_products_under_the_load_fail_that_nodes_round(tmp_path):
    stage = parse_campaign(SOAK + "    load: gpu-burn\n", Path("c.yaml")).spec.stages[1]
    rec = RoundRecord(2, "2026-12-07T10:02:00+00:00", "2026-12-07T10:02:10+00:00", "runs/r2", ["a", "b"])
    (tmp_path / "runs" / "r2").mkdir(parents=True)
    entries = {
        "a": {"outcome": "ok", "summary": {"errors": 3, "telemetry": {}}},
        "b": {"outcome": "ok", "summary": {"errors": 0, "telemetry": {}}},
    }
    (tmp_path / "runs" / "r2" / "load.json").write_text(
        json.dumps(load_doc("gpu-burn", "S", "E", 9.0, None, entries))
    )
    cols = extract_round(tmp_path, rec, stage)
    a, b = cols.nodes["a"], cols.nodes["b"]
    assert not a.ok and "the load's GEMMs gave 3 wrong product entries" in a.reason, a.reason
    # b's round fails for its own reason alone (no report here), never for a's load
    assert "wrong product" not in b.reason
    assert load_failure({"errors": 1}) == "the load's GEMMs gave 1 wrong product entry"
    assert load_failure({"errors": 0}) == "" and load_failure(None) == ""


def test_heat_a_low_clock_and_a_counter_grown_under_the_load_fail_that_nodes_round(tmp_path):
    """The load's telemetry judged per round (load.max_temp_c, load.min_clock_ratio of the round's fleet
    median, the watched counters' growth inside the load): each for the node that showed it, with its
    figures; without the limits the same telemetry is recorded, not judged."""
    limits = "    load: {kind: gpu-burn, max_temp_c: 87, min_clock_ratio: 0.9}\n"
    stage = parse_campaign(SOAK + limits, Path("c.yaml")).spec.stages[1]
    rec = RoundRecord(2, "2026-12-07T10:02:00+00:00", "2026-12-07T10:02:10+00:00", "runs/r2", list("abcde"))
    (tmp_path / "runs" / "r2").mkdir(parents=True)

    def tele(temp: float, sm: float, ecc: list[int] | None = None, xid: list[int] | None = None) -> dict:
        counters = {"gpu_uncorrected_ecc": ecc or [0, 0], "gpu_corrected_ecc": [5, 900]}
        if xid:
            counters["xid"] = xid
        return {
            "outcome": "ok",
            "summary": {
                "errors": 0,
                "telemetry": {"max_temp_c": temp, "min_sm_mhz": sm, "counters": counters},
            },
        }

    entries = {
        "a": tele(71.0, 1980.0),
        "b": tele(91.5, 1980.0),  # hot
        "c": tele(72.0, 1410.0),  # held at a low clock: 71% of the fleet's 1980 MHz
        "d": tele(70.0, 1800.0, ecc=[0, 2]),  # uncorrected ECC errors under the load
        "e": tele(70.0, 1965.0, xid=[1, 1]),  # an XID from before the load: no growth
    }
    (tmp_path / "runs" / "r2" / "load.json").write_text(
        json.dumps(load_doc("gpu-burn", "S", "E", 9.0, None, entries))
    )
    nodes = extract_round(tmp_path, rec, stage).nodes
    assert "a GPU at 91.5 C under the load (load.max_temp_c 87)" in nodes["b"].reason
    assert (
        "its lowest SM clock under the load 1410 MHz, below 90% of the fleet's 1965 MHz (load.min_clock_ratio)"
        in nodes["c"].reason
    ), nodes["c"].reason
    assert "gpu.ecc_uncorrected grew 0 -> 2 under the load (counter_max_growth 0)" in nodes["d"].reason
    for h in "bcd":
        assert not nodes[h].ok
    for h in "ae":  # corrected ECC is not watched by default; the XID count did not grow
        assert "under the load" not in nodes[h].reason, nodes[h].reason
    # the same telemetry without the limits: only the counters (watched by default) fail a round
    plain = parse_campaign(SOAK + "    load: gpu-burn\n", Path("c.yaml")).spec.stages[1]
    nodes = extract_round(tmp_path, rec, plain).nodes
    assert "under the load" not in nodes["b"].reason and "under the load" not in nodes["c"].reason
    assert "gpu.ecc_uncorrected grew" in nodes["d"].reason
    # a host's garbage in its figures is no finding and no crash
    assert load_failure({"max_temp_c": "hot", "min_sm_mhz": True, "counters": {"xid": [0]}}, None) == ""
    with pytest.raises(CampaignError, match="min_clock_ratio"):
        parse_campaign(SOAK + "    load: {kind: gpu-burn, min_clock_ratio: 1.5}\n", Path("c.yaml"))


def test_fabric_counters_are_read_at_the_loads_start_and_end_and_judged(tmp_path):
    """InfiniBand (sysfs) and NVLink (nvidia-smi nvlink -e) error counters, summed over the node's ports and
    links, at the load's start and end: errors a link counts while the node burns are that round's."""
    roots = make_machine(tmp_path / "m", gpus=2, ib_ports=2)
    p = _burn(tmp_path, "--seconds", "4", "--sysfs", roots["sb_path_sysfs"], roots=roots)
    assert p.stdout is not None
    assert p.stdout.readline().startswith("sb-load: ")  # the start's readings are taken: the load is on
    port = Path(roots["sb_path_sysfs"]) / "class/infiniband/mlx5_1/ports/1/counters"
    (port / "symbol_error").write_text("7\n")
    bump_nvlink(Path(roots["sb_tool_dir"]), 1, 3, "replay", by=2)
    bump_nvlink(Path(roots["sb_tool_dir"]), 0, 0, "crc_flit", by=1)
    out, _ = p.communicate(timeout=60)
    s = parse_summary(out)
    assert p.returncode == 0 and s is not None, out[-2000:]
    counters = s["telemetry"]["counters"]
    assert counters["ib_symbol_error"] == [0, 7] and counters["ib_link_downed"] == [0, 0], counters
    assert counters["nvlink_replay"] == [0, 2] and counters["nvlink_crc"] == [0, 1], counters
    entry = {"counters": counters}
    limits = LoadLimits(watch=("ib.symbol_error", "nvlink.replay"), counter_max_growth=0)
    why = load_failure(entry, limits)
    assert "ib.symbol_error grew 0 -> 7 under the load" in why and "nvlink.replay grew 0 -> 2" in why, why
    assert "nvlink.crc" not in why  # not watched here
