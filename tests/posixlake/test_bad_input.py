"""The bad-input matrix: every public write, every kind of bad input.

Each case checks the documented error class AND that the table's version and rows are
unchanged (read through a fresh handle, so no cache can hide a commit). The categories:
malformed JSON, wrong type, missing non-nullable column, unknown column, bad SQL, and a
missing table path. A category that does not apply to a write (there is no SQL in an
insert) has no case for it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.engines import Engine
from posixlake.errors import (
    AlreadyExists,
    DuplicateKeyError,
    InvalidOperation,
    IoError,
    NotFound,
    PosixLakeError,
    QueryError,
    SchemaError,
    SerializationError,
)

SCHEMA = Schema(
    [Field("id", "Int64"), Field("name", "String", False), Field("score", "Float64")],
    primary_key="id",
)
SEED = [
    {"id": 1, "name": "ann", "score": 1.0},
    {"id": 2, "name": "bob", "score": None},
    {"id": 3, "name": "cat", "score": 3.5},
]

Call = Callable[[DatabaseOps], object]


def untyped(value: object) -> Any:
    """Pass a value of the wrong type on purpose (what an untyped caller can do)."""
    return value


def state(db: DatabaseOps, engine: Engine) -> tuple[int, list[dict[str, Any]]]:
    fresh = DatabaseOps.open(db.uri, engine=engine)
    rows = fresh.query("SELECT * FROM data ORDER BY id").to_pylist()
    return fresh.version, rows


@pytest.fixture
def db(tmp_path: Path, engine: Engine) -> DatabaseOps:
    d = DatabaseOps.create(tmp_path / "t", SCHEMA, engine=engine)
    d.insert(SEED)
    return d


def _buffered(payload: Any) -> Call:
    def call(db: DatabaseOps) -> object:
        try:
            return db.insert_buffered(payload)
        finally:
            assert db.buffered_rows == 0  # the bad rows were not buffered
            assert db.flush() == 0

    return call


MALFORMED = '[{"id": 9, "name": "x"'
WRONG_TYPE = {"id": "nine", "name": "x"}
MISSING_NOT_NULL = {"id": 9, "score": 1.0}  # no name
UNKNOWN_COLUMN = {"id": 9, "name": "x", "colour": "red"}

CASES: list[tuple[str, str, Call, type[PosixLakeError]]] = [
    # insert (and its original name)
    ("insert", "malformed JSON", lambda d: d.insert(MALFORMED), SerializationError),
    ("insert", "malformed JSON lines", lambda d: d.insert('{"id": 9}\n{"id":'), SerializationError),
    ("insert", "malformed CSV", lambda d: d.insert("id,name\n9,x,extra\n"), SerializationError),
    ("insert", "not a payload", lambda d: d.insert(42), SerializationError),
    (
        "insert",
        "row is not an object",
        lambda d: d.insert([{"id": 9, "name": "x"}, 7]),
        SerializationError,
    ),
    ("insert", "wrong type", lambda d: d.insert(WRONG_TYPE), SchemaError),
    ("insert", "wrong type in JSON", lambda d: d.insert('{"id": 1.5, "name": "x"}'), SchemaError),
    ("insert", "value too large", lambda d: d.insert({"id": 2**64, "name": "x"}), SchemaError),
    ("insert", "missing non-nullable column", lambda d: d.insert(MISSING_NOT_NULL), SchemaError),
    (
        "insert",
        "NULL in a non-nullable column",
        lambda d: d.insert({"id": 9, "name": None}),
        SchemaError,
    ),
    ("insert", "unknown column", lambda d: d.insert(UNKNOWN_COLUMN), SchemaError),
    ("insert", "existing key", lambda d: d.insert({"id": 1, "name": "again"}), DuplicateKeyError),
    (
        "insert",
        "one bad row of many",
        lambda d: d.insert([{"id": 10 + i, "name": "x"} for i in range(50)] + [WRONG_TYPE]),
        SchemaError,
    ),
    ("insert_json", "malformed JSON", lambda d: d.insert_json(MALFORMED), SerializationError),
    ("insert_json", "wrong type", lambda d: d.insert_json(json.dumps(WRONG_TYPE)), SchemaError),
    (
        "insert_json",
        "missing non-nullable column",
        lambda d: d.insert_json(json.dumps(MISSING_NOT_NULL)),
        SchemaError,
    ),
    (
        "insert_json",
        "unknown column",
        lambda d: d.insert_json(json.dumps(UNKNOWN_COLUMN)),
        SchemaError,
    ),
    # insert_buffered (and its original name): rejected at the call, never buffered
    ("insert_buffered", "malformed JSON", _buffered(MALFORMED), SerializationError),
    ("insert_buffered", "wrong type", _buffered(WRONG_TYPE), SchemaError),
    ("insert_buffered", "missing non-nullable column", _buffered(MISSING_NOT_NULL), SchemaError),
    ("insert_buffered", "unknown column", _buffered(UNKNOWN_COLUMN), SchemaError),
    ("insert_buffered", "existing key", _buffered({"id": 2, "name": "x"}), DuplicateKeyError),
    (
        "insert_buffered_json",
        "malformed JSON",
        lambda d: d.insert_buffered_json(MALFORMED),
        SerializationError,
    ),
    (
        "insert_buffered_json",
        "wrong type",
        lambda d: d.insert_buffered_json(json.dumps(WRONG_TYPE)),
        SchemaError,
    ),
    # merge (and its original name)
    (
        "merge",
        "malformed JSON",
        lambda d: d.merge('[{"_op": "INSERT", "id": 9'),
        SerializationError,
    ),
    ("merge", "missing _op", lambda d: d.merge([{"id": 9, "name": "x"}]), SerializationError),
    ("merge", "unknown _op", lambda d: d.merge([{"_op": "REPLACE", "id": 1}]), SerializationError),
    (
        "merge",
        "wrong type",
        lambda d: d.merge([{"_op": "UPDATE", "id": 1, "score": "high"}]),
        SchemaError,
    ),
    (
        "merge",
        "missing non-nullable column",
        lambda d: d.merge([{"_op": "INSERT", "id": 9}]),
        SchemaError,
    ),
    (
        "merge",
        "NULL into a non-nullable column",
        lambda d: d.merge([{"_op": "UPDATE", "id": 1, "name": None}]),
        SchemaError,
    ),
    (
        "merge",
        "unknown column",
        lambda d: d.merge([{"_op": "INSERT", "id": 9, "name": "x", "colour": 1}]),
        SchemaError,
    ),
    (
        "merge",
        "row without the key",
        lambda d: d.merge([{"_op": "DELETE", "name": "ann"}]),
        SchemaError,
    ),
    (
        "merge",
        "unknown key column",
        lambda d: d.merge([{"_op": "DELETE", "id": 1}], key="id = 1"),
        SchemaError,
    ),
    (
        "merge",
        "key of the wrong type",
        lambda d: d.merge([{"_op": "DELETE", "id": 1}], key=untyped(5)),
        SchemaError,
    ),
    (
        "merge",
        "a key twice",
        lambda d: d.merge([{"_op": "DELETE", "id": 1}, {"_op": "UPDATE", "id": 1}]),
        InvalidOperation,
    ),
    (
        "merge",
        "strict with a skipped row",
        lambda d: d.merge(
            [{"_op": "DELETE", "id": 1}, {"_op": "UPDATE", "id": 99, "name": "x"}], strict=True
        ),
        InvalidOperation,
    ),
    ("merge_json", "malformed JSON", lambda d: d.merge_json('[{"_op":', "id"), SerializationError),
    (
        "merge_json",
        "wrong type",
        lambda d: d.merge_json('[{"_op": "INSERT", "id": "x", "name": "y"}]', "id"),
        SchemaError,
    ),
    (
        "merge_json",
        "unknown key column",
        lambda d: d.merge_json('[{"_op": "DELETE", "id": 1}]', "nope"),
        SchemaError,
    ),
    # delete_rows_where (and delete)
    ("delete_rows_where", "bad SQL", lambda d: d.delete_rows_where("id = = 1"), QueryError),
    (
        "delete_rows_where",
        "unknown column",
        lambda d: d.delete_rows_where("colour = 'red'"),
        QueryError,
    ),
    ("delete_rows_where", "wrong type", lambda d: d.delete_rows_where("id = 'one'"), QueryError),
    (
        "delete_rows_where",
        "not a predicate",
        lambda d: d.delete_rows_where("name || 'x'"),
        QueryError,
    ),
    ("delete_rows_where", "empty predicate", lambda d: d.delete_rows_where(""), QueryError),
    (
        "delete_rows_where",
        "predicate of the wrong type",
        lambda d: d.delete_rows_where(untyped(7)),
        QueryError,
    ),
    ("delete", "bad SQL", lambda d: d.delete("DROP TABLE data"), QueryError),
    # update
    ("update", "malformed JSON", lambda d: d.update("id = 1", '{"name": "x'), SerializationError),
    (
        "update",
        "values not a mapping",
        lambda d: d.update("id = 1", untyped([("name", "x")])),
        SerializationError,
    ),
    ("update", "wrong type", lambda d: d.update("id = 1", {"score": "high"}), SchemaError),
    (
        "update",
        "NULL into a non-nullable column",
        lambda d: d.update("id = 1", {"name": None}),
        SchemaError,
    ),
    ("update", "unknown column", lambda d: d.update("id = 1", {"colour": "red"}), SchemaError),
    ("update", "bad SQL predicate", lambda d: d.update("id = = 1", {"name": "x"}), QueryError),
    (
        "update",
        "unknown column in the predicate",
        lambda d: d.update("colour = 1", {"name": "x"}),
        QueryError,
    ),
    (
        "update",
        "bad SQL expression",
        lambda d: d.update("id = 1", expressions={"score": "score +"}),
        QueryError,
    ),
    (
        "update",
        "expression of the wrong type",
        lambda d: d.update("id = 1", expressions={"score": "name"}),
        QueryError,
    ),
    (
        "update",
        "expression not text",
        lambda d: d.update("id = 1", expressions=untyped({"score": 5})),
        QueryError,
    ),
    (
        "update",
        "expression NULL into a non-nullable column",
        lambda d: d.update("id = 1", expressions={"name": "NULL"}),
        SchemaError,
    ),
    ("update", "primary key column", lambda d: d.update("id = 1", {"id": 10}), InvalidOperation),
    ("update", "nothing to set", lambda d: d.update("id = 1", {}), InvalidOperation),
    # set_primary_key
    ("set_primary_key", "unknown column", lambda d: d.set_primary_key("colour"), SchemaError),
    ("set_primary_key", "wrong type", lambda d: d.set_primary_key(untyped(5)), SchemaError),
    (
        "set_primary_key",
        "column with NULLs",
        lambda d: d.set_primary_key("score"),
        InvalidOperation,
    ),
    (
        "set_primary_key",
        "column with duplicates",
        lambda d: d.set_primary_key("name"),
        InvalidOperation,
    ),
]

# extra rows a case needs before the bad call (part of the state it must leave unchanged)
SETUP: dict[str, list[dict[str, Any]]] = {"column with duplicates": [{"id": 4, "name": "ann"}]}


@pytest.mark.parametrize(
    ("write", "case", "call", "error"),
    CASES,
    ids=[f"{w}: {c}" for w, c, _, _ in CASES],
)
def test_bad_input_raises_and_changes_nothing(
    db: DatabaseOps,
    engine: Engine,
    write: str,
    case: str,
    call: Call,
    error: type[PosixLakeError],
) -> None:
    if case in SETUP:
        db.insert(SETUP[case])
    before = state(db, engine)
    with pytest.raises(error):
        call(db)
    assert state(db, engine) == before
    assert db.version == before[0]
    assert db.primary_key() == "id"
    # the handle still works after the error
    db.insert({"id": 100, "name": "after"})
    assert db.version == before[0] + 1


WRITES_ON_A_MISSING_TABLE: list[tuple[str, Call]] = [
    ("insert", lambda d: d.insert({"id": 9, "name": "x"})),
    ("insert_json", lambda d: d.insert_json('{"id": 9, "name": "x"}')),
    ("merge", lambda d: d.merge([{"_op": "INSERT", "id": 9, "name": "x"}])),
    ("merge_json", lambda d: d.merge_json('[{"_op": "DELETE", "id": 1}]', "id")),
    ("delete_rows_where", lambda d: d.delete_rows_where("id = 1")),
    ("update", lambda d: d.update("id = 1", {"name": "x"})),
    ("set_primary_key", lambda d: d.set_primary_key("name")),
    ("query", lambda d: d.query("SELECT * FROM data")),
    ("optimize", lambda d: d.optimize()),
    ("vacuum", lambda d: d.vacuum()),
    ("history", lambda d: d.history()),
]


@pytest.mark.parametrize(
    ("write", "call"), WRITES_ON_A_MISSING_TABLE, ids=[w for w, _ in WRITES_ON_A_MISSING_TABLE]
)
def test_writes_to_a_removed_table_raise_not_found_and_recreate_nothing(
    db: DatabaseOps, write: str, call: Call
) -> None:
    shutil.rmtree(db.uri)
    with pytest.raises(NotFound):
        call(db)
    assert not Path(db.uri, "_delta_log").exists()


def test_buffered_rows_for_a_removed_table_stay_buffered(db: DatabaseOps) -> None:
    db.insert_buffered({"id": 9, "name": "x"})
    shutil.rmtree(db.uri)
    with pytest.raises(NotFound):
        db.flush()
    assert db.buffered_rows == 1
    assert not Path(db.uri, "_delta_log").exists()
    with pytest.raises(NotFound):
        db.close()


class TestCreateAndOpen:
    def test_open_a_missing_path(self, tmp_path: Path, engine: Engine) -> None:
        with pytest.raises(NotFound):
            DatabaseOps.open(tmp_path / "missing", engine=engine)
        assert not (tmp_path / "missing").exists()

    def test_open_a_directory_without_a_table(self, tmp_path: Path, engine: Engine) -> None:
        (tmp_path / "plain").mkdir()
        with pytest.raises(NotFound):
            DatabaseOps.open(tmp_path / "plain", engine=engine)
        assert list((tmp_path / "plain").iterdir()) == []

    def test_open_a_file(self, tmp_path: Path, engine: Engine) -> None:
        (tmp_path / "f").write_text("x")
        with pytest.raises(NotFound):
            DatabaseOps.open(tmp_path / "f", engine=engine)

    def test_create_on_a_file_or_below_one(self, tmp_path: Path, engine: Engine) -> None:
        (tmp_path / "f").write_text("x")
        with pytest.raises(IoError):
            DatabaseOps.create(tmp_path / "f", SCHEMA, engine=engine)
        with pytest.raises(IoError):
            DatabaseOps.create(tmp_path / "f" / "t", SCHEMA, engine=engine)
        assert (tmp_path / "f").read_text() == "x"

    def test_create_with_a_missing_parent_makes_the_directories(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = DatabaseOps.create(tmp_path / "a" / "b" / "t", SCHEMA, engine=engine)
        assert db.version == 0

    def test_create_over_an_existing_table(self, db: DatabaseOps, engine: Engine) -> None:
        before = state(db, engine)
        with pytest.raises(AlreadyExists):
            DatabaseOps.create(db.uri, {"other": "String"}, engine=engine)
        assert state(db, engine) == before

    @pytest.mark.parametrize(
        ("schema", "error"),
        [
            ('{"id": "Int64"', SchemaError),  # not a schema (text)
            ({"id": "Integer64"}, SchemaError),
            ({"id": "Int64", "ID": "String"}, SchemaError),
            ({}, SchemaError),
            (42, SchemaError),
        ],
    )
    def test_create_with_a_bad_schema_writes_nothing(
        self, tmp_path: Path, engine: Engine, schema: Any, error: type[Exception]
    ) -> None:
        with pytest.raises(error):
            DatabaseOps.create(tmp_path / "t", schema, engine=engine)
        assert not (tmp_path / "t").exists()

    def test_create_with_a_bad_primary_key_writes_nothing(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        with pytest.raises(SchemaError):
            DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, primary_key="nope", engine=engine)
        assert not (tmp_path / "t").exists()

    def test_unknown_engine(self, tmp_path: Path) -> None:
        with pytest.raises(InvalidOperation, match="engine"):
            DatabaseOps.create(tmp_path / "t", SCHEMA, engine="quantum")
        assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("name", ["a%20b", "q%2Fr", "x%zz%41"])
def test_a_local_path_with_a_percent_escape_is_refused_before_anything_is_made(
    tmp_path: Path, name: str
) -> None:
    """delta-rs writes version 0 at the literal path and reads it percent-decoded: such a
    table was half made (a `_delta_log` at ``a%20b``) and could never be opened."""
    where = tmp_path / name
    with pytest.raises(InvalidOperation, match="%XX escape"):
        DatabaseOps.create(where, {"id": "int"}, engine="local")
    assert not where.exists()
    with pytest.raises(InvalidOperation, match="%XX escape"):
        DatabaseOps.open(where, engine="local")
    csv = tmp_path / "rows.csv"
    csv.write_text("id\n1\n")
    with pytest.raises(InvalidOperation, match="%XX escape"):
        DatabaseOps.create_from_csv(where, str(csv), engine="local")
    assert not where.exists()
    # a % that is no escape is an ordinary character
    fine = DatabaseOps.create(tmp_path / "100%", {"id": "int"}, engine="local")
    fine.insert([{"id": 1}])
    assert (
        DatabaseOps.open(tmp_path / "100%", engine="local")
        .query("SELECT count(*) FROM data")
        .scalar()
        == 1
    )
