"""SQL as Delta users write it: time travel in FROM, db.sql() DML, restore_version().

Every DML statement is checked against the Python call it stands for, on a twin table
with the same start: same rows after, one commit each.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.engines import Engine
from posixlake.errors import (
    DuplicateKeyError,
    InvalidOperation,
    QueryError,
    SchemaError,
    VersionError,
)
from posixlake.sql import split_statements, split_time_travel, statement_kind
from tests.posixlake.interop_tables import KINDS, reference

SCHEMA = Schema(
    [
        Field("id", "Int64", False),
        Field("name", "String"),
        Field("bal", "Decimal128(10,2)"),
        Field("day", "Date32"),
    ],
    primary_key="id",
)
START = [
    {"id": 1, "name": "ann", "bal": Decimal("1.00"), "day": date(2024, 1, 1)},
    {"id": 2, "name": "bob", "bal": Decimal("2.50"), "day": None},
    {"id": 3, "name": "cat", "bal": None, "day": date(2024, 3, 3)},
]


def make(path: Path, engine: Engine, name: str = "t") -> DatabaseOps:
    db = DatabaseOps.create(path / name, SCHEMA, engine=engine)
    db.insert(START)
    return db


def rows(db: DatabaseOps, version: int | None = None) -> list[dict[str, Any]]:
    return db.query("SELECT * FROM data ORDER BY id", version=version).to_pylist()


def twins(tmp_path: Path, engine: Engine) -> tuple[DatabaseOps, DatabaseOps]:
    return make(tmp_path, engine, "by_sql"), make(tmp_path, engine, "by_python")


def one_row(result: Any) -> dict[str, Any]:
    out = result.to_pylist()
    assert len(out) == 1
    row: dict[str, Any] = out[0]
    return row


# -- time travel in FROM ---------------------------------------------------------------


def test_version_as_of_in_from(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.delete_rows_where("id = 1")
    assert db.query("SELECT count(*) AS n FROM data").scalar() == 2
    assert db.query("SELECT count(*) AS n FROM data VERSION AS OF 1").scalar() == 3
    assert db.query("SELECT count(*) AS n FROM data VERSION AS OF 0").scalar() == 0
    got = db.query("SELECT t.name FROM data VERSION AS OF 1 AS t WHERE t.id = 1").to_pylist()
    assert got == [{"name": "ann"}]
    # db.sql runs queries too, with the clause
    assert db.sql("SELECT count(*) AS n FROM data VERSION AS OF 1").scalar() == 3


def test_timestamp_as_of_in_from(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    first = db.history()[0].timestamp
    db.delete_rows_where("true")  # a delete plans and rewrites: a later millisecond
    assert db.history(1)[0].timestamp > first
    stamp = first.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    assert db.query(f"SELECT count(*) FROM data TIMESTAMP AS OF '{stamp}'").scalar() == 3
    assert db.query("SELECT count(*) FROM data").scalar() == 0
    with pytest.raises(VersionError, match="did not exist"):
        db.query("SELECT * FROM data TIMESTAMP AS OF '2001-01-01 00:00:00'")


def test_time_travel_clause_errors(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.delete_rows_where("id = 1")
    with pytest.raises(QueryError, match="different versions"):
        db.query("SELECT * FROM data VERSION AS OF 1 JOIN data VERSION AS OF 2 ON true")
    with pytest.raises(QueryError, match="do not also pass version"):
        db.query("SELECT * FROM data VERSION AS OF 1", version=2)
    with pytest.raises(VersionError, match="does not exist"):
        db.query("SELECT * FROM data VERSION AS OF 99")
    with pytest.raises(QueryError, match="unknown table 'other'"):
        db.query("SELECT * FROM other VERSION AS OF 1")
    # the same clause and the same version= agree
    assert len(db.query("SELECT * FROM data VERSION AS OF 1", version=1)) == 3


def test_time_travel_cut_keeps_the_rest_of_the_text() -> None:
    sql = "SELECT 'VERSION AS OF 3' AS s FROM data  VERSION AS OF 2 WHERE x = 1"
    cut, travel = split_time_travel(sql)
    assert travel is not None and travel.version == 2
    assert " ".join(cut.split()) == "SELECT 'VERSION AS OF 3' AS s FROM data WHERE x = 1"
    assert split_time_travel("SELECT 1 FROM data") == ("SELECT 1 FROM data", None)


def test_statement_kind_and_split() -> None:
    assert statement_kind("  -- note\n /* x */ (SELECT 1)") == "select"
    assert statement_kind("WITH a AS (SELECT 1) SELECT * FROM a") == "select"
    assert statement_kind("update data set a = 1") == "update"
    assert statement_kind("MERGE INTO data ...") == "merge"
    assert split_statements("SELECT ';'; SELECT 2;\nSELECT") == (
        ["SELECT ';'", "SELECT 2"],
        "\nSELECT",
    )
    assert split_statements("SELECT 'open;") == ([], "SELECT 'open;")


def test_query_refuses_dml_and_names_sql(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    for sql in ("UPDATE data SET name = NULL", "DELETE FROM data", "INSERT INTO data VALUES (9)"):
        with pytest.raises(QueryError, match=r"db\.sql"):
            db.query(sql)
    assert rows(db) == START and db.version == 1


# -- DML statements = the Python calls -------------------------------------------------


def test_update_statement_is_db_update(tmp_path: Path, engine: Engine) -> None:
    a, b = twins(tmp_path, engine)
    out = one_row(a.sql("UPDATE data SET bal = bal + 1, name = upper(name) WHERE id < 3"))
    done = b.update("id < 3", expressions={"bal": "bal + 1", "name": "upper(name)"})
    assert out == {"num_affected_rows": 2, "num_updated_rows": 2, "version": 2}
    assert done.rows == 2 and done.version == 2
    assert rows(a) == rows(b)
    assert rows(a)[0]["bal"] == Decimal("2.00")
    # qualified names and no WHERE (every row)
    one_row(a.sql("UPDATE data AS t SET t.name = 'x'"))
    b.update(None, expressions={"name": "'x'"})
    assert rows(a) == rows(b) and a.version == b.version == 3
    # nothing matches: no commit
    assert one_row(a.sql("UPDATE data SET name = 'y' WHERE id = 42"))["version"] is None
    assert a.version == 3


def test_update_statement_checks_like_update(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    with pytest.raises(InvalidOperation, match="primary key"):
        db.sql("UPDATE data SET id = id + 10")
    with pytest.raises(SchemaError, match="unknown column 'nosuch'"):
        db.sql("UPDATE data SET nosuch = 1")
    with pytest.raises(QueryError, match=r"UPDATE \.\.\. FROM is not supported"):
        db.sql("UPDATE data SET name = s.name FROM data AS s WHERE data.id = s.id")
    assert rows(db) == START and db.version == 1


def test_delete_statement_is_delete_rows_where(tmp_path: Path, engine: Engine) -> None:
    a, b = twins(tmp_path, engine)
    out = one_row(a.sql("DELETE FROM data WHERE bal IS NULL OR data.id = 1"))
    assert b.delete_rows_where("bal IS NULL OR id = 1") == 2
    assert out == {"num_affected_rows": 2, "num_deleted_rows": 2, "version": 2}
    assert rows(a) == rows(b)
    assert one_row(a.sql("DELETE FROM data"))["num_deleted_rows"] == 1
    assert rows(a) == [] and a.version == 3


def test_insert_values_typed_by_the_table(tmp_path: Path, engine: Engine) -> None:
    a, b = twins(tmp_path, engine)
    out = one_row(
        a.sql("INSERT INTO data VALUES (4, 'dan', 10.5, DATE '2024-05-01'), (5, NULL, -3, NULL)")
    )
    b.insert(
        [
            {"id": 4, "name": "dan", "bal": Decimal("10.5"), "day": date(2024, 5, 1)},
            {"id": 5, "name": None, "bal": Decimal(-3), "day": None},
        ]
    )
    assert out == {"num_affected_rows": 2, "num_inserted_rows": 2, "version": 2}
    assert rows(a) == rows(b)
    one_row(a.sql("INSERT INTO data (name, id) VALUES ('eve', 6)"))
    assert rows(a)[-1] == {"id": 6, "name": "eve", "bal": None, "day": None}
    assert a.version == 3


def test_insert_values_errors_commit_nothing(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    with pytest.raises(DuplicateKeyError):
        db.sql("INSERT INTO data VALUES (1, 'again', 1, NULL)")
    with pytest.raises(SchemaError, match="bal"):  # 3 decimals into a scale of 2: no rounding
        db.sql("INSERT INTO data VALUES (9, 'x', 1.234, NULL)")
    with pytest.raises(QueryError, match="row 1 has 2 value"):
        db.sql("INSERT INTO data VALUES (9, 'x')")
    with pytest.raises(QueryError, match="INSERT OVERWRITE is not supported"):
        db.sql("INSERT OVERWRITE data SELECT * FROM data")
    with pytest.raises(QueryError, match="unknown table 'other'"):
        db.sql("INSERT INTO other VALUES (1)")
    assert rows(db) == START and db.version == 1


def test_insert_select_with_time_travel(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.delete_rows_where("id > 1")
    out = one_row(
        db.sql(
            "INSERT INTO data SELECT id + 10, name, bal, day FROM data VERSION AS OF 1 WHERE id > 1"
        )
    )
    assert out == {"num_affected_rows": 2, "num_inserted_rows": 2, "version": 3}
    assert [r["id"] for r in rows(db)] == [1, 12, 13]
    assert rows(db)[1] == {**START[1], "id": 12}
    with pytest.raises(QueryError, match="1 value"):
        db.sql("INSERT INTO data SELECT id FROM data")


def test_merge_statement_is_db_merge(tmp_path: Path, engine: Engine) -> None:
    a, b = twins(tmp_path, engine)
    out = one_row(
        a.sql(
            "MERGE INTO data AS t USING (VALUES (1, 'ANN', 5.00), (2, 'gone', 0), (7, 'new', 0.25)) "
            "AS s(id, name, bal) ON t.id = s.id "
            "WHEN MATCHED AND s.name = 'gone' THEN DELETE "
            "WHEN MATCHED THEN UPDATE SET name = s.name, bal = t.bal + s.bal "
            "WHEN NOT MATCHED THEN INSERT (id, name, bal) VALUES (s.id, s.name, s.bal)"
        )
    )
    metrics = b.merge(
        [
            {"_op": "UPDATE", "id": 1, "name": "ANN", "bal": Decimal("6.00")},
            {"_op": "DELETE", "id": 2},
            {"_op": "INSERT", "id": 7, "name": "new", "bal": Decimal("0.25")},
        ]
    )
    assert out == {
        "num_affected_rows": 3,
        "num_updated_rows": 1,
        "num_deleted_rows": 1,
        "num_inserted_rows": 1,
        "version": 2,
    }
    assert (metrics.rows_updated, metrics.rows_deleted, metrics.rows_inserted) == (1, 1, 1)
    assert rows(a) == rows(b)
    assert rows(a)[0]["day"] == date(2024, 1, 1)  # a column no SET names keeps its value


def test_merge_star_and_subquery_source(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.delete_rows_where("id = 3")
    db.update("id = 1", expressions={"name": "'changed'"})
    # put back version 1's rows with a MERGE from the table's own past
    out = one_row(
        db.sql(
            "MERGE INTO data USING (SELECT * FROM data WHERE id > 0) AS s ON data.id = s.id "
            "WHEN MATCHED AND data.name <> s.name THEN UPDATE SET * "
            "WHEN NOT MATCHED THEN INSERT *"
        )
    )
    assert out["num_affected_rows"] == 0 and out["version"] is None  # nothing differs
    out = one_row(
        db.sql(
            "MERGE INTO data t USING (VALUES (1, 'ann', 1.00, DATE '2024-01-01'), "
            "(3, 'cat', NULL, DATE '2024-03-03')) AS s(id, name, bal, day) ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    )
    assert (out["num_updated_rows"], out["num_inserted_rows"]) == (1, 1)
    assert rows(db) == rows(db, version=1)
    assert db.version == 4


def test_merge_unsupported_clauses_are_named(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    values = "USING (VALUES (1, 'x')) AS s(id, name)"
    cases = {
        f"MERGE INTO data t {values} ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN DELETE": (
            "WHEN NOT MATCHED BY SOURCE"
        ),
        f"MERGE INTO data t {values} ON t.name = s.name OR t.id = s.id "
        "WHEN MATCHED THEN DELETE": "MERGE ... ON",
        f"MERGE INTO data t {values} ON t.id = s.id WHEN MATCHED THEN UPDATE SET id = 5": (
            "cannot set the column"
        ),
        "MERGE INTO data t USING (VALUES (1, 'x')) ON t.id = 1 WHEN MATCHED THEN DELETE": "alias",
        f"MERGE INTO other t {values} ON t.id = s.id WHEN MATCHED THEN DELETE": (
            "unknown table 'other'"
        ),
    }
    for sql, message in cases.items():
        with pytest.raises(QueryError, match=message):
            db.sql(sql)
    assert rows(db) == START and db.version == 1


def test_sql_errors(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    with pytest.raises(QueryError, match="cannot parse"):
        db.sql("DELETE FROM data WHERE (id = 1")
    with pytest.raises(QueryError, match="SET column = value"):
        db.sql("UPDATE data SET")
    with pytest.raises(QueryError, match="one SQL statement"):
        db.sql("DELETE FROM data WHERE id = 1; DELETE FROM data WHERE id = 2")
    with pytest.raises(QueryError, match="CREATE statements are not supported"):
        db.sql("CREATE TABLE x (a INT)")
    with pytest.raises(QueryError, match="unknown table 'customers'"):
        db.sql("DELETE FROM customers WHERE id = 1")
    assert rows(db) == START and db.version == 1


def test_local_quoting_is_datafusion(tmp_path: Path, local_engine: Engine) -> None:
    db = make(tmp_path, local_engine)
    db.sql("UPDATE data SET name = 'it''s' WHERE id = 1")
    db.sql('UPDATE data SET "name" = "name" || \'!\' WHERE id = 2')
    assert [r["name"] for r in rows(db)][:2] == ["it's", "bob!"]


@pytest.mark.spark
def test_spark_quoting_is_spark_sql(tmp_path: Path, spark_session: Any) -> None:
    from posixlake.engines.spark import SparkEngine

    db = make(tmp_path, SparkEngine(spark=spark_session))
    db.sql("UPDATE data SET name = 'it\\'s' WHERE id = 1")
    db.sql("UPDATE data SET `name` = concat(`name`, '!') WHERE id = 2")
    assert [r["name"] for r in rows(db)][:2] == ["it's", "bob!"]


# -- restore_version -------------------------------------------------------------------


def test_restore_version_is_one_commit(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.delete_rows_where("id = 1")
    db.update("id = 2", expressions={"name": "'x'"})
    db.insert([{"id": 9, "name": "new"}])
    before = db.version
    done = db.restore_version(1)
    assert (done.restored, done.version) == (1, before + 1)
    assert done.files_removed >= 1 and done.files_restored >= 1
    assert rows(db) == START
    history = db.history(1)[0]
    assert history.operation == "RESTORE" and history.version == before + 1
    # the versions in between stay readable, and a restore can be undone by another
    assert [r["id"] for r in rows(db, version=before)] == [2, 3, 9]
    db.restore_version(before)
    assert [r["id"] for r in rows(db)] == [2, 3, 9]
    # already there: no commit
    again = db.restore_version(db.version)
    assert again.version is None and not again.committed


def test_restore_version_as_of(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    at_one = db.history(1)[0].timestamp
    db.delete_rows_where("true")
    assert db.history(1)[0].timestamp > at_one
    done = db.restore_version(as_of=at_one)
    assert done.restored == 1 and rows(db) == START


def test_restore_version_errors(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    with pytest.raises(VersionError, match="does not exist"):
        db.restore_version(5)
    with pytest.raises(InvalidOperation, match="not both"):
        db.restore_version(0, as_of=datetime.now(UTC))
    with pytest.raises(InvalidOperation, match="not both"):
        db.restore_version()
    with pytest.raises(VersionError, match="did not exist"):
        db.restore_version(as_of="2001-01-01T00:00:00Z")
    assert db.version == 1


def test_restore_version_with_deletion_vectors(tmp_path: Path, engine: Engine) -> None:
    uri = KINDS["dv-databricks"](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    start = db.version
    original = reference(uri, start)
    db.delete_rows_where("value = 5")
    assert reference(uri) != original
    db.restore_version(start)
    assert reference(uri) == original
    assert db.history(1)[0].operation == "RESTORE"


def test_restore_version_needs_write(tmp_path: Path, local_engine: Engine) -> None:
    from posixlake.errors import PermissionDenied

    path = tmp_path / "secured"
    with DatabaseOps.create(
        path, SCHEMA, engine=local_engine, auth=True, credentials=("root", "pw-root-123")
    ) as admin:
        admin.insert(START)
        admin.users.create("reader", "pw-reader-123", ["read"])
    reader = DatabaseOps.open(path, engine=local_engine, credentials=("reader", "pw-reader-123"))
    with pytest.raises(PermissionDenied):
        reader.restore_version(0)
    with pytest.raises(PermissionDenied):
        reader.sql("DELETE FROM data")
    assert reader.version == 1


def test_restore_version_never_turns_users_off(tmp_path: Path, local_engine: Engine) -> None:
    path = tmp_path / "later-auth"
    db = DatabaseOps.create(path, SCHEMA, engine=local_engine)
    db.insert(START)
    db.enable_auth(("root", "pw-root-123"))
    admin = DatabaseOps.open(path, engine=local_engine, credentials=("root", "pw-root-123"))
    with pytest.raises(InvalidOperation, match="turn them off"):
        admin.restore_version(1)
    assert admin.history(1)[0].operation != "RESTORE"


def test_unquoted_names_match_columns_as_queries_do(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.sql("UPDATE data SET NAME = 'x' WHERE ID = 1")
    db.sql("INSERT INTO data (ID, Name) VALUES (8, 'h')")
    db.sql(
        "MERGE INTO data t USING (VALUES (2, 'y')) AS s(id, name) ON t.ID = s.id "
        "WHEN MATCHED THEN UPDATE SET t.Name = s.name"
    )
    assert [(r["id"], r["name"]) for r in rows(db)] == [(1, "x"), (2, "y"), (3, "cat"), (8, "h")]


def test_as_of_in_a_string_is_left_to_the_engine(tmp_path: Path, local_engine: Engine) -> None:
    db = make(tmp_path, local_engine)
    assert db.query("SELECT 'as of now' AS s FROM data LIMIT 1").scalar() == "as of now"
    sql = "SELECT arrow_typeof(id) AS t, 'as of' AS s FROM data LIMIT 1"
    assert split_time_travel(sql) == (sql, None)
