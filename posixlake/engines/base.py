"""The Engine protocol: what DatabaseOps asks of a compute engine.

An engine computes; the Delta log (``posixlake.delta``) commits. Every engine must give
the same results for the same inputs (the test suite runs against each). Rows already in
Python memory never go through an engine: DatabaseOps commits them directly as Arrow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import pyarrow as pa

from posixlake.delta import DeltaLog

__all__ = ["Engine", "FileFormat", "MergeOutcome", "WriteOutcome"]

FileFormat = Literal["csv", "parquet"]


@dataclass(frozen=True)
class WriteOutcome:
    """Rows a write touched, and the version it committed (None: nothing committed)."""

    rows: int
    version: int | None


@dataclass(frozen=True)
class MergeOutcome:
    """Rows a merge inserted, updated and deleted, and the version it committed."""

    inserted: int
    updated: int
    deleted: int
    version: int | None


class Engine(Protocol):
    """A compute engine over Delta snapshots that delta-rs resolves and commits.

    ``log`` arguments are loaded DeltaLogs: the current table, or a read-only time-travel
    snapshot for queries. An engine must not refresh ``log`` in the middle of an operation;
    it commits through ``log`` so that delta-rs checks conflicts against the version read.
    """

    name: str

    def query(self, log: DeltaLog, sql: str) -> pa.Table:
        """Run SQL over the snapshot (the table is named ``data``).

        Raises:
            QueryError: the SQL is invalid or fails.
        """
        ...

    def delete(
        self, log: DeltaLog, predicate: str | None, *, metadata: Mapping[str, Any]
    ) -> WriteOutcome:
        """Delete matching rows (all with None) in one commit; no commit when none match."""
        ...

    def update(
        self,
        log: DeltaLog,
        predicate: str | None,
        updates: Mapping[str, str],
        *,
        metadata: Mapping[str, Any],
    ) -> WriteOutcome:
        """Set columns to SQL expressions on matching rows in one commit."""
        ...

    def merge(
        self, log: DeltaLog, source: pa.Table, key: Sequence[str], *, metadata: Mapping[str, Any]
    ) -> MergeOutcome:
        """Apply the ``_op`` (INSERT / UPDATE / DELETE) rows of ``source`` by ``key`` in one commit."""
        ...

    def read_files(
        self, paths: Sequence[str], *, fmt: FileFormat, schema: pa.Schema | None
    ) -> pa.Table | None:
        """Read CSV or Parquet files for a table create (schema inferred when None).

        Returns None when the engine writes the files itself (see :meth:`append_files`).
        """
        ...

    def append_files(self, log: DeltaLog, paths: Sequence[str], *, fmt: FileFormat) -> WriteOutcome:
        """Append the rows of CSV or Parquet files in one commit."""
        ...

    def close(self) -> None:
        """Release the engine's resources (a Spark session it started)."""
        ...
