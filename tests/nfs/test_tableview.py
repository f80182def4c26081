"""TableFs in process: the tree, reads, and every write path, checked through the Python API.

Each write scenario asserts the rows AND that exactly one new Delta version was made
(or none, for refused or no-op writes). Time is an injected clock; nothing sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from nfs.protocol.nfs3 import Ftype3, Nfsstat3, Sattr3, SetTime, StableHow, TimeHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import ACCESS3_MODIFY, ACCESS3_READ, FileId, NfsError
from nfs.table.tablefs import (
    DATA_CSV_ID,
    DATA_DIR_ID,
    ROOT_ID,
    SCHEMA_ID,
    SCRATCH_BASE,
    VERSIONS_ID,
    PathOps,
    TableFs,
)
from posixlake import DatabaseOps
from posixlake._authz import Permission
from posixlake.csvcodec import parse_csv, render_csv
from posixlake.delta import DeltaLog
from posixlake.engines import LocalEngine
from posixlake.errors import PermissionDenied

ROOT = CallContext.local()
MiB = 1 << 20


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _fs(db: DatabaseOps, clock: Clock, **kw: Any) -> TableFs:
    return TableFs(db, clock=clock, idle_timer=False, **kw)


@pytest.fixture
def db(tmp_path: Path) -> DatabaseOps:
    """A table without a primary key, three rows."""
    d = DatabaseOps.create(
        tmp_path / "plain", {"id": "Int64", "name": "String", "qty": "Float64"}, engine="local"
    )
    d.insert(
        [
            {"id": 1, "name": "apple", "qty": 1.5},
            {"id": 2, "name": "banana", "qty": 2.0},
            {"id": 3, "name": "cherry, red", "qty": None},
        ]
    )
    return d


@pytest.fixture
def keyed(tmp_path: Path) -> DatabaseOps:
    """A table with primary key ``id``, three rows."""
    d = DatabaseOps.create(
        tmp_path / "keyed",
        {"id": "Int64", "name": "String", "qty": "Int32"},
        primary_key="id",
        engine="local",
    )
    d.insert(
        [
            {"id": 1, "name": "a", "qty": 10},
            {"id": 2, "name": "b", "qty": 20},
            {"id": 3, "name": "c", "qty": 30},
        ]
    )
    return d


@pytest.fixture
def fs(db: DatabaseOps, clock: Clock) -> Iterator[TableFs]:
    f = _fs(db, clock)
    yield f
    f.close()


@pytest.fixture
def kfs(keyed: DatabaseOps, clock: Clock) -> Iterator[TableFs]:
    f = _fs(keyed, clock)
    yield f
    f.close()


def rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in db.to_arrow().to_pylist()), key=lambda r: repr(r))


def csv_rows(db: DatabaseOps, data: bytes) -> list[tuple[Any, ...]]:
    table = parse_csv(data, db.to_arrow().schema)
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=lambda r: repr(r))


def status(exc: pytest.ExceptionInfo[NfsError]) -> Nfsstat3:
    return Nfsstat3(exc.value.status)


# ================================================================ tree and reads


def test_tree(fs: TableFs, db: DatabaseOps) -> None:
    p = fs.paths
    assert p.readdir("/") == ["data", "schema.sql", "versions", "changes.csv"]
    assert p.readdir("/data") == ["data.csv"]
    assert p.readdir("/versions") == [str(v) for v in range(db.version + 1)]
    assert p.readdir("/versions/0") == ["data.csv", "changes.csv"]
    assert p.resolve("/") == ROOT_ID and p.resolve("/data") == DATA_DIR_ID
    assert p.resolve("/data/data.csv") == DATA_CSV_ID and p.resolve("/schema.sql") == SCHEMA_ID
    assert p.resolve("/versions") == VERSIONS_ID
    assert p.resolve("/data/..") == ROOT_ID and p.resolve("/versions/1/..") == VERSIONS_ID
    for missing in ("/nope", "/data/nope.csv", "/versions/99", "/versions/01", "/versions/x"):
        with pytest.raises(NfsError) as e:
            p.resolve(missing)
        assert status(e) == Nfsstat3.NFS3ERR_NOENT
    with pytest.raises(NfsError) as e:
        p.resolve("/schema.sql/x")
    assert status(e) == Nfsstat3.NFS3ERR_NOTDIR
    assert fs.getattr(ROOT_ID).type == Ftype3.NF3DIR
    assert fs.getattr(VERSIONS_ID).type == Ftype3.NF3DIR


def test_reads_render_the_current_version_with_exact_size(fs: TableFs, db: DatabaseOps) -> None:
    data = fs.paths.read_file("/data/data.csv")
    assert data == render_csv(db.to_arrow())
    assert data.startswith(b"id,name,qty\n")
    assert b'"cherry, red"' in data
    attrs = fs.paths.getattr("/data/data.csv")
    assert attrs.size == len(data) and attrs.type == Ftype3.NF3REG
    assert attrs.mtime.seconds == int(db.commit_time(db.version).timestamp())
    # partial reads, EOF flags, reads past the end
    chunk, eof = fs.read(DATA_CSV_ID, 3, 5, ROOT)
    assert bytes(chunk) == data[3:8] and not eof
    chunk, eof = fs.read(DATA_CSV_ID, len(data) - 2, 100, ROOT)
    assert bytes(chunk) == data[-2:] and eof
    assert (
        fs.read(DATA_CSV_ID, len(data) + 10, 5, ROOT) == (b"", True)
        or bytes(fs.read(DATA_CSV_ID, len(data) + 10, 5, ROOT)[0]) == b""
    )


def test_schema_sql(fs: TableFs, keyed: DatabaseOps, clock: Clock) -> None:
    assert fs.paths.read_file("/schema.sql") == (
        b"CREATE TABLE data (\n  id BIGINT,\n  name STRING,\n  qty DOUBLE\n);\n"
    )
    kfs = _fs(keyed, clock)
    text = kfs.paths.read_file("/schema.sql")
    assert b"id BIGINT NOT NULL" in text and b"PRIMARY KEY (id)" in text
    assert kfs.paths.getattr("/schema.sql").size == len(text)


def test_versions_are_read_only_time_travel(fs: TableFs, db: DatabaseOps) -> None:
    v1 = fs.paths.read_file("/versions/1/data.csv")
    db.insert({"id": 4, "name": "date", "qty": 4.0})
    assert fs.paths.read_file("/versions/1/data.csv") == v1
    assert fs.paths.read_file("/versions/0/data.csv") == b"id,name,qty\n"
    assert fs.paths.read_file(f"/versions/{db.version}/data.csv") == fs.paths.read_file(
        "/data/data.csv"
    )
    a0 = fs.paths.getattr("/versions/0/data.csv")
    a1 = fs.paths.getattr("/versions/1/data.csv")
    assert a0.fileid != a1.fileid and a0.mode & 0o222 == 0
    for call in (
        lambda: fs.paths.write_file("/versions/1/data.csv", b"x"),
        lambda: fs.paths.remove_file("/versions/1/data.csv"),
        lambda: fs.paths.truncate("/versions/1/data.csv", 0),
        lambda: fs.paths.write_file("/versions/1/new.txt", b"x"),
        lambda: fs.paths.mkdir("/versions/9"),
        lambda: fs.paths.rename("/versions/1/data.csv", "/data/x.csv"),
    ):
        with pytest.raises(NfsError) as e:
            call()
        assert status(e) in (Nfsstat3.NFS3ERR_ROFS, Nfsstat3.NFS3ERR_ACCES)
    for call in (
        lambda: fs.paths.write_file("/schema.sql", b"x"),
        lambda: fs.paths.truncate("/schema.sql", 0),
        lambda: fs.paths.remove_file("/schema.sql"),
        lambda: fs.paths.rename("/schema.sql", "/x.sql"),
    ):
        with pytest.raises(NfsError) as e:
            call()
        assert status(e) in (Nfsstat3.NFS3ERR_ROFS, Nfsstat3.NFS3ERR_ACCES)
    assert fs.access(SCHEMA_ID, ACCESS3_READ | ACCESS3_MODIFY, ROOT) == ACCESS3_READ
    now = SetTime(TimeHow.SET_TO_SERVER_TIME)
    for fid in (SCHEMA_ID, VERSIONS_ID, fs.paths.resolve("/versions/1/data.csv")):
        for attrs in (Sattr3(mode=0o600), Sattr3(atime=now, mtime=now)):
            with pytest.raises(NfsError) as e:
                fs.setattr(fid, attrs, ROOT)
            assert status(e) == Nfsstat3.NFS3ERR_ROFS


def test_touch_and_chmod_of_data_csv_change_nothing(fs: TableFs, db: DatabaseOps) -> None:
    v = db.version
    now = SetTime(TimeHow.SET_TO_SERVER_TIME)
    before = fs.getattr(DATA_CSV_ID)
    assert fs.setattr(DATA_CSV_ID, Sattr3(atime=now, mtime=now), ROOT) == before
    assert fs.setattr(DATA_CSV_ID, Sattr3(mode=0o600, uid=5, gid=5), ROOT) == before
    assert fs.setattr(ROOT_ID, Sattr3(mtime=now), ROOT).type == Ftype3.NF3DIR
    assert db.version == v


def test_api_write_is_visible_to_the_next_getattr_and_read(fs: TableFs, db: DatabaseOps) -> None:
    before = fs.paths.getattr("/data/data.csv")
    db.insert({"id": 4, "name": "date", "qty": 4.0})
    after = fs.paths.getattr("/data/data.csv")
    assert after.size > before.size
    assert after.mtime.to_ns() > before.mtime.to_ns()
    assert b"4,date,4\n" in fs.paths.read_file("/data/data.csv")
    assert fs.paths.readdir("/versions")[-1] == str(db.version)


def test_another_writer_is_seen_after_the_version_ttl(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    other = DatabaseOps.open(db.uri, engine="local")
    size = fs.paths.getattr("/data/data.csv").size
    other.insert({"id": 9, "name": "other", "qty": 0.0})
    assert fs.paths.getattr("/data/data.csv").size == size  # cached version still trusted
    clock.advance(1.0)
    assert fs.paths.getattr("/data/data.csv").size > size
    assert b"9,other,0\n" in fs.paths.read_file("/data/data.csv")


def test_mtimes_are_unique_per_version(fs: TableFs, db: DatabaseOps) -> None:
    seen = {fs.getattr(DATA_CSV_ID).mtime.to_ns()}
    for i in range(3):
        db.insert({"id": 10 + i, "name": "x", "qty": 0.0})
        seen.add(fs.getattr(DATA_CSV_ID).mtime.to_ns())
    assert len(seen) == 4


# ================================================================ appends


def test_echo_append_cold_cache_is_one_insert(fs: TableFs, db: DatabaseOps) -> None:
    v = db.version
    size = fs.paths.getattr("/data/data.csv").size
    # the Linux client: WRITE offset=size FILE_SYNC at close()
    fs.paths.write_file("/data/data.csv", b"4,date,4.5\n", offset=size)
    assert db.version == v + 1
    assert (4, "date", 4.5) in rows(db) and len(rows(db)) == 4
    assert db.history(1)[0].operation == "WRITE"
    assert fs.paths.read_file("/data/data.csv").endswith(b"4,date,4.5\n")


def test_echo_append_page_widened_from_offset_zero(fs: TableFs, db: DatabaseOps) -> None:
    v = db.version
    old = fs.paths.read_file("/data/data.csv")
    fs.paths.write_file("/data/data.csv", old + b"4,date,\n5,elder,5\n", offset=0)
    assert db.version == v + 1
    assert sorted(rows(db), key=repr) == sorted(
        [*csv_rows(db, old), (4, "date", None), (5, "elder", 5.0)], key=repr
    )


def test_append_of_a_file_with_its_own_header(fs: TableFs, db: DatabaseOps) -> None:
    v = db.version
    size = fs.paths.getattr("/data/data.csv").size
    fs.paths.write_file("/data/data.csv", b"id,name,qty\n7,g,7\n", offset=size)
    assert db.version == v + 1 and (7, "g", 7.0) in rows(db) and len(rows(db)) == 4


def test_append_without_final_newline_is_held_until_the_line_ends(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    v = db.version
    size = fs.paths.getattr("/data/data.csv").size
    fs.write(DATA_CSV_ID, size, b"8,h,8", StableHow.UNSTABLE, ROOT)  # still writing
    assert db.version == v  # not on a line boundary, not flushed: held, however long
    assert fs.paths.read_file("/data/data.csv").endswith(b"8,h,8")  # the writer sees it
    other = PathOps(fs, CallContext.local(peer="10.0.0.9:900"))
    assert not other.read_file("/data/data.csv").endswith(b"8,h,8")  # others do not
    clock.advance(600)
    fs.poll()
    assert db.version == v
    fs.write(DATA_CSV_ID, size + 5, b"8\n", StableHow.UNSTABLE, ROOT)
    fs.commit(DATA_CSV_ID, 0, 0, ROOT)
    clock.advance(10)
    fs.poll()
    assert db.version == v + 1 and (8, "h", 88.0) in rows(db)


def test_a_closed_file_without_a_final_newline_ends_in_a_record(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """``printf '9,i,9' >> data.csv``: the client flushed it (COMMIT or FILE_SYNC), so
    its last line is a record once the writer is quiet (it used to wait forever)."""
    v = db.version
    size = fs.paths.getattr("/data/data.csv").size
    fs.write(DATA_CSV_ID, size, b"9,i,9", StableHow.UNSTABLE, ROOT)
    fs.commit(DATA_CSV_ID, 0, 0, ROOT)
    clock.advance(10)
    fs.poll()
    assert db.version == v + 1 and (9, "i", 9.0) in rows(db)
    size = fs.paths.getattr("/data/data.csv").size
    fs.write(DATA_CSV_ID, size, b"10,j,1", StableHow.FILE_SYNC, ROOT)
    clock.advance(10)
    fs.poll()
    assert db.version == v + 2 and (10, "j", 1.0) in rows(db)


def test_append_that_clashes_with_a_key_is_refused(kfs: TableFs, keyed: DatabaseOps) -> None:
    v, before = keyed.version, rows(keyed)
    size = kfs.paths.getattr("/data/data.csv").size
    with pytest.raises(NfsError) as e:
        kfs.paths.write_file("/data/data.csv", b"2,dup,1\n", offset=size)
    assert status(e) == Nfsstat3.NFS3ERR_INVAL
    assert keyed.version == v and rows(keyed) == before
    assert kfs.paths.read_file("/data/data.csv") == render_csv(keyed.to_arrow())


# ================================================================ overwrites


def _sed_i(fs: TableFs, old: bytes, new: bytes, *, name: str = "sedAbC123") -> None:
    """The RPCs GNU sed -i sends (see nfs-vm/README.md), in process."""
    p = fs.paths
    fid = fs.create_exclusive(DATA_DIR_ID, name, b"\x01" * 8, ROOT)
    fs.setattr(fid, Sattr3(mode=0o600), ROOT)
    content = p.read_file("/data/data.csv")
    fs.setattr(fid, Sattr3(uid=0, gid=0), ROOT)
    fs.setattr(fid, Sattr3(mode=0o644), ROOT)
    fs.write(fid, 0, content.replace(old, new), StableHow.FILE_SYNC, ROOT)
    fs.rename(DATA_DIR_ID, name, DATA_DIR_ID, "data.csv", ROOT)


def test_sed_i_without_key_is_one_commit(fs: TableFs, db: DatabaseOps) -> None:
    v = db.version
    _sed_i(fs, b"banana", b"BANANA")
    assert db.version == v + 1
    assert rows(db) == sorted(
        [(1, "apple", 1.5), (2, "BANANA", 2.0), (3, "cherry, red", None)], key=repr
    )
    assert fs.paths.readdir("/data") == ["data.csv"]  # the temp file is gone


def test_sed_i_with_key_updates_in_one_merge(kfs: TableFs, keyed: DatabaseOps) -> None:
    v = keyed.version
    _sed_i(kfs, b"2,b,20", b"2,B,21")
    assert keyed.version == v + 1
    assert rows(keyed) == [(1, "a", 10), (2, "B", 21), (3, "c", 30)]
    # one commit: one row changed, its key held once: replace_rows updates it in place
    assert keyed.history(1)[0].operation == "UPDATE"


def test_overwrite_with_key_inserts_updates_and_deletes_in_one_commit(
    kfs: TableFs, keyed: DatabaseOps
) -> None:
    v = keyed.version
    kfs.paths.write_file("/data/data.csv", b"id,name,qty\n3,c,33\n1,a,10\n4,d,40\n", truncate=True)
    assert keyed.version == v + 1
    assert rows(keyed) == [(1, "a", 10), (3, "c", 33), (4, "d", 40)]


def test_overwrite_without_key_is_a_multiset_diff(fs: TableFs, db: DatabaseOps) -> None:
    db.insert({"id": 2, "name": "banana", "qty": 2.0})  # a duplicate row
    v = db.version
    content = b'id,name,qty\n1,apple,1.5\n2,banana,2\n"cherry, red",\n'
    with pytest.raises(NfsError):  # wrong column count in the last line
        fs.paths.write_file("/data/data.csv", content, truncate=True)
    assert db.version == v
    content = b'id,name,qty\n1,apple,1.5\n2,banana,2\n3,"cherry, red",\n9,new,9\n'
    fs.paths.write_file("/data/data.csv", content, truncate=True)
    assert db.version == v + 1
    assert rows(db) == sorted(
        [(1, "apple", 1.5), (2, "banana", 2.0), (3, "cherry, red", None), (9, "new", 9.0)],
        key=repr,
    )


def test_overwrite_identical_content_makes_no_commit(fs: TableFs, db: DatabaseOps) -> None:
    v = db.version
    content = fs.paths.read_file("/data/data.csv")
    fs.paths.write_file("/data/data.csv", content, truncate=True)
    # other spellings of the same rows: CRLF, reordered lines, "+1.50"
    lines = content.split(b"\n")
    fs.paths.write_file(
        "/data/data.csv", b"\r\n".join([lines[0], *reversed(lines[1:-1])]) + b"\r\n", truncate=True
    )
    assert db.version == v


def test_many_unstable_chunks_and_one_commit_are_one_diff(db: DatabaseOps, clock: Clock) -> None:
    db.insert([{"id": i, "name": f"row {i}", "qty": i * 0.25} for i in range(10, 60_000)])
    fs = _fs(db, clock)
    v = db.version
    content = fs.paths.read_file("/data/data.csv")
    assert len(content) > MiB
    new = content.replace(b"\n777,row 777,194.25\n", b"\n777,row 777!,194.25\n")
    assert new != content
    fs.paths.truncate("/data/data.csv", 0)
    chunks = [(off, new[off : off + MiB]) for off in range(0, len(new), MiB)]
    for off, chunk in reversed(chunks):  # any order
        fs.write(DATA_CSV_ID, off, chunk, StableHow.UNSTABLE, ROOT)
        assert db.version == v
    assert fs.getattr(DATA_CSV_ID).size == len(new)
    fs.commit(DATA_CSV_ID, 0, 0, ROOT)
    assert db.version == v  # a COMMIT makes it durable; the writer may still be writing
    clock.advance(10)
    fs.poll()
    assert db.version == v + 1
    assert db.query("SELECT name FROM data WHERE id = 777").fetchall() == [("row 777!",)]
    assert db.to_arrow().num_rows == 60_000 - 10 + 3
    assert db.history(1)[0].operation == "UPDATE"  # one row changed: replace_rows in place


def test_commit_mid_line_is_held_until_idle(fs: TableFs, db: DatabaseOps, clock: Clock) -> None:
    v = db.version
    fs.paths.truncate("/data/data.csv", 0)
    fs.write(DATA_CSV_ID, 0, b"id,name,qty\n1,apple,1.5\n2,ban", StableHow.UNSTABLE, ROOT)
    fs.commit(DATA_CSV_ID, 0, 0, ROOT)
    assert db.version == v
    fs.write(DATA_CSV_ID, 29, b"ana,2\n", StableHow.UNSTABLE, ROOT)
    clock.advance(1)
    fs.poll()
    assert db.version == v  # not idle long enough
    clock.advance(5)
    assert fs.getattr(DATA_CSV_ID).size > 0  # any call applies an idle write
    assert db.version == v + 1
    assert rows(db) == [(1, "apple", 1.5), (2, "banana", 2.0)]


def test_rows_committed_meanwhile_survive_an_overwrite(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    content = fs.paths.read_file("/data/data.csv")
    fs.paths.truncate("/data/data.csv", 0)
    fs.write(DATA_CSV_ID, 0, content.replace(b"banana", b"kiwi"), StableHow.UNSTABLE, ROOT)
    db.insert({"id": 50, "name": "api", "qty": 5.0})  # another writer, meanwhile
    v = db.version
    fs.commit(DATA_CSV_ID, 0, 0, ROOT)
    clock.advance(10)
    fs.poll()
    assert db.version == v + 1
    assert rows(db) == sorted(
        [(1, "apple", 1.5), (2, "kiwi", 2.0), (3, "cherry, red", None), (50, "api", 5.0)],
        key=repr,
    )


def test_cp_onto_data_csv(fs: TableFs, db: DatabaseOps, clock: Clock) -> None:
    """cp new.csv data.csv (the Linux client, one page): SETATTR size=0, WRITE FILE_SYNC.

    No COMMIT follows, so the rewrite is applied when the writer is idle: a FILE_SYNC
    write that is not an append may be one of many (a ``-o sync`` mount).
    """
    v = db.version
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), ROOT)
    assert fs.getattr(DATA_CSV_ID).size == 0 and db.version == v
    fs.write(DATA_CSV_ID, 0, b"id,name,qty\n5,fig,1\n", StableHow.FILE_SYNC, ROOT)
    assert db.version == v
    clock.advance(10)
    fs.poll()
    assert db.version == v + 1 and rows(db) == [(5, "fig", 1.0)]


def test_create_unchecked_and_guarded_on_data_csv_open_it(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    v = db.version
    for guarded in (False, True):  # libnfs' nfs-cp creates its target GUARDED
        fid = fs.create(DATA_DIR_ID, "data.csv", Sattr3(mode=0o644), ROOT, guarded=guarded)
        assert fid == DATA_CSV_ID
    assert db.version == v
    fid = fs.create(DATA_DIR_ID, "data.csv", Sattr3(size=0), ROOT, guarded=False)
    fs.write(fid, 0, b"id,name,qty\n", StableHow.UNSTABLE, ROOT)
    fs.commit(fid, 0, 0, ROOT)
    clock.advance(10)
    fs.poll()
    assert db.version == v + 1 and rows(db) == []


def test_rename_of_any_scratch_file_onto_data_csv(fs: TableFs, db: DatabaseOps) -> None:
    fs.paths.mkdir("/upload")
    fs.paths.write_file("/upload/new.csv", b"id,name,qty\n1,apple,1.5\n")
    v = db.version
    fs.paths.rename("/upload/new.csv", "/data/data.csv")
    assert db.version == v + 1 and rows(db) == [(1, "apple", 1.5)]
    assert fs.paths.readdir("/upload") == []
    fs.paths.mkdir("/data/dir")
    with pytest.raises(NfsError) as e:
        fs.paths.rename("/data/dir", "/data/data.csv")
    assert status(e) == Nfsstat3.NFS3ERR_ISDIR
    assert db.version == v + 1


def test_bad_rename_keeps_the_scratch_file(fs: TableFs, db: DatabaseOps) -> None:
    fs.paths.write_file("/data/bad.csv", b"id,name,qty\nnot-a-number,x,1\n")
    v, before = db.version, rows(db)
    with pytest.raises(NfsError) as e:
        fs.paths.rename("/data/bad.csv", "/data/data.csv")
    assert status(e) == Nfsstat3.NFS3ERR_INVAL
    assert db.version == v and rows(db) == before
    assert "bad.csv" in fs.paths.readdir("/data")


def test_empty_file_empties_the_table(fs: TableFs, db: DatabaseOps, clock: Clock) -> None:
    v = db.version
    fs.paths.truncate("/data/data.csv", 0)
    assert db.version == v and fs.paths.read_file("/data/data.csv") == b""
    fs.paths.commit("/data/data.csv")  # truncate and close
    clock.advance(10)
    fs.poll()
    assert db.version == v + 1 and rows(db) == []
    assert fs.paths.read_file("/data/data.csv") == b"id,name,qty\n"


def test_a_truncation_alone_never_commits_at_idle(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """A slow ``cat x > data.csv`` truncates first; the table must not be emptied meanwhile."""
    v, before = db.version, rows(db)
    fs.paths.truncate("/data/data.csv", 0)
    clock.advance(120)
    fs.poll()
    assert db.version == v and rows(db) == before
    fs.paths.write_file("/data/data.csv", b"id,name,qty\n9,late,1\n", commit=False)
    clock.advance(120)
    fs.poll()
    assert db.version == v + 1 and rows(db) == [(9, "late", 1.0)]


def test_remove_data_csv_deletes_all_rows(fs: TableFs, db: DatabaseOps) -> None:
    v = db.version
    fs.paths.remove_file("/data/data.csv")
    assert db.version == v + 1 and rows(db) == []
    assert fs.paths.readdir("/data") == ["data.csv"]
    fs.paths.remove_file("/data/data.csv")  # already empty: no commit
    assert db.version == v + 1


def test_close_keeps_an_unfinished_write_for_the_next_start(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    v = db.version
    size = fs.getattr(DATA_CSV_ID).size
    fs.write(DATA_CSV_ID, size, b"6,f,6\n", StableHow.UNSTABLE, ROOT)
    fs.close()  # shutdown never commits an unfinished writer
    assert db.version == v
    again = _fs(db, clock)
    try:
        assert again.paths.read_file("/data/data.csv").endswith(b"6,f,6\n")  # its writer's view
        again.paths.commit("/data/data.csv")  # the writer closes the file after the restart
        clock.advance(10)
        again.poll()
        assert db.version == v + 1 and (6, "f", 6.0) in rows(db)
    finally:
        again.close()


# ================================================================ bad content


@pytest.mark.parametrize(
    "content",
    [
        b"id,name,qty\n1,apple\n",  # wrong column count
        b"id,name,qty\n1,apple,1.5,extra\n",
        b"id,name,qty\nx,apple,1.5\n",  # unparseable value
        b"1,apple,1.5\n2,banana,2\n",  # missing header
        b"name,id,qty\napple,1,1.5\n",  # wrong header
        b'id,name,qty\n1,"unterminated,1\n',
        b"id,name,qty\n\xff\xfe,1,1\n",  # not UTF-8
    ],
)
def test_bad_content_is_inval_and_changes_nothing(
    fs: TableFs, db: DatabaseOps, content: bytes
) -> None:
    v, before, shown = db.version, rows(db), fs.paths.read_file("/data/data.csv")
    with pytest.raises(NfsError) as e:
        fs.paths.write_file("/data/data.csv", content, truncate=True)
    assert status(e) == Nfsstat3.NFS3ERR_INVAL
    assert db.version == v and rows(db) == before
    assert fs.paths.read_file("/data/data.csv") == shown  # staged bytes dropped
    # the same through UNSTABLE: the WRITE that completes the bad line is refused (an
    # unterminated quote completes no record: it is refused when the edit applies)
    fs.paths.truncate("/data/data.csv", 0)
    with pytest.raises(NfsError) as e:
        fs.write(DATA_CSV_ID, 0, content + b"\n", StableHow.UNSTABLE, ROOT)
        fs.commit(DATA_CSV_ID, 0, 0, ROOT)
        fs.finish(DATA_CSV_ID, ROOT)
    assert status(e) == Nfsstat3.NFS3ERR_INVAL
    fs.commit(DATA_CSV_ID, 0, 0, ROOT)  # nothing staged any more
    assert db.version == v and fs.paths.read_file("/data/data.csv") == shown


@pytest.mark.parametrize(
    "content",
    [
        b"id,name,qty\n1,a,10\n1,b,20\n",  # duplicate key
        b"id,name,qty\n,a,10\n",  # NULL key
        b"id,name,qty\n1,a,99999999999\n",  # out of Int32 range
        b"id,name,qty\n1,a,1.5\n",  # not an integer
    ],
)
def test_keyed_bad_content(kfs: TableFs, keyed: DatabaseOps, content: bytes) -> None:
    v, before = keyed.version, rows(keyed)
    with pytest.raises(NfsError) as e:
        kfs.paths.write_file("/data/data.csv", content, truncate=True)
    assert status(e) == Nfsstat3.NFS3ERR_INVAL
    assert keyed.version == v and rows(keyed) == before


# ================================================================ permissions


class _Only:
    """An authorizer granting only some permissions."""

    def __init__(self, *granted: Permission) -> None:
        self.granted = set(granted)

    @property
    def user(self) -> str | None:
        return "limited"

    def check(self, permission: Permission, operation: str) -> None:
        if permission not in self.granted:
            raise PermissionDenied(f"{operation}: needs {permission}")

    def allows(self, permission: Permission) -> bool:
        return permission in self.granted


def _as(db: DatabaseOps, *granted: Permission) -> DatabaseOps:
    return DatabaseOps(DeltaLog.open(db.uri), engine=LocalEngine(), authorizer=_Only(*granted))


def test_read_only_user_gets_a_read_only_share(db: DatabaseOps, clock: Clock) -> None:
    fs = _fs(_as(db, "read"), clock)
    assert fs.capabilities().read_only
    assert fs.paths.read_file("/data/data.csv") == render_csv(db.to_arrow())
    assert fs.access(DATA_CSV_ID, ACCESS3_READ | ACCESS3_MODIFY, ROOT) == ACCESS3_READ
    v = db.version
    for call in (
        lambda: fs.paths.write_file("/data/data.csv", b"x\n", offset=0),
        lambda: fs.paths.truncate("/data/data.csv", 0),
        lambda: fs.paths.remove_file("/data/data.csv"),
    ):
        with pytest.raises(NfsError) as e:
            call()
        assert status(e) in (Nfsstat3.NFS3ERR_ROFS, Nfsstat3.NFS3ERR_ACCES)
    assert db.version == v


def test_user_without_read_cannot_read(db: DatabaseOps, clock: Clock) -> None:
    fs = _fs(_as(db, "write"), clock)
    with pytest.raises(NfsError) as e:
        fs.read(DATA_CSV_ID, 0, 10, ROOT)
    assert status(e) == Nfsstat3.NFS3ERR_ACCES


def test_writer_without_delete_permission_gets_acces(db: DatabaseOps, clock: Clock) -> None:
    fs = _fs(_as(db, "read", "write"), clock)
    v = db.version
    with pytest.raises(NfsError) as e:
        fs.paths.write_file("/data/data.csv", b"id,name,qty\n1,apple,1.5\n", truncate=True)
    assert status(e) == Nfsstat3.NFS3ERR_ACCES
    size = fs.getattr(DATA_CSV_ID).size
    fs.paths.write_file("/data/data.csv", b"4,d,4\n", offset=size)  # appends are fine
    assert db.version == v + 1


# ================================================================ scratch area


def test_scratch_files_have_posix_semantics(fs: TableFs, db: DatabaseOps) -> None:
    p = fs.paths
    v = db.version
    p.write_file("/notes.txt", b"hello world")
    p.write_file("/notes.txt", b"HELLO", offset=0)
    p.write_file("/notes.txt", b"!", offset=20)  # a hole
    assert p.read_file("/notes.txt") == b"HELLO world" + bytes(9) + b"!"
    assert p.getattr("/notes.txt").size == 21
    p.truncate("/notes.txt", 5)
    assert p.read_file("/notes.txt") == b"HELLO"
    p.mkdir("/data/tmp")
    p.rename("/notes.txt", "/data/tmp/n.txt")
    assert p.readdir("/") == ["data", "schema.sql", "versions", "changes.csv"]
    assert p.readdir("/data/tmp") == ["n.txt"]
    assert p.getattr("/data/tmp/n.txt").fileid >= SCRATCH_BASE
    p.remove_file("/data/tmp/n.txt")
    p.rmdir("/data/tmp")
    assert p.readdir("/data") == ["data.csv"]
    assert db.version == v


def test_scratch_names_cannot_shadow_the_tables_entries(fs: TableFs) -> None:
    p = fs.paths
    for call, want in (
        (lambda: fs.mkdir(ROOT_ID, "versions", Sattr3(), ROOT), Nfsstat3.NFS3ERR_EXIST),
        (lambda: fs.mkdir(DATA_DIR_ID, "data.csv", Sattr3(), ROOT), Nfsstat3.NFS3ERR_EXIST),
        (
            lambda: fs.create(ROOT_ID, "schema.sql", Sattr3(), ROOT, guarded=True),
            Nfsstat3.NFS3ERR_EXIST,
        ),
        (
            lambda: fs.create_exclusive(DATA_DIR_ID, "data.csv", b"v" * 8, ROOT),
            Nfsstat3.NFS3ERR_EXIST,
        ),
        (lambda: p.rmdir("/data"), Nfsstat3.NFS3ERR_ACCES),
        (lambda: p.rmdir("/versions"), Nfsstat3.NFS3ERR_ACCES),
        (lambda: p.rename("/data", "/d2"), Nfsstat3.NFS3ERR_ACCES),
        (lambda: p.rename("/data/data.csv", "/data/x.csv"), Nfsstat3.NFS3ERR_ACCES),
    ):
        with pytest.raises(NfsError) as e:
            call()
        assert status(e) == want
    p.write_file("/x.txt", b"x")
    with pytest.raises(NfsError) as e:
        p.rename("/x.txt", "/schema.sql")
    assert status(e) == Nfsstat3.NFS3ERR_ACCES
    p.rename("/x.txt", "/data.csv")  # /data.csv (not /data/data.csv) is just a file
    assert p.read_file("/data.csv") == b"x"


def test_scratch_permissions_follow_the_caller(fs: TableFs) -> None:
    alice = PathOps(fs, CallContext.local(uid=1000, gid=1000))
    bob = PathOps(fs, CallContext.local(uid=1001, gid=1001))
    alice.write_file("/data/alice.txt", b"a")
    fs.setattr(alice.resolve("/data/alice.txt"), Sattr3(mode=0o600), alice.ctx)
    with pytest.raises(NfsError) as e:
        bob.read_file("/data/alice.txt")
    assert status(e) == Nfsstat3.NFS3ERR_ACCES
    assert fs.getattr(alice.resolve("/data/alice.txt")).uid == 1000


# ================================================================ handles


def test_generations(fs: TableFs, db: DatabaseOps, clock: Clock) -> None:
    gens = {fid: fs.generation(fid) for fid in (ROOT_ID, DATA_DIR_ID, DATA_CSV_ID, SCHEMA_ID)}
    v1 = FileId(fs.paths.resolve("/versions/1/data.csv"))
    gens[v1] = fs.generation(v1)
    fs.paths.write_file("/data/tmp.txt", b"x")
    scratch = fs.paths.resolve("/data/tmp.txt")
    scratch_gen = fs.generation(scratch)
    # the same boot: every handle stays valid across our own commits
    db.insert({"id": 7, "name": "x", "qty": 1.0})
    assert {fid: fs.generation(fid) for fid in gens} == gens
    # a restart, table unchanged since that boot began: handles survive, scratch ones too
    restarted = _fs(db, clock)
    again = _fs(db, clock)
    assert {fid: again.generation(fid) for fid in gens} == {
        fid: restarted.generation(fid) for fid in gens
    }
    assert restarted.generation(scratch) == scratch_gen  # the scratch area is durable
    # a restart after a change: data.csv and schema.sql are stale, the rest is not
    db.insert({"id": 8, "name": "y", "qty": 1.0})
    changed = _fs(db, clock)
    assert changed.generation(DATA_CSV_ID) != restarted.generation(DATA_CSV_ID)
    assert changed.generation(SCHEMA_ID) != restarted.generation(SCHEMA_ID)
    assert changed.generation(ROOT_ID) == restarted.generation(ROOT_ID)
    assert changed.generation(v1) == restarted.generation(v1)
    for unknown in (FileId(999), FileId(SCRATCH_BASE + 12345), FileId((1 << 40) + 2 * 500)):
        with pytest.raises(NfsError) as e:
            fs.generation(unknown)
        assert status(e) == Nfsstat3.NFS3ERR_STALE


# ================================================================ concurrency


def test_concurrent_appends_and_reads_lose_nothing(fs: TableFs, db: DatabaseOps) -> None:
    errors: list[BaseException] = []

    def append(i: int) -> None:
        try:
            size = fs.getattr(DATA_CSV_ID).size
            fs.write(DATA_CSV_ID, size, f"{100 + i},t{i},1\n".encode(), StableHow.FILE_SYNC, ROOT)
        except BaseException as err:  # noqa: BLE001 - collected for the main thread
            errors.append(err)

    def read() -> None:
        for _ in range(5):
            fs.paths.read_file("/data/data.csv")

    threads = [threading.Thread(target=append, args=(i,)) for i in range(6)]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(rows(db)) == 3 + 6


def test_every_type_round_trips_through_data_csv(tmp_path: Path, clock: Clock) -> None:
    schema = {
        "i8": "Int8",
        "u64": "UInt64",
        "f32": "Float32",
        "dec": "Decimal128(10,2)",
        "s": "String",
        "b": "Binary",
        "flag": "Boolean",
        "d": "Date32",
        "ts": "Timestamp",
        "ntz": "TimestampNtz",
        "l": "List<Int64>",
        "m": "Map<String,Int64>",
        "st": "Struct<a:Int32,b:String>",
    }
    db = DatabaseOps.create(tmp_path / "types", schema, engine="local")
    db.insert(
        [
            {
                "i8": -5,
                "u64": 18446744073709551615,
                "f32": 0.1,
                "dec": "12.30",
                "s": 'a "quoted", multi\nline',
                "b": b"\x00\xff",
                "flag": True,
                "d": "2024-02-29",
                "ts": "2024-01-02T03:04:05.123456Z",
                "ntz": "2024-01-02T03:04:05",
                "l": [1, None, 3],
                "m": [("k", 1)],
                "st": {"a": 1, "b": None},
            },
            dict.fromkeys(schema),
        ]
    )
    fs = _fs(db, clock)
    v = db.version
    content = fs.paths.read_file("/data/data.csv")
    table = db.to_arrow()
    assert parse_csv(content, table.schema).equals(table)
    fs.paths.write_file("/data/data.csv", content, truncate=True)  # same rows: no commit
    assert db.version == v
    edited = content.replace(b"-5,", b"-6,", 1)
    fs.paths.write_file("/data/data.csv", edited, truncate=True)
    assert db.version == v + 1
    assert sorted(db.to_arrow().column("i8").to_pylist(), key=repr) == sorted([-6, None], key=repr)


def test_arrow_table_written_through_the_fs_equals_parse(db: DatabaseOps, fs: TableFs) -> None:
    new = pa.table(
        {
            "id": pa.array([5, 6], pa.int64()),
            "name": pa.array(["x", None], pa.string()),
            "qty": pa.array([None, 1e20], pa.float64()),
        }
    )
    fs.paths.write_file("/data/data.csv", render_csv(new), truncate=True)
    assert rows(db) == sorted([(5, "x", None), (6, None, 1e20)], key=repr)
