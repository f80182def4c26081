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
    # 1970: before the table existed: no rows, as the original answered
    assert db.query_json_at_timestamp("SELECT 1", 10) == "[]"
    with pytest.raises(VersionError):  # our own API: there is no such version
        db.query("SELECT 1", as_of=10)
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


# Every function and method of the original's generated bindings (posixlake 0.4.0), with
# its parameters in order: code calling them positionally or by keyword runs unchanged.
ORIGINAL_METHODS = {
    "backup": ["backup_path"],
    "backup_incremental": ["base_backup_path", "incremental_path"],
    "create_user": ["username", "password", "roles"],
    "delete_rows_where": ["predicate"],
    "flush_write_buffer": [],
    "get_base_path": [],
    "get_data_skipping_stats": [],
    "get_metrics": [],
    "get_schema": [],
    "health_check": [],
    "insert_buffered_json": ["json_data"],
    "insert_json": ["json_data"],
    "list_parquet_files": [],
    "merge_json": ["json_data", "join_column"],
    "optimize": [],
    "optimize_with_filter": ["filter"],
    "optimize_with_target_size": ["target_size_bytes"],
    "primary_key": [],
    "query": ["sql"],
    "query_json": ["sql"],
    "query_timestamp": ["sql", "timestamp_ms"],
    "query_timestamp_json": ["sql", "timestamp_ms"],
    "query_version": ["sql", "version"],
    "query_version_json": ["sql", "version"],
    "set_primary_key": ["column_name"],
    "vacuum": ["retention_hours"],
    "vacuum_dry_run": ["retention_hours"],
    "zorder": ["columns"],
}
ORIGINAL_CONSTRUCTORS = {
    "create": ["path", "schema"],
    "create_from_csv": ["db_path", "csv_path"],
    "create_from_parquet": ["db_path", "parquet_path"],
    "create_with_auth": ["path", "schema", "auth_enabled"],
    "create_with_azure": ["azure_path", "schema", "azure_config"],
    "create_with_s3": ["s3_path", "schema", "s3_config"],
    "open": ["path"],
    "open_with_azure": ["azure_path", "azure_config"],
    "open_with_credentials": ["path", "username", "password"],
    "open_with_s3": ["s3_path", "s3_config"],
}
ORIGINAL_FUNCTIONS = {
    "get_backup_metadata": ["backup_path"],
    "get_backup_metadata_with_credentials": ["backup_path", "username", "password"],
    "restore": ["backup_path", "restore_path"],
    "restore_to_transaction": ["backup_path", "restore_path", "transaction_id"],
    "restore_to_transaction_with_credentials": [
        "backup_path",
        "restore_path",
        "transaction_id",
        "username",
        "password",
    ],
    "restore_with_credentials": ["backup_path", "restore_path", "username", "password"],
    "verify_backup": ["backup_path"],
    "verify_backup_with_credentials": ["backup_path", "username", "password"],
}
ORIGINAL_NFS = {
    "__init__": ["db", "port"],
    "get_mount_command": ["mount_point"],
    "get_port": [],
    "get_unmount_command": ["mount_point"],
    "is_ready": [],
    "shutdown": [],
}


def _leading(fn: object, skip: int) -> list[str]:
    """The names a caller may pass positionally (after ``skip`` bound ones: self, cls)."""
    import inspect

    params = list(inspect.signature(fn).parameters.values())[skip:]  # type: ignore[arg-type]
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


@pytest.mark.parametrize(("name", "params"), sorted(ORIGINAL_METHODS.items()))
def test_original_method_signatures(name: str, params: list[str]) -> None:
    from posixlake import Optimizer

    method = Optimizer.__call__ if name == "optimize" else getattr(DatabaseOps, name)
    assert _leading(method, 1)[: len(params)] == params


@pytest.mark.parametrize(("name", "params"), sorted(ORIGINAL_CONSTRUCTORS.items()))
def test_original_constructor_signatures(name: str, params: list[str]) -> None:
    assert _leading(getattr(DatabaseOps, name), 0)[: len(params)] == params


@pytest.mark.parametrize(("name", "params"), sorted(ORIGINAL_FUNCTIONS.items()))
def test_original_module_function_signatures(name: str, params: list[str]) -> None:
    import posixlake

    assert _leading(getattr(posixlake, name), 0)[: len(params)] == params


@pytest.mark.parametrize(("name", "params"), sorted(ORIGINAL_NFS.items()))
def test_original_nfs_server_signatures(name: str, params: list[str]) -> None:
    from posixlake import NfsServer

    assert _leading(getattr(NfsServer, name), 1)[: len(params)] == params
