"""A table served by NfsServer, spoken to over TCP with our RPC client.

Checks the statuses and attributes the wire carries (INVAL for bad content in the WRITE
or COMMIT reply, ROFS, STALE handles after a restart of a changed table, a new write
verifier per boot) and, through the Python API, the rows and the number of versions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nfs.protocol.nfs3 import Createmode3, Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.server import NfsServer
from nfs.table.tablefs import PathOps, TableFs
from posixlake import DatabaseOps
from posixlake._authz import Permission
from posixlake.csvcodec import render_csv
from posixlake.delta import DeltaLog
from posixlake.engines import LocalEngine
from posixlake.errors import PermissionDenied
from tests.nfs.idle import FakeClock, quiet
from tests.nfs.rpcclient import RpcClient


@pytest.fixture
def db(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / "t",
        {"id": "Int64", "name": "String", "qty": "Int32"},
        primary_key="id",
        engine="local",
    )
    d.insert([{"id": i, "name": f"n{i}", "qty": i} for i in range(1, 6)])
    return d


def _server(db: DatabaseOps, clock: FakeClock | None = None) -> NfsServer:
    return NfsServer(TableFs(db, idle_timer=False, clock=clock or FakeClock())).start()


@pytest.fixture
def server(db: DatabaseOps) -> Iterator[NfsServer]:
    srv = _server(db)
    yield srv
    srv.shutdown()


@pytest.fixture
def client(server: NfsServer) -> Iterator[RpcClient]:
    with RpcClient("127.0.0.1", server.port) as c:
        c.mount("/")
        yield c


def rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in db.to_arrow().to_pylist())


def test_listing_and_reading(client: RpcClient, db: DatabaseOps) -> None:
    assert client.listdir("/") == ["data", "schema.sql", "versions", "changes.csv"]
    assert client.listdir("/data", plus=True) == ["data.csv"]
    assert client.listdir("/versions", plus=True) == [str(v) for v in range(db.version + 1)]
    data = client.read_file("/data/data.csv", chunk=7)
    assert data == render_csv(db.to_arrow())
    assert client.attrs("/data/data.csv").size == len(data)
    assert client.read_file("/versions/0/data.csv") == b"id,name,qty\n"
    assert b"PRIMARY KEY (id)" in client.read_file("/schema.sql")


def test_the_share_alias_and_subdirectory_mounts(server: NfsServer, db: DatabaseOps) -> None:
    with RpcClient("127.0.0.1", server.port) as c:
        c.mount("/share")
        assert c.listdir("/") == ["data", "schema.sql", "versions", "changes.csv"]
        c.mount("/data")
        assert c.read_file("/data.csv") == render_csv(db.to_arrow())


def test_append_reply_carries_the_new_size(client: RpcClient, db: DatabaseOps) -> None:
    v = db.version
    fh = client.walk("/data/data.csv")
    size = client.attrs(fh).size
    res = client.write(fh, size, b"6,n6,6\n", StableHow.FILE_SYNC)
    assert res.status == Nfsstat3.NFS3_OK and res.resok is not None
    assert res.resok.committed == StableHow.FILE_SYNC
    after = res.resok.file_wcc.after.attributes
    assert after is not None and after.size == size + 7
    assert db.version == v + 1 and (6, "n6", 6) in rows(db)
    assert client.read_file(fh).endswith(b"6,n6,6\n")


def test_bad_content_fails_the_write_or_the_commit(client: RpcClient, db: DatabaseOps) -> None:
    v, before = db.version, rows(db)
    fh = client.walk("/data/data.csv")
    shown = client.read_file(fh)
    client.setattr(fh, Sattr3(size=0))
    res = client.write(fh, 0, b"id,name,qty\n1,x,notanumber\n", StableHow.FILE_SYNC)
    assert res.status == Nfsstat3.NFS3ERR_INVAL  # the reply that completes the bad line
    size = client.attrs(fh).size
    res = client.write(fh, size, b"9,n9,9\n", StableHow.FILE_SYNC)  # the writer goes on
    assert res.status == Nfsstat3.NFS3_OK and db.version == v + 1
    v = db.version
    before = rows(db)
    shown = client.read_file(fh)
    client.setattr(fh, Sattr3(size=0))
    res = client.write(fh, 0, b"id,name\n1,x\n", StableHow.UNSTABLE)
    assert res.status == Nfsstat3.NFS3ERR_INVAL  # a wrong header: refused at once
    assert client.commit(fh).status == Nfsstat3.NFS3_OK  # nothing staged any more
    assert db.version == v and rows(db) == before
    assert client.read_file(fh) == shown


def test_unstable_chunks_then_commit_is_one_commit(
    client: RpcClient, db: DatabaseOps, server: NfsServer
) -> None:
    v = db.version
    content = b"id,name,qty\n" + b"".join(f"{i},row{i},{i % 7}\n".encode() for i in range(20_000))
    client.write_file("/data/data.csv", content, chunk=64 * 1024, stable=StableHow.UNSTABLE)
    assert db.version == v  # durable at the COMMIT; applied once the writer is done
    quiet(server)
    assert db.version == v + 1
    assert len(rows(db)) == 20_000 and rows(db)[3] == (3, "row3", 3)
    res = client.write(client.walk("/data/data.csv"), 0, b"", StableHow.UNSTABLE)
    assert res.resok is not None
    assert len(res.resok.verf) == 8


def test_sed_i_sequence(client: RpcClient, db: DatabaseOps) -> None:
    v = db.version
    data_dir = client.walk("/data")
    res = client.create(data_dir, "sedXy12Z", how=Createmode3.EXCLUSIVE)
    assert res.resok is not None and res.resok.obj.handle is not None
    tmp = res.resok.obj.handle
    client.setattr(tmp, Sattr3(mode=0o600))
    old = client.read_file("/data/data.csv")
    client.setattr(tmp, Sattr3(uid=0, gid=0))
    client.setattr(tmp, Sattr3(mode=0o644))
    assert client.write(tmp, 0, old.replace(b"3,n3,3", b"3,N3,33")).status == Nfsstat3.NFS3_OK
    assert client.rename(data_dir, "sedXy12Z", data_dir, "data.csv").status == Nfsstat3.NFS3_OK
    assert db.version == v + 1
    assert (3, "N3", 33) in rows(db) and len(rows(db)) == 5
    assert client.listdir("/data") == ["data.csv"]


def test_handles_across_restarts(db: DatabaseOps) -> None:
    srv = _server(db)
    with RpcClient("127.0.0.1", srv.port) as c:
        c.mount("/")
        root, csv, v1 = c.root, c.walk("/data/data.csv"), c.walk("/versions/1/data.csv")
        tmp = c.write_file("/data/scratch.txt", b"x")
        verf1 = c.write(csv, 0, b"", StableHow.UNSTABLE).resok
    srv.shutdown()
    assert root is not None and verf1 is not None

    srv = _server(db)  # the table did not change: its handles still work
    with RpcClient("127.0.0.1", srv.port) as c:
        assert c.getattr(root).status == Nfsstat3.NFS3_OK
        assert c.read_file(csv) == render_csv(db.to_arrow())
        assert c.getattr(tmp).status == Nfsstat3.NFS3_OK  # scratch: durable
        assert c.read_file(tmp) == b"x"
        verf2 = c.write(csv, 0, b"", StableHow.UNSTABLE).resok
        assert verf2 is not None and verf2.verf != verf1.verf  # a new verifier per boot
    srv.shutdown()

    db.insert({"id": 99, "name": "changed", "qty": 0})
    srv = _server(db)  # changed meanwhile: data.csv's old handle is stale, never wrong bytes
    with RpcClient("127.0.0.1", srv.port) as c:
        assert c.getattr(csv).status == Nfsstat3.NFS3ERR_STALE
        assert c.read(csv).status == Nfsstat3.NFS3ERR_STALE
        assert c.getattr(root).status == Nfsstat3.NFS3_OK
        assert c.read_file(v1) == render_csv(db.to_arrow(version=1))
    srv.shutdown()


def test_shutdown_keeps_unfinished_writes_and_the_next_server_recovers_them(
    db: DatabaseOps,
) -> None:
    srv = _server(db)
    v = db.version
    with RpcClient("127.0.0.1", srv.port) as c:
        c.mount("/")
        fh = c.walk("/data/data.csv")
        size = c.attrs(fh).size
        assert c.write(fh, size, b"7,n7", StableHow.UNSTABLE).status == Nfsstat3.NFS3_OK
        res = c.commit(fh)  # mid-line: held, but durable
        assert res.status == Nfsstat3.NFS3_OK and res.resok is not None
        verf = res.resok.verf
        peer = c.local_address
    srv.shutdown()
    assert db.version == v  # shutdown never commits an unfinished writer
    fs = TableFs(db, idle_timer=False)
    try:
        writer = CallContext.local(peer=peer)
        assert fs.paths.read_file("/data/data.csv").endswith(b"5,n5,5\n")  # others: the table
        assert fs.write_verifier() != verf  # a new boot: clients resend UNSTABLE writes
        writer_view = PathOps(fs, writer)
        assert writer_view.read_file("/data/data.csv").endswith(b"7,n7")
        writer_view.write_file("/data/data.csv", b",7\n", offset=size + 4)
        assert db.version == v + 1 and (7, "n7", 7) in rows(db)
    finally:
        fs.close()


class _ReadOnly:
    user = "reader"

    def check(self, permission: Permission, operation: str) -> None:
        if permission != "read":
            raise PermissionDenied(f"{operation}: {permission} denied")

    def allows(self, permission: Permission) -> bool:
        return permission == "read"


def test_read_only_user_gets_rofs(db: DatabaseOps) -> None:
    ro = DatabaseOps(DeltaLog.open(db.uri), engine=LocalEngine(), authorizer=_ReadOnly())
    v = db.version
    with NfsServer(TableFs(ro, idle_timer=False)) as srv, RpcClient("127.0.0.1", srv.port) as c:
        c.mount("/")
        fh = c.walk("/data/data.csv")
        assert c.read_file(fh) == render_csv(db.to_arrow())
        assert c.write(fh, 0, b"id,name,qty\n", StableHow.FILE_SYNC).status == Nfsstat3.NFS3ERR_ROFS
        assert c.setattr(fh, Sattr3(size=0)).status == Nfsstat3.NFS3ERR_ROFS
        assert c.remove(c.walk("/data"), "data.csv").status == Nfsstat3.NFS3ERR_ROFS
        assert c.create(c.walk("/"), "x.txt").status == Nfsstat3.NFS3ERR_ROFS
    assert db.version == v


def test_parallel_clients(server: NfsServer, db: DatabaseOps) -> None:
    errors: list[str] = []

    def reader() -> None:
        with RpcClient("127.0.0.1", server.port) as c:
            c.mount("/")
            for _ in range(5):
                data = c.read_file("/data/data.csv")
                if not data.startswith(b"id,name,qty\n"):
                    errors.append("bad read")

    def writer(i: int) -> None:
        with RpcClient("127.0.0.1", server.port) as c:
            c.mount("/")
            tmp = f"/data/up{i}.csv"
            c.write_file(tmp, f"id,name,qty\n{100 + i},w,1\n".encode())
            c.create(c.walk("/"), f"done{i}")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    threads += [threading.Thread(target=writer, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    with RpcClient("127.0.0.1", server.port) as c:
        c.mount("/")
        assert sorted(c.listdir("/")) == sorted(
            ["data", "schema.sql", "versions", "changes.csv", "done0", "done1", "done2"]
        )
        assert sorted(c.listdir("/data")) == ["data.csv", "up0.csv", "up1.csv", "up2.csv"]
