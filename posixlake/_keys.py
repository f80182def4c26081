"""KeyIndex: the primary-key values of the current version, kept in memory.

It makes the duplicate-key check of an insert cost a set lookup instead of a scan.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any, Final

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


class _KeyRanges:
    """The data files' min/max statistics of a one-column key, sorted for lookups.

    Built once per version from the log's add actions (not once per insert), and moved
    forward by our own appends, so that checking a key against the table costs a binary
    search whatever the number of files: an insert of a new key beyond every file's range
    reads nothing. Files without a low statistic are candidates for every key; a high
    statistic that may be truncated (a long string) is no upper bound.
    """

    def __init__(
        self,
        name: str,
        version: int,
        generation: int,
        files: list[tuple[Any, Any, str | None]],
        always: list[str],
    ) -> None:
        self.name = name
        self.version = version
        self.generation = generation
        self._always = always
        #: whether some files are ones we appended, whose paths are not known
        self.unlisted = False
        self._set_files(files)

    def _set_files(self, files: list[tuple[Any, Any, str | None]]) -> None:
        files.sort(key=lambda f: f[0])  # raises TypeError on statistics that do not compare
        self._files = files
        self._lows = [f[0] for f in files]
        # reach[i]: the largest high of files[0..i] (_UNBOUNDED: one of them has none)
        reach: list[Any] = []
        top: Any = None
        for _, hi, _ in files:
            if top is _UNBOUNDED or hi is None:
                top = _UNBOUNDED
            elif top is None or hi > top:
                top = hi
            reach.append(top)
        self._reach = reach

    @classmethod
    def build(cls, log: DeltaLog, key: Sequence[str]) -> _KeyRanges | None:
        """Return the ranges of ``log``'s loaded version, or None when statistics cannot
        answer (a composite or partition key, deletion vectors, column mapping, no
        statistics, more than 2,000 files)."""
        if len(key) != 1 or key[0] in log.partition_columns:
            return None
        name = key[0]
        if not _exact_statistics(log.arrow_schema.field(name).type):
            return None
        actions = log.add_actions()
        if actions.num_rows > _STATS_FILES:
            return None  # so many files: one set of the keys answers faster
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
        files: list[tuple[Any, Any, str | None]] = []
        always: list[str] = []
        for path, lo, hi in zip(paths, lows, highs, strict=True):
            if lo is None:
                always.append(path)
                continue
            # writers may truncate long string statistics: such a max is no upper bound
            if hi is not None and isinstance(hi, str | bytes) and len(hi) >= _TRUNCATED:
                hi = None
            files.append((lo, hi, path))
        try:
            return cls(name, log.version, log.generation, files, always)
        except TypeError:
            return None

    def current(self, log: DeltaLog) -> bool:
        """Return whether these are the ranges of ``log``'s loaded version."""
        state = log.try_loaded_state() or (log.version, log.generation)
        return state == (self.version, self.generation)

    def candidates(self, values: set[Any]) -> list[str] | None:
        """Return the files whose key range admits one of ``values`` (None: a file we
        appended, whose path is not known, admits one).

        Raises:
            TypeError: values and statistics that do not compare.
        """
        found = set(self._always)
        for v in values:
            k = bisect.bisect_right(self._lows, v)
            if k == 0:
                continue
            top = self._reach[k - 1]
            if top is not _UNBOUNDED and top < v:
                continue
            for _, hi, path in self._files[:k]:
                if hi is None or v <= hi:
                    if path is None:
                        return None
                    found.add(path)
        return sorted(found)

    def overlaps(self, low: Any, high: Any) -> bool:
        """Return whether a file's key range (or a file without statistics) meets [low, high].

        Raises:
            TypeError: values and statistics that do not compare.
        """
        if self._always:
            return True
        k = bisect.bisect_right(self._lows, high)
        if k == 0:
            return False
        top = self._reach[k - 1]
        return top is _UNBOUNDED or bool(top >= low)

    def appended(self, version: int, low: Any, high: Any) -> None:
        """Add the range of a file we committed as ``version`` (its path unknown)."""
        try:
            self._set_files([*self._files, (low, high, None)])
            self.unlisted = True
        except TypeError:
            self.version = -1  # rebuilt on next use
            return
        self.version = version


_UNBOUNDED: Final = object()


def _exact_statistics(kind: pa.DataType) -> bool:
    """Return whether Delta statistics of a ``kind`` column bound its values exactly.

    Timestamps are kept to milliseconds and decimals may pass through a float in the
    statistics JSON, so their min/max can miss a value; strings are handled by the
    truncation rule.
    """
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_date32(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
    )


def _clash_by_statistics(
    log: DeltaLog, ranges: _KeyRanges, values: list[Any], key: Sequence[str]
) -> list[Any] | None:
    """Return the ``values`` the table holds, reading only files whose key range admits one.

    Only the key column of the candidate files is read. None when statistics cannot
    answer: the caller checks against the whole key column.
    """
    wanted = set(values)
    try:
        candidates = ranges.candidates(wanted)
    except TypeError:  # values and statistics that do not compare
        return None
    if candidates is None:
        return None
    if not candidates:
        return []
    try:
        held = log.read_file_columns(candidates, [key[0]])
    except (PosixLakeError, pa.ArrowException, OSError):
        return None
    return sorted(wanted.intersection(held.column(key[0]).to_pylist()), key=repr)


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
        # statistics of the key's files; False: they cannot answer at this version
        self._ranges: _KeyRanges | bool | None = None
        self._ranges_at: tuple[int, int, tuple[str, ...]] = (-1, -1, ())

    def _ranges_for(self, log: DeltaLog, key: Sequence[str]) -> _KeyRanges | None:
        """Return the key ranges of ``log``'s loaded version (built once per version)."""
        ranges = self._ranges
        if isinstance(ranges, _KeyRanges) and [ranges.name] == list(key) and ranges.current(log):
            return ranges
        if ranges is False and self._ranges_at == (log.version, log.generation, tuple(key)):
            return None
        built = _KeyRanges.build(log, key)
        self._ranges = built if built is not None else False
        self._ranges_at = (log.version, log.generation, tuple(key))
        return built

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
            if self._beyond_every_file(log, batch, key):
                check_insert_keys(batch, batch.slice(0, 0), key)  # repeats within the batch
            else:
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
            ranges = self._ranges_for(log, key)
            if ranges is not None:
                clash = _clash_by_statistics(log, ranges, values, key)
                if clash is None and ranges.unlisted:
                    # a value falls in a file we appended: list the files (once) for its path
                    self._ranges = None
                    ranges = self._ranges_for(log, key)
                    if ranges is not None:
                        clash = _clash_by_statistics(log, ranges, values, key)
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

    def _beyond_every_file(self, log: DeltaLog, batch: pa.Table, key: Sequence[str]) -> bool:
        """Return whether the statistics show that no file's key range meets ``batch``'s."""
        if self._set is not None or len(key) != 1:
            return False
        ranges = self._ranges_for(log, key)
        if ranges is None:
            return False
        try:
            bounds = pc.min_max(batch.column(key[0])).as_py()
            if bounds["min"] is None:
                return False
            return not ranges.overlaps(bounds["min"], bounds["max"])
        except (TypeError, pa.ArrowException):
            return False

    @staticmethod
    def _check_pending(values: list[Any], pending: set[Any] | None) -> None:
        if pending:
            clash = [v for v in values if v in pending]
            if clash:
                raise DuplicateKeyError(
                    f"primary key already waits in the insert buffer: {clash[:5]}"
                )

    def appended(self, before: int, after: int, rows: pa.Table, key: Sequence[str]) -> None:
        ranges = self._ranges
        if isinstance(ranges, _KeyRanges):
            try:
                bounds = pc.min_max(rows.column(key[0])).as_py() if len(key) == 1 else None
            except pa.ArrowException:
                bounds = None
            if (
                ranges.version == before
                and after == before + 1
                and bounds is not None
                and [ranges.name] == list(key)
            ):
                if bounds["min"] is not None:
                    ranges.appended(after, bounds["min"], bounds["max"])
                else:
                    ranges.version = after
            else:
                self._ranges = None
        elif ranges is False:
            self._ranges = None
        if self.keys is not None and self.version == before and after == before + 1:
            self.keys = pa.concat_tables([self.keys, rows.select(list(key)).cast(self.keys.schema)])
            self.version = after
            if self._set is not None:
                self._set.update(key_values(rows, key))
        else:  # the key column reloads when next needed; the ranges moved on above
            self.keys, self.version, self._set = None, -1, None

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
        self._ranges = None
