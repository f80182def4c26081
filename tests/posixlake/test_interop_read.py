"""Tables other writers made read exactly as delta-rs' own reader reads them, on both engines.

Deletion vectors (Databricks), column mapping (Spark; deltalake in name and id modes,
nested fields, partition values), v2 checkpoints with sidecars, v1 checkpoints, change
data feed tables, timestamp_ntz, partition values of every type, INT96 timestamps
outside the nanosecond range, files without statistics; and time travel on them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from posixlake import DatabaseOps
from posixlake.engines import Engine
from tests.posixlake.interop_tables import FAR_TIMES, KINDS, reference, sort_rows


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_read_equals_delta_rs(kind: str, tmp_path: Path, engine: Engine) -> None:
    uri = KINDS[kind](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    got = sort_rows(db.query("SELECT * FROM data").to_pylist())
    assert got == reference(uri)
    assert db.query("SELECT count(*) FROM data").scalar() == len(got)


@pytest.mark.parametrize(
    "kind", ["dv-databricks", "checkpoint-v2-databricks", "cdf", "log-compaction"]
)
def test_time_travel_equals_delta_rs(kind: str, tmp_path: Path, engine: Engine) -> None:
    uri = KINDS[kind](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    for version in range(db.version + 1):
        got = sort_rows(db.query("SELECT * FROM data", version=version).to_pylist())
        assert got == reference(uri, version), version


def test_deletion_vector_rows_are_gone(tmp_path: Path, engine: Engine) -> None:
    db = DatabaseOps.open(KINDS["dv-databricks"](tmp_path), engine=engine)
    values = [r[0] for r in db.query("SELECT value FROM data ORDER BY value").fetchall()]
    assert values == [1, 2, 3, 4, 5, 6, 7, 8]  # 0 and 9 are deleted by the vector
    assert [r[0] for r in db.query("SELECT value FROM data", version=0).fetchall()] != values


def test_column_mapping_logical_names(tmp_path: Path, engine: Engine) -> None:
    db = DatabaseOps.open(KINDS["column-mapping-id"](tmp_path), engine=engine)
    rows = db.query('SELECT id, "Super Name", part, nested FROM data ORDER BY id')
    if engine.name == "spark":
        rows = db.query("SELECT id, `Super Name`, part, nested FROM data ORDER BY id")
    assert rows.fetchall() == [
        (1, "x", "p 1", {"a b": 1, "c": "u"}),
        (2, None, "p/2", None),
        (3, "z", None, {"a b": None, "c": "w"}),
    ]


def test_int96_far_timestamps_come_back_as_written(tmp_path: Path, engine: Engine) -> None:
    db = DatabaseOps.open(KINDS["int96"](tmp_path), engine=engine)
    rows = db.query("SELECT ntz, ts FROM data ORDER BY id").fetchall()
    assert [r[0] for r in rows] == FAR_TIMES
    assert [None if r[1] is None else r[1].replace(tzinfo=None) for r in rows] == FAR_TIMES


def test_nfs_rendering_keeps_far_timestamps(tmp_path: Path, engine: Engine) -> None:
    """data.csv over NFS is rendered from ``to_arrow``: years 0001 and 9999 survive."""
    from posixlake.csvcodec import render_csv

    db = DatabaseOps.open(KINDS["int96"](tmp_path), engine=engine)
    text = render_csv(db.to_arrow().sort_by("id")).decode()
    assert "9999-12-31" in text and "0001-01-01" in text and "1816" not in text


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["dv-databricks", "column-mapping-spark", "column-mapping-id"])
def test_posixlake_data_source_reads_like_delta_rs(
    kind: str, tmp_path: Path, spark_session: Any
) -> None:
    from posixlake.engines.spark._datasource import register_data_source

    uri = KINDS[kind](tmp_path)
    register_data_source(spark_session)
    frame = spark_session.read.format("posixlake").load(uri)
    got = sort_rows([r.asDict(recursive=True) for r in frame.collect()])
    assert got == reference(uri)


@pytest.mark.spark
@pytest.mark.parametrize("native", [True, False], ids=["spark-parquet", "pyarrow"])
@pytest.mark.parametrize(
    "kind", ["dv-databricks", "column-mapping-spark", "column-mapping-id", "int96"]
)
def test_both_spark_read_paths(kind: str, native: bool, tmp_path: Path, spark_session: Any) -> None:
    """Spark's Parquet reader (``_metadata.row_index``, physical names) and the pyarrow
    reader in Spark tasks both read what delta-rs reads."""
    from posixlake.delta import DeltaLog, snapshot_of
    from posixlake.engines.spark._frames import snapshot_frame

    uri = KINDS[kind](tmp_path)
    frame, _ = snapshot_frame(spark_session, snapshot_of(DeltaLog.open(uri)), native=native)
    want = reference(uri)
    if kind == "int96":  # collect() turns TIMESTAMP into local time (year 0): use Arrow
        got = sort_rows(frame.select("id", "ntz").toArrow().to_pylist())
        want = [{"id": r["id"], "ntz": r["ntz"]} for r in want]
    else:
        got = sort_rows([r.asDict(recursive=True) for r in frame.collect()])
    assert got == want
