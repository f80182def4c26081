"""A partitioned table's /partitions tree, through TableFs in process (real Delta tables).

partitions/<col>=<value>/.../data.csv: Hive-style names, listed from the add actions,
each file the table's header plus that partition's segments (only its files rendered),
following the version shown; the tree itself read-only (writes of a partition's rows:
test_partitions_write.py).
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cli._serve import table_entries
from nfs.protocol.nfs3 import Nfsstat3, Sattr3
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import ACCESS3_EXTEND, ACCESS3_MODIFY, ACCESS3_READ, NfsError
from nfs.table.access import TableAccessVfs, UserMap
from nfs.table.partitions import (
    HIVE_DEFAULT_PARTITION,
    PARTITION_BASE,
    PARTITIONS_ID,
    escape_path_name,
    is_partition_file,
    parse_partition_dir,
    partition_dir_name,
    partition_id,
    unescape_path_name,
)
from nfs.table.tablefs import ROOT_ID, TableFs
from posixlake import DatabaseOps
from tests.nfs.idle import FakeClock

ROOT = CallContext.local()
DAY1 = datetime.date(2024, 1, 1)
DAY2 = datetime.date(2024, 1, 2)
REGIONS = ["eu", "us/west", None, "a=b", "50%", ""]  # "" is NULL in partition values


@pytest.fixture
def db(tmp_path: Path) -> DatabaseOps:
    d = DatabaseOps.create(
        tmp_path / "t",
        {"id": "Int64", "region": "String", "day": "Date", "v": "Float64"},
        partition_by=["region", "day"],
        engine="local",
    )
    d.insert(
        [
            {"id": i, "region": REGIONS[i % 6], "day": DAY1 if i % 4 < 2 else DAY2, "v": i / 4}
            for i in range(48)
        ]
    )
    d.insert([{"id": 100, "region": "eu", "day": DAY1, "v": 1.5}])  # a second file of eu/day1
    return d


@pytest.fixture
def fs(db: DatabaseOps, tmp_path: Path) -> Iterator[TableFs]:
    f = TableFs(
        db,
        idle_timer=False,
        clock=FakeClock(),
        state_dir=tmp_path / "state",
        segment_cache=tmp_path / "segments",
    )
    yield f
    f.close()


def lines(data: bytes) -> list[bytes]:
    return data.splitlines()


def partition_files(fs: TableFs) -> list[str]:
    p = fs.paths
    out = []
    for top in sorted(p.readdir("/partitions")):
        if top in (".", ".."):
            continue
        for inner in sorted(p.readdir(f"/partitions/{top}")):
            if inner in (".", ".."):
                continue
            assert p.readdir(f"/partitions/{top}/{inner}") == ["data.csv"]
            out.append(f"/partitions/{top}/{inner}/data.csv")
    return out


def test_the_tree_is_hive_style(fs: TableFs) -> None:
    p = fs.paths
    assert "partitions" in p.readdir("/")
    tops = [n for n in p.readdir("/partitions") if n not in (".", "..")]
    assert tops == sorted(
        [
            "region=eu",
            "region=us%2Fwest",
            f"region={HIVE_DEFAULT_PARTITION}",
            "region=a%3Db",
            "region=50%25",
        ]
    )
    assert [n for n in p.readdir("/partitions/region=eu") if n not in (".", "..")] == [
        "day=2024-01-01",
        "day=2024-01-02",
    ]
    with pytest.raises(NfsError) as err:
        p.resolve("/partitions/region=nowhere")
    assert err.value.status == Nfsstat3.NFS3ERR_NOENT
    # .. climbs back to the root
    eu = p.resolve("/partitions/region=eu")
    assert fs.lookup(eu, "..", ROOT) == p.resolve("/partitions")
    assert fs.lookup(p.resolve("/partitions"), "..", ROOT) == ROOT_ID


def test_a_partition_holds_its_rows_with_the_table_header(fs: TableFs, db: DatabaseOps) -> None:
    p = fs.paths
    table = p.read_file("/data/data.csv")
    got = p.read_file("/partitions/region=eu/day=2024-01-01/data.csv")
    assert lines(got)[0] == lines(table)[0] == b"id,region,day,v"
    want = sorted(
        r["id"] for r in db.to_arrow().to_pylist() if r["region"] == "eu" and r["day"] == DAY1
    )
    assert sorted(int(line.split(b",")[0]) for line in lines(got)[1:]) == want
    assert all(line.split(b",")[1:3] == [b"eu", b"2024-01-01"] for line in lines(got)[1:])
    null = p.read_file(f"/partitions/region={HIVE_DEFAULT_PARTITION}/day=2024-01-01/data.csv")
    assert lines(null)[1:] and all(line.split(b",")[1] == b"" for line in lines(null)[1:])
    assert p.getattr("/partitions/region=eu/day=2024-01-01/data.csv").size == len(got)


def test_the_partitions_together_are_the_table(fs: TableFs) -> None:
    p = fs.paths
    table = lines(p.read_file("/data/data.csv"))
    together: Counter[bytes] = Counter()
    for path in partition_files(fs):
        got = lines(p.read_file(path))
        assert got[0] == table[0]
        together.update(got[1:])
    assert together == Counter(table[1:])


def test_reading_a_partition_renders_only_its_files(fs: TableFs, db: DatabaseOps) -> None:
    stats = fs._s.segmenter.stats
    before = stats.rendered
    fs.paths.read_file("/partitions/region=eu/day=2024-01-01/data.csv")
    assert stats.rendered - before == 2  # its two files; the table has many more
    assert stats.whole == 0
    plan = fs._s.segmenter.plan(db.version)
    assert plan is not None and len(plan.files) > 10
    fs.paths.read_file("/data/data.csv")
    assert stats.rendered - before == len(plan.files)  # the rest, once
    again = stats.rendered
    fs.paths.read_file("/partitions/region=eu/day=2024-01-02/data.csv")
    assert stats.rendered == again  # the table's rendering made its segments


def test_the_tree_follows_the_version(fs: TableFs, db: DatabaseOps) -> None:
    p = fs.paths
    old = p.resolve("/partitions/region=a%3Db/day=2024-01-01/data.csv")
    db.insert([{"id": 500, "region": "asia", "day": DAY2, "v": 0.0}])
    assert "region=asia" in p.readdir("/partitions")
    assert lines(p.read_file("/partitions/region=asia/day=2024-01-02/data.csv"))[1:] == [
        b"500,asia,2024-01-02,0"
    ]
    db.delete_rows_where("region = 'a=b'")
    assert "region=a%3Db" not in p.readdir("/partitions")
    with pytest.raises(NfsError) as err:
        fs.getattr(old, ROOT)
    assert err.value.status == Nfsstat3.NFS3ERR_STALE
    # the same partition has the same ids (across versions and restarts)
    assert p.resolve("/partitions/region=eu/day=2024-01-01/data.csv") == partition_id(
        ("region=eu", "day=2024-01-01"), file=True
    )


def test_the_partition_tree_itself_is_read_only(fs: TableFs, db: DatabaseOps) -> None:
    """Its directories are the table's partitions: none is made, removed or renamed, and
    a partition's data.csv is not moved away (its rows are written as data.csv is:
    tests/nfs/test_partitions_write.py)."""
    p = fs.paths
    before = db.version
    path = "/partitions/region=eu/day=2024-01-01/data.csv"
    fid = p.resolve(path)
    content = p.read_file(path)
    leaf = p.resolve("/partitions/region=eu/day=2024-01-01")
    attempts: list[tuple[Callable[[], object], Nfsstat3]] = [
        (lambda: fs.mkdir(leaf, "sub", Sattr3(), ROOT), Nfsstat3.NFS3ERR_ROFS),
        (
            lambda: fs.create(PARTITIONS_ID, "x.csv", Sattr3(), ROOT, guarded=False),
            Nfsstat3.NFS3ERR_ROFS,
        ),
        (
            lambda: fs.rmdir(p.resolve("/partitions/region=eu"), "day=2024-01-01", ROOT),
            Nfsstat3.NFS3ERR_ROFS,
        ),
        (lambda: fs.rename(leaf, "data.csv", leaf, "y.csv", ROOT), Nfsstat3.NFS3ERR_ACCES),
        (lambda: fs.rmdir(ROOT_ID, "partitions", ROOT), Nfsstat3.NFS3ERR_ACCES),
    ]
    for attempt, status in attempts:
        with pytest.raises(NfsError) as err:
            attempt()
        assert err.value.status == status
    rw = ACCESS3_READ | ACCESS3_MODIFY | ACCESS3_EXTEND
    assert fs.access(fid, rw, ROOT) == rw
    assert fs.getattr(fid, ROOT).mode == 0o666
    assert db.version == before
    assert p.read_file(path) == content


def test_an_unpartitioned_table_has_no_partitions(tmp_path: Path) -> None:
    d = DatabaseOps.create(tmp_path / "u", {"id": "Int64"}, engine="local")
    d.insert([{"id": 1}])
    fs = TableFs(d, idle_timer=False, state_dir=tmp_path / "s", segment_cache=tmp_path / "c")
    try:
        assert "partitions" not in fs.paths.readdir("/")
        with pytest.raises(NfsError) as err:
            fs.paths.resolve("/partitions")
        assert err.value.status == Nfsstat3.NFS3ERR_NOENT
        with pytest.raises(NfsError) as err:
            fs.getattr(partition_id(("id=1",), file=True), ROOT)
        assert err.value.status == Nfsstat3.NFS3ERR_STALE
    finally:
        fs.close()


def test_a_mapped_user_without_read_cannot_read_a_partition(fs: TableFs) -> None:
    path = "/partitions/region=eu/day=2024-01-01/data.csv"
    fid = fs.paths.resolve(path)
    roles = {"ana": frozenset({"read"}), "bob": frozenset[str]()}
    wrapped = TableAccessVfs(
        fs, table_entries(), UserMap.parse(["1=ana", "2=bob"]), roles.__getitem__
    )
    ana, bob = CallContext.local(uid=1), CallContext.local(uid=2)
    assert bytes(wrapped.read(fid, 0, 1 << 20, ana)[0]) == fs.paths.read_file(path)
    with pytest.raises(NfsError) as err:
        wrapped.read(fid, 0, 100, bob)
    assert err.value.status == Nfsstat3.NFS3ERR_ACCES
    assert wrapped.access(fid, ACCESS3_READ, bob) == 0


# -- the names codec ------------------------------------------------------------------


@given(st.text())
@example("__HIVE_DEFAULT_PARTITION__")
@example("%2F")
@example("a=b/c")
def test_escape_round_trips(text: str) -> None:
    escaped = escape_path_name(text)
    assert unescape_path_name(escaped) == text
    assert "/" not in escaped and "\0" not in escaped and "=" not in escaped


@given(st.text(min_size=1), st.one_of(st.none(), st.text()))
@example("region", HIVE_DEFAULT_PARTITION)
@example("region", "")
@example("a=b", "%")
def test_directory_names_round_trip(column: str, value: str | None) -> None:
    name = partition_dir_name(column, value)
    assert "/" not in name and name not in (".", "..")
    assert parse_partition_dir(name) == (column, None if value in (None, "") else value)


def test_spark_escapes() -> None:
    """As Spark's ExternalCatalogUtils.escapePathName: %XX, upper case, these characters."""
    assert escape_path_name("a b\"#%'*/:=?\\{[]^\x7f\x01é") == (
        "a b%22%23%25%27%2A%2F%3A%3D%3F%5C%7B%5B%5D%5E%7F%01é"
    )
    assert partition_dir_name("day", None) == f"day={HIVE_DEFAULT_PARTITION}"


@given(st.lists(st.text(max_size=8), min_size=1, max_size=3))
def test_ids_are_in_the_partition_range(path: list[str]) -> None:
    d, f = partition_id(path), partition_id(path, file=True)
    assert PARTITION_BASE <= d < f < 1 << 64
    assert is_partition_file(f) and not is_partition_file(d)


def test_a_table_not_readable_file_by_file_refuses_its_partitions(tmp_path: Path) -> None:
    """Column mapping: the table's data.csv falls back to one whole segment; /partitions
    is there but cannot be listed or read (NOTSUPP), never shown wrong."""
    from deltalake import DeltaTable, write_deltalake

    rows = pa.table({"id": pa.array([1, 2], pa.int64()), "region": ["eu", "us"]})
    DeltaTable.create(
        str(tmp_path / "t"),
        rows.schema,
        partition_by=["region"],
        configuration={"delta.columnMapping.mode": "name"},
    )
    write_deltalake(str(tmp_path / "t"), rows, mode="append")
    d = DatabaseOps.open(tmp_path / "t", engine="local")
    fs = TableFs(d, idle_timer=False, state_dir=tmp_path / "s", segment_cache=tmp_path / "c")
    try:
        assert "partitions" in fs.paths.readdir("/")
        assert fs.paths.getattr("/partitions").mode == 0o555
        with pytest.raises(NfsError) as err:
            fs.paths.readdir("/partitions")
        assert err.value.status == Nfsstat3.NFS3ERR_NOTSUPP
        assert len(lines(fs.paths.read_file("/data/data.csv"))) == 3
    finally:
        fs.close()


def test_partition_handles_survive_a_restart(db: DatabaseOps, tmp_path: Path) -> None:
    """Same ids and generations from a new TableFs of the unchanged table (a restart)."""
    paths = [
        "/partitions",
        "/partitions/region=eu",
        "/partitions/region=eu/day=2024-01-01/data.csv",
    ]
    first = TableFs(db, idle_timer=False, state_dir=tmp_path / "a", segment_cache=tmp_path / "c")
    before = [(fid := first.paths.resolve(p), first.generation(fid)) for p in paths]
    first.close()
    again = TableFs(db, idle_timer=False, state_dir=tmp_path / "a", segment_cache=tmp_path / "c")
    try:
        assert [(fid, again.generation(fid)) for fid, _ in before] == before
        assert again.getattr(before[-1][0], ROOT).size == len(again.paths.read_file(paths[-1]))
    finally:
        again.close()
