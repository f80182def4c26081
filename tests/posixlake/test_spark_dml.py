"""Differential tests: Spark copy-on-write DML equals delta-rs DML on the same inputs.

Each case builds the same table twice, applies the same operation with the local engine
(delta-rs) to one and the Spark engine to the other, and compares every row (read the
same way), the counts returned and the number of commits. Tables hold NULLs and every
type, and are partitioned by a string column whose values are empty, a space, ``/``,
``=``, ``%`` and non-ASCII.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.delta._snapshot import snapshot_of
from posixlake.engines import LocalEngine
from posixlake.engines.spark import SparkEngine, _core, _dml, _frames
from posixlake.engines.spark._dml import SparkDml
from tests.posixlake._spark_files import stray_spark_files
from tests.posixlake.test_spark_engine import ALL_TYPES, ODD, all_types_rows

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def spark_jobs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the Spark DML jobs; outside the ``in_place`` tests, every DML is one.

    A small DML in the subset delta-rs evaluates the same is run by delta-rs in place
    (see ``_dml.in_place``); the differential tests compare Spark's copy-on-write with
    delta-rs, so they turn that off.
    """
    if "in_place" not in request.node.name:
        monkeypatch.setattr(_dml, "DELTA_RS_MAX_ROWS", -1)
    jobs: list[str] = []
    real = SparkDml._touched

    def touched(self: SparkDml, log: Any, predicate: str, what: str) -> Any:
        jobs.append(what)
        return real(self, log, predicate, what)

    monkeypatch.setattr(SparkDml, "_touched", touched)
    return jobs


SCHEMA = Schema([*ALL_TYPES.fields, Field("p", "String")], primary_key="id")


def rows() -> list[dict[str, Any]]:
    out = all_types_rows(12)
    for i, r in enumerate(out):
        r["p"] = ODD[i % len(ODD)]
    return out


def build(path: Path, engine: Any, *, partitioned: bool) -> DatabaseOps:
    db = DatabaseOps.create(
        path, SCHEMA, engine=engine, partition_by=["p"] if partitioned else None
    )
    data = rows()
    db.insert(data[:7])  # two commits: several files per partition
    db.insert(data[7:])
    return db


def table_rows(db: DatabaseOps) -> list[dict[str, Any]]:
    return sorted(db.to_arrow().to_pylist(), key=lambda r: r["id"])


Op = Callable[[DatabaseOps], Any]


def differential(tmp_path: Path, spark_session: Any, op: Op, *, partitioned: bool) -> Any:
    local = build(tmp_path / "local", LocalEngine(), partitioned=partitioned)
    spark = build(tmp_path / "spark", SparkEngine(spark=spark_session), partitioned=partitioned)
    want = op(local)
    got = op(spark)
    assert table_rows(spark) == table_rows(local)
    assert spark.version == local.version
    # the Spark read path sees exactly the same rows
    assert spark.query("SELECT * FROM data ORDER BY id").to_pylist() == table_rows(local)
    assert stray_spark_files(tmp_path / "spark") == []  # no debris of the Spark jobs
    return want, got


DELETES = [
    "id % 3 = 0",
    "s IS NULL",
    "f64 > 1.5 OR b",
    "p = ''",
    "p = 'a/b' OR p = 'x=y' OR p = '50%'",
    "p IS NULL",
    "i32 IS NULL AND id > 50",
    "id > 1000",
    "true",
]


def layouts(n: int, flat: int) -> list[Any]:
    """Every case on a partitioned table, the first ``flat`` also on an unpartitioned one."""
    return [pytest.param(i, True, id=f"{i}-partitioned") for i in range(n)] + [
        pytest.param(i, False, id=f"{i}-flat") for i in range(flat)
    ]


@pytest.mark.parametrize(("case", "partitioned"), layouts(len(DELETES), 3))
def test_delete(tmp_path: Path, spark_session: Any, case: int, partitioned: bool) -> None:
    predicate = DELETES[case]
    want, got = differential(
        tmp_path, spark_session, lambda db: db.delete_rows_where(predicate), partitioned=partitioned
    )
    assert got == want


UPDATES: list[tuple[str | None, dict[str, Any] | None, dict[str, str] | None]] = [
    ("id < 4", {"s": "new"}, None),
    ("b", None, {"i32": "i32 + 1", "f64": "f64 * 2"}),
    ("s IS NULL", {"dec": "7.5", "s": "was null"}, None),
    ("p = ' '", {"p": "moved/here"}, None),
    (None, None, {"i16": "i16 - 1"}),
    ("id = 99", {"tags": None, "b": True}, None),
    ("id > 1000", {"s": "none"}, None),
]


@pytest.mark.parametrize(("case", "partitioned"), layouts(len(UPDATES), 3))
def test_update(tmp_path: Path, spark_session: Any, case: int, partitioned: bool) -> None:
    predicate, values, expressions = UPDATES[case]
    want, got = differential(
        tmp_path,
        spark_session,
        lambda db: db.update(predicate, values, expressions=expressions),
        partitioned=partitioned,
    )
    assert got == want


MERGES: list[list[dict[str, Any]]] = [
    [
        {"_op": "UPDATE", "id": 1, "s": "one", "p": ""},
        {"_op": "DELETE", "id": 2},
        {"_op": "INSERT", "id": 500, "s": "new", "p": "ü", "tags": [1]},
        {"_op": "UPDATE", "id": 99, "b": False},
    ],
    # rows that do not apply are skipped; a partial UPDATE keeps the other columns
    [
        {"_op": "UPDATE", "id": 3, "f64": None},
        {"_op": "UPDATE", "id": 4, "s": "four"},
        {"_op": "INSERT", "id": 5, "s": "exists"},
        {"_op": "DELETE", "id": 777},
    ],
    [{"_op": "DELETE", "id": i} for i in range(0, 12, 2)],
    [{"_op": "INSERT", "id": 600 + i, "p": v} for i, v in enumerate(ODD)],
]


@pytest.mark.parametrize(("case", "partitioned"), layouts(len(MERGES), 2))
def test_merge(tmp_path: Path, spark_session: Any, case: int, partitioned: bool) -> None:
    want, got = differential(
        tmp_path, spark_session, lambda db: db.merge(MERGES[case]), partitioned=partitioned
    )
    assert (got.rows_inserted, got.rows_updated, got.rows_deleted, got.rows_skipped) == (
        want.rows_inserted,
        want.rows_updated,
        want.rows_deleted,
        want.rows_skipped,
    )


def test_upsert_of_rows_in_memory(tmp_path: Path, spark_session: Any) -> None:
    batch = [{"id": 1, "s": "up"}, {"id": 1000, "s": "in", "p": "a/b"}]
    differential(
        tmp_path, spark_session, lambda db: db.insert(batch, upsert=True), partitioned=True
    )


# -- small DML run by delta-rs in place ----------------------------------------------------

IN_PLACE: list[tuple[str, dict[str, Any] | None]] = [
    ("id = 3", None),
    ("id IN (1, 2, 7) AND NOT b", None),
    ("id BETWEEN 2 AND 5 OR s IS NULL", None),
    ("5 < id AND i8 <> -1", None),
    ("p = 'a/b' OR p IS NULL", None),
    ("id = 1000", None),  # nothing matches: no commit
    ("true", None),
    ("id = 4", {"s": "four", "i16": 7, "b": None}),
    ("s IS NOT NULL AND id >= 6", {"i32": -5}),
    ("true", {"s": "all"}),
]


@pytest.mark.parametrize("case", range(len(IN_PLACE)))
def test_small_dml_in_place_equals_delta_rs_without_a_spark_job(
    tmp_path: Path, spark_session: Any, spark_jobs: list[str], case: int
) -> None:
    predicate, values = IN_PLACE[case]

    def op(db: DatabaseOps) -> Any:
        if values is None:
            return db.delete_rows_where(predicate)
        return db.update(predicate, values)

    want, got = differential(tmp_path, spark_session, op, partitioned=True)
    assert got == want
    assert spark_jobs == []


def test_small_dml_in_place_starts_no_spark_and_resolves_no_snapshot(
    tmp_path: Path, spark_jobs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without deletion vectors in the protocol, no file is looked at for one: the
    snapshot (a walk over every file) is not resolved, and Spark never starts."""
    engine = SparkEngine(master="local[1]")
    db = build(tmp_path / "t", engine, partitioned=False)
    want = {r["id"]: r["s"] for r in table_rows(db) if r["id"] != 3} | {4: "four"}
    resolved: list[int] = []

    def recording(log: Any) -> Any:
        resolved.append(log.version)
        return snapshot_of(log)

    monkeypatch.setattr(_core, "snapshot_of", recording)
    assert db.delete_rows_where("id = 3") == 1
    assert db.update("id = 4", {"s": "four"}) == 1
    assert (spark_jobs, resolved, engine.started) == ([], [], False)
    assert {r["id"]: r["s"] for r in table_rows(db)} == want


@pytest.mark.parametrize(
    ("predicate", "values"),
    [
        ("id % 3 = 0", None),  # arithmetic
        ("f64 > 1.5", None),  # floats
        ("s = 'it''s'", None),  # Spark reads adjacent literals as one
        ("id = 4", {"f64": 2.5}),
        ("id = 4", {"p": "moved"}),  # a partition column
    ],
)
def test_dml_outside_the_in_place_subset_stays_on_spark(
    tmp_path: Path,
    spark_session: Any,
    spark_jobs: list[str],
    predicate: str,
    values: dict[str, Any] | None,
) -> None:
    db = build(tmp_path / "t", SparkEngine(spark=spark_session), partitioned=True)
    if values is None:
        db.delete_rows_where(predicate)
    else:
        db.update(predicate, values)
    assert len(spark_jobs) == 1


def test_a_large_dml_stays_on_spark_even_in_the_subset(
    tmp_path: Path, spark_session: Any, spark_jobs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = build(tmp_path / "t", SparkEngine(spark=spark_session), partitioned=False)
    monkeypatch.setattr(_dml, "DELTA_RS_MAX_ROWS", 4)  # 13 rows in 2 files (7 and 6)
    db.delete_rows_where("id = 1")  # the statistics leave the file of 7 rows: > 4
    assert spark_jobs == ["delete"]
    db.delete_rows_where("id > 2")  # the statistics cannot narrow it: 12 rows
    assert spark_jobs == ["delete", "delete"]
    db.delete_rows_where("id = 2")  # now in a file of 2 rows: small enough
    assert spark_jobs == ["delete", "delete"]
    assert sorted(db.to_arrow().column("id").to_pylist()) == [0]


@pytest.mark.parametrize(
    ("predicate", "files"),
    [("id = 8", 1), ("id = 8 OR id = 2", 2), ("id = 8 AND s IS NULL", 1), ("id = 500", 0)],
)
def test_the_spark_job_reads_only_the_files_the_statistics_leave(
    tmp_path: Path,
    spark_session: Any,
    monkeypatch: pytest.MonkeyPatch,
    predicate: str,
    files: int,
) -> None:
    scanned: list[int] = []
    real = _frames.snapshot_frame

    def recording(spark: Any, snap: Any, **kwargs: Any) -> Any:
        if kwargs.get("with_file"):
            scanned.append(len(kwargs.get("files") or snap.files))
        return real(spark, snap, **kwargs)

    monkeypatch.setattr(_dml, "snapshot_frame", recording)
    want, got = differential(
        tmp_path, spark_session, lambda db: db.delete_rows_where(predicate), partitioned=False
    )
    assert got == want
    assert scanned == ([files] if files else [])  # of 2 files (ids 0-6, then 7-11 and 99)
