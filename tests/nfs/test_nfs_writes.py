"""The NFS write rules (docs/nfs-writes.md) under concurrency, stale caches, pauses and crashes.

Each numbered scenario of the issue "NFS writes that never lose, resurrect or half-commit
rows" is a test here, sans-IO through TableFs: two writers are two CallContexts (two
client addresses), the clock is injected, a crash is a TableFs dropped without close()
and a new one started on the same state directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import NfsError
from nfs.table.tablefs import DATA_CSV_ID, DATA_DIR_ID, PathOps, TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import render_csv

A = CallContext.local(peer="10.0.0.1:700")
B = CallContext.local(peer="10.0.0.2:701")


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
    return TableFs(db, clock=clock, idle_timer=False, state_dir=state)


@pytest.fixture
def plain(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(tmp_path / "plain", {"id": "Int64", "name": "String"}, engine="local")
    d.insert([{"id": i, "name": f"n{i}"} for i in range(1, 6)])
    return d


@pytest.fixture
def keyed(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / "keyed", {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
    )
    d.insert([{"id": i, "name": f"n{i}"} for i in range(1, 6)])
    return d


@pytest.fixture
def fs(plain: DatabaseOps, clock: Clock, state: Path) -> Iterator[TableFs]:
    f = _fs(plain, clock, state)
    yield f
    f.close()


@pytest.fixture
def kfs(keyed: DatabaseOps, clock: Clock, state: Path) -> Iterator[TableFs]:
    f = _fs(keyed, clock, state)
    yield f
    f.close()


def crash(fs: TableFs) -> None:
    """Stop ``fs`` as a kill -9 would: no close(), nothing applied; its journal files are
    unbuffered, so closing their descriptors keeps exactly what the OS already had.
    """
    for w in fs._writers.values():
        if w.journal is not None:
            w.journal.close()
    fs._journals.release()  # the OS drops a dead process's lock


def rows(db: DatabaseOps) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in db.to_arrow().to_pylist())


def status(exc: pytest.ExceptionInfo[NfsError]) -> Nfsstat3:
    return Nfsstat3(exc.value.status)


def close(fs: TableFs, ctx: CallContext) -> None:
    """A client's close(): COMMIT, then the edit is done (NFSv3: after the idle period)."""
    fs.commit(DATA_CSV_ID, 0, 0, ctx)
    fs.finish(DATA_CSV_ID, ctx)


def sed_i(fs: TableFs, ctx: CallContext, old: bytes, new: bytes, name: str) -> None:
    """GNU sed -i as one client: temp file, read data.csv, write, rename onto data.csv."""
    fid = fs.create_exclusive(DATA_DIR_ID, name, b"\x01" * 8, ctx)
    content = PathOps(fs, ctx).read_file("/data/data.csv")
    fs.write(fid, 0, content.replace(old, new), StableHow.FILE_SYNC, ctx)
    fs.rename(DATA_DIR_ID, name, DATA_DIR_ID, "data.csv", ctx)


# ---------------------------------------------------------------- 1. per-writer staging


def test_a_second_writers_rename_keeps_the_first_writers_staged_append(
    fs: TableFs, plain: DatabaseOps
) -> None:
    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"9,A\n", StableHow.UNSTABLE, A)  # echo 9,A >> (not closed)
    sed_i(fs, B, b"2,n2", b"2,sed", "sedB")  # meanwhile B: sed -i
    v = plain.version
    close(fs, A)
    assert plain.version == v + 1
    assert rows(plain) == [(1, "n1"), (2, "sed"), (3, "n3"), (4, "n4"), (5, "n5"), (9, "A")]


def test_another_writers_remove_and_truncate_keep_a_staged_append(
    fs: TableFs, plain: DatabaseOps
) -> None:
    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"9,A\n", StableHow.UNSTABLE, A)
    PathOps(fs, B).remove_file("/data/data.csv")  # B: rm data.csv (all rows gone)
    PathOps(fs, B).truncate("/data/data.csv", 0)  # and a truncation B never closes
    close(fs, A)
    assert rows(plain) == [(9, "A")]  # A's base plus its line: only the line is new


def test_concurrent_overwrites_of_different_rows_both_land(
    kfs: TableFs, keyed: DatabaseOps
) -> None:
    a, b = PathOps(kfs, A), PathOps(kfs, B)
    seen_a, seen_b = a.read_file("/data/data.csv"), b.read_file("/data/data.csv")
    a.write_file("/data/data.csv", seen_a.replace(b"1,n1", b"1,A"), truncate=True, commit=False)
    b.write_file("/data/data.csv", seen_b.replace(b"5,n5\n", b""), truncate=True, commit=False)
    v = keyed.version
    close(kfs, A)
    close(kfs, B)
    assert keyed.version == v + 2
    assert rows(keyed) == [(1, "A"), (2, "n2"), (3, "n3"), (4, "n4")]


def test_the_same_row_edited_by_two_writers_last_commit_wins(
    kfs: TableFs, keyed: DatabaseOps
) -> None:
    a, b = PathOps(kfs, A), PathOps(kfs, B)
    seen = a.read_file("/data/data.csv")
    b.read_file("/data/data.csv")
    a.write_file("/data/data.csv", seen.replace(b"3,n3", b"3,A"), truncate=True, commit=False)
    b.write_file("/data/data.csv", seen.replace(b"3,n3", b"3,B"), truncate=True, commit=False)
    close(kfs, B)
    close(kfs, A)
    assert rows(keyed) == [(1, "n1"), (2, "n2"), (3, "A"), (4, "n4"), (5, "n5")]


def test_a_writer_sees_its_own_staging_and_others_see_the_table(fs: TableFs) -> None:
    a, b = PathOps(fs, A), PathOps(fs, B)
    before = b.read_file("/data/data.csv")
    a.write_file(
        "/data/data.csv", b"id,name\n7,x\n", truncate=True, commit=False, stable=StableHow.UNSTABLE
    )
    assert a.read_file("/data/data.csv") == b"id,name\n7,x\n"
    assert a.getattr("/data/data.csv").size == len(b"id,name\n7,x\n")
    assert b.read_file("/data/data.csv") == before
    assert b.getattr("/data/data.csv").size == len(before)


# ---------------------------------------------------------------- 2. stale pages


def test_a_stale_page_widened_append_does_not_bring_deleted_rows_back(
    fs: TableFs, plain: DatabaseOps
) -> None:
    old = PathOps(fs, A).read_file("/data/data.csv")  # the client caches the page
    plain.delete_rows_where("true")  # another writer empties the table
    fs.write(DATA_CSV_ID, 0, old + b"6,new\n", StableHow.FILE_SYNC, A)  # echo >> (stale page)
    assert rows(plain) == [(6, "new")]


def test_a_stale_append_at_the_old_end_inserts_only_its_line(
    fs: TableFs, plain: DatabaseOps
) -> None:
    size = fs.getattr(DATA_CSV_ID, A).size  # a long-lived `exec 3>>data.csv`
    plain.delete_rows_where("id >= 4")  # the last rows go
    fs.write(DATA_CSV_ID, size, b"6,new\n", StableHow.FILE_SYNC, A)
    assert rows(plain) == [(1, "n1"), (2, "n2"), (3, "n3"), (6, "new")]


def test_an_append_after_a_fresh_getattr_is_based_on_the_current_version(
    fs: TableFs, plain: DatabaseOps
) -> None:
    PathOps(fs, A).read_file("/data/data.csv")
    plain.delete_rows_where("id = 5")
    size = fs.getattr(DATA_CSV_ID, A).size  # close-to-open: the client revalidates
    fs.write(DATA_CSV_ID, size, b"6,new\n", StableHow.FILE_SYNC, A)
    assert rows(plain) == [(1, "n1"), (2, "n2"), (3, "n3"), (4, "n4"), (6, "new")]


# ---------------------------------------------------------------- 3. nothing half-written


def test_a_paused_writer_mid_line_commits_nothing(
    fs: TableFs, plain: DatabaseOps, clock: Clock
) -> None:
    v, before = plain.version, rows(plain)
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    fs.write(DATA_CSV_ID, 0, b"id,name\n1,n1\n2,n", StableHow.UNSTABLE, A)
    clock.now += 120
    fs.poll()
    assert plain.version == v and rows(plain) == before
    fs.write(DATA_CSV_ID, 16, b"2\n3,n3\n", StableHow.UNSTABLE, A)
    fs.commit(DATA_CSV_ID, 0, 0, A)  # close(): durable; applied once the writer is done
    assert plain.version == v
    clock.now += 10
    fs.poll()
    assert plain.version == v + 1 and rows(plain) == [(1, "n1"), (2, "n2"), (3, "n3")]


def test_a_sync_mount_rewrite_is_one_commit_when_the_writer_is_idle(
    fs: TableFs, plain: DatabaseOps, clock: Clock
) -> None:
    table = pa.table({"id": list(range(300)), "name": [f"r{i}" for i in range(300)]})
    content = render_csv(table)
    v = plain.version
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    pos = 0
    for line in content.splitlines(keepends=True):  # one FILE_SYNC WRITE per line
        count, how = fs.write(DATA_CSV_ID, pos, line, StableHow.FILE_SYNC, A)
        assert how == StableHow.FILE_SYNC
        pos += count
        clock.now += 0.01
        fs.poll()
    assert plain.version == v  # still writing
    clock.now += 10
    fs.poll()
    assert plain.version == v + 1 and plain.to_arrow().num_rows == 300


def test_shutdown_commits_no_unfinished_writer(
    plain: DatabaseOps, clock: Clock, state: Path
) -> None:
    fs = _fs(plain, clock, state)
    v = plain.version
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    fs.write(DATA_CSV_ID, 0, b"id,name\n1,n1\n", StableHow.FILE_SYNC, A)
    fs.close()
    assert plain.version == v and len(rows(plain)) == 5


# ---------------------------------------------------------------- 4. honest replies


def test_file_sync_bytes_survive_a_crash(plain: DatabaseOps, clock: Clock, state: Path) -> None:
    fs = _fs(plain, clock, state)
    v = plain.version
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    fs.write(DATA_CSV_ID, 0, b"id,name\n1,one\n", StableHow.FILE_SYNC, A)
    crash(fs)
    again = _fs(plain, clock, state)
    try:
        assert plain.version == v
        assert PathOps(again, A).read_file("/data/data.csv") == b"id,name\n1,one\n"
        clock.now += 10  # the writer never comes back: it was done
        again.poll()
        assert plain.version == v + 1 and rows(plain) == [(1, "one")]
    finally:
        again.close()


def test_a_commit_acknowledged_mid_line_survives_a_crash(
    plain: DatabaseOps, clock: Clock, state: Path
) -> None:
    fs = _fs(plain, clock, state)
    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"7,sev", StableHow.UNSTABLE, A)
    fs.commit(DATA_CSV_ID, 0, 0, A)  # OK: durable, held until the line ends
    crash(fs)
    again = _fs(plain, clock, state)
    try:
        again.write(DATA_CSV_ID, size + 5, b"en\n", StableHow.UNSTABLE, A)
        again.commit(DATA_CSV_ID, 0, 0, A)
        clock.now += 10
        again.poll()
        assert (7, "seven") in rows(plain) and len(rows(plain)) == 6
    finally:
        again.close()


def test_a_commit_made_before_a_crash_is_not_applied_twice(
    plain: DatabaseOps, clock: Clock, state: Path
) -> None:
    fs = _fs(plain, clock, state)
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    fs.write(DATA_CSV_ID, 0, b"id,name\n1,n1\n1,n1\n", StableHow.FILE_SYNC, A)
    writer = fs._writers[next(iter(fs._writers))]
    # the crash comes after the Delta commit and before the journal was removed
    from nfs.table.apply import apply_content

    st = writer.staging
    apply_content(
        plain,
        st.content(),
        base_version=st.base_version,
        base=st.base,
        write_id=writer.write_id,
    )
    v = plain.version
    crash(fs)
    again = _fs(plain, clock, state)
    try:
        assert not list((state / "journal").glob("*.wal"))
        clock.now += 10
        again.poll()
        assert plain.version == v and rows(plain) == [(1, "n1"), (1, "n1")]
    finally:
        again.close()


def test_a_failure_found_at_idle_reaches_the_writer_at_its_next_write(
    kfs: TableFs, keyed: DatabaseOps, clock: Clock
) -> None:
    v = keyed.version
    kfs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    # each line is good on its own: only the whole edit shows the repeated key
    kfs.write(DATA_CSV_ID, 0, b"id,name\n1,a\n1,b\n", StableHow.FILE_SYNC, A)  # -o sync
    clock.now += 10
    kfs.poll()  # refused at idle: logged AND kept for the writer
    assert keyed.version == v
    with pytest.raises(NfsError) as e:
        kfs.write(DATA_CSV_ID, 0, b"id,name\n", StableHow.FILE_SYNC, A)
    assert status(e) == Nfsstat3.NFS3ERR_INVAL and "id=1" in str(e.value)
    PathOps(kfs, B).write_file("/data/data.csv", b"id,name\n8,b\n", truncate=True)  # B unaffected
    assert rows(keyed) == [(8, "b")]


def test_a_bad_line_is_refused_on_the_reply_that_completes_it(
    fs: TableFs, plain: DatabaseOps, clock: Clock
) -> None:
    """``nfs-cp bad.csv data.csv`` and ``cp`` must exit non-zero: the error is on the
    FILE_SYNC WRITE or COMMIT that completes the line, not found later at idle."""
    v = plain.version
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    with pytest.raises(NfsError) as e:
        fs.write(DATA_CSV_ID, 0, b"id,name\nx,bad\n", StableHow.FILE_SYNC, A)
    assert status(e) == Nfsstat3.NFS3ERR_INVAL and "line 2" in str(e.value)
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), B)
    fs.write(DATA_CSV_ID, 0, b"id,name\n1,ok\n", StableHow.UNSTABLE, B)
    with pytest.raises(NfsError) as e:  # the WRITE that completes line 3 (line 4 is not)
        fs.write(DATA_CSV_ID, 13, b"2,a,b\n3,", StableHow.UNSTABLE, B)
    assert status(e) == Nfsstat3.NFS3ERR_INVAL and "line 3" in str(e.value)
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), B)
    fs.write(DATA_CSV_ID, 0, b"id,name\n1,ok\n2,", StableHow.UNSTABLE, B)  # mid-line: fine
    assert plain.version == v and len(rows(plain)) == 5  # refused edits change nothing
    fs.write(DATA_CSV_ID, 15, b"two\n", StableHow.UNSTABLE, B)
    clock.now += 10
    fs.poll()
    assert plain.version == v + 1 and rows(plain) == [(1, "ok"), (2, "two")]


def test_an_abandoned_staging_is_reported_and_changes_the_verifier(
    fs: TableFs, plain: DatabaseOps, clock: Clock
) -> None:
    verf = fs.write_verifier()
    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"7,never-ends", StableHow.UNSTABLE, A)
    clock.now += 4000
    fs.poll()
    assert fs.write_verifier() != verf  # the client resends what it still holds
    with pytest.raises(NfsError) as e:
        fs.commit(DATA_CSV_ID, 0, 0, A)
    assert status(e) == Nfsstat3.NFS3ERR_IO
    fs.commit(DATA_CSV_ID, 0, 0, A)  # reported once
    assert len(rows(plain)) == 5


def test_bad_content_fails_the_commit_and_changes_nothing(kfs: TableFs, keyed: DatabaseOps) -> None:
    v, before = keyed.version, rows(keyed)
    PathOps(kfs, A).write_file("/data/data.csv", b"id,name\n1,a\n2", truncate=True, finish=False)
    assert keyed.version == v  # mid-line: held (durably), not applied
    with pytest.raises(NfsError) as e:
        PathOps(kfs, B).write_file("/data/data.csv", b"id,name\nq,a\n", truncate=True)
    assert status(e) == Nfsstat3.NFS3ERR_INVAL
    assert keyed.version == v and rows(keyed) == before


# ---------------------------------------------------------------- 5. repeated keys


def _repeat_key(db: DatabaseOps) -> None:
    """Two processes once inserted key 2 at the same instant: write it again behind our back."""
    write_deltalake(db.uri, pa.table({"id": [2], "name": ["again"]}), mode="append")


def test_a_table_with_repeated_keys_can_be_repaired_over_nfs(
    kfs: TableFs, keyed: DatabaseOps, clock: Clock
) -> None:
    _repeat_key(keyed)
    clock.now += 1  # the view sees other processes' commits after its version_ttl
    content = PathOps(kfs, A).read_file("/data/data.csv")
    assert content.count(b"\n2,") == 2
    with pytest.raises(NfsError) as e:  # content that still repeats the key names it
        PathOps(kfs, A).write_file(
            "/data/data.csv", content.replace(b"1,n1", b"1,one"), truncate=True
        )
    assert status(e) == Nfsstat3.NFS3ERR_INVAL and "id=2" in str(e.value)
    fixed = content.replace(b"2,again\n", b"")
    PathOps(kfs, A).write_file("/data/data.csv", fixed.replace(b"4,n4", b"4,four"), truncate=True)
    assert rows(keyed) == [(1, "n1"), (2, "n2"), (3, "n3"), (4, "four"), (5, "n5")]


def test_sed_i_on_a_table_with_repeated_keys(
    kfs: TableFs, keyed: DatabaseOps, clock: Clock
) -> None:
    _repeat_key(keyed)
    clock.now += 1
    sed_i(kfs, A, b"2,again\n", b"", "sedR")
    assert rows(keyed) == [(1, "n1"), (2, "n2"), (3, "n3"), (4, "n4"), (5, "n5")]


# ---------------------------------------------------------------- 6. races without a key


def test_without_a_key_an_edit_racing_an_api_update_of_the_row_is_refused(
    fs: TableFs, plain: DatabaseOps
) -> None:
    a = PathOps(fs, A)
    seen = a.read_file("/data/data.csv")
    a.write_file("/data/data.csv", seen.replace(b"3,n3", b"3,nfs"), truncate=True, commit=False)
    plain.update("id = 3", {"name": "api"})
    v = plain.version
    with pytest.raises(NfsError) as e:
        close(fs, A)
    assert status(e) == Nfsstat3.NFS3ERR_IO
    assert plain.version == v
    assert rows(plain) == [(1, "n1"), (2, "n2"), (3, "api"), (4, "n4"), (5, "n5")]


def test_without_a_key_edits_of_other_rows_merge(fs: TableFs, plain: DatabaseOps) -> None:
    a = PathOps(fs, A)
    seen = a.read_file("/data/data.csv")
    a.write_file("/data/data.csv", seen.replace(b"3,n3", b"3,nfs"), truncate=True, commit=False)
    plain.update("id = 4", {"name": "api"})
    close(fs, A)
    assert rows(plain) == [(1, "n1"), (2, "n2"), (3, "nfs"), (4, "api"), (5, "n5")]


def test_a_one_write_rewrite_applies_once_its_writer_is_quiet(
    fs: TableFs, plain: DatabaseOps, clock: Clock
) -> None:
    """``cp small.csv data.csv && cat data.csv`` on Linux: SETATTR 0, one FILE_SYNC WRITE
    (close), then the next open's GETATTR. Neither the FILE_SYNC nor the GETATTR ends the
    edit over NFSv3 (``{ head; sleep; tail; } > data.csv`` sends the same): it applies
    once the writer has been quiet for the idle period; until then the writer reads its
    own content and others the table."""
    v = plain.version
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    fs.write(DATA_CSV_ID, 0, b"id,name\n1,cp\n", StableHow.FILE_SYNC, A)
    fs.getattr(DATA_CSV_ID, B)
    assert fs.getattr(DATA_CSV_ID, A).size == len(b"id,name\n1,cp\n")
    clock.now += 4
    fs.poll()
    assert plain.version == v
    fs.write(DATA_CSV_ID, 13, b"2,more\n", StableHow.FILE_SYNC, A)  # tail, after its pause
    clock.now += 4
    fs.poll()
    assert plain.version == v
    clock.now += 1
    fs.poll()
    assert plain.version == v + 1 and rows(plain) == [(1, "cp"), (2, "more")]


def test_two_rewrites_by_one_writer_within_the_idle_period_are_one_edit(
    fs: TableFs, plain: DatabaseOps, clock: Clock
) -> None:
    """``cp x.csv data.csv; cat y.csv > data.csv`` within the idle period: one writer's
    content, applied once (NFSv3 cannot tell two edits from one paused edit)."""
    v = plain.version
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    fs.write(DATA_CSV_ID, 0, b"id,name\n1,x\n", StableHow.FILE_SYNC, A)
    fs.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    assert plain.version == v
    fs.write(DATA_CSV_ID, 0, b"id,name\n2,y\n", StableHow.FILE_SYNC, A)
    fs.commit(DATA_CSV_ID, 0, 0, A)
    clock.now += 10
    fs.poll()
    assert plain.version == v + 1 and rows(plain) == [(2, "y")]


def test_a_second_live_server_does_not_take_over_the_first_ones_journal(
    plain: DatabaseOps, clock: Clock, state: Path
) -> None:
    first = _fs(plain, clock, state)
    first.setattr(DATA_CSV_ID, Sattr3(size=0), A)
    first.write(DATA_CSV_ID, 0, b"id,name\n1,one\n", StableHow.FILE_SYNC, A)
    second = _fs(plain, clock, state)  # same table, same machine, while the first runs
    try:
        clock.now += 10
        second.poll()
        assert len(rows(plain)) == 5  # only the first server applies its writer's edit
        first.poll()
        assert rows(plain) == [(1, "one")]
    finally:
        second.close()
        first.close()


def test_a_stale_write_widened_to_its_last_page_inserts_only_its_line(
    plain: DatabaseOps, clock: Clock, state: Path
) -> None:
    plain.insert([{"id": i, "name": f"row number {i}"} for i in range(10, 400)])
    fs = _fs(plain, clock, state)
    try:
        old = PathOps(fs, A).read_file("/data/data.csv")
        assert len(old) > 4096
        plain.delete_rows_where("id >= 390")  # the last rows go, meanwhile
        page = (len(old) // 4096) * 4096  # the client resends its cached last page
        fs.write(DATA_CSV_ID, page, old[page:] + b"7,new\n", StableHow.FILE_SYNC, A)
        got = rows(plain)
        assert (7, "new") in got and len(got) == 5 + 380 + 1
        assert not [r for r in got if r[0] >= 390]
    finally:
        fs.close()


def _versions_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The versions whose bytes data.csv's face is asked for from now on (each one not at
    hand is a load of that version)."""
    from nfs.table.reads import Reads

    read: list[int] = []
    presented_or_none = Reads.presented_or_none

    def recorded(self: Reads, version: int) -> Any:
        read.append(version)
        return presented_or_none(self, version)

    monkeypatch.setattr(Reads, "presented_or_none", recorded)
    return read


def test_a_page_widened_append_after_appends_reads_no_older_version(
    plain: DatabaseOps, clock: Clock, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Linux client's `echo >>` resends its last page: with the current version
    fitting and only appends before it, no older version is read (each is a load of
    that version), and only the new line is inserted."""
    plain.insert([{"id": i, "name": f"row number {i}"} for i in range(10, 400)])
    fs = _fs(plain, clock, state)
    try:
        for i in range(400, 405):  # others append: five versions
            plain.insert([{"id": i, "name": f"row number {i}"}])
        read = _versions_read(monkeypatch)
        current = plain.version
        old = PathOps(fs, A).read_file("/data/data.csv")
        page = (len(old) // 4096) * 4096  # the client resends its cached last page
        read.clear()
        fs.write(DATA_CSV_ID, page, old[page:] + b"7,new\n", StableHow.FILE_SYNC, A)
        assert [v for v in read if v < current] == []
        assert [r for r in rows(plain) if r[0] == 7] == [(7, "new")]
        assert len(rows(plain)) == 5 + 390 + 5 + 1
    finally:
        fs.close()


def test_a_page_widened_append_onto_a_writers_bytes_still_searches_older_versions(
    plain: DatabaseOps, clock: Clock, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewrite that only adds a row is committed as an append, and data.csv keeps
    showing its writer's bytes (a shadow), which may be shorter than the rendering: the
    versions appends led from are then not known to be shorter, and are read."""
    for i in range(3):
        plain.insert([{"id": 100 + i, "name": "x"}])
    fs = _fs(plain, clock, state)
    try:
        seen = PathOps(fs, A).read_file("/data/data.csv")
        mine = seen.replace(b"\n1,", b"\n0001,", 1) + b"9,nine\n"
        PathOps(fs, A).write_file("/data/data.csv", mine, truncate=True)
        current = fs._reads.version()
        assert fs._reads.shadow(current) is not None
        assert plain.history(1)[0].parameters.get("mode") == "Append"
        read = _versions_read(monkeypatch)
        page = PathOps(fs, B).read_file("/data/data.csv")
        assert page == mine
        fs.write(DATA_CSV_ID, 0, page + b"8,newer\n", StableHow.FILE_SYNC, B)
        assert [v for v in read if v < current]
        got = rows(plain)
        assert sorted(r for r in got if r[0] in (8, 9)) == [(8, "newer"), (9, "nine")]
        assert len(got) == 5 + 3 + 2
    finally:
        fs.close()


def test_after_a_restart_a_page_from_before_a_delete_brings_no_row_back(
    plain: DatabaseOps, clock: Clock, state: Path
) -> None:
    """The client read the table, the server restarted (what it read is not known), the
    last rows were deleted: its page-widened append fits the current version and, longer,
    the one before the DELETE, which is searched (a DELETE is not an append) and wins:
    only the new line is new."""
    plain.insert([{"id": i, "name": f"row number {i}"} for i in range(10, 400)])
    fs = _fs(plain, clock, state)
    old = PathOps(fs, A).read_file("/data/data.csv")
    fs.close()
    plain.delete_rows_where("id >= 390")
    again = _fs(plain, clock, state)
    try:
        page = (len(old) // 4096) * 4096
        again.write(DATA_CSV_ID, page, old[page:] + b"8,newer\n", StableHow.FILE_SYNC, A)
        got = rows(plain)
        assert [r for r in got if r[0] == 8] == [(8, "newer")]
        assert not [r for r in got if r[0] >= 390]
        assert len(got) == 5 + 380 + 1
    finally:
        again.close()


def test_processes_sharing_a_client_append_from_stale_sizes_and_lose_nothing(
    fs: TableFs, plain: DatabaseOps
) -> None:
    """Several processes of one client (one writer key): each read the size, then others
    appended (more versions than the rendering cache keeps) before its own WRITE came."""
    sizes = [fs.getattr(DATA_CSV_ID, A).size for _ in range(8)]
    for i, size in enumerate(sizes):  # all from the same stale size, one after the other
        fs.getattr(DATA_CSV_ID, A)  # what this client was shown moves on meanwhile
        fs.write(DATA_CSV_ID, size, f"{100 + i},p{i}\n".encode(), StableHow.FILE_SYNC, A)
    got = rows(plain)
    assert [r for r in got if r[0] >= 100] == [(100 + i, f"p{i}") for i in range(8)]
    assert len(got) == 5 + 8


def test_a_table_restored_onto_its_path_is_served_and_staged_writes_are_refused(
    plain: DatabaseOps, fs: TableFs, clock: Clock, tmp_path: Path
) -> None:
    plain.backup(tmp_path / "bk")  # 5 rows
    plain.insert({"id": 6, "name": "n6"})
    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"7,staged\n", StableHow.UNSTABLE, A)
    DatabaseOps.restore(tmp_path / "bk", plain.uri, overwrite=True)  # another process
    clock.now += 1  # the view checks the log after its version_ttl
    content = PathOps(fs, B).read_file("/data/data.csv")
    assert content.count(b"\n") == 1 + 5 and b"6,n6" not in content
    with pytest.raises(NfsError) as e:  # the staging was based on the replaced table
        fs.commit(DATA_CSV_ID, 0, 0, A)
    assert status(e) == Nfsstat3.NFS3ERR_IO
    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"8,after\n", StableHow.FILE_SYNC, A)
    assert sorted(r[0] for r in rows(plain)) == [1, 2, 3, 4, 5, 8]


def test_a_table_restored_onto_its_path_makes_version_handles_stale(
    plain: DatabaseOps, fs: TableFs, clock: Clock, tmp_path: Path
) -> None:
    """/versions/<N> of the replaced table is not /versions/<N> of the restored one: a
    handle taken before the restore must not read the new table's version N. The root and
    /versions keep theirs (the mount goes on)."""
    plain.backup(tmp_path / "bk")
    plain.insert({"id": 6, "name": "n6"})
    paths = PathOps(fs, B)
    before = {
        p: paths.resolve(p) for p in ("/", "/versions", "/versions/1", "/versions/1/data.csv")
    }
    gens = {p: fs.generation(fid) for p, fid in before.items()}
    DatabaseOps.restore(tmp_path / "bk", plain.uri, overwrite=True)  # another process
    clock.now += 1
    paths.read_file("/data/data.csv")  # the server notices the new table
    assert fs.generation(before["/"]) == gens["/"]
    assert fs.generation(before["/versions"]) == gens["/versions"]
    for p in ("/versions/1", "/versions/1/data.csv"):
        try:
            assert fs.generation(before[p]) != gens[p], p
        except NfsError as err:  # or no such version in the new table
            assert err.status == Nfsstat3.NFS3ERR_STALE


def test_after_a_restart_a_stale_append_onto_an_emptied_table_inserts_only_its_line(
    plain: DatabaseOps, clock: Clock, state: Path
) -> None:
    """The emptied table's header is a prefix of the stale page too: the longest version
    the write extends is what the client resent (found by Hypothesis)."""
    plain.delete_rows_where("id <= 4")
    fs = _fs(plain, clock, state)
    old = PathOps(fs, A).read_file("/data/data.csv")  # "id,name\n5,n5\n"
    crash(fs)
    again = _fs(plain, clock, state)  # what A was shown is forgotten
    try:
        plain.delete_rows_where("id = 5")
        again.write(DATA_CSV_ID, 0, old + b"9,new\n", StableHow.FILE_SYNC, A)
        assert rows(plain) == [(9, "new")]
    finally:
        again.close()


def test_a_page_older_than_the_attributes_a_client_was_shown_resurrects_nothing(
    fs: TableFs, plain: DatabaseOps
) -> None:
    """The client read v1, then saw v2's attributes (its last row deleted) but still holds
    v1's page: v2 is a prefix of that page, v1 is what it resent."""
    old = PathOps(fs, A).read_file("/data/data.csv")
    plain.delete_rows_where("id = 5")
    fs.getattr(DATA_CSV_ID, A)
    fs.write(DATA_CSV_ID, 0, old + b"9,new\n", StableHow.FILE_SYNC, A)
    assert rows(plain) == [(1, "n1"), (2, "n2"), (3, "n3"), (4, "n4"), (9, "new")]


def test_a_page_widened_by_its_own_earlier_append_resurrects_nothing(
    fs: TableFs, plain: DatabaseOps
) -> None:
    """The client's page is what it read plus its own appended line (version v+1, the
    longest fit); more commits than the rendering cache keeps came since, and one deleted
    a row of that page: the next stale append inserts only its line (found by Hypothesis).
    """
    b = PathOps(fs, B)
    old = PathOps(fs, A).read_file("/data/data.csv")  # v
    page = old + b"6,six\n"
    fs.write(DATA_CSV_ID, 0, page, StableHow.FILE_SYNC, A)  # v+1: exactly the page
    plain.delete_rows_where("id = 6")
    for i in range(5):  # others write and read: v+1's rendering leaves the cache
        plain.update(f"id = {i + 1}", {"name": f"u{i}"})
        b.read_file("/data/data.csv")
    fs.write(DATA_CSV_ID, 0, page + b"7,seven\n", StableHow.FILE_SYNC, A)
    assert rows(plain) == [(1, "u0"), (2, "u1"), (3, "u2"), (4, "u3"), (5, "u4"), (7, "seven")]


@pytest.mark.parametrize("table", ["plain", "keyed"])
def test_a_stale_page_of_a_rewrite_is_not_read_as_an_append_to_the_empty_table(
    request: pytest.FixtureRequest, table: str, clock: Clock, state: Path
) -> None:
    """B rewrote the file in its own row order (its page: bytes no rendering has), then
    others rewrote it often enough that B's bytes are kept no longer, changing and
    deleting rows. B's page-widened append must add its line only: the table's first
    version (created empty: the header alone) prefixes every write, and taking it as
    the base read every row of B's page as new (found by Hypothesis)."""
    db: DatabaseOps = request.getfixturevalue(table)
    fs = _fs(db, clock, state)
    try:
        a, b = PathOps(fs, A), PathOps(fs, B)
        lines = b.read_file("/data/data.csv").splitlines(keepends=True)
        page = lines[0] + b"".join(reversed(lines[1:])).replace(b"3,n3", b"3,b")
        b.write_file("/data/data.csv", page, truncate=True)
        assert b.read_file("/data/data.csv") == page  # shown its own bytes
        for i in (1, 2, 4, 5, 1, 2):  # exact rewrites by A: each keeps its own bytes
            content = a.read_file("/data/data.csv")
            row = next(r for r in content.splitlines() if r.startswith(b"%d," % i))
            new = b"" if i == 5 else row + b"!"
            a.write_file(
                "/data/data.csv",
                content.replace(row + b"\n", new + b"\n" if new else b""),
                truncate=True,
            )
        want = [(1, "n1!!"), (2, "n2!!"), (3, "b"), (4, "n4!"), (9, "nine")]
        fs.write(DATA_CSV_ID, 0, page + b"9,nine\n", StableHow.FILE_SYNC, B)
        fs.finish(DATA_CSV_ID, B)  # B's edit is done
        assert rows(db) == want
    finally:
        fs.close()


def test_after_a_restart_an_append_to_the_empty_table_a_client_read_adds_its_line(
    tmp_path: Path, clock: Clock, state: Path
) -> None:
    """A client read the table while it was empty; the server restarted (it no longer
    knows what the client was shown) and others inserted rows; the client's page-widened
    append (its page: the header alone) inserts its line and nothing else."""
    db = DatabaseOps.create(
        tmp_path / "empty", {"id": "Int64", "name": "String"}, primary_key="id", engine="local"
    )
    fs = _fs(db, clock, state)
    page = PathOps(fs, A).read_file("/data/data.csv")
    assert page == b"id,name\n"
    crash(fs)
    db.insert([{"id": 1, "name": "one"}, {"id": 2, "name": "two"}])
    fs = _fs(db, clock, state)
    try:
        fs.write(DATA_CSV_ID, 0, page + b"3,three\n", StableHow.FILE_SYNC, A)
        fs.getattr(DATA_CSV_ID, A)
        assert rows(db) == [(1, "one"), (2, "two"), (3, "three")]
    finally:
        fs.close()


@pytest.mark.parametrize("crashed", [False, True])
def test_idle_rewrites_apply_in_the_order_they_began_crash_or_not(
    keyed: DatabaseOps, clock: Clock, state: Path, crashed: bool
) -> None:
    """Three clients stage a rewrite of the same row (A, then B, then C) and never close;
    A retransmits a write last. The order the stagings began in is the order they apply
    in, with or without a crash in between: C's row wins (recovery by the journals' last
    write used to apply A last after a crash)."""
    C = CallContext.local(peer="10.0.0.3:702")
    fs = _fs(keyed, clock, state)
    base = PathOps(fs, A).read_file("/data/data.csv")
    staged = {}
    for ctx, name in ((A, "a"), (B, "b"), (C, "c")):
        staged[ctx.peer] = base.replace(b"1,n1", f"1,{name}".encode())
        fs.setattr(DATA_CSV_ID, Sattr3(size=0), ctx)
        fs.write(DATA_CSV_ID, 0, staged[ctx.peer], StableHow.UNSTABLE, ctx)
        clock.now += 1
    fs.write(DATA_CSV_ID, 0, staged[A.peer], StableHow.UNSTABLE, A)  # a retransmission
    if crashed:
        crash(fs)
        fs = _fs(keyed, clock, state)
        for ctx in (C, B, A):  # the clients resend their UNSTABLE writes
            fs.write(DATA_CSV_ID, 0, staged[ctx.peer], StableHow.UNSTABLE, ctx)
    try:
        clock.now += 10
        fs.poll()
        assert (1, "c") in rows(keyed)
    finally:
        fs.close()


@pytest.mark.parametrize("restart", [False, True])
def test_a_page_holding_its_own_append_over_a_stale_page_resurrects_nothing(
    plain: DatabaseOps, clock: Clock, state: Path, restart: bool
) -> None:
    """The client's page is a stale page plus its own appended line: no version ever was
    those bytes (another commit came between its read and its append). Its line was
    deleted since; the next append from that page inserts only its new line, also after
    a server restart."""
    fs = _fs(plain, clock, state)
    old = PathOps(fs, A).read_file("/data/data.csv")
    plain.update("id = 1", {"name": "other"})  # meanwhile: the page is stale
    page = old + b"6,six\n"
    fs.write(DATA_CSV_ID, 0, page, StableHow.FILE_SYNC, A)  # inserts 6 only
    assert (6, "six") in rows(plain) and (1, "other") in rows(plain)
    plain.delete_rows_where("id = 6")
    if restart:
        crash(fs)
        fs = _fs(plain, clock, state)
    try:
        fs.write(DATA_CSV_ID, 0, page + b"7,seven\n", StableHow.FILE_SYNC, A)
        got = rows(plain)
        assert (7, "seven") in got and not [r for r in got if r[0] == 6], got
    finally:
        fs.close()


def test_page_widened_appends_in_a_row_from_a_stale_page_insert_each_line_once(
    fs: TableFs, plain: DatabaseOps
) -> None:
    """A client appends five lines one by one, each time resending its whole (stale) page;
    others delete its second line meanwhile: every line is inserted once, none comes back."""
    page = PathOps(fs, A).read_file("/data/data.csv")
    plain.update("id = 1", {"name": "other"})
    for i in range(10, 15):
        page += f"{i},line{i}\n".encode()
        fs.write(DATA_CSV_ID, 0, page, StableHow.FILE_SYNC, A)
        if i == 11:
            plain.delete_rows_where("id = 11")
    got = rows(plain)
    assert [r for r in got if r[0] >= 10] == [(i, f"line{i}") for i in (10, 12, 13, 14)]
    assert (1, "other") in got and len(got) == 5 + 4


@pytest.mark.parametrize("damage", ["garbage", "empty", "truncated"])
def test_a_damaged_page_file_is_ignored_after_a_restart(
    plain: DatabaseOps, clock: Clock, state: Path, damage: str
) -> None:
    """A client's page kept in the state directory that does not read back (garbage, an
    empty file, a cut header) is not used: the append is matched as without it."""
    fs = _fs(plain, clock, state)
    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"6,six\n", StableHow.FILE_SYNC, A)
    crash(fs)
    (page,) = state.glob("pages-*/*.page")
    raw = page.read_bytes()
    page.write_bytes(
        {"garbage": b"\xff\x00 not json\n", "empty": b"", "truncated": raw[:9]}[damage]
    )
    again = _fs(plain, clock, state)
    try:
        end = again.getattr(DATA_CSV_ID, A).size
        again.write(DATA_CSV_ID, end, b"7,seven\n", StableHow.FILE_SYNC, A)
        assert [r for r in rows(plain) if r[0] >= 6] == [(6, "six"), (7, "seven")]
    finally:
        again.close()


def test_a_rewrite_from_a_page_holding_its_own_append_changes_only_what_it_changed(
    fs: TableFs, plain: DatabaseOps
) -> None:
    """As above, then the client rewrites from that page (its first WRITE extends it, a
    later one changes a row): others' update survives, the deleted row stays deleted,
    and every other reader is shown the table, not the client's bytes."""
    old = PathOps(fs, A).read_file("/data/data.csv")
    plain.update("id = 1", {"name": "other"})
    page = old + b"6,six\n"
    fs.write(DATA_CSV_ID, 0, page, StableHow.FILE_SYNC, A)
    plain.delete_rows_where("id = 6")
    fs.write(DATA_CSV_ID, 0, page + b"7,seven\n", StableHow.UNSTABLE, A)
    at = page.index(b"3,n3")
    fs.write(DATA_CSV_ID, at, b"3,N3", StableHow.UNSTABLE, A)
    close(fs, A)
    want = [(1, "other"), (2, "n2"), (3, "N3"), (4, "n4"), (5, "n5"), (7, "seven")]
    assert rows(plain) == want
    shown = PathOps(fs, B).read_file("/data/data.csv")
    assert sorted(shown.splitlines()[1:]) == sorted(f"{i},{n}".encode() for i, n in want)
    assert PathOps(fs, A).read_file("/data/data.csv") == shown


def test_a_rewrite_changing_more_than_memory_allows_is_refused_and_nothing_changes(
    keyed: DatabaseOps, clock: Clock, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The changed rows are held in memory (ten times their bytes): past 1/16 of the
    machine's memory the rewrite is refused with EINVAL, not run out of memory (a server
    killed by the OOM killer would retry the journal at every start)."""
    import nfs.table.apply as apply_module

    monkeypatch.setattr(apply_module, "change_budget", lambda: 40)
    fs = _fs(keyed, clock, state)
    try:
        v = keyed.version
        before = PathOps(fs, A).read_file("/data/data.csv")
        one = before.replace(b"3,n3", b"3,N3")  # a small change still applies
        PathOps(fs, A).write_file("/data/data.csv", one, truncate=True)
        assert keyed.version == v + 1 and (3, "N3") in rows(keyed)
        head, _, body = one.partition(b"\n")
        every = head + b"\n" + body.replace(b",n", b",renamed-n")
        with pytest.raises(NfsError) as e:
            PathOps(fs, A).write_file("/data/data.csv", every, truncate=True)
        assert status(e) == Nfsstat3.NFS3ERR_INVAL and "one commit" in str(e.value)
        assert keyed.version == v + 1
        header = one.replace(b"id,name", b"id,nom")
        with pytest.raises(NfsError) as e:
            PathOps(fs, A).write_file("/data/data.csv", header, truncate=True)
        assert status(e) == Nfsstat3.NFS3ERR_INVAL and keyed.version == v + 1
        assert not list((state / "journal").glob("*.wal"))  # nothing left to retry
    finally:
        fs.close()


def test_an_append_larger_than_memory_allows_is_refused_and_nothing_changes(
    keyed: DatabaseOps, clock: Clock, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appended lines are parsed in memory as one INSERT: past the same budget as a
    rewrite they are refused with EINVAL before they are read (not run out of memory),
    and no journal is left to retry at the next start."""
    import nfs.table.apply as apply_module

    monkeypatch.setattr(apply_module, "change_budget", lambda: 40)
    fs = _fs(keyed, clock, state)
    try:
        v = keyed.version
        size = fs.getattr(DATA_CSV_ID, A).size
        fs.write(DATA_CSV_ID, size, b"7,seven\n", StableHow.FILE_SYNC, A)  # within it
        assert keyed.version == v + 1 and (7, "seven") in rows(keyed)
        size = fs.getattr(DATA_CSV_ID, A).size
        lines = b"".join(b"%d,line-%d\n" % (i, i) for i in range(10, 20))
        fs.write(DATA_CSV_ID, size, lines, StableHow.UNSTABLE, A)
        with pytest.raises(NfsError) as e:
            close(fs, A)
        assert status(e) == Nfsstat3.NFS3ERR_INVAL and "posixlake insert" in str(e.value)
        assert keyed.version == v + 1 and len(rows(keyed)) == 6
        # the same lines in a whole overwrite (base plus lines) are refused alike
        whole = PathOps(fs, A).read_file("/data/data.csv") + lines
        with pytest.raises(NfsError) as e:
            PathOps(fs, A).write_file("/data/data.csv", whole, truncate=True)
        assert status(e) == Nfsstat3.NFS3ERR_INVAL and keyed.version == v + 1
        assert not list((state / "journal").glob("*.wal"))
    finally:
        fs.close()


def test_a_resent_append_reads_only_the_rows_of_its_keys(
    kfs: TableFs, keyed: DatabaseOps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Telling a resent append from a duplicate key reads the rows with its keys (the
    key reader), not the whole table (at 100M rows that would not fit in memory)."""
    size = kfs.getattr(DATA_CSV_ID, A).size
    kfs.write(DATA_CSV_ID, size, b"7,seven\n", StableHow.FILE_SYNC, A)
    v = keyed.version

    def whole_table(*args: object, **kwargs: object) -> object:
        raise AssertionError("the whole table was read")

    monkeypatch.setattr(keyed, "to_arrow", whole_table)
    kfs.write(DATA_CSV_ID, size, b"7,seven\n", StableHow.FILE_SYNC, B)
    assert keyed.version == v
    with pytest.raises(NfsError) as e:
        kfs.write(DATA_CSV_ID, size, b"7,other\n8,eight\n", StableHow.FILE_SYNC, B)
    assert status(e) == Nfsstat3.NFS3ERR_INVAL and keyed.version == v
    monkeypatch.undo()
    assert (7, "seven") in rows(keyed) and (8, "eight") not in rows(keyed)


def test_short_journal_writes_leave_no_torn_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file may take fewer bytes than asked (a nearly full disk): the journal goes on
    with the rest, so every record it counted written reads back whole."""
    from nfs.table.journal import JournalDir, JournalHeader, JournalOp, read_journal

    real = os.writev

    def short(fd: int, buffers: list[memoryview]) -> int:
        return real(fd, [memoryview(buffers[0]).cast("B")[:7]])  # 7 bytes at most

    monkeypatch.setattr(os, "writev", short)
    jdir = JournalDir(tmp_path / "journal")
    journal = jdir.create(JournalHeader("w1", "t", 3, 40, "10.0.0.1:1", 0, 0))
    journal.write(0, b"id,name\n1,one\n")
    journal.truncate(5)
    journal.write(100, memoryview(b"x" * 1000)[10:])
    journal.sync()
    journal.close()
    monkeypatch.undo()
    got = read_journal(journal.path)
    assert got is not None and got.header.base_version == 3
    assert got.ops == (
        JournalOp("W", 0, b"id,name\n1,one\n"),
        JournalOp("T", 5),
        JournalOp("W", 100, b"x" * 990),
    )
    jdir.release()


_FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from nfs.table.journal import JournalDir, JournalHeader
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: a short write, then EFBIG
journal = JournalDir(Path(sys.argv[1])).create(JournalHeader("w1", "t", 3, 40, "p:1", 0, 0))
journal.sync()
limit = journal.path.stat().st_size + 100
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
try:
    journal.write(0, b"x" * 1000)
except OSError as err:
    print("refused", err.errno)
else:
    print("accepted")
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
journal.write(0, b"retried")  # the client retries once there is room
journal.close()
from nfs.table.journal import read_journal
print(*[(op.kind, op.number, bytes(op.data).decode()) for op in read_journal(journal.path).ops])
"""


def test_a_journal_write_the_disk_takes_only_in_part_is_an_error(tmp_path: Path) -> None:
    """A file that takes only part of a record (a disk or file size limit reached): the
    WRITE fails, instead of being counted written with a torn record behind it, and
    the part written is cut off, so the client's retry is read back after a crash."""
    import errno
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(tmp_path / "journal")],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=True,
    )
    refused, ops = out.stdout.splitlines()
    assert refused.split() == ["refused", str(errno.EFBIG)]
    assert ops == "('W', 0, 'retried')"  # the retry reads back; nothing torn before it


def test_a_write_the_journal_refuses_is_not_staged(
    fs: TableFs, plain: DatabaseOps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal is written first: a WRITE it cannot record fails and is not in the
    staging either (with or without a crash, the bytes are not there)."""
    import errno

    from nfs.table.journal import JournalFile

    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"6,six\n", StableHow.UNSTABLE, A)
    real = JournalFile.write

    def full(self: JournalFile, offset: int, data: bytes | memoryview) -> None:
        if bytes(data).startswith(b"7,"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, offset, data)

    monkeypatch.setattr(JournalFile, "write", full)
    with pytest.raises(NfsError) as e:
        fs.write(DATA_CSV_ID, size + 6, b"7,seven\n", StableHow.UNSTABLE, A)
    assert status(e) == Nfsstat3.NFS3ERR_NOSPC
    monkeypatch.undo()
    mine, _ = fs.read(DATA_CSV_ID, 0, size + 100, A)
    assert bytes(mine).endswith(b"5,n5\n6,six\n")
    close(fs, A)
    assert rows(plain)[-1] == (6, "six") and len(rows(plain)) == 6


def test_a_staging_that_fails_is_dropped_and_the_client_told_to_resend(
    fs: TableFs, plain: DatabaseOps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staging's own storage failing (its spill file) after the journal took the
    write: the staging and its journal are dropped and the write verifier changes, so
    the client resends what it had not committed; nothing half-staged is applied."""
    import errno

    from nfs.table.staging import Staging

    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"6,six\n", StableHow.UNSTABLE, A)
    verifier = fs.write_verifier()

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(Staging, "write", broken)
    with pytest.raises(NfsError) as e:
        fs.write(DATA_CSV_ID, size + 6, b"7,seven\n", StableHow.UNSTABLE, A)
    assert status(e) == Nfsstat3.NFS3ERR_IO
    monkeypatch.undo()
    assert fs.write_verifier() != verifier
    v = plain.version
    close(fs, A)  # nothing staged any more: nothing applied
    assert plain.version == v and len(rows(plain)) == 5
    fs.write(DATA_CSV_ID, size, b"6,six\n7,seven\n", StableHow.UNSTABLE, A)  # resent
    close(fs, A)
    assert [r[0] for r in rows(plain)] == [1, 2, 3, 4, 5, 6, 7]


def test_a_failed_fsync_promises_nothing_later(
    fs: TableFs, plain: DatabaseOps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A COMMIT whose journal fsync fails is an error, and no later COMMIT promises those
    bytes (the kernel may have dropped the journal's dirty pages): the staging goes with
    its journal and the write verifier changes, so the client resends."""
    import errno

    size = fs.getattr(DATA_CSV_ID, A).size
    fs.write(DATA_CSV_ID, size, b"6,si", StableHow.UNSTABLE, A)  # mid-line: held durably
    verifier = fs.write_verifier()

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(NfsError) as e:
        fs.commit(DATA_CSV_ID, 0, 0, A)
    assert status(e) == Nfsstat3.NFS3ERR_IO
    monkeypatch.undo()
    assert fs.write_verifier() != verifier
    mine, _ = fs.read(DATA_CSV_ID, 0, size + 100, A)
    assert len(mine) == size  # nothing staged any more
    fs.write(DATA_CSV_ID, size, b"6,six\n", StableHow.UNSTABLE, A)  # resent
    close(fs, A)
    assert rows(plain)[-1] == (6, "six")


def test_a_journal_whose_base_is_gone_is_set_aside_and_reported(
    plain: DatabaseOps, clock: Clock, state: Path
) -> None:
    """The rows a staging was based on are needed to apply it (3-way): a journal based on
    a version the table does not have is kept as *.failed and its writer gets EIO."""
    from nfs.table.journal import JournalDir, JournalHeader
    from nfs.table.writers import WriterKey

    key = WriterKey.of(A)
    jdir = JournalDir(state / "journal")
    head = JournalHeader("w1", plain.table_id, 999, 123, key.peer, key.uid, key.gid)
    journal = jdir.create(head)
    journal.truncate(0)
    journal.write(0, b"id,name\n1,one\n")
    journal.close()
    jdir.release()
    v = plain.version
    fs = _fs(plain, clock, state)
    try:
        with pytest.raises(NfsError) as e:
            fs.commit(DATA_CSV_ID, 0, 0, A)
        assert status(e) == Nfsstat3.NFS3ERR_IO
        assert plain.version == v
        assert [p.name for p in (state / "journal").glob("w1.*")] == ["w1.failed"]
    finally:
        fs.close()


def test_a_resent_append_of_a_committed_line_inserts_nothing_twice(
    kfs: TableFs, keyed: DatabaseOps
) -> None:
    """A retransmitted append (the reply was lost) or a page holding the client's own
    earlier line: identical rows are not new; a key with other values is still EINVAL."""
    size = kfs.getattr(DATA_CSV_ID, A).size
    kfs.write(DATA_CSV_ID, size, b"7,seven\n", StableHow.FILE_SYNC, A)
    v = keyed.version
    kfs.write(DATA_CSV_ID, size, b"7,seven\n", StableHow.FILE_SYNC, B)  # the same WRITE again
    assert keyed.version == v and len(rows(keyed)) == 6
    with pytest.raises(NfsError) as e:
        kfs.write(DATA_CSV_ID, size, b"7,other\n", StableHow.FILE_SYNC, B)
    assert status(e) == Nfsstat3.NFS3ERR_INVAL
    assert (7, "seven") in rows(keyed) and keyed.version == v


def test_appends_and_others_commits_in_turn_always_show_the_tables_csv(
    fs: TableFs, plain: DatabaseOps, tmp_path: Path
) -> None:
    """One-row FILE_SYNC appends (each one commit, rendered from the new file's segment
    only) with another writer's commits between an append and the next read: every
    reader is shown exactly what a server with an empty segment cache renders, the
    table's rows, each commit's at the end (appends land after what was there)."""

    def fresh(n: int) -> bytes:
        other = TableFs(
            plain,
            idle_timer=False,
            state_dir=tmp_path / f"fresh-state-{n}",
            segment_cache=tmp_path / f"fresh-cache-{n}",
        )
        try:
            return PathOps(other, B).read_file("/data/data.csv")
        finally:
            other.close()

    shown = PathOps(fs, B).read_file("/data/data.csv")
    for i in range(4):
        before = plain.version
        size = fs.getattr(DATA_CSV_ID, A).size
        fs.write(DATA_CSV_ID, size, f"{10 + i},a{i}\n".encode(), StableHow.FILE_SYNC, A)
        assert plain.version == before + 1
        if i % 2:  # another writer commits before anyone reads the append's version
            plain.insert([{"id": 100 + i, "name": f"api{i}"}])
        want = fresh(i)
        assert PathOps(fs, B).read_file("/data/data.csv") == want
        assert fs.getattr(DATA_CSV_ID, A).size == len(want)
        assert PathOps(fs, A).read_file("/data/data.csv") == want
        assert want.startswith(shown)
        table = render_csv(plain.to_arrow())
        assert sorted(want.splitlines()) == sorted(table.splitlines())
        shown = want
    assert len(rows(plain)) == 5 + 4 + 2


def test_a_file_sync_append_that_applies_at_once_writes_no_journal(
    fs: TableFs, plain: DatabaseOps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``echo >>``'s one FILE_SYNC WRITE begins a staging and applies it in the same call:
    nothing is promised before its commit and the staging ends with the call, so no journal
    file is made for it (a full journal disk does not stop it)."""
    import errno

    from nfs.table.journal import JournalDir

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(JournalDir, "create", full)
    before = plain.version
    size = fs.getattr(DATA_CSV_ID, A).size
    assert fs.write(DATA_CSV_ID, size, b"6,six\n", StableHow.FILE_SYNC, A) == (
        6,
        StableHow.FILE_SYNC,
    )
    assert plain.version == before + 1 and rows(plain)[-1] == (6, "six")
    assert not fs._writers


def test_a_first_file_sync_write_that_does_not_apply_is_journaled_before_its_reply(
    fs: TableFs, plain: DatabaseOps, clock: Clock, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FILE_SYNC WRITE that begins a staging but is not an append (a change in the
    middle of the file) is journaled and fsynced before its reply, so a crash keeps it;
    if the journal cannot take it, the WRITE fails and nothing is staged."""
    import errno

    from nfs.table.journal import JournalDir, read_journal

    at = PathOps(fs, A).read_file("/data/data.csv").index(b"n1")
    fs.write(DATA_CSV_ID, at, b"N", StableHow.FILE_SYNC, A)
    assert fs._writers
    (wal,) = fs._journals.path.glob("*.wal")
    got = read_journal(wal)
    assert got is not None and [(op.kind, op.number, op.data) for op in got.ops] == [
        ("W", at, b"N")
    ]
    crash(fs)
    again = _fs(plain, clock, state)
    try:
        close(again, A)  # recovered for its writer, applied when it is done
        assert rows(plain) == [(1, "N1"), (2, "n2"), (3, "n3"), (4, "n4"), (5, "n5")]
    finally:
        again.close()

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    other = _fs(plain, clock, state)
    try:
        at = PathOps(other, B).read_file("/data/data.csv").index(b"n2")
        monkeypatch.setattr(JournalDir, "create", full)
        with pytest.raises(NfsError) as e:
            other.write(DATA_CSV_ID, at, b"N", StableHow.FILE_SYNC, B)
        assert status(e) == Nfsstat3.NFS3ERR_NOSPC
        assert not other._writers
        assert rows(plain) == [(1, "N1"), (2, "n2"), (3, "n3"), (4, "n4"), (5, "n5")]
    finally:
        other.close()
