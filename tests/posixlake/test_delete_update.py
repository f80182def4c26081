"""delete_rows_where() and update(): one commit, no commit when nothing matches, checked values."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.engines import Engine
from posixlake.errors import InvalidOperation, QueryError, SchemaError

SCHEMA = Schema(
    [
        Field("id", "Int64", False),
        Field("name", "String"),
        Field("qty", "Int32"),
        Field("price", "Decimal128(10,2)"),
        Field("day", "Date32"),
        Field("at", "Timestamp"),
        Field("ratio", "Float64"),
        Field("ok", "Boolean"),
        Field("raw", "Binary"),
        Field("big", "UInt64"),
        Field("tags", "List<String>"),
    ]
)


def make(path: Path, engine: Engine, **kw: Any) -> DatabaseOps:
    db = DatabaseOps.create(path / "t", SCHEMA, engine=engine, **kw)
    db.insert([{"id": i, "name": f"n{i}", "qty": i * 10} for i in range(1, 11)])
    return db


def col(db: DatabaseOps, name: str) -> list[Any]:
    return [r[0] for r in db.query(f"SELECT {name} FROM data ORDER BY id").fetchall()]


class TestDelete:
    def test_deletes_matching_rows_in_one_commit(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        assert db.delete_rows_where("id > 7 OR name = 'n1'") == 4
        assert db.version == 2
        assert col(db, "id") == [2, 3, 4, 5, 6, 7]
        assert db.history(1)[0].operation == "DELETE"

    def test_no_match_returns_zero_and_makes_no_commit(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = make(tmp_path, engine)
        assert db.delete_rows_where("id > 1000") == 0
        assert db.version == 1
        assert db.get_metrics().commits == 1

    def test_true_deletes_everything(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        assert db.delete_rows_where("true") == 10
        assert db.query("SELECT count(*) FROM data").scalar() == 0
        assert db.delete_rows_where("true") == 0
        assert db.version == 2

    def test_predicate_over_null_and_strings_with_quotes(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = make(tmp_path, engine)
        db.insert([{"id": 20, "name": "O'Brien"}, {"id": 21}])
        assert db.delete_rows_where("name = 'O''Brien'") == 1
        assert db.delete_rows_where("name IS NULL") == 1
        assert db.query("SELECT count(*) FROM data").scalar() == 10

    def test_delete_alias(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        assert db.delete("id = 3") == 1
        assert 3 not in col(db, "id")

    @pytest.mark.parametrize("predicate", ["", "   ", None, 5])
    def test_empty_or_non_text_predicate_raises(
        self, tmp_path: Path, engine: Engine, predicate: Any
    ) -> None:
        db = make(tmp_path, engine)
        with pytest.raises(QueryError):
            db.delete_rows_where(predicate)
        assert db.version == 1

    @pytest.mark.parametrize(
        "predicate", ["id === 1", "nope = 1", "id IN (", "name + 1", "SELECT 1"]
    )
    def test_bad_sql_raises_query_error_and_changes_nothing(
        self, tmp_path: Path, engine: Engine, predicate: str
    ) -> None:
        db = make(tmp_path, engine)
        with pytest.raises(QueryError):
            db.delete_rows_where(predicate)
        assert db.version == 1
        assert col(db, "id") == list(range(1, 11))

    def test_delete_counts_in_metrics(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        db.delete_rows_where("id <= 3")
        m = db.get_metrics()
        assert (m.deletes, m.rows_deleted) == (1, 3)


class TestUpdate:
    def test_values_on_matching_rows(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        assert db.update("id <= 2", {"name": "X", "qty": 0}) == 2
        assert db.version == 2
        assert col(db, "name")[:3] == ["X", "X", "n3"]
        assert col(db, "qty")[:3] == [0, 0, 30]
        assert db.history(1)[0].operation == "UPDATE"

    def test_no_predicate_updates_every_row(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        assert db.update(None, {"ok": True}) == 10
        assert set(col(db, "ok")) == {True}

    def test_no_match_makes_no_commit(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        assert db.update("id = 999", {"name": "x"}) == 0
        assert db.version == 1

    def test_expressions(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        assert db.update("id = 1", expressions={"qty": "qty + 1", "name": "upper(name)"}) == 1
        assert db.query("SELECT name, qty FROM data WHERE id = 1").fetchone() == ("N1", 11)

    @pytest.mark.parametrize(
        ("column", "value", "expected"),
        [
            ("name", "O'Brien", "O'Brien"),
            ("name", None, None),
            ("qty", -5, -5),
            ("price", Decimal("12.30"), Decimal("12.30")),
            ("price", 7, Decimal("7.00")),
            ("price", 1.5, Decimal("1.50")),
            ("day", date(2024, 2, 29), date(2024, 2, 29)),
            ("day", "2024-03-01", date(2024, 3, 1)),
            (
                "at",
                datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
                datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
            ),
            ("ratio", 0.1, 0.1),
            ("ratio", float("inf"), float("inf")),
            ("ratio", -1e300, -1e300),
            ("ok", False, False),
            ("raw", b"\x00\xff'", b"\x00\xff'"),
            ("big", 2**64 - 1, Decimal(2**64 - 1)),
        ],
    )
    def test_literal_values_of_every_type(
        self, tmp_path: Path, engine: Engine, column: str, value: Any, expected: Any
    ) -> None:
        db = make(tmp_path, engine)
        assert db.update("id = 1", {column: value}) == 1
        assert col(db, column)[0] == expected

    def test_nan(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        db.update("id = 1", {"ratio": float("nan")})
        got = col(db, "ratio")[0]
        assert got != got

    @pytest.mark.parametrize(
        ("values", "error"),
        [
            ({"nope": 1}, SchemaError),
            ({"qty": "ten"}, SchemaError),
            ({"qty": 1.5}, SchemaError),
            ({"qty": 2**40}, SchemaError),
            ({"price": 1.005}, SchemaError),
            ({"price": Decimal("123456789.12")}, SchemaError),
            ({"ok": 1}, SchemaError),
            ({"day": "not a date"}, SchemaError),
            ({"id": None}, SchemaError),  # NOT NULL
            ({"tags": ["a"]}, InvalidOperation),  # nested: use expressions=
            ({}, InvalidOperation),
        ],
    )
    def test_bad_values_raise_and_change_nothing(
        self, tmp_path: Path, engine: Engine, values: dict[str, Any], error: type[Exception]
    ) -> None:
        db = make(tmp_path, engine)
        before = db.query("SELECT * FROM data ORDER BY id").to_pylist()
        with pytest.raises(error):
            db.update("id = 1", values)
        assert db.version == 1
        assert db.query("SELECT * FROM data ORDER BY id").to_pylist() == before

    @pytest.mark.parametrize(
        ("predicate", "expressions"),
        [
            ("id ==== 1", None),
            ("nope = 1", None),
            ("id = 1", {"qty": "qty +"}),
            ("id = 1", {"qty": "nope + 1"}),
        ],
    )
    def test_bad_sql_raises_query_error(
        self,
        tmp_path: Path,
        engine: Engine,
        predicate: str,
        expressions: dict[str, str] | None,
    ) -> None:
        db = make(tmp_path, engine)
        with pytest.raises(QueryError):
            if expressions:
                db.update(predicate, expressions=expressions)
            else:
                db.update(predicate, {"name": "x"})
        assert db.version == 1

    def test_primary_key_columns_cannot_be_updated(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, primary_key="id")
        with pytest.raises(InvalidOperation, match="primary key"):
            db.update("id = 1", {"id": 100})
        with pytest.raises(InvalidOperation, match="primary key"):
            db.update("id = 1", expressions={"id": "id + 100"})
        assert db.version == 1

    def test_updates_count_in_metrics(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        db.update("id < 4", {"qty": 1})
        m = db.get_metrics()
        assert m.updates == 1
        assert m.rows_written == 10 + 3


def test_truncate_removes_every_row_in_one_commit(tmp_path: Path, engine: Engine) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "name": "String"}, engine=engine)
    db.insert([{"id": i, "name": str(i)} for i in range(5)])
    db.insert({"id": 9, "name": "x"})
    version = db.version
    assert db.truncate() == 6
    assert db.version == version + 1
    assert db.query("SELECT count(*) FROM data").scalar() == 0
    assert db.query("SELECT count(*) FROM data", version=version).scalar() == 6
    assert db.truncate() == 0  # already empty: no commit
    assert db.version == version + 1
