"""collect's one command for the listing and the checksums (sb_fleet.fleet.fetch.listing_sums_command),
run by a real ``/bin/sh`` with the real ``find`` and ``sha256sum`` on a directory of awkward names, and
parsed in chunks of every size: the oracle is the files themselves (hashlib), not the parser."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from sb_fleet.fleet.channels import HostRefused
from sb_fleet.fleet.fetch import ListingParser, SumsParser, listing_sums_command

NAMES = ["a.json", "dir/b.log", "sp ace.txt", "new\nline", "back\\slash", "ünï", "dir/deep/c", "big.bin"]


def _tree(root: Path) -> dict[str, bytes]:
    files = {n: f"content of {n!r}\n".encode() * (1 + i) for i, n in enumerate(NAMES)}
    files["big.bin"] = b"x" * 5000
    for n, data in files.items():
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        (root / n).write_bytes(data)
    (root / ".hidden").write_text("never listed")
    (root / "link").symlink_to("a.json")
    return files


def _parse(out: bytes, chunk: int, max_files: int = 100):  # noqa: ANN202
    lp, sp = ListingParser(max_files, split_at_empty=True), SumsParser()
    for i in range(0, len(out), chunk):
        after = lp.feed(out[i : i + chunk])
        if after:
            sp.feed(after)
    return lp.close(), sp.close()


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
def test_one_session_lists_and_sums_every_regular_file_within_the_size_limit(tmp_path, chunk):
    files = _tree(tmp_path)
    r = subprocess.run(["/bin/sh", "-c", listing_sums_command(str(tmp_path), 4096)], capture_output=True)
    assert r.returncode == 0, r.stderr
    listing, sums = _parse(r.stdout, chunk)
    assert listing.files == {n: len(d) for n, d in files.items()}
    assert "link" not in listing.files and not any(".hidden" in p for p in listing.files)
    assert listing.dirs == {"dir", "dir/deep"}
    want = {n: hashlib.sha256(d).hexdigest() for n, d in files.items() if len(d) <= 4096}
    assert sums == want  # big.bin (5000 bytes) is over the limit: listed, not summed


def test_no_results_directory_is_exit_3(tmp_path):
    r = subprocess.run(
        ["/bin/sh", "-c", listing_sums_command(str(tmp_path / "none"), 4096)], capture_output=True
    )
    assert r.returncode == 3


def test_an_empty_directory_lists_nothing(tmp_path):
    r = subprocess.run(["/bin/sh", "-c", listing_sums_command(str(tmp_path), 4096)], capture_output=True)
    listing, sums = _parse(r.stdout, 5)
    assert r.returncode == 0 and listing.files == {} and sums == {}


def test_a_host_that_never_ends_a_checksum_line_is_refused():
    lp, sp = ListingParser(10, split_at_empty=True), SumsParser()
    after = lp.feed(b"f 3 a\0\0" + b"0" * 64 + b"  ")
    assert after is not None
    sp.feed(after)
    with pytest.raises(HostRefused):
        sp.feed(b"x" * (SumsParser.MAX_LINE + 1))


def test_without_the_split_an_empty_record_is_still_not_finds():
    with pytest.raises(HostRefused):
        ListingParser(10).feed(b"f 3 a\0\0")
