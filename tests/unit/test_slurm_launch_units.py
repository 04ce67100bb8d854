"""``launcher: slurm``, pure parts: the srun and salloc argument vectors, the steps' environment, srun's
own lines told apart from the task's (srun(1): "srun: error: ..." lines; a task's end as "task N: Exited
with exit code N"), and the settings' bounds. The real cluster: tests/integration/test_slurm.py."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from sb_fleet.config.fleet_config import Config
from sb_fleet.config.slurm_inventory import SlurmSettings
from sb_fleet.fleet.slurm_launch import (
    DEFAULT_PATH,
    launch_failure,
    salloc_argv,
    split_stderr,
    srun_argv,
    task_env,
    timed_out,
    unavailable,
)


def test_one_step_one_task_on_the_named_node_and_the_command_as_argv():
    argv = srun_argv("srun", "42", "gpu007", ["/bin/sh", "-c", "echo $(id) ; rm -rf x"])
    assert argv[0] == "srun" and "--jobid=42" in argv and "--nodelist=gpu007" in argv
    assert {"--overlap", "--nodes=1", "--ntasks=1"} <= set(argv)
    # the command is one argument after --: never parsed by a shell on the jump box
    assert argv[argv.index("--") + 1 :] == ["/bin/sh", "-c", "echo $(id) ; rm -rf x"]
    assert not any(a.startswith("--time") for a in argv)
    timed = srun_argv("srun", "42", "n1", ["true"], timeout_s=61)
    assert "--time=3" in timed  # whole minutes, one more: the caller's own timeout comes first


def test_the_steps_see_no_secret_and_no_allocation_shape_of_the_jump_box():
    env = task_env(
        {
            "HOME": "/home/ops",
            "USER": "ops",
            "AWS_SECRET_ACCESS_KEY": "s3cret",
            "SLURM_CONF": "/etc/slurm/x.conf",
            "SLURM_NTASKS": "64",
            "SLURM_JOB_ID": "9",
            "PATH": "/home/ops/venv/bin:/usr/bin",
            "VIRTUAL_ENV": "/home/ops/venv",
        }
    )
    assert env == {
        "HOME": "/home/ops",
        "USER": "ops",
        "PATH": DEFAULT_PATH,
        "SLURM_CONF": "/etc/slurm/x.conf",
    }


def test_srun_lines_are_told_apart_from_the_tasks_stderr():
    err = (
        "warning from the benchmark\n"
        "srun: error: gpu007: task 0: Exited with exit code 3\n"
        "Traceback (most recent call last):\n"
    )
    task, own = split_stderr(err)
    assert task == "warning from the benchmark\nTraceback (most recent call last):\n" and own == []
    # the task failed: that is its outcome, not srun's
    assert launch_failure(3, "", own) is None


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: Unable to create step for job 12: Requested node configuration is not available",
        "srun: error: Invalid job id specified",
        "srun: fatal: Could not establish a configuration source",
    ],
)
def test_srun_failing_to_start_the_step_is_a_launch_failure(line):
    task, own = split_stderr(line + "\n")
    assert task == "" and own == [line]
    assert launch_failure(1, "", own) == line
    assert launch_failure(1, "the task printed this", own) is None  # it ran: the task's own failure
    assert launch_failure(0, "", own) is None


def test_a_step_past_its_time_limit_is_a_timeout_not_a_launch_failure():
    line = "slurmstepd: error: *** STEP 12.3 ON gpu007 CANCELLED AT 2026-11-25T10:00:00 DUE TO TIME LIMIT ***"
    srun_line = "srun: error: *** STEP 12.3 ON gpu007 CANCELLED AT 2026-11-25T10:00:00 DUE TO TIME LIMIT ***"
    task, own = split_stderr(f"{line}\n{srun_line}\n")
    assert task == "" and timed_out(own)
    assert launch_failure(1, "", own) is None


def test_a_host_printing_srun_lines_only_hurts_its_own_outcome():
    # a task may print anything on stderr; a fake srun error from the host reads as srun's and
    # fails that host's step (nothing else reads it)
    task, own = split_stderr("srun: error: fake\n")
    assert launch_failure(1, "", own) == "srun: error: fake"


def test_salloc_asks_for_exactly_the_nodes_exclusively_within_the_grant_time():
    s = SlurmSettings.model_validate(
        {
            "partition": "gpu",
            "reservation": "nightly",
            "account": "ops",
            "time_limit": 90,
            "grant_timeout": 120,
        }
    )
    argv = salloc_argv(s, ["gpu001", "gpu002", "gpu004"], "r1-abc")
    assert argv[:2] == ["salloc", "--no-shell"]
    assert "--nodelist=gpu[001-002,004]" in argv and "--nodes=3" in argv and "--exclusive" in argv
    assert {
        "--partition=gpu",
        "--reservation=nightly",
        "--account=ops",
        "--time=90",
        "--immediate=120",
    } <= set(argv)
    shared = salloc_argv(SlurmSettings.model_validate({"exclusive": False}), ["n1"], "r")
    assert "--exclusive" not in shared and not any(a.startswith("--reservation") for a in shared)


@pytest.mark.parametrize("state", ["drained", "draining", "down", "drained*", "fail", "reboot_issued"])
def test_nodes_slurm_will_not_allocate(state):
    assert unavailable(state)


@pytest.mark.parametrize("state", ["idle", "mixed", "allocated", "completing", "maint"])
def test_nodes_slurm_allocates(state):
    assert not unavailable(state)


@pytest.mark.parametrize(
    "bad",
    [
        {"job_id": "12; scancel -u root"},
        {"reservation": "nightly --uid=0"},
        {"partition": "gpu,debug\n"},
        {"srun": "srun --uid=0"},
        {"time_limit": 0},
        {"grant_timeout": -1},
    ],
)
def test_allocation_settings_are_names_and_bounds(bad):
    with pytest.raises(ValidationError):
        SlurmSettings.model_validate(bad)


def test_the_launcher_is_ssh_or_slurm():
    base = {"superbench": {"benchmarks": {}}}
    assert Config.model_validate(base).fleet.launcher == "ssh"
    assert Config.model_validate({**base, "fleet": {"launcher": "slurm"}}).fleet.launcher == "slurm"
    with pytest.raises(ValidationError):
        Config.model_validate({**base, "fleet": {"launcher": "pbs"}})
