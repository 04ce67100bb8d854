"""Task names are shared by the templates and the code through one table (sb_fleet.plan.tasks)."""

from __future__ import annotations

from sb_fleet.plan.ansible_data import load as load_rendered
from sb_fleet.plan.resources import playbooks_dir
from sb_fleet.plan.tasks import HOSTPREP, HOSTPREP_FAST, NEED_SUITE, TASKS
from sb_fleet.plan.templates import template_env


def test_every_task_id_is_used_by_a_template_and_no_template_spells_one_out():
    sources = {p.name: p.read_text() for p in playbooks_dir().glob("*.j2")}
    for key, name in TASKS.items():
        assert any(f"tasks.{key}" in text for text in sources.values()), f"no template names tasks.{key}"
        for fname, text in sources.items():
            assert f"name: {name}\n" not in text, (
                f"{fname} spells out the task name {name!r}: use tasks.{key}"
            )


def _deploy_tasks(part: str) -> list[str]:
    text = (
        template_env()
        .get_template("deploy.yml.j2")
        .render(
            part=part,
            run_id="r",
            hosts_file="hosts-vars.yml",
            fleet={
                "workspace": "~/w",
                "python": "/usr/bin/python3",
                "install_requirements": "auto",
                "min_free_disk_gb": 1.0,
                "venv": True,
                "require_gpu": False,
                "deploy_timeout": 60,
            },
            suite_archive="/a",
            suite_digest="d",
            suite_b64="/b",
            bootstrap="true",
            needs_torch=True,
            need_suite=NEED_SUITE,
            health={"boot": "b", "payload": "p", "expect": {"-": "e"}, "default_profile": "-", "timeout": 1},
        )
    )
    return [t["name"] for play in load_rendered(text) for t in play["tasks"]]


def test_the_rendered_deploy_playbooks_have_the_tasks_the_code_reads_facts_from():
    # deploy.yml: the one exec, nothing after it (no meta task per host to end the hosts that have the
    # suite); deploy-suite.yml: the suite's transfer, for the hosts that lack it (deploy_stage.needs_suite)
    assert _deploy_tasks("fast") == [HOSTPREP_FAST]
    assert _deploy_tasks("suite") == [HOSTPREP]


# The task each template's play ends with, as its stage tells the executor (sb_fleet.fleet.stages): an
# interrupted play counts a host as done only when that task was reported for it; a template that ended
# otherwise would leave every host pending after Ctrl-C (or, worse, done before its last task).
LAST_TASK = {
    "check.yml.j2": "tasks.health",  # check_stage: ends_with(HEALTH)
    "run.yml.j2": "tasks.run_step.format(step=step.id)",  # run_stage: ends_with(run_task(step.id))
    "deploy.yml.j2": "tasks.hostprep",  # deploy_stage.deploy_done (and the fast path without the suite line)
}


def test_every_template_ends_its_play_with_the_task_its_stage_names():
    for p in sorted(playbooks_dir().glob("*.j2")):
        body = p.read_text().rstrip()
        last = body[body.rindex("\n    - name:") :]
        if p.name in LAST_TASK:
            assert last.startswith(f"\n    - name: [[ {LAST_TASK[p.name]} |"), f"{p.name} ends otherwise"
            assert "tasks.play_done" not in body, f"{p.name}: a play-done task costs a task per host"
            continue
        assert last.startswith("\n    - name: [[ tasks.play_done |"), (
            f"{p.name} does not end with tasks.play_done"
        )
        assert "ansible.builtin.debug" in last and "\n      when:" not in last, p.name


def test_deploy_ends_a_host_at_its_exec_or_at_the_suite_transfer():
    from sb_fleet.fleet.stages.deploy_stage import exec_done

    assert exec_done(HOSTPREP_FAST, {"stdout": f"{NEED_SUITE}\n"}) and exec_done(HOSTPREP_FAST, {})
    assert not exec_done(HOSTPREP, {})


def test_an_older_deploy_playbook_ends_a_host_at_the_fast_path_only_when_its_suite_was_there():
    from sb_fleet.fleet.stages.deploy_stage import deploy_done

    assert deploy_done(HOSTPREP_FAST, {"stdout": '{"ok": true}\n'})
    assert not deploy_done(HOSTPREP_FAST, {"stdout": f"{NEED_SUITE}\n"})
    assert deploy_done(HOSTPREP, {"stdout": ""}) and not deploy_done("something else", {})
