"""Verdict quality at every fleet size: recall and false positives of ``sb-fleet report`` (no rules, no baseline).

Prints, first, the **corpus of real runs** (``tests/corpus/``, recorded by ``bench/record_corpus.py``:
real ``validate`` runs on loopback fleets, quiet and loaded, with and without planted faults),
re-judged with this code: false gate failures on runs with no fault, and on runs with a fault
whether the faulty host failed, was said too noisy or inconsistent, or passed silently. Then, on
freshly generated fleets (seeds the tests do not use):

* **small fleets** of every size 3-16 with one faulty host (``tests/synth/small.py``: seen and
  unseen fault kinds, sizes drawn from the issue's ranges, 6% and more), and healthy ones: recall
  per size and kind, false positives per healthy host;
* **shaped small fleets**: the same, with every value's noise drawn from the corpus's healthy hosts
  (``tests/synth/corpus.py``: heavy tails, contended hosts far off, each with the own noise it
  measured) instead of a Gaussian;
* **gross faults**: fleets of 3-10 hosts with one metric at 1/1000 of its peers: flagged, and only
  that host;
* **populations**: 200-host fleets where 70% run GEMM and NCCL 40% slow, or 30% run 60% faster:
  the gate must fail and the split be named; and fleets with a benign batch 1-2% apart: no split;
* **large fleets**: 2,000 hosts (``tests/synth/fleet.py``, its 8 fault kinds) plus the unseen
  kinds planted on further hosts: recall and false-positive rate, once with every family's noise
  drawn from the small fleets' range (0.3-1%, like the suite's noise priors) and once from 0.3-3%,
  where the smallest faults (6% on one metric) are within two or three sigmas of the noise.

Usage::

    python bench/verdict_quality.py [--sizes 3-16] [--trials 12] [--large 2000] [--large-seeds 7001,7002]
    python bench/verdict_quality.py --noise 0.003,0.02     # fleets noisier than the suite's priors
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sb_fleet.report.analyse import report  # noqa: E402
from tests.synth.corpus import NoiseShapes, judge_run, noise_shapes  # noqa: E402
from tests.synth.corpus import runs as corpus_runs  # noqa: E402
from tests.synth.fleet import generate  # noqa: E402
from tests.synth.small import GROSS, SEEN, UNSEEN, generate_small, plant  # noqa: E402


def judge(
    lines: list[str], hosts: list[str], noise_lines: list[str] | None = None
) -> tuple[dict[str, str], object]:
    with tempfile.TemporaryDirectory(prefix="sb-fleet-vq-") as d:
        run = Path(d)
        (run / "manifest.json").write_text('{"schema_version": 1}')
        (run / "results-summary.jsonl").write_text("\n".join(lines) + "\n")
        if noise_lines is not None:
            (run / "noise-summary.jsonl").write_text("\n".join(noise_lines) + "\n")
        (run / "hosts.json").write_text(
            json.dumps({"schema_version": 1, "hosts": [{"name": h, "groups": ["gpu"]} for h in hosts]})
        )
        r = report(run)
    return {h.name: h.verdict for h in r.hosts}, r


def small(
    sizes: list[int], trials: int, noise: tuple[float, float], seed0: int, shapes: NoiseShapes | None = None
) -> None:
    kinds = (*SEEN, *UNSEEN)
    found: dict[tuple[int, str], int] = Counter()
    tried: dict[tuple[int, str], int] = Counter()
    fp = Counter()
    healthy = Counter()
    fp_examples: list[str] = []
    misses: list[str] = []
    seed = seed0
    for n in sizes:
        for _t in range(trials):
            for kind in (*kinds, None):
                seed += 1
                fleet, _ = generate_small(n, seed, kind, noise, shapes)
                verdict, r = judge(fleet.lines, fleet.hosts, fleet.noise_lines)
                for h in fleet.hosts:
                    if h in fleet.faults:
                        tried[(n, kind)] += 1
                        ok = verdict[h] == "fail"
                        found[(n, kind)] += ok
                        if not ok and len(misses) < 8:
                            misses.append(f"n={n} {kind} seed {seed}")
                    else:
                        healthy[n] += 1
                        if verdict[h] != "pass":
                            fp[n] += 1
                            if len(fp_examples) < 8:
                                host = next(x for x in r.hosts if x.name == h)
                                i = host.issues[0]
                                fp_examples.append(
                                    f"n={n} seed {seed} {h}: [{i.check}] {i.metric}: {i.detail}"
                                )
    shape = "Gaussian" if shapes is None else "shaped like the corpus's healthy hosts, with their own noise"
    print(
        f"\n## small fleets, one faulty host (faults >= 6%), {trials} fleets per size and kind, noise {noise}, "
        f"{shape}"
    )
    head = f"{'n':>3} " + " ".join(f"{k[:10]:>10}" for k in kinds) + f" {'recall':>7} {'FP/host':>8}"
    print(head)
    all_f = all_t = all_fp = all_h = 0
    seen_f = seen_t = unseen_f = unseen_t = 0
    for n in sizes:
        cells = []
        for k in kinds:
            cells.append(f"{found[(n, k)]:>4}/{tried[(n, k)]:<5}")
            if k in SEEN:
                seen_f, seen_t = seen_f + found[(n, k)], seen_t + tried[(n, k)]
            else:
                unseen_f, unseen_t = unseen_f + found[(n, k)], unseen_t + tried[(n, k)]
        f = sum(found[(n, k)] for k in kinds)
        t = sum(tried[(n, k)] for k in kinds)
        all_f, all_t, all_fp, all_h = all_f + f, all_t + t, all_fp + fp[n], all_h + healthy[n]
        print(f"{n:>3} " + " ".join(cells) + f" {f / t * 100:>6.1f}% {fp[n] / healthy[n] * 100:>7.2f}%")
    print(
        f"all sizes: recall {all_f}/{all_t} = {all_f / all_t * 100:.1f}% (seen {seen_f / seen_t * 100:.1f}%, "
        f"unseen {unseen_f / unseen_t * 100:.1f}%); 4-16 hosts: recall "
        f"{sum(found[(n, k)] for n in sizes if n >= 4 for k in kinds)}/"
        f"{sum(tried[(n, k)] for n in sizes if n >= 4 for k in kinds)}; "
        f"false positives {all_fp}/{all_h} healthy hosts = {all_fp / all_h * 100:.2f}%"
    )
    for m in misses:
        print(f"  missed: {m}")
    for e in fp_examples:
        print(f"  false positive: {e}")


def corpus() -> None:
    """Real runs (tests/corpus/, bench/record_corpus.py), re-judged offline with this code: the first
    pass of validate (its confirmation run is not repeated here; the recorded report says what it did)."""
    judged = [judge_run(r) for r in corpus_runs()]
    if not judged:
        print("\n## corpus of real runs: none recorded (bench/record_corpus.py)")
        return
    print(
        "\n## corpus of real runs (tests/corpus/), re-judged offline as validate judges: the first pass, then "
        "the recorded confirmation run"
    )
    by_case: dict[str, list] = {}
    for j in judged:
        by_case.setdefault(j.run.case, []).append(j)
    print(f"{'case':32} {'runs':>4}  {'outcomes (first pass)':36} {'after confirmation':36} recorded gate")
    false_alarms = runs_nofault = caught = faulty = silent = 0
    for case, js in sorted(by_case.items()):
        outcomes = Counter(j.outcome for j in js)
        firsts = Counter(j.first for j in js)
        recorded = Counter(_recorded_gate(j.run.path) for j in js)
        text = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        first = ", ".join(f"{k} {v}" for k, v in sorted(firsts.items()))
        rec = ", ".join(f"{k} {v}" for k, v in sorted(recorded.items()))
        print(f"{case:32} {len(js):>4}  {first:36} {text:36} {rec}")
        slow = [x for x in (j.run.slowdown() for j in js) if x is not None]
        if slow:  # what the planted fault really did to the faulty host's GEMM
            print(
                f"{'':32}       the faulty host's GEMM: {min(slow):.2f}x-{max(slow):.2f}x slower than the others' median"
            )
        if js[0].run.fault_host is None:
            runs_nofault += len(js)
            false_alarms += outcomes["false_alarm"]
        else:
            faulty += len(js)
            caught += outcomes["caught"]
            silent += outcomes["silent"]
    if runs_nofault:
        print(f"no fault: false gate failures {false_alarms}/{runs_nofault}")
    if faulty:
        print(f"planted faults: failed {caught}/{faulty}, silent passes {silent}/{faulty}")
    for j in judged:
        if j.outcome in ("false_alarm", "silent"):
            print(f"  {j.outcome}: {j.run.case}/{j.run.path.name}: {j.why}")


def _recorded_gate(run: Path) -> str:
    p = run / "report.json"
    if not p.is_file():
        return "no report"
    doc = json.loads(p.read_text())
    return "passed" if doc.get("gate", {}).get("passed") else "failed"


def gross(trials: int, noise: tuple[float, float], seed0: int) -> None:
    print(f"\n## one metric at 1/1000 of its peers, fleets of 3-10 hosts, {trials} per size")
    bad = []
    total = ok = 0
    for n in range(3, 11):
        for t in range(trials):
            seed = seed0 + 100 * n + t
            fleet, _ = generate_small(n, seed, None, noise)
            rng = np.random.default_rng(seed)
            rows = [json.loads(x) for x in fleet.lines]
            i = int(rng.integers(n))
            what = plant(rows[i], GROSS, rng)
            verdict, _ = judge([json.dumps(r) for r in rows], fleet.hosts)
            flagged = {h for h, v in verdict.items() if v != "pass"}
            total += 1
            if flagged == {rows[i]["node"]}:
                ok += 1
            else:
                bad.append(f"n={n} seed {seed} {what}: flagged {sorted(flagged)}, planted {rows[i]['node']}")
    print(f"flagged, and only that host: {ok}/{total}")
    for b in bad[:8]:
        print(f"  {b}")


def populations(seed0: int) -> None:
    print("\n## populations, 200 hosts")
    cases = [("70% run GEMM and NCCL 40% slow", 0.7, 0.6), ("30% run 60% faster", 0.3, 1.6)]
    for trial in range(3):
        for what, share, factor in cases:
            seed = seed0 + trial * 10 + int(share * 10)
            fleet = generate(200, seed=seed, fault_fraction=0.0)
            rng = np.random.default_rng(seed)
            rows = [json.loads(x) for x in fleet.lines]
            for r in rows:
                if rng.random() < share:
                    for k in list(r):
                        if k.startswith(("gemm-flops/", "nccl-bw/")) and not k.endswith("return_code"):
                            r[k] = r[k] / factor if "_time" in k else r[k] * factor
            verdict, res = judge([json.dumps(r) for r in rows], fleet.hosts)
            splits = res.populations  # type: ignore[attr-defined]
            sizes = [f"{len(s.groups[0])}+{len(s.groups[1])} ({s.apart * 100:.0f}% apart)" for s in splits]
            print(f"{what}: gate {'passed' if res.gate.passed else 'FAILED'}; splits: {sizes or 'none'}")  # type: ignore[attr-defined]
    for shift in (0.01, 0.02):
        quiet = 0
        for trial in range(5):
            fleet = generate(
                200, seed=seed0 + 500 + trial, fault_fraction=0.0, benign_shift=shift, benign_fraction=0.4
            )
            _, res = judge(fleet.lines, fleet.hosts)
            quiet += not res.populations  # type: ignore[attr-defined]
        print(f"benign batch {shift * 100:.0f}% apart (40% of hosts): no split in {quiet}/5 fleets")


def large(n: int, seeds: list[int], noise: tuple[float, float]) -> None:
    print(
        f"\n## large fleets, {n} hosts (seen: tests/synth/fleet.py's kinds; unseen: tests/synth/small.py's), "
        f"each family's noise drawn from {noise[0] * 100:g}-{noise[1] * 100:g}%"
    )
    planted: Counter = Counter()
    found: Counter = Counter()
    fp = healthy = 0
    for seed in seeds:
        fleet = generate(n, seed=seed, noise=noise)
        rng = np.random.default_rng(seed + 17)
        rows = [json.loads(x) for x in fleet.lines]
        faults = dict(fleet.faults)
        free = [i for i, r in enumerate(rows) if r["node"] not in faults]
        pick = rng.choice(len(free), size=10 * len(UNSEEN), replace=False)
        for j, idx in enumerate(pick):
            kind = UNSEEN[j % len(UNSEEN)]
            plant(rows[free[idx]], kind, rng)
            faults[rows[free[idx]]["node"]] = f"unseen:{kind}"
        verdict, _ = judge([json.dumps(r) for r in rows], fleet.hosts)
        for h, kind in faults.items():
            planted[kind] += 1
            found[kind] += verdict[h] != "pass"
        for h in fleet.hosts:
            if h not in faults:
                healthy += 1
                fp += verdict[h] != "pass"
    for kind in sorted(planted):
        print(f"{kind:28} {found[kind]:>5}/{planted[kind]:<5} {found[kind] / planted[kind] * 100:6.1f}%")
    tp, tt = sum(found.values()), sum(planted.values())
    print(
        f"recall {tp}/{tt} = {tp / tt * 100:.2f}%; false positives {fp}/{healthy} = {fp / healthy * 100:.3f}%"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="3-16")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--noise", default="0.003,0.01", help="range of each family's noise in the small fleets")
    ap.add_argument("--large", type=int, default=2000)
    ap.add_argument("--large-seeds", default="7001,7002,7003,7004")
    ap.add_argument(
        "--large-noise",
        default="0.003,0.01;0.003,0.03",
        help="noise ranges of the large fleets, ';' between them (the small fleets' range, then a wider one)",
    )
    ap.add_argument("--only", default="corpus,small,shaped,gross,populations,large")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.sizes.split("-"))
    noise = tuple(float(x) for x in args.noise.split(","))
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    only = set(args.only.split(","))
    if "corpus" in only:
        corpus()
    if "small" in only:
        small(list(range(lo, hi + 1)), args.trials, noise, 880_000)  # type: ignore[arg-type]
    if "shaped" in only:
        shapes = noise_shapes()
        if shapes is None:
            print("\n## small fleets shaped like the corpus: no corpus recorded")
        else:
            print(f"\ncorpus noise shapes: {shapes.describe()}")
            small(list(range(lo, hi + 1)), args.trials, noise, 870_000, shapes)  # type: ignore[arg-type]
    if "gross" in only:
        gross(args.trials, noise, 990_000)  # type: ignore[arg-type]
    if "populations" in only:
        populations(660_000)
    if "large" in only and args.large:
        for rng_text in args.large_noise.split(";"):
            lo_n, hi_n = (float(x) for x in rng_text.split(","))
            large(args.large, [int(s) for s in args.large_seeds.split(",")], (lo_n, hi_n))


if __name__ == "__main__":
    main()
