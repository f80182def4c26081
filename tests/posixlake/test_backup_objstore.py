"""Backups, restores and users on object stores: real moto_server (S3) and Azurite.

Sources and destinations mix local disk and the object store both ways; tampering is
done with the SDKs directly, as an attacker or a bad disk would.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from deltalake import DeltaTable

from posixlake import (
    AlreadyExists,
    AuthenticationError,
    AzureConfig,
    BackupCorrupted,
    DatabaseOps,
    S3Config,
    security,
)
from posixlake.backup import FILES_DIR
from posixlake.storage import (
    EMULATOR_ACCOUNT,
    EMULATOR_KEY,
    AzureStore,
    S3Store,
    open_store,
    storage_options_for,
)

SCHEMA = {"id": "Int64", "name": "String"}


@dataclass(frozen=True)
class Remote:
    kind: Literal["s3", "azure"]
    endpoint: str
    bucket: str

    @property
    def config(self) -> S3Config | AzureConfig:
        if self.kind == "s3":
            return S3Config(self.endpoint, "testing", "testing", "us-east-1")
        return AzureConfig.emulator(self.endpoint)

    def uri(self, name: str) -> str:
        return f"{'s3' if self.kind == 's3' else 'az'}://{self.bucket}/{name}"

    def options(self, name: str) -> dict[str, str]:
        opts = storage_options_for(self.uri(name), self.config)
        assert opts is not None
        return opts

    def rows(self, name: str, version: int | None = None) -> list[tuple[Any, ...]]:
        dt = DeltaTable(self.uri(name), storage_options=self.options(name))
        if version is not None:
            dt.load_as_version(version)
        return sorted(tuple(r.values()) for r in dt.to_pyarrow_table().to_pylist())

    def corrupt(self, key: str) -> None:
        """Flip one byte of an object with the SDK directly."""
        if self.kind == "s3":
            import boto3

            c = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                region_name="us-east-1",
            )
            data = bytearray(c.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            data[len(data) // 2] ^= 1
            c.put_object(Bucket=self.bucket, Key=key, Body=bytes(data))
        else:
            from azure.storage.blob import BlobServiceClient

            svc = BlobServiceClient(
                account_url=self.endpoint,
                credential={"account_name": EMULATOR_ACCOUNT, "account_key": EMULATOR_KEY},
            )
            blob = svc.get_container_client(self.bucket).get_blob_client(key)
            data = bytearray(blob.download_blob().readall())
            data[len(data) // 2] ^= 1
            blob.upload_blob(bytes(data), overwrite=True)


@pytest.fixture(
    params=[
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def remote(request: pytest.FixtureRequest) -> Remote:
    bucket = f"pl-{uuid.uuid4().hex[:16]}"
    if request.param == "s3":
        import boto3

        endpoint = request.getfixturevalue("moto_server").endpoint
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        return Remote("s3", endpoint, bucket)
    from azure.storage.blob import BlobServiceClient

    endpoint = request.getfixturevalue("azurite_server").endpoint
    BlobServiceClient(
        account_url=endpoint,
        credential={"account_name": EMULATOR_ACCOUNT, "account_key": EMULATOR_KEY},
    ).create_container(bucket)
    return Remote("azure", endpoint, bucket)


@pytest.fixture(autouse=True)
def fast_kdf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")


def local_table(path: Path) -> DatabaseOps:
    db = DatabaseOps.create(path, SCHEMA, engine="local")
    db.insert([{"id": i, "name": f"n{i}"} for i in range(5)])
    db.delete_rows_where("id = 3")
    db.insert({"id": 9, "name": "nine"})
    return db


def local_rows(path: str | Path, version: int | None = None) -> list[tuple[Any, ...]]:
    dt = DeltaTable(str(path))
    if version is not None:
        dt.load_as_version(version)
    return sorted(tuple(r.values()) for r in dt.to_pyarrow_table().to_pylist())


def test_the_store_for_each_scheme(remote: Remote) -> None:
    store = open_store(remote.uri("x"), remote.options("x"))
    assert isinstance(store, S3Store if remote.kind == "s3" else AzureStore)
    store.write_bytes("a/b.txt", b"one", if_absent=True)
    with pytest.raises(AlreadyExists):
        store.write_bytes("a/b.txt", b"two", if_absent=True)
    assert store.read_bytes("a/b.txt") == b"one"
    assert [(e.key, e.size) for e in store.list()] == [("a/b.txt", 3)]
    assert store.exists("a/b.txt") and not store.exists("a/c.txt")
    assert b"".join(store.read_chunks("a/b.txt", chunk_size=2)) == b"one"
    assert store.write_chunks("big", iter([b"x" * 1000] * 5)) == 5000
    assert store.delete_prefix() == 2 and not store.has_any()


def test_local_table_backed_up_to_the_object_store(remote: Remote, tmp_path: Path) -> None:
    db = local_table(tmp_path / "t")
    dest = remote.uri("backups/full")
    meta = db.backup(dest, storage=remote.config)
    assert meta.table_version == 3
    report = DatabaseOps.verify_backup(dest, storage=remote.config)
    assert report.ok, report
    DatabaseOps.restore(dest, tmp_path / "r", backup_storage=remote.config)
    assert local_rows(tmp_path / "r") == local_rows(db.uri)
    db.insert({"id": 10, "name": "ten"})
    incr = remote.uri("backups/incr")
    db.backup_incremental(dest, incr, storage=remote.config)
    assert DatabaseOps.verify_backup(incr, storage=remote.config).ok
    for v in range(5):
        DatabaseOps.restore(incr, tmp_path / f"r{v}", version=v, backup_storage=remote.config)
        assert local_rows(tmp_path / f"r{v}") == local_rows(db.uri, v)
    # one flipped byte in the bucket
    victim = next(
        e.key
        for e in open_store(dest, remote.options("backups/full")).list(FILES_DIR)
        if e.key.endswith(".parquet")
    )
    remote.corrupt(f"backups/full/{victim}")
    report = DatabaseOps.verify_backup(incr, storage=remote.config)
    assert report.corrupted == (f"{dest}/{victim}",)
    with pytest.raises(BackupCorrupted, match=victim.rsplit("/", 1)[-1]):
        DatabaseOps.restore(incr, tmp_path / "bad", backup_storage=remote.config)
    assert not (tmp_path / "bad").exists()


def test_object_store_table_backed_up_and_restored_there(remote: Remote, tmp_path: Path) -> None:
    uri = remote.uri("tbl")
    db = DatabaseOps.create(uri, SCHEMA, storage=remote.config, engine="local")
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    db.update("id = 2", {"name": "B"})
    db.backup(tmp_path / "bk")  # to local disk
    assert DatabaseOps.verify_backup(tmp_path / "bk").ok
    target = remote.uri("restored")
    DatabaseOps.restore(tmp_path / "bk", target, storage=remote.config)
    assert remote.rows("restored") == remote.rows("tbl")
    DatabaseOps.restore(tmp_path / "bk", remote.uri("at1"), version=1, storage=remote.config)
    assert remote.rows("at1") == remote.rows("tbl", 1)
    with pytest.raises(AlreadyExists):
        DatabaseOps.restore(tmp_path / "bk", target, storage=remote.config, version=1)
    DatabaseOps.restore(tmp_path / "bk", target, storage=remote.config, version=1, overwrite=True)
    assert remote.rows("restored") == remote.rows("tbl", 1)
    assert DeltaTable(target, storage_options=remote.options("restored")).version() == 1
    # a backup kept in the same store as the table
    meta = db.backup(remote.uri("bk-in-store"))
    assert DatabaseOps.get_backup_metadata(remote.uri("bk-in-store"), storage=remote.config) == meta


def test_users_live_in_the_bucket(remote: Remote) -> None:
    uri = remote.uri("secure")
    db = DatabaseOps.create(
        uri,
        SCHEMA,
        storage=remote.config,
        engine="local",
        auth=True,
        credentials=("root", "root-pw-1"),
    )
    db.create_user("reader", "reader-pw-1", ["read"])
    store = open_store(uri, remote.options("secure"))
    assert store.exists("_posixlake/users/00000000000000000002.json")
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(uri, storage=remote.config, engine="local")
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(
            uri, storage=remote.config, engine="local", credentials=("reader", "nope-nope")
        )
    reader = DatabaseOps.open(
        uri, storage=remote.config, engine="local", credentials=("reader", "reader-pw-1")
    )
    assert reader.user == "reader"
    # two admins racing: the loser re-applies its change on the newer version
    other = DatabaseOps.open(
        uri, storage=remote.config, engine="local", credentials=("root", "root-pw-1")
    )
    users = security.UserStore(store)
    calls: list[int] = []

    def change(u: dict[str, dict[str, Any]]) -> None:
        calls.append(1)
        if len(calls) == 1:
            other.create_user("sneaky", "sneaky-pw-1", ["read"])
        u["late"] = dict(u["reader"])

    _old, new = users.update(change)
    assert len(calls) == 2 and {"sneaky", "late", "reader", "root"} <= set(new.users)
    assert any(e.action == "login_failed" for e in db.audit_log())
