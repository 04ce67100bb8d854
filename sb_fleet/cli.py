"""The command line. Parses arguments and calls one function per command; nothing else.

Exit codes: 0 every host passed; 1 some host failed (or the report's gate
failed); 2 bad usage, config, inventory, rules or results file; 3
infrastructure trouble (hosts unreachable, host keys refused, disk full).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from sb_fleet import __version__
from sb_fleet.errors import EXIT_INFRA, EXIT_USAGE, SbFleetError

PathArg = click.Path(path_type=Path)


def _common(f: Callable) -> Callable:
    opts = [
        click.option(
            "-i", "--inventory", type=PathArg, help="Ansible inventory (INI or YAML). Default: this machine."
        ),
        click.option(
            "-c", "--config", type=PathArg, help="benchmark config (SuperBench format + fleet/gates)."
        ),
        click.option("--run-dir", type=PathArg, help="run directory (default: a new runs/<run-id>/)."),
        click.option("--limit", help="only these hosts or groups (comma-separated, globs allowed)."),
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


def _options(kw: dict[str, Any], **extra: Any):  # noqa: ANN202
    from sb_fleet.workflow import Options

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
        progress=not kw.get("quiet"),
        argv=["sb-fleet", *sys.argv[1:]],
        **extra,
    )


def _guard(f: Callable[..., int]) -> Callable[..., None]:
    """Map sb-fleet's exceptions to one line on stderr and the documented exit code."""

    @wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            code = f(*args, **kwargs)
        except SbFleetError as exc:
            click.echo(f"sb-fleet: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("sb-fleet: interrupted", err=True)
            sys.exit(130)
        sys.exit(code or 0)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sb-fleet")
@click.option("-v", "--verbose", count=True, help="more logging (-vv: debug).")
def main(verbose: int) -> None:
    """Validate GPU clusters: deploy a benchmark suite, run it on every host, collect, and report."""
    os.umask(0o077)  # everything sb-fleet creates (run directory, results, artifacts) is private by default
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def _print_rundir(s: Any) -> None:
    click.echo(f"run directory: {s.rd.path}")


def _stage(kw: dict[str, Any], stage: str, create: bool = True) -> int:
    """One stage (deploy, run or collect) on a new or existing run directory."""
    from sb_fleet import workflow as wf

    s = wf.open_session(_options(kw), create=create)
    if kw.get("dry_run"):
        click.echo(wf.dry_run(s))
        return 0
    start = wf.utcnow()
    getattr(wf, stage)(s)
    code = wf.exit_code(wf.outcome_table(s.rd, list(s.plan.hosts)))
    wf.finish(s, start, code)
    _print_rundir(s)
    return code


@main.command()
@_common
@click.option(
    "--dry-run", is_flag=True, help="print the plan and write the rendered playbooks; touch no host."
)
@_guard
def deploy(**kw: Any) -> int:
    """Push the suite to every host, build its environment, record system facts."""
    return _stage(kw, "deploy")


@main.command()
@_common
@click.option(
    "--dry-run", is_flag=True, help="print the plan and write the rendered playbooks; touch no host."
)
@click.option("--resume", is_flag=True, help="in an existing run directory, run only what has not finished.")
@_guard
def run(**kw: Any) -> int:
    """Launch the configured benchmarks on every host in parallel."""
    return _stage(kw, "run")


@main.command()
@_common
@_guard
def collect(**kw: Any) -> int:
    """Fetch every host's results over SSH (only what is missing) and write results-summary.jsonl."""
    if not kw.get("run_dir"):
        raise SbFleetError("collect needs --run-dir (the directory of the run to collect)")
    return _stage(kw, "collect", create=False)


@main.command()
@_common
@click.option(
    "--dry-run", is_flag=True, help="print the plan and write the rendered playbooks; touch no host."
)
@_guard
def validate(**kw: Any) -> int:
    """deploy, run, collect and report in one command."""
    from sb_fleet import workflow as wf

    opts = _options(kw)
    if kw["dry_run"]:
        s = wf.open_session(opts)
        click.echo(wf.dry_run(s))
        return 0
    code, s = wf.validate(opts)
    click.echo((s.rd.path / "report.md").read_text() if (s.rd.path / "report.md").exists() else "")
    click.echo(f"report: {s.rd.path / 'report.md'} (also report.json, report.html, junit.xml)")
    _print_rundir(s)
    return code


@main.command()
@_common
@click.option("--images", is_flag=True, help="also remove the benchmark image (fleet.container.image).")
@click.option("--workspaces", is_flag=True, help="also delete each host's workspace (suite, venv, results).")
@click.option("--dry-run", is_flag=True, help="print the cleanup playbook; touch no host.")
@_guard
def cleanup(**kw: Any) -> int:
    """Remove sb-fleet's containers from every host; on request the image and the workspaces."""
    from sb_fleet.container_stage import cleanup as do_cleanup

    return do_cleanup(_options(kw), kw["images"], kw["workspaces"])


@main.group()
def bench() -> None:
    """The on-host benchmark suite."""


@bench.command("list")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output.")
@_guard
def bench_list(as_json: bool) -> int:
    """List every benchmark with its parameters and metrics (units, higher or lower is better)."""
    from sb_fleet.benchlist import list_benchmarks

    click.echo(list_benchmarks(as_json))
    return 0


def _register_analysis() -> None:
    try:
        from sb_fleet.commands.report import baseline_cmd, report_cmd
    except ImportError as exc:  # pragma: no cover - only while the analysis package is incomplete
        logging.getLogger("sb_fleet").debug("analysis commands unavailable: %s", exc)
        return
    main.add_command(report_cmd)
    main.add_command(baseline_cmd)


_register_analysis()

__all__ = ["main", "EXIT_INFRA", "EXIT_USAGE"]
