"""Maintenance: OPTIMIZE (compaction, Z-order) as the ``db.optimize`` group, and VACUUM."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from posixlake._ops.core import Table, TableCore, counted, logger
from posixlake.errors import InvalidOperation, UnknownColumns
from posixlake.types import OptimizeResult, VacuumResult

__all__ = ["MaintenanceOps", "Optimizer", "optimize_result"]


class Optimizer:
    """``db.optimize``: call it to compact, or use ``.compact()`` / ``.z_order(columns)``."""

    def __init__(self, table: Table) -> None:
        self._table = table

    def __call__(
        self,
        *,
        target_size: int | None = None,
        partition_filters: list[tuple[str, str, Any]] | None = None,
    ) -> OptimizeResult:
        """Compact small files (bin-packing); see :meth:`compact`."""
        return self.compact(target_size=target_size, partition_filters=partition_filters)

    def compact(
        self,
        *,
        target_size: int | None = None,
        partition_filters: list[tuple[str, str, Any]] | None = None,
    ) -> OptimizeResult:
        """Rewrite small files into files of about ``target_size`` bytes, in one commit.

        Args:
            target_size: bytes per output file (when None: the table's ``delta.targetFileSize``,
                32 MiB on tables posixlake creates, else delta-rs' 100 MiB).
            partition_filters: limit to partitions, e.g. ``[("day", "=", "2024-01-01")]``.
        """
        table = self._table
        table.authorize("write", "optimize")
        with table.write("optimize"):
            metrics, version = table.log.compact(
                target_size=target_size, partition_filters=partition_filters
            )
        return optimize_result(metrics, version)

    def z_order(
        self,
        columns: Sequence[str],
        *,
        target_size: int | None = None,
        partition_filters: list[tuple[str, str, Any]] | None = None,
    ) -> OptimizeResult:
        """Rewrite files clustered by a Z-order curve over ``columns`` (better data skipping).

        Raises:
            SchemaError: a column is not in the table.
        """
        table = self._table
        table.authorize("write", "zorder")
        cols = [columns] if isinstance(columns, str) else list(columns)
        if not cols:
            raise InvalidOperation("z-order needs at least one column")
        unknown = [c for c in cols if c not in table.log.arrow_schema.names]
        if unknown:
            raise UnknownColumns(f"z-order: unknown column(s) {unknown}")
        with table.write("zorder"):
            metrics, version = table.log.z_order(
                cols, target_size=target_size, partition_filters=partition_filters
            )
        return optimize_result(metrics, version)


def optimize_result(metrics: Mapping[str, Any], version: int | None) -> OptimizeResult:
    return OptimizeResult(
        files_added=int(metrics.get("numFilesAdded", 0) or 0),
        files_removed=int(metrics.get("numFilesRemoved", 0) or 0),
        partitions_optimized=int(metrics.get("partitionsOptimized", 0) or 0),
        version=version,
    )


class MaintenanceOps(TableCore):
    """The maintenance operations of :class:`~posixlake.database.DatabaseOps`."""

    @property
    def optimize(self) -> Optimizer:
        """OPTIMIZE: ``db.optimize()``, ``db.optimize.compact()``, ``db.optimize.z_order(cols)``."""
        return Optimizer(self._table)

    @counted
    def vacuum(
        self,
        retention_hours: int | None = None,
        *,
        dry_run: bool = False,
        enforce_retention_duration: bool = False,
    ) -> VacuumResult:
        """Delete data files that no version within the retention needs.

        An explicit ``retention_hours`` is the caller's decision, as in the original
        project: one below the table's ``delta.deletedFileRetentionDuration`` (168 hours
        by default) is honoured, with a warning in the log, because it can break time
        travel and readers still using old versions.

        Args:
            retention_hours: keep files needed by versions newer than this (the table's
                retention when None).
            dry_run: only list the files.
            enforce_retention_duration: refuse retentions shorter than the table's
                (delta-rs' guard).

        Raises:
            InvalidOperation: a negative or non-integer retention, or one below the
                table's with ``enforce_retention_duration``.
        """
        self._authorize("admin", "vacuum")
        if retention_hours is not None and (
            isinstance(retention_hours, bool)
            or not isinstance(retention_hours, int)
            or retention_hours < 0
        ):
            raise InvalidOperation("retention_hours must be a non-negative integer")
        table_hours = self._log.retention_hours
        if (
            retention_hours is not None
            and retention_hours < table_hours
            and not enforce_retention_duration
        ):
            logger.warning(
                "vacuum of %s with a retention of %d hours, below the table's %g: files "
                "that older versions and running readers may need are deleted",
                self._log.uri,
                retention_hours,
                table_hours,
            )
        with self._write("VACUUM"):
            files = self._log.vacuum(
                retention_hours,
                dry_run=dry_run,
                enforce_retention_duration=enforce_retention_duration,
            )
        return VacuumResult(tuple(files), dry_run)
