"""Reads: SQL queries (now or at a past version or time), whole tables, history, the
change data feed, and the figures a handle reports (data skipping, metrics, health)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from posixlake._metrics import timed
from posixlake._ops.core import TableCore, counted
from posixlake.errors import DeltaLakeError, PosixLakeError, QueryError
from posixlake.result import QueryResult
from posixlake.types import CommitInfo, DataSkippingStats, HealthStatus, Metrics

__all__ = ["ReadOps"]


class ReadOps(TableCore):
    """The reads of :class:`~posixlake.database.DatabaseOps`."""

    @counted
    @timed("query")
    def query(
        self,
        sql: str,
        *,
        version: int | None = None,
        as_of: datetime | int | float | str | None = None,
    ) -> QueryResult:
        """Run SQL over the table (named ``data``), now or at a past version or time.

        Time travel can also be written in the query, as Delta users do:
        ``SELECT * FROM data VERSION AS OF 3`` or
        ``SELECT * FROM data TIMESTAMP AS OF '2024-05-01 12:00:00'`` (UTC unless the time
        has an offset).

        Args:
            sql: the query, e.g. ``"SELECT name, count(*) FROM data GROUP BY name"``.
            version: a table version for time travel.
            as_of: a datetime, epoch milliseconds or ISO string for time travel.

        Raises:
            QueryError: invalid SQL; an UPDATE, DELETE, INSERT or MERGE (run those with
                :meth:`sql`); a VERSION AS OF clause and ``version=`` that disagree.
            VersionError: no such version or time.
        """
        self._authorize("read", "query")
        if not isinstance(sql, str) or not sql.strip():
            raise QueryError("query needs SQL text")
        from posixlake.sql import split_time_travel, statement_kind

        kind = statement_kind(sql)
        if kind in ("update", "delete", "insert", "merge"):
            raise QueryError(f"query runs SELECT; run {kind.upper()} statements with db.sql(...)")
        sql, travel = split_time_travel(sql, engine=self._engine.name)
        if travel is not None:
            if (version is not None or as_of is not None) and (
                travel.version != version or travel.timestamp != as_of
            ):
                raise QueryError(
                    f"the query says {travel.describe()}: do not also pass version= or as_of="
                )
            version, as_of = travel.version, travel.timestamp
        started = self._clock()
        with self._log.lock:
            snap = self._snapshot(version, as_of)
            table = self._engine.query(snap, sql)
        self._counters.query(started)
        return QueryResult(table)

    @counted
    def to_arrow(
        self, *, version: int | None = None, as_of: datetime | int | float | str | None = None
    ) -> pa.Table:
        """Return every row of the table (now, or at a version or time) as Arrow."""
        self._authorize("read", "read")
        with self._log.lock:
            snap = self._snapshot(version, as_of)
            return snap.read_columns(None)

    @counted
    def history(self, limit: int | None = None) -> list[CommitInfo]:
        """Return the commits, newest first."""
        self._authorize("read", "history")
        self._log.refresh()
        return self._log.history(limit)

    def changes(self, start_version: int, end_version: int | None = None) -> QueryResult:
        """Return the change data feed from ``start_version`` to ``end_version`` (inclusive).

        Rows carry the table columns plus ``_change_type`` (``insert``, ``delete``,
        ``update_preimage``, ``update_postimage``), ``_commit_version`` and
        ``_commit_timestamp``.

        Raises:
            InvalidOperation: the table does not record changes.
            VersionError: a version out of range.
        """
        self._authorize("read", "changes")
        self._log.refresh()
        return QueryResult(self._log.changes(start_version, end_version))

    @counted
    def get_data_skipping_stats(self, predicate: str | None = None) -> DataSkippingStats:
        """Count active files, and those a predicate lets a scan skip by min/max statistics.

        Raises:
            QueryError: the predicate cannot be parsed.
        """
        self._authorize("read", "get_data_skipping_stats")
        from posixlake._skipping import skipping_stats

        self._log.refresh()
        return skipping_stats(self._log.add_actions(), self._schema, predicate)

    def get_metrics(self) -> Metrics:
        """Return operation counters since this object was opened."""
        self._authorize("read", "get_metrics")
        return self._counters.snapshot(
            self._log.contention,
            buffered_rows=self._buffer.rows,
            table_reloads=self._log.generation,
        )

    @timed("health")
    def health_check(self) -> HealthStatus:
        """Check that the table can be read; count only ACTIVE files and their bytes."""
        self._authorize("read", "health_check")
        try:
            version = self._log.refresh()
            from posixlake.backup import restore_in_progress

            if restore_in_progress(self._log.uri, self._log.storage_options):
                raise DeltaLakeError("a restore into this location has not finished")
            actions = self._log.add_actions()
            rows = actions["num_records"] if "num_records" in actions.column_names else None
            return HealthStatus(
                status="healthy",
                version=version,
                active_files=actions.num_rows,
                active_bytes=int(pc.sum(actions["size_bytes"]).as_py() or 0),
                rows=int(pc.sum(rows).as_py() or 0) if rows is not None else 0,
                location=self._log.uri,
                uptime_seconds=self._clock() - self._counters.started,
            )
        except PosixLakeError as err:
            return HealthStatus(
                "unhealthy",
                -1,
                0,
                0,
                0,
                self._log.uri,
                message=str(err),
                uptime_seconds=self._clock() - self._counters.started,
            )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.to_arrow().to_pylist())

    def list_parquet_files(self) -> list[str]:
        """Return the table-relative paths of the active data files (the original's name; ``db.to_arrow()`` reads them)."""
        self._authorize("read", "list_parquet_files")
        self._log.refresh()
        return [str(p) for p in self._log.add_actions()["path"].to_pylist()]
