"""One node's outcome of one campaign stage, from what the stage's run directory holds (pure: documents in,
:class:`StageOutcome` out).

- sanity: the check stage's outcome (``outcomes/check.json``) and the failing findings (``health.json``) of
  the probes the stage names; with ``criteria.warn_fails`` a warning fails too;
- single_node, fabric, a soak round: the report's verdict for the host (``report.json``), which must be one
  of ``criteria.verdicts``, and every numeric limit of ``criteria.limits`` on the host's figures.

Also the config a stage runs with: the campaign's config narrowed to the stage's benchmarks (and, for a
fabric stage, each one's multi-node mode given the stage's traffic pattern), and the counters a health
document reads (the soak's readings).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sb_fleet.campaign.gating import CriterionResult, StageOutcome
from sb_fleet.config.campaign_spec import Stage
from sb_fleet.config.fleet_config import FleetSettings

INFRA_WORDS = ("unreachable", "hostkey-mismatch", "pending")

# The health check names (sb_bench.health) that belong to each probe a sanity stage may name.
_PROBE_OF = {"gpu.xid": "xid", "gpu.fabric_manager": "fabric_manager"}


def probe_of(check: str) -> str:
    """``gpu.pcie`` -> ``gpu``; ``gpu.xid`` -> ``xid``; ``ib.rate`` -> ``infiniband``; ``host.disk`` ->
    ``host``; ``drift.driver`` -> ``drift`` (the fleet's, judged in every sanity stage)."""
    if check in _PROBE_OF:
        return _PROBE_OF[check]
    head = check.split(".", 1)[0]
    if check.endswith(".probe"):  # "<probe>.probe": the probe itself timed out or raised
        return head
    return {"ib": "infiniband"}.get(head, head)


def sanity_outcome(
    host: str,
    stage: Stage,
    check: Mapping[str, Any] | None,
    findings: Sequence[Mapping[str, Any]],
    evidence: Iterable[str] = (),
) -> StageOutcome:
    """``check``: the host's row of ``outcomes/check.json`` (None: the stage has none for it);
    ``findings``: its findings in ``health.json``."""
    ev = tuple(evidence)
    if check is None:
        return StageOutcome(host, False, f"no outcome from the health checks of stage {stage.name}", (), ev)
    outcome = str(check.get("outcome", ""))
    if outcome in INFRA_WORDS:
        return StageOutcome(
            host,
            False,
            f"{outcome}: {check.get('reason', '')}".rstrip(": "),
            (CriterionResult("health", "the host answers the checks", outcome, False),),
            ev,
        )
    probes = set(stage.checks) if stage.checks is not None else None
    bad_verdicts = {"fail", "warn"} if stage.criteria.warn_fails else {"fail"}
    crit: list[CriterionResult] = []
    failing: list[str] = []
    for f in findings:
        name = str(f.get("check", "?"))
        verdict = str(f.get("verdict", ""))
        probe = probe_of(name)
        judged = probes is None or probe in probes or probe == "drift"
        if not judged or verdict not in ("fail", "warn"):
            continue
        passed = verdict not in bad_verdicts
        crit.append(
            CriterionResult(
                name, str(f.get("rule") or "pass"), {"verdict": verdict, "value": f.get("value")}, passed
            )
        )
        if not passed:
            failing.append(f"{name}: {f.get('evidence') or verdict}")
    if failing:
        return StageOutcome(host, False, "; ".join(failing)[:500], tuple(crit), ev)
    any_fail = any(str(f.get("verdict")) == "fail" for f in findings)
    # unhealthy only by checks the stage does not judge passes; unhealthy with no failing check at all (the
    # checks ran past their deadline, or gave no document) fails
    if outcome not in ("ok", "unhealthy") or (outcome == "unhealthy" and not any_fail):
        return StageOutcome(host, False, f"{outcome}: {check.get('reason', '')}"[:500], tuple(crit), ev)
    return StageOutcome(host, True, "", tuple(crit), ev)


def _host_values(metric: str, values: Mapping[str, float]) -> dict[str, float]:
    """The host's figures a limit on ``metric`` covers: the column itself, or every rank of it
    (``gemm-flops/fp32_flops`` covers ``gemm-flops/fp32_flops:0``)."""
    return {c: v for c, v in values.items() if c == metric or c.startswith(metric + ":")}


def bench_outcome(
    host: str,
    stage: Stage,
    report_host: Mapping[str, Any] | None,
    values: Mapping[str, float],
    evidence: Iterable[str] = (),
    label: str = "",
) -> StageOutcome:
    """A node's result of a benchmark run (single_node, one fabric pattern, one soak round): its report
    row (``report.json`` ``hosts[]``; None: the run has no row for it) and its figures (column -> value)."""
    ev = tuple(evidence)
    what = f"{stage.name}{' ' + label if label else ''}"
    if report_host is None:
        return StageOutcome(host, False, f"no result from {what}", (), ev)
    verdict = str(report_host.get("verdict", ""))
    outcome = str(report_host.get("outcome", ""))
    allowed = list(stage.criteria.verdicts)
    crit = [
        CriterionResult(
            f"verdict{' ' + label if label else ''}",
            f"report verdict {' or '.join(allowed)}",
            {"verdict": verdict, "outcome": outcome},
            verdict in allowed,
        )
    ]
    reasons: list[str] = []
    if verdict not in allowed:
        why = str(report_host.get("reason") or "")
        word = f"{outcome}: " if outcome in INFRA_WORDS else ""
        reasons.append(f"{word}{what}: verdict {verdict}{' (' + why + ')' if why else ''}")
    for metric, limit in sorted(stage.criteria.limits.items()):
        got = {c: v for c, v in _host_values(metric, values).items() if math.isfinite(v)}
        if not got:
            crit.append(CriterionResult(metric, limit.describe(), None, False))
            reasons.append(f"{what}: {metric} not measured (limit {limit.describe()})")
            continue
        worst_ok = True
        for col, v in sorted(got.items()):
            ok = (limit.min is None or v >= limit.min) and (limit.max is None or v <= limit.max)
            crit.append(CriterionResult(col, limit.describe(), v, ok))
            if not ok and worst_ok:
                reasons.append(f"{what}: {col} = {v:g}, limit {limit.describe()}")
                worst_ok = False
    return StageOutcome(host, not reasons, "; ".join(reasons)[:500], tuple(crit), ev)


def combined(host: str, parts: Sequence[StageOutcome]) -> StageOutcome:
    """A fabric stage's outcome from its patterns' (every one must pass)."""
    failed = [p for p in parts if not p.passed]
    return StageOutcome(
        host,
        not failed and bool(parts),
        "; ".join(p.reason for p in failed)[:500] if parts else "no pattern ran",
        tuple(c for p in parts for c in p.criteria),
        tuple(dict.fromkeys(e for p in parts for e in p.evidence)),
    )


def is_infra(reason: str) -> bool:
    """A reason that starts with an infrastructure outcome word (the host never answered)."""
    return reason.startswith(tuple(f"{w}:" for w in INFRA_WORDS))


class StageConfigError(ValueError):
    """A stage's benchmarks cannot run the way the stage needs (a fabric stage's benchmark with no mode
    across nodes to carry the pattern)."""


DEFAULT_TIMEOUT_S = FleetSettings.model_fields["default_timeout"].default  # fleet.default_timeout's


def stage_config(config: Mapping[str, Any], stage: Stage, pattern: str | None = None) -> dict[str, Any]:
    """The config (as loaded from its YAML) narrowed to ``stage``'s benchmarks (``superbench.enable``);
    with ``pattern``, each of them runs across nodes in that SuperBench traffic pattern: the pattern is
    set on every ``mpi`` and ``torch.distributed`` mode of the entry (a pattern's group is the mode's
    world). The stage's ``timeout`` is its deadline per node: ``fleet.run_timeout`` (all of a node's
    benchmark runs together, whatever step is running then) and each benchmark's ``timeout`` cut to it:
    validate stops what runs on the host past it, starts nothing more there, records the timeout, and the
    node fails the stage. A soak's rounds are not failed by the history gate: its regressions and
    drift warn, its offenders are not quarantined (the soak judges the rounds together)."""
    cfg = copy.deepcopy(dict(config))
    sb = dict(cfg.get("superbench") or {})
    benches = dict(sb.get("benchmarks") or {})
    sb["enable"] = list(stage.benchmarks)
    if pattern is not None:
        for name in stage.benchmarks:
            entry = dict(benches.get(name) or {})
            modes = [dict(m) for m in entry.get("modes") or []]
            across = [m for m in modes if m.get("name") in ("mpi", "torch.distributed")]
            if not across:
                raise StageConfigError(
                    f"stage {stage.name!r}: benchmark {name!r} has no mpi or torch.distributed mode to run "
                    f"the {pattern} pattern in; give it one in the config"
                )
            for m in across:
                m["pattern"] = {"type": pattern}
                m.pop("node_num", None)
            entry["modes"] = modes
            benches[name] = entry
    if stage.timeout is not None and stage.kind != "sanity":
        # The stage's deadline per node: all of a node's benchmark runs together (fleet.run_timeout, kept
        # by the node's runner across the steps), and no one benchmark's timeout beyond it.
        fleet = dict(cfg.get("fleet") or {})
        cap = max(1, math.ceil(stage.timeout))
        own_cap = fleet.get("run_timeout")
        fleet["run_timeout"] = min(int(own_cap), cap) if isinstance(own_cap, (int, float)) else cap
        cfg["fleet"] = fleet
        default = fleet.get("default_timeout", DEFAULT_TIMEOUT_S)
        for name in stage.benchmarks:
            entry = dict(benches.get(name) or {})
            own = entry.get("timeout") or default
            cut = max(1, math.ceil(stage.timeout))
            entry["timeout"] = min(int(own), cut) if isinstance(own, (int, float)) else cut
            benches[name] = entry
    sb["benchmarks"] = benches
    cfg["superbench"] = sb
    if stage.kind == "soak":
        # A round fails a node for its own reasons (its benchmarks, health checks, load telemetry), never
        # against its own past: the rounds go into the history store as every run does, and a round every
        # node ran slower in (load on the machine) failed healthy nodes there (docs/campaigns.md, 11:47 run
        # of 2026-11-29). Regressions over the rounds are the soak's drift judgement's business.
        gates = dict(cfg.get("gates") or {})
        history = dict(gates.get("history") or {})
        for key in ("regression", "drift"):
            if history.get(key, "fail" if key == "regression" else "warn") == "fail":
                history[key] = "warn"
        history["offenders"] = "warn"
        gates["history"] = history
        cfg["gates"] = gates
    return cfg


# -- the soak's readings


def health_counters(doc: Mapping[str, Any]) -> dict[str, float]:
    """The watched counters a health document (``health/<host>.json``) reads: ``gpu.xid`` (every XID the
    kernel log holds), per GPU ``gpu.ecc_uncorrected[i]``, ``gpu.row_remap[i]``,
    ``gpu.row_remap_failure[i]``, per InfiniBand port ``ib.<counter>[hca/port]`` and per NVLink
    ``nvlink.<replay|recovery|crc>[gpu/link]`` (crc: flits and data). The health check lists only the
    counters that are not zero, on every port and link it reads: an absent counter is 0 (None: not read)."""
    out: dict[str, float] = {}
    for rec in doc.get("checks") or []:
        if not isinstance(rec, Mapping):
            continue
        check, value = rec.get("check"), rec.get("value")
        if check == "gpu.xid" and isinstance(value, Mapping):
            out["gpu.xid"] = float(sum(v for v in value.values() if isinstance(v, (int, float))))
        elif check == "gpu.ecc_volatile" and isinstance(value, Mapping):
            for gpu, v in value.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[f"gpu.ecc_uncorrected[{gpu}]"] = float(v)
        elif check == "gpu.row_remap" and isinstance(value, Mapping):
            for gpu, v in value.items():
                if not isinstance(v, Mapping):
                    continue
                unc = v.get("uncorrectable")
                if isinstance(unc, (int, float)) and not isinstance(unc, bool):
                    out[f"gpu.row_remap[{gpu}]"] = float(unc)
                if isinstance(v.get("failure"), bool):
                    out[f"gpu.row_remap_failure[{gpu}]"] = float(v["failure"])
        elif check == "ib.errors" and isinstance(value, Mapping):
            for port, counters in value.items():
                if not isinstance(counters, Mapping):
                    continue
                for name in IB_COUNTERS:
                    v = counters.get(name, 0)
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        out[f"ib.{name}[{port}]"] = float(v)
        elif check == "gpu.nvlink_errors" and isinstance(value, Mapping):
            for link, counters in value.items():
                if not isinstance(counters, Mapping):
                    continue
                for name in NVLINK_COUNTERS:
                    v = counters.get(name, 0)
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                        out[f"nvlink.{name}[{link}]"] = float(v)
    return out


# The NVLink counters of the health check's ``gpu.nvlink_errors`` a soak may watch (``nvlink.<name>``).
NVLINK_COUNTERS = ("replay", "recovery", "crc")


# The InfiniBand counters the health check reads that a soak may watch (campaign_spec.COUNTERS).
IB_COUNTERS = (
    "symbol_error",
    "link_downed",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
)


def throttled_windows(doc: Mapping[str, Any] | None, values: Mapping[str, float]) -> int:
    """Throttled windows of one round: gpu-burn's ``burn_throttled_windows`` figures where the round ran it,
    plus one where the round's health check found a hardware slowdown active (``gpu.throttle`` failing)."""
    n = sum(int(v) for c, v in values.items() if "burn_throttled_windows" in c and math.isfinite(v))
    for rec in (doc or {}).get("checks") or []:
        if isinstance(rec, Mapping) and rec.get("check") == "gpu.throttle" and rec.get("verdict") == "fail":
            n += 1
    return n
