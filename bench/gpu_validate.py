"""Issue 29's checks that need a GPU machine, in one script: run it as root on a host with an NVIDIA GPU.

    .venv/bin/python bench/gpu_validate.py [--out bench/gpu-results/<date>-<gpu>-validate] [--skip-suite]

Three phases; each prints ``CHECK name: PASS|FAIL|SKIP detail`` and everything lands in OUT (with
``checks.json``, the run directories and the console log):

1. **suite figures** (the issue's "with a GPU machine" list):
   * kernel-launch ``event_time`` within 20% of SuperBench's published figure (its test data: 5.5-6.0 us
     event, ~9-10.7 us wall on A100-class GPUs; compare per generation), built with nvcc or NVRTC;
   * pytorch-resnet50 at the default batch (0: 256 on an 80 GB GPU): fp16 training >= 1.8x fp32, and
     within 30% of NVIDIA's published figure where ``sb_fleet.analysis.figures.model_checks.EXPECTED``
     has one for this GPU; device busy >= 90% (not host-bound).
2. **validate end to end**: the machine is the fleet. One loopback sshd "host" (tests/fleetlib,
   logging in as an unprivileged user) runs ``sb-fleet validate -c configs/default.yaml`` with
   ``proc_num`` set to this machine's GPU count (the config assumes 8). Checks: exit 0; the facts
   record the GPU model, UUIDs, driver and CUDA version; report.md has "% of peak" figures; no
   benchmark reads "not run" without a reason.
3. **planted competitor**: three loopback hosts on the same GPU, run one after another (``forks: 1``),
   a short GPU config (gemm-flops, kernel-launch, gpu-stream). While host ``gpu-1``'s benchmarks run,
   this script starts a GPU competitor (a bf16 matmul loop on the same GPU, its own child process,
   stopped by pid when that host's benchmark processes are gone). sb-fleet has no host variable that
   starts a command on a host (inventory data never becomes code), so the plant is done here, keyed by
   the host's name and its benchmark processes. Checks: ``gpu-1`` is flagged (verdict fail, issues on
   GPU figures), ``gpu-0`` and ``gpu-2`` pass.

Nothing here runs without a GPU: without one it prints SKIP for every check and exits 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
SUITE = ROOT / "benchmarks"
SB_FLEET = str(Path(sys.executable).parent / "sb-fleet")
SUPERBENCH_EVENT_MS = (0.0055, 0.0060)  # SuperBench's analyzer test data, kernel-launch/event_time
RESULTS: list[dict] = []

COMPETITOR = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + {seconds}
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
"""

SHORT_GPU_CONFIG = """version: v0.4
fleet:
  workspace: ~/.sb-fleet/hosts/{{host}}
  venv: true
  require_gpu: true
  forks: 1
  known_hosts: {known_hosts}
superbench:
  enable: null
  benchmarks:
    gemm-flops:
      enable: true
      timeout: 600
      modes: [{{name: local, proc_num: {gpus}, prefix: "CUDA_VISIBLE_DEVICES={{proc_rank}}", parallel: yes}}]
      parameters: {{precision: [bf16_tc, fp16_tc], num_warmup: 5, num_steps: 50}}
    kernel-launch:
      enable: true
      timeout: 300
      modes: [{{name: local, proc_num: {gpus}, prefix: "CUDA_VISIBLE_DEVICES={{proc_rank}}", parallel: yes}}]
      parameters: {{num_steps: 20000, interval: 100}}
    gpu-stream:
      enable: true
      timeout: 300
      modes: [{{name: local, proc_num: {gpus}, prefix: "CUDA_VISIBLE_DEVICES={{proc_rank}}", parallel: yes}}]
"""


def record(name: str, ok: bool | None, detail: str, **data) -> None:
    status = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
    RESULTS.append({"check": name, "status": status, "detail": detail, **data})
    print(f"CHECK {name}: {status} {detail}", flush=True)


def gpus() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln for ln in out.splitlines() if ln.startswith("GPU ")]


def run_suite(name: str, params: dict, out: Path) -> dict:
    """One benchmark through the suite's harness in a fresh process; its result envelope."""
    code = (
        "import json, sys; from sb_bench.core.harness import run_benchmark; "
        f"print(json.dumps(run_benchmark({name!r}, json.loads(sys.argv[1]))))"
    )
    env = {**os.environ, "PYTHONPATH": str(SUITE)}
    r = subprocess.run(
        [sys.executable, "-c", code, json.dumps(params)], capture_output=True, text=True, env=env
    )
    (out / f"{name}.log").write_text(r.stdout + r.stderr)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"status": "failed", "reason": r.stderr[-500:], "result": {}}


def phase_suite(out: Path, gpu_name: str) -> None:
    env = run_suite("kernel-launch", {"num_steps": 200000, "interval": 2000}, out)
    ev = (env.get("result", {}).get("event_time") or [None])[0]
    wall = (env.get("result", {}).get("wall_time") or [None])[0]
    if ev is None:
        record("kernel-launch-event", False, f"no event_time: {env.get('reason')}")
    else:
        mid = sum(SUPERBENCH_EVENT_MS) / 2
        record(
            "kernel-launch-event",
            abs(ev - mid) / mid <= 0.2,
            f"event {ev * 1e3:.2f} us, wall {wall * 1e3:.2f} us vs SuperBench's 5.5-6.0 us event (A100-era test data)",
            event_ms=ev,
            wall_ms=wall,
        )
    params = {
        "precision": ["float32", "float16"],
        "model_action": ["train"],
        "num_warmup": 20,
        "num_steps": 100,
    }
    env = run_suite("pytorch-resnet50", params, out)
    r = env.get("result", {})
    fp32, fp16 = (r.get("fp32_train_throughput") or [None])[0], (r.get("fp16_train_throughput") or [None])[0]
    if not fp32 or not fp16:
        record("resnet50-fp16-vs-fp32", False, f"missing figures: {env.get('reason')}")
        return
    record(
        "resnet50-fp16-vs-fp32",
        fp16 >= 1.8 * fp32,
        f"fp16 {fp16:.0f} / fp32 (TF32) {fp32:.0f} img/s = {fp16 / fp32:.2f}x",
    )
    for p in ("fp32", "fp16"):
        busy = (r.get(f"{p}_train_device_busy") or [None])[0]
        record(
            f"resnet50-{p}-device-busy", busy is not None and busy >= 90, f"{busy}% (host-bound below 90%)"
        )
    from sb_fleet.analysis.figures.model_checks import expected_for

    for p, value in (("fp32", fp32), ("fp16", fp16)):
        e = expected_for("pytorch-resnet50", p, "train", [gpu_name])
        if e is None:
            record(f"resnet50-{p}-vs-published", None, f"no published figure tabled for {gpu_name}")
        else:
            record(
                f"resnet50-{p}-vs-published",
                abs(value / e.value - 1) <= 0.3,
                f"{value:.0f} vs {e.value:.0f} img/s ({value / e.value:.0%}; {e.source})",
            )


def validate(inv: Path, cfg: Path, run_dir: Path, log: Path) -> int:
    r = subprocess.run([SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir)],
                       capture_output=True, text=True)  # fmt: skip
    log.write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    return r.returncode


def phase_validate(out: Path, n_gpus: int) -> None:
    from fleetlib import SshFleet

    fleet = SshFleet(1, base=40, subnet="127.0.29").start()
    try:
        body = (ROOT / "configs" / "default.yaml").read_text()
        body = re.sub(r"proc_num: 8", f"proc_num: {n_gpus}", body)
        body = body.replace("  venv: true", f"  venv: true\n  known_hosts: {fleet.known_hosts}", 1)
        cfg = fleet.config(body, "gpu-default.yaml")
        run_dir = out / "validate-default"
        rc = validate(fleet.inventory(), cfg, run_dir, out / "validate-default.log")
        record("validate-exit", rc == 0, f"sb-fleet validate exit {rc}")
        facts = next(iter(sorted((run_dir / "facts").glob("*.json"))), None)
        data = json.loads(facts.read_text()) if facts else {}
        missing = [k for k in ("gpu_model", "driver_version", "cuda_version") if not data.get(k)]
        uuids = json.dumps(data).count("GPU-")
        record("validate-facts", not missing and uuids > 0, f"missing {missing}; {uuids} GPU UUID(s)")
        report = (run_dir / "report.md").read_text() if (run_dir / "report.md").is_file() else ""
        pct = len(re.findall(r"\d+\.\d%", report))
        record("validate-percent-of-peak", pct > 0, f"{pct} % figures in report.md")
        bare = [ln for ln in report.splitlines() if "not run" in ln and ":" not in ln.split("not run", 1)[1]]
        record(
            "validate-not-run-has-reason",
            not bare,
            f"{len(bare)} 'not run' line(s) without a reason: {bare[:3]}",
        )
    finally:
        fleet.cleanup()


class Competitor(threading.Thread):
    """Runs a GPU competitor while host ``victim``'s benchmark processes exist."""

    def __init__(self, fleet, victim: str, seconds: int = 900):  # noqa: ANN001
        super().__init__(daemon=True)
        self.fleet, self.victim, self.seconds = fleet, victim, seconds
        self.done = threading.Event()
        self.started_at: float | None = None
        self.proc: subprocess.Popen | None = None

    def run(self) -> None:
        while not self.done.is_set() and not self.fleet.processes(self.victim):
            time.sleep(0.2)
        if self.done.is_set():
            return
        self.started_at = time.time()
        self.proc = subprocess.Popen([sys.executable, "-c", COMPETITOR.format(seconds=self.seconds)])
        while not self.done.is_set() and self.fleet.processes(self.victim):
            time.sleep(0.5)
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)


def phase_competitor(out: Path, n_gpus: int) -> None:
    from fleetlib import SshFleet

    fleet = SshFleet(3, base=50, subnet="127.0.29").start()
    victim = fleet.hosts[1].name
    comp = Competitor(fleet, victim)
    try:
        cfg = fleet.config(
            SHORT_GPU_CONFIG.format(known_hosts=fleet.known_hosts, gpus=n_gpus), "gpu-short.yaml"
        )
        comp.start()
        run_dir = out / "validate-competitor"
        rc = validate(fleet.inventory(), cfg, run_dir, out / "validate-competitor.log")
        comp.done.set()
        comp.stop()
        record("competitor-planted", comp.started_at is not None, f"competitor started on {victim}'s turn")
        report = (
            json.loads((run_dir / "report.json").read_text()) if (run_dir / "report.json").is_file() else {}
        )
        verdicts = {h["name"]: h.get("verdict") for h in report.get("hosts", [])}
        others = {n: v for n, v in verdicts.items() if n != victim}
        record(
            "competitor-flagged",
            verdicts.get(victim) == "fail" and all(v == "pass" for v in others.values()) and len(others) == 2,
            f"exit {rc}; verdicts {verdicts}",
        )
    finally:
        comp.done.set()
        comp.stop()
        fleet.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--skip-suite", action="store_true", help="skip phase 1 (the suite's figures)")
    args = ap.parse_args()
    found = gpus()
    if not found:
        for name in ("kernel-launch-event", "resnet50-fp16-vs-fp32", "validate-exit", "competitor-flagged"):
            record(name, None, "no NVIDIA GPU here (nvidia-smi -L lists none): run on a GPU machine")
        return 0
    gpu_name = found[0].split(":", 1)[1].split("(UUID")[0].strip()
    day = dt.date.today().isoformat()
    out = (
        args.out
        or ROOT / "bench" / "gpu-results" / f"{day}-{re.sub(r'[^A-Za-z0-9]+', '-', gpu_name)}-validate"
    )
    out.mkdir(parents=True, exist_ok=True)
    if not args.skip_suite:
        phase_suite(out, gpu_name)
    phase_validate(out, len(found))
    phase_competitor(out, len(found))
    (out / "checks.json").write_text(
        json.dumps({"gpu": gpu_name, "gpus": len(found), "date": day, "checks": RESULTS}, indent=1)
    )
    return 1 if any(r["status"] == "FAIL" for r in RESULTS) else 0


if __name__ == "__main__":
    sys.exit(main())
