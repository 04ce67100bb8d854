"""``python -m sb_bench exec``, every rank's start: the runner's own arguments read without argparse, as
argparse reads them; anything else parsed and answered by argparse as before."""

from __future__ import annotations

import subprocess
import sys

import pytest
from suite_helpers import bench_env

PLAIN = [
    ["noop", "--params", '{"num_steps": 1}', "--out", "/r/noop"],
    ["noop", "--out", "/r/noop", "--params", "{}"],
    ["noop", "--params={}", "--out=/r/x=y"],
    ["noop"],
    ["noop", "--params", ""],
    ["", "--out", "o"],
]
OTHERS = [
    [],
    ["-h"],
    ["noop", "--help"],
    ["--params", "{}", "noop"],
    ["noop", "--par", "{}"],
    ["noop", "--params", "{}", "--params", "{}"],
    ["noop", "--out"],
    ["noop", "--out", "-x"],
    ["noop", "extra"],
    ["noop", "--", "--out"],
]


@pytest.mark.parametrize("argv", PLAIN)
def test_the_runners_exec_arguments_read_as_argparse_reads_them(argv):
    import argparse

    from sb_bench.__main__ import _exec_arguments, plain_exec_args

    p = argparse.ArgumentParser()
    _exec_arguments(p)
    ns = p.parse_args(argv)
    assert plain_exec_args(argv) == (ns.name, ns.params, ns.out)


@pytest.mark.parametrize("argv", OTHERS)
def test_anything_else_is_left_to_argparse(argv):
    from sb_bench.__main__ import plain_exec_args

    assert plain_exec_args(argv) is None


def test_exec_help_and_errors_are_argparses_still(tmp_path):
    env = bench_env()
    h = subprocess.run(
        [sys.executable, "-m", "sb_bench", "exec", "--help"], env=env, capture_output=True, text=True
    )
    assert h.returncode == 0 and "usage: python -m sb_bench exec" in h.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "sb_bench", "exec", "noop", "--bogus", "1"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "unrecognized arguments: --bogus" in bad.stderr
