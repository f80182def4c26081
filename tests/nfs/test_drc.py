"""The duplicate-request cache (nfs.protocol.drc): a retransmitted non-idempotent call is run once.

Sans-IO first: a `Dispatcher` with a counting program, fed records directly, the
concurrency of a real server reproduced deterministically (a call that is "running" is
one whose procedure has not returned yet: retransmissions are delivered from inside it).
Then through the real server over TCP, on a table: a retransmitted FILE_SYNC append of a
table without a primary key inserts its row once; a retransmitted REMOVE of data.csv
after another writer's insert does not delete that insert.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfs.protocol.drc import DuplicateRequestCache, InProgress, RequestKey
from nfs.protocol.nfs3 import (
    NFS_PROGRAM,
    NFS_V3,
    DirOpArgs3,
    NfsProc3,
    Nfsstat3,
    Remove3Args,
    Remove3Res,
    StableHow,
    Write3Args,
    Write3Res,
)
from nfs.protocol.record import encode_record
from nfs.protocol.rpc import (
    AUTH_NONE_BODY,
    CallHeader,
    ConnectionContext,
    Dispatcher,
    Packable,
    RpcProcedure,
    RpcProgram,
    Xid,
    decode_reply,
    encode_call,
)
from nfs.protocol.server import NfsServer
from nfs.protocol.xdr import Packer, Unpacker
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from tests.nfs.conftest import FakeClock
from tests.nfs.rpcclient import RpcClient

PROG = 0x20000099
VERS = 1
APPEND = 1  # non-idempotent: cached
PEEK = 2  # idempotent: not cached


@dataclass(frozen=True)
class Count:
    value: int

    def pack(self, p: Packer) -> None:
        p.pack_uint(self.value)


class Counter:
    """A program whose APPEND adds its argument to a log and answers the log's length:
    a call run twice shows (the log holds it twice, the second reply differs)."""

    def __init__(self) -> None:
        self.log: list[bytes] = []
        self.during: Callable[[bytes], None] = lambda arg: None

    def append(self, arg: bytes, ctx: Any) -> Packable:
        self.during(arg)  # "while this call runs"
        self.log.append(arg)
        return Count(len(self.log))

    def peek(self, arg: bytes, ctx: Any) -> Packable:
        return Count(len(self.log))

    def program(self) -> RpcProgram:
        def decode(u: Unpacker) -> bytes:
            return u.unpack_opaque()

        return RpcProgram(
            PROG,
            VERS,
            {
                APPEND: RpcProcedure("APPEND", decode, self.append),
                PEEK: RpcProcedure("PEEK", decode, self.peek),
            },
        )


def _dispatcher(counter: Counter, **kw: Any) -> Dispatcher:
    cache = DuplicateRequestCache([(PROG, VERS, APPEND)], **kw)
    return Dispatcher([counter.program()], reply_cache=cache)


def _record(xid: int, arg: bytes, proc: int = APPEND) -> bytes:
    p = Packer()
    p.pack_opaque(arg)
    return encode_call(CallHeader(Xid(xid), PROG, VERS, proc), p.get_buffer()).get_buffer()


PEER_A = ConnectionContext("10.0.0.1:801")
PEER_B = ConnectionContext("10.0.0.2:801")

# ---------------------------------------------------------------- sans-IO


@dataclass(frozen=True)
class Call:
    """A distinct call: the same xid from another client, or with other arguments, is
    another call."""

    xid: int
    arg: bytes
    peer: ConnectionContext


CALLS = st.lists(
    st.builds(
        Call,
        st.integers(1, 3),
        st.sampled_from([b"a", b"b", b"c" * 300]),
        st.sampled_from([PEER_A, PEER_B]),
    ),
    min_size=1,
    max_size=5,
    unique=True,
)


@given(data=st.data(), calls=CALLS)
def test_any_interleaving_runs_each_distinct_call_once(
    data: st.DataObject, calls: list[Call]
) -> None:
    """Deliveries of the calls (originals and retransmissions, in any order), each either
    after the previous one's reply or while it still runs: every distinct call runs once;
    a retransmission gets the first reply, or none while the first still runs."""
    deliveries = data.draw(
        st.lists(st.tuples(st.sampled_from(calls), st.booleans()), min_size=1, max_size=12)
    )
    counter = Counter()
    dispatcher = _dispatcher(counter)
    first_reply: dict[Call, bytes] = {}
    running: list[Call] = []
    queue = list(deliveries)

    def deliver_next() -> None:
        call, _nested = queue.pop(0)
        was_running = call in running
        running.append(call)
        try:
            reply = dispatcher.handle(_record(call.xid, call.arg), call.peer)
        finally:
            running.remove(call)
        if was_running:
            assert reply is None  # dropped: the first is still running
        elif call in first_reply:
            assert reply == first_reply[call]  # the cached reply, byte for byte
        else:
            assert reply is not None
            first_reply[call] = reply

    def during(arg: bytes) -> None:
        # what arrives while this call runs: the deliveries marked as nested
        while queue and queue[0][1]:
            deliver_next()

    counter.during = during
    while queue:
        deliver_next()
    ran = sorted(counter.log)
    assert ran == sorted(c.arg for c in first_reply)
    assert len(ran) == len({(c.xid, c.arg, c.peer) for c, _ in deliveries})


def test_a_retransmission_gets_the_first_reply_and_changes_nothing() -> None:
    counter = Counter()
    d = _dispatcher(counter)
    first = d.handle(_record(7, b"row"), PEER_A)
    assert counter.log == [b"row"]
    assert d.handle(_record(7, b"row"), PEER_A) == first
    assert counter.log == [b"row"]
    # another client's xid 7, or xid 7 with other arguments, is another call
    assert d.handle(_record(7, b"row"), PEER_B) != first
    assert d.handle(_record(7, b"other"), PEER_A) is not None
    assert counter.log == [b"row", b"row", b"other"]
    assert d.reply_cache is not None and d.reply_cache.hits == 1


def test_idempotent_procedures_are_not_cached() -> None:
    counter = Counter()
    d = _dispatcher(counter)
    d.handle(_record(1, b"x"), PEER_A)
    peek = _record(2, b"", PEEK)
    assert d.handle(peek, PEER_A) is not None
    d.handle(_record(3, b"y"), PEER_A)
    reply = d.handle(peek, PEER_A)  # run again: sees the second append
    assert reply is not None
    header, body = decode_reply(reply)
    assert header.success and body.unpack_uint() == 2
    assert d.reply_cache is not None and len(d.reply_cache) == 2


def test_entries_expire_with_age() -> None:
    clock = FakeClock()
    counter = Counter()
    d = _dispatcher(counter, max_age=120.0, clock=clock)
    d.handle(_record(1, b"x"), PEER_A)
    clock.advance(119)
    d.handle(_record(1, b"x"), PEER_A)
    assert counter.log == [b"x"]
    clock.advance(2)  # 121 s after the reply: forgotten, as knfsd's RC_EXPIRE
    d.handle(_record(1, b"x"), PEER_A)
    assert counter.log == [b"x", b"x"]


def test_the_cache_is_bounded_by_entries_and_bytes() -> None:
    counter = Counter()
    d = _dispatcher(counter, max_entries=3)
    for xid in range(1, 6):
        d.handle(_record(xid, b"x"), PEER_A)
    assert d.reply_cache is not None and len(d.reply_cache) == 3
    d.handle(_record(1, b"x"), PEER_A)  # the oldest went first: runs again
    d.handle(_record(5, b"x"), PEER_A)  # the newest is kept: cached
    assert len(counter.log) == 6
    reply_size = len(d.handle(_record(9, b"x"), PEER_A) or b"")
    small = _dispatcher(Counter(), max_bytes=2 * reply_size)
    for xid in range(1, 6):
        small.handle(_record(xid, b"x"), PEER_A)
    assert small.reply_cache is not None and len(small.reply_cache) == 2


def test_a_running_call_is_never_evicted() -> None:
    cache = DuplicateRequestCache([(PROG, VERS, APPEND)], max_entries=1)
    keys = [RequestKey.of(None, xid, PROG, VERS, APPEND, b"") for xid in range(3)]
    assert cache.begin(keys[0]) is None
    for key in keys[1:]:
        assert cache.begin(key) is None
        cache.finish(key, b"reply")
    assert cache.begin(keys[0]) is InProgress.DROP


def test_a_retransmission_while_running_is_dropped_across_threads() -> None:
    """The asyncio server runs calls in worker threads: a retransmission that arrives
    while the first runs in another thread gets no reply, and is not run."""
    counter = Counter()
    d = _dispatcher(counter)
    started, release = threading.Event(), threading.Event()

    def during(arg: bytes) -> None:
        started.set()
        assert release.wait(10)

    counter.during = during
    replies: list[bytes | None] = []
    worker = threading.Thread(target=lambda: replies.append(d.handle(_record(4, b"z"), PEER_A)))
    worker.start()
    assert started.wait(10)
    assert d.handle(_record(4, b"z"), PEER_A) is None
    release.set()
    worker.join(10)
    assert replies[0] is not None
    assert d.handle(_record(4, b"z"), PEER_A) == replies[0]
    assert counter.log == [b"z"]


def test_a_procedure_that_gives_no_reply_is_run_again() -> None:
    cache = DuplicateRequestCache([(PROG, VERS, APPEND)])
    key = RequestKey.of("h:1", 1, PROG, VERS, APPEND, b"args")
    assert cache.begin(key) is None
    cache.abandon(key)
    assert cache.begin(key) is None


# ---------------------------------------------------------------- a table, over TCP


@pytest.fixture
def plain(tmp_path: Path) -> DatabaseOps:
    """A table without a primary key: a row inserted twice is two rows."""
    d = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "name": "String"}, engine="local")
    d.insert([{"id": i, "name": f"n{i}"} for i in range(1, 4)])
    return d


def _serve(db: DatabaseOps, state_dir: Path) -> Iterator[NfsServer]:
    srv = NfsServer(TableFs(db, idle_timer=False, state_dir=state_dir)).start()
    yield srv
    srv.shutdown()


@pytest.fixture
def served(plain: DatabaseOps, tmp_path: Path) -> Iterator[NfsServer]:
    yield from _serve(plain, tmp_path / "state")


def _send(client: RpcClient, xid: int, proc: NfsProc3, args: Packable) -> bytes:
    """Send one NFSv3 call with the given xid (a retransmission repeats it) and return
    the reply record."""
    header = CallHeader(Xid(xid), NFS_PROGRAM, NFS_V3, proc, client.cred, AUTH_NONE_BODY)
    client.send_raw(encode_record(encode_call(header, args).get_buffer()))
    record = client.recv_record()  # the one call in flight: its reply, whole
    reply, _ = decode_reply(record)
    assert reply.xid == xid and reply.success
    return record


def _rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in db.to_arrow().to_pylist())


def test_a_retransmitted_file_sync_append_inserts_its_row_once(
    served: NfsServer, plain: DatabaseOps
) -> None:
    with RpcClient("127.0.0.1", served.port) as c:
        c.mount("/")
        fh = c.walk("/data/data.csv")
        size = c.attrs(fh).size
        args = Write3Args(fh, size, 6, StableHow.FILE_SYNC, b"4,n4x\n")
        first = _send(c, 0x5151, NfsProc3.NFSPROC3_WRITE, args)
        res = Write3Res.unpack(decode_reply(first)[1])
        assert res.status == Nfsstat3.NFS3_OK
        version = plain.version
        again = _send(c, 0x5151, NfsProc3.NFSPROC3_WRITE, args)  # its reply was lost
    assert _rows(plain) == [(1, "n1"), (2, "n2"), (3, "n3"), (4, "n4x")]
    assert plain.version == version
    assert again == first


def test_a_retransmitted_remove_keeps_another_writers_insert(
    served: NfsServer, plain: DatabaseOps
) -> None:
    with RpcClient("127.0.0.1", served.port) as c:
        c.mount("/")
        dir_fh = c.walk("/data")
        args = Remove3Args(DirOpArgs3(dir_fh, "data.csv"))
        first = _send(c, 0x6262, NfsProc3.NFSPROC3_REMOVE, args)
        assert Remove3Res.unpack(decode_reply(first)[1]).status == Nfsstat3.NFS3_OK
        assert _rows(plain) == []
        plain.insert([{"id": 9, "name": "theirs"}])  # another writer, meanwhile
        again = _send(c, 0x6262, NfsProc3.NFSPROC3_REMOVE, args)
    assert _rows(plain) == [(9, "theirs")]
    assert again == first


@pytest.fixture
def by_region(tmp_path: Path) -> DatabaseOps:
    """A table partitioned by region, without a primary key."""
    d = DatabaseOps.create(
        tmp_path / "p",
        {"id": "Int64", "region": "String", "name": "String"},
        partition_by=["region"],
        engine="local",
    )
    d.insert([{"id": i, "region": ("eu", "us")[i % 2], "name": f"n{i}"} for i in range(1, 5)])
    return d


@pytest.fixture
def served_by_region(by_region: DatabaseOps, tmp_path: Path) -> Iterator[NfsServer]:
    yield from _serve(by_region, tmp_path / "pstate")


def _by_id(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return sorted((r["id"], r["region"], r["name"]) for r in db.to_arrow().to_pylist())


def test_a_retransmitted_file_sync_append_to_a_partition_inserts_its_row_once(
    served_by_region: NfsServer, by_region: DatabaseOps
) -> None:
    with RpcClient("127.0.0.1", served_by_region.port) as c:
        c.mount("/")
        fh = c.walk("/partitions/region=eu/data.csv")
        size = c.attrs(fh).size
        line = b"6,eu,n6x\n"
        args = Write3Args(fh, size, len(line), StableHow.FILE_SYNC, line)
        first = _send(c, 0x7171, NfsProc3.NFSPROC3_WRITE, args)
        assert Write3Res.unpack(decode_reply(first)[1]).status == Nfsstat3.NFS3_OK
        version = by_region.version
        again = _send(c, 0x7171, NfsProc3.NFSPROC3_WRITE, args)  # its reply was lost
    assert _by_id(by_region) == [
        (1, "us", "n1"),
        (2, "eu", "n2"),
        (3, "us", "n3"),
        (4, "eu", "n4"),
        (6, "eu", "n6x"),
    ]
    assert by_region.version == version
    assert again == first


def test_a_retransmitted_remove_of_a_partition_keeps_another_writers_insert(
    served_by_region: NfsServer, by_region: DatabaseOps
) -> None:
    """``rm partitions/region=eu/data.csv`` deletes that partition's rows; its
    retransmission after another writer inserted an eu row deletes nothing more."""
    with RpcClient("127.0.0.1", served_by_region.port) as c:
        c.mount("/")
        dir_fh = c.walk("/partitions/region=eu")
        args = Remove3Args(DirOpArgs3(dir_fh, "data.csv"))
        first = _send(c, 0x7272, NfsProc3.NFSPROC3_REMOVE, args)
        assert Remove3Res.unpack(decode_reply(first)[1]).status == Nfsstat3.NFS3_OK
        assert _by_id(by_region) == [(1, "us", "n1"), (3, "us", "n3")]
        by_region.insert([{"id": 8, "region": "eu", "name": "theirs"}])  # meanwhile
        again = _send(c, 0x7272, NfsProc3.NFSPROC3_REMOVE, args)
    assert _by_id(by_region) == [(1, "us", "n1"), (3, "us", "n3"), (8, "eu", "theirs")]
    assert again == first
