"""The one CLI guard: every sb-fleet exception becomes one line on stderr and its documented exit code
(:mod:`sb_fleet.exits`); Ctrl-C outside a stage's own handling exits 130; an unexpected exception is
one line too (with ``-v`` its traceback), never a bare traceback."""

from __future__ import annotations

import functools
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import click

from sb_fleet.errors import SbFleetError
from sb_fleet.exits import EXIT_FAILED, EXIT_INTERRUPTED
from sb_fleet.rundir import runlog


def guarded(f: Callable[..., int | None]) -> Callable[..., None]:
    """Wrap a click command body: its return value (or ``sys.exit``) is the exit code."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        sigterm_interrupts()
        try:
            try:
                code = f(*args, **kwargs)
            finally:
                runlog.finish()  # the libraries' log file closed; one line on stderr says where it is
        except SbFleetError as exc:
            click.echo(f"sb-fleet: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("sb-fleet: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except (SystemExit, click.exceptions.Exit, click.exceptions.ClickException):
            raise
        except Exception as exc:  # noqa: BLE001 - the boundary: a bug is one line, not a traceback
            logging.getLogger("sb_fleet").info("traceback of the internal error", exc_info=True)
            click.echo(
                f"sb-fleet: internal error: {type(exc).__name__}: {exc} (a bug in sb-fleet; "
                f"run again with -v for the traceback)",
                err=True,
            )
            sys.exit(EXIT_FAILED)
        sys.exit(code or 0)

    return wrapper


def sigterm_interrupts() -> None:
    """SIGTERM stops a command as Ctrl-C does (a stage's own handling, else what it started is stopped
    and the command exits 130): by default it would end sb-fleet at once, and what it started (Ansible,
    srun steps, the processes on the hosts) would run on."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)
