"""LakeFs in process: every table under a root as a directory, driven through the Vfs calls
the NFS procedures make (real Delta tables in tmp_path, the local engine)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfs.lake.discovery import discover_tables, is_table
from nfs.lake.ids import MAX_SLOT, InnerIds, SlotMap, path_hash
from nfs.lake.lakefs import LakeFs, LakeTable
from nfs.lake.opening import tablefs_opener
from nfs.protocol.nfs3 import Ftype3, Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import BOUNDED_PEER_PREFIX, EditBounds, FileId, NfsError
from nfs.table.state import SCRATCH_BASE, VERSION_BASE, VERSION_CHANGES_BASE
from posixlake import DatabaseOps
from tests.nfs.conftest import FakeClock

ROOT = CallContext.local()
SCHEMA = {"id": "Int64", "name": "String"}
PASSWORD = "correct horse battery"


def make_table(root: Path, rel: str, rows: int = 2) -> DatabaseOps:
    db = DatabaseOps.create(root / rel, SCHEMA, primary_key="id", engine="local")
    db.insert([{"id": i, "name": f"{rel}-{i}"} for i in range(rows)])
    return db


@pytest.fixture
def root(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    make_table(lake, "sales")
    make_table(lake, "ops/events")
    make_table(lake, "ops/deep/logs")
    (lake / "empty" / "sub").mkdir(parents=True)  # no table below: not shown
    (lake / ".hidden").mkdir()
    return lake


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def new_lake(root: Path, clock: FakeClock, state: Path, **kw: object) -> LakeFs:
    opener = tablefs_opener(
        str(root),
        state_dir=state,
        engine={"engine": "local"},
        tablefs={"idle_timer": False, "clock": clock},
    )
    return LakeFs(str(root), opener, state_dir=state, clock=clock, **kw)  # type: ignore[arg-type]


@pytest.fixture
def lake(root: Path, clock: FakeClock, tmp_path: Path) -> Iterator[LakeFs]:
    fs = new_lake(root, clock, tmp_path / "state")
    yield fs
    fs.close()


def names(fs: LakeFs, fid: FileId) -> list[str]:
    page = fs.readdir(fid, after=0, max_entries=1000, ctx=ROOT)
    assert page.eof
    return [e.name for e in page.entries if e.name not in (".", "..")]


def walk(fs: LakeFs, path: str) -> FileId:
    fid = fs.root_dir()
    for part in path.split("/"):
        if part:
            fid = fs.lookup(fid, part, ROOT)
    return fid


def cat(fs: LakeFs, path: str) -> bytes:
    fid = walk(fs, path)
    out = b""
    while True:
        data, eof = fs.read(fid, len(out), 1 << 20, ROOT)
        out += bytes(data)
        if eof:
            return out


def status(exc: pytest.ExceptionInfo[NfsError]) -> Nfsstat3:
    return exc.value.status


def test_the_lake_shows_tables_and_prefixes_and_opens_nothing_to_list(lake: LakeFs) -> None:
    root = lake.root_dir()
    assert sorted(names(lake, root)) == ["ops", "sales"]
    assert sorted(names(lake, walk(lake, "ops"))) == ["deep", "events"]
    assert names(lake, walk(lake, "ops/deep")) == ["logs"]
    for entry in lake.readdir(root, after=0, max_entries=100, ctx=ROOT).entries:
        assert lake.getattr(entry.fileid).type == Ftype3.NF3DIR
    assert lake.opened == 0  # ls -l of the lake opens no table
    # a table's directory is the table face's root
    assert sorted(names(lake, walk(lake, "sales"))) == sorted(
        ["data", "schema.sql", "versions", "changes.csv"]
    )
    assert cat(lake, "ops/events/data/data.csv") == (b"id,name\n0,ops/events-0\n1,ops/events-1\n")
    assert b"CREATE TABLE" in cat(lake, "sales/schema.sql")
    assert cat(lake, "ops/deep/logs/versions/1/data.csv").startswith(b"id,name\n0,")
    assert lake.opened == 3
    # ".." of a table's directory is its lake directory; the root's is itself
    assert lake.lookup(walk(lake, "ops/events"), "..", ROOT) == walk(lake, "ops")
    assert lake.lookup(root, "..", ROOT) == root
    dots = {
        e.name: e.fileid
        for e in lake.readdir(walk(lake, "sales"), after=0, max_entries=9, ctx=ROOT).entries
    }
    assert dots[".."] == root
    # one file system: every fsid is the lake's, every file id unique
    ids = {walk(lake, p) for p in ("sales/data/data.csv", "ops/events/data/data.csv", "sales")}
    assert len(ids) == 3
    assert {lake.getattr(f).fsid for f in ids} == {lake.fsid}
    assert lake.getattr(walk(lake, "sales/data/data.csv")).fileid == walk(
        lake, "sales/data/data.csv"
    )


def test_readdir_pages_resume_from_cookies(lake: LakeFs) -> None:
    root = lake.root_dir()
    first = lake.readdir(root, after=0, max_entries=2, ctx=ROOT)
    assert [e.name for e in first.entries] == [".", ".."] and not first.eof
    rest = lake.readdir(root, after=first.entries[-1].cookie, max_entries=10, ctx=ROOT)
    assert sorted(e.name for e in rest.entries) == ["ops", "sales"] and rest.eof


def test_tables_made_and_removed_elsewhere_show_within_the_ttl(
    lake: LakeFs, root: Path, clock: FakeClock
) -> None:
    sales = walk(lake, "sales")
    csv = walk(lake, "sales/data/data.csv")
    make_table(root, "fresh")
    with pytest.raises(NfsError) as exc:  # the listing is cached for the TTL
        lake.lookup(lake.root_dir(), "fresh", ROOT)
    assert status(exc) == Nfsstat3.NFS3ERR_NOENT
    clock.advance(0.6)
    assert cat(lake, "fresh/data/data.csv") == b"id,name\n0,fresh-0\n1,fresh-1\n"
    before = lake.getattr(lake.root_dir()).mtime
    shutil.rmtree(root / "sales")
    clock.advance(0.6)
    assert sorted(names(lake, lake.root_dir())) == ["fresh", "ops"]
    assert lake.getattr(lake.root_dir()).mtime != before or clock.now == 0
    for fid in (sales, csv):  # handles of a removed table are stale
        with pytest.raises(NfsError) as exc:
            lake.getattr(fid)
        assert status(exc) == Nfsstat3.NFS3ERR_STALE
        with pytest.raises(NfsError) as exc:
            lake.generation(fid)
        assert status(exc) == Nfsstat3.NFS3ERR_STALE
    assert "sales" not in lake.open_tables()


def test_rmdir_and_rename_of_tables_and_prefixes_are_refused(
    lake: LakeFs, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    top = lake.root_dir()
    ops = walk(lake, "ops")
    with caplog.at_level(logging.WARNING, logger="nfs.lake.lakefs"):
        for dir_id, name in ((top, "sales"), (top, "ops"), (ops, "events"), (ops, "deep")):
            with pytest.raises(NfsError) as exc:
                lake.rmdir(dir_id, name, ROOT)
            assert status(exc) == Nfsstat3.NFS3ERR_ACCES
            with pytest.raises(NfsError) as exc:
                lake.rename(dir_id, name, top, "elsewhere", ROOT)
            assert status(exc) == Nfsstat3.NFS3ERR_ACCES
    refused = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(refused) == 8 and "refused RMDIR of sales" in refused[0].getMessage()
    with pytest.raises(NfsError) as exc:  # unlink of a directory
        lake.remove(top, "sales", ROOT)
    assert status(exc) == Nfsstat3.NFS3ERR_ISDIR
    with pytest.raises(NfsError) as exc:
        lake.mkdir(top, "new", _sattr(), ROOT)
    assert status(exc) == Nfsstat3.NFS3ERR_ACCES
    with pytest.raises(NfsError) as exc:  # moving a file out of its table
        lake.rename(walk(lake, "sales/data"), "data.csv", walk(lake, "ops/events/data"), "x", ROOT)
    assert status(exc) == Nfsstat3.NFS3ERR_XDEV
    # rm -r sales/ : REMOVE of data.csv deletes the rows (one commit), the table stays
    db = DatabaseOps.open(root / "sales", engine="local")
    version = db.version
    lake.remove(walk(lake, "sales/data"), "data.csv", ROOT)
    with pytest.raises(NfsError):
        lake.rmdir(top, "sales", ROOT)
    again = DatabaseOps.open(root / "sales", engine="local")
    assert again.version == version + 1 and again.to_arrow().num_rows == 0
    assert is_table(str(root / "sales")) and "sales" in names(lake, top)
    assert cat(lake, f"sales/versions/{version}/data.csv").count(b"\n") == 3


def _sattr() -> Sattr3:
    return Sattr3()


def test_handles_survive_a_restart(root: Path, clock: FakeClock, tmp_path: Path) -> None:
    paths = (
        "",
        "ops",
        "ops/deep",
        "sales",
        "sales/data/data.csv",
        "ops/events/versions/1/data.csv",
    )
    first = new_lake(root, clock, tmp_path / "state")
    before = {p: (walk(first, p), first.generation(walk(first, p))) for p in paths}
    first.close()
    make_table(root, "aaa")  # a new table changes nobody else's id
    second = new_lake(root, clock, tmp_path / "state")
    try:
        after = {p: (walk(second, p), second.generation(walk(second, p))) for p in paths}
        assert after == before
        data, _ = second.read(before["sales/data/data.csv"][0], 0, 100, ROOT)
        assert bytes(data).startswith(b"id,")
    finally:
        second.close()


def test_a_write_changes_only_its_table(lake: LakeFs, root: Path) -> None:
    dbs = {t: DatabaseOps.open(root / t, engine="local") for t in ("sales", "ops/events")}
    versions = {t: db.version for t, db in dbs.items()}
    csv = walk(lake, "ops/events/data/data.csv")
    content = cat(lake, "ops/events/data/data.csv")
    # echo >> : the writer read the file, then one FILE_SYNC write of whole lines at its end
    count, _ = lake.write(csv, len(content), b"7,seven\n", StableHow.FILE_SYNC, ROOT)
    assert count == 8
    events = DatabaseOps.open(root / "ops/events", engine="local")
    assert events.version == versions["ops/events"] + 1
    assert sorted(r["id"] for r in events.to_arrow().to_pylist()) == [0, 1, 7]
    assert DatabaseOps.open(root / "sales", engine="local").version == versions["sales"]
    assert cat(lake, "ops/events/data/data.csv").endswith(b"7,seven\n")


def test_nfs4_close_applies_the_edit_in_its_table(lake: LakeFs, root: Path) -> None:
    assert isinstance(lake, EditBounds)
    ctx = CallContext.local(peer=BOUNDED_PEER_PREFIX + "client-1")
    csv = walk(lake, "sales/data/data.csv")
    content = cat(lake, "sales/data/data.csv")
    lake.read(csv, 0, 1 << 20, ctx)
    lake.write(csv, len(content), b"9,nine\n", StableHow.FILE_SYNC, ctx)
    sales = DatabaseOps.open(root / "sales", engine="local")
    version = sales.version
    assert sales.to_arrow().num_rows == 2  # a bounded client's edit waits for its CLOSE
    lake.finish(csv, ctx)
    after = DatabaseOps.open(root / "sales", engine="local")
    assert after.version == version + 1 and after.to_arrow().num_rows == 3
    # a discarded edit is not applied
    lake.write(csv, len(content) + 7, b"10,ten\n", StableHow.UNSTABLE, ctx)
    assert lake.discard(csv, ctx)
    assert DatabaseOps.open(root / "sales", engine="local").version == version + 1


def test_the_lru_closes_idle_tables_but_never_one_with_staged_writes(
    root: Path, clock: FakeClock, tmp_path: Path
) -> None:
    lake = new_lake(root, clock, tmp_path / "state", max_open=1, keep_open=0.0)
    try:
        cat(lake, "sales/data/data.csv")
        assert list(lake.open_tables()) == ["sales"]
        cat(lake, "ops/events/data/data.csv")
        assert list(lake.open_tables()) == ["ops/events"]
        # a staged (unapplied) write keeps ops/events open past the bound
        csv = walk(lake, "ops/events/data/data.csv")
        lake.write(csv, 0, b"id,name\n5,five\n", StableHow.UNSTABLE, ROOT)
        opened = lake.opened
        cat(lake, "sales/data/data.csv")
        assert lake.opened > opened
        assert list(lake.open_tables()) == ["ops/events"]  # sales went again, not ops/events
        assert lake.open_tables()["ops/events"].stats().staged_writers == 1
    finally:
        lake.close()
    assert lake.unfinished_at_close == 1


def test_a_table_the_user_may_not_open_is_listed_and_refuses(root: Path, tmp_path: Path) -> None:
    db = make_table(root, "secret")
    db.enable_auth(("admin", PASSWORD))
    clock = FakeClock()
    lake = new_lake(root, clock, tmp_path / "state")
    try:
        assert "secret" in names(lake, lake.root_dir())
        secret = walk(lake, "secret")
        with pytest.raises(NfsError) as exc:
            lake.lookup(secret, "data", ROOT)
        assert status(exc) == Nfsstat3.NFS3ERR_ACCES
        assert lake.getattr(secret).mode & 0o777 == 0
        assert lake.access(secret, 0x3F, ROOT) == 0
        assert cat(lake, "sales/data/data.csv").startswith(b"id,name\n")  # others unaffected
    finally:
        lake.close()


def test_discovery_skips_non_tables_and_nested_tables(root: Path) -> None:
    make_table(root, "sales/_inner_not_a_prefix")  # inside a table: part of its files
    assert discover_tables(str(root)) == ["ops/deep/logs", "ops/events", "sales"]
    assert not is_table(str(root)) and is_table(str(root / "sales"))


# -- ids


@given(
    st.one_of(
        st.integers(0, 1 << 36),
        st.integers(VERSION_BASE, VERSION_BASE + (1 << 36)),
        st.integers(VERSION_CHANGES_BASE, VERSION_CHANGES_BASE + (1 << 36)),
        st.integers(SCRATCH_BASE, SCRATCH_BASE + (1 << 36)),
        st.integers(0, (1 << 64) - 1),
    )
)
def test_inner_ids_pack_into_40_bits_and_back(inner: int) -> None:
    ids = InnerIds()
    local = ids.local(inner)
    assert 0 <= local < 1 << 40
    assert ids.inner(local) == inner
    assert ids.local(inner) == local


def test_slot_collisions_take_the_next_slot_and_persist(tmp_path: Path) -> None:
    seen: dict[int, str] = {}
    i = 0
    while True:  # find two paths whose first-choice slots collide (about 5,000 tries)
        name = f"t{i}"
        slot = path_hash("table", name) % MAX_SLOT + 1
        if slot in seen:
            a, b = seen[slot], name
            break
        seen[slot] = name
        i += 1
    path = tmp_path / "slots.json"
    first = SlotMap(path)
    first.assign([b])
    first.assign([a])  # b was there first: a probes to the next slot
    slot_a, slot_b = first.slot_of(a), first.slot_of(b)
    assert slot_b == slot and slot_a == slot % MAX_SLOT + 1
    again = SlotMap(path)  # a restart keeps the assignment, whatever the order now
    again.assign(sorted([a, b]))
    assert (again.slot_of(a), again.slot_of(b)) == (slot_a, slot_b)
    assert again.table_of(slot_a) == a


# -- the listing against a model: any sequence of lakes (tables made and removed elsewhere)

_SEGMENT = st.sampled_from(["a", "b", "c", "sales", "x y", "é"])
_PATHS = st.lists(_SEGMENT, min_size=1, max_size=3).map("/".join)


def _tree(tables: set[str]) -> dict[str, set[str]]:
    """The expected lake: directory path -> entry names (tables nested in tables dropped)."""
    kept = {t for t in tables if not any(t.startswith(o + "/") for o in tables)}
    tree: dict[str, set[str]] = {"": set()}
    for t in kept:
        parts = t.split("/")
        for i in range(len(parts)):
            tree.setdefault("/".join(parts[:i]), set()).add(parts[i])
    return tree


@given(st.lists(st.sets(_PATHS, max_size=6), min_size=1, max_size=5))
def test_the_listing_follows_the_lake_and_ids_stay(lakes: list[set[str]]) -> None:
    current: list[str] = []
    clock = FakeClock()

    def discover() -> list[str]:
        return sorted(t for t in current if not any(t.startswith(o + "/") for o in current))

    def no_open(path: str) -> LakeTable:
        raise AssertionError(f"listing opened {path}")

    fs = LakeFs("/lake", no_open, clock=clock, discover=discover)
    seen: dict[str, FileId] = {}
    for tables in lakes:
        current[:] = sorted(tables)
        clock.advance(1)
        tree = _tree(tables)
        leaves = {f"{d}/{n}" if d else n for d, names_ in tree.items() for n in names_} - set(tree)
        for directory, expected in tree.items():
            assert set(names(fs, walk(fs, directory))) == expected
        for table in leaves:
            fid = walk(fs, table)
            assert fs.getattr(fid).type == Ftype3.NF3DIR
            assert seen.setdefault(table, fid) == fid  # the same id whenever it is there
        for table, fid in seen.items():
            if table not in leaves:
                with pytest.raises(NfsError) as exc:
                    fs.getattr(fid)
                assert exc.value.status == Nfsstat3.NFS3ERR_STALE


def test_a_partition_of_a_lake_table_is_written_as_its_data_csv(
    lake: LakeFs, root: Path, tmp_path: Path
) -> None:
    """In a lake too, an append to a partition's data.csv inserts that partition's row
    (one commit), a row of another partition is EINVAL, and a temporary file renamed
    onto it (sed -i) rewrites that partition only."""
    db = DatabaseOps.create(
        root / "parted",
        {"id": "Int64", "region": "String"},
        partition_by=["region"],
        engine="local",
    )
    db.insert([{"id": i, "region": ["eu", "us"][i % 2]} for i in range(6)])
    path = "parted/partitions/region=eu/data.csv"
    csv = walk(lake, path)
    content = cat(lake, path)
    version = db.version
    lake.write(csv, len(content), b"10,eu\n", StableHow.FILE_SYNC, ROOT)
    with pytest.raises(NfsError) as err:
        lake.write(csv, len(content) + 6, b"11,us\n", StableHow.FILE_SYNC, ROOT)
    assert status(err) == Nfsstat3.NFS3ERR_INVAL
    table = DatabaseOps.open(root / "parted", engine="local")
    assert table.version == version + 1
    assert sorted(r["id"] for r in table.to_arrow().to_pylist()) == [0, 1, 2, 3, 4, 5, 10]
    leaf = walk(lake, "parted/partitions/region=eu")
    tmp = lake.create(leaf, "sedX1", _sattr(), ROOT, guarded=True)
    edited = cat(lake, path).replace(b"2,eu\n", b"")
    lake.write(tmp, 0, edited, StableHow.FILE_SYNC, ROOT)
    lake.rename(leaf, "sedX1", leaf, "data.csv", ROOT)
    after = DatabaseOps.open(root / "parted", engine="local")
    assert after.version == version + 2
    assert sorted(r["id"] for r in after.to_arrow().to_pylist()) == [0, 1, 3, 4, 5, 10]
    assert names(lake, leaf) == ["data.csv"]


def test_a_client_mounting_at_an_address_settles_what_an_earlier_process_left_in_each_table(
    lake: LakeFs, root: Path
) -> None:
    """The lake passes an NFSv3 NULL on a new connection to its open tables: the staged
    edit the earlier process at that address left (libnfs reuses reserved ports) applies
    then, before the new process can write (see test_client_mounted.py)."""
    first = CallContext(cred=ROOT.cred, peer="127.0.0.1:700", connection=1)
    lake.client_mounted(first)
    csv = walk(lake, "ops/events/data/data.csv")
    content = cat(lake, "ops/events/data/data.csv").replace(b"ops/events-1", b"changed")
    lake.setattr(csv, Sattr3(size=0), first)
    lake.write(csv, 0, content, StableHow.UNSTABLE, first)
    lake.commit(csv, 0, 0, first)
    events = DatabaseOps.open(root / "ops/events", engine="local")
    before = events.version
    second = CallContext(cred=ROOT.cred, peer="127.0.0.1:700", connection=2)
    assert not lake.client_mounted_nowait(second)  # a commit: never on the event loop
    assert DatabaseOps.open(root / "ops/events", engine="local").version == before
    lake.client_mounted(second)
    events = DatabaseOps.open(root / "ops/events", engine="local")
    assert events.version == before + 1
    assert sorted(r["name"] for r in events.to_arrow().to_pylist()) == ["changed", "ops/events-0"]
