"""The stages, each one function: deploy, run, collect, normalize, report; and validate, all of them.

Data flows one way: config + inventory -> plan -> rendered playbooks ->
execution (per-host outcomes) -> raw artifacts -> results summary ->
analysis -> report. Every stage reads what it needs from the run directory
and writes what it produced back, so each can be re-run on its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from sb_fleet import __version__
from sb_fleet.collect import CollectAborted, CollectTarget, collect_all
from sb_fleet.config import Config, load_config
from sb_fleet.errors import InfraError, RunDirError, UsageError
from sb_fleet.execute import run_playbook
from sb_fleet.inventory import Inventory, load_inventory
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.outcomes import exit_code, load_stage, merge, save_stage
from sb_fleet.plan import Plan, build_plan
from sb_fleet.progress import Progress
from sb_fleet.render import Rendered, render_playbooks
from sb_fleet.resources import default_config, default_inventory, root
from sb_fleet.rundir import RunDir, atomic_write_bytes, atomic_write_text, utcnow
from sb_fleet.ssh import SshSettings
from sb_fleet.summary import summarize_host, summary_line

log = logging.getLogger("sb_fleet")

HOSTPREP_TASK = "check prerequisites, build the venv, record facts"


@dataclass
class Options:
    config: Path | None = None
    inventory: Path | None = None
    run_dir: Path | None = None
    dry_run: bool = False
    accept_new_host_keys: bool = False
    insecure_no_host_key_checking: bool = False
    limit: str | None = None
    forks: int | None = None
    resume: bool = False
    progress: bool = True
    argv: list[str] = field(default_factory=list)


@dataclass
class Session:
    opts: Options
    rd: RunDir
    config: Config
    inventory: Inventory
    plan: Plan
    ssh: SshSettings
    rendered: Rendered
    progress: Progress
    interrupted: str | None = None

    @property
    def run_id(self) -> str:
        return self.rd.run_id

    @property
    def forks(self) -> int:
        return self.opts.forks or self.config.fleet.forks


def _inputs(opts: Options, rd_path: Path | None) -> tuple[Path, Path]:
    """Config and inventory: as given, else those saved in an existing run dir, else the defaults."""
    saved_cfg = rd_path / "config.yaml" if rd_path else None
    saved_inv = rd_path / "inventory" if rd_path else None
    inv = opts.inventory
    if inv is None and saved_inv is not None and saved_inv.is_dir():
        files = sorted(p for p in saved_inv.iterdir() if p.is_file() and p.name != "hosts.json")
        src = (RunDir(rd_path).manifest().get("inventory_sources") or []) if rd_path else []
        if files:
            inv = files[0]
        elif src and Path(src[0]).exists():
            inv = Path(src[0])
    cfg = opts.config
    if cfg is None and saved_cfg is not None and saved_cfg.is_file():
        cfg = saved_cfg
    if inv is None:
        inv = default_inventory()
    if cfg is None:
        cfg = (
            default_config()
            if Path(inv).resolve() == default_inventory().resolve()
            else root() / "configs" / "default.yaml"
        )
    return Path(cfg), Path(inv)


def open_session(opts: Options, create: bool = True) -> Session:
    rd_path = Path(opts.run_dir) if opts.run_dir else None
    existing = rd_path is not None and (rd_path / "manifest.json").exists()
    cfg_path, inv_path = _inputs(opts, rd_path if existing else None)
    config = load_config(cfg_path)
    inventory = load_inventory(inv_path).limit(opts.limit)
    if not inventory.hosts:
        raise UsageError(f"--limit {opts.limit!r} matches no host of {inv_path}")
    plan = build_plan(config, inventory)
    if not plan.steps:
        why = "; ".join(f"{k}: {v}" for k, v in plan.unsupported.items()) or "no benchmark is enabled"
        raise UsageError(f"{cfg_path}: nothing to run ({why})")
    if existing:
        rd = RunDir.open(rd_path)  # type: ignore[arg-type]
    elif create:
        rd = RunDir.create(rd_path)
    else:
        raise RunDirError(f"{rd_path}: not a run directory (no manifest.json)")
    _save_inputs(rd, cfg_path, inv_path, config, inventory, plan)
    ssh = SshSettings.from_fleet(config.fleet, opts.accept_new_host_keys, opts.insecure_no_host_key_checking)
    if ssh.policy == "off":
        log.warning(
            "HOST KEY CHECKING IS OFF (--insecure-no-host-key-checking): any host can impersonate "
            "any other; never use this on a production fleet"
        )
        print("sb-fleet: WARNING: host key checking is OFF for this run", file=sys.stderr)
    rendered = render_playbooks(plan, config, inventory, rd.run_id, rd.sub("playbooks"))
    return Session(opts, rd, config, inventory, plan, ssh, rendered, Progress(enabled=opts.progress))


def _save_inputs(
    rd: RunDir, cfg_path: Path, inv_path: Path, config: Config, inv: Inventory, plan: Plan
) -> None:
    if cfg_path.resolve() != (rd.path / "config.yaml").resolve():
        atomic_write_bytes(rd.path / "config.yaml", cfg_path.read_bytes())
    rd.write_json("config.json", config.model_dump(mode="json"))
    inv_dir = rd.sub("inventory")
    # An inventory holding secrets is not copied; hosts.json keeps the hosts with secrets masked.
    if (
        not any(h.has_secrets() for h in inv.hosts)
        and inv_path.is_file()
        and inv_path.parent.resolve() != inv_dir.resolve()
    ):
        atomic_write_bytes(inv_dir / inv_path.name, inv_path.read_bytes())
    rd.write_json("inventory/hosts.json", inv.to_json())
    rd.write_json(
        "hosts.json",
        {"schema_version": 1, "hosts": [{"name": h.name, "groups": list(h.groups)} for h in inv.hosts]},
    )
    rd.write_json("plan.json", plan.to_json())
    rd.update_manifest(
        config_source=str(cfg_path.resolve()),
        inventory_sources=[str(Path(s).resolve()) for s in inv.sources],
        python=sys.version.split()[0],
        sb_fleet_version=__version__,
        ansible_core=_ansible_version(),
    )


def _ansible_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("ansible-core")
    except Exception:
        return None


def _python_for_ansible() -> str:
    return "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


def dry_run(s: Session) -> str:
    pb = s.rd.path / "playbooks"
    return f"{s.plan.describe()}\n\nrendered into {pb}:\n" + "\n".join(
        f"  {p.name}" for p in sorted(pb.iterdir()) if p.suffix in (".yml", ".json")
    )


# -- stages -----------------------------------------------------------------------------------------
def deploy(s: Session) -> dict[str, HostOutcome]:
    hosts = list(s.plan.hosts)
    with s.progress.stage("deploy", hosts):
        res = run_playbook(
            "deploy",
            s.rendered.deploy,
            s.inventory,
            hosts,
            s.rd.sub("ansible", "deploy"),
            s.ssh,
            s.forks,
            _python_for_ansible(),
            s.progress.update,
        )
    for h, out in res.results.items():
        facts = _facts(out.get(HOSTPREP_TASK, {}))
        if facts:
            s.rd.write_json(f"facts/{_fname(h)}.json", {"host": h, **facts})
    if s.config.fleet.runtime != "none":  # then put the image on the hosts that are ready
        from sb_fleet.container_stage import deploy_images

        deploy_images(s, res.outcomes)
    save_stage(s.rd, "deploy", res.outcomes)
    return res.outcomes


def _fname(host: str) -> str:
    from sb_fleet.rundir import safe_name

    return safe_name(host)


def _facts(res: dict) -> dict | None:
    out = str(res.get("stdout") or "").strip()
    if not out:
        return None
    try:
        return json.loads(out.splitlines()[-1])
    except ValueError:
        return None


def _eligible(s: Session, stage_before: str) -> tuple[list[str], dict[str, HostOutcome]]:
    """Hosts the previous stage left fit to go on, and skip outcomes for the others."""
    prev = load_stage(s.rd, stage_before)
    if prev is None:
        return list(s.plan.hosts), {}
    ok, skipped = [], {}
    for h in s.plan.hosts:
        o = prev.get(h)
        if o is None or o.outcome == Outcome.OK:
            ok.append(h)
        else:
            skipped[h] = HostOutcome(h, "", Outcome.SKIPPED, f"{stage_before} {o.outcome.value}: {o.reason}")
    return ok, skipped


class Interrupts:
    """SIGINT/SIGTERM during a stage: the first one asks the stage to stop cleanly (cancel Ansible, stop the
    benchmarks on the hosts, record who finished); a second one aborts at once."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: object) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        print(
            f"sb-fleet: {self.signal}: stopping; cleaning up the benchmarks still running on the hosts "
            f"(again to abort at once)",
            file=sys.stderr,
            flush=True,
        )

    def fired(self) -> bool:
        return self.signal is not None

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]


def _steps_done(o: HostOutcome | None) -> set[str]:
    return set((o.details or {}).get("steps_done", [])) if o is not None else set()


def run(s: Session) -> dict[str, HostOutcome]:
    """Every step on every ready host. With ``--resume``, in an existing run directory, only the steps a host
    has not finished (and, inside a step, only the benchmarks that did not finish: the runner's --resume).
    Interrupted (Ctrl-C): the benchmarks are stopped on every host, each host's outcome says whether it
    finished, and ``run --resume`` does the rest."""
    hosts, skipped = _eligible(s, "deploy")
    prev = (load_stage(s.rd, "run") or {}) if s.opts.resume else {}
    done = {h: _steps_done(prev.get(h)) for h in hosts}
    outcomes: dict[str, HostOutcome] = {
        h: HostOutcome(h, "run", o.outcome, o.reason) for h, o in skipped.items()
    }
    live = list(hosts)
    with s.progress.stage("run", hosts), Interrupts() as intr:
        for step in s.plan.steps:
            if intr.fired():
                break
            todo = [h for h in live if step.id not in done[h]]
            targets = todo
            if step.multi_node:
                in_groups = [
                    g
                    for g in step.groups
                    if all(h in live for h in g.hosts) and any(h in todo for h in g.hosts)
                ]
                targets = [h for g in in_groups for h in g.hosts]
                for h in todo:
                    if h not in targets and h not in outcomes:
                        why = (
                            "fits no full node group"
                            if h in step.left_out
                            else "a host of its node group is not available"
                        )
                        outcomes.setdefault(h, HostOutcome(h, "run", Outcome.SKIPPED, f"{step.id}: {why}"))
            for h in live:
                if h not in targets and step.id in done[h]:
                    s.progress.update(h, "ok", f"{step.id} done before")
            extra = None
            if s.opts.resume:
                from sb_fleet.render import runner_args

                extra = {
                    "sb_runner_args": [*runner_args(s.run_id, step, s.config.fleet.master_port), "--resume"]
                }
            res = run_playbook(
                f"run-{step.id}",
                s.rendered.runs[step.id],
                s.inventory,
                targets,
                s.rd.sub("ansible", f"run-{step.id}"),
                s.ssh,
                s.forks,
                _python_for_ansible(),
                s.progress.update,
                cancel=intr.fired,
                extravars=extra,
            )
            if s.config.fleet.runtime != "none":
                from sb_fleet.container_stage import record_run

                record_run(s, res.results)
            for h, o in res.outcomes.items():
                if o.outcome == Outcome.OK:
                    done[h].add(step.id)
                elif o.outcome != Outcome.PENDING:
                    outcomes[h] = HostOutcome(h, "run", o.outcome, f"{step.id}: {o.reason}")
                    if h in live:
                        live.remove(h)
            if intr.fired():
                unfinished = [h for h in targets if res.outcomes[h].outcome == Outcome.PENDING]
                s.rd.write_json(
                    "interrupted.json",
                    {
                        "signal": intr.signal,
                        "at": utcnow(),
                        "step": step.id,
                        "cleanup": _stop_remote(s, unfinished),
                    },
                )
    steps = [st.id for st in s.plan.steps]
    for h in hosts:
        missing = [st for st in steps if st not in done[h]]
        if h in outcomes:
            o = outcomes[h]
            outcomes[h] = HostOutcome(h, "run", o.outcome, o.reason, details={"steps_done": sorted(done[h])})
        elif not missing:
            outcomes[h] = HostOutcome(h, "run", Outcome.OK, details={"steps_done": sorted(done[h])})
        else:
            why = (
                (
                    f"interrupted ({intr.signal}) before {', '.join(missing)} finished; "
                    f"sb-fleet run --resume --run-dir {s.rd.path} runs what is missing"
                )
                if intr.fired()
                else f"{', '.join(missing)} not run"
            )
            outcomes[h] = HostOutcome(h, "run", Outcome.PENDING, why, details={"steps_done": sorted(done[h])})
    save_stage(s.rd, "run", outcomes)
    s.interrupted = intr.signal
    if intr.fired():
        n = sum(1 for o in outcomes.values() if o.outcome == Outcome.PENDING)
        print(
            f"sb-fleet: interrupted: {n} host(s) did not finish (see {s.rd.path}/outcomes.md); "
            f"sb-fleet run --resume --run-dir {s.rd.path} does only what is missing",
            file=sys.stderr,
        )
    return outcomes


def _stop_remote(s: Session, hosts: list[str]) -> dict[str, str]:
    """Stop the runner (and with it every benchmark it started) on each host; host -> what happened."""
    if not hosts:
        return {}
    from sb_fleet.collect import stop_runners

    targets = [
        CollectTarget(
            s.inventory.get(h),
            f"{s.plan.host_setup[h].workspace.rstrip('/')}/runs/{s.run_id}/results",
            s.rd.raw_host(h) / "results",
        )
        for h in hosts
    ]
    return stop_runners(targets, s.ssh, s.forks, timeout=30)


def collect(s: Session) -> dict[str, HostOutcome]:
    prev = load_stage(s.rd, "run") or {}
    # Every host that may hold results, including one that dropped off mid-run.
    targets_hosts = [h for h in s.plan.hosts if h not in prev or prev[h].outcome != Outcome.SKIPPED]
    outcomes: dict[str, HostOutcome] = {
        h: HostOutcome(h, "collect", Outcome.SKIPPED, f"run skipped: {prev[h].reason}")
        for h in s.plan.hosts
        if h not in targets_hosts
    }
    targets = [
        CollectTarget(
            s.inventory.get(h),
            f"{s.plan.host_setup[h].workspace.rstrip('/')}/runs/{s.run_id}/results",
            s.rd.raw_host(h) / "results",
        )
        for h in targets_hosts
    ]
    try:
        with s.progress.stage("collect", targets_hosts):
            outcomes.update(
                collect_all(targets, s.ssh, s.forks, s.config.fleet.collect_timeout, s.progress.update)
            )
    except CollectAborted as exc:
        # The control node's disk is full: record who was collected if the disk still takes it, then stop.
        outcomes.update(exc.outcomes)
        with contextlib.suppress(InfraError):
            save_stage(s.rd, "collect", outcomes)
            outcome_table(s.rd, list(s.plan.hosts))
        raise
    save_stage(s.rd, "collect", outcomes)
    normalize(s.rd, s.plan)
    return outcomes


def normalize(rd: RunDir, plan: Plan) -> dict[str, HostOutcome]:
    """raw/ -> results-summary.jsonl, metrics.json and each host's benchmark outcome. Offline."""
    lines, meta, outcomes, problems = [], {}, {}, {}
    expected = [e.key for e in plan.entries()]
    for h in plan.hosts:
        raw = rd.path / "raw" / _fname(h)
        if not raw.is_dir():
            continue
        hr = summarize_host(h, raw)
        meta.update(hr.metrics_meta)
        if hr.record:
            lines.append(summary_line(hr))
        bad = [(k, st) for k, st in hr.statuses.items() if st["status"] not in ("ok", "skipped")]
        absent = [k for k in expected if k not in hr.statuses]
        if hr.problems:
            problems[h] = hr.problems
        if any(st["status"] == "timeout" for _, st in bad):
            k, st = next((k, st) for k, st in bad if st["status"] == "timeout")
            outcomes[h] = HostOutcome(
                h, "benchmarks", Outcome.TIMEOUT, f"{k}: {st['reason']}", details={"entries": hr.statuses}
            )
        elif bad or hr.problems:
            reason = f"{bad[0][0]}: {bad[0][1]['reason']}" if bad else hr.problems[0]
            outcomes[h] = HostOutcome(
                h, "benchmarks", Outcome.FAILED, reason, details={"entries": hr.statuses}
            )
        elif absent:
            outcomes[h] = HostOutcome(
                h,
                "benchmarks",
                Outcome.FAILED,
                f"no result for {', '.join(absent)}",
                details={"entries": hr.statuses},
            )
        else:
            outcomes[h] = HostOutcome(h, "benchmarks", Outcome.OK, details={"entries": hr.statuses})
    atomic_write_text(rd.path / "results-summary.jsonl", "".join(ln + "\n" for ln in lines))
    rd.write_json("metrics.json", meta)
    rd.write_json("problems.json", problems)
    save_stage(rd, "benchmarks", outcomes)
    return outcomes


def outcome_table(rd: RunDir, hosts: list[str]) -> dict[str, dict]:
    merged = merge(rd, hosts)
    rows = ["| host | outcome | reason |", "|---|---|---|"]
    for h, m in merged.items():
        rows.append(f"| {h} | {m['outcome']} | {m['reason'].replace('|', '/')} |")
    atomic_write_text(rd.path / "outcomes.md", "\n".join(rows) + "\n")
    return merged


def report(rd: RunDir, inventory: Path | None = None, config: Path | None = None) -> tuple[int, Path]:
    """Run the fleet analysis on the run directory; (exit code of the gate, report path)."""
    from sb_fleet.analysis.api import report as analyse
    from sb_fleet.analysis.api import write_reports

    cfg = config or (rd.path / "config.yaml" if (rd.path / "config.yaml").exists() else None)
    gates = load_config(cfg).gates if cfg else None
    result = analyse(rd.path, inventory=inventory, gates=gates)
    write_reports(result, rd.path)
    return result.exit_code, rd.path / "report.md"


def finish(s: Session, start: str, code: int) -> None:
    s.rd.record_command(s.opts.argv, start, utcnow(), code)


def validate(opts: Options) -> tuple[int, Session]:
    start = utcnow()
    s = open_session(opts)
    deploy(s)
    run(s)
    if s.interrupted:
        code = exit_code(outcome_table(s.rd, list(s.plan.hosts)))
        finish(s, start, code)
        return code, s
    collect(s)
    merged = outcome_table(s.rd, list(s.plan.hosts))
    gate_code, _ = report(s.rd)
    code = exit_code(merged, gate_code == 0)
    finish(s, start, code)
    return code, s
