"""The read path's transport: the event loop (uvloop), READ data sent from the segment
files (``os.sendfile``), and lake shares answering cheap calls on the loop."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from nfs.lake.lakefs import LakeFs
from nfs.lake.opening import tablefs_opener
from nfs.protocol.memfs import MemoryFs
from nfs.protocol.nfs3 import StableHow
from nfs.protocol.observe import CallOutcome
from nfs.protocol.rpc import CallContext
from nfs.protocol.sender import ReplySender
from nfs.protocol.server import NfsServer
from nfs.protocol.xdr import FileSlice, Packer, Pieces
from nfs.table.tablefs import DATA_CSV_ID, TableFs
from posixlake import DatabaseOps
from tests.nfs.conftest import FakeClock

SCHEMA = {"id": "Int64", "name": "String"}


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop does not run on Windows")
def test_the_server_runs_on_uvloop() -> None:
    import uvloop

    with NfsServer(MemoryFs(), 0) as server:
        assert isinstance(server._loop, uvloop.Loop)


# -- READ data sent from the segment files (os.sendfile)


def _table_fs(tmp_path: Path, rows: int) -> TableFs:
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    db.insert(_rows(0, rows))
    return TableFs(
        db,
        idle_timer=False,
        version_ttl=3600,  # no version check falls due during the test
        segment_cache=tmp_path / "cache",
        state_dir=tmp_path / "state",
    )


def _rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "name": [f"user-{i}" for i in range(start, start + n)],
        }
    )


def test_a_large_read_inside_a_segment_is_a_slice_of_its_file(tmp_path: Path) -> None:
    fs = _table_fs(tmp_path, 200_000)
    try:
        ctx = CallContext.local(peer="10.0.0.1:800")
        size = fs.getattr(DATA_CSV_ID, ctx).size
        whole = bytes(fs.read(DATA_CSV_ID, 0, size, ctx)[0])
        for offset, count in [(100, 1 << 20), (size - 70_000, 1 << 20)]:
            got = fs.read_nowait(DATA_CSV_ID, offset, count, ctx)
            assert got is not None
            data, eof, _ = got
            assert isinstance(data, FileSlice)
            assert bytes(data) == whole[offset : offset + count]
            assert os.pread(data.file.fileno(), len(data), data.offset) == bytes(data)
            assert eof == (offset + count >= size)
        small = fs.read_nowait(DATA_CSV_ID, 100, 4096, ctx)  # copying costs as little
        assert small is not None and isinstance(small[0], memoryview)
    finally:
        fs.close()


class _SendfileCalls:
    """Counts ``os.sendfile`` calls (and lets them run), or refuses them like a file
    system without it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, refuse: bool = False) -> None:
        self.calls = 0
        self.refuse = refuse
        self._real = os.sendfile
        monkeypatch.setattr(os, "sendfile", self)

    def __call__(self, out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        self.calls += 1
        if self.refuse:
            raise OSError(errno.EINVAL, "sendfile refused")
        return self._real(out_fd, in_fd, offset, count)


@pytest.mark.skipif(shutil.which("nfs-cat") is None, reason="needs libnfs-utils (nfs-cat)")
@pytest.mark.parametrize("refuse", [False, True])
def test_a_warm_nfs_cat_is_sent_from_the_segment_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refuse: bool
) -> None:
    fs = _table_fs(tmp_path, 300_000)
    with NfsServer(fs, 0) as server:
        url = server.nfs_url("/data/data.csv")
        first = subprocess.run(["nfs-cat", url], capture_output=True, check=True).stdout
        calls = _SendfileCalls(monkeypatch, refuse=refuse)
        again = subprocess.run(["nfs-cat", url], capture_output=True, check=True).stdout
    assert again == first and first.endswith(b"\n299999,user-299999\n")
    assert len(first) > 4 << 20
    if refuse:  # refused once, then the views go out with sendmsg
        assert calls.calls == 1
    else:
        assert calls.calls >= len(first) >> 20  # one (or more) per 1 MiB READ


def test_the_sender_sends_a_file_slice_through_a_full_socket(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB
    path = tmp_path / "f"
    path.write_bytes(b"head" + payload)
    with open(path, "rb") as f:
        view = memoryview(f.read())[4:]
        slice_ = FileSlice(view, f, 4)
        a, b = socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
        a.setblocking(False)
        blocked = threading.Event()
        sender = ReplySender(a, on_blocked=blocked.set, on_room=lambda: None, wait=0.0)
        with a, b:
            done = sender.send([b"\0\0\0\4", memoryview(b"mark"), slice_, b"tail"])
            got = bytearray()
            want = 8 + len(payload) + 4
            while len(got) < want:
                got += b.recv(1 << 16)
                if not done:
                    done = sender.resume()  # the loop's part once the socket was full
        assert blocked.is_set()  # it was: the rest went out from the slice's offset on
        assert done and sender.idle and sender.error is None
        assert bytes(got) == b"\0\0\0\4mark" + payload + b"tail"


# -- a lake share's cheap calls on the event loop (LakeFs routes them to the table face)


def _lake(tmp_path: Path, clock: FakeClock) -> LakeFs:
    root = tmp_path / "lake"
    db = DatabaseOps.create(root / "sales", SCHEMA, engine="local")
    db.insert(_rows(0, 30_000))
    state = tmp_path / "state"
    opener = tablefs_opener(
        str(root),
        state_dir=state,
        engine={"engine": "local"},
        tablefs={"idle_timer": False, "clock": clock, "segment_cache": tmp_path / "cache"},
    )
    return LakeFs(str(root), opener, state_dir=state, clock=clock, idle_timer=False)


def test_a_lake_answers_an_open_tables_cheap_calls_without_waiting(
    tmp_path: Path, clock: FakeClock
) -> None:
    lake = _lake(tmp_path, clock)
    try:
        ctx = CallContext.local(peer="10.0.0.1:800")
        root = lake.root_dir()
        table = lake.lookup(root, "sales", ctx)
        # nothing is open yet, and the lake's own directories are not a table's
        assert lake.lookup_nowait(table, "data", ctx) is None
        assert lake.getattr_nowait(root, ctx) is None
        assert lake.lookup_nowait(root, "sales", ctx) is None
        data = lake.lookup(table, "data", ctx)
        csv = lake.lookup(data, "data.csv", ctx)
        size = lake.getattr(csv).size
        whole, _ = lake.read(csv, 0, size, ctx)
        for fid in (table, data, csv):
            lake.generation(fid)  # the kept generations settle on the full path
        assert lake.lookup_nowait(table, "data", ctx) == data
        assert lake.lookup_nowait(data, "data.csv", ctx) == csv
        assert lake.lookup_nowait(table, "..", ctx) is None  # the lake's listing: full path
        for fid in (table, data, csv):
            assert lake.generation_nowait(fid) == lake.generation(fid)
            answered = lake.getattr_nowait(fid, ctx)  # None where the table face defers
            assert answered is None or answered == lake.getattr(fid)
            assert lake.access_nowait(fid, 0x3F, ctx) == lake.access(fid, 0x3F, ctx)
        for fid in (data, csv):
            assert lake.getattr_nowait(fid, ctx) == lake.getattr(fid)
        got = lake.read_nowait(csv, 0, size, ctx)
        assert got is not None and bytes(got[0]) == bytes(whole) and got[1]
        assert got[2] == lake.getattr(csv)
        # a COMMIT with nothing staged (after a FILE_SYNC append); one with a staging
        # goes to the full path, and the lake's own directories are never a table's
        assert lake.commit_nowait(csv, 0, 0, ctx)
        assert not lake.commit_nowait(root, 0, 0, ctx)
        lake.write(csv, size, b"30000,user-30000\n", StableHow.UNSTABLE, ctx)
        assert not lake.commit_nowait(csv, 0, 0, ctx)
        clock.advance(3600)  # the listing is due: the full path lists the lake again
        assert lake.getattr_nowait(csv, ctx) is None
        assert lake.generation_nowait(csv) is None
        assert not lake.commit_nowait(csv, 0, 0, ctx)
    finally:
        lake.close()


@pytest.mark.skipif(shutil.which("nfs-cat") is None, reason="needs libnfs-utils (nfs-cat)")
def test_a_warm_nfs_cat_of_a_lake_table_is_answered_on_the_event_loop(
    tmp_path: Path, clock: FakeClock
) -> None:
    with NfsServer(_lake(tmp_path, clock), 0) as server:
        url = server.nfs_url("/sales/data/data.csv")
        first = subprocess.run(["nfs-cat", url], capture_output=True, check=True).stdout
        threads = _Threads()
        server.dispatcher.observer = threads
        again = subprocess.run(["nfs-cat", url], capture_output=True, check=True).stdout
    assert again == first and first.endswith(b"\n29999,user-29999\n")
    on_loop = {"NFSPROC3_GETATTR", "NFSPROC3_LOOKUP", "NFSPROC3_ACCESS", "NFSPROC3_READ"}
    ran = {(name, thread) for name, thread in threads.calls if name in on_loop}
    assert {name for name, _ in ran} >= {"NFSPROC3_GETATTR", "NFSPROC3_READ"}
    assert {thread for _, thread in ran} == {"nfs-server"}, threads.calls


class _Threads:
    """A call observer: the thread that ran each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def clock(self) -> float:
        return 0.0

    def call_done(self, procedure: str, seconds: float, outcome: CallOutcome) -> None:
        self.calls.append((procedure, threading.current_thread().name))


def test_a_read_across_segments_sends_its_large_pieces_from_the_files(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    db.insert(_rows(0, 100_000))
    db.insert(_rows(100_000, 100_000))
    fs = TableFs(
        db, idle_timer=False, segment_cache=tmp_path / "cache", state_dir=tmp_path / "state"
    )
    try:
        ctx = CallContext.local(peer="10.0.0.1:800")
        size = fs.getattr(DATA_CSV_ID, ctx).size
        whole = bytes(fs.read(DATA_CSV_ID, 0, size, ctx)[0])
        second = whole.index(b"\n100000,") + 1  # the second data file's segment starts here
        for offset, kinds in [
            (0, [memoryview, FileSlice]),  # the header line, then the first segment
            (second - (1 << 19), [FileSlice, FileSlice]),  # half a MiB of each segment
            (second - 100, [memoryview, FileSlice]),  # 100 bytes are copied, not sent
        ]:
            got = fs.read_nowait(DATA_CSV_ID, offset, 1 << 20, ctx)
            assert got is not None and isinstance(got[0], Pieces)
            assert [type(part) for part in got[0].parts] == kinds
            assert bytes(got[0]) == whole[offset : offset + (1 << 20)]
            p = Packer()
            p.pack_opaque(got[0])
            assert sum(isinstance(c, FileSlice) for c in p.get_parts()) == kinds.count(FileSlice)
            plain = Packer()
            plain.pack_opaque(whole[offset : offset + (1 << 20)])
            assert p.get_buffer() == plain.get_buffer()
    finally:
        fs.close()
