"""``sb-fleet accept``: an acceptance campaign run on a fleet, stage by stage, resumable from its directory.

Each stage, retry and soak round is a run directory of its own under ``DIR/runs/`` made by the commands'
own entry points (:mod:`sb_fleet.fleet.workflow`), narrowed (``--limit``) to the stage's entrants:

- ``sanity``: ``check`` (the health checks);
- ``single_node``: ``validate`` of the stage's benchmarks (the config narrowed to them, no health checks:
  sanity ran them);
- ``fabric``: ``validate`` of the stage's benchmarks once per traffic pattern (each benchmark's mpi or
  torch.distributed mode given the pattern), on the nodes that passed every single-node stage only;
- ``soak``: ``validate`` of the stage's benchmarks round after round (the health checks open every round:
  its counters), then one closing health check (the counters at the soak's end); the rounds judged
  together (:func:`sb_fleet.analysis.soak.judge_soak`).

Gating is :mod:`sb_fleet.campaign.gating`; the campaign's state (``campaign-state.json``) is saved after
every stage, attempt and round, so a stop at any moment (Ctrl-C, SIGTERM, kill -9, the control node
restarting) loses at most the step under way: ``sb-fleet accept --resume DIR`` goes on from there.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from sb_fleet.analysis.soak import NodeSoak, SoakCriteria
from sb_fleet.bounded_json import read_or_none
from sb_fleet.campaign.acceptance_record import write_records
from sb_fleet.campaign.campaign_state import (
    INPUTS_NAME,
    STATE_NAME,
    CampaignState,
    RoundRecord,
    campaign_dir,
    iso,
    load_state,
    save_state,
)
from sb_fleet.campaign.gating import StageOutcome, entrants, gate_stage, soak_outcome
from sb_fleet.campaign.round_compaction import RoundCompactor
from sb_fleet.campaign.soak_load import load_seconds
from sb_fleet.campaign.soak_series import judge_series, round_rows, series_json
from sb_fleet.campaign.stage_judgement import (
    StageConfigError,
    bench_outcome,
    combined,
    is_infra,
    sanity_outcome,
    stage_config,
)
from sb_fleet.config.campaign_spec import Campaign, CampaignError, Stage, check_benchmarks, load_campaign
from sb_fleet.config.slurm_inventory import is_slurm_source
from sb_fleet.config.yamlsrc import load_yaml
from sb_fleet.errors import RunDirError, SbFleetError, UsageError
from sb_fleet.exits import EXIT_FAILED, EXIT_INFRA, EXIT_INTERRUPTED, EXIT_OK
from sb_fleet.report.campaign_metrics import write_campaign_series
from sb_fleet.report.campaign_report import write_campaign_report
from sb_fleet.safe_files import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_stream,
    atomic_write_text,
    sha256_file,
)

log = logging.getLogger("sb_fleet")

RUNS = "runs"


class CampaignStopped(SbFleetError):
    """Ctrl-C or SIGTERM stopped a stage (the stage stopped what it started): the campaign's state is
    saved and ``--resume`` goes on."""

    exit_code = EXIT_INTERRUPTED


@dataclass(frozen=True)
class AcceptOptions:
    directory: Path
    campaign: Path | None = None
    config: Path | None = None
    inventory: Path | None = None
    resume: bool = False
    history: Path | None = None  # each stage's runs recorded into this store (else fleet.history)
    textfile_dir: Path | None = (
        None  # the campaign's progress also into this node_exporter textfile directory
    )
    name: str | None = None  # the campaign's label in its series (default: the directory's name)
    forks: int | None = None
    accept_new_host_keys: bool = False
    insecure_no_host_key_checking: bool = False
    progress: bool = True
    argv: tuple[str, ...] = field(default_factory=tuple)


@dataclass
class _Ctx:
    opts: AcceptOptions
    dir: Path
    campaign: Campaign
    config_path: Path
    inventory_path: Path
    raw_config: dict[str, Any]
    state: CampaignState


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _say(opts: AcceptOptions, message: str) -> None:
    log.info(message)
    if opts.progress:
        print(f"sb-fleet: accept: {message}", file=sys.stderr, flush=True)


# -- the campaign's inputs


def _raw_config(path: Path) -> dict[str, Any]:
    """The config's document as written (the stages' configs are narrowed from it), read within the
    bounds every user file gets (sb_fleet.config.yamlsrc)."""
    data, _ = load_yaml(path, "config")
    return data if isinstance(data, dict) else {}


def _check_stages(campaign: Campaign, raw: dict[str, Any]) -> None:
    """What a stage needs of the config beyond its benchmarks' names: a mode across nodes to carry each
    fabric pattern."""
    for i, st in enumerate(campaign.spec.stages):
        for pattern in st.patterns or ([] if st.kind != "fabric" else ["all-nodes"]):
            try:
                stage_config(raw, st, pattern)
            except StageConfigError as exc:
                raise CampaignError(
                    campaign.path, campaign.where(("stages", i, "benchmarks")), str(exc)
                ) from None


def _inventory_source(inv: Path) -> str:
    """The inventory as a later --resume finds it: a file's absolute path, a ``slurm:...`` source as given."""
    return str(inv) if is_slurm_source(inv) else str(inv.resolve())


def _required(opts: AcceptOptions) -> tuple[Path, Path, Path]:
    """A new campaign's campaign file, config and inventory."""
    if opts.campaign is None or opts.config is None or opts.inventory is None:
        raise UsageError("accept needs --campaign, -c/--config and -i/--inventory (or --resume DIR)")
    return Path(opts.campaign), Path(opts.config), Path(opts.inventory)


def _checked_inputs(opts: AcceptOptions, d: Path | None) -> tuple[Campaign, Any, Any, dict[str, Any]]:
    """A new campaign's inputs (in the new directory ``d``, where given), checked as its start checks them,
    nothing written: (the campaign, the config, the inventory, the config as written)."""
    from sb_fleet.rundir.runinputs import plan_inputs

    campaign_file, config_file, inventory_file = _required(opts)
    if d is not None and ((d / STATE_NAME).exists() or (d / INPUTS_NAME).exists()):
        raise UsageError(
            f"{d}: a campaign is already in this directory; go on with: sb-fleet accept --resume {d} "
            f"(or give another --dir)"
        )
    campaign = load_campaign(campaign_file)
    config, inventory, _plan = plan_inputs(config_file, inventory_file)
    check_benchmarks(campaign, config.superbench.benchmarks, config_file)
    raw = _raw_config(config_file)
    _check_stages(campaign, raw)
    if any(s.kind == "sanity" for s in campaign.spec.stages) and not config.health.enabled:
        raise CampaignError(
            campaign.path,
            None,
            "the campaign has a sanity stage and the config's health checks are off (health.enabled)",
            "turn them on, or remove the sanity stage",
        )
    return campaign, config, inventory, raw


def _start(opts: AcceptOptions) -> _Ctx:
    """A new campaign in ``opts.directory``: the inputs checked and recorded, the state written."""
    campaign_file, config_file, inventory_file = _required(opts)
    campaign, _config, inventory, raw = _checked_inputs(opts, Path(opts.directory))
    d = campaign_dir(Path(opts.directory))
    atomic_write_bytes(d / "campaign.yaml", campaign_file.read_bytes())
    atomic_write_bytes(d / "config.yaml", config_file.read_bytes())
    atomic_write_json(
        d / INPUTS_NAME,
        {
            "schema_version": 1,
            "campaign": str(campaign_file.resolve()),
            "config": str(config_file.resolve()),
            "config_digest": sha256_file(config_file),
            "inventory": _inventory_source(inventory_file),
            "history": str(Path(opts.history).resolve()) if opts.history else None,
            "textfile_dir": str(Path(opts.textfile_dir).resolve()) if opts.textfile_dir else None,
            "name": opts.name,
        },
    )
    state = CampaignState.new(campaign, [h.name for h in inventory.hosts], _now())
    save_state(d, state)
    return _Ctx(opts, d, campaign, config_file, inventory_file, raw, state)


def _resume(opts: AcceptOptions) -> _Ctx:
    """The campaign in ``opts.directory`` read back: the same campaign file (its digest), the same config."""
    d = Path(opts.directory)
    if opts.campaign is not None or opts.config is not None or opts.inventory is not None:
        raise UsageError(
            "--resume reads the campaign, config and inventory from the campaign directory: leave out "
            "--campaign, -c and -i"
        )
    path = d / INPUTS_NAME
    if not path.is_file():
        raise RunDirError(f"{d}: not a campaign directory (no {INPUTS_NAME}); start one without --resume")
    try:
        rec = json.loads(path.read_text())
        campaign_path, cfg, inv = Path(rec["campaign"]), Path(rec["config"]), Path(rec["inventory"])
    except (ValueError, KeyError, TypeError) as exc:
        raise RunDirError(f"{path}: damaged ({type(exc).__name__}: {exc})") from None
    campaign = load_campaign(campaign_path if campaign_path.is_file() else d / "campaign.yaml")
    state = load_state(d, campaign.digest)
    if state.recovered_from:
        _say(opts, f"the state file was damaged; resuming from {state.recovered_from} (one step is redone)")
    if not cfg.is_file() or sha256_file(cfg) != rec.get("config_digest"):
        raise RunDirError(
            f"{cfg}: the config changed (or is gone) since this campaign started; restore it (a copy is in "
            f"{d / 'config.yaml'}) or start a new campaign"
        )
    if not is_slurm_source(inv) and not inv.exists():
        raise RunDirError(f"{inv}: the campaign's inventory is gone; restore it")
    history = rec.get("history")
    if history and opts.history is None:
        opts = AcceptOptions(**{**opts.__dict__, "history": Path(history)})
    textfile = rec.get("textfile_dir")
    if textfile and opts.textfile_dir is None:
        opts = AcceptOptions(**{**opts.__dict__, "textfile_dir": Path(textfile)})
    if rec.get("name") and opts.name is None:
        opts = AcceptOptions(**{**opts.__dict__, "name": str(rec["name"])})
    return _Ctx(opts, d, campaign, cfg, inv, _raw_config(cfg), state)


def _save(ctx: _Ctx) -> None:
    """The state after a step, and the campaign's progress as Prometheus series (``campaign.prom``, and the
    textfile collector's file where asked): a series that cannot be written is a warning, never a stop."""
    save_state(ctx.dir, ctx.state)
    name = ctx.opts.name or ctx.dir.resolve().name
    try:
        write_campaign_series(ctx.dir, ctx.state, ctx.campaign, name, ctx.opts.textfile_dir)
    except (OSError, SbFleetError) as exc:
        _say(ctx.opts, f"warning: the campaign's Prometheus series not written ({exc})")


# -- running one stage's runs


def _fresh(path: Path) -> Path:
    """``path``, or ``path.2``, ``path.3`` ... where an interrupted attempt left it: a run directory is
    never reused by another attempt."""
    if not path.exists():
        return path
    n = 2
    while path.with_name(f"{path.name}.{n}").exists():
        n += 1
    return path.with_name(f"{path.name}.{n}")


def _rel(ctx: _Ctx, path: Path) -> str:
    return str(Path(path).relative_to(ctx.dir))


def _options(ctx: _Ctx, run_dir: Path, hosts: Sequence[str], config: Path, health: bool) -> Any:
    from sb_fleet.fleet.workflow import Options

    return Options(
        config=config,
        inventory=ctx.inventory_path,
        run_dir=run_dir,
        accept_new_host_keys=ctx.opts.accept_new_host_keys,
        insecure_no_host_key_checking=ctx.opts.insecure_no_host_key_checking,
        limit=",".join(hosts),
        forks=ctx.opts.forks,
        history=ctx.opts.history,
        progress=ctx.opts.progress,
        skip_health=not health,
        argv=ctx.opts.argv,
    )


def _stage_config(ctx: _Ctx, stage: Stage, pattern: str | None) -> Path:
    name = f"{stage.name}-{pattern}" if pattern else stage.name
    path = ctx.dir / "configs" / f"{name}.yaml"
    cfg = stage_config(ctx.raw_config, stage, pattern)
    if not path.exists():
        path.parent.mkdir(mode=0o700, exist_ok=True)
        atomic_write_text(path, yaml.safe_dump(cfg, sort_keys=False))
    return path


def _stopped(run_dir: Path) -> None:
    if (run_dir / "interrupted.json").exists():
        raise CampaignStopped(f"stopped during {run_dir} (Ctrl-C or SIGTERM)")


def _validate(
    ctx: _Ctx, stage: Stage, run_dir: Path, hosts: Sequence[str], pattern: str | None, health: bool
):  # noqa: ANN202
    import dataclasses

    from sb_fleet.fleet import workflow as wf

    opts = _options(ctx, run_dir, hosts, _stage_config(ctx, stage, pattern), health)
    base = ctx.campaign.path.resolve().parent
    if stage.criteria.rules:
        opts = dataclasses.replace(opts, rules=base / stage.criteria.rules)
    if stage.criteria.baseline:
        opts = dataclasses.replace(opts, baseline=base / stage.criteria.baseline)
    wf.validate(opts)
    _stopped(run_dir)


def _run_sanity(ctx: _Ctx, stage: Stage, run_dir: Path, hosts: Sequence[str]) -> dict[str, StageOutcome]:
    from sb_fleet.fleet import workflow as wf

    wf.health_check(_options(ctx, run_dir, hosts, ctx.config_path, True))
    _stopped(run_dir)
    checks = read_or_none(run_dir / "outcomes" / "check.json") or {}
    rows = {str(o.get("host")): o for o in checks.get("hosts") or [] if isinstance(o, Mapping)}
    health = (read_or_none(run_dir / "health.json") or {}).get("hosts") or {}
    rel = _rel(ctx, run_dir)
    return {
        h: sanity_outcome(
            h,
            stage,
            rows.get(h),
            (health.get(h) or {}).get("findings") or [],
            (f"{rel}/health.json", f"{rel}/health/{h}.json"),
        )
        for h in hosts
    }


def _run_bench(ctx: _Ctx, stage: Stage, run_dir: Path, hosts: Sequence[str]) -> dict[str, StageOutcome]:
    """single_node: one validate; fabric: one per pattern, every one of them must pass."""
    patterns: list[str | None] = list(stage.patterns or ["all-nodes"]) if stage.kind == "fabric" else [None]
    parts: dict[str, list[StageOutcome]] = {h: [] for h in hosts}
    for pattern in patterns:
        rd = _fresh(run_dir.with_name(f"{run_dir.name}-{pattern}")) if pattern else run_dir
        _say(
            ctx.opts,
            f"stage {stage.name}{' ' + pattern if pattern else ''}: {len(hosts)} node(s), {_rel(ctx, rd)}",
        )
        _validate(ctx, stage, rd, hosts, pattern, health=False)
        rows, values, _ = round_rows(rd)
        rel = _rel(ctx, rd)
        for h in hosts:
            parts[h].append(
                bench_outcome(
                    h, stage, rows.get(h), values.get(h, {}), (f"{rel}/report.json",), pattern or ""
                )
            )
    return {h: combined(h, p) if len(p) > 1 else p[0] for h, p in parts.items()}


def _last(ctx: _Ctx, host: str, stage: str) -> str | None:
    recs = [r for r in ctx.state.hosts[host].timeline if r.stage == stage]
    return recs[-1].outcome if recs else None


def _retrying(ctx: _Ctx, host: str, stage: str) -> bool:
    """The node failed a retry_once stage's first attempt (its second is due, or was cut off)."""
    recs = [r for r in ctx.state.hosts[host].timeline if r.stage == stage]
    return bool(recs) and (
        recs[-1].outcome == "retry" or (recs[-1].outcome == "running" and recs[-1].attempt == 2)
    )


def _gated_stage(ctx: _Ctx, stage: Stage) -> None:
    """A sanity, single_node or fabric stage: attempt 1 on the entrants that have none finished, then (for
    retry_once) attempt 2 on those that failed it."""
    st = ctx.state
    ents = entrants(ctx.campaign.spec, stage, st.status_map(), st.passed_map())
    undecided = [h for h in ents if stage.name not in st.hosts[h].passed]
    first = [h for h in undecided if not _retrying(ctx, h, stage.name)]
    if stage.kind == "fabric":
        left = sorted(set(st.hosts) - set(ents))
        if left:
            _say(ctx.opts, f"stage {stage.name}: not entered by {', '.join(left)} (held out before)")
    for attempt in (1, 2):
        # attempt 2: after attempt 1, the nodes that failed it (a retry_once stage)
        hosts = first if attempt == 1 else [h for h in ents if _retrying(ctx, h, stage.name)]
        if not hosts or (attempt == 2 and stage.on_failure != "retry_once"):
            continue
        st.start_stage(stage.name, hosts, attempt, _now())
        _save(ctx)
        name = stage.name if attempt == 1 else f"{stage.name}-attempt-2"
        run_dir = ctx.dir / RUNS / name
        if stage.kind == "sanity":
            run_dir = _fresh(run_dir)
            _say(ctx.opts, f"stage {stage.name}: health checks on {len(hosts)} node(s), {_rel(ctx, run_dir)}")
            outcomes = _run_sanity(ctx, stage, run_dir, hosts)
        elif stage.kind == "single_node":
            run_dir = _fresh(run_dir)
            _say(
                ctx.opts,
                f"stage {stage.name}: {', '.join(stage.benchmarks)} on {len(hosts)} node(s), {_rel(ctx, run_dir)}",
            )
            outcomes = _run_bench(ctx, stage, run_dir, hosts)
        else:
            outcomes = _run_bench(ctx, stage, run_dir, hosts)
        decision = gate_stage(stage, hosts, outcomes, attempt)
        st.apply(decision, _now())
        _save(ctx)
        for h, why in {**decision.held_out, **decision.quarantined}.items():
            _say(
                ctx.opts,
                f"stage {stage.name}: {h} {'quarantined' if h in decision.quarantined else 'held out'}: {why}",
            )
        if decision.retry:
            _say(ctx.opts, f"stage {stage.name}: {', '.join(decision.retry)} failed, retried once")
        _drain_now(ctx)
    st.finish_stage(stage.name, _now())
    _save(ctx)


# -- the soak


def _pace(ctx: _Ctx, stage: Stage, index: int) -> None:
    """Round ``index`` starts a round's length after the previous round started (at once where that one
    ran longer, or after a resume)."""
    done = ctx.state.soak_rounds.get(stage.name, [])
    prev = [r for r in done if r.index == index - 1]
    if not prev or stage.round is None:
        return
    due = datetime.fromisoformat(prev[0].start).timestamp() + stage.round
    while (left := due - time.time()) > 0:
        time.sleep(min(left, 1.0))


def _soak(ctx: _Ctx, stage: Stage) -> None:
    st = ctx.state
    hosts = list(entrants(ctx.campaign.spec, stage, st.status_map(), st.passed_map()))
    if not hosts:
        st.finish_stage(stage.name, _now())
        _save(ctx)
        return
    if not st.rounds_done(stage.name) and any(_last(ctx, h, stage.name) != "running" for h in hosts):
        st.start_stage(stage.name, hosts, 1, _now())
        _save(ctx)
    compactor = RoundCompactor(ctx.dir, stage)
    _round_finished(ctx, stage, compactor)  # what a stop left: a round recorded, not yet in the series file
    for index in range(1, stage.rounds + 1):
        if index in st.rounds_done(stage.name):
            continue
        _pace(ctx, stage, index)
        run_dir = _fresh(ctx.dir / RUNS / f"{stage.name}-round-{index:02d}")
        _say(
            ctx.opts,
            f"soak {stage.name}: round {index} of {stage.rounds} on {len(hosts)} node(s), {_rel(ctx, run_dir)}",
        )
        start = _now()
        _validate(ctx, stage, run_dir, hosts, None, health=True)
        end = _now()
        load = _round_load(ctx, stage, run_dir, hosts, start)
        st.record_round(
            stage.name,
            RoundRecord(index, iso(start), iso(end), _rel(ctx, run_dir), list(hosts), load),
            _now(),
        )
        _save(ctx)
        _round_finished(ctx, stage, compactor)
    closing = _fresh(ctx.dir / RUNS / f"{stage.name}-closing-check")
    _say(ctx.opts, f"soak {stage.name}: closing health check (the counters at the soak's end)")
    from sb_fleet.fleet import workflow as wf

    wf.health_check(_options(ctx, closing, hosts, ctx.config_path, True))
    _stopped(closing)
    judged = soak_judgement(ctx.dir, st, stage, hosts, closing)
    round_dirs = {r.index: r.run_dir for r in st.soak_rounds.get(stage.name, [])}
    outcomes = {
        h: soak_outcome(n, soak_evidence(n, round_dirs, f"soak-{stage.name}.json", _rel(ctx, closing)))
        for h, n in judged.items()
    }
    decision = gate_stage(stage, hosts, outcomes)
    st.apply(decision, _now())
    st.finish_stage(stage.name, _now())
    _save(ctx)
    for h, why in {**decision.held_out, **decision.quarantined}.items():
        _say(ctx.opts, f"soak {stage.name}: {h} failed: {why}")
    _drain_now(ctx)


def _round_finished(ctx: _Ctx, stage: Stage, compactor: RoundCompactor) -> None:
    """The recorded rounds in the soak's series file, each compacted as the campaign keeps its rounds
    (``keep_rounds``; :mod:`sb_fleet.campaign.round_compaction`)."""
    try:
        done = compactor.catch_up(ctx.state.soak_rounds.get(stage.name, []))
    except OSError as exc:  # the disk: the soak goes on, the rounds stay whole until the next round's call
        _say(ctx.opts, f"warning: soak {stage.name}: the rounds' series file or compaction failed ({exc})")
        return
    if done:
        log.info("soak %s: compacted %s", stage.name, ", ".join(done))


def _drain_now(ctx: _Ctx) -> None:
    """``drain: on_reject``: every node a draining stage has held out or quarantined, and not yet drained,
    drained in Slurm now (:func:`sb_fleet.fleet.campaign_drain.drain_on_reject`; a failure is a warning).
    Called after every stage's decision and when a campaign is resumed (a drain a kill cut off)."""
    spec = ctx.campaign.spec
    if not any(spec.drains(s) for s in spec.stages):
        return
    from sb_fleet.fleet.campaign_drain import drain_on_reject

    for line in drain_on_reject(ctx.dir, ctx.config_path, ctx.state, spec):
        _say(ctx.opts, line)


def _round_load(
    ctx: _Ctx, stage: Stage, run_dir: Path, hosts: Sequence[str], start: datetime
) -> list[str] | None:
    """The round's load (campaign key ``load:``) on its nodes after its benchmarks, to the round's end less
    the load's margin (:mod:`sb_fleet.fleet.round_load`; each node's summary in the round's ``load.json``):
    [start, end] for the round's record; None without a load, or without the time for one."""
    if stage.load is None or stage.round is None:
        return None
    seconds = load_seconds(start.timestamp(), stage.round, stage.load.margin, time.time())
    if not seconds:
        _say(ctx.opts, f"soak {stage.name}: the round's benchmarks took the round: no load in it")
        return None
    from sb_fleet.fleet.round_load import run_round_load

    _say(ctx.opts, f"soak {stage.name}: {stage.load.kind} on {len(hosts)} node(s) for {seconds:.0f} s")
    opts = _options(ctx, run_dir, hosts, _stage_config(ctx, stage, None), True)
    got = run_round_load(opts, stage.load, hosts, seconds)
    if got.stopped is not None:
        raise CampaignStopped(f"stopped during the load of {run_dir} ({got.stopped})")
    return [got.start, got.end]


MAX_EVIDENCE_ROUNDS = 20


def soak_evidence(node: NodeSoak, round_dirs: Mapping[int, str], judgement: str, closing: str) -> list[str]:
    """A node's soak evidence: the judgement (every round's figures and counters, and where each round's run
    directory is), the closing check, and the run directories of the rounds its failing findings name (the
    first :data:`MAX_EVIDENCE_ROUNDS`): a 72-hour soak of 1-minute rounds is 4,320 of them."""
    rounds = sorted({i for f in node.failures for i in f.rounds if i in round_dirs})
    return [judgement, closing] + [round_dirs[i] for i in rounds[:MAX_EVIDENCE_ROUNDS]]


def soak_judgement(
    directory: Path, state: CampaignState, stage: Stage, hosts: Sequence[str], closing: Path
) -> dict[str, NodeSoak]:
    """The soak's judgement: every node's rounds read back from the soak's series file (written as the
    rounds finished, :mod:`sb_fleet.campaign.round_columns`; kept in columns), judged node by node, and
    written out node by node: ``soak-<stage>.json`` (the judgement, the rounds' times and directories) and
    ``soak-<stage>-rounds.jsonl`` (one line a node: its rounds in columns), neither ever whole in memory."""
    records = state.soak_rounds.get(stage.name, [])
    series = RoundCompactor(directory, stage).judged_series(records, hosts, closing)
    judged: dict[str, NodeSoak] = {}
    basis: dict[str, str] = {}
    for h, node, figures in judge_series(series, records, SoakCriteria.from_stage(stage)):
        judged[h], basis[h] = node, figures
    d = Path(directory)
    atomic_write_stream(d / f"soak-{stage.name}.json", judgement_chunks(stage.name, records, judged, basis))
    atomic_write_stream(
        d / rounds_file(stage.name),
        (json.dumps({"host": h, **series_json(s, records)}).encode() + b"\n" for h, s in series.items()),
    )
    return judged


def rounds_file(stage: str) -> str:
    return f"soak-{stage}-rounds.jsonl"


def judgement_chunks(
    stage: str, records: Sequence[RoundRecord], judged: Mapping[str, NodeSoak], basis: Mapping[str, str]
) -> Iterator[bytes]:
    """``soak-<stage>.json`` (schema 3) in pieces, a node at a time. A trend's values and rounds are left out
    (its figure's column in the rounds file has them); a finding keeps all of its own; ``figures`` says
    whether the node's figures were judged as measured or relative to the fleet (soak_series.judge_series)."""
    head = {
        "schema_version": 3,
        "stage": stage,
        "rounds_file": rounds_file(stage),
        "round_dirs": {str(r.index): r.run_dir for r in records},
        "round_times": {str(r.index): [r.start, r.end] for r in records},
    }
    yield json.dumps(head)[:-1].encode() + b', "nodes": {'
    for k, (h, n) in enumerate(judged.items()):
        doc = n.to_dict() | {"figures": basis.get(h, "measured")}
        doc["trends"] = [
            {key: v for key, v in t.items() if key not in ("values", "rounds")}
            | {"rounds_judged": len(t["rounds"])}
            for t in doc["trends"]
        ]
        yield (b", " if k else b"") + json.dumps(h).encode() + b": " + json.dumps(doc).encode()
    yield b"}}\n"


# -- the campaign


def _write(ctx: _Ctx) -> None:
    now = iso(_now())
    write_records(ctx.dir, ctx.state, ctx.campaign, now, _suite_version())
    write_campaign_report(ctx.dir, ctx.state, ctx.campaign, now)


def _suite_version() -> str | None:
    """The on-host suite's version (``sb_bench.__version__``), read from its source: the control node
    never imports the suite's package for it."""
    import re

    from sb_fleet.plan.resources import suite_dir

    try:
        text = (suite_dir() / "sb_bench" / "__init__.py").read_text()
    except OSError:
        return None
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', text, re.M)
    return m.group(1) if m else None


def exit_code(state: CampaignState) -> int:
    """0 every node accepted; 3 a node rejected because it never answered (infrastructure); else 1 when a
    node is rejected or quarantined."""
    bad = [n for n in state.hosts.values() if n.status not in ("accepted", "active")]
    if any(is_infra(n.reason) for n in bad):
        return EXIT_INFRA
    return EXIT_FAILED if bad else EXIT_OK


def dry_run(opts: AcceptOptions, new_dir: Path | None = None) -> str:
    """``accept --dry-run``: the inputs checked as a real start (or ``--resume``) checks them, and the plan
    (:mod:`sb_fleet.campaign.campaign_plan`: stages, nodes, runs, wall time and disk) as text; no host
    touched, nothing written (``new_dir``: the new campaign's ``--dir``, where given). With ``resume``: what
    remains of the campaign in ``opts.directory``."""
    from sb_fleet.campaign.campaign_plan import plan_campaign, plan_lines
    from sb_fleet.fleet.direct_exec import runs_direct
    from sb_fleet.rundir.runinputs import plan_inputs

    def direct(config: Any, inventory: Any) -> bool:  # as validate --dry-run decides
        return runs_direct(config.fleet.exec_via, config.fleet.launcher, inventory.hosts)

    if opts.resume:
        ctx = _resume(opts)
        config, inventory, _plan = plan_inputs(ctx.config_path, ctx.inventory_path)
        plan = plan_campaign(
            ctx.campaign, ctx.raw_config, inventory, opts.forks, ctx.state, direct(config, inventory)
        )
        return "\n".join(plan_lines(plan, resumed=True))
    campaign, config, inventory, raw = _checked_inputs(opts, new_dir)
    plan = plan_campaign(campaign, raw, inventory, opts.forks, None, direct(config, inventory))
    return "\n".join(plan_lines(plan))


def run_campaign(opts: AcceptOptions) -> tuple[int, Path]:
    """Run (or with ``resume`` go on with) the campaign; (exit code, campaign directory)."""
    ctx = _resume(opts) if opts.resume else _start(opts)
    _save(ctx)
    _say(ctx.opts, f"campaign {ctx.campaign.path} on {len(ctx.state.hosts)} node(s) in {ctx.dir}")
    if opts.resume:
        _drain_now(ctx)
    try:
        while (stage := ctx.state.next_stage(ctx.campaign.spec)) is not None:
            if stage.kind == "soak":
                _soak(ctx, stage)
            else:
                _gated_stage(ctx, stage)
        if not ctx.state.finished:
            ctx.state.finish(_now())
            _save(ctx)
    except (KeyboardInterrupt, CampaignStopped):
        _write(ctx)
        print(
            f"sb-fleet: accept: stopped; the campaign's state is saved: go on with "
            f"sb-fleet accept --resume {ctx.dir}",
            file=sys.stderr,
            flush=True,
        )
        raise
    _write(ctx)
    return exit_code(ctx.state), ctx.dir
