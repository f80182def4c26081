"""The NFS server serving an object-store table, read and written by a real client (libnfs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from posixlake import DatabaseOps, Field, Schema
from tests.storage.conftest import Lake

TOOLS = ("nfs-cat", "nfs-cp")
MISSING = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"libnfs-utils not installed (apt install libnfs-utils): {MISSING}"
)

SCHEMA = Schema([Field("id", "Int64", False), Field("name", "String")], primary_key="id")


def run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(args, capture_output=True, timeout=60, check=False)


def test_nfs_serves_an_object_store_table(lake: Lake, tmp_path: Path) -> None:
    from nfs.protocol.server import NfsServer

    db = DatabaseOps.create(lake.uri(), SCHEMA, storage=lake.config(), engine="local")
    db.insert([{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}])
    from nfs.table.tablefs import TableFs

    now = [1000.0]
    fs = TableFs(db, clock=lambda: now[0], idle_timer=False)
    server = NfsServer(fs).start()
    try:
        res = run("nfs-cat", server.nfs_url("/data/data.csv"))
        assert res.returncode == 0, res.stderr
        assert res.stdout == b"id,name\n1,ann\n2,bob\n"
        old = run("nfs-cat", server.nfs_url("/versions/1/data.csv"))
        assert old.returncode == 0 and old.stdout == b"id,name\n1,ann\n2,bob\n"
        # an edit through NFS becomes one commit in the object store
        edited = tmp_path / "data.csv"
        edited.write_bytes(b"id,name\n1,ann\n2,bob\n3,cy\n")
        cp = run("nfs-cp", str(edited), server.nfs_url("/data/data.csv"))
        assert cp.returncode == 0, cp.stderr
        now[0] += 60  # the writer is quiet for the idle period (NFSv3 has no close)
        fs.poll()
    finally:
        server.shutdown()
    again = DatabaseOps.open(lake.uri(), storage=lake.config(), engine="local")
    assert again.query("SELECT id, name FROM data ORDER BY id").to_pylist() == [
        {"id": 1, "name": "ann"},
        {"id": 2, "name": "bob"},
        {"id": 3, "name": "cy"},
    ]
    assert again.version == 2
    assert "tbl/_delta_log/00000000000000000002.json" in lake.object_keys("tbl/_delta_log/")
