"""``sb-fleet drain RUN``: argument parsing only; the work is in :mod:`sb_fleet.fleet.slurm_drain`."""

from __future__ import annotations

from pathlib import Path

import click

from sb_fleet.cli.guard import guarded


@click.command("drain")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--resume",
    is_flag=True,
    help="also resume the nodes that sb-fleet drained earlier and that pass in this run.",
)
@click.option("--dry-run", is_flag=True, help="print the scontrol commands; change nothing in Slurm.")
@guarded
def drain_cmd(run_dir: Path, resume: bool, dry_run: bool) -> int:
    """Drain the run's failing hosts in Slurm, with the reason `sb-fleet <run-id>: <top finding>`; never
    touch a node drained or down for another reason. Every action goes to RUN/slurm-actions.json.
    Exit 0; 2 bad run directory; 3 Slurm refused an action."""
    from sb_fleet.fleet.slurm_drain import drain_run

    code, text = drain_run(run_dir, resume, dry_run)
    click.echo(text)
    return code
