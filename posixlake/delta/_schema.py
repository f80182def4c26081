"""Renaming and dropping columns of column-mapped tables, as ONE metadata-only commit.

With column mapping (``delta.columnMapping.mode`` ``name`` or ``id``) data files and
partition values name columns by their *physical* names, and the schema maps each logical
name to its physical one. A rename changes the logical name only; a drop removes the field
from the schema (its values stay in the files, unread, until a rewrite or vacuum). No data
file is touched, older versions keep their names (time travel), and every reader that
honours column mapping (delta-rs, Spark, ours) reads the new schema.

delta-rs has no rename or drop. Its ``create_write_transaction`` in ``overwrite`` mode
commits a ``metaData`` action carrying the schema it is given (when that differs from the
table's) and removes the active files its partition filters match: with a filter that no
file can match (``column IN ()``) the commit is the schema change alone. Nothing here
writes log JSON by hand.

Refused, by name: tables without column mapping (renaming a column there means rewriting
every file), partition columns (delta-rs keeps them by logical name in the metadata), the
primary key and other columns named in table properties (constraints, declared types, data
skipping columns), and nested fields.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.schema import Field as DeltaField

from posixlake.delta._commit import TXN_KEY, _find_version
from posixlake.delta._features import column_mapping_mode
from posixlake.delta._log import COMMIT_OPERATION_KEY, DeltaLog, _translated
from posixlake.errors import DeltaLakeError, InvalidOperation, NotFound, SchemaError

__all__ = ["drop_columns", "rename_column"]


def rename_column(
    log: DeltaLog,
    old: str,
    new: str,
    *,
    metadata: Mapping[str, Any] | None = None,
    guarded: Mapping[str, str] | None = None,
) -> int:
    """Rename top-level column ``old`` to ``new`` in one commit; return the new version.

    Args:
        log: the writable table; the caller holds its lock and has refreshed it.
        metadata: commit info entries (``posixlake.operation``...).
        guarded: columns that may not change, each with the reason (the primary key...).

    Raises:
        InvalidOperation: the table has no column mapping; ``old`` is a partition column
            or guarded.
        NotFound: no column ``old``.
        SchemaError: ``new`` is empty or names another column (names are case-insensitive).
    """
    what = f"rename column {old!r}"
    if not new or not new.strip():
        raise SchemaError(f"{what}: the new name is empty")

    def change(fields: list[DeltaField]) -> list[DeltaField]:
        _find(fields, old, what)
        _check_changeable(log, [old], what, guarded or {})
        clash = [f.name for f in fields if f.name.lower() == new.lower() and f.name != old]
        if clash:
            raise SchemaError(f"{what}: a column {clash[0]!r} exists already")
        return [
            DeltaField(new, f.type, nullable=f.nullable, metadata=f.metadata)
            if f.name == old
            else f
            for f in fields
        ]

    return _commit_schema(log, what, change, operation="RENAME COLUMN", metadata=metadata)


def drop_columns(
    log: DeltaLog,
    names: Sequence[str],
    *,
    metadata: Mapping[str, Any] | None = None,
    guarded: Mapping[str, str] | None = None,
) -> int:
    """Drop top-level columns in one commit; return the new version.

    Raises:
        InvalidOperation: the table has no column mapping; a column is a partition
            column or guarded; every column would go.
        NotFound: a column does not exist.
        SchemaError: no column named, or one named twice.
    """
    what = f"drop column(s) {list(names)}"
    if not names:
        raise SchemaError("drop columns: name at least one column")
    if len(set(names)) != len(names):
        raise SchemaError(f"{what}: a column is named twice")

    def change(fields: list[DeltaField]) -> list[DeltaField]:
        for name in names:
            _find(fields, name, what)
        _check_changeable(log, names, what, guarded or {})
        kept = [f for f in fields if f.name not in names]
        if not kept:
            raise InvalidOperation(f"{what}: a table needs at least one column")
        return kept

    return _commit_schema(log, what, change, operation="DROP COLUMNS", metadata=metadata)


def _find(fields: Sequence[DeltaField], name: str, what: str) -> None:
    if not any(f.name == name for f in fields):
        known = ", ".join(f.name for f in fields)
        raise NotFound(f"{what}: no column {name!r} (columns: {known})")


def _check_changeable(
    log: DeltaLog, names: Sequence[str], what: str, guarded: Mapping[str, str]
) -> None:
    """Refuse columns that something other than the schema names."""
    config = log.configuration
    mode = column_mapping_mode(config)
    if mode == "none":
        raise InvalidOperation(
            f"{what}: the table at {log.uri} has no column mapping. Renaming or dropping "
            "a column needs the Delta table feature columnMapping "
            "(delta.columnMapping.mode = 'name' or 'id'), where data files use physical "
            "names; without it every data file would have to be rewritten. Create the "
            "table with column_mapping='name'"
        )
    for name in names:
        if name in log.partition_columns:
            raise InvalidOperation(
                f"{what}: {name!r} is a partition column; partition columns cannot be "
                "renamed or dropped"
            )
        if name in guarded:
            raise InvalidOperation(f"{what}: {name!r} is {guarded[name]}")
        for key, value in config.items():
            if key.startswith("delta.constraints.") and name.lower() in value.lower():
                raise InvalidOperation(
                    f"{what}: {name!r} appears in the CHECK constraint "
                    f"{key.removeprefix('delta.constraints.')!r}; drop the constraint first"
                )
            if key == "delta.dataSkippingStatsColumns" and name in _split(value):
                raise InvalidOperation(
                    f"{what}: {name!r} is listed in delta.dataSkippingStatsColumns"
                )


def _files_at(log: DeltaLog, version: int) -> set[str]:
    """Return the active files of ``version``."""
    options = dict(log.storage_options) if log.storage_options else None
    with _translated(f"list the files of version {version}"):
        return set(DeltaTable(log.uri, version=version, storage_options=options).file_uris())


def _split(value: str) -> list[str]:
    return [v.strip().strip("`") for v in value.split(",") if v.strip()]


def _commit_schema(
    log: DeltaLog,
    what: str,
    change: Callable[[list[DeltaField]], list[DeltaField]],
    *,
    operation: str,
    metadata: Mapping[str, Any] | None,
) -> int:
    """Commit ``change(fields)`` as the table's schema alone (no file action), retried."""
    log._check_writable()
    meta = {**(metadata or {}), COMMIT_OPERATION_KEY: operation}
    with log.lock:

        def attempt() -> int:
            dt = log.table
            read_version = int(dt.version())
            fields = list(dt.schema().fields)
            new = change(fields)
            # a filter no file can match (checked against the current schema): the
            # overwrite removes nothing
            column = (log.partition_columns or [f.name for f in fields])[0]
            txn = uuid.uuid4().hex
            dt.create_write_transaction(
                [],
                mode="overwrite",
                schema=DeltaSchema(new),
                partition_by=list(log.partition_columns) or None,
                partition_filters=[(column, "in", [])],
                commit_properties=log._props({**meta, TXN_KEY: txn}),
            )
            ours = _find_version(log, txn, read_version, log.refresh())
            if _files_at(log, ours) != _files_at(log, ours - 1):  # never expected
                raise DeltaLakeError(
                    f"{what}: delta-rs changed the table's files in a schema-only commit "
                    f"(version {ours}); restore version {ours - 1}"
                )
            return ours

        return log._retrying(what, attempt)
