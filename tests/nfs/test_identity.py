"""NFS identities: root squash, the privileged-port check, posixlake users per AUTH_SYS uid.

Real servers on 127.0.0.1, spoken to with our RPC client under chosen credentials.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli._serve import table_entries
from nfs.protocol.identity import IdentityPolicy
from nfs.protocol.memfs import MemoryFs
from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import AuthFlavor, AuthStat, ConnectionContext, Credentials
from nfs.protocol.server import NfsServer
from nfs.protocol.vfs import FileId
from nfs.table.access import TableAccessVfs, UserMap, UserPermissions
from nfs.table.tablefs import DATA_CSV_ID, DATA_DIR_ID, SCHEMA_ID, SCRATCH_BASE, TableFs
from posixlake import DatabaseOps
from tests.nfs.rpcclient import RpcClient, RpcReplyError

ANA, BOB, EVE = 1000, 1001, 1002


def test_root_is_squashed_in_the_scratch_area() -> None:
    fs = MemoryFs(root_mode=0o777)
    with NfsServer(fs, 0, credential_policy=IdentityPolicy()) as server:
        with RpcClient("127.0.0.1", server.port, uid=ANA, gid=ANA) as ana:
            ana.mount("/")
            fh = ana.write_file("/private.txt", b"ana's\n")
            assert ana.setattr(fh, Sattr3(mode=0o600)).status == Nfsstat3.NFS3_OK
        with RpcClient("127.0.0.1", server.port, uid=0, gid=0) as root:
            root.mount("/")
            assert root.read(fh).status == Nfsstat3.NFS3ERR_ACCES
            assert root.write(fh, 0, b"x", StableHow.FILE_SYNC).status == Nfsstat3.NFS3ERR_ACCES
            assert root.setattr(fh, Sattr3(uid=0)).status == Nfsstat3.NFS3ERR_PERM
            mine = root.write_file("/root.txt", b"made by root\n")
            assert root.attrs(mine).uid == 65534 and root.attrs(mine).gid == 65534


def test_without_root_squash_root_may_do_anything() -> None:
    fs = MemoryFs(root_mode=0o777)
    fid = fs.put("/private.txt", b"ana's\n", mode=0o600, uid=ANA, gid=ANA)
    policy = IdentityPolicy(root_squash=False)
    with (
        NfsServer(fs, 0, credential_policy=policy) as server,
        RpcClient("127.0.0.1", server.port) as root,
    ):
        root.mount("/")
        assert root.read_file("/private.txt") == b"ana's\n"
        assert fs.getattr(fid).uid == ANA


def test_squash_rewrites_only_root_ids() -> None:
    squash = IdentityPolicy()
    user = Credentials.sys(ANA, ANA, (0, 20))
    assert squash(user, None) == Credentials.sys(ANA, ANA, (20,))
    assert squash(Credentials.sys(0, 0), None).uid == 65534
    assert squash(Credentials(), None) == Credentials()  # AUTH_NONE is nobody already
    assert Credentials().flavor == AuthFlavor.AUTH_NONE


def _privileged_port() -> int:
    """A free local port below 1024 (needs root)."""
    for port in range(1023, 600, -1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError as err:
                if err.errno == errno.EACCES:
                    pytest.skip("binding a privileged port needs root")
                continue
            return port
    pytest.skip("no free privileged port")


def test_privileged_port_is_required_when_asked() -> None:
    policy = IdentityPolicy(require_privileged_port=True)
    with NfsServer(MemoryFs(root_mode=0o777), 0, credential_policy=policy) as server:
        with RpcClient("127.0.0.1", server.port) as c, pytest.raises(RpcReplyError) as info:
            c.null()
        assert info.value.header.auth_stat == AuthStat.AUTH_TOOWEAK
        with RpcClient("127.0.0.1", server.port) as c, pytest.raises(RpcReplyError):
            c.mount("/")  # MOUNT is refused as well
        if os.geteuid() != 0:
            pytest.skip("binding a privileged port needs root")
        with RpcClient("127.0.0.1", server.port, source_port=_privileged_port()) as c:
            c.mount("/")
            c.write_file("/ok.txt", b"from a privileged port\n")


def test_peer_port_of_a_connection() -> None:
    assert ConnectionContext("127.0.0.1:812").peer_port == 812
    assert ConnectionContext("::1:40000").peer_port == 40000
    assert ConnectionContext(None).peer_port is None
    with pytest.raises(Exception) as info:
        IdentityPolicy(require_privileged_port=True)(Credentials.sys(1, 1), None)
    assert "not privileged" in str(info.value)


def test_user_map_parsing() -> None:
    m = UserMap.parse(["1000=ana", " 1001 = bob ", "*=guest"])
    assert m.user_for(1000) == "ana" and m.user_for(1001) == "bob" and m.user_for(7) == "guest"
    assert m.names() == {"ana", "bob", "guest"}
    assert UserMap.parse(["0=admin"]).user_for(5) is None
    for bad in (["ana"], ["x=ana"], ["1000="], ["1000=a", "1000=b"], ["*=a", "*=b"], ["-1=a"]):
        with pytest.raises(ValueError):
            UserMap.parse(bad)


def test_user_permissions_are_reloaded_after_the_refresh_period() -> None:
    now = [0.0]
    table = {"ana": frozenset({"read"})}
    loads: list[int] = []

    def load() -> dict[str, frozenset[str]]:
        loads.append(1)
        return dict(table)

    perms = UserPermissions(load, refresh_seconds=5, clock=lambda: now[0])
    assert perms.of("ana") == {"read"}
    table["ana"] = frozenset({"read", "write"})
    now[0] = 4.9
    assert perms.of("ana") == {"read"} and len(loads) == 1
    now[0] = 5.0
    assert perms.of("ana") == {"read", "write"} and len(loads) == 2
    assert perms.of("nobody") == frozenset()


# ---------------------------------------------------------------- a table, per-client roles

ROLES = {
    "ana": frozenset({"read", "write", "delete"}),
    "bob": frozenset({"read"}),
}


@pytest.fixture
def db(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / "t", {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
    )
    d.insert([{"id": 1, "name": "one"}, {"id": 2, "name": "two"}])
    return d


@pytest.fixture
def server(db: DatabaseOps) -> Iterator[NfsServer]:
    fs = TableAccessVfs(
        TableFs(db, idle_timer=False),
        table_entries(),
        UserMap.parse([f"{ANA}=ana", f"{BOB}=bob"]),
        lambda user: ROLES.get(user, frozenset()),
    )
    with NfsServer(fs, 0, credential_policy=IdentityPolicy()) as srv:
        yield srv


def _client(server: NfsServer, uid: int) -> RpcClient:
    c = RpcClient("127.0.0.1", server.port, uid=uid, gid=uid)
    c.mount("/")
    return c


def test_a_write_user_appends(server: NfsServer, db: DatabaseOps) -> None:
    with _client(server, ANA) as ana:
        fh = ana.walk("/data/data.csv")
        size = ana.attrs(fh).size
        assert ana.write(fh, size, b"3,three\n", StableHow.FILE_SYNC).status == Nfsstat3.NFS3_OK
    assert db.to_arrow().num_rows == 3


def test_a_read_user_reads_but_cannot_change_the_table(server: NfsServer, db: DatabaseOps) -> None:
    version = db.version
    with _client(server, BOB) as bob:
        fh = bob.walk("/data/data.csv")
        assert bob.read_file(fh).startswith(b"id,name\n1,one\n")
        assert bob.read_file("/changes.csv").startswith(b"_commit_version,")
        size = bob.attrs(fh).size
        assert bob.write(fh, size, b"3,x\n", StableHow.FILE_SYNC).status == Nfsstat3.NFS3ERR_ACCES
        assert bob.setattr(fh, Sattr3(size=0)).status == Nfsstat3.NFS3ERR_ACCES
        assert bob.remove(bob.walk("/data"), "data.csv").status == Nfsstat3.NFS3ERR_ACCES
        access = bob.access(fh).resok
        assert access is not None and access.access & 0x4 == 0  # no MODIFY
        # his own scratch files still work (POSIX mode bits)
        bob.write_file("/data/notes.txt", b"mine\n")
        bob.create(bob.walk("/data"), "edit.tmp")
        tmp = bob.walk("/data/edit.tmp")
        bob.write(tmp, 0, b"id,name\n9,nine\n", StableHow.FILE_SYNC)
        renamed = bob.rename(bob.walk("/data"), "edit.tmp", bob.walk("/data"), "data.csv")
        assert renamed.status == Nfsstat3.NFS3ERR_ACCES
    assert db.version == version


def test_an_unmapped_uid_gets_nothing_of_the_table(server: NfsServer, db: DatabaseOps) -> None:
    with _client(server, EVE) as eve:
        fh = eve.walk("/data/data.csv")
        assert eve.read(fh).status == Nfsstat3.NFS3ERR_ACCES
        assert eve.read(eve.walk("/versions/1/data.csv")).status == Nfsstat3.NFS3ERR_ACCES
        assert eve.read(eve.walk("/changes.csv")).status == Nfsstat3.NFS3ERR_ACCES
        assert eve.read(eve.walk("/versions/1/changes.csv")).status == Nfsstat3.NFS3ERR_ACCES
        assert eve.read_file("/schema.sql").startswith(b"CREATE TABLE")
    with _client(server, 0) as root:  # root is squashed to nobody: unmapped too
        fh = root.walk("/data/data.csv")
        assert root.read(fh).status == Nfsstat3.NFS3ERR_ACCES


def test_table_entries_know_the_table_files() -> None:
    entries = table_entries()
    assert entries.data_file == DATA_CSV_ID and entries.data_dir == DATA_DIR_ID
    assert entries.read_only_files(FileId((1 << 40) + 2 * 3 + 1))  # /versions/3/data.csv
    assert not entries.read_only_files(FileId((1 << 40) + 2 * 3))  # /versions/3
    assert not entries.read_only_files(SCHEMA_ID)
    assert not entries.read_only_files(FileId(SCRATCH_BASE + 5))


def test_the_wrapper_keeps_the_table_write_verifier(db: DatabaseOps) -> None:
    fs = TableFs(db, idle_timer=False)
    wrapped = TableAccessVfs(fs, table_entries(), UserMap(), lambda user: frozenset())
    assert wrapped.write_verifier() == fs.write_verifier()
    assert not hasattr(
        TableAccessVfs(MemoryFs(), table_entries(), UserMap(), lambda u: frozenset()),
        "write_verifier",
    )
    wrapped.close()
