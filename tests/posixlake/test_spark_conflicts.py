"""Concurrent commits between a Spark operation's read and its commit.

``SparkEngine.before_commit`` runs right before each commit attempt; here it makes
another writer (the local engine, through its own DeltaLog) commit at that moment. The
Spark operation must detect the conflict, re-plan from the new version and commit, never
duplicating or resurrecting rows, and leave no stray files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.delta._retry import DELTA_RS_RETRIES
from posixlake.engines import LocalEngine
from posixlake.engines.spark import SparkEngine, _dml
from posixlake.errors import CommitConflict, DuplicateKeyError
from tests.posixlake._spark_files import stray_spark_files

pytestmark = pytest.mark.spark

SCHEMA = Schema([Field("id", "Int64", False), Field("v", "String")], primary_key="id")


@pytest.fixture
def engine(spark_session: Any, monkeypatch: pytest.MonkeyPatch) -> SparkEngine:
    # every DML a Spark job (a small one would otherwise run on delta-rs in place, whose
    # commits this seam does not reach)
    monkeypatch.setattr(_dml, "DELTA_RS_MAX_ROWS", -1)
    return SparkEngine(spark=spark_session)


def setup(tmp_path: Path, engine: SparkEngine, n: int = 10) -> tuple[DatabaseOps, DatabaseOps]:
    path = tmp_path / "t"
    db = DatabaseOps.create(path, SCHEMA, engine=engine)
    db.insert([{"id": i, "v": f"v{i}"} for i in range(n)])
    other = DatabaseOps.open(path, engine=LocalEngine())
    return db, other


def on_first_attempt(engine: SparkEngine, action: Callable[[], Any]) -> list[int]:
    """Run ``action`` (a concurrent commit) right before the first commit attempt."""
    attempts: list[int] = []

    def hook(attempt: int) -> None:
        attempts.append(attempt)
        if attempt == 0:
            action()

    engine.before_commit = hook
    return attempts


def rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return db.query("SELECT id, v FROM data ORDER BY id").fetchall()


def stray_files(path: Path) -> list[str]:
    """Spark-written Parquet files that no commit ever added."""
    return stray_spark_files(path)


def test_delete_retries_after_a_concurrent_delete_and_resurrects_nothing(
    tmp_path: Path, engine: SparkEngine
) -> None:
    db, other = setup(tmp_path, engine)
    attempts = on_first_attempt(engine, lambda: other.delete_rows_where("id = 5"))
    assert db.delete_rows_where("id = 3") == 1
    assert attempts == [0, 1]
    assert [r[0] for r in rows(db)] == [0, 1, 2, 4, 6, 7, 8, 9]
    assert db.version == 3
    assert stray_files(tmp_path / "t") == []


def test_update_retries_and_keeps_the_concurrent_change(
    tmp_path: Path, engine: SparkEngine
) -> None:
    db, other = setup(tmp_path, engine)
    attempts = on_first_attempt(engine, lambda: other.update("id = 1", {"v": "theirs"}))
    assert db.update("id = 2", {"v": "ours"}) == 1
    assert attempts == [0, 1]
    got = dict(rows(db))
    assert (got[1], got[2], len(got)) == ("theirs", "ours", 10)
    assert stray_files(tmp_path / "t") == []


def test_delete_with_a_concurrent_append_keeps_the_new_rows(
    tmp_path: Path, engine: SparkEngine
) -> None:
    db, other = setup(tmp_path, engine)
    on_first_attempt(engine, lambda: other.insert([{"id": 100, "v": "new"}]))
    assert db.delete_rows_where("id < 5") == 5
    assert [r[0] for r in rows(db)] == [5, 6, 7, 8, 9, 100]
    assert db.version == 3
    assert stray_files(tmp_path / "t") == []


def test_merge_insert_replans_when_the_key_appears_meanwhile(
    tmp_path: Path, engine: SparkEngine
) -> None:
    db, other = setup(tmp_path, engine)
    attempts = on_first_attempt(engine, lambda: other.insert([{"id": 50, "v": "theirs"}]))
    result = db.merge(
        [{"_op": "INSERT", "id": 50, "v": "ours"}, {"_op": "UPDATE", "id": 1, "v": "one"}]
    )
    assert attempts == [0, 1]
    assert (result.rows_inserted, result.rows_updated) == (0, 1)  # the key exists now
    got = rows(db)
    assert [r for r in got if r[0] == 50] == [(50, "theirs")]  # never duplicated
    assert result.version == db.version
    assert stray_files(tmp_path / "t") == []


def test_keyed_insert_of_a_dataframe_rechecks_keys_after_a_conflict(
    tmp_path: Path, engine: SparkEngine, spark_session: Any
) -> None:
    db, other = setup(tmp_path, engine)
    df = spark_session.createDataFrame([(20, "a"), (21, "b")], "id long, v string")
    attempts = on_first_attempt(engine, lambda: other.insert([{"id": 21, "v": "theirs"}]))
    before = db.version
    with pytest.raises(DuplicateKeyError):
        engine.insert_external(db._log, df, key=["id"], metadata={})
    assert attempts == [0]
    db._log.refresh()
    assert db.version == before + 1  # only the other writer's commit
    assert [r for r in rows(db) if r[0] >= 20] == [(21, "theirs")]
    assert stray_files(tmp_path / "t") == []


def test_gives_up_after_bounded_attempts(tmp_path: Path, engine: SparkEngine) -> None:
    db, other = setup(tmp_path, engine, n=20)
    # the log's one retry policy bounds the Spark re-plans: 4 plannings here (the
    # default, MAX_ATTEMPTS, is the same bound: tests/posixlake/test_retry.py)
    plannings = 4
    db._log.retry.max_attempts = plannings * (1 + DELTA_RS_RETRIES)
    db._log.retry.sleep = lambda _s: None

    def always(attempt: int) -> None:
        other.delete_rows_where(f"id = {attempt}")

    engine.before_commit = always
    with pytest.raises(CommitConflict, match="attempt bound"):
        db.update("id >= 0", {"v": "x"})
    assert db.query("SELECT count(*) FROM data WHERE v = 'x'").scalar() == 0
    assert db.query("SELECT count(*) FROM data").scalar() == 20 - plannings
    assert stray_files(tmp_path / "t") == []
