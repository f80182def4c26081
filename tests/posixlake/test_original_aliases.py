"""The original project's maintenance and file names, kept as thin aliases."""

from __future__ import annotations

from pathlib import Path

import pytest

from posixlake import DatabaseOps, InvalidOperation
from posixlake.engines import Engine


@pytest.fixture
def db(tmp_path: Path, local_engine: Engine) -> DatabaseOps:
    table = DatabaseOps.create(
        tmp_path / "t", {"id": "Int64", "day": "String"}, engine=local_engine, partition_by=["day"]
    )
    for i in range(3):
        table.insert({"id": i, "day": "a" if i else "b"})
    return table


def test_base_path_and_parquet_files(db: DatabaseOps, tmp_path: Path) -> None:
    assert db.get_base_path() == str(tmp_path / "t")
    files = db.list_parquet_files()
    assert len(files) == 3
    assert all((tmp_path / "t" / f).is_file() for f in files)
    assert sorted(f.split("/")[0] for f in files) == ["day=a", "day=a", "day=b"]


def test_optimize_with_filter_compacts_only_that_partition(db: DatabaseOps) -> None:
    result = db.optimize_with_filter("day = 'a'")
    assert (result.files_added, result.files_removed) == (1, 2)
    assert sorted(f.split("/")[0] for f in db.list_parquet_files()) == ["day=a", "day=b"]
    assert db.optimize_with_filter([("day", "=", "b")]).version is None  # one file: nothing to do


def test_optimize_with_target_size_and_vacuum_dry_run(db: DatabaseOps) -> None:
    before = set(db.list_parquet_files())
    assert db.optimize_with_target_size(1 << 20).files_removed == 2  # partition "b" has one file
    removed = before - set(db.list_parquet_files())
    assert len(removed) == 2
    assert db.vacuum_dry_run() == []  # within the default retention
    listed = db.vacuum(0, dry_run=True, enforce_retention_duration=False).files
    assert set(listed) == removed
    assert db.query("SELECT count(*) FROM data").scalar() == 3


def test_bad_partition_filter_changes_nothing(db: DatabaseOps) -> None:
    version = db.version
    with pytest.raises(InvalidOperation, match="partition filter"):
        db.optimize_with_filter("day ~ 'a'")
    assert db.version == version
    assert len(db.list_parquet_files()) == 3
