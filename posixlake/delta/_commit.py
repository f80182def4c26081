"""Commit Parquet files that another engine wrote: add and remove actions in ONE transaction.

An external engine (Spark) writes Parquet files under the table root and hands us what it
wrote; we build delta-rs ``AddAction`` values (statistics from each file's Parquet
footer) and ``RemoveAction`` values for the files it replaced, and commit them with
``DeltaTable.create_write_transaction`` on the DeltaTable object the operation read from,
so delta-rs checks conflicts against that version.

Sharp edges of delta-rs this module handles:

- add and remove paths are the *decoded* path relative to the table root;
- a remove of a path that is not active is silently accepted, so every removed path is
  checked against the snapshot the operation planned from;
- ``create_write_transaction`` does not move the DeltaTable object forward: we refresh
  the log after the commit and find our version by a transaction id in the commit info;
- on ``CommitFailedError`` the caller must re-plan (:class:`CommitConflict`).
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Final, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties
from deltalake.transaction import AddAction, RemoveAction

from posixlake.delta._features import file_commit_blockers, physical_schema
from posixlake.delta._log import COMMIT_OPERATION_KEY, DeltaLog
from posixlake.delta._retry import RetryPolicy
from posixlake.delta._snapshot import DataFile, Snapshot
from posixlake.delta._table import default_properties
from posixlake.delta._translate import _translated
from posixlake.errors import InvalidOperation, PosixLakeError, UnsupportedTableFeature

__all__ = [
    "TXN_KEY",
    "WrittenFile",
    "commit_files",
    "create_with_files",
    "file_stats",
    "stats_json",
]

logger = logging.getLogger(__name__)

TXN_KEY: Final = "posixlake.txn"
STRING_STATS_PREFIX: Final = 64


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file an engine wrote under the table root, ready to be added.

    Attributes:
        path: the decoded path relative to the table root.
        size: bytes.
        partition_values: the serialized partition values (see ``serialize_partition_value``).
        num_records: rows in the file.
        stats: Delta statistics JSON (see :func:`file_stats`).
    """

    path: str
    size: int
    partition_values: Mapping[str, str | None]
    num_records: int
    stats: str

    def to_row(self) -> dict[str, Any]:
        """Return the file as a plain dict (for shipping from Spark workers)."""
        return {
            "path": self.path,
            "size": self.size,
            "partition_values": json.dumps(dict(self.partition_values)),
            "num_records": self.num_records,
            "stats": self.stats,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WrittenFile:
        """Rebuild a file from :meth:`to_row` output."""
        return cls(
            path=str(row["path"]),
            size=int(row["size"]),
            partition_values=json.loads(row["partition_values"]),
            num_records=int(row["num_records"]),
            stats=str(row["stats"]),
        )


# -- statistics from Parquet footers ---------------------------------------------------


def _leaves(
    t: pa.DataType, path: tuple[str, ...], *, stats: bool
) -> Iterator[tuple[tuple[str, ...], pa.DataType, bool]]:
    """Yield (path, type, has_stats) for each Parquet leaf column of a field, in order."""
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            f = t.field(i)
            yield from _leaves(f.type, (*path, f.name), stats=stats)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _leaves(t.value_type, path, stats=False)
    elif pa.types.is_map(t):
        yield from _leaves(t.key_type, path, stats=False)
        yield from _leaves(t.item_type, path, stats=False)
    else:
        yield path, t, stats


def _stat_value(value: Any, t: pa.DataType, *, is_max: bool) -> Any:
    """Convert a footer min/max to its Delta statistics form; None when it is not usable."""
    if value is None:
        return None
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        return value
    if pa.types.is_floating(t):
        return float(value) if math.isfinite(value) else None
    if pa.types.is_decimal(t):
        return Decimal(value)
    if pa.types.is_string(t):
        text = str(value)
        if len(text) <= STRING_STATS_PREFIX:
            return text
        return None if is_max else text[:STRING_STATS_PREFIX]
    if pa.types.is_timestamp(t):
        when: datetime = value
        if when.tzinfo is not None:
            when = when.astimezone(UTC).replace(tzinfo=None)
        # milliseconds, floored, as Delta writers do (readers widen max by 1 ms)
        text = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}"
        return text + "Z" if t.tz is not None else text.replace("T", " ")
    if pa.types.is_date(t):
        day: date = value
        return day.isoformat()
    return None


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def file_stats(metadata: pq.FileMetaData, schema: pa.Schema) -> str:
    """Build the Delta ``stats`` JSON of a file from its Parquet footer.

    Args:
        metadata: the file's footer (``ParquetWriter`` metadata or ``pq.read_metadata``).
        schema: the Arrow schema of the columns stored in the file, in file order.

    Returns:
        ``{"numRecords", "minValues", "maxValues", "nullCount"}`` as JSON. Columns inside
        lists and maps, binary columns, and values a footer does not hold exactly (NaN,
        strings longer than 64 characters for max) get no min/max.
    """
    leaves = [leaf for f in schema for leaf in _leaves(f.type, (f.name,), stats=True)]
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    if metadata.num_columns != len(leaves):
        logger.debug(
            "footer has %d columns, schema %d: no column stats", metadata.num_columns, len(leaves)
        )
        return stats_json(metadata.num_rows, {}, {}, {})
    for i, (path, t, usable) in enumerate(leaves):
        if not usable:
            continue
        lo: Any = None
        hi: Any = None
        null_count: int | None = 0
        complete = True
        for rg in range(metadata.num_row_groups):
            st = metadata.row_group(rg).column(i).statistics
            if st is None:
                complete = False
                null_count = None
                break
            if st.has_null_count and null_count is not None:
                null_count += st.null_count
            else:
                null_count = None
            rows = metadata.row_group(rg).num_rows
            if st.has_min_max:
                lo = st.min if lo is None or st.min < lo else lo
                hi = st.max if hi is None or st.max > hi else hi
            elif not (st.has_null_count and st.null_count == rows):
                complete = False  # a row group with values but no min/max
        if null_count is not None:
            _put(nulls, path, null_count)
        if complete and lo is not None and not pa.types.is_binary(t):
            low = _stat_value(lo, t, is_max=False)
            high = _stat_value(hi, t, is_max=True)
            if low is not None:
                _put(mins, path, low)
            if high is not None:
                _put(maxs, path, high)
    return stats_json(metadata.num_rows, mins, maxs, nulls)


def _json(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Decimal):
        return format(value, "f")  # exact, unlike a float
    return json.dumps(value)


def stats_json(
    num_records: int,
    mins: Mapping[str, Any],
    maxs: Mapping[str, Any],
    nulls: Mapping[str, Any],
) -> str:
    """Render Delta statistics JSON (decimals as exact JSON numbers)."""
    return _json(
        {
            "numRecords": num_records,
            "minValues": dict(mins),
            "maxValues": dict(maxs),
            "nullCount": dict(nulls),
        }
    )


# -- the commit ---------------------------------------------------------------------------


def commit_files(
    log: DeltaLog,
    adds: Sequence[WrittenFile],
    removes: Sequence[DataFile],
    *,
    snapshot: Snapshot | None = None,
    mode: Literal["append", "overwrite"] = "append",
    metadata: Mapping[str, Any] | None = None,
    strict: bool = False,
    operation: str | None = None,
    physical_names: bool = False,
) -> int | None:
    """Commit added and removed files as ONE Delta transaction through ``log``.

    ``log`` must still be at the version the caller planned from (the snapshot's): do
    not refresh it between reading and committing.

    Args:
        log: the writable table log; its DeltaTable object's version is the read version.
        adds: files written under the table root.
        removes: active files the operation replaces (from ``snapshot``).
        snapshot: the snapshot the operation planned from (default: the log's files).
        mode: ``"overwrite"`` also removes every other active file.
        metadata: commit info entries (``posixlake.operation``, ``posixlake.user``...).
        strict: fail on ANY concurrent commit (for writes whose correctness depends on
            the whole table, such as primary-key checks), instead of letting delta-rs
            rebase non-conflicting commits.
        operation: the logical operation (``DELETE``, ``UPDATE``, ``MERGE``) shown by
            ``DeltaLog.history`` instead of delta-rs' ``WRITE``.
        physical_names: ``adds`` store the physical column names and field ids of the
            column-mapped table (their partition values are still keyed by logical
            names; the log gets physical ones).

    Returns:
        The committed version, or None when there was nothing to commit.

    Raises:
        CommitConflict: a concurrent commit conflicts; the caller must re-plan and retry.
            Nothing raises once the transaction is committed, so on an error nothing
            was committed and the caller may delete the files it wrote.
        InvalidOperation: a removed file is not active in the planned snapshot, or the
            log moved since the snapshot.
        UnsupportedTableFeature: the table uses a feature such a commit would break
            (column mapping, deletion vectors on a removed file, a change data feed for a
            rewrite, CHECK constraints, generated or identity columns).
    """
    log._check_writable()
    if not adds and not removes and mode == "append":
        return None
    with log.lock:
        dt = log.table
        read_version = dt.version()
        with _translated("read schema"):
            schema_json = dt.schema().to_json()
        rewrites = bool(removes) or mode == "overwrite"
        blockers = file_commit_blockers(
            log.configuration, schema_json, rewrites=rewrites, physical_names=physical_names
        )
        if any(f.deleted_rows for f in removes):
            blockers = (*blockers, "deletionVectors")
        if blockers:
            raise UnsupportedTableFeature(
                f"the table at {log.uri} uses the Delta table feature(s) "
                f"{', '.join(blockers)}: files written by Spark cannot be committed to it "
                "(insert Arrow/pandas rows, or use engine='local')",
                blockers,
            )
        if snapshot is not None and snapshot.version != read_version:
            raise InvalidOperation(
                f"internal: planned on version {snapshot.version}, but the log is at {read_version}"
            )
        with _translated("list files"):
            active = (
                set(snapshot.file_map())
                if snapshot is not None
                else set(dt._table.get_add_file_sizes())
            )
        stale = [f.path for f in removes if f.path not in active]
        if stale:
            raise InvalidOperation(
                f"internal: removing file(s) that are not active at version {read_version}: {stale[:3]}"
            )
        schema = log.arrow_schema
        keys = _partition_keys(schema_json, schema) if physical_names else {}
        now = int(time.time() * 1000)
        actions: list[AddAction | RemoveAction] = [
            AddAction(
                path=f.path,
                size=int(f.size),
                partition_values=_keyed(f.partition_values, keys)
                if keys
                else dict(f.partition_values),
                modification_time=now,
                data_change=True,
                stats=f.stats,
            )
            for f in adds
        ]
        for f in removes:
            actions.append(
                RemoveAction(
                    f.path,
                    True,
                    now,
                    int(f.size),
                    f.serialized_partition_values(schema),
                )
            )
        txn = uuid.uuid4().hex
        info: dict[str, Any] = dict(metadata or {})
        info[TXN_KEY] = txn
        if operation:
            info[COMMIT_OPERATION_KEY] = operation
        props = CommitProperties(
            custom_metadata=info,
            max_commit_retries=RetryPolicy.delta_rs_retries(strict=strict),
        )
        parts = list(dt.metadata().partition_columns)
        with _translated("commit"):  # CommitFailedError -> CommitConflict
            dt.create_write_transaction(
                actions,
                mode,
                dt.schema(),
                partition_by=parts or None,
                commit_properties=props,
            )
        # committed: from here on nothing may raise (callers discard files on errors)
        try:
            latest = log.refresh()
            return _find_version(log, txn, read_version, latest)
        except PosixLakeError as err:
            logger.warning("committed, but cannot read the new version back: %s", err)
            return read_version + 1


def _partition_keys(schema_json: str, schema: pa.Schema) -> dict[str, str]:
    """Return the physical name of each top-level column of a column-mapped table."""
    physical = physical_schema(schema_json, schema)
    names = physical.names if physical is not None else schema.names
    return dict(zip(schema.names, names, strict=True))


def _keyed(values: Mapping[str, str | None], keys: Mapping[str, str]) -> dict[str, str | None]:
    """Key partition values by physical names.

    Raises:
        InvalidOperation: a column is gone (renamed since the files were written).
    """
    missing = [k for k in values if k not in keys]
    if missing:
        raise InvalidOperation(
            f"partition column(s) {missing} were renamed since the files were written; "
            "nothing was committed"
        )
    return {keys[k]: v for k, v in values.items()}


def create_with_files(
    uri: str,
    schema: pa.Schema,
    adds: Sequence[WrittenFile],
    *,
    partition_by: Sequence[str] = (),
    storage_options: Mapping[str, str] | None = None,
    configuration: Mapping[str, str] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> int:
    """Create a table whose first version (0) already holds ``adds``, in one commit.

    The table gets the properties of every table posixlake creates
    (:func:`~posixlake.delta._table.default_properties`: checkpoint interval, target file
    size), under ``configuration``, which may only hold Delta table properties
    (``delta.*``): delta-rs refuses others here.

    Raises:
        AlreadyExists-like DeltaLakeError: a table exists at ``uri``. SchemaError: a schema
            Delta cannot store.
    """
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import create_table_with_add_actions

    now = int(time.time() * 1000)
    with _translated(f"create table at {uri}"):
        create_table_with_add_actions(
            uri,
            DeltaSchema.from_arrow(schema),
            [
                AddAction(f.path, int(f.size), dict(f.partition_values), now, True, f.stats)
                for f in adds
            ],
            mode="error",
            partition_by=list(partition_by) or None,
            configuration={**default_properties(), **(configuration or {})},
            storage_options=dict(storage_options) if storage_options else None,
            commit_properties=CommitProperties(custom_metadata=dict(metadata or {})),
        )
    return 0


def _find_version(log: DeltaLog, txn: str, read_version: int, latest: int) -> int:
    """Return the version whose commit info carries our transaction id."""
    if latest == read_version + 1:
        return latest  # ours is the only commit since the read
    with _translated("read history"):
        entries = log.table.history(max(1, latest - read_version))
    for entry in entries:
        if entry.get(TXN_KEY) == txn:
            return int(entry["version"])
    return latest
