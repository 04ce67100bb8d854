"""Issue 35 on a real loopback fleet: steady hosts that disagree with no majority (``inconsistent``)
fail the gate only if validate's re-run shows the same groups again.

Four hosts run a CPU GEMM, each host's sshd (and so every process it starts) in a cgroup of its own
with a CPU quota: two hosts get a fifth of a core, two 0.6 of one. Each host measures steadily (the
quota's period is 10 ms, below a timed sample), the two pairs lie three times apart, and with 2 against 2
no majority agrees: the first pass finds the metric inconsistent. validate then re-runs the GEMM on the
four hosts (``confirm-splits/``):

* transient: the slow pair's quota is lifted as soon as the re-run's directory appears, so the groups do
  not show again: the gate passes and the report keeps the inconsistency, "did not show again";
* persistent: the quotas stay: the groups show again and the gate fails, naming them.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleetlib.corpus import CpuGroup
from tests.integration.conftest import sb_fleet, started_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CGROUP = Path("/sys/fs/cgroup/cpu")
# CPUs per host: the slow pair, the others. Everything a slow host runs (its SSH sessions, Python, the
# torch import) is slowed too: a tenth of a core took 198 s and 126 s for the two cases (CI, 11-28), a
# fifth 93 s and 72 s, for the same evidence (three times apart is far beyond the hosts' own noise).
SLOW, FAST = 0.2, 0.6

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: true
  install_requirements: never
  default_timeout: 120
  forks: 32
superbench:
  benchmarks:
    gemm-flops:
      timeout: 120
      modes: [{name: local, proc_num: 1, env: {OMP_NUM_THREADS: 1}}]
      parameters: {m: 256, n: 256, k: 256, num_warmup: 2, duration: 1.0, precision: [fp32]}
"""


@pytest.fixture(scope="module")
def qfleet():
    if not (CGROUP / "cpu.cfs_quota_us").exists():
        pytest.skip(f"no cgroup v1 cpu controller with CFS quotas at {CGROUP}: the fault cannot be planted")
    with started_fleet(4, "127.0.57") as f:
        yield f


@contextlib.contextmanager
def quotas(fleet, slow: set[str]) -> Iterator[dict[str, CpuGroup]]:  # noqa: ANN001
    groups: dict[str, CpuGroup] = {}
    try:
        for h in fleet.hosts:
            # a 10 ms period: the kernel's smallest quota is 1 ms (a fifth of a core is 2 ms of 10)
            g = CpuGroup(
                f"sb-test-noise-{h.name}", cpus=SLOW if h.name in slow else FAST, period_us=10_000
            ).__enter__()
            groups[h.name] = g
            g.add_tree(h.proc.pid)
        yield groups
    finally:
        for g in groups.values():
            g.__exit__(None, None, None)


def lift_when(path: Path, groups: list[CpuGroup], done: threading.Event) -> threading.Thread:
    """Give ``groups`` the fast quota as soon as ``path`` exists (validate's re-run starting)."""

    def run() -> None:
        while not done.is_set():
            if path.exists():
                for g in groups:
                    (g.path / "cpu.cfs_quota_us").write_text(str(int(g.period_us * FAST)))
                return
            time.sleep(0.02)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def validate(fleet, run_dir: Path) -> subprocess.CompletedProcess:  # noqa: ANN001
    cfg = fleet.config(CONFIG, "noise-confirm.yaml")
    return sb_fleet("validate", "-i", str(fleet.inventory()), "-c", str(cfg), "--run-dir", str(run_dir))


def inconsistency(run_dir: Path, r: subprocess.CompletedProcess) -> dict:
    doc = json.loads((run_dir / "report.json").read_text())
    incs = [i for i in doc["inconsistent"] if i["metric"] == "gemm-flops/fp32_flops"]
    assert len(incs) == 1, (doc["inconsistent"], doc["summary"], r.stdout[-2000:], r.stderr[-2000:])
    return incs[0] | {"gate": doc["gate"]}


@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_an_inconsistency_fails_the_gate_only_if_it_shows_again(qfleet, tmp_path, persistent):
    run_dir = tmp_path / "run"
    slow = {qfleet.hosts[0].name, qfleet.hosts[2].name}
    done = threading.Event()
    with quotas(qfleet, slow) as groups:
        if not persistent:
            lift_when(run_dir / "confirm-splits", [groups[n] for n in slow], done)
        try:
            r = validate(qfleet, run_dir)
        finally:
            done.set()
    inc = inconsistency(run_dir, r)
    # the planted fault: no group mixes a slow host with a fast one, and the two pairs are apart. Under
    # a loaded CI the two slow hosts can themselves measure apart (CI 11-28: 6.9 and 5.2, each with 2.3%
    # noise); a group of one slow host is then the detector being right, so it is allowed
    fast = {h.name for h in qfleet.hosts} - slow
    groups = [set(g["hosts"]) for g in inc["groups"]]
    assert all(g <= slow or g <= fast for g in groups), inc
    assert any(g <= slow for g in groups) and any(g <= fast for g in groups), inc
    rerun = json.loads((run_dir / "confirm-splits.json").read_text())
    assert [i["metric"] for i in rerun["inconsistent"]] == ["gemm-flops/fp32_flops"], rerun
    assert (run_dir / "confirm-splits" / "results-summary.jsonl").is_file()
    md = (run_dir / "report.md").read_text()
    if persistent:
        assert inc["confirmed"] is True and inc["confirmation"].startswith("showed again"), inc
        assert r.returncode == 1 and not inc["gate"]["passed"], (r.returncode, inc["gate"])
        assert "inconsistent" in inc["gate"]["policy"]
    else:
        assert inc["confirmed"] is False and inc["confirmation"].startswith("did not show again"), inc
        assert r.returncode == 0 and inc["gate"]["passed"], (r.returncode, inc["gate"], r.stderr[-2000:])
        assert "## All hosts passed" not in md  # what could not be judged is said
    assert "## Inconsistent" in md and inc["confirmation"].split(":")[0] in md
