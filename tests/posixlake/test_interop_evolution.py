"""Schema evolution: add_columns and insert(..., schema_mode="merge"), one commit, both engines."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.engines import Engine
from posixlake.errors import InvalidOperation, SchemaError, UnsupportedTableFeature
from tests.posixlake.interop_tables import KINDS, reference, sort_rows


def _table(tmp_path: Path, engine: Engine) -> DatabaseOps:
    db = DatabaseOps.create(
        str(tmp_path / "t"),
        Schema([Field("id", "Int64", nullable=False), Field("name", "String")], primary_key="id"),
        engine=engine,
    )
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    return db


def test_add_columns(tmp_path: Path, engine: Engine) -> None:
    db = _table(tmp_path, engine)
    before = db.version
    version = db.add_columns({"age": "Int32", "tags": "List<String>", "price": "Decimal128(10,2)"})
    assert version == db.version == before + 1
    assert db.get_schema().to_arrow().names == ["id", "name", "age", "tags", "price"]
    db.insert({"id": 3, "name": "c", "age": 30, "tags": ["x"]})
    rows = db.query("SELECT id, age, tags, price FROM data ORDER BY id").fetchall()
    assert rows == [(1, None, None, None), (2, None, None, None), (3, 30, ["x"], None)]
    assert sort_rows(db.query("SELECT * FROM data").to_pylist()) == reference(db.uri)
    with pytest.raises(SchemaError, match="exist"):
        db.add_columns({"age": "Int64"})


def test_insert_schema_merge(tmp_path: Path, engine: Engine) -> None:
    db = _table(tmp_path, engine)
    before = db.version
    assert (
        db.insert([{"id": 3, "name": "c", "city": "Oslo", "score": 1.5}], schema_mode="merge") == 1
    )
    assert db.version == before + 1  # rows and new columns in ONE commit
    schema = db.get_schema().to_arrow()
    assert schema.names == ["id", "name", "city", "score"]
    assert schema.field("city").nullable and schema.field("city").type == pa.string()
    rows = db.query("SELECT id, city, score FROM data ORDER BY id").fetchall()
    assert rows == [(1, None, None), (2, None, None), (3, "Oslo", 1.5)]
    # no new column: a plain insert, still checked against the schema
    assert db.insert({"id": 4, "city": "Rome"}, schema_mode="merge") == 1
    with pytest.raises(SchemaError):
        db.insert({"id": 5, "score": "not a number"}, schema_mode="merge")
    assert sort_rows(db.query("SELECT * FROM data").to_pylist()) == reference(db.uri)


def test_evolution_of_column_mapped_table_is_refused_by_name(
    tmp_path: Path, engine: Engine
) -> None:
    """delta-rs cannot add columns to a column-mapped table (it would need physical names)."""
    uri = KINDS["column-mapping-name"](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    before = reference(uri)
    with pytest.raises(UnsupportedTableFeature, match="columnMapping"):
        db.insert({"id": 7, "extra col": "e"}, schema_mode="merge")
    with pytest.raises(UnsupportedTableFeature, match="columnMapping"):
        db.add_columns({"extra col": "String"})
    assert reference(uri) == before
    db.insert({"id": 7}, schema_mode="merge")  # no new column: a plain insert
    assert sort_rows(db.query("SELECT * FROM data").to_pylist()) == reference(uri)


def test_schema_merge_of_files_is_refused_clearly(tmp_path: Path, engine: Engine) -> None:
    db = _table(tmp_path, engine)
    path = tmp_path / "more.csv"
    path.write_text("id,name,city\n5,e,Oslo\n")
    with pytest.raises(InvalidOperation, match="add_columns first"):
        db.insert(str(path), schema_mode="merge")
    db.add_columns({"city": "String"})
    assert db.insert(str(path)) == 1
    assert db.query("SELECT city FROM data WHERE id = 5").scalar() == "Oslo"
