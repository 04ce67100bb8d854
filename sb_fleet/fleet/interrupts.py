"""SIGINT/SIGTERM while a stage runs: the first asks the stage to stop cleanly, a second aborts at once."""

from __future__ import annotations

import signal
import sys
import threading


class Interrupts:
    """SIGINT/SIGTERM during a stage: the first one asks the stage to stop cleanly (cancel Ansible, stop the
    benchmarks on the hosts, record who finished); a second one aborts at once."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, _frame: object) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name
        print(
            f"sb-fleet: {self.signal}: stopping; cleaning up the benchmarks still running on the hosts "
            f"(again to abort at once)",
            file=sys.stderr,
            flush=True,
        )

    def fired(self) -> bool:
        return self.signal is not None

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
