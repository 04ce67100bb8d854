"""The one exception tree of sb-fleet.

Every error a user can cause or meet derives from :class:`SbFleetError` and
carries the process exit code the CLI returns for it. Exceptions of the
libraries underneath (paramiko, ansible, pydantic, yaml) are mapped to these
at the module that calls them, so nothing above that boundary sees them.
"""

from __future__ import annotations

from sb_fleet.exits import EXIT_INFRA, EXIT_USAGE


class SbFleetError(Exception):
    """Base of every sb-fleet error. ``str(err)`` is one line a user can act on."""

    exit_code = EXIT_USAGE


class UsageError(SbFleetError):
    """Bad command-line usage."""


class InputError(SbFleetError):
    """A file the user wrote is invalid. Names the file, the line or field, and what to do."""

    def __init__(self, path: object, where: str | None, message: str, hint: str | None = None):
        self.path = str(path)
        self.where = where
        self.message = message
        self.hint = hint
        loc = self.path + (f": {where}" if where else "")
        text = f"{loc}: {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text.replace("\r", "\\r").replace("\n", "\\n"))  # always one line


class ConfigError(InputError):
    """The benchmark config is invalid."""


class InventoryError(InputError):
    """The Ansible inventory is invalid."""


class RulesError(InputError):
    """A rules, baseline or gate file is invalid."""


class ResultsError(InputError):
    """A results file cannot be read at all."""


class RunDirError(SbFleetError):
    """The run directory is missing, foreign, of another schema version, or one of its files is corrupt
    (bad input: exit 2). A run directory that cannot be *written* is an :class:`InfraError`."""


class InfraError(SbFleetError):
    """Trouble with the infrastructure rather than the input: SSH, Ansible, the control node's disk.

    One host's own trouble (unreachable, a refused host key, a lost connection) is never raised: it is
    that host's outcome (``unreachable``, ``hostkey-mismatch``), so the other hosts go on."""

    exit_code = EXIT_INFRA
