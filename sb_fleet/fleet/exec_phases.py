"""Each phase of validate's one exec per host keeps its own deadline, watched from the control node.

The exec (:mod:`sb_fleet.plan.host_exec`) runs the health checks, hostprep and the plan's first step in
one process on the host, and a cold host's transfer unpacks the suite before them. The host bounds its
checks itself (first_exec), but only once its Python runs: an interpreter that hangs before its first
line (a dead NFS mount, a stuck site-packages import, a wrapper script that blocks) would hold the host,
and the nightly gate, for every deadline of the exec together (the checks', fleet.deploy_timeout's
3600 s and the first step's). So the control node reads the marker lines the exec prints between its
phases (:mod:`sb_fleet.plan.tasks`) as they arrive and ends a phase that outlives its own deadline:

=========  =========================  ===================================================================
phase      ends at the line           deadline
=========  =========================  ===================================================================
unpack     SUITE_READY                the suite's transfer only: ``fleet.deploy_timeout`` (an install)
health     HEALTH_DONE <rc>           ``health.exec_timeout`` + 5 s (the host's own SIGKILL after its
                                      SIGTERM), from the exec's start (or the suite's unpacking)
hostprep   RUN_FOLLOWS (or the end)   ``fleet.prep_timeout`` where the suite is in place; where hostprep
                                      says INSTALLING (it builds the venv or installs requirements), and
                                      in the suite's transfer, ``fleet.deploy_timeout``
step       (the exec's end)           the first step's deadline (its benchmarks' timeouts + step_margin)
=========  =========================  ===================================================================

sb-fleet's own clients (:mod:`sb_fleet.fleet.direct_exec`: an ssh client, or under ``launcher: slurm``
an srun step, :func:`sb_fleet.fleet.executor.srun_transport`) read an exec's output as it comes. A play
through Ansible (``fleet.exec_via: ansible``, a host that needs Ansible's connection: a password,
``become``) hands it over only when the task ends: there the host watches the same phases itself
(:meth:`ExecPhases.host_watch`, a POSIX shell script that needs no Python) and ends the exec at a phase's
deadline, saying which (:meth:`ExecPhases.late_on_host`); the host's outcome is then the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sb_fleet.plan.host_exec import PhaseWatch
from sb_fleet.plan.tasks import HEALTH_DONE, INSTALLING, PHASE_LATE, RUN_FOLLOWS, SUITE_READY

LINE_KEEP = 256  # bytes of a line kept while it is incomplete: every marker is shorter


@dataclass(frozen=True)
class Phase:
    """One phase of the exec: ``name`` (unpack, health, hostprep, step), the words its reason starts with,
    its deadline in seconds and where that comes from (the config keys)."""

    name: str
    label: str
    seconds: int
    source: str

    def reason(self) -> str:
        return f"{self.label}: no end within {self.seconds} s ({self.source})"


@dataclass(frozen=True)
class ExecPhases:
    """The phases of one task's exec, in order, each with the line that ends it (``""``: the last, which
    the exec's end ends); ``install``: hostprep's deadline once it says it installs (None: none longer)."""

    phases: tuple[tuple[Phase, str], ...]
    install: Phase | None = None

    def clock(self, t0: float) -> PhaseClock:
        return PhaseClock(self, t0)

    def host_watch(self) -> PhaseWatch:
        """The same phases for the exec's own watch on the host (:data:`sb_fleet.plan.host_exec.PHASE_WATCH`),
        where the exec goes through Ansible and its output arrives only at its end."""
        install = (self.install.name, self.install.seconds) if self.install is not None else None
        return PhaseWatch(tuple((ph.name, ph.seconds, end) for ph, end in self.phases), install)

    def late_on_host(self, stdout: str) -> Phase | None:
        """The phase the host's own watch ended the exec in (its ``PHASE_LATE <name> <seconds>`` line in
        the exec's output), or None."""
        for line in reversed(stdout.splitlines()[-20:]):
            words = line.split()
            if len(words) == 3 and words[0] == PHASE_LATE:
                every = [ph for ph, _ in self.phases] + ([self.install] if self.install is not None else [])
                for ph in every:
                    if ph.name == words[1] and str(ph.seconds) == words[2]:
                        return ph
        return None


@dataclass
class PhaseClock:
    """One host's exec, read as its stdout arrives (:meth:`feed`): the phase it is in and since when."""

    plan: ExecPhases
    since: float
    index: int = 0
    phase: Phase | None = None
    _line: bytearray = field(default_factory=bytearray)
    _partial: bool = False  # the line being read began before the buffer (longer than LINE_KEEP)

    def __post_init__(self) -> None:
        self.phase = self.plan.phases[0][0] if self.plan.phases else None

    def feed(self, data: bytes, now: float) -> None:
        """The next bytes of the exec's stdout, read at ``now``."""
        if not self._watching():
            return  # in the last phase: nothing more to look for
        start = 0
        while True:
            nl = data.find(b"\n", start)
            piece = data[start:] if nl < 0 else data[start:nl]
            room = LINE_KEEP - len(self._line)
            if room > 0:
                self._line += piece[:room]
            if nl < 0:
                return
            self._ended(bytes(self._line).decode(errors="replace"), now)
            self._line.clear()
            start = nl + 1

    def _watching(self) -> bool:
        if self.phase is None:
            return False
        if self.index < len(self.plan.phases) - 1:
            return True
        return self.phase.name == "hostprep" and self.plan.install not in (None, self.phase)

    def _ended(self, line: str, now: float) -> None:
        if self.phase is None:
            return
        ends = self.plan.phases[self.index][1]
        if ends and (line == ends or line.startswith(ends + " ")):
            self.index += 1
            self.phase, self.since = self.plan.phases[self.index][0], now
        elif line == INSTALLING and self.phase.name == "hostprep" and self.plan.install is not None:
            self.phase = self.plan.install  # the same clock: its longer deadline from hostprep's start

    def late(self, now: float) -> Phase | None:
        """The phase the exec has outlived the deadline of, or None."""
        if self.phase is not None and now - self.since > self.phase.seconds:
            return self.phase
        return None


def exec_phases(
    health_s: int | None,
    prep_s: int,
    install_s: int,
    step: tuple[str, int] | None,
    transfer: bool,
) -> ExecPhases:
    """The phases of validate's exec (or deploy's, without checks or step): ``health_s``, the checks'
    ``health.exec_timeout`` (None: no checks); ``prep_s``, ``fleet.prep_timeout`` (hostprep where the suite
    is in place); ``install_s``, ``fleet.deploy_timeout``; ``step``, the first step's id and deadline;
    ``transfer``: the suite's transfer (unpacking first, hostprep an install)."""
    from sb_fleet.plan.deadlines import HEALTH_KILL_AFTER_S

    out: list[tuple[Phase, str]] = []
    if transfer:
        out.append((Phase("unpack", "unpacking the suite", install_s, "fleet.deploy_timeout"), SUITE_READY))
    if health_s is not None:
        src = "health.exec_timeout + 5 s, from the exec's start" + (
            " past the suite's unpacking" if transfer else ""
        )
        out.append((Phase("health", "health checks", health_s + HEALTH_KILL_AFTER_S, src), HEALTH_DONE))
    install = Phase("hostprep", "hostprep (installing)", install_s, "fleet.deploy_timeout, hostprep installs")
    if transfer:
        prep = Phase(
            "hostprep", "hostprep (installing)", install_s, "fleet.deploy_timeout: the suite was installed"
        )
    else:
        prep = Phase("hostprep", "hostprep (suite in place)", min(prep_s, install_s), "fleet.prep_timeout")
    out.append((prep, RUN_FOLLOWS if step is not None else ""))
    if step is not None:
        out.append((Phase("step", step[0], step[1], "its benchmarks' timeouts + fleet.step_margin"), ""))
    return ExecPhases(tuple(out), None if transfer or install_s <= prep.seconds else install)
