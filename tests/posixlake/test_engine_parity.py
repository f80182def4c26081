"""Both engines give the same values, the values delta-rs' own reader reads (issue 22).

A table of operations at the edges of Delta's types (integers at their limits, decimals
at precision 38, timestamps at 0001 and 9999, NULLs, partitions with empty values) runs
on the local engine (delta-rs + DataFusion) and on the Spark engine; each result is
checked against the exact value and against ``deltalake.DeltaTable(path).to_pyarrow_table()``.
A value that cannot be represented is a PosixLakeError naming the column, and nothing
is committed. Then one test per item of the issue: merge counts with repeated keys,
append-only tables, writer features delta-rs cannot write, INT96 files with constraints.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from posixlake import DatabaseOps
from posixlake.engines import Engine
from posixlake.errors import (
    DivisionByZero,
    InvalidOperation,
    UnsupportedTableFeature,
    ValueOutOfRange,
)
from tests.posixlake.interop_tables import KINDS

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"

I8, I16, I32, I64 = (2**7 - 1, 2**15 - 1, 2**31 - 1, 2**63 - 1)
D38_MAX = Decimal("9" * 28 + "." + "9" * 10)
D38_BELOW = Decimal("9" * 27 + "8." + "9" * 10)  # D38_MAX - 1 (Python's context rounds)
T_MIN = datetime(1, 1, 1, tzinfo=UTC)
T_MAX = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)

SCHEMA = {
    "id": "Int32",
    "i8": "Int8",
    "i16": "Int16",
    "i32": "Int32",
    "i64": "Int64",
    "d": "Decimal(38,10)",
    "amt": "Decimal(5,2)",
    "ts": "Timestamp",
    "region": "String",
}


def base_rows() -> list[dict[str, Any]]:
    return [
        {
            "id": 1,
            "i8": I8,
            "i16": I16,
            "i32": I32,
            "i64": I64,
            "d": D38_BELOW,
            "amt": Decimal("999.99"),
            "ts": T_MAX,
            "region": "eu",
        },
        {
            "id": 2,
            "i8": -I8 - 1,
            "i16": -I16 - 1,
            "i32": -I32 - 1,
            "i64": -I64 - 1,
            "d": Decimal("-0.0000000001"),
            "amt": Decimal("-999.99"),
            "ts": T_MIN,
            "region": "",
        },
        {
            "id": 3,
            "i8": None,
            "i16": None,
            "i32": None,
            "i64": None,
            "d": Decimal("12345678.0123456789"),
            "amt": None,
            "ts": None,
            "region": None,
        },
    ]


def make(tmp_path: Path, engine: Engine, *, partitioned: bool = True) -> DatabaseOps:
    db = DatabaseOps.create(
        tmp_path / "t", SCHEMA, engine=engine, partition_by=["region"] if partitioned else None
    )
    db.insert(base_rows())
    return db


def reader_rows(db: DatabaseOps) -> list[dict[str, Any]]:
    """The table as delta-rs' own reader reads it."""
    table = DeltaTable(db.uri).to_pyarrow_table()
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def engine_rows(db: DatabaseOps) -> list[dict[str, Any]]:
    return sorted(db.query("SELECT * FROM data").arrow().to_pylist(), key=lambda r: r["id"])


def expected(
    changes: dict[int, dict[str, Any]],
    gone: frozenset[int] = frozenset(),
    *,
    partitioned: bool = True,
) -> list[dict[str, Any]]:
    out = []
    for r in base_rows():
        if r["id"] in gone:
            continue
        r = {**r, **changes.get(r["id"], {})}
        if partitioned and r["region"] == "":
            r["region"] = None  # the Delta protocol: an empty partition value is NULL
        out.append(r)
    return out


@dataclass(frozen=True)
class Case:
    """One operation and the rows it must leave (the table's other rows as written)."""

    name: str
    run: Callable[[DatabaseOps], Any]
    changes: dict[int, dict[str, Any]]
    gone: frozenset[int] = frozenset()
    result: Any = None


CASES = [
    Case("read as written", lambda db: None, {}),
    Case(
        "integers back from their limits",
        lambda db: db.update(
            "id <= 2",
            expressions={"i8": "i8 - i8", "i16": "i16 - 1", "i32": "i32 - 1", "i64": "i64 - 1"},
        ),
        {1: {"i8": 0, "i16": I16 - 1, "i32": I32 - 1, "i64": I64 - 1}},
        frozenset(),
        # row 2 is at the minimum: minus one overflows, so the whole update is refused
        ValueOutOfRange,
    ),
    Case(
        "integers to their limits",
        lambda db: db.update("id = 1", expressions={"i32": "i32 - 1 + 1", "i64": "i64 - 1 + 1"}),
        {},
        frozenset(),
        1,
    ),
    Case(
        "decimal(38,10) plus one, exact",
        lambda db: db.update(None, expressions={"d": "d + 1"}),
        {
            1: {"d": D38_MAX},
            2: {"d": Decimal("0.9999999999")},
            3: {"d": Decimal("12345679.0123456789")},
        },
        frozenset(),
        3,
    ),
    Case(
        "NULL stays NULL",
        lambda db: db.update("id = 3", expressions={"i32": "i32 + 1", "amt": "amt * 2"}),
        {},
        frozenset(),
        1,
    ),
    Case(
        "timestamps at 0001 and 9999 from SQL literals",
        lambda db: db.update(
            "ts > TIMESTAMP '9000-01-01'", expressions={"ts": "TIMESTAMP '0001-01-01 00:00:00'"}
        ),
        {1: {"ts": T_MIN}},
        frozenset(),
        1,
    ),
    Case(
        "a timestamp after 2262 as a Python value",
        lambda db: db.update("id = 3", {"ts": datetime(9000, 1, 1, tzinfo=UTC)}),
        {3: {"ts": datetime(9000, 1, 1, tzinfo=UTC)}},
        frozenset(),
        1,
    ),
    Case(
        "delete by a timestamp after 2262",
        lambda db: db.delete_rows_where("ts > '9998-01-01'"),
        {},
        frozenset({1}),
        1,
    ),
    Case(
        "an empty partition value is NULL",
        lambda db: db.query("SELECT count(*) FROM data WHERE region IS NULL").scalar(),
        {},
        frozenset(),
        2,
    ),
    Case(
        "delete the NULL partition (the one written as '')",
        lambda db: db.delete_rows_where("region IS NULL"),
        {},
        frozenset({2, 3}),
        2,
    ),
    Case(
        "update a partition to ''",
        lambda db: db.update("id = 1", {"region": ""}),
        {1: {"region": None}},
        frozenset(),
        1,
    ),
    # the name of the NULL partition: delta-rs would log it as NULL, Delta readers read NULL
    Case(
        "insert the string __HIVE_DEFAULT_PARTITION__ as a partition value",
        lambda db: db.insert([{**base_rows()[0], "id": 9, "region": HIVE_NULL}]),
        {},
        frozenset(),
        InvalidOperation,
    ),
    Case(
        "update a partition to __HIVE_DEFAULT_PARTITION__",
        lambda db: db.update("id = 1", {"region": HIVE_NULL}),
        {},
        frozenset(),
        InvalidOperation,
    ),
    Case(
        "merge __HIVE_DEFAULT_PARTITION__ into a partition column",
        lambda db: db.merge([{"id": 1, "region": HIVE_NULL, "_op": "UPDATE"}], "id"),
        {},
        frozenset(),
        InvalidOperation,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_parity(case: Case, engine: Engine, tmp_path: Path) -> None:
    db = make(tmp_path, engine)
    before = db.version
    if isinstance(case.result, type) and issubclass(case.result, Exception):
        with pytest.raises(case.result):
            case.run(db)
        assert db.version == before  # nothing committed
        want = expected({})
    else:
        got = case.run(db)
        if case.result is not None:
            assert got == case.result
        want = expected(case.changes, case.gone)
    assert reader_rows(db) == want
    assert engine_rows(db) == want


def test_an_empty_partition_value_another_writer_left_is_null(
    engine: Engine, tmp_path: Path
) -> None:
    """delta-rs' writer logs ``''``; every reader and write of ours takes it as NULL."""
    path = str(tmp_path / "legacy")
    rows = {"id": pa.array([1, 2, 3], pa.int32()), "region": ["", None, "eu"]}
    write_deltalake(path, pa.table(rows), partition_by=["region"])
    db = DatabaseOps.open(path, engine=engine)
    assert db.query("SELECT id FROM data WHERE region IS NULL ORDER BY id").arrow().column(
        "id"
    ).to_pylist() == [1, 2]
    assert db.update("region IS NULL", {"id": 9}) == 2
    assert reader(path) == [
        {"id": 3, "region": "eu"},
        {"id": 9, "region": None},
        {"id": 9, "region": None},
    ]
    assert db.delete_rows_where("region IS NULL") == 2
    assert reader(path) == [{"id": 3, "region": "eu"}]


def reader(path: str) -> list[dict[str, Any]]:
    rows = DeltaTable(path).to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: (r["id"], str(r)))


def test_query_values_at_the_limits(engine: Engine, tmp_path: Path) -> None:
    """Queries compute exactly: decimals at precision 38, timestamps past 2262."""
    db = make(tmp_path, engine)
    got = db.query(
        "SELECT id, d + 1 AS e, ts FROM data "
        "WHERE ts BETWEEN TIMESTAMP '0001-01-01' AND TIMESTAMP '9999-12-31 23:59:59.999999' "
        "ORDER BY id"
    ).arrow()
    assert got.column("e").to_pylist() == [D38_MAX, Decimal("0.9999999999")]
    assert got.column("ts").to_pylist() == [T_MAX, T_MIN]


def test_query_arithmetic_overflow_is_an_error(engine: Engine, tmp_path: Path) -> None:
    """A query computing a value its type cannot hold fails, as Spark's ANSI mode does."""
    db = make(tmp_path, engine)
    with pytest.raises(ValueOutOfRange):
        db.query("SELECT i32 + i32 AS y FROM data").arrow()
    with pytest.raises(ValueOutOfRange):
        db.query("SELECT -i64 AS y FROM data WHERE id = 2").arrow()
    got = db.query("SELECT i32 - 1 AS y FROM data WHERE id = 1").arrow()
    assert got.column("y").to_pylist() == [I32 - 1]


def test_a_sum_that_overflows_is_an_error(engine: Engine, tmp_path: Path) -> None:
    """SUM of integers is exact or an error (DataFusion's wraps: 2**63 - 1 twice is -2)."""
    db = make(tmp_path, engine)
    twice = "SELECT i64 FROM data WHERE id = 1 UNION ALL SELECT i64 FROM data WHERE id = 1"
    with pytest.raises(ValueOutOfRange):
        db.query(f"SELECT sum(i64) AS s FROM ({twice})").arrow()
    with pytest.raises(ValueOutOfRange):
        db.query(f"SELECT sum(i64) + 0 AS s FROM ({twice})").arrow()
    # a total that fits is exact, whatever the partial sums (I64 + (-I64 - 1) = -1)
    assert db.query("SELECT sum(i64) AS s FROM data").arrow().to_pylist() == [{"s": -1}]
    got = db.query("SELECT id, sum(i32) OVER (ORDER BY id) AS s FROM data ORDER BY id").arrow()
    assert got.column("s").to_pylist()[0] == base_rows()[0]["i32"]


# -- 1. a value that cannot be represented is an error naming the column ------------


@pytest.mark.parametrize(
    ("expressions", "column", "error"),
    [
        ({"i32": "i32 + i32"}, "i32", ValueOutOfRange),
        ({"i64": "i64 * 2"}, "i64", ValueOutOfRange),
        ({"i16": "i16 * i16"}, "i16", ValueOutOfRange),
        ({"amt": "amt * 10"}, "amt", ValueOutOfRange),
        ({"id": "id + 0", "i32": "i32 / 0"}, "i32", DivisionByZero),
    ],
)
def test_overflow_is_an_error_naming_the_column(
    expressions: dict[str, str], column: str, error: type[Exception], engine: Engine, tmp_path: Path
) -> None:
    db = make(tmp_path, engine, partitioned=False)
    before = db.version
    with pytest.raises(error, match=repr(column)) as info:
        db.update("id = 1", expressions=expressions)
    assert getattr(info.value, "column", None) == column
    assert db.version == before
    assert reader_rows(db) == expected({}, partitioned=False)


def test_decimal_overflow_names_the_value(engine: Engine, tmp_path: Path) -> None:
    db = make(tmp_path, engine, partitioned=False)
    with pytest.raises(ValueOutOfRange, match=r"9999\.90"):
        db.update("id = 1", expressions={"amt": "amt * 10"})


# -- 2. merge figures with keys held more than once -------------------------------------


def test_merge_counts_table_rows_and_skipped_merge_rows(engine: Engine, tmp_path: Path) -> None:
    db = DatabaseOps.create(tmp_path / "m", {"k": "Int32", "v": "String"}, engine=engine)
    db.insert([{"k": 1, "v": "a"}, {"k": 1, "v": "b"}, {"k": 2, "v": "c"}, {"k": 2, "v": "d"}])
    m = db.merge(
        [
            {"k": 1, "v": "u", "_op": "UPDATE"},  # two table rows
            {"k": 2, "_op": "DELETE"},  # two table rows
            {"k": 9, "v": "x", "_op": "UPDATE"},  # no such key: skipped
            {"k": 7, "v": "n", "_op": "INSERT"},
        ],
        key="k",
    )
    assert (m.rows_inserted, m.rows_updated, m.rows_deleted, m.rows_skipped) == (1, 2, 2, 1)
    assert m.total_affected == 5
    rows = sorted(DeltaTable(db.uri).to_pyarrow_table().to_pylist(), key=lambda r: r["k"])
    assert rows == [{"k": 1, "v": "u"}, {"k": 1, "v": "u"}, {"k": 7, "v": "n"}]


# -- 2. append-only tables and writer features, refused at once by name ------------------


def _no_spark_job(engine: Engine, request: pytest.FixtureRequest) -> Callable[[], list[int]]:
    """Return a function listing the Spark jobs run since (none on the local engine)."""
    if engine.name != "spark":
        return list
    sc = request.getfixturevalue("spark_session").sparkContext
    sc.setJobGroup("posixlake-parity-refusal", "must stay empty")

    def jobs() -> list[int]:
        found = list(sc.statusTracker().getJobIdsForGroup("posixlake-parity-refusal"))
        sc.setJobGroup("posixlake-parity-after", "")
        return found

    return jobs


def test_append_only_is_refused_at_once(
    engine: Engine, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    path = str(tmp_path / "ao")
    write_deltalake(
        path,
        pa.table({"k": pa.array([1, 2], pa.int32()), "v": ["a", "b"]}),
        configuration={"delta.appendOnly": "true"},
    )
    db = DatabaseOps.open(path, engine=engine)
    jobs = _no_spark_job(engine, request)
    ops: list[Callable[[], Any]] = [
        lambda: db.delete_rows_where("k = 1"),
        lambda: db.update("k = 1", {"v": "z"}),
        lambda: db.merge([{"k": 2, "_op": "DELETE"}], key="k"),
        db.truncate,
    ]
    for op in ops:
        with pytest.raises(UnsupportedTableFeature, match=r"delta\.appendOnly") as info:
            op()
        assert info.value.features == ("appendOnly",)
    assert jobs() == []
    assert DeltaTable(path).version() == 0
    assert db.merge([{"k": 3, "v": "c", "_op": "INSERT"}], key="k").rows_inserted == 1


def _with_writer_feature(path: Path, feature: str) -> str:
    """A table whose protocol lists ``feature`` (as another writer would leave it)."""
    log = path / "_delta_log"
    log.mkdir(parents=True)
    schema = {
        "type": "struct",
        "fields": [{"name": "k", "type": "long", "nullable": True, "metadata": {}}],
    }
    actions = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": [feature]}},
        {
            "metaData": {
                "id": "parity",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 0,
            }
        },
    ]
    (log / "00000000000000000000.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    return str(path)


def test_a_feature_delta_rs_does_not_know_is_named_as_delta_spells_it(
    engine: Engine, tmp_path: Path
) -> None:
    """delta-rs says ``Unknown("collations")``: the error names ``collations``."""
    db = DatabaseOps.open(_with_writer_feature(tmp_path / "f", "collations"), engine=engine)
    ops: list[Callable[[], Any]] = [
        lambda: db.insert({"k": 1}),
        lambda: db.delete_rows_where("k = 1"),
        lambda: db.update("k = 1", {"k": 2}),
    ]
    for op in ops:
        with pytest.raises(UnsupportedTableFeature) as info:
            op()
        assert info.value.features == ("collations",)
        assert "unknown" not in str(info.value).lower()


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["rowTracking", "inCommitTimestamp", "liquid-clustering"])
def test_spark_refuses_writer_features_before_any_job(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The Spark engine names a feature delta-rs cannot write before it runs a job."""
    from posixlake.engines.spark import SparkEngine

    engine = SparkEngine(spark=request.getfixturevalue("spark_session"))
    if kind in KINDS:
        uri, feature, key = KINDS[kind](tmp_path), "clustering", "id"
    else:
        uri, feature, key = _with_writer_feature(tmp_path / "f", kind), kind, "k"
    db = DatabaseOps.open(uri, engine=engine)
    jobs = _no_spark_job(engine, request)
    ops: list[Callable[[], Any]] = [
        lambda: db.delete_rows_where(f"{key} = 1"),
        lambda: db.update(f"{key} = 1", {key: 2}),
        lambda: db.merge([{key: 1, "_op": "DELETE"}], key=key),
    ]
    for op in ops:
        with pytest.raises(UnsupportedTableFeature) as info:
            op()
        assert feature in info.value.features
    assert jobs() == []


def test_int96_with_a_constraint_says_what_neither_engine_can(
    engine: Engine, tmp_path: Path
) -> None:
    uri = KINDS["int96"](tmp_path)
    DeltaTable(uri).alter.add_constraint({"id_positive": "id > 0"})
    db = DatabaseOps.open(uri, engine=engine)
    with pytest.raises(UnsupportedTableFeature) as info:
        db.delete_rows_where("id = 3")
    text = str(info.value)
    assert "checkConstraints" in info.value.features
    assert "neither engine" in text and "drop_constraint" in text
    assert "use engine='spark' for this write" not in text
