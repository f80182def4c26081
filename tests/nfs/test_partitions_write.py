"""Writes to a partition's data.csv, through TableFs in process (real Delta tables).

``/partitions/<col>=<value>/.../data.csv`` is written as ``/data/data.csv`` is
(docs/nfs-writes.md, "Partition files"): per-writer staging, the journal, one commit per
edit, a base from what the writer read; limited to that partition's rows: an append
inserts rows that must hold the partition's values (else EINVAL, nothing committed), a
rewrite changes only the partition's rows, an empty file or ``rm`` deletes them.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli._serve import table_entries
from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import NfsError
from nfs.table.access import TableAccessVfs, UserMap
from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps
from posixlake.csvcodec import render_csv
from tests.nfs.idle import FakeClock

ROOT = CallContext.local()
EU1 = "/partitions/region=eu/day=2024-01-01"
DAY1 = datetime.date(2024, 1, 1)
DAY2 = datetime.date(2024, 1, 2)


def _rows(n: int) -> list[dict[str, object]]:
    return [
        {"id": i, "region": ["eu", "us"][i % 2], "day": DAY1 if i % 4 < 2 else DAY2, "v": i / 4}
        for i in range(n)
    ]


@pytest.fixture(params=[False, True], ids=["no-key", "key"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / "t",
        {"id": "Int64", "region": "String", "day": "Date", "v": "Float64"},
        partition_by=["region", "day"],
        primary_key="id" if request.param else None,
        engine="local",
    )
    d.insert(_rows(40))
    return d


def _fs(db: DatabaseOps, tmp_path: Path, clock: FakeClock | None = None) -> TableFs:
    return TableFs(
        db,
        idle_timer=False,
        clock=clock or FakeClock(),
        state_dir=tmp_path / "state",
        segment_cache=tmp_path / "segments",
    )


@pytest.fixture
def fs(db: DatabaseOps, tmp_path: Path) -> Iterator[TableFs]:
    f = _fs(db, tmp_path)
    yield f
    f.close()


def table_rows(db: DatabaseOps) -> Counter[bytes]:
    return Counter(render_csv(db.to_arrow()).splitlines()[1:])


def others(rows: Counter[bytes]) -> Counter[bytes]:
    """The rows outside region=eu/day=2024-01-01."""
    return Counter({r: n for r, n in rows.items() if b",eu,2024-01-01," not in r})


def test_an_append_inserts_the_partition_rows_in_one_commit(fs: TableFs, db: DatabaseOps) -> None:
    p = fs.paths
    path = f"{EU1}/data.csv"
    before, rows = db.version, table_rows(db)
    size = len(p.read_file(path))
    p.write_file(path, b"100,eu,2024-01-01,2.5\n101,eu,2024-01-01,\n", offset=size, commit=False)
    assert db.version == before + 1  # the FILE_SYNC append applied at once (echo >>)
    assert table_rows(db) == rows + Counter([b"100,eu,2024-01-01,2.5", b"101,eu,2024-01-01,"])
    assert p.read_file(path).endswith(b"100,eu,2024-01-01,2.5\n101,eu,2024-01-01,\n")


def test_a_row_of_another_partition_is_refused(fs: TableFs, db: DatabaseOps) -> None:
    p = fs.paths
    path = f"{EU1}/data.csv"
    before, rows = db.version, table_rows(db)
    size = len(p.read_file(path))
    for line in (b"100,us,2024-01-01,1\n", b"100,eu,2024-01-02,1\n", b"100,,2024-01-01,1\n"):
        with pytest.raises(NfsError) as err:
            p.write_file(path, line, offset=size, commit=False)
        assert err.value.status == Nfsstat3.NFS3ERR_INVAL
        assert "partition" in str(err.value)
    # an UNSTABLE write is refused at the WRITE that completes the line, too
    with pytest.raises(NfsError) as err:
        p.write_file(path, b"102,us,2024-01-01,1\n", offset=size, stable=StableHow.UNSTABLE)
    assert err.value.status == Nfsstat3.NFS3ERR_INVAL
    assert db.version == before
    assert table_rows(db) == rows


def test_a_stale_page_widened_append_does_not_bring_deleted_rows_back(
    fs: TableFs, db: DatabaseOps
) -> None:
    """The client holds the partition's page from an earlier read; another writer
    deletes all but one of the partition's rows; ``echo >>`` sends the stale page with the
    new line (one FILE_SYNC WRITE at 0): only the new line is inserted."""
    p = fs.paths
    path = f"{EU1}/data.csv"
    old = p.read_file(path)
    db.delete_rows_where("id IN (4, 8, 12, 16, 20, 24, 28, 32, 36)")  # EU1 but its id 0
    rows = table_rows(db)
    p.write_file(path, old + b"100,eu,2024-01-01,2.5\n", offset=0, commit=False)
    assert table_rows(db) == rows + Counter([b"100,eu,2024-01-01,2.5"])


def test_a_stale_append_at_the_old_end_inserts_only_its_line(fs: TableFs, db: DatabaseOps) -> None:
    """An ``exec 3>>data.csv`` in the partition holds its old size; another writer
    deletes the partition's last rows; the append at the old end inserts only its line
    (the deleted rows stay deleted, no row is doubled)."""
    p = fs.paths
    path = f"{EU1}/data.csv"
    size = p.getattr(path).size
    db.delete_rows_where("id IN (32, 36)")  # the partition's last two lines
    rows = table_rows(db)
    p.write_file(path, b"100,eu,2024-01-01,2.5\n", offset=size, commit=False)
    assert table_rows(db) == rows + Counter([b"100,eu,2024-01-01,2.5"])


def test_a_rewrite_changes_only_the_partition(fs: TableFs, db: DatabaseOps) -> None:
    """Read the partition, drop one row, change one, add one: the rest of the table stays,
    also rows others committed meanwhile."""
    p = fs.paths
    path = f"{EU1}/data.csv"
    old = p.read_file(path).splitlines()
    header, body = old[0], old[1:]
    assert len(body) >= 3
    changed = body[1].rsplit(b",", 1)[0] + b",9.25"
    assert changed != body[1]
    new_body = [changed, *body[2:], b"500,eu,2024-01-01,5"]
    db.insert([{"id": 900, "region": "us", "day": DAY2, "v": 1.0}])  # another writer
    before, rows = db.version, table_rows(db)
    p.write_file(path, b"\n".join([header, *new_body]) + b"\n", truncate=True)
    assert db.version == before + 1
    got = table_rows(db)
    assert others(got) == others(rows)  # 900 included
    mine = Counter({r: n for r, n in got.items() if b",eu,2024-01-01," in r})
    assert mine == Counter(new_body)


def test_a_rewrite_with_a_row_of_another_partition_commits_nothing(
    fs: TableFs, db: DatabaseOps
) -> None:
    p = fs.paths
    path = f"{EU1}/data.csv"
    content = p.read_file(path)
    before, rows = db.version, table_rows(db)
    with pytest.raises(NfsError) as err:
        p.write_file(path, content + b"501,us,2024-01-02,1\n" + content[:0], truncate=True)
    assert err.value.status == Nfsstat3.NFS3ERR_INVAL
    assert db.version == before and table_rows(db) == rows


def test_an_empty_file_and_rm_delete_only_the_partition(fs: TableFs, db: DatabaseOps) -> None:
    p = fs.paths
    rows = table_rows(db)
    p.write_file(f"{EU1}/data.csv", b"", truncate=True)
    assert table_rows(db) == others(rows)
    assert "day=2024-01-01" not in p.readdir("/partitions/region=eu")  # it is gone
    before = table_rows(db)
    p.remove_file("/partitions/region=us/day=2024-01-02/data.csv")
    after = table_rows(db)
    assert after == Counter({r: n for r, n in before.items() if b",us,2024-01-02," not in r})
    assert after  # the other partitions stay


def test_sed_i_in_a_partition_directory(fs: TableFs, db: DatabaseOps) -> None:
    """sed -i: a temporary file in the partition's directory, renamed onto its data.csv."""
    p = fs.paths
    path = f"{EU1}/data.csv"
    content = p.read_file(path)
    rows = table_rows(db)
    tmp = f"{EU1}/sedAbC123"
    edited = content.replace(b"4,eu,2024-01-01,1\n", b"4,eu,2024-01-01,7.5\n")
    assert edited != content
    p.write_file(tmp, edited)
    assert sorted(p.readdir(EU1)) == ["data.csv", "sedAbC123"]
    p.rename(tmp, path)
    assert p.readdir(EU1) == ["data.csv"]
    got = table_rows(db)
    assert others(got) == others(rows)
    assert got[b"4,eu,2024-01-01,7.5"] == 1 and got[b"4,eu,2024-01-01,1"] == 0
    assert Counter(p.read_file(path).splitlines()) == Counter(edited.splitlines())


def test_a_writer_of_two_files_has_two_stagings(fs: TableFs, db: DatabaseOps) -> None:
    """The same client editing /data/data.csv and a partition's file: two edits."""
    p = fs.paths
    data = p.read_file("/data/data.csv")
    part = p.read_file(f"{EU1}/data.csv")
    p.write_file(
        "/data/data.csv",
        b"300,us,2024-01-02,3\n",
        offset=len(data),
        commit=False,
        stable=StableHow.UNSTABLE,
    )
    p.write_file(
        f"{EU1}/data.csv",
        b"301,eu,2024-01-01,3\n",
        offset=len(part),
        stable=StableHow.UNSTABLE,
        commit=False,
    )
    assert p.read_file("/data/data.csv") == data + b"300,us,2024-01-02,3\n"
    assert p.read_file(f"{EU1}/data.csv") == part + b"301,eu,2024-01-01,3\n"
    before = db.version
    p.finish(f"{EU1}/data.csv")
    p.finish("/data/data.csv")
    assert db.version == before + 2
    got = table_rows(db)
    assert got[b"300,us,2024-01-02,3"] == 1 and got[b"301,eu,2024-01-01,3"] == 1


def test_a_staged_partition_edit_survives_a_restart(db: DatabaseOps, tmp_path: Path) -> None:
    """COMMITted (journaled) writes of a partition's file are recovered for the same
    writer, on the partition's base, and applied to that partition only."""
    first = _fs(db, tmp_path)
    p = first.paths
    path = f"{EU1}/data.csv"
    content = p.read_file(path)
    rows = table_rows(db)
    new = content.splitlines()[0] + b"\n" + b"700,eu,2024-01-01,7\n"
    p.truncate(path, 0)
    p.write_file(path, new, stable=StableHow.UNSTABLE, commit=True, finish=False)
    version = db.version
    first.close()  # a crash or stop: nothing applied
    assert db.version == version
    again = _fs(db, tmp_path)
    try:
        again.paths.finish(path)  # the same writer (local) closes its edit
        got = table_rows(db)
        assert others(got) == others(rows)
        assert Counter({r: n for r, n in got.items() if b",eu,2024-01-01," in r}) == Counter(
            [b"700,eu,2024-01-01,7"]
        )
    finally:
        again.close()


def test_a_mapped_user_needs_write_for_a_partition(fs: TableFs, db: DatabaseOps) -> None:
    path = f"{EU1}/data.csv"
    fid = fs.paths.resolve(path)
    size = len(fs.paths.read_file(path))
    roles = {"ana": frozenset({"read"}), "bob": frozenset({"read", "write", "delete"})}
    wrapped = TableAccessVfs(
        fs, table_entries(), UserMap.parse(["1=ana", "2=bob"]), roles.__getitem__
    )
    ana, bob = CallContext.local(uid=1), CallContext.local(uid=2)
    before = db.version
    line = b"800,eu,2024-01-01,8\n"
    with pytest.raises(NfsError) as err:
        wrapped.write(fid, size, line, StableHow.FILE_SYNC, ana)
    assert err.value.status == Nfsstat3.NFS3ERR_ACCES
    leaf = fs.paths.resolve(EU1)
    with pytest.raises(NfsError) as err:
        wrapped.remove(leaf, "data.csv", ana)
    assert err.value.status == Nfsstat3.NFS3ERR_ACCES
    assert db.version == before
    wrapped.write(fid, size, line, StableHow.FILE_SYNC, bob)
    assert db.version == before + 1


def test_a_read_only_share_refuses_partition_writes(db: DatabaseOps, tmp_path: Path) -> None:
    f = TableFs(
        db, idle_timer=False, read_only=True, state_dir=tmp_path / "s", segment_cache=tmp_path / "c"
    )
    try:
        path = f"{EU1}/data.csv"
        fid = f.paths.resolve(path)
        before = db.version
        for attempt in (
            lambda: f.write(fid, 0, b"x", StableHow.FILE_SYNC, ROOT),
            lambda: f.setattr(fid, Sattr3(size=0), ROOT),
            lambda: f.create(f.paths.resolve(EU1), "tmp", Sattr3(), ROOT, guarded=False),
        ):
            with pytest.raises(NfsError) as err:
                attempt()
            assert err.value.status == Nfsstat3.NFS3ERR_ROFS
        assert db.version == before
    finally:
        f.close()


def test_a_large_rewrite_is_checked_when_it_applies(
    fs: TableFs, db: DatabaseOps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Content past the per-WRITE check (1 MiB; 0 here) is checked when it applies: a row
    of another partition in a changed region refuses the whole edit."""
    import nfs.table.writes

    monkeypatch.setattr(nfs.table.writes, "CHECK_BYTES", 0)
    p = fs.paths
    path = f"{EU1}/data.csv"
    content = p.read_file(path)
    before, rows = db.version, table_rows(db)
    lines = content.splitlines()
    moved = lines[2].replace(b",eu,", b",us,")
    new = b"\n".join([*lines[:2], moved, *lines[3:]]) + b"\n"
    p.write_file(path, new, truncate=True, finish=False)  # no error at the COMMIT now
    with pytest.raises(NfsError) as err:
        p.finish(path)
    assert err.value.status == Nfsstat3.NFS3ERR_INVAL
    assert "region='us'" in str(err.value)
    assert db.version == before and table_rows(db) == rows
