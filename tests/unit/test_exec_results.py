"""A host's results on its exec's stdout (sb_bench.host.ship_results -> sb_fleet.fleet.exec_results ->
collect's parsers in sb_fleet.fleet.fetch).

The oracles are the tools collect runs over SSH: the host's stream is checked against GNU ``find
-printf``, ``sha256sum`` and ``tar -t`` on the same directory, and what collect stores against the
files themselves. Hostile streams (no length line, a lie in it, a tar that is not the listing's, a file
that is not its checksum, a member outside the directory, a stream past its cap, an exec cut off) are
never taken: the host goes to collect over SSH, and nothing lands outside its directory.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from sb_fleet.config.collect_budgets import default_budgets
from sb_fleet.config.inventory import Host
from sb_fleet.fleet.exec_results import ResultsSplit
from sb_fleet.fleet.fetch import CollectTarget, collect_shipped

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from sb_bench.host.first_exec import SpecError, load_spec  # noqa: E402
from sb_bench.host.ship_results import ship  # noqa: E402

MARK = "sb-fleet: the results follow 0123456789abcdef"
TOOLS = all(shutil.which(t) for t in ("find", "sha256sum", "tar"))


def _spec(root: Path, **over: object) -> dict:
    return {
        "dir": str(root),
        "mark": MARK,
        "max_files": 100,
        "max_file_bytes": 1 << 20,
        "max_bytes": 4 << 20,
        **over,
    }


def _results(root: Path) -> Path:
    (root / "noop" / "logs").mkdir(parents=True)
    (root / "status.json").write_text('{"state": "finished"}\n')
    (root / "noop" / "rank0.json").write_text('{"return_code": 0, "result": {"step_time": [1.5]}}\n')
    (root / "noop" / "logs" / "rank0.log").write_bytes(os.urandom(70_000))
    (root / "noop" / "empty").write_bytes(b"")
    (root / "sp ace é").write_text("x")
    long = root / ("d" * 120)
    long.mkdir()
    (long / ("f" * 120 + ".json")).write_text("{}")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x").write_text("not sent")
    (root / "noop" / ".tmp.partial").write_text("not sent")
    return root


class _Text:
    def __init__(self) -> None:
        self.data = bytearray()

    def add(self, data: bytes) -> None:
        self.data += data


def _stream(root: Path, **over: object) -> tuple[bytes, str]:
    out = io.BytesIO()
    said = ship(out, _spec(root, **over))
    return out.getvalue(), said


def _split(
    data: bytes, tmp: Path, chunk: int, cap: int = 1 << 30, keep: bool = True
) -> tuple[bytes, Path | None]:
    text = _Text()
    split = ResultsSplit(text, MARK.encode(), tmp / f"spool-{chunk}", cap)
    for i in range(0, len(data), chunk):
        split.add(data[i : i + chunk])
    spool = split.finish(keep)
    return bytes(text.data), spool


def _target(local: Path) -> CollectTarget:
    return CollectTarget(Host("h1", "127.0.0.1"), "/nowhere", local)


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not any(x.startswith(".") for x in p.relative_to(root).parts)
    }


@pytest.mark.skipif(not TOOLS, reason="GNU find, sha256sum and tar are the oracle")
def test_the_stream_is_what_find_sha256sum_and_tar_say_of_the_directory(tmp_path: Path) -> None:
    root = _results(tmp_path / "results")
    data, said = _stream(root)
    assert said == "sent"
    head, _, rest = data.partition(b"\n" + MARK.encode() + b"\n")
    assert head == b""
    n, _, body = rest.partition(b"\n")
    listing, sums_tar = body[: int(n)], body[int(n) :]
    records, _, sums = listing.partition(b"\0\0")
    find = subprocess.run(
        ["find", ".", "-mindepth", "1", "-name", ".*", "-prune", "-o", "-printf", "%y %s %P\\0"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    assert sorted((records + b"\0").split(b"\0")[:-1]) == sorted(find.split(b"\0")[:-1])
    sha = subprocess.run(
        "find . -mindepth 1 -name '.*' -prune -o -type f -exec sha256sum -- {} +",
        shell=True,
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    assert sorted(sums.splitlines()) == sorted(sha.splitlines())
    tar = tmp_path / "t.tar"
    tar.write_bytes(sums_tar)
    names = subprocess.run(["tar", "-tf", str(tar)], capture_output=True, check=True, text=True).stdout
    assert sorted(names.splitlines()) == sorted(_files(root))
    out = tmp_path / "untar"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(tar), "-C", str(out)], check=True)
    assert _files(out) == _files(root)


@pytest.mark.parametrize("chunk", [1, 7, 64, 4096, 1 << 20])
def test_split_at_any_chunking_then_collected_byte_for_byte(tmp_path: Path, chunk: int) -> None:
    root = _results(tmp_path / "results")
    data, _ = _stream(root)
    before = b"hostprep facts\nsb-fleet-run-follows\nrunner: done" + MARK.encode()[:9]  # a part of it is text
    text, spool = _split(before + data, tmp_path, chunk)
    assert text == before
    assert spool is not None and oct(spool.stat().st_mode & 0o777) == "0o600"
    local = tmp_path / f"raw-{chunk}"
    got, why = collect_shipped(_target(local), spool, default_budgets())
    assert why == "" and got is not None and got.fetched == got.listed == len(_files(root)), why
    assert _files(local) == _files(root)


def test_a_relative_results_directory_is_under_home_as_collects_cd_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _results(tmp_path / "ws" / "results")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path / "ws")  # the exec's own directory is the workspace: not where it looks
    data, said = _stream(Path("ws/results"))
    assert said == "sent" and data
    data, said = _stream(Path("results"))
    assert said.startswith("not sent") and data == b""


def test_no_marker_leaves_the_text_whole(tmp_path: Path) -> None:
    data = b"line\n" * 100 + b"\n" + MARK.encode()[:-1]  # almost the marker, at the very end
    text, spool = _split(data, tmp_path, 13)
    assert text == data and spool is None
    assert not list(tmp_path.glob("spool-*"))


def test_past_its_cap_or_cut_off_the_spool_is_dropped(tmp_path: Path) -> None:
    root = _results(tmp_path / "results")
    data, _ = _stream(root)
    text, spool = _split(b"out" + data, tmp_path, 4096, cap=10_000)
    assert text == b"out" and spool is None
    text, spool = _split(b"out" + data, tmp_path, 4095, keep=False)  # the exec was killed
    assert text == b"out" and spool is None
    assert not list(tmp_path.glob("spool-*"))


@pytest.mark.parametrize(
    "what",
    ["fifo", "symlink", "newline", "backslash", "too many", "file too big", "too much in all", "no dir"],
)
def test_a_directory_that_is_not_plain_sends_nothing(tmp_path: Path, what: str) -> None:
    root = _results(tmp_path / "results")
    over: dict[str, object] = {}
    if what == "fifo":
        os.mkfifo(root / "noop" / "pipe")
    elif what == "symlink":
        (root / "link").symlink_to("/etc/passwd")
    elif what == "newline":
        (root / "a\nb").write_text("x")
    elif what == "backslash":
        (root / "a\\b").write_text("x")
    elif what == "too many":
        over["max_files"] = 5
    elif what == "file too big":
        over["max_file_bytes"] = 60_000
    elif what == "too much in all":
        over["max_bytes"] = 60_000
    else:
        shutil.rmtree(root)
    data, said = _stream(root, **over)
    assert data == b"" and said.startswith("not sent"), said


def _spool_of(tmp_path: Path, listing: bytes, tar_bytes: bytes, length: bytes | None = None) -> Path:
    p = tmp_path / "spool"
    p.write_bytes(
        (length if length is not None else str(len(listing)).encode()) + b"\n" + listing + tar_bytes
    )
    return p


def _tar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w|", format=tarfile.GNU_FORMAT) as t:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            t.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def _listing(files: dict[str, bytes]) -> bytes:
    recs = b"".join(b"f %d %s\0" % (len(b), n.encode()) for n, b in files.items())
    sums = b"".join(
        b"%s  ./%s\n" % (hashlib.sha256(b).hexdigest().encode(), n.encode()) for n, b in files.items()
    )
    return recs + b"\0" + sums


GOOD = {"status.json": b'{"state": "finished"}', "noop/rank0.json": b"{}"}


@pytest.mark.parametrize(
    "case",
    [
        "no length line",
        "length past the end",
        "a listed file not in the tar",
        "a file that is not its checksum",
        "a member outside the directory",
        "garbage for a tar",
        "a listing that is not find's",
        "more entries than max_files",
    ],
)
def test_a_hostile_spool_is_never_taken(tmp_path: Path, case: str) -> None:
    listing, members, length = _listing(GOOD), dict(GOOD), None
    budgets = default_budgets()
    if case == "no length line":
        length = b"x"
    elif case == "length past the end":
        length = b"99999999"
    elif case == "a listed file not in the tar":
        del members["noop/rank0.json"]
    elif case == "a file that is not its checksum":
        members["status.json"] = b'{"state": "FINISHED"}'  # the same size, other bytes
    elif case == "a member outside the directory":
        listing = _listing({**GOOD, "../evil": b"x"})
        members["../evil"] = b"x"
    elif case == "garbage for a tar":
        members = {}
    elif case == "a listing that is not find's":
        listing = b"f notasize status.json\0\0"
    else:
        budgets = budgets.model_copy(update={"max_files": 1})
    tar_bytes = _tar(members) if case != "garbage for a tar" else os.urandom(3000)
    local = tmp_path / "raw" / "results"
    got, why = collect_shipped(_target(local), _spool_of(tmp_path, listing, tar_bytes, length), budgets)
    assert got is None and why, case
    assert not (tmp_path / "raw" / "evil").exists() and not (tmp_path / "evil").exists()
    for rel, body in _files(local).items() if local.exists() else []:
        assert GOOD.get(rel) == body, (case, rel)  # what was stored is the host's file, whole


def test_first_exec_takes_a_ship_spec_only_whole() -> None:
    import base64
    import json

    def spec(ship: object) -> str:
        return base64.b64encode(json.dumps({"prep": [], "ship": ship}).encode()).decode()

    assert load_spec(spec(_spec(Path("r"))))["ship"]["mark"] == MARK
    for bad in ({}, {**_spec(Path("r")), "max_files": "5"}, {**_spec(Path("r")), "mark": ""}, [1]):
        with pytest.raises(SpecError):
            load_spec(spec(bad))


def test_collect_all_reads_whole_spools_in_its_own_thread_and_sends_a_short_one_over_ssh(
    tmp_path: Path,
) -> None:
    """A host whose whole results rode its exec is collected from its spool in the calling thread (no
    network to wait for); one whose spool falls short is read again in the pool and fetched over SSH,
    its outcome saying why the spool was not taken. Every spool is removed once read."""
    from sb_fleet.fleet.fetch import collect_all
    from sb_fleet.fleet.ssh import SshSettings
    from sb_fleet.outcome import Outcome

    root = _results(tmp_path / "results")
    data, _ = _stream(root)
    _, whole = _split(b"x" + data, tmp_path, 4096)
    _, short = _split(b"x" + data[: len(data) // 2], tmp_path, 4097, keep=True)
    assert whole is not None and short is not None
    closed = socket_port()  # nothing listens there: the SSH fallback fails at once
    targets = [
        CollectTarget(
            Host("whole", (), {"ansible_host": "127.0.0.1", "ansible_port": closed}),
            "/nowhere",
            tmp_path / "raw-whole",
        ),
        CollectTarget(
            Host("short", (), {"ansible_host": "127.0.0.1", "ansible_port": closed}),
            "/nowhere",
            tmp_path / "raw-short",
        ),
    ]
    threads: dict[str, set[int]] = {}

    def progress(host: str, state: object, why: str) -> None:
        threads.setdefault(host, set()).add(threading.get_ident())

    ssh = SshSettings(tmp_path / "known_hosts", "strict", connect_timeout=5)
    out = collect_all(
        targets, ssh, 8, 30, progress, default_budgets(), shipped={"whole": whole, "short": short}
    )
    assert out["whole"].outcome == Outcome.OK and out["whole"].details["via"] == "exec", out["whole"]
    assert _files(tmp_path / "raw-whole") == _files(root)
    assert threads["whole"] == {threading.get_ident()}
    assert out["short"].outcome != Outcome.OK, out["short"]
    assert out["short"].details["shipped"].startswith("not taken: "), out["short"].details
    assert threads["short"] and threading.get_ident() not in threads["short"]
    assert not whole.exists() and not short.exists()


def socket_port() -> int:
    """A local TCP port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
