"""Tests of row diffs: keyed and multiset diffs, and their application."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfs.table.diff import RowDiff, diff_rows, fingerprints
from posixlake.errors import DuplicateKeyError, SchemaError
from tests.nfs.diff_oracle import apply_diff
from tests.strategies import (
    arrow_schemas,
    arrow_tables,
    assert_same_rows,
    comparable_rows,
)

ID = pa.field("id", pa.int64(), nullable=False)


@st.composite
def keyed_pairs(draw: st.DrawFn) -> tuple[pa.Table, pa.Table]:
    """Draw (old, new) tables with a unique ``id``; new reuses, changes and drops old rows."""
    others = draw(arrow_schemas(min_fields=0, max_fields=3))
    schema = pa.schema([ID, *(f for f in others if f.name.lower() != "id")])
    old = draw(arrow_tables(schema, max_rows=15))
    old = old.set_column(0, ID, pa.array(range(old.num_rows), pa.int64()))
    fresh = draw(arrow_tables(schema, max_rows=10))
    kept = (
        draw(st.lists(st.integers(0, max(old.num_rows - 1, 0)), unique=True))
        if old.num_rows
        else []
    )
    ids = draw(
        st.lists(
            st.integers(0, 40).filter(lambda i: i not in kept),
            min_size=fresh.num_rows,
            max_size=fresh.num_rows,
            unique=True,
        )
    )
    fresh = fresh.set_column(0, ID, pa.array(ids, pa.int64()))
    new = pa.concat_tables([old.take(pa.array(kept, pa.int64())), fresh])
    order = draw(st.permutations(range(new.num_rows)))
    return old, new.take(pa.array(order, pa.int64()))


@st.composite
def unkeyed_pairs(draw: st.DrawFn) -> tuple[pa.Table, pa.Table]:
    """Draw (old, new) tables of one schema; new repeats, drops and adds rows of old."""
    schema = draw(arrow_schemas(max_fields=3))
    old = draw(arrow_tables(schema, max_rows=12))
    fresh = draw(arrow_tables(schema, max_rows=6))
    picks = (
        draw(st.lists(st.integers(0, old.num_rows - 1), max_size=2 * old.num_rows))
        if old.num_rows
        else []
    )
    new = pa.concat_tables([old.take(pa.array(picks, pa.int64())), fresh, fresh.slice(0, 2)])
    return old, new


@given(keyed_pairs())
def test_apply_inverts_keyed_diff(pair: tuple[pa.Table, pa.Table]) -> None:
    old, new = pair
    diff = diff_rows(old, new, key=["id"])
    assert_same_rows(apply_diff(old, diff, key=["id"]), new, ordered=False)
    assert diff.deletes.column_names == ["id"]
    assert diff.is_empty == (
        sorted(comparable_rows(old), key=repr) == sorted(comparable_rows(new), key=repr)
    )


@given(keyed_pairs())
def test_keyed_diff_touches_only_what_changed(pair: tuple[pa.Table, pa.Table]) -> None:
    old, new = pair
    diff = diff_rows(old, new, key=["id"])
    old_rows = dict(zip(old.column("id").to_pylist(), comparable_rows(old), strict=True))
    new_rows = dict(zip(new.column("id").to_pylist(), comparable_rows(new), strict=True))
    assert set(diff.inserts.column("id").to_pylist()) == new_rows.keys() - old_rows.keys()
    assert set(diff.deletes.column("id").to_pylist()) == old_rows.keys() - new_rows.keys()
    assert set(diff.updates.column("id").to_pylist()) == {
        k for k in old_rows.keys() & new_rows.keys() if old_rows[k] != new_rows[k]
    }


@given(unkeyed_pairs())
def test_apply_inverts_multiset_diff(pair: tuple[pa.Table, pa.Table]) -> None:
    old, new = pair
    diff = diff_rows(old, new, key=None)
    assert diff.updates.num_rows == 0
    assert_same_rows(apply_diff(old, diff), new, ordered=False)


@given(arrow_tables(max_rows=10))
def test_diff_of_a_table_with_itself_is_empty(table: pa.Table) -> None:
    assert diff_rows(table, table).is_empty
    copy = pa.Table.from_batches(table.to_batches(max_chunksize=3), schema=table.schema)
    assert diff_rows(table, copy).is_empty


@given(arrow_tables(max_rows=10), arrow_tables(max_rows=10))
def test_fingerprints_are_equal_exactly_for_equal_rows(left: pa.Table, right: pa.Table) -> None:
    if not left.schema.equals(right.schema):
        right = left
    rows = comparable_rows(left) + comparable_rows(right)
    prints = fingerprints(left).to_pylist() + fingerprints(right).to_pylist()
    for i in range(len(rows)):
        for j in range(len(rows)):
            assert (rows[i] == rows[j]) == (prints[i] == prints[j])


def test_multiset_diff_counts_copies() -> None:
    old = pa.table({"a": pa.array([1, 1, 1, 2]), "b": pa.array(["x", "x", "x", None])})
    new = pa.table({"a": pa.array([1, 1, 3]), "b": pa.array(["x", "x", ""])})
    diff = diff_rows(old, new)
    assert diff.deletes.to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]
    assert diff.inserts.to_pylist() == [{"a": 3, "b": ""}]
    assert_same_rows(apply_diff(old, diff), new, ordered=False)


def test_multiset_diff_nulls_and_nans_compare_equal() -> None:
    old = pa.table({"f": pa.array([float("nan"), None, -0.0]), "s": pa.array([None, None, ""])})
    assert diff_rows(old, old.take([2, 1, 0])).is_empty
    changed = pa.table({"f": pa.array([float("nan"), None, 0.0]), "s": pa.array([None, None, ""])})
    diff = diff_rows(old, changed)
    assert diff.deletes.num_rows == 1 and diff.inserts.num_rows == 1


def test_keyed_diff_example() -> None:
    old = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]})
    new = pa.table({"id": [3, 1, 4], "v": ["c", "A", "d"]})
    diff = diff_rows(old, new, key=["id"])
    assert diff.inserts.to_pylist() == [{"id": 4, "v": "d"}]
    assert diff.updates.to_pylist() == [{"id": 1, "v": "A"}]
    assert diff.deletes.to_pylist() == [{"id": 2}]
    assert apply_diff(old, diff, key=["id"]).to_pylist() == [
        {"id": 1, "v": "A"},
        {"id": 3, "v": "c"},
        {"id": 4, "v": "d"},
    ]


def test_composite_key() -> None:
    old = pa.table({"k1": [1, 1, 2], "k2": ["a", "b", "a"], "v": [1.0, 2.0, 3.0]})
    new = pa.table({"k1": [1, 2, 2], "k2": ["b", "a", "b"], "v": [2.5, 3.0, 4.0]})
    diff = diff_rows(old, new, key=["k2", "k1"])
    assert diff.deletes.to_pylist() == [{"k2": "a", "k1": 1}]
    assert diff.updates.to_pylist() == [{"k1": 1, "k2": "b", "v": 2.5}]
    assert diff.inserts.to_pylist() == [{"k1": 2, "k2": "b", "v": 4.0}]
    assert_same_rows(apply_diff(old, diff, key=["k2", "k1"]), new, ordered=False)


def test_duplicate_key_in_new_content_is_an_error() -> None:
    old = pa.table({"id": [1, 2], "v": ["a", "b"]})
    new = pa.table({"id": [1, 2, 2], "v": ["a", "b", "c"]})
    with pytest.raises(DuplicateKeyError, match=r"duplicate key \(id\) in the new content: \(2\)"):
        diff_rows(old, new, key=["id"])


def test_null_keys_count_as_duplicates() -> None:
    table = pa.table({"id": pa.array([None, None], pa.int64()), "v": ["a", "b"]})
    with pytest.raises(DuplicateKeyError):
        diff_rows(table.slice(0, 0), table, key=["id"])


def test_schema_and_key_errors() -> None:
    old = pa.table({"id": [1], "v": ["a"]})
    with pytest.raises(SchemaError, match="different schemas"):
        diff_rows(old, pa.table({"id": [1], "v": [1]}), key=["id"])
    with pytest.raises(SchemaError, match="not in the table: nope"):
        diff_rows(old, old, key=["nope"])
    with pytest.raises(SchemaError, match="at least one column"):
        diff_rows(old, old, key=[])


def test_top_level_nullability_may_differ() -> None:
    old = pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]})
    fields: list[pa.Field[Any]] = [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.string()),
    ]
    strict = pa.schema(fields)
    new = pa.table({"id": [2, 3], "v": ["B", "c"]}, schema=strict)
    for key in (["id"], None):
        diff = diff_rows(old, new, key=key)
        assert_same_rows(apply_diff(old, diff, key=key), new.cast(old.schema), ordered=False)


@pytest.mark.parametrize("key", [["id"], None])
def test_view_types(key: list[str] | None) -> None:
    fields: list[pa.Field[Any]] = [
        pa.field("id", pa.int64()),
        pa.field("s", pa.string_view()),
        pa.field("b", pa.binary_view()),
    ]
    schema = pa.schema(fields)
    old = pa.table({"id": [1, 2, 3], "s": ["a", "b", None], "b": [b"x", None, b""]}).cast(schema)
    new = pa.table({"id": [1, 3, 4], "s": ["A", None, "d"], "b": [b"x", b"", b"y"]}).cast(schema)
    diff = diff_rows(old, new, key=key)
    assert diff.inserts.schema == schema
    assert_same_rows(apply_diff(old, diff, key=key), new, ordered=False)


def test_apply_rejects_deleting_missing_rows() -> None:
    old = pa.table({"a": [1]})
    diff = RowDiff(inserts=old.slice(0, 0), deletes=pa.table({"a": [2]}), updates=old.slice(0, 0))
    with pytest.raises(ValueError, match="not in the table"):
        apply_diff(old, diff)
