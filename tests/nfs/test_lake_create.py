"""Tables made by writing: MKDIR in a lake, then ``schema.sql`` (a CREATE TABLE) written
into it creates the table (in process, through LakeFs; real Delta tables in tmp_path)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from nfs.lake.create import parse_create_table
from nfs.lake.lakefs import LakeFs
from nfs.lake.opening import table_creator, tablefs_opener
from nfs.protocol.nfs3 import Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import BOUNDED_PEER_PREFIX, FileId, NfsError
from nfs.table.schema_sql import create_table_sql
from posixlake import DatabaseOps
from posixlake.errors import SchemaError
from tests.nfs.conftest import FakeClock

ROOT = CallContext.local()
SCHEMA_SQL = b"""CREATE TABLE data (
  id BIGINT NOT NULL,
  region STRING,
  qty INT,
  PRIMARY KEY (id)
)
PARTITIONED BY (region);
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    lake = tmp_path / "lake"
    with DatabaseOps.create(lake / "old", {"id": "Int64"}, engine="local") as db:
        db.insert([{"id": 1}])
    return lake


@pytest.fixture
def lake(root: Path, tmp_path: Path) -> Iterator[LakeFs]:
    clock = FakeClock()
    state = tmp_path / "state"
    opener = tablefs_opener(
        str(root),
        state_dir=state,
        engine={"engine": "local"},
        tablefs={"idle_timer": False, "clock": clock},
    )
    creator = table_creator(str(root), engine={"engine": "local"})
    fs = LakeFs(str(root), opener, state_dir=state, clock=clock, creator=creator)
    yield fs
    fs.close()


def names(fs: LakeFs, fid: FileId) -> list[str]:
    page = fs.readdir(fid, after=0, max_entries=100, ctx=ROOT)
    return [e.name for e in page.entries if e.name not in (".", "..")]


def write_schema(
    fs: LakeFs, dir_id: FileId, text: bytes, stable: StableHow, ctx: CallContext = ROOT
) -> FileId:
    fid = fs.create(dir_id, "schema.sql", Sattr3(size=0), ctx, guarded=False)
    fs.write(fid, 0, text, stable, ctx)
    return fid


def test_schema_sql_round_trips_every_type() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("name", pa.string()),
            ("price", pa.decimal128(10, 2)),
            ("tags", pa.list_(pa.int32())),
            ("m", pa.map_(pa.string(), pa.int16())),
            ("s", pa.struct([("a", pa.int64()), ("b c", pa.string())])),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("tn", pa.timestamp("us")),
            ("d", pa.date32()),
            ("f", pa.float32()),
            ("g", pa.float64()),
            ("b", pa.bool_()),
            ("bin", pa.binary()),
            ("t", pa.int8()),
        ]
    )
    text = create_table_sql(schema, primary_key=["id"], partition_by=["name"])
    spec = parse_create_table(text)
    assert spec.schema.equals(schema)
    assert (spec.primary_key, spec.partition_by) == (("id",), ("name",))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "SELECT 1",
        "CREATE TABLE t (id BIGINT); CREATE TABLE u (id BIGINT)",
        "CREATE TABLE t (id BIGINT, PRIMARY KEY (nope))",
        "CREATE TABLE t (id BIGINT) PARTITIONED BY (nope)",
        "CREATE TABLE t (id BIGINT, id STRING)",
        "CREATE TABLE t (id INTERVAL)",
        "CREATE TABLE t (",
    ],
)
def test_bad_schema_sql_is_a_schema_error(text: str) -> None:
    with pytest.raises(SchemaError):
        parse_create_table(text)


def test_mkdir_then_schema_sql_creates_the_table(lake: LakeFs, root: Path) -> None:
    top = lake.root_dir()
    new = lake.mkdir(top, "sales", Sattr3(), ROOT)
    assert sorted(names(lake, top)) == ["old", "sales"]
    assert names(lake, new) == []
    assert not (root / "sales").exists()
    with pytest.raises(NfsError) as exc:  # only schema.sql belongs in it
        lake.create(new, "notes.txt", Sattr3(), ROOT, guarded=False)
    assert exc.value.status == Nfsstat3.NFS3ERR_ACCES
    write_schema(lake, new, SCHEMA_SQL, StableHow.FILE_SYNC)  # echo '...' > schema.sql
    db = DatabaseOps.open(root / "sales", engine="local")
    assert db.version == 0  # created in one commit
    assert db.arrow_schema.field("qty").type == pa.int32()
    assert not db.arrow_schema.field("id").nullable
    assert db.partition_columns == ["region"] and db.primary_key() in ("id", ["id"])
    table = lake.lookup(top, "sales", ROOT)
    assert table != new  # a table now: its directory is the table face's
    # partitioned: /partitions too
    assert sorted(names(lake, table)) == [
        "changes.csv",
        "data",
        "partitions",
        "schema.sql",
        "versions",
    ]
    shown = lake.lookup(table, "schema.sql", ROOT)
    text, _ = lake.read(shown, 0, 1 << 16, ROOT)
    spec = parse_create_table(bytes(text).decode())
    assert spec == parse_create_table(SCHEMA_SQL.decode())
    # the client that made the directory still holds its handle: it is the table's now
    assert sorted(names(lake, new)) == [
        "changes.csv",
        "data",
        "partitions",
        "schema.sql",
        "versions",
    ]
    assert lake.lookup(new, "data", ROOT) == lake.lookup(table, "data", ROOT)
    # the new table takes rows like any other
    csv = lake.lookup(lake.lookup(table, "data", ROOT), "data.csv", ROOT)
    header, _ = lake.read(csv, 0, 100, ROOT)
    assert bytes(header) == b"id,region,qty\n"
    lake.write(csv, len(header), b"1,eu,3\n", StableHow.FILE_SYNC, ROOT)
    rows = DatabaseOps.open(root / "sales", engine="local").to_arrow().to_pylist()
    assert rows == [{"id": 1, "region": "eu", "qty": 3}]


def test_an_unstable_schema_applies_at_commit_and_a_bad_one_fails_there(
    lake: LakeFs, root: Path
) -> None:
    top = lake.root_dir()
    new = lake.mkdir(top, "bad", Sattr3(), ROOT)
    fid = write_schema(lake, new, b"CREATE TABLE t (id NOPE)", StableHow.UNSTABLE)
    assert lake.getattr(fid).size == len(b"CREATE TABLE t (id NOPE)")
    with pytest.raises(NfsError) as exc:
        lake.commit(fid, 0, 0, ROOT)
    assert exc.value.status == Nfsstat3.NFS3ERR_INVAL
    assert not (root / "bad" / "_delta_log").exists()
    with pytest.raises(NfsError) as exc:  # not empty: schema.sql is there
        lake.rmdir(top, "bad", ROOT)
    assert exc.value.status == Nfsstat3.NFS3ERR_NOTEMPTY
    lake.remove(new, "schema.sql", ROOT)
    lake.rmdir(top, "bad", ROOT)  # not a table: it may go
    assert names(lake, top) == ["old"]
    ok = lake.mkdir(top, "good", Sattr3(), ROOT)
    fid = write_schema(lake, ok, SCHEMA_SQL, StableHow.UNSTABLE)
    assert not (root / "good").exists()
    lake.commit(fid, 0, 0, ROOT)
    assert DatabaseOps.open(root / "good", engine="local").primary_key() in ("id", ["id"])


def test_an_nfs4_writer_creates_the_table_at_close(lake: LakeFs, root: Path) -> None:
    ctx = CallContext.local(peer=BOUNDED_PEER_PREFIX + "c1")
    new = lake.mkdir(lake.root_dir(), "v4", Sattr3(), ctx)
    fid = write_schema(lake, new, SCHEMA_SQL, StableHow.UNSTABLE, ctx)
    lake.commit(fid, 0, 0, ctx)  # validated, not created: the CLOSE is the end of the edit
    assert not (root / "v4").exists()
    lake.finish(fid, ctx)
    assert DatabaseOps.open(root / "v4", engine="local").version == 0
    assert lake.getattr(fid).size == len(SCHEMA_SQL)  # the closed handle still answers
    assert "v4" in names(lake, lake.root_dir())


def test_two_creators_of_one_table_make_one_and_the_loser_gets_eexist(
    lake: LakeFs, root: Path
) -> None:
    top = lake.root_dir()
    new = lake.mkdir(top, "race", Sattr3(), ROOT)
    with pytest.raises(NfsError) as exc:  # a second MKDIR of the name
        lake.mkdir(top, "race", Sattr3(), ROOT)
    assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
    # another process makes the table first
    with DatabaseOps.create(root / "race", {"x": "String"}, engine="local"):
        pass
    with pytest.raises(NfsError) as exc:
        write_schema(lake, new, SCHEMA_SQL, StableHow.FILE_SYNC)
    assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
    assert DatabaseOps.open(root / "race", engine="local").to_arrow().column_names == ["x"]


def test_names_that_would_be_hidden_are_refused(lake: LakeFs) -> None:
    for name in (".x", "_x"):
        with pytest.raises(NfsError) as exc:
            lake.mkdir(lake.root_dir(), name, Sattr3(), ROOT)
        assert exc.value.status == Nfsstat3.NFS3ERR_ACCES
    with pytest.raises(NfsError) as exc:
        lake.mkdir(lake.root_dir(), "old", Sattr3(), ROOT)
    assert exc.value.status == Nfsstat3.NFS3ERR_EXIST
