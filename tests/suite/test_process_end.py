"""sb_bench.core.process_end: a short on-host process ends without finalisation only where that would run
nobody's code; its streams and status always arrive."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from suite_helpers import bench_env

PROLOGUE = """
import atexit, sys, threading, time
from sb_bench.core.process_end import end_process

# a witness of finalisation: a buffered write never flushed, that only the file object's deallocation in
# the interpreter's teardown writes out
witness = open(sys.argv[1] + ".finalised", "w")
witness.write("finalised")
print("last line, block-buffered into a pipe")
print("and one on stderr", file=sys.stderr)
"""


def run(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess, Path]:
    script = tmp_path / "p.py"
    script.write_text(PROLOGUE + textwrap.dedent(body))
    mark = tmp_path / "mark"
    p = subprocess.run(
        [sys.executable, str(script), str(mark)], env=bench_env(), capture_output=True, text=True, timeout=60
    )
    return p, mark


def test_nothing_to_run_at_exit_ends_at_once_with_the_status_and_the_output(tmp_path):
    p, mark = run(tmp_path, "end_process(3)\n")
    assert p.returncode == 3, p.stderr
    assert p.stdout == "last line, block-buffered into a pipe\n"
    assert p.stderr == "and one on stderr\n"
    assert Path(f"{mark}.finalised").read_text() == ""  # no finalisation ran


@pytest.mark.parametrize(
    "body",
    [
        # an exit handler (torch registers several; a benchmark may register its teardown)
        "atexit.register(lambda: open(sys.argv[1] + '.handler', 'w').close())\nend_process(4)\n",
        # a thread that is not a daemon: the interpreter waits for it at exit
        "def late():\n    time.sleep(0.3)\n    open(sys.argv[1] + '.handler', 'w').close()\n"
        "threading.Thread(target=late).start()\nend_process(4)\n",
    ],
    ids=["exit-handler", "non-daemon-thread"],
)
def test_an_exit_handler_or_a_live_thread_gets_the_ordinary_end(tmp_path, body):
    p, mark = run(tmp_path, body)
    assert p.returncode == 4, p.stderr
    assert p.stdout == "last line, block-buffered into a pipe\n"
    assert Path(f"{mark}.handler").exists()  # it ran before the process ended
    assert Path(f"{mark}.finalised").read_text() == "finalised"  # the ordinary end: the witness works


def test_the_status_is_its_low_byte_as_sys_exit_gives(tmp_path):
    p, _ = run(tmp_path, "end_process(256 + 7)\n")
    assert p.returncode == 7
    p, _ = run(tmp_path, "end_process(-1)\n")
    assert p.returncode == 255
