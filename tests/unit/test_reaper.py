"""The sweep a stop runs on a host ends the run's tagged processes there, and only those: real processes
on this machine, listed before and after."""

from __future__ import annotations

import os
import shlex
import subprocess
import time

from sb_fleet.fleet import reaper
from sb_fleet.plan.tasks import HOST_TAG


def _start(env_tag: str | None, ignore_term: bool = False) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SB_FLEET_")}
    if env_tag is not None:
        env[HOST_TAG] = env_tag
    cmd = ("trap '' TERM; " if ignore_term else "") + "sleep 300 & wait"
    return subprocess.Popen(["/bin/sh", "-c", cmd], env=env, start_new_session=True)


def _wait(cond, timeout: float, what: str) -> None:  # noqa: ANN001
    t_end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < t_end, what
        time.sleep(0.05)


def test_the_sweep_ends_the_hosts_tagged_processes_and_no_other(tmp_path) -> None:  # noqa: ANN001
    run = f"sweep-{os.getpid()}-{time.monotonic_ns()}"
    mine = [_start(reaper.host_tag(run, "h1")), _start(reaper.host_tag(run, "h1"), ignore_term=True)]
    other_host = _start(reaper.host_tag(run, "h2"))
    untagged = _start(None)
    procs = [*mine, other_host, untagged]
    try:
        # the shells and their sleeps: listed by the tag before
        _wait(lambda: len(reaper.tagged(HOST_TAG, reaper.host_tag(run, "h1"))) == 4, 10, "4 tagged processes")
        before = reaper.tagged(HOST_TAG, reaper.host_tag(run, "h1"))
        script = f"set -- {HOST_TAG}={reaper.host_tag(run, 'h1')}\n{reaper.SWEEP}"
        t0 = time.monotonic()
        out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, env={})
        assert out.stdout.strip() == "stopped 4", out
        assert time.monotonic() - t0 < 10  # SIGKILL 5 s after SIGTERM, for the one that ignores it
        for p in mine:
            p.wait(5)
        assert not [p for p in before if reaper.alive(p)]
        assert other_host.poll() is None and untagged.poll() is None  # another host's, and not the run's
        assert reaper.tagged(HOST_TAG, reaper.host_tag(run, "h2"))
        again = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, env={})
        assert again.stdout.strip() == "none"
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()


def test_step_env_tags_the_srun_step_with_the_run_and_node_and_nothing_else() -> None:
    env = reaper.step_env(
        "node7",
        {"SB_FLEET_RUN": "r1", "SB_FLEET_CTL": "r1:42", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "x"},
    )
    assert env[HOST_TAG] == "r1/node7" and env[reaper.CONTROL_TAG] == "r1:42" and env["HOME"] == "/root"
    assert "AWS_SECRET_ACCESS_KEY" not in env and "SB_FLEET_RUN" not in env
    assert HOST_TAG not in reaper.step_env("n", {"HOME": "/root"})  # an untagged command: no tag


def test_collects_commands_carry_the_tags_as_data_and_its_sweep_ends_only_them(tmp_path) -> None:  # noqa: ANN001
    from sb_fleet.fleet.fetch import tagged_opener

    run = f"collect-{os.getpid()}-{time.monotonic_ns()}"
    host = "h1$(touch pwned)`touch pwned`'"  # a host name is data in the command, whatever it holds
    tag = reaper.host_tag(run, host)
    opened: list[str] = []
    opener = tagged_opener(
        lambda cmd, stall, limit, what: opened.append(cmd),  # type: ignore[func-returns-value]
        (f"{HOST_TAG}={tag}", f"{reaper.COLLECT_TAG}={tag}"),
    )
    opener("exec sleep 300", 1.0, 1, "x")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SB_FLEET_")}
    collects = subprocess.Popen(["/bin/sh", "-c", opened[0]], env=env, cwd=tmp_path, start_new_session=True)
    runner = _start(tag)  # the run's runner on the same host: collect's sweep leaves it
    try:
        _wait(lambda: len(reaper.tagged(HOST_TAG, tag)) == 3, 10, "the tagged processes")
        assert reaper.tagged(reaper.COLLECT_TAG, tag) == [collects.pid]
        script = f"set -- {shlex.quote(f'{reaper.COLLECT_TAG}={tag}')}\n{reaper.SWEEP}"
        out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=30, env={})
        assert out.stdout.strip() == "stopped 1", out
        collects.wait(5)
        assert runner.poll() is None and not list(tmp_path.iterdir())
    finally:
        for p in (collects, runner):
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
