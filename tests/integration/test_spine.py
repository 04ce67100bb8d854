"""The spine end to end on a real fleet: the default fleet's main command, timeouts, host keys, collectives,
bad inputs. Nothing here judges a measured figure against other hosts (it runs beside other tests in CI);
validate's verdicts on four hosts and an unreachable fifth are in test_spine_verdicts.py (CI's quiet part)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from .conftest import FLEET_CONFIG, ROOT, sb_fleet

pytestmark = pytest.mark.integration


def _report(run_dir: Path) -> dict:
    return json.loads((run_dir / "report.json").read_text())


def _summary(run_dir: Path) -> dict[str, dict]:
    lines = (run_dir / "results-summary.jsonl").read_text().splitlines()
    return {d["node"]: d for d in map(json.loads, lines)}


def _find_bench_pid(workspace: str, deadline: float) -> int | None:
    """The benchmark process of one simulated host, found by its working directory."""
    while time.monotonic() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if cwd == workspace and b"exec" in cmd and b"sb_bench" in cmd:
                return int(pid)
        time.sleep(0.1)
    return None


def test_a_hung_benchmark_is_killed_at_its_timeout_and_the_others_finish(fleet, tmp_path):
    cfg = fleet.config(
        FLEET_CONFIG.replace(
            "timeout: 120\n      parameters: {m: 128", "timeout: 25\n      parameters: {duration: 1, m: 128"
        ),
        "cfg-timeout.yaml",
    )
    inv = fleet.inventory(name="inv4.ini")
    run_dir = tmp_path / "run"
    victim = fleet.hosts[1]
    box: dict = {}

    def stop_victim() -> None:
        pid = _find_bench_pid(victim.workspace, time.monotonic() + 120)
        box["pid"] = pid
        if pid:
            os.kill(pid, signal.SIGSTOP)  # a real hang: the process no longer runs

    t = threading.Thread(target=stop_victim)
    t.start()
    t0 = time.monotonic()
    r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir))
    elapsed = time.monotonic() - t0
    t.join()
    assert box.get("pid"), "never saw the victim's benchmark process"
    assert r.returncode == 1, r.stdout + r.stderr  # a host failed (timeout), no infrastructure trouble
    outcomes = json.loads((run_dir / "outcomes.json").read_text())["hosts"]
    assert outcomes[victim.name]["outcome"] == "timeout"
    assert "timeout" in outcomes[victim.name]["reason"]
    others = [h.name for h in fleet.hosts if h is not victim]
    assert all(outcomes[h]["outcome"] == "ok" for h in others)
    summary = _summary(run_dir)
    assert summary[victim.name]["gemm-flops/return_code"] == 124
    assert all(summary[h]["gemm-flops/fp32_flops"] > 0 for h in others)
    with pytest.raises(ProcessLookupError):
        os.kill(box["pid"], 0)  # the hung process is gone
    assert elapsed < 240


def test_dry_run_touches_no_host(fleet, fleet_config, tmp_path):
    inv = fleet.inventory(extra_hosts=[("ghost", "127.0.1.98", 1)], name="inv-dry.ini")
    run_dir = tmp_path / "dry"
    r = sb_fleet("validate", "--dry-run", "-i", str(inv), "-c", str(fleet_config), "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stderr
    assert "step01" in r.stdout and "gemm-flops" in r.stdout
    assert (run_dir / "playbooks" / "deploy.yml").exists()
    assert not (run_dir / "ansible").exists() and not (run_dir / "raw").exists()


def test_default_fleet_runs_the_main_command(tmp_path):
    """The README's main job: validate on the built-in one-machine fleet (no SSH)."""
    run_dir = tmp_path / "default"
    r = sb_fleet("validate", "--run-dir", str(run_dir), timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "report:" in r.stdout
    summary = _summary(run_dir)
    assert list(summary) == ["localhost"]
    assert summary["localhost"]["gemm-flops/fp32_flops"] > 0
    assert _report(run_dir)["hosts"][0]["verdict"] == "pass"


def test_bad_config_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "superbench:\n  benchmarks:\n    gemm-flops:\n      modes:\n        - name: local\n          proc_nums: 2\n"
    )
    r = sb_fleet("validate", "-c", str(bad), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert str(bad) in err and "line 6" in err and "proc_nums" in err


def test_bad_inventory_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "inv.yml"
    bad.write_text("all:\n  hosts:\n    a:\n      ansible_port: notaport\n")
    r = sb_fleet("deploy", "-i", str(bad), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2
    assert "notaport" in r.stderr and "host a" in r.stderr and "Traceback" not in r.stderr


def test_changed_host_key_is_refused(fleet, fleet_config, tmp_path):
    """A host whose key is not the one in known_hosts is refused by Ansible and by the collector."""
    kh = Path(str(fleet.known_hosts) + ".wrong")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()
    h = fleet.hosts[0]
    lines = [ln for ln in fleet.known_hosts.read_text().splitlines() if not ln.startswith(f"[{h.addr}]:")]
    kh.write_text("\n".join([*lines, f"[{h.addr}]:{h.port} {other[0]} {other[1]}"]) + "\n")
    cfg = fleet.config(FLEET_CONFIG.replace("@KNOWN_HOSTS@", str(kh)), "cfg-wrongkey.yaml")
    run_dir = tmp_path / "run"
    r = sb_fleet(
        "deploy",
        "-i",
        str(fleet.inventory(name="inv-key.ini")),
        "-c",
        str(cfg),
        "--run-dir",
        str(run_dir),
        "--limit",
        f"{h.name},{fleet.hosts[1].name}",
    )
    assert r.returncode == 3
    outcomes = json.loads((run_dir / "outcomes.json").read_text())["hosts"]
    assert outcomes[h.name]["outcome"] == "hostkey-mismatch"
    assert outcomes[fleet.hosts[1].name]["outcome"] == "ok"


MULTI_NODE = """\
version: v0.4
fleet: {known_hosts: "@KNOWN_HOSTS@", venv: true, install_requirements: never, master_port: 29611,
        env: {GLOO_SOCKET_IFNAME: lo}}
superbench:
  benchmarks:
    nccl-bw:
      timeout: 180
      modes:
        - {name: torch.distributed, proc_num: 1, node_num: 2, env: {OMP_NUM_THREADS: 1}}
      parameters: {operation: [allreduce], minbytes: 64K, maxbytes: 64K, num_warmup: 1, num_steps: 4}
"""


def test_collective_across_two_hosts_with_torchrun(fleet, tmp_path):
    """node_num 2: torchrun on two hosts rendezvous at the first one (gloo on CPU)."""
    cfg = fleet.config(MULTI_NODE, "cfg-multi.yaml")
    inv = fleet.inventory(name="inv-multi.ini")
    run_dir = tmp_path / "run"
    r = sb_fleet(
        "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--limit", "host001,host002"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["steps"][0]["groups"][0]["hosts"] == ["host001", "host002"]
    summary = _summary(run_dir)
    for node in ("host001", "host002"):
        rec = summary[node]
        assert rec["nccl-bw/return_code"] == 0
        # 2 ranks in the world: all-reduce busbw = algbw * 2(n-1)/n = algbw
        assert rec["nccl-bw/allreduce_65536_busbw"] == pytest.approx(rec["nccl-bw/allreduce_65536_algbw"])
        ranks = json.loads(
            (
                run_dir
                / "raw"
                / node
                / "results"
                / "nccl-bw"
                / ("rank0.json" if node == "host001" else "rank1.json")
            ).read_text()
        )
        assert ranks["world_size"] == 2


def test_a_run_directory_given_relative_keeps_the_plays_extra_variables(tmp_path):
    """``make demo``'s case: the default fleet (localhost, ansible_connection=local: Ansible's playbook,
    not sb-fleet's own ssh) and the default run directory, ``runs/<id>``, relative to the working
    directory. ansible-runner looks a relative extra-vars file up under its private data dir: every
    extra variable was lost ('sb_exec_timeout' is undefined) until the file went by its absolute path."""
    import shutil

    cfg = tmp_path / "noop.yaml"
    cfg.write_text(
        "version: v0.4\n"
        "fleet: {venv: false, install_requirements: never, min_free_disk_gb: 0}\n"
        "superbench:\n"
        "  benchmarks:\n"
        "    noop: {enable: true, timeout: 60, modes: [{name: local, proc_num: 1, parallel: no}],\n"
        "           parameters: {num_warmup: 0, num_steps: 1}}\n"
        "gates: {fleet: {enabled: false}}\n"
    )
    rel = f"runs/test-relative-{os.getpid()}-{time.monotonic_ns()}"
    run_dir = ROOT / rel  # sb_fleet() runs in the checkout's root
    try:
        r = sb_fleet("validate", "-i", "inventories/default.ini", "-c", str(cfg), "--run-dir", rel)
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
        out = json.loads((run_dir / "outcomes.json").read_text())
        assert out["hosts"]["localhost"]["outcome"] == "ok", out
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
