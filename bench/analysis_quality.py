"""Detection quality of ``sb-fleet report`` with no rules and no baseline, on fresh synthetic fleets.

For each seed a new fleet is generated (seeds differ from the tests'), with
every family's run-to-run spread drawn from 0.3-3%, a benign sub-population
1.5% slower (its share drawn per fleet, or fixed with --benign), and planted
faults: one GPU 4-20% slow on GEMM, half-speed PCIe on one GPU, slow
all-reduce, a degraded IB port, slow kernel launch on one GPU, lower model
throughput, failed benchmarks, missing hosts. Prints recall per fault type
and the false-positive rate among healthy hosts. With ``--lownoise`` the fleets
come from ``tests/synth/lownoise.py``: every family's spread is 0.2-0.8% and one
more fault is planted, one GPU's tensor-core GEMMs all 1.5-3% low; ``--heavy-tails``
adds rare wild values (Student-t jitter). Usage::

    python bench/analysis_quality.py [--hosts 5000] [--seeds 9001,9002,9003] [--lownoise]
    python bench/analysis_quality.py --lownoise --fleet '{"floor_sigmas": 0}'   # the fixed floors, for comparison
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sb_fleet.config.gatespec import Gates  # noqa: E402
from sb_fleet.report.analyse import report  # noqa: E402
from tests.synth.fleet import FAULTS, generate  # noqa: E402
from tests.synth.lownoise import TC_FAULT, generate_lownoise  # noqa: E402


def score(
    n: int,
    seed: int,
    benign: float | None,
    fault_fraction: float,
    gates: Gates,
    per_gpu: bool,
    lownoise: bool = False,
    heavy_tails: bool = False,
) -> tuple[Counter, Counter, int, int, list]:
    kw = {"benign_fraction": benign, "fault_fraction": fault_fraction, "benign_per_gpu": per_gpu}
    if lownoise:
        fleet = generate_lownoise(n, seed=seed, heavy_tails=heavy_tails, **kw)  # type: ignore[arg-type]
    else:
        fleet = generate(n, seed=seed, **kw)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory(prefix="sb-fleet-quality-") as d:
        run = Path(d)
        (run / "manifest.json").write_text('{"schema_version": 1}')
        (run / "results-summary.jsonl").write_text(fleet.text)
        hosts = [{"name": h, "groups": ["gpu"]} for h in fleet.hosts]
        (run / "hosts.json").write_text(json.dumps({"schema_version": 1, "hosts": hosts}))
        r = report(run, gates=gates)
    verdict = {h.name: h for h in r.hosts}
    planted = Counter(fleet.faults.values())
    found = Counter(kind for h, kind in fleet.faults.items() if verdict[h].verdict != "pass")
    healthy = fleet.healthy()
    fps = [verdict[h] for h in healthy if verdict[h].verdict != "pass"]
    return planted, found, len(fps), len(healthy), fps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=5000)
    ap.add_argument("--seeds", default="9001,9002,9003,9004")
    ap.add_argument(
        "--benign", type=float, default=None, help="share of the benign sub-population (default: random)"
    )
    ap.add_argument("--faults", type=float, default=0.04, help="share of hosts with a planted fault")
    ap.add_argument("--fleet", default="{}", help='JSON for the gates\' fleet section, e.g. {"threshold": 5}')
    ap.add_argument(
        "--benign-per-gpu", action="store_true", help="the slower batch is a share of the GPUs, not of hosts"
    )
    ap.add_argument("--lownoise", action="store_true", help="0.2-0.8%% noise and the tensor-core fault")
    ap.add_argument("--heavy-tails", action="store_true", help="with --lownoise: Student-t jitter too")
    args = ap.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; fleet settings: {args.fleet}")
    gates = Gates.model_validate({"fleet": json.loads(args.fleet)})
    planted: Counter = Counter()
    found: Counter = Counter()
    fp = healthy = 0
    examples = []
    for seed in (int(s) for s in args.seeds.split(",")):
        p, f, nfp, nh, fps = score(
            args.hosts,
            seed,
            args.benign,
            args.faults,
            gates,
            args.benign_per_gpu,
            args.lownoise,
            args.heavy_tails,
        )
        planted += p
        found += f
        fp += nfp
        healthy += nh
        examples += fps[:2]
        print(f"seed {seed}: recall {sum(f.values())}/{sum(p.values())}, false positives {nfp}/{nh}")
    print(f"\n{'fault':22} {'found':>7} {'planted':>8} {'recall':>8}")
    for kind in (*FAULTS, TC_FAULT) if args.lownoise else FAULTS:
        n = planted[kind]
        print(f"{kind:22} {found[kind]:>7} {n:>8} {found[kind] / n * 100 if n else 0:>7.1f}%")
    total_p, total_f = sum(planted.values()), sum(found.values())
    print(f"{'all faults':22} {total_f:>7} {total_p:>8} {total_f / total_p * 100:>7.2f}%")
    print(f"false positives: {fp} of {healthy} healthy hosts = {fp / healthy * 100:.3f}%")
    for h in examples[:5]:
        i = h.issues[0]
        print(f"  e.g. {h.name}: [{i.check}] {i.metric}: {i.detail}")


if __name__ == "__main__":
    main()
