"""Synthetic nights for the history tests: the same hosts every night with persistent per-host and
per-GPU offsets, small night-to-night noise, and chosen regressions on chosen nights.

The offsets are wide (the fleet spread) and the noise small, so a regression of a few percent stays
inside the fleet spread: only a host's own past shows it.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

GPUS = 8
NICS = 4
GEMM = {"fp16_tc_flops": 280000.0, "tf32_tc_flops": 128000.0, "fp64_flops": 9000.0}
NCCL = "nccl-bw/allreduce_8589934592_busbw"
KERNEL = "kernel-launch/event_time"


def columns() -> list[str]:
    cols = [f"gemm-flops/{m}:{g}" for m in GEMM for g in range(GPUS)]
    cols += [f"{KERNEL}:{g}" for g in range(GPUS)]
    cols += [f"ib-loopback/ib_write_8388608_ib{n}_bw" for n in range(NICS)]
    cols += [NCCL, "mem-bw/h2d_bw", "gemm-flops/return_code:0"]
    return cols


BASE = {
    "gemm-flops/fp16_tc_flops": 280000.0,
    "gemm-flops/tf32_tc_flops": 128000.0,
    "gemm-flops/fp64_flops": 9000.0,
    KERNEL: 0.0052,
    "ib-loopback/ib_write_8388608_ib#_bw": 24000.0,
    NCCL: 180.0,
    "mem-bw/h2d_bw": 25.0,
}


@dataclass
class Nights:
    """``n`` nights of ``hosts`` hosts; ``regress[night] = {host: (metric prefix, factor, gpu or None)}``."""

    hosts: int = 200
    seed: int = 7
    host_spread: float = 0.03  # persistent per-host offset (the fleet spread), relative sd
    gpu_spread: float = 0.015  # persistent per-GPU offset on top
    noise: float = 0.004  # night-to-night noise, relative sd
    regress: dict[int, dict[str, tuple[str, float, int | None]]] = field(default_factory=dict)
    shift: dict[int, dict[str, float]] = field(
        default_factory=dict
    )  # night -> metric prefix -> factor, every host
    start: dt.datetime = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.names = [f"node{i:04d}" for i in range(self.hosts)]
        self.cols = columns()
        self._host_off = rng.normal(0, self.host_spread, size=(self.hosts, 1))
        self._gpu_off = rng.normal(0, self.gpu_spread, size=(self.hosts, GPUS + NICS))
        self._rng = rng
        self.uuids = [[f"GPU-{i:04d}-{g}-{self.seed}" for g in range(GPUS)] for i in range(self.hosts)]

    def values(self, night: int) -> np.ndarray:
        rng = np.random.default_rng(self.seed * 1000 + night)
        out = np.empty((self.hosts, len(self.cols)))
        for c, col in enumerate(self.cols):
            base_name, _, rank = col.partition(":")
            if "return_code" in col:
                out[:, c] = 0.0
                continue
            key = base_name
            dev = None
            if "_ib" in col:
                key = "ib-loopback/ib_write_8388608_ib#_bw"
                dev = GPUS + int(col.split("_ib")[1].split("_")[0])
            elif rank:
                dev = int(rank)
            off = self._host_off[:, 0] + (self._gpu_off[:, dev] if dev is not None else 0.0)
            sign = -1.0 if key == KERNEL else 1.0  # a slow host has a longer launch time
            out[:, c] = BASE[key] * (1 + sign * off) * (1 + rng.normal(0, self.noise, self.hosts))
        for prefix, factor in self.shift.get(night, {}).items():
            for c, col in enumerate(self.cols):
                if col.startswith(prefix):
                    out[:, c] *= factor
        for host, (prefix, factor, gpu) in self.regress.get(night, {}).items():
            r = self.names.index(host)
            for c, col in enumerate(self.cols):
                if col.startswith(prefix) and (gpu is None or col.endswith(f":{gpu}")):
                    out[r, c] *= factor
        return out

    def write(self, night: int, run_dir: Path) -> Path:
        """One night as a run directory (manifest, hosts, facts with GPU UUIDs, results summary)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        when = self.start + dt.timedelta(days=night)
        (run_dir / "manifest.json").write_text(
            json.dumps(
                {
                    "schema_version": 2,
                    "tool": "sb-fleet",
                    "run_id": f"night-{night:03d}",
                    "created": when.isoformat(timespec="seconds"),
                    "commands": [],
                }
            )
        )
        (run_dir / "hosts.json").write_text(
            json.dumps({"schema_version": 1, "hosts": [{"name": h, "groups": []} for h in self.names]})
        )
        (run_dir / "facts").mkdir(exist_ok=True)
        for i, h in enumerate(self.names):
            facts = {
                "host": h,
                "gpu_model": "NVIDIA A100-SXM4-80GB",
                "driver_version": "550.54.15",
                "gpus": [
                    {"index": g, "uuid": u, "serial": "", "pci_bus_id": ""}
                    for g, u in enumerate(self.uuids[i])
                ],
            }
            (run_dir / "facts" / f"{h}.json").write_text(json.dumps(facts))
        vals = self.values(night)
        lines = []
        for i, h in enumerate(self.names):
            row = {"node": h}
            row.update({c: float(v) for c, v in zip(self.cols, vals[i], strict=True)})
            lines.append(json.dumps(row))
        (run_dir / "results-summary.jsonl").write_text("\n".join(lines) + "\n")
        return run_dir
