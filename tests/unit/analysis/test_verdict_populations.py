"""Issue 22: populations (facts and numbers), SKU references, and every flagged host saying why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from sb_fleet.analysis.populations import by_facts, find_splits
from sb_fleet.config.gatespec import Gates
from sb_fleet.report.analyse import report, write_reports
from tests.synth.fleet import generate


def write_run(tmp: Path, lines: list[str], facts: dict[str, dict] | None = None) -> Path:
    run = tmp / "run"
    run.mkdir(parents=True, exist_ok=True)
    (run / "manifest.json").write_text('{"schema_version": 1}')
    (run / "results-summary.jsonl").write_text("\n".join(lines) + "\n")
    names = [json.loads(x)["node"] for x in lines]
    (run / "hosts.json").write_text(json.dumps({"schema_version": 1, "hosts": [{"name": h} for h in names]}))
    if facts:
        (run / "facts").mkdir(exist_ok=True)
        for h, f in facts.items():
            (run / "facts" / f"{h}.json").write_text(json.dumps(f))
    return run


def shifted(seed: int, share: float, factor: float, n: int = 200) -> tuple[list[str], set[str]]:
    fleet = generate(n, seed=seed, fault_fraction=0.0)
    rng = np.random.default_rng(seed)
    rows = [json.loads(x) for x in fleet.lines]
    moved = set()
    for r in rows:
        if rng.random() < share:
            moved.add(r["node"])
            for k in list(r):
                if k.startswith(("gemm-flops/", "nccl-bw/")) and not k.endswith("return_code"):
                    r[k] = r[k] / factor if "_time" in k else r[k] * factor
    return [json.dumps(r) for r in rows], moved


def test_a_fleet_split_in_two_populations_is_never_a_silent_pass(tmp_path: Path) -> None:
    for seed, share, factor in ((31, 0.7, 0.6), (32, 0.3, 1.6)):  # the issue's two cases
        lines, moved = shifted(seed, share, factor)
        r = report(write_run(tmp_path / str(seed), lines))
        assert not r.gate.passed
        assert r.populations, "no split found"
        sp = r.populations[0]
        assert {frozenset(sp.groups[0]), frozenset(sp.groups[1])} == {
            frozenset(moved),
            frozenset(h.name for h in r.hosts) - frozenset(moved),
        }
        assert sp.apart > 0.3 and any(f.startswith("gemm-flops/") for f in sp.families)
        md = (Path(write_reports(r, tmp_path / f"o{seed}")[0]).parent / "report.md").read_text()
        assert "## Populations (1 split(s): 1 fail the gate)" in md
        assert "- **Failed by: 1 unexpected population split(s)" in md


def test_an_expected_mix_is_reported_and_each_population_judged_within_itself(tmp_path: Path) -> None:
    lines, moved = shifted(33, 0.3, 1.6)
    rows = [json.loads(x) for x in lines]
    sick = next(r for r in rows if r["node"] in moved)  # a fault inside the faster population
    sick["nccl-bw/allreduce_8589934592_busbw:0"] *= 0.8
    sick["nccl-bw/allreduce_8589934592_algbw:0"] *= 0.8
    gates = Gates.model_validate({"populations": {"expected_mix": True}})
    r = report(write_run(tmp_path, [json.dumps(x) for x in rows]), gates=gates)
    assert r.populations
    bad = {h.name for h in r.hosts if h.verdict != "pass"}
    assert bad == {sick["node"]}  # pooled, the whole faster population would hide it
    assert r.gate.passed is False  # the sick host still counts under the default policy


def test_benign_batches_one_or_two_percent_apart_are_not_populations() -> None:
    for seed, shift in ((41, 0.01), (42, 0.02), (43, 0.015)):
        fleet = generate(200, seed=seed, fault_fraction=0.0, benign_shift=shift, benign_fraction=0.4)
        cols_rows = [json.loads(x) for x in fleet.lines]
        cols = sorted({k for r in cols_rows for k in r if k != "node"})
        vals = np.array([[r.get(c, np.nan) for c in cols] for r in cols_rows], dtype=float)
        hosts = [r["node"] for r in cols_rows]
        splits, parts = find_splits(cols, vals, hosts, np.arange(len(hosts)))
        assert splits == [] and len(parts) == 1


def test_hosts_are_grouped_by_model_driver_and_firmware() -> None:
    traits = [
        (("gpu_model", "H100"), ("driver_version", "535")),
        (("gpu_model", "H100"), ("driver_version", "550")),
        (("gpu_model", "H100"), ("driver_version", "535")),
        (),
    ]
    groups = by_facts(traits)
    assert {k: v.tolist() for k, v in groups.items()} == {"535": [0, 2], "550": [1], "unknown": [3]}
    assert list(by_facts([(("gpu_model", "H100"),)] * 3)) == [""]  # one population
    inv = by_facts([()] * 3, groups=[("rack1",), ("rack2",), ("rack1",)])
    assert {k: v.tolist() for k, v in inv.items()} == {"rack1": [0, 2], "rack2": [1]}


def test_driver_populations_are_judged_apart(tmp_path: Path) -> None:
    rows, facts = [], {}
    for i in range(24):
        driver = "535" if i % 2 else "550"
        base = 700000.0 if driver == "535" else 750000.0  # a 7% driver difference: known, not a fault
        rows.append(
            {
                "node": f"h{i:02d}",
                **{f"gemm-flops/fp16_tc_flops:{g}": base * (1 + 0.001 * ((i + g) % 3)) for g in range(8)},
            }
        )
        facts[f"h{i:02d}"] = {"gpu_model": "NVIDIA H100 80GB HBM3", "driver_version": driver}
    r = report(write_run(tmp_path, [json.dumps(x) for x in rows], facts))
    assert r.gate.passed and not r.populations
    assert {f.partition for f in r.families} == {"535", "550"}
    assert any("populations from the facts" in w for w in r.warnings)


def test_a_whole_fleet_far_below_its_sku_reference_is_a_finding(tmp_path: Path) -> None:
    rng = np.random.default_rng(51)
    rows, facts = [], {}
    for i in range(12):
        rows.append(
            {
                "node": f"h{i:02d}",
                **{f"gemm-flops/fp16_tc_flops:{g}": 180000.0 * (1 + rng.normal(0, 0.004)) for g in range(8)},
            }
        )
        facts[f"h{i:02d}"] = {"gpu_model": "NVIDIA A100-SXM4-40GB"}
    r = report(write_run(tmp_path, [json.dumps(x) for x in rows], facts))
    assert all(h.verdict == "fail" for h in r.hosts)  # 36% below the NDv4 figure: every host
    i = r.hosts[0].issues[0]
    assert i.check == "sku" and i.basis == "SKU reference" and "NDv4" in i.detail
    assert i.reference == 280435.1458 and i.deviation < -0.3
    for row in rows:  # at the reference: nothing
        for k in list(row):
            if k != "node":
                row[k] = 280000.0 * (1 + rng.normal(0, 0.004))
    ok = report(write_run(tmp_path / "ok", [json.dumps(x) for x in rows], facts))
    assert ok.gate.passed


def test_every_flagged_host_says_why(tmp_path: Path) -> None:
    fleet = generate(60, seed=61, fault_fraction=0.1)
    r = report(write_run(tmp_path, fleet.lines))
    failed = [h for h in r.hosts if h.verdict == "fail"]
    assert failed
    for h in failed:
        i = h.issues[0]
        assert i.metric and i.basis and i.deviation is not None and i.sigmas is not None and i.sigmas > 0
        j = i.to_json()
        assert j["basis"] == i.basis and j["noise_sigmas"] is not None
    out = tmp_path / "o"
    write_reports(r, out)
    md = (out / "report.md").read_text()
    assert (
        "| Host | Verdict | Categories | Metric | Value | Against | Reference | Deviation | Noise σ |" in md
    )
    row = next(line for line in md.splitlines() if line.startswith(f"| {failed[0].name} |"))
    assert failed[0].issues[0].basis in row
    html = (out / "report.html").read_text()
    assert "<th>Against</th>" in html and "noise_sigmas" in html
