"""Third-party log records stay in the run directory (sb_fleet.rundir.runlog): a real paramiko Transport
against an sshd that closes every connection logs its traceback (``ERROR paramiko.transport``) into
``<run>/logs/libraries.log``; the console keeps sb-fleet's own line for the host and one line saying where
the libraries' log is."""

from __future__ import annotations

import logging
import os
import socket
import stat
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from sb_fleet.rundir import runlog
from sb_fleet.rundir.runinputs import create_run

SB_FLEET = Path(sys.executable).with_name("sb-fleet")


@pytest.fixture
def closing_sshd() -> Iterator[int]:
    """A TCP port whose server closes every connection as soon as it accepts it (an sshd that cannot load
    its host key): paramiko's transport thread logs 'Error reading SSH protocol banner' with a traceback."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(5)
    srv.close()


CONFIG = """\
version: v0.4
fleet:
  known_hosts: {known_hosts}
  python: /usr/bin/python3
  venv: false
  install_requirements: never
superbench:
  benchmarks:
    noop:
      timeout: 60
      modes: [{{name: local, proc_num: 1}}]
"""


def test_a_paramiko_traceback_goes_to_the_run_directory_not_the_console(tmp_path, closing_sshd):
    (tmp_path / "known_hosts").write_text("")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG.format(known_hosts=tmp_path / "known_hosts"))
    inv = tmp_path / "inv.ini"
    inv.write_text(f"h1 ansible_host=127.0.0.1 ansible_port={closing_sshd} ansible_user=nobody\n")
    run = create_run(tmp_path / "run", cfg, inv)  # no runlog.install here: nothing is attached
    assert not (run.rd.path / "logs").exists()
    p = subprocess.run(
        [str(SB_FLEET), "collect", "--run-dir", str(run.rd.path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    console = p.stdout + p.stderr
    assert p.returncode == 3, console  # unreachable: infrastructure
    assert "h1: unreachable: SSH: Error reading SSH protocol banner" in console, console
    assert "Traceback" not in console and "ERROR paramiko" not in console, console
    log = run.rd.path / runlog.LIBRARY_LOG
    assert f"paramiko.transport): see {log}" in p.stderr, p.stderr
    text = log.read_text()
    assert "ERROR paramiko.transport.h1" in text and "Error reading SSH protocol banner" in text, text
    assert "Traceback (most recent call last):" in text and "SSHException" in text, text
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.parent.stat().st_mode) == 0o700


@pytest.fixture
def installed() -> Iterator[None]:
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    runlog.install(logging.WARNING)
    yield
    runlog.finish()
    logging.captureWarnings(False)
    root.handlers[:] = before[0]
    root.setLevel(before[1])


def test_own_lines_on_the_console_library_lines_held_then_in_the_file(tmp_path, capsys, installed):
    logging.getLogger("sb_fleet").warning("sb-fleet's own warning")
    logging.getLogger("ansible-runner").error("held before the run is known")
    assert capsys.readouterr().err == "WARNING sb_fleet: sb-fleet's own warning\n"
    runlog.attach(tmp_path / "run")
    logging.getLogger("paramiko.transport.h2").error("Socket exception: Connection reset by peer (104)")
    runlog.attach(tmp_path / "other")  # a sub-run: the first run directory keeps the log
    logging.getLogger("urllib3").warning("after a sub-run")
    warnings.warn("TripleDES has been moved", UserWarning, stacklevel=1)  # e.g. cryptography's, at import
    assert capsys.readouterr().err == ""
    runlog.finish()
    text = (tmp_path / "run" / runlog.LIBRARY_LOG).read_text()
    assert [ln.split(" ", 2)[2] for ln in text.splitlines()[:3]] == [
        "ERROR ansible-runner [MainThread]: held before the run is known",
        "ERROR paramiko.transport.h2 [MainThread]: Socket exception: Connection reset by peer (104)",
        "WARNING urllib3 [MainThread]: after a sub-run",
    ]
    assert "WARNING py.warnings [MainThread]: " in text and "UserWarning: TripleDES has been moved" in text
    assert not (tmp_path / "other").exists()
    err = capsys.readouterr().err
    assert err.startswith("sb-fleet: libraries logged 4 warning/error line(s) (") and err.endswith(
        f"see {tmp_path / 'run' / runlog.LIBRARY_LOG}\n"
    )


def test_without_a_run_directory_the_held_lines_reach_stderr_at_the_end(capsys, installed):
    logging.getLogger("matplotlib").warning("a library's warning, no run directory")
    assert capsys.readouterr().err == ""
    runlog.finish()
    assert capsys.readouterr().err == "WARNING matplotlib: a library's warning, no run directory\n"


def test_an_unwritable_run_directory_keeps_the_lines_for_stderr(tmp_path, capsys, installed):
    if os.geteuid() == 0:
        blocked = tmp_path / "file"
        blocked.write_text("")  # logs/ cannot be made under a file, even as root
    else:
        blocked = tmp_path / "ro"
        blocked.mkdir(mode=0o500)
    runlog.attach(blocked)
    logging.getLogger("paramiko.transport").error("kept")
    runlog.finish()
    err = capsys.readouterr().err
    assert "cannot write" in err and "ERROR paramiko.transport: kept" in err, err
