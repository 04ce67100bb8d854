"""Stopping what a run started, on the control node and on its hosts, by the tag each process carries.

Every process a stage starts carries a tag in its environment, which everything it starts inherits and
which stays when its parent dies (an orphan keeps its environment; a process group or session does not
hold an srun started in its own session, nor OpenSSH's ControlPersist master, which detaches):

- on the control node, ansible-playbook and all below it (workers, ssh clients and masters, the srun of
  each step, the tasks of a local host) carry ``SB_FLEET_CTL=<run id>:<pid of this sb-fleet>``
  (:func:`control_tag`, set by the executor);
- on a host, every command of a playbook carries ``SB_FLEET_TAG=<run id>/<inventory name>``
  (:func:`host_tag`: the templates export it, the srun connection passes it into its step), and so
  do the runner, the benchmarks, hostprep, the health checks and the tools they start.

A stop (Ctrl-C, SIGTERM, a host past its stage's deadline) ends the tagged processes: :func:`stop_tagged`
here, :data:`SWEEP` on a host through a new connection (:func:`sweep_hosts`). srun gets SIGTERM first
(it then ends its step on the node); every other process SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
from collections.abc import Callable, Iterable, Mapping

from sb_fleet.config.inventory import Host
from sb_fleet.fleet.fetch import on_hosts
from sb_fleet.fleet.slurm_launch import SrunReach, task_env
from sb_fleet.fleet.ssh import SshSettings
from sb_fleet.plan.container_commands import LABEL as CONTAINER_LABEL
from sb_fleet.plan.tasks import HOST_TAG, RUN_EXTRAVAR

CONTROL_TAG = "SB_FLEET_CTL"  # on the control node: <run id>:<pid>
COLLECT_TAG = "SB_FLEET_COLLECT"  # on a host, beside HOST_TAG: collect's own commands (<run id>/<host>)
RUN_VAR = "SB_FLEET_RUN"  # the run id, for the srun connection (which names each step's host tag)
ANSIBLE_VAR = RUN_EXTRAVAR  # the run id as the playbooks' extra variable (they build the host tag)
GRACE_S = 5.0  # how long srun has to end its step after SIGTERM, before SIGKILL

# On a host: SIGTERM, then SIGKILL after 5 s, to every process whose environment holds the tag (its one
# argument, ``SB_FLEET_TAG=...``), found by GNU grep over /proc/*/environ (NUL-separated); prints
# "stopped N" or "none". The sweep's own shell carries no tag (a new connection, not a playbook's).
SWEEP = r"""tag=$1
found() { grep -lsxzF -e "$tag" /proc/[0-9]*/environ 2>/dev/null | sed -e 's|^/proc/||' -e 's|/environ$||' \
  | grep -vx "$$"; }
p=$(found)
[ -n "$p" ] || { echo none; exit 0; }
n=$(printf '%s\n' $p | wc -l)
kill -TERM $p 2>/dev/null; kill -CONT $p 2>/dev/null
i=0
while [ -n "$(found)" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
for r in 1 2 3; do p=$(found); [ -n "$p" ] && kill -KILL $p 2>/dev/null; done
echo "stopped $n"
"""


# With a container runtime, before the sweep: remove every container labelled with the run (its first
# argument, the label filter; the runtime command is spliced in quoted), whatever step or hostprep made
# it, which ends what runs in it; then the sweep again as root through ``sudo -n`` when the runtime
# needs root (become): root's tagged processes (the runtime's clients, an image load) are not this
# user's to see or end. Each prints one line.
CONTAINERS = r"""c() {{ {cmd} "$@"; }}
if ids=$(c ps -a -q --filter "$1" 2>/dev/null); then
  if [ -n "$ids" ]; then
    c rm -f $ids >/dev/null 2>&1
    n=$(printf '%s\n' $ids | wc -l)
    if [ -n "$(c ps -a -q --filter "$1" 2>/dev/null)" ]; then echo "containers not removed ($n)"
    else echo "containers removed $n"; fi
  fi
else
  err=$(c ps -a -q 2>&1 >/dev/null)
  printf 'containers not listed: %s\n' "$(printf %s "$err" | tr '\n' ' ' | cut -c1-200)"
fi
"""
AS_ROOT = r"""if out=$(sudo -n /bin/sh -c "$sweep" sweep "$2" 2>&1); then echo "as root: $out"
else printf 'as root: not swept: %s\n' "$(printf %s "$out" | tr '\n' ' ' | cut -c1-200)"; fi
"""


def host_tag(run_id: str, host: str) -> str:
    return f"{run_id}/{host}"


def control_tag(run_id: str) -> str:
    return f"{run_id}:{os.getpid()}"


def step_env(node: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of an srun step that a playbook's task runs on ``node`` (the srun connection):
    :func:`sb_fleet.fleet.slurm_launch.task_env` with the control node's tag and the node's host tag, which
    srun passes on to the step's task."""
    environ = dict(os.environ) if environ is None else environ
    env = task_env(environ)
    if environ.get(CONTROL_TAG):
        env[CONTROL_TAG] = environ[CONTROL_TAG]
    if environ.get(RUN_VAR):
        env[HOST_TAG] = host_tag(environ[RUN_VAR], node)
    return env


def tagged(var: str, value: str, argv_has: Iterable[str] = ()) -> list[int]:
    """The pids of this user's processes whose environment holds ``var=value`` (this one excepted); with
    ``argv_has``, only those with one of these words as an argument."""
    want = f"{var}={value}".encode()
    words = {w.encode() for w in argv_has}
    me = os.getpid()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if want not in env:
                continue
            if words:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if not words & set(f.read().split(b"\0")):
                        continue
        except OSError:
            continue
        out.append(int(d))
    return out


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Running (a zombie has ended: only its parent's wait is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def end(pids: Callable[[], list[int]], grace: float = GRACE_S) -> int:
    """End the processes ``pids()`` lists (called again until none is left, for what they start while
    they are ended): srun SIGTERM first and up to ``grace`` s to end its step, then SIGKILL for all."""
    first = pids()
    if not first:
        return 0
    sruns = [p for p in first if comm(p) == "srun"]
    for p in sruns:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGTERM)
    t_end = time.monotonic() + grace
    while sruns and any(alive(p) for p in sruns) and time.monotonic() < t_end:
        time.sleep(0.1)
    seen = set(first)
    for _ in range(5):
        left = [p for p in pids() if alive(p)]
        if not left:
            break
        seen.update(left)
        for p in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.05)
    return len(seen)


def stop_control_node(run_id: str, hosts_too: bool = True) -> int:
    """End every process this sb-fleet started for ``run_id`` on the control node; how many. Without
    ``hosts_too``, a host's own processes that run here (a local host's tasks, an srun step's task on a
    node that is this machine) are left to the stage's stop of its hosts: only srun, ssh, Ansible."""

    def pids() -> list[int]:
        ours = tagged(CONTROL_TAG, control_tag(run_id))
        if hosts_too:
            return ours
        hosts = {p for p in ours if _has_var(p, HOST_TAG)}
        return [p for p in ours if p not in hosts or comm(p) == "srun"]

    return end(pids)


def _has_var(pid: int, var: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return any(v.startswith(f"{var}=".encode()) for v in f.read().split(b"\0"))
    except OSError:
        return False


def stop_host_clients(run_id: str, host: Host, launcher_srun: bool) -> int:
    """End the control node's side of one host's work: its srun steps (tagged with the host), or the ssh
    clients that talk to its address; how many."""
    if launcher_srun:
        return end(lambda: tagged(HOST_TAG, host_tag(run_id, host.name)))
    if host.is_local:  # its tasks are its processes, which the sweep ends
        return 0
    return end(lambda: tagged(CONTROL_TAG, control_tag(run_id), argv_has=(host.address,)), grace=0)


def sweep_hosts(
    run_id: str,
    hosts: list[Host],
    ssh: SshSettings,
    parallel: int,
    srun: SrunReach | None = None,
    timeout: float = 30,
    var: str = HOST_TAG,
    containers: Mapping[str, list[str]] | None = None,
) -> dict[str, str]:
    """:data:`SWEEP` on each host, through a new connection: host -> ``stopped N``, ``none`` or
    ``error: ...`` (the host did not answer: what ran there may run on). ``var``: the tag looked for
    (:data:`COLLECT_TAG`: only collect's commands). ``containers``: host -> the container runtime's
    command before its subcommand (``sudo -n`` first when it needs root): the run's containers there are
    removed first (:data:`CONTAINERS`), and with ``sudo -n`` root's tagged processes swept too."""
    if not hosts:
        return {}

    def script(h: Host) -> str:
        tag = shlex.quote(f"{var}={host_tag(run_id, h.name)}")
        argv = (containers or {}).get(h.name)
        if not argv:
            return f"set -- {tag}\n{SWEEP}"
        # every value quoted: host and config data stay data in the shell
        label = shlex.quote(f"label={CONTAINER_LABEL}={run_id}")
        out = f"set -- {label} {tag}\n" + CONTAINERS.format(cmd=" ".join(shlex.quote(a) for a in argv))
        out += f'sweep={shlex.quote(SWEEP)}\n/bin/sh -c "$sweep" sweep "$2"\n'
        return out + (AS_ROOT if argv[:2] == ["sudo", "-n"] else "")

    return on_hosts(hosts, script, ssh, parallel, timeout, srun)
