"""Health checks on a real loopback fleet where each host is a machine of its own (tests/healthfake.py:
fake sysfs, procfs and tool directory through the sb_path_sysfs, sb_path_procfs and sb_tool_dir inventory
variables): ``sb-fleet check`` names each planted fault with its reason, healthy hosts pass, and
``validate`` benchmarks only the healthy hosts (``--run-unhealthy``: all of them) while every host ends
in the report. No torch on the hosts: the checks need only Python's standard library."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from .conftest import sb_fleet, started_fleet

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from healthfake import bump_nvlink, make_machine  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: 16
superbench:
  benchmarks:
    noop:
      timeout: 60
      modes: [{name: local, proc_num: 1}]
      parameters: {num_warmup: 0, num_steps: 1}
gates:
  fleet: {enabled: false}
health:
  profile: h100-sxm-8x-ib400
"""

XID_FATAL = "[  812.114] NVRM: Xid (PCI:0000:48:00): 79, pid=0, name=python, GPU has fallen off the bus.\n"
XID_APP = "[  402.337] NVRM: Xid (PCI:0000:18:00): 13, pid=3120, name=python, Graphics Exception: SM Warp Exception\n"

# host -> (the machine's faults, the failing check expected, words of its reason)
FAULTS: dict[str, tuple[dict, str, str]] = {
    "h0": ({}, "", ""),
    "h1": ({"kmsg": XID_APP}, "", ""),  # an application's XID: a warning, the host stays healthy
    "h2": ({"gpu_over": {3: {"pcie.link.width.current": 8}}}, "gpu.pcie", "x8 of x16"),
    "h3": ({"ib_state": {2: ("1: DOWN", "3: Disabled")}}, "ib.state", "mlx5_2/1 DOWN"),
    "h4": ({"ib_rate": {5: "200 Gb/sec (4X HDR)"}}, "ib.rate", "mlx5_5/1 at 200 of 400"),
    "h5": ({"gpus": 7}, "gpu.count", "7 GPU(s) found, 8 expected"),
    "h6": ({"gpu_over": {1: {"remap.pending": True, "remap.unc": 2}}}, "gpu.row_remap", "row remap pending"),
    "h7": ({"kmsg": XID_FATAL}, "gpu.xid", "XID 79"),
    "h8": ({"driver": "535.104.05"}, "drift.driver", "majority (9 of 10) has 550.54.15"),
    # 8 GPUs on the PCI bus and no driver loaded (nvidia-smi: "couldn't communicate with the NVIDIA driver")
    "h9": ({"driver_loaded": False}, "gpu.count", "8 GPUs on the PCI bus, 0 seen by the driver"),
    # nvidia-smi lists 7 of the 8 GPUs on the bus
    "h10": (
        {"unseen": (3,)},
        "gpu.count",
        "8 GPUs on the PCI bus, 7 seen by the driver: not seen 0000:48:00.0",
    ),
}


@pytest.fixture(scope="module")
def hfleet():
    with started_fleet(len(FAULTS), "127.0.45", check_torch=False) as f:
        yield f


@pytest.fixture(scope="module")
def setup(hfleet):
    names = [h.name for h in hfleet.hosts]
    by_name = dict(zip(names, FAULTS, strict=True))  # fleet host -> fault row
    host_vars = {}
    for n in names:
        faults = FAULTS[by_name[n]][0]
        host_vars[n] = make_machine(hfleet.dir / "machines" / n, python="/usr/bin/python3", **faults)
    inv = hfleet.inventory(host_vars=host_vars)
    return inv, hfleet.config(CONFIG), by_name


def test_check_names_every_fault(setup, tmp_path):
    inv, cfg, by_name = setup
    rd = tmp_path / "run"
    p = sb_fleet("check", "-i", str(inv), "-c", str(cfg), "--run-dir", str(rd), "--quiet", timeout=300)
    assert p.returncode == 1 and (rd / "health.json").exists(), p.stdout + p.stderr  # unhealthy: exit 1
    outcomes = {o["host"]: o for o in json.loads((rd / "outcomes" / "check.json").read_text())["hosts"]}
    health = json.loads((rd / "health.json").read_text())
    for host, row in by_name.items():
        _, check, words = FAULTS[row]
        o = outcomes[host]
        if not check:
            assert o["outcome"] == "ok", (host, o, health["hosts"][host]["findings"])
            continue
        assert o["outcome"] == "unhealthy", (host, o)
        failing = {f["check"]: f for f in health["hosts"][host]["findings"] if f["verdict"] == "fail"}
        assert check in failing, (host, failing)
        assert words in failing[check]["evidence"], (host, failing[check])
        assert words in o["reason"], (host, o["reason"])
        doc = json.loads((rd / "health" / f"{host}.json").read_text())
        assert doc["host"] == host
        assert doc["facts"]["gpu_source"] == (None if row == "h9" else "nvidia-smi"), (host, doc["facts"])
    # the application XID is a warning with its code, not a failure
    h1 = next(h for h, r in by_name.items() if r == "h1")
    warns = {f["check"]: f for f in health["hosts"][h1]["findings"]}
    assert warns["gpu.xid"]["verdict"] == "warn" and warns["gpu.xid"]["value"] == {"13": 1}
    # the drift table names the majority value and the odd host
    h8 = next(h for h, r in by_name.items() if r == "h8")
    assert health["majority"]["driver"] == "550.54.15"
    assert health["drift"]["driver"]["535.104.05"] == [h8]
    assert "drift driver (majority: 550.54.15)" in p.stdout


def test_validate_skips_unhealthy_hosts(setup, tmp_path):
    inv, cfg, by_name = setup
    healthy = next(h for h, r in by_name.items() if r == "h0")
    sick = next(h for h, r in by_name.items() if r == "h2")
    rd = tmp_path / "run"
    p = sb_fleet(
        "validate",
        "-i",
        str(inv),
        "-c",
        str(cfg),
        "--run-dir",
        str(rd),
        "--limit",
        f"{healthy},{sick}",
        timeout=600,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    merged = json.loads((rd / "outcomes.json").read_text())["hosts"]
    assert merged[healthy]["outcome"] == "ok", merged[healthy]
    assert merged[sick]["outcome"] == "unhealthy" and "x8 of x16" in merged[sick]["reason"]
    deploy = merged[sick]["stages"]["deploy"]  # not benchmarked, and said so in every later stage
    assert deploy["outcome"] == "skipped" and deploy["reason"].startswith("unhealthy: gpu.pcie")
    report = (rd / "report.md").read_text()
    assert "## Health" in report and sick in report and "x8 of x16" in report
    junit = (rd / "junit.xml").read_text()
    assert 'name="health gpu.pcie"' in junit
    # --run-unhealthy benchmarks it anyway; it still ends unhealthy
    rd2 = tmp_path / "run2"
    p = sb_fleet(
        "validate",
        "-i",
        str(inv),
        "-c",
        str(cfg),
        "--run-dir",
        str(rd2),
        "--limit",
        f"{healthy},{sick}",
        "--run-unhealthy",
        timeout=600,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    merged = json.loads((rd2 / "outcomes.json").read_text())["hosts"]
    assert merged[sick]["outcome"] == "unhealthy"
    assert merged[sick]["stages"]["run"]["outcome"] == "ok"


def test_validate_with_only_unhealthy_hosts_still_reports(setup, tmp_path):
    inv, cfg, by_name = setup
    sick = [h for h, r in by_name.items() if r in ("h3", "h7")]
    rd = tmp_path / "run"
    p = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(rd), "--limit", ",".join(sick))
    assert p.returncode == 1, p.stdout + p.stderr
    merged = json.loads((rd / "outcomes.json").read_text())["hosts"]
    assert all(merged[h]["outcome"] == "unhealthy" for h in sick), merged
    report = json.loads((rd / "report.json").read_text())
    verdicts = {h["name"]: h["verdict"] for h in report["hosts"]}
    assert all(verdicts[h] == "fail" for h in sick), verdicts
    assert set((rd / "quarantine.txt").read_text().split()) >= set(sick)


def test_nvlink_replay_counter_in_the_document_and_as_soak_growth(hfleet, tmp_path):
    """One link's replay counter bumped between two checks of a healthy host: the second document carries
    it (``gpu.nvlink_errors`` warns, the host stays ok), and read as a soak reads its rounds' documents
    (health_counters) it is a counter growth that fails the node."""
    from sb_fleet.analysis.soak import SoakCriteria, SoakRound, judge_node
    from sb_fleet.campaign.stage_judgement import health_counters

    host = hfleet.hosts[0].name
    machine = make_machine(hfleet.dir / "machines-nvlink" / host, python="/usr/bin/python3")
    inv = hfleet.inventory(name="inventory-nvlink.ini", host_vars={host: machine})
    cfg = hfleet.config(CONFIG)
    docs = []
    for i in range(2):
        rd = tmp_path / f"run{i}"
        p = sb_fleet(
            "check", "-i", str(inv), "-c", str(cfg), "--limit", host, "--run-dir", str(rd), "--quiet"
        )
        assert p.returncode == 0, p.stdout + p.stderr  # a warning: the host stays healthy
        docs.append(json.loads((rd / "health" / f"{host}.json").read_text()))
        if i == 0:
            bump_nvlink(Path(machine["sb_tool_dir"]), gpu=2, link=5, counter="replay", by=7)
    before, after = ({r["check"]: r for r in d["checks"]}["gpu.nvlink_errors"] for d in docs)
    assert before["verdict"] == "pass" and len(before["value"]) == 8 * 18, before
    assert after["verdict"] == "warn" and after["value"]["2/5"] == {"replay": 7}, after
    assert "GPU 2 link 5: replay=7" in after["evidence"]
    c0, c1 = health_counters(docs[0]), health_counters(docs[1])
    assert (c0["nvlink.replay[2/5]"], c1["nvlink.replay[2/5]"]) == (0, 7)
    t = datetime(2026, 12, 7, tzinfo=timezone.utc)
    rounds = [
        SoakRound(1, t, t + timedelta(minutes=1), counters=c0),
        SoakRound(2, t + timedelta(minutes=1), t + timedelta(minutes=2), counters=c1),
    ]
    node = judge_node(host, rounds, SoakCriteria(counters=("nvlink.replay", "nvlink.crc")))
    growth = [f for f in node.findings if f.kind == "counter_growth"]
    assert not node.passed and [f.subject for f in growth] == ["nvlink.replay[2/5]"], node.findings
    assert "nvlink.replay[2/5] grew by 7" in growth[0].message
