"""Bulk writes on Spark: imports of CSV / Parquet files, inserts of Spark DataFrames and files.

Executors write the Parquet files; delta-rs commits them in one transaction with per-file
statistics from the footers. Results must equal the local engine's, and a failed job must
leave the table unchanged and remove its files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.delta import DeltaLog
from posixlake.engines import LocalEngine
from posixlake.engines.spark import SparkEngine
from posixlake.errors import (
    AlreadyExists,
    DuplicateKeyError,
    NotFound,
    SchemaError,
    SerializationError,
)
from tests.posixlake._spark_files import stray_spark_files

pytestmark = pytest.mark.spark

CSV = (
    "id,amount,flag,day,at,name,mixed\n"
    "1,10,true,2024-01-01,2024-01-01T10:00:00Z,ann,1\n"
    "2,,false,2024-01-02,2024-01-02 11:30:00,,2.5\n"
    '3,30,true,,,"b, c",x\n'
    "4,40,,2024-01-04,2024-01-04T00:00:00+02:00,dee,\n"
)


@pytest.fixture
def spark_engine(spark_session: Any) -> SparkEngine:
    return SparkEngine(spark=spark_session)


def spark_dirs(path: Path) -> list[str]:
    """Spark-written files no commit added: a failed or finished operation leaves none."""
    return stray_spark_files(path)


def same_table(a: DatabaseOps, b: DatabaseOps) -> None:
    assert a.to_arrow().schema == b.to_arrow().schema
    assert a.schema == b.schema
    key = a.to_arrow().column_names[0]
    assert a.to_arrow().sort_by(key).to_pylist() == b.to_arrow().sort_by(key).to_pylist()


def test_create_from_csv_infers_the_same_table_as_local(
    tmp_path: Path, spark_engine: SparkEngine
) -> None:
    src = tmp_path / "in.csv"
    src.write_text(CSV)
    local = DatabaseOps.create_from_csv(
        tmp_path / "local", src, engine=LocalEngine(), primary_key="id"
    )
    spark = DatabaseOps.create_from_csv(
        tmp_path / "spark", src, engine=spark_engine, primary_key="id"
    )
    same_table(local, spark)
    types = {f.name: str(f.type) for f in spark.to_arrow().schema}
    assert types["mixed"] == "string" and types["amount"] == "int64"
    assert spark.version == local.version == 1
    assert spark.primary_key() == "id"


def test_several_csv_files_widen_like_local(tmp_path: Path, spark_engine: SparkEngine) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.csv").write_text("id,x\n1,1\n2,2\n")
    (src / "b.csv").write_text("id,x\n3,2.5\n")
    local = DatabaseOps.create_from_csv(tmp_path / "local", src, engine=LocalEngine())
    spark = DatabaseOps.create_from_csv(
        tmp_path / "spark", src, engine=spark_engine, partition_by=["id"]
    )
    assert spark.to_arrow().schema.field("x").type == pa.float64()
    assert sorted(spark.to_arrow().to_pylist(), key=lambda r: r["id"]) == sorted(
        local.to_arrow().to_pylist(), key=lambda r: r["id"]
    )


def test_a_csv_without_rows_still_gives_its_columns(
    tmp_path: Path, spark_engine: SparkEngine
) -> None:
    src = tmp_path / "empty.csv"
    src.write_text("id,name\n")
    local = DatabaseOps.create_from_csv(tmp_path / "local", src, engine=LocalEngine())
    spark = DatabaseOps.create_from_csv(tmp_path / "spark", src, engine=spark_engine)
    assert spark.to_arrow().schema == local.to_arrow().schema
    assert (spark.version, spark.to_arrow().num_rows) == (local.version, 0)
    assert spark_dirs(tmp_path / "spark") == []


def test_csv_files_of_one_directory_are_inferred_as_one_input(
    tmp_path: Path, spark_engine: SparkEngine
) -> None:
    """A column that is 1 in one file and true in another is text on both engines (no
    value is coerced or lost); a header only some files have becomes a nullable column."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.csv").write_text("id,x\n1,1\n")
    (src / "b.csv").write_text("id,x,y\n2,true,b\n")
    local = DatabaseOps.create_from_csv(tmp_path / "local", src, engine=LocalEngine())
    spark = DatabaseOps.create_from_csv(tmp_path / "spark", src, engine=spark_engine)
    for db in (local, spark):
        table = db.to_arrow().sort_by("id")
        assert table.schema.field("x").type == pa.string()
        assert table.to_pylist() == [
            {"id": 1, "x": "1", "y": None},
            {"id": 2, "x": "true", "y": "b"},
        ]
    assert spark_dirs(tmp_path / "spark") == []


def test_a_malformed_file_among_several_fails_and_leaves_nothing(
    tmp_path: Path, spark_engine: SparkEngine
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.csv").write_text("id,x\n1,1\n")
    (src / "b.csv").write_text('id,x\n2,"unterminated\n')
    with pytest.raises(SerializationError):
        DatabaseOps.create_from_csv(tmp_path / "local", src, engine=LocalEngine())
    with pytest.raises(SerializationError):
        DatabaseOps.create_from_csv(tmp_path / "spark", src, engine=spark_engine)
    assert not DeltaLog.exists(str(tmp_path / "local"))
    assert not DeltaLog.exists(str(tmp_path / "spark"))
    assert spark_dirs(tmp_path / "spark") == []


def test_duplicate_keys_in_the_input_fail_before_the_table_exists(
    tmp_path: Path, spark_engine: SparkEngine
) -> None:
    src = tmp_path / "in.csv"
    src.write_text("id,x\n1,a\n1,b\n")
    with pytest.raises(SchemaError, match="not unique"):
        DatabaseOps.create_from_csv(tmp_path / "spark", src, engine=spark_engine, primary_key="id")
    assert not DeltaLog.exists(str(tmp_path / "spark"))
    assert spark_dirs(tmp_path / "spark") == []


def test_malformed_csv_and_missing_files(tmp_path: Path, spark_engine: SparkEngine) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text('id,x\n1,"unterminated\n')
    with pytest.raises(SerializationError):
        DatabaseOps.create_from_csv(tmp_path / "t", bad, engine=spark_engine)
    with pytest.raises(NotFound):
        DatabaseOps.create_from_csv(tmp_path / "t", tmp_path / "nope.csv", engine=spark_engine)
    assert spark_dirs(tmp_path / "t") == []
    good = tmp_path / "good.csv"
    good.write_text("id\n1\n")
    DatabaseOps.create_from_csv(tmp_path / "t", good, engine=spark_engine)
    with pytest.raises(AlreadyExists):
        DatabaseOps.create_from_csv(tmp_path / "t", good, engine=spark_engine)


def test_create_from_parquet_keeps_types_like_local(
    tmp_path: Path, spark_engine: SparkEngine
) -> None:
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.uint8()),
            "big": pa.array([1, 2**64 - 1, None], pa.uint64()),
            "name": pa.array(["a", None, "c"], pa.large_string()),
            "at": pa.array([1_700_000_000_000_000_001, None, 0], pa.timestamp("ns", tz="UTC")),
            "cat": pa.array(["x", "y", "x"]).dictionary_encode(),
            "tags": pa.array([[1], [], None], pa.list_(pa.int64())),
        }
    )
    src = tmp_path / "in"
    src.mkdir()
    pq.write_table(table.slice(0, 2), src / "a.parquet")
    pq.write_table(table.slice(2), src / "b.parquet")
    try:
        local = DatabaseOps.create_from_parquet(tmp_path / "local", src, engine=LocalEngine())
    except SchemaError:
        with pytest.raises(SchemaError):  # nanoseconds that do not fit microseconds
            DatabaseOps.create_from_parquet(tmp_path / "spark", src, engine=spark_engine)
        return
    spark = DatabaseOps.create_from_parquet(tmp_path / "spark", src, engine=spark_engine)
    same_table(local, spark)


def test_insert_a_spark_dataframe(
    tmp_path: Path, spark_engine: SparkEngine, spark_session: Any
) -> None:
    schema = Schema(
        [Field("id", "Int64", False), Field("name", "String"), Field("p", "String")],
        primary_key="id",
    )
    db = DatabaseOps.create(tmp_path / "t", schema, engine=spark_engine, partition_by=["p"])
    df = spark_session.range(1000).selectExpr(
        "id", "concat('n', id) AS name", "CASE WHEN id % 3 = 0 THEN '' ELSE 'a/b' END AS p"
    )
    assert db.insert(df) == 1000
    assert db.version == 1
    # an empty partition value is NULL (the Delta protocol; Spark and delta-rs read it so)
    assert db.query("SELECT count(*) FROM data WHERE p IS NULL").scalar() == 334
    local = DatabaseOps.open(tmp_path / "t", engine=LocalEngine())
    assert local.query("SELECT count(*) FROM data WHERE p = 'a/b'").scalar() == 666
    # statistics come from the footers: data skipping works on the new files
    stats = db.get_data_skipping_stats("id > 5000")
    assert stats.files_skipped == stats.total_files > 0


def test_insert_dataframe_with_keys_already_in_the_table(
    tmp_path: Path, spark_engine: SparkEngine, spark_session: Any
) -> None:
    db = DatabaseOps.create(
        tmp_path / "t", {"id": "Int64", "v": "String"}, engine=spark_engine, primary_key="id"
    )
    db.insert([{"id": 1, "v": "a"}])
    with pytest.raises(DuplicateKeyError):
        db.insert(spark_session.createDataFrame([(1, "x"), (2, "y")], "id long, v string"))
    with pytest.raises(DuplicateKeyError):
        db.insert(spark_session.createDataFrame([(5, "x"), (5, "y")], "id long, v string"))
    assert db.version == 1
    assert spark_dirs(tmp_path / "t") == []


@pytest.mark.parametrize(
    ("ddl", "rows", "error"),
    [
        ("id long, nope string", [(1, "x")], SchemaError),  # unknown column
        ("v string", [("x",)], SchemaError),  # missing NOT NULL column
        ("id double, v string", [(1.5, "x")], SchemaError),  # would truncate
        ("id string, v string", [("abc", "x")], SchemaError),  # wrong type
        ("id long, v string", [(None, "x")], SchemaError),  # NULL in NOT NULL
    ],
)
def test_bad_dataframes_change_nothing(
    tmp_path: Path,
    spark_engine: SparkEngine,
    spark_session: Any,
    ddl: str,
    rows: list[tuple[Any, ...]],
    error: type[Exception],
) -> None:
    schema = Schema([Field("id", "Int64", False), Field("v", "String")])
    db = DatabaseOps.create(tmp_path / "t", schema, engine=spark_engine)
    db.insert([{"id": 7, "v": "keep"}])
    with pytest.raises(error):
        db.insert(spark_session.createDataFrame(rows, ddl))
    assert db.version == 1
    assert db.query("SELECT id, v FROM data").fetchall() == [(7, "keep")]
    assert spark_dirs(tmp_path / "t") == []


def test_insert_file_paths(tmp_path: Path, spark_engine: SparkEngine) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "v": "String"}, engine=spark_engine)
    pq.write_table(pa.table({"id": [1, 2], "v": ["a", "b"]}), tmp_path / "a.parquet")
    (tmp_path / "b.csv").write_text("v,id\nc,3\n,4\n")
    assert db.insert(str(tmp_path / "a.parquet")) == 2
    assert db.insert(tmp_path / "b.csv") == 2
    assert db.query("SELECT id, v FROM data ORDER BY id").fetchall() == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
        (4, None),
    ]
    with pytest.raises(NotFound):
        db.insert(str(tmp_path / "missing.parquet"))
    (tmp_path / "bad.csv").write_text("id,v\nx,1\n")
    with pytest.raises(SerializationError):  # as insert() of the same CSV text
        db.insert(str(tmp_path / "bad.csv"))
    assert db.version == 2
    assert spark_dirs(tmp_path / "t") == []


def test_rows_in_memory_never_start_spark(tmp_path: Path) -> None:
    engine = SparkEngine(master="local[1]")
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine=engine)
    db.insert([{"id": 1}])
    db.insert(pa.table({"id": [2]}))
    db.insert('{"id": 3}')
    assert not engine.started


# an upsert is a merge: the DataFrame is collected as Arrow (PySpark warns about pandas 3 there)
@pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")
def test_upsert_of_a_spark_dataframe(
    tmp_path: Path, spark_engine: SparkEngine, spark_session: Any
) -> None:
    db = DatabaseOps.create(
        tmp_path / "t", {"id": "Int64", "v": "String"}, engine=spark_engine, primary_key="id"
    )
    db.insert([{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
    df = spark_session.createDataFrame([(2, "B"), (3, "C")], "id long, v string")
    assert db.insert(df, upsert=True) == 2
    assert db.version == 2
    assert db.query("SELECT id, v FROM data ORDER BY id").fetchall() == [
        (1, "a"),
        (2, "B"),
        (3, "C"),
    ]
