"""A node out of service (Slurm: drained, down, in maintenance, reserved; or drained by sb-fleet and not
re-tested) is not a failing host: its verdict is ``out_of_service`` in every output, with Slurm's state and
reason or sb-fleet's first reason word for word, the gate does not count it unless
``gates.count_out_of_service``, and ``drain`` never touches it (issue 56)."""

from __future__ import annotations

import json
from pathlib import Path

from sb_fleet.analysis.verdict import OUT_OF_SERVICE, judge
from sb_fleet.config.gatespec import Gates
from sb_fleet.fleet.slurm_drain import drain_reason
from sb_fleet.fleet.slurm_launch import out_of_service_reason, reserved, unavailable
from sb_fleet.report.analyse import report, write_reports
from sb_fleet.report.headline import headline

GF = "gemm-flops/fp32_flops"
ADMIN = "slurm: node is drained (admin maintenance): out of service, not tested"


def _run(tmp: Path, away: dict[str, str]) -> Path:
    """Four nodes; those in ``away`` out of service (no results, that outcome in every stage)."""
    run = tmp / "run"
    run.mkdir(exist_ok=True)
    names = ["node1", "node2", "node3", "node4"]
    (run / "manifest.json").write_text('{"schema_version": 1}')
    (run / "hosts.json").write_text(json.dumps({"hosts": [{"name": h, "groups": ["gpu"]} for h in names]}))
    rows = [{"node": h, GF: 100.0 + i} for i, h in enumerate(names) if h not in away]
    (run / "results-summary.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    hosts = {
        h: {"outcome": "out-of-service", "reason": away[h], "stages": {}}
        if h in away
        else {"outcome": "ok", "reason": "", "stages": {}}
        for h in names
    }
    (run / "outcomes.json").write_text(json.dumps({"schema_version": 1, "hosts": hosts}))
    return run


def test_an_admin_drained_node_is_out_of_service_not_missing_and_the_gate_passes(tmp_path):
    r = report(_run(tmp_path, {"node4": ADMIN}))
    by = {h.name: h for h in r.hosts}
    assert by["node4"].verdict == OUT_OF_SERVICE and by["node4"].reason == ADMIN and not by["node4"].issues
    assert r.gate.passed, r.gate.policy
    assert r.counts()[OUT_OF_SERVICE] == 1 and r.counts()["missing"] == 0
    assert r.quarantine() == []  # drain never touches it
    note = [n for n in headline(r).notes if "out of service" in n]
    assert note == [f"1 host(s) out of service, not tested: node4 ({ADMIN})"], headline(r).notes
    out = tmp_path / "out"
    write_reports(r, out)
    doc = json.loads((out / "report.json").read_text())
    assert doc["summary"][OUT_OF_SERVICE] == 1
    assert next(h for h in doc["hosts"] if h["name"] == "node4")["verdict"] == OUT_OF_SERVICE
    junit = (out / "junit.xml").read_text()
    assert "<skipped message=" in junit and "admin maintenance" in junit and "<failure" not in junit
    assert "out_of_service" in (out / "report.md").read_text()
    prom = [ln for ln in (out / "metrics.prom").read_text().splitlines() if 'host="node4"' in ln]
    assert any('verdict="out_of_service"' in ln and float(ln.rsplit(" ", 1)[1]) == 1 for ln in prom), prom
    assert (out / "quarantine.txt").read_text().strip() == ""


def test_counted_only_when_asked_and_even_then_never_drained(tmp_path):
    gates = Gates.model_validate({"count_out_of_service": True})
    assert gates.policy.count == ["fail", "incomplete", "missing", "out_of_service"]
    assert "count_out_of_service" not in gates.model_dump()  # report.json shows it as policy.count
    r = report(_run(tmp_path, {"node4": ADMIN}), gates=gates)
    assert not r.gate.passed
    assert r.quarantine() == []  # the gate counts it; its state and reason are still not sb-fleet's to change
    assert any("counted by the gate: gates.count_out_of_service" in n for n in headline(r).notes)


def test_a_node_sb_fleet_drained_keeps_its_first_reason_word_for_word():
    first = drain_reason("runB-20261205", "Health unhealthy: health checks: no end within 125 s")
    why = out_of_service_reason("drained", first, in_reservation=False)
    assert why == (
        "drained by sb-fleet since runB-20261205: Health unhealthy: health checks: no end within 125 s "
        "(slurm.reservation lets sb-fleet re-test it)"
    )
    # three nights later the same node, not re-tested: its reason is unchanged (drain never rewrote it)
    assert out_of_service_reason("drained", first, in_reservation=False) == why
    assert out_of_service_reason("down", "Not responding", False) == (
        "slurm: node is down (Not responding): out of service, not tested"
    )
    assert out_of_service_reason("maint", "", False) == "slurm: node is maint: out of service, not tested"
    assert unavailable("drained") and unavailable("down") and not unavailable("idle")
    assert reserved("reserved") and reserved("maint") and not reserved("idle")


def test_judge_keeps_the_reason_and_names_no_finding():
    h = judge("n", False, [], "out-of-service", ADMIN)
    assert (
        h.verdict == OUT_OF_SERVICE and h.reason == ADMIN and h.issues == () and h.outcome == "out-of-service"
    )


def test_the_ssh_launchers_out_of_service_nodes_are_the_foreign_drained_ones():
    from sb_fleet.fleet.slurm_launch import foreign_out_of_service

    nodes = [
        {"name": "n1", "state": "idle", "reason": ""},
        {"name": "n2", "state": "drained", "reason": "admin maintenance"},
        {"name": "n3", "state": "drained", "reason": "sb-fleet r1-x: Health unhealthy"},  # ours: re-tested
        {"name": "n4", "state": "down", "reason": "Not responding"},
        {"name": "n5", "state": "maint", "reason": ""},  # in the nightly's reservation: tested
        {"name": "n6", "state": "draining", "reason": "sb-fleet health: gpu.count"},  # its own check: ours
    ]
    got = foreign_out_of_service(nodes)
    assert sorted(got) == ["n2", "n4"]
    assert got["n2"] == (
        "slurm: node is drained (admin maintenance): out of service, not tested (--include-drained tests it)"
    )
    assert out_of_service_reason("drained", "sb-fleet health: gpu.count: 0 of 8", False).startswith(
        "drained by sb-fleet by its health check: gpu.count: 0 of 8"
    )


def test_a_slurm_inventory_that_asked_for_drained_nodes_tests_them(tmp_path):
    """-i slurm:partition=gpu: the admin's drained node is out of service; -i slurm:state=drained asked for
    the drained nodes by their state: they are tested."""
    from types import SimpleNamespace

    from sb_fleet.fleet.workflow import slurm_out_of_service

    inv = tmp_path / "inventory"
    inv.mkdir()
    nodes = [{"name": "n1", "state": "idle", "reason": ""}, {"name": "n2", "state": "drained", "reason": "x"}]
    run = SimpleNamespace(rd=SimpleNamespace(path=tmp_path))
    assert slurm_out_of_service(run) == {}  # no Slurm inventory
    q = inv / "slurm-query.json"
    q.write_text(json.dumps({"argv": ["sinfo", "-h", "-N", "-o", "F", "-p", "gpu"], "nodes": nodes}))
    assert list(slurm_out_of_service(run)) == ["n2"]
    q.write_text(json.dumps({"argv": ["sinfo", "-h", "-N", "-o", "F", "-t", "drained"], "nodes": nodes}))
    assert slurm_out_of_service(run) == {}
    q.write_text('{"argv": [1, "-t"], "nodes": "garbage"}')  # a damaged record: nothing left out, no crash
    assert slurm_out_of_service(run) == {}
