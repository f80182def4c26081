"""DatabaseOps.replace_rows: a multiset of whole rows deleted and inserted in ONE commit."""

from __future__ import annotations

import math
from collections import Counter
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posixlake import DatabaseOps
from posixlake._authz import Permission
from posixlake.delta import DeltaLog
from posixlake.delta._rows import row_key
from posixlake.engines import LocalEngine
from posixlake.errors import (
    DuplicateKeyError,
    PermissionDenied,
    SchemaError,
    SerializationError,
)


def _bag(db: DatabaseOps) -> Counter[Any]:
    return _rows(db.to_arrow().to_pylist())


def _rows(rows: list[dict[str, Any]]) -> Counter[Any]:
    return Counter(tuple(row_key(r[c]) for c in sorted(r)) for r in rows)


@pytest.fixture
def plain(tmp_path: Path) -> DatabaseOps:
    db = DatabaseOps.create(
        tmp_path / "t", {"id": "Int64", "name": "String", "qty": "Float64"}, engine="local"
    )
    db.insert(
        [
            {"id": 1, "name": "a", "qty": 1.0},
            {"id": 1, "name": "a", "qty": 1.0},
            {"id": 1, "name": "a", "qty": 1.0},
            {"id": 2, "name": None, "qty": float("nan")},
            {"id": 3, "name": "c", "qty": -0.0},
        ]
    )
    return db


def test_deletes_one_copy_per_row_and_inserts_in_one_commit(plain: DatabaseOps) -> None:
    v = plain.version
    out = plain.replace_rows(
        delete=[{"id": 1, "name": "a", "qty": 1.0}], insert=[{"id": 4, "name": "d", "qty": 2.5}]
    )
    assert out == (1, 1)
    assert plain.version == v + 1
    assert _bag(plain) == _rows(
        [
            {"id": 1, "name": "a", "qty": 1.0},
            {"id": 1, "name": "a", "qty": 1.0},
            {"id": 2, "name": None, "qty": float("nan")},
            {"id": 3, "name": "c", "qty": -0.0},
            {"id": 4, "name": "d", "qty": 2.5},
        ]
    )
    history = plain.history(1)[0]
    assert history.parameters or history.operation  # a real commit


def test_null_nan_and_negative_zero_match_exactly(plain: DatabaseOps) -> None:
    v = plain.version
    assert plain.replace_rows(
        delete=[{"id": 2, "name": None, "qty": float("nan")}, {"id": 3, "name": "c", "qty": 0.0}],
        insert=[],
    ) == (1, 0)
    assert plain.version == v + 1
    left = plain.to_arrow().to_pylist()
    assert not any(r["id"] == 2 for r in left)
    assert next(r for r in left if r["id"] == 3)["qty"] == 0.0
    assert math.copysign(1.0, next(r for r in left if r["id"] == 3)["qty"]) == -1.0


def test_more_copies_than_present_and_missing_rows_are_skipped(plain: DatabaseOps) -> None:
    v = plain.version
    row = {"id": 1, "name": "a", "qty": 1.0}
    assert plain.replace_rows(
        delete=[row] * 5 + [{"id": 9, "name": "z", "qty": 0.0}], insert=[]
    ) == (
        3,
        0,
    )
    assert plain.version == v + 1
    assert plain.to_arrow().num_rows == 2


def test_noop_makes_no_commit(plain: DatabaseOps) -> None:
    v = plain.version
    assert plain.replace_rows(delete=[], insert=[]) == (0, 0)
    assert plain.replace_rows(delete=[{"id": 9, "name": "z", "qty": 0.0}], insert=[]) == (0, 0)
    assert plain.version == v


def test_insert_only_is_an_append(plain: DatabaseOps) -> None:
    v = plain.version
    assert plain.replace_rows(delete=[], insert=[{"id": 7, "name": "g", "qty": 7.0}]) == (0, 1)
    assert plain.version == v + 1
    assert plain.to_arrow().num_rows == 6


def test_nested_types(tmp_path: Path) -> None:
    schema = {
        "l": "List<Int64>",
        "m": "Map<String,Int64>",
        "s": "Struct<a:Int32,b:String>",
        "d": "Decimal128(10,2)",
        "ts": "Timestamp",
    }
    db = DatabaseOps.create(tmp_path / "n", schema, engine="local")
    a = {"l": [1, None], "m": [("k", 1)], "s": {"a": 1, "b": "x"}, "d": "1.50", "ts": None}
    b: dict[str, Any] = {"l": [], "m": [], "s": None, "d": None, "ts": "2024-01-02T03:04:05Z"}
    db.insert([a, a, b])
    v = db.version
    assert db.replace_rows(delete=[a, b], insert=[]) == (2, 0)
    assert db.version == v + 1
    got = db.to_arrow().to_pylist()
    assert len(got) == 1 and got[0]["l"] == [1, None] and got[0]["s"] == {"a": 1, "b": "x"}


def test_partitioned_table(tmp_path: Path) -> None:
    db = DatabaseOps.create(
        tmp_path / "p", {"day": "String", "v": "Int64"}, partition_by=["day"], engine="local"
    )
    db.insert([{"day": "a", "v": 1}, {"day": "b", "v": 1}, {"day": "b", "v": 2}])
    v = db.version
    assert db.replace_rows(delete=[{"day": "b", "v": 1}], insert=[{"day": "c", "v": 3}]) == (1, 1)
    assert db.version == v + 1
    assert sorted((r["day"], r["v"]) for r in db.to_arrow().to_pylist()) == [
        ("a", 1),
        ("b", 2),
        ("c", 3),
    ]


def test_primary_key_update_through_delete_and_insert(tmp_path: Path) -> None:
    db = DatabaseOps.create(
        tmp_path / "k", {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
    )
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    v = db.version
    assert db.replace_rows(delete=[{"id": 1, "name": "a"}], insert=[{"id": 1, "name": "A"}]) == (
        1,
        1,
    )
    assert db.version == v + 1
    assert sorted(r["name"] for r in db.to_arrow().to_pylist()) == ["A", "b"]
    with pytest.raises(DuplicateKeyError):
        db.replace_rows(delete=[], insert=[{"id": 2, "name": "again"}])
    with pytest.raises(DuplicateKeyError):
        db.replace_rows(delete=[], insert=[{"id": 5, "name": "x"}, {"id": 5, "name": "y"}])
    assert db.version == v + 1


@pytest.mark.parametrize(
    ("delete", "insert", "error"),
    [
        ('{"id": 1, "name": ', [], SerializationError),
        ([], [{"id": "one", "name": "a", "qty": 1.0}], SchemaError),
        ([], [{"id": 1, "nope": "a"}], SchemaError),
        ([{"id": 1.5, "name": "a", "qty": 1.0}], [], SchemaError),
        (42, [], SerializationError),
    ],
)
def test_bad_input_changes_nothing(
    plain: DatabaseOps, delete: Any, insert: Any, error: type[Exception]
) -> None:
    v, before = plain.version, _bag(plain)
    with pytest.raises(error):
        plain.replace_rows(delete=delete, insert=insert)
    assert plain.version == v
    assert _bag(plain) == before


def test_not_null_column_is_enforced(tmp_path: Path) -> None:
    db = DatabaseOps.create(
        tmp_path / "nn", {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
    )
    v = db.version
    with pytest.raises(SchemaError):
        db.replace_rows(delete=[], insert=[{"name": "no id"}])
    assert db.version == v


class _ReadOnly:
    user = "reader"

    def check(self, permission: Permission, operation: str) -> None:
        if permission != "read":
            raise PermissionDenied(f"{operation}: {permission} denied")

    def allows(self, permission: Permission) -> bool:
        return permission == "read"


def test_permission_denied(plain: DatabaseOps) -> None:
    ro = DatabaseOps(DeltaLog.open(plain.uri), engine=LocalEngine(), authorizer=_ReadOnly())
    v = plain.version
    with pytest.raises(PermissionDenied):
        ro.replace_rows(delete=[], insert=[{"id": 9, "name": "z", "qty": 0.0}])
    assert plain.version == v


_row = st.fixed_dictionaries(
    {
        "a": st.integers(0, 3),
        "b": st.one_of(
            st.none(),
            st.sampled_from(["x", "y", "z, w", 'q"']),
        ),
        "d": st.one_of(st.none(), st.dates(date(1999, 12, 30), date(2000, 1, 2))),
    }
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    start=st.lists(_row, max_size=12),
    delete=st.lists(_row, max_size=6),
    insert=st.lists(_row, max_size=6),
)
def test_matches_a_multiset_model(
    tmp_path_factory: pytest.TempPathFactory,
    start: list[dict[str, Any]],
    delete: list[dict[str, Any]],
    insert: list[dict[str, Any]],
) -> None:
    db = DatabaseOps.create(
        tmp_path_factory.mktemp("h") / "t",
        {"a": "Int64", "b": "String", "d": "Date32"},
        engine="local",
    )
    if start:
        db.insert(start)
    v = db.version
    model = _rows(start)
    removed = _rows(delete) & model
    deleted, inserted = db.replace_rows(delete=delete, insert=insert)
    model = model - removed + _rows(insert)
    assert (deleted, inserted) == (sum(removed.values()), len(insert))
    assert _bag(db) == model
    assert db.version == (v + 1 if (removed or insert) else v)


def test_key_mode_deletes_by_key_and_updates_in_one_commit(tmp_path: Path) -> None:
    db = DatabaseOps.create(
        tmp_path / "km",
        {"id": "Int64", "name": "String", "qty": "Int32"},
        primary_key="id",
        engine="local",
    )
    db.insert([{"id": i, "name": f"n{i}", "qty": i} for i in range(1, 6)])
    v = db.version
    out = db.replace_rows(
        # row 2's other columns differ from the table: the key decides
        delete=[{"id": 2, "name": "stale", "qty": 0}, {"id": 3}, {"id": 99}],
        insert=[{"id": 3, "name": "three", "qty": 33}, {"id": 6, "name": "n6", "qty": 6}],
        key="id",
    )
    assert out == (2, 2)
    assert db.version == v + 1
    got = {r["id"]: (r["name"], r["qty"]) for r in db.to_arrow().to_pylist()}
    assert got == {1: ("n1", 1), 3: ("three", 33), 4: ("n4", 4), 5: ("n5", 5), 6: ("n6", 6)}
    with pytest.raises(DuplicateKeyError):
        db.replace_rows(delete=[{"id": 1}], insert=[{"id": 4, "name": "x", "qty": 0}], key="id")
    with pytest.raises(SchemaError):
        db.replace_rows(delete=[{"id": 1}], insert=[], key="nope")
    assert db.replace_rows(delete=[{"id": 42}], insert=[], key=["id"]) == (0, 0)
    assert db.version == v + 1


def test_copies_in_several_files_and_rows_out_of_range_survive(tmp_path: Path) -> None:
    """The rows to match are read (and merged) within the ranges of the deleted rows'
    values: copies in other files are still found, and rows outside stay untouched."""
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "name": "String"}, engine="local")
    for start in (0, 100, 200):
        db.insert({"id": list(range(start, start + 100)), "name": ["x"] * 100})
    db.insert({"id": [150, 150], "name": ["x", "x"]})  # two more copies, in a fourth file
    deleted, inserted = db.replace_rows(
        delete={"id": [150, 150], "name": ["x", "x"]},
        insert={"id": [999], "name": ["new"]},
        require_present=True,
    )
    assert (deleted, inserted) == (2, 1)
    ids = Counter(db.to_arrow().column("id").to_pylist())
    assert ids[150] == 1 and ids[999] == 1 and ids[149] == 1 and ids[151] == 1
    assert sum(ids.values()) == 301  # 300 + 2 copies - 2 deleted + 1 inserted


@pytest.mark.parametrize("keyed", [False, True])
def test_scattered_rows_are_matched_within_narrow_ranges(tmp_path: Path, keyed: bool) -> None:
    """More values than an IN list takes: OR-ed ranges split at the widest gaps (including
    the int64 extremes) still find every row, and rows in the gaps stay untouched."""
    db = DatabaseOps.create(
        tmp_path / "t",
        {"id": "Int64", "name": "String"},
        engine="local",
        primary_key="id" if keyed else None,
    )
    extremes = [-(2**63), 2**63 - 1]
    clusters = [*range(-50, -30), *range(1000, 1010), *range(10**12, 10**12 + 15), *extremes]
    gaps = [-1000, 0, 500, 5000, 10**9]
    db.insert({"id": clusters + gaps, "name": ["x"] * (len(clusters) + len(gaps))})
    db.insert({"id": list(range(2000, 2100)), "name": ["y"] * 100})  # another file
    doomed = clusters[::2]
    deleted, inserted = db.replace_rows(
        delete={"id": doomed, "name": ["x"] * len(doomed)} if not keyed else {"id": doomed},
        insert={"id": [7], "name": ["new"]},
        key="id" if keyed else None,
    )
    assert (deleted, inserted) == (len(doomed), 1)
    ids = set(db.to_arrow().column("id").to_pylist())
    assert ids == (set(clusters) - set(doomed)) | set(gaps) | set(range(2000, 2100)) | {7}


def test_range_predicates_name_every_value_and_skip_the_gaps() -> None:
    import pyarrow as pa

    from posixlake.delta._rows import _ranges

    few = pa.table({"id": [5, 3, 5], "name": ["b", "a", "it's"]})
    assert _ranges(few, ["id", "name"]) == ['"id" IN (3, 5)', "\"name\" IN ('a', 'b', 'it''s')"]
    many = pa.table({"id": [*range(100), 10**6, *range(2 * 10**6, 2 * 10**6 + 20)]})
    (clause,) = _ranges(many, ["id"], "t.")
    assert clause.count(" OR ") == 2  # three clusters, three ranges
    assert '(t."id" >= 0 AND t."id" <= 99)' in clause
    assert '(t."id" >= 1000000 AND t."id" <= 1000000)' in clause
    strings = pa.table({"s": [f"v{i:02d}" for i in range(20)], "f": [1.5] * 20})
    assert _ranges(strings, ["s", "f"]) == ["\"s\" >= 'v00' AND \"s\" <= 'v19'"]
