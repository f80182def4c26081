"""A table served to Debian's libnfs-utils (nfs-ls, nfs-cat, nfs-cp): a real client, not ours.

Every write is checked through the Python API: the rows and exactly one new Delta version.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from nfs.protocol.server import NfsServer
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import render_csv
from tests.nfs.idle import FakeClock, quiet

TOOLS = ("nfs-ls", "nfs-cat", "nfs-cp")
_missing = [t for t in TOOLS if shutil.which(t) is None]
pytestmark = pytest.mark.skipif(
    bool(_missing),
    reason=f"libnfs-utils not installed (missing {', '.join(_missing)}; apt install libnfs-utils)",
)


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(args, capture_output=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} failed ({proc.returncode}): {proc.stderr.decode()}")
    return proc


@pytest.fixture
def db(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / "t", {"id": "Int64", "name": "String", "price": "Float64"}, engine="local"
    )
    n = 5000
    d.insert(
        pa.table(
            {
                "id": pa.array(range(n), pa.int64()),
                "name": pa.array([f"item {i}" if i % 10 else f"item, {i}" for i in range(n)]),
                "price": pa.array([i / 8 for i in range(n)], pa.float64()),
            }
        )
    )
    return d


@pytest.fixture
def keyed(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / "k", {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
    )
    d.insert([{"id": i, "name": f"n{i}"} for i in range(100)])
    return d


def _serve(db: DatabaseOps) -> NfsServer:
    return NfsServer(TableFs(db, idle_timer=False, clock=FakeClock()))


@pytest.fixture
def server(db: DatabaseOps) -> Iterator[NfsServer]:
    with _serve(db) as srv:
        yield srv


def rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in db.to_arrow().to_pylist())


def test_nfs_ls(server: NfsServer, db: DatabaseOps) -> None:
    top = run("nfs-ls", server.nfs_url("/")).stdout.decode()
    names = [line.split()[-1] for line in top.splitlines() if line.strip()]
    assert sorted(names) == ["changes.csv", "data", "schema.sql", "versions"]
    listing = run("nfs-ls", server.nfs_url("/data")).stdout.decode()
    (line,) = [ln for ln in listing.splitlines() if ln.endswith("data.csv")]
    assert int(line.split()[4]) == len(render_csv(db.to_arrow()))  # the exact size
    versions = run("nfs-ls", server.nfs_url("/versions")).stdout.decode()
    assert sorted(int(ln.split()[-1]) for ln in versions.splitlines() if ln.strip()) == list(
        range(db.version + 1)
    )


def test_nfs_cat(server: NfsServer, db: DatabaseOps) -> None:
    assert run("nfs-cat", server.nfs_url("/data/data.csv")).stdout == render_csv(db.to_arrow())
    assert run("nfs-cat", server.nfs_url("/versions/0/data.csv")).stdout == b"id,name,price\n"
    # a file in the export root: libnfs mounts its parent, so go through /share
    schema = run("nfs-cat", server.nfs_url("/share/schema.sql")).stdout
    assert schema.startswith(b"CREATE TABLE data")
    # the original project's export path
    assert run("nfs-cat", server.nfs_url("/share/data/data.csv")).stdout == render_csv(
        db.to_arrow()
    )


def test_nfs_cat_sees_an_api_write_at_once(server: NfsServer, db: DatabaseOps) -> None:
    run("nfs-cat", server.nfs_url("/data/data.csv"))
    db.insert({"id": -1, "name": "fresh", "price": 0.5})
    assert b"-1,fresh,0.5\n" in run("nfs-cat", server.nfs_url("/data/data.csv")).stdout


def test_nfs_cp_overwrite_with_one_row_changed(
    server: NfsServer, db: DatabaseOps, tmp_path: Path
) -> None:
    old = run("nfs-cat", server.nfs_url("/data/data.csv")).stdout
    new = old.replace(b"\n1234,item 1234,154.25\n", b"\n1234,item 1234 (sold),0\n")
    assert new != old
    (tmp_path / "new.csv").write_bytes(new)
    v, n = db.version, db.to_arrow().num_rows
    run("nfs-cp", str(tmp_path / "new.csv"), server.nfs_url("/data/data.csv"))
    assert db.version == v  # durable; applied once the writer is done (NFSv3 has no close)
    assert run("nfs-cat", server.nfs_url("/data/data.csv")).stdout == old  # another client
    quiet(server)
    assert db.version == v + 1
    assert db.to_arrow().num_rows == n
    assert db.query("SELECT name, price FROM data WHERE id = 1234").fetchall() == [
        ("item 1234 (sold)", 0.0)
    ]
    assert run("nfs-cat", server.nfs_url("/data/data.csv")).stdout == new


def test_nfs_cp_by_key(keyed: DatabaseOps, tmp_path: Path) -> None:
    with _serve(keyed) as srv:
        content = b"id,name\n" + b"".join(
            f"{i},{'N' if i == 5 else 'n'}{i}\n".encode() for i in range(100) if i != 7
        )
        content += b"100,n100\n"
        (tmp_path / "k.csv").write_bytes(content)
        v = keyed.version
        run("nfs-cp", str(tmp_path / "k.csv"), srv.nfs_url("/data/data.csv"))
        quiet(srv)
        assert keyed.version == v + 1
        got = dict(rows(keyed))
        assert got[5] == "N5" and 7 not in got and got[100] == "n100" and len(got) == 100


def test_nfs_cp_bad_content_changes_nothing(
    server: NfsServer, db: DatabaseOps, tmp_path: Path
) -> None:
    (tmp_path / "bad.csv").write_bytes(b"id,name,price\n1,x,not-a-price\n")
    v, before = db.version, db.to_arrow().num_rows
    res = run("nfs-cp", str(tmp_path / "bad.csv"), server.nfs_url("/data/data.csv"), check=False)
    assert res.returncode != 0  # the WRITE or COMMIT that completed the bad line said so
    quiet(server)
    assert db.version == v and db.to_arrow().num_rows == before
    assert run("nfs-cat", server.nfs_url("/data/data.csv")).stdout == render_csv(db.to_arrow())


def test_nfs_cp_scratch_files_round_trip(
    server: NfsServer, db: DatabaseOps, tmp_path: Path
) -> None:
    payload = bytes(range(256)) * 5000
    (tmp_path / "blob.bin").write_bytes(payload)
    v = db.version
    run("nfs-cp", str(tmp_path / "blob.bin"), server.nfs_url("/data/blob.bin"))
    assert run("nfs-cat", server.nfs_url("/data/blob.bin")).stdout == payload
    run("nfs-cp", server.nfs_url("/data/data.csv"), str(tmp_path / "out.csv"))
    assert (tmp_path / "out.csv").read_bytes() == render_csv(db.to_arrow())
    assert db.version == v
    listing = run("nfs-ls", server.nfs_url("/data")).stdout.decode()
    assert "blob.bin" in listing and str(len(payload)) in listing
