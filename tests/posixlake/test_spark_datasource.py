"""The ``posixlake`` Spark data source: users' own Spark jobs read and write tables."""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException

from posixlake import DatabaseOps, Field, Schema
from posixlake.engines import LocalEngine
from posixlake.engines.spark import SparkEngine
from tests.posixlake._spark_files import is_spark_file, stray_spark_files
from tests.posixlake.test_spark_engine import ALL_TYPES, all_types_rows
from tests.storage.conftest import (  # the object-store suite's servers (fixtures)
    Lake,
    backend,  # noqa: F401
    lake,  # noqa: F401
)

pytestmark = pytest.mark.spark


def spark_dirs(path: Path) -> list[str]:
    """Spark-written files no commit added: a failed or finished write leaves none."""
    return stray_spark_files(path)


def read(spark: Any, path: Path, **options: Any) -> list[dict[str, Any]]:
    reader = spark.read.format("posixlake")
    for k, v in options.items():
        reader = reader.option(k, v)
    return sorted(reader.load(str(path)).toArrow().to_pylist(), key=lambda r: r["id"])


def test_round_trips_every_type(tmp_path: Path, spark_session: Any) -> None:
    src = DatabaseOps.create(tmp_path / "src", ALL_TYPES, engine=LocalEngine())
    src.insert(all_types_rows())
    want = sorted(src.to_arrow().to_pylist(), key=lambda r: r["id"])
    df = spark_session.read.format("posixlake").load(str(tmp_path / "src"))
    assert sorted(df.toArrow().to_pylist(), key=lambda r: r["id"]) == want
    df.write.format("posixlake").mode("append").save(str(tmp_path / "copy"))  # creates it
    copy = DatabaseOps.open(tmp_path / "copy", engine=LocalEngine())
    assert sorted(copy.to_arrow().to_pylist(), key=lambda r: r["id"]) == want
    assert copy.to_arrow().schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert copy.to_arrow().schema.field("naive").type == pa.timestamp("us")
    assert read(spark_session, tmp_path / "copy") == want


def test_time_travel_options(tmp_path: Path, spark_session: Any) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine=LocalEngine())
    db.insert([{"id": 1}])
    db.insert([{"id": 2}])
    assert read(spark_session, tmp_path / "t", versionAsOf=1) == [{"id": 1}]
    when = db.commit_time(1).astimezone(UTC).isoformat()
    assert read(spark_session, tmp_path / "t", timestampAsOf=when) == [{"id": 1}]
    assert len(read(spark_session, tmp_path / "t")) == 2


def test_append_and_overwrite_commit_once_each(tmp_path: Path, spark_session: Any) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "v": "String"}, engine=LocalEngine())
    db.insert([{"id": 1, "v": "a"}])
    df = spark_session.createDataFrame([(2, "b"), (3, "c")], "id long, v string")
    df.write.format("posixlake").mode("append").save(str(tmp_path / "t"))
    assert db.version == 2
    assert [r["id"] for r in read(spark_session, tmp_path / "t")] == [1, 2, 3]
    df.limit(1).write.format("posixlake").mode("overwrite").save(str(tmp_path / "t"))
    assert db.version == 3
    assert read(spark_session, tmp_path / "t") == [{"id": 2, "v": "b"}]
    assert db.query("SELECT count(*) FROM data", version=2).scalar() == 3


def test_new_table_with_partitions_and_key(tmp_path: Path, spark_session: Any) -> None:
    df = spark_session.createDataFrame(
        [(1, ""), (2, "a/b"), (3, None), (4, "ü x=%")], "id long, p string"
    )
    (
        df.write.format("posixlake")
        .mode("append")
        .option("partitionBy", "p")
        .option("primaryKey", "id")
        .save(str(tmp_path / "t"))
    )
    db = DatabaseOps.open(tmp_path / "t", engine=LocalEngine())
    assert db.version == 1  # created (with the key property), then the rows
    assert db.primary_key() == "id"
    # an empty partition value is NULL (the Delta protocol; Spark and delta-rs read it so)
    assert sorted(db.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "p": None},
        {"id": 2, "p": "a/b"},
        {"id": 3, "p": None},
        {"id": 4, "p": "ü x=%"},
    ]
    table = spark_session.read.format("posixlake").load(str(tmp_path / "t"))
    for where, ids in [
        ("p = 'a/b'", [2]),
        ("p = ''", []),
        ("p IS NULL", [1, 3]),
        ("p IN ('', 'ü x=%')", [4]),
        ("p <=> NULL", [1, 3]),
    ]:
        assert sorted(r.id for r in table.where(where).collect()) == ids, where


def test_primary_key_is_enforced_on_append(tmp_path: Path, spark_session: Any) -> None:
    schema = Schema([Field("id", "Int64", False), Field("v", "String")], primary_key="id")
    db = DatabaseOps.create(tmp_path / "t", schema, engine=LocalEngine())
    db.insert([{"id": 1, "v": "a"}])
    df = spark_session.createDataFrame([(1, "dup"), (9, "new")], "id long, v string")
    with pytest.raises(PySparkException, match=r"DuplicateKeyError|primary key already exists"):
        df.write.format("posixlake").mode("append").save(str(tmp_path / "t"))
    assert db.version == 1
    assert spark_dirs(tmp_path / "t") == []


def test_failed_write_removes_its_files(tmp_path: Path, spark_session: Any) -> None:
    schema = Schema([Field("id", "Int64", False), Field("v", "String")])
    db = DatabaseOps.create(tmp_path / "t", schema, engine=LocalEngine())
    df = spark_session.createDataFrame([(1, "a"), (None, "b")], "id long, v string")
    with pytest.raises(PySparkException, match=r"NOT NULL"):
        df.write.format("posixlake").mode("append").save(str(tmp_path / "t"))
    assert db.version == 0
    assert spark_dirs(tmp_path / "t") == []


def test_reading_a_missing_table_fails_clearly(tmp_path: Path, spark_session: Any) -> None:
    with pytest.raises(PySparkException, match=r"no Delta table|NotFound"):
        spark_session.read.format("posixlake").load(str(tmp_path / "nope")).collect()


def test_timestamps_before_the_table_fail(tmp_path: Path, spark_session: Any) -> None:
    DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine=LocalEngine())
    old = datetime(2000, 1, 1, tzinfo=UTC).isoformat()
    with pytest.raises(PySparkException, match=r"VersionError|did not exist"):
        read(spark_session, tmp_path / "t", timestampAsOf=old)


# -- object stores: no Hadoop connector jars, I/O through delta-rs ----------------------


def test_object_store_tables(lake: Lake, spark_session: Any) -> None:  # noqa: F811
    options = lake.config().storage_options()
    df = spark_session.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id long, v string")
    writer = df.write.format("posixlake").mode("append").option("partitionBy", "v")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save(lake.uri())
    reader = spark_session.read.format("posixlake")
    for k, v in options.items():
        reader = reader.option(k, v)
    got = sorted(reader.load(lake.uri()).toArrow().to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}]
    engine = SparkEngine(spark=spark_session)
    db = DatabaseOps.open(lake.uri(), storage=lake.config(), engine=engine)
    assert db.delete_rows_where("id = 2") == 1
    assert db.update("id = 3", {"v": "z"}) == 1
    local = DatabaseOps.open(lake.uri(), storage=lake.config(), engine=LocalEngine())
    assert local.query("SELECT id, v FROM data ORDER BY id").fetchall() == [(1, "a"), (3, "z")]
    # every file the Spark jobs wrote was committed by some version: no debris
    ever = set()
    for version in range(local.version + 1):
        paths = local._log.at(version).add_actions().column("path").to_pylist()
        ever |= {"tbl/" + urllib.parse.unquote(p) for p in paths}
    written = [k for k in lake.object_keys("tbl/") if is_spark_file(k)]
    assert written and set(written) <= ever
