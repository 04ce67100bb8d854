"""All checks of one host in one process: each probe in its own thread with its own timeout; one JSON
document out (``schema_version``, ``host``, ``checks`` [records], ``facts`` [versions and settings the
control node compares across the fleet], ``duration_s``).

    python -m sb_bench health --json [--sysfs DIR] [--procfs DIR] [--tool-dir DIR] [--workspace DIR]
                                     [--expect-b64 B64JSON] [--timeout S] [--host NAME]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sb_bench.health.gpu_checks import fabric_manager_record, gpu_facts, gpu_records
from sb_bench.health.gpu_source import GpuState, read_gpus
from sb_bench.health.infiniband import ib_records
from sb_bench.health.pci_bus import Seen, gpus_on_bus, read_amd
from sb_bench.health.record import FAIL, Env, Record, worst
from sb_bench.health.system import system_records
from sb_bench.health.xid import xid_record

SCHEMA_VERSION = 1
Probe = Callable[[Env, float], tuple[list[Record], dict[str, Any]]]


def _gpu(env: Env, timeout: float) -> tuple[list[Record], dict[str, Any]]:
    """The GPUs on the PCI bus (sysfs: quick, no driver involved), then what the driver stack sees, given
    ``timeout`` in all: a driver that hangs (NVML blocked in the kernel) is "0 seen", with the bus count,
    not a probe that never answers."""
    t0 = time.monotonic()
    bus = gpus_on_bus(env)
    got: dict[str, Any] = {}

    def ask() -> None:
        try:
            got["nvidia"] = read_gpus(env, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - the driver's failure is the finding
            got["nvidia"] = GpuState("", problem=f"{type(exc).__name__}: {exc}"[:300])
        if "AMD" in bus.vendors():
            try:
                got["amd"] = read_amd(env, timeout)
            except Exception as exc:  # noqa: BLE001
                got["amd"] = Seen("", problem=f"{type(exc).__name__}: {exc}"[:300])

    t = threading.Thread(target=ask, daemon=True, name="probe-gpu-driver")
    t.start()
    t.join(max(0.1, timeout - (time.monotonic() - t0)))
    late = f"no answer within {timeout:g} s (a hung driver?)"
    st = got.get("nvidia") or GpuState("", problem=f"NVML/nvidia-smi: {late}")
    amd = got.get("amd") or (Seen("", problem=f"amdsmi: {late}") if "AMD" in bus.vendors() else None)
    return gpu_records(st, env, bus, amd), gpu_facts(st)


def _fabric(env: Env, timeout: float) -> tuple[list[Record], dict[str, Any]]:
    r = fabric_manager_record(env)
    return ([r] if r else []), {}


PROBES: dict[str, Probe] = {
    "gpu": _gpu,
    "xid": lambda env, t: ([xid_record(env, t)], {}),
    "fabric_manager": _fabric,
    "infiniband": lambda env, t: ib_records(env),
    "host": lambda env, t: system_records(env, t),
}


def run_checks(env: Env, timeout: float = 10.0, probes: dict[str, Probe] | None = None) -> dict[str, Any]:
    """Every probe at once, each in a daemon thread with ``timeout`` (``expect.timeouts.<probe>`` if set);
    a probe that does not finish or raises becomes a failed record naming it."""
    probes = PROBES if probes is None else probes
    t0 = time.monotonic()
    results: dict[str, tuple[list[Record], dict[str, Any]] | BaseException] = {}
    limits = {n: float((env.expect.get("timeouts") or {}).get(n, timeout)) for n in probes}

    def work(name: str, fn: Probe) -> None:
        try:
            results[name] = fn(env, limits[name])
        except BaseException as exc:  # one probe's failure is that probe's record, not the host's crash
            results[name] = exc

    threads = {
        n: threading.Thread(target=work, args=(n, fn), daemon=True, name=f"probe-{n}")
        for n, fn in probes.items()
    }
    for t in threads.values():
        t.start()
    for n, t in threads.items():
        t.join(max(0.0, t0 + limits[n] + 1.0 - time.monotonic()))  # the probe's own tool timeouts come first
    records: list[dict[str, Any]] = []
    facts: dict[str, Any] = {}
    for n in probes:
        r = results.get(n)
        if r is None:
            records.append(
                Record(
                    f"{n}.probe",
                    FAIL,
                    None,
                    f"answers within {limits[n]:g} s",
                    f"{n} checks did not finish within {limits[n]:g} s (a hung driver or tool?)",
                ).to_json()
            )
        elif isinstance(r, BaseException):
            records.append(
                Record(
                    f"{n}.probe", FAIL, None, "runs without error", f"{type(r).__name__}: {str(r)[:300]}"
                ).to_json()
            )
        else:
            records.extend(x.to_json() for x in r[0])
            facts.update(r[1])
    return {
        "schema_version": SCHEMA_VERSION,
        "checks": records,
        "facts": facts,
        "verdict": worst([r["verdict"] for r in records]),
        "duration_s": round(time.monotonic() - t0, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sb_bench health", description="health checks of this host")
    ap.add_argument("--json", action="store_true", help="one JSON document (default: one line per check)")
    ap.add_argument("--sysfs", default="/sys")
    ap.add_argument("--procfs", default="/proc")
    ap.add_argument(
        "--tool-dir", default="", help="directory searched for nvidia-smi, dmesg, ... before PATH"
    )
    ap.add_argument("--workspace", default="", help="the directory whose free disk is checked")
    ap.add_argument("--expect-b64", default="", help="the expectations (a profile's rules), base64 JSON")
    ap.add_argument("--expect", default="", help="the expectations as a JSON file")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per probe")
    ap.add_argument("--host", default="", help="the name to report (default: this host's name)")
    ap.add_argument(
        "--slurm",
        action="store_true",
        help="as Slurm's HealthCheckProgram: drain this node on a failure (reason 'sb-fleet health: ...'), "
        "resume it when it passes again if the drain was ours (sb_bench.health.slurm_hook)",
    )
    ap.add_argument("--node", default="", help="with --slurm: the Slurm node name (default: SLURMD_NODENAME)")
    a = ap.parse_args(argv)
    expect: dict[str, Any] = {}
    if a.expect_b64:
        expect = json.loads(base64.b64decode(a.expect_b64))
    elif a.expect:
        expect = json.loads(Path(a.expect).read_text())
    env = Env(
        Path(a.sysfs),
        Path(a.procfs),
        Path(a.tool_dir) if a.tool_dir else None,
        Path(a.workspace) if a.workspace else None,
        expect if isinstance(expect, dict) else {},
    )
    doc = {"host": a.host or os.uname().nodename, **run_checks(env, a.timeout)}
    if a.json:
        print(json.dumps(doc, sort_keys=True, default=str))
    else:
        for r in doc["checks"]:
            shown = r["evidence"] or json.dumps(r["value"], default=str)
            print(f"{r['verdict']:4} {r['check']:22} {shown[:160]}")
    rc = 1 if doc["verdict"] == FAIL else 0
    if a.slurm:
        from sb_bench.health.slurm_hook import act, node_name

        src, line = act(doc, a.node or node_name())
        print(line)
        rc = max(rc, src)
    sys.stdout.flush()
    os._exit(rc)  # a probe's thread that hangs in the driver must not keep the process (daemon or not)


if __name__ == "__main__":
    main()
