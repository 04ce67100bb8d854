"""``sb-fleet accept``: argument parsing only; the work is in :mod:`sb_fleet.fleet.campaign_run`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from sb_fleet.cli.guard import guarded
from sb_fleet.errors import UsageError
from sb_fleet.exposition import fleet_name

PathArg = click.Path(path_type=Path)


@click.command("accept")
@click.option("--campaign", type=PathArg, help="the campaign file (YAML; campaigns/gpu-default.yaml).")
@click.option("-c", "--config", type=PathArg, help="benchmark config (SuperBench format + fleet/gates).")
@click.option("-i", "--inventory", type=PathArg, help="Ansible inventory (INI or YAML), or slurm:...")
@click.option("--dir", "directory", type=PathArg, help="the campaign's directory (new; created mode 0700).")
@click.option(
    "--resume",
    type=PathArg,
    metavar="DIR",
    help="go on with the campaign in DIR where it stopped (finished stages and soak rounds are not redone).",
)
@click.option(
    "--history",
    type=PathArg,
    help="history store (DuckDB file) every stage's run is recorded into (default: fleet.history).",
)
@click.option("--forks", type=click.IntRange(1, 5000), help="hosts handled at once (default: fleet.forks).")
@click.option(
    "--textfile-dir",
    type=PathArg,
    help="also write the campaign's progress as sb_fleet_campaign_<name>.prom into this node_exporter "
    "textfile directory (campaign.prom in the campaign directory always).",
)
@click.option(
    "--fleet", "name", help="the campaign's label in its Prometheus series (default: the directory's name)."
)
@click.option(
    "--accept-new-host-keys",
    is_flag=True,
    help="record the host key of hosts never seen before (changed keys are still refused).",
)
@click.option(
    "--insecure-no-host-key-checking", is_flag=True, help="DANGEROUS: do not verify host keys at all."
)
@click.option("--quiet", is_flag=True, help="no progress display.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="check the inputs as a start does and print the plan (stages, nodes, runs, estimated wall time "
    "and disk); no host touched, nothing written. With --resume DIR: what remains.",
)
@guarded
def accept_cmd(**kw: Any) -> int:
    """Run an acceptance campaign: sanity (health checks), single-node benchmarks, the fabric (only nodes
    that passed single-node), a soak of rounds; a node failing a stage is held out of the later ones.
    Writes acceptance/<host>.json, campaign-summary.json, campaign.md and campaign.html in the campaign
    directory. Exit 0 every node accepted; 1 a node rejected or quarantined; 2 bad input; 3 a node
    never answered; 130 stopped (go on with --resume DIR). --dry-run: the plan only, exit 0 (2 bad
    input). See docs/campaigns.md."""
    from sb_fleet.fleet.campaign_run import AcceptOptions, dry_run, run_campaign

    resume, directory = kw.get("resume"), kw.get("directory")
    if resume is not None and directory is not None and Path(resume) != Path(directory):
        raise UsageError("give the campaign's directory once: --resume DIR, or --dir DIR for a new campaign")
    where = resume if resume is not None else directory
    if where is None and kw.get("dry_run"):
        where = Path()  # a plan needs no directory; a --dir given is checked as a start checks it
    if where is None:
        raise UsageError("accept needs --dir DIR (a new campaign) or --resume DIR (go on with one)")
    textfile = kw.get("textfile_dir")
    if textfile is not None and not Path(textfile).is_dir():
        raise UsageError(f"--textfile-dir {textfile}: not a directory; create it or give node_exporter's")
    name = kw.get("name")
    if name is not None:
        name = fleet_name(name)
    opts = AcceptOptions(
        directory=Path(where),
        campaign=kw.get("campaign"),
        config=kw.get("config"),
        inventory=kw.get("inventory"),
        resume=resume is not None,
        history=kw.get("history"),
        textfile_dir=textfile,
        name=name,
        forks=kw.get("forks"),
        accept_new_host_keys=bool(kw.get("accept_new_host_keys")),
        insecure_no_host_key_checking=bool(kw.get("insecure_no_host_key_checking")),
        progress=not kw.get("quiet"),
        argv=("sb-fleet", *sys.argv[1:]),
    )
    if kw.get("dry_run"):
        click.echo(dry_run(opts, None if directory is None else Path(directory)))
        return 0
    code, d = run_campaign(opts)
    md = d / "campaign.md"
    click.echo(md.read_text() if md.exists() else "")
    click.echo(f"campaign directory: {d} (acceptance/<host>.json, campaign-summary.json, campaign.html)")
    return code
