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


def test_the_rendered_deploy_playbook_has_the_task_the_code_reads_facts_from():
    text = (
        template_env()
        .get_template("deploy.yml.j2")
        .render(
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
        )
    )
    names = [t["name"] for play in load_rendered(text) for t in play["tasks"]]
    assert HOSTPREP in names and HOSTPREP_FAST in names


def test_every_template_ends_its_play_with_the_play_done_task():
    """An interrupted play counts a host as done only when this task was reported for it
    (sb_fleet.fleet.executor): a template without it would leave every host pending after Ctrl-C."""
    for p in sorted(playbooks_dir().glob("*.j2")):
        body = p.read_text().rstrip()
        last = body[body.rindex("\n    - name:") :]
        assert last.startswith("\n    - name: [[ tasks.play_done |"), (
            f"{p.name} does not end with tasks.play_done"
        )
        assert "ansible.builtin.debug" in last and "\n      when:" not in last, p.name
