"""/changes.csv and /versions/<N>/changes.csv of a TableFs, in process (no kernel).

changes.csv starts with the commit the server showed at start and grows with every
commit after it, from any writer: the API, an NFS edit, delta-rs from outside. What a
client has read never changes: each look is the previous bytes plus new lines, and
its size and mtime grow with each commit. Both kinds of change file are read-only.
Time is an injected clock (another writer's commit shows once ``version_ttl`` passed).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from nfs.protocol.nfs3 import Ftype3, Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import ACCESS3_MODIFY, ACCESS3_READ, NfsError
from nfs.table.tablefs import CHANGES_ID, ROOT_ID, PathOps, TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import parse_csv

ROOT = CallContext.local()
HEADER = b"_commit_version,_commit_timestamp,_change_type,id,name\n"


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _table(path: Path, *, primary_key: str | None = None) -> DatabaseOps:
    db = DatabaseOps.create(
        path, {"id": "Int64", "name": "String"}, primary_key=primary_key, engine="local"
    )
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "name": "b, c"}])
    return db


def _fs(db: DatabaseOps, tmp_path: Path, clock: Clock) -> TableFs:
    return TableFs(
        db,
        clock=clock,
        idle_timer=False,
        state_dir=tmp_path / "state",
        segment_cache=tmp_path / "segments",
    )


def _rows(data: bytes) -> list[tuple[int, str, int, str]]:
    """(version, change type, id, name) of each line of a change CSV."""
    schema = pa.schema(
        [
            ("_commit_version", pa.int64()),
            ("_commit_timestamp", pa.timestamp("us", tz="UTC")),
            ("_change_type", pa.string()),
            ("id", pa.int64()),
            ("name", pa.string()),
        ]
    )
    t = parse_csv(data, schema)
    cols = [t.column(n).to_pylist() for n in ("_commit_version", "_change_type", "id", "name")]
    return list(zip(*cols, strict=True))


class Watcher:
    """Reads changes.csv as a ``tail -f`` does and checks every look extends the last."""

    def __init__(self, p: PathOps) -> None:
        self.p = p
        self.seen = b""
        self.size = 0
        self.mtime = 0

    def look(self) -> bytes:
        """Return the lines new since the last look (asserting nothing shown changed)."""
        attrs = self.p.getattr("/changes.csv")
        data = self.p.read_file("/changes.csv")
        assert attrs.size == len(data)
        assert data.startswith(self.seen), "bytes already shown changed"
        assert attrs.size >= self.size
        new = data[len(self.seen) :]
        self.seen, self.size = data, attrs.size
        return new

    def commit_landed(self) -> bytes:
        """Look after a commit: size and mtime/ctime must have grown; return the new lines."""
        before = self.mtime
        new = self.look()
        attrs = self.p.getattr("/changes.csv")
        mtime = attrs.mtime.to_ns()
        assert mtime > before and attrs.ctime.to_ns() > before, "the change attribute did not grow"
        assert new, "the size did not grow"
        self.mtime = mtime
        return new


def test_changes_csv_grows_with_every_writer(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    clock = Clock()
    fs = _fs(db, tmp_path, clock)
    p = fs.paths
    assert "changes.csv" in p.readdir("/")
    w = Watcher(p)
    # it starts with the commit the server showed at start (v1), after its header
    first = w.commit_landed()
    assert first.startswith(HEADER)
    assert _rows(w.seen) == [(1, "insert", 1, "a"), (1, "insert", 2, "b, c")]

    db.insert([{"id": 3, "name": "API"}])  # the API, through the same handle: at once
    assert _rows(HEADER + w.commit_landed()) == [(2, "insert", 3, "API")]

    p.write_file("/data/data.csv", b"4,NFS\n", offset=p.getattr("/data/data.csv").size)
    assert db.version == 3
    assert _rows(HEADER + w.commit_landed()) == [(3, "insert", 4, "NFS")]

    # an NFS rewrite (delete a row) is a delete
    p.write_file("/data/data.csv", b"id,name\n1,a\n3,API\n4,NFS\n", truncate=True)
    assert db.version == 4
    assert _rows(HEADER + w.commit_landed()) == [(4, "delete", 2, "b, c")]

    # delta-rs from outside: seen once the version check is due
    write_deltalake(db.uri, pa.table({"id": [5], "name": ["outside"]}), mode="append")
    assert w.look() == b""  # not yet: the version shown is trusted for version_ttl
    clock.advance(1)
    assert _rows(HEADER + w.commit_landed()) == [(5, "insert", 5, "outside")]

    assert _rows(w.seen) == [
        (1, "insert", 1, "a"),
        (1, "insert", 2, "b, c"),
        (2, "insert", 3, "API"),
        (3, "insert", 4, "NFS"),
        (4, "delete", 2, "b, c"),
        (5, "insert", 5, "outside"),
    ]
    fs.close()


def test_a_commit_without_rows_moves_the_change_attribute(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    db.insert([{"id": 3, "name": "another file"}])
    fs = _fs(db, tmp_path, Clock())
    before = fs.paths.getattr("/changes.csv")
    db.optimize.compact()  # dataChange=false: no row changed
    assert db.version == 3
    after = fs.paths.getattr("/changes.csv")
    assert after.size == before.size
    assert after.mtime.to_ns() > before.mtime.to_ns()
    fs.close()


def test_reads_at_any_offset_and_a_restart_serves_the_same_handle(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    fs = _fs(db, tmp_path, Clock())
    whole = fs.paths.read_file("/changes.csv")
    assert fs.paths.read_file("/changes.csv", offset=5, count=7) == whole[5:12]
    data, eof = fs.read(CHANGES_ID, len(whole), 10, ROOT)
    assert (bytes(data), eof) == (b"", True)
    gen = fs.generation(CHANGES_ID)
    fs.close()
    again = _fs(db, tmp_path, Clock())  # the same table, the same first version
    assert again.generation(CHANGES_ID) == gen
    assert again.paths.read_file("/changes.csv") == whole
    again.close()


def test_new_columns_start_a_new_log_with_a_new_handle(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    fs = _fs(db, tmp_path, Clock())
    old_gen = fs.generation(CHANGES_ID)
    fs.paths.read_file("/changes.csv")
    db.insert([{"id": 3, "name": "x", "qty": 7}], schema_mode="merge")
    new_gen = fs.generation(CHANGES_ID)
    assert new_gen != old_gen  # a client holding the old handle gets NFS3ERR_STALE
    data = fs.paths.read_file("/changes.csv")
    assert data.splitlines()[0] == b"_commit_version,_commit_timestamp,_change_type,id,name,qty"
    assert data.splitlines()[1:] == [b"2," + data.splitlines()[1].split(b",")[1] + b",insert,3,x,7"]
    fs.close()


def test_versions_hold_one_commit_each(tmp_path: Path) -> None:
    db = _table(tmp_path / "t", primary_key="id")
    db.delete("id = 1")
    fs = _fs(db, tmp_path, Clock())
    p = fs.paths
    assert p.readdir("/versions/1") == ["data.csv", "changes.csv"]
    assert p.read_file("/versions/0/changes.csv") == HEADER  # CREATE: no rows
    assert _rows(p.read_file("/versions/1/changes.csv")) == [
        (1, "insert", 1, "a"),
        (1, "insert", 2, "b, c"),
    ]
    last = db.version
    assert _rows(p.read_file(f"/versions/{last}/changes.csv")) == [(last, "delete", 1, "a")]
    assert p.getattr(f"/versions/{last}/changes.csv").size == len(
        p.read_file(f"/versions/{last}/changes.csv")
    )
    with pytest.raises(NfsError) as err:
        p.resolve(f"/versions/{last + 1}/changes.csv")
    assert err.value.status == Nfsstat3.NFS3ERR_NOENT
    fs.close()


def _status(call: object) -> Nfsstat3:
    assert callable(call)
    with pytest.raises(NfsError) as err:
        call()
    return err.value.status


def test_change_files_are_read_only(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    fs = _fs(db, tmp_path, Clock())
    p = fs.paths
    p.write_file("/notes.txt", b"x\n")
    version = db.version
    shown = p.read_file("/changes.csv")
    for path in ("/changes.csv", "/versions/1/changes.csv"):
        fid = p.resolve(path)
        assert fs.getattr(fid, ROOT).type == Ftype3.NF3REG
        assert fs.getattr(fid, ROOT).mode & 0o777 == 0o444
        assert fs.access(fid, ACCESS3_READ | ACCESS3_MODIFY, ROOT) == ACCESS3_READ
        write = lambda fid=fid: fs.write(fid, 0, b"1,x\n", StableHow.FILE_SYNC, ROOT)  # noqa: E731
        assert _status(write) == Nfsstat3.NFS3ERR_ROFS
        truncate = lambda fid=fid: fs.setattr(fid, Sattr3(size=0), ROOT)  # noqa: E731
        assert _status(truncate) == Nfsstat3.NFS3ERR_ROFS
    assert _status(lambda: p.remove_file("/changes.csv")) == Nfsstat3.NFS3ERR_ACCES
    assert _status(lambda: p.remove_file("/versions/1/changes.csv")) == Nfsstat3.NFS3ERR_ROFS
    assert _status(lambda: p.rename("/changes.csv", "/c.csv")) == Nfsstat3.NFS3ERR_ACCES
    assert _status(lambda: p.rename("/notes.txt", "/changes.csv")) == Nfsstat3.NFS3ERR_ACCES
    create = lambda: fs.create(ROOT_ID, "changes.csv", Sattr3(size=0), ROOT, guarded=False)  # noqa: E731
    assert _status(create) == Nfsstat3.NFS3ERR_ROFS
    assert db.version == version
    assert p.read_file("/changes.csv") == shown
    fs.close()


@settings(max_examples=15, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["insert", "delete", "nfs_append", "none"]), st.integers(0, 5)),
        min_size=1,
        max_size=6,
    )
)
def test_every_look_extends_the_last(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]
) -> None:
    """Any sequence of commits and looks: each look is the last plus whole new lines, and
    the lines are exactly the feed's changes of every commit since the start."""
    tmp_path = tmp_path_factory.mktemp("look")
    db = _table(tmp_path / "t")
    fs = _fs(db, tmp_path, Clock())
    w = Watcher(fs.paths)
    w.look()
    next_id = 10
    for kind, n in steps:
        if kind == "insert":
            db.insert([{"id": next_id + i, "name": f"n{i}"} for i in range(n + 1)])
        elif kind == "delete":
            db.delete(f"id % 3 = {n % 3}")
        elif kind == "nfs_append":
            size = fs.paths.getattr("/data/data.csv").size
            fs.paths.write_file("/data/data.csv", f"{next_id},nfs\n".encode(), offset=size)
        next_id += 10
        w.look()
    want: list[tuple[int, str, int, str]] = []
    with db.subscribe(from_version=1) as feed:
        for batch in feed.available():
            t = batch.to_table()
            want += list(
                zip(
                    t.column("_commit_version").to_pylist(),
                    t.column("_change_type").to_pylist(),
                    t.column("id").to_pylist(),
                    t.column("name").to_pylist(),
                    strict=True,
                )
            )
    assert _rows(w.seen) == want
    fs.close()


def test_changes_vacuumed_before_anyone_looked_end_the_file_with_eio(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    fs = _fs(db, tmp_path, Clock())
    shown = fs.paths.read_file("/changes.csv")
    db.insert([{"id": 3, "name": "c"}])  # v2 adds file F
    db.delete_rows_where("id = 3")  # v3 removes F
    db.vacuum(0)  # F is deleted: the changes of v2 cannot be read any more
    for call in (
        lambda: fs.paths.getattr("/changes.csv"),
        lambda: fs.paths.read_file("/changes.csv"),
        lambda: fs.paths.read_file("/changes.csv", count=len(shown)),
    ):
        assert _status(call) == Nfsstat3.NFS3ERR_IO  # never a silent gap
    # one commit's file says it is gone; the others still read
    assert _status(lambda: fs.paths.getattr("/versions/2/changes.csv")) == Nfsstat3.NFS3ERR_NOENT
    assert _rows(fs.paths.read_file("/versions/1/changes.csv"))[0] == (1, "insert", 1, "a")
    fs.close()


def test_a_table_restored_onto_its_path_starts_a_new_file(tmp_path: Path) -> None:
    db = _table(tmp_path / "t")
    db.backup(tmp_path / "bk")  # v1: rows 1 and 2
    db.insert([{"id": 3, "name": "gone"}])  # v2
    clock = Clock()
    fs = _fs(db, tmp_path, clock)
    old_gen = fs.generation(CHANGES_ID)
    assert _rows(fs.paths.read_file("/changes.csv")) == [(2, "insert", 3, "gone")]
    DatabaseOps.restore(tmp_path / "bk", db.uri, overwrite=True)  # another process
    clock.advance(1)  # the view checks the log after its version_ttl
    assert fs.generation(CHANGES_ID) != old_gen  # old handles: NFS3ERR_STALE
    restored = fs.paths.read_file("/changes.csv")
    assert restored.startswith(HEADER)
    assert _rows(restored) == [(1, "insert", 1, "a"), (1, "insert", 2, "b, c")]
    fs.close()
