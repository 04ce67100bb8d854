"""What one host may cost the control node at collect: the config's ``collect`` section.

A host can only hurt itself. Each budget below is per host; a host past any of them ends its
``collect`` stage failed, with the reason, and every other host is collected as usual::

    collect:
      host_timeout: 900              # s: wall time for the whole host (connect, listing, checksums, transfer)
      max_files: 20000               # entries (files and directories) in the host's results listing
      max_file_bytes: 268435456      # one file (256 MiB); a larger one is not fetched
      max_host_bytes: 1073741824     # all of the host's files together (1 GiB)

``fleet.collect_timeout`` stays the stall timeout: the longest wait for the next bytes of any one read.
See docs/collect-budgets.md.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CollectBudgets(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host_timeout: int = Field(900, ge=1, le=7 * 86400)
    max_files: int = Field(20_000, ge=1, le=10_000_000)
    max_file_bytes: int = Field(256 << 20, ge=1)
    max_host_bytes: int = Field(1 << 30, ge=1)


def default_budgets() -> CollectBudgets:
    """The budgets of a config with no ``collect`` section."""
    return CollectBudgets.model_validate({})
