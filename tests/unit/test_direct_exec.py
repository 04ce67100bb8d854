"""sb-fleet's own per-host exec (sb_fleet.fleet.direct_exec) with its ssh client swapped for a local
``/bin/sh -c``: outcomes, bounds and concurrency with no host needed. The real path (OpenSSH, sshd hosts,
the master collect rides) is tested in tests/integration/test_direct_exec.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sb_fleet.config.inventory import Host
from sb_fleet.fleet.direct_exec import KEEP_BYTES, ExecTask, HostExec, direct_reason, run_direct
from sb_fleet.outcome import Outcome


def _local(host: Host, command: str) -> list[str]:
    return ["/bin/sh", "-c", command]


def _run(cmds: dict[str, str], timeout: int = 30, ok_mark: str = "", forks: int = 8, **kw):  # noqa: ANN003
    seen: list[tuple[str, str, str]] = []
    task = ExecTask("the task", {h: HostExec(c) for h, c in cmds.items()}, timeout, ok_mark)
    got = run_direct(
        "deploy",
        task,
        [Host(h, ()) for h in cmds],
        _local,
        forks=forks,
        progress=lambda h, o, r: seen.append((h, getattr(o, "value", o), r)),
        **kw,
    )
    return got, seen


def test_each_host_ends_with_its_commands_result():
    got, seen = _run(
        {
            "ok": "echo out; echo err >&2",
            "bad": 'echo \'{"error": "no python3.11 on the host"}\'; exit 3',
            "runner": "echo SB_MARK; exit 1",
        },
        ok_mark="(?m)^SB_MARK$",
    )
    assert got.outcomes["ok"].outcome == Outcome.OK
    assert got.results["ok"]["the task"] == {
        "rc": 0,
        "stdout": "out\n",
        "stderr": "err\n",
        "changed": False,
        "failed": False,
    }
    assert got.outcomes["bad"].outcome == Outcome.FAILED
    assert got.outcomes["bad"].reason == "the task: no python3.11 on the host"  # hostprep's own error
    assert got.results["bad"]["the task"]["rc"] == 3
    # past the marker, the runner's exit status is the run stage's to judge
    assert got.outcomes["runner"].outcome == Outcome.OK
    assert {(h, o) for h, o, _ in seen if o != "running"} == {
        ("ok", "ok"),
        ("bad", "failed"),
        ("runner", "ok"),
    }


def test_ssh_s_own_failure_is_unreachable_and_a_refused_key_is_hostkey():
    got, _ = _run(
        {
            "down": "echo 'ssh: connect to host 10.0.0.9 port 22: Connection refused' >&2; exit 255",
            "key": "echo 'Host key verification failed.' >&2; exit 255",
        }
    )
    assert got.outcomes["down"].outcome == Outcome.UNREACHABLE
    assert "Connection refused" in got.outcomes["down"].reason
    assert got.outcomes["key"].outcome == Outcome.HOSTKEY


def test_a_flooding_host_keeps_its_head_and_tail_only():
    # 8 MiB on stdout: the first and last MiB are kept, with the size of the cut said between them
    got, _ = _run(
        {"flood": "echo FIRST; head -c 8388608 /dev/zero | tr '\\0' x; echo; echo LAST", "calm": "echo hi"}
    )
    out = got.results["flood"]["the task"]["stdout"]
    assert out.startswith("FIRST\n") and out.endswith("LAST\n")
    assert len(out) < 2 * KEEP_BYTES + 200
    assert "bytes of this stream not kept" in out
    assert got.results["calm"]["the task"]["stdout"] == "hi\n"


def test_a_host_past_its_timeout_is_ended_and_the_others_are_not():
    t0 = time.monotonic()
    got, _ = _run({"hung": "sleep 60", "quick": "echo done"}, timeout=1)
    assert time.monotonic() - t0 < 10
    assert got.outcomes["hung"].outcome == Outcome.TIMEOUT
    assert "timeout of 1 s" in got.outcomes["hung"].reason
    assert got.outcomes["quick"].outcome == Outcome.OK


def test_a_process_left_holding_stderr_does_not_hold_the_host():
    # as a ControlPersist master made by the client keeps its stderr: the client's exit ends the host
    t0 = time.monotonic()
    got, _ = _run({"h": "(sleep 20 </dev/null >/dev/null &); echo done"})
    assert time.monotonic() - t0 < 5
    assert got.outcomes["h"].outcome == Outcome.OK and got.results["h"]["the task"]["stdout"] == "done\n"


def test_no_more_than_forks_clients_at_once(tmp_path: Path):
    got, _ = _run({f"h{i}": "sleep 0.3" for i in range(6)}, forks=2, events_file=tmp_path / "ev.json")
    assert all(o.outcome == Outcome.OK for o in got.outcomes.values())
    spans = [(e["start_s"], e["end_s"]) for e in got.events]
    for t in {s for s, _ in spans}:
        assert sum(1 for s, e in spans if s <= t < e) <= 2
    assert (tmp_path / "ev.json").exists()


def test_a_cancel_ends_every_client_and_leaves_the_hosts_pending():
    t0 = time.monotonic()
    got, _ = _run(
        {"a": "sleep 60", "b": "sleep 60", "c": "sleep 60"},
        forks=2,
        cancel=lambda: time.monotonic() - t0 > 0.5,
    )
    assert got.canceled and time.monotonic() - t0 < 10
    assert {h: o.outcome for h, o in got.outcomes.items()} == {
        "a": Outcome.PENDING,
        "b": Outcome.PENDING,
    }  # c never started: the executor says so (run_direct_stage)


def test_the_stdin_file_reaches_the_command(tmp_path: Path):
    f = tmp_path / "suite.b64"
    f.write_bytes(b"c3VpdGU=")
    task = ExecTask("t", {"h": HostExec("base64 -d", f)}, 30)
    got = run_direct("deploy", task, [Host("h", ())], _local, forks=1, progress=lambda *a: None)
    assert got.results["h"]["t"]["stdout"] == "suite"


@pytest.mark.parametrize(
    ("hvars", "why"),
    [
        ({}, None),
        (
            {
                "ansible_host": "10.0.0.1",
                "ansible_port": 2222,
                "ansible_user": "u",
                "ansible_ssh_common_args": "-o ProxyJump=j",
                "ansible_python_interpreter": "/usr/bin/python3",
                "sb_workspace": "/w",
            },
            None,
        ),
        ({"ansible_connection": "local"}, "ansible_connection local"),
        ({"ansible_become": True}, "ansible_become"),
        ({"ansible_ssh_pass": "x"}, "password"),
        ({"ansible_password": "x"}, "password"),
        ({"ansible_ssh_executable": "/opt/ssh"}, "ansible_ssh_executable"),
        ({"ansible_shell_type": "csh"}, "ansible_shell_type"),
    ],
)
def test_a_host_that_needs_ansibles_connection_goes_through_ansible(hvars, why):
    got = direct_reason(Host("gpu1", ("gpu",), hvars))
    assert (got is None) if why is None else (got is not None and why in got)


def test_a_low_open_file_limit_bounds_the_clients_at_once_not_the_hosts_outcomes(tmp_path: Path):
    """With a limit of 100 open files (soft and hard) and 60 hosts at forks 60, every host still ends ok:
    fewer clients run at once instead of some failing "Too many open files". In a child process: the
    limit cannot be raised back there."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (100, 100))
        from sb_fleet.config.inventory import Host
        from sb_fleet.fleet.direct_exec import ExecTask, HostExec, fd_room, run_direct
        hosts = [Host(f"h{i}", ()) for i in range(60)]
        task = ExecTask("t", {h.name: HostExec("sleep 0.2; echo ok") for h in hosts}, 60)
        got = run_direct("deploy", task, hosts, lambda h, c: ["/bin/sh", "-c", c], forks=60,
                         progress=lambda *a: None)
        bad = {h: o.reason for h, o in got.outcomes.items() if o.outcome.value != "ok"}
        print(fd_room(), len(got.outcomes), bad)
        sys.exit(1 if bad or len(got.outcomes) != 60 else 0)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    room = int(r.stdout.split()[0])
    assert 1 <= room < 60


BANNER = "echo 'Connection timed out during banner exchange' >&2; echo 'Connection to 10.0.0.5 port 22 timed out' >&2"


def test_a_login_that_never_reached_the_banner_is_tried_again_after_the_wave(tmp_path: Path):
    """sshd too busy to send its banner within ConnectTimeout (hundreds of logins at once on one host's
    sshd, 256 simulated hosts on 2 cores): no session was opened, so the command is started again, after
    the hosts still waiting, at most CONNECT_RETRIES times; any other failure of ssh is not retried."""
    from sb_fleet.fleet.direct_exec import CONNECT_RETRIES

    count = tmp_path / "tries"
    flaky = f"echo x >> {count}; [ $(wc -l < {count}) -ge 2 ] || {{ {BANNER}; exit 255; }}; echo ran"
    got, seen = _run(
        {
            "flaky": flaky,
            "busy": f"{BANNER}; exit 255",
            "dropped": "echo 'kex_exchange_identification: read: Connection reset by peer' >&2; exit 255",
            "refused": "echo 'ssh: connect to host 10.0.0.9 port 22: Connection refused' >&2; exit 255",
            "late": f"echo partial; {BANNER}; exit 255",  # it printed: the command ran, nothing is re-run
        },
        forks=2,
    )
    assert got.outcomes["flaky"].outcome == Outcome.OK
    assert got.results["flaky"]["the task"]["stdout"] == "ran\n"
    assert count.read_text().count("x") == 2
    tries = {}
    for e in got.events:
        tries[e["host"]] = tries.get(e["host"], 0) + 1
    assert tries == {
        "flaky": 2,
        "busy": 1 + CONNECT_RETRIES,
        "dropped": 1 + CONNECT_RETRIES,
        "refused": 1,
        "late": 1,
    }
    assert max(e.get("attempt", 1) for e in got.events if e["host"] == "busy") == 1 + CONNECT_RETRIES
    for h in ("busy", "dropped", "refused", "late"):
        assert got.outcomes[h].outcome == Outcome.UNREACHABLE, h
    assert "banner exchange" in got.outcomes["busy"].reason
    # each host said once how it ended (a retry is no end)
    ends = [h for h, o, _ in seen if o != "running"]
    assert sorted(ends) == sorted(["flaky", "busy", "dropped", "refused", "late"])
    # the retries came after the first wave: the first five starts were the five hosts, once each
    starts = [h for h, o, _ in seen if o == "running"]
    assert sorted(starts[:5]) == sorted(["flaky", "busy", "dropped", "refused", "late"])


def test_what_follows_the_results_marker_is_spooled_not_kept_as_output(tmp_path: Path):
    mark = "sb-fleet: the results follow abc123"
    flood = "head -c 3000000 /dev/zero"
    cmds = {
        "ships": f"echo before; printf '\\n{mark}\\n'; printf 'SPOOLED'",
        "floods": f"echo before; printf '\\n{mark}\\n'; {flood}",  # past the cap: dropped
        "killed": f"echo before; printf '\\n{mark}\\n'; sleep 60",  # cut off: dropped
        "plain": "echo no marker here",
    }
    task = ExecTask("the task", {h: HostExec(c) for h, c in cmds.items()}, 3, ship=mark, ship_cap=1 << 20)
    got = run_direct(
        "deploy",
        task,
        [Host(h, ()) for h in cmds],
        _local,
        forks=8,
        progress=lambda h, o, r: None,
        spool_dir=tmp_path,
    )
    assert set(got.shipped) == {"ships"}
    assert got.shipped["ships"].read_bytes() == b"SPOOLED"
    assert got.results["ships"]["the task"]["stdout"] == "before\n"
    assert got.results["floods"]["the task"]["stdout"] == "before\n"
    assert got.results["plain"]["the task"]["stdout"] == "no marker here\n"
    assert got.outcomes["killed"].outcome == Outcome.TIMEOUT
    assert sorted(p.name for p in tmp_path.iterdir()) == [got.shipped["ships"].name]


def test_under_slurm_the_client_is_an_srun_step_tagged_and_its_own_failure_is_unreachable():
    """launcher: slurm: the same exec, its client an srun step in the command's job, tagged with the run
    and the node; srun's own failure lines are not the task's stderr, and a step that never ran makes the
    node unreachable (the real srun: tests/integration/test_slurm.py)."""
    from sb_fleet.fleet.executor import srun_transport
    from sb_fleet.fleet.slurm_launch import SrunReach

    how = srun_transport(SrunReach("srun", "41"), "run-7")
    host = Host("node9", ())
    argv = how.argv_of(host, "echo hi")
    assert argv is not None
    assert argv[0] == "srun" and "--jobid=41" in argv and "--nodelist=node9" in argv, argv
    assert argv[-3:] == ["/bin/sh", "-c", "echo hi"], argv
    assert not any(a.startswith("--time") for a in argv), argv  # no step limit: the phases end it
    assert how.env_of is not None
    env = how.env_of(host)
    assert env["SB_FLEET_TAG"] == "run-7/node9" and env["SB_FLEET_CTL"].startswith("run-7:"), env
    assert "PYTHONPATH" not in env and "SSH_AUTH_SOCK" not in env, env  # task_env: nothing else
    err, why = how.end_of(1, "", "srun: error: Unable to create step for job 41: Invalid node name\n")
    assert why is not None and "Invalid node name" in why and err == "", (err, why)
    err, why = how.end_of(3, "out\n", "task said\nsrun: error: node9: task 0: Exited with exit code 3\n")
    assert (err, why) == ("task said\n", None)
