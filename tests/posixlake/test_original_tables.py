"""Tables and backups made by the original posixlake (0.4.0) open, verify and restore here.

The inputs are made by the original itself: the committed copy under
``tests/fixtures/original/`` (see its ``generate`` script), and, when the original is set
up on this machine (``../shared/tools/original-posixlake/setup.sh``), a fresh set made by
it during the session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from posixlake import DatabaseOps, S3Config, security
from posixlake.errors import (
    AlreadyExists,
    AuthenticationError,
    DuplicateKeyError,
    InvalidOperation,
    PermissionDenied,
    StorageError,
)
from posixlake.storage import open_store, storage_options_for
from tests.storage.servers import LocalServer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "original"
ORIGINAL_HOME = Path(
    os.environ.get("POSIXLAKE_ORIGINAL_HOME")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "posixlake-original"
)
ORIGINAL_PY = Path(__file__).resolve().parents[3] / "shared/tools/original-posixlake/py"
HAVE_ORIGINAL = (ORIGINAL_HOME / ".glibc").is_dir() and ORIGINAL_PY.is_file()

ADMIN = ("alice", "alice-secret-1")
READER = ("rita", "rita-secret-1")
WRITER = ("wendy", "wendy-secret-1")
ROWS = [(1, "Alice", 30), (2, "Bob", 25), (3, "Carol", None)]
SQL = "SELECT id, name, age FROM data ORDER BY id"


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A set made now by the original posixlake (skipped when it is not set up)."""
    if not HAVE_ORIGINAL:
        pytest.skip("the original posixlake is not set up (shared/tools/original-posixlake)")
    dest = tmp_path_factory.mktemp("original") / "made"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(
        [str(ORIGINAL_PY), str(FIXTURES / "generate"), str(dest)],
        env=env,  # its own posixlake, not ours
        cwd=str(dest.parent),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return dest


@pytest.fixture(params=["committed", "generated"])
def made(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A writable copy of the tables and backups the original made."""
    source = FIXTURES if request.param == "committed" else request.getfixturevalue("generated")
    dest = tmp_path / "original"
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("generate"))
    return dest


@pytest.fixture(autouse=True)
def _cheap_scrypt(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")
    yield


def _rows(db: DatabaseOps) -> list[tuple[object, ...]]:
    return [tuple(r) for r in db.query(SQL).fetchall()]


# -- a table with users ---------------------------------------------------------------------


def test_table_with_users_stays_closed_without_credentials(made: Path) -> None:
    table = str(made / "auth")
    with pytest.raises(AuthenticationError, match="requires credentials"):
        DatabaseOps.open(table, engine="local")
    with pytest.raises(AuthenticationError, match="invalid username or password"):
        DatabaseOps.open(table, engine="local", credentials=("alice", "wrong-password"))
    with pytest.raises(AuthenticationError, match="invalid username or password"):
        DatabaseOps.open(table, engine="local", credentials=("mallory", "alice-secret-1"))
    assert not (made / "auth" / "_posixlake" / "users").exists()


def test_users_of_the_original_keep_their_permissions_before_migration(made: Path) -> None:
    table = str(made / "auth")
    with DatabaseOps.open(table, engine="local", credentials=READER) as db:
        assert db.user == "rita"
        assert _rows(db) == [*ROWS, (4, "Dave", 41)]
        with pytest.raises(PermissionDenied):
            db.insert({"id": 9, "name": "Zed"})
    with DatabaseOps.open(table, engine="local", credentials=WRITER) as db:
        assert db.insert({"id": 9, "name": "Zed"}) == 1  # the original's write role inserts
        with pytest.raises(PermissionDenied):
            db.query(SQL)  # ... but does not read
        with pytest.raises(PermissionDenied):
            db.delete_rows_where("id = 9")  # ... nor delete
    assert not (made / "auth" / "_posixlake" / "users").exists()  # not migrated by them


def test_first_admin_login_moves_the_users_over(made: Path) -> None:
    table = str(made / "auth")
    with DatabaseOps.open(table, engine="local", credentials=ADMIN) as db:
        assert db.insert({"id": 5, "name": "Eve", "age": 22}) == 1
        users = {u.name: u for u in db.list_users()}
    assert set(users) == {"alice", "rita", "wendy"}
    assert users["alice"].roles == ("admin",)
    assert users["rita"].permissions == {"read"}
    assert users["wendy"].permissions == {"write"}
    stored = json.loads(
        sorted((made / "auth" / "_posixlake" / "users").iterdir())[-1].read_bytes()
    )["users"]
    assert stored["alice"]["password"]["alg"] == "scrypt"  # rehashed at its login
    assert stored["rita"]["password"]["alg"] == "bcrypt"  # until rita logs in
    # the other users log in with their old passwords, against the migrated store
    with DatabaseOps.open(table, engine="local", credentials=READER) as db:
        assert isinstance(db.authorizer, security.TableAuthorizer)
        assert len(_rows(db)) == 5
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(table, engine="local")
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(table, engine="local", credentials=("rita", "nope-nope-1"))


def test_unreadable_user_file_keeps_the_table_closed(made: Path) -> None:
    (made / "auth" / "_metadata" / "users.json").write_text('{"users": [')
    with pytest.raises(StorageError, match="stays closed"):
        DatabaseOps.open(str(made / "auth"), engine="local")


# -- the primary key ------------------------------------------------------------------------


def test_primary_key_of_the_original_is_honoured(made: Path) -> None:
    table = str(made / "plain")
    with DatabaseOps.open(table, engine="local") as db:
        assert db.primary_key() == "id"
        assert db.schema.key_columns == ["id"]
        with pytest.raises(DuplicateKeyError):
            db.insert({"id": 1, "name": "again"})
        db.insert({"id": 1, "name": "again"}, upsert=True)
        assert _rows(db)[0] == (1, "again", None)
        db.set_primary_key(None)
    with DatabaseOps.open(table, engine="local") as db:
        assert db.primary_key() is None  # removed here: the original's file no longer counts


# -- its backups ----------------------------------------------------------------------------


def test_full_backups_verify(made: Path) -> None:
    for name, rows in (("auth-full", 3), ("plain-full", 3)):
        report = DatabaseOps.verify_backup(str(made / name))
        assert report.ok, report
        assert report.table_version == 2
        meta = DatabaseOps.get_backup_metadata(str(made / name))
        assert (meta.kind, meta.total_rows, meta.table_version) == ("full", rows, 2)
        assert meta.auth is (name == "auth-full")


def test_damage_is_found_and_restore_refuses(made: Path, tmp_path: Path) -> None:
    backup = made / "plain-full"
    victim = sorted(backup.glob("*.parquet"))[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    report = DatabaseOps.verify_backup(str(backup))
    assert not report.ok and report.corrupted == (str(victim),)
    with pytest.raises(StorageError, match="corrupted"):
        DatabaseOps.restore(str(backup), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    victim.unlink()
    assert DatabaseOps.verify_backup(str(backup)).missing == (str(victim),)
    (backup / "_delta_log" / "00000000000000000001.json").write_text("{not json")
    assert not DatabaseOps.verify_backup(str(backup)).ok


def test_restore_a_backup_with_users(made: Path, tmp_path: Path) -> None:
    backup, out = str(made / "auth-full"), str(tmp_path / "restored")
    with pytest.raises(AuthenticationError):
        DatabaseOps.restore(backup, out)
    with pytest.raises(PermissionDenied):
        DatabaseOps.restore(backup, out, credentials=READER)
    result = DatabaseOps.restore(backup, out, credentials=ADMIN)
    assert result.version == 2
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(out, engine="local")  # its users came along
    with DatabaseOps.open(out, engine="local", credentials=READER) as db:
        assert _rows(db) == ROWS
        assert db.primary_key() == "id"
    with pytest.raises(AlreadyExists):
        DatabaseOps.restore(backup, out, credentials=ADMIN)


def test_restore_to_a_version_and_a_time(made: Path, tmp_path: Path) -> None:
    backup = str(made / "plain-full")
    DatabaseOps.restore(backup, str(tmp_path / "v1"), version=1)
    with DatabaseOps.open(str(tmp_path / "v1"), engine="local") as db:
        assert (db.version, _rows(db)) == (1, ROWS[:2])
        commit_ms = int(db.commit_time(1).timestamp() * 1000)
        assert db.query(SQL, version=0).fetchall() == []
    DatabaseOps.restore_to_transaction(backup, str(tmp_path / "t1"), commit_ms)
    with DatabaseOps.open(str(tmp_path / "t1"), engine="local") as db:
        assert db.version == 1


def test_incremental_backup_continues_its_restored_base(made: Path, tmp_path: Path) -> None:
    inc, out = str(made / "auth-inc"), str(tmp_path / "x")
    report = DatabaseOps.verify_backup(inc)
    assert report.ok and report.table_version == 3 and report.files_checked == 1
    assert DatabaseOps.get_backup_metadata(inc).kind == "incremental"
    with pytest.raises(InvalidOperation, match="restore its full base backup"):
        DatabaseOps.restore(inc, out, credentials=ADMIN)  # no base there
    assert not (tmp_path / "x").exists()
    DatabaseOps.restore(str(made / "auth-full"), out, version=1, credentials=ADMIN)
    with pytest.raises(InvalidOperation, match="is at version 1"):
        DatabaseOps.restore(inc, out, credentials=ADMIN)  # it continues version 2
    shutil.rmtree(out)
    DatabaseOps.restore(str(made / "auth-full"), out, credentials=ADMIN)
    with pytest.raises(AuthenticationError):
        DatabaseOps.restore(inc, out)
    with pytest.raises(PermissionDenied):
        DatabaseOps.restore(inc, out, credentials=READER)
    assert DatabaseOps.restore(inc, out, credentials=ADMIN).version == 3
    with DatabaseOps.open(out, engine="local", credentials=READER) as db:
        assert _rows(db) == [*ROWS, (4, "Dave", 41)]
        assert db.query(SQL, version=2).fetchall() == ROWS


def test_damaged_incremental_is_not_applied(made: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "x")
    DatabaseOps.restore(str(made / "auth-full"), out, credentials=ADMIN)
    victim = next((made / "auth-inc").glob("*.parquet"))
    victim.write_bytes(victim.read_bytes()[:-20])
    with pytest.raises(StorageError, match="corrupted"):
        DatabaseOps.restore(str(made / "auth-inc"), out, credentials=ADMIN)
    with DatabaseOps.open(out, engine="local", credentials=ADMIN) as db:
        assert (db.version, _rows(db)) == (2, ROWS)


def test_our_backup_of_an_original_table_keeps_it_closed(made: Path, tmp_path: Path) -> None:
    reader = DatabaseOps.open(str(made / "auth"), engine="local", credentials=READER)
    with reader, pytest.raises(PermissionDenied):
        reader.backup(str(tmp_path / "b"))
    with DatabaseOps.open(str(made / "auth"), engine="local", credentials=ADMIN) as db:
        db.backup(str(tmp_path / "b"))
    assert DatabaseOps.verify_backup(str(tmp_path / "b")).ok
    with pytest.raises(AuthenticationError):
        DatabaseOps.restore(str(tmp_path / "b"), str(tmp_path / "r"))
    DatabaseOps.restore(str(tmp_path / "b"), str(tmp_path / "r"), credentials=ADMIN)
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(str(tmp_path / "r"), engine="local")


# -- on an object store ---------------------------------------------------------------------


@pytest.mark.s3
def test_tables_and_backups_of_the_original_on_s3(
    moto_server: LocalServer, made: Path, tmp_path: Path
) -> None:
    import boto3

    bucket = f"orig-{uuid.uuid4().hex[:12]}"
    boto3.client(
        "s3",
        endpoint_url=moto_server.endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    s3 = S3Config(moto_server.endpoint, "testing", "testing", "us-east-1")
    store = open_store(f"s3://{bucket}", storage_options_for(f"s3://{bucket}", s3))
    for path in sorted(made.rglob("*")):
        if path.is_file():
            store.write_bytes(path.relative_to(made).as_posix(), path.read_bytes())
    with pytest.raises(AuthenticationError):
        DatabaseOps.open(f"s3://{bucket}/auth", storage=s3, engine="local")
    with DatabaseOps.open(
        f"s3://{bucket}/auth", storage=s3, engine="local", credentials=READER
    ) as db:
        assert _rows(db)[:3] == ROWS
    with DatabaseOps.open(f"s3://{bucket}/plain", storage=s3, engine="local") as db:
        assert db.primary_key() == "id"
    assert DatabaseOps.verify_backup(f"s3://{bucket}/auth-full", storage=s3).ok
    out = str(tmp_path / "from-s3")
    DatabaseOps.restore(f"s3://{bucket}/auth-full", out, backup_storage=s3, credentials=ADMIN)
    with DatabaseOps.open(out, engine="local", credentials=ADMIN) as db:
        assert _rows(db) == ROWS
    DatabaseOps.restore(f"s3://{bucket}/plain-full", f"s3://{bucket}/copy", storage=s3)
    with DatabaseOps.open(f"s3://{bucket}/copy", storage=s3, engine="local") as db:
        assert (db.version, _rows(db)) == (2, ROWS)
