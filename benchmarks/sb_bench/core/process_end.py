"""The end of an on-host process whose work is done: its status, without the interpreter's finalisation
where that would run nobody's code.

Finalisation frees every module and object before the process ends; for the suite's short processes
(validate's exec on each host, the runner of a step, a rank of a benchmark without torch) that is 10-20 ms
of the host's CPU each (docs/speed.md), spent on memory the kernel takes back anyway. What it would still
do that matters: flush the standard streams (done here first), run exit handlers (``atexit``: torch's,
a benchmark's teardown) and wait for threads that are not daemons. Where either is there, the process
ends the ordinary way. A caller uses this only once every file it wrote is closed (``write_result`` syncs
and renames) and every process it started is waited for.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn


def teardown_runs_code() -> bool:
    """Whether the interpreter's finalisation would run someone's code: an exit handler is registered, or
    a thread that is not a daemon is still running (an interpreter that cannot say: assume so)."""
    handlers = getattr(atexit, "_ncallbacks", None)  # CPython's count of registered exit handlers
    if handlers is None or handlers() > 0:
        return True
    threading = sys.modules.get("threading")  # not imported: no thread was started through it
    if threading is None:
        return False
    main = threading.main_thread()
    return any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())


def end_process(rc: int) -> NoReturn:
    """Flush stdout and stderr, then end the process with ``rc`` as ``sys.exit(rc)`` would (its low byte);
    the ordinary way where the teardown runs someone's code (:func:`teardown_runs_code`)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the SSH session went away, or the stream was closed: nothing to say
            pass
    if teardown_runs_code():
        sys.exit(rc)
    os._exit(rc & 0xFF)
