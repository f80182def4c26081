"""A few rows replaced in place by rewriting, with pyarrow, the files that hold them.

What an overwrite of a CSV file that changes a few lines becomes most often (see
:func:`posixlake.delta._rows.replace_rows`): row ``i`` of ``delete``, matched by key or
as a whole row and held by exactly one row of the table, becomes row ``i`` of
``insert``, at the same position of the same file. delta-rs' UPDATE does that through
DataFusion at about 90 ms for a 100,000-row file, most of it planning and a
dictionary-encoded write; here each file that holds such a row is read, its rows
replaced with one ``take`` and written again (about 35 ms), and the new files go in,
the old ones out, in ONE commit (:func:`posixlake.delta._commit.commit_files`, which
delta-rs conflict-checks against the version read: a concurrent rewrite or delete of
the same file is a :class:`~posixlake.errors.CommitConflict` and the caller re-plans).

Taken only where such a commit is exactly what delta-rs' UPDATE would make:
- the table is not partitioned and uses none of the features a file commit of ours
  would break (:func:`posixlake.delta._features.file_commit_blockers` with
  ``rewrites=True``: column mapping, a change data feed, CHECK constraints, generated
  and identity columns), nor column invariants, nor a writer feature outside
  :data:`_WRITER_FEATURES`;
- no file holding such a row has a deletion vector;
- the files the statistics leave hold at most :data:`MAX_ROWS` rows and
  :data:`MAX_BYTES` bytes (read whole, in memory);
- each row of ``delete`` matches exactly one row in them (the caller counted the
  whole table; a different count here, a statistic that ruled out a matching file,
  falls back rather than guesses).
Otherwise :func:`rewrite_rows` returns None having written nothing, and the caller runs
delta-rs' UPDATE.

Files are found by the integer and date columns among the matched ones, whose
statistics are exact (strings' may be truncated prefixes: not used). A file without
statistics for such a column is read.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from posixlake.delta._commit import WrittenFile, commit_files, file_stats
from posixlake.delta._features import file_commit_blockers
from posixlake.delta._log import DeltaLog
from posixlake.delta._snapshot import DataFile, Snapshot, snapshot_of
from posixlake.delta._translate import _translated
from posixlake.delta.datafiles import ReadSpec, read_data_file
from posixlake.errors import IoError
from posixlake.storage import table_filesystem

__all__ = ["MAX_BYTES", "MAX_ROWS", "rewrite_rows"]

MAX_ROWS: Final = 4_194_304
"""Rows the files holding the rows may have in all, at most (they are read whole)."""
MAX_BYTES: Final = 64 << 20
"""Bytes (Parquet, compressed) those files may have in all, at most: their rows in memory
take a few times as much. A 1M-row file of 16 MB costs about what delta-rs' UPDATE costs
(0.41 s against 0.46 s, ~80 MB more memory); the gain is in small files."""

#: writer features whose tables such a commit keeps valid: each of those that constrains
#: what a commit may hold is refused where the table uses it (see the module docstring)
_WRITER_FEATURES: Final = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "identityColumns",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
    }
)

#: a dictionary larger than this is abandoned for plain pages: a column of distinct
#: values (names, ids as text) costs its hashing up to 64 KiB instead of up to Arrow's
#: 1 MiB default (a 100,000-row write: 53 ms -> 19 ms); a column of few distinct values
#: keeps its dictionary
_DICTIONARY_PAGE_LIMIT: Final = 64 * 1024
_ROW_GROUP_ROWS: Final = 1_048_576


def rewrite_rows(
    log: DeltaLog,
    delete: pa.Table,
    insert: pa.Table,
    pairs: Sequence[tuple[int, int]],
    matched: Sequence[str],
    *,
    metadata: Mapping[str, Any] | None = None,
) -> int | None:
    """Replace, for each ``(d, i)`` of ``pairs``, the row matching row ``d`` of ``delete``
    on the ``matched`` columns by row ``i`` of ``insert``, in place, in ONE commit.

    Args:
        log: the writable table; the caller holds its lock, at the version it counted on.
        delete / insert: rows with exactly the table's schema.
        pairs: which row of ``insert`` replaces which row of ``delete``.
        matched: the columns a row of ``delete`` is found by (the key, or every column):
            flat types whose Arrow equality is exact for the values (see
            ``_rows._rewrite_pairs``: no NaN, no float zero).
        metadata: commit info entries.

    Returns:
        The committed version, or None when this path does not apply (nothing written).

    Raises:
        CommitConflict: a concurrent commit conflicts (nothing committed; re-plan).
        IoError: a file cannot be read or written (nothing committed).
    """
    if not _applies(log):
        return None
    snap = snapshot_of(log)
    files = _candidates(snap, log.add_actions(), delete, matched)
    if files is None:
        return None
    fs = table_filesystem(snap.uri, snap.storage_options)
    spec = ReadSpec.of(snap, files)  # column mapping is refused: no physical names
    tables = [
        pa.Table.from_batches(
            list(read_data_file(fs, spec, f, batch_rows=MAX_ROWS, use_threads=True)),
            schema=snap.schema,
        )
        for f in files
    ]
    found = _positions(tables, delete, pairs, matched)
    if found is None:
        return None
    new_rows = insert.select(snap.schema.names).cast(snap.schema)
    written: list[WrittenFile] = []
    removed: list[DataFile] = []
    try:
        for index, places in sorted(found.items()):  # in the snapshot's file order
            written.append(_write(fs, snap, _replaced(tables[index], places, new_rows)))
            removed.append(files[index])
        return commit_files(
            log, written, removed, snapshot=snap, metadata=metadata, operation="UPDATE"
        )
    except BaseException:
        for w in written:
            with contextlib.suppress(OSError):
                fs.delete_file(w.path)
        raise


def _applies(log: DeltaLog) -> bool:
    """Whether the table is one whose rewrite commits this module may make."""
    if log.partition_columns:
        return False
    with log.lock, _translated("read schema"):
        protocol = log.table.protocol()
        schema_json = log.table.schema().to_json()
    if set(protocol.writer_features or ()) - _WRITER_FEATURES:
        return False
    if "delta.invariants" in schema_json:
        return False
    return not file_commit_blockers(log.configuration, schema_json, rewrites=True)


def _exact(t: pa.DataType) -> bool:
    """Whether the statistics of a column of type ``t`` are its exact min and max."""
    return bool(pa.types.is_integer(t) or pa.types.is_date32(t))


def _candidates(
    snap: Snapshot, actions: pa.Table, delete: pa.Table, matched: Sequence[str]
) -> list[DataFile] | None:
    """Return the files whose statistics admit a row of ``delete``; None: too many rows
    to read, or one of them has a deletion vector or lies outside the table root."""
    paths = actions.column("path").to_pylist()
    admits: Any = pa.array([False] * len(paths), pa.bool_())
    columns = [c for c in matched if _exact(delete.schema.field(c).type)]
    for row in delete.select(columns).to_pylist():
        admitted: Any = pa.array([True] * len(paths), pa.bool_())
        for c, value in row.items():
            admitted = pc.and_(admitted, _admits(actions, c, value, delete.schema.field(c).type))
        admits = pc.or_(admits, admitted)
    by_path = snap.file_map()
    files = [by_path[unquote(p)] for p, keep in zip(paths, admits.to_pylist(), strict=True) if keep]
    if any(f.deleted_rows or f.num_records is None or _outside_root(f.path) for f in files):
        return None
    if sum(f.num_records or 0 for f in files) > MAX_ROWS or sum(f.size for f in files) > MAX_BYTES:
        return None
    return files


def _outside_root(path: str) -> bool:
    """Whether an add action's path is absolute (a shallow clone's file elsewhere), which
    the table-rooted file system does not read: delta-rs' UPDATE handles those."""
    return "://" in path or path.startswith("/")


def _admits(actions: pa.Table, column: str, value: Any, t: pa.DataType) -> Any:
    """Per file: may it hold ``value`` in ``column`` (missing statistics: it may)."""
    n = actions.num_rows
    if value is None:
        name = f"null_count.{column}"
        if name not in actions.column_names:
            return pa.array([True] * n, pa.bool_())
        counts = actions.column(name)
        return pc.fill_null(pc.greater(counts, 0), True)
    low, high = f"min.{column}", f"max.{column}"
    if low not in actions.column_names or high not in actions.column_names:
        return pa.array([True] * n, pa.bool_())
    lo, hi = actions.column(low), actions.column(high)
    v = pa.scalar(value, lo.type if lo.type == hi.type else t)
    inside = pc.and_kleene(pc.less_equal(lo, v), pc.greater_equal(hi, v))
    return pc.fill_null(inside, True)


def _positions(
    tables: Sequence[pa.Table],
    delete: pa.Table,
    pairs: Sequence[tuple[int, int]],
    matched: Sequence[str],
) -> dict[int, list[tuple[int, int]]] | None:
    """Return, per table index, ``(row position, insert row)`` of each row to replace;
    None unless each row of ``delete`` in ``pairs`` matches exactly one row in all."""
    found: dict[int, list[tuple[int, int]]] = {}
    taken: set[tuple[int, int]] = set()
    for d, i in pairs:
        hits: list[tuple[int, int]] = []
        for index, table in enumerate(tables):
            mask: Any = None
            for c in matched:
                column = table.column(c)
                value = delete.column(c)[d]  # an Arrow scalar: exact (ns, decimals)
                eq = (
                    pc.fill_null(pc.equal(column, value.cast(column.type)), False)
                    if value.is_valid
                    else pc.is_null(column)
                )
                mask = eq if mask is None else pc.and_(mask, eq)
            if mask is None:
                return None
            hits += [(index, int(p)) for p in pc.indices_nonzero(mask).to_pylist()]
            if len(hits) > 1:
                return None
        if len(hits) != 1 or hits[0] in taken:
            return None
        taken.add(hits[0])
        index, position = hits[0]
        found.setdefault(index, []).append((position, i))
    return found


def _replaced(table: pa.Table, places: Sequence[tuple[int, int]], new_rows: pa.Table) -> pa.Table:
    """Return ``table`` with the row at each ``position`` of ``places`` replaced by row
    ``i`` of ``new_rows`` (slices of the old rows around them: nothing copied)."""
    pieces: list[pa.Table] = []
    start = 0
    for position, i in sorted(places):
        pieces += [table.slice(start, position - start), new_rows.slice(i, 1)]
        start = position + 1
    pieces.append(table.slice(start))
    return pa.concat_tables(pieces)


def _write(fs: Any, snap: Snapshot, table: pa.Table) -> WrittenFile:
    """Write ``table`` as a new data file at the table root; return its add action's parts."""
    path = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    try:
        stream = fs.open_output_stream(path)
        try:
            writer = pq.ParquetWriter(
                stream,
                table.schema,
                compression="snappy",
                write_statistics=True,
                dictionary_pagesize_limit=_DICTIONARY_PAGE_LIMIT,
            )
            writer.write_table(table, row_group_size=_ROW_GROUP_ROWS)
            writer.close()
            size = stream.tell()
        finally:
            stream.close()
    except OSError as err:
        with contextlib.suppress(OSError):
            fs.delete_file(path)
        raise IoError(f"cannot write {snap.uri}/{path}: {err}") from err
    return WrittenFile(
        path=path,
        size=int(size),
        partition_values={},
        num_records=table.num_rows,
        stats=file_stats(writer.writer.metadata, table.schema),
    )
