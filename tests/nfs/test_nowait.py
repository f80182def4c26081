"""Cheap calls answered on the event loop (`nfs.protocol.vfs.NowaitVfs`, TableFs's ``*_nowait``).

A synchronous client (``nfs-cat``) sends MOUNT NULL, MNT, NULL, FSINFO, GETATTR, LOOKUP,
ACCESS, GETATTR and READs one at a time; each is answered on the server's event loop when
that needs no waiting, with the bytes the full path (a worker thread) would send, and the
full path runs whenever the answer would wait or could differ: the table lock held
elsewhere, a writer's staging, the version due for a check, a commit through the table's
handle, a handle that is stale, a file other than the table's fixed entries. A READ across
the rendering's parts goes out as `Pieces` (views of each part), not a joined copy.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfs.protocol.mount import MOUNT_PROGRAM, MOUNT_V3, DirPath, MountProc3
from nfs.protocol.nfs3 import (
    NFS_PROGRAM,
    NFS_V3,
    Access3Args,
    Commit3Args,
    Commit3Res,
    DirOpArgs3,
    Fsinfo3Args,
    Getattr3Args,
    Getattr3Res,
    Lookup3Args,
    NfsFh3,
    NfsProc3,
    Nfsstat3,
    Pathconf3Args,
    Sattr3,
    StableHow,
)
from nfs.protocol.observe import CallOutcome
from nfs.protocol.rpc import (
    CallContext,
    CallHeader,
    ConnectionContext,
    Dispatcher,
    Packable,
    Void,
    Xid,
    decode_reply,
    encode_call,
)
from nfs.protocol.server import NfsServer, build_dispatcher
from nfs.protocol.vfs import ACCESS3_READ, FileId
from nfs.protocol.xdr import FileSlice, Packer, Pieces
from nfs.table.tablefs import (
    CHANGES_ID,
    DATA_CSV_ID,
    DATA_DIR_ID,
    ROOT_ID,
    SCHEMA_ID,
    VERSIONS_ID,
    TableFs,
)
from posixlake import DatabaseOps
from tests.nfs.conftest import FakeClock
from tests.nfs.rpcclient import RpcClient

SCHEMA = {"id": "Int64", "name": "String"}
CONN = ConnectionContext("127.0.0.1:700")


def _rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "name": [f"user-{i}" for i in range(start, start + n)],
        }
    )


@pytest.fixture
def table_fs(tmp_path: Path, clock: FakeClock) -> Iterator[TableFs]:
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    db.insert(_rows(0, 500))
    fs = TableFs(
        db,
        clock=clock,
        idle_timer=False,
        segment_cache=tmp_path / "cache",
        state_dir=tmp_path / "state",
    )
    try:
        yield fs
    finally:
        fs.close()


def _record(client: RpcClient, prog: int, vers: int, proc: int, args: Packable, xid: int) -> bytes:
    header = CallHeader(Xid(xid), prog, vers, proc, client.cred)
    return bytes(encode_call(header, args).get_buffer())


def _fast(dispatcher: Dispatcher, record: bytes) -> bytes | None:
    parts = dispatcher.handle_parts_nowait(record, CONN)
    return None if parts is None else b"".join(parts)


def test_cheap_calls_answer_on_the_loop_as_the_full_path(table_fs: TableFs) -> None:
    dispatcher = build_dispatcher(table_fs)
    client = RpcClient.over(dispatcher)
    root = client.mount("/")
    data_dir = client.walk("/data")
    data_csv = client.walk("/data/data.csv")
    versions = client.walk("/versions")
    nfs, mnt = (NFS_PROGRAM, NFS_V3), (MOUNT_PROGRAM, MOUNT_V3)
    calls: list[tuple[tuple[int, int], int, Packable]] = [
        (mnt, MountProc3.MOUNTPROC3_NULL, Void()),
        (mnt, MountProc3.MOUNTPROC3_MNT, DirPath("/")),
        (mnt, MountProc3.MOUNTPROC3_MNT, DirPath("/data")),  # libnfs mounts a file's directory
        (nfs, NfsProc3.NFSPROC3_NULL, Void()),
        (nfs, NfsProc3.NFSPROC3_FSINFO, Fsinfo3Args(data_dir)),
        (nfs, NfsProc3.NFSPROC3_PATHCONF, Pathconf3Args(root)),
        (nfs, NfsProc3.NFSPROC3_LOOKUP, Lookup3Args(DirOpArgs3(data_dir, "data.csv"))),
        (nfs, NfsProc3.NFSPROC3_LOOKUP, Lookup3Args(DirOpArgs3(root, "data"))),
        (nfs, NfsProc3.NFSPROC3_LOOKUP, Lookup3Args(DirOpArgs3(root, "versions"))),
        (nfs, NfsProc3.NFSPROC3_ACCESS, Access3Args(data_csv, 0x3F)),
        (nfs, NfsProc3.NFSPROC3_ACCESS, Access3Args(root, 0x3F)),
    ]
    for fh in (root, data_dir, versions, data_csv):
        calls.append((nfs, NfsProc3.NFSPROC3_GETATTR, Getattr3Args(fh)))
    for xid, ((prog, vers), proc, args) in enumerate(calls, 100):
        record = _record(client, prog, vers, proc, args, xid)
        full = dispatcher.handle(record, CONN)
        assert full is not None
        assert _fast(dispatcher, record) == full, (prog, proc, args)

    # a handle of another generation (an earlier table): the full path answers STALE
    stale = NfsFh3(data_csv.data[:-8] + bytes(8))
    record = _record(client, *nfs, NfsProc3.NFSPROC3_GETATTR, Getattr3Args(stale), 9)
    assert _fast(dispatcher, record) is None
    full = dispatcher.handle(record, CONN)
    assert full is not None
    _, body = decode_reply(full)
    assert Getattr3Res.unpack(body).status == Nfsstat3.NFS3ERR_STALE
    assert _fast(dispatcher, record[:-3]) is None  # truncated arguments


def test_nowait_defers_when_the_answer_would_wait(table_fs: TableFs, clock: FakeClock) -> None:
    ctx = CallContext.local(peer="10.0.0.1:800")
    writer = CallContext.local(1000, 1000, peer="10.0.0.2:800")
    assert table_fs.getattr_nowait(DATA_CSV_ID, ctx) is None  # nothing rendered yet
    table_fs.getattr(ROOT_ID, ctx)
    size = table_fs.getattr(DATA_CSV_ID, ctx).size
    for fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID, DATA_CSV_ID):
        assert table_fs.getattr_nowait(fid, ctx) == table_fs.getattr(fid, ctx)
    assert table_fs.access_nowait(DATA_CSV_ID, 0x3F, ctx) == table_fs.access(DATA_CSV_ID, 0x3F, ctx)
    assert table_fs.lookup_nowait(ROOT_ID, "data", ctx) == DATA_DIR_ID
    assert table_fs.lookup_nowait(DATA_DIR_ID, "data.csv", ctx) == DATA_CSV_ID

    # the table lock held by another thread: no waiting
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with table_fs._lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert held.wait(30)
        assert table_fs.getattr_nowait(DATA_CSV_ID, ctx) is None
        assert table_fs.access_nowait(DATA_CSV_ID, ACCESS3_READ, ctx) is None
        assert table_fs.lookup_nowait(ROOT_ID, "data", ctx) is None  # a scratch entry
    finally:
        release.set()
        t.join(30)

    # the version is due for a check (version_ttl): the full path looks at the log first
    clock.advance(1.0)
    assert table_fs.getattr_nowait(DATA_CSV_ID, ctx) is None
    assert table_fs.getattr_nowait(DATA_DIR_ID, ctx) is None
    table_fs.getattr(DATA_CSV_ID, ctx)
    assert table_fs.getattr_nowait(DATA_CSV_ID, ctx) is not None

    # a commit through the table's handle: shown at once, by the full path
    table_fs._db.insert(_rows(500, 1))
    assert table_fs.getattr_nowait(DATA_CSV_ID, ctx) is None
    grown = table_fs.getattr(DATA_CSV_ID, ctx)
    assert grown.size == size + len(b"500,user-500\n")
    assert table_fs.getattr_nowait(DATA_CSV_ID, ctx) == grown
    # and / at the new version, without a full GETATTR of it first
    assert table_fs.getattr_nowait(ROOT_ID, ctx) == table_fs.getattr(ROOT_ID, ctx)

    # a writer's staging: it sees its own size, so nobody is answered without the full path
    assert table_fs.commit_nowait(DATA_CSV_ID, 0, 0, writer)  # nothing to make durable
    table_fs.write(DATA_CSV_ID, grown.size, b"9,x\n", StableHow.UNSTABLE, writer)
    assert not table_fs.commit_nowait(DATA_CSV_ID, 0, 0, writer)
    assert not table_fs.commit_nowait(SCHEMA_ID, 0, 0, writer)  # only data.csv
    assert table_fs.getattr_nowait(DATA_CSV_ID, writer) is None
    assert table_fs.getattr_nowait(DATA_CSV_ID, ctx) is None
    assert table_fs.getattr_nowait(DATA_DIR_ID, ctx) is None
    assert table_fs.getattr(DATA_CSV_ID, writer).size == grown.size + 4
    assert table_fs.getattr(DATA_CSV_ID, ctx).size == grown.size


def test_directory_attributes_are_kept_until_they_change(
    table_fs: TableFs, clock: FakeClock
) -> None:
    """/ and /data answer with the attributes built last time while nothing they show
    changed; a file made in /data (a scratch file) and a commit show in the next call."""
    ctx = CallContext.local(peer="10.0.0.1:800")
    table_fs.getattr(ROOT_ID, ctx)
    table_fs.getattr(DATA_CSV_ID, ctx)
    for fid in (ROOT_ID, DATA_DIR_ID):
        first = table_fs.getattr(fid, ctx)
        assert table_fs.getattr(fid, ctx) is first
        assert table_fs.getattr_nowait(fid, ctx) is first
    before = table_fs.getattr(DATA_DIR_ID, ctx)
    table_fs.create(DATA_DIR_ID, ".data.csv.swp", Sattr3(), ctx, guarded=True)
    made = table_fs.getattr(DATA_DIR_ID, ctx)
    assert made.mtime.to_ns() > before.mtime.to_ns()
    assert table_fs.getattr(DATA_DIR_ID, ctx) is made
    table_fs.remove(DATA_DIR_ID, ".data.csv.swp", ctx)
    removed = table_fs.getattr(DATA_DIR_ID, ctx)
    assert removed.mtime.to_ns() > made.mtime.to_ns()
    table_fs._db.insert(_rows(500, 1))  # a commit: the table's newer commit time
    clock.advance(1)  # the version is checked again
    committed = table_fs.getattr(DATA_DIR_ID, ctx)
    assert committed.mtime.to_ns() > removed.mtime.to_ns()
    assert committed.mtime == table_fs.getattr(DATA_CSV_ID, ctx).mtime


def test_a_commit_with_nothing_to_do_answers_on_the_loop_and_is_cached(
    table_fs: TableFs,
) -> None:
    """libnfs and the Linux client COMMIT at fsync() and close() after an append written
    FILE_SYNC: nothing of the caller's is staged, and the loop answers with the bytes the
    full path sends. The reply is in the duplicate-request cache (a retransmission gets
    it); a COMMIT with a staging to make durable goes to the full path."""
    dispatcher = build_dispatcher(table_fs)
    client = RpcClient.over(dispatcher)
    client.mount("/")
    data_csv = client.walk("/data/data.csv")
    size = client.attrs(data_csv).size
    client.write(data_csv, size, b"500,user-500\n", StableHow.FILE_SYNC)
    client.getattr(data_csv)  # the new version rendered: attributes at hand
    nfs = (NFS_PROGRAM, NFS_V3)
    commit = Commit3Args(data_csv, 0, 0)
    first = _record(client, *nfs, NfsProc3.NFSPROC3_COMMIT, commit, 700)
    fast = _fast(dispatcher, first)
    assert fast is not None
    _, body = decode_reply(fast)
    reply = Commit3Res.unpack(body)
    assert reply.status == Nfsstat3.NFS3_OK and reply.resok is not None
    assert reply.resok.verf == table_fs.write_verifier()
    # the same bytes as the full path's reply to the same call (another xid)
    second = _record(client, *nfs, NfsProc3.NFSPROC3_COMMIT, commit, 701)
    full = dispatcher.handle(second, CONN)
    assert full is not None and full[4:] == fast[4:]
    # a retransmission: the cached reply, not run again (not on the loop either)
    assert _fast(dispatcher, first) is None
    assert dispatcher.handle(first, CONN) == fast
    # a staging of the caller's: the full path makes it durable
    client.write(data_csv, size, b"501,user-501\n", StableHow.UNSTABLE)
    third = _record(client, *nfs, NfsProc3.NFSPROC3_COMMIT, commit, 702)
    assert _fast(dispatcher, third) is None
    staged = dispatcher.handle(third, CONN)
    assert staged is not None
    _, body = decode_reply(staged)
    assert Commit3Res.unpack(body).status == Nfsstat3.NFS3_OK


def test_nowait_leaves_other_files_to_the_full_path(table_fs: TableFs) -> None:
    ctx = CallContext.local(peer="10.0.0.1:800")
    table_fs.getattr(DATA_CSV_ID, ctx)
    table_fs.paths.write_file("/data/notes.txt", b"a scratch file\n")
    scratch = table_fs.paths.resolve("/data/notes.txt")
    version_dir = table_fs.lookup(VERSIONS_ID, "1", ctx)
    for fid in (SCHEMA_ID, CHANGES_ID, scratch, version_dir, FileId(version_dir + 1)):
        assert table_fs.getattr_nowait(fid, ctx) is None
        if fid != SCHEMA_ID:  # its access is fixed; ACCESS still waits for its attributes
            assert table_fs.access_nowait(fid, ACCESS3_READ, ctx) is None
    for fid in (CHANGES_ID, scratch, version_dir):
        assert table_fs.generation_nowait(fid) is None
    assert table_fs.lookup_nowait(DATA_DIR_ID, "notes.txt", ctx) is None
    assert table_fs.lookup_nowait(DATA_DIR_ID, "missing.csv", ctx) is None
    assert table_fs.lookup_nowait(ROOT_ID, "missing", ctx) is None
    assert table_fs.lookup_nowait(VERSIONS_ID, "1", ctx) is None


class _Threads:
    """A call observer: the thread that ran each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def clock(self) -> float:
        return 0.0

    def call_done(self, procedure: str, seconds: float, outcome: CallOutcome) -> None:
        self.calls.append((procedure, threading.current_thread().name))


@pytest.mark.skipif(shutil.which("nfs-cat") is None, reason="needs libnfs-utils (nfs-cat)")
def test_a_warm_nfs_cat_is_answered_on_the_event_loop(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    db.insert(_rows(0, 50_000))
    fs = TableFs(
        db,
        idle_timer=False,
        version_ttl=3600,  # no version check falls due during the test
        segment_cache=tmp_path / "cache",
        state_dir=tmp_path / "state",
    )
    with NfsServer(fs, 0) as server:
        url = server.nfs_url("/data/data.csv")
        first = subprocess.run(["nfs-cat", url], capture_output=True, check=True).stdout
        threads = _Threads()
        server.dispatcher.observer = threads
        again = subprocess.run(["nfs-cat", url], capture_output=True, check=True).stdout
    assert again == first and first.endswith(b"\n49999,user-49999\n")
    names = [name for name, _ in threads.calls]
    for procedure in ("MOUNTPROC3_MNT", "NFSPROC3_LOOKUP", "NFSPROC3_GETATTR", "NFSPROC3_READ"):
        assert procedure in names
    assert {thread for _, thread in threads.calls} == {"nfs-server"}, threads.calls


@given(st.lists(st.binary(max_size=40_000), max_size=5), st.integers(0, 3))
def test_pieces_pack_as_their_joined_bytes(parts: list[bytes], before: int) -> None:
    joined, pieces = Packer(), Packer()
    for p in (joined, pieces):
        p.pack_raw(b"x" * before)  # an unaligned start, then the opaque and what follows
    joined.pack_opaque(b"".join(parts))
    pieces.pack_opaque(Pieces([memoryview(part) for part in parts]))
    for p in (joined, pieces):
        p.pack_uint(7)
    assert pieces.get_buffer() == joined.get_buffer()
    assert len(Pieces(parts)) == sum(map(len, parts)) and bytes(Pieces(parts)) == b"".join(parts)


def test_a_read_across_segments_on_the_loop_is_not_joined(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    db.insert(_rows(0, 20_000))
    db.insert(_rows(20_000, 20_000))
    fs = TableFs(
        db, idle_timer=False, segment_cache=tmp_path / "cache", state_dir=tmp_path / "state"
    )
    try:
        ctx = CallContext.local(peer="10.0.0.1:800")
        size = fs.getattr(DATA_CSV_ID, ctx).size
        whole = bytes(fs.read(DATA_CSV_ID, 0, size, ctx)[0])
        second = whole.index(b"\n20000,") + 1  # the second data file's segment starts here
        for offset, count in [(0, 1 << 20), (second - 10, 20), (5, size)]:
            got = fs.read_nowait(DATA_CSV_ID, offset, count, ctx)
            assert got is not None
            data, eof, _ = got
            assert isinstance(data, Pieces)  # the header, or segments, not copied together
            assert all(isinstance(part, memoryview | FileSlice) for part in data.parts)
            assert bytes(data) == whole[offset : offset + count]
            assert eof == (offset + count >= size)
        inside = fs.read_nowait(DATA_CSV_ID, second + 1, 100, ctx)
        assert inside is not None and isinstance(inside[0], memoryview)
    finally:
        fs.close()
