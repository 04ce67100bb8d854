"""``sb-fleet bench list``: the suite's benchmarks, read without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sb_fleet.errors import InfraError
from sb_fleet.plan.resources import suite_dir


def list_benchmarks(as_json: bool) -> str:
    env = dict(os.environ, PYTHONPATH=str(suite_dir()))
    args = [sys.executable, "-m", "sb_bench", "list"] + (["--json"] if as_json else [])
    r = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if r.returncode != 0:
        raise InfraError(f"cannot list the suite's benchmarks: {r.stderr.strip()[-300:]}")
    if as_json:
        json.loads(r.stdout)  # fail loudly on a broken listing
    return r.stdout.rstrip()
