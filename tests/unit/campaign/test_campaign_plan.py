"""``accept --dry-run``'s plan (sb_fleet.campaign.campaign_plan): the runs of each stage, their deadlines as
validate bounds a run, the soak's rounds at their pace, the disk from the measured per-node and per-run
figures, and what a resumed campaign has left."""

from __future__ import annotations

import copy
from datetime import datetime, timezone

import pytest

from sb_fleet.campaign.campaign_plan import (
    COMPACT_NODE_ROUND_BYTES,
    COMPACT_ROUND_BYTES,
    KEPT_NODE_ROUND_BYTES,
    NODE_ROUND_BYTES,
    ROUND_BYTES,
    SERIES_NODE_ROUND_BYTES,
    SOAK_FILES_NODE_ROUND_BYTES,
    duration,
    node_names,
    plan_campaign,
    plan_lines,
    size,
    soak_disk,
)
from sb_fleet.campaign.campaign_state import CampaignState, RoundRecord
from sb_fleet.campaign.gating import StageOutcome, entrants, gate_stage
from sb_fleet.config.campaign_spec import parse_campaign
from sb_fleet.config.hostlist import compress
from sb_fleet.config.inventory import Host, Inventory

T0 = datetime(2026, 12, 7, 8, 0, tzinfo=timezone.utc)
TEXT = """\
version: 1
stages:
  - {name: sanity, kind: sanity}
  - {name: single, kind: single_node, benchmarks: [gemm-flops], on_failure: retry_once}
  - {name: fabric, kind: fabric, benchmarks: [nccl-bw], patterns: [pair-wise, all-nodes]}
  - {name: soak, kind: soak, benchmarks: [gemm-flops], duration: 5m, round: 1m}
"""
CONFIG = {
    "version": "v0.4",
    "fleet": {"forks": 64, "default_timeout": 900, "step_margin": 60, "prep_timeout": 180},
    "superbench": {
        "benchmarks": {
            "gemm-flops": {"timeout": 600, "modes": [{"name": "local", "proc_num": 1}]},
            "nccl-bw": {"timeout": 300, "modes": [{"name": "torch.distributed", "proc_num": 1}]},
        }
    },
}


def inventory(n: int, prefix: str = "h") -> Inventory:
    return Inventory(("test",), tuple(Host(f"{prefix}{i + 1}", ("all",), {}) for i in range(n)))


def campaign(tmp_path, text: str = TEXT):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return parse_campaign(text, p)


def test_every_stage_its_runs_in_order(tmp_path):
    plan = plan_campaign(campaign(tmp_path), CONFIG, inventory(6))
    runs = {st.stage.name: [(r.label, r.count, r.nodes) for r in st.runs] for st in plan.stages}
    assert runs == {
        "sanity": [("attempt 1", 1, 6)],
        "single": [("attempt 1", 1, 6), ("attempt 2", 1, 6)],  # retry_once: at most twice
        "fabric": [("attempt 1 pair-wise", 1, 6), ("attempt 1 all-nodes", 1, 6)],
        "soak": [("round", 5, 6), ("closing check", 1, 6)],
    }
    fabric = plan.stages[2].runs
    assert [r.pattern_rounds for r in fabric] == [5, 1]  # 6 nodes: 5 pair-wise rounds
    assert plan.hosts == tuple(f"h{i}" for i in range(1, 7)) and plan.forks == 64


def test_disk_is_the_measured_figures_per_run_and_per_node(tmp_path):
    plan = plan_campaign(campaign(tmp_path), CONFIG, inventory(6))
    per_run = ROUND_BYTES + NODE_ROUND_BYTES * 6
    soak = plan.stages[3]
    # keep_rounds failed (the default): the first round whole, 4 compacted, each node's files for at most
    # 4 rounds, the series file; the closing check whole; the judgement files of 6 nodes x 5 rounds
    compacted = 4 * (COMPACT_ROUND_BYTES + 6 * COMPACT_NODE_ROUND_BYTES) + 6 * 4 * KEPT_NODE_ROUND_BYTES
    expected = 2 * per_run + compacted + 30 * (SOAK_FILES_NODE_ROUND_BYTES + SERIES_NODE_ROUND_BYTES)
    assert soak.disk_bytes == pytest.approx(expected)
    assert [s.disk_bytes for s in plan.stages[:3]] == [per_run, 2 * per_run, 2 * per_run]
    assert plan.disk_bytes == pytest.approx(5 * per_run + expected)
    # keep_rounds all: every round whole, as before compaction
    whole = plan_campaign(
        campaign(tmp_path, TEXT.replace("round: 1m}", "round: 1m, keep_rounds: all}")), CONFIG, inventory(6)
    )
    assert whole.stages[3].disk_bytes == pytest.approx(6 * per_run + 30 * SOAK_FILES_NODE_ROUND_BYTES)
    # docs/campaigns.md's own figure: 1,000 nodes x 4,320 rounds of run directories is 232 GB whole
    assert pytest.approx(232e9, rel=0.005) == 4320 * (ROUND_BYTES + NODE_ROUND_BYTES * 1000)
    # compacted, with a load: under the 10 GB (the cost section: ~1.5 GB measured and fitted)
    big = parse_campaign(
        "version: 1\nstages:\n  - {name: s, kind: soak, benchmarks: [gemm-flops], duration: 72h, round: 1m,"
        " load: cpu-gemm}\n",
        tmp_path / "big.yaml",
    ).spec.stages[0]
    assert 1e9 < soak_disk(big, 1000, 4320, 1) < 2.5e9


def test_wall_time_from_the_deadlines_and_the_soaks_pace(tmp_path):
    c = campaign(tmp_path)
    plan = plan_campaign(c, CONFIG, inventory(6))
    soak = plan.stages[3]
    assert soak.min_s == 5 * 60  # rounds start a round apart
    round_bound = soak.runs[0].bound_s
    assert round_bound > 600  # the GEMM's own timeout, and more: a round may outrun its minute
    assert soak.max_s == 5 * round_bound + soak.runs[1].bound_s
    assert any("more than its 1m" in n for n in soak.notes)
    assert plan.min_s == 5 * 60 and plan.max_s == sum(s.max_s for s in plan.stages)
    single = plan.stages[1]
    assert single.max_s == 2 * single.runs[0].bound_s

    # the stage's timeout cuts each benchmark's: 600 s -> 120 s is 480 s less a run
    cut = plan_campaign(
        campaign(tmp_path, TEXT.replace("on_failure: retry_once}", "on_failure: retry_once, timeout: 2m}")),
        CONFIG,
        inventory(6),
    )
    assert single.runs[0].bound_s - cut.stages[1].runs[0].bound_s == 480
    # hosts past --forks go in waves: 6 hosts 2 at a time are 3 waves of each deadline
    slow = plan_campaign(c, CONFIG, inventory(6), forks=2)
    assert slow.forks == 2 and slow.stages[1].runs[0].bound_s > 2 * single.runs[0].bound_s


def test_a_benchmark_timeout_from_the_config_counts(tmp_path):
    longer = copy.deepcopy(CONFIG)
    longer["superbench"]["benchmarks"]["gemm-flops"]["timeout"] = 1200
    a = plan_campaign(campaign(tmp_path), CONFIG, inventory(3)).stages[1].runs[0].bound_s
    b = plan_campaign(campaign(tmp_path), longer, inventory(3)).stages[1].runs[0].bound_s
    assert b - a == 600


def _ok(h: str) -> StageOutcome:
    return StageOutcome(h, True)


def test_resumed_what_remains(tmp_path):
    """Sanity, single and fabric done (h5 held out at sanity), 2 of the soak's 5 rounds done: the soak's 3
    rounds left on the 5 nodes still active."""
    c = campaign(tmp_path)
    hosts = [f"h{i}" for i in range(1, 7)]
    state = CampaignState.new(c, hosts, T0)
    for st in c.spec.stages[:3]:
        ran = entrants(c.spec, st, state.status_map(), state.passed_map())
        state.start_stage(st.name, list(ran), 1, T0)
        outs = {h: _ok(h) for h in ran if not (st.name == "sanity" and h == "h5")}
        state.apply(gate_stage(st, ran, outs, 1), T0)
        state.finish_stage(st.name, T0)
    active = [h for h in hosts if h != "h5"]
    for i in (1, 2):
        state.record_round(
            "soak",
            RoundRecord(
                i, "2026-12-07T08:00:00+00:00", "2026-12-07T08:01:00+00:00", f"runs/soak-round-0{i}", active
            ),
            T0,
        )
    plan = plan_campaign(c, CONFIG, inventory(6), state=state)
    assert plan.done == ("sanity", "single", "fabric")
    assert [s.stage.name for s in plan.stages] == ["soak"]
    soak = plan.stages[0]
    assert soak.rounds_left == 3 and soak.nodes == 5 and soak.min_s == 180
    assert plan.hosts == tuple(active)
    text = "\n".join(plan_lines(plan, resumed=True))
    assert "stages done: sanity, single, fabric" in text and "3 round(s) left of 5" in text

    state.record_round("soak", RoundRecord(3, "x", "y", "runs/soak-round-03", active), T0)
    state.finish_stage("soak", T0)
    done = plan_lines(plan_campaign(c, CONFIG, inventory(6), state=state), resumed=True)
    assert done[-1] == "nothing left to run: the campaign has finished every stage"


def test_a_fabric_stage_next_plans_its_entrants_only(tmp_path):
    c = campaign(tmp_path)
    hosts = ["h1", "h2", "h3", "h4"]
    state = CampaignState.new(c, hosts, T0)
    for st in c.spec.stages[:2]:
        ran = entrants(c.spec, st, state.status_map(), state.passed_map())
        state.start_stage(st.name, list(ran), 1, T0)
        outs = {h: _ok(h) for h in ran if not (st.name == "single" and h == "h4")}
        d = gate_stage(st, ran, outs, 1)
        state.apply(d, T0)
        if d.retry:
            state.start_stage(st.name, list(d.retry), 2, T0)
            state.apply(gate_stage(st, d.retry, {}, 2), T0)
        state.finish_stage(st.name, T0)
    plan = plan_campaign(c, CONFIG, inventory(4), state=state)
    assert [(s.stage.name, s.nodes) for s in plan.stages] == [("fabric", 3), ("soak", 3)]


def test_the_lines_say_stages_nodes_runs_and_estimates(tmp_path):
    plan = plan_campaign(campaign(tmp_path), CONFIG, inventory(6))
    text = "\n".join(plan_lines(plan))
    assert text.startswith("campaign ") and "no host touched, nothing written" in text
    assert "nodes: 6 node(s): h1, h2, h3, h4, h5, h6" in text
    assert "2. single (single_node); gemm-flops; on_failure retry_once" in text
    assert "3. fabric (fabric); nccl-bw; patterns pair-wise, all-nodes" in text
    assert "attempt 1 pair-wise: 5 pattern round(s)" in text
    assert "4. soak (soak); gemm-flops; 5 rounds of 1m (5m)" in text
    assert f"disk: {size(ROUND_BYTES + NODE_ROUND_BYTES * 6)} a round" in text
    assert "estimated wall time: at least 5m" in text and "assumes:" in text
    assert "estimated disk (the campaign directory)" in text and "docs/campaigns.md" in text
    assert "no drain until the campaign ends" in text


def test_names_past_twenty_as_a_hostlist():
    names = [f"gpu{i:04d}" for i in range(1, 1001)]
    assert node_names(names[:20]) == ", ".join(names[:20])
    assert node_names(names) == "gpu[0001-0999],gpu1000"
    scattered = [f"n{i}" for i in range(1, 2000, 2)]
    out = node_names(scattered)
    assert len(out) <= 205 and out.endswith(", ...") and out.startswith("n[1,3,5")


def test_units():
    assert duration(0) == "0s" and duration(59.2) == "1m" and duration(3600) == "1h"
    assert duration(3 * 86400 + 3600 * 4 + 61) == "3d 4h" and duration(150) == "2m 30s"
    assert size(449_000) == "449.0 KB" and size(232e9) == "232.0 GB" and size(12) == "12 B"


def _cli_inputs(tmp_path):
    import yaml

    camp, cfg, inv = tmp_path / "c.yaml", tmp_path / "cfg.yaml", tmp_path / "hosts.ini"
    camp.write_text(TEXT)
    cfg.write_text(yaml.safe_dump({**CONFIG, "health": {"enabled": True}}))
    inv.write_text("[gpu]\n" + "".join(f"g{i:02d} ansible_host=10.0.0.{i}\n" for i in range(1, 25)))
    return camp, cfg, inv


def test_the_command_checks_prints_and_writes_nothing(tmp_path):
    from click.testing import CliRunner

    from sb_fleet.cli.main import main

    camp, cfg, inv = _cli_inputs(tmp_path)
    d = tmp_path / "acc"
    args = ["accept", "--dry-run", "-c", str(cfg), "-i", str(inv), "--campaign", str(camp)]
    r = CliRunner().invoke(main, [*args, "--dir", str(d)])
    assert r.exit_code == 0, r.output
    assert not d.exists()  # nothing written, not even the directory
    names = [f"g{i:02d}" for i in range(1, 25)]
    assert f"nodes: 24 node(s): {compress(names)}\n" in r.output  # past 20: a hostlist
    assert "g01, g02" not in r.output
    assert "attempt 1 pair-wise: 23 pattern round(s)" in r.output
    assert f"{size(ROUND_BYTES + NODE_ROUND_BYTES * 24)} a round" in r.output
    assert CliRunner().invoke(main, args).exit_code == 0  # no --dir: a plan needs none
    # the same refusals as a start: a benchmark the config lacks, at its line; a directory in use
    bad = tmp_path / "bad.yaml"
    bad.write_text(TEXT.replace("benchmarks: [nccl-bw]", "benchmarks: [nope]"))
    r = CliRunner().invoke(
        main, ["accept", "--dry-run", "-c", str(cfg), "-i", str(inv), "--campaign", str(bad)]
    )
    assert r.exit_code == 2 and "line 5" in r.output and "'nope'" in r.output, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    d.mkdir()
    (d / "campaign-state.json").write_text("{}")
    r = CliRunner().invoke(main, [*args, "--dir", str(d)])
    assert r.exit_code == 2 and "a campaign is already in this directory" in r.output, r.output


def test_the_command_resumed_prints_what_remains(tmp_path):
    import json

    from click.testing import CliRunner

    from sb_fleet.campaign.campaign_state import INPUTS_NAME, save_state
    from sb_fleet.cli.main import main
    from sb_fleet.safe_files import sha256_file

    camp, cfg, inv = _cli_inputs(tmp_path)
    c = campaign(tmp_path)
    hosts = [f"g{i:02d}" for i in range(1, 25)]
    state = CampaignState.new(c, hosts, T0)
    state.finish_stage("sanity", T0)
    d = tmp_path / "acc"
    save_state(d, state)
    inputs = {
        "campaign": str(camp),
        "config": str(cfg),
        "config_digest": sha256_file(cfg),
        "inventory": str(inv),
    }
    (d / INPUTS_NAME).write_text(json.dumps({"schema_version": 1, **inputs}))
    before = sorted(p.name for p in d.iterdir())
    r = CliRunner().invoke(main, ["accept", "--dry-run", "--resume", str(d)])
    assert r.exit_code == 0, r.output
    assert "stages done: sanity" in r.output and "1. single (single_node)" in r.output, r.output
    assert "5 round(s) left of 5" in r.output
    assert sorted(p.name for p in d.iterdir()) == before  # nothing written
