"""The original project's maintenance and file names, kept as thin aliases."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from posixlake import Credentials, DatabaseOps, InvalidOperation, VersionError, security
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


def test_original_time_travel_and_history_names(db: DatabaseOps) -> None:
    assert db.get_current_version() == db.version == 3
    assert json.loads(db.query_json_at_version("SELECT count(*) AS n FROM data", 1)) == [{"n": 1}]
    history = db.get_version_history()
    assert [h["version"] for h in history] == [3, 2, 1, 0]
    assert history[-1]["operation"] == "CREATE TABLE"
    at_v2 = history[1]["timestamp"]  # epoch milliseconds
    assert json.loads(db.query_json_at_timestamp("SELECT count(*) AS n FROM data", at_v2)) == [
        {"n": 2}
    ]
    # whole epoch seconds, as the original took them: the latest version by then
    seconds = int(time.time()) + 1
    assert json.loads(db.query_json_at_timestamp("SELECT count(*) AS n FROM data", seconds)) == [
        {"n": 3}
    ]
    with pytest.raises(VersionError):
        db.query_json_at_timestamp("SELECT 1", 10)  # 1970: before the table existed
    assert db.health_check()  # truthy when healthy, as the original's bool


def test_credentials_value_and_single_role(
    tmp_path: Path, local_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")  # fast hashing for the test
    admin = Credentials(username="admin", password="s3cret-pass")
    db = DatabaseOps.create(
        tmp_path / "auth", {"id": "Int64"}, auth=True, credentials=admin, engine=local_engine
    )
    db.create_user("ana", "ana-password", role="write")
    assert {u.name: list(u.roles) for u in db.list_users()}["ana"] == ["write"]
    again = DatabaseOps.open_with_credentials(tmp_path / "auth", admin, engine=local_engine)
    assert again.user == "admin"
    ana = DatabaseOps.open_with_credentials(
        tmp_path / "auth", "ana", "ana-password", engine=local_engine
    )
    assert ana.insert({"id": 1}) == 1
    with pytest.raises(InvalidOperation):
        DatabaseOps.open_with_credentials(tmp_path / "auth", "ana")
