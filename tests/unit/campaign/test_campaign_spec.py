"""The campaign file: the shipped files load, and hostile or nonsensical files give one line naming the file,
line, column and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from sb_fleet.config.campaign_spec import (
    CampaignError,
    check_benchmarks,
    load_campaign,
    parse_campaign,
    parse_duration,
)
from sb_fleet.config.fleet_config import load_config
from sb_fleet.errors import InputError

ROOT = Path(__file__).resolve().parents[3]

GOOD = """\
version: 1
stages:
  - name: sanity
    kind: sanity
  - name: single
    kind: single_node
    benchmarks: [gemm-flops]
  - name: fabric
    kind: fabric
    benchmarks: [nccl-bw]
  - name: soak
    kind: soak
    benchmarks: [gemm-flops]
    duration: 10m
    round: 1m
"""


def _err(text: str) -> str:
    with pytest.raises(CampaignError) as ei:
        parse_campaign(text, Path("c.yaml"))
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith("c.yaml: ")
    return msg


@pytest.mark.parametrize(
    ("campaign", "config"),
    [("campaigns/gpu-default.yaml", "configs/default.yaml"), ("campaigns/cpu-test.yaml", "configs/cpu.yaml")],
)
def test_the_shipped_campaigns_load_and_name_benchmarks_their_config_has(campaign, config):
    c = load_campaign(ROOT / campaign)
    assert [s.kind for s in c.spec.stages] == ["sanity", "single_node", "fabric", "soak"]
    check_benchmarks(c, load_config(ROOT / config).superbench.benchmarks, config)
    assert len(c.digest) == 64


def test_the_default_soaks():
    gpu = load_campaign(ROOT / "campaigns/gpu-default.yaml").spec.stages[-1]
    cpu = load_campaign(ROOT / "campaigns/cpu-test.yaml").spec.stages[-1]
    assert (gpu.duration, gpu.round, gpu.rounds) == (72 * 3600, 3600, 72)
    assert (cpu.duration, cpu.round, cpu.rounds) == (600, 60, 10)


def test_a_good_file_and_its_digest_changes_with_a_byte():
    a = parse_campaign(GOOD, Path("c.yaml"))
    b = parse_campaign(GOOD + "# comment\n", Path("c.yaml"))
    assert a.spec == b.spec and a.digest != b.digest


@pytest.mark.parametrize(
    ("text", "value"), [("60s", 60), ("10m", 600), ("72h", 259200), ("1.5h", 5400), ("2d", 172800)]
)
def test_durations(text, value):
    assert parse_duration(text) == value


@pytest.mark.parametrize(
    "bad", ["0s", "0m", "-5m", "10", "m", "10 parsecs", "1e9h", "721h", "nan", "inf h", "", 60, True]
)
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_a_benchmark_the_config_lacks_is_named_at_its_line():
    c = parse_campaign(GOOD, Path("c.yaml"))
    with pytest.raises(CampaignError) as ei:
        check_benchmarks(c, ["gemm-flops"], "configs/x.yaml")
    assert "line 10, column 18, field stages.2.benchmarks.0" in str(ei.value)
    assert "'nccl-bw' is not in the config configs/x.yaml" in str(ei.value)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        # template syntax: a flow mapping as a key, and a template in a value
        ("stages: {{ stages }}\n", "c.yaml: line 1, column"),
        (GOOD.replace("name: single\n", "name: \"{{ lookup('pipe', 'id') }}\"\n"), "line 5, column 11"),
        (
            GOOD.replace(
                "benchmarks: [gemm-flops]\n  - name: fabric", "benchmarks: ['{% if x %}']\n  - name: fabric"
            ),
            "looks like a template",
        ),
        # huge numbers
        (
            GOOD.replace("round: 1m", "round: 1m\n    max_failed_rounds: 123456789012345678901234"),
            "too large for any setting",
        ),
        (
            GOOD.replace("round: 1m", "round: 1m\n    max_failed_rounds: 99999999"),
            "line 16, column 24, field stages.3.max_failed_rounds: Input should be less than or equal to 10000",
        ),
        (GOOD.replace("duration: 10m", "duration: 99999h"), "longer than 30 days"),
        # NaN and infinity
        (GOOD.replace("round: 1m", "round: 1m\n    drift: {k: .nan}"), "is not a finite number"),
        (
            GOOD.replace("round: 1m", "round: 1m\n    drift: {k: 1e400}"),
            "field stages.3.drift.k: Input should be a finite number",
        ),
        (GOOD.replace("round: 1m", "round: .nan"), "c.yaml: line 15: .nan is not a finite number"),
        # deep nesting
        ("stages: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        # wrong types
        ("stages: 5\n", "line 1, column 9, field stages"),
        (GOOD.replace("kind: sanity", "kind: [sanity]"), "line 4, column 11, field stages.0.kind"),
        (
            GOOD.replace("benchmarks: [nccl-bw]", "benchmarks: nccl-bw"),
            "line 10, column 17, field stages.2.benchmarks",
        ),
        (GOOD.replace("round: 1m", "round: 60"), "a bare number could be seconds or minutes"),
        ("- just\n- a list\n", "a YAML mapping with a 'stages' list"),
        ("", "a YAML mapping"),
        ("stages: [\n", "not valid YAML"),
    ],
)
def test_hostile_files_give_one_line_with_the_place(text, expect):
    assert expect in _err(text)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (GOOD.replace("kind: fabric", "kind: pairs"), "line 9, column 11, field stages.2.kind"),
        (
            "stages:\n  - {name: a, kind: single_node, benchmarks: [x]}\n"
            "  - {name: b, kind: soak, benchmarks: [x], duration: 1h, round: 1m}\n"
            "  - {name: c, kind: single_node, benchmarks: [x]}\n",
            "line 4, column 21, field stages.2.kind: a single_node stage cannot come after the soak stage 'b'",
        ),
        (
            "stages:\n  - {name: f, kind: fabric, benchmarks: [nccl-bw]}\n  - {name: s, kind: single_node, benchmarks: [x]}\n",
            "line 2, column 21, field stages.0.kind: a fabric stage needs a single_node stage before it",
        ),
        (
            GOOD.replace("name: fabric", "name: single"),
            "stage name 'single' is used twice (first by stage 2)",
        ),
        (
            GOOD.replace("round: 1m", "round: 20m"),
            "line 15, column 12, field stages.3.round: the round (20m) is longer than the soak's duration (10m)",
        ),
        (GOOD.replace("round: 1m", "round: 5s"), "shorter than 10s"),
        (GOOD.replace("duration: 10m", "duration: 0h"), "must be more than zero"),
        (GOOD.replace("duration: 10m", "duration: -1h"), "field stages.3.duration"),
        (
            GOOD.replace("    duration: 10m\n", ""),
            "line 11, column 5, field stages.3: a soak stage needs a duration",
        ),
        (
            GOOD.replace("kind: sanity", "kind: sanity\n    round: 1m"),
            "'round' is for soak stages, not sanity",
        ),
        (GOOD.replace("round: 1m", "round: 1m\n    on_failure: retry_once"), "a soak is not retried"),
        (
            GOOD.replace("round: 1m", "round: 1m\n    drift: {min_rounds: 20}"),
            "drift needs 20 rounds and the soak has 10",
        ),
        (GOOD.replace("round: 1m", "round: 1m\n    watch: [gpu.xids]"), "unknown counter 'gpu.xids'"),
        (
            GOOD.replace("round: 1m", "round: 1m\n    dration: 1h"),
            "line 16, column 5, field stages.3.dration: unknown key 'dration'",
        ),
        (GOOD.replace("benchmarks: [nccl-bw]", "benchmarks: []"), "a fabric stage needs benchmarks"),
        (
            GOOD.replace("benchmarks: [nccl-bw]", "benchmarks: [nccl-bw, nccl-bw]"),
            "a benchmark is named twice",
        ),
        (
            GOOD.replace(
                "kind: sanity", "kind: sanity\n    criteria: {limits: {gemm-flops/fp16_tc_flops: {}}}"
            ),
            "a limit needs min, max or both",
        ),
        (
            GOOD.replace("kind: sanity", "kind: sanity\n    criteria: {limits: {x: {min: 5, max: 1}}}"),
            "min 5 is above max 1",
        ),
        (GOOD.replace("kind: sanity", "kind: sanity\n    kind: soak"), "'kind' is given twice"),
        ("version: 2\n" + GOOD.split("\n", 1)[1], "field version"),
        ("stages: []\n", "field stages"),
    ],
)
def test_nonsense_is_refused_with_what_is_wrong(text, expect):
    assert expect in _err(text)


def test_an_alias_bomb_is_refused():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    assert "alias bomb" in _err("\n".join(lines) + "\nstages: *a8\n")


def test_errors_are_the_projects_input_errors_and_a_missing_file_is_one_too(tmp_path):
    with pytest.raises(InputError, match="campaign file file not found|not found"):
        load_campaign(tmp_path / "nope.yaml")
    assert issubclass(CampaignError, InputError)
