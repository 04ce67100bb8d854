"""The command line. Parses arguments and calls one function per command; nothing else.

Exit codes: see :mod:`sb_fleet.exits` (the policy) and :mod:`sb_fleet.cli.guard`
(the one place exceptions become exit codes).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from sb_fleet import __version__
from sb_fleet.cli.guard import guarded
from sb_fleet.cli.prometheus_options import prom_outputs, prometheus_options
from sb_fleet.errors import UsageError
from sb_fleet.rundir import runlog

PathArg = click.Path(path_type=Path)


def _common(f: Callable) -> Callable:
    opts = [
        click.option(
            "-i",
            "--inventory",
            type=PathArg,
            help="Ansible inventory (INI or YAML), or slurm:partition=P,state=S,nodes=HOSTLIST. Default: this machine.",
        ),
        click.option(
            "-c", "--config", type=PathArg, help="benchmark config (SuperBench format + fleet/gates)."
        ),
        click.option("--run-dir", type=PathArg, help="run directory (default: a new runs/<run-id>/)."),
        click.option(
            "--limit",
            help="only these hosts or groups (comma-separated, globs and Slurm hostlists like gpu[001-004]).",
        ),
        click.option(
            "--forks", type=click.IntRange(1, 5000), help="hosts handled at once (default: fleet.forks)."
        ),
        click.option(
            "--accept-new-host-keys",
            is_flag=True,
            help="record the host key of hosts never seen before (changed keys are still refused).",
        ),
        click.option(
            "--insecure-no-host-key-checking",
            is_flag=True,
            hidden=False,
            help="DANGEROUS: do not verify host keys at all (logged loudly).",
        ),
        click.option("--quiet", is_flag=True, help="no progress display."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _options(kw: dict[str, Any]):  # noqa: ANN202 - sb_fleet.fleet.workflow.Options, imported late (startup time)
    from sb_fleet.fleet.workflow import Options

    return Options(
        config=kw.get("config"),
        inventory=kw.get("inventory"),
        run_dir=kw.get("run_dir"),
        dry_run=bool(kw.get("dry_run")),
        accept_new_host_keys=bool(kw.get("accept_new_host_keys")),
        insecure_no_host_key_checking=bool(kw.get("insecure_no_host_key_checking")),
        limit=kw.get("limit"),
        forks=kw.get("forks"),
        resume=bool(kw.get("resume")),
        history=kw.get("history"),
        confirm=bool(kw.get("confirm")),
        auto_confirm=not kw.get("no_confirm"),
        second_pass=not kw.get("no_second_pass"),
        rules=kw.get("rules"),
        baseline=kw.get("baseline"),
        progress=not kw.get("quiet"),
        run_unhealthy=bool(kw.get("run_unhealthy")),
        include_drained=bool(kw.get("include_drained")),
        skip_health=bool(kw.get("no_health")),
        prometheus=prom_outputs(kw),
        argv=("sb-fleet", *sys.argv[1:]),
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sb-fleet")
@click.option("-v", "--verbose", count=True, help="more logging (-vv: debug).")
def main(verbose: int) -> None:
    """Validate GPU clusters: deploy a benchmark suite, run it on every host, collect, and report."""
    os.umask(0o077)  # everything sb-fleet creates (run directory, results, artifacts) is private by default
    # sb-fleet's own records on the console; the libraries' (paramiko, ansible-runner ...) in the run
    # directory's logs/libraries.log (sb_fleet.rundir.runlog)
    runlog.install(logging.WARNING - 10 * min(verbose, 2))


def _stage(kw: dict[str, Any], name: str) -> int:
    """One stage (deploy, run or collect) on a new or existing run directory."""
    from sb_fleet.fleet import workflow as wf

    opts = _options(kw)
    if opts.dry_run:
        run = wf.inputs_for(opts)
        click.echo(wf.dry_run(run, run.select(opts.limit)))
        return 0
    code, run = wf.stage(opts, name)
    click.echo(f"run directory: {run.rd.path}")
    return code


@main.command()
@_common
@click.option(
    "--dry-run", is_flag=True, help="print the plan and write the rendered playbooks; touch no host."
)
@guarded
def deploy(**kw: Any) -> int:
    """Push the suite to every host, build its environment, record system facts."""
    return _stage(kw, "deploy")


@main.command()
@_common
@click.option(
    "--dry-run", is_flag=True, help="print the plan and write the rendered playbooks; touch no host."
)
@click.option("--resume", is_flag=True, help="in an existing run directory, run only what has not finished.")
@guarded
def run(**kw: Any) -> int:
    """Launch the configured benchmarks on every host in parallel."""
    return _stage(kw, "run")


@main.command()
@_common
@guarded
def collect(**kw: Any) -> int:
    """Fetch every host's results over SSH (only what is missing) and write results-summary.jsonl."""
    if not kw.get("run_dir"):
        raise UsageError("collect needs --run-dir (the directory of the run to collect)")
    return _stage(kw, "collect")


@main.command()
@_common
@click.option("--dry-run", is_flag=True, help="print the rendered check playbook's path; touch no host.")
@click.option("--json", "as_json", is_flag=True, help="print health.json instead of the table.")
@guarded
def check(**kw: Any) -> int:
    """Health checks on every host (GPUs, InfiniBand, the host, versions, fleet drift); exit 1 when a
    host is unhealthy. See docs/health-checks.md."""
    from sb_fleet.cli.check_command import health_summary
    from sb_fleet.fleet import workflow as wf

    opts = _options(kw)
    if opts.dry_run:
        run = wf.inputs_for(opts)
        click.echo(f"{run.rendered.check}\nthis command would act on: {', '.join(run.select(opts.limit))}")
        return 0
    code, run = wf.health_check(opts)
    click.echo(health_summary(run.rd.path, kw["as_json"]))
    click.echo(f"run directory: {run.rd.path}")
    return code


@main.command()
@_common
@click.option(
    "--dry-run", is_flag=True, help="print the plan and write the rendered playbooks; touch no host."
)
@click.option(
    "--history",
    type=PathArg,
    help="history store (DuckDB file): record the run and judge every host against its own past too "
    "(default: fleet.history of the config).",
)
@click.option(
    "--confirm",
    is_flag=True,
    help="before the verdict, run every failing host's flagged benchmarks again (with a few passing control "
    "hosts); a finding that does not reproduce makes the host 'flaky', not failed. By default only the "
    "hosts failed on fleet statistics alone are re-run, at most max(2, 5%) of the hosts (gates.confirm).",
)
@click.option(
    "--no-confirm",
    is_flag=True,
    help="no confirmation run: a host failed on fleet statistics alone (fleet, sibling, majority checks) "
    "fails at once instead of being re-run first.",
)
@click.option(
    "--rules", type=PathArg, help="SuperBench rules file (YAML) to judge the run with, as report's."
)
@click.option("--baseline", type=PathArg, help="SuperBench baseline (JSON: metric -> value), as report's.")
@click.option(
    "--no-second-pass",
    is_flag=True,
    help="pattern runs: skip the follow-ups (re-pairing each suspect with known-good hosts, bisecting a "
    "failed all-nodes run); the culprits are then judged on their confidence alone.",
)
@click.option(
    "--drain",
    is_flag=True,
    help="Slurm: after the report, drain the failing hosts and resume those sb-fleet drained that now "
    "pass (as sb-fleet drain RUN --resume); nodes drained for another reason are left alone.",
)
@click.option(
    "--run-unhealthy",
    is_flag=True,
    help="benchmark the hosts that failed the health checks too (they still end 'unhealthy').",
)
@click.option("--no-health", is_flag=True, help="skip the health checks (as health.enabled: false).")
@click.option(
    "--include-drained",
    is_flag=True,
    help="SSH launcher with a Slurm inventory: benchmark the nodes drained, down or failed for another reason "
    "than sb-fleet's too (by default they are out of service: not tested, not counted by the gate).",
)
@prometheus_options
@guarded
def validate(**kw: Any) -> int:
    """health checks, deploy, run, collect and report in one command."""
    from sb_fleet.fleet import workflow as wf

    if kw.get("confirm") and kw.get("no_confirm"):
        raise UsageError("--confirm and --no-confirm contradict each other: give one")
    opts = _options(kw)
    if opts.dry_run:
        run = wf.inputs_for(opts)
        click.echo(wf.dry_run(run, run.select(opts.limit), validate=True, opts=opts))
        return 0
    code, run = wf.validate(opts)
    report = run.rd.path / "report.md"
    click.echo(report.read_text() if report.exists() else "")
    click.echo(f"report: {report} (also report.json, report.html, junit.xml)")
    said = _headline_of(run.rd.path / "report.json")
    if said:  # the last lines say what failed the gate, whatever the report above holds
        click.echo(said)
    click.echo(f"run directory: {run.rd.path}")
    if kw.get("drain") and (run.rd.path / "report.json").exists():
        from sb_fleet.fleet.slurm_drain import drain_run

        drained, text = drain_run(run.rd.path, resume=True, dry_run=False)
        click.echo(text)
        code = max(code, drained)
    return code


def _headline_of(path: Path) -> str:
    """report.json's headline (what failed the gate, the warnings beside it), or "" when it has none."""
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return ""
    head = doc.get("headline") if isinstance(doc, dict) else None
    return str(head.get("text") or "") if isinstance(head, dict) else ""


@main.command()
@_common
@click.option("--images", is_flag=True, help="also remove the benchmark image (fleet.container.image).")
@click.option(
    "--workspaces", is_flag=True, help="also delete each host's workspace (suite, venv link, results)."
)
@click.option(
    "--cache",
    is_flag=True,
    help="also delete the venvs hosts share in fleet.cache, each under its lock (one in use by a deploy "
    "is left, and named).",
)
@click.option("--dry-run", is_flag=True, help="print the cleanup playbook; touch no host.")
@guarded
def cleanup(**kw: Any) -> int:
    """Remove sb-fleet's containers from every host; on request the image, the workspaces, the shared cache."""
    from sb_fleet.fleet.workflow import cleanup as do_cleanup

    code, text = do_cleanup(_options(kw), kw["images"], kw["workspaces"], kw["cache"])
    click.echo(text)
    return code


@main.group()
def bench() -> None:
    """The on-host benchmark suite."""


@bench.command("list")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output.")
@guarded
def bench_list(as_json: bool) -> int:
    """List every benchmark with its parameters and metrics (units, higher or lower is better)."""
    from sb_fleet.cli.benchlist import list_benchmarks

    click.echo(list_benchmarks(as_json))
    return 0


def _register_commands() -> None:
    from sb_fleet.cli.accept_command import accept_cmd
    from sb_fleet.cli.compare_command import compare_cmd
    from sb_fleet.cli.drain_command import drain_cmd
    from sb_fleet.cli.history_command import history_cmd
    from sb_fleet.cli.report_command import baseline_cmd, report_cmd
    from sb_fleet.cli.summary_command import summary_cmd

    main.add_command(report_cmd)
    main.add_command(baseline_cmd)
    main.add_command(history_cmd)
    main.add_command(summary_cmd)
    main.add_command(compare_cmd)
    main.add_command(drain_cmd)
    main.add_command(accept_cmd)


_register_commands()

__all__ = ["main"]
