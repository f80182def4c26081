"""Every table operation on S3 (moto_server) and Azure Blob Storage (Azurite).

Each test runs once per backend, on a fresh bucket or container, with the local engine.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.errors import AlreadyExists, DuplicateKeyError, NotFound, VersionError
from posixlake.storage import usage
from tests.storage.conftest import Lake

SCHEMA = Schema([Field("id", "Int64", False), Field("name", "String"), Field("score", "Float64")])
ROWS = [
    {"id": 1, "name": "ann", "score": 1.5},
    {"id": 2, "name": "bob", "score": None},
    {"id": 3, "name": "cy", "score": -2.0},
]


def create(lake: Lake, name: str = "tbl", **kw: Any) -> DatabaseOps:
    return DatabaseOps.create(lake.uri(name), SCHEMA, storage=lake.config(), engine="local", **kw)


def open_(lake: Lake, name: str = "tbl") -> DatabaseOps:
    return DatabaseOps.open(lake.uri(name), storage=lake.config(), engine="local")


def rows(db: DatabaseOps, **kw: Any) -> list[dict[str, Any]]:
    return db.query("SELECT * FROM data ORDER BY id", **kw).to_pylist()


def test_create_insert_query_across_reopen(lake: Lake) -> None:
    with create(lake) as db:
        assert db.uri == lake.uri()
        assert db.insert(ROWS) == 3
        assert db.version == 1
    reopened = open_(lake)
    assert rows(reopened) == ROWS
    assert [f.name for f in reopened.schema.fields] == ["id", "name", "score"]
    assert reopened.insert({"id": 4, "name": "dee", "score": 0.0}) == 1
    assert open_(lake).query("SELECT count(*) FROM data").scalar() == 4
    keys = lake.object_keys("tbl/")
    assert "tbl/_delta_log/00000000000000000000.json" in keys
    assert "tbl/_delta_log/00000000000000000002.json" in keys
    assert any(k.endswith(".parquet") for k in keys)


def test_create_twice_and_open_missing(lake: Lake) -> None:
    create(lake).close()
    with pytest.raises(AlreadyExists):
        create(lake)
    with pytest.raises(NotFound):
        open_(lake, "nothing-here")


def test_buffered_insert_and_flush(lake: Lake) -> None:
    db = create(lake, buffer_rows=1000)
    for row in ROWS:
        db.insert_buffered(row)
    assert db.version == 0
    assert db.buffered_rows == 3
    assert db.flush() == 3
    assert db.version == 1
    assert rows(open_(lake)) == ROWS


def test_merge_delete_update(lake: Lake) -> None:
    db = create(lake, primary_key="id")
    db.insert(ROWS)
    metrics = db.merge(
        [
            {"id": 1, "name": "ANN", "_op": "UPDATE"},
            {"id": 2, "_op": "DELETE"},
            {"id": 9, "name": "new", "score": 9.0, "_op": "INSERT"},
        ]
    )
    assert (metrics.rows_inserted, metrics.rows_updated, metrics.rows_deleted) == (1, 1, 1)
    assert metrics.version == 2
    assert db.delete_rows_where("id = 3") == 1
    assert db.update("id = 9", {"score": 10.0}) == 1
    assert rows(open_(lake)) == [
        {"id": 1, "name": "ANN", "score": 1.5},
        {"id": 9, "name": "new", "score": 10.0},
    ]
    assert db.version == 4


def test_primary_key_enforced(lake: Lake) -> None:
    db = create(lake, primary_key="id")
    db.insert(ROWS)
    with pytest.raises(DuplicateKeyError):
        db.insert({"id": 2, "name": "again", "score": 1.0})
    assert db.version == 1
    assert open_(lake).primary_key() == "id"
    assert db.insert({"id": 2, "name": "up", "score": 1.0}, upsert=True) == 1
    assert open_(lake).query("SELECT name FROM data WHERE id = 2").scalar() == "up"


def test_time_travel_history(lake: Lake) -> None:
    db = create(lake)
    db.insert(ROWS[:1])
    db.insert(ROWS[1:])
    db.delete_rows_where("id = 1")
    assert db.query("SELECT count(*) FROM data", version=1).scalar() == 1
    assert db.query("SELECT count(*) FROM data", version=2).scalar() == 3
    assert db.query("SELECT count(*) FROM data").scalar() == 2
    at_v3 = db.commit_time(3)
    assert db.query("SELECT count(*) FROM data", as_of=at_v3).scalar() == 2
    assert db.query_timestamp("SELECT count(*) FROM data", at_v3).scalar() == 2
    later = datetime.now(UTC) + timedelta(minutes=1)
    assert db.query("SELECT count(*) FROM data", as_of=later).scalar() == 2
    with pytest.raises(VersionError):
        db.query("SELECT 1", version=9)
    with pytest.raises(VersionError):
        db.query("SELECT 1", as_of=db.commit_time(0) - timedelta(days=1))
    history = open_(lake).history()
    assert [h.version for h in history] == [3, 2, 1, 0]
    assert history[0].operation == "DELETE"


def test_time_travel_to_a_commit_time_within_one_second(lake: Lake) -> None:
    db = create(lake)
    db.insert(ROWS[:1])
    db.insert(ROWS[1:])
    db.delete_rows_where("id = 1")
    assert db.query("SELECT count(*) FROM data", as_of=db.commit_time(2)).scalar() == 3
    assert db.query("SELECT count(*) FROM data", as_of=db.commit_time(1)).scalar() == 1


def test_optimize_vacuum_zorder(lake: Lake) -> None:
    db = create(lake)
    for row in ROWS:
        db.insert(row)
    assert db.health_check().active_files == 3
    result = db.optimize()
    assert (result.files_added, result.files_removed) == (1, 3)
    assert db.health_check().active_files == 1
    before = set(lake.object_keys("tbl/"))
    dry = db.vacuum(0, dry_run=True, enforce_retention_duration=False)
    assert dry.dry_run and dry.files_deleted == 3
    assert set(lake.object_keys("tbl/")) == before  # a dry run deletes nothing
    done = db.vacuum(0, enforce_retention_duration=False)
    assert sorted(done.files) == sorted(dry.files)
    remaining = set(lake.object_keys("tbl/"))
    assert all(f"tbl/{f}" not in remaining for f in done.files)
    z = db.optimize.z_order(["score", "id"])
    assert z.version is not None
    assert rows(open_(lake)) == ROWS


def test_skipping_stats_and_health(lake: Lake) -> None:
    db = create(lake)
    db.insert([{"id": i, "name": "a", "score": 1.0} for i in range(0, 10)])
    db.insert([{"id": i, "name": "b", "score": 2.0} for i in range(100, 110)])
    stats = db.get_data_skipping_stats("id >= 100")
    assert (stats.total_files, stats.files_to_scan, stats.files_skipped) == (2, 1, 1)
    db.delete_rows_where("id < 5")  # rewrites the first file: one active, one removed
    health = db.health_check()
    assert health.healthy and health.version == 3 and health.rows == 15
    assert health.active_files == 2
    actions = db._log.add_actions()  # the files the current version uses
    listed = lake.sizes("tbl/")
    active = {f"tbl/{p}" for p in actions["path"].to_pylist()}
    assert active <= set(listed)
    assert health.active_bytes == sum(listed[k] for k in active)
    # the bucket also holds the removed file and the log: usage() counts everything
    use = usage(lake.uri(), lake.config())
    assert use.objects == len(listed) > health.active_files
    assert use.bytes == sum(listed.values())
    assert use.log_objects == len([k for k in listed if "/_delta_log/" in k]) == 4


def test_original_alias_names(lake: Lake) -> None:
    if lake.kind == "s3":
        db = DatabaseOps.create_with_s3(lake.uri("a"), SCHEMA, lake.config(), engine="local")
        db.insert_json('[{"id": 1, "name": "x", "score": 1.0}]')
        again = DatabaseOps.open_with_s3(lake.uri("a"), lake.config(), engine="local")
    else:
        db = DatabaseOps.create_with_azure(lake.uri("a"), SCHEMA, lake.config(), engine="local")
        db.insert_json('[{"id": 1, "name": "x", "score": 1.0}]')
        again = DatabaseOps.open_with_azure(lake.uri("a"), lake.config(), engine="local")
    assert json.loads(again.query_json("SELECT id FROM data")) == [{"id": 1}]


def test_create_bucket_on_request(lake: Lake) -> None:
    from tests.storage.conftest import bucket_exists, bucket_name

    fresh = bucket_name()
    uri = f"{lake.scheme}://{fresh}/t"
    db = DatabaseOps.create(uri, SCHEMA, storage=lake.config(), engine="local", create_bucket=True)
    db.insert(ROWS)
    assert bucket_exists(lake.kind, lake.endpoint, fresh)
    other = bucket_name()
    cfg = (
        lake.config(create_bucket=True) if lake.kind == "s3" else lake.config(create_container=True)
    )
    DatabaseOps.create(f"{lake.scheme}://{other}/t", SCHEMA, storage=cfg, engine="local").close()
    assert bucket_exists(lake.kind, lake.endpoint, other)


def test_table_at_bucket_root(lake: Lake) -> None:
    uri = f"{lake.scheme}://{lake.bucket}"
    db = DatabaseOps.create(uri, SCHEMA, storage=lake.config(), engine="local")
    db.insert(ROWS)
    assert "_delta_log/00000000000000000001.json" in lake.object_keys()
    assert rows(DatabaseOps.open(uri + "/", storage=lake.config(), engine="local")) == ROWS
    assert usage(uri, lake.config()).log_objects == 2


def test_storage_as_plain_options_and_env(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    create(lake).insert(ROWS)
    opts = lake.config().storage_options()
    assert rows(DatabaseOps.open(lake.uri(), storage=opts, engine="local")) == ROWS
    if lake.kind == "s3":
        monkeypatch.setenv("AWS_ENDPOINT_URL", lake.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_REGION", "us-east-1")
    else:
        monkeypatch.setenv(
            "AZURE_STORAGE_CONNECTION_STRING",
            f"UseDevelopmentStorage=true;DevelopmentStorageProxyUri={lake.endpoint}",
        )
    from_env = DatabaseOps.open(lake.uri(), engine="local")
    assert rows(from_env) == ROWS
    assert from_env.insert({"id": 7, "name": "env", "score": None}) == 1


@pytest.mark.azure
def test_abfs_uri(azurite_server: Any) -> None:
    from posixlake import AzureConfig
    from tests.storage.conftest import make_bucket

    ctr = make_bucket("azure", azurite_server.endpoint)
    cfg = AzureConfig.emulator(azurite_server.endpoint)
    uri = f"abfss://{ctr}@devstoreaccount1.dfs.core.windows.net/t"
    DatabaseOps.create(uri, SCHEMA, storage=cfg, engine="local").insert(ROWS)
    assert rows(DatabaseOps.open(f"az://{ctr}/t", storage=cfg, engine="local")) == ROWS


@pytest.mark.s3
def test_s3_profile(moto_server: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from posixlake import S3Config
    from posixlake.storage import StorageAuthenticationError
    from tests.storage.conftest import make_bucket

    (tmp_path / "credentials").write_text(
        "[lake]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    (tmp_path / "config").write_text("[profile lake]\nregion = eu-west-3\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    cfg = S3Config(moto_server.endpoint, profile="lake")
    opts = cfg.storage_options()
    assert (opts["AWS_ACCESS_KEY_ID"], opts["AWS_REGION"]) == ("testing", "eu-west-3")
    uri = f"s3://{make_bucket('s3', moto_server.endpoint)}/t"
    DatabaseOps.create(uri, SCHEMA, storage=cfg, engine="local").insert(ROWS)
    assert rows(DatabaseOps.open(uri, storage=cfg, engine="local")) == ROWS
    with pytest.raises(StorageAuthenticationError, match="profile 'nope' not found"):
        DatabaseOps.open(
            uri, storage=S3Config(moto_server.endpoint, profile="nope"), engine="local"
        )
