"""Each host's deploy exec and health-check arguments, built here in Python once per host (pure).

validate's nightly path is one SSH exec per host (``deploy.yml``: the suite's ``first_exec`` with a
base64 JSON spec of the health checks, hostprep and the first step). Building that command in Ansible's
Jinja, per host (the spec's ``to_json | b64encode`` over every argument), cost the control node 30-40 ms
of CPU per host, a fifth of the nightly gate's (docs/speed.md). Here it is built once per host in Python
and reaches Ansible as data (``!unsafe`` extra variables: ``sb_exec``), so the play only looks it up.

Two halves:

* :func:`exec_hosts_doc`, at render time: what each host's exec needs that the plan, the config and the
  inventory fix (workspace, Python, hostprep's and the checks' arguments, the sysfs root, the health
  profile), written as ``exec-hosts.json`` beside the playbooks;
* :func:`fast_commands`, :func:`suite_invocations` and :func:`health_args`, at stage time: the commands
  for the hosts of this play, with what the stage hands in (the checks first, the plan's first step).

The inventory variables read here (``sb_path_sysfs``, ``sb_path_procfs``, ``sb_tool_dir``,
``sb_health_profile``) are data, like every ``sb_*`` variable (sb_fleet.config.inventory refuses one
that holds a template): they are never templated, and every value reaches a shell through
:func:`shlex.quote` (what Ansible's ``quote`` filter is).
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sb_fleet.config.inventory import Inventory
from sb_fleet.plan.run_plan import HostSetup
from sb_fleet.plan.tasks import INSTALLING, NEED_SUITE, PHASE_LATE, TAG

EXEC_HOSTS_FILE = "exec-hosts.json"
EXEC_HOSTS_VERSION = 1
FIRST_EXEC = "suite/sb_bench/host/first_exec.py"
BOOTSTRAP_NAME = "sb-fleet-deploy"  # $0 of the suite's transfer script

# Run on each host by the deploy task as ``sh -c BOOTSTRAP sb-fleet-deploy WS SUITE_DIR CMD...`` with
# the suite archive (base64) on stdin: workspace (0700), unpack once per suite version (temp dir, then
# rename), point ``suite`` at it, then exec the host preparation command.
DEPLOY_BOOTSTRAP = """set -eu
ws=$1 suite=$2
shift 2
case $ws in "~") ws=$HOME ;; "~/"*) ws=$HOME/${ws#"~/"} ;; esac
umask 077
mkdir -p -- "$ws"
chmod 700 -- "$ws"
cd -- "$ws"
if [ -f "$suite/sb_bench/__init__.py" ]; then
  cat >/dev/null
else
  tmp=$(mktemp -d ./.suite.XXXXXX)
  if ! base64 -d | tar -xzf - -C "$tmp"; then
    rm -rf -- "$tmp"
    echo "cannot unpack the benchmark suite into $ws" >&2
    exit 1
  fi
  # Hosts that share the workspace may unpack at once: the first rename wins, the others keep it.
  if [ -e "$suite" ] && [ ! -f "$suite/sb_bench/__init__.py" ]; then rm -rf -- "$suite"; fi
  if ! mv -T -- "$tmp/$suite" "$suite" 2>/dev/null && [ ! -f "$suite/sb_bench/__init__.py" ]; then
    rm -rf -- "$tmp"
    echo "cannot put the benchmark suite into $ws" >&2
    exit 1
  fi
  rm -rf -- "$tmp"
fi
ln -sfn -- "$suite" suite
echo SB_FLEET_SUITE_READY
exec "$@"
"""


def _var(vars_: Mapping[str, Any], name: str) -> str | None:
    v = vars_.get(name)
    return None if v is None else str(v)


def prep_args(fleet: Mapping[str, Any], host: str, needs_torch: bool) -> list[str]:
    """hostprep's arguments (benchmarks/sb_bench/host/hostprep.py)."""
    args = [
        "--install",
        str(fleet["install_requirements"]),
        "--min-free-gb",
        str(fleet["min_free_disk_gb"]),
        "--host",
        host,
    ]
    if fleet.get("venv") and fleet.get("cache"):
        args += ["--cache", str(fleet["cache"])]
    if fleet.get("venv"):
        args.append("--venv")
    if fleet.get("require_gpu"):
        args.append("--require-gpu")
    if not needs_torch:
        args.append("--no-torch")
    return args


def exec_hosts_doc(
    setups: Mapping[str, HostSetup],
    inventory: Inventory,
    fleet: Mapping[str, Any],
    health: Mapping[str, Any],
    suite_digest: str,
    needs_torch: bool,
) -> dict[str, Any]:
    """``exec-hosts.json``: per host what its exec needs (``health``: render_health.health_vars)."""
    hosts: dict[str, Any] = {}
    by_name = {x.name: x for x in inventory.hosts}
    for h, s in setups.items():
        v = by_name[h].vars if h in by_name else {}
        hosts[h] = {
            "workspace": s.workspace,
            "python": s.base_python,
            "suite_python": "venv/bin/python" if fleet.get("venv") else s.base_python,
            "prep": prep_args(fleet, h, needs_torch),
            "sysfs": _var(v, "sb_path_sysfs"),
            "procfs": _var(v, "sb_path_procfs"),
            "tool_dir": _var(v, "sb_tool_dir"),
            "profile": _var(v, "sb_health_profile"),
        }
    return {
        "version": EXEC_HOSTS_VERSION,
        "suite_dir": f"suite-{suite_digest}",
        "health": {
            "timeout": health["timeout"],
            "default_profile": health["default_profile"],
            "expect": dict(health["expect"]),
        },
        "hosts": hosts,
    }


def health_args(doc: Mapping[str, Any], host: str) -> list[str]:
    """The health checks' arguments on ``host`` (sb_bench.health.runner), its profile's expectations
    included. KeyError: a host the run was not rendered for, or a profile it does not know (the stages
    check profiles first: check_stage.check_profiles)."""
    h, health = doc["hosts"][host], doc["health"]
    profile = h["profile"] if h["profile"] is not None else health["default_profile"]
    return [
        "--json",
        "--host",
        host,
        "--sysfs",
        h["sysfs"] or "/sys",
        "--procfs",
        h["procfs"] or "/proc",
        "--tool-dir",
        h["tool_dir"] or "",
        "--workspace",
        h["workspace"],
        "--timeout",
        str(health["timeout"]),
        "--expect-b64",
        health["expect"][profile],
    ]


@dataclass(frozen=True)
class HealthFirst:
    """The checks open the exec (validate): bounded at ``timeout`` s, SIGKILL ``kill_after`` s later;
    a host whose checks failed stops after them unless ``go_on``."""

    mark: str
    timeout: int
    kill_after: int
    go_on: bool


@dataclass(frozen=True)
class FirstStep:
    """The plan's first step starts in the exec (validate): its marker line, its runner's environment
    (``K=V``) and arguments (``-m sb_bench.host.runner`` first), its timeout."""

    mark: str
    env: tuple[str, ...]
    args: tuple[str, ...]
    timeout: int


# What may follow the results' marker line per entry, beyond the files' bytes: a listing record, a
# checksum line and tar headers (a long name's included)
SHIP_PER_ENTRY = 16 << 10


@dataclass(frozen=True)
class ShipResults:
    """After the first step, the exec sends the host's results directory on its stdout after the line
    ``mark`` (sb_bench.host.ship_results), within these bounds; only on the hosts of ``dirs`` (those whose
    exec goes over sb-fleet's own ssh client, which reads it: a playbook's task result would hold it as
    text)."""

    mark: str
    dirs: Mapping[str, str]  # host -> its results directory (may start with ~/)
    max_files: int
    max_file_bytes: int
    max_bytes: int

    @property
    def cap(self) -> int:
        """The most bytes a host may send after the marker line within these bounds (a MiB to spare)."""
        return self.max_bytes + self.max_files * SHIP_PER_ENTRY + (1 << 20)


def exec_spec(
    doc: Mapping[str, Any],
    host: str,
    health: HealthFirst | None,
    step: FirstStep | None,
    ship: ShipResults | None = None,
) -> str:
    """first_exec's ``--spec-b64`` for ``host``: base64 of its JSON spec (data; no shell or template
    engine reads it)."""
    h = doc["hosts"][host]
    spec = {
        "health": (
            {
                "args": health_args(doc, host),
                "timeout": int(health.timeout),
                "kill_after": int(health.kill_after),
                "mark": health.mark,
                "go_on": bool(health.go_on),
            }
            if health is not None
            else None
        ),
        "prep": list(h["prep"]),
        "step": (
            {
                "mark": step.mark,
                "env": [*step.env, *([f"SB_PATH_SYSFS={h['sysfs']}"] if h["sysfs"] is not None else [])],
                "python": h["suite_python"],
                "args": [*step.args, "--host", host],
            }
            if step is not None
            else None
        ),
    }
    if ship is not None and step is not None and host in ship.dirs:
        spec["ship"] = {
            "dir": ship.dirs[host],
            "mark": ship.mark,
            "max_files": int(ship.max_files),
            "max_file_bytes": int(ship.max_file_bytes),
            "max_bytes": int(ship.max_bytes),
        }
    return base64.b64encode(json.dumps(spec, separators=(",", ":")).encode()).decode()


def exec_timeout(deploy_timeout: int, health: HealthFirst | None, step: FirstStep | None) -> int:
    """The exec's bound: deploy's, and the checks' and the first step's when they ride with it."""
    return (
        int(deploy_timeout)
        + (int(step.timeout) if step else 0)
        + ((int(health.timeout) + int(health.kill_after)) if health else 0)
    )


def sh_path(path: str) -> str:
    """A remote path as a shell word: quoted, with a leading ``~/`` kept expandable (``$HOME`` on the
    host). Used for the deploy exec's ``cd`` and by collect (sb_fleet.fleet.fetch)."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def read_exec_hosts(path: Path | None) -> dict[str, Any] | None:
    """``exec-hosts.json`` as render wrote it (None: a run directory rendered before it existed)."""
    return json.loads(path.read_text()) if path is not None else None


def fast_commands(
    doc: Mapping[str, Any],
    hosts: Iterable[str],
    run_tag: str,
    health: HealthFirst | None,
    step: FirstStep | None,
    ship: ShipResults | None = None,
    watch: PhaseWatch | None = None,
) -> dict[str, str]:
    """deploy.yml's raw command per host: where this suite version is in the workspace, link it and
    ``exec`` its first_exec with the host's spec; else print the need-suite line only (nothing a cold
    host would need rides along).

    The login shell first becomes a shell that carries the process tag in its own environment
    (:func:`tagged_shell`): the ``cd`` into the workspace is the first thing that can hang (a workspace on
    a dead NFS mount), and a stop finds the process that hangs there by its tag."""
    suite = shlex.quote(doc["suite_dir"])
    out: dict[str, str] = {}
    for host in hosts:
        h = doc["hosts"][host]
        py = shlex.quote(h["python"])
        out[host] = tagged_shell(
            f"{run_tag}/{host}",
            f"cd {sh_path(h['workspace'])} 2>/dev/null && [ -f {suite}/sb_bench/host/first_exec.py ] "
            f"&& command -v {py} >/dev/null && ln -sfn -- {suite} suite "
            f"&& exec {py} {FIRST_EXEC} --spec-b64 {shlex.quote(exec_spec(doc, host, health, step, ship))}; "
            f"echo {shlex.quote(NEED_SUITE)}",
            watch,
        )
    return out


# The exec's phases watched on the host itself, for a host whose exec goes through Ansible (which hands
# its output over only when the task ends, so the control node cannot watch the phases as over its own
# clients). POSIX sh and coreutils/util-linux only: nothing here needs the host's Python, which is what may
# hang. Arguments: the late line's mark, hostprep's "installing" line, the install phase's name and
# seconds, the number of phases, then each phase's name, seconds and the line that ends it ("" for the
# last, which the command's end ends), then the command. The command runs in a session of its own; its
# stdout is read line by line as it comes (and passed on), the current phase and since when kept in a
# file; a loop beside it ends the session (SIGTERM, SIGKILL 5 s later) once a phase outlives its
# seconds, and the script then prints "<mark> <phase> <seconds>" and exits 124. Without mktemp, mkfifo
# or setsid the command runs unwatched (its task's whole timeout holds).
PHASE_WATCH = r"""late=$1 inst=$2 iname=$3 isecs=$4 n=$5
shift 5
d=$(mktemp -d "${TMPDIR:-/tmp}/.sb-fleet-watch.XXXXXX" 2>/dev/null) || d=
if [ -z "$d" ] || ! setsid -w true 2>/dev/null || ! mkfifo "$d/out" 2>/dev/null; then
  [ -n "$d" ] && rm -rf -- "$d"
  shift $((3 * n))
  exec "$@"
fi
trap 'rm -rf -- "$d"' EXIT
i=0
while [ "$i" -lt "$n" ]; do
  printf '%s\n%s\n%s\n' "$1" "$2" "$3" > "$d/p$i"
  shift 3
  i=$((i + 1))
done
at() {  # at INDEX SINCE [NAME SECONDS]: the phase now, written whole (a rename)
  if [ $# -gt 2 ]; then name=$3 secs=$4; else { read -r name; read -r secs; } < "$d/p$1"; fi
  printf '%s %s %s %s\n' "$1" "$2" "$name" "$secs" > "$d/now.tmp" && mv -f "$d/now.tmp" "$d/now"
}
at 0 "$(date +%s)"
# the command leads a session of its own (its process group's id written first), setsid waiting for it
setsid -w /bin/sh -c 'echo $$ > "$0/group"; exec "$@"' "$d" "$@" > "$d/out" &
pid=$!
(
  while kill -0 "$pid" 2>/dev/null; do
    if { read -r idx since name secs; } < "$d/now" 2>/dev/null &&
      [ $(( $(date +%s) - since )) -gt "$secs" ]; then
      printf '%s %s %s\n' "$late" "$name" "$secs" > "$d/late"
      g=$(cat "$d/group" 2>/dev/null)
      if [ -n "$g" ]; then
        kill -TERM "-$g" 2>/dev/null; kill -CONT "-$g" 2>/dev/null
        j=0
        while kill -0 "-$g" 2>/dev/null && [ "$j" -lt 50 ]; do sleep 0.1; j=$((j + 1)); done
        kill -KILL "-$g" 2>/dev/null
      fi
      exit 0
    fi
    sleep 1
  done
) &
watch=$!
idx=0
while IFS= read -r line || [ -n "$line" ]; do
  printf '%s\n' "$line"
  if [ "$idx" -lt "$n" ]; then
    { read -r name; read -r secs; read -r end; } < "$d/p$idx"
    if [ -n "$end" ] && { [ "$line" = "$end" ] || [ "${line#"$end "}" != "$line" ]; }; then
      idx=$((idx + 1))
      [ "$idx" -lt "$n" ] && at "$idx" "$(date +%s)"
    elif [ "$line" = "$inst" ] && [ "$name" = hostprep ] && [ -n "$isecs" ]; then
      { read -r i0 since rest; } < "$d/now"
      at "$idx" "$since" "$iname" "$isecs"
    fi
  fi
done < "$d/out"
wait "$pid"
rc=$?
kill "$watch" 2>/dev/null
wait "$watch" 2>/dev/null
if [ -s "$d/late" ]; then cat "$d/late"; exit 124; fi
exit "$rc"
"""


@dataclass(frozen=True)
class PhaseWatch:
    """The phases of an exec for :data:`PHASE_WATCH`: each (name, seconds, the line that ends it; "" for
    the last), and hostprep's longer deadline once it says it installs (name, seconds; None: none)."""

    phases: tuple[tuple[str, int, str], ...]
    install: tuple[str, int] | None = None

    def args(self) -> list[str]:
        iname, isecs = self.install if self.install is not None else ("", "")
        out = [PHASE_LATE, INSTALLING, iname, str(isecs), str(len(self.phases))]
        for name, secs, end in self.phases:
            out += [name, str(int(secs)), end]
        return out


def tagged_shell(tag: str, script: str, watch: PhaseWatch | None = None) -> str:
    """A line for a host's login shell that runs ``script`` (shell code sb-fleet wrote, every value in it
    quoted) in ``/bin/sh`` with ``SB_FLEET_TAG=<tag>`` in that shell's own environment from its start:
    ``exec env`` replaces the login shell, so no process of the command lacks the tag (an ``export`` in
    the login shell would tag only its children, and a ``cd`` that hangs in it would be found by
    nothing). ``watch``: the phases are watched on the host by :data:`PHASE_WATCH` (every argument
    quoted: data, never code)."""
    head = f"exec env {TAG['var']}={shlex.quote(tag)} /bin/sh -c "
    if watch is None:
        return head + shlex.quote(script)
    args = " ".join(shlex.quote(a) for a in [*watch.args(), "/bin/sh", "-c", script])
    return f"{head}{shlex.quote(PHASE_WATCH)} sb-fleet-watch {args}"


def suite_invocations(
    doc: Mapping[str, Any],
    hosts: Iterable[str],
    run_tag: str,
    health: HealthFirst | None,
    step: FirstStep | None,
    ship: ShipResults | None = None,
) -> dict[str, dict[str, Any]]:
    """deploy-suite.yml's command per host (``argv``, no shell reads the values: the fixed bootstrap
    script gets them as arguments) and its process tag (``tag``)."""
    out: dict[str, dict[str, Any]] = {}
    for host in hosts:
        h = doc["hosts"][host]
        out[host] = {
            "argv": [
                "/bin/sh",
                "-c",
                DEPLOY_BOOTSTRAP,
                BOOTSTRAP_NAME,
                h["workspace"],
                doc["suite_dir"],
                h["python"],
                FIRST_EXEC,
                "--spec-b64",
                exec_spec(doc, host, health, step, ship),
            ],
            "tag": f"{run_tag}/{host}",
        }
    return out


def suite_commands(invocations: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """:func:`suite_invocations` as one line per host for its login shell, for sb-fleet's own ssh client
    (sb_fleet.fleet.direct_exec), which has no argv of its own to hand over: ``exec env`` with the process
    tag, then the same argv, every word quoted (no value is read as shell code); the tag is in the
    environment of every process of it from the start."""
    return {
        host: f"exec env {TAG['var']}={shlex.quote(str(inv['tag']))} "
        + " ".join(shlex.quote(str(a)) for a in inv["argv"])
        for host, inv in invocations.items()
    }
