"""Smaller NFS write fixes (issue 20, items 4 and 7), each a test that failed before.

Sans-IO through TableFs: two writers are two CallContexts (two client addresses), the
clock is injected.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nfs.protocol.nfs3 import Nfsstat3
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import NfsError
from nfs.table.region import Region, changed_pieces, changed_regions, common_prefix
from nfs.table.staging import BytesBase
from nfs.table.tablefs import PathOps, TableFs
from posixlake import DatabaseOps
from tests.nfs.test_nfs_writes import Clock

A = CallContext.local(peer="10.0.0.1:700")
B = CallContext.local(peer="10.0.0.2:701")


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _table(tmp_path: Path, name: str, key: str | None) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / name, {"id": "Int64", "name": "String"}, primary_key=key, engine="local"
    )
    d.insert([{"id": i, "name": f"n{i}"} for i in range(1, 6)])
    return d


@pytest.fixture(params=["keyed", "plain"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> DatabaseOps:
    return _table(tmp_path, request.param, "id" if request.param == "keyed" else None)


@pytest.fixture
def fs(db: DatabaseOps, clock: Clock, tmp_path: Path) -> Iterator[TableFs]:
    f = TableFs(db, clock=clock, idle_timer=False, state_dir=tmp_path / "state")
    yield f
    f.close()


def rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in db.to_arrow().to_pylist())


# ---------------------------------------------------------------- the full-parse path


def test_a_rewrite_with_a_quoted_header_is_diffed_against_the_writers_base(
    fs: TableFs, db: DatabaseOps
) -> None:
    """A changed header (here quoted) makes the content parsed whole, not by regions: it
    is still diffed against what the writer read, so another writer's change of a row it
    left alone survives (diffed against the current version, row 4 would be reverted)."""
    a = PathOps(fs, A)
    seen = a.read_file("/data/data.csv")
    db.update("id = 4", {"name": "theirs"})  # B, through the API, meanwhile
    edited = seen.replace(b"id,name\n", b'"id","name"\n').replace(b"1,n1\n", b"1,mine\n")
    a.write_file("/data/data.csv", edited, truncate=True)
    assert rows(db) == [(1, "mine"), (2, "n2"), (3, "n3"), (4, "theirs"), (5, "n5")]


# ---------------------------------------------------------------- view types after a MERGE


@pytest.fixture
def keyed(tmp_path: Path) -> DatabaseOps:
    return _table(tmp_path, "keyed", "id")


@pytest.fixture
def kfs(keyed: DatabaseOps, clock: Clock, tmp_path: Path) -> Iterator[TableFs]:
    f = TableFs(keyed, clock=clock, idle_timer=False, state_dir=tmp_path / "kstate")
    yield f
    f.close()


def _rewrite_once(kfs: TableFs) -> bytes:
    """A keyed rewrite: delta-rs' MERGE writes its new file with string_view columns."""
    a = PathOps(kfs, A)
    seen = a.read_file("/data/data.csv")
    a.write_file("/data/data.csv", seen.replace(b"2,n2\n", b"2,x2\n"), truncate=True)
    return a.read_file("/data/data.csv")


def test_content_repeating_a_key_after_a_merge_names_the_key(
    kfs: TableFs, keyed: DatabaseOps
) -> None:
    seen = _rewrite_once(kfs)
    v = keyed.version
    with pytest.raises(NfsError) as exc:
        PathOps(kfs, A).write_file(
            "/data/data.csv", seen.replace(b"2,x2\n", b"2,x2\n2,again\n"), truncate=True
        )
    assert exc.value.status == Nfsstat3.NFS3ERR_INVAL
    assert "repeats key(s): id=2" in str(exc.value)
    assert keyed.version == v


def test_appending_a_line_the_table_holds_after_a_merge_is_skipped(
    kfs: TableFs, keyed: DatabaseOps
) -> None:
    seen = _rewrite_once(kfs)
    v = keyed.version
    PathOps(kfs, A).write_file("/data/data.csv", b"2,x2\n", offset=len(seen))  # resent
    assert keyed.version == v
    assert rows(keyed) == [(1, "n1"), (2, "x2"), (3, "n3"), (4, "n4"), (5, "n5")]


# ---------------------------------------------------------------- cat more.csv >> data.csv


@pytest.mark.parametrize(
    "more",
    [b"id,name\r\n6,n6\r\n", b"\xef\xbb\xbfid,name\n6,n6\n", b"\xef\xbb\xbfid,name\r\n6,n6\r\n"],
    ids=["crlf", "bom", "bom-crlf"],
)
def test_an_appended_header_line_is_skipped_with_crlf_or_a_bom(
    tmp_path: Path, clock: Clock, more: bytes
) -> None:
    """A text table (every column a string) would take the header line for a row."""
    db = DatabaseOps.create(tmp_path / "text", {"id": "String", "name": "String"}, engine="local")
    db.insert([{"id": "1", "name": "n1"}])
    fs = TableFs(db, clock=clock, idle_timer=False, state_dir=tmp_path / "state")
    try:
        a = PathOps(fs, A)
        size = len(a.read_file("/data/data.csv"))
        a.write_file("/data/data.csv", more, offset=size)
        assert rows(db) == [("1", "n1"), ("6", "n6")]
    finally:
        fs.close()


# ---------------------------------------------------------------- pairing a large region


def test_pairing_a_large_region_goes_on_after_a_quoted_line_feed() -> None:
    """``sed -i`` changing every tenth row of a file with one value holding a line feed:
    the pieces to parse are the changed rows (about a tenth), not the rest of the file."""
    rows_ = [b"%d,name %d\n" % (i, i) for i in range(150_000)]
    rows_[3] = b'3,"two\nlines"\n'
    base = b"id,name\n" + b"".join(rows_)
    edited = [r.replace(b"name", b"NAME") if i % 10 == 0 else r for i, r in enumerate(rows_)]
    content = b"id,name\n" + b"".join(edited)
    same, quotes = common_prefix(BytesBase(content), BytesBase(base))
    regions = changed_regions(BytesBase(content), BytesBase(base), same, quotes)
    assert regions is not None
    pieces = [p for r in regions for p in changed_pieces(BytesBase(content), BytesBase(base), r)]
    old = b"".join(p[0] for p in pieces)
    new = b"".join(p[1] for p in pieces)
    assert len(old) + len(new) < len(base) // 4  # about 2 x 1/10 of it
    # the pieces differ as the files do: the changed rows, whole records
    assert sorted(old.splitlines()) == sorted(r.rstrip(b"\n") for r in rows_[::10])
    assert sorted(new.splitlines()) == sorted(r.rstrip(b"\n") for r in edited[::10])


def test_records_keep_a_quoted_line_feed_inside() -> None:
    base, content = b'a,1\nb,"x\ny"\nc,4\n' * 100_000, b'a,1\nb,"x\ny"\nc,3\n' * 100_000
    region = Region(0, len(base), 0, len(content))
    pieces = list(changed_pieces(BytesBase(content), BytesBase(base), region))
    assert all(b'"x\ny"' not in old for old, _ in pieces)  # only the c rows differ
    assert b"".join(new for _, new in pieces) == b"c,3\n" * 100_000


# ---------------------------------------------------------------- others' commits, in time


def test_another_process_commit_is_visible_within_the_ttl_after_our_own_write(
    kfs: TableFs, keyed: DatabaseOps, clock: Clock, tmp_path: Path
) -> None:
    """Our own write moves the version at once; it must not restart the version_ttl
    (0.5 s) without a look at the log: a commit another process made meanwhile shows
    at the first call a ttl after the last look, however late that call comes."""
    a = PathOps(kfs, A)
    seen = a.read_file("/data/data.csv")
    a.write_file("/data/data.csv", b"6,n6\n", offset=len(seen))  # our own commit
    other = DatabaseOps.open(tmp_path / "keyed", engine="local")  # another process
    other.insert([{"id": 7, "name": "other"}])
    clock.now += 1.0  # the next call comes a second later
    assert b"7,other\n" in PathOps(kfs, B).read_file("/data/data.csv")


# ---------------------------------------------------------------- refused writes are logged


def test_a_refused_write_is_logged_at_warning(
    fs: TableFs, db: DatabaseOps, caplog: pytest.LogCaptureFixture
) -> None:
    """Without -v the server logs warnings only: a refused write must be one (nfs-cp of
    bad content said "copied" and the server said nothing)."""
    caplog.set_level(logging.WARNING)
    v = db.version
    with pytest.raises(NfsError) as exc:
        PathOps(fs, A).write_file("/data/data.csv", b"id,name\nx,1\n", truncate=True)
    assert exc.value.status == Nfsstat3.NFS3ERR_INVAL and db.version == v
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert refused and all(r.levelno == logging.WARNING for r in refused)
