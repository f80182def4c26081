"""Recovery depends only on durable state (docs/nfs-writes.md, "Replies are true").

A FILE_SYNC WRITE reply, a COMMIT OK or a SETATTR of data.csv promise that the bytes
survive a crash. What the next server needs to restore such a staging must then be
fsynced and must not live in a directory the docs call deletable. Sans-IO through
TableFs: a crash is a TableFs dropped without close() and a new one started on the same
state directory.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nfs.protocol.nfs3 import Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.table.tablefs import DATA_CSV_ID, PathOps, TableFs
from posixlake import DatabaseOps
from tests.nfs.test_nfs_writes import Clock, crash

A = CallContext.local(peer="10.0.0.1:700")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def plain(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(tmp_path / "plain", {"id": "Int64", "name": "String"}, engine="local")
    d.insert([{"id": i, "name": f"n{i}"} for i in range(1, 6)])
    return d


def _fs(db: DatabaseOps, clock: Clock, state: Path) -> TableFs:
    return TableFs(db, clock=clock, idle_timer=False, state_dir=state)


def rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in db.to_arrow().to_pylist())


def close_and_wait(fs: TableFs, ctx: CallContext, clock: Clock) -> None:
    """The writer's close() (a COMMIT), then a minute without a call: its edit is done
    (applied at the COMMIT or once the writer is quiet, whichever the rules say)."""
    fs.commit(DATA_CSV_ID, 0, 0, ctx)
    clock.now += 60
    fs.poll()


# ---------------------------------------------------------------- fsync before each promise


class FsyncLog:
    """A counting ``os.fsync``: which file (by path) was fsynced at which size."""

    def __init__(self, real: Callable[[int], None]) -> None:
        self.real = real
        self.synced: dict[str, int] = {}
        self.dir_syncs: dict[str, int] = {}

    def __call__(self, fd: int) -> None:
        self.real(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            self.dir_syncs[path] = self.dir_syncs.get(path, 0) + 1
        else:
            self.synced[path] = st.st_size

    def check_durable(self, journal_dir: Path) -> None:
        """Every journal (and kept base or page) in ``journal_dir`` was fsynced as it is
        now, and the directory after them (their names)."""
        kept = [journal_dir.glob(f"*.{suffix}") for suffix in ("wal", "base", "page")]
        for path in [p for paths in kept for p in paths]:
            assert self.synced.get(str(path)) == path.stat().st_size, f"{path.name} not fsynced"
            assert self.dir_syncs.get(str(journal_dir), 0) > 0, "journal directory not fsynced"


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> FsyncLog:
    log = FsyncLog(os.fsync)
    monkeypatch.setattr(os, "fsync", log)
    return log


CRLF = b"id,name\r\n" + b"".join(b"%d,n%d\r\n" % (i, i) for i in range(1, 6))


def test_a_file_sync_change_of_a_crlf_file_survives_a_crash_without_the_shadows(
    plain: DatabaseOps, clock: Clock, state: Path, fsyncs: FsyncLog
) -> None:
    """The writer's CRLF bytes are what it was shown after its rewrite (a shadow); its
    in-place FILE_SYNC change is a staging over them. The next server restores it from
    the journal alone: shadows-journal/ gone, the change still applies."""
    fs = _fs(plain, clock, state)
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    fs.write(DATA_CSV_ID, 0, CRLF, StableHow.UNSTABLE, A)
    close_and_wait(fs, A, clock)  # applied: the table, shown to A as its CRLF bytes
    assert PathOps(fs, A).read_file("/data/data.csv") == CRLF
    v = plain.version
    at = CRLF.index(b"n3")
    fs.write(DATA_CSV_ID, at, b"x3", StableHow.FILE_SYNC, A)  # promised: durable
    assert list(fs._journals.path.glob("*.base"))  # the shadow's bytes, kept
    fsyncs.check_durable(fs._journals.path)
    crash(fs)
    shadows = list(state.rglob("shadows-*"))
    assert shadows
    for d in shadows:
        shutil.rmtree(d)
    again = _fs(plain, clock, state)
    try:
        assert not list(state.rglob("*.failed"))
        assert PathOps(again, A).read_file("/data/data.csv") == CRLF.replace(b"n3", b"x3")
        close_and_wait(again, A, clock)
        assert plain.version == v + 1
        assert rows(plain) == [(1, "n1"), (2, "n2"), (3, "x3"), (4, "n4"), (5, "n5")]
    finally:
        again.close()


def test_every_durable_reply_follows_the_journal_fsync(
    plain: DatabaseOps, clock: Clock, state: Path, fsyncs: FsyncLog
) -> None:
    """A FILE_SYNC WRITE reply, a COMMIT OK and a SETATTR of data.csv whose staging is
    not applied yet promise bytes only the journal holds: it was fsynced before each."""
    fs = _fs(plain, clock, state)
    journals = fs._journals.path
    b = CallContext.local(peer="10.0.0.2:701")
    try:
        size = fs.getattr(DATA_CSV_ID, A).size

        def durable() -> None:
            assert list(journals.glob("*.wal")), "no staging left to check"
            fsyncs.check_durable(journals)

        fs.write(DATA_CSV_ID, size, b"6,s", StableHow.FILE_SYNC, A)  # mid-line: held
        durable()
        fs.write(DATA_CSV_ID, size + 3, b"ix", StableHow.UNSTABLE, A)
        fs.commit(DATA_CSV_ID, 0, 0, A)  # COMMIT OK of content ending mid-line: held
        durable()
        fs.setattr(DATA_CSV_ID, Sattr3(size=0), b)  # another writer's truncation
        durable()
        fs.write(DATA_CSV_ID, 0, b"id,name\n1,b\n", StableHow.FILE_SYNC, b)  # settled rewrite
        durable()
        fs.write(DATA_CSV_ID, size + 5, b"\n", StableHow.FILE_SYNC, A)  # A's line ends
        fsyncs.check_durable(journals)  # what is still staged is still promised
        close_and_wait(fs, b, clock)  # both edits are done
        assert rows(plain) == [(1, "b"), (6, "six")]
    finally:
        fs.close()


def test_a_staging_based_on_a_clients_page_survives_a_crash_without_the_pages(
    plain: DatabaseOps, clock: Clock, state: Path, fsyncs: FsyncLog
) -> None:
    """A client appends from a stale page (row 2 was deleted since it read): its page is
    then bytes no version ever was. Its next page-widened append, promised mid-line, is
    staged over that page; after a crash, with pages-journal/ gone, the journal alone
    restores it, and only the new line is inserted (row 2 stays deleted)."""
    fs = _fs(plain, clock, state)
    seen = PathOps(fs, A).read_file("/data/data.csv")
    plain.delete("id = 2")  # another writer, meanwhile
    fs.write(DATA_CSV_ID, 0, seen + b"6,n6\n", StableHow.FILE_SYNC, A)  # page-widened
    close_and_wait(fs, A, clock)
    assert rows(plain) == [(1, "n1"), (3, "n3"), (4, "n4"), (5, "n5"), (6, "n6")]
    page = seen + b"6,n6\n"
    fs.write(DATA_CSV_ID, 0, page + b"7,se", StableHow.FILE_SYNC, A)  # promised: durable
    assert list(fs._journals.path.glob("*.page"))  # the client's page, kept
    fsyncs.check_durable(fs._journals.path)
    crash(fs)
    for d in state.rglob("pages-*"):
        shutil.rmtree(d)
    again = _fs(plain, clock, state)
    try:
        assert not list(state.rglob("*.failed"))
        again.write(DATA_CSV_ID, len(page) + 4, b"ven\n", StableHow.FILE_SYNC, A)
        close_and_wait(again, A, clock)
        assert rows(plain) == [(1, "n1"), (3, "n3"), (4, "n4"), (5, "n5"), (6, "n6"), (7, "seven")]
    finally:
        again.close()
