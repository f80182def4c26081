"""Tables made by writing data.csv into a new lake directory (in process, through LakeFs;
real Delta tables in tmp_path): types inferred losslessly, one commit at the end of the
edit (NFSv4 CLOSE, NFSv3 idle window), bytes journaled until then."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfs.lake.lakefs import LakeFs
from nfs.lake.newrows import NewRows, rows_table_creator
from nfs.lake.opening import table_creator, tablefs_opener
from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import BOUNDED_PEER_PREFIX, FileId, NfsError
from posixlake import DatabaseOps
from tests.nfs.conftest import FakeClock

V3 = CallContext.local(1000, 1000, peer="10.0.0.1:700")
V3B = CallContext.local(1000, 1000, peer="10.0.0.2:700")
V4 = CallContext.local(1000, 1000, peer=BOUNDED_PEER_PREFIX + "client-1/owner-1")
ROOT = CallContext.local()
IDLE = 5.0
ROWS = b"id,zip,price,day,ok,name\n1,007,1.5,2024-01-02,true,ann\n2,12345,2.25,2024-02-03,false,\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    with DatabaseOps.create(lake / "old", {"id": "Int64"}, engine="local") as db:
        db.insert([{"id": 1}])
    return lake


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


MakeLake = Callable[[], LakeFs]


@pytest.fixture
def make_lake(root: Path, tmp_path: Path, clock: FakeClock) -> Iterator[MakeLake]:
    made: list[LakeFs] = []
    state = tmp_path / "state"

    def make() -> LakeFs:
        opener = tablefs_opener(
            str(root),
            state_dir=state,
            engine={"engine": "local"},
            tablefs={"idle_timer": False, "clock": clock, "idle_seconds": IDLE},
        )
        fs = LakeFs(
            str(root),
            opener,
            state_dir=state,
            clock=clock,
            creator=table_creator(str(root), engine={"engine": "local"}),
            rows_creator=rows_table_creator(str(root)),
            idle_seconds=IDLE,
            idle_timer=False,
        )
        made.append(fs)
        return fs

    yield make
    for fs in made:
        fs.close()


@pytest.fixture
def lake(make_lake: MakeLake) -> LakeFs:
    return make_lake()


def names(fs: LakeFs, fid: FileId, ctx: CallContext = ROOT) -> list[str]:
    page = fs.readdir(fid, after=0, max_entries=100, ctx=ctx)
    return [e.name for e in page.entries if e.name not in (".", "..")]


def write_rows(
    fs: LakeFs,
    dir_id: FileId,
    data: bytes,
    ctx: CallContext,
    *,
    chunk: int = 40,
) -> FileId:
    """``cp``: CREATE (truncating), UNSTABLE WRITEs, then the COMMIT of its close()."""
    fid = fs.create(dir_id, "data.csv", Sattr3(size=0), ctx, guarded=False)
    for at in range(0, len(data), chunk):
        fs.write(fid, at, data[at : at + chunk], StableHow.UNSTABLE, ctx)
    fs.commit(fid, 0, 0, ctx)
    return fid


def rows_of(path: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = DatabaseOps.open(path, engine="local").to_arrow().to_pylist()
    return rows


def test_an_nfs3_writer_creates_the_table_at_the_idle_window(
    lake: LakeFs, root: Path, clock: FakeClock
) -> None:
    top = lake.root_dir()
    new = lake.mkdir(top, "sales", Sattr3(), V3)
    fid = write_rows(lake, new, ROWS, V3)
    assert names(lake, new) == ["data.csv"]
    assert lake.getattr(fid).size == len(ROWS)
    assert bytes(lake.read(fid, 0, 1 << 16, V3)[0]) == ROWS
    lake.poll()  # a COMMIT is not the end of the edit (writeback COMMITs one mid-copy)
    assert not (root / "sales").exists()
    clock.advance(IDLE - 0.1)
    lake.poll()
    assert not (root / "sales").exists()
    clock.advance(0.2)
    lake.poll()
    db = DatabaseOps.open(root / "sales", engine="local")
    assert db.version == 0  # the table and its rows: one commit
    types = {f.name: f.type for f in db.arrow_schema}
    assert types == {
        "id": pa.int64(),
        "zip": pa.string(),  # 007: a code, the zeros kept
        "price": pa.float64(),
        "day": pa.date32(),
        "ok": pa.bool_(),
        "name": pa.string(),
    }
    got = sorted(rows_of(root / "sales"), key=lambda r: int(str(r["id"])))
    assert [(r["id"], r["zip"], r["price"], r["name"]) for r in got] == [
        (1, "007", 1.5, "ann"),
        (2, "12345", 2.25, None),
    ]
    # the handles the writer holds: its directory is the table, its file data/data.csv
    table = lake.lookup(top, "sales", ROOT)
    csv = lake.lookup(lake.lookup(table, "data", ROOT), "data.csv", ROOT)
    assert lake.getattr(fid).fileid == csv
    assert names(lake, new) == names(lake, table)
    assert bytes(lake.read(fid, 0, 1 << 16, V3)[0]) == bytes(lake.read(csv, 0, 1 << 16, V3)[0])
    # its edit resent (the same bytes, to the same handle): no second commit, no EEXIST
    for at in range(0, len(ROWS), 40):
        lake.write(fid, at, ROWS[at : at + 40], StableHow.UNSTABLE, V3)
    lake.commit(fid, 0, 0, V3)
    clock.advance(IDLE + 1)
    lake.poll()
    assert DatabaseOps.open(root / "sales", engine="local").version == 0
    assert len(rows_of(root / "sales")) == 2


def test_an_nfs4_writer_creates_the_table_at_close_only(
    lake: LakeFs, root: Path, clock: FakeClock
) -> None:
    new = lake.mkdir(lake.root_dir(), "v4", Sattr3(), V4)
    fid = write_rows(lake, new, ROWS, V4)
    clock.advance(IDLE * 10)
    lake.poll()  # no idle window for an NFSv4 open: only its CLOSE ends the edit
    assert not (root / "v4").exists()
    lake.finish(fid, V4)
    assert DatabaseOps.open(root / "v4", engine="local").version == 0
    assert len(rows_of(root / "v4")) == 2
    lake.finish(fid, V4)  # a CLOSE resent: nothing more
    assert DatabaseOps.open(root / "v4", engine="local").version == 0
    assert lake.getattr(fid).size > 0  # the closed handle is the table's data.csv


@pytest.mark.parametrize("ctx", [V3, V4], ids=["v3", "v4"])
def test_bad_csv_fails_the_commit_and_creates_nothing(
    lake: LakeFs, root: Path, clock: FakeClock, ctx: CallContext
) -> None:
    new = lake.mkdir(lake.root_dir(), "bad", Sattr3(), ctx)
    fid = lake.create(new, "data.csv", Sattr3(size=0), ctx, guarded=False)
    lake.write(fid, 0, b"a,b\n1,2,3\n", StableHow.UNSTABLE, ctx)
    with pytest.raises(NfsError) as exc:
        lake.commit(fid, 0, 0, ctx)
    assert exc.value.status == Nfsstat3.NFS3ERR_INVAL
    assert names(lake, new) == []  # the staged bytes are dropped
    clock.advance(IDLE * 2)
    lake.poll()
    lake.finish(fid, ctx)
    assert not (root / "bad").exists()
    lake.rmdir(lake.root_dir(), "bad", ROOT)  # still not a table: it may go


def test_bad_csv_found_at_close_fails_the_close(lake: LakeFs, root: Path) -> None:
    new = lake.mkdir(lake.root_dir(), "big", Sattr3(), V4)
    fid = lake.create(new, "data.csv", Sattr3(size=0), V4, guarded=False)
    lake.write(fid, 0, b"a,b\n1,2\n3\n", StableHow.UNSTABLE, V4)  # no COMMIT before CLOSE
    with pytest.raises(NfsError) as exc:
        lake.finish(fid, V4)
    assert exc.value.status == Nfsstat3.NFS3ERR_INVAL
    assert not (root / "big").exists()
    assert names(lake, new) == []


def test_two_writers_one_table_the_second_gets_eexist_then_adds_rows(
    lake: LakeFs, root: Path, clock: FakeClock
) -> None:
    top = lake.root_dir()
    new = lake.mkdir(top, "race", Sattr3(), V3)
    first = write_rows(lake, new, ROWS, V3)
    with pytest.raises(NfsError) as exc:  # another client's cp of its own rows
        lake.create(new, "data.csv", Sattr3(size=0), V3B, guarded=False)
    assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
    with pytest.raises(NfsError) as exc:  # nor can it write into the first one's staging
        lake.write(first, 0, b"x\n", StableHow.FILE_SYNC, V3B)
    assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
    clock.advance(IDLE + 1)
    lake.poll()
    assert DatabaseOps.open(root / "race", engine="local").version == 0
    for d in (new, lake.lookup(top, "race", V3B)):  # a cp of data.csv once it is a table
        with pytest.raises(NfsError) as exc:
            lake.create(d, "data.csv", Sattr3(size=0), V3B, guarded=False)
        assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
    # once it is a table, the second writer adds its rows by the usual rules
    data = lake.lookup(lake.lookup(top, "race", V3B), "data", V3B)
    csv = lake.lookup(data, "data.csv", V3B)
    size = lake.getattr(csv).size
    lake.write(csv, size, b"3,0042,9.5,2024-03-04,true,cy\n", StableHow.FILE_SYNC, V3B)
    assert sorted(str(r["zip"]) for r in rows_of(root / "race")) == ["0042", "007", "12345"]


def test_a_table_made_elsewhere_first_is_eexist_and_left_alone(lake: LakeFs, root: Path) -> None:
    new = lake.mkdir(lake.root_dir(), "taken", Sattr3(), V4)
    fid = write_rows(lake, new, ROWS, V4)
    with DatabaseOps.create(root / "taken", {"x": "String"}, engine="local"):
        pass
    with pytest.raises(NfsError) as exc:
        lake.finish(fid, V4)
    assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
    db = DatabaseOps.open(root / "taken", engine="local")
    assert db.arrow_schema.names == ["x"] and db.version == 0


@pytest.mark.parametrize("ctx", [V3, V4], ids=["v3", "v4"])
def test_a_table_made_elsewhere_while_listed_again_fails_the_writer(
    lake: LakeFs, root: Path, tmp_path: Path, ctx: CallContext
) -> None:
    new = lake.mkdir(lake.root_dir(), "taken", Sattr3(), ctx)
    fid = lake.create(new, "data.csv", Sattr3(size=0), ctx, guarded=False)
    lake.write(fid, 0, ROWS, StableHow.UNSTABLE, ctx)
    with DatabaseOps.create(root / "taken", {"x": "String"}, engine="local"):
        pass
    lake.refresh()
    assert "taken" in lake.tables()  # the other table shows; the staging is not it
    ends: list[Callable[[], object]] = [
        lambda: lake.commit(fid, 0, 0, ctx),
        lambda: lake.finish(fid, ctx),
    ]
    for end in ends:
        with pytest.raises(NfsError) as exc:
            end()
        assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
    assert not list((tmp_path / "state" / "new-tables").glob("*.wal"))
    db = DatabaseOps.open(root / "taken", engine="local")
    assert db.arrow_schema.names == ["x"] and db.version == 0


def test_committed_bytes_survive_a_restart_and_are_created_once(
    make_lake: MakeLake, root: Path, tmp_path: Path, clock: FakeClock
) -> None:
    lake = make_lake()
    new = lake.mkdir(lake.root_dir(), "crash", Sattr3(), V3)
    write_rows(lake, new, ROWS, V3)  # COMMIT OK: durable
    journals = sorted((tmp_path / "state" / "new-tables").glob("*.wal"))
    assert len(journals) == 1
    saved = tmp_path / "saved.wal"
    shutil.copy(journals[0], saved)
    lake.close()  # the server stops (or dies) before the idle window
    assert lake.unfinished_at_close == 1
    assert not (root / "crash").exists()
    again = make_lake()
    assert "crash" in names(again, again.root_dir())
    d = again.lookup(again.root_dir(), "crash", V3)
    assert names(again, d) == ["data.csv"]
    clock.advance(IDLE + 1)
    again.poll()
    assert DatabaseOps.open(root / "crash", engine="local").version == 0
    assert not list((tmp_path / "state" / "new-tables").glob("*.wal"))
    again.close()
    # a crash after the commit, before the journal was removed: not made twice
    shutil.copy(saved, journals[0])
    third = make_lake()
    assert not journals[0].exists()
    clock.advance(IDLE + 1)
    third.poll()
    assert DatabaseOps.open(root / "crash", engine="local").version == 0
    assert len(rows_of(root / "crash")) == 2


def test_only_one_of_schema_sql_and_data_csv(lake: LakeFs) -> None:
    new = lake.mkdir(lake.root_dir(), "one", Sattr3(), V3)
    with pytest.raises(NfsError) as exc:  # no other directory than data/
        lake.mkdir(new, "other", Sattr3(), V3)
    assert exc.value.status == Nfsstat3.NFS3ERR_ACCES
    write_rows(lake, new, ROWS, V3)
    with pytest.raises(NfsError) as exc:  # rows at the top already: no data/ then
        lake.mkdir(new, "data", Sattr3(), V3)
    assert exc.value.status == Nfsstat3.NFS3ERR_ACCES
    with pytest.raises(NfsError) as exc:
        lake.create(new, "schema.sql", Sattr3(size=0), V3, guarded=False)
    assert exc.value.status == Nfsstat3.NFS3ERR_ACCES
    lake.remove(new, "data.csv", V3)  # rm: the staged rows go
    assert names(lake, new) == []


def test_a_hole_waits_for_its_write(lake: LakeFs, root: Path, clock: FakeClock) -> None:
    new = lake.mkdir(lake.root_dir(), "holes", Sattr3(), V3)
    fid = lake.create(new, "data.csv", Sattr3(size=0), V3, guarded=False)
    cut = ROWS.index(b"\n1,") + 1  # the header, then the rows
    lake.write(fid, cut, ROWS[cut:], StableHow.UNSTABLE, V3)  # the second WRITE first
    lake.commit(fid, 0, 0, V3)  # a writeback COMMIT: zeros where the header goes are no CSV
    clock.advance(IDLE + 1)
    lake.poll()
    assert not (root / "holes").exists()  # the first WRITE is still on its way
    lake.write(fid, 0, ROWS[:cut], StableHow.UNSTABLE, V3)
    lake.commit(fid, 0, 0, V3)
    clock.advance(IDLE + 1)
    lake.poll()
    assert len(rows_of(root / "holes")) == 2


def test_a_data_csv_past_the_bound_is_refused_with_fbig(
    root: Path, tmp_path: Path, clock: FakeClock
) -> None:
    opener = tablefs_opener(str(root), state_dir=tmp_path / "st", engine={"engine": "local"})
    lake = LakeFs(
        str(root),
        opener,
        state_dir=tmp_path / "st",
        clock=clock,
        creator=table_creator(str(root), engine={"engine": "local"}),
        rows_creator=rows_table_creator(str(root), max_bytes=64),
        idle_timer=False,
    )
    try:
        new = lake.mkdir(lake.root_dir(), "big", Sattr3(), V3)
        fid = lake.create(new, "data.csv", Sattr3(size=0), V3, guarded=False)
        lake.write(fid, 0, ROWS[:60], StableHow.UNSTABLE, V3)
        with pytest.raises(NfsError) as exc:
            lake.write(fid, 60, ROWS[60:], StableHow.UNSTABLE, V3)
        assert exc.value.status == Nfsstat3.NFS3ERR_FBIG
        assert names(lake, new) == []  # dropped, journal too
        assert not list((tmp_path / "st" / "new-tables").glob("*.wal"))
        clock.advance(IDLE + 1)
        lake.poll()
        assert not (root / "big").exists()
    finally:
        lake.close()


@pytest.mark.parametrize("ctx", [V3, V4], ids=["v3", "v4"])
def test_mkdir_p_data_then_data_csv_in_it_makes_the_table(
    lake: LakeFs, root: Path, clock: FakeClock, ctx: CallContext
) -> None:
    top = lake.root_dir()
    new = lake.mkdir(top, "sales", Sattr3(), ctx)  # mkdir -p sales/data
    data = lake.mkdir(new, "data", Sattr3(), ctx)
    with pytest.raises(NfsError) as exc:
        lake.mkdir(new, "data", Sattr3(), ctx)
    assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
    assert lake.lookup(new, "data", ctx) == data and lake.lookup(data, "..", ctx) == new
    assert names(lake, new) == ["data"] and names(lake, data) == []
    with pytest.raises(NfsError) as exc:  # only data.csv belongs in data/
        lake.create(data, "schema.sql", Sattr3(size=0), ctx, guarded=False)
    assert exc.value.status == Nfsstat3.NFS3ERR_ACCES
    fid = write_rows(lake, data, ROWS, ctx)  # cp rows.csv sales/data/data.csv
    assert names(lake, data) == ["data.csv"] and lake.lookup(data, "data.csv", ctx) == fid
    with pytest.raises(NfsError) as exc:  # and not at the top as well
        lake.create(new, "data.csv", Sattr3(size=0), ctx, guarded=False)
    assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
    with pytest.raises(NfsError) as exc:
        lake.rmdir(new, "data", ctx)
    assert exc.value.status == Nfsstat3.NFS3ERR_NOTEMPTY
    if ctx is V4:
        lake.finish(fid, ctx)
    else:
        clock.advance(IDLE + 1)
        lake.poll()
    assert DatabaseOps.open(root / "sales", engine="local").version == 0
    table = lake.lookup(top, "sales", ROOT)
    table_data = lake.lookup(table, "data", ROOT)
    assert lake.getattr(fid).fileid == lake.lookup(table_data, "data.csv", ROOT)
    assert names(lake, data) == names(lake, table_data)  # its data/ is the table's


def test_an_empty_data_directory_may_go(lake: LakeFs) -> None:
    new = lake.mkdir(lake.root_dir(), "tmp", Sattr3(), V3)
    lake.mkdir(new, "data", Sattr3(), V3)
    with pytest.raises(NfsError) as exc:
        lake.rmdir(lake.root_dir(), "tmp", V3)
    assert exc.value.status == Nfsstat3.NFS3ERR_NOTEMPTY
    lake.rmdir(new, "data", V3)  # rm -r tmp
    lake.rmdir(lake.root_dir(), "tmp", V3)
    assert names(lake, lake.root_dir()) == ["old"]


def test_rows_staged_in_data_survive_a_restart_there(
    make_lake: MakeLake, root: Path, clock: FakeClock
) -> None:
    lake = make_lake()
    new = lake.mkdir(lake.root_dir(), "crash", Sattr3(), V3)
    write_rows(lake, lake.mkdir(new, "data", Sattr3(), V3), ROWS, V3)
    lake.close()
    again = make_lake()
    d = again.lookup(again.root_dir(), "crash", V3)
    assert names(again, d) == ["data"]
    assert names(again, again.lookup(d, "data", V3)) == ["data.csv"]
    clock.advance(IDLE + 1)
    again.poll()
    assert len(rows_of(root / "crash")) == 2


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("W"), st.integers(0, 40), st.binary(min_size=0, max_size=12)),
            st.tuples(st.just("T"), st.integers(0, 50), st.just(b"")),
        ),
        max_size=20,
    )
)
def test_staged_rows_track_holes_like_a_byte_model(ops: list[tuple[str, int, bytes]]) -> None:
    rows = NewRows("p", 0, 0, "w", None)
    data = bytearray()
    written: list[bool] = []
    for kind, number, payload in ops:
        if kind == "W":
            rows.write(number, payload, StableHow.UNSTABLE, 0.0)
            if len(data) < number:
                data.extend(bytes(number - len(data)))
                written.extend([False] * (number - len(written)))
            data[number : number + len(payload)] = payload
            end = number + len(payload)
            written.extend([False] * (end - len(written)))
            written[number:end] = [True] * len(payload)
        else:
            rows.truncate(number, 0.0)
            del data[number:], written[number:]
            data.extend(bytes(number - len(data)))
            written.extend([False] * (number - len(written)))
        assert rows.data == data
        assert rows.complete == all(written)


def delta_properties(path: Path) -> dict[str, str]:
    """The Delta table properties (``delta.*``) of the table at ``path``, as delta-rs reads them."""
    from deltalake import DeltaTable

    conf = DeltaTable(str(path)).metadata().configuration
    return {k: v for k, v in conf.items() if k.startswith("delta.")}


def test_a_table_made_from_its_rows_has_the_properties_of_a_created_one(
    lake: LakeFs, root: Path, tmp_path: Path
) -> None:
    """Checkpoint interval, target file size: what ``DatabaseOps.create`` sets, by the same
    code (``posixlake.delta``'s default properties), not delta-rs' defaults."""
    new = lake.mkdir(lake.root_dir(), "sales", Sattr3(), V4)
    lake.finish(write_rows(lake, new, ROWS, V4), V4)
    with DatabaseOps.create(tmp_path / "ref", {"id": "Int64"}, engine="local"):
        pass
    made = delta_properties(root / "sales")
    assert made == delta_properties(tmp_path / "ref")
    assert made["delta.targetFileSize"] == str(32 << 20)
    assert "delta.checkpointInterval" in made


def test_a_new_table_journal_with_base_records_is_set_aside_not_misread(
    make_lake: MakeLake, root: Path, tmp_path: Path
) -> None:
    """A new table's data.csv has no base, so its journal never holds base records
    (``B``, journal magic PLNFSJ2); one that does (damage, a future writer) is set aside
    at the restart, never restaged with its base records read as truncations."""
    from nfs.table.journal import _MAGIC_BASE, _SPAN, _record

    lake = make_lake()
    new = lake.mkdir(lake.root_dir(), "odd", Sattr3(), V3)
    write_rows(lake, new, ROWS, V3)
    lake.close()
    (journal,) = (tmp_path / "state" / "new-tables").glob("*.wal")
    data = bytearray(journal.read_bytes())
    data[: len(_MAGIC_BASE)] = _MAGIC_BASE
    data += b"".join(bytes(b) for b in _record(b"B", 0, _SPAN.pack(0, 8, 0, 0)))
    journal.write_bytes(bytes(data))
    again = make_lake()
    assert "odd" not in names(again, again.root_dir())
    assert not journal.exists()
    assert list((tmp_path / "state" / "new-tables").glob("*.failed"))
    again.close()
