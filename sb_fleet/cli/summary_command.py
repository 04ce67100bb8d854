"""``sb-fleet summary``: argument parsing only; the work is in ``sb_fleet.analysis.superbench.sbsummary``."""

from __future__ import annotations

from pathlib import Path

import click

from sb_fleet.cli.guard import guarded
from sb_fleet.errors import UsageError

FORMAT_CHOICES = ("md", "html", "xlsx", "excel", "all")


@click.option(
    "--rules", type=click.Path(path_type=Path), required=True, help="SuperBench summary rules file (YAML)."
)
@click.option(
    "--format",
    "formats",
    type=click.Choice(FORMAT_CHOICES),
    multiple=True,
    help="Output format, repeatable (default: all of md, html, xlsx; 'excel' is xlsx).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("."),
    show_default=True,
    help="Directory for results-summary.<format>.",
)
@click.option(
    "--digits",
    type=click.IntRange(0, 15),
    default=2,
    show_default=True,
    help="Rounding (SuperBench's --round).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.argument("source", type=click.Path(path_type=Path))
def _summary(
    source: Path, rules: Path, formats: tuple[str, ...], out: Path, digits: int, quiet: bool
) -> None:
    """Summarise a fleet's results by SuperBench summary rules (like 'sb result summary').

    SOURCE is a run directory or a results-summary.jsonl. Writes results-summary.md, .html and .xlsx.
    """
    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.analysis.superbench.sbsummary import FORMATS, load_summary_rules, summarize, write_summary

    chosen = {"xlsx" if f == "excel" else f for f in formats} if formats else set(FORMATS)
    if "all" in chosen:
        chosen = set(FORMATS)
    parsed = load_summary_rules(rules)
    fleet = load_fleet(source)
    if not fleet.hosts:
        raise UsageError(f"{source}: no host results to summarise")
    lines, warnings = summarize(parsed, fleet.columns, fleet.values, digits)
    for w in warnings:
        click.secho(f"WARNING: {w}", fg="yellow", err=True)
    for problem in fleet.problems[:5]:
        click.echo(f"warning: {problem}", err=True)
    paths = write_summary(
        out, lines, fleet.hosts, fleet.columns, fleet.values, tuple(f for f in FORMATS if f in chosen)
    )
    if not quiet:
        n = sum(len(v) for v in lines.values())
        click.echo(f"summary of {len(fleet.hosts)} hosts, {n} lines in {len(lines)} categories:")
        for p in paths:
            click.echo(f"  {p}")


summary_cmd = click.command("summary")(guarded(_summary))
