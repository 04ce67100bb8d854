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
    touch a node drained or down for another reason. Every action goes to RUN/slurm-actions.json. RUN may
    be a finished acceptance campaign's directory (sb-fleet accept): its rejected and quarantined nodes are
    drained, with the stage that held them out and why. Exit 0; 2 bad run directory; 3 Slurm refused an
    action."""
    from sb_fleet.fleet.campaign_drain import drain_campaign, is_campaign_dir
    from sb_fleet.fleet.slurm_drain import drain_run

    if is_campaign_dir(run_dir):
        code, text = drain_campaign(run_dir, resume, dry_run)
    else:
        code, text = drain_run(run_dir, resume, dry_run)
    click.echo(text)
    return code
