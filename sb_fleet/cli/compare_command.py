"""``sb-fleet compare BASELINE TARGET``: argument parsing only; the work is in :mod:`sb_fleet.compare.comparison`."""

from __future__ import annotations

from pathlib import Path

import click

from sb_fleet.cli.guard import guarded

DEFAULT_OUT = Path("sb-fleet-compare")


@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="Directory for compare.json, compare.md and compare.html.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("target", type=click.Path(path_type=Path))
def _compare(baseline: Path, target: Path, out: Path, quiet: bool) -> int:
    """Compare two fleets (run directories or results-summary.jsonl files): speedup per metric, model
    and model group, > 1 meaning TARGET is better. Exit 0; 2 on bad input."""
    from sb_fleet.compare.compare_files import write_compare
    from sb_fleet.compare.comparison import compare, load_side

    c = compare(load_side(baseline, "baseline"), load_side(target, "target"))
    paths = write_compare(c, out)
    if not quiet:
        for g in c.groups:
            s = f"{g.geomean_speedup:.3f}x" if g.geomean_speedup is not None else "-"
            click.echo(f"{g.group}: {s} over {g.models} model(s)")
        better = sum(
            1 for m in c.metrics if m.speedup is not None and m.speedup > 1 and m.direction != "unknown"
        )
        click.echo(
            f"{len(c.metrics)} metrics compared (target better on {better}); "
            f"{len(c.only_baseline)} only in the baseline, {len(c.only_target)} only in the target"
        )
        click.echo(f"compare: {paths[1]} (also compare.json, compare.html)")
    return 0


compare_cmd = click.command("compare")(guarded(_compare))
