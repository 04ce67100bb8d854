"""Collect: bring every host's result files back, in parallel, fetching only what is missing.

One SSH connection per host (paramiko), two commands on it: a listing with
checksums (``find`` + ``sha256sum``), then one ``tar`` stream of just the
files that are missing or changed locally. Each file is written under a
temporary name, its checksum verified, then renamed into
``raw/<host>/``: a dropped connection keeps every file already fetched, and
never leaves a partial file under a final name. Hosts with
``ansible_connection=local`` are copied from the local file system by the
same rules.

Remote paths are user input (inventory variables): they reach the remote
shell only through :func:`sh_path`, which quotes them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import tarfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from sb_fleet.config.inventory import Host
from sb_fleet.errors import InfraError
from sb_fleet.fleet.progress import RUNNING
from sb_fleet.fleet.ssh import SshSettings
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.safe_files import ChecksumMismatch, atomic_write_stream, sha256_file

_KH_LOCK = threading.Lock()


@dataclass(frozen=True)
class CollectTarget:
    host: Host
    remote_dir: str  # the host's results directory, may start with ~/
    local_dir: Path


def sh_path(path: str) -> str:
    """A remote path as a shell word: quoted, with a leading ``~/`` kept expandable."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def safe_rel(rel: str) -> str | None:
    """A listed path if it stays inside the results directory, else None (a host must not write outside)."""
    p = PurePosixPath(rel)
    if p.is_absolute() or any(part in ("..", "") for part in p.parts) or rel.startswith("-"):
        return None
    parts = [x for x in p.parts if x != "."]
    if not parts or any(x.startswith(".") for x in parts):
        return None  # temp files of an in-progress atomic write
    return "/".join(parts)


def parse_listing(text: str) -> dict[str, str]:
    """``sha256sum`` output -> {relative path: digest}; lines that are not a checksum are ignored."""
    out = {}
    for line in text.splitlines():
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name:
            continue
        rel = safe_rel(name[2:] if name.startswith("./") else name)
        if rel:
            out[rel] = digest
    return out


def local_digests(root: Path) -> dict[str, str]:
    out = {}
    if root.is_dir():
        for p in root.rglob("*"):
            if p.is_file() and not p.name.startswith("."):
                out[str(p.relative_to(root))] = sha256_file(p)
    return out


def missing(remote: dict[str, str], local: dict[str, str]) -> list[str]:
    return sorted(rel for rel, d in remote.items() if local.get(rel) != d)


def store_member(root: Path, rel: str, stream: IO[bytes], want: str) -> bool:
    """Write one file via temp + checksum + rename; False (and nothing written) on a mismatch."""
    try:
        atomic_write_stream(root / rel, iter(lambda: stream.read(1 << 20), b""), 0o600, sha256=want)
    except ChecksumMismatch:
        return False
    return True


class _AcceptNew:  # a paramiko.MissingHostKeyPolicy (paramiko is imported late)
    """paramiko policy: record an unknown host's key (first contact), as OpenSSH's accept-new."""

    def __init__(self, path: Path):
        self.path = path

    def missing_host_key(self, client, hostname, key) -> None:  # noqa: ANN001 - paramiko's signature
        with _KH_LOCK:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.path, "a") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)


def connect(host: Host, ssh: SshSettings):  # noqa: ANN201 - paramiko.SSHClient
    import paramiko

    client = paramiko.SSHClient()
    if ssh.policy != "off":
        if ssh.known_hosts.exists():
            client.load_host_keys(str(ssh.known_hosts))
        policy = _AcceptNew(ssh.known_hosts) if ssh.policy == "accept-new" else paramiko.RejectPolicy()
        client.set_missing_host_key_policy(policy)  # type: ignore[arg-type]
    else:
        client.set_missing_host_key_policy(paramiko.WarningPolicy())
    key = host.vars.get("ansible_ssh_private_key_file") or host.vars.get("ansible_private_key_file")
    password = host.vars.get("ansible_password") or host.vars.get("ansible_ssh_pass")
    client.connect(
        hostname=host.address,
        port=host.port,
        username=host.user or None,
        key_filename=os.path.expanduser(str(key)) if key else None,
        password=str(password) if password else None,
        timeout=ssh.connect_timeout,
        banner_timeout=ssh.connect_timeout,
        auth_timeout=ssh.connect_timeout,
        allow_agent=True,
        look_for_keys=not key,
    )
    return client


def _exec(client, command: str, timeout: float) -> tuple[int, bytes, bytes]:  # noqa: ANN001
    _, stdout, stderr = client.exec_command(command, timeout=timeout)
    out = stdout.read()
    err = stderr.read()
    return stdout.channel.recv_exit_status(), out, err


def listing_command(remote_dir: str) -> str:
    return (
        f"cd {sh_path(remote_dir)} 2>/dev/null || exit 3; find . -type f ! -name '.*' -exec sha256sum {{}} +"
    )


def collect_remote(t: CollectTarget, ssh: SshSettings, timeout: float) -> tuple[int, int]:
    """Fetch what is missing from one SSH host; (files fetched, files listed). Raises on failure."""
    client = connect(t.host, ssh)
    try:
        client.get_transport().set_keepalive(15)
        rc, out, err = _exec(client, listing_command(t.remote_dir), timeout)
        if rc == 3:
            raise FileNotFoundError(f"no results on the host ({t.remote_dir} does not exist)")
        remote = parse_listing(out.decode(errors="replace"))
        todo = missing(remote, local_digests(t.local_dir))
        if not todo:
            return 0, len(remote)
        fetched = 0
        # One tar stream for all missing files; batches keep the command line short.
        for batch in _batches(todo, 400):
            cmd = f"cd {sh_path(t.remote_dir)} && tar -cf - -- " + " ".join(shlex.quote(p) for p in batch)
            _, stdout, _ = client.exec_command(cmd, timeout=timeout)
            with tarfile.open(fileobj=stdout, mode="r|") as tar:
                for m in tar:
                    rel = safe_rel(m.name)
                    if rel is None or not m.isfile() or rel not in remote:
                        continue
                    f = tar.extractfile(m)
                    if f is not None and store_member(t.local_dir, rel, f, remote[rel]):
                        fetched += 1
        return fetched, len(remote)
    finally:
        client.close()


def collect_local(t: CollectTarget) -> tuple[int, int]:
    src = Path(os.path.expanduser(t.remote_dir))
    if not src.is_dir():
        raise FileNotFoundError(f"no results on the host ({t.remote_dir} does not exist)")
    remote = local_digests(src)
    fetched = 0
    for rel in missing(remote, local_digests(t.local_dir)):
        with open(src / rel, "rb") as f:
            if store_member(t.local_dir, rel, f, remote[rel]):
                fetched += 1
    return fetched, len(remote)


def collect_host(t: CollectTarget, ssh: SshSettings, timeout: float) -> HostOutcome:
    """Collect one host and say how it went; never raises for a host's own trouble."""
    import paramiko

    t0 = time.monotonic()
    name = t.host.name
    try:
        fetched, listed = collect_local(t) if t.host.is_local else collect_remote(t, ssh, timeout)
        return HostOutcome(
            name,
            "collect",
            Outcome.OK,
            f"fetched {fetched} of {listed} file(s)",
            round(time.monotonic() - t0, 3),
            {"fetched": fetched, "listed": listed},
        )
    except InfraError:
        raise
    except paramiko.BadHostKeyException:
        return HostOutcome(
            name,
            "collect",
            Outcome.HOSTKEY,
            f"host key of {t.host.address}:{t.host.port} does not match known_hosts "
            f"({ssh.known_hosts}): refused; if the host was re-imaged, remove its old key "
            f"(ssh-keygen -R) and re-run",
        )
    except paramiko.SSHException as exc:
        text = str(exc)
        if "not found in known_hosts" in text:
            return HostOutcome(
                name,
                "collect",
                Outcome.HOSTKEY,
                f"host {t.host.address}:{t.host.port} is not in {ssh.known_hosts}: refused "
                f"(first contact: --accept-new-host-keys)",
            )
        return HostOutcome(
            name,
            "collect",
            Outcome.UNREACHABLE,
            f"SSH: {text[:300]}",
            round(time.monotonic() - t0, 3),
            _kept(t.local_dir),
        )
    except FileNotFoundError as exc:
        return HostOutcome(name, "collect", Outcome.FAILED, str(exc), round(time.monotonic() - t0, 3))
    except (OSError, EOFError, tarfile.TarError) as exc:
        return HostOutcome(
            name,
            "collect",
            Outcome.UNREACHABLE,
            f"{type(exc).__name__}: {str(exc)[:300] or 'connection lost'}",
            round(time.monotonic() - t0, 3),
            _kept(t.local_dir),
        )


def _kept(local_dir: Path) -> dict:
    n = (
        sum(1 for p in local_dir.rglob("*") if p.is_file() and not p.name.startswith("."))
        if local_dir.exists()
        else 0
    )
    return {"kept_files": n}


def _batches(items: list[str], n: int) -> Iterable[list[str]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


class CollectAborted(InfraError):
    """The control node cannot store results (disk full, unwritable): collecting stopped. ``outcomes`` has
    one per host: ok for those fully collected before, pending for the rest."""

    def __init__(self, message: str, outcomes: dict[str, HostOutcome]):
        super().__init__(message)
        self.outcomes = outcomes


def collect_all(
    targets: list[CollectTarget],
    ssh: SshSettings,
    parallel: int,
    timeout: float,
    progress: Callable[[str, Outcome | str, str], None] | None = None,
) -> dict[str, HostOutcome]:
    """Collect every target in parallel (bounded); one outcome per host.

    A host's own trouble (unreachable, refused key, connection lost) is its outcome; trouble of the
    control node itself (its disk is full) stops the whole collect with :class:`CollectAborted`.
    """
    out: dict[str, HostOutcome] = {}
    abort: list[InfraError] = []

    def one(t: CollectTarget) -> HostOutcome:
        name = t.host.name
        if abort:
            return HostOutcome(name, "collect", Outcome.PENDING, f"not collected: {abort[0]}")
        if progress:
            progress(name, RUNNING, "collect")
        try:
            o = collect_host(t, ssh, timeout)
        except InfraError as exc:
            abort.append(exc)
            o = HostOutcome(
                name, "collect", Outcome.PENDING, f"collect stopped: {exc}", details=_kept(t.local_dir)
            )
        if progress:
            progress(name, o.outcome, o.reason)
        return o

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets) or 1))) as pool:
        for o in pool.map(one, targets):
            out[o.host] = o
    if abort:
        raise CollectAborted(str(abort[0]), out)
    return out


# Run on a host after an interrupted run: stop the runner of this run (found by its pid file and checked
# by its command line); the runner kills the benchmarks it started and records the interruption; a
# runner that does not stop within 10 s is killed with the process groups it recorded.
STOP_RUNNER = """cd {d} 2>/dev/null || {{ echo absent; exit 0; }}
pid=$(head -n 1 runner.pid 2>/dev/null) || {{ echo absent; exit 0; }}
case $pid in ''|*[!0-9]*) echo absent; exit 0 ;; esac
alive() {{ [ -r /proc/$pid/cmdline ] && grep -q sb_bench.host.runner /proc/$pid/cmdline 2>/dev/null \
  && ! grep -q '^State:.*[ZX]' /proc/$pid/status 2>/dev/null; }}
alive || {{ echo finished; exit 0; }}
kill -TERM "$pid" 2>/dev/null; kill -CONT "$pid" 2>/dev/null
i=0
while alive && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
if alive; then
  kill -KILL "$pid" 2>/dev/null
  for g in $(grep -v "^#" runner.pgids 2>/dev/null); do kill -KILL -- "-$g" 2>/dev/null; done
  echo killed
else
  echo stopped
fi
"""


def stop_runners(
    targets: list[CollectTarget], ssh: SshSettings, parallel: int, timeout: float = 30
) -> dict[str, str]:
    """Stop this run's runner on every target host, in parallel; host -> stopped|killed|finished|absent|error."""
    import subprocess

    def one(t: CollectTarget) -> tuple[str, str]:
        cmd = STOP_RUNNER.format(d=sh_path(t.remote_dir))
        try:
            if t.host.is_local:
                r = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=timeout)
                return t.host.name, (r.stdout.strip() or f"error: {r.stderr.strip()[:200]}")
            client = connect(t.host, ssh)
            try:
                rc, out, err = _exec(client, cmd, timeout)
                return t.host.name, (
                    out.decode(errors="replace").strip() or f"error: {err.decode(errors='replace')[:200]}"
                )
            finally:
                client.close()
        except Exception as exc:  # noqa: BLE001 - one host's trouble is its own line
            return t.host.name, f"error: {type(exc).__name__}: {str(exc)[:200]}"

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets) or 1))) as pool:
        return dict(pool.map(one, targets))


def remove_partials(root: Path) -> None:
    """Drop the temp files (``.<name>.<random>.tmp``) an interrupted collect left behind."""
    for p in root.rglob(".*.tmp"):
        p.unlink(missing_ok=True)
    if not any(root.iterdir()) if root.exists() else False:
        shutil.rmtree(root, ignore_errors=True)
