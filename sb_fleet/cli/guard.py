"""The one CLI guard: every sb-fleet exception becomes one line on stderr and its documented exit code
(:mod:`sb_fleet.exits`); Ctrl-C outside a stage's own handling exits 130; an unexpected exception is
one line too (with ``-v`` its traceback), never a bare traceback."""

from __future__ import annotations

import functools
import logging
import sys
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
