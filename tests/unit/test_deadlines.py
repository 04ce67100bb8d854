"""Each stage's deadline per host comes from the config, and validate's wall time is bounded by their sum
(hosts fleet.forks at a time, plus a margin per stage); --dry-run prints both."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sb_fleet.cli.main import main
from sb_fleet.config.fleet_config import load_config
from sb_fleet.plan.deadlines import STAGE_MARGIN_S, describe_bound, validate_deadlines, wall_bound
from sb_fleet.rundir.runinputs import create_run

CONFIG = """\
version: v0.4
fleet:
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  deploy_timeout: 200
  default_timeout: 60
  step_margin: 7
  forks: 2
health:
  exec_timeout: 30
collect:
  host_timeout: 100
superbench:
  benchmarks:
    noop:a:
      timeout: 40
      modes: [{name: local, proc_num: 1}]
      parameters: {sleep: 0}
    noop:b:
      modes: [{name: local, proc_num: 1}]
      parameters: {sleep: 0}
"""

INVENTORY = "[gpu]\nh1\nh2\nh3\n[gpu:vars]\nansible_connection=local\n"


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    cfg, inv = tmp_path / "config.yaml", tmp_path / "hosts.ini"
    cfg.write_text(CONFIG)
    inv.write_text(INVENTORY)
    return cfg, inv


def test_each_stage_has_its_deadline_from_the_config_and_validate_their_bound(tmp_path: Path) -> None:
    cfg, inv = _inputs(tmp_path)
    run = create_run(tmp_path / "run", cfg, inv)
    d = validate_deadlines(load_config(cfg), run.plan)
    steps = sum(s.timeout for s in run.plan.steps)
    assert steps == 40 + 60 + 7 * len(run.plan.steps)  # noop:b: fleet.default_timeout; fleet.step_margin
    assert [(x.label, x.seconds) for x in d][:2] == [("health checks", 30), ("deploy", 200)]
    assert d[-1].label == "collect" and d[-1].seconds == 100
    assert [x.source for x in d][:2] == ["health.exec_timeout", "fleet.deploy_timeout"]
    # 3 hosts, 2 at a time: two waves of each deadline, and the margin of every stage
    assert wall_bound(d, 3, 2) == 2 * (30 + 200 + steps + 100) + STAGE_MARGIN_S * len(d)
    assert wall_bound(d, 2, 2) == 30 + 200 + steps + 100 + STAGE_MARGIN_S * len(d)
    assert "health checks" not in [x.label for x in validate_deadlines(load_config(cfg), run.plan, False)]


def test_dry_run_prints_every_deadline_and_the_bound(tmp_path: Path) -> None:
    cfg, inv = _inputs(tmp_path)
    r = CliRunner().invoke(
        main, ["validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp_path / "r"), "--dry-run"]
    )
    assert r.exit_code == 0, r.output
    run = create_run(tmp_path / "again", cfg, inv)
    want = describe_bound(validate_deadlines(load_config(cfg), run.plan), 3, 2)
    assert want in r.output, r.output
    assert "health.exec_timeout" in r.output and "collect.host_timeout" in r.output
    total = wall_bound(validate_deadlines(load_config(cfg), run.plan), 3, 2)
    assert f"validate's wall time: at most {total} s" in r.output
    # --forks changes the waves, and so the bound
    args = ["validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp_path / "r3"), "--dry-run"]
    r = CliRunner().invoke(main, [*args, "--forks", "3"])
    total = wall_bound(validate_deadlines(load_config(cfg), run.plan), 3, 3)
    assert f"at most {total} s" in r.output, r.output


def test_under_launcher_slurm_the_allocation_wait_counts_once(tmp_path: Path) -> None:
    cfg, inv = _inputs(tmp_path)
    cfg.write_text(
        CONFIG.replace("  forks: 2\n", "  forks: 2\n  launcher: slurm\n") + "slurm: {grant_timeout: 45}\n"
    )
    run = create_run(tmp_path / "run", cfg, inv)
    d = validate_deadlines(load_config(cfg), run.plan)
    assert (d[0].label, d[0].seconds, d[0].per_host) == ("slurm allocation", 45, False)
    plain = [x for x in d if x.per_host]
    assert wall_bound(d, 3, 2) == 45 + STAGE_MARGIN_S + wall_bound(plain, 3, 2)  # not once per wave
    assert "slurm.grant_timeout, once for the fleet" in describe_bound(d, 3, 2)
