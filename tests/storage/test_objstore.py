"""File access on S3 and Azure (posixlake.storage), and backups to and from object stores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.errors import AlreadyExists, InvalidOperation, NotFound
from posixlake.storage import (
    AzureStore,
    LocalStore,
    ObjectStore,
    S3Store,
    StorageAuthenticationError,
    copy_file,
    open_store,
)
from tests.storage.conftest import Lake, make_bucket

SCHEMA = Schema([Field("id", "Int64", False), Field("name", "String")])


def store_for(lake: Lake, prefix: str = "root") -> ObjectStore:
    return open_store(lake.uri(prefix), lake.config().storage_options())


def test_open_store_kinds(lake: Lake) -> None:
    store = store_for(lake)
    assert isinstance(store, S3Store if lake.kind == "s3" else AzureStore)
    assert store.uri == lake.uri("root")
    if lake.kind == "azure":
        abfs = open_store(
            f"abfss://{lake.bucket}@devstoreaccount1.dfs.core.windows.net/root",
            lake.config().storage_options(),
        )
        assert isinstance(abfs, AzureStore)


def test_read_write_list_delete(lake: Lake) -> None:
    store = store_for(lake)
    assert not store.has_any()
    store.write_bytes("a/one.txt", b"hello")
    store.write_bytes("a/b/two.bin", bytes(range(256)) * 10)
    store.write_bytes("top", b"")
    assert store.read_bytes("a/one.txt") == b"hello"
    assert store.read_bytes("top") == b""
    assert store.exists("a/one.txt") and not store.exists("a/none")
    assert store.has_any("a") and not store.has_any("zzz")
    listed = {e.key: e.size for e in store.list()}
    assert listed == {"a/one.txt": 5, "a/b/two.bin": 2560, "top": 0}
    assert {e.key for e in store.list("a/b")} == {"a/b/two.bin"}
    assert all(e.modified is not None for e in store.list())
    assert lake.object_keys() == ["root/a/b/two.bin", "root/a/one.txt", "root/top"]
    chunks = list(store.read_chunks("a/b/two.bin", chunk_size=1000))
    assert [len(c) for c in chunks] == [1000, 1000, 560]
    assert b"".join(chunks) == bytes(range(256)) * 10
    store.delete("a/one.txt")
    store.delete("a/one.txt")  # deleting a missing file is fine
    assert not store.exists("a/one.txt")
    assert store.delete_prefix("a") == 1
    assert [e.key for e in store.list()] == ["top"]


def test_missing_files_and_unsafe_keys(lake: Lake) -> None:
    store = store_for(lake)
    with pytest.raises(NotFound):
        store.read_bytes("nope")
    with pytest.raises(NotFound):
        next(iter(store.read_chunks("nope")))
    for bad in ("../x", "/abs", "a//b", "a/./b", ""):
        with pytest.raises(InvalidOperation):
            store.write_bytes(bad, b"x")


def test_create_if_absent_is_atomic(lake: Lake) -> None:
    store = store_for(lake)
    store.write_bytes("lock", b"first", if_absent=True)
    with pytest.raises(AlreadyExists):
        store.write_bytes("lock", b"second", if_absent=True)
    assert store.read_bytes("lock") == b"first"
    store.write_bytes("lock", b"third")  # a plain write replaces
    assert store.read_bytes("lock") == b"third"


def test_streamed_writes(lake: Lake) -> None:
    store = store_for(lake)
    blocks = [bytes([i]) * 300_000 for i in range(7)]
    assert store.write_chunks("big.bin", iter(blocks)) == 2_100_000
    assert store.read_bytes("big.bin") == b"".join(blocks)

    def failing() -> Any:
        yield b"partial"
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError):
        store.write_chunks("broken.bin", failing())
    assert not store.exists("broken.bin")  # nothing half-written


def test_copy_file_within_and_across_stores(lake: Lake, tmp_path: Path) -> None:
    src = store_for(lake, "src")
    src.write_bytes("f.bin", b"x" * 70_000)
    same = store_for(lake, "dst")
    assert copy_file(src, "f.bin", same, "g.bin") == 70_000
    assert same.read_bytes("g.bin") == b"x" * 70_000
    local = LocalStore(str(tmp_path / "local"))
    assert copy_file(src, "f.bin", local, "h.bin") == 70_000
    assert (tmp_path / "local" / "h.bin").read_bytes() == b"x" * 70_000
    other = open_store(
        Lake(lake.kind, lake.endpoint, make_bucket(lake.kind, lake.endpoint)).uri("o"),
        lake.config().storage_options(),
    )
    assert copy_file(local, "h.bin", other, "i.bin") == 70_000
    with pytest.raises(NotFound):
        copy_file(src, "missing", same, "x")


@pytest.mark.azure
def test_wrong_azure_key_on_files(azurite_server: Any) -> None:
    ctr = make_bucket("azure", azurite_server.endpoint)
    store = open_store(
        f"az://{ctr}/r",
        {
            "azure_storage_account_name": "devstoreaccount1",
            "azure_storage_account_key": "d3Jvbmcta2V5",
            "azure_storage_endpoint": azurite_server.endpoint,
        },
    )
    with pytest.raises(StorageAuthenticationError):
        store.read_bytes("x")


# -- backups ---------------------------------------------------------------------------


def test_backup_and_restore_on_object_store(lake: Lake, tmp_path: Path) -> None:
    cfg = lake.config()
    db = DatabaseOps.create(lake.uri("t"), SCHEMA, storage=cfg, engine="local")
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    db.insert({"id": 3, "name": "c"})
    meta = db.backup(lake.uri("backups/full"))  # same store: the table's options
    assert any(k.startswith("backups/full/") for k in lake.object_keys())
    report = DatabaseOps.verify_backup(lake.uri("backups/full"), storage=cfg)
    assert report.ok, report
    db.insert({"id": 4, "name": "d"})
    incr = db.backup_incremental(lake.uri("backups/full"), lake.uri("backups/incr"))
    assert incr.table_version == db.version and meta.table_version < incr.table_version
    restored = DatabaseOps.restore(lake.uri("backups/incr"), lake.uri("restored"), storage=cfg)
    assert restored.version == db.version
    again = DatabaseOps.open(lake.uri("restored"), storage=cfg, engine="local")
    assert again.query("SELECT count(*) FROM data").scalar() == 4
    # to and from local disk
    local_backup = tmp_path / "bk"
    db.backup(local_backup)
    DatabaseOps.restore(local_backup, lake.uri("from-local"), storage=cfg)
    assert (
        DatabaseOps.open(lake.uri("from-local"), storage=cfg, engine="local")
        .query("SELECT count(*) FROM data")
        .scalar()
        == 4
    )
    DatabaseOps.restore(lake.uri("backups/full"), tmp_path / "local-table", backup_storage=cfg)
    assert (
        DatabaseOps.open(tmp_path / "local-table", engine="local")
        .query("SELECT count(*) FROM data")
        .scalar()
        == 3
    )
