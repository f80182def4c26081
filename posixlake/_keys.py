"""KeyIndex: the primary-key values of the current version, kept in memory.

It makes the duplicate-key check of an insert cost a set lookup instead of a scan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from posixlake._merge import check_insert_keys, existing_mask
from posixlake.delta import DeltaLog
from posixlake.errors import DuplicateKeyError, PosixLakeError

__all__ = ["KeyIndex", "key_values"]

_SMALL_BATCH = 64
_STATS_FILES = 2000
_TRUNCATED = 32  # Delta writers keep string statistics to a 32-character prefix


def key_values(table: pa.Table, key: Sequence[str]) -> list[Any]:
    """Return the keys of ``table`` as Python values (tuples for a composite key)."""
    if len(key) == 1:
        return list(table.column(key[0]).to_pylist())
    return list(zip(*(table.column(k).to_pylist() for k in key), strict=True))


def _clash_by_statistics(log: DeltaLog, values: list[Any], key: Sequence[str]) -> list[Any] | None:
    """Return the ``values`` the table holds, reading only files whose key range admits one.

    The data files' min/max statistics of a one-column key (not a partition column) name
    the candidate files; only their key column is read — an insert of a new key beyond
    every file's range reads nothing, whatever the table's size. None when statistics
    cannot answer (a composite or partition key, deletion vectors, column mapping, no
    statistics, more than 2,000 files): the caller checks against the whole key column.
    """
    if len(key) != 1 or key[0] in log.partition_columns:
        return None
    name = key[0]
    actions = log.add_actions()
    if actions.num_rows > _STATS_FILES:
        return None  # listing so many files per insert costs more than one set of the keys
    names = actions.column_names
    low, high = f"min.{name}", f"max.{name}"
    if low not in names or high not in names:
        return None
    if any(n.startswith("deletionVector") for n in names):
        column = actions.column(next(n for n in names if n.startswith("deletionVector")))
        if column.null_count < len(column):
            return None
    paths = actions.column("path").to_pylist()
    lows, highs = actions.column(low).to_pylist(), actions.column(high).to_pylist()
    # writers may truncate long string statistics: such a max is no upper bound
    highs = [None if isinstance(h, str | bytes) and len(h) >= _TRUNCATED else h for h in highs]
    wanted = set(values)
    try:
        candidates = [
            path
            for path, lo, hi in zip(paths, lows, highs, strict=True)
            if lo is None or hi is None or any(lo <= v <= hi for v in wanted)
        ]
    except TypeError:  # values and statistics that do not compare
        return None
    if not candidates:
        return []
    try:
        held = log.read_file_columns(candidates, [name])
    except (PosixLakeError, pa.ArrowException, OSError):
        return None
    return sorted(wanted.intersection(held.column(name).to_pylist()), key=repr)


class KeyIndex:
    """The primary-key columns of the current version, kept in memory.

    Our own appends and merges update it; any other change (a delete, another writer)
    makes it reload lazily on the next keyed write. Small batches (a single-row insert,
    a buffered row) are checked against a Python set built once, so their cost does not
    grow with the table.
    """

    def __init__(self) -> None:
        self.version = -1
        # the log's generation the keys belong to (a replaced table starts a new one)
        self.generation = 0
        self.keys: pa.Table | None = None
        self._set: set[Any] | None = None

    def get(self, log: DeltaLog, key: Sequence[str]) -> pa.Table:
        if (
            self.keys is None
            or self.version != log.version
            or self.generation != log.generation
            or self.keys.column_names != list(key)
        ):
            self.keys = log.read_columns(key)
            self.version = log.version
            self.generation = log.generation
            self._set = None
        return self.keys

    def check_new(
        self, log: DeltaLog, batch: pa.Table, key: Sequence[str], pending: set[Any] | None = None
    ) -> list[Any]:
        """Check that ``batch`` may be inserted; return its key values.

        Raises:
            DuplicateKeyError: ``batch`` repeats a key, or holds one that the table holds
                or that ``pending`` (keys buffered but not committed) holds.
        """
        if batch.num_rows > _SMALL_BATCH:
            check_insert_keys(batch, self.get(log, key), key)
            values = key_values(batch, key)
            self._check_pending(values, pending)
            return values
        values = key_values(batch, key)
        if len(set(values)) != len(values):
            check_insert_keys(batch, batch.slice(0, 0), key)  # raises, naming the repeats
        self.check_values(log, values, key, pending)
        return values

    def check_values(
        self, log: DeltaLog, values: list[Any], key: Sequence[str], pending: set[Any] | None
    ) -> None:
        """Check a few distinct key values against the table (and ``pending``) by set lookups.

        Raises:
            DuplicateKeyError: a value is taken.
        """
        clash = None
        if self._set is None:
            clash = _clash_by_statistics(log, values, key)
        if clash is None:
            existing = self.get(log, key)
            if self._set is None:
                self._set = set(key_values(existing, key))
            clash = [v for v in values if v in self._set]
        if clash:
            raise DuplicateKeyError(
                f"primary key already exists: {clash[:5]} (use merge, or insert(..., "
                "upsert=True), to update rows)"
            )
        self._check_pending(values, pending)

    @staticmethod
    def _check_pending(values: list[Any], pending: set[Any] | None) -> None:
        if pending:
            clash = [v for v in values if v in pending]
            if clash:
                raise DuplicateKeyError(
                    f"primary key already waits in the insert buffer: {clash[:5]}"
                )

    def appended(self, before: int, after: int, rows: pa.Table, key: Sequence[str]) -> None:
        if self.keys is not None and self.version == before and after == before + 1:
            self.keys = pa.concat_tables([self.keys, rows.select(list(key)).cast(self.keys.schema)])
            self.version = after
            if self._set is not None:
                self._set.update(key_values(rows, key))
        else:
            self.invalidate()

    def merged(
        self, before: int, after: int | None, removed: pa.Table, added: pa.Table, key: Sequence[str]
    ) -> None:
        """Apply a merge that deleted the keys ``removed`` and inserted ``added``."""
        if after is None:
            return
        if (
            self.keys is None
            or self.version != before
            or after != before + 1
            or self.keys.column_names != list(key)
        ):
            self.invalidate()
            return
        keys = self.keys
        if removed.num_rows:
            keys = keys.filter(pc.invert(existing_mask(keys, removed, key)))
        if added.num_rows:
            keys = pa.concat_tables([keys, added.select(list(key)).cast(keys.schema)])
        self.keys, self.version = keys, after
        if self._set is not None:
            self._set.difference_update(key_values(removed, key))
            self._set.update(key_values(added, key))

    def conflict_check(
        self, log: DeltaLog, key: Sequence[str], values: Sequence[Any]
    ) -> Callable[[list[str] | None], None]:
        """Return the ``check`` of :meth:`DeltaLog.append_checked` for a keyed insert.

        When another writer committed first, only the data files it added are read (their
        key columns), and the insert is abandoned with DuplicateKeyError if one of them
        holds a key of ``values``; the index moves forward with those keys. When files
        were also removed (or the table is partitioned), the whole key set is re-read.
        """
        wanted = set(values)

        def check(added: list[str] | None) -> None:
            if added is None:
                self.invalidate()
                seen = key_values(self.get(log, key), key)
            else:
                new = log.read_file_columns(added, key)
                seen = key_values(new, key)
                if self.keys is not None and new.num_rows:
                    self.keys = pa.concat_tables([self.keys, new.cast(self.keys.schema)])
                    if self._set is not None:
                        self._set.update(seen)
                self.version = log.version if self.keys is not None else -1
            clash = [v for v in seen if v in wanted]
            if clash:
                raise DuplicateKeyError(
                    f"primary key already exists: {clash[:5]} (another writer committed "
                    "it first; use merge, or insert(..., upsert=True), to update rows)"
                )

        return check

    def split_taken(
        self, log: DeltaLog, batch: pa.Table, key: Sequence[str]
    ) -> tuple[pa.Table, pa.Table]:
        """Split ``batch`` into rows whose keys are free and rows whose keys the table holds."""
        taken = existing_mask(batch, self.get(log, key), key)
        return batch.filter(pc.invert(taken)), batch.filter(taken)

    def invalidate(self) -> None:
        self.keys = None
        self.version = -1
        self._set = None
