"""The Delta log a ``DatabaseOps`` handle has loaded, for readers that work file by file.

The NFS face renders a version's data files one by one (and caches each rendering), so it
needs what delta-rs' scan hides: the version's add actions and its snapshot. These are
the two public ways to get them from a handle; nothing outside ``posixlake`` reads the
handle's private state.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from posixlake.delta._log import DeltaLog

__all__ = ["LogHandle", "loaded_log", "log_at"]


class LogHandle(Protocol):
    """What these functions need of a ``DatabaseOps`` (structurally; no import of it)."""

    @property
    def _log(self) -> DeltaLog: ...

    def _snapshot(
        self, version: int | None, as_of: datetime | int | float | str | None
    ) -> DeltaLog: ...


def loaded_log(db: LogHandle) -> DeltaLog:
    """Return the handle's live log: the version it has loaded, moved by its own commits.

    Hold ``log.lock`` to read it at one version (writers through the handle hold it).
    """
    return db._log


def log_at(db: LogHandle, version: int) -> DeltaLog:
    """Return the table's log at `version` (a time-travel snapshot, cached by the handle).

    Raises:
        VersionError: no such version (or it was vacuumed away).
    """
    return db._snapshot(version, None)
