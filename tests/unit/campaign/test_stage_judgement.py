"""A stage's outcome per node from its run directory's documents, the config a stage runs with, the soak's
counter readings from a health document, and the campaign report (pure; the runner's I/O is tested on a
real fleet in tests/integration/test_accept.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from sb_fleet.campaign.campaign_state import CampaignState
from sb_fleet.campaign.gating import gate_stage
from sb_fleet.campaign.stage_judgement import (
    StageConfigError,
    bench_outcome,
    combined,
    health_counters,
    is_infra,
    probe_of,
    sanity_outcome,
    stage_config,
    throttled_windows,
)
from sb_fleet.config.campaign_spec import parse_campaign
from sb_fleet.report.campaign_report import campaign_html, campaign_markdown, write_campaign_report

TEXT = """\
version: 1
stages:
  - {name: sanity, kind: sanity, checks: [gpu, infiniband]}
  - name: single
    kind: single_node
    benchmarks: [gemm-flops]
    criteria: {limits: {gemm-flops/fp32_flops: {min: 30}}}
  - {name: fabric, kind: fabric, benchmarks: [nccl-bw], patterns: [pair-wise, all-nodes]}
  - {name: soak, kind: soak, benchmarks: [gemm-flops], duration: 5m, round: 1m}
"""
CONFIG = {
    "version": "v0.4",
    "superbench": {
        "benchmarks": {
            "gemm-flops": {"modes": [{"name": "local", "proc_num": 1}]},
            "nccl-bw": {"modes": [{"name": "torch.distributed", "proc_num": 2, "node_num": 1}]},
            "mem-bw": {},
        }
    },
}


@pytest.fixture
def campaign(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(TEXT)
    return parse_campaign(TEXT, p)


def test_probe_of_each_check():
    assert probe_of("gpu.pcie") == "gpu"
    assert probe_of("gpu.xid") == "xid"
    assert probe_of("gpu.fabric_manager") == "fabric_manager"
    assert probe_of("ib.rate") == "infiniband"
    assert probe_of("host.disk") == "host"
    assert probe_of("infiniband.probe") == "infiniband"
    assert probe_of("drift.driver") == "drift"


def test_sanity_judges_only_the_stages_probes(campaign):
    st = campaign.spec.stage("sanity")
    ok = {"outcome": "ok", "reason": ""}
    assert sanity_outcome("h1", st, ok, []).passed
    # a failing host check is not judged by a stage of gpu and infiniband probes
    host_fail = [{"check": "host.numa", "verdict": "fail", "evidence": "1 NUMA node"}]
    assert sanity_outcome("h1", st, {"outcome": "unhealthy", "reason": "host.numa"}, host_fail).passed
    ib_fail = [
        {"check": "ib.rate", "verdict": "fail", "evidence": "mlx5_4/1 at 200 of 400", "rule": ">= 400"}
    ]
    o = sanity_outcome(
        "h1", st, {"outcome": "unhealthy", "reason": "ib.rate"}, ib_fail, ["runs/s/health.json"]
    )
    assert not o.passed and "ib.rate: mlx5_4/1 at 200 of 400" in o.reason
    assert o.criteria[0].name == "ib.rate" and o.criteria[0].passed is False
    assert o.evidence == ("runs/s/health.json",)
    # a warning passes unless the stage says warn_fails
    warn = [{"check": "ib.errors", "verdict": "warn", "evidence": "mlx5_0/1 symbol_error=3"}]
    assert sanity_outcome("h1", st, ok, warn).passed
    strict = st.model_copy(update={"criteria": st.criteria.model_copy(update={"warn_fails": True})})
    assert not sanity_outcome("h1", strict, ok, warn).passed


def test_sanity_fails_what_gave_no_result(campaign):
    st = campaign.spec.stage("sanity")
    o = sanity_outcome("h1", st, None, [])
    assert not o.passed and "no outcome" in o.reason
    o = sanity_outcome("h1", st, {"outcome": "unreachable", "reason": "ssh: connection refused"}, [])
    assert not o.passed and o.reason.startswith("unreachable:") and is_infra(o.reason)
    # unhealthy with no failing check: the checks ran past their deadline or printed no document
    o = sanity_outcome("h1", st, {"outcome": "unhealthy", "reason": "health checks: no end within 15 s"}, [])
    assert not o.passed and "no end within" in o.reason and not is_infra(o.reason)


def test_bench_outcome_verdicts_and_limits(campaign):
    st = campaign.spec.stage("single")
    row = {"name": "h1", "outcome": "ok", "verdict": "pass", "reason": ""}
    o = bench_outcome("h1", st, row, {"gemm-flops/fp32_flops:0": 41.5, "gemm-flops/fp64_flops:0": 20.0})
    assert o.passed, o
    assert [(c.name, c.measured, c.passed) for c in o.criteria][1] == ("gemm-flops/fp32_flops:0", 41.5, True)
    o = bench_outcome("h1", st, row, {"gemm-flops/fp32_flops:0": 12.0})
    assert not o.passed and "gemm-flops/fp32_flops:0 = 12, limit >= 30" in o.reason
    o = bench_outcome("h1", st, row, {})
    assert not o.passed and "not measured" in o.reason
    o = bench_outcome("h1", st, {**row, "verdict": "flaky"}, {"gemm-flops/fp32_flops": 40.0})
    assert not o.passed and "verdict flaky" in o.reason  # flaky passes only where the campaign says so
    o = bench_outcome("h1", st, {**row, "verdict": "fail", "outcome": "unreachable", "reason": "ssh"}, {})
    assert is_infra(o.reason)
    assert not bench_outcome("h1", st, None, {}).passed


def test_a_fabric_stage_passes_only_every_pattern(campaign):
    st = campaign.spec.stage("fabric")
    good = bench_outcome("h1", st, {"verdict": "pass", "outcome": "ok"}, {}, ["a"], "pair-wise")
    bad = bench_outcome(
        "h1", st, {"verdict": "fail", "outcome": "failed", "reason": "x"}, {}, ["b"], "all-nodes"
    )
    both = combined("h1", [good, bad])
    assert not both.passed and "fabric all-nodes: verdict fail (x)" in both.reason
    assert both.evidence == ("a", "b")
    assert combined("h1", [good, good]).passed
    assert not combined("h1", []).passed


def test_stage_config_narrows_and_patterns(campaign):
    single = stage_config(CONFIG, campaign.spec.stage("single"))
    assert single["superbench"]["enable"] == ["gemm-flops"]
    assert "pattern" not in single["superbench"]["benchmarks"]["gemm-flops"]["modes"][0]
    fab = stage_config(CONFIG, campaign.spec.stage("fabric"), "pair-wise")
    mode = fab["superbench"]["benchmarks"]["nccl-bw"]["modes"][0]
    assert mode["pattern"] == {"type": "pair-wise"} and "node_num" not in mode
    assert "pattern" not in CONFIG["superbench"]["benchmarks"]["nccl-bw"]["modes"][0]  # not changed in place
    local_only = {"superbench": {"benchmarks": {"nccl-bw": {"modes": [{"name": "local"}]}}}}
    with pytest.raises(StageConfigError, match="no mpi or torch.distributed mode"):
        stage_config(local_only, campaign.spec.stage("fabric"), "all-nodes")


def test_health_counters_read_every_watched_counter():
    doc = {
        "checks": [
            {"check": "gpu.xid", "verdict": "warn", "value": {"13": 2, "31": 1}},
            {"check": "gpu.ecc_volatile", "verdict": "pass", "value": {"0": 0, "1": 3}},
            {
                "check": "gpu.row_remap",
                "verdict": "pass",
                "value": {"0": {"pending": False, "failure": False, "uncorrectable": 1}},
            },
            {
                "check": "ib.errors",
                "verdict": "warn",
                "value": {"mlx5_0/1": {"symbol_error": 7}, "mlx5_1/1": {}},
            },
            {"check": "gpu.throttle", "verdict": "fail", "value": {"0": ["hw_thermal_slowdown"]}},
        ]
    }
    c = health_counters(doc)
    assert c["gpu.xid"] == 3
    assert c["gpu.ecc_uncorrected[1]"] == 3 and c["gpu.ecc_uncorrected[0]"] == 0
    assert c["gpu.row_remap[0]"] == 1 and c["gpu.row_remap_failure[0]"] == 0
    # the check lists only counters that are not zero: a port it read has 0 where it lists none
    assert c["ib.symbol_error[mlx5_0/1]"] == 7 and c["ib.symbol_error[mlx5_1/1]"] == 0
    assert c["ib.link_downed[mlx5_0/1]"] == 0
    assert health_counters({"checks": [{"check": "gpu.xid", "verdict": "warn", "value": None}]}) == {}
    assert health_counters({}) == {}
    assert throttled_windows(doc, {"gpu-burn/burn_throttled_windows:0": 2.0}) == 3
    assert throttled_windows(None, {}) == 0


def test_campaign_report_md_and_html(campaign, tmp_path):
    t = datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)
    state = CampaignState.new(campaign, ["h1", "h2"], t)
    st = campaign.spec.stage("sanity")
    state.start_stage("sanity", ["h1", "h2"], 1, t)
    ok = sanity_outcome("h1", st, {"outcome": "ok"}, [])
    sick = sanity_outcome(
        "h2",
        st,
        {"outcome": "unhealthy"},
        [{"check": "gpu.count", "verdict": "fail", "evidence": "7 GPU(s) <b>"}],
    )
    state.apply(gate_stage(st, ["h1", "h2"], {"h1": ok, "h2": sick}), t)
    from sb_fleet.campaign.acceptance_record import campaign_summary

    summary = campaign_summary(state, campaign, "2026-11-29T08:05:00+00:00")
    md = campaign_markdown(summary, {})
    assert "| h2 | **rejected** | sanity | sanity | gpu.count: 7 GPU(s) <b> |" in md
    assert "not finished" in md
    page = campaign_html(
        summary,
        {
            "soak": {
                "nodes": {
                    "h1": {
                        "passed": False,
                        "rounds": 3,
                        "failed_rounds": [2],
                        "findings": [{"fails": True, "message": "failed 1 of 3 rounds"}],
                    }
                }
            }
        },
        t.timestamp() + 300,
    )
    assert "<svg" in page and "7 GPU(s) &lt;b&gt;" in page and "7 GPU(s) <b>" not in page  # escaped
    assert "failed 1 of 3 rounds" in page and "<script" not in page
    paths = write_campaign_report(tmp_path, state, campaign, "2026-11-29T08:05:00+00:00")
    assert [p.name for p in paths] == ["campaign.md", "campaign.html", "campaign-nodes"]
    assert all(p.exists() for p in paths) and sorted(p.name for p in paths[2].iterdir()) == [
        f"{h}.html" for h in sorted(state.hosts)
    ]  # a page per node


def test_the_soak_is_plotted_per_round():
    from sb_fleet.report.campaign_report import _series

    node = {
        "index": [1, 2, 3],
        "ok": [True, True, True],
        "metrics": {"noop/step_time": [2.0, None, 4.0], "noop/return_code": [0, 0, 0]},
        "counters": {
            "ib.symbol_error[mlx5_0/1]": [[1, "start", 0], [2, "start", 7], [3, "end", 7]],
            "gpu.xid": [[1, "start", 0], [3, "end", 0]],
        },
    }
    series = _series(node)
    assert series["noop/step_time"] == [(1.0, 2.0), (3.0, 4.0)]
    assert series["ib.symbol_error[mlx5_0/1]"] == [(0.5, 0.0), (1.5, 7.0), (3.0, 7.0)]
    assert "gpu.xid" not in series and "noop/return_code" not in series  # 0 the whole soak: no plot
    summary = {
        "campaign": {"file": "c.yaml", "digest": "0" * 64, "description": ""},
        "started": "2026-11-29T08:00:00+00:00",
        "updated": "2026-11-29T08:05:00+00:00",
        "finished": True,
        "nodes": {},
    }
    doc = {"nodes": {}, "rounds": {"h4": node}}
    page = campaign_html(summary, {"soak": doc}, 0.0)
    assert "h4: per round" in page and "ib.symbol_error[mlx5_0/1]" in page and "<polyline" in page
    assert "0 → 7" in page


def test_a_stage_timeout_is_its_deadline_per_node_and_cuts_each_benchmark(tmp_path):
    text = TEXT.replace(
        "    benchmarks: [gemm-flops]\n    criteria:",
        "    benchmarks: [gemm-flops, mem-bw]\n    timeout: 90s\n    criteria:",
    )
    c = parse_campaign(text, tmp_path / "c.yaml")
    assert c.spec.stage("single").timeout == 90
    config = {**CONFIG, "fleet": {"default_timeout": 60}}
    config["superbench"] = {
        "benchmarks": {**CONFIG["superbench"]["benchmarks"], "gemm-flops": {"timeout": 300}}
    }
    narrowed = stage_config(config, c.spec.stage("single"))
    assert narrowed["fleet"] == {"default_timeout": 60, "run_timeout": 90}  # all of a node's runs together
    assert config["fleet"] == {"default_timeout": 60}  # the config itself untouched
    shorter = stage_config({**config, "fleet": {"run_timeout": 30}}, c.spec.stage("single"))
    assert shorter["fleet"]["run_timeout"] == 30  # the config's own cap is shorter already
    benches = narrowed["superbench"]["benchmarks"]
    assert benches["gemm-flops"]["timeout"] == 90  # its own 300 s cut to the stage's
    assert benches["mem-bw"]["timeout"] == 60  # the fleet's default is shorter already
    assert "timeout" not in benches["nccl-bw"]  # not the stage's
    assert "timeout" not in CONFIG["superbench"]["benchmarks"]["gemm-flops"]  # the config itself untouched
    plain = parse_campaign(TEXT, tmp_path / "c2.yaml")
    assert (
        "timeout"
        not in stage_config(CONFIG, plain.spec.stage("single"))["superbench"]["benchmarks"]["gemm-flops"]
    )


def test_a_soak_round_is_never_failed_by_the_history_gate(campaign, tmp_path):
    """A soak's config keeps its rounds in the history store but turns the history gate's failures into
    warnings (a round every node ran slower in failed healthy nodes there); the other stages keep it."""
    import yaml

    from sb_fleet.config.fleet_config import load_config

    strict = {
        **CONFIG,
        "gates": {"history": {"regression": "fail", "drift": "fail", "offenders": "quarantine"}},
    }
    soak = stage_config(strict, campaign.spec.stage("soak"))
    assert soak["gates"]["history"] == {"regression": "warn", "drift": "warn", "offenders": "warn"}
    assert stage_config(CONFIG, campaign.spec.stage("soak"))["gates"]["history"]["regression"] == "warn"
    assert stage_config(strict, campaign.spec.stage("single"))["gates"] == strict["gates"]
    off = {**CONFIG, "gates": {"history": {"regression": "off"}}}
    assert stage_config(off, campaign.spec.stage("soak"))["gates"]["history"]["regression"] == "off"
    path = tmp_path / "soak.yaml"  # what validate reads: still a valid config
    path.write_text(yaml.safe_dump(soak))
    assert load_config(path).gates.history.regression == "warn"
