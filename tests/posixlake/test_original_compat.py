"""Code written for the original posixlake (0.4.0) runs unchanged: names, keywords, records.

Each test names the item of the compatibility issue it pins. What the original does was
observed with ../shared/tools/original-posixlake (see its BEHAVIOUR.md); these tests do
not need it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import posixlake
from posixlake import (
    AuthenticationError,
    DatabaseOps,
    Field,
    PermissionDenied,
    PosixLakeError,
    Schema,
    security,
)
from posixlake.engines import Engine


@pytest.fixture(autouse=True)
def _fast_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")
    monkeypatch.delenv(security.ADMIN_PASSWORD_ENV, raising=False)


def _people(tmp_path: Path, engine: Engine, name: str = "t") -> DatabaseOps:
    schema = Schema(
        fields=[
            Field(name="id", data_type="Int32", nullable=False),
            Field(name="name", data_type="String", nullable=False),
            Field(name="age", data_type="Int32", nullable=True),
        ],
        primary_key="id",
    )
    db = DatabaseOps.create(str(tmp_path / name), schema, engine=engine)
    db.insert_json('[{"id": 1, "name": "Alice", "age": 30}, {"id": 2, "name": "Bob", "age": 25}]')
    return db


# -- 1. module-level backup functions -------------------------------------------------------


def test_module_level_backup_functions(tmp_path: Path, local_engine: Engine) -> None:
    from posixlake import (
        get_backup_metadata,
        restore,
        restore_to_transaction,
        verify_backup,
    )

    db = _people(tmp_path, local_engine)
    db.backup(backup_path=str(tmp_path / "bk"))
    meta = get_backup_metadata(backup_path=str(tmp_path / "bk"))
    stored = [f for f in (tmp_path / "bk" / "files").rglob("*") if f.is_file()]
    assert (meta.total_rows, meta.total_files) == (2, len(stored))
    assert meta.total_size_bytes == sum(f.stat().st_size for f in stored)
    report = verify_backup(str(tmp_path / "bk"))
    assert report.files_verified == report.files_checked > 0
    assert report.schema_valid and report.ok
    restore(backup_path=str(tmp_path / "bk"), restore_path=str(tmp_path / "r1"))
    assert DatabaseOps.open(tmp_path / "r1", engine=local_engine).query_json(
        "SELECT count(*) AS n FROM data"
    ) == json.dumps([{"n": 2}])
    # the original's README: restore_to_transaction(backup, dest, metadata.timestamp)
    restore_to_transaction(str(tmp_path / "bk"), str(tmp_path / "r2"), meta.timestamp)
    assert DatabaseOps.open(tmp_path / "r2", engine=local_engine).version == 1
    restore_to_transaction(str(tmp_path / "bk"), str(tmp_path / "r3"), transaction_id=0)
    assert DatabaseOps.open(tmp_path / "r3", engine=local_engine).version == 0


def test_with_credentials_variants(tmp_path: Path, local_engine: Engine) -> None:
    from posixlake import (
        get_backup_metadata_with_credentials,
        restore_to_transaction_with_credentials,
        restore_with_credentials,
        verify_backup_with_credentials,
    )

    db = DatabaseOps.create_with_auth(
        str(tmp_path / "t"), {"id": "Int64"}, True, engine=local_engine
    )
    db.create_user("admin", "secret", ["admin"])
    db.create_user("reader", "reader-pw", ["read"])
    db.insert_json('[{"id": 1}]')
    db.backup(str(tmp_path / "bk"))
    bk = str(tmp_path / "bk")
    meta = get_backup_metadata_with_credentials(bk, "admin", "secret")
    assert meta.total_rows == 1 and meta.auth
    assert verify_backup_with_credentials(bk, "reader", "reader-pw").schema_valid
    with pytest.raises(AuthenticationError):
        get_backup_metadata_with_credentials(bk, "admin", "wrong")
    with pytest.raises(AuthenticationError):
        verify_backup_with_credentials(bk, "nobody", "secret")
    restore_with_credentials(bk, str(tmp_path / "r1"), "admin", "secret")
    with pytest.raises(PermissionDenied):
        restore_with_credentials(bk, str(tmp_path / "r2"), "reader", "reader-pw")
    restore_to_transaction_with_credentials(
        bk, str(tmp_path / "r3"), meta.timestamp, "admin", "secret"
    )
    again = DatabaseOps.open_with_credentials(
        str(tmp_path / "r3"), "admin", "secret", engine=local_engine
    )
    assert again.query("SELECT count(*) AS n FROM data")[0].values["n"] == 1


# -- 3. rows with .values -------------------------------------------------------------------


def test_query_rows_have_values(tmp_path: Path, local_engine: Engine) -> None:
    db = _people(tmp_path, local_engine)
    rows = db.query("SELECT count(*) AS cnt FROM data")
    assert rows[0].values["cnt"] == 2
    assert rows[-1].values == {"cnt": 2}
    with pytest.raises(IndexError):
        rows[1]
    ordered = db.query("SELECT id, name FROM data ORDER BY id")
    assert [r.values["name"] for r in ordered] == ["Alice", "Bob"]
    assert [r.values for r in ordered[0:1]] == [{"id": 1, "name": "Alice"}]
    assert ordered.fetchall() == [(1, "Alice"), (2, "Bob")]  # still plain tuples to compare
    first = ordered.fetchone()
    assert first is not None and first.values == {"id": 1, "name": "Alice"}
    ident, name = ordered[1]
    assert (ident, name) == (2, "Bob")
    assert len(ordered) == 2 and ordered.arrow().num_rows == 2  # DuckDB-style methods stay
    assert db.query_version("SELECT count(*) AS c FROM data", version=0)[0].values["c"] == 0
    now_ms = int(db.commit_time(db.version).timestamp() * 1000)
    assert db.query_timestamp("SELECT count(*) AS c FROM data", now_ms)[0].values["c"] == 2


# -- 5. primary_key() -----------------------------------------------------------------------


def test_primary_key_is_a_string_or_none(tmp_path: Path, local_engine: Engine) -> None:
    db = _people(tmp_path, local_engine)
    assert db.primary_key() == "id"
    assert db.get_schema().primary_key == "id"
    assert db.key_columns == ["id"]
    db.set_primary_key(None)
    assert db.primary_key() is None
    assert db.get_schema().primary_key is None
    assert db.key_columns == []
    db.set_primary_key(column_name="id")
    assert DatabaseOps.open(tmp_path / "t", engine=local_engine).primary_key() == "id"
    db.set_primary_key(["id", "name"])
    assert db.primary_key() == ["id", "name"]  # composite keys stay a list


# -- 6. the original's keyword names ------------------------------------------------------


def test_original_keyword_names(tmp_path: Path, local_engine: Engine) -> None:
    db = DatabaseOps.create(
        str(tmp_path / "t"),
        Schema(fields=[Field(name="id", data_type="Int32", nullable=False)], primary_key=None),
        engine=local_engine,
    )
    assert db.insert_json(json_data='[{"id": 1}]') == 1
    assert db.insert_buffered_json(json_data='[{"id": 2}]') == 1
    db.flush_write_buffer()
    merged = json.loads(db.merge_json(json_data='[{"id": 3, "_op": "INSERT"}]', join_column="id"))
    assert merged["rows_inserted"] == 1
    ts = int(db.commit_time(db.version).timestamp() * 1000)
    assert json.loads(
        db.query_timestamp_json("SELECT count(*) AS n FROM data", timestamp_ms=ts)
    ) == [{"n": 3}]
    assert db.query_timestamp("SELECT count(*) AS n FROM data", timestamp_ms=ts)[0].values == {
        "n": 3
    }
    db.set_primary_key(column_name="id")
    assert db.primary_key() == "id"
    db.backup(backup_path=str(tmp_path / "bk"))
    db.backup_incremental(
        base_backup_path=str(tmp_path / "bk"), incremental_path=str(tmp_path / "bk2")
    )
    for i in range(2):
        db.insert_json(json_data=json.dumps([{"id": 10 + i}]))
    assert db.optimize_with_target_size(target_size_bytes=1 << 20).files_removed > 1
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "in.parquet")
    from_pq = DatabaseOps.create_from_parquet(
        db_path=str(tmp_path / "p"), parquet_path=str(tmp_path / "in.parquet"), engine=local_engine
    )
    assert from_pq.query_json("SELECT sum(x) AS s FROM data") == json.dumps([{"s": 3}])
    part = DatabaseOps.create(
        tmp_path / "part",
        {"id": "Int64", "day": "String"},
        partition_by=["day"],
        engine=local_engine,
    )
    part.insert_json('[{"id": 1, "day": "a"}]')
    part.insert_json('[{"id": 2, "day": "a"}]')
    assert part.optimize_with_filter(filter="day = 'a'").files_removed == 2
    auth = DatabaseOps.create_with_auth(
        str(tmp_path / "auth"), {"id": "Int64"}, auth_enabled=True, engine=local_engine
    )
    assert auth.create_user(username="ana", password="ana-password", roles=["read"]).name == "ana"


def test_nfs_server_takes_db_keyword(tmp_path: Path, local_engine: Engine) -> None:
    from posixlake import NfsServer

    db = _people(tmp_path, local_engine)
    server = NfsServer(db=db, port=0)
    try:
        assert server.is_ready()
        assert server.get_port() == server.port > 0
    finally:
        server.shutdown()
    assert not server.is_ready()


# -- 9. NfsServer: get_port, mount and unmount commands per platform ------------------------


def test_nfs_mount_and_unmount_commands(tmp_path: Path, local_engine: Engine) -> None:
    from nfs.table.server import TableNfsServer as NfsServer

    server = NfsServer(_people(tmp_path, local_engine), 0)
    try:
        p = server.get_port()
        opts = f"port={p},mountport={p}"
        assert server.get_mount_command("/mnt/pl", platform="linux") == [
            "sudo",
            "mount",
            "-t",
            "nfs",
            "-o",
            f"vers=3,proto=tcp,{opts},mountproto=tcp,nolock,noacl",
            "127.0.0.1:/",
            "/mnt/pl",
        ]
        assert server.get_mount_command("/Volumes/pl", platform="darwin") == [
            "sudo",
            "mount",
            "-t",
            "nfs",
            "-o",
            f"vers=3,tcp,{opts},nolocks,resvport",
            "127.0.0.1:/",
            "/Volumes/pl",
        ]
        assert server.get_mount_command("Z:", platform="win32") == [
            "mount.exe",
            "-o",
            "anon,nolock,mtype=hard",
            "\\\\127.0.0.1\\share",
            "Z:",
        ]
        assert server.get_unmount_command("/mnt/pl", platform="linux") == [
            "sudo",
            "umount",
            "/mnt/pl",
        ]
        assert server.get_unmount_command("/Volumes/pl", platform="darwin") == [
            "sudo",
            "umount",
            "/Volumes/pl",
        ]
        assert server.get_unmount_command("Z:", platform="win32") == ["umount.exe", "-f", "Z:"]
    finally:
        server.shutdown()


# -- 8. create_with_auth, then create_user: the bootstrap admin ------------------------------


def test_create_with_auth_bootstrap_admin(
    tmp_path: Path, local_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "t")
    schema = Schema(fields=[Field(name="id", data_type="Int64", nullable=False)])
    db = DatabaseOps.create_with_auth(path, schema, True, engine=local_engine)
    assert db.user == security.BOOTSTRAP_USER
    with caplog.at_level(logging.WARNING, logger="posixlake.security"):
        db.create_user("admin", "secret", ["admin"])  # 6 characters: accepted, with a warning
    assert any("recommended" in r.getMessage() for r in caplog.records)
    db.insert_json('[{"id": 1}]')  # still acting as the bootstrap admin
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(path, engine=local_engine)
    admin = DatabaseOps.open_with_credentials(path, "admin", "secret", engine=local_engine)
    assert admin.user == "admin"
    admin.create_user("alice", "password123", ["read", "write"])
    alice = DatabaseOps.open_with_credentials(path, "alice", "password123", engine=local_engine)
    with pytest.raises(PermissionDenied):
        alice.create_user("eve", "whatever1", ["admin"])
    db.close()
    with pytest.raises(PosixLakeError):  # the bootstrap session ends with its handle
        db.create_user("late", "late-password", ["admin"])
    assert sorted(u.name for u in admin.list_users()) == ["admin", "alice"]


def test_short_passwords_api_accepts_min_length_refuses(
    tmp_path: Path, local_engine: Engine
) -> None:
    db = DatabaseOps.create_with_auth(
        str(tmp_path / "t"), {"id": "Int64"}, True, engine=local_engine
    )
    db.create_user("a", "abc", ["read"])
    with pytest.raises(posixlake.InvalidOperation, match="at least 8"):
        db.create_user("b", "abc", ["read"], min_length=security.MIN_PASSWORD_LENGTH)
    with pytest.raises(posixlake.InvalidOperation, match="empty"):
        db.create_user("c", "", ["read"])
    with pytest.raises(posixlake.InvalidOperation, match="at least 8"):
        db.change_password("a", "short", min_length=8)
    db.change_password("a", "short")
    DatabaseOps.open_with_credentials(str(tmp_path / "t"), "a", "short", engine=local_engine)


def test_create_with_auth_and_credentials_has_no_bootstrap(
    tmp_path: Path, local_engine: Engine
) -> None:
    db = DatabaseOps.create_with_auth(
        str(tmp_path / "t"),
        {"id": "Int64"},
        True,
        credentials=("root", "root-password"),
        engine=local_engine,
    )
    assert db.user == "root"
    with pytest.raises(AuthenticationError, match="POSIXLAKE_ADMIN_PASSWORD"):
        DatabaseOps.create(tmp_path / "u", {"id": "Int64"}, auth=True, engine=local_engine)


# -- 12. errors the original raised as DeltaLakeError --------------------------------------


def test_delta_lake_errors_stay_catchable_as_such(tmp_path: Path, local_engine: Engine) -> None:
    db = _people(tmp_path, local_engine)
    with pytest.raises(PosixLakeError.DeltaLakeError) as caught:
        DatabaseOps.create(str(tmp_path / "t"), {"id": "Int32"}, engine=local_engine)
    assert caught.value.message == str(caught.value)  # the original's e.message
    assert "already exists" in caught.value.message
    with pytest.raises(PosixLakeError.AlreadyExists):
        DatabaseOps.create(str(tmp_path / "t"), {"id": "Int32"}, engine=local_engine)
    with pytest.raises(PosixLakeError.DeltaLakeError):
        db.query_version_json("SELECT * FROM data", 99)
    with pytest.raises(PosixLakeError.VersionError):
        db.query_version_json("SELECT * FROM data", 99)
    with pytest.raises(PosixLakeError.DeltaLakeError):
        db.zorder(["nope"])
    with pytest.raises(PosixLakeError.SchemaError):
        db.zorder(["nope"])


# -- 2. records carry the original's field names, with real figures ------------------------


def test_metrics_health_and_skipping_fields(tmp_path: Path, local_engine: Engine) -> None:
    db = _people(tmp_path, local_engine)  # one insert
    db.insert_json('[{"id": 3, "name": "Carol"}]')
    for _ in range(3):
        assert db.query("SELECT count(*) AS n FROM data").scalar() == 3
    with pytest.raises(PosixLakeError):
        db.query("SELEC nonsense")
    with pytest.raises(PosixLakeError):
        db.insert_json('[{"id": "not a number", "name": "x"}]')
    with pytest.raises(PosixLakeError):
        db.insert_json('[{"id": 1, "name": "duplicate key"}]')
    assert db.delete_rows_where("id = 3") == 1
    db.insert_json('[{"id": 4, "name": "Dan"}]')
    m = db.get_metrics()
    assert m.total_queries == m.queries == 3
    assert m.total_inserts == m.inserts == 3
    assert m.total_deletes == m.deletes == 1
    assert m.total_transactions == m.commits == db.version == 4
    assert m.total_errors == m.errors == 3
    assert 0 < m.avg_query_latency_ms <= m.max_query_latency_ms
    assert m.uptime_seconds > 0

    health = db.health_check()
    files = db.list_parquet_files()
    assert health.status == "healthy"
    assert health.total_files == len(files) == 2  # active files only (see the README)
    assert health.total_rows == 3
    assert health.total_size_bytes == sum((tmp_path / "t" / f).stat().st_size for f in files)
    assert health.uptime_seconds >= m.uptime_seconds

    stats = db.get_data_skipping_stats("id = 1")
    assert stats.total_files == 2
    assert (stats.files_read, stats.files_skipped) == (1, 1)
    assert stats.bytes_scanned + stats.bytes_skipped == health.total_size_bytes
    assert stats.bytes_skipped > 0
    everything = db.get_data_skipping_stats()
    assert (everything.files_read, everything.files_skipped, everything.bytes_skipped) == (2, 0, 0)


def test_verify_report_checks_the_schema(tmp_path: Path, local_engine: Engine) -> None:
    import time

    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    from posixlake import verify_backup

    db = _people(tmp_path, local_engine)
    db.backup(str(tmp_path / "good"))
    good = verify_backup(str(tmp_path / "good"))
    assert good.schema_valid and good.ok
    assert good.files_verified == good.files_checked and good.total_size_bytes > 0
    # a data file whose "age" column is text: committed behind delta-rs' schema check
    bad = tmp_path / "t" / "part-bad.parquet"
    pq.write_table(pa.table({"id": [9], "name": ["Zed"], "age": ["old"]}), bad)
    dt = DeltaTable(str(tmp_path / "t"))
    add = AddAction("part-bad.parquet", bad.stat().st_size, {}, int(time.time() * 1000), True, "{}")
    dt.create_write_transaction([add], mode="append", schema=dt.schema())
    db.backup(str(tmp_path / "bad"))
    report = verify_backup(str(tmp_path / "bad"))
    assert not report.missing and not report.corrupted  # every byte is as backed up
    assert not report.schema_valid and not report.ok
    assert any("part-bad.parquet" in e and "'age'" in e for e in report.schema_errors)


# -- 7. vacuum honours the caller's retention ------------------------------------------------


def test_vacuum_zero_is_the_callers_decision(
    tmp_path: Path, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    db = _people(tmp_path, engine)
    db.insert_json('[{"id": 3, "name": "Carol"}]')
    db.optimize()
    replaced = set(p.name for p in (tmp_path / "t").glob("*.parquet")) - set(
        db.list_parquet_files()
    )
    assert len(replaced) == 2
    assert set(db.vacuum_dry_run(0)) == replaced
    assert set(db.vacuum_dry_run(retention_hours=168)) == set()
    with pytest.raises(PosixLakeError, match="retention"):
        db.vacuum(0, enforce_retention_duration=True)  # the guard, for those who want it
    with caplog.at_level(logging.WARNING, logger="posixlake.database"):
        assert set(db.vacuum(0).files) == replaced
    assert any("below the table's 168" in r.getMessage() for r in caplog.records)
    assert set(p.name for p in (tmp_path / "t").glob("*.parquet")) == set(db.list_parquet_files())
    assert db.query("SELECT count(*) AS n FROM data")[0].values["n"] == 3


# -- 4. get_schema() reports the declared type strings ----------------------------------------


def test_schema_reports_declared_type_strings(tmp_path: Path, local_engine: Engine) -> None:
    declared = {
        "id": "Int64",
        "price": "Decimal128(10,2)",
        "tags": "List<String>",
        "counts": "Map<String,Int64>",
        "point": "Struct<x:Int32,y:Int32>",
        "small": "UInt8",
        "big": "UInt64",
        "codes": "List<UInt16>",
        "name": "Utf8",  # reported back as String, as the original did
    }
    schema = Schema(
        fields=[Field(name=k, data_type=v, nullable=k != "id") for k, v in declared.items()],
        primary_key="id",
    )
    DatabaseOps.create(str(tmp_path / "t"), schema, engine=local_engine)
    db = DatabaseOps.open(str(tmp_path / "t"), engine=local_engine)  # from the table metadata
    got = {f.name: f.data_type for f in db.get_schema().fields}
    assert got == {**declared, "name": "String"}
    tags = next(f for f in db.get_schema().fields if f.name == "tags")
    assert "List" in tags.data_type
    assert f"{tags.data_type:14}|" == "List<String>  |"
    for bad in ({"id": 1, "small": -1}, {"id": 2, "small": 256}, {"id": 3, "codes": [1, -2]}):
        with pytest.raises(PosixLakeError.SchemaError, match="does not fit"):
            db.insert_json(json.dumps([bad]))
    with pytest.raises(PosixLakeError.SchemaError):
        db.merge_json(json.dumps([{"_op": "INSERT", "id": 4, "big": -1}]), "id")
    assert db.version == 0
    db.insert_json(json.dumps([{"id": 5, "small": 255, "big": 2**64 - 1, "codes": [65535]}]))
    assert db.query("SELECT small FROM data")[0].values == {"small": 255}


# -- 10. create_with_azure creates a missing container ---------------------------------------


def test_create_with_azure_creates_the_container(azurite_server: Any, local_engine: Engine) -> None:
    import uuid

    from posixlake import AzureConfig

    host = azurite_server.endpoint.rsplit("/", 1)[0]  # http://127.0.0.1:PORT, as in the README
    config = AzureConfig(
        account_name="devstoreaccount1",
        account_key="Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
        "K1SZFPTOtr/KBHBeksoGMGw==",
        endpoint=host,
    )
    schema = Schema(
        fields=[
            Field(name="id", data_type="Int32", nullable=False),
            Field(name="value", data_type="Float64", nullable=True),
        ],
        primary_key="id",
    )
    for path in (f"az://pl-{uuid.uuid4().hex[:12]}", f"az://pl-{uuid.uuid4().hex[:12]}/db"):
        db = DatabaseOps.create_with_azure(path, schema, config, engine=local_engine)
        db.insert_json('[{"id": 1, "value": 123.45}]')
        again = DatabaseOps.open_with_azure(path, config, engine=local_engine)
        assert json.loads(again.query_json("SELECT * FROM data WHERE value > 100")) == [
            {"id": 1, "value": 123.45}
        ]
        with pytest.raises(PosixLakeError.DeltaLakeError):  # exists now
            DatabaseOps.create_with_azure(path, schema, config, engine=local_engine)


# -- the original's README examples, on both engines ------------------------------------------
#
# Code blocks of the original's bindings/python/README.md, verbatim but for the places
# ("/path/to/...", the S3/Azure endpoints and the fixed NFS port, to a free one), the
# README's ``time.sleep(0.5)`` before ``is_ready()`` (our server is ready on return),
# and the table a block needs that an earlier block created. The engine comes from
# $POSIXLAKE_ENGINE, so the code itself names none.

README_BASIC = """
from posixlake import DatabaseOps, Schema, Field, PosixLakeError

# Create a schema
schema = Schema(fields=[
    Field(name="id", data_type="Int32", nullable=False),
    Field(name="name", data_type="String", nullable=False),
    Field(name="age", data_type="Int32", nullable=True),
    Field(name="salary", data_type="Float64", nullable=True),
], primary_key="id")

# Create database on local filesystem
try:
    db = DatabaseOps.create("/path/to/db", schema)
    print("✓ Database created")
except PosixLakeError as e:
    print(f"✗ Error: {e}")

# Insert data (JSON format)
data = '[{"id": 1, "name": "Alice", "age": 30, "salary": 75000.0}]'
db.insert_json(data)

# Query with SQL
results = db.query_json("SELECT * FROM data WHERE age > 25")
print(results)
# [{"id": 1, "name": "Alice", "age": 30, "salary": 75000.0}]

# Delete rows
db.delete_rows_where("id = 1")
print("✓ Row deleted")
"""

README_BUFFERED = """
from posixlake import DatabaseOps, Schema, Field
import json

schema = Schema(fields=[
    Field(name="id", data_type="Int32", nullable=False),
    Field(name="name", data_type="String", nullable=False),
    Field(name="email", data_type="String", nullable=False),
], primary_key="id")

db = DatabaseOps.create("/path/to/db", schema)

# Insert many small batches efficiently (buffers up to 1000 rows)
print("Inserting 100 small batches using buffered insert...")
for i in range(100):
    db.insert_buffered_json(json.dumps([{
        "id": i,
        "name": f"User_{i}",
        "email": f"user{i}@example.com"
    }]))
    if (i + 1) % 20 == 0:
        print(f"  Buffered {i + 1}/100 batches...")

# Flush buffer to commit all data
print("\\nFlushing write buffer...")
db.flush_write_buffer()
print("✓ All buffered data committed to Delta Lake")
"""

README_NFS = """
from posixlake import DatabaseOps, Schema, Field, NfsServer
import time
import subprocess

# Create database
schema = Schema(fields=[
    Field(name="id", data_type="Int32", nullable=False),
    Field(name="name", data_type="String", nullable=False),
    Field(name="age", data_type="Int32", nullable=True),
], primary_key="id")
db = DatabaseOps.create("/path/to/db", schema)

# Insert data
db.insert_json('[{"id": 1, "name": "Alice", "age": 30}, {"id": 2, "name": "Bob", "age": 25}]')

# Start NFS server on port 12049
nfs_port = 12049
nfs_server = NfsServer(db, nfs_port)
print(f"✓ NFS server started on port {nfs_port}")

# Wait for server to be ready
if nfs_server.is_ready():
    print("✓ NFS server is ready!")
else:
    print("⚠ NFS server not ready, POSIX operations may fail")
nfs_server.shutdown()
"""

README_TIME_TRAVEL = """
from posixlake import DatabaseOps, Schema, Field

schema = Schema(fields=[
    Field(name="id", data_type="Int32", nullable=False),
    Field(name="name", data_type="String", nullable=False),
], primary_key="id")

db = DatabaseOps.create("/path/to/db", schema)

# Insert initial data
db.insert_json('[{"id": 1, "name": "Alice"}]')

# Insert more data
db.insert_json('[{"id": 2, "name": "Bob"}]')

# Query by version (creation is version 0, first insert is version 1, second insert is version 2)
results_v1 = db.query_version_json("SELECT * FROM data", 1)
print(f"Data at version 1: {results_v1}")
# [{"id": 1, "name": "Alice"}]

results_v2 = db.query_version_json("SELECT * FROM data", 2)
print(f"Data at version 2: {results_v2}")
# [{"id": 1, "name": "Alice"}, {"id": 2, "name": "Bob"}]

# Query by timestamp (milliseconds since epoch)
import time
timestamp = int(time.time() * 1000)
results = db.query_timestamp_json("SELECT * FROM data", timestamp)
print(f"Data at timestamp {timestamp}: {results}")
"""

README_CSV = """
from posixlake import DatabaseOps
import json

# Create database by importing CSV - schema is automatically inferred!
# Column types detected: Int64, Float64, Boolean, String
db = DatabaseOps.create_from_csv("/path/to/new_db", "/path/to/data.csv")

# Query the imported data
results = db.query_json("SELECT * FROM data LIMIT 5")
print(json.loads(results))

# Check inferred schema
schema = db.get_schema()
for field in schema.fields:
    print(f"  {field.name}: {field.data_type} (nullable={field.nullable})")
"""

README_PARQUET = """
from posixlake import DatabaseOps
import json

# Create database from existing Parquet file(s)
# Schema is read directly from Parquet metadata
db = DatabaseOps.create_from_parquet("/path/to/new_db", "/path/to/data.parquet")

# Supports glob patterns for multiple files
db = DatabaseOps.create_from_parquet("/path/to/db", "/data/*.parquet")

# Query the imported data
results = db.query_json("SELECT COUNT(*) as total FROM data")
print(json.loads(results))
"""

README_MAINTENANCE = """
from posixlake import DatabaseOps, Schema, Field

db = DatabaseOps.open("/path/to/db")

# OPTIMIZE: Compact small Parquet files into larger ones
optimize_result = db.optimize()
print(f"✓ OPTIMIZE completed: {optimize_result}")

# VACUUM: Remove old files (retention period in hours)
vacuum_result = db.vacuum(retention_hours=168)  # 7 days
print(f"✓ VACUUM completed: {vacuum_result}")

# Z-ORDER: Multi-dimensional clustering for better query performance
zorder_result = db.zorder(columns=["id", "name"])
print(f"✓ Z-ORDER completed: {zorder_result}")

# Get data skipping statistics
stats = db.get_data_skipping_stats()
print(f"Data skipping stats: {stats}")
"""

README_INSERTION = """
# Regular insert (one transaction per call)
db.insert_json('[{"id": 1, "name": "Alice"}]')

# Buffered insert (batches multiple writes)
db.insert_buffered_json('[{"id": 2, "name": "Bob"}]')
db.insert_buffered_json('[{"id": 3, "name": "Charlie"}]')
db.flush_write_buffer()  # Commit all buffered data

# MERGE (UPSERT) operation
merge_data = [
    {"id": 1, "name": "Alice Updated", "_op": "UPDATE"},
    {"id": 4, "name": "David", "_op": "INSERT"},
    {"id": 2, "_op": "DELETE"}
]
result = db.merge_json(json.dumps(merge_data), "id")
# Returns: {"rows_inserted": 1, "rows_updated": 1, "rows_deleted": 1}

# Basic query
results = db.query_json("SELECT * FROM data WHERE id > 0")

# Aggregations
results = db.query_json("SELECT COUNT(*) as count, AVG(age) as avg_age FROM data")

# Delete by condition
db.delete_rows_where("id = 5")
db.delete_rows_where("age < 18")
db.delete_rows_where("name LIKE '%test%'")

# Delete all rows (truncate)
db.delete_rows_where("1=1")
"""

README_AUTH = """
from posixlake import DatabaseOps, Schema, Field

# Create database with authentication enabled
schema = Schema(fields=[Field(name="id", data_type="Int32", nullable=False)], primary_key=None)
db = DatabaseOps.create_with_auth("/path/to/db", schema, auth_enabled=True)
db.create_user("admin", "secret", ["admin"])

# Open with credentials
db = DatabaseOps.open_with_credentials("/path/to/db", "admin", "secret")

# User management
db.create_user("alice", "password123", ["read", "write"])
"""

README_BACKUP = """
from posixlake import (
    get_backup_metadata,
    get_backup_metadata_with_credentials,
    restore,
    restore_to_transaction,
    restore_to_transaction_with_credentials,
    restore_with_credentials,
    verify_backup,
    verify_backup_with_credentials,
)

# Full backup
db.backup("/path/to/backup")

# Incremental backup
db.backup_incremental("/path/to/base_backup", "/path/to/incremental_backup")

# Backup inspection
metadata = get_backup_metadata("/path/to/backup")
report = verify_backup("/path/to/backup")

# Restore helpers
restore("/path/to/backup", "/path/to/restore")
restore_to_transaction("/path/to/backup", "/path/to/restore_txn", metadata.timestamp)

# Auth-enabled backup helpers
metadata = get_backup_metadata_with_credentials("/path/to/auth_backup", "admin", "secret")
report = verify_backup_with_credentials("/path/to/auth_backup", "admin", "secret")
restore_with_credentials("/path/to/auth_backup", "/path/to/auth_restore", "admin", "secret")
restore_to_transaction_with_credentials(
    "/path/to/auth_backup",
    "/path/to/auth_restore_txn",
    metadata.timestamp,
    "admin",
    "secret",
)
"""

README_MONITORING = """
# Get real-time metrics
metrics = db.get_metrics()
print(metrics.total_queries, metrics.total_inserts, metrics.uptime_seconds)

# Health check
health = db.health_check()
print(health.status, health.total_files, health.total_size_bytes)

# Data skipping statistics
stats = db.get_data_skipping_stats()
print(stats.files_read, stats.files_skipped, stats.bytes_scanned)
"""

README_ERRORS = """
from posixlake import PosixLakeError

try:
    db = DatabaseOps.create("/path/to/db", schema)
    db.insert_json(data)
    results = db.query_json("SELECT * FROM data")
except PosixLakeError.IoError as e:
    print(f"I/O error: {e}")
except PosixLakeError.SerializationError as e:
    print(f"Serialization error: {e}")
except PosixLakeError.DeltaLakeError as e:
    print(f"Delta Lake error: {e}")
except PosixLakeError.InvalidOperation as e:
    print(f"Invalid operation: {e}")
except PosixLakeError as e:
    print(f"posixlake error: {e}")
"""


def _run(
    code: str,
    root: Path,
    scope: dict[str, Any] | None = None,
    replace: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run a README block with its places moved under ``root``; return its variables."""
    code = code.replace("/path/to/", f"{root}/").replace('"/data/', f'"{root}/data/')
    for old, new in (replace or {}).items():
        code = code.replace(old, new)
    namespace: dict[str, Any] = dict(scope or {})
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace


def test_the_original_readme_examples_run_unchanged(
    tmp_path: Path,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket

    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    monkeypatch.setenv("POSIXLAKE_ENGINE", engine.name)
    ns = _run(README_BASIC, tmp_path / "basic")
    assert "✓ Database created" in capsys.readouterr().out
    assert json.loads(ns["results"]) == [{"id": 1, "name": "Alice", "age": 30, "salary": 75000.0}]
    assert ns["db"].query_json("SELECT count(*) AS n FROM data") == json.dumps([{"n": 0}])

    ns = _run(README_BUFFERED, tmp_path / "buffered")
    assert ns["db"].query("SELECT count(*) AS n FROM data")[0].values["n"] == 100

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    _run(README_NFS, tmp_path / "nfs", replace={"12049": port})
    assert "✓ NFS server is ready!" in capsys.readouterr().out

    ns = _run(README_TIME_TRAVEL, tmp_path / "tt")
    assert json.loads(ns["results_v1"]) == [{"id": 1, "name": "Alice"}]
    assert sorted(r["id"] for r in json.loads(ns["results_v2"])) == [1, 2]
    assert sorted(r["id"] for r in json.loads(ns["results"])) == [1, 2]

    (tmp_path / "csv").mkdir()
    pacsv.write_csv(
        pa.table({"id": [1, 2], "score": [1.5, 2.5], "ok": [True, False], "who": ["a", "b"]}),
        tmp_path / "csv" / "data.csv",
    )
    _run(README_CSV, tmp_path / "csv")
    out = capsys.readouterr().out
    assert "  id: Int64 (nullable=True)" in out and "  who: String (nullable=True)" in out

    (tmp_path / "pq" / "data").mkdir(parents=True)
    for i in range(2):
        pq.write_table(pa.table({"id": [i]}), tmp_path / "pq" / "data" / f"{i}.parquet")
    pq.write_table(pa.table({"id": [7]}), tmp_path / "pq" / "data.parquet")
    ns = _run(README_PARQUET, tmp_path / "pq")
    assert json.loads(ns["results"]) == [{"total": 2}]

    ns = _run(README_MAINTENANCE, tmp_path / "tt")  # the time-travel block's table
    assert ns["stats"].total_files == ns["db"].health_check().total_files

    people = _run(README_BASIC, tmp_path / "people")
    ns = _run(README_INSERTION, tmp_path, {"db": people["db"], "json": json})
    assert json.loads(ns["result"])["rows_inserted"] == 1
    assert ns["db"].query("SELECT count(*) AS n FROM data")[0].values["n"] == 0

    ns = _run(README_AUTH, tmp_path / "auth")
    assert ns["db"].user == "admin"
    auth_db = ns["db"]
    ns = _run(README_BASIC, tmp_path / "bk")
    ns["db"].backup(f"{tmp_path}/bk/base_backup")
    auth_db.backup(f"{tmp_path}/bk/auth_backup")
    ns = _run(README_BACKUP, tmp_path / "bk", {"db": ns["db"]})
    assert ns["report"].schema_valid
    restored = DatabaseOps.open_with_credentials(
        tmp_path / "bk" / "auth_restore_txn", "admin", "secret"
    )
    assert restored.get_schema().fields[0].data_type == "Int32"

    ns = _run(README_MONITORING, tmp_path, {"db": people["db"]})
    assert ns["metrics"].total_inserts >= 1 and ns["health"].status == "healthy"

    _run(
        README_ERRORS,
        tmp_path / "basic",
        {"DatabaseOps": DatabaseOps, "schema": people["schema"], "data": "[]"},
    )
    assert "Delta Lake error" in capsys.readouterr().out  # the table exists


# -- 11. the data files are at the table root, on the Spark engine too ------------------------


@pytest.mark.spark
def test_spark_engine_writes_data_files_at_the_root(tmp_path: Path, spark_session: Any) -> None:
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from posixlake.engines.spark import SparkEngine

    spark = SparkEngine(spark=spark_session)
    pq.write_table(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}), tmp_path / "in.parquet")
    db = DatabaseOps.create_from_parquet(
        str(tmp_path / "t"), str(tmp_path / "in.parquet"), engine=spark
    )
    db.insert(spark_session.createDataFrame([(4, "d")], "id long, v string"))
    db.delete_rows_where("id = 2")  # a copy-on-write rewrite by a Spark job
    db.update("id = 3", {"v": "C"})
    files = db.list_parquet_files()
    assert files and all("/" not in f for f in files)
    on_disk = {n for n in os.listdir(tmp_path / "t") if n.endswith(".parquet")}
    assert set(files) <= on_disk
    assert [d for d in os.listdir(tmp_path / "t") if (tmp_path / "t" / d).is_dir()] == [
        "_delta_log"
    ]
    assert db.query("SELECT id, v FROM data ORDER BY id").fetchall() == [
        (1, "a"),
        (3, "C"),
        (4, "d"),
    ]
