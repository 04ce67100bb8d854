"""Collect: bring every host's result files back, in parallel, fetching only what is missing.

One SSH connection per host and three commands on it. The connection is Ansible's own master to the
host (ControlPersist, still open after the run step: ``ssh -O check`` asks it locally) where it is alive,
each command an ``ssh`` through it (``ControlMaster=no``, ``BatchMode``, this run's host key options: no
key exchange, nothing to re-verify); else a paramiko connection of collect's own. A master that ends on
the way (a command's ssh exits 255 having sent nothing) hands the host to paramiko within its wall time,
which fetches what is still missing. The outcome's details say which (``via``: ``master`` or
``paramiko``); budgets, parsing and outcomes are the same either way. The commands: a listing of
the results directory (``find -printf``: type, size and path of every entry, NUL-separated), the
checksums of the files that will be kept (``sha256sum``), then one ``tar`` stream of just the files
that are missing or changed locally. Each file is written under a temporary name, its checksum
verified, then renamed into ``raw/<host>/``: a dropped connection keeps every file already fetched, and
never leaves a partial file under a final name. Hosts with ``ansible_connection=local`` are read from
the local file system by the same rules.

A host can only hurt itself (budgets: the config's ``collect`` section,
:class:`sb_fleet.config.collect_budgets.CollectBudgets`, docs/collect-budgets.md):

* the whole host has ``host_timeout`` seconds of wall time (a watchdog closes its connection), and
  each read at most ``fleet.collect_timeout`` seconds of stall;
* the listing is parsed as it streams in, never held whole: at most ``max_files`` entries and
  :data:`MAX_RECORD` bytes per entry, else the host fails at once;
* a file over ``max_file_bytes``, the files past ``max_host_bytes`` (in path order), a special file
  (fifo, socket, device, symlink), a path that clashes with another (``x`` a file and ``x/y``) or
  with what was collected before, an unsafe or non-UTF-8 name: not fetched, and the host's collect
  is failed, naming the first such problem; its other files are still fetched;
* the tar stream may carry no more than the listed files' bytes, and no header larger than
  :data:`MAX_TAR_HEADER` bytes;
* a listing command that fails (a missing ``find``: exit 127) fails the host.

Every other host is collected as usual. Remote paths are user input (inventory variables): they
reach the remote shell only through :func:`sh_path` (sb_fleet.plan.host_exec), which quotes them.

A host whose validate exec sent its results after its step (sb_fleet.fleet.exec_results) is collected
from that spool first, by the same parsers, budgets and checks (``via: exec``); should anything in it
be wrong or refused, the host is collected over SSH as above, which says what it refuses in its own
words (``details.shipped`` says why the spool was not enough).
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from sb_fleet.config.collect_budgets import CollectBudgets, default_budgets
from sb_fleet.config.inventory import Host
from sb_fleet.errors import InfraError
from sb_fleet.fleet.channels import Channel, HostRefused, MasterGone, MasterNode, SrunNode, SshChannel
from sb_fleet.fleet.exec_results import Spool, SpoolError
from sb_fleet.fleet.progress import RUNNING
from sb_fleet.fleet.slurm_launch import SrunReach, srun_command
from sb_fleet.fleet.ssh import CONTROL_PERSIST_S, SshSettings
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.host_exec import sh_path
from sb_fleet.safe_files import ChecksumMismatch, atomic_write_stream, sha256_file

_KH_LOCK = threading.Lock()
MAX_RECORD = 4096 + 64  # bytes of one listing entry: PATH_MAX and its type and size
MAX_TAR_HEADER = 64 << 10  # bytes of a tar long-name or pax header
MAX_COMMAND = 64 << 10  # bytes of one remote command line (checksums and tar, in batches)
KINDS = {
    "p": "fifo",
    "s": "socket",
    "c": "character device",
    "b": "block device",
    "l": "symlink",
    "D": "door",
}


@dataclass(frozen=True)
class CollectTarget:
    host: Host
    remote_dir: str  # the host's results directory, may start with ~/
    local_dir: Path
    # ``VAR=value`` exported by every command collect runs on the host (the run's tags: a stop finds them)
    env: tuple[str, ...] = ()


def safe_rel(rel: str) -> str | None:
    """A listed path if it stays inside the results directory, else None (a host must not write outside)."""
    p = PurePosixPath(rel)
    if p.is_absolute() or any(part in ("..", "") for part in p.parts) or rel.startswith("-"):
        return None
    parts = [x for x in p.parts if x != "."]
    if not parts or any(x.startswith(".") for x in parts):
        return None  # temp files of an in-progress atomic write
    return "/".join(parts)


def _unescape(name: str) -> str:
    """A name as ``sha256sum`` escapes it (a line starting with a backslash): ``\\n``, ``\\r``, ``\\\\``."""
    out, i = [], 0
    while i < len(name):
        c = name[i]
        if c == "\\" and i + 1 < len(name):
            out.append({"n": "\n", "r": "\r", "\\": "\\"}.get(name[i + 1], name[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_listing(text: str) -> dict[str, str]:
    """``sha256sum`` output -> {relative path: digest}; lines that are not a checksum are ignored."""
    out = {}
    for line in text.splitlines():
        escaped = line.startswith("\\")
        digest, _, name = line[1 if escaped else 0 :].partition("  ")
        if len(digest) != 64 or not name:
            continue
        if escaped:
            name = _unescape(name)
        rel = safe_rel(name[2:] if name.startswith("./") else name)
        if rel:
            out[rel] = digest
    return out


MAX_PROBLEMS = 20  # problems kept per host (the rest only counted)


@dataclass
class Listing:
    """A results directory as listed: regular files (path -> size), directories, and what is wrong.
    Every entry counts against ``max_files``, a refused or repeated one too."""

    files: dict[str, int] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    seen: int = 0
    more_problems: int = 0

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)
        else:
            self.more_problems += 1

    def add(self, kind: str, size: int, path: str, max_files: int) -> None:
        self.seen += 1
        if self.seen > max_files:
            raise HostRefused(f"the results directory has more than {max_files} entries (collect.max_files)")
        try:
            path.encode()
        except UnicodeEncodeError:
            self.problem(f"a file name that is not UTF-8 ({path[:80]!r}): not fetched")
            return
        rel = safe_rel(path)
        if rel is None or rel != path:
            self.problem(f"unsafe path {path[:120]!r} in the listing: not fetched")
            return
        if rel in self.files or rel in self.dirs:
            self.problem(f"{rel}: listed twice: not fetched")
            return
        if kind == "f":
            self.files[rel] = size
        elif kind == "d":
            self.dirs.add(rel)
        else:
            self.problem(f"{rel}: a {KINDS.get(kind, 'special file')}, not a regular file: not fetched")


class ListingParser:
    """``find -printf '%y %s %P\\0'`` output, fed as it streams in: never more than one record held."""

    def __init__(self, max_files: int, split_at_empty: bool = False):
        self.max_files = max_files
        self.listing = Listing()
        self._rest = b""
        self.split_at_empty = split_at_empty
        self.ended = False  # split_at_empty: the empty record came

    def feed(self, data: bytes) -> bytes | None:
        """Parse ``data``. With ``split_at_empty``, the listing ends at its first empty record (find never
        prints one): what follows is not the listing's and is returned, and from then on every chunk fed
        as it is; None while the listing goes on."""
        if self.ended:
            return data
        buf = self._rest + data
        end = -1
        if self.split_at_empty:
            i = 0 if buf.startswith(b"\0") else buf.find(b"\0\0")
            end = i if i <= 0 else i + 1  # the empty record's NUL
        if end >= 0:
            self._rest, self.ended = b"", True
            for rec in buf[:end].split(b"\0")[:-1]:
                self._record(rec)
            return buf[end + 1 :]
        parts = buf.split(b"\0")
        self._rest = parts.pop()
        if len(self._rest) > MAX_RECORD:
            raise HostRefused(f"a listing entry longer than {MAX_RECORD} bytes: the listing is not find's")
        for rec in parts:
            self._record(rec)
        return None

    def close(self) -> Listing:
        if self._rest:
            raise HostRefused("the listing ends in the middle of an entry")
        return self.listing

    def _record(self, rec: bytes) -> None:
        if len(rec) > MAX_RECORD:
            raise HostRefused(f"a listing entry longer than {MAX_RECORD} bytes: the listing is not find's")
        kind, sp1, rest = rec.partition(b" ")
        size, sp2, path = rest.partition(b" ")
        if len(kind) != 1 or not sp1 or not sp2 or not size.isdigit() or len(size) > 19 or not path:
            raise HostRefused(f"a malformed listing entry {rec[:80]!r}: the listing is not find's")
        name = path.decode(errors="surrogateescape")
        self.listing.add(kind.decode(errors="replace"), int(size), name, self.max_files)


class SumsParser:
    """``sha256sum`` output as it streams in: {relative path: digest}; a line longer than any path's is
    not sha256sum's (the host fails)."""

    MAX_LINE = 2 * MAX_RECORD + 80  # the digest, two spaces and a path with every byte escaped

    def __init__(self) -> None:
        self.sums: dict[str, str] = {}
        self._rest = b""

    def feed(self, data: bytes) -> None:
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        if len(self._rest) > self.MAX_LINE:
            raise HostRefused("a checksum line longer than any path: the checksums are not sha256sum's")
        if lines:
            self.sums.update(parse_listing(b"\n".join(lines).decode(errors="replace")))

    def close(self) -> dict[str, str]:
        self.sums.update(parse_listing(self._rest.decode(errors="replace")))
        self._rest = b""
        return self.sums


def parse_find_listing(data: bytes, max_files: int) -> Listing:
    """A whole listing at once (the streaming parser, fed one buffer)."""
    p = ListingParser(max_files)
    p.feed(data)
    return p.close()


def _is_dir(p: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(p).st_mode)
    except OSError:
        return False


def _exists(p: Path) -> bool:
    try:
        os.lstat(p)
    except OSError:
        return False
    return True


def plan_fetch(listing: Listing, local_root: Path, budgets: CollectBudgets) -> dict[str, int]:
    """The files that may be fetched (path -> size); what may not is added to ``listing.problems``."""
    ok: dict[str, int] = {}
    total = 0
    over_host: list[str] = []
    for rel in sorted(listing.files):
        size = listing.files[rel]
        parts = rel.split("/")
        ancestors = ["/".join(parts[:i]) for i in range(1, len(parts))]
        clash = next((a for a in ancestors if a in listing.files), None)
        if clash is not None:
            listing.problem(f"path clash: {clash} is a file and {rel} is below it: {rel} not fetched")
            continue
        if rel in listing.dirs or _is_dir(local_root / rel):
            listing.problem(f"path clash: {rel} is a file and a directory: not fetched")
            continue
        local_clash = next(
            (a for a in ancestors if _exists(local_root / a) and not _is_dir(local_root / a)), None
        )
        if local_clash is not None:
            listing.problem(
                f"path clash: {local_clash} was collected as a file and {rel} is below it: not fetched"
            )
            continue
        if size > budgets.max_file_bytes:
            listing.problem(
                f"{rel}: {size} bytes, over the {budgets.max_file_bytes}-byte limit per file "
                f"(collect.max_file_bytes): not fetched"
            )
            continue
        if total + size > budgets.max_host_bytes:
            over_host.append(rel)
            continue
        total += size
        ok[rel] = size
    if over_host:
        listing.problem(
            f"the host's files total more than {budgets.max_host_bytes} bytes (collect.max_host_bytes): "
            f"{len(over_host)} file(s) not fetched, from {over_host[0]}"
        )
    return ok


def local_digests(root: Path) -> dict[str, str]:
    out = {}
    if root.is_dir():
        for p in root.rglob("*"):
            if p.is_file() and not p.is_symlink() and not p.name.startswith("."):
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


class KeyMismatch(Exception):
    """paramiko's BadHostKeyException, raised where paramiko is imported: the host's key is not the one
    known."""


class SshFailed(Exception):
    """paramiko's SSHException (its words), raised where paramiko is imported."""


def connect(host: Host, ssh: SshSettings):  # noqa: ANN201 - paramiko.SSHClient
    import paramiko

    client = paramiko.SSHClient()
    client.set_log_channel(f"paramiko.transport.{host.name}")  # the host in logs/libraries.log
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


def listing_sums_command(remote_dir: str, max_file_bytes: int) -> str:
    """Type, size and path of every entry of the results directory (hidden ones pruned), NUL-ended; an
    empty record; then ``sha256sum``'s line for every regular file of at most ``max_file_bytes`` bytes:
    one session for both (a session is an ssh client and a login on the host); the exit status is the
    listing's (3: no such directory)."""
    return (
        f"cd {sh_path(remote_dir)} 2>/dev/null || exit 3; "
        "find . -mindepth 1 -name '.*' -prune -o -printf '%y %s %P\\0'; rc=$?; printf '\\0'; "
        f"find . -mindepth 1 -name '.*' -prune -o -type f -size -{int(max_file_bytes) + 1}c "
        "-exec sha256sum -- {} + 2>/dev/null; exit $rc"
    )


@dataclass
class Fetched:
    fetched: int
    listed: int
    problems: list[str] = field(default_factory=list)


class _BoundedTarInfo(tarfile.TarInfo):
    """A tar member whose long-name or pax header may not exceed :data:`MAX_TAR_HEADER` bytes (tarfile
    reads such headers whole into memory)."""

    @classmethod
    def fromtarfile(cls, tarfile_: tarfile.TarFile) -> _BoundedTarInfo:
        fileobj: Any = tarfile_.fileobj
        buf = fileobj.read(tarfile.BLOCKSIZE)
        obj = cls.frombuf(buf, tarfile_.encoding or "utf-8", tarfile_.errors)
        long_header = obj.type in (
            *tarfile.GNU_TYPES,
            tarfile.XHDTYPE,
            tarfile.XGLTYPE,
            tarfile.SOLARIS_XHDTYPE,
        )
        if long_header and obj.size > MAX_TAR_HEADER:
            raise HostRefused(f"a tar header of {obj.size} bytes (more than {MAX_TAR_HEADER})")
        obj.offset = fileobj.tell() - tarfile.BLOCKSIZE
        return obj._proc_member(tarfile_)  # type: ignore[attr-defined]


def _command_batches(prefix: str, paths: list[str]) -> Iterable[list[str]]:
    """``paths`` in batches whose command line stays under :data:`MAX_COMMAND` bytes."""
    batch: list[str] = []
    size = len(prefix)
    for p in paths:
        n = len(shlex.quote(p)) + 1
        if batch and size + n > MAX_COMMAND:
            yield batch
            batch, size = [], len(prefix)
        batch.append(p)
        size += n
    if batch:
        yield batch


def _tar_limit(sizes: Iterable[int]) -> int:
    """The most bytes a tar of files of these sizes may take: headers, padding, long names, the end."""
    return sum(3 * tarfile.BLOCKSIZE + 2 * MAX_TAR_HEADER + -(-s // 512) * 512 for s in sizes) + (1 << 20)


Opener = Callable[[str, float, int, str], Channel]
LISTING = "the listing"  # what an opener is asked for (its ``what``): the listing and checksums, or
TAR = "the tar stream"  # a tar of some of the files


# The close() of every host being collected now: an interrupt (Ctrl-C, SIGTERM) ends their reads at once.
_OPEN: set[Callable[[], None]] = set()
_OPEN_LOCK = threading.Lock()


def close_all() -> None:
    """End every read of every host being collected (an interrupted collect stops now, not at the end of
    each host's transfer)."""
    with _OPEN_LOCK:
        closers = list(_OPEN)
    for close in closers:
        try:
            close()
        except Exception:  # noqa: BLE001 - closing what is already broken
            pass


def _watched(
    close: Callable[[], None], host_timeout: float, work: Callable[[], Fetched], budget: float | None = None
) -> Fetched:
    """``work()`` within the host's wall time (``host_timeout`` s left of its ``budget``): past it,
    ``close()`` ends every read of the host."""
    expired = threading.Event()
    with _OPEN_LOCK:
        _OPEN.add(close)

    def watchdog() -> None:
        expired.set()
        close()

    timer = threading.Timer(max(0.0, host_timeout), watchdog)
    timer.daemon = True
    timer.start()
    budget = host_timeout if budget is None else budget
    too_long = f"took longer than {budget}s (collect.host_timeout): stopped"
    try:
        result = work()
    except Exception:
        if expired.is_set():  # whatever the closed connection looked like (an error, an early end)
            raise HostRefused(too_long) from None
        raise
    finally:
        timer.cancel()
        with _OPEN_LOCK:
            _OPEN.discard(close)
        close()
    if expired.is_set():
        raise HostRefused(too_long)
    return result


# A master that this process's own client left behind is taken as there (no ``ssh -O check``: ~8 ms
# of CPU a host) this long after that client ended: ControlPersist less a margin for a slow collect.
MASTER_TRUSTED_S = CONTROL_PERSIST_S - 30


def master_known(ended: float | None, now: float) -> bool:
    """Whether a master made by sb-fleet's own client, whose last session ended at ``ended`` (monotonic;
    None: none), is still to be there at ``now``."""
    return ended is not None and 0 <= now - ended < MASTER_TRUSTED_S


def collect_remote(
    t: CollectTarget,
    ssh: SshSettings,
    timeout: float,
    budgets: CollectBudgets | None = None,
    route: dict[str, Any] | None = None,
    master_ended: float | None = None,
) -> Fetched:
    """Fetch what is missing from one SSH host within the budgets: over the host's live OpenSSH master
    where there is one, else (or should it end on the way) over a paramiko connection of its own, by the
    same rules. ``master_ended``: when this process's own ssh client to the host ended (its master is
    then ridden without asking; should it be gone after all, ssh connects by itself under the same
    host key policy). ``route["via"]`` says which ("master" | "paramiko") as soon as it is known. Raises on
    failure (:class:`HostRefused` for a budget or what cannot be taken, ``FileNotFoundError`` for no
    results directory, connection errors as they come)."""
    budgets = budgets or default_budgets()
    route = {} if route is None else route
    t0 = time.monotonic()
    if master_known(master_ended, t0) or master_alive(t.host, ssh):
        route["via"] = "master"
        node = MasterNode(lambda command: _master_command(ssh, t.host, command, budgets.host_timeout))

        def over_master() -> Fetched:
            try:
                return _collect_on(node.channel, t, timeout, budgets)
            except MasterGone:
                if node.closed:  # closed meanwhile (an interrupt): the host is not to be reached again
                    raise ConnectionError("closed") from None
                raise

        try:
            left = budgets.host_timeout - (time.monotonic() - t0)
            return _watched(node.close, left, over_master, budgets.host_timeout)
        except MasterGone:
            pass  # the master ended since the check: a connection of collect's own, as without one
    route["via"] = "paramiko"
    import paramiko  # here, not for every host: ~0.2 s of CPU that every collect thread would wait for

    try:
        client = connect(t.host, ssh)
        client.get_transport().set_keepalive(15)
        left = budgets.host_timeout - (time.monotonic() - t0)

        def opener(command: str, stall: float, limit: int, what: str) -> Channel:
            return SshChannel(client, command, stall, limit, what)

        return _watched(
            client.close, left, lambda: _collect_on(opener, t, timeout, budgets), budgets.host_timeout
        )
    except paramiko.BadHostKeyException:
        raise KeyMismatch() from None
    except paramiko.SSHException as exc:
        raise SshFailed(str(exc)) from None


def master_alive(host: Host, ssh: SshSettings) -> bool:
    """Whether Ansible's master connection to ``host`` runs (``ssh -O check``: a question to the local
    socket, no network)."""
    argv = ssh.master_control(host)
    if argv is None or host.connection not in ("ssh", "smart"):  # no OpenSSH master, or not where we look
        return False
    try:
        r = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=ssh.connect_timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def _master_command(ssh: SshSettings, host: Host, command: str, bound_s: float) -> list[str]:
    """The ssh client for ``command`` over the master, bounded by coreutils' ``timeout`` at the host's
    collect budget (plus a second): the watchdog ends it first, but should sb-fleet itself be killed
    (SIGKILL), no client is left reading a host that never stops sending (a paramiko connection died with
    the process)."""
    argv = ssh.master_command(host, command)
    if argv is None:  # master_alive said there is a master: it has a path
        raise MasterGone("ssh: no master connection (no control path)")
    bound = shutil.which("timeout")
    return [bound, "-k", "5", str(int(bound_s) + 1), *argv] if bound else argv


def collect_srun(
    t: CollectTarget, reach: SrunReach, timeout: float, budgets: CollectBudgets | None = None
) -> Fetched:
    """Fetch what is missing from one node through srun steps, by the same rules as over SSH."""
    budgets = budgets or default_budgets()
    node = SrunNode(reach.srun, reach.job_id, t.host.name)
    return _watched(node.close, budgets.host_timeout, lambda: _collect_on(node.channel, t, timeout, budgets))


def tagged_opener(opener: Opener, env: tuple[str, ...]) -> Opener:
    """``opener`` whose commands first export ``env`` (each ``VAR=value`` quoted: data stays data)."""
    if not env:
        return opener
    prefix = "".join(f"export {shlex.quote(a)}; " for a in env)
    return lambda command, stall, limit, what: opener(prefix + command, stall, limit, what)


def _collect_on(opener: Opener, t: CollectTarget, timeout: float, budgets: CollectBudgets) -> Fetched:
    d = sh_path(t.remote_dir)
    opener = tagged_opener(opener, t.env)
    # 1. The listing and 2. the checksums of its regular files, in one session, parsed as they stream in
    # (the checksums of files not fetched after all, over a budget, cost the host's time only).
    limit = budgets.max_files * (MAX_RECORD + SumsParser.MAX_LINE)
    ls = opener(listing_sums_command(t.remote_dir, budgets.max_file_bytes), timeout, limit, LISTING)
    parser = ListingParser(budgets.max_files, split_at_empty=True)
    sums = SumsParser()
    for chunk in ls.chunks():
        after = parser.feed(chunk)
        if after:
            sums.feed(after)
    rc, err = ls.exit_status()
    if rc == 3:
        raise FileNotFoundError(f"no results on the host ({t.remote_dir} does not exist)")
    if rc != 0:
        raise HostRefused(f"the listing command failed (exit {rc}){': ' + err if err else ''}")
    listing = parser.close()
    sizes = plan_fetch(listing, t.local_dir, budgets)
    got = sums.close()
    remote = {rel: got[rel] for rel in sizes if rel in got}
    unsummed = [rel for rel in sizes if rel not in remote]
    if unsummed:
        listing.problem(f"{unsummed[0]}: no checksum from the host (gone since the listing?): not fetched")
    # 3. One tar stream per batch of the files missing here.
    todo = missing(remote, local_digests(t.local_dir))
    fetched = 0
    bad: list[str] = []
    tprefix = f"cd {d} && exec tar -cf - -- "
    for batch in _command_batches(tprefix, todo):
        wanted = set(batch)
        cmd = tprefix + " ".join(shlex.quote(p) for p in batch)
        stream = opener(cmd, timeout, _tar_limit(sizes[p] for p in batch), TAR)
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo) as tar:  # type: ignore[call-overload]
            for m in tar:
                rel = safe_rel(m.name)
                if rel is None or not m.isfile() or rel not in wanted or m.size != sizes[rel]:
                    continue
                f = tar.extractfile(m)
                if f is not None and store_member(t.local_dir, rel, f, remote[rel]):
                    fetched += 1
                    wanted.discard(rel)
        stream.exit_status()
        bad.extend(sorted(wanted))
    if bad:
        listing.problem(f"{bad[0]}: not received whole (changed since the listing?){_more(bad)}")
    return Fetched(fetched, len(listing.files), _problems(listing))


def collect_shipped(t: CollectTarget, spool: Path, budgets: CollectBudgets) -> tuple[Fetched | None, str]:
    """The host's results from what its exec sent (``spool``), by the same rules as over SSH: (what was
    fetched, "") where every listed file arrived whole and nothing was refused, else (None, why): the
    caller then collects the host over SSH, which keeps what arrived whole here and fetches the rest."""
    try:
        spooled = Spool(spool)

        def opener(command: str, stall: float, limit: int, what: str) -> Channel:
            return spooled.listing(limit, what) if what == LISTING else spooled.tar(limit, what)

        r = _collect_on(opener, t, 0.0, budgets)
    except (HostRefused, SpoolError, OSError, EOFError, ValueError, tarfile.TarError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"
    if r.problems:
        return None, r.problems[0][:200]
    return r, ""


def _problems(listing: Listing) -> list[str]:
    extra = [f"{listing.more_problems} more problem(s) not shown"] if listing.more_problems else []
    return listing.problems + extra


def _more(items: list[str]) -> str:
    return f" (and {len(items) - 1} more)" if len(items) > 1 else ""


def _walk_local(src: Path, max_files: int) -> Listing:
    """A local results directory as :class:`Listing` (hidden entries skipped, symlinks not followed)."""
    listing = Listing()
    todo = [src]
    while todo:
        d = todo.pop()
        with os.scandir(d) as it:
            for e in it:
                if e.name.startswith("."):
                    continue
                rel = os.path.relpath(e.path, src).replace(os.sep, "/")
                st = e.stat(follow_symlinks=False)
                mode = st.st_mode
                if stat.S_ISDIR(mode):
                    listing.add("d", 0, rel, max_files)
                    todo.append(Path(e.path))
                elif stat.S_ISREG(mode):
                    listing.add("f", st.st_size, rel, max_files)
                else:
                    kind = (
                        "l"
                        if stat.S_ISLNK(mode)
                        else "p"
                        if stat.S_ISFIFO(mode)
                        else "s"
                        if stat.S_ISSOCK(mode)
                        else "c"
                    )
                    listing.add(kind, 0, rel, max_files)
    return listing


def collect_local(t: CollectTarget, budgets: CollectBudgets | None = None) -> Fetched:
    budgets = budgets or default_budgets()
    src = Path(os.path.expanduser(t.remote_dir))
    if not src.is_dir():
        raise FileNotFoundError(f"no results on the host ({t.remote_dir} does not exist)")
    listing = _walk_local(src, budgets.max_files)
    sizes = plan_fetch(listing, t.local_dir, budgets)
    remote = {rel: sha256_file(src / rel) for rel in sizes}
    fetched = 0
    for rel in missing(remote, local_digests(t.local_dir)):
        with open(src / rel, "rb") as f:
            if store_member(t.local_dir, rel, f, remote[rel]):
                fetched += 1
    return Fetched(fetched, len(listing.files), _problems(listing))


# In a host's collect outcome's details: collect closed its reads of the host early (a budget, its wall
# time, a read that stalled), so a command of it may still run there.
CUT_OFF = "cut_off"


def collect_host(
    t: CollectTarget,
    ssh: SshSettings,
    timeout: float,
    budgets: CollectBudgets | None = None,
    srun: SrunReach | None = None,
    master_ended: float | None = None,
    shipped: Path | None = None,
    remote: bool = True,
) -> HostOutcome | None:
    """Collect one host and say how it went; never raises for a host's own trouble. ``shipped``: the
    results its exec sent, spooled (read first; the caller removes it). ``remote=False``: from the
    spool only, None where it does not hold the host's whole results (the caller collects it again)."""
    t0 = time.monotonic()
    name = t.host.name
    route: dict[str, Any] = {}  # how an SSH host was reached: {"via": "master" | "paramiko"}
    try:
        if srun is not None:
            r = collect_srun(t, srun, timeout, budgets)
        elif t.host.is_local:
            r = collect_local(t, budgets)
        else:
            got, why = collect_shipped(t, shipped, budgets or default_budgets()) if shipped else (None, "")
            if got is not None:
                r, route["via"] = got, "exec"
            elif not remote:
                return None
            else:
                if why:
                    route["shipped"] = f"not taken: {why}"
                r = collect_remote(t, ssh, timeout, budgets, route, master_ended)
        details: dict[str, Any] = {"fetched": r.fetched, "listed": r.listed, **route}
        if r.problems:
            details["problems"] = r.problems[:20]
            return HostOutcome(
                name,
                "collect",
                Outcome.FAILED,
                f"collect failed: {r.problems[0]}{_more(r.problems)}; fetched {r.fetched} of {r.listed} file(s)",
                round(time.monotonic() - t0, 3),
                details,
            )
        return HostOutcome(
            name,
            "collect",
            Outcome.OK,
            f"fetched {r.fetched} of {r.listed} file(s)",
            round(time.monotonic() - t0, 3),
            details,
        )
    except InfraError:
        raise
    except HostRefused as exc:
        return HostOutcome(
            name,
            "collect",
            Outcome.FAILED,
            f"collect failed: {exc}",
            round(time.monotonic() - t0, 3),
            {**_kept(t.local_dir), **route, "refused": str(exc), CUT_OFF: True},
        )
    except KeyMismatch:
        return HostOutcome(
            name,
            "collect",
            Outcome.HOSTKEY,
            f"host key of {t.host.address}:{t.host.port} does not match known_hosts "
            f"({ssh.known_hosts}): refused; if the host was re-imaged, remove its old key "
            f"(ssh-keygen -R) and re-run",
        )
    except SshFailed as exc:
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
            {**_kept(t.local_dir), **route},
        )
    except FileNotFoundError as exc:
        return HostOutcome(name, "collect", Outcome.FAILED, str(exc), round(time.monotonic() - t0, 3), route)
    except (OSError, EOFError, tarfile.TarError) as exc:
        return HostOutcome(
            name,
            "collect",
            Outcome.UNREACHABLE,
            f"{type(exc).__name__}: {str(exc)[:300] or 'connection lost'}",
            round(time.monotonic() - t0, 3),
            {**_kept(t.local_dir), **route, **({CUT_OFF: True} if isinstance(exc, TimeoutError) else {})},
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
    budgets: CollectBudgets | None = None,
    srun: SrunReach | None = None,
    masters: Mapping[str, float] | None = None,
    shipped: Mapping[str, Path] | None = None,
) -> dict[str, HostOutcome]:
    """Collect every target in parallel (bounded); one outcome per host. ``masters``: host -> when this
    process's own ssh client to it ended (:attr:`sb_fleet.fleet.executor.Executor.masters`);
    ``shipped``: host -> the results its exec sent (:attr:`~sb_fleet.fleet.executor.Executor.shipped`),
    each removed once read.

    A host's own trouble (unreachable, refused key, connection lost) is its outcome; trouble of the
    control node itself (its disk is full) stops the whole collect with :class:`CollectAborted`.
    """
    out: dict[str, HostOutcome] = {}
    abort: list[InfraError] = []
    stopped: list[bool] = []

    def one(t: CollectTarget, remote: bool = True) -> HostOutcome | None:
        name = t.host.name
        if stopped:
            return HostOutcome(name, "collect", Outcome.PENDING, "not collected: interrupted")
        if abort:
            return HostOutcome(name, "collect", Outcome.PENDING, f"not collected: {abort[0]}")
        if progress and remote:
            progress(name, RUNNING, "collect")
        spool = (shipped or {}).get(name)
        o: HostOutcome | None = None
        try:
            o = collect_host(t, ssh, timeout, budgets, srun, (masters or {}).get(name), spool, remote)
        except InfraError as exc:
            abort.append(exc)
            o = HostOutcome(
                name, "collect", Outcome.PENDING, f"collect stopped: {exc}", details=_kept(t.local_dir)
            )
        finally:
            if spool is not None and o is not None:
                spool.unlink(missing_ok=True)
        if progress and o is not None:
            progress(name, o.outcome, o.reason)
        return o

    # A host whose whole results rode its exec is collected from the spool here, one after another: no
    # network to wait for, and threads would only take turns at the interpreter (at 64 hosts, ~0.15 s of
    # the control node's CPU went to 64 threads doing this). The rest (and a host whose spool falls
    # short: read again there, then fetched over SSH) go to the pool.
    remaining = []
    for t in targets:
        spooled = shipped is not None and t.host.name in shipped and srun is None and not t.host.is_local
        got = one(t, remote=False) if spooled else None
        if got is None:
            remaining.append(t)
        else:
            out[got.host] = got
    pool = ThreadPoolExecutor(max_workers=max(1, min(parallel, len(remaining) or 1)))
    try:
        for o in pool.map(one, remaining):
            assert o is not None  # remote=True: always an outcome
            out[o.host] = o
    except BaseException:  # Ctrl-C, SIGTERM: every host's reads end now, and no host starts
        stopped.append(True)
        close_all()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    if abort:
        raise CollectAborted(str(abort[0]), out)
    return out


# Run on a host after an interrupted run: stop the runner of this run (found by its pid file and checked
# by its command line: the runner's module, or validate's one exec, first_exec.py, in which the first
# step's runner runs); the runner kills the benchmarks it started and records the interruption; a
# runner that does not stop within 10 s is killed with the process groups it recorded.
STOP_RUNNER = """cd {d} 2>/dev/null || {{ echo absent; exit 0; }}
pid=$(head -n 1 runner.pid 2>/dev/null) || {{ echo absent; exit 0; }}
case $pid in ''|*[!0-9]*) echo absent; exit 0 ;; esac
alive() {{ [ -r /proc/$pid/cmdline ] && grep -qE 'sb_bench[.]host[.]runner|sb_bench/host/first_exec[.]py' \
  /proc/$pid/cmdline 2>/dev/null \
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


# With a container runtime, first: stop the step's container (the runtime sends the runner, its first
# process, SIGTERM and kills what is left after 10 s), then remove it if it is still there. The runner's
# pid file holds its pid inside the container, which the host-side stop above cannot use. A runtime
# that does not answer (no daemon, sudo wants a password) is said, in its own words.
STOP_CONTAINER = """c() {{ {cmd} "$@"; }}
if ! err=$(c ps -q 2>&1 >/dev/null); then
  printf 'container not stopped: %s\n' "$(printf %s "$err" | tr '\n' ' ' | cut -c1-200)"
elif c container inspect {name} >/dev/null 2>&1; then
  c stop -t 10 {name} >/dev/null 2>&1
  c rm -f {name} >/dev/null 2>&1  # fails while --rm is already removing it: the runtime's word is below
  i=0
  while c container inspect {name} >/dev/null 2>&1 && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  if c container inspect {name} >/dev/null 2>&1; then echo "container not removed"
  else echo "container stopped and removed"; fi
fi
"""


def stop_runners(
    targets: list[CollectTarget],
    ssh: SshSettings,
    parallel: int,
    timeout: float = 30,
    srun: SrunReach | None = None,
    containers: dict[str, tuple[list[str], str]] | None = None,
) -> dict[str, str]:
    """Stop this run's runner on every target host, in parallel; host -> stopped|killed|finished|absent|error,
    after "container stopped and removed" (or "container not removed") where ``containers`` names the
    host's container: host -> (the runtime command before its subcommand, the container's name)."""
    dirs = {t.host.name: t.remote_dir for t in targets}

    def script(host: Host) -> str:
        cmd = STOP_RUNNER.format(d=sh_path(dirs[host.name]))
        ctr = (containers or {}).get(host.name)
        if ctr is not None:  # every value quoted: host and config data stay data in the shell
            argv, name = ctr
            cmd = (
                STOP_CONTAINER.format(cmd=" ".join(shlex.quote(a) for a in argv), name=shlex.quote(name))
                + cmd
            )
        return cmd

    return on_hosts([t.host for t in targets], script, ssh, parallel, timeout, srun)


def on_hosts(
    hosts: list[Host],
    script: Callable[[Host], str],
    ssh: SshSettings,
    parallel: int,
    timeout: float = 30,
    srun: SrunReach | None = None,
) -> dict[str, str]:
    """A short shell script on every host, in parallel, each through its own new connection (an srun
    step, SSH, or a local shell): host -> what it printed on one line, or ``error: ...``."""

    def one(host: Host) -> tuple[str, str]:
        cmd = script(host)
        try:
            if srun is not None:
                rc, out_s, err_s = srun_command(srun.srun, srun.job_id, host.name, cmd, timeout)
                return host.name, (_said(out_s) or f"error: {err_s.strip()[:200]}")
            if host.is_local:
                r = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=timeout)
                return host.name, (_said(r.stdout) or f"error: {r.stderr.strip()[:200]}")
            client = connect(host, ssh)
            try:
                rc, out, err = _exec(client, cmd, timeout)
                return host.name, (
                    _said(out.decode(errors="replace")) or f"error: {err.decode(errors='replace')[:200]}"
                )
            finally:
                client.close()
        except Exception as exc:  # noqa: BLE001 - one host's trouble is its own line
            return host.name, f"error: {type(exc).__name__}: {str(exc)[:200]}"

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts) or 1))) as pool:
        return dict(pool.map(one, hosts))


def _said(stdout: str) -> str:
    """The stop script's lines as one: ``container stopped and removed; finished``."""
    return "; ".join(line.strip() for line in stdout.splitlines() if line.strip())[:300]


def remove_partials(root: Path) -> None:
    """Drop the temp files (``.<name>.<random>.tmp``) an interrupted collect left behind."""
    for p in root.rglob(".*.tmp"):
        p.unlink(missing_ok=True)
    if not any(root.iterdir()) if root.exists() else False:
        shutil.rmtree(root, ignore_errors=True)
