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
    config = load_config(cfg)
    steps = [s.timeout for s in run.plan.steps]
    assert sum(steps) == 40 + 60 + 7 * len(steps)  # noop:b: fleet.default_timeout; fleet.step_margin
    # nightly: the checks, hostprep (fleet.prep_timeout, at most deploy's) and the first step in one exec
    d = validate_deadlines(config, run.plan, warm=True)
    exec_s = 30 + 5 + min(config.fleet.prep_timeout, 200) + steps[0]
    assert len(steps) == 1  # both benchmarks in one step: its results come with the exec, read here
    assert [x.seconds for x in d] == [exec_s, 0]
    assert d[0].source == "health.exec_timeout + 5 + fleet.prep_timeout + step01's deadline"
    assert d[-1].label == "collect (the results came with the exec)" and "100 s more" in d[-1].source
    # 3 hosts, 2 at a time: two waves of each deadline, and the margin of every stage
    assert wall_bound(d, 3, 2) == 2 * exec_s + STAGE_MARGIN_S * len(d)
    assert wall_bound(d, 2, 2) == exec_s + STAGE_MARGIN_S * len(d)
    # cold: the same exec says the host lacks the suite, then the suite's transfer, an install
    c = validate_deadlines(config, run.plan, warm=False)
    assert [x.seconds for x in c] == [exec_s, 200 + 35 + steps[0], 0]
    # without the exec's phases watched (Ansible's path), hostprep has fleet.deploy_timeout in it, and
    # collect fetches over SSH
    a = validate_deadlines(config, run.plan, warm=True, phased=False)
    assert [x.seconds for x in a] == [35 + 200 + steps[0], 100]
    assert a[-1].label == "collect" and a[-1].source == "collect.host_timeout"
    assert wall_bound(a, 3, 2) == 2 * (35 + 200 + steps[0] + 100) + STAGE_MARGIN_S * len(a)
    plain = validate_deadlines(config, run.plan, False, warm=True)
    assert (
        plain[0].label == "hostprep and the first step (one exec)"
        and plain[0].seconds == min(config.fleet.prep_timeout, 200) + steps[0]
    )


def test_a_nightly_plan_of_one_60_s_benchmark_is_bounded_under_10_minutes_at_default_settings(
    tmp_path: Path,
) -> None:
    cfg, inv = tmp_path / "config.yaml", tmp_path / "hosts.ini"
    cfg.write_text(
        "version: v0.4\nsuperbench:\n  benchmarks:\n    noop:\n      timeout: 60\n"
        "      modes: [{name: local, proc_num: 1}]\n      parameters: {sleep: 0}\n"
    )
    inv.write_text("[gpu]\nh1 ansible_host=10.0.0.1\nh2 ansible_host=10.0.0.2\nh3 ansible_host=10.0.0.3\n")
    r = CliRunner().invoke(
        main, ["validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp_path / "r"), "--dry-run"]
    )
    assert r.exit_code == 0, r.output
    nightly = [ln for ln in r.output.splitlines() if ln.startswith("validate's wall time, nightly: at most ")]
    cold = [ln for ln in r.output.splitlines() if ln.startswith("validate's wall time, cold: at most ")]
    assert len(nightly) == len(cold) == 1, r.output
    n_s, c_s = (int(x[0].split("at most ")[1].split()[0]) for x in (nightly, cold))
    assert n_s < 600, r.output  # 120 + 5 + 180 + (60 + 60) + 30, and collect reads what came with the exec
    assert c_s > 3600, r.output  # a cold run installs: fleet.deploy_timeout
    assert "collect.host_timeout, 900 s more" in r.output


def test_dry_run_prints_every_deadline_and_the_bound(tmp_path: Path) -> None:
    cfg, inv = _inputs(tmp_path)
    r = CliRunner().invoke(
        main, ["validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp_path / "r"), "--dry-run"]
    )
    assert r.exit_code == 0, r.output
    run = create_run(tmp_path / "again", cfg, inv)
    config = load_config(cfg)
    # the inventory's hosts are local (ansible_connection=local): Ansible's path, where the host watches
    # the exec's phases itself (the same deadlines); the results do not come with the exec
    nightly = validate_deadlines(config, run.plan, warm=True, ships=False)
    cold = validate_deadlines(config, run.plan, warm=False, ships=False)
    want = describe_bound(nightly, cold, 3, 2, phased=False)
    assert want in r.output, r.output
    assert "the host watches its phases itself" in r.output
    assert nightly == validate_deadlines(config, run.plan, warm=True, phased=True, ships=False)
    assert nightly != validate_deadlines(config, run.plan, warm=True, phased=False)
    assert "health.exec_timeout" in r.output and "collect.host_timeout" in r.output
    assert f"validate's wall time, nightly: at most {wall_bound(nightly, 3, 2)} s" in r.output
    assert f"validate's wall time, cold: at most {wall_bound(cold, 3, 2)} s" in r.output
    # --forks changes the waves, and so the bound
    args = ["validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp_path / "r3"), "--dry-run"]
    r = CliRunner().invoke(main, [*args, "--forks", "3"])
    assert f"nightly: at most {wall_bound(nightly, 3, 3)} s" in r.output, r.output


def test_under_launcher_slurm_the_allocation_wait_counts_once(tmp_path: Path) -> None:
    cfg, inv = _inputs(tmp_path)
    cfg.write_text(
        CONFIG.replace("  forks: 2\n", "  forks: 2\n  launcher: slurm\n") + "slurm: {grant_timeout: 45}\n"
    )
    run = create_run(tmp_path / "run", cfg, inv)
    d = validate_deadlines(load_config(cfg), run.plan, phased=False)
    assert (d[0].label, d[0].seconds, d[0].per_host) == ("slurm allocation", 45, False)
    plain = [x for x in d if x.per_host]
    assert wall_bound(d, 3, 2) == 45 + STAGE_MARGIN_S + wall_bound(plain, 3, 2)  # not once per wave
    assert "slurm.grant_timeout, once for the fleet" in describe_bound(d, d, 3, 2, phased=False)


def test_fleet_run_timeout_is_one_deadline_per_host_for_every_step(tmp_path: Path) -> None:
    """A campaign stage's timeout (fleet.run_timeout): no step's deadline outlives it (plus the margin),
    and every step's spec carries it for the host's runner, which keeps the clock across the steps."""
    from sb_fleet.plan.run_plan import Plan
    from sb_fleet.plan.templates import step_spec

    cfg, inv = _inputs(tmp_path)
    cfg.write_text(CONFIG.replace("  step_margin: 7\n", "  step_margin: 7\n  run_timeout: 25\n"))
    run = create_run(tmp_path / "run", cfg, inv)
    assert [s.timeout for s in run.plan.steps] == [25 + 7]  # not 40 + 60 + 7
    assert step_spec("r", run.plan.steps[0])["run_timeout"] == 25
    again = Plan.from_json(run.plan.to_json())  # plan.json, read back by --resume and report
    assert [s.run_timeout for s in again.steps] == [25]
    assert "every host's runs together: at most 25 s (fleet.run_timeout" in run.plan.describe()
    plain = create_run(tmp_path / "run2", *_inputs(tmp_path))
    assert "run_timeout" not in step_spec("r", plain.plan.steps[0])
