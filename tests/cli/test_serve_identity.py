"""``posixlake serve`` identity options: --map-uid checks, and the roles of mapped users."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli._serve import per_user_vfs
from nfs.protocol.identity import IdentityPolicy
from nfs.protocol.nfs3 import Nfsstat3, StableHow
from nfs.protocol.server import NfsServer
from nfs.table.access import TableAccessVfs, UserMap
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from posixlake.errors import InvalidOperation
from tests.cli.conftest import Cli
from tests.nfs.rpcclient import RpcClient

PASSWORD = "correct horse battery"


def test_bad_maps_are_usage_errors(run: Cli, table: str) -> None:
    assert "UID=USER" in run.fails(2, "serve", table, "--port", "0", "--map-uid", "ana").stderr
    run.fails(2, "serve", table, "--port", "0", "--map-uid", "1=a", "--map-uid", "1=b")


def test_a_map_needs_a_table_with_users(run: Cli, table: str) -> None:
    result = run.fails(1, "serve", table, "--port", "0", "--engine", "local", "--map-uid", "1=a")
    assert "has no users" in result.stderr


@pytest.fixture
def users_table(tmp_path: Path) -> DatabaseOps:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "name": "String"}, engine="local")
    db.insert([{"id": 1, "name": "one"}])
    db.enable_auth(("admin", PASSWORD))
    db.create_user("ana", PASSWORD, roles=["write"])
    db.create_user("bob", PASSWORD, roles=["read"])
    return db


def test_mapped_users_get_their_roles(users_table: DatabaseOps) -> None:
    fs = TableFs(users_table, idle_timer=False)
    with pytest.raises(InvalidOperation, match="no such user"):
        per_user_vfs(users_table, fs, UserMap.parse(["1=carol"]))
    vfs = per_user_vfs(users_table, fs, UserMap.parse(["1000=ana", "1001=bob"]))
    assert isinstance(vfs, TableAccessVfs)
    with NfsServer(vfs, 0, credential_policy=IdentityPolicy()) as server:
        for uid, expected in ((1000, Nfsstat3.NFS3_OK), (1001, Nfsstat3.NFS3ERR_ACCES)):
            with RpcClient("127.0.0.1", server.port, uid=uid, gid=uid) as c:
                c.mount("/")
                fh = c.walk("/data/data.csv")
                size = c.attrs(fh).size
                line = f"{uid},from {uid}\n".encode()
                assert c.write(fh, size, line, StableHow.FILE_SYNC).status == expected
    assert sorted(r["id"] for r in users_table.to_arrow().to_pylist()) == [1, 1000]
