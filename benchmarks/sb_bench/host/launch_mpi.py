"""SuperBench's ``mpi`` mode on the host: one ``mpirun`` (Open MPI) per node group, from its first node.

The on-host runner calls :func:`run_mpi` for an entry's ``mpi`` mode. Without a group (SuperBench's
``node_num: 1``) mpirun starts ``proc_num`` ranks on this node. With a group (a pattern's pair or
batch, or every node), the control node hands the group's first node its members (``--mpi-group-b64``:
address, SSH port and user, workspace and Python of each) and this node:

* writes an ``ssh_config`` with one entry per member (port, user, ``BatchMode``, the fleet's host-key
  policy, a ``known_hosts`` holding exactly the keys the control node knows for those members) and
  gives it to mpirun as its launch agent (``plm_rsh_agent``), so mpirun reaches the other nodes over
  SSH under the same host-key policy as sb-fleet itself;
* writes an application file, one line per member (``-np <proc_num> -host <address>``): each line
  starts the member's own Python with a small bootstrap (no spaces, no quoting: base64) that enters
  that member's workspace, sets the torch.distributed variables from Open MPI's
  (``OMPI_COMM_WORLD_RANK`` -> ``RANK``, ...), the pattern's ``SB_MODE_SERIAL_INDEX`` /
  ``SB_MODE_PARALLEL_INDEX``, the member's own address (``SB_LOCAL_ADDR``) and the mode's ``env``,
  and runs ``python -m sb_bench exec`` writing into that member's own results directory;
* runs mpirun in its own process group under the entry's deadline: a hung group is killed (mpirun
  takes its remote ranks down with it) and recorded as a timeout like any other rank.

Nothing here needs torch or an MPI library: mpirun starts ordinary processes.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
from pathlib import Path
from typing import Any

from sb_bench.host.modespec import SpecError, count

# SuperBench's defaults when a mode sets no ``mca`` (superbench/runner/runner.py).
DEFAULT_MCA = {"pml": "ob1", "btl": "^openib", "btl_tcp_if_exclude": "lo,docker0", "coll_hcoll_enable": 0}

_BOOT = """
import os
ws = os.path.expanduser(c["workspace"])
os.chdir(ws)
py = c["python"] if os.path.isabs(c["python"]) else os.path.join(ws, c["python"])
e = dict(os.environ)
e.update(c["env"])
g = e.get
e["RANK"] = g("OMPI_COMM_WORLD_RANK", "0")
e["WORLD_SIZE"] = g("OMPI_COMM_WORLD_SIZE", "1")
e["LOCAL_RANK"] = g("OMPI_COMM_WORLD_LOCAL_RANK", "0")
e["LOCAL_WORLD_SIZE"] = g("OMPI_COMM_WORLD_LOCAL_SIZE", "1")
e["GROUP_RANK"] = e["NODE_RANK"] = str(c["node_rank"])
e["PYTHONPATH"] = os.path.join(ws, "suite")
os.makedirs(c["out"], exist_ok=True)
os.execve(py, [py, "-m", "sb_bench", "exec", c["benchmark"], "--params", c["params"], "--out", c["out"]], e)
"""


def bootstrap(cfg: dict[str, Any]) -> str:
    """The Python code (``-c``) that starts one member's ranks, as one token without spaces or quotes
    that Open MPI's application-file reader or a shell could split."""
    code = "import json\nc = json.loads(" + repr(json.dumps(cfg, sort_keys=True)) + ")\n" + _BOOT
    b64 = base64.b64encode(code.encode()).decode()
    return f"exec(__import__('base64').b64decode('{b64}'))"


def pattern_env(args: Any) -> dict[str, str]:
    """What a pattern round adds to every benchmark process's environment (the runner's ``_env``)."""
    env: dict[str, str] = {}
    idx = getattr(args, "mode_index", None)
    if idx:
        serial, _, parallel = str(idx).partition(",")
        env["SB_MODE_SERIAL_INDEX"] = serial
        env["SB_MODE_PARALLEL_INDEX"] = parallel or "0"
    addr = getattr(args, "local_addr", None)
    if addr:
        env["SB_LOCAL_ADDR"] = str(addr)
    return env


def decode_group(b64: str | None) -> dict[str, Any] | None:
    if not b64:
        return None
    group = json.loads(base64.b64decode(b64, validate=True).decode())
    if not isinstance(group, dict) or not isinstance(group.get("members"), list) or not group["members"]:
        raise ValueError("--mpi-group-b64: expected an object with a non-empty 'members' list")
    return group


def encode_group(group: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(group, sort_keys=True, separators=(",", ":")).encode()).decode()


def ssh_config(
    members: list[dict[str, Any]], known_hosts: Path, policy: str, connect_timeout: int = 10
) -> str:
    strict = {"strict": "yes", "accept-new": "accept-new", "off": "no"}.get(policy, "yes")
    lines = []
    for m in members:
        lines += [
            f"Host {m['addr']}",
            f"  HostName {m['addr']}",
            f"  Port {int(m.get('port') or 22)}",
            *([f"  User {m['user']}"] if m.get("user") else []),
            "  BatchMode yes",
            f"  StrictHostKeyChecking {strict}",
            f"  UserKnownHostsFile {known_hosts}",
            f"  ConnectTimeout {int(connect_timeout)}",
            "",
        ]
    return "\n".join(lines)


def mca_args(mode: dict[str, Any]) -> list[str]:
    mca = mode.get("mca")
    out: list[str] = []
    for k, v in (DEFAULT_MCA if mca is None else mca).items():
        out += ["--mca", str(k), str(v)]
    return out


def mode_env(mode: dict[str, Any]) -> dict[str, str]:
    """The mode's ``env``; a key without a value passes this node's value on (SuperBench's ``-x KEY``)."""
    env: dict[str, str] = {}
    for k, v in (mode.get("env") or {}).items():
        if v is None:
            if k in os.environ:
                env[str(k)] = os.environ[k]
        else:
            env[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
    return env


FORWARD_PREFIXES = ("NCCL_", "GLOO_", "UCX_", "TP_", "TORCH_", "CUDA_", "OMP_", "SB_")
NOT_FORWARDED = {
    "SB_HOST",
    "SB_RUN_ID",
    "SB_RESULT_RANK",
    "SB_LOCAL_ADDR",
    "SB_MODE_SERIAL_INDEX",
    "SB_MODE_PARALLEL_INDEX",
}


def forwarded_env(environ: Any) -> dict[str, str]:
    """The fleet's benchmark environment (``fleet.env``: NCCL_*, GLOO_*, ...) as this node has it, for
    the ranks mpirun starts on the other nodes (whose login environment does not have it)."""
    return {k: v for k, v in environ.items() if k.startswith(FORWARD_PREFIXES) and k not in NOT_FORWARDED}


def run_mpi(runner: Any, er: Any, mode: dict[str, Any], deadline: float) -> None:
    """Run one entry's ``mpi`` mode: mpirun over this node's group (or this node alone).

    ``runner``/``er``: the runner's ``Runner`` and ``EntryRun`` (the runner calls this module, not the other
    way round, so they are not imported here)."""
    nproc = count(mode.get("proc_num"), f"{er.key}: proc_num")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SpecError(
            f"{er.key}: mode mpi needs Open MPI's mpirun on the host (Debian: apt-get install openmpi-bin)"
        )
    group = decode_group(getattr(runner.args, "mpi_group_b64", None))
    work = er.out / "mpi"
    work.mkdir(parents=True, exist_ok=True)
    cwd = Path.cwd()
    try:
        out_rel = str(er.out.relative_to(cwd))
    except ValueError:
        out_rel = str(er.out)
    shared = {**forwarded_env(os.environ), **mode_env(mode), **pattern_env(runner.args)}
    shared.pop("SB_LOCAL_ADDR", None)  # each member's own, below
    if group is None:
        members = [
            {
                "name": runner.host,
                "addr": "localhost",
                "workspace": str(cwd),
                "python": runner.python,
                "base_python": runner.python,
            }
        ]
    else:
        members = group["members"]
    lines = []
    for i, m in enumerate(members):
        env = {**shared, "SB_HOST": str(m.get("name") or ""), "SB_RUN_ID": runner.run_id}
        if group is None:
            env["MASTER_ADDR"] = "127.0.0.1"
            env["MASTER_PORT"] = str(int(runner.args.master_port) + int(er.entry.get("port_offset", 0)))
        else:
            env["SB_LOCAL_ADDR"] = str(m["addr"])
            env["MASTER_ADDR"] = str(members[0]["addr"])
            env["MASTER_PORT"] = str(group.get("master_port", 29500))
        cfg = {
            "workspace": str(cwd) if i == 0 else str(m["workspace"]),
            "python": runner.python if i == 0 else str(m["python"]),
            "env": env,
            "node_rank": i,
            "benchmark": er.entry["benchmark"],
            "params": json.dumps(er.entry.get("params") or {}),
            "out": out_rel,
        }
        base_py = str(m.get("base_python") or "/usr/bin/python3")
        if i == 0:
            base_py = runner.python if os.path.isabs(runner.python) else str(cwd / runner.python)
        lines.append(f"-np {nproc} -host {m['addr']}:{nproc} {base_py} -c {bootstrap(cfg)}")
    appfile = work / "appfile"
    appfile.write_text("\n".join(lines) + "\n")
    argv = [mpirun, "--tag-output"]
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    if group is not None:
        kh = work / "known_hosts"
        kh.write_text(str(group.get("known_hosts") or ""))
        cfg_path = work / "ssh_config"
        cfg_path.write_text(ssh_config(members, kh, str(group.get("policy") or "strict")))
        argv += ["--mca", "plm_rsh_agent", f"ssh -F {shlex.quote(str(cfg_path))}"]
    argv += mca_args(mode)
    argv += ["--app", str(appfile)]
    er.expected_ranks += list(range(nproc))  # this node's ranks; the others write on their own nodes
    env = dict(os.environ)
    p = runner.spawn(argv, env, er.out / "logs" / "mpirun.log", list(range(nproc)))
    runner.wait(er, [p], deadline)
