"""The reference semantics of a row diff, for the tests: ``apply_diff(old, diff_rows(old,
new)) == new``. Production never applies a diff to a table in memory (a diff becomes ONE
Delta MERGE), so this lives with the tests that check :func:`nfs.table.diff.diff_rows` by it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from nfs.table.diff import (
    Chunked,
    RowDiff,
    _bytes,
    _check_key,
    _compare,
    _conform,
    _indices,
    _ints,
    _key_values,
    _same_schema,
    _without_views,
    fingerprints,
)
from posixlake.errors import SchemaError

__all__ = ["apply_diff"]


def apply_diff(old: pa.Table, diff: RowDiff, *, key: Sequence[str] | None = None) -> pa.Table:
    """Apply a diff to a table, as the store would.

    With a key: rows of ``old`` whose key is in ``diff.deletes`` go; rows whose key is
    in ``diff.updates`` are replaced in place by the update; updates of keys absent from
    ``old`` are ignored (as a MERGE's ``when matched update``); inserts are appended.
    Without a key: one row of ``old`` equal to each row of ``diff.deletes`` goes (the
    last such occurrence), then inserts are appended. Inserts are not checked against
    existing keys.

    Args:
        old: The table to change.
        diff: A diff of tables of ``old``'s schema (``deletes`` as :class:`RowDiff`
            describes for the ``key``).
        key: The primary key the diff was made with, or ``None``.

    Returns:
        The changed table.

    Raises:
        SchemaError: The diff's tables do not match ``old``'s schema, or ``key`` is
            invalid, or an unkeyed diff carries updates.
        ValueError: An unkeyed diff deletes a row that ``old`` does not hold.
    """
    _same_schema(old, diff.inserts)
    _same_schema(old, diff.updates)
    plain = _without_views(old)
    if plain is not old:
        plain_diff = RowDiff(
            inserts=_without_views(diff.inserts),
            deletes=_without_views(diff.deletes),
            updates=_without_views(diff.updates),
        )
        return apply_diff(plain, plain_diff, key=key).cast(old.schema)
    if key is None:
        if diff.updates.num_rows:
            raise SchemaError("an unkeyed diff cannot carry updates")
        _same_schema(old, diff.deletes)
        return _apply_multiset(old, diff)
    columns = _check_key(old.schema, key)
    if diff.deletes.column_names != columns:
        raise SchemaError(
            f"keyed deletes must hold the key columns {columns}, got {diff.deletes.column_names}"
        )
    old_keys = _key_values(old, columns)
    gone = pc.is_in(old_keys, value_set=_key_values(diff.deletes, columns))
    update_at = pc.cast(
        pc.index_in(old_keys, value_set=_key_values(diff.updates, columns)), pa.int64()
    )
    n_old, n_updates = old.num_rows, diff.updates.num_rows
    # Row numbers in concat([old, updates, inserts]): updated rows point at their update.
    rows = pc.coalesce(_compare(pc.add, update_at, n_old), _indices(n_old))
    kept: Chunked = rows.filter(pc.invert(gone))  # type: ignore[assignment, unused-ignore]
    appended = _compare(pc.add, _indices(diff.inserts.num_rows), n_old + n_updates)
    everything = pa.concat_tables(
        [old, _conform(diff.updates, old.schema), _conform(diff.inserts, old.schema)]
    )
    return everything.take(pa.concat_arrays([kept.combine_chunks(), appended]))


def _apply_multiset(old: pa.Table, diff: RowDiff) -> pa.Table:
    old_lines = fingerprints(old)
    remaining: dict[bytes, int] = {}
    for line in _bytes(fingerprints(diff.deletes)):
        remaining[line] = remaining.get(line, 0) + 1
    hit = pc.is_in(old_lines, value_set=pa.array(list(remaining), pa.binary()))
    candidates = _ints(pc.indices_nonzero(hit))
    candidate_lines = _bytes(pc.take(old_lines, pa.array(candidates, pa.int64())))
    dropped: list[int] = []
    for index, line in zip(reversed(candidates), reversed(candidate_lines), strict=True):
        if remaining[line]:
            remaining[line] -= 1
            dropped.append(index)
    missing = sum(remaining.values())
    if missing:
        raise ValueError(f"{missing} row(s) to delete are not in the table")
    if dropped:
        doomed = pa.array(dropped, pa.int64())
        old = old.filter(pc.invert(pc.is_in(_indices(old.num_rows), value_set=doomed)))
    return pa.concat_tables([old, _conform(diff.inserts, old.schema)])
