"""What a real NFSv3 client sends beyond our own call sequences (issue: NFS edits under a
real client's traffic), sans-IO through TableFs as in test_nfs_writes.py.

- every open sends a close-to-open GETATTR, and a LOOKUP or ACCESS can come between a
  read and a rename: none of them moves the base of the client's edit (its READs do);
- READs of one file served from two versions: the edit is refused (EIO), nothing commits;
- the Linux client COMMITs during writeback while the program still writes, and a slow
  producer pauses: neither applies a prefix; WRITEs arrive out of order: a hole is never
  applied;
- after a restart the client resends WRITEs and COMMIT of an edit the crashed server had
  committed: no second change, with or without other commits in between.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import NfsError
from nfs.table.tablefs import DATA_CSV_ID, DATA_DIR_ID, PathOps, TableFs
from posixlake import DatabaseOps

A = CallContext.local(peer="10.0.0.1:700")
B = CallContext.local(peer="10.0.0.2:701")
IDLE = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "state"


def _fs(db: DatabaseOps, clock: Clock, state: Path) -> TableFs:
    return TableFs(db, clock=clock, idle_timer=False, state_dir=state, idle_seconds=IDLE)


def _table(tmp_path: Path, keyed: bool, n: int = 5) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / ("keyed" if keyed else "plain"),
        {"id": "Int64", "name": "String"},
        primary_key="id" if keyed else None,
        engine="local",
    )
    d.insert([{"id": i, "name": f"n{i}"} for i in range(1, n + 1)])
    return d


@pytest.fixture(params=["plain", "keyed"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> DatabaseOps:
    return _table(tmp_path, request.param == "keyed")


@pytest.fixture
def fs(db: DatabaseOps, clock: Clock, state: Path) -> Iterator[TableFs]:
    f = _fs(db, clock, state)
    yield f
    f.close()


def rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in db.to_arrow().to_pylist())


def quiet(fs: TableFs, clock: Clock) -> None:
    """The writers go quiet for the idle period: the ones that are done apply."""
    clock.now += IDLE + 1
    fs.poll()


def crash(fs: TableFs) -> None:
    """Stop ``fs`` as a kill -9 would (see test_nfs_writes.crash)."""
    for w in fs._writers.values():
        if w.journal is not None:
            w.journal.close()
    fs._journals.release()


def rewrite(fs: TableFs, ctx: CallContext, content: bytes, chunk: int = 1 << 20) -> None:
    """``cat x > data.csv`` as the Linux client sends it: SETATTR 0, UNSTABLE WRITEs, COMMIT."""
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), ctx)
    for off in range(0, len(content), chunk):
        fs.write(DATA_CSV_ID, off, content[off : off + chunk], StableHow.UNSTABLE, ctx)
    fs.commit(DATA_CSV_ID, 0, 0, ctx)


# ---------------------------------------------------------------- the base is what was read


def test_a_close_to_open_getattr_does_not_move_the_base(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """A reads; B updates row 4 (acknowledged); A's open(O_TRUNC) sends its GETATTR, then
    A writes back its edit of row 1: row 4 keeps B's value (it was reverted, keyed or not)."""
    seen = PathOps(fs, A).read_file("/data/data.csv")
    db.update("id = 4", {"name": "B"})
    fs.getattr(DATA_CSV_ID, A)  # close-to-open
    fs.access(DATA_CSV_ID, 0x3F, A)
    rewrite(fs, A, seen.replace(b"1,n1", b"1,A"))
    quiet(fs, clock)
    assert rows(db) == [(1, "A"), (2, "n2"), (3, "n3"), (4, "B"), (5, "n5")]


def test_lookups_and_getattrs_between_seds_read_and_its_rename_do_not_move_the_base(
    fs: TableFs, db: DatabaseOps
) -> None:
    tmp = fs.create_exclusive(DATA_DIR_ID, "sedX", b"\x01" * 8, A)
    content = PathOps(fs, A).read_file("/data/data.csv")
    db.update("id = 4", {"name": "B"})
    fs.write(tmp, 0, content.replace(b"2,n2", b"2,sed"), StableHow.FILE_SYNC, A)
    fs.lookup(DATA_DIR_ID, "data.csv", A)
    fs.getattr(DATA_CSV_ID, A)
    fs.rename(DATA_DIR_ID, "sedX", DATA_DIR_ID, "data.csv", A)
    assert rows(db) == [(1, "n1"), (2, "sed"), (3, "n3"), (4, "B"), (5, "n5")]


def test_a_file_read_from_two_versions_cannot_be_written_back(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """A reads data.csv in two READs while another writer deletes a row in between: its
    bytes come from two versions, and writing them back would resurrect that row and
    delete another. The edit is refused with EIO; nothing commits."""
    size = fs.getattr(DATA_CSV_ID, A).size
    first, _ = fs.read(DATA_CSV_ID, 0, 20, A)
    db.delete_rows_where("id = 2")
    rest, _ = fs.read(DATA_CSV_ID, 20, size, A)
    torn = bytes(first) + bytes(rest)
    v, before = db.version, rows(db)
    with pytest.raises(NfsError) as e:
        rewrite(fs, A, torn.replace(b"5,n5", b"5,A"))
    assert Nfsstat3(e.value.status) == Nfsstat3.NFS3ERR_IO and "several versions" in str(e.value)
    quiet(fs, clock)
    assert db.version == v and rows(db) == before
    # read again, whole: the edit goes through
    seen = PathOps(fs, A).read_file("/data/data.csv")
    rewrite(fs, A, seen.replace(b"5,n5", b"5,A"))
    quiet(fs, clock)
    assert rows(db) == [(1, "n1"), (3, "n3"), (4, "n4"), (5, "A")]


def test_a_sed_from_two_versions_is_refused(fs: TableFs, db: DatabaseOps) -> None:
    tmp = fs.create_exclusive(DATA_DIR_ID, "sedT", b"\x02" * 8, A)
    first, _ = fs.read(DATA_CSV_ID, 0, 12, A)
    db.update("id = 5", {"name": "B"})
    rest, _ = fs.read(DATA_CSV_ID, 12, 1 << 20, A)
    fs.write(tmp, 0, bytes(first) + bytes(rest), StableHow.FILE_SYNC, A)
    v = db.version
    with pytest.raises(NfsError) as e:
        fs.rename(DATA_DIR_ID, "sedT", DATA_DIR_ID, "data.csv", A)
    assert Nfsstat3(e.value.status) == Nfsstat3.NFS3ERR_IO
    assert db.version == v


def test_a_read_of_a_whole_newer_version_replaces_an_older_longer_one(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """A read v1, then the table shrank and A read it again whole (the last READ ends the
    file): what A holds is the newer version alone, not a torn mix."""
    PathOps(fs, A).read_file("/data/data.csv")
    db.delete_rows_where("id >= 4")
    seen = PathOps(fs, A).read_file("/data/data.csv")
    rewrite(fs, A, seen.replace(b"1,n1", b"1,A"))
    quiet(fs, clock)
    assert rows(db) == [(1, "A"), (2, "n2"), (3, "n3")]


# ---------------------------------------------------------------- one edit, one commit


def test_a_writeback_commit_mid_edit_applies_no_prefix(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """A 10-row rewrite with a typo on line 9; the client COMMITs after the first lines
    (writeback) while the program still writes: nothing is applied at that COMMIT, the
    WRITE that completes the bad line is refused, and the table keeps all its rows."""
    v, before = db.version, rows(db)
    lines = [b"id,name\n"] + [b"%d,r%d\n" % (i, i) for i in range(1, 11)]
    lines[9] = b"x8,typo\n"
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    head = b"".join(lines[:4])
    fs.write(DATA_CSV_ID, 0, head, StableHow.UNSTABLE, A)
    fs.commit(DATA_CSV_ID, 0, 0, A)  # writeback
    assert db.version == v
    clock.now += 1  # a pause shorter than the idle period
    fs.poll()
    assert db.version == v
    with pytest.raises(NfsError) as e:
        fs.write(DATA_CSV_ID, len(head), b"".join(lines[4:]), StableHow.UNSTABLE, A)
    assert Nfsstat3(e.value.status) == Nfsstat3.NFS3ERR_INVAL and "line 10" in str(e.value)
    quiet(fs, clock)
    assert db.version == v and rows(db) == before


def test_a_slow_producer_pausing_less_than_the_idle_period_is_one_version(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """``producer | cat > data.csv`` with pauses, writeback COMMITs in each: one version."""
    v = db.version
    content = b"id,name\n" + b"".join(b"%d,p%d\n" % (i, i) for i in range(1, 2001))
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    pos = 0
    for piece in (content[:5000], content[5000:5003], content[5003:15000], content[15000:]):
        fs.write(DATA_CSV_ID, pos, piece, StableHow.UNSTABLE, A)
        pos += len(piece)
        fs.commit(DATA_CSV_ID, 0, 0, A)
        clock.now += IDLE - 0.5  # paused, not for the idle period
        fs.poll()
        assert db.version == v
    quiet(fs, clock)
    assert db.version == v + 1 and len(rows(db)) == 2000


def test_out_of_order_writes_never_apply_a_hole(fs: TableFs, db: DatabaseOps, clock: Clock) -> None:
    """The Linux client sends WRITEs in parallel: the last one (and a COMMIT, and the idle
    period) can come before an earlier one. Content with a range no WRITE filled is
    never applied; once the WRITE comes, the edit is."""
    v = db.version
    content = b"id,name\n" + b"".join(b"%d,h%d\n" % (i, i) for i in range(1, 301))
    cut = 1000
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    fs.write(DATA_CSV_ID, cut, content[cut:], StableHow.FILE_SYNC, A)  # the closing write
    fs.commit(DATA_CSV_ID, 0, 0, A)
    quiet(fs, clock)
    assert db.version == v  # bytes [0, cut) are still on their way
    fs.write(DATA_CSV_ID, 0, content[:cut], StableHow.UNSTABLE, A)
    quiet(fs, clock)
    assert db.version == v + 1 and len(rows(db)) == 300


def test_a_stale_append_after_a_merged_rewrite_reverts_nothing(
    tmp_path: Path, clock: Clock, state: Path
) -> None:
    """A rewrites the file while B changes another row (A's rewrite is merged, so the
    table is not A's bytes); A's next page-widened append from its own page adds its
    line and does not turn B's row back."""
    db = _table(tmp_path, keyed=True)
    fs = _fs(db, clock, state)
    try:
        seen = PathOps(fs, A).read_file("/data/data.csv")
        mine = seen.replace(b"1,n1", b"1,A")
        rewrite(fs, A, mine)
        db.update("id = 3", {"name": "B"})
        quiet(fs, clock)
        assert (3, "B") in rows(db) and (1, "A") in rows(db)
        fs.write(DATA_CSV_ID, 0, mine + b"6,six\n", StableHow.FILE_SYNC, A)  # its page
        quiet(fs, clock)
        assert rows(db) == [(1, "A"), (2, "n2"), (3, "B"), (4, "n4"), (5, "n5"), (6, "six")]
    finally:
        fs.close()


# ---------------------------------------------------------------- resends after a restart


@pytest.mark.parametrize("others", [0, 20])
def test_a_rewrite_resent_after_a_restart_is_not_applied_again(
    db: DatabaseOps, clock: Clock, state: Path, others: int
) -> None:
    """The server made the Delta commit of ``cp new.csv data.csv`` and died before the
    COMMIT reply; the client sees the new verifier and resends its WRITEs and COMMIT (RFC
    1813). Applied again, the table's first version (the header alone) fit as the base:
    a table without a key got every row twice, a keyed one EINVAL; past 16 versions the
    resend reverted others' commits. With ``others`` commits in between, too."""
    fs = _fs(db, clock, state)
    new = b"id,name\n1,cp1\n2,cp2\n3,cp3\n"
    rewrite(fs, A, new)
    quiet(fs, clock)  # committed; the reply never reached the client
    assert rows(db) == [(1, "cp1"), (2, "cp2"), (3, "cp3")]
    crash(fs)
    for i in range(others):
        db.insert({"id": 100 + i, "name": "other"})
    again = _fs(db, clock, state)
    try:
        v = db.version
        for off in range(0, len(new), 10):  # the resend: WRITEs (no SETATTR) and COMMIT
            again.write(DATA_CSV_ID, off, new[off : off + 10], StableHow.UNSTABLE, A)
        again.commit(DATA_CSV_ID, 0, 0, A)
        quiet(again, clock)
        assert db.version == v
        assert len(rows(db)) == 3 + others and (1, "cp1") in rows(db)
        # the same writer's next, new edit applies as usual
        seen = PathOps(again, A).read_file("/data/data.csv")
        rewrite(again, A, seen.replace(b"2,cp2", b"2,again"))
        quiet(again, clock)
        assert db.version == v + 1 and (2, "again") in rows(db)
    finally:
        again.close()


def test_an_append_resent_after_a_restart_is_inserted_once(
    db: DatabaseOps, clock: Clock, state: Path
) -> None:
    """``echo 6,six >> data.csv``: its FILE_SYNC WRITE was applied, the server died before
    the reply, and the client retransmits it to the new server (whose duplicate-request
    cache is empty): one row, not two (a table without a key got it twice)."""
    fs = _fs(db, clock, state)
    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"6,six\n", StableHow.FILE_SYNC, A)
    assert len(rows(db)) == 6
    crash(fs)
    again = _fs(db, clock, state)
    try:
        v = db.version
        again.write(DATA_CSV_ID, size, b"6,six\n", StableHow.FILE_SYNC, A)
        quiet(again, clock)
        assert db.version == v and rows(db).count((6, "six")) == 1
        size = again.getattr(DATA_CSV_ID, A).size  # a new append of the same line
        again.write(DATA_CSV_ID, size, b"7,seven\n", StableHow.FILE_SYNC, A)
        assert (7, "seven") in rows(db)
    finally:
        again.close()


@given(
    names=st.lists(st.text(alphabet='ab,"\n\r', max_size=6), min_size=1, max_size=8),
    cut=st.integers(0, 400),
)
def test_the_lines_checked_end_at_a_record_boundary_not_at_a_quoted_line_feed(
    names: list[str], cut: int
) -> None:
    """A WRITE can end inside a quoted field that holds a line feed: the lines checked
    then end at the last whole record (a chunk boundary there was refused as an
    'unterminated quote'; found by the writer model)."""
    from nfs.table.writes import _records_end
    from posixlake.csvcodec import render_csv

    table = pa.table({"id": list(range(len(names))), "name": names})
    lines = [render_csv(table.slice(0, 0))] + [
        render_csv(table.slice(i, 1)).split(b"\n", 1)[1] for i in range(len(names))
    ]
    data = b"".join(lines)
    bounds = [sum(len(x) for x in lines[: i + 1]) for i in range(len(lines))]
    cut = min(cut, len(data))
    assert _records_end(data[:cut]) == max([0] + [b for b in bounds if b <= cut])


@given(data=st.lists(st.sampled_from([b"a", b",", b'"', b"\n", b'""', b"\r\n"]), max_size=60))
def test_the_records_end_is_the_last_line_feed_after_an_even_number_of_quotes(
    data: list[bytes],
) -> None:
    """``_records_end`` (walks back from the end) against the definition, read forwards:
    a line feed ends a record when the quotes before it are even."""
    from nfs.table.writes import _records_end

    text = b"".join(data)
    ends = [i + 1 for i, c in enumerate(text) if c == ord("\n") and text.count(b'"', 0, i) % 2 == 0]
    assert _records_end(text) == max([0, *ends])


def test_an_edit_that_changed_nothing_resent_after_a_restart_reverts_nothing(
    db: DatabaseOps, clock: Clock, state: Path
) -> None:
    """A client writes back what it read (no commit: nothing changed); the server dies
    before the reply reaches it, another writer commits, and the client resends its
    WRITEs: diffed against the current version they would revert that commit. No commit
    tag names such an edit, so the server keeps it in the state directory (found by the
    writer model)."""
    fs = _fs(db, clock, state)
    seen = PathOps(fs, A).read_file("/data/data.csv")
    v = db.version
    rewrite(fs, A, seen)
    quiet(fs, clock)
    assert db.version == v
    crash(fs)
    db.update("id = 2", {"name": "B"})
    again = _fs(db, clock, state)
    try:
        for off in range(0, len(seen), 7):
            again.write(DATA_CSV_ID, off, seen[off : off + 7], StableHow.UNSTABLE, A)
        again.commit(DATA_CSV_ID, 0, 0, A)
        quiet(again, clock)
        assert (2, "B") in rows(db) and db.version == v + 1
    finally:
        again.close()


def test_a_clients_own_edit_is_the_base_of_its_next_one(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """``cp x data.csv``, later ``cat y > data.csv``, then ``mv z data.csv``, without a read
    in between: each is diffed against what the client holds, its own last edit, not its
    last READ (against which its own change read as another writer's: EIO without a key;
    found through the kernel client)."""
    seen = PathOps(fs, A).read_file("/data/data.csv")
    rewrite(fs, A, seen.replace(b"1,n1", b"1,A"))
    quiet(fs, clock)
    rewrite(fs, A, b"id,name\n1,A\n2,n2\n9,nine\n")
    quiet(fs, clock)
    assert rows(db) == [(1, "A"), (2, "n2"), (9, "nine")]
    tmp = fs.create_exclusive(DATA_DIR_ID, "upload", b"\x03" * 8, A)
    fs.write(tmp, 0, b"id,name\n7,grape\n", StableHow.FILE_SYNC, A)
    fs.rename(DATA_DIR_ID, "upload", DATA_DIR_ID, "data.csv", A)
    assert rows(db) == [(7, "grape")]


def test_an_append_after_rm_goes_on_the_emptied_table_not_on_what_was_read(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """``cat data.csv; rm data.csv; echo 8,kiwi >> data.csv``: the client's READs came
    from the full version, its append goes at the end of the emptied one (the size its
    GETATTR gave): an INSERT of its line, at once (it was laid over the old rows' bytes;
    found through the kernel client)."""
    PathOps(fs, A).read_file("/data/data.csv")
    PathOps(fs, A).remove_file("/data/data.csv")
    size = fs.getattr(DATA_CSV_ID, A).size
    v = db.version
    fs.write(DATA_CSV_ID, size, b"8,kiwi\n", StableHow.FILE_SYNC, A)
    assert db.version == v + 1 and rows(db) == [(8, "kiwi")]
    with pytest.raises(NfsError) as e:  # and a bad line's error is that WRITE's reply
        fs.write(DATA_CSV_ID, size + 7, b"9\n", StableHow.FILE_SYNC, A)
    assert Nfsstat3(e.value.status) == Nfsstat3.NFS3ERR_INVAL


def test_an_append_after_a_merged_sed_goes_at_the_end_of_the_table(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """sed -i while another writer inserts (the result is merged: not sed's bytes), then
    ``echo >>`` at the size a GETATTR gave: an INSERT at the end of the table, not laid
    over sed's own bytes (found by the writer model)."""
    tmp = fs.create_exclusive(DATA_DIR_ID, "sedM", b"\x04" * 8, A)
    content = PathOps(fs, A).read_file("/data/data.csv")
    db.insert({"id": 50, "name": "api"})
    fs.write(tmp, 0, content.replace(b"2,n2", b"2,sed"), StableHow.FILE_SYNC, A)
    fs.rename(DATA_DIR_ID, "sedM", DATA_DIR_ID, "data.csv", A)
    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"7,seven\n", StableHow.FILE_SYNC, A)
    assert rows(db) == [
        (1, "n1"),
        (2, "sed"),
        (3, "n3"),
        (4, "n4"),
        (5, "n5"),
        (7, "seven"),
        (50, "api"),
    ]


def test_a_staging_based_on_the_clients_own_edit_survives_a_crash(
    tmp_path: Path, clock: Clock, state: Path
) -> None:
    """A's edit was merged with B's (its bytes are no version's); A's next edit, staged
    over them and acknowledged durable, is recovered from the journal alone after a
    crash, and applies as A meant."""
    db = _table(tmp_path, keyed=True)
    fs = _fs(db, clock, state)
    seen = PathOps(fs, A).read_file("/data/data.csv")
    mine = seen.replace(b"1,n1", b"1,A")
    rewrite(fs, A, mine)
    db.update("id = 3", {"name": "B"})
    quiet(fs, clock)
    rewrite(fs, A, mine.replace(b"4,n4", b"4,A"))  # blind: based on its own bytes
    crash(fs)
    again = _fs(db, clock, state)
    try:
        quiet(again, clock)
        assert rows(db) == [(1, "A"), (2, "n2"), (3, "B"), (4, "A"), (5, "n5")]
    finally:
        again.close()


def test_a_sed_from_the_page_cache_after_an_append_duplicates_nothing(
    fs: TableFs, db: DatabaseOps
) -> None:
    """``cat data.csv; echo 5,x >> data.csv; sed -i ...``: sed reads from the client's page
    cache (its own append made it: no READ is sent), so what it holds is its append's
    page, not what its last READ returned (the appended row came twice; found through the
    kernel client)."""
    seen = PathOps(fs, A).read_file("/data/data.csv")
    fs.write(DATA_CSV_ID, 0, seen + b"6,six\n", StableHow.FILE_SYNC, A)  # page-widened
    tmp = fs.create_exclusive(DATA_DIR_ID, "sedC", b"\x05" * 8, A)
    cached = seen + b"6,six\n"  # no READ: the page cache
    fs.write(tmp, 0, cached.replace(b"2,n2", b"2,sed"), StableHow.FILE_SYNC, A)
    fs.rename(DATA_DIR_ID, "sedC", DATA_DIR_ID, "data.csv", A)
    assert rows(db) == [(1, "n1"), (2, "sed"), (3, "n3"), (4, "n4"), (5, "n5"), (6, "six")]


def test_a_complete_edit_not_polled_for_longer_than_abandon_after_applies(
    fs: TableFs, db: DatabaseOps, clock: Clock
) -> None:
    """No call and no idle timer for an hour (a suspended server, a test clock): a
    complete edit is applied when it is next looked at, not given up as abandoned."""
    seen = PathOps(fs, A).read_file("/data/data.csv")
    rewrite(fs, A, seen.replace(b"1,n1", b"1,late"))
    clock.now += 7200
    fs.poll()
    assert (1, "late") in rows(db)
