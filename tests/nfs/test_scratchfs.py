"""ScratchFs: the durable scratch area, through the interface TableFs uses from MemoryFs.

A restart is a new instance on the same directory (or a new server process).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import rule

from nfs.protocol.memfs import IdAllocator
from nfs.protocol.nfs3 import Createmode3, Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.server import NfsServer
from nfs.protocol.vfs import FileId, Vfs
from nfs.table.scratchfs import ScratchFs
from nfs.table.tablefs import DATA_DIR_ID, ROOT_ID, SCRATCH_BASE
from tests.nfs.conftest import FakeClock
from tests.nfs.rpcclient import RpcClient
from tests.nfs.test_memfs import MemoryFsModel, status

ROOT = CallContext.local()
USER = CallContext.local(uid=1000, gid=1000)
MiB = 1 << 20


def embedded(path: Path, clock: FakeClock | None = None, **kwargs: object) -> ScratchFs:
    """A ScratchFs made the way TableFs makes its MemoryFs (root id 1, ids from 1 << 62)."""
    fs = ScratchFs(
        path,
        clock or FakeClock(),
        ids=IdAllocator(SCRATCH_BASE),
        root_id=ROOT_ID,
        root_mode=0o777,
        fsid=42,
        max_file_size=1 << 40,
        **kwargs,  # type: ignore[arg-type]
    )
    fs.add_dir(ROOT_ID, "data", mode=0o777, fid=DATA_DIR_ID)
    return fs


def test_scratchfs_is_a_vfs(tmp_path: Path) -> None:
    fs = ScratchFs(tmp_path / "s")
    assert isinstance(fs, Vfs)
    fs.close()
    fs.close()  # idempotent


def test_everything_survives_a_restart(tmp_path: Path) -> None:
    clock = FakeClock()
    fs = embedded(tmp_path / "s", clock)
    home = fs.mkdir(ROOT_ID, "home", Sattr3(mode=0o750), USER)
    notes = fs.create(home, "notes.txt", Sattr3(mode=0o640), USER, guarded=True)
    fs.write(notes, 0, b"remember the milk\n", StableHow.UNSTABLE, USER)
    fs.commit(notes, 0, 0, USER)
    tmp = fs.create_exclusive(DATA_DIR_ID, "sedX1", b"verifier", USER)
    fs.write(tmp, 0, b"id\n1\n", StableHow.FILE_SYNC, USER)
    fs.rename(DATA_DIR_ID, "sedX1", home, "kept.csv", USER)
    gone = fs.create(ROOT_ID, "gone", Sattr3(), USER, guarded=True)
    fs.remove(ROOT_ID, "gone", USER)
    attrs = {fid: fs.getattr(fid) for fid in (home, notes, tmp, ROOT_ID, DATA_DIR_ID)}
    generation = fs.generation(notes)
    fs.close()

    again = embedded(tmp_path / "s", clock)  # add_dir("data") again: the same directory
    assert again.listdir(ROOT_ID) == ["data", "home"]
    assert again.listdir(home) == ["kept.csv", "notes.txt"]
    assert again.read_all(notes) == b"remember the milk\n"
    assert again.read_all(tmp) == b"id\n1\n"
    for fid, before in attrs.items():
        assert again.getattr(fid) == before
    assert again.generation(notes) == generation  # handles survive
    assert not again.contains(gone)
    new = again.create(ROOT_ID, "new", Sattr3(), USER, guarded=True)
    assert new > max(home, notes, tmp, gone)  # ids are never reused
    assert again.lookup(home, "..", USER) == ROOT_ID
    assert status(
        again.write, notes, 0, b"x", StableHow.FILE_SYNC, CallContext.local(2000, 2000)
    ) == (Nfsstat3.NFS3ERR_ACCES)
    again.close()


def test_sparse_files_and_the_quota(tmp_path: Path) -> None:
    fs = ScratchFs(tmp_path / "s", quota_bytes=64 * MiB, root_mode=0o777)
    fid = fs.create(fs.root_dir(), "big", Sattr3(), USER, guarded=True)
    assert status(fs.setattr, fid, Sattr3(size=2 << 30), USER) == Nfsstat3.NFS3ERR_DQUOT
    fs.setattr(fid, Sattr3(size=48 * MiB), USER)
    fs.write(fid, 40 * MiB, b"end", StableHow.FILE_SYNC, USER)
    on_disk = os.stat(tmp_path / "s" / "objects" / f"{fid:016x}")
    assert on_disk.st_size == 48 * MiB and on_disk.st_blocks * 512 < MiB  # a hole
    assert fs.read(fid, 40 * MiB - 2, 5, USER) == (b"\0\0end", False)
    stat = fs.fsstat(fid)
    assert stat.tbytes == 64 * MiB and stat.fbytes <= 16 * MiB
    other = fs.create(fs.root_dir(), "other", Sattr3(), USER, guarded=True)
    assert status(fs.write, other, 0, bytes(17 * MiB), StableHow.UNSTABLE, USER) == (
        Nfsstat3.NFS3ERR_DQUOT
    )
    assert fs.getattr(other).size == 0
    fs.remove(fs.root_dir(), "big", USER)
    assert not (tmp_path / "s" / "objects" / f"{fid:016x}").exists()
    assert fs.fsstat(other).fbytes > 48 * MiB or fs.fsstat(other).fbytes == stat.fbytes + 48 * MiB
    fs.close()


def test_pop_file_for_a_rename_onto_the_table(tmp_path: Path) -> None:
    fs = embedded(tmp_path / "s")
    fs.add_file(DATA_DIR_ID, "sedAbc", b"id\n2\n")
    fid, data = fs.pop_file(DATA_DIR_ID, "sedAbc")
    assert data == b"id\n2\n" and not fs.contains(fid)
    fs.close()
    again = embedded(tmp_path / "s")
    assert again.listdir(DATA_DIR_ID) == []
    again.close()


def test_one_process_per_directory(tmp_path: Path) -> None:
    fs = ScratchFs(tmp_path / "s")
    code = "import sys\nfrom nfs.table.scratchfs import ScratchFs\nScratchFs(sys.argv[1])\n"
    root = Path(__file__).resolve().parents[2]
    other = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "s")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
    )
    assert other.returncode != 0 and "in use by another process" in other.stderr
    fs.close()
    ScratchFs(tmp_path / "s").close()
    with pytest.raises(ValueError):
        ScratchFs(tmp_path / "s", root_id=FileId(7))


def test_committed_data_survives_a_crash(tmp_path: Path) -> None:
    code = (
        "import os, sys\n"
        "from nfs.table.scratchfs import ScratchFs\n"
        "from nfs.protocol.nfs3 import Sattr3, StableHow\n"
        "from nfs.protocol.rpc import CallContext\n"
        "fs = ScratchFs(sys.argv[1], root_mode=0o777)\n"
        "ctx = CallContext.local(1000, 1000)\n"
        "a = fs.create(fs.root_dir(), 'synced', Sattr3(mode=0o600), ctx, guarded=True)\n"
        "fs.write(a, 0, b'file sync', StableHow.FILE_SYNC, ctx)\n"
        "b = fs.create(fs.root_dir(), 'committed', Sattr3(), ctx, guarded=True)\n"
        "fs.write(b, 0, b'unstable then commit', StableHow.UNSTABLE, ctx)\n"
        "fs.commit(b, 0, 0, ctx)\n"
        "fs.mkdir(fs.root_dir(), 'dir', Sattr3(), ctx)\n"
        "os._exit(0)  # no close: a crash\n"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "s")],
        check=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    fs = ScratchFs(tmp_path / "s")
    assert fs.get("/synced") == b"file sync"
    assert fs.get("/committed") == b"unstable then commit"
    assert fs.listdir(fs.root_dir()) == ["committed", "dir", "synced"]
    assert fs.getattr(fs.resolve("/synced")).mode == 0o600
    fs.close()


def test_handles_survive_a_server_restart(tmp_path: Path) -> None:
    def serve() -> NfsServer:
        return NfsServer(ScratchFs(tmp_path / "s", root_mode=0o777), 0)

    with serve() as server, RpcClient("127.0.0.1", server.port, uid=1000, gid=1000) as c:
        c.mount("/")
        fh = c.write_file("/notes.txt", b"before the restart\n")
        res = c.create(c.walk("/"), "excl", how=Createmode3.EXCLUSIVE, verf=b"12345678")
        assert res.status == Nfsstat3.NFS3_OK
        fsstat = c.fsstat(fh).resok
        assert fsstat is not None and fsstat.tbytes == 4 << 30
    with serve() as server, RpcClient("127.0.0.1", server.port, uid=1000, gid=1000) as c:
        c.mount("/")
        assert c.read_file(fh) == b"before the restart\n"  # the old handle works
        assert sorted(c.listdir("/")) == ["excl", "notes.txt"]


class ScratchFsModel(MemoryFsModel):
    """The MemoryFs model check on a ScratchFs, with restarts in between."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="scratchfs-"))
        self.fs = ScratchFs(self.dir, FakeClock())

    @rule()
    def restart(self) -> None:
        assert isinstance(self.fs, ScratchFs)
        self.fs.close()
        self.fs = ScratchFs(self.dir, FakeClock())

    def teardown(self) -> None:
        assert isinstance(self.fs, ScratchFs)
        self.fs.close()
        shutil.rmtree(self.dir)


TestScratchFsModel = ScratchFsModel.TestCase
TestScratchFsModel.settings = settings(max_examples=15, stateful_step_count=20, deadline=None)
