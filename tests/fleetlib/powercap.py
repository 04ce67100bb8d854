"""A fake powercap tree whose package counter advances at a fixed power, for tests on hosts without RAPL.

``make_tree(root)`` lays out ``<root>/class/powercap`` as Linux does (a package and a DRAM domain of
socket 0, the ``core`` subdomain, the ``intel-rapl-mmio`` duplicate of the package) with regular
files a test rewrites itself (``write_counter``: a rename, so a reader never sees half a number).
``python tests/fleetlib/powercap.py <root> <watts> [<wrap_uj>]`` makes the package counter advance by
itself: it becomes a FIFO that this process answers, on every read, with watts x the seconds since
it started (wrapped at ``wrap_uj``), until it is killed; ``<root>/ready`` appears once it answers.
The benchmark reads it as it reads a real counter, through ``SB_PATH_SYSFS``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
import time
from pathlib import Path


def make_tree(root: Path, wrap_uj: int = 262143328850) -> Path:
    """Create ``<root>/class/powercap`` with zeroed counters; the package counter's file."""
    base = root / "class" / "powercap"
    zones = {
        "intel-rapl:0": "package-0",
        "intel-rapl:0:0": "core",
        "intel-rapl:0:1": "dram",
        "intel-rapl-mmio:0": "package-0",
    }
    for zone, name in zones.items():
        d = base / zone
        d.mkdir(parents=True, exist_ok=True)
        (d / "name").write_text(name + "\n")
        (d / "energy_uj").write_text("0\n")
        (d / "max_energy_range_uj").write_text(f"{wrap_uj}\n")
    (base / "intel-rapl").mkdir(exist_ok=True)  # the control type's own directory: no counter
    return base / "intel-rapl:0" / "energy_uj"


def write_counter(path: Path, uj: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{uj}\n")
    os.replace(tmp, path)


POLL_S = 0.002  # how often a counter's FIFO looks whether its last reader has gone


def serve(fifo: Path, watts: float, wrap_uj: int, t0: float, poll: float = POLL_S) -> None:
    """Answer every reader of ``fifo`` with the counter's value at that moment (P x time since t0).

    Each answer is written once a reader has the FIFO open (a blocking open for writing returns then),
    and computed at that moment. Before the next blocking open this process waits, polling with a
    non-blocking open, until no reader has the FIFO open: a blocking open keeps the pipe alive while it
    waits, and with it anything in the buffer, so it is entered only once the last reader has gone and
    the pipe with it. A reader that comes meanwhile (the poll's open succeeds) is answered there."""
    while True:
        with contextlib.suppress(BrokenPipeError), open(fifo, "w") as f:
            f.write(_value(t0, watts, wrap_uj))
        while True:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:
                    raise
                break  # no reader: the pipe is gone, and anything left in it
            try:
                os.write(fd, _value(t0, watts, wrap_uj).encode())
            except (BrokenPipeError, BlockingIOError):
                pass
            finally:
                os.close(fd)
            time.sleep(poll)


def _value(t0: float, watts: float, wrap_uj: int) -> str:
    return f"{int((time.monotonic() - t0) * watts * 1e6) % wrap_uj}\n"


def run(root: Path, watts: float, wrap_uj: int) -> None:
    """The package counter (and its mmio mirror, which a reader must not add) as FIFOs answered with
    the energy at the moment of the read: exact however late this process is scheduled."""
    make_tree(root, wrap_uj)
    base = root / "class" / "powercap"
    t0 = time.monotonic()
    threads = []
    for zone, poll in (("intel-rapl:0", POLL_S), ("intel-rapl-mmio:0", POLL_S)):
        fifo = base / zone / "energy_uj"
        fifo.unlink()
        os.mkfifo(fifo, 0o644)
        threads.append(threading.Thread(target=serve, args=(fifo, watts, wrap_uj, t0, poll), daemon=True))
    for t in threads:
        t.start()
    (root / "ready").write_text("1\n")
    for t in threads:
        t.join()


if __name__ == "__main__":
    run(Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 262143328850)
