"""Hostile hosts for tests and benchmarks: a ``find`` that lies, when told to.

:func:`install_hostile_find` writes a ``find`` into a directory that a fleet puts first on every
login's PATH (``SshFleet(path_prefix=...)``). It is the real ``/usr/bin/find`` unless the directory it
runs in (collect's listing runs in the host's results directory) holds a file ``.hostile`` (hidden:
never collected) naming what to do instead:

* ``fail``: exit 127, as a host with no ``find`` at all;
* ``clash``: the real listing, plus an entry ``x/y`` below the real file ``x`` (a path clash);
* ``huge BYTES``: the real listing, then ``BYTES`` bytes of made-up entries, as fast as it can;
* ``slow``: an entry that arrives one byte every 0.1 s, forever.
"""

from __future__ import annotations

import os
from pathlib import Path

SCRIPT = r"""#!/bin/sh
[ -f .hostile ] || exec /usr/bin/find "$@"
read mode arg < .hostile
case $mode in
  fail) echo "find: not found" >&2; exit 127 ;;
  clash) /usr/bin/find "$@"; printf 'f 3 x/y\0'; exit 0 ;;
  huge) /usr/bin/find "$@"; exec /usr/bin/python3 -c '
import sys
left = int(sys.argv[1])
out = sys.stdout.buffer
i = 0
while left > 0:
    block = b"".join(b"f 10 junk/%s/%012d\0" % (b"d" * 60, j) for j in range(i, i + 4096))
    out.write(block[:left])
    left -= len(block)
    i += 4096
' "${arg:-1073741824}" ;;
  slow) exec /usr/bin/python3 -c '
import sys, time
out = sys.stdout.buffer
out.write(b"f 1 ")
while True:
    out.write(b"a")
    out.flush()
    time.sleep(0.1)
' ;;
esac
exec /usr/bin/find "$@"
"""


def install_hostile_find(bin_dir: Path) -> Path:
    """Write the lying ``find`` into ``bin_dir`` (made world-readable); returns its path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(bin_dir, 0o755)
    p = bin_dir / "find"
    p.write_text(SCRIPT)
    os.chmod(p, 0o755)
    return p


def plant(results: Path, mode: str) -> None:
    """Make a host's results directory answer collect's listing with ``mode`` (see the module's doc)."""
    (results / ".hostile").write_text(mode + "\n")
    os.chmod(results / ".hostile", 0o644)
