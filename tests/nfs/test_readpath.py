"""The READ path end to end: replies sent by the worker threads (`nfs.protocol.sender`), over TCP.

A table of several mapped segments is served by a real `NfsServer`; READs at every kind of
offset (inside a segment, across segment boundaries, the last partial segment, count 0, at
and past the end) come back byte-equal to the Vfs's own bytes, with true attributes and
EOF flags; pipelined READs come back whole and matched by xid; a client that stops reading
its replies holds no worker (another client is served meanwhile) and then gets every byte.
`ReplySender` is also checked alone over a socket pair.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import nfs.table.segstore
from nfs.protocol.memfs import MemoryFs
from nfs.protocol.mount import MOUNT_PROGRAM, MOUNT_V3, DirPath, MountProc3
from nfs.protocol.nfs3 import (
    NFS_PROGRAM,
    NFS_V3,
    DirOpArgs3,
    NfsFh3,
    NfsProc3,
    Read3Args,
    Read3Res,
    StableHow,
)
from nfs.protocol.nfs3.args import (
    Access3Args,
    Commit3Args,
    Fsinfo3Args,
    Getattr3Args,
    Lookup3Args,
    Pathconf3Args,
)
from nfs.protocol.nfs3.program import NFS3_PROCEDURES
from nfs.protocol.rpc import (
    VOID,
    CallContext,
    CallHeader,
    ConnectionContext,
    Packable,
    Xid,
    encode_call,
)
from nfs.protocol.sender import (
    ReplySender,
    unpaced_on_loopback,
)
from nfs.protocol.server import NfsServer, build_dispatcher
from nfs.protocol.xdr import FileSlice
from nfs.table.segments import SegmentedRendering
from nfs.table.tablefs import DATA_CSV_ID, SCHEMA_ID, TableFs
from posixlake import DatabaseOps
from tests.nfs.conftest import FakeClock, holding
from tests.nfs.rpcclient import RpcClient

SCHEMA = {"id": "Int64", "name": "String", "score": "Float64", "city": "String"}
FILES = 3
ROWS = 12_000  # ~300 KB of CSV per data file: each segment is memory-mapped


def _rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "name": [f"user-{i}" for i in range(start, start + n)],
            "score": [i / 7 for i in range(start, start + n)],
            "city": ["Zürich" if i % 3 else "New York, NY" for i in range(start, start + n)],
        }
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NfsServer, TableFs, bytes]]:
    """A table of `FILES` mapped segments behind a real server, and its full bytes."""
    tmp = tmp_path_factory.mktemp("readpath")
    db = DatabaseOps.create(tmp / "t", SCHEMA, engine="local")
    for f in range(FILES):
        db.insert(_rows(f * ROWS, ROWS))
    fs = TableFs(db, idle_timer=False, segment_cache=tmp / "cache", state_dir=tmp / "state")
    size = fs.getattr(DATA_CSV_ID).size
    whole, eof = fs.read(DATA_CSV_ID, 0, size + 10, CallContext.local())
    assert eof and len(whole) == size
    with NfsServer(fs, 0) as server:
        yield server, fs, bytes(whole)


def _boundaries(fs: TableFs) -> list[int]:
    rendering = fs._rendering(fs._version())
    assert isinstance(rendering, SegmentedRendering)
    assert len(rendering.segments) == FILES
    assert all(size > nfs.table.segstore.MMAP_MIN for _, _, size in rendering.segments)
    return [start for _, start, _ in rendering.segments]


def test_reads_at_every_kind_of_offset_equal_the_full_bytes(
    served: tuple[NfsServer, TableFs, bytes],
) -> None:
    server, fs, whole = served
    size = len(whole)
    starts = _boundaries(fs)
    ranges = [(0, 1), (0, 4096), (5, 1 << 20), (size - 10, 10), (size - 10, 100), (size - 1, 1)]
    for b in starts[1:]:
        ranges += [(b - 7, 14), (b - 100_000, 300_000), (b, 1), (b - 1, 1)]
    ranges += [(starts[1] - 5, starts[2] - starts[1] + 10)]  # spans a whole segment
    ranges += [(starts[-1] + 3, size)]  # the last, partial part
    with RpcClient("127.0.0.1", server.port) as c:
        fh = c.walk("/data/data.csv")
        for offset, count in ranges:
            res = c.read(fh, offset, count)
            assert res.resok is not None, (offset, count)
            want = whole[offset : offset + count]
            assert res.resok.data == want, (offset, count)
            assert res.resok.count == len(want)
            assert res.resok.eof == (offset + count >= size)
            attrs = res.resok.file_attributes.attributes
            assert attrs is not None and attrs.size == size
        for offset in (size, size + 1, size + (1 << 30)):
            res = c.read(fh, offset, 4096)
            assert res.resok is not None and res.resok.data == b"" and res.resok.eof
        res = c.read(fh, 100, 0)
        assert res.resok is not None and res.resok.data == b"" and res.resok.count == 0
        assert not res.resok.eof
        assert c.read_file(fh, chunk=1 << 20) == whole


def test_pipelined_reads_come_back_whole_and_matched(
    served: tuple[NfsServer, TableFs, bytes],
) -> None:
    server, _, whole = served
    chunk = 100_003  # not aligned with pages or segments
    offsets = list(range(0, len(whole), chunk))
    with RpcClient("127.0.0.1", server.port) as c:
        fh = c.walk("/data/data.csv")
        calls = [
            (NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_READ, Read3Args(fh, off, chunk))
            for off in offsets
        ]
        replies = c.call_many(calls)
    got = b"".join(bytes(r.result(Read3Res.unpack).resok.data) for r in replies)  # type: ignore[union-attr]
    assert got == whole


def test_pages_let_go_while_reading_read_back_the_same(
    served: tuple[NfsServer, TableFs, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Releasing the mapped pages of the segments read longest ago (here past 64 KiB
    resident) changes no byte, also for views handed out before a release."""
    _, fs, whole = served
    monkeypatch.setattr(nfs.table.segstore, "RESIDENT_MAX", 64 << 10)
    rendering = fs._rendering(fs._version())
    views = []
    for offset in range(0, len(whole), 50_000):
        data, _ = rendering.read(offset, 50_000)
        views.append(data)
    assert b"".join(bytes(v) for v in views) == whole


def _read_calls(fh: NfsFh3, n: int, size: int) -> list[tuple[int, int, int, Read3Args]]:
    return [
        (NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_READ, Read3Args(fh, (i * size) % (8 << 20), size))
        for i in range(n)
    ]


def test_a_client_that_stops_reading_holds_no_worker() -> None:
    fs = MemoryFs()
    data = bytes(range(256)) * (8 << 12)  # 8 MiB
    fs.put("/big", data)
    fs.put("/small", b"hello\n")
    with NfsServer(fs, 0, workers=2) as server:
        slow = RpcClient("127.0.0.1", server.port, timeout=60)
        try:
            fh = slow.walk("/big")
            # 96 MiB of replies: more than the socket buffers on both ends hold
            xids = [slow.send_call(*call) for call in _read_calls(fh, 96, 1 << 20)]
            # the replies back up in the socket; the server keeps serving others
            for _ in range(3):
                with RpcClient("127.0.0.1", server.port, timeout=30) as other:
                    assert other.read_file("/small") == b"hello\n"
            for i, xid in enumerate(xids):
                res = slow.wait_reply(xid).result(Read3Res.unpack)
                offset = (i << 20) % (8 << 20)
                assert res.resok is not None and res.resok.data == data[offset : offset + (1 << 20)]
        finally:
            slow.close()


# -- ReplySender alone ----------------------------------------------------------------------


class _Pair:
    """A socket pair with small buffers; the far end is read on demand."""

    def __init__(self) -> None:
        self.near, self.far = socket.socketpair()
        self.near.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        self.far.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.near.setblocking(False)
        self.blocked = threading.Event()
        self.room = threading.Event()
        self.sender = ReplySender(
            self.near, on_blocked=self.blocked.set, on_room=self.room.set, wait=0.0
        )

    def read_all(self, n: int) -> bytes:
        out = bytearray()
        self.far.settimeout(30)
        while len(out) < n:
            got = self.far.recv(n - len(out))
            assert got
            out += got
        return bytes(out)

    def close(self) -> None:
        self.near.close()
        self.far.close()


def test_sender_hands_a_full_socket_over_and_keeps_the_order() -> None:
    pair = _Pair()
    try:
        replies: list[list[bytes | memoryview]] = [
            [b"head%d:" % i, memoryview(bytes([i]) * 50_000), b""] for i in range(8)
        ]
        assert pair.sender.send(replies[0]) is False  # the socket filled up
        assert pair.blocked.is_set() and not pair.sender.idle
        for reply in replies[1:]:
            assert pair.sender.send(reply) is False  # queued behind (the "loop" sends)
        assert pair.sender.want_room() is False
        expected = b"".join(b"".join(bytes(p) for p in r) for r in replies)
        got = bytearray()
        while not pair.sender.resume():  # the loop's part: writable -> resume
            got += pair.far.recv(1 << 16)
        got += pair.read_all(len(expected) - len(got))
        assert bytes(got) == expected
        assert pair.room.is_set() and pair.sender.idle and pair.sender.queued_bytes == 0
        assert pair.sender.send([b"after"]) is True  # an empty socket: sent at once
        assert pair.read_all(5) == b"after"
    finally:
        pair.close()


class _MidSend(socket.socket):
    """A socket whose first ``sendmsg`` lets ``during`` run first (another thread's reply
    queued while this one is being sent)."""

    during: Callable[[], None] | None = None

    def sendmsg(self, *args: Any, **kwargs: Any) -> int:
        during, self.during = self.during, None
        if during is not None:
            during()
        return super().sendmsg(*args, **kwargs)


@pytest.mark.parametrize("first_size", [10, 50_000])
def test_a_reply_queued_during_a_direct_send_follows_it(first_size: int) -> None:
    """A reply sent with nothing queued goes straight to ``sendmsg``; one that another
    thread sends meanwhile is queued and follows it whole, whether the first went out
    whole (10 bytes) or filled the socket (50,000)."""
    near, far = socket.socketpair()
    sock = _MidSend(near.family, near.type, fileno=near.detach())
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    far.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    sender = ReplySender(sock, on_blocked=lambda: None, on_room=lambda: None, wait=0.0)
    others: list[bool] = []

    def another_thread() -> None:
        t = threading.Thread(target=lambda: others.append(sender.send([b"second", b"!"])))
        t.start()
        t.join()

    sock.during = another_thread
    try:
        first: list[bytes | memoryview] = [b"first:", memoryview(b"x" * first_size)]
        done = sender.send(first)
        assert others == [False]  # queued: the first was being sent
        expected = b"first:" + b"x" * first_size + b"second!"
        got = bytearray()
        far.settimeout(30)
        while not done:
            got += far.recv(1 << 16)
            done = sender.resume()
        while len(got) < len(expected):
            got += far.recv(1 << 16)
        assert bytes(got) == expected
        assert sender.idle and sender.queued_bytes == 0
    finally:
        sock.close()
        far.close()


def test_sender_shutdown_drops_the_queue_and_ends_the_connection() -> None:
    pair = _Pair()
    try:
        assert pair.sender.send([memoryview(b"x" * 200_000)]) is False
        pair.sender.shutdown()
        assert pair.sender.queued_bytes == 0
        assert pair.sender.send([b"late"]) is True  # dropped
        pair.sender.resume()  # the sender releases its turn (the socket is shut)
        assert pair.sender.idle
        pair.far.settimeout(30)
        received = 0
        while chunk := pair.far.recv(1 << 16):
            received += len(chunk)
        assert received < 200_000 + 4
    finally:
        pair.close()


def test_sender_reports_a_reset_peer() -> None:
    pair = _Pair()
    try:
        pair.far.close()
        assert pair.sender.send([b"x" * 10]) is True
        assert pair.sender.send([b"y" * 10]) is True
        assert isinstance(pair.sender.error, OSError)
        assert pair.sender.idle
    finally:
        pair.near.close()


def _congestion(sock: socket.socket) -> bytes:
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    return raw.split(b"\0", 1)[0]


@pytest.mark.skipif(not hasattr(socket, "TCP_CONGESTION"), reason="Linux socket option")
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_a_loopback_connection_is_not_paced(host: str) -> None:
    """The server's side of a connection from this machine gets cubic (no pacing),
    whatever the machine's default; the client's side is left alone."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if family == socket.AF_INET6 and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    with socket.create_server((host, 0), family=family) as listener:
        client = socket.create_connection(listener.getsockname()[:2])
        served, _ = listener.accept()
        try:
            default = _congestion(client)
            assert unpaced_on_loopback(served) == b"cubic"
            assert _congestion(served) == b"cubic"
            assert _congestion(client) == default
        finally:
            client.close()
            served.close()


@pytest.mark.skipif(not hasattr(socket, "TCP_CONGESTION"), reason="Linux socket option")
def test_the_server_asks_for_no_pacing_on_its_loopback_connections() -> None:
    with (
        NfsServer(MemoryFs(root_mode=0o777), 0) as server,
        RpcClient("127.0.0.1", server.port) as c,
    ):
        c.null()
        socks = [conn.sock for conn in server._connections]
        assert [_congestion(sock) for sock in socks] == [b"cubic"]


@pytest.mark.skipif(not hasattr(socket, "TCP_CONGESTION"), reason="Linux socket option")
@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_every_connection_of_a_server_has_no_delay_and_no_pacing(host: str) -> None:
    """Set once on a loopback listener (its connections inherit it), or per connection
    from this machine on a wildcard one: TCP_NODELAY and cubic, whatever the default."""
    with NfsServer(MemoryFs(root_mode=0o777), 0, host=host) as server:
        clients = [RpcClient("127.0.0.1", server.port) for _ in range(3)]
        try:
            for c in clients:
                c.null()
            socks = [conn.sock for conn in server._connections]
            assert [_congestion(sock) for sock in socks] == [b"cubic"] * 3
            assert [sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for sock in socks] == [
                1
            ] * 3
        finally:
            for c in clients:
                c.close()


def test_the_sender_sends_memory_and_file_slices_in_order(tmp_path: Path) -> None:
    """Replies mixing buffers and `FileSlice` ranges (``sendfile``) go out whole and in
    order through a real socket, each slice from its offset in the file."""
    data = tmp_path / "data"
    data.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname()[:2])
        served, _ = listener.accept()
        got = bytearray()

        def drain() -> None:
            while chunk := client.recv(1 << 20):
                got.extend(chunk)

        reader = threading.Thread(target=drain)
        reader.start()
        try:
            served.setblocking(False)
            sender = ReplySender(served, on_blocked=lambda: None, on_room=lambda: None, wait=30.0)
            with data.open("rb") as f:
                view = memoryview(data.read_bytes())
                assert sender.send([b"head", FileSlice(view, f, 0)])  # 1 MiB by sendfile
                assert sender.send([view])
                half = 1 << 19
                assert sender.send([view[:half], FileSlice(view[half:], f, half)])
        finally:
            served.close()
            reader.join(30)
            client.close()
        whole = bytes(view)
        assert bytes(got) == b"head" + whole + whole + whole


def test_other_sockets_keep_their_congestion_control() -> None:
    a, b = socket.socketpair()  # not TCP
    try:
        assert unpaced_on_loopback(a) is None
    finally:
        a.close()
        b.close()


# -- READ answered on the event loop (TableFs.read_nowait, Dispatcher.handle_parts_nowait) ----


@pytest.fixture
def table_fs(tmp_path: Path, clock: FakeClock) -> Iterator[TableFs]:
    db = DatabaseOps.create(tmp_path / "t", SCHEMA, engine="local")
    db.insert(_rows(0, 1000))
    db.insert(_rows(1000, 1000))
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


def test_read_nowait_is_read_plus_getattr(table_fs: TableFs) -> None:
    ctx = CallContext.local(peer="10.0.0.1:800")
    assert table_fs.read_nowait(DATA_CSV_ID, 0, 100, ctx) is None  # nothing rendered yet
    size = table_fs.getattr(DATA_CSV_ID, ctx).size
    for offset, count in [(0, 100), (size - 50, 100), (size, 10), (size + 5, 10), (3, 0)]:
        got = table_fs.read_nowait(DATA_CSV_ID, offset, count, ctx)
        assert got is not None
        data, eof, attrs = got
        want, want_eof = table_fs.read(DATA_CSV_ID, offset, count, ctx)
        assert bytes(data) == bytes(want) and eof == want_eof
        assert attrs == table_fs.getattr(DATA_CSV_ID, ctx)
    assert table_fs.read_nowait(SCHEMA_ID, 0, 100, ctx) is None  # only data.csv


def test_read_nowait_defers_to_the_full_path(table_fs: TableFs, clock: FakeClock) -> None:
    ctx = CallContext.local(peer="10.0.0.1:800")
    writer = CallContext.local(1000, 1000, peer="10.0.0.2:800")
    table_fs.getattr(DATA_CSV_ID, ctx)
    assert table_fs.read_nowait(DATA_CSV_ID, 0, 10, ctx) is not None

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
        assert table_fs.read_nowait(DATA_CSV_ID, 0, 10, ctx) is None
    finally:
        release.set()
        t.join(30)

    # the version is due to be checked (version_ttl): the full path checks it first
    clock.advance(1.0)
    assert table_fs.read_nowait(DATA_CSV_ID, 0, 10, ctx) is None
    table_fs.read(DATA_CSV_ID, 0, 10, ctx)
    assert table_fs.read_nowait(DATA_CSV_ID, 0, 10, ctx) is not None

    # an API write through the same handle: the next read shows it, through the full path
    table_fs._db.insert(_rows(5000, 1))
    assert table_fs.read_nowait(DATA_CSV_ID, 0, 10, ctx) is None
    size = table_fs.getattr(DATA_CSV_ID, ctx).size
    data, _ = table_fs.read(DATA_CSV_ID, 0, size, ctx)
    assert bytes(data).endswith("\n5000,user-5000,714.2857142857143,Zürich\n".encode())
    got = table_fs.read_nowait(DATA_CSV_ID, 0, size, ctx)
    assert got is not None and bytes(got[0]) == bytes(data)

    # a writer's staging: its reads see its own bytes (docs/nfs-writes.md), others the table
    table_fs.write(DATA_CSV_ID, size, b"9999,staged,1,x\n", StableHow.UNSTABLE, writer)
    assert table_fs.read_nowait(DATA_CSV_ID, 0, size + 100, writer) is None
    assert table_fs.read_nowait(DATA_CSV_ID, 0, size + 100, ctx) is None
    mine, _ = table_fs.read(DATA_CSV_ID, 0, size + 100, writer)
    theirs, _ = table_fs.read(DATA_CSV_ID, 0, size + 100, ctx)
    assert bytes(mine) == bytes(data) + b"9999,staged,1,x\n"
    assert bytes(theirs) == bytes(data)


def test_handle_parts_nowait_answers_as_handle_parts(table_fs: TableFs) -> None:
    dispatcher = build_dispatcher(table_fs)
    client = RpcClient.over(dispatcher)
    client.mount("/")
    fh = client.walk("/data/data.csv")
    client.attrs(fh)  # renders the version
    record = bytes(
        encode_call(
            CallHeader(Xid(7), NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_READ, client.cred),
            Read3Args(fh, 10, 5000),
        ).get_buffer()
    )
    conn = ConnectionContext("127.0.0.1:700")
    fast = dispatcher.handle_parts_nowait(record, conn)
    assert fast is not None
    assert b"".join(fast) == dispatcher.handle(record, conn)
    fsstat = encode_call(
        CallHeader(Xid(8), NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_FSSTAT, client.cred), fh
    )
    assert dispatcher.handle_parts_nowait(bytes(fsstat.get_buffer()), conn) is None  # no nowait
    assert dispatcher.handle_parts_nowait(b"\x00\x00\x00\x09garbage", conn) is None
    assert dispatcher.handle_parts_nowait(record[:-3], conn) is None  # truncated arguments
    memory = build_dispatcher(MemoryFs())  # no read_nowait: always the full path
    assert memory.handle_parts_nowait(record, conn) is None


def test_no_call_answered_on_the_loop_waits_for_the_table_lock(table_fs: TableFs) -> None:
    """Each procedure the event loop may answer (its ``run_nowait``), called while a
    commit holds the table lock, returns (a reply, or None: the full path's) with the
    lock still held. One that waited for the lock would return only once the holder gave
    up (after 30 s), and the holder would be gone."""
    dispatcher = build_dispatcher(table_fs)
    client = RpcClient.over(dispatcher)
    client.mount("/")
    fh = client.walk("/data/data.csv")
    client.attrs(fh)
    assert client.root is not None
    nfs3: dict[NfsProc3, Packable] = {
        NfsProc3.NFSPROC3_NULL: VOID,  # a new connection's: a mount, settled under the lock
        NfsProc3.NFSPROC3_GETATTR: Getattr3Args(fh),
        NfsProc3.NFSPROC3_LOOKUP: Lookup3Args(DirOpArgs3(client.walk("/data"), "data.csv")),
        NfsProc3.NFSPROC3_ACCESS: Access3Args(fh, 0x3F),
        NfsProc3.NFSPROC3_READ: Read3Args(fh, 0, 100),
        NfsProc3.NFSPROC3_FSINFO: Fsinfo3Args(client.root),
        NfsProc3.NFSPROC3_PATHCONF: Pathconf3Args(fh),
        NfsProc3.NFSPROC3_COMMIT: Commit3Args(fh),
    }
    assert set(nfs3) == {num for num, p in NFS3_PROCEDURES.items() if p.run_nowait}
    calls: list[tuple[int, int, int, Packable]] = [
        (NFS_PROGRAM, NFS_V3, num, args) for num, args in nfs3.items()
    ]
    calls += [
        (MOUNT_PROGRAM, MOUNT_V3, MountProc3.MOUNTPROC3_NULL, VOID),
        (MOUNT_PROGRAM, MOUNT_V3, MountProc3.MOUNTPROC3_MNT, DirPath("/")),
    ]
    t, release = holding(table_fs._lock, bound=30)
    try:
        for xid, (prog, vers, proc, args) in enumerate(calls, 100):
            header = CallHeader(Xid(xid), prog, vers, proc, client.cred)
            record = bytes(encode_call(header, args).get_buffer())
            dispatcher.handle_parts_nowait(record, ConnectionContext(f"127.0.0.1:{xid}"))
            assert t.is_alive(), f"procedure {proc} of program {prog} waited for the lock"
    finally:
        release.set()
        t.join(30)


def test_read_nowait_never_waits_for_a_commit_in_progress(table_fs: TableFs) -> None:
    ctx = CallContext.local(peer="10.0.0.1:800")
    table_fs.getattr(DATA_CSV_ID, ctx)
    assert table_fs.read_nowait(DATA_CSV_ID, 0, 10, ctx) is not None
    t, release = holding(table_fs._db._log.lock)  # as a commit through the handle does
    try:
        assert table_fs._db.try_loaded_state() is None
        assert table_fs.read_nowait(DATA_CSV_ID, 0, 10, ctx) is None
    finally:
        release.set()
        t.join(30)
    assert table_fs.read_nowait(DATA_CSV_ID, 0, 10, ctx) is not None


def test_a_busy_table_does_not_stop_the_loop(
    served: tuple[NfsServer, TableFs, bytes],
) -> None:
    """While the table lock is held, a READ waits in a worker; other calls (another
    client's) are still answered, and the READ is answered once the lock is free.

    A new client's first NULL (its mount: what an earlier process at its address left is
    settled under the table lock) waits in a worker too, never on the event loop."""
    server, fs, whole = served
    with (
        RpcClient("127.0.0.1", server.port, timeout=30) as reader,
        RpcClient("127.0.0.1", server.port, timeout=30) as other,
        RpcClient("127.0.0.1", server.port, timeout=30) as newcomer,
    ):
        fh = reader.walk("/data/data.csv")
        reader.read(fh, 0, 10)
        other.null()  # its mount, settled before the lock is taken
        t, release = holding(fs._lock)
        try:
            xid = reader.send_call(
                NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_READ, Read3Args(fh, 5, 100)
            )
            mounting = newcomer.send_call(NFS_PROGRAM, NFS_V3, NfsProc3.NFSPROC3_NULL)
            for _ in range(3):
                other.null()
                other.mount_null()
        finally:
            release.set()
            t.join(30)
        newcomer.wait_reply(mounting).result(lambda u: None)
        res = reader.wait_reply(xid).result(Read3Res.unpack)
        assert res.resok is not None and res.resok.data == whole[5:105]
