"""Writes into tables other writers made: correct and readable by delta-rs, or refused by name.

For each kind of table and each engine: insert, delete, update, merge and optimize leave
a table that delta-rs' own reader reads as expected (and as we read it), with true row
counts; a table feature we cannot write raises :class:`UnsupportedTableFeature` naming
it, at once (no commit-conflict retry loop).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from posixlake import DatabaseOps
from posixlake.engines import Engine
from posixlake.errors import UnsupportedTableFeature
from tests.posixlake.interop_tables import FAR_TIMES, KINDS, reference, sort_rows

# kind -> (key column, a value of it present in the table)
WRITABLE: dict[str, tuple[str, Any]] = {
    "dv-databricks": ("value", 3),
    "column-mapping-spark": ("Super Name", "Timothy Lamb"),
    "column-mapping-name": ("id", 1),
    "column-mapping-id": ("id", 1),
    "cdf": ("id", 3),
    "ntz-partitions-checkpoint": ("id", 4),
    "no-stats": ("id", 4),
    "log-compaction": ("id", 1),
}


def _literal(value: Any) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


def _pred(col: str, value: Any) -> str:
    return f"`{col}` = {_literal(value)}"


def _check(db: DatabaseOps, uri: str, expected: list[dict[str, Any]]) -> None:
    """delta-rs reads what we expect, and so do we."""
    assert reference(uri) == sort_rows(expected)
    assert sort_rows(db.query("SELECT * FROM data").to_pylist()) == sort_rows(expected)


@pytest.mark.parametrize("kind", sorted(WRITABLE))
def test_insert_delete_update(kind: str, tmp_path: Path, engine: Engine) -> None:
    uri = KINDS[kind](tmp_path)
    col, value = WRITABLE[kind]
    db = DatabaseOps.open(uri, engine=engine)
    rows = reference(uri)
    extra = next(r for r in rows if r[col] == value)
    assert db.insert(dict(extra)) == 1
    rows.append(dict(extra))
    _check(db, uri, rows)

    matching = [r for r in rows if r[col] == value]
    assert db.delete_rows_where(_pred(col, value)) == len(matching) == 2
    rows = [r for r in rows if r[col] != value]
    _check(db, uri, rows)

    other = next(r for r in rows if r[col] is not None)[col]
    target = "name" if "name" in rows[0] else col
    if target == col:
        new_value: Any = other  # an identity update: the file is still rewritten
    else:
        new_value = "updated"
    n = db.update(_pred(col, other), {target: new_value})
    assert n == sum(1 for r in rows if r[col] == other)
    rows = [dict(r, **{target: new_value}) if r[col] == other else r for r in rows]
    _check(db, uri, rows)

    if "column-mapping" in kind:  # delta-rs' OPTIMIZE does not write column mapping
        with pytest.raises(UnsupportedTableFeature, match="columnMapping"):
            db.optimize()
    else:
        db.optimize()
    _check(db, uri, rows)


@pytest.mark.parametrize("kind", ["column-mapping-name", "cdf", "dv-databricks"])
def test_merge(kind: str, tmp_path: Path, engine: Engine) -> None:
    uri = KINDS[kind](tmp_path)
    col, _ = WRITABLE[kind]
    db = DatabaseOps.open(uri, engine=engine)
    rows = reference(uri)
    values = sorted(r[col] for r in rows)
    gone, fresh = values[0], values[-1] + 100
    metrics = db.merge(
        [{"_op": "DELETE", col: gone}, {"_op": "INSERT", col: fresh}], key=col, strict=True
    )
    assert (metrics.rows_inserted, metrics.rows_deleted) == (1, 1)
    new_row = {k: None for k in rows[0]} | {col: fresh}
    rows = [r for r in rows if r[col] != gone] + [new_row]
    _check(db, uri, rows)


def test_dv_file_rewritten_copy_on_write(tmp_path: Path, engine: Engine) -> None:
    """A rewrite of the file with a deletion vector removes it (with its vector)."""
    uri = KINDS["dv-databricks"](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    assert db.delete_rows_where("value = 5") == 1
    dt = DeltaTable(uri)
    assert pa.table(dt.deletion_vectors()).num_rows == 0  # the vector went with its file
    assert [r["value"] for r in reference(uri)] == [1, 2, 3, 4, 6, 7, 8]


@pytest.mark.parametrize(
    ("kind", "feature"),
    [("checkpoint-v2-databricks", "identityColumns"), ("liquid-clustering", "clustering")],
)
def test_unsupported_writer_feature_is_named_at_once(
    kind: str, feature: str, tmp_path: Path, engine: Engine
) -> None:
    uri = KINDS[kind](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    before = reference(uri)
    ops: list[Callable[[], Any]] = [
        lambda: db.insert({"id": 100}),
        lambda: db.delete_rows_where("id = 1"),
        lambda: db.update("id = 2", {"id": 20}),
    ]
    for op in ops:
        started = time.monotonic()
        with pytest.raises(UnsupportedTableFeature, match=feature) as info:
            op()
        assert feature in info.value.features
        assert time.monotonic() - started < 30  # no retry loop
    assert reference(uri) == before


def test_int96_out_of_range_rewrites(tmp_path: Path, engine: Engine) -> None:
    """delta-rs would rewrite 9999-12-31 as 1816: the local engine refuses, Spark rewrites."""
    uri = KINDS["int96"](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    if engine.name == "local":
        with pytest.raises(UnsupportedTableFeature, match="INT96"):
            db.delete_rows_where("id = 3")
        assert db.query("SELECT count(*) FROM data").scalar() == 4
        return
    assert db.delete_rows_where("id = 3") == 1
    rows = db.query("SELECT ntz FROM data ORDER BY id").fetchall()
    assert [r[0] for r in rows] == [FAR_TIMES[0], FAR_TIMES[1], FAR_TIMES[3]]
    assert [r["ntz"] for r in sorted(reference(uri), key=lambda r: r["id"])] == [
        FAR_TIMES[0],
        FAR_TIMES[1],
        FAR_TIMES[3],
    ]


@pytest.mark.spark
def test_spark_files_into_column_mapping(tmp_path: Path, spark_session: Any) -> None:
    """A Spark job's files into a column-mapped table store the physical names."""
    from posixlake.engines.spark import SparkEngine

    uri = KINDS["column-mapping-name"](tmp_path)
    db = DatabaseOps.open(uri, engine=SparkEngine(spark=spark_session))
    before = reference(uri)
    frame = spark_session.createDataFrame(
        [(9, "n", "p")], "id long, `Super Name` string, part string"
    )
    assert db.insert(frame) == 1
    db.insert([{"id": 10, "Super Name": "m", "part": "p"}])  # rows in memory: delta-rs
    new = [
        {"id": 9, "Super Name": "n", "part": "p", "nested": None},
        {"id": 10, "Super Name": "m", "part": "p", "nested": None},
    ]
    assert reference(uri) == sort_rows([*before, *new])
    assert sort_rows(db.query("SELECT * FROM data").to_pylist()) == reference(uri)


@pytest.mark.spark
@pytest.mark.parametrize(
    ("kind", "feature"),
    [
        ("dv-databricks", None),
        ("log-compaction", None),
        ("liquid-clustering", "clustering"),
        ("checkpoint-v2-databricks", "identityColumns"),
    ],
)
def test_spark_job_inserts(
    kind: str, feature: str | None, tmp_path: Path, spark_session: Any
) -> None:
    """Files a Spark job writes are committed as plain adds, or refused by feature name."""
    from posixlake.engines.spark import SparkEngine
    from posixlake.engines.spark._types import arrow_schema_to_spark

    uri = KINDS[kind](tmp_path)
    db = DatabaseOps.open(uri, engine=SparkEngine(spark=spark_session))
    before = reference(uri)
    first = db.query("SELECT * FROM data LIMIT 1").arrow()
    row = first.to_pylist()[0]
    frame = spark_session.createDataFrame(first, schema=arrow_schema_to_spark(first.schema))
    if feature is None:
        assert db.insert(frame) == 1
        assert reference(uri) == sort_rows([*before, row])
        return
    with pytest.raises(UnsupportedTableFeature, match=feature):
        db.insert(frame)
    assert reference(uri) == before
