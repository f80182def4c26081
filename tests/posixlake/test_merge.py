"""merge(): INSERT / UPDATE / DELETE rows in ONE commit, partial updates, skipped rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from posixlake import DatabaseOps, Field, MergeMetrics, Schema
from posixlake.engines import Engine
from posixlake.errors import (
    DuplicateKeyError,
    InvalidOperation,
    SchemaError,
    SerializationError,
)

SCHEMA = Schema(
    [Field("id", "Int64", False), Field("name", "String"), Field("score", "Float64")],
    primary_key="id",
)
START = [
    {"id": 1, "name": "ann", "score": 1.0},
    {"id": 2, "name": "bob", "score": 2.0},
    {"id": 3, "name": "cat", "score": 3.0},
]


def make(path: Path, engine: Engine, schema: Schema = SCHEMA, rows: Any = START) -> DatabaseOps:
    db = DatabaseOps.create(path / "t", schema, engine=engine)
    if rows:
        db.insert(rows)
    return db


def table_rows(db: DatabaseOps) -> list[dict[str, Any]]:
    return db.query("SELECT * FROM data ORDER BY id").to_pylist()


def test_insert_update_delete_in_one_commit(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    m = db.merge(
        [
            {"_op": "INSERT", "id": 4, "name": "dan", "score": 4.0},
            {"_op": "UPDATE", "id": 2, "name": "BOB", "score": 20.0},
            {"_op": "DELETE", "id": 3},
        ]
    )
    assert m == MergeMetrics(1, 1, 1, 0, 2)
    assert m.total_affected == 3
    assert db.version == 2
    assert table_rows(db) == [
        START[0],
        {"id": 2, "name": "BOB", "score": 20.0},
        {"id": 4, "name": "dan", "score": 4.0},
    ]
    assert db.history(1)[0].operation == "MERGE"


def test_update_sets_only_the_columns_it_carries(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.merge(
        [
            {"_op": "UPDATE", "id": 1, "name": "ANN"},
            {"_op": "UPDATE", "id": 2, "score": 22.0},
            {"_op": "UPDATE", "id": 3, "name": None},  # explicit NULL is a value
        ]
    )
    assert table_rows(db) == [
        {"id": 1, "name": "ANN", "score": 1.0},
        {"id": 2, "name": "bob", "score": 22.0},
        {"id": 3, "name": None, "score": 3.0},
    ]


def test_insert_leaves_absent_nullable_columns_null(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.merge([{"_op": "INSERT", "id": 9}])
    assert table_rows(db)[-1] == {"id": 9, "name": None, "score": None}


def test_delete_rows_need_only_the_key(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    m = db.merge('[{"_op": "DELETE", "id": 1}, {"_op": "DELETE", "id": 2}]')
    assert (m.rows_deleted, m.total_affected) == (2, 2)
    assert [r["id"] for r in table_rows(db)] == [3]


@pytest.mark.parametrize("op", ["insert", " Insert ", "INSERT"])
def test_op_is_case_and_space_insensitive(tmp_path: Path, engine: Engine, op: str) -> None:
    db = make(tmp_path, engine)
    assert db.merge([{"_op": op, "id": 7}]).rows_inserted == 1


class TestSkippedRows:
    """UPDATE/DELETE of a missing key and INSERT of an existing key: counted, never silent."""

    def test_counted_in_rows_skipped(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        m = db.merge(
            [
                {"_op": "INSERT", "id": 1, "name": "clash"},
                {"_op": "UPDATE", "id": 99, "name": "ghost"},
                {"_op": "DELETE", "id": 98},
                {"_op": "UPDATE", "id": 2, "name": "ok"},
            ]
        )
        assert m == MergeMetrics(0, 1, 0, 3, 2)
        assert m.to_dict() == {
            "rows_inserted": 0,
            "rows_updated": 1,
            "rows_deleted": 0,
            "rows_skipped": 3,
            "total_affected": 1,
            "version": 2,
        }
        assert table_rows(db)[0] == START[0]  # the INSERT of an existing key changed nothing
        assert not any(r["id"] in (98, 99) for r in table_rows(db))

    def test_nothing_applies_makes_no_commit(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        m = db.merge([{"_op": "UPDATE", "id": 50, "name": "x"}, {"_op": "INSERT", "id": 1}])
        assert m == MergeMetrics(0, 0, 0, 2, None)
        assert db.version == 1

    def test_strict_raises_and_commits_nothing(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        with pytest.raises(InvalidOperation, match="do not apply") as info:
            db.merge(
                [{"_op": "UPDATE", "id": 2, "name": "fine"}, {"_op": "UPDATE", "id": 99}],
                strict=True,
            )
        assert "99" in str(info.value)
        with pytest.raises(InvalidOperation):
            db.merge([{"_op": "INSERT", "id": 3}], strict=True)
        assert db.version == 1
        assert table_rows(db) == START

    def test_strict_passes_when_every_row_applies(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        m = db.merge(
            [{"_op": "UPDATE", "id": 2, "name": "x"}, {"_op": "INSERT", "id": 5}], strict=True
        )
        assert (m.rows_updated, m.rows_inserted, m.rows_skipped) == (1, 1, 0)


def test_same_key_twice_raises(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    with pytest.raises(InvalidOperation, match="more than once"):
        db.merge([{"_op": "UPDATE", "id": 1}, {"_op": "DELETE", "id": 1}])
    assert db.version == 1


def test_empty_merge_makes_no_commit(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    assert db.merge([]) == MergeMetrics(0, 0, 0, 0, None)
    assert db.merge("[]").total_affected == 0
    assert db.version == 1


class TestKeys:
    def test_merge_without_any_key_raises(self, tmp_path: Path, engine: Engine) -> None:
        schema = Schema([Field("id", "Int64"), Field("name", "String")])
        db = make(tmp_path, engine, schema, rows=[{"id": 1}])
        with pytest.raises(InvalidOperation, match="needs a key"):
            db.merge([{"_op": "DELETE", "id": 1}])
        m = db.merge([{"_op": "UPDATE", "id": 1, "name": "x"}], key="id")
        assert m.rows_updated == 1

    def test_key_option_overrides_the_primary_key(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        m = db.merge([{"_op": "UPDATE", "name": "bob", "score": 0.5}], key="name")
        assert m.rows_updated == 1
        assert table_rows(db)[1] == {"id": 2, "name": "bob", "score": 0.5}

    def test_merge_on_another_key_keeps_the_primary_key_unique(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = make(tmp_path, engine)
        with pytest.raises(DuplicateKeyError):
            db.merge([{"_op": "INSERT", "id": 1, "name": "new name"}], key="name")
        with pytest.raises(DuplicateKeyError):
            db.merge([{"_op": "UPDATE", "name": "bob", "id": 3}], key="name")
        # moving a key is fine when the old holder leaves in the same merge
        m = db.merge(
            [{"_op": "UPDATE", "name": "bob", "id": 30}, {"_op": "DELETE", "name": "ann"}],
            key="name",
        )
        assert (m.rows_updated, m.rows_deleted) == (1, 1)
        assert [r["id"] for r in table_rows(db)] == [3, 30]
        assert db.version == 2

    def test_composite_key(self, tmp_path: Path, engine: Engine) -> None:
        schema = Schema(
            [Field("a", "Int64"), Field("b", "String"), Field("v", "Int64")], primary_key=["a", "b"]
        )
        db = make(
            tmp_path, engine, schema, rows=[{"a": 1, "b": "x", "v": 1}, {"a": 1, "b": "y", "v": 2}]
        )
        m = db.merge(
            [
                {"_op": "UPDATE", "a": 1, "b": "y", "v": 20},
                {"_op": "DELETE", "a": 1, "b": "x"},
                {"_op": "INSERT", "a": 2, "b": "x", "v": 3},
                {"_op": "UPDATE", "a": 2, "b": "y", "v": 0},
            ]
        )
        assert m == MergeMetrics(1, 1, 1, 1, 2)
        assert db.query("SELECT a, b, v FROM data ORDER BY a, b").fetchall() == [
            (1, "y", 20),
            (2, "x", 3),
        ]

    def test_unknown_key_column_raises(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        with pytest.raises(SchemaError, match="'zz'"):
            db.merge([{"_op": "DELETE", "id": 1}], key="zz")

    def test_rows_without_the_key_raise(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        with pytest.raises(SchemaError, match="key column 'id'"):
            db.merge([{"_op": "UPDATE", "name": "x"}])
        assert db.version == 1


class TestPayloads:
    def test_columnar_dict(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        m = db.merge({"_op": ["UPDATE", "INSERT"], "id": [1, 8], "name": ["A", "H"]})
        assert (m.rows_updated, m.rows_inserted) == (1, 1)
        # columnar input carries each column for every row: the update sets score to NULL
        # only where it is given; here score is absent, so it keeps its value
        assert table_rows(db)[0] == {"id": 1, "name": "A", "score": 1.0}

    def test_arrow_table_and_pandas(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        t = pa.table({"_op": ["UPDATE"], "id": pa.array([2], pa.int64()), "score": [0.0]})
        assert db.merge(t).rows_updated == 1
        df = pd.DataFrame({"_op": ["DELETE", "INSERT"], "id": [3, 10], "name": [None, "ten"]})
        m = db.merge(df)
        assert (m.rows_deleted, m.rows_inserted) == (1, 1)
        assert table_rows(db) == [
            START[0],
            {"id": 2, "name": "bob", "score": 0.0},
            {"id": 10, "name": "ten", "score": None},
        ]

    def test_json_lines(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        text = '{"_op": "UPDATE", "id": 1, "score": 9}\n{"_op": "DELETE", "id": 2}\n'
        m = db.merge(text)
        assert (m.rows_updated, m.rows_deleted) == (1, 1)
        assert table_rows(db)[0] == {"id": 1, "name": "ann", "score": 9.0}


class TestValidation:
    @pytest.mark.parametrize(
        ("rows", "error"),
        [
            ('[{"_op": "INSERT", "id": 1', SerializationError),
            ([{"_op": "UPSERT", "id": 1}], SerializationError),
            ([{"id": 1}], SerializationError),
            ([{"_op": None, "id": 1}], SerializationError),
            ([{"_op": "INSERT", "id": "x"}], SchemaError),
            ([{"_op": "INSERT", "id": 5, "nope": 1}], SchemaError),
            ([{"_op": "UPDATE", "id": 1, "score": "high"}], SchemaError),
            ([5], SerializationError),
        ],
    )
    def test_bad_rows_raise_and_commit_nothing(
        self, tmp_path: Path, engine: Engine, rows: Any, error: type[Exception]
    ) -> None:
        db = make(tmp_path, engine)
        with pytest.raises(error):
            db.merge(rows)
        assert db.version == 1
        assert table_rows(db) == START

    def test_not_null_columns(self, tmp_path: Path, engine: Engine) -> None:
        schema = Schema(
            [Field("id", "Int64"), Field("name", "String", False), Field("n", "Int64")],
            primary_key="id",
        )
        db = make(tmp_path, engine, schema, rows=[{"id": 1, "name": "a"}])
        with pytest.raises(SchemaError, match="'name'"):
            db.merge([{"_op": "INSERT", "id": 2}])
        with pytest.raises(SchemaError, match="'name'"):
            db.merge([{"_op": "UPDATE", "id": 1, "name": None}])
        # an UPDATE that does not carry the NOT NULL column keeps it
        assert db.merge([{"_op": "UPDATE", "id": 1, "n": 5}]).rows_updated == 1
        assert db.query("SELECT name, n FROM data").fetchall() == [("a", 5)]


def test_merge_json_alias_returns_metrics_as_json(tmp_path: Path, engine: Engine) -> None:
    schema = Schema([Field("id", "Int64"), Field("name", "String")])
    db = make(tmp_path, engine, schema, rows=[{"id": 1, "name": "a"}])
    out = json.loads(
        db.merge_json(
            json.dumps([{"_op": "UPDATE", "id": 1, "name": "b"}, {"_op": "INSERT", "id": 2}]),
            "id",
        )
    )
    assert out == {
        "rows_inserted": 1,
        "rows_updated": 1,
        "rows_deleted": 0,
        "rows_skipped": 0,
        "total_affected": 2,
        "version": 2,
    }


def test_a_large_merge(tmp_path: Path, engine: Engine) -> None:
    n = 10_000
    db = make(
        tmp_path, engine, rows=[{"id": i, "name": f"n{i}", "score": float(i)} for i in range(n)]
    )
    rows = [{"_op": "UPDATE", "id": i, "score": -1.0} for i in range(0, n, 10)]
    rows += [{"_op": "DELETE", "id": i} for i in range(5, n, 10)]
    rows += [{"_op": "INSERT", "id": n + i, "name": "new"} for i in range(1000)]
    m = db.merge(rows)
    assert (m.rows_updated, m.rows_deleted, m.rows_inserted) == (1000, 1000, 1000)
    assert db.version == 2
    assert db.query(
        "SELECT count(*), sum(CASE WHEN score = -1 THEN 1 ELSE 0 END) FROM data"
    ).fetchone() == (n, 1000)


def test_merges_then_inserts_see_the_right_keys(tmp_path: Path, engine: Engine) -> None:
    # the in-memory key index follows merges incrementally
    db = make(tmp_path, engine)
    db.merge([{"_op": "DELETE", "id": 1}, {"_op": "INSERT", "id": 4}])
    db.insert({"id": 1})
    with pytest.raises(DuplicateKeyError):
        db.insert({"id": 4})
    db.merge([{"_op": "DELETE", "id": 4}])
    db.insert({"id": 4})
    assert [r["id"] for r in table_rows(db)] == [1, 2, 3, 4]


def test_metrics_count_merges(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.merge([{"_op": "UPDATE", "id": 1, "name": "x"}, {"_op": "DELETE", "id": 2}])
    m = db.get_metrics()
    assert (m.merges, m.rows_deleted) == (1, 1)
    assert m.rows_written == 3 + 1  # the initial insert and the update
