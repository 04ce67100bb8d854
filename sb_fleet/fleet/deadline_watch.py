"""The per-host deadline of one stage, watched while its playbook runs.

A host's clock starts at its first task in the stage. Past its deadline (or when Ansible's own task
timeout ended one of its tasks), the host is stopped at once, in a thread of its own, while the others go
on: ``stop(host)`` ends its processes and says how it went. The stage itself is over its bound
(:meth:`sb_fleet.plan.deadlines.Deadline.stage_bound`) when it outlives every wave of hosts' deadlines:
the executor then cancels the playbook. A stopped host whose play goes on (a shell that ran the killed
command runs its next one; Ansible starts the host's next task) is stopped again until its play ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from sb_fleet.plan.deadlines import Deadline

TICK_S = 0.25
RESTOP_S = 5.0  # a stopped host whose play goes on (its next task) is stopped again this often
STOP_WAIT_S = 60.0  # the longest the stage waits, at its end, for the stop of a host past its deadline


class DeadlineWatch:
    def __init__(self, deadline: Deadline, hosts: int, forks: int, stop: Callable[[str], str]) -> None:
        self.deadline = deadline
        self.bound = deadline.stage_bound(hosts, forks)
        self._stop_host = stop
        self._t0 = time.monotonic()
        self._started: dict[str, float] = {}
        self._finished: set[str] = set()
        self._stops: dict[str, Future[str]] = {}
        self._again: dict[str, tuple[float, Future[str]]] = {}  # host -> its latest stop after the first
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(16, hosts)), thread_name_prefix="deadline")
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="deadline-watch", daemon=True)
        self._thread.start()

    def started(self, host: str) -> None:
        with self._lock:
            self._started.setdefault(host, time.monotonic())

    def finished(self, host: str) -> None:
        with self._lock:
            self._finished.add(host)

    def expire(self, host: str) -> None:
        """Stop ``host`` now (once): past its deadline, or Ansible's task timeout fired for it."""
        with self._lock:
            if host not in self._stops:
                self._stops[host] = self._pool.submit(self._stop_host, host)

    def expired(self, host: str) -> bool:
        with self._lock:
            return host in self._stops

    def over(self) -> bool:
        """The whole stage outlived its bound."""
        return time.monotonic() - self._t0 > self.bound

    def _loop(self) -> None:
        while not self._done.wait(TICK_S):
            now = time.monotonic()
            with self._lock:
                late = [
                    h
                    for h, t in self._started.items()
                    if h not in self._finished and h not in self._stops and now - t >= self.deadline.seconds
                ]
                for h, f in self._stops.items():
                    last_t, last = self._again.get(h, (0.0, f))
                    if h not in self._finished and last.done() and now - last_t >= RESTOP_S:
                        self._again[h] = (now, self._pool.submit(self._stop_host, h))
            for h in late:
                self.expire(h)

    def close(self) -> dict[str, str]:
        """Stop watching; host -> what stopping it did, for every host stopped (waited on, bounded)."""
        self._done.set()
        self._thread.join()
        out: dict[str, str] = {}
        t_end = time.monotonic() + STOP_WAIT_S
        with self._lock:
            stops = dict(self._stops)
        for h, f in stops.items():
            try:
                out[h] = f.result(timeout=max(0.1, t_end - time.monotonic()))
            except Exception as exc:  # noqa: BLE001 - one host's stop failing is that host's line
                out[h] = f"not stopped: {type(exc).__name__}: {exc}"[:300]
        self._pool.shutdown(wait=False, cancel_futures=True)
        return out
