"""The Spark engine: sessions, Java checks, the read path and queries over exact snapshots."""

from __future__ import annotations

import stat
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.delta import DeltaLog
from posixlake.delta._snapshot import snapshot_of
from posixlake.engines import LocalEngine, resolve_engine
from posixlake.engines.spark import (
    JAVA_PACKAGE,
    ConnectServer,
    SparkEngine,
    SparkUnavailableError,
    _frames,
    check_java,
)
from posixlake.errors import QueryError, VersionError

pytestmark = pytest.mark.spark

ODD = ["", " ", "a/b", "x=y", "50%", "ü", "a b%2F", None]


@pytest.fixture
def spark_engine(spark_session: Any) -> SparkEngine:
    return SparkEngine(spark=spark_session)


def pair(
    tmp_path: Path, spark_engine: SparkEngine, schema: Any, **kw: Any
) -> tuple[DatabaseOps, DatabaseOps]:
    """The same table on both engines: (local, spark) handles of one Delta table."""
    local = DatabaseOps.create(tmp_path / "t", schema, engine=LocalEngine(), **kw)
    spark = DatabaseOps.open(tmp_path / "t", engine=spark_engine)
    return local, spark


# -- sessions and Java -------------------------------------------------------------------


def test_sessions_we_build_use_utc_micros_loopback_and_no_ui(spark_session: Any) -> None:
    conf = spark_session.conf
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert conf.get("spark.sql.parquet.outputTimestampType") == "TIMESTAMP_MICROS"
    assert conf.get("spark.ui.enabled") == "false"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.pyspark.python") == __import__("sys").executable


def test_session_starts_lazily_and_is_reused(
    tmp_path: Path, spark_session: Any, spark_connect_server: ConnectServer | None
) -> None:
    if spark_connect_server is None:
        engine = SparkEngine(master="local[2]")
    else:  # a Connect client: the process's session on the same server
        engine = SparkEngine(remote=spark_connect_server.url)
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine=engine)
    db.insert([{"id": 1}])  # rows in memory go through Arrow: no Spark job
    assert not engine.started
    assert db.query("SELECT count(*) FROM data").scalar() == 1
    assert engine.started
    assert engine.spark is spark_session  # one SparkContext per process: reused
    engine.close()  # not ours to stop: the fixture started it
    assert spark_session.range(1).count() == 1


def test_spark_is_the_default_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POSIXLAKE_ENGINE", raising=False)
    assert resolve_engine(None).name == "spark"
    monkeypatch.setenv("POSIXLAKE_ENGINE", "local")
    assert resolve_engine(None).name == "local"
    assert resolve_engine("spark").name == "spark"


def _fake_java(tmp_path: Path, version: str) -> Path:
    bin_dir = tmp_path / "jdk" / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2024-01-01' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    return tmp_path / "jdk"


def test_missing_java_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkUnavailableError) as info:
        check_java()
    assert JAVA_PACKAGE in str(info.value)
    assert "engine='local'" in str(info.value)


def test_old_java_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, "11.0.2")))
    with pytest.raises(SparkUnavailableError, match="Java 11"):
        check_java()


def test_java_17_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _fake_java(tmp_path, "17.0.15")
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert check_java() == str(home / "bin" / "java")


# -- the read path ---------------------------------------------------------------------

ALL_TYPES = Schema(
    [
        Field("id", "Int64", False),
        Field("i8", "Int8"),
        Field("i16", "Int16"),
        Field("i32", "Int32"),
        Field("f32", "Float32"),
        Field("f64", "Float64"),
        Field("dec", "Decimal128(12,3)"),
        Field("s", "String"),
        Field("b", "Boolean"),
        Field("raw", "Binary"),
        Field("day", "Date32"),
        Field("at", "Timestamp"),
        Field("naive", "TimestampNtz"),
        Field("tags", "List<Int32>"),
        Field("attrs", "Map<String,Int64>"),
        Field("pt", "Struct<x:Float64,label:String>"),
    ]
)


def all_types_rows(n: int = 6) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i in range(n):
        rows.append(
            {
                "id": i,
                "i8": -i,
                "i16": i * 300,
                "i32": i * 70000,
                "f32": i / 4,
                "f64": i / 3,
                "dec": Decimal(f"{i}.125"),
                "s": ODD[i % len(ODD)],
                "b": i % 2 == 0,
                "raw": bytes([i, 0, 255]),
                "day": date(2024, 1, 1 + i),
                "at": datetime(2024, 3, 1, 12, 0, i, 123456, tzinfo=UTC),
                "naive": datetime(2024, 3, 1, 12, 0, i, 5),
                "tags": [i, None, -i],
                "attrs": {"k": i},
                "pt": {"x": i / 2, "label": f"p{i}"},
            }
        )
    rows.append({"id": 99})  # every nullable column NULL
    return rows


def test_query_reads_every_type_exactly(tmp_path: Path, spark_engine: SparkEngine) -> None:
    local, spark = pair(tmp_path, spark_engine, ALL_TYPES)
    local.insert(all_types_rows())
    want = local.query("SELECT * FROM data ORDER BY id").arrow()
    got = spark.query("SELECT * FROM data ORDER BY id").arrow()
    assert got.to_pylist() == want.to_pylist()
    assert got.schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert got.schema.field("naive").type == pa.timestamp("us")
    assert got.schema.field("dec").type == pa.decimal128(12, 3)


@pytest.mark.parametrize("native", [True, False])
def test_partition_values_come_from_the_log(
    tmp_path: Path, spark_engine: SparkEngine, spark_session: Any, native: bool
) -> None:
    schema = Schema([Field("id", "Int64", False), Field("p", "String"), Field("d", "Date32")])
    local, spark = pair(tmp_path, spark_engine, schema, partition_by=["p", "d"])
    rows = [{"id": i, "p": v, "d": date(2024, 1, 1 + i % 2)} for i, v in enumerate(ODD)]
    local.insert(rows)
    snap = snapshot_of(DeltaLog.open(str(tmp_path / "t")))
    frame, _ = _frames.snapshot_frame(spark_session, snap, native=native)
    got = sorted(frame.toArrow().to_pylist(), key=lambda r: r["id"])
    # an empty partition value is NULL (the Delta protocol): written and read as NULL
    assert got == [{**r, "p": r["p"] or None} for r in rows]
    assert spark.query("SELECT p FROM data WHERE p = ''").fetchall() == []
    assert spark.query("SELECT count(*) FROM data WHERE p IS NULL").scalar() == 2


def test_many_partitions_read_through_arrow(
    tmp_path: Path, spark_engine: SparkEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_frames, "MAX_NATIVE_GROUPS", 2)
    local, spark = pair(tmp_path, spark_engine, {"id": "Int64", "p": "Int32"}, partition_by=["p"])
    local.insert([{"id": i, "p": i % 5} for i in range(20)])
    assert spark.query("SELECT p, count(*) AS n FROM data GROUP BY p ORDER BY p").fetchall() == [
        (p, 4) for p in range(5)
    ]
    assert spark.delete_rows_where("p = 3 AND id > 10") == 2
    assert local.query("SELECT count(*) FROM data").scalar() == 18


def test_time_travel_by_version_and_time(tmp_path: Path, spark_engine: SparkEngine) -> None:
    local, spark = pair(tmp_path, spark_engine, {"id": "Int64"})
    local.insert([{"id": 1}])
    local.insert([{"id": 2}])
    local.delete_rows_where("id = 1")
    assert spark.query("SELECT id FROM data ORDER BY id", version=2).fetchall() == [(1,), (2,)]
    assert spark.query_version_json("SELECT count(*) AS n FROM data", 1) == '[{"n": 1}]'
    at_v2 = local.commit_time(2)
    assert spark.query("SELECT count(*) FROM data", as_of=at_v2).scalar() == 2
    assert spark.query("SELECT count(*) FROM data").scalar() == 1
    with pytest.raises(VersionError):
        spark.query("SELECT 1", version=42)


def test_query_json_and_result_object(tmp_path: Path, spark_engine: SparkEngine) -> None:
    local, spark = pair(tmp_path, spark_engine, {"id": "Int64", "name": "String"})
    local.insert([{"id": 1, "name": "a"}, {"id": 2, "name": None}])
    sql = "SELECT id, name FROM data ORDER BY id"
    assert spark.query_json(sql) == local.query_json(sql)
    result = spark.query(sql)
    assert type(result) is type(local.query(sql))
    assert result.fetchall() == [(1, "a"), (2, None)]


@pytest.mark.parametrize("sql", ["SELEC 1", "SELECT nope FROM data", "SELECT * FROM missing"])
def test_bad_sql_is_a_query_error(tmp_path: Path, spark_engine: SparkEngine, sql: str) -> None:
    _, spark = pair(tmp_path, spark_engine, {"id": "Int64"})
    with pytest.raises(QueryError):
        spark.query(sql)


def test_warm_query_reuses_the_cached_plan(tmp_path: Path, spark_engine: SparkEngine) -> None:
    local, spark = pair(tmp_path, spark_engine, {"id": "Int64"})
    local.insert([{"id": i} for i in range(10)])
    spark.query("SELECT count(*) FROM data")
    log = DeltaLog.open(str(tmp_path / "t"))
    first = spark_engine.frame(log)[0]
    spark.query("SELECT sum(id) FROM data")
    assert spark_engine.frame(log)[0] is first
    local.insert([{"id": 10}])
    assert spark.query("SELECT count(*) FROM data").scalar() == 11  # a new version, a new plan
