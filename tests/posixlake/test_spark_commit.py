"""The delta-rs side of the Spark engine, without Spark: snapshots, statistics and commits.

Files are written by the same code Spark tasks run (``engines.spark._io``), in-process.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posixlake import DatabaseOps
from posixlake.delta import DeltaLog, commit_files, snapshot_of
from posixlake.delta._commit import TXN_KEY
from posixlake.delta._snapshot import parse_partition_value, serialize_partition_value
from posixlake.engines import LocalEngine
from posixlake.engines.spark._io import WriteSpec, write_tables
from posixlake.errors import CommitConflict, InvalidOperation

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("dec", pa.decimal128(38, 2)),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("naive", pa.timestamp("us")),
        pa.field("s", pa.string()),
        pa.field("p", pa.string()),
    ]
)


def rows(ids: list[int], p: str | None = "x") -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "dec": [Decimal("12345678901234567890.12") - i for i in ids],
            "at": [
                datetime(2024, 1, 1, 0, 0, 0, 999_999, tzinfo=UTC) + timedelta(days=i) for i in ids
            ],
            "naive": [datetime(2024, 1, 1, 5) + timedelta(microseconds=i) for i in ids],
            "s": ["long " * 20 if i % 2 else f"s{i}" for i in ids],
            "p": [p] * len(ids),
        },
        schema=SCHEMA,
    )


def write(log: DeltaLog, table: pa.Table) -> list[Any]:
    spec = WriteSpec.new(log.uri, None, log.arrow_schema, log.partition_columns)
    return [f for f, _ in write_tables(spec, [table])]


@pytest.fixture
def log(tmp_path: Path) -> DeltaLog:
    return DeltaLog.create(str(tmp_path / "t"), SCHEMA, partition_by=["p"])


def test_files_and_stats_commit_in_one_version(log: DeltaLog) -> None:
    files = write(log, pa.concat_tables([rows([1, 2]), rows([3], p=""), rows([4], p=None)]))
    assert len(files) == 3  # one per partition value
    assert commit_files(log, files, [], operation="INSERT") == 1
    got = log.read_columns().sort_by("id").to_pylist()
    # an empty partition value is NULL (the Delta protocol)
    assert got == pa.concat_tables([rows([1, 2]), rows([3], p=None), rows([4], p=None)]).to_pylist()
    actions = log.add_actions()
    mins = dict(
        zip(actions["partition.p"].to_pylist(), actions["min.dec"].to_pylist(), strict=True)
    )
    assert mins["x"] == Decimal("12345678901234567888.12")  # exact, not a float
    # max timestamps are floored to milliseconds (id 1: 00:00:00.999999 is stored as .999);
    # readers widen them by a millisecond, so data skipping loses no row
    sql = "SELECT id FROM data WHERE at > TIMESTAMP '2024-01-02T00:00:00.999Z' ORDER BY id"
    assert log.query(sql).column(0).to_pylist() == [1, 2, 3, 4]


def test_empty_string_partitions_are_null(log: DeltaLog) -> None:
    """The Delta protocol: an empty partition value is NULL, in the log and when read."""
    commit_files(log, write(log, pa.concat_tables([rows([1], p=""), rows([2], p=None)])), [])
    snap = snapshot_of(log)
    assert [f.partition_values["p"] for f in snap.files] == [None, None]
    assert log.query("SELECT count(*) FROM data WHERE p IS NULL").column(0)[0].as_py() == 2


def test_a_remove_that_is_not_active_is_refused(log: DeltaLog) -> None:
    commit_files(log, write(log, rows([1])), [])
    snap = snapshot_of(log)
    gone = snap.files[0]
    commit_files(log, write(log, rows([1])), [gone], snapshot=snap)  # replaces it
    with pytest.raises(InvalidOperation, match="not active"):
        commit_files(log, write(log, rows([2])), [gone])
    assert log.version == 2
    with pytest.raises(InvalidOperation, match="planned on version"):
        commit_files(log, [], [], snapshot=snap, mode="overwrite")


def test_strict_commits_fail_on_any_concurrent_commit(log: DeltaLog, tmp_path: Path) -> None:
    files = write(log, rows([1]))
    other = DeltaLog.open(log.uri)
    commit_files(other, write(other, rows([2])), [])  # log is now behind
    with pytest.raises(CommitConflict):
        commit_files(log, files, [], strict=True)
    assert DeltaLog.open(log.uri).version == 1


def test_a_rebased_append_reports_its_own_version(log: DeltaLog) -> None:
    files = write(log, rows([1]))
    other = DeltaLog.open(log.uri)
    commit_files(other, write(other, rows([2])), [])
    commit_files(other, write(other, rows([3])), [])
    version = commit_files(log, files, [], metadata={"posixlake.operation": "INSERT"})
    assert version == 3
    entry = log.table.history(1)[0]
    assert entry["version"] == 3 and TXN_KEY in entry


def test_history_names_the_logical_operation(tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64"}, engine=LocalEngine())
    log = DeltaLog.open(db.uri)
    commit_files(log, write(log, pa.table({"id": [1]})), [], operation="MERGE")
    assert db.history(1)[0].operation == "MERGE"


PARTITION_VALUES: list[tuple[Any, pa.DataType]] = [
    ("", pa.string()),
    (" ", pa.string()),
    ("a/b=c%20ü", pa.string()),
    (-12, pa.int32()),
    (True, pa.bool_()),
    (Decimal("1.50"), pa.decimal128(5, 2)),
    (date(2024, 2, 29), pa.date32()),
    (datetime(2024, 1, 1, 5, 6, 7, 123456, tzinfo=UTC), pa.timestamp("us", tz="UTC")),
    (datetime(2024, 1, 1, 5, 6, 7, 5), pa.timestamp("us")),
    (None, pa.int64()),
]


@pytest.mark.parametrize(("value", "kind"), PARTITION_VALUES)
def test_partition_values_round_trip_through_the_log(
    tmp_path: Path, value: Any, kind: pa.DataType
) -> None:
    read = None if value == "" else value  # an empty partition value is NULL (the protocol)
    assert parse_partition_value(serialize_partition_value(value, kind), kind) == read
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("p", kind)])
    log = DeltaLog.create(str(tmp_path / "t"), schema, partition_by=["p"])
    commit_files(log, write(log, pa.table({"id": [1], "p": pa.array([value], kind)})), [])
    assert log.read_columns(["p"]).column(0).to_pylist() == [read]
    assert [f.partition_values["p"] for f in snapshot_of(log).files] == [read]


@given(st.text())
def test_any_string_partition_value_round_trips(text: str) -> None:
    back = parse_partition_value(serialize_partition_value(text, pa.string()), pa.string())
    assert back == (text or None)  # an empty partition value is NULL (the protocol)


def test_without_pyspark_the_default_engine_names_the_fix(tmp_path: Path) -> None:
    """A machine without PySpark: tables open; the first Spark job says what to install."""
    import subprocess
    import sys

    script = f"""
import sys
class NoPySpark:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "py4j"):
            raise ImportError("no " + name)
sys.meta_path.insert(0, NoPySpark())
from posixlake import DatabaseOps
from posixlake.engines.spark import SparkUnavailableError
db = DatabaseOps.create({str(tmp_path / "t")!r}, {{"id": "Int64"}})
db.insert([{{"id": 1}}])
try:
    db.query("SELECT count(*) FROM data")
except SparkUnavailableError as err:
    print("FIX:", err)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "FIX:" in out.stdout and "pip install" in out.stdout and "engine='local'" in out.stdout
