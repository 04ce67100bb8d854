"""The check stage: the health checks on every host (one SSH exec each), judged with the fleet's drift.

Writes ``health/<host>.json`` (the host's document as it printed it, parsed), ``health.json`` (every
host's verdict and findings, the drift tables) and ``outcomes/check.json``: ``ok``, ``unhealthy`` with
the failing checks as the reason, or what the executor found (unreachable, refused key). A host whose
checks ran past their deadline (``health.exec_timeout``: its processes stopped), ended without a
verdict, or printed nothing to judge is ``unhealthy`` too, with that as the reason: validate does not
benchmark it (unless --run-unhealthy).
"""

from __future__ import annotations

from sb_fleet.analysis.health_verdict import HealthResult, judge, parse_health
from sb_fleet.errors import RunDirError, UsageError
from sb_fleet.fleet.executor import Executor
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.deadlines import check_deadline
from sb_fleet.plan.host_exec import health_args, read_exec_hosts
from sb_fleet.plan.render_health import PROFILES_FILE
from sb_fleet.plan.tasks import HEALTH, ends_with
from sb_fleet.rundir.outcome_table import save_stage
from sb_fleet.rundir.runinputs import RunInputs
from sb_fleet.safe_files import safe_name

HEALTH_FILE = "health.json"


def check_profiles(run: RunInputs, hosts: list[str]) -> None:
    """Every host's ``sb_health_profile`` names a profile of the run (else a usage error naming the host)."""
    known = run.rd.read_json(f"playbooks/{PROFILES_FILE}") or {}
    for h in hosts:
        name = run.inventory.get(h).vars.get("sb_health_profile")
        if name is not None and str(name) not in known:
            raise UsageError(
                f"host {h}: sb_health_profile {name!r} is not a profile of this run "
                f"(known: {', '.join(sorted(known))}); fix the inventory or add the file to health.profiles"
            )


def check(run: RunInputs, ex: Executor, hosts: list[str]) -> tuple[dict[str, HostOutcome], HealthResult]:
    pb = run.rendered.check
    if pb is None:
        raise RunDirError(f"{run.rd.path}: made before health checks existed (no check.yml); start a new run")
    check_profiles(run, hosts)
    doc = read_exec_hosts(run.rendered.exec_hosts)  # None: a check.yml that builds them in Jinja
    extravars = {"sb_health_args_of": {h: health_args(doc, h) for h in hosts}} if doc else None
    with ex.progress.stage("check", hosts):
        res = ex.run(
            "check",
            pb,
            hosts,
            extravars=extravars,
            deadline=check_deadline(run.config),
            done=ends_with(HEALTH),
        )
    return judge_checks(run, ex, hosts, res.outcomes, {h: r.get(HEALTH, {}) for h, r in res.results.items()})


def judge_checks(
    run: RunInputs,
    ex: Executor,
    hosts: list[str],
    executed: dict[str, HostOutcome],
    results: dict[str, dict],
) -> tuple[dict[str, HostOutcome], HealthResult]:
    """Judge the health checks' output (``results``: per host the checks' ``rc``/``stdout``/``stderr``;
    ``executed``: what the executor said of the host) with the fleet's drift; write health/, health.json
    and outcomes/check.json. The check play's or, on validate's nightly path, deploy's exec's."""
    docs: dict[str, dict | str] = {}
    for h in hosts:
        o = executed[h]
        out = results.get(h) or {}
        if o.outcome not in (Outcome.OK, Outcome.FAILED):
            continue
        try:
            doc = parse_health(str(out.get("stdout") or ""))
        except ValueError as exc:
            err = " ".join(str(out.get("stderr") or "").split())[-300:]
            docs[h] = f"{exc}{'; stderr: ' + err if err else ''}" if o.outcome == Outcome.OK else o.reason
            continue
        doc["host"] = h  # the inventory's name, whatever the host called itself
        run.rd.write_json(f"health/{safe_name(h)}.json", doc)
        docs[h] = doc
    h_cfg = run.config.health
    result = judge(docs, h_cfg.drift_weights(), h_cfg.pin, h_cfg.warn_is_unhealthy)
    outcomes: dict[str, HostOutcome] = {}
    for h in hosts:
        o = executed[h]
        hh = result.hosts.get(h)
        if hh is None and o.outcome == Outcome.TIMEOUT:  # hung: stopped at its deadline
            outcomes[h] = HostOutcome(
                h, "check", Outcome.UNHEALTHY, o.reason, details={"failed_checks": ["health.deadline"]}
            )
        elif hh is None:  # unreachable, refused key, interrupted: the executor's word
            outcomes[h] = o
        elif hh.verdict == "unknown":
            outcomes[h] = HostOutcome(
                h,
                "check",
                Outcome.UNHEALTHY,
                f"health checks gave no result: {hh.problem}",
                details={"failed_checks": ["health.no_result"]},
            )
        elif hh.verdict == "fail" or (hh.verdict == "warn" and h_cfg.warn_is_unhealthy):
            reasons = hh.reasons(worst_only=not h_cfg.warn_is_unhealthy)
            outcomes[h] = HostOutcome(
                h,
                "check",
                Outcome.UNHEALTHY,
                "; ".join(reasons)[:2000],
                details={"failed_checks": [f.check for f in hh.findings if f.verdict == "fail"]},
            )
        else:
            outcomes[h] = HostOutcome(h, "check", Outcome.OK, "; ".join(hh.reasons(False))[:2000])
        ex.progress.update(h, outcomes[h].outcome, outcomes[h].reason)
    save_stage(run.rd, "check", outcomes)
    kept = run.rd.read_json(HEALTH_FILE) or {}
    new = result.to_json()
    if isinstance(kept.get("hosts"), dict):  # a later --limit command keeps the other hosts' results
        new["hosts"] = {**kept["hosts"], **new["hosts"]}
    run.rd.write_json(HEALTH_FILE, new)
    return outcomes, result
