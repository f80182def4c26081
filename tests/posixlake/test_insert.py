"""insert(): every payload kind, strict typing, one commit per call, no row limit, keys."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.engines import Engine
from posixlake.errors import DuplicateKeyError, InvalidOperation, NotFound, SchemaError
from posixlake.types import delta_schema

SCHEMA = Schema([Field("id", "Int64", False), Field("name", "String"), Field("score", "Float64")])
ROWS: list[dict[str, Any]] = [
    {"id": 1, "name": "ann", "score": 1.5},
    {"id": 2, "name": "bob", "score": None},
    {"id": 3, "name": None, "score": -2.0},
]


def make(path: Path, engine: Engine, schema: Any = SCHEMA, **kw: Any) -> DatabaseOps:
    return DatabaseOps.create(path / "t", schema, engine=engine, **kw)


def table_rows(db: DatabaseOps, order: str = "id") -> list[dict[str, Any]]:
    return db.query(f"SELECT * FROM data ORDER BY {order}").to_pylist()


class _CStream:
    """A foreign object that only speaks the Arrow C stream protocol."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self._table.__arrow_c_stream__(requested_schema)


def _payloads() -> dict[str, Any]:
    arrow = pa.Table.from_pylist(ROWS)
    return {
        "list_of_dicts": list(ROWS),
        "tuple_of_dicts": tuple(ROWS),
        "columnar_dict": {k: [r[k] for r in ROWS] for k in ("id", "name", "score")},
        "json_array": json.dumps(ROWS),
        "json_lines": "\n".join(json.dumps(r) for r in ROWS),
        "json_bytes": json.dumps(ROWS).encode(),
        "json_columnar": json.dumps({k: [r[k] for r in ROWS] for k in ("id", "name", "score")}),
        "arrow_table": arrow,
        "record_batch": arrow.to_batches()[0],
        "record_batch_reader": pa.RecordBatchReader.from_batches(arrow.schema, arrow.to_batches()),
        "pandas": pd.DataFrame(ROWS),
        "polars": pl.DataFrame(ROWS),
        "c_stream": _CStream(arrow),
        "reordered_columns": arrow.select(["score", "id", "name"]),
    }


@pytest.mark.parametrize("kind", list(_payloads()))
def test_every_payload_kind_inserts_all_rows_in_one_commit(
    tmp_path: Path, engine: Engine, kind: str
) -> None:
    db = make(tmp_path, engine)
    assert db.insert(_payloads()[kind]) == 3  # fresh: a RecordBatchReader is read once
    assert db.version == 1
    assert table_rows(db) == ROWS


def test_single_dict_and_json_object_insert_one_row(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    assert db.insert(ROWS[0]) == 1
    assert db.insert(json.dumps(ROWS[1])) == 1
    assert db.version == 2
    assert table_rows(db) == ROWS[:2]


def test_csv_text_inserts_rows(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    text = "id,name,score\n1,ann,1.5\n2,bob,\n3,,-2.0\n"
    assert db.insert(text) == 3
    assert table_rows(db) == ROWS


def test_csv_text_with_quotes_commas_and_newlines(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    text = 'name,id\r\n"a, b",1\r\n"line1\nline2",2\r\n"say ""hi""",3\r\n'
    assert db.insert(text) == 3
    assert [r["name"] for r in table_rows(db)] == ["a, b", "line1\nline2", 'say "hi"']


def test_missing_nullable_columns_become_null(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.insert([{"id": 1}, {"id": 2, "name": "x"}])
    assert table_rows(db) == [
        {"id": 1, "name": None, "score": None},
        {"id": 2, "name": "x", "score": None},
    ]


def test_rows_with_different_keys_are_unioned(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    db.insert([{"id": 1, "name": "a"}, {"id": 2, "score": 2.0}])
    assert table_rows(db) == [
        {"id": 1, "name": "a", "score": None},
        {"id": 2, "name": None, "score": 2.0},
    ]


@pytest.mark.parametrize(
    "empty",
    [[], "[]", "", "   ", {"id": [], "name": []}, pa.table({"id": pa.array([], pa.int64())})],
)
def test_empty_payload_writes_nothing_and_makes_no_commit(
    tmp_path: Path, engine: Engine, empty: Any
) -> None:
    db = make(tmp_path, engine)
    assert db.insert(empty) == 0
    assert db.version == 0


@pytest.mark.parametrize("kind", ["list", "json", "jsonl", "arrow"])
def test_no_row_limit(tmp_path: Path, engine: Engine, kind: str) -> None:
    # the original kept only the first 1024 rows of insert_json
    n = 5000
    rows = [{"id": i, "name": f"n{i}", "score": i / 2} for i in range(n)]
    payload: Any = {
        "list": rows,
        "json": json.dumps(rows),
        "jsonl": "\n".join(json.dumps(r) for r in rows),
        "arrow": pa.Table.from_pylist(rows),
    }[kind]
    db = make(tmp_path, engine)
    assert db.insert(payload) == n
    assert db.query("SELECT count(*) AS n, sum(id) AS s FROM data").fetchone() == (
        n,
        n * (n - 1) // 2,
    )
    assert db.version == 1


def test_insert_json_alias(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    assert db.insert_json(json.dumps(ROWS)) == 3
    assert table_rows(db) == ROWS


def test_each_insert_is_one_commit_with_metadata(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    for i in range(3):
        db.insert({"id": i})
    history = db.history()
    assert [c.version for c in history] == [3, 2, 1, 0]
    assert all(c.operation == "WRITE" for c in history[:3])
    raw = db._log.table.history(1)[0]
    assert raw["posixlake.operation"] == "INSERT"


class TestStrictTypes:
    SCHEMA = Schema(
        [
            Field("id", "Int64", False),
            Field("i8", "Int8"),
            Field("i32", "Int32"),
            Field("f", "Float64"),
            Field("s", "String"),
            Field("b", "Boolean"),
            Field("d", "Date32"),
            Field("ts", "Timestamp"),
            Field("dec", "Decimal128(10,2)"),
            Field("bin", "Binary"),
            Field("tags", "List<String>"),
            Field("m", "Map<String,Int64>"),
            Field("st", "Struct<x:Int32,y:String>"),
            Field("li", "List<Int64>"),
            Field("ll", "List<List<String>>"),
            Field("ld", "List<Date32>"),
            Field("sf", "Struct<x:Float64>"),
        ]
    )

    def test_values_of_every_kind(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, self.SCHEMA)
        row = {
            "id": 1,
            "i8": -128,
            "i32": 2**31 - 1,
            "f": 2,  # an int into a float column is exact
            "s": "é ü",
            "b": True,
            "d": "2024-02-29",
            "ts": "2024-01-02T03:04:05.123456Z",
            "dec": Decimal("12.34"),
            "bin": b"\x00\xff",
            "tags": ["a", "b"],
            "m": {"k": 1},
            "st": {"x": 1, "y": "z"},
            "li": [1, 2.0],
            "ll": [["a"], []],
            "ld": [date(2024, 1, 1)],
            "sf": {"x": 1},
        }
        db.insert(row)
        got = table_rows(db)[0]
        assert got == {
            **row,
            "f": 2.0,
            "d": date(2024, 2, 29),
            "ts": datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
            "m": [("k", 1)],
            "li": [1, 2],
            "sf": {"x": 1.0},
        }

    def test_a_single_row_with_a_list_column_is_not_columnar(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = make(tmp_path, engine, self.SCHEMA)
        assert db.insert({"id": 1, "tags": ["a", "b", "c"]}) == 1
        assert db.insert({"id": [2, 3], "tags": [["x"], None]}) == 2
        assert [r["tags"] for r in table_rows(db)] == [["a", "b", "c"], ["x"], None]

    def test_float_with_exact_decimal_text_fits_a_decimal(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = make(tmp_path, engine, self.SCHEMA)
        db.insert({"id": 1, "dec": 1.5, "f": 1.0})
        assert table_rows(db)[0]["dec"] == Decimal("1.50")

    @pytest.mark.parametrize(
        ("column", "value"),
        [
            ("id", 1.5),  # fraction into an integer
            ("i8", 128),  # overflow
            ("i8", -129),
            ("i32", 2**31),
            ("id", 2**63),
            ("id", "7"),  # no string to number coercion
            ("id", True),  # a bool is not an integer
            ("f", "1.5"),
            ("f", True),
            ("s", 5),  # no number to string coercion
            ("s", b"x"),
            ("b", "true"),
            ("b", 1),
            ("d", "2024-13-01"),
            ("d", "yesterday"),
            ("d", datetime(2024, 1, 1, 12, 30)),  # would lose the time of day
            ("ts", "2024-01-01 10:00:00"),  # a UTC column needs an offset
            ("dec", 1.005),  # would round
            ("dec", Decimal("123456789.1")),  # does not fit the precision
            ("dec", "abc"),
            ("tags", "a"),
            ("tags", [1, 2]),
            ("st", {"x": "notint"}),
            # pa.array(..., type=nested) alone would accept each of these, losing data
            ("li", [2.5]),
            ("ll", ["ab"]),
            ("ld", [datetime(2024, 1, 1, 5)]),
            ("sf", {"x": True}),
            ("st", {"x": 1, "unknown": 2}),
            ("m", {"k": "v"}),
            ("m", "k=v"),
            ("id", float("nan")),
            ("id", float("inf")),
        ],
    )
    def test_values_that_do_not_fit_raise_schema_error_naming_the_column(
        self, tmp_path: Path, engine: Engine, column: str, value: Any
    ) -> None:
        db = make(tmp_path, engine, self.SCHEMA)
        db.insert({"id": 100})
        row = {"id": 1, column: value} if column != "id" else {"id": value}
        with pytest.raises(SchemaError) as info:
            db.insert(row)
        assert repr(column) in str(info.value)
        assert db.version == 1
        assert [r["id"] for r in table_rows(db)] == [100]

    def test_mixed_values_in_one_column_raise(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, self.SCHEMA)
        with pytest.raises(SchemaError, match="'i32'"):
            db.insert([{"id": 1, "i32": 1}, {"id": 2, "i32": "two"}])
        assert db.version == 0

    def test_arrow_input_is_cast_safely(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, self.SCHEMA)
        ok = pa.table({"id": pa.array([1, 2], pa.int32()), "i8": pa.array([1, -1], pa.int64())})
        assert db.insert(ok) == 2
        bad = pa.table({"id": pa.array([3], pa.int64()), "i8": pa.array([1000], pa.int64())})
        with pytest.raises(SchemaError, match="'i8'"):
            db.insert(bad)
        assert db.version == 1

    def test_dictionary_encoded_arrow_is_accepted(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        t = pa.table(
            {"id": pa.array([1, 2], pa.int64()), "name": pa.array(["a", "a"]).dictionary_encode()}
        )
        assert db.insert(t) == 2
        assert [r["name"] for r in table_rows(db)] == ["a", "a"]

    def test_pandas_with_nan_in_a_float_column(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine)
        db.insert(pd.DataFrame({"id": [1, 2], "score": [1.0, None]}))
        assert [r["score"] for r in table_rows(db)] == [1.0, None]


class TestUnsignedIntegers:
    SCHEMA = Schema(
        [
            Field("id", "Int64", False),
            Field("u8", "UInt8"),
            Field("u16", "UInt16"),
            Field("u32", "UInt32"),
            Field("u64", "UInt64"),
        ]
    )

    def test_every_value_of_the_declared_type_fits(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, self.SCHEMA)
        top = {"id": 1, "u8": 255, "u16": 65535, "u32": 2**32 - 1, "u64": 2**64 - 1}
        low = {"id": 2, "u8": 0, "u16": 0, "u32": 0, "u64": 0}
        db.insert([top, low])
        got = table_rows(db)
        assert got[0] == {**top, "u64": Decimal(2**64 - 1)}
        assert got[1] == {**low, "u64": Decimal(0)}
        assert db.get_schema().fields[1].data_type == "UInt8"  # reported as declared
        schema = delta_schema(db.get_schema().to_arrow())
        assert schema.field("u8").type == pa.int16()
        assert schema.field("u64").type == pa.decimal128(20, 0)

    def test_unsigned_arrow_columns_are_accepted(self, tmp_path: Path, engine: Engine) -> None:
        db = make(tmp_path, engine, self.SCHEMA)
        t = pa.table(
            {
                "id": pa.array([1], pa.int64()),
                "u8": pa.array([200], pa.uint8()),
                "u64": pa.array([2**64 - 1], pa.uint64()),
            }
        )
        db.insert(t)
        assert table_rows(db)[0]["u64"] == Decimal(2**64 - 1)


class TestPrimaryKey:
    def make(self, tmp_path: Path, engine: Engine) -> DatabaseOps:
        return make(tmp_path, engine, SCHEMA, primary_key="id")

    def test_existing_key_raises_and_commits_nothing(self, tmp_path: Path, engine: Engine) -> None:
        db = self.make(tmp_path, engine)
        db.insert(ROWS)
        with pytest.raises(DuplicateKeyError, match="already exists"):
            db.insert({"id": 2, "name": "again"})
        with pytest.raises(DuplicateKeyError):
            db.insert([{"id": 10}, {"id": 3}])
        assert db.version == 1
        assert table_rows(db) == ROWS

    def test_key_repeated_in_one_batch_raises(self, tmp_path: Path, engine: Engine) -> None:
        db = self.make(tmp_path, engine)
        with pytest.raises(DuplicateKeyError, match="duplicate"):
            db.insert([{"id": 5}, {"id": 5}])
        big = [{"id": i} for i in range(200)] + [{"id": 7}]
        with pytest.raises(DuplicateKeyError):
            db.insert(big)
        assert db.version == 0

    def test_duplicate_key_error_is_an_invalid_operation(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = self.make(tmp_path, engine)
        db.insert({"id": 1})
        with pytest.raises(InvalidOperation):
            db.insert({"id": 1})

    def test_large_batches_are_checked_against_the_table(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = self.make(tmp_path, engine)
        db.insert([{"id": i} for i in range(0, 1000, 2)])
        with pytest.raises(DuplicateKeyError):
            db.insert([{"id": i} for i in range(999, 500, -1)])
        assert db.insert([{"id": i} for i in range(1, 1000, 2)]) == 500
        assert db.query("SELECT count(DISTINCT id) FROM data").scalar() == 1000

    def test_keys_deleted_or_merged_away_can_be_inserted_again(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = self.make(tmp_path, engine)
        db.insert(ROWS)
        db.delete_rows_where("id = 1")
        db.insert({"id": 1, "name": "back"})
        db.merge([{"_op": "DELETE", "id": 2}])
        db.insert({"id": 2, "name": "back too"})
        with pytest.raises(DuplicateKeyError):
            db.insert({"id": 2})
        assert [r["name"] for r in table_rows(db)] == ["back", "back too", None]

    def test_keys_written_by_another_writer_are_seen(self, tmp_path: Path, engine: Engine) -> None:
        db = self.make(tmp_path, engine)
        db.insert({"id": 1})
        other = DatabaseOps.open(tmp_path / "t", engine=engine)
        other.insert({"id": 2})
        with pytest.raises(DuplicateKeyError):
            db.insert({"id": 2})
        db.insert({"id": 3})
        assert db.query("SELECT count(*) FROM data").scalar() == 3

    def test_upsert_updates_existing_keys_and_inserts_new_ones(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        db = self.make(tmp_path, engine)
        db.insert(ROWS)
        n = db.insert(
            [{"id": 2, "name": "BOB", "score": 9.0}, {"id": 4, "name": "dan"}], upsert=True
        )
        assert n == 2
        assert db.version == 2
        assert table_rows(db) == [
            ROWS[0],
            {"id": 2, "name": "BOB", "score": 9.0},
            ROWS[2],
            {"id": 4, "name": "dan", "score": None},
        ]
        assert db.get_metrics().inserts == 2

    def test_upsert_with_a_repeated_key_raises(self, tmp_path: Path, engine: Engine) -> None:
        db = self.make(tmp_path, engine)
        with pytest.raises(InvalidOperation):
            db.insert([{"id": 1}, {"id": 1}], upsert=True)
        assert db.version == 0

    def test_composite_key(self, tmp_path: Path, engine: Engine) -> None:
        schema = Schema([Field("a", "Int64"), Field("b", "String"), Field("v", "Int64")])
        db = make(tmp_path, engine, schema, primary_key=["a", "b"])
        db.insert([{"a": 1, "b": "x"}, {"a": 1, "b": "y"}])
        with pytest.raises(DuplicateKeyError, match=r"\(1, 'x'\)"):
            db.insert({"a": 1, "b": "x", "v": 3})
        db.insert({"a": 2, "b": "x"})
        assert db.query("SELECT count(*) FROM data").scalar() == 3


def test_insert_of_file_paths_reads_them_in_one_commit(tmp_path: Path, engine: Engine) -> None:
    db = make(tmp_path, engine)
    csv_file = tmp_path / "rows.csv"
    csv_file.write_text('id,name,score\n1,a,1.5\n2,"b, c",\n')
    assert db.insert(str(csv_file)) == 2
    assert db.version == 1
    parquet_dir = tmp_path / "pq"
    parquet_dir.mkdir()
    pq.write_table(
        pa.table({"id": pa.array([3], pa.int64()), "name": ["x"]}), parquet_dir / "a.parquet"
    )
    assert db.insert(parquet_dir / "a.parquet") == 1
    assert db.version == 2
    assert sorted(r["id"] for r in db.to_arrow().to_pylist()) == [1, 2, 3]
    with pytest.raises(NotFound):
        db.insert(str(tmp_path / "missing.csv"))
    assert db.version == 2
