"""Issue 21 on a real loopback fleet (127.0.52.x): data is never code, private state stays private, and
commands compose.

* every value a config or inventory hands the playbooks (fleet ``env``, ``python``, ``workspace``,
  ``cache``; inventory ``sb_workspace``, ``sb_python``), full of ``{{ }}``, ``{% %}``, ``$(...)`` and
  backticks, goes through validate, deploy, run, collect and cleanup: no payload runs (on the control
  node or a host: none of their marker files exists) and each value arrives verbatim (the benchmark
  process sees the env value, the workspace and Python are used at their literal paths);
* ``deploy`` after ``validate`` runs no benchmark (it used to start the first step again and overwrite
  its results);
* a host cut off inside validate's combined deploy-and-first-step ends with an outcome, and a later
  ``collect`` fetches the results it went on to write;
* ``run --resume`` after ``kill -9`` of sb-fleet says what happened (the earlier runner still runs);
* the SSH control socket directory is refused when another user owns it or it is a symlink.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from .conftest import SB_FLEET, sb_fleet, started_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _marker_dir() -> Path:
    d = Path(f"/tmp/sbf-dnc-{os.getpid()}-{uuid.uuid4().hex[:6]}")
    d.mkdir()
    os.chmod(d, 0o1777)  # the hosts' user could write a marker here too, if a payload ran as it
    return d


def shell_payload(markers: Path, tag: str) -> str:
    """Shell code only: an inventory's sb_workspace/sb_python with Jinja markers is refused at load."""
    m = markers / tag
    return f"v-$(touch {m}-subst)-`touch {m}-tick`-'\"x"


def payload(markers: Path, tag: str) -> str:
    """One value holding every kind of code, each of which would leave its own marker file."""
    m = markers / tag
    return (
        f"v-{{{{ lookup('pipe', 'touch {m}-jinja') }}}}-"
        f"{{% if lookup('pipe', 'touch {m}-block') %}}{{% endif %}}-"
        f"$(touch {m}-subst)-`touch {m}-tick`-'\"x"
    )


CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: @PYTHON@
  workspace: @WORKSPACE@
  cache: @CACHE@
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: 8
  ssh_connect_timeout: 5
  env: {SB_HOSTILE: @ENV@}
superbench:
  benchmarks:
    noop:
      timeout: 120
      modes: [{name: local, proc_num: 1, prefix: "printenv SB_HOSTILE;"}]
      parameters: {sleep: @SLEEP@}
gates:
  fleet: {enabled: false}
"""


@pytest.fixture(scope="module")
def dfleet():
    with started_fleet(2, "127.0.52", check_torch=False) as f:
        yield f


def _wrapper(dir_: Path, real: str) -> str:
    """An executable Python at ``dir_/python`` (``dir_`` may hold any characters) that runs ``real``;
    ``dir_`` is below the fleet's own directory, which the hosts' user can read."""
    dir_.mkdir(parents=True, exist_ok=True)
    py = dir_ / "python"
    py.write_text(f'#!/bin/sh\nexec {real} "$@"\n')
    os.chmod(py, 0o755)
    return str(py)


def _config(
    fleet, markers: Path, sleep: float = 0, name: str = "cfg.yaml", hostile: bool = True
) -> tuple[Path, dict]:  # noqa: ANN001
    tag = uuid.uuid4().hex[:6]
    values = {
        "python": _wrapper(fleet.dir / f"py-{tag}" / payload(markers, "python"), fleet.python),
        "workspace": f"{fleet.ws_root}/{{host}}-{payload(markers, 'workspace')}",
        "cache": f"{fleet.ws_root}/cache-{payload(markers, 'cache')}",
        "env": payload(markers, "env"),
    }
    if not hostile:
        values = {
            "python": fleet.python,
            "workspace": f"{fleet.ws_root}/{{host}}",
            "cache": "",
            "env": "plain",
        }
    body = CONFIG
    for k, v in values.items():
        body = body.replace(f"@{k.upper()}@", json.dumps(v))
    body = body.replace("@SLEEP@", str(sleep))
    return fleet.config(body, name), values


def _inventory(fleet, path: Path, markers: Path, hostile: bool = True) -> tuple[Path, dict]:  # noqa: ANN001
    """A YAML inventory: with ``hostile``, host 1 gets hostile sb_workspace and sb_python (host 2 the
    config's values); else every host its plain workspace."""
    hosts: dict = {}
    for i, h in enumerate(fleet.hosts):
        hosts[h.name] = {"ansible_host": h.addr, "ansible_port": h.port}
        if i == 0 and hostile:
            tag = uuid.uuid4().hex[:6]
            hosts[h.name]["sb_workspace"] = f"{h.workspace}-{shell_payload(markers, 'inv-ws')}"
            hosts[h.name]["sb_python"] = _wrapper(
                fleet.dir / f"ipy-{tag}" / shell_payload(markers, "inv-python"), fleet.python
            )
        elif not hostile:
            hosts[h.name]["sb_workspace"] = h.workspace
    common = {
        "ansible_user": "sbtest",
        "ansible_ssh_private_key_file": str(fleet.client_key),
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": common}}))
    return path, hosts


def _outcomes(run_dir: Path) -> dict[str, dict]:
    return json.loads((run_dir / "outcomes.json").read_text())["hosts"]


def _stage(run_dir: Path, stage: str) -> dict[str, dict]:
    return {o["host"]: o for o in json.loads((run_dir / "outcomes" / f"{stage}.json").read_text())["hosts"]}


def _no_markers(markers: Path, fleet) -> None:
    ran = sorted(p.name for p in markers.iterdir())
    home = fleet.home_files(lambda name: name.endswith("-subst"))
    assert not ran and not home, (ran, home)


def _results(run_dir: Path, host: str) -> Path:
    return run_dir / "raw" / host / "results"


def test_hostile_values_are_data_through_every_command(dfleet, tmp_path):
    markers = _marker_dir()
    try:
        cfg, values = _config(dfleet, markers)
        inv, hosts = _inventory(dfleet, tmp_path / "inv.yml", markers)
        run_dir = tmp_path / "run"
        r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir))
        _no_markers(markers, dfleet)
        assert r.returncode == 0, r.stdout + r.stderr
        oc = _outcomes(run_dir)
        assert all(o["outcome"] == "ok" for o in oc.values()), oc
        run_id = json.loads((run_dir / "manifest.json").read_text())["run_id"]
        h1, h2 = dfleet.hosts
        # The workspaces were used at their literal paths (inventory's for host 1, the config's for 2).
        ws = {
            h1.name: hosts[h1.name]["sb_workspace"],
            h2.name: values["workspace"].replace("{host}", h2.name),
        }
        for name, path in ws.items():
            assert (Path(path) / "runs" / run_id / "results" / "noop" / "rank0.json").is_file(), name
        # The benchmark process saw the env value verbatim (its prefix printed it into the rank log).
        for name in ws:
            logs = list(_results(run_dir, name).rglob("rank0.log"))
            assert logs, sorted(str(p) for p in _results(run_dir, name).rglob("*"))
            assert values["env"] in logs[0].read_text().splitlines(), logs[0].read_text()[:500]

        # deploy after validate: checks the hosts again and runs no benchmark (results untouched)
        rank = Path(ws[h2.name]) / "runs" / run_id / "results" / "noop" / "rank0.json"
        before = (rank.stat().st_mtime_ns, rank.read_bytes())
        r = sb_fleet("deploy", "--run-dir", str(run_dir))
        assert r.returncode == 0, r.stdout + r.stderr
        assert (rank.stat().st_mtime_ns, rank.read_bytes()) == before, "deploy ran the benchmark again"
        # run --resume, collect: nothing to do, nothing runs
        r = sb_fleet("run", "--resume", "--run-dir", str(run_dir))
        assert r.returncode == 0, r.stdout + r.stderr
        r = sb_fleet("collect", "--run-dir", str(run_dir))
        assert r.returncode == 0, r.stdout + r.stderr
        # cleanup, the shared cache (the hostile path reaches hostprep's argv) and the workspaces
        r = sb_fleet("cleanup", "--cache", "--workspaces", "--run-dir", str(run_dir))
        assert r.returncode == 0, r.stdout + r.stderr
        for path in ws.values():
            assert not Path(path).exists(), path
        _no_markers(markers, dfleet)
    finally:
        shutil.rmtree(markers, ignore_errors=True)


def test_deploy_after_validate_runs_no_benchmark(dfleet, tmp_path):
    """The plain case of the bug: validate's first step came back in a later deploy (ansible-runner
    kept validate's extra variables in ansible/deploy/env/extravars and read them on every run)."""
    markers = _marker_dir()
    try:
        cfg, _values = _config(dfleet, markers, name="cfg-deploy.yaml", hostile=False)
        inv, _ = _inventory(dfleet, tmp_path / "inv.yml", markers, hostile=False)
        run_dir = tmp_path / "run"
        r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir))
        assert r.returncode == 0, r.stdout + r.stderr
        status = {h.name: _remote_status(run_dir, h) for h in dfleet.hosts}
        r = sb_fleet("deploy", "--run-dir", str(run_dir))
        assert r.returncode == 0, r.stdout + r.stderr
        assert {h.name: _remote_status(run_dir, h) for h in dfleet.hosts} == status
        assert not (run_dir / "ansible" / "deploy" / "env").exists()
        # the deploy's exec went over sb-fleet's own ssh clients (no extra variables at all); where a
        # playbook ran, its output holds no first step either
        assert (run_dir / "ansible" / "deploy" / "direct-exec.json").is_file()
        stdout = run_dir / "ansible" / "deploy" / "artifacts" / "deploy" / "stdout"
        assert not stdout.exists() or "SB_FLEET_RUN_FOLLOWS" not in stdout.read_text()
        _no_markers(markers, dfleet)
    finally:
        shutil.rmtree(markers, ignore_errors=True)


def _remote_status(run_dir: Path, h) -> bytes:  # noqa: ANN001
    setup = json.loads((run_dir / "plan.json").read_text())["host_setup"][h.name]
    run_id = json.loads((run_dir / "manifest.json").read_text())["run_id"]
    return (Path(setup["workspace"]) / "runs" / run_id / "results" / "status.json").read_bytes()


def _wait(cond, what: str, timeout: float = 120) -> None:  # noqa: ANN001
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_host_cut_off_in_validates_first_exec_is_collected_later(dfleet, tmp_path):
    markers = _marker_dir()
    try:
        cfg, _ = _config(dfleet, markers, sleep=6, name="cfg-cut.yaml", hostile=False)
        inv, _ = _inventory(dfleet, tmp_path / "inv.yml", markers, hostile=False)
        # the suite in place first: then validate's deploy starts the first step in the same exec
        r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp_path / "pre"))
        assert r.returncode == 0, r.stdout + r.stderr
        run_dir = tmp_path / "run"
        victim = dfleet.hosts[1]
        proc = subprocess.Popen(
            [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait(lambda: dfleet.processes(victim.name, b"noop"), "the victim's benchmark to start")
            dfleet.cut(victim.name)
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
        oc = _outcomes(run_dir)
        assert oc[dfleet.hosts[0].name]["outcome"] == "ok", oc
        assert _stage(run_dir, "deploy")[victim.name]["outcome"] in ("unreachable", "timeout")
        run = _stage(run_dir, "run")[victim.name]
        assert run["outcome"] in ("unreachable", "timeout") and "collect fetches" in run["reason"], run
        assert _stage(run_dir, "collect")[victim.name]["outcome"] != "skipped"
        # the host comes back; its runner went on alone: a later collect fetches what it wrote
        _wait(lambda: not dfleet.processes(victim.name, b"sb_bench"), "the victim's runner to finish")
        dfleet.revive(victim.name)
        r = sb_fleet("collect", "--run-dir", str(run_dir))
        assert _stage(run_dir, "collect")[victim.name]["outcome"] == "ok", r.stdout + r.stderr
        assert (_results(run_dir, victim.name) / "noop" / "rank0.json").is_file()
        summary = (run_dir / "results-summary.jsonl").read_text()
        assert victim.name in summary
    finally:
        shutil.rmtree(markers, ignore_errors=True)
        if dfleet.host(dfleet.hosts[1].name).proc is None or dfleet.hosts[1].proc.poll() is not None:
            dfleet.revive(dfleet.hosts[1].name)


def test_resume_after_kill_9_says_the_earlier_runner_still_runs(dfleet, tmp_path):
    markers = _marker_dir()
    try:
        cfg, _ = _config(dfleet, markers, sleep=10, name="cfg-kill.yaml", hostile=False)
        inv, _ = _inventory(dfleet, tmp_path / "inv.yml", markers, hostile=False)
        run_dir = tmp_path / "run"
        r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir))
        assert r.returncode == 0, r.stdout + r.stderr
        h = dfleet.hosts[0]
        proc = subprocess.Popen(
            [SB_FLEET, "run", "--run-dir", str(run_dir), "--quiet"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait(lambda: dfleet.processes(h.name, b"noop"), "the benchmark to start")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # The runner goes on alone (it outlives its SSH session). Held stopped while --resume runs, so
        # that it still holds the results directory whatever the machine's load.
        runners = dfleet.processes(h.name, b"sb_bench.host.runner")
        assert runners, "the runner died with the command that started it"
        for pid in runners:
            os.kill(pid, signal.SIGSTOP)
        try:
            r = sb_fleet("run", "--resume", "--run-dir", str(run_dir), "--limit", h.name)
        finally:
            for pid in runners:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        reason = _stage(run_dir, "run")[h.name]["reason"]
        assert r.returncode != 0 and "still running" in reason, reason
        assert "share a workspace" not in reason and "killed or lost its connection" in reason, reason
        # once the earlier runner is done, --resume finishes the host
        _wait(lambda: not dfleet.processes(h.name, b"sb_bench"), "the earlier runner to finish")
        r = sb_fleet("run", "--resume", "--run-dir", str(run_dir), "--limit", h.name)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _stage(run_dir, "run")[h.name]["outcome"] == "ok"
    finally:
        shutil.rmtree(markers, ignore_errors=True)


@pytest.mark.parametrize("kind", ["other-user", "symlink", "open-mode"])
def test_control_socket_dir_must_be_private(dfleet, tmp_path, kind):
    """XDG_RUNTIME_DIR/sb-fleet-cp made by someone else (the fleet's user sbtest), a symlink, or open to
    others: refused with one line naming it, exit 3, before any host is touched."""
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    cp = xdg / "sb-fleet-cp"
    if kind == "other-user":
        cp.mkdir(mode=0o700)
        u = pwd.getpwnam("sbtest")
        os.chown(cp, u.pw_uid, u.pw_gid)
    elif kind == "symlink":
        target = tmp_path / "elsewhere"
        target.mkdir(mode=0o700)
        cp.symlink_to(target)
    else:
        cp.mkdir()
        os.chmod(cp, 0o777)
    inv, _ = _inventory(dfleet, tmp_path / "inv.yml", tmp_path, hostile=False)
    cfg = dfleet.config(
        "fleet: {known_hosts: @KNOWN_HOSTS@, venv: false, install_requirements: never}\n"
        "superbench: {benchmarks: {noop: {}}}\n",
        "cfg-cp.yaml",
    )
    run_dir = tmp_path / "run"
    r = sb_fleet(
        "deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), env={"XDG_RUNTIME_DIR": str(xdg)}
    )
    assert r.returncode == 3, r.stdout + r.stderr
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and str(cp) in err[0] and "refused" in err[0], r.stderr
    assert not (run_dir / "outcomes" / "deploy.json").exists()  # no host was touched
    if kind != "symlink":
        assert stat.S_ISDIR(os.lstat(cp).st_mode)  # left as it was
