"""A restore killed with SIGKILL at any point leaves no partial table (issue 14, item 4).

Decisions pinned here:

- A local restore builds beside its destination (``<dest>.restore-<id>``, locked by the
  running process) and renames the finished table into place: the destination is either
  absent or the complete table, never a partial one that says it is healthy.
- The next restore removes what a killed one left (its lock is free) and succeeds.
- An object-store restore marks the destination until it finishes: ``health`` reports
  the partial table, and the next restore deletes it instead of refusing.

The child restore reports progress on a pipe; the test kills it after a random number of
progress reports (no sleeps), a bounded number of times.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from posixlake import DatabaseOps, Field, S3Config, Schema
from posixlake.backup import RESTORE_MARKER, restore_in_progress
from posixlake.storage import open_store
from tests.storage.servers import LocalServer

SCHEMA = Schema([Field("id", "Int64", False), Field("v", "String")])
VERSIONS = 12
ROWS_PER_VERSION = 50

CHILD = """
import os, sys
from posixlake import DatabaseOps
def progress(done, total):
    os.write(1, b".")
DatabaseOps.restore(sys.argv[1], sys.argv[2], progress=progress, workers=1)
os.write(1, b"!")
"""


def _make_backup(tmp_path: Path) -> str:
    db = DatabaseOps.create(tmp_path / "src", SCHEMA, engine="local", primary_key="id")
    for v in range(VERSIONS):
        db.insert([{"id": v * 1000 + i, "v": "x" * 40} for i in range(ROWS_PER_VERSION)])
    backup = str(tmp_path / "backup")
    db.backup(backup)
    db.close()
    return backup


def _child(backup: str, dest: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, backup, dest], stdout=subprocess.PIPE, env=env
    )


def _assert_complete(dest: str) -> None:
    db = DatabaseOps.open(dest, engine="local")
    assert db.version == VERSIONS
    assert db.query("SELECT count(*) FROM data").scalar() == VERSIONS * ROWS_PER_VERSION
    assert db.health_check().healthy
    db.close()


def test_a_killed_restore_leaves_nothing_partial(tmp_path: Path) -> None:
    backup = _make_backup(tmp_path)
    # one full run tells how many progress reports a restore makes
    full = _child(backup, str(tmp_path / "probe"))
    out, _ = full.communicate(timeout=120)
    assert out.endswith(b"!")
    reports = out.count(b".")
    assert reports > 5
    rng = random.Random(14)
    for attempt in range(5):
        dest = str(tmp_path / f"dest{attempt}")
        proc = _child(backup, dest)
        assert proc.stdout is not None
        kill_after = rng.randint(1, reports)
        seen = 0
        while seen < kill_after:
            got = proc.stdout.read(1)
            if not got or got == b"!":
                break
            seen += 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()
        if os.path.exists(dest):  # only if the kill came after the final rename
            _assert_complete(dest)
            continue
        DatabaseOps.restore(backup, dest)  # not refused: the leftover build is cleaned
        _assert_complete(dest)
        left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f"dest{attempt}"))
        assert left == [f"dest{attempt}"]


def test_a_leftover_build_of_a_running_restore_is_kept(tmp_path: Path) -> None:
    from posixlake.backup import clean_restore_leftovers
    from posixlake.backup.staging import Staging as _Staging

    dest = str(tmp_path / "dest")
    running = _Staging.begin(dest)
    assert clean_restore_leftovers(dest) == []  # its lock is held
    assert os.path.isdir(running.build)
    running.abandon()
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.s3
def test_an_unfinished_object_store_restore_is_reported_and_replaced(
    tmp_path: Path, moto_server: LocalServer
) -> None:
    import boto3

    bucket = f"pl-{uuid.uuid4().hex[:16]}"
    boto3.client(
        "s3",
        endpoint_url=moto_server.endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    cfg = S3Config(moto_server.endpoint, "testing", "testing", "us-east-1")
    backup = _make_backup(tmp_path)
    dest = f"s3://{bucket}/t"
    DatabaseOps.restore(backup, dest, storage=cfg, backup_storage={})
    db = DatabaseOps.open(dest, storage=cfg, engine="local")
    opts = db.storage_options
    assert not restore_in_progress(dest, opts)
    open_store(dest, opts).write_bytes(RESTORE_MARKER, b"{}")  # as a killed restore leaves it
    assert not db.health_check().healthy
    DatabaseOps.restore(backup, dest, storage=cfg, backup_storage={})  # partial: replaced
    assert db.health_check().healthy
    assert db.query("SELECT count(*) FROM data").scalar() == VERSIONS * ROWS_PER_VERSION


def test_a_handle_follows_a_restore_onto_its_path(tmp_path: Path) -> None:
    """Issue 14 item 5: a long-lived handle reloads a table replaced under it."""
    path = str(tmp_path / "live")
    db = DatabaseOps.create(path, SCHEMA, engine="local", primary_key="id")
    db.insert([{"id": i, "v": "a"} for i in range(3)])
    db.backup(str(tmp_path / "b"))
    db.insert([{"id": i, "v": "b"} for i in range(3, 10)])
    assert db.version == 2
    first_id = db.table_id
    DatabaseOps.restore(str(tmp_path / "b"), path, overwrite=True)
    assert db.query("SELECT count(*) FROM data").scalar() == 3
    assert db.version == 1
    assert db.generation == 1
    assert db.table_id == first_id  # a restore of this table's own backup keeps its id
    db.insert({"id": 5, "v": "again"})  # key 5 is free again in the restored table
    assert db.version == 2
    assert db.get_metrics().table_reloads == 1
    assert DatabaseOps.open(path, engine="local").query("SELECT count(*) FROM data").scalar() == 4


def test_a_handle_sees_a_table_made_again_in_the_same_log_directory(tmp_path: Path) -> None:
    """A table removed and made again at its path may get a ``_delta_log`` with the old
    inode number (file systems reuse them): here the directory itself is kept and only its
    files replaced, so its (device, inode) cannot tell the two tables apart. The handle
    must still notice the other table (its first commit is another file) and reload it,
    not go on serving the old rows or read the new commits onto the old state."""
    path = tmp_path / "live"
    db = DatabaseOps.create(path, SCHEMA, engine="local")
    db.insert([{"id": i, "v": "old"} for i in range(5)])
    db.insert([{"id": 9, "v": "old"}])
    assert db.version == 2
    log = path / "_delta_log"
    for f in [*log.iterdir(), *path.glob("*.parquet")]:
        f.unlink()
    again = DatabaseOps.create(path, SCHEMA, engine="local")  # same directory, new table
    again.insert([{"id": 1, "v": "new"}])
    assert db.query("SELECT v FROM data").arrow().column("v").to_pylist() == ["new"]
    assert db.version == 1
    assert db.generation == 1
    assert db.table_id == again.table_id
