"""Change data feed: create(change_data_feed=True) and db.changes(), on both engines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.engines import Engine
from posixlake.errors import InvalidOperation, VersionError


def _changes(db: DatabaseOps, start: int, end: int | None = None) -> list[tuple[Any, ...]]:
    result = db.changes(start, end)
    names = result.arrow().column_names
    assert {"_change_type", "_commit_version", "_commit_timestamp"} <= set(names)
    return sorted(
        (r["_commit_version"], r["_change_type"], r["id"], r["name"]) for r in result.to_pylist()
    )


def test_changes_of_each_write(tmp_path: Path, engine: Engine) -> None:
    db = DatabaseOps.create(
        str(tmp_path / "t"),
        Schema([Field("id", "Int64", nullable=False), Field("name", "String")], primary_key="id"),
        engine=engine,
        change_data_feed=True,
    )
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}])  # v1
    assert db.update("id = 2", {"name": "B"}) == 1  # v2
    assert db.delete_rows_where("id = 3") == 1  # v3
    db.merge([{"_op": "UPDATE", "id": 1, "name": "A"}, {"_op": "INSERT", "id": 4, "name": "d"}])
    assert _changes(db, 1) == [
        (1, "insert", 1, "a"),
        (1, "insert", 2, "b"),
        (1, "insert", 3, "c"),
        (2, "update_postimage", 2, "B"),
        (2, "update_preimage", 2, "b"),
        (3, "delete", 3, "c"),
        (4, "insert", 4, "d"),
        (4, "update_postimage", 1, "A"),
        (4, "update_preimage", 1, "a"),
    ]
    assert _changes(db, 2, 2) == [(2, "update_postimage", 2, "B"), (2, "update_preimage", 2, "b")]
    with pytest.raises(VersionError):
        db.changes(9)


def test_changes_need_the_feed(tmp_path: Path, local_engine: Engine) -> None:
    db = DatabaseOps.create(str(tmp_path / "t"), {"id": "Int64"}, engine=local_engine)
    with pytest.raises(InvalidOperation, match="change data feed"):
        db.changes(0)


@pytest.mark.spark
def test_spark_bulk_insert_shows_in_the_feed(tmp_path: Path, spark_session: Any) -> None:
    """Files a Spark job writes are plain adds: the feed shows their rows as inserts."""
    from posixlake.engines.spark import SparkEngine

    db = DatabaseOps.create(
        str(tmp_path / "t"),
        {"id": "Int64", "name": "String"},
        engine=SparkEngine(spark=spark_session),
        change_data_feed=True,
    )
    frame = spark_session.createDataFrame([(1, "a"), (2, "b")], "id long, name string")
    assert db.insert(frame) == 2
    assert db.delete_rows_where("id = 1") == 1
    assert _changes(db, 0) == [(1, "insert", 1, "a"), (1, "insert", 2, "b"), (2, "delete", 1, "a")]
