"""Power and efficiency in the analysis (docs/energy.md): the pairing of a figure with its efficiency and
power metrics, the power-vs-throughput plot data, the report sections, and GPU power limits below their
default from hostprep's facts (nvidia-smi's CSV query, in its published format)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from sb_fleet.analysis.figures.figures import build_figures
from sb_fleet.analysis.figures.power import energy_names, power_plot
from sb_fleet.analysis.power_limits import load_power_limit_issues, power_limit_issues
from sb_fleet.analysis.superbench.metric_names import Directions, direction_from_name
from sb_fleet.report.writers import figure_plots, figures_html, figures_md


@pytest.mark.parametrize(
    "figure",
    ["fp16_tc_flops", "int8_tc_iops", "fp32_train_throughput", "burn_gflops", "flops", "event_time"],
)
def test_names_agree_with_the_suite(figure):
    sb_energy = pytest.importorskip("sb_bench.core.energy")
    assert energy_names(figure) == sb_energy.energy_names(figure)


def test_directions_by_name():
    assert direction_from_name("gemm-flops/fp16_tc_flops_per_watt:0") == 1
    assert direction_from_name("gemm-flops/fp16_tc_power:0") == -1


def _fleet():
    hosts = ["a", "b", "c", "d"]
    cols, rows = [], []
    for r in range(2):
        cols += [
            f"gemm-flops/fp16_tc_flops:{r}",
            f"gemm-flops/fp16_tc_power:{r}",
            f"gemm-flops/fp16_tc_flops_per_watt:{r}",
        ]
    for h in hosts:
        w = 650.0 if h == "c" else 500.0  # c: the same work for 30% more power
        row = []
        for _ in range(2):
            row += [700e3, w, 700e3 / w]
        rows.append(row)
    return hosts, cols, np.array(rows)


def test_power_plot_pairs_each_gpu_and_finds_the_fleet_line():
    hosts, cols, values = _fleet()
    pp = power_plot(hosts, cols, values, {"gemm-flops/fp16_tc_flops": "GFLOPS"})
    assert pp is not None and pp.metric == "gemm-flops/fp16_tc_flops" and pp.unit == "GFLOPS"
    assert [(p.host, p.power) for p in pp.points] == [("a", 500.0), ("b", 500.0), ("c", 650.0), ("d", 500.0)]
    assert pp.median_per_watt == pytest.approx(1400.0)


def test_report_shows_power_beside_the_figure_and_the_plot():
    hosts, cols, values = _fleet()
    figs = build_figures(hosts, cols, values, Directions())
    (e,) = figs.energy
    assert (e.metric, e.median, e.power, e.per_watt) == ("gemm-flops/fp16_tc_flops", 700e3, 500.0, 1400.0)
    md = figures_md.render(figs)
    assert "### Power and efficiency" in md and "| `gemm-flops/fp16_tc_flops` | 7e+05 |" in md
    assert "least efficient `c`" in md
    page = figures_html.render(figs)
    assert "Power and efficiency" in page and "power vs throughput per host" in page
    svg = figure_plots.power_svg(figs.power_plot)
    assert svg.startswith("<svg") and ">c<" in svg  # the outlier is named on the plot
    assert json.loads(json.dumps(figs.to_json()))["power_plot"]["median_per_watt"] == 1400.0


def test_no_energy_metrics_no_section():
    figs = build_figures(["a"], ["gemm-flops/fp16_tc_flops:0"], np.array([[1.0]]), Directions())
    assert figs.energy == () and figs.power_plot is None
    assert "Power and efficiency" not in figures_md.render(figs)
    assert "energy" not in figs.to_json()


NVSMI_LIMITS = "0, 700.00, 700.00\n1, 450.00, 700.00\n2, [N/A], [N/A]\n3, 699.50, 700.00\n"


def test_power_limits_from_nvidia_smi():
    from sb_bench.host.hostprep import parse_power_limits

    limits = parse_power_limits(NVSMI_LIMITS + "No devices were found\n")
    assert limits[1] == {"index": 1, "enforced_w": 450.0, "default_w": 700.0}
    assert limits[2] == {"index": 2, "enforced_w": None, "default_w": None}
    (issue,) = power_limit_issues({"gpu_power_limits": limits})
    assert issue.category == "PowerLimit" and issue.metric == "gpu_power_limit:1"
    assert "GPU 1 power limit 450 W is below its default 700 W" in issue.detail
    assert math.isclose(issue.deviation, -250 / 700)


@pytest.mark.parametrize(
    "facts", [{}, {"gpu_power_limits": "x"}, {"gpu_power_limits": [1, {"enforced_w": True}]}, []]
)
def test_odd_facts_give_no_power_limit_issue(facts):
    assert power_limit_issues(facts) == []


def test_power_limit_issues_from_the_run_directory(tmp_path):
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "n1.json").write_text(
        json.dumps({"gpu_power_limits": [{"index": 0, "enforced_w": 300, "default_w": 400}]})
    )
    (tmp_path / "facts" / "n2.json").write_text("{not json")
    found = load_power_limit_issues(tmp_path, ["n1", "n2", "n3"])
    assert list(found) == ["n1"]


def test_superbench_rule_and_baseline_judge_efficiency_like_any_metric(tmp_path):
    import yaml

    from sb_fleet.analysis.superbench.rules import apply_rules, load_rules

    rules = tmp_path / "rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {
                "superbench": {
                    "rules": {
                        "gemm_efficiency": {
                            "categories": "Energy",
                            "criteria": "lambda x: x < -0.1",
                            "function": "variance",
                            "metrics": ["gemm-flops/fp16_tc_flops_per_watt:\\d+"],
                        }
                    }
                }
            }
        )
    )
    hosts, cols, values = _fleet()
    base = {c: 1400.0 for c in cols if c.startswith("gemm-flops/fp16_tc_flops_per_watt")}
    out = apply_rules(load_rules(rules), cols, values, base)
    flagged = {hosts[r] for r in out.issues}
    assert flagged == {"c"}  # 700e3 / 650 W is 23% below the baseline's 1400 GFLOPS/W
