"""Renaming and dropping columns of column-mapped tables: one metadata-only commit.

delta-rs' own reader is the reference (:func:`reference`); data files are never touched,
older versions keep the old names, and tables without column mapping are refused by name.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction, create_table_with_add_actions

from nfs.table.tablefs import TableFs
from posixlake import DatabaseOps, Field, Schema
from posixlake.engines import Engine
from posixlake.errors import DuplicateKeyError, InvalidOperation, NotFound, SchemaError
from tests.posixlake.interop_tables import KINDS, reference, sort_rows


def _files(uri: str) -> list[str]:
    return sorted(DeltaTable(uri).file_uris())


def _renamed(rows: list[dict[str, Any]], old: str, new: str) -> list[dict[str, Any]]:
    return sort_rows([{(new if k == old else k): v for k, v in r.items()} for r in rows])


def _ours(db: DatabaseOps, version: int | None = None) -> list[dict[str, Any]]:
    return sort_rows(db.query("SELECT * FROM data", version=version).to_pylist())


def test_rename_and_drop(tmp_path: Path, engine: Engine) -> None:
    uri = KINDS["column-mapping-name"](tmp_path)
    db = DatabaseOps.open(uri, engine=engine)
    before, files, v0 = reference(uri), _files(uri), db.version

    assert db.rename_column("Super Name", "label") == db.version == v0 + 1
    assert db.get_schema().to_arrow().names == ["id", "label", "part", "nested"]
    assert reference(uri) == _renamed(before, "Super Name", "label") == _ours(db)
    assert _files(uri) == files  # metadata only
    assert reference(uri, version=v0) == before == _ours(db, version=v0)  # time travel

    assert db.drop_columns(["nested"]) == v0 + 2
    expected = [{k: v for k, v in r.items() if k != "nested"} for r in reference(uri, v0 + 1)]
    assert reference(uri) == sort_rows(expected) == _ours(db)
    assert _files(uri) == files

    # writes after the change use the new schema, on both readers
    assert db.insert({"id": 9, "label": "new", "part": "p 1"}) == 1
    assert db.update("label = 'x'", {"label": "y"}) == 1
    assert db.delete_rows_where("label = 'z'") == 1
    expected = [
        {"id": 1, "label": "y", "part": "p 1"},
        {"id": 2, "label": None, "part": "p/2"},
        {"id": 9, "label": "new", "part": "p 1"},
    ]
    assert reference(uri) == sort_rows(expected) == _ours(db)
    operations = {c.version: c.operation for c in db.history()}
    assert operations[v0 + 1] == "RENAME COLUMN" and operations[v0 + 2] == "DROP COLUMNS"


@pytest.mark.parametrize("kind", ["column-mapping-id", "column-mapping-spark"])
def test_rename_other_writers_tables(kind: str, tmp_path: Path, local_engine: Engine) -> None:
    """id mode (deltalake) and name mode written by Spark (physical names col-<uuid>)."""
    uri = KINDS[kind](tmp_path)
    db = DatabaseOps.open(uri, engine=local_engine)
    before, files = reference(uri), _files(uri)
    db.rename_column("Super Name", "Full Name")
    assert reference(uri) == _renamed(before, "Super Name", "Full Name") == _ours(db)
    assert _files(uri) == files
    # a second handle (another process) sees the new name
    again = DatabaseOps.open(uri, engine=local_engine)
    assert "Full Name" in again.get_schema().to_arrow().names
    assert _ours(again) == reference(uri)


def test_created_with_column_mapping(tmp_path: Path, local_engine: Engine) -> None:
    db = DatabaseOps.create(
        str(tmp_path / "t"),
        {"id": "Int64", "name": "String", "x": "Float64"},
        engine=local_engine,
        column_mapping="name",
    )
    db.insert([{"id": 1, "name": "a", "x": 1.5}, {"id": 2, "name": "b", "x": 2.5}])
    fs = TableFs(db, idle_timer=False)
    try:
        assert fs.paths.read_file("/data/data.csv") == b"id,name,x\n1,a,1.5\n2,b,2.5\n"
        db.rename_column("name", "Name")  # a change of case only
        db.drop_columns("x")
        # over NFS: the new version's header, the old versions as they were
        assert fs.paths.read_file("/data/data.csv") == b"id,Name\n1,a\n2,b\n"
        assert fs.paths.read_file("/versions/1/data.csv") == b"id,name,x\n1,a,1.5\n2,b,2.5\n"
        assert b"Name STRING" in fs.paths.read_file("/schema.sql")
    finally:
        fs.close()
    assert reference(db.uri) == _ours(db)
    with pytest.raises(InvalidOperation, match="'name' or 'id'"):
        DatabaseOps.create(str(tmp_path / "u"), {"id": "Int64"}, column_mapping="x")  # type: ignore[arg-type]


def test_refusals_commit_nothing(tmp_path: Path, local_engine: Engine) -> None:
    db = DatabaseOps.create(
        str(tmp_path / "t"),
        Schema(
            [
                Field("id", "Int64", nullable=False),
                Field("n", "UInt8"),
                Field("s", "String"),
                Field("v", "String"),
            ],
            primary_key="id",
        ),
        engine=local_engine,
        partition_by=["s"],
        column_mapping="name",
    )
    db.insert({"id": 1, "n": 2, "s": "a"})
    version = db.version
    cases: list[tuple[type[Exception], str, Any]] = [
        (InvalidOperation, "primary key", lambda: db.rename_column("id", "key")),
        (InvalidOperation, "declaredTypes", lambda: db.drop_columns(["n"])),
        (InvalidOperation, "partition column", lambda: db.rename_column("s", "t")),
        (InvalidOperation, "partition column", lambda: db.drop_columns("s")),
        (NotFound, "no column 'zz'", lambda: db.rename_column("zz", "x")),
        (SchemaError, "exists already", lambda: db.rename_column("v", "ID")),
        (SchemaError, "empty", lambda: db.rename_column("v", " ")),
        (SchemaError, "at least one", lambda: db.drop_columns([])),
        (SchemaError, "twice", lambda: db.drop_columns(["v", "v"])),
    ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()
    assert db.version == version


def test_table_without_column_mapping_is_refused_by_name(
    tmp_path: Path, local_engine: Engine
) -> None:
    db = DatabaseOps.create(
        str(tmp_path / "t"), {"id": "Int64", "x": "String"}, engine=local_engine
    )
    db.insert({"id": 1, "x": "a"})
    version = db.version
    with pytest.raises(InvalidOperation, match="columnMapping"):
        db.rename_column("x", "y")
    with pytest.raises(InvalidOperation, match="columnMapping"):
        db.drop_columns(["x"])
    assert db.version == version
    assert db.get_schema().to_arrow().names == ["id", "x"]


# -- negative decimal partition values (delta-rs writes -1.50 as '-1.-50') ----------------


def _other_writers_decimal_table(root: Path) -> str:
    """A table partitioned by decimal d holding -1.50 and 2.00, rendered right (as Spark
    writes them): pyarrow files, committed by delta-rs with our partition values."""
    uri = root / "dec"
    adds = []
    for i, (text, ids) in enumerate([("-1.50", [1, 2]), ("2.00", [3])]):
        rel = f"d={text}/part-{i}.parquet"
        (uri / rel).parent.mkdir(parents=True)
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), uri / rel)
        adds.append(AddAction(rel, os.path.getsize(uri / rel), {"d": text}, 0, True, None))  # type: ignore[arg-type]
    schema = pa.schema([("id", pa.int64()), ("d", pa.decimal128(10, 2))])
    create_table_with_add_actions(
        str(uri), DeltaSchema.from_arrow(schema), adds, mode="error", partition_by=["d"]
    )
    return str(uri)


def test_negative_decimal_partition_rows_are_refused(tmp_path: Path, engine: Engine) -> None:
    """Rows in memory are written by delta-rs: refused before it can corrupt the log."""
    db = DatabaseOps.create(
        str(tmp_path / "t"),
        {"id": "Int64", "d": "Decimal128(10,2)"},
        engine=engine,
        partition_by=["d"],
    )
    assert db.insert([{"id": 1, "d": Decimal("1.50")}, {"id": 2, "d": Decimal("-1.00")}]) == 2
    version = db.version
    for bad in ("-1.50", "-0.05"):
        with pytest.raises(InvalidOperation, match=f"negative decimal partition value {bad}"):
            db.insert({"id": 3, "d": Decimal(bad)})
    assert db.version == version
    expected = [{"id": 1, "d": Decimal("1.50")}, {"id": 2, "d": Decimal("-1.00")}]
    assert reference(db.uri) == sort_rows(expected) == _ours(db)
    if engine.name == "local":  # delta-rs' MERGE and UPDATE would write the new partition
        with pytest.raises(InvalidOperation, match="engine='spark'"):
            db.merge([{"_op": "INSERT", "id": 3, "d": Decimal("-0.05")}], key="id")
        with pytest.raises(InvalidOperation, match="engine='spark'"):
            db.update("id = 1", expressions={"d": "d - 3"})
        assert db.version == version
        return
    # the Spark engine's copy-on-write renders partition values itself
    assert db.merge([{"_op": "INSERT", "id": 3, "d": Decimal("-0.05")}], key="id").rows_inserted
    assert db.update("id = 1", expressions={"d": "d - 3"}) == 1
    expected = [
        {"id": 1, "d": Decimal("-1.50")},
        {"id": 2, "d": Decimal("-1.00")},
        {"id": 3, "d": Decimal("-0.05")},
    ]
    assert reference(db.uri) == sort_rows(expected) == _ours(db)


def test_other_writers_negative_decimal_partitions(tmp_path: Path, local_engine: Engine) -> None:
    """Read right; delta-rs rewrites there are refused by name; appends elsewhere work."""
    uri = _other_writers_decimal_table(tmp_path)
    db = DatabaseOps.open(uri, engine=local_engine)
    rows = [
        {"id": 1, "d": Decimal("-1.50")},
        {"id": 2, "d": Decimal("-1.50")},
        {"id": 3, "d": Decimal("2.00")},
    ]
    assert reference(uri) == sort_rows(rows) == _ours(db)
    version = db.version
    for call in (
        lambda: db.delete_rows_where("id = 1"),
        lambda: db.update("id = 3", {"id": 30}),
        lambda: db.optimize(),
    ):
        with pytest.raises(InvalidOperation, match="partition with the negative decimal"):
            call()
    assert db.version == version
    assert db.insert({"id": 4, "d": Decimal("2.00")}) == 1
    assert reference(uri) == sort_rows([*rows, {"id": 4, "d": Decimal("2.00")}]) == _ours(db)


# -- Spark jobs' inserts into column-mapped tables ------------------------------------------


@pytest.mark.spark
def test_spark_job_inserts_into_column_mapped_tables(tmp_path: Path, spark_session: Any) -> None:
    """Spark writes physical names and field ids; delta-rs and we read the rows back."""
    from posixlake.engines.spark import SparkEngine

    engine = SparkEngine(spark=spark_session)
    db = DatabaseOps.create(
        str(tmp_path / "t"),
        Schema(
            [
                Field("id", "Int64", nullable=False),
                Field("Full Name", "String"),
                Field("p", "String"),
            ],
            primary_key="id",
        ),
        engine=engine,
        partition_by=["p"],
        column_mapping="id",
    )
    frame = spark_session.createDataFrame(
        [(1, "a", "x"), (2, None, "y")], "id long, `Full Name` string, p string"
    )
    assert db.insert(frame) == 2
    db.rename_column("Full Name", "name")  # the files keep their physical names
    csv = tmp_path / "more.csv"
    csv.write_text("id,name,p\n3,c,x\n")
    assert db.insert(str(csv)) == 1
    with pytest.raises(DuplicateKeyError):
        db.insert(spark_session.createDataFrame([(3, "d", "x")], "id long, name string, p string"))
    expected: list[dict[str, Any]] = [
        {"id": 1, "name": "a", "p": "x"},
        {"id": 2, "name": None, "p": "y"},
        {"id": 3, "name": "c", "p": "x"},
    ]
    assert reference(db.uri) == sort_rows(expected) == _ours(db)
    for path in DeltaTable(db.uri).file_uris():  # physical names and field ids, as Delta writes
        schema = pq.ParquetFile(path.removeprefix("file://")).schema_arrow
        assert all(f.name.startswith("col-") and f.metadata for f in schema)
