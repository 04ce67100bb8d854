"""The Prometheus options ``validate`` and ``report`` share (docs/prometheus.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from sb_fleet.fleet.prometheus_outputs import PromOutputs


def prometheus_options(f: Callable) -> Callable:
    opts = [
        click.option(
            "--fleet",
            "fleet_name",
            help="the fleet's name: the 'fleet' label of every Prometheus series and the Pushgateway group "
            "(letters, digits, _ . : -; default: default).",
        ),
        click.option(
            "--textfile-dir",
            help="also write the run's series as sb_fleet_<fleet>.prom into this node_exporter textfile "
            "directory (atomically); with {host} in it, each host's series into its own directory.",
        ),
        click.option(
            "--pushgateway",
            metavar="URL",
            help="also push the run's series to this Pushgateway, replacing the group job=sb-fleet, "
            "fleet=<fleet>; a failed push is a warning and never changes the exit code.",
        ),
        click.option(
            "--per-rank-metrics",
            is_flag=True,
            help="metrics.prom: one series per GPU rank (label 'rank') instead of the host's ranks pooled.",
        ),
        click.option("--openmetrics", is_flag=True, help="write metrics.prom in the OpenMetrics format."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def prom_outputs(kw: dict[str, Any]) -> PromOutputs:
    """The options' values, checked (a bad fleet name is a usage error)."""
    from sb_fleet.exposition import fleet_name
    from sb_fleet.fleet.prometheus_outputs import PromOutputs
    from sb_fleet.report.writers.report_prometheus import PromSettings

    return PromOutputs(
        settings=PromSettings(
            fleet=fleet_name(kw.get("fleet_name")),
            per_rank=bool(kw.get("per_rank_metrics")),
            openmetrics=bool(kw.get("openmetrics")),
        ),
        textfile_dir=kw.get("textfile_dir") or None,
        pushgateway=kw.get("pushgateway") or None,
    )
