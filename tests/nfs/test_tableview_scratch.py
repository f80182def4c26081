"""TableFs keeps its scratch area on disk (ScratchFs in <state_dir>/scratch)."""

from __future__ import annotations

from pathlib import Path

from nfs.protocol.nfs3 import Nfsstat3, Sattr3
from nfs.protocol.server import NfsServer
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from tests.nfs.rpcclient import RpcClient


def test_scratch_files_survive_a_restart(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine="local")
    db.insert([{"id": 1}])
    state = tmp_path / "state"

    def serve() -> NfsServer:
        fs = TableFs(db, idle_timer=False, state_dir=state, scratch_quota=1 << 20)
        return NfsServer(fs)

    with serve() as server, RpcClient("127.0.0.1", server.port, uid=1000, gid=1000) as c:
        c.mount("/")
        fh = c.write_file("/notes.txt", b"mine\n")
        c.mkdir(c.walk("/data"), "drafts")
        c.write_file("/data/edit.tmp", b"id\n1\n2\n")
        c.rename(c.walk("/data"), "edit.tmp", c.walk("/data"), "data.csv")
        assert c.setattr(fh, Sattr3(size=2 << 20)).status == Nfsstat3.NFS3ERR_DQUOT
    assert db.to_arrow().num_rows == 2
    assert (state / "scratch" / "meta.sqlite3").exists()
    with serve() as server, RpcClient("127.0.0.1", server.port, uid=1000, gid=1000) as c:
        c.mount("/")
        assert c.read_file(fh) == b"mine\n"  # the old handle still works
        assert sorted(c.listdir("/data")) == ["data.csv", "drafts"]
        stat = c.fsstat(fh).resok
        assert stat is not None and stat.tbytes == 1 << 20 and stat.fbytes <= (1 << 20) - 5
