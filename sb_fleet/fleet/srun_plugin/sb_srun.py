"""Ansible connection plugin ``sb_srun``: each command of a task runs on its node as one ``srun`` step in
sb-fleet's Slurm allocation (``launcher: slurm``, :mod:`sb_fleet.fleet.slurm_launch`). sb-fleet's
executor points Ansible at this directory (``ANSIBLE_CONNECTION_PLUGINS``), names the job and srun in
the environment and selects the plugin per command (``ansible_connection``)."""

from __future__ import annotations

import subprocess
from typing import Any

from ansible.errors import AnsibleConnectionFailure, AnsibleFileNotFound
from ansible.plugins.connection import ConnectionBase

from sb_fleet.fleet.reaper import step_env
from sb_fleet.fleet.slurm_launch import end_step, srun_argv, step_end

DOCUMENTATION = """
    name: sb_srun
    short_description: run each command in a Slurm allocation with srun (sb-fleet)
    description:
        - One srun step per command, on the node named by the inventory, inside the job that sb-fleet
          allocated or was given.
    author: sb-fleet
    options:
        node:
            description: the Slurm node name (the inventory name)
            vars:
                - name: inventory_hostname
        job_id:
            description: the Slurm job the steps run in
            env:
                - name: SB_FLEET_SRUN_JOB
        srun:
            description: the srun command
            default: srun
            env:
                - name: SB_FLEET_SRUN
    extends_documentation_fragment:
        - connection_pipelining
"""


class Connection(ConnectionBase):
    transport = "sb_srun"
    has_pipelining = True

    def _connect(self) -> Connection:
        self._connected = True
        return self

    def _node(self) -> str:
        node = self.get_option("node") or self._play_context.remote_addr
        return str(node)

    def _step(self, argv: list[str], in_data: bytes | None) -> tuple[int, bytes, bytes]:
        job = self.get_option("job_id")
        if not job:
            raise AnsibleConnectionFailure("sb_srun: no Slurm job (SB_FLEET_SRUN_JOB is not set)")
        node = self._node()
        p = subprocess.Popen(
            srun_argv(str(self.get_option("srun")), str(job), node, argv),
            stdin=subprocess.PIPE if in_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=step_env(node),  # tagged with the run and the node: a stop finds the step and its task
            start_new_session=True,
        )
        try:
            out, err = p.communicate(in_data)
        except BaseException:  # the task's timeout, an interrupt: the step ends with the task
            end_step(p)
            raise
        task, failure = step_end(p.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
        if failure:
            raise AnsibleConnectionFailure(f"srun on {node}: {failure}")
        return p.returncode, out, task.encode()

    def exec_command(
        self, cmd: str, in_data: bytes | None = None, sudoable: bool = True
    ) -> tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        return self._step(["/bin/sh", "-c", cmd], in_data)

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        try:
            with open(in_path, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise AnsibleFileNotFound(f"file or module does not exist: {in_path}: {exc}") from exc
        rc, _, err = self._step(["/bin/sh", "-c", 'cat > "$0"', out_path], data)
        if rc != 0:
            raise AnsibleConnectionFailure(f"could not write {out_path} on {self._node()}: {err[-300:]!r}")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        rc, out, err = self._step(["cat", "--", in_path], None)
        if rc != 0:
            raise AnsibleFileNotFound(f"could not read {in_path} on {self._node()}: {err[-300:]!r}")
        with open(out_path, "wb") as f:
            f.write(out)

    def close(self) -> None:
        self._connected = False

    def reset(self) -> Any:
        return None
