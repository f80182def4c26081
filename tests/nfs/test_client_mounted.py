"""A client process that reuses an earlier one's address is a new client.

libnfs tools (``nfs-cat``, ``nfs-cp``) bind a reserved source port, and a later process
can get the same one: the server saw ports repeat within 30 runs of ``nfs-cat``. What the
server kept per client address (what it read: the base of its next rewrite; its staged
edit; its page) then belonged to a process that is gone. Each libnfs process, and the
Linux client when it mounts, pings with an NFSv3 NULL on its new connection; the Linux
client's reconnect (same port, same page cache) does not. So a NULL on a new connection
settles what the address's earlier connections left, and only then.

The clients here are wired into the dispatcher (no sockets): each `RpcClient.over` is a
new connection, and the address is chosen, so a reused port is certain.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext, Credentials, Dispatcher
from nfs.protocol.server import build_dispatcher
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import render_csv
from tests.nfs.conftest import FakeClock, holding
from tests.nfs.rpcclient import RpcClient

PORT = "127.0.0.1:700"
OTHER = "127.0.0.1:701"


@pytest.fixture(params=[None, "id"], ids=["no key", "key"])
def db(tmp_path: Path, request: pytest.FixtureRequest) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / "t",
        {"id": "Int64", "name": "String"},
        primary_key=request.param,
        engine="local",
    )
    d.insert([{"id": i, "name": f"n{i}"} for i in range(1, 6)])
    return d


@pytest.fixture
def fs(db: DatabaseOps) -> Iterator[TableFs]:
    f = TableFs(db, idle_timer=False, clock=FakeClock())
    yield f
    f.close()


@dataclass(frozen=True)
class Wire:
    """The dispatcher, and whether calls are answered as on the server's event loop."""

    dispatcher: Dispatcher
    nowait: bool

    def client(self, peer: str) -> RpcClient:
        """A new connection from ``peer``."""
        return RpcClient.over(self.dispatcher, peer=peer, nowait=self.nowait)


@pytest.fixture(params=[False, True], ids=["worker", "event loop"])
def wire(fs: TableFs, request: pytest.FixtureRequest) -> Wire:
    return Wire(build_dispatcher(fs, portmap_port=lambda: 2049), request.param)


def connect(wire: Wire, peer: str, *, ping: bool = True) -> RpcClient:
    """A new connection from ``peer``: a client mounting pings first (``ping``); a Linux
    client's reconnect does not."""
    c = wire.client(peer)
    if ping:
        c.null()
    c.mount("/")
    return c


def quiet(fs: TableFs) -> None:
    clock = fs._clock
    assert isinstance(clock, FakeClock)
    clock.advance(60)
    fs.poll()


def rewrite(c: RpcClient, content: bytes) -> None:
    """``nfs-cp``: truncate, write everything, COMMIT."""
    fh = c.walk("/data/data.csv")
    assert c.setattr(fh, Sattr3(size=0)).status == Nfsstat3.NFS3_OK
    assert c.write(fh, 0, content, StableHow.UNSTABLE).resok is not None
    assert c.commit(fh).resok is not None


def rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in db.to_arrow().to_pylist())


def renamed(content: bytes, row: int, name: str) -> bytes:
    old = f"\n{row},n{row}\n".encode()
    assert old in content
    return content.replace(old, f"\n{row},{name}\n".encode())


def test_a_new_process_at_an_earlier_ones_port_has_not_read_what_that_one_read(
    db: DatabaseOps, fs: TableFs, wire: Wire
) -> None:
    """``nfs-cat`` (port 700) reads; the API inserts a row; ``nfs-cat`` from another port
    reads the new version and ``nfs-cp`` of it with one row changed gets port 700 again.
    Diffed against what the first process read, the inserted row was new in the
    rewrite: inserted twice without a key (the old code)."""
    first = connect(wire, PORT)
    first.read_file("/data/data.csv")
    first.close()
    db.insert([{"id": 6, "name": "six"}])
    fresh = connect(wire, OTHER).read_file("/data/data.csv")
    assert b"\n6,six\n" in fresh
    rewrite(connect(wire, PORT), renamed(fresh, 2, "two"))
    quiet(fs)
    assert rows(db) == [(1, "n1"), (2, "two"), (3, "n3"), (4, "n4"), (5, "n5"), (6, "six")]


def test_the_staged_edit_of_a_process_that_is_gone_applies_before_the_next_one_writes(
    db: DatabaseOps, fs: TableFs, wire: Wire
) -> None:
    """``nfs-cp`` (port 700) COMMITs its rewrite, which would apply once quiet; the next
    process at port 700 mounts before that. The old code kept the first edit staged
    under the address, so the second process' rewrite (made from what another client
    read, without the first edit) joined it and the first edit was lost."""
    before = render_csv(db.to_arrow())
    rewrite(connect(wire, PORT), renamed(before, 2, "two"))
    second = connect(wire, PORT)  # the first process is gone: its edit applies
    fresh = connect(wire, OTHER).read_file("/data/data.csv")
    rewrite(second, renamed(fresh, 4, "four"))
    quiet(fs)
    assert rows(db) == [(1, "n1"), (2, "two"), (3, "n3"), (4, "four"), (5, "n5")]


def test_an_unfinished_edit_of_a_process_that_is_gone_is_dropped_not_joined(
    db: DatabaseOps, fs: TableFs, wire: Wire
) -> None:
    """A process wrote half a line and died; the next one at its port rewrites the file
    whole. Its rewrite applies alone, against what it was shown (the table as it is),
    and nothing of the dead process' half line reaches the table or its errors."""
    gone = connect(wire, PORT)
    fh = gone.walk("/data/data.csv")
    size = gone.attrs(fh).size
    assert gone.write(fh, size, b"7,hal", StableHow.UNSTABLE).resok is not None
    second = connect(wire, PORT)
    content = renamed(render_csv(db.to_arrow()), 3, "three")
    rewrite(second, content)
    quiet(fs)
    assert rows(db) == [(1, "n1"), (2, "n2"), (3, "three"), (4, "n4"), (5, "n5")]


def test_a_reconnect_without_a_ping_keeps_what_the_client_read(
    db: DatabaseOps, fs: TableFs, wire: Wire
) -> None:
    """The Linux client reconnects from the same port and keeps its page cache: its
    rewrite is still based on what it read before, so a row inserted since stays once."""
    first = connect(wire, PORT)
    held = first.read_file("/data/data.csv")
    root = first.root
    first.close()
    db.insert([{"id": 6, "name": "six"}])
    again = wire.client(PORT)  # no NULL, no MNT: a reconnect
    again.root = root
    rewrite(again, renamed(held, 2, "two"))
    quiet(fs)
    assert rows(db) == [(1, "n1"), (2, "two"), (3, "n3"), (4, "n4"), (5, "n5"), (6, "six")]


def test_a_second_ping_on_the_same_connection_changes_nothing(
    db: DatabaseOps, fs: TableFs, wire: Wire
) -> None:
    c = connect(wire, PORT)
    held = c.read_file("/data/data.csv")
    db.insert([{"id": 6, "name": "six"}])
    c.null()
    rewrite(c, renamed(held, 2, "two"))
    quiet(fs)
    assert rows(db) == [(1, "n1"), (2, "two"), (3, "n3"), (4, "n4"), (5, "n5"), (6, "six")]


def mounting(peer: str, connection: int) -> CallContext:
    """The NULL of a new connection (numbered ``connection``) from ``peer``."""
    return CallContext(cred=Credentials.sys(0, 0, (), "c"), peer=peer, connection=connection)


@contextmanager
def table_busy(fs: TableFs) -> Iterator[None]:
    """The table lock held by another thread (a commit) for the block; bounded: a call
    that waits for the lock fails, never hangs."""
    t, release = holding(fs._lock, bound=30)
    try:
        yield
    finally:
        release.set()
        t.join(30)


def test_a_ping_on_the_event_loop_never_waits_for_the_table(db: DatabaseOps, fs: TableFs) -> None:
    """The settling takes the table lock: while a commit holds it, the loop's NULL does
    nothing and gives it to a worker. A second ping on a settled connection needs no
    lock at all."""
    c = connect(Wire(build_dispatcher(fs), False), PORT)
    c.read_file("/data/data.csv")
    assert fs._s.views.slots_of(PORT)
    with table_busy(fs):
        assert not fs.client_mounted_nowait(mounting(PORT, 10_001))
        assert fs._s.views.slots_of(PORT)  # no effect
    assert fs.client_mounted_nowait(mounting(PORT, 10_001))
    assert not fs._s.views.slots_of(PORT)  # what the gone process read is forgotten
    with table_busy(fs):
        assert fs.client_mounted_nowait(mounting(PORT, 10_001))


def test_a_ping_that_would_apply_a_gone_process_edit_is_left_to_a_worker(
    db: DatabaseOps, fs: TableFs
) -> None:
    """Applying an edit is a commit: never on the event loop. The full path applies it."""
    before = render_csv(db.to_arrow())
    rewrite(connect(Wire(build_dispatcher(fs), False), PORT), renamed(before, 2, "two"))
    version = db.version
    assert not fs.client_mounted_nowait(mounting(PORT, 10_002))
    assert fs.stats().staged_writers == 1 and db.version == version
    fs.client_mounted(mounting(PORT, 10_002))
    assert fs.stats().staged_writers == 0
    assert rows(db) == [(1, "n1"), (2, "two"), (3, "n3"), (4, "n4"), (5, "n5")]


def test_a_ping_that_would_remove_a_gone_process_page_file_is_left_to_a_worker(
    db: DatabaseOps, fs: TableFs
) -> None:
    """An append keeps the client's page in a file; forgetting it is IO: a worker's."""
    c = connect(Wire(build_dispatcher(fs), False), PORT)
    fh = c.walk("/data/data.csv")
    size = c.attrs(fh).size
    assert c.write(fh, size, b"6,six\n", StableHow.UNSTABLE).resok is not None
    assert c.commit(fh).resok is not None
    quiet(fs)
    assert (6, "six") in rows(db)
    assert fs._s.pages.has_files_of(PORT)
    assert not fs._s.pages.has_files_of(OTHER)
    assert not fs.client_mounted_nowait(mounting(PORT, 10_003))
    fs.client_mounted(mounting(PORT, 10_003))
    assert not fs._s.pages.has_files_of(PORT)
    assert fs.client_mounted_nowait(mounting(PORT, 10_004))
