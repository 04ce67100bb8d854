"""XID events in the kernel log since boot, and which of them mean a bad GPU rather than a bad application.

The kernel log line (NVIDIA driver, ``NVRM``)::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.

is read from ``dmesg`` in the tool directory, else a captured kernel log ``kmsg`` under a relocated procfs
root, else ``/dev/kmsg`` (non-blocking, needs CAP_SYSLOG where ``kernel.dmesg_restrict`` is set), else
``dmesg`` on PATH. The ring buffer may have wrapped on a long-running host: what it still holds is judged.

Classes follow NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, its
"Resolution Bucket (Immediate Action)" column): codes whose action is RESTART_APP are the application's
(warn); codes whose action is RESET_GPU, RESTART_BM or CONTACT_SUPPORT are the GPU's or the node's (fail).
Both lists are overridable in the profile (``xid: {fail: [...], warn: [...]}``); a code in neither warns.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sb_bench.health.record import FAIL, PASS, WARN, Env, Record

# the GPU or the node needs attention (reset, reboot, service)
HARDWARE_XIDS = frozenset(
    {
        46,
        48,
        54,
        56,
        57,
        58,
        61,
        62,
        64,
        74,
        79,
        95,
        110,
        119,
        120,
        121,
        136,
        140,
        143,
        144,
        145,
        146,
        147,
        148,
        149,
        150,
        154,
        155,
    }
)
# the application's fault, or informational (the GPU is fine once the process is gone)
APPLICATION_XIDS = frozenset({13, 31, 32, 43, 45, 63, 68, 69, 92, 94, 109})

XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+),?\s*(.*)$")
MAX_LOG = 16 << 20


def parse_xids(text: str) -> list[tuple[str, int, str]]:
    """Every XID line of a kernel log (dmesg or /dev/kmsg format) -> (PCI id, code, message)."""
    out = []
    for line in text.splitlines():
        m = XID_LINE.search(line)
        if m:
            out.append((m.group(1).lower(), int(m.group(2)), m.group(3).strip()[:200]))
    return out


def read_kmsg(path: Path, limit: int = MAX_LOG) -> str:
    """The records /dev/kmsg holds now, read without blocking (EAGAIN: no more)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks, size = [], 0
    try:
        while size < limit:
            try:
                b = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: a record was overwritten while reading; go on
                    continue
                raise
            if not b:
                break
            chunks.append(b)
            size += len(b)
    finally:
        os.close(fd)
    return b"\n".join(chunks).decode("utf-8", "replace")


def kernel_log(env: Env, timeout: float) -> tuple[str | None, str]:
    """(the kernel log, where it came from), or (None, why it could not be read)."""
    if env.tool_dir is not None and (env.tool_dir / "dmesg").is_file():
        rc, out, err = env.run(["dmesg"], timeout)
        return (out, "dmesg (tool dir)") if rc == 0 else (None, f"dmesg: rc {rc}: {err.strip()[:200]}")
    captured = env.procfs / "kmsg"
    if env.procfs != Path("/proc") and captured.is_file():
        return captured.read_bytes()[:MAX_LOG].decode("utf-8", "replace"), f"{captured}"
    why = []
    try:
        return read_kmsg(Path("/dev/kmsg")), "/dev/kmsg"
    except OSError as exc:
        why.append(f"/dev/kmsg: {exc.strerror}")
    rc, out, err = env.run(["dmesg"], timeout)
    if rc == 0:
        return out, "dmesg"
    why.append(f"dmesg: {err.strip()[:200] or f'rc {rc}'}")
    return None, "; ".join(why)


def xid_record(env: Env, timeout: float = 10.0) -> Record:
    fail_codes = set(env.want("xid", "fail", HARDWARE_XIDS))
    warn_codes = set(env.want("xid", "warn", APPLICATION_XIDS)) - fail_codes
    rule = (
        f"no XID of {sorted(fail_codes)} (fail); application XIDs {sorted(warn_codes)} and unknown ones warn"
    )
    text, src = kernel_log(env, timeout)
    if text is None:
        return Record("gpu.xid", WARN, None, rule, f"kernel log not readable: {src}", "")
    events = parse_xids(text)
    counts: dict[str, int] = {}
    for _, code, _ in events:
        counts[str(code)] = counts.get(str(code), 0) + 1
    bad = [e for e in events if e[1] in fail_codes]
    other = [e for e in events if e[1] not in fail_codes]
    verdict = FAIL if bad else WARN if other else PASS
    shown = (bad or other)[:5]
    ev = "; ".join(f"XID {c} on {pci}: {msg}" for pci, c, msg in shown)
    if len(bad or other) > 5:
        ev += f"; ... {len(bad or other) - 5} more"
    return Record("gpu.xid", verdict, counts, rule, ev or "no XID in the kernel log", src)
