"""Replace rows (a multiset of whole rows, or rows by key) in one Delta commit.

``replace_rows(log, delete=D, insert=I)`` removes one occurrence of each row of ``D`` from
the table and appends ``I``, as ONE commit. It is what an overwrite of a CSV file turns
into: the diff of two multisets of whole rows, or, with ``key=``, a diff by key (an
update is the old row's key deleted and the new row inserted, in the same MERGE).

How: a delta-rs MERGE whose match condition is a null-safe equality of every column
(``t.c IS NOT DISTINCT FROM s.c``) and that only the source's DELETE rows can satisfy.
A matching target row is deleted, whatever its number of copies, so the copies that must
survive (a row present three times of which one is deleted) are re-inserted in the same
MERGE, together with ``I``, as source rows that never match. Each attempt reads the rows
it counts from the version it commits on, so a retry after a conflict recounts.

A few rows replaced by as many (an edit of a few lines; at most ``_MAX_IN_PLACE``), each
in the table exactly once on that version (by key: each key held by one row), are
replaced in place instead: by :func:`posixlake.delta._rewrite.rewrite_rows`, which
rewrites the files holding them itself where that commit is exact (about 2.5x faster
than delta-rs' UPDATE on a 100,000-row file; any flat column type, timestamps and
decimals included), else by one delta-rs UPDATE (2-3x faster than its MERGE; only types
with exact SQL literals); the same result either way. Values whose SQL literal might not
compare as Arrow's total order does (NaN, zeros), types without an exact literal (where
the rewrite does not apply), and partitioned tables keep the MERGE.
Both are narrowed by :func:`_ranges`, so delta-rs reads only the files whose statistics
admit the rows.

Row identity: NaN equals NaN and -0.0 differs from 0.0, as in Arrow's total order (which
DataFusion's ``IS NOT DISTINCT FROM`` uses); nested values compare by content.
"""

from __future__ import annotations

import datetime
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.delta._log import DeltaLog
from posixlake.delta._rewrite import rewrite_rows
from posixlake.delta._translate import quote_ident
from posixlake.errors import ConcurrentChange

__all__ = ["RowsReplaced", "replace_rows", "row_key"]

_OP: Final = "__posixlake_rows_op"


def row_key(value: Any) -> Any:
    """Return a hashable key for a Python value of a row, equal exactly when Delta sees equal.

    Floats compare by Arrow's total order (NaN == NaN, -0.0 != 0.0); lists, maps (lists of
    pairs) and structs (dicts) compare by content.
    """
    if isinstance(value, float):
        if math.isnan(value):
            return ("nan",)
        return (value, math.copysign(1.0, value))
    if isinstance(value, list | tuple):
        return tuple(row_key(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, row_key(v)) for k, v in value.items())
    return value


def _keys(table: pa.Table) -> list[Any]:
    return [tuple(row_key(v) for v in row.values()) for row in table.to_pylist()]


class RowsReplaced:
    """What :func:`replace_rows` did: rows deleted and inserted, and the new version."""

    __slots__ = ("deleted", "inserted", "version")

    def __init__(self, deleted: int, inserted: int, version: int | None) -> None:
        self.deleted = deleted
        self.inserted = inserted
        self.version = version

    def __repr__(self) -> str:
        return f"RowsReplaced(deleted={self.deleted}, inserted={self.inserted}, version={self.version})"


def _candidates(current: pa.Table, delete: pa.Table) -> pa.Table:
    """Narrow ``current`` to rows that may equal a row of ``delete`` (cheap Arrow filter)."""
    for i, fld in enumerate(current.schema):
        t = fld.type
        if pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_date(t):
            values = delete.column(i).combine_chunks()
            mask = pc.is_in(current.column(i), value_set=values, skip_nulls=False)
            return current.filter(mask)
    return current


def _merge_source(
    current: pa.Table, delete: pa.Table, insert: pa.Table
) -> tuple[pa.Table, int, bool]:
    """Build the MERGE source: distinct rows to match (DELETE), surviving copies + inserts.

    Returns:
        (source with the ``_OP`` column, number of rows that will really be deleted,
        whether each row of ``delete`` is distinct and in ``current`` exactly once)
    """
    wanted = Counter(_keys(delete))
    cand = _candidates(current, delete)
    present: Counter[Any] = Counter()
    first_row: dict[Any, int] = {}
    for idx, k in enumerate(_keys(cand)):
        if k in wanted:
            present[k] += 1
            first_row.setdefault(k, idx)
    match_idx: list[int] = []
    survivor_idx: list[int] = []
    deleted = 0
    for k, n_present in present.items():
        gone = min(wanted[k], n_present)
        deleted += gone
        match_idx.append(first_row[k])
        survivor_idx.extend([first_row[k]] * (n_present - gone))
    matches = cand.take(pa.array(match_idx, pa.int64()))
    survivors = cand.take(pa.array(survivor_idx, pa.int64()))
    parts = [_tagged(matches, "DELETE"), _tagged(survivors, "INSERT"), _tagged(insert, "INSERT")]
    once = all(n == 1 and present[k] == 1 for k, n in wanted.items())
    return pa.concat_tables(parts), deleted, once


def replace_rows(
    log: DeltaLog,
    *,
    delete: pa.Table,
    insert: pa.Table,
    key: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    require_present: bool = False,
) -> RowsReplaced:
    """Delete the rows ``delete`` names and append ``insert``, in ONE commit.

    Without ``key``, one occurrence of each row of ``delete`` goes (whole-row match); with
    ``key``, the row holding each key of ``delete`` goes (keys are unique). A row to
    delete that is not in the table (or fewer copies than asked) is skipped. Nothing is
    committed when nothing changes.

    Args:
        log: the writable table; the caller holds its lock and has refreshed it.
        delete: rows to remove, with exactly the table's schema.
        insert: rows to add, with exactly the table's schema.
        key: match ``delete`` rows on these columns instead of on every column.
        metadata: custom commit metadata.
        require_present: (whole rows only) fail with ConcurrentChange, committing nothing,
            when a row of ``delete`` is not in the version being committed on (another
            writer changed or deleted it since the caller read it).

    Raises:
        DeltaLakeError / SchemaError / CommitConflict: from delta-rs, translated.
        ConcurrentChange: ``require_present`` and a row to delete is gone.
    """
    log._check_writable()
    log.check_write("replace rows", rewrites=delete.num_rows > 0)
    insert = log.blank_partitions(insert, "replace rows")
    if delete.num_rows == 0:
        if insert.num_rows == 0:
            return RowsReplaced(0, 0, None)
        return RowsReplaced(0, insert.num_rows, log.append(insert, metadata=metadata))
    names = delete.column_names
    if key:
        match = " AND ".join(
            [f"t.{quote_ident(c)} = s.{quote_ident(c)}" for c in key] + _ranges(delete, key, "t.")
        )
        where = None
    else:
        match = " AND ".join(
            [f"(t.{quote_ident(c)} IS NOT DISTINCT FROM s.{quote_ident(c)})" for c in names]
            + _ranges(delete, names, "t.")
        )
        # the rows to match are read within the same ranges (not the whole table)
        where = " AND ".join(_ranges(delete, names)) or None
    predicate = f"s.{quote_ident(_OP)} = 'DELETE' AND {match}"
    columns = {quote_ident(c): f"s.{quote_ident(c)}" for c in names}
    log._check_rewrite_safe("replace rows")
    log.check_new_rows(insert, "replace rows")
    in_place = None if log.partition_columns else _in_place(delete, insert, key)
    pairs = None if log.partition_columns else _rewrite_pairs(delete, insert, key)
    with log.lock:
        counted = {"deleted": 0}

        def attempt() -> tuple[dict[str, Any], int | None]:
            if pairs is not None:
                # rewrite the files holding the rows ourselves where that commit is exact;
                # it finds each row to replace exactly once, or writes nothing (None)
                version = rewrite_rows(
                    log, delete, insert, pairs, list(key or names), metadata=metadata
                )
                if version is not None:
                    counted["deleted"] = delete.num_rows
                    return {"num_updated_rows": delete.num_rows}, version
            if key:
                source = pa.concat_tables([_tagged(delete, "DELETE"), _tagged(insert, "INSERT")])
                once = in_place is not None and _keys_once(log, delete, key)
            else:
                current = log.read_columns(None, filter_sql=where)
                source, counted["deleted"], once = _merge_source(current, delete, insert)
                if require_present and counted["deleted"] < delete.num_rows:
                    raise ConcurrentChange(
                        f"{delete.num_rows - counted['deleted']} of the rows this write "
                        "replaces were changed or deleted by another writer since it read "
                        "them; nothing was committed"
                    )
            if source.num_rows == 0:
                return {}, None
            if in_place is not None and once:
                # each row to replace is in the table once: rewrite it in place (UPDATE)
                condition, sets = in_place
                result, version = log._committed(
                    lambda: log.table.update(
                        updates=sets,
                        predicate=condition,
                        commit_properties=log._props(metadata),
                    )
                )
                counted["deleted"] = int(result.get("num_updated_rows", 0) or 0)
                return result, version
            result, version = log._committed(
                lambda: (
                    log.table.merge(
                        source,
                        predicate,
                        source_alias="s",
                        target_alias="t",
                        commit_properties=log._props(metadata),
                    )
                    .when_matched_delete()
                    .when_not_matched_insert(
                        updates=columns, predicate=f"s.{quote_ident(_OP)} = 'INSERT'"
                    )
                    .execute()
                )
            )
            if key:
                counted["deleted"] = int(result.get("num_target_rows_deleted", 0) or 0)
            return result, version

        _, version = log._retrying("replace rows", attempt)
    return RowsReplaced(counted["deleted"], insert.num_rows, version)


_MAX_IN_PLACE: Final = 16
"""Rows a replace rewrites in place (one UPDATE) at most; more go through the MERGE."""

_SQL_TYPES: Final = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float32(): "REAL",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.date32(): "DATE",
    pa.string(): "VARCHAR",
}


def _in_place(
    delete: pa.Table, insert: pa.Table, key: Sequence[str] | None
) -> tuple[str, dict[str, str]] | None:
    """Return an UPDATE ``(predicate, column -> SQL)`` doing this replace, or None.

    A replace of ``n`` rows by ``n`` rows (an edit of a few lines, by key or as whole rows)
    is, when each row to delete is in the table exactly once (the caller checks that on
    the version it commits on), an UPDATE of those rows: row ``i`` of ``delete`` becomes
    row ``i`` of ``insert`` (by key: the row of ``insert`` with its key). delta-rs' UPDATE
    rewrites a file 2-3x faster than its MERGE. Only for up to ``_MAX_IN_PLACE`` rows of
    types whose SQL literals are exact (integers, strings, booleans, dates, finite
    non-zero floats: NaN and -0.0 compare by Arrow's total order in the MERGE, a literal
    might not); otherwise None (the MERGE does it).
    """
    n = delete.num_rows
    if not 0 < n == insert.num_rows <= _MAX_IN_PLACE:
        return None
    types = {f.name: f.type for f in delete.schema}
    if any(t not in _SQL_TYPES for t in types.values()):
        return None
    before, after = delete.to_pylist(), insert.to_pylist()
    for row in (*before, *after):
        for value in row.values():
            if isinstance(value, float) and not (math.isfinite(value) and value != 0.0):
                return None
    names = delete.column_names
    if key:
        keys = [tuple(r[c] for c in key) for r in before]
        by_key = {tuple(r[c] for c in key): r for r in after}
        if len(set(keys)) != n or set(by_key) != set(keys) or any(None in k for k in keys):
            return None
        pairs = [(old, by_key[k]) for old, k in zip(before, keys, strict=True)]
    else:
        pairs = list(zip(before, after, strict=True))
    matched = list(key or names)
    whens = [" AND ".join(_equals(c, old[c], types[c]) for c in matched) for old, _ in pairs]
    sets: dict[str, str] = {}
    for c in names:
        if c in matched and key:
            continue
        if not key and all(row_key(old[c]) == row_key(new[c]) for old, new in pairs):
            continue  # the matched rows hold these values (by key, another writer may
            # have changed them since: the new row's values are set, as the MERGE would)
        values = [_sql_value(new[c], types[c]) for _, new in pairs]
        cases = " ".join(f"WHEN {w} THEN {v}" for w, v in zip(whens, values, strict=True))
        sets[quote_ident(c)] = values[0] if n == 1 else f"CASE {cases} END"
    if not sets:
        return None
    rows = whens[0] if n == 1 else " OR ".join(f"({w})" for w in whens)
    return " AND ".join([*_ranges(delete, matched), f"({rows})"]), sets


def _rewrite_pairs(
    delete: pa.Table, insert: pa.Table, key: Sequence[str] | None
) -> list[tuple[int, int]] | None:
    """Return ``(row of delete, row of insert replacing it)`` when the replace is a few
    rows by as many, each to be found by exact equality, for
    :func:`posixlake.delta._rewrite.rewrite_rows`; else None.

    As for :func:`_in_place` (up to ``_MAX_IN_PLACE`` rows; by key, the same distinct
    keys on both sides, none NULL), but any flat column type: no SQL literal is made,
    rows are found with Arrow's equality, which is exact for them except where it
    differs from the total order rows are matched by (NaN, and 0.0 against -0.0: such
    values, and nested or dictionary columns, keep the UPDATE or the MERGE). Rows that
    are all the same before and after: None (nothing to rewrite).
    """
    n = delete.num_rows
    if not 0 < n == insert.num_rows <= _MAX_IN_PLACE:
        return None
    for field in delete.schema:
        t = field.type
        if pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_float16(t):
            return None
        if pa.types.is_floating(t):
            for column in (delete.column(field.name), insert.column(field.name)):
                values = column.drop_null()
                exact = pc.and_(pc.is_finite(values), pc.not_equal(values, 0))
                if len(values) and not pc.all(exact).as_py():
                    return None
    before, after = delete.to_pylist(), insert.to_pylist()
    if key:
        keys = [tuple(r[c] for c in key) for r in before]
        by_key = {tuple(r[c] for c in key): i for i, r in enumerate(after)}
        if len(set(keys)) != n or set(by_key) != set(keys) or any(None in k for k in keys):
            return None
        pairs = [(d, by_key[k]) for d, k in enumerate(keys)]
    else:
        pairs = [(i, i) for i in range(n)]
    same = [
        tuple(map(row_key, before[d].values())) == tuple(map(row_key, after[i].values()))
        for d, i in pairs
    ]
    return None if all(same) else pairs


def _keys_once(log: DeltaLog, delete: pa.Table, key: Sequence[str]) -> bool:
    """Return whether each key of ``delete`` is held by exactly one row of the table."""
    where = " AND ".join(_ranges(delete, key)) or None
    wanted = {tuple(r.values()) for r in delete.select(list(key)).to_pylist()}
    held = Counter(
        k
        for k in (tuple(r.values()) for r in log.read_columns(key, filter_sql=where).to_pylist())
        if k in wanted
    )
    return all(held[k] == 1 for k in wanted)


def _sql_value(value: Any, kind: pa.DataType) -> str:
    """An exact SQL literal of ``value`` typed ``kind`` (one of ``_SQL_TYPES``)."""
    sql = _SQL_TYPES[kind]
    if value is None:
        return f"CAST(NULL AS {sql})"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return _literal(value)
    if isinstance(value, float):
        return f"CAST('{value!r}' AS {sql})"
    if isinstance(value, datetime.date):
        return _literal(value)
    return f"CAST('{int(value)}' AS {sql})"


def _equals(column: str, value: Any, kind: pa.DataType) -> str:
    ident = quote_ident(column)
    if value is None:
        return f"{ident} IS NULL"
    return f"{ident} = {_sql_value(value, kind)}"


_MAX_RANGES: Final = 16
"""Values (or value ranges) a predicate of :func:`_ranges` names per column, at most."""


def _ranges(delete: pa.Table, columns: Sequence[str], prefix: str = "") -> list[str]:
    """Return a predicate per integer, string and date column of ``delete`` that its values meet.

    Up to ``_MAX_RANGES`` distinct values: ``c IN (...)``; more integers or dates: ``c >=
    lo AND c <= hi`` ranges OR-ed, split at the widest gaps between the values that are at
    least 1/64 of their span (rows far apart,
    as two edits at both ends of a file, are two narrow ranges, not one range spanning
    the table); more strings: one range. A column whose deleted values include NULL gets
    ``c IS NULL OR ...`` (only ``c IS NULL`` when all are NULL). The rows to delete meet
    these, so a match or a read narrowed by them finds the same rows; delta-rs and
    DataFusion prune the files by their statistics (min, max, null count) with them (a
    one-row replace in a table of 10M rows reads one file instead of every file: ~7x
    faster). Other types (floats, whose NaN no range holds, timestamps, decimals, nested)
    are skipped.
    """
    clauses = []
    for name in columns:
        column = delete.column(name)
        kind = column.type
        date = pa.types.is_date32(kind)
        ordered = pa.types.is_integer(kind) or date
        if not (ordered or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            continue
        ident = f"{prefix}{quote_ident(name)}"
        values = pc.unique(column.combine_chunks()).drop_null()
        values = values.take(pc.array_sort_indices(values))
        nulls = f"{ident} IS NULL" if column.null_count else None
        if len(values) == 0:
            if nulls:
                clauses.append(nulls)
            continue
        if len(values) <= _MAX_RANGES:
            listed = ", ".join(_literal(v) for v in values.to_pylist())
            clause = f"{ident} IN ({listed})"
        else:
            clause = _spans(values.cast(pa.int32()) if date else values, values, ident, ordered)
        clauses.append(f"({nulls} OR {clause})" if nulls else clause)
    return clauses


def _spans(numbers: pa.Array, values: pa.Array, ident: str, ordered: bool) -> str:
    """``ident`` within OR-ed ranges of the sorted ``values`` (``numbers``: their ordinals)."""
    last = len(values) - 1
    cuts: list[int] = []
    if ordered:  # the widest gaps: between values[i] and values[i + 1]
        gaps = pc.subtract(
            numbers.slice(1).cast(pa.float64(), safe=False),
            numbers.slice(0, last).cast(pa.float64(), safe=False),
        )
        widest = pc.array_sort_indices(gaps, order="descending")[: _MAX_RANGES - 1]
        span = numbers[last].as_py() - numbers[0].as_py()
        cuts = sorted(i for i in widest.to_pylist() if gaps[i].as_py() * 64 >= span)
    spans, start = [], 0
    for cut in [*cuts, last]:
        low, high = values[start].as_py(), values[cut].as_py()
        spans.append(f"{ident} >= {_literal(low)} AND {ident} <= {_literal(high)}")
        start = cut + 1
    return spans[0] if len(spans) == 1 else "(" + " OR ".join(f"({x})" for x in spans) + ")"


def _literal(value: int | str | datetime.date) -> str:
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime.date):
        return f"CAST('{value.isoformat()}' AS DATE)"
    return "'" + value.replace("'", "''") + "'"


def _tagged(rows: pa.Table, op: str) -> pa.Table:
    return rows.append_column(_OP, pa.array([op] * rows.num_rows, pa.string()))
