"""Reading a version's rows by primary key without reading the version (for a rewrite of
``data.csv``, :mod:`nfs.table.apply`): min/max ranges and row-group statistics name the
files and row groups that may hold a key; each data file's key range, and the keys it
repeats, are learned once (files are immutable). See docs/design.md."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from nfs.table.segments import KEY_MEMO, Plan, Segmenter, assemble, digest, open_file
from posixlake.delta import DataFile
from posixlake.errors import PosixLakeError
from posixlake.storage import table_filesystem

__all__ = ["SegmentKeys"]


@dataclass(frozen=True)
class _FileKeys:
    """What one data file holds of a one-column key: its range, and the keys it repeats."""

    rows: int
    low: Any  # None: no rows
    high: Any
    nulls: bool
    repeated: pa.Table

    @classmethod
    def of(cls, keys: pa.Table) -> _FileKeys:
        import pyarrow.compute as pc

        column = keys.column(0)
        bounds = pc.min_max(column).as_py() if keys.num_rows else {"min": None, "max": None}
        return cls(
            rows=keys.num_rows,
            low=bounds["min"],
            high=bounds["max"],
            nulls=column.null_count > 0,
            repeated=_repeats([keys], keys.schema),
        )

    def may_hold(self, keys: pa.Table) -> bool:
        """Whether some row of ``keys`` (the same one column) falls in this file's range."""
        import pyarrow.compute as pc

        if self.rows == 0:
            return False
        if self.nulls or self.low is None:
            return True
        column = keys.column(0)
        inside = pc.and_(
            pc.greater_equal(column, pa.scalar(self.low, column.type)),
            pc.less_equal(column, pa.scalar(self.high, column.type)),
        )
        return bool(pc.any(pc.fill_null(inside, False)).as_py())


def _may_repeat(column: pa.ChunkedArray[Any]) -> bool:
    """Whether a column may hold a value twice: False when it strictly increases (keys
    inserted in order, the usual case: one vectorized pass) or counts as many distinct
    values as rows."""
    import pyarrow.compute as pc

    n = len(column)
    if n < 2:
        return False
    flat = column.combine_chunks()
    with contextlib.suppress(pa.ArrowNotImplementedError, pa.ArrowInvalid):
        if pc.all(pc.less(flat.slice(0, n - 1), flat.slice(1))).as_py():
            return False
    return len(pc.unique(flat)) != n - (column.null_count - 1 if column.null_count else 0)


def _sorted_repeats(column: pa.ChunkedArray[Any]) -> pa.Array[Any] | None:
    """The distinct values a column without NULLs holds more than once, found by sorting
    (for millions of keys in no order, a sort costs half a hash set); None: the column
    has NULLs or a type that does not sort."""
    import pyarrow.compute as pc

    n = len(column)
    if column.null_count:
        return None
    flat = column.combine_chunks()
    try:
        if pc.all(pc.less(flat.slice(0, n - 1), flat.slice(1))).as_py():
            return flat.slice(0, 0)  # strictly increasing (keys inserted in order)
        ordered = flat.take(pc.array_sort_indices(flat))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return None
    same = pc.equal(ordered.slice(0, n - 1), ordered.slice(1))
    return pc.unique(ordered.slice(1).filter(same))


def _repeats(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    """Return the distinct rows (keys) that occur more than once in ``tables`` together."""
    import pyarrow.compute as pc

    if not tables:
        return schema.empty_table()
    keys = pa.concat_tables([t.cast(schema) for t in tables])
    if keys.num_rows < 2:
        return schema.empty_table()
    if keys.num_columns == 1:
        values = _sorted_repeats(keys.column(0))
        if values is not None:
            return pa.Table.from_arrays([values], schema=schema)
        if not _may_repeat(keys.column(0)):
            return schema.empty_table()  # a hash set of the values, cheaper than counting
    counts = keys.group_by(schema.names).aggregate([([], "count_all")])
    return counts.filter(pc.greater(counts["count_all"], 1)).select(schema.names).cast(schema)


class SegmentKeys:
    """The :class:`~nfs.table.apply.KeyReader` of a :class:`~nfs.table.segments.Segmenter`'s table."""

    def __init__(self, segmenter: Segmenter) -> None:
        """Read the versions ``segmenter`` plans."""
        self._segmenter = segmenter
        self._db = segmenter._db
        self._lock = threading.Lock()
        self._repeated: dict[tuple[tuple[str, ...], tuple[str, ...]], pa.Table] = {}
        self._file_keys: dict[tuple[str, tuple[str, ...]], _FileKeys] = {}
        # per key: the last set of files known to hold each key once (keys, files); per
        # note, the version this reader last wrote to it (-1: read, not written)
        self._clean: dict[tuple[str, ...], tuple[tuple[str, ...], tuple[DataFile, ...]]] = {}
        self._saved: dict[str, int] = {}

    def _plan_of(self, version: int) -> tuple[object, Plan | None]:
        return self._segmenter._plan_of(version)

    def rows_with_keys(self, version: int, keys: pa.Table) -> pa.Table | None:
        """Return the rows of ``version`` whose key columns equal a row of ``keys``.

        Reads only what may hold them: a file whose partition values, whose known key
        range (see :meth:`repeated_keys`) or whose row groups' min/max statistics exclude
        every key is skipped; of the others the key columns are read first, and the whole
        rows only of row groups that hold a key. Returns None when the version's files
        cannot be read one by one (deletion vectors, column mapping). Rows have the
        version's schema, in segment order.

        Raises:
            PermissionDenied, VersionError, NotFound: as :meth:`__call__`.
        """
        self._db.authorizer.check("read", "read")
        _log, plan = self._plan_of(version)
        if plan is None:
            return None
        snapshot = plan.snapshot
        schema = snapshot.schema
        names = keys.column_names
        keys = keys.cast(pa.schema([schema.field(n) for n in names]))
        fs = table_filesystem(snapshot.uri, snapshot.storage_options)
        found: list[pa.Table] = []
        for i, data_file in enumerate(plan.files):
            with self._lock:
                info = self._file_keys.get((plan.keys[i], tuple(names)))
            if info is not None and not info.may_hold(keys):
                continue
            rows = _rows_with_keys(fs, plan, data_file, keys)
            if rows is not None and rows.num_rows:
                found.append(rows)
        if not found:
            return schema.empty_table()
        return pa.concat_tables(found)

    def repeated_keys(self, version: int, key: Sequence[str]) -> pa.Table | None:
        """Return the key values that ``version`` holds more than once (usually none).

        Incremental: after a version whose files held each key once, only the files
        added since are read with the files they replaced (`_repeated_since`). Otherwise
        each data file's key range and the keys it repeats are read once (files are
        immutable) and remembered; the key columns of several files are read together
        only where their ranges overlap. A key of several columns, or one that is a
        partition column, reads every file's keys (remembered per set of files). None
        when the version's files cannot be read one by one.
        """
        self._db.authorizer.check("read", "read")
        names = tuple(key)
        _log, plan = self._plan_of(version)
        if plan is None:
            return None
        # by the version's files (their keys name the table too: a table restored onto the
        # path has other files under the same version numbers)
        memo = (plan.keys, names)
        with self._lock:
            known = self._repeated.get(memo)
        if known is not None:
            return known
        snapshot = plan.snapshot
        fs = table_filesystem(snapshot.uri, snapshot.storage_options)
        schema = pa.schema([snapshot.schema.field(k) for k in names])
        with self._lock:
            clean = self._clean.get(names)
        record = self._record_name(snapshot.uri, names)
        if clean is None:
            clean = self._load_clean(record)
        repeated = None if clean is None else self._repeated_since(fs, plan, schema, *clean)
        if repeated is None and len(names) == 1 and names[0] not in snapshot.partition_columns:
            repeated = self._repeated_by_ranges(fs, plan, schema)
        elif repeated is None:
            repeated = _repeats([_key_columns(fs, plan, f, schema) for f in plan.files], schema)
        with self._lock:
            if len(self._repeated) >= 4:
                self._repeated.pop(next(iter(self._repeated)))
            self._repeated[memo] = repeated
            if repeated.num_rows == 0:
                self._clean[names] = (plan.keys, plan.files)
        if repeated.num_rows == 0:
            self._save_clean(record, version, plan.keys)
        return repeated

    def _record_name(self, uri: str, names: tuple[str, ...]) -> str:
        """The note (beside the segments) naming the last version known to hold each key
        once: keyed by the table's identity and URI and the key columns."""
        material = ["clean-keys", self._segmenter._identity(), uri, list(names)]
        return f"keys-{digest(material)}.json"

    def _load_clean(self, record: str) -> tuple[tuple[str, ...], tuple[DataFile, ...]] | None:
        """The files of the version a note (an earlier run's) names, if that version's
        files are still exactly the ones it lists; None otherwise (no note, a damaged or
        stale one, or a version no longer readable)."""
        with self._lock:
            if record in self._saved:
                return None  # read (or written) once already by this reader
            self._saved[record] = -1
        raw = self._segmenter.store.read_note(record)
        if raw is None:
            return None
        try:
            saved = json.loads(raw)
            version, files = int(saved["version"]), tuple(str(k) for k in saved["files"])
            _log, plan = self._plan_of(version)
        except (ValueError, KeyError, TypeError, PosixLakeError):
            return None
        if plan is None or plan.keys != files:
            return None
        return plan.keys, plan.files

    def _save_clean(self, record: str, version: int, files: tuple[str, ...]) -> None:
        """Note (best effort) that ``version``'s files hold each key once."""
        with self._lock:
            if self._saved.get(record) == version:
                return
            self._saved[record] = version
        note = json.dumps({"version": version, "files": list(files)}).encode()
        self._segmenter.store.write_note(record, note)

    def _repeated_since(
        self,
        fs: pafs.FileSystem,
        plan: Plan,
        schema: pa.Schema,
        before_keys: tuple[str, ...],
        before_files: tuple[DataFile, ...],
    ) -> pa.Table | None:
        """The keys ``plan`` repeats, from an earlier set of files that held each key once
        (``before_keys``, ``before_files``); None when too much changed to be cheaper, or
        a file replaced since is gone (vacuumed).

        A key twice in the new files is twice in the files added, or in a file added and
        in a file kept. The second kind cannot be a key the replaced files held: before,
        it was in those and in the kept file, twice. So: the keys the added files repeat
        among themselves, plus the added keys the replaced files did not hold that a kept
        file holds (the kept files whose key range admits one of them are read). A MERGE
        that rewrites one file to change a row reads that file and the one it replaced.
        """
        now = set(plan.keys)
        before = set(before_keys)
        added = [i for i, k in enumerate(plan.keys) if k not in before]
        gone = [f for k, f in zip(before_keys, before_files, strict=True) if k not in now]
        if len(added) + len(gone) > max(4, len(plan.keys) // 4):
            return None
        names = tuple(schema.names)
        try:
            fresh_tables = [_key_columns(fs, plan, plan.files[i], schema) for i in added]
            old_tables = [_key_columns(fs, plan, f, schema) for f in gone]
        except (OSError, pa.ArrowException):
            return None
        if len(names) == 1 and _same_values(fresh_tables, old_tables, schema):
            return schema.empty_table()  # a file rewritten with the same keys (an UPDATE)
        found = [_repeats(fresh_tables, schema)]
        if fresh_tables:
            fresh = pa.concat_tables([t.cast(schema) for t in fresh_tables])
            fresh = fresh.group_by(list(names)).aggregate([]).select(list(names)).cast(schema)
            if old_tables:
                replaced = pa.concat_tables([t.cast(schema) for t in old_tables])
                fresh = fresh.join(replaced, keys=list(names), join_type="left anti")
            if fresh.num_rows:
                fresh = fresh.select(list(names)).cast(schema)
                added_set = set(added)
                for i, data_file in enumerate(plan.files):
                    if i in added_set:
                        continue
                    with self._lock:
                        info = self._file_keys.get((plan.keys[i], names))
                    if info is not None and not info.may_hold(fresh):
                        continue
                    kept = _key_columns(fs, plan, data_file, schema)
                    hits = fresh.join(kept, keys=list(names), join_type="left semi")
                    if hits.num_rows:
                        found.append(hits.select(list(names)).cast(schema))
        union = pa.concat_tables([t.cast(schema) for t in found])
        return union.group_by(list(names)).aggregate([]).select(list(names)).cast(schema)

    def _repeated_by_ranges(self, fs: pafs.FileSystem, plan: Plan, schema: pa.Schema) -> pa.Table:
        names = tuple(schema.names)
        infos: list[_FileKeys] = []
        for i, data_file in enumerate(plan.files):
            memo = (plan.keys[i], names)
            with self._lock:
                info = self._file_keys.get(memo)
            if info is None:
                info = _FileKeys.of(_key_columns(fs, plan, data_file, schema))
                with self._lock:
                    if len(self._file_keys) >= KEY_MEMO:
                        self._file_keys.clear()
                    self._file_keys[memo] = info
            infos.append(info)
        found = [info.repeated for info in infos if info.repeated.num_rows]
        if any(info.nulls for info in infos):  # NULL keys: no range to compare
            return _repeats([_key_columns(fs, plan, f, schema) for f in plan.files], schema)
        order = sorted((i for i, info in enumerate(infos) if info.rows), key=lambda i: infos[i].low)
        group: list[int] = []
        high: Any = None
        for i in [*order, -1]:
            if i >= 0 and group and infos[i].low <= high:
                group.append(i)
                high = max(high, infos[i].high)
                continue
            if len(group) > 1:  # files whose key ranges overlap: join their keys
                tables = [_key_columns(fs, plan, plan.files[j], schema) for j in group]
                found.append(_repeats(tables, schema))
            if i >= 0:
                group, high = [i], infos[i].high
        if not found:
            return schema.empty_table()
        union = pa.concat_tables([t.cast(schema) for t in found])
        return union.group_by(schema.names).aggregate([]).select(schema.names).cast(schema)


def _same_values(ones: Sequence[pa.Table], others: Sequence[pa.Table], schema: pa.Schema) -> bool:
    """Whether two sets of one-column tables hold the same values, as many times each
    (compared in their order, then sorted; False for NULLs, or a type that does not
    sort)."""
    import pyarrow.compute as pc

    def flat(tables: Sequence[pa.Table]) -> pa.Array[Any] | None:
        if not tables:
            return None
        column = pa.concat_tables([t.cast(schema) for t in tables]).column(0).combine_chunks()
        return None if column.null_count else column

    def same(a: pa.Array[Any], b: pa.Array[Any]) -> bool:
        return bool(pc.all(pc.equal(a, b)).as_py())

    try:
        one, other = flat(ones), flat(others)
        if one is None or other is None or len(one) != len(other):
            return False
        if same(one, other):  # in the same order (a rewrite usually keeps it): no sort
            return True
        return same(one.take(pc.array_sort_indices(one)), other.take(pc.array_sort_indices(other)))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return False


def _rows_with_keys(
    fs: pafs.FileSystem, plan: Plan, data_file: DataFile, keys: pa.Table
) -> pa.Table | None:
    """Return the rows of one file whose key equals a row of ``keys`` (None: none can)."""
    import pyarrow.compute as pc

    snapshot = plan.snapshot
    schema = snapshot.schema
    parts = snapshot.partition_columns
    candidates = keys
    for name in keys.column_names:
        if name in parts:  # one value for the whole file
            value = data_file.partition_values.get(name)
            column = candidates.column(name)
            mask = pc.is_null(column) if value is None else pc.equal(column, value)
            candidates = candidates.filter(pc.fill_null(mask, False))
    if candidates.num_rows == 0:
        return None
    with open_file(fs, snapshot, data_file, plan.read_only) as handle:
        pf = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
        meta = pf.metadata
        index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
        groups = []
        for g in range(meta.num_row_groups):
            if _may_hold(meta.row_group(g), index, candidates, parts):
                groups.append(g)
        if not groups:
            return None
        present = set(pf.schema_arrow.names)
        names = candidates.column_names
        stored = [n for n in names if n not in parts and n in present]
        if stored:  # the key columns first: the whole rows only where a key is
            key_rows = _no_views(pf.read_row_groups(groups, columns=stored, use_threads=False))
            probe = candidates.select(stored)
            key_rows = key_rows.cast(probe.schema)
            key_rows = key_rows.append_column("__i", pa.array(range(key_rows.num_rows), pa.int64()))
            hits = key_rows.join(probe, keys=stored, join_type="left semi").column("__i")
            if len(hits) == 0:
                return None
        wanted = [f.name for f in schema if f.name not in parts and f.name in present]
        read = _no_views(pf.read_row_groups(groups, columns=wanted, use_threads=False))
        if stored:
            read = read.take(hits.take(pc.sort_indices(hits)))  # in file order
    batches = [assemble(b, schema, parts, data_file) for b in read.to_batches()]
    if not batches:
        return None
    rows = pa.Table.from_batches(batches, schema=batches[0].schema).cast(schema)
    return rows.join(candidates, keys=names, join_type="left semi").select(schema.names)


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with its view types as their plain ones (string_view → string, binary_view
    → binary, list_view → list), nested types included."""
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list_view(t) or pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_plain_type(t.value_type)))
    if pa.types.is_large_list_view(t) or pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_plain_type(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_plain_type(t.value_type)), t.list_size)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain_type(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(_plain_type(t.key_type)),
            t.item_field.with_type(_plain_type(t.item_type)),
            t.keys_sorted,
        )
    return t


def _no_views(table: pa.Table) -> pa.Table:
    """Return ``table`` without view types: a writer (delta-rs' MERGE) may store
    string_view columns, which pyarrow's ``take`` and joins do not handle."""
    schema = pa.schema([f.with_type(_plain_type(f.type)) for f in table.schema])
    return table if schema == table.schema else table.cast(schema)


def _key_columns(
    fs: pafs.FileSystem, plan: Plan, data_file: DataFile, schema: pa.Schema
) -> pa.Table:
    """Return the columns of ``schema`` (key columns) of one data file's rows."""
    snapshot = plan.snapshot
    parts = snapshot.partition_columns
    with open_file(fs, snapshot, data_file, plan.read_only) as handle:
        pf = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
        present = set(pf.schema_arrow.names)
        wanted = [f.name for f in schema if f.name not in parts and f.name in present]
        n = pf.metadata.num_rows
        read = _no_views(pf.read(columns=wanted, use_threads=False)) if wanted else None
    arrays: list[pa.Array[Any] | pa.ChunkedArray[Any]] = []
    for f in schema:
        if f.name in parts:
            value = data_file.partition_values.get(f.name)
            arrays.append(
                pa.nulls(n, f.type) if value is None else pa.repeat(value, n).cast(f.type)
            )
        elif read is not None and f.name in wanted:
            arrays.append(read.column(f.name).cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _may_hold(group: Any, index: dict[str, int], keys: pa.Table, parts: Sequence[str]) -> bool:
    """Whether a row group's min/max statistics admit some row of ``keys`` (True: unknown)."""
    import pyarrow.compute as pc

    mask: Any = None
    for name in keys.column_names:
        if name in parts:
            continue
        i = index.get(name)
        if i is None:
            return True
        stats = group.column(i).statistics
        if stats is None or not stats.has_min_max:
            return True
        column = keys.column(name)
        try:
            low = pa.scalar(stats.min, column.type)
            high = pa.scalar(stats.max, column.type)
            inside = pc.and_(pc.greater_equal(column, low), pc.less_equal(column, high))
        except (pa.ArrowException, TypeError, ValueError):
            return True  # statistics of a type we do not compare: read the group
        inside = pc.fill_null(inside, stats.null_count is None or stats.null_count > 0)
        mask = inside if mask is None else pc.and_(mask, inside)
    return mask is None or bool(pc.any(mask).as_py())
