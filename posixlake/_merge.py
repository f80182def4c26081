"""Preparing MERGE sources and primary-key checks (pure Arrow, no I/O).

A merge source is rows that each carry ``_op`` = INSERT, UPDATE or DELETE. DELETE rows
need only the key. An UPDATE row sets exactly the columns it carries: the other columns of
that row keep their values. INSERT rows leave absent nullable columns NULL.

Engines receive the source as Arrow: the data columns, ``_op``, and for a column that only
some UPDATE rows carry, a boolean column ``SET_PREFIX + name`` that is true where the row
sets it (an engine assigns the column only there). A column with no such mask is set by
every UPDATE row.

Which columns a row "carries": the keys of a dict row; for columnar dicts, Arrow tables
and pandas / polars frames, every column of the input, for every row (a NULL there is a
value that an UPDATE sets). Rows that do not apply (UPDATE or DELETE of a missing key,
INSERT of an existing key) are skipped and counted (``MergeMetrics.rows_skipped``), or
with ``strict=True`` raise InvalidOperation before anything is committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from posixlake._convert import to_arrow
from posixlake.errors import DuplicateKeyError, InvalidOperation, SchemaError, SerializationError

__all__ = [
    "OP_COLUMN",
    "SET_PREFIX",
    "MergeSource",
    "check_insert_keys",
    "check_primary_key_after",
    "duplicate_keys",
    "existing_mask",
    "prepare_merge_source",
]

OP_COLUMN = "_op"
SET_PREFIX = "__posixlake_set__"
_OPS = ("INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True)
class MergeSource:
    """A validated merge source: data columns present in the input plus ``_op``."""

    table: pa.Table
    key: tuple[str, ...]

    def count(self, op: str) -> int:
        """Rows with this op."""
        return int(pc.sum(pc.equal(self.table[OP_COLUMN], op)).as_py() or 0)


def prepare_merge_source(rows: object, schema: pa.Schema, key: Sequence[str]) -> MergeSource:
    """Validate merge rows against the table schema and normalise ``_op``.

    Raises:
        SerializationError: malformed payload, or a row without a valid ``_op``.
        SchemaError: unknown columns, wrong types, a missing key, NULL in a NOT NULL column
            of an INSERT or UPDATE row.
        InvalidOperation: the same key twice in one merge.
    """
    for k in key:
        if k not in schema.names:
            raise SchemaError(f"merge key column {k!r} is not in the table")
    loose = pa.schema(
        [pa.field(f.name, f.type, True) for f in schema] + [pa.field(OP_COLUMN, pa.string(), True)]
    )
    rows = _parsed_json(rows)  # parse JSON once, for the rows and for the columns they carry
    table = to_arrow(rows, loose)
    if table.num_rows == 0:
        return MergeSource(table.select([*schema.names, OP_COLUMN]), tuple(key))
    ops = pc.utf8_upper(pc.utf8_trim_whitespace(table[OP_COLUMN]))
    valid = pc.is_in(ops, value_set=pa.array(_OPS))
    if not pc.all(pc.fill_null(valid, False)).as_py():
        bad_idx = pc.index(pc.fill_null(valid, False), False).as_py()
        raise SerializationError(
            f"merge row {bad_idx}: _op must be INSERT, UPDATE or DELETE, got {table[OP_COLUMN][bad_idx].as_py()!r}"
        )
    table = table.set_column(table.schema.get_field_index(OP_COLUMN), OP_COLUMN, ops)
    for k in key:
        if table[k].null_count:
            raise SchemaError(f"every merge row needs the key column {k!r}")
    dups = duplicate_keys(table, key)
    if dups:
        raise InvalidOperation(f"the merge names key(s) {dups[:5]} more than once; one row per key")
    present, masks = _present_columns(rows, table, schema)
    is_insert = pc.equal(table[OP_COLUMN], "INSERT")
    is_update = pc.equal(table[OP_COLUMN], "UPDATE")
    for f in schema:
        if f.nullable or not table[f.name].null_count:
            continue
        nulls = pc.is_null(table[f.name])
        if pc.any(pc.and_(nulls, is_insert)).as_py():
            raise SchemaError(f"column {f.name!r} is NOT NULL: INSERT rows need a value")
        sets = (
            pa.array(masks[f.name], pa.bool_())
            if f.name in masks
            else pa.array([True] * table.num_rows)
        )
        if f.name in present and pc.any(pc.and_(pc.and_(nulls, is_update), sets)).as_py():
            raise SchemaError(f"column {f.name!r} is NOT NULL: UPDATE rows cannot set it to NULL")
    keep = [c for c in schema.names if c in present or c in key] + [OP_COLUMN]
    out = table.select(keep)
    for name, mask in masks.items():
        if name in present and name not in key and not all(mask):
            out = out.append_column(SET_PREFIX + name, pa.array(mask, pa.bool_()))
    return MergeSource(out, tuple(key))


def _parsed_json(rows: object) -> object:
    """Return JSON text parsed to Python values (other input, and bad JSON, unchanged)."""
    if isinstance(rows, bytes | bytearray):
        try:
            rows = bytes(rows).decode("utf-8")
        except UnicodeDecodeError:
            return rows
    if isinstance(rows, str) and rows.lstrip()[:1] in ("[", "{"):
        import json

        try:
            value: object = json.loads(rows)
        except json.JSONDecodeError:
            return rows  # JSON lines, or malformed: to_arrow reports it
        if isinstance(value, list | dict):
            return value
    return rows


def _present_columns(
    rows: object, table: pa.Table, schema: pa.Schema
) -> tuple[set[str], dict[str, list[bool]]]:
    """Return the columns the input carried, and per-row presence for row-wise input."""
    import json

    def from_dicts(items: list[object]) -> tuple[set[str], dict[str, list[bool]]]:
        dicts = [item if isinstance(item, dict) else {} for item in items]
        if not dicts:
            return set(), {}
        first = dicts[0].keys()
        if all(d.keys() == first for d in dicts):  # every row carries the same columns
            return {str(k) for k in first}, {}
        counts: dict[str, int] = {}
        for d in dicts:
            for k in d:
                counts[str(k)] = counts.get(str(k), 0) + 1
        # masks only for the columns some rows lack (the others are set by every row)
        masks = {n: [n in d for d in dicts] for n, c in counts.items() if c < len(dicts)}
        return set(counts), masks

    if isinstance(rows, str | bytes):
        text = rows.decode() if isinstance(rows, bytes) else rows
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            lines = [json.loads(ln) for ln in text.splitlines() if ln.strip().startswith("{")]
            if lines:
                return from_dicts(lines)
            header = text.lstrip().split("\n", 1)[0]
            return {c.strip().strip('"') for c in header.split(",")}, {}
        if isinstance(value, dict) and not all(isinstance(v, list) for v in value.values()):
            return from_dicts([value])
        if isinstance(value, list):
            return from_dicts(value)
        return {str(k) for k in value} if isinstance(value, dict) else set(), {}
    if isinstance(rows, dict):
        if rows and all(isinstance(v, list | tuple) for v in rows.values()):
            return {str(k) for k in rows}, {}
        return from_dicts([rows])
    if isinstance(rows, list | tuple):
        return from_dicts(list(rows))
    return {n for n in _input_columns(rows, table) if n in schema.names}, {}


def _input_columns(rows: object, table: pa.Table) -> list[str]:
    """Return the column names a table-like input carries (all of ``table``'s if unknown)."""
    names = getattr(rows, "column_names", None)  # pyarrow Table / RecordBatch
    if names is None:
        columns = getattr(rows, "columns", None)  # pandas (an Index) / polars (a list)
        if columns is not None and not callable(columns):
            names = [str(c) for c in columns]
    if names is None:
        schema = getattr(rows, "schema", None)  # RecordBatchReader
        if isinstance(schema, pa.Schema):
            names = schema.names
    if names is None:
        return list(table.column_names)
    return list(names)


def duplicate_keys(table: pa.Table, key: Sequence[str]) -> list[object]:
    """Return key values that occur more than once in ``table`` (empty when unique)."""
    if table.num_rows < 2:
        return []
    counts = table.select(list(key)).group_by(list(key)).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts["count_all"], 1))
    if dup.num_rows == 0:
        return []
    rows = dup.select(list(key)).to_pylist()
    return [r[key[0]] if len(key) == 1 else tuple(r[k] for k in key) for r in rows]


def existing_mask(
    candidates: pa.Table, existing: pa.Table, key: Sequence[str]
) -> pa.ChunkedArray | pa.Array:
    """Return a boolean mask over ``candidates``: True where its key is in ``existing``."""
    if candidates.num_rows == 0 or existing.num_rows == 0:
        return pa.array([False] * candidates.num_rows)
    cand = candidates.select(list(key))
    if len(key) == 1:
        k = key[0]
        # scan the (large) existing column against the (small) candidate set
        wanted = pc.unique(cand[k].combine_chunks())
        hit = existing.filter(pc.is_in(existing[k], value_set=wanted))
        if hit.num_rows == 0:
            return pa.array([False] * candidates.num_rows)
        return pc.is_in(cand[k], value_set=hit[k].combine_chunks())
    hits = existing.select(list(key)).join(
        cand.group_by(list(key)).aggregate([]), keys=list(key), join_type="left semi"
    )
    marker = "__posixlake_hit"
    joined = cand.append_column("__row", pa.array(range(cand.num_rows), pa.int64())).join(
        hits.append_column(marker, pa.array([True] * hits.num_rows)),
        keys=list(key),
        join_type="left outer",
    )
    joined = joined.sort_by("__row")
    return pc.fill_null(joined[marker], False)


def check_insert_keys(batch: pa.Table, existing: pa.Table, key: Sequence[str]) -> None:
    """Raise DuplicateKeyError if ``batch`` repeats a key or holds one that exists.

    Raises:
        DuplicateKeyError: naming up to five offending keys.
    """
    dups = duplicate_keys(batch, key)
    if dups:
        raise DuplicateKeyError(f"duplicate primary key in the inserted rows: {dups[:5]}")
    mask = existing_mask(batch, existing, key)
    if pc.any(mask).as_py():
        clash = batch.filter(mask).select(list(key)).to_pylist()[:5]
        shown = [r[key[0]] if len(key) == 1 else tuple(r.values()) for r in clash]
        raise DuplicateKeyError(
            f"primary key already exists: {shown} (use merge, or insert(..., upsert=True), to update rows)"
        )


def check_primary_key_after(
    target: pa.Table, todo: pa.Table, key: Sequence[str], pk: Sequence[str]
) -> None:
    """Check that a merge matched on ``key`` (not the primary key) keeps ``pk`` unique.

    Args:
        target: the table's ``key`` and ``pk`` columns (current version).
        todo: the merge rows that apply (``_op`` and the columns they carry).
        key: the merge key. pk: the primary key.

    Raises:
        DuplicateKeyError: after the merge, a primary key would occur twice.
    """
    op = todo[OP_COLUMN]
    inserts = todo.filter(pc.equal(op, "INSERT"))
    updates = todo.filter(pc.equal(op, "UPDATE"))
    touched = todo.filter(pc.not_equal(op, "INSERT")).select(list(key))
    keep = target.filter(pc.invert(existing_mask(target, touched, key))).select(list(pk))
    parts = [keep]
    if inserts.num_rows:
        parts.append(inserts.select(list(pk)).cast(keep.schema))
    if updates.num_rows:
        # the new primary key of an updated row: the value it sets, else its current one
        old = target.select(list(dict.fromkeys([*key, *pk])))
        old = old.rename_columns([c if c in key else f"__old_{c}" for c in old.column_names])
        joined = updates.join(old, keys=list(key), join_type="inner")
        cols: list[pa.ChunkedArray] = []
        for c in pk:
            current = joined[c if c in key else f"__old_{c}"]
            if c in key or c not in joined.column_names:
                cols.append(current)
                continue
            sets = joined[SET_PREFIX + c] if SET_PREFIX + c in joined.column_names else None
            chosen = joined[c] if sets is None else pc.if_else(sets, joined[c], current)
            cols.append(chosen)
        parts.append(pa.Table.from_arrays(cols, names=list(pk)).cast(keep.schema))
    dups = duplicate_keys(pa.concat_tables(parts), pk)
    if dups:
        raise DuplicateKeyError(
            f"the merge would repeat primary key(s) {dups[:5]}; a primary key must stay unique"
        )
