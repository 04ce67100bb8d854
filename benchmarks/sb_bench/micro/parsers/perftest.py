"""Parse perftest's bandwidth tools (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``).

The result table (perftest's RESULT_FMT, or RESULT_FMT_G with ``--report_gbits``)::

     #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
     8388608    5000             23673.33            23672.52            0.002959

Warnings may be interleaved ("Conflicting CPU frequency values detected ..."), columns may be
separated by tabs, and ``-a`` prints one row per size. Bandwidths are converted to GB/s (1e9
bytes/s): perftest's MB is 2**20 bytes (MB/sec * 1048576 / 1e9; SuperBench's old ``/ 1000`` was
4.9% low), its Gb is 1e9 bits (Gb/sec / 8, what ``--report_gbits`` prints and SuperBench reads).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from sb_bench.micro.parsers import ParseError

MIB_PER_GB = (1 << 20) / 1e9  # perftest's MB/sec -> GB/s
_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(MB|Gb)/sec\]\s+BW average\[(MB|Gb)/sec\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+|-?nan|inf)\s+([\d.]+|-?nan|inf)\s+([\d.]+)")
_ERRORS = re.compile(
    r"(Couldn't|Unable to|Failed to|failed to|error|Error|No IB devices found|IB device .* not found)"
)


@dataclass(frozen=True)
class BwRow:
    bytes: int
    iterations: int
    peak_gbps: float  # GB/s
    avg_gbps: float  # GB/s
    msg_rate_mpps: float

    def to_json(self) -> dict:
        return asdict(self)


def parse_bw(text: str) -> list[BwRow]:
    """Every result row of a perftest bandwidth run; ParseError when there is no table."""
    unit = None
    rows: list[BwRow] = []
    for line in text.splitlines():
        h = _HEADER.search(line)
        if h:
            unit = h.group(2)
            continue
        if unit is None:
            continue
        m = _ROW.match(line)
        if not m:
            continue
        factor = MIB_PER_GB if unit == "MB" else 1.0 / 8.0
        peak, avg = (float(m.group(i)) * factor for i in (3, 4))
        rows.append(BwRow(int(m.group(1)), int(m.group(2)), peak, avg, float(m.group(5))))
    if not rows:
        raise ParseError(f"no perftest bandwidth table in the output: {error_summary(text) or _tail(text)}")
    return rows


def row_for(rows: list[BwRow], size: int) -> BwRow:
    for r in rows:
        if r.bytes == size:
            return r
    raise ParseError(f"no result row for {size} bytes (sizes seen: {[r.bytes for r in rows]})")


def error_summary(text: str) -> str:
    """The lines of a failed run that say why (perftest prints them before exiting)."""
    lines = [ln.strip() for ln in text.splitlines() if _ERRORS.search(ln)]
    return " | ".join(lines[:3])[:300]


def _tail(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (" | ".join(lines[-3:]) or "(empty output)")[:300]
