"""``sb-fleet history PATH``: the runs in a history store, and a host's or a metric's trend."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sb_fleet.cli.guard import guarded

if TYPE_CHECKING:
    from sb_fleet.history.history_store import RunInfo, Store


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.6g}"


@click.option("--host", help="a host's trend: its verdict and values per run.")
@click.option(
    "--metric",
    help="a metric's trend: the fleet median per run (a family such as "
    "'ib-loopback/ib_write_8388608_ib#_bw', or one column); with --host that host's value.",
)
@click.option("--last", type=click.IntRange(1, 100000), default=30, show_default=True, help="runs shown.")
@click.option(
    "--prometheus",
    is_flag=True,
    help="print the trend as OpenMetrics, a timestamp per run, to backfill Prometheus "
    "(promtool tsdb create-blocks-from openmetrics FILE DIR): the gate and verdict counts per run, with "
    "--host that host's verdicts and values, with --metric its fleet median.",
)
@click.option("--fleet", "fleet_name", help="with --prometheus: the 'fleet' label (default: default).")
@click.argument("path", type=click.Path(path_type=Path))
def _history(
    path: Path, host: str | None, metric: str | None, last: int, prometheus: bool, fleet_name: str | None
) -> int:
    """List the runs recorded in a history store (report/validate --history PATH), or show trends."""
    from sb_fleet.exposition import fleet_name as checked_fleet
    from sb_fleet.history.history_store import open_store

    fleet = checked_fleet(fleet_name)
    with open_store(path, create=False, read_only=True) as st:
        runs = st.runs(last)
        if prometheus:
            return _prometheus(st, runs, path, fleet, host, metric)
        if not runs:
            click.echo(f"{path}: no run recorded yet")
            return 0
        if host is None and metric is None:
            counts = st.verdict_counts()
            click.echo(
                f"{'time (UTC)':20} {'run':28} {'hosts':>6} {'pass':>6} {'fail':>6} {'other':>6}  gate    config"
            )
            for r in runs:
                c = counts.get(r.run, {})
                other = r.hosts - c.get("pass", 0) - c.get("fail", 0)
                gate = {True: "passed", False: "FAILED", None: "-"}[r.gate_passed]
                click.echo(
                    f"{r.time:%Y-%m-%d %H:%M:%S} {r.run_key[:28]:28} {r.hosts:>6} {c.get('pass', 0):>6} "
                    f"{c.get('fail', 0):>6} {other:>6}  {gate:7} {(r.config_digest or '-')[:12]}"
                )
            return 0
        if host is None:
            assert metric is not None
            trend = st.metric_trend(metric, runs)
            if not trend:
                click.echo(f"{path}: no metric or family {metric!r} in the last {len(runs)} runs")
                return 1
            when = {r.run_key: r.time for r in runs}
            click.echo(f"fleet median of {metric}:")
            for key, median, n in trend:
                click.echo(f"  {when[key]:%Y-%m-%d %H:%M} {key[:28]:28} {_fmt(median):>12}  ({n} values)")
            return 0
        verdicts = st.host_verdicts(host, runs)
        if not verdicts:
            click.echo(f"{path}: host {host!r} is in none of the last {len(runs)} runs")
            return 1
        trends = st.host_trend(host, metric, runs)
        keys = [r.run_key for r in runs if r.run_key in verdicts]
        click.echo(
            f"{host}: " + " ".join(verdicts[k][0] for k in keys) + f"  (last {len(keys)} runs, oldest first)"
        )
        for m, seq in trends.items():
            vals = dict(seq)
            click.echo(f"  {m}: " + " ".join(_fmt(vals.get(k)) for k in keys))
        return 0


def _prometheus(
    st: Store, runs: list[RunInfo], path: Path, fleet: str, host: str | None, metric: str | None
) -> int:
    from sb_fleet.history.trend_prometheus import trend_series

    if host is not None and not st.host_verdicts(host, runs):
        click.echo(f"{path}: host {host!r} is in none of the last {len(runs)} runs", err=True)
        return 1
    if host is None and metric is not None and not st.metric_trend(metric, runs):
        click.echo(f"{path}: no metric or family {metric!r} in the last {len(runs)} runs", err=True)
        return 1
    click.echo(trend_series(st, runs, fleet, host, metric).render(openmetrics=True).decode(), nl=False)
    return 0


history_cmd = click.command("history")(guarded(_history))
