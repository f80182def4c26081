"""The NFS face serves as one authenticated user: a read-only user's share refuses writes.

Calls go over the wire format (our RPC client wired straight into the server's
dispatcher), so the status checked is the one an NFS client would see.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nfs.protocol.nfs3 import Nfsstat3
from nfs.protocol.server import build_dispatcher
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps, security
from tests.nfs.rpcclient import NfsStatusError, RpcClient

ADMIN = ("root", "root-password")


@pytest.fixture(autouse=True)
def fast_kdf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(security.SCRYPT_LOG2_N_ENV, "6")


@pytest.fixture
def table(tmp_path: Path) -> Iterator[DatabaseOps]:
    db = DatabaseOps.create(
        tmp_path / "t",
        {"id": "Int64", "name": "String"},
        engine="local",
        auth=True,
        credentials=ADMIN,
    )
    db.insert([{"id": 1, "name": "a"}])
    db.create_user("reader", "reader-password", ["read"])
    db.create_user("writer", "writer-password", ["write"])
    yield db
    db.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def client_for(db: DatabaseOps, user: str, password: str) -> tuple[RpcClient, TableFs]:
    session = DatabaseOps.open(db.uri, engine="local", credentials=(user, password))
    fs = TableFs(session, idle_timer=False, clock=_Clock())
    client = RpcClient.over(build_dispatcher(fs))
    client.mount("/")
    return client, fs


def test_a_read_only_users_share_refuses_writes(table: DatabaseOps) -> None:
    client, fs = client_for(table, "reader", "reader-password")
    try:
        assert client.read_file("/data/data.csv") == b"id,name\n1,a\n"
        with pytest.raises(NfsStatusError) as err:
            client.write_file("/data/data.csv", b"id,name\n1,a\n2,b\n")
        assert err.value.status in (Nfsstat3.NFS3ERR_ROFS, Nfsstat3.NFS3ERR_ACCES)
    finally:
        fs.close()
    assert table.query("SELECT count(*) FROM data").scalar() == 1


def test_a_writers_share_accepts_writes_as_that_user(table: DatabaseOps) -> None:
    client, fs = client_for(table, "writer", "writer-password")
    try:
        client.write_file("/data/data.csv", b"id,name\n1,a\n2,b\n")
        clock = fs._clock
        assert isinstance(clock, _Clock)
        clock.now += 60  # the writer is quiet for the idle period (NFSv3 has no close)
        fs.poll()
    finally:
        fs.close()
    assert table.query("SELECT count(*) FROM data").scalar() == 2
    assert table.history(1)[0].user == "writer"
