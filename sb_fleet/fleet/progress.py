"""Live progress per stage: hosts done / failed / pending, and the slowest hosts still running.

Thread-safe counters fed by the executors' callbacks; a ``rich`` live table
on a terminal, a line per state change in a log otherwise (CI, pipes).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sb_fleet.outcome import Outcome

RUNNING = "running"  # the one progress word that is not an outcome: a host has started a task
DONE_OK = frozenset({Outcome.OK, Outcome.SKIPPED, Outcome.OUT_OF_SERVICE})


@dataclass
class StageState:
    name: str
    total: int
    started: float = field(default_factory=time.monotonic)
    running: dict[str, float] = field(default_factory=dict)  # host -> since
    ok: set[str] = field(default_factory=set)
    bad: dict[str, str] = field(default_factory=dict)
    ended: float | None = None

    @property
    def pending(self) -> int:
        return max(self.total - len(self.ok) - len(self.bad), 0)

    def line(self) -> str:
        el = (self.ended or time.monotonic()) - self.started
        s = f"{self.name:<8} done {len(self.ok):>4}  failed {len(self.bad):>4}  pending {self.pending:>4}  {el:6.1f}s"
        slow = sorted(self.running.items(), key=lambda kv: kv[1])[:3]
        if slow and not self.ended:
            now = time.monotonic()
            s += "  slowest: " + ", ".join(f"{h} ({now - t:.0f}s)" for h, t in slow)
        return s


class Progress:
    def __init__(self, enabled: bool = True, stream=None):  # noqa: ANN001
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.stages: list[StageState] = []
        self.lock = threading.Lock()
        self.live: Any = None
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()

    @contextmanager
    def stage(self, name: str, hosts: list[str]) -> Iterator[StageState]:
        st = StageState(name, len(hosts))
        with self.lock:
            self.stages.append(st)
        self._start()
        try:
            yield st
        finally:
            st.ended = time.monotonic()
            self._stop()
            if self.enabled:
                print(st.line(), file=self.stream, flush=True)

    def update(self, host: str, status: Outcome | str, detail: str = "") -> None:
        """``status``: :data:`RUNNING` or an :class:`Outcome` (or its value)."""
        with self.lock:
            if not self.stages:
                return
            st = self.stages[-1]
            if status == RUNNING:
                st.running.setdefault(host, time.monotonic())
                return
            outcome = Outcome(status)
            st.running.pop(host, None)
            if outcome in DONE_OK:
                if host not in st.bad:
                    st.ok.add(host)
            else:
                st.ok.discard(host)
                st.bad[host] = detail
                if self.enabled and not self.tty:
                    print(
                        f"  {st.name}: {host}: {outcome.value}: {detail[:160]}", file=self.stream, flush=True
                    )
        self._refresh()

    def _table(self):  # noqa: ANN202
        from rich.text import Text

        with self.lock:
            return Text("\n".join(s.line() for s in self.stages[-1:]))

    def _start(self) -> None:
        if not self.tty:
            return
        from rich.console import Console
        from rich.live import Live

        self.live = Live(
            self._table(), console=Console(file=self.stream), refresh_per_second=4, transient=True
        )
        self.live.start()

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._table())

    def _stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
