"""Containers: the config's ``fleet.container`` section and the runtime command sets, as pure data.

With ``fleet.runtime`` set to docker, podman or enroot, ``deploy`` puts one
image on every host (``distribution: registry`` pulls it, throttled;
``tarball`` copies a saved image once per host, checks it, loads it, and
skips hosts that already hold the same image digest) and ``run`` executes
each step's runner inside it, with the workspace mounted at the same path
so results land where they land without a container.

Every function here is pure: it returns argv lists in which per-host values
are Ansible expressions (``{{ sb_ws_abs }}``), so the rendered playbooks and
the golden files under ``tests/unit/golden/container/`` show exactly what a
host runs. Registry secrets never appear in argv, playbooks or logs: the
login reads the password on stdin from a file the control node names in an
environment variable (:func:`registry_secret`), and the task is ``no_log``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sb_fleet.config.container_settings import ContainerSettings, Runtime
from sb_fleet.plan.tasks import HOST_TAG, IMAGE_DIGEST, IMAGE_LOAD

SECRET_FILE_ENV = "SB_FLEET_REGISTRY_SECRET_FILE"
LABEL = "sb-fleet.run"


# -- command sets ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class V:
    """A per-host value: an Ansible expression (``splat``: a list spliced into argv)."""

    expr: str
    splat: bool = False


Token = str | V
Argv = list[Token]


_PLAIN = re.compile(r"^[\x20-\x7e]*$")


def lit(s: str) -> str:
    """``s`` as a string literal of an Ansible expression, read back verbatim. Ansible doubles every
    backslash inside ``{{ }}`` before Jinja reads it, so an escaped literal (``"a\\"b"``, ``"\\u00e9"``)
    would arrive with its backslashes: printable ASCII without a backslash is written as it is, in
    whichever quotes it does not hold, anything else as base64 that Ansible's ``b64decode`` turns back
    into the same text."""
    if _PLAIN.match(s) and "\\" not in s:
        if '"' not in s:
            return json.dumps(s)
        if "'" not in s:
            return f"'{s}'"
    return f'("{base64.b64encode(s.encode()).decode()}" | b64decode)'


def cat(*parts: Token) -> V:
    """Literal and per-host parts joined into one argument."""
    return V(" ~ ".join(p.expr if isinstance(p, V) else lit(p) for p in parts))


def to_ansible(argv: Argv) -> str:
    """The argv as one Ansible expression: literals as string literals, per-host values as expressions,
    so no value is ever templated twice."""
    chunks: list[str] = []
    lits: list[str] = []
    for t in argv:
        if isinstance(t, V) and t.splat:
            if lits:
                chunks.append("[" + ", ".join(lits) + "]")
                lits = []
            chunks.append(f"({t.expr})")
        else:
            lits.append(f"({t.expr})" if isinstance(t, V) else lit(t))
    if lits or not chunks:
        chunks.append("[" + ", ".join(lits) + "]")
    return "{{ " + " + ".join(chunks) + " }}"


def to_display(argv: Argv) -> list[str]:
    """The argv for humans and golden files: per-host values shown as ``<expr>``."""
    return [f"<{t.expr}>" + ("..." if t.splat else "") if isinstance(t, V) else t for t in argv]


# The per-host values the playbooks define.
WS = V("sb_ws_abs")
UID = V("sb_uid")
GID = V("sb_gid")
HOST_ARGS = V("sb_container_host_args | default([])", splat=True)
# The GPU and RDMA flags of this host, from its facts (:func:`host_device_args`; the stages pass them).
DEVICE_VAR = "sb_ctr_devices"
DEVICES = V(f"({DEVICE_VAR} | default({{}}))[inventory_hostname] | default([])", splat=True)


# -- GPU and RDMA devices ----------------------------------------------------------------------------
# As SuperBench's deploy runs its container (--gpus all, --net host, --ipc host), plus what RDMA needs:
# the verbs devices and unlimited locked memory (NCCL and perftest register their buffers).
MEMLOCK = ["--ulimit", "memlock=-1"]
_NVIDIA = {
    "docker": ["--gpus", "all"],  # the NVIDIA Container Toolkit
    "podman": ["--device", "nvidia.com/gpu=all"],  # CDI (nvidia-ctk cdi generate on the host)
    "enroot": ["--env", "NVIDIA_VISIBLE_DEVICES=all"],  # enroot's nvidia hook
}
# ROCm's devices, as SuperBench runs its AMD images.
_AMD = [
    "--device",
    "/dev/kfd",
    "--device",
    "/dev/dri",
    "--group-add",
    "video",
    "--security-opt",
    "seccomp=unconfined",
]
_IB = {
    "docker": ["--device", "/dev/infiniband"],
    "podman": ["--device", "/dev/infiniband"],
    "enroot": ["--env", "MELLANOX_VISIBLE_DEVICES=all"],  # enroot's mellanox hook
}


def _gpu_vendor(facts: Mapping[str, Any]) -> str | None:
    """ "nvidia" or "amd" when the host's facts show at least one GPU of that vendor, else None. Facts come
    from the host: only these two words and a positive integer count are believed."""
    vendor, count = facts.get("gpu_vendor"), facts.get("gpu_count")
    if vendor in ("nvidia", "amd") and isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return str(vendor)
    return None


def _has_rdma(facts: Mapping[str, Any]) -> bool:
    """An RDMA device with at least one port in the host's facts (``nics``, from /sys/class/infiniband)."""
    nics = facts.get("nics")
    return isinstance(nics, list) and any(
        isinstance(n, dict) and isinstance(n.get("ports"), list) and n["ports"] for n in nics
    )


def forced_device_args(runtime: Runtime, c: ContainerSettings) -> list[str]:
    """The device flags the config sets on every host (``gpus: all``, ``infiniband: all``)."""
    out = [*(_NVIDIA[runtime] if c.gpus == "all" else []), *(_IB[runtime] if c.infiniband == "all" else [])]
    return [*out, *MEMLOCK] if out and runtime != "enroot" else out


def host_device_args(runtime: Runtime, c: ContainerSettings, facts: Mapping[str, Any] | None) -> list[str]:
    """The device flags one host adds to its container run from its facts (``facts/<host>.json``) where
    the config says ``auto``: its GPUs (NVIDIA or AMD), its RDMA devices, and unlimited locked memory
    with either. Every flag is a constant chosen here: a host's facts pick flags, never write them."""
    f = facts or {}
    out: list[str] = []
    vendor = _gpu_vendor(f) if c.gpus == "auto" else None
    if vendor == "nvidia":
        out += _NVIDIA[runtime]
    elif vendor == "amd" and runtime != "enroot":
        out += _AMD
    if c.infiniband == "auto" and _has_rdma(f):
        out += _IB[runtime]
    if out and runtime != "enroot" and not forced_device_args(runtime, c):
        out += MEMLOCK
    return out


@dataclass(frozen=True)
class RunTarget:
    """Per-host values of a container run."""

    name: Token  # container name
    run_id: str
    workspace: Token = WS
    uid: Token = UID
    gid: Token = GID


def binary(runtime: Runtime, c: ContainerSettings) -> str:
    return c.binary or runtime


def uses_become(runtime: Runtime, c: ContainerSettings) -> bool:
    return c.become if c.become is not None else runtime != "enroot"


def _base(runtime: Runtime, c: ContainerSettings) -> Argv:
    """The runtime binary, the fleet's global args, then the host's own (inventory ``sb_container_host_args``)."""
    if runtime == "enroot":
        return [binary(runtime, c)]
    return [binary(runtime, c), *c.global_args, HOST_ARGS]


def tarball_name(c: ContainerSettings) -> str:
    return Path(c.tarball or "image.tar").name


def enroot_name(c: ContainerSettings) -> str:
    """The enroot container's name: derived from the image, stable across runs."""
    return "sb-" + re.sub(r"[^A-Za-z0-9_.-]", "_", c.image.split("/")[-1])


def image_file(c: ContainerSettings, workspace: Token = WS) -> V:
    """Where the image file lives on the host: the pushed tarball/.sqsh, or enroot's imported .sqsh."""
    name = tarball_name(c) if c.distribution == "tarball" else f"{enroot_name(c)}.sqsh"
    return cat(workspace, f"/images/{name}")


def login_cmd(runtime: Runtime, c: ContainerSettings) -> Argv | None:
    """Registry login; the password arrives on stdin. Enroot reads a credentials file instead."""
    if c.auth is None or runtime == "enroot":
        return None
    return [*_base(runtime, c), "login", "--username", c.auth.username, "--password-stdin", c.auth.registry]


def logout_cmd(runtime: Runtime, c: ContainerSettings) -> Argv | None:
    if c.auth is None or runtime == "enroot":
        return None
    return [*_base(runtime, c), "logout", c.auth.registry]


def enroot_ref(image: str) -> str:
    """enroot's reference syntax: docker://[REGISTRY#]IMAGE[:TAG]."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return f"docker://{first}#{rest}"
    return f"docker://{image}"


def pull_cmd(runtime: Runtime, c: ContainerSettings) -> Argv:
    if runtime == "enroot":
        # enroot import refuses an existing output file: fetch the tag afresh, like a pull does.
        return [
            "sh",
            "-c",
            'rm -f -- "$1" && exec "$0" import --output "$1" "$2"',
            binary(runtime, c),
            image_file(c),
            enroot_ref(c.image),
        ]
    return [*_base(runtime, c), "pull", c.image]


def load_cmd(runtime: Runtime, c: ContainerSettings) -> Argv:
    """Tarball: load it (docker/podman) or unpack the .sqsh into the container (enroot)."""
    if runtime == "enroot":
        return [binary(runtime, c), "create", "--force", "--name", enroot_name(c), image_file(c)]
    return [*_base(runtime, c), "load", "-i", image_file(c)]


def create_cmd(runtime: Runtime, c: ContainerSettings) -> Argv | None:
    """After a registry import, enroot still has to unpack the image into a container."""
    return load_cmd(runtime, c) if runtime == "enroot" else None


def inspect_cmd(runtime: Runtime, c: ContainerSettings) -> Argv:
    """Prints what :func:`parse_digest` reads: the image's ID (docker/podman); for enroot, the .sqsh's
    sha256, and nothing unless the container unpacked from it exists too."""
    if runtime == "enroot":
        return [
            "sh",
            "-c",
            '"$0" list | grep -qxF -- "$1" && sha256sum -- "$2"',
            binary(runtime, c),
            enroot_name(c),
            image_file(c),
        ]
    return [*_base(runtime, c), "image", "inspect", c.image]


def parse_digest(runtime: str, stdout: str) -> str | None:
    """The image digest from :func:`inspect_cmd`'s output, as ``sha256:<hex>``; None when absent."""
    out = (stdout or "").strip()
    if not out:
        return None
    if runtime == "enroot":
        h = out.split()[0]
    else:
        try:
            data = json.loads(out)
        except ValueError:
            return None
        if isinstance(data, list):
            data = data[0] if data else {}
        h = str(data.get("Id") or data.get("id") or "") if isinstance(data, dict) else ""
    h = h.removeprefix("sha256:")
    return f"sha256:{h}" if re.fullmatch(r"[0-9a-f]{64}", h) else None


def digest_expr(runtime: Runtime, var: str) -> str:
    """:func:`parse_digest` as an Ansible expression over a registered command result ``var``
    ("" when the image is absent)."""
    if runtime == "enroot":
        return f"{{{{ ('sha256:' ~ {var}.stdout.split()[0]) if {var}.rc == 0 and {var}.stdout else '' }}}}"
    return (
        f"{{{{ ('sha256:' ~ (({var}.stdout | from_json)[0].Id | regex_replace('^sha256:', ''))) "
        f"if {var}.rc == 0 else '' }}}}"
    )


def run_cmd(
    runtime: Runtime, c: ContainerSettings, t: RunTarget, command: Argv, env: dict[str, Token]
) -> Argv:
    """The container run of one step's runner (or of hostprep at deploy), workspace mounted at its path.
    Every process in the container carries the run's host tag (the play's ``sb_tag``), as on the host: a
    stop finds them (sb_fleet/fleet/reaper.py)."""
    env = dict(env)
    env.setdefault("HOME", "/tmp")
    env[HOST_TAG] = V("sb_tag")
    if c.suite == "workspace":
        env["PYTHONPATH"] = cat(t.workspace, "/suite")
    mount = cat(t.workspace, ":", t.workspace)
    if runtime == "enroot":
        argv: Argv = [binary(runtime, c), "start", "--rw", "--mount", mount]
        for k, v in sorted(env.items()):
            argv += ["--env", cat(f"{k}=", v) if isinstance(v, V) else f"{k}={v}"]
        argv += [*forced_device_args(runtime, c), DEVICES, *c.extra_run_args, enroot_name(c)]
        # enroot start has no --workdir: a fixed shell snippet, the directory passed as $0 (never spliced in).
        return [*argv, "sh", "-c", 'cd "$0" && exec "$@"', t.workspace, *command]
    argv = [
        *_base(runtime, c),
        "run",
        "--rm",
        "--name",
        t.name,
        "--label",
        f"{LABEL}={t.run_id}",
        "--user",
        cat(t.uid, ":", t.gid),
        "-v",
        mount,
        "-w",
        t.workspace,
    ]
    if c.network_host:
        argv.append("--network=host")
    if c.ipc_host:
        argv.append("--ipc=host")
    else:
        argv += ["--shm-size", c.shm_size]
    argv += [*forced_device_args(runtime, c), DEVICES]
    for k, v in sorted(env.items()):
        argv += ["-e", cat(f"{k}=", v) if isinstance(v, V) else f"{k}={v}"]
    return [*argv, *c.extra_run_args, c.image, *command]


def cleanup_cmds(runtime: Runtime, c: ContainerSettings, images: bool) -> dict[str, Argv]:
    """Commands of ``sb-fleet cleanup``: list our containers, remove them, and optionally the image."""
    out: dict[str, Argv] = {}
    if runtime == "enroot":
        out["list"] = [binary(runtime, c), "list"]
        out["remove"] = [binary(runtime, c), "remove", "--force", enroot_name(c)]
        if images:
            out["remove image"] = ["rm", "-f", image_file(c)]
        return out
    base = _base(runtime, c)
    out["list"] = [*base, "ps", "-a", "-q", "--filter", f"label={LABEL}"]
    out["remove"] = [*base, "rm", "-f", V("sb_ctr_ids.stdout_lines", splat=True)]
    if images:
        out["remove image"] = [*base, "rmi", "-f", c.image]
    return out


# -- control-node side ----------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageFile:
    path: str
    sha256: str
    sha1: str
    size: int
    digest: str | None  # the image digest the host must end with (None: known only after loading)


def _hash_file(path: Path) -> tuple[str, str]:
    h256, h1 = hashlib.sha256(), hashlib.sha1()  # sha1: what Ansible's copy checks the transfer with
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h256.update(chunk)
            h1.update(chunk)
    return h256.hexdigest(), h1.hexdigest()


def archive_digest(path: Path) -> str | None:
    """The image ID inside a docker-archive / OCI tarball (``docker save``/``podman save``): the config's
    sha256, named in manifest.json. None when the file is no such archive."""
    try:
        with tarfile.open(path) as tar:
            m = tar.extractfile("manifest.json")
            if m is None:
                return None
            manifest = json.loads(m.read())
    except (tarfile.TarError, KeyError, ValueError, OSError):
        return None
    if not isinstance(manifest, list) or not manifest:
        return None
    cfg = str(manifest[0].get("Config") or "")
    h = Path(cfg).name.removesuffix(".json")
    return f"sha256:{h}" if re.fullmatch(r"[0-9a-f]{64}", h) else None


def image_file_info(runtime: Runtime, c: ContainerSettings, cache: Path | None = None) -> ImageFile:
    """Checksums and expected digest of the tarball, cached by (path, size, mtime) in ``cache``."""
    p = Path(os.path.expanduser(c.tarball or ""))
    st = p.stat()
    key = f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    if cache is not None and cache.is_file():
        try:
            d = json.loads(cache.read_text())
            if d.get("key") == key:
                return ImageFile(**d["info"])
        except (ValueError, TypeError, KeyError):
            pass
    sha256, sha1 = _hash_file(p)
    digest = f"sha256:{sha256}" if runtime == "enroot" else archive_digest(p)
    info = ImageFile(str(p.resolve()), sha256, sha1, st.st_size, digest)
    if cache is not None:
        from sb_fleet.safe_files import atomic_write_json

        atomic_write_json(cache, {"key": key, "info": info.__dict__})
    return info


_HELD: dict[str, str] = {}


def hold_registry_password(c: ContainerSettings | None) -> None:
    """Take ``password_env``'s value out of this process's environment as soon as the config is known:
    every ansible-runner stage records the environment it inherits (artifacts/<stage>/command), and
    the deploy stage that does not need the password runs before the one that does."""
    if c is None or c.auth is None or not c.auth.password_env:
        return
    value = os.environ.pop(c.auth.password_env, None)
    if value:
        _HELD[c.auth.password_env] = value


@contextlib.contextmanager
def registry_secret(c: ContainerSettings | None) -> Iterator[None]:
    """Make the registry password readable by the deploy playbook without putting it in argv, the
    playbook, the run directory or the environment ansible-runner records (artifacts/<stage>/command).

    ``password_file``: its path is handed over. ``password_env``: the value goes to a private
    temporary file (tmpfs when there is one) and the variable is hidden from the child environment
    while Ansible runs; the file is deleted afterwards.
    """
    if c is None or c.auth is None:
        yield
        return
    from sb_fleet.errors import ConfigError

    a = c.auth
    saved_env = dict(os.environ)
    tmpdir = None
    try:
        if a.password_file:
            path = Path(os.path.expanduser(a.password_file))
            if not path.is_file():
                raise ConfigError(
                    "config",
                    "fleet.container.auth.password_file",
                    f"{path}: no such file",
                    "give the path of a file holding the password",
                )
            os.environ[SECRET_FILE_ENV] = str(path.resolve())
        else:
            value = os.environ.get(a.password_env or "") or _HELD.get(a.password_env or "")
            if not value:
                raise ConfigError(
                    "config",
                    "fleet.container.auth.password_env",
                    f"environment variable {a.password_env} is not set",
                    "export it before running sb-fleet",
                )
            base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
            tmpdir = tempfile.mkdtemp(prefix="sb-fleet-", dir=base)
            secret = Path(tmpdir) / "registry"
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(value)
            os.environ.pop(a.password_env or "", None)
            os.environ[SECRET_FILE_ENV] = str(secret)
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        if tmpdir:
            with contextlib.suppress(OSError):
                for p in Path(tmpdir).iterdir():
                    p.unlink()
                os.rmdir(tmpdir)


# -- results -> run directory ------------------------------------------------------------------------
def host_image_facts(runtime: str, task_results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """From one host's task results: ``image_digest`` and whether this deploy loaded/pulled the image."""
    if runtime == "none":
        return {}
    out: dict[str, Any] = {}
    d = task_results.get(IMAGE_DIGEST)
    if d is not None and not d.get("skipped"):
        out["image_digest"] = parse_digest(runtime, str(d.get("stdout") or ""))
    ld = task_results.get(IMAGE_LOAD)
    if ld is not None:  # a skipped task leaves no return code
        out["image_loaded"] = "rc" in ld and not ld.get("skipped", False)
    return out


# -- playbook values ---------------------------------------------------------------------------------
def _safe_host() -> V:
    return V("inventory_hostname | regex_replace('[^A-Za-z0-9_.-]', '_')")


def deploy_vars(
    runtime: Runtime, c: ContainerSettings, run_id: str, image: ImageFile | None, hostprep: list[str]
) -> dict[str, Any]:
    """What ``container_deploy.j2`` fills in: every command as one Ansible expression."""
    d: dict[str, Any] = {
        "runtime": runtime,
        "become": uses_become(runtime, c),
        "distribution": c.distribution,
        "throttle": c.pull_throttle,
        "inspect": to_ansible(inspect_cmd(runtime, c)),
        "digest_before": digest_expr(runtime, "sb_img_before"),
        "digest_after": digest_expr(runtime, "sb_img_after"),
        "image": c.image,
        "keep_tarball": c.keep_tarball or runtime == "enroot",  # enroot's digest is the .sqsh itself
        "image_path": "{{ " + image_file(c).expr + " }}",
        "load": to_ansible(load_cmd(runtime, c)),
        "pull": to_ansible(pull_cmd(runtime, c)),
        "create": to_ansible(create_cmd(runtime, c) or []),
        "login": to_ansible(login_cmd(runtime, c) or []),
        "logout": to_ansible(logout_cmd(runtime, c) or []),
        "auth": c.auth.model_dump() if c.auth else None,
        "secret_env": SECRET_FILE_ENV,
        "tarball": image.__dict__ if image else None,
        "hostprep": to_ansible(
            run_cmd(runtime, c, RunTarget(cat("sb-prep-", _safe_host()), run_id), list(hostprep), {})
        ),
    }
    return d


def run_vars(
    runtime: Runtime, c: ContainerSettings, run_id: str, step_id: str, env: dict[str, str]
) -> dict[str, Any]:
    """What ``container_run.j2`` fills in for one step."""
    command: Argv = [
        c.python,
        V("sb_runner_args", splat=True),
        "--host",
        V("inventory_hostname"),
        V("(sb_node_args | default({}))[inventory_hostname] | default([])", splat=True),
    ]
    target = RunTarget(cat(f"sb-{run_id}-{step_id}-", _safe_host()), run_id)
    return {
        "runtime": runtime,
        "become": uses_become(runtime, c),
        "inspect": to_ansible(inspect_cmd(runtime, c)),
        "run": to_ansible(run_cmd(runtime, c, target, command, dict(env))),
        "remove": to_ansible(remove_cmd(runtime, c, target) or []),
    }


def remove_cmd(runtime: Runtime, c: ContainerSettings, t: RunTarget) -> Argv | None:
    """Remove one step's container by name, whatever state it is in: when the step outlives its timeout,
    Ansible stops waiting for ``run``, but the container goes on under the runtime's daemon (docker,
    podman's conmon). enroot's container is a process of the run itself: none."""
    if runtime == "enroot":
        return None
    return [*_base(runtime, c), "rm", "-f", t.name]


def step_container_name(run_id: str, step_id: str, host: str) -> str:
    """The name :func:`run_vars` gives one host's container of one step (Ansible's
    ``regex_replace('[^A-Za-z0-9_.-]', '_')`` of the inventory name, here in Python)."""
    return f"sb-{run_id}-{step_id}-" + re.sub(r"[^A-Za-z0-9_.-]", "_", host)


def interrupt_argv(runtime: Runtime, c: ContainerSettings, host_args: object) -> list[str] | None:
    """The runtime command (before its subcommand) that stops a step's container when the run is
    interrupted: run over SSH, not Ansible, so become is ``sudo -n`` and the host's own args (inventory
    ``sb_container_host_args``) are read here. None for enroot, whose container is a process of the
    runner itself (stopping the runner stops it)."""
    if runtime == "enroot":
        return None
    extra = [str(a) for a in host_args] if isinstance(host_args, list) else []
    sudo = ["sudo", "-n"] if uses_become(runtime, c) else []
    return [*sudo, binary(runtime, c), *c.global_args, *extra]


def device_vars(
    runtime: Runtime, c: ContainerSettings, facts: Mapping[str, Mapping[str, Any] | None]
) -> dict[str, Any]:
    """The extra variables a container stage passes: each host's device flags from its facts."""
    return {DEVICE_VAR: {h: host_device_args(runtime, c, f) for h, f in sorted(facts.items())}}


def cleanup_vars(runtime: Runtime, c: ContainerSettings, images: bool) -> dict[str, Any]:
    cmds = cleanup_cmds(runtime, c, images)
    return {
        "runtime": runtime,
        "become": uses_become(runtime, c),
        "enroot_name": enroot_name(c),
        **{k.replace(" ", "_"): to_ansible(v) for k, v in cmds.items()},
    }


def record_digests(rd: Any, runtime: str, stage: str, results: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Write each host's image digest (and whether deploy loaded it) into ``containers.json`` and
    ``facts/<host>.json`` (key ``image_digest``: the image the host ran last)."""
    if runtime == "none":
        return
    from sb_fleet.safe_files import safe_name

    table = rd.read_json("containers.json", {"schema_version": 1, "runtime": runtime, "hosts": {}})
    for host, res in results.items():
        facts = host_image_facts(runtime, res)
        if not facts.get("image_digest"):
            continue
        row = table["hosts"].setdefault(host, {})
        row[f"{stage}_digest"] = facts["image_digest"]
        if "image_loaded" in facts:
            row["image_loaded"] = facts["image_loaded"]
        fpath = f"facts/{safe_name(host)}.json"
        hf = rd.read_json(fpath, {"host": host})
        hf["image_digest"] = facts["image_digest"]
        if "image_loaded" in facts:
            hf["image_loaded"] = facts["image_loaded"]
        rd.write_json(fpath, hf)
    rd.write_json("containers.json", table)
