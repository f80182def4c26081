"""Delta tables of each kind other writers produce, for the interoperability tests.

Each builder makes a table under a directory and says which writer made it:

- deltalake (delta-rs) where it can write the feature (column mapping, change data
  feed, timestamp_ntz, partition values of every type, checkpoints);
- pyarrow-written Parquet files committed by delta-rs (``create_table_with_add_actions``)
  for what Spark writes and delta-rs does not: INT96 timestamps, files without statistics;
- copies of Spark / Databricks tables from ``<repo>/../shared/fixtures/delta/`` (deletion
  vectors, column mapping by Spark, v2 checkpoints with sidecars).

The reference result of every table is delta-rs' own SQL reader (:func:`reference`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction, create_table_with_add_actions

SHARED: Final = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "delta"
FAR_TIMES: Final = [
    datetime(9999, 12, 31, 23, 59, 59, 999999),
    datetime(1, 1, 1),
    datetime(2024, 5, 1, 12, 0, 0, 123456),
    None,
]


def shared_fixture(name: str, dest: Path) -> str:
    """Copy a Spark/Databricks fixture table into ``dest``; skip when shared/ is absent."""
    src = SHARED / name
    if not src.is_dir():
        pytest.skip(f"{src} is absent (the shared fixtures live in <repo>/../shared)")
    target = dest / name
    shutil.copytree(src, target)
    return str(target)


def reference(uri: str, version: int | None = None) -> list[dict[str, Any]]:
    """Return delta-rs' own reading of the table, rows sorted."""
    dt = DeltaTable(uri, version=version)
    table = pa.table(
        QueryBuilder({"datafusion.execution.parquet.coerce_int96": "us"})
        .register("t", dt)
        .execute("SELECT * FROM t")
        .read_all()
    )
    return sort_rows(table.to_pylist())


def sort_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sort rows by their text form (a canonical order for comparing multisets)."""
    return sorted(rows, key=lambda r: repr(sorted((k, repr(v)) for k, v in r.items())))


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "name": pa.array([f"n{i}" for i in range(n)], pa.string()),
        }
    )


def column_mapping(mode: str) -> Callable[[Path], str]:
    """Column mapping (``name`` or ``id``) written by deltalake: physical names differ."""

    def build(root: Path) -> str:
        uri = str(root / f"cm_{mode}")
        schema = pa.schema(
            [
                ("id", pa.int64()),
                ("Super Name", pa.string()),
                ("part", pa.string()),
                ("nested", pa.struct([("a b", pa.int32()), ("c", pa.string())])),
            ]
        )
        DeltaTable.create(
            uri,
            schema,
            partition_by=["part"],
            configuration={"delta.columnMapping.mode": mode},
        )
        data = pa.table(
            {
                "id": pa.array([1, 2, 3], pa.int64()),
                "Super Name": ["x", None, "z"],
                "part": ["p 1", "p/2", None],
                "nested": pa.array(
                    [{"a b": 1, "c": "u"}, None, {"a b": None, "c": "w"}], schema.field(3).type
                ),
            },
            schema=schema,
        )
        write_deltalake(uri, data, mode="append")
        return uri

    return build


def cdf(root: Path) -> str:
    """Change data feed enabled, written by deltalake (an insert, an update, a delete)."""
    uri = str(root / "cdf")
    DeltaTable.create(uri, _rows(0).schema, configuration={"delta.enableChangeDataFeed": "true"})
    write_deltalake(uri, _rows(5), mode="append")
    dt = DeltaTable(uri)
    dt.update(updates={"name": "'changed'"}, predicate="id = 1")
    dt.delete("id = 2")
    return uri


PARTS: Final = ["s", "d", "dec", "i", "ts", "flag"]


def ntz_and_partitions(root: Path) -> str:
    """timestamp_ntz and partition values of every type (NULL, odd characters), by deltalake."""
    uri = str(root / "parts")
    data = pa.table(
        {
            "id": pa.array(range(6), pa.int64()),
            "s": pa.array(["a b", "x=y/z", "50%", "ü", None, "a"], pa.string()),
            "d": pa.array(
                [
                    date(2024, 1, 1),
                    date(1, 1, 1),
                    date(9999, 12, 31),
                    None,
                    date(2024, 1, 1),
                    date(2000, 2, 29),
                ],
                pa.date32(),
            ),
            "ts": pa.array(
                [datetime(2024, 1, 1, 1, 2, 3, tzinfo=UTC), None] * 3, pa.timestamp("us", "UTC")
            ),
            "ntz": pa.array(
                [datetime(9999, 12, 31, 23, 59, 59), datetime(1, 1, 1), None] * 2,
                pa.timestamp("us"),
            ),
            "dec": pa.array([Decimal("1.50"), Decimal("2.25"), None] * 2, pa.decimal128(10, 2)),
            "i": pa.array([1, None, 3, 1, None, 3], pa.int32()),
            "v": pa.array([1.5, 2.5, None, 4.0, 5.0, 6.0], pa.float64()),
            "flag": pa.array([True, False, None, True, False, None], pa.bool_()),
        }
    )
    write_deltalake(uri, data, partition_by=PARTS)
    write_deltalake(uri, data.slice(0, 2), mode="append", partition_by=PARTS)
    DeltaTable(uri).create_checkpoint()  # a v1 checkpoint
    write_deltalake(uri, data.slice(2, 1), mode="append", partition_by=PARTS)
    return uri


def int96(root: Path) -> str:
    """INT96 timestamps as Spark writes them (pyarrow file, no Arrow schema; delta-rs commit)."""
    uri = root / "int96"
    uri.mkdir()
    data = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int64()),
            "ts": pa.array(FAR_TIMES, pa.timestamp("us", tz="UTC")),
            "ntz": pa.array(FAR_TIMES, pa.timestamp("us")),
        }
    )
    path = uri / "part-00000.snappy.parquet"
    pq.write_table(data, path, use_deprecated_int96_timestamps=True, store_schema=False)
    create_table_with_add_actions(
        str(uri),
        DeltaSchema.from_arrow(data.schema),
        [AddAction(path.name, os.path.getsize(path), {}, 0, True, None)],  # type: ignore[arg-type]
        mode="error",
    )
    return str(uri)


def no_stats_partitioned(root: Path) -> str:
    """7 rows partitioned by year/month/day, files without statistics (as some writers do)."""
    uri = root / "nostats"
    adds = []
    for day in range(1, 8):
        month = 1 + (day - 1) // 3
        rel = f"year=2024/month={month}/day={day}/part-0.parquet"
        (uri / rel).parent.mkdir(parents=True)
        pq.write_table(pa.table({"id": pa.array([day], pa.int64())}), uri / rel)
        adds.append(
            AddAction(
                rel,
                os.path.getsize(uri / rel),
                {"year": "2024", "month": str(month), "day": str(day)},
                0,
                True,
                None,  # type: ignore[arg-type]
            )
        )
    schema = pa.schema(
        [("id", pa.int64()), ("year", pa.int32()), ("month", pa.int32()), ("day", pa.int32())]
    )
    create_table_with_add_actions(
        str(uri),
        DeltaSchema.from_arrow(schema),
        adds,
        mode="error",
        partition_by=["year", "month", "day"],
    )
    return str(uri)


def liquid_clustering(root: Path) -> str:
    """Liquid clustering (``clustering`` + ``domainMetadata`` writer features).

    Neither deltalake nor pyspark without delta-spark jars can create one, so version 0
    is written here by hand to the Delta protocol, as Databricks' ``CLUSTER BY (city)``
    lays it out: the protocol, the metadata, the ``delta.clustering`` domain, one file.
    """
    uri = root / "clustered"
    (uri / "_delta_log").mkdir(parents=True)
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "city": ["Oslo", None, "Rome"]})
    pq.write_table(data, uri / "part-00000.snappy.parquet")
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "city", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    stats = {
        "numRecords": 3,
        "minValues": {"id": 1, "city": "Oslo"},
        "maxValues": {"id": 3, "city": "Rome"},
        "nullCount": {"id": 0, "city": 1},
    }
    actions: list[dict[str, Any]] = [
        {"commitInfo": {"timestamp": 1700000000000, "operation": "CREATE TABLE AS SELECT"}},
        {
            "protocol": {
                "minReaderVersion": 1,
                "minWriterVersion": 7,
                "writerFeatures": ["domainMetadata", "clustering"],
            }
        },
        {
            "metaData": {
                "id": "0a1b2c3d-0000-4000-8000-000000000001",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 1700000000000,
            }
        },
        {
            "domainMetadata": {
                "domain": "delta.clustering",
                "configuration": json.dumps({"clusteringColumns": [["city"]]}),
                "removed": False,
            }
        },
        {
            "add": {
                "path": "part-00000.snappy.parquet",
                "partitionValues": {},
                "size": os.path.getsize(uri / "part-00000.snappy.parquet"),
                "modificationTime": 1700000000000,
                "dataChange": True,
                "stats": json.dumps(stats),
                "clusteringProvider": "liquid",
            }
        },
    ]
    text = "\n".join(json.dumps(a) for a in actions) + "\n"
    (uri / "_delta_log" / "00000000000000000000.json").write_text(text)
    return str(uri)


def log_compaction(root: Path) -> str:
    """A log compaction file (``0.2.compacted.json``) over three deltalake commits.

    deltalake does not write log compactions; the file is assembled here from the three
    commits' own actions (appends only, so the reconciled state is every action but the
    commit infos), as the protocol's "Log Compaction Files" section describes.
    """
    uri = root / "compacted"
    for i in range(3):
        write_deltalake(str(uri), _rows(3).slice(i, 1), mode="append")
    log = uri / "_delta_log"
    actions = []
    for i in range(3):
        for line in (log / f"{i:020d}.json").read_text().splitlines():
            action = json.loads(line)
            if "commitInfo" not in action:
                actions.append(line)
    (log / f"{0:020d}.{2:020d}.compacted.json").write_text("\n".join(actions) + "\n")
    write_deltalake(str(uri), _rows(5).slice(3, 2), mode="append")
    return str(uri)


def dv_small(root: Path) -> str:
    """Deletion vectors written by Databricks (10 rows in the file, 2 deleted)."""
    return shared_fixture("table-with-dv-small", root)


def cm_spark(root: Path) -> str:
    """Column mapping (name) written by Spark: physical names col-<uuid>."""
    return shared_fixture("table_with_column_mapping", root)


def checkpoint_v2(root: Path) -> str:
    """v2 checkpoints with sidecars, identity columns, written by Databricks."""
    return shared_fixture("checkpoint-v2-table", root)


#: every kind of table, by name
KINDS: Final[dict[str, Callable[[Path], str]]] = {
    "dv-databricks": dv_small,
    "column-mapping-spark": cm_spark,
    "checkpoint-v2-databricks": checkpoint_v2,
    "liquid-clustering": liquid_clustering,
    "log-compaction": log_compaction,
    "column-mapping-name": column_mapping("name"),
    "column-mapping-id": column_mapping("id"),
    "cdf": cdf,
    "ntz-partitions-checkpoint": ntz_and_partitions,
    "int96": int96,
    "no-stats": no_stats_partitioned,
}
