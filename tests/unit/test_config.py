"""Config validation: SuperBench configs load; every mistake names file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from sb_fleet.config.fleet_config import load_config
from sb_fleet.errors import ConfigError, InputError

REF = (
    Path(__file__).resolve().parents[2].parent
    / "shared"
    / "reference"
    / "superbench-ndv4-quickscan"
    / "config.yaml"
)
ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


@pytest.mark.skipif(not REF.exists(), reason="shared/reference is not beside the checkout")
def test_superbench_reference_config_loads_with_anchors():
    c = load_config(REF)
    enabled = c.superbench.enabled()
    assert list(enabled)[:2] == ["kernel-launch", "gemm-flops"]
    gpt = enabled["gpt_models"]
    assert gpt.models == ["gpt2-small", "gpt2-large"]
    assert gpt.parameters["batch_size"] == 8 and gpt.parameters["num_warmup"] == 64  # merged from the anchor
    assert enabled["gemm-flops"].modes[0].prefix == "CUDA_VISIBLE_DEVICES={proc_rank}"
    assert len(enabled["ib-loopback"].modes) == 2


@pytest.mark.parametrize("name", ["cpu.yaml", "default.yaml"])
def test_shipped_configs_load(name):
    c = load_config(ROOT / "configs" / name)
    assert c.superbench.enabled()


def test_unknown_key_names_line_and_field(tmp_path):
    p = write(
        tmp_path, "superbench:\n  benchmarks:\n    gemm-flops:\n      timeout: 5\n      paramters: {}\n"
    )
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg and "line 5" in msg and "superbench.benchmarks.gemm-flops.paramters" in msg
    assert "unknown key" in msg


def test_wrong_type_in_merged_anchor_points_at_the_anchor_line(tmp_path):
    text = (
        "superbench:\n  var:\n    m: &m\n      modes:\n        - name: local\n          proc_num: many\n"
        "  benchmarks:\n    kernel-launch:\n      <<: *m\n"
    )
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text))
    assert "line 6" in str(e.value) and "proc_num" in str(e.value)


def test_bad_mode_name_and_typo_in_fleet(tmp_path):
    with pytest.raises(ConfigError, match="modes.0.name"):
        load_config(write(tmp_path, "superbench:\n  benchmarks:\n    x:\n      modes: [{name: slurm}]\n"))
    with pytest.raises(ConfigError, match="fleet.workspce"):
        load_config(write(tmp_path, "fleet:\n  workspce: /x\nsuperbench: {}\n"))


def test_yaml_syntax_error_and_missing_file(tmp_path):
    with pytest.raises(InputError, match="line 3, column 1: not valid YAML"):
        load_config(write(tmp_path, "superbench:\n  benchmarks: [\n"))
    with pytest.raises(InputError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_enable_list_overrides_entry_flags(tmp_path):
    p = write(
        tmp_path, "superbench:\n  enable: [b]\n  benchmarks:\n    a: {enable: true}\n    b: {enable: false}\n"
    )
    assert list(load_config(p).superbench.enabled()) == ["b"]
