"""The rows one commit changed, as a :class:`ChangeBatch`.

Two sources, chosen per version:

- the table records the change data feed at that version (``delta.enableChangeDataFeed``):
  the rows come from :meth:`posixlake.delta.DeltaLog.changes` (delta-rs' CDF reader, its
  ``_change_data`` files, and added/removed files for commits without them);
- otherwise the rows come from the files the commit added and removed: the active files
  of version ``v - 1`` and ``v`` are compared (delta-rs resolves both; one snapshot load
  per version), and the rows of the removed files are set against those of the added
  files as multisets. Rows found in both (copied by a copy-on-write rewrite) cancel;
  what is left of the removed files is ``delete``, of the added files ``insert``. With a
  primary key (``posixlake.primaryKey``), a deleted and an inserted row with the same key
  are one update (``update_preimage`` / ``update_postimage``). Cost: an append reads only
  its new files; a DML reads every file it rewrote, twice (old and new), and compares
  them row by row in Python, so an UPDATE of one row in a 1 GB file reads 2 GB. A commit
  that only rearranges data (OPTIMIZE, Z-order: ``dataChange=false``) reads nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import pyarrow as pa

from posixlake._ops.core import PRIMARY_KEY_PROPERTY
from posixlake.delta import DataFile, DeltaLog, Snapshot, snapshot_of
from posixlake.delta._rows import row_key
from posixlake.errors import NotFound, PosixLakeError, VersionError
from posixlake.types import CommitInfo

__all__ = [
    "CHANGE_TYPE",
    "CHANGE_TYPES",
    "ChangeBatch",
    "ChangeReader",
    "ChangesExpired",
]

#: the column naming each row's kind of change
CHANGE_TYPE: Final = "_change_type"
CHANGE_TYPES: Final = ("insert", "update_preimage", "update_postimage", "delete")
_CDF_PROPERTY: Final = "delta.enableChangeDataFeed"
#: operations that only rearrange data files (their add actions carry dataChange=false)
_REARRANGING: Final = frozenset({"OPTIMIZE", "ZORDER", "VACUUM START", "VACUUM END"})


class ChangesExpired(VersionError):
    """The changes of a version can no longer be read (VACUUM removed their files, or log
    cleanup removed the commit).

    Attributes:
        version: the version asked for.
        oldest_available: the oldest version whose changes, and every later one's, can
            still be read (resume from there, having lost those in between).
    """

    def __init__(self, message: str, version: int, oldest_available: int) -> None:
        super().__init__(message)
        self.version = version
        self.oldest_available = oldest_available


@dataclass(frozen=True)
class ChangeBatch:
    """The changes of one commit.

    Attributes:
        version: the commit's table version.
        timestamp: its commit time (UTC, milliseconds as the log stores it).
        operation: its operation (WRITE, DELETE, UPDATE, MERGE, OPTIMIZE, ...).
        rows: the changed rows: the table's columns plus ``_change_type`` (``insert``,
            ``update_preimage``, ``update_postimage``, ``delete``); empty for a commit
            that changes no row (schema change, OPTIMIZE, VACUUM).
        source: ``"cdf"`` (the table's change data feed) or ``"files"`` (rows of the
            removed and added files compared).
    """

    version: int
    timestamp: datetime
    operation: str
    rows: pa.Table
    source: str

    def __len__(self) -> int:
        return int(self.rows.num_rows)

    def to_table(self) -> pa.Table:
        """Return the rows led by ``_commit_version``, ``_commit_timestamp`` (UTC) and
        ``_change_type``, then the table's columns (the layout of a change-feed CSV)."""
        n = self.rows.num_rows
        data = self.rows.drop_columns([CHANGE_TYPE])
        lead = pa.table(
            {
                "_commit_version": pa.array([self.version] * n, pa.int64()),
                "_commit_timestamp": pa.array([self.timestamp] * n, pa.timestamp("us", tz="UTC")),
                CHANGE_TYPE: self.rows.column(CHANGE_TYPE),
            }
        )
        for name, column in zip(data.column_names, data.columns, strict=True):
            lead = lead.append_column(data.schema.field(name), column)
        return lead


def cdf_enabled(configuration: Mapping[str, str]) -> bool:
    """Return whether a table configuration records the change data feed."""
    return (configuration.get(_CDF_PROPERTY) or "false").lower() == "true"


def _row_keys(table: pa.Table, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    cols = [table.column(c).to_pylist() for c in columns]
    return [tuple(row_key(v) for v in row) for row in zip(*cols, strict=True)]


def _with_type(table: pa.Table, indexes: Sequence[int], change: str) -> pa.Table:
    picked = table.take(pa.array(indexes, pa.int64()))
    return picked.append_column(CHANGE_TYPE, pa.array([change] * len(indexes), pa.string()))


def diff_rows(removed: pa.Table, added: pa.Table, key: Sequence[str]) -> pa.Table:
    """Return the changes that turn the rows ``removed`` into the rows ``added``.

    Rows are compared as multisets (a duplicate row removed twice and added once is one
    delete). With ``key``, a removed and an added row of the same key are an update
    (preimage then postimage); without one, deletes then inserts.
    """
    names = list(added.schema.names)
    removed = removed.select(names)
    old_keys = _row_keys(removed, names)
    new_keys = _row_keys(added, names)
    both = Counter(old_keys) & Counter(new_keys)
    left = Counter(both)
    deleted: list[int] = []
    for i, k in enumerate(old_keys):
        if left[k]:
            left[k] -= 1
        else:
            deleted.append(i)
    left = Counter(both)
    inserted: list[int] = []
    for i, k in enumerate(new_keys):
        if left[k]:
            left[k] -= 1
        else:
            inserted.append(i)
    parts: list[pa.Table] = []
    if key:
        old_key = _row_keys(removed.take(pa.array(deleted, pa.int64())), key)
        new_key = _row_keys(added.take(pa.array(inserted, pa.int64())), key)
        old_by_key: dict[tuple[Any, ...], list[int]] = {}
        for i, k in zip(deleted, old_key, strict=True):
            old_by_key.setdefault(k, []).append(i)
        pre: list[int] = []
        post: list[int] = []
        plain_ins: list[int] = []
        for i, k in zip(inserted, new_key, strict=True):
            olds = old_by_key.get(k)
            if olds:
                pre.append(olds.pop(0))
                post.append(i)
            else:
                plain_ins.append(i)
        paired = set(pre)
        plain_del = [i for i in deleted if i not in paired]
        parts = [
            _with_type(removed, plain_del, "delete"),
            _with_type(removed, pre, "update_preimage"),
            _with_type(added, post, "update_postimage"),
            _with_type(added, plain_ins, "insert"),
        ]
    else:
        parts = [_with_type(removed, deleted, "delete"), _with_type(added, inserted, "insert")]
    return pa.concat_tables(parts)


def _file_key(f: DataFile) -> tuple[str, tuple[int, ...]]:
    # a deletion vector changed on the same path is another file: its rows differ
    return (f.path, f.deleted_rows)


class ChangeReader:
    """Read the changes of consecutive versions of one table (keeps the last file list).

    Not thread-safe: one feed owns one reader.
    """

    def __init__(self, log: DeltaLog) -> None:
        self._log = log
        self._files: tuple[int, Snapshot] | None = None

    def read(self, info: CommitInfo) -> ChangeBatch:
        """Return the changes of the commit ``info`` describes.

        Raises:
            ChangesExpired: its files (or its log entry) are gone.
            PosixLakeError: the table cannot be read.
        """
        version = info.version
        try:
            snap = self._log.at(version)
            if cdf_enabled(snap.configuration):
                rows = snap.changes(version, version)
                rows = rows.drop_columns(
                    [c for c in ("_commit_version", "_commit_timestamp") if c in rows.column_names]
                )
                batch = ChangeBatch(version, info.timestamp, info.operation, rows, "cdf")
                self._files = None
                return batch
            rows = self._file_changes(snap, info)
        except NotFound as err:
            raise self.expired(version, err) from err
        except VersionError as err:
            if isinstance(err, ChangesExpired):
                raise
            raise self.expired(version, err) from err
        return ChangeBatch(version, info.timestamp, info.operation, rows, "files")

    def _file_changes(self, snap: DeltaLog, info: CommitInfo) -> pa.Table:
        version = info.version
        current = snapshot_of(snap)
        previous: Snapshot | None
        if self._files is not None and self._files[0] == version - 1:
            previous = self._files[1]
        elif version == 0:
            previous = None
        else:
            previous = snapshot_of(self._log.at(version - 1))
        self._files = (version, current)
        schema = current.schema
        empty = schema.empty_table().append_column(CHANGE_TYPE, pa.array([], pa.string()))
        before = {_file_key(f): f for f in previous.files} if previous else {}
        after = {_file_key(f): f for f in current.files}
        removed = [f for k, f in before.items() if k not in after]
        added = [f for k, f in after.items() if k not in before]
        if info.operation.upper() in _REARRANGING or not (removed or added):
            return empty
        new_rows = _read_files(current, added, schema)
        if not removed:
            return new_rows.append_column(
                CHANGE_TYPE, pa.array(["insert"] * new_rows.num_rows, pa.string())
            )
        assert previous is not None
        old_rows = _read_files(previous, removed, schema)
        key = [c for c in current_key(snap.configuration) if c in schema.names]
        return diff_rows(old_rows, new_rows, key)

    def expired(self, version: int, err: BaseException) -> ChangesExpired:
        """Return the error for unreadable changes of ``version`` (naming the oldest readable)."""
        oldest = self.oldest_available(version)
        return ChangesExpired(
            f"the changes of version {version} are no longer available ({err}); VACUUM or "
            f"log cleanup removed what they need. The oldest version whose changes can be "
            f"read is {oldest}: resume from there (the changes in between are lost)",
            version,
            oldest,
        )

    def oldest_available(self, after: int) -> int:
        """Return the oldest version from which on every commit's changes can be read.

        Walks back from the latest version to the first commit whose changes cannot be
        read: each version's snapshot is loaded once (it is the next step's "after"),
        and the files the commit added or removed must exist (CDF versions are read).
        Costs one snapshot load per version walked; only called on the error path.
        """
        latest = self._log.refresh()
        loaded: tuple[DeltaLog, Snapshot | None] | None = None  # version v, from step v + 1
        for v in range(latest, after - 1, -1):
            try:
                snap, files = loaded if loaded is not None else (self._log.at(v), None)
                loaded = None
                if cdf_enabled(snap.configuration):
                    snap.changes(v, v)
                    continue
                current = files if files is not None else snapshot_of(snap)
                previous = None
                if v > 0:
                    older = self._log.at(v - 1)
                    previous = snapshot_of(older)
                    loaded = (older, previous)
            except PosixLakeError:
                return v + 1
            if not _all_exist(current, _touched(previous, current)):
                return v + 1
        return after


def _touched(previous: Snapshot | None, current: Snapshot) -> list[str]:
    """Return the paths of the files a commit added or removed."""
    before = {_file_key(f) for f in previous.files} if previous else set()
    after = {_file_key(f) for f in current.files}
    needed = [f.path for f in current.files if _file_key(f) not in before]
    if previous is not None:
        needed += [f.path for f in previous.files if _file_key(f) not in after]
    return needed


def current_key(configuration: Mapping[str, str]) -> list[str]:
    """Return the primary-key columns a table configuration names (empty: none)."""
    value = configuration.get(PRIMARY_KEY_PROPERTY) or ""
    return [c for c in value.split(",") if c]


def _filesystem(snap: Snapshot) -> Any:
    from posixlake.storage import table_filesystem

    return table_filesystem(snap.uri, snap.storage_options)


def _all_exist(snap: Snapshot, paths: Iterable[str]) -> bool:
    import pyarrow.fs as pafs

    wanted = list(paths)
    if not wanted:
        return True
    infos = _filesystem(snap).get_file_info(wanted)
    return all(i.type == pafs.FileType.File for i in infos)


def _read_files(snap: Snapshot, files: Sequence[DataFile], schema: pa.Schema) -> pa.Table:
    """Read the rows of ``files`` of ``snap`` (partition values, column mapping, deletion
    vectors applied) with exactly ``schema``."""
    from posixlake.delta.datafiles import ReadSpec, read_data_file

    spec = ReadSpec.of(snap, files)
    fs = _filesystem(snap)
    batches = [b for f in files for b in read_data_file(fs, spec, f)]
    table = pa.Table.from_batches(batches, schema=snap.schema)
    if table.schema != schema:  # a column added since: NULL in the old rows
        arrays = [
            table.column(f.name).cast(f.type)
            if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type)
            for f in schema
        ]
        table = pa.Table.from_arrays(arrays, schema=schema)
    return table
