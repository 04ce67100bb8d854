"""``sb-fleet report`` and ``sb-fleet baseline``: argument parsing only; the work is in ``sb_fleet.analysis``."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sb_fleet.cli.guard import guarded
from sb_fleet.cli.prometheus_options import prom_outputs, prometheus_options
from sb_fleet.errors import UsageError

if TYPE_CHECKING:
    from sb_fleet.config.gatespec import Gates
    from sb_fleet.history.confirm import Recorded

DEFAULT_OUT = Path("sb-fleet-report")


def _gates_from_config(config: Path | None) -> Gates:
    from sb_fleet.config.gatespec import Gates

    if config is None:
        return Gates()
    from sb_fleet.config.fleet_config import load_config

    gates = load_config(config).gates
    if isinstance(gates, Gates):
        return gates
    # A config module that still keeps the section as a plain mapping: validate it here.
    from pydantic import ValidationError

    from sb_fleet.errors import ConfigError

    try:
        return Gates.model_validate(gates or {})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = "gates." + ".".join(str(p) for p in err["loc"])
        raise ConfigError(config, loc, err["msg"], "see docs/analysis.md for the gates section") from None


def _default_out(source: Path) -> Path:
    if source.is_dir() and (source / "manifest.json").is_file():
        return source
    return DEFAULT_OUT


@click.option(
    "-i",
    "--inventory",
    type=click.Path(path_type=Path),
    help="Ansible inventory: account for every host in it.",
)
@click.option("--rules", type=click.Path(path_type=Path), help="SuperBench rules file (YAML).")
@click.option(
    "--baseline", type=click.Path(path_type=Path), help="SuperBench baseline (JSON: metric -> value)."
)
@click.option(
    "-c", "--config", type=click.Path(path_type=Path), help="sb-fleet config; its 'gates:' section is used."
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Directory for the report files (default: the run directory, or ./sb-fleet-report/).",
)
@click.option(
    "--superbench-output",
    is_flag=True,
    help="Also write SuperBench's diagnosis files for the rules: diagnosis_summary.{json,jsonl,md,html,xlsx}.",
)
@click.option(
    "--output-all",
    is_flag=True,
    help="With --superbench-output: every node (Accept, Number Of Issues), as SuperBench's.",
)
@click.option(
    "--history",
    type=click.Path(path_type=Path),
    help="History store (a DuckDB file, created when absent): record this run in it and judge every "
    "host against its own past too (default: fleet.history of -c CONFIG).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@prometheus_options
@click.argument("source", type=click.Path(path_type=Path))
def _report(
    source: Path,
    inventory: Path | None,
    rules: Path | None,
    baseline: Path | None,
    config: Path | None,
    out: Path | None,
    superbench_output: bool,
    output_all: bool,
    history: Path | None,
    quiet: bool,
    **prom: Any,
) -> None:
    """Judge every host of a run directory or a SuperBench results-summary.jsonl.

    Writes report.json, report.md, report.html, junit.xml, quarantine.txt and metrics.prom (Prometheus;
    --textfile-dir, --pushgateway: also there). Exit code 0: the gate passed; 1: it failed; 2: bad input.
    """
    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.fleet.prometheus_outputs import check_textfile_dir, write_and_expose
    from sb_fleet.gc_pause import collector_paused
    from sb_fleet.report.analyse import report
    from sb_fleet.report.writers import plot_worker, prom_early

    if (superbench_output or output_all) and rules is None:
        raise UsageError(
            "--superbench-output needs --rules (SuperBench's diagnosis files are the rules' verdicts)"
        )
    outputs = prom_outputs(prom)
    if outputs.textfile_dir:
        check_textfile_dir(outputs.textfile_dir)
    gates = _gates_from_config(config)
    if history is None and config is not None:
        from sb_fleet.config.fleet_config import load_config

        configured = load_config(config).fleet.history
        history = Path(configured) if configured else None
    from sb_fleet.report.headline import headline

    out_dir = out if out is not None else _default_out(source)
    rec = _recorded_reruns(source)  # a validate run: judged with the re-runs validate made, as it was
    # A large run: matplotlib is imported beside the analysis, which makes no reference cycles, and
    # metrics.prom's benchmark families are rendered beside it too (unless the series go elsewhere as well).
    publishing = bool(outputs.textfile_dir or outputs.pushgateway)
    with collector_paused(), plot_worker.started(source), contextlib.ExitStack() as stack:
        fleet = load_fleet(source)
        early = (
            None
            if publishing
            else stack.enter_context(prom_early.started(fleet, outputs.settings, out_dir / "metrics.prom"))
        )
        result = report(
            source,
            inventory=inventory,
            rules=rules,
            baseline=baseline,
            gates=gates,
            history=history,
            confirmations=rec.confirmations if rec else None,
            split_checks=rec.split_checks if rec else None,
            unconfirmed=rec.unconfirmed if rec else (),
            reruns=_rerun_values(source) if rec else None,
            loaded=fleet,
        )
        if rec is not None and rec.document is not None:
            result.confirmation = rec.document
        paths, prom_warnings = write_and_expose(result, out_dir, outputs, early)
    for w in prom_warnings:  # never the verdict's business: said, whatever --quiet says, and the exit stands
        click.secho(f"WARNING: {w}", fg="yellow", err=True)
    for rule, patterns in result.rules_unmatched.items():
        # Loud, whatever --quiet says: a rule that matches nothing passes every host silently.
        click.secho(
            f"WARNING: rule {rule!r}: patterns match no metric in the results: {patterns}",
            fg="yellow",
            err=True,
        )
    if (superbench_output or output_all) and result.rules_diagnosis is not None:
        from sb_fleet.analysis.superbench.sbdiagnosis import write_diagnosis

        f = result.fleet
        sb_paths = write_diagnosis(out_dir, f.hosts, f.columns, f.values, result.rules_diagnosis, output_all)
        if not quiet:
            click.echo(f"SuperBench diagnosis: {sb_paths[0].with_suffix('.*')}")
    if not quiet:
        c = result.counts()
        extra = "".join(f", {c[v]} {v}" for v in ("flaky", "unconfirmed") if c.get(v))
        click.echo(
            f"{len(result.hosts)} hosts: {c['pass']} pass, {c['fail']} fail, {c['incomplete']} incomplete, "
            f"{c['missing']} missing{extra}"
        )
        click.echo(headline(result).text())
        if result.problems:
            click.echo(
                f"{len(result.problems)} malformed result line(s); first: {result.problems[0]}", err=True
            )
        if result.history is not None:
            h = result.history
            click.echo(
                f"history: {len(h.regressions)} regression(s) against own past, {len(h.offenders)} repeat "
                f"offender(s); run {h.recorded} in {h.path}"
            )
        click.echo(f"report: {paths[1]}")
    sys.exit(result.exit_code)


@click.option("--out", type=click.Path(path_type=Path), default=Path("baseline.json"), show_default=True)
@click.option(
    "--summary", type=click.Path(path_type=Path), help="Also write per-metric fleet statistics (JSON)."
)
@click.option(
    "--statistic",
    type=click.Choice(["median", "trimmed-mean"]),
    default="median",
    show_default=True,
    help="Centre of the trimmed values.",
)
@click.option("--per-rank", is_flag=True, help="Keep ':rank' in the names instead of pooling ranks.")
@click.option(
    "--algorithm",
    type=click.Choice(["robust", "fix_threshold", "mean"]),
    default="robust",
    show_default=True,
    help="robust: sb-fleet's; fix_threshold, mean: SuperBench's generate-baseline (need --summary-rules).",
)
@click.option(
    "--summary-rules",
    type=click.Path(path_type=Path),
    help="SuperBench summary rules: which metrics, pooled how.",
)
@click.option(
    "--diagnosis-rules",
    type=click.Path(path_type=Path),
    help="SuperBench diagnosis rules (fix_threshold's criteria).",
)
@click.option(
    "--previous", type=click.Path(path_type=Path), help="A previous baseline to merge: its values win."
)
@click.option(
    "--digits", type=click.IntRange(0, 15), help="Rounding (default: 6 significant; SuperBench's 2)."
)
@click.argument("source", type=click.Path(path_type=Path))
def _baseline(
    source: Path,
    out: Path,
    summary: Path | None,
    statistic: str,
    per_rank: bool,
    algorithm: str,
    summary_rules: Path | None,
    diagnosis_rules: Path | None,
    previous: Path | None,
    digits: int | None,
) -> None:
    """Make a SuperBench baseline from a fleet's results (robust to a few bad hosts)."""
    import json

    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.analysis.superbench.baseline import build_baseline, summarize
    from sb_fleet.safe_files import atomic_write_text

    fleet = load_fleet(source)
    if not fleet.hosts:
        raise UsageError(f"{source}: no host results to make a baseline from")
    base, notes = build_baseline(
        fleet,
        algorithm,
        statistic="trimmed-mean" if statistic == "trimmed-mean" else "median",
        per_rank=per_rank,
        summary_rules=summary_rules,
        diagnosis_rules=diagnosis_rules,
        previous=previous,
        digits=digits,
    )
    for note in notes:
        click.echo(f"warning: {note}", err=True)
    atomic_write_text(out, json.dumps(base, indent=2) + "\n", mode=0o644)
    if summary is not None:
        atomic_write_text(summary, json.dumps(summarize(fleet), indent=2) + "\n", mode=0o644)
    click.echo(f"baseline of {len(base)} metrics from {len(fleet.hosts)} hosts: {out}")
    for p in fleet.problems[:5]:
        click.echo(f"warning: {p}", err=True)


report_cmd = click.command("report")(guarded(_report))
baseline_cmd = click.command("baseline")(guarded(_baseline))


def _recorded_reruns(source: Path) -> Recorded | None:
    """validate's recorded re-runs in a run directory (confirm.json, confirm-splits.json), or None where
    it has none; an unreadable one is said and left out (its findings then stand)."""
    from sb_fleet.bounded_json import read
    from sb_fleet.history.confirm import recorded

    if not Path(source).is_dir():
        return None
    docs: list[dict | None] = []
    for name in ("confirm.json", "confirm-splits.json"):
        p = Path(source) / name
        doc = None
        if p.is_file():
            try:
                doc = read(p)
            except (OSError, ValueError) as exc:
                click.secho(
                    f"WARNING: {p}: unreadable ({exc}); its re-runs are left out", fg="yellow", err=True
                )
        docs.append(doc if isinstance(doc, dict) else None)
    rec = recorded(docs[0], docs[1])
    return rec if rec.any else None


def _rerun_values(source: Path) -> dict[str, dict[str, float]]:
    from sb_fleet.history.confirm import rerun_values_in

    return rerun_values_in(Path(source))
