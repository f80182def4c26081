"""Hypothesis round trips: for every table type, insert then query returns identical values.

Types come from ``tests/strategies.py`` (every type delta-rs stores, nested). The table
stores each column as :func:`posixlake.types.delta_type` of its declared type (large
types become plain ones); values come back identical (NaN as NaN, -0.0 as -0.0).
Unsigned integers widen: UInt8/16/32 into the next wider signed type, UInt64 into
Decimal(20,0), and every value of the declared type fits.
"""

from __future__ import annotations

import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from posixlake import DatabaseOps
from posixlake.engines import Engine
from posixlake.errors import SchemaError
from posixlake.types import delta_schema, type_string
from tests.strategies import arrow_schemas, arrow_tables, comparable_rows

# Each example creates a real table, so these run a third of the profile's examples
# (HYPOTHESIS_PROFILE=thorough runs more). The engine fixture is stateless, so sharing it
# across examples is safe.
_settings = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    max_examples=max(10, settings().max_examples // 3),
)


@pytest.fixture(autouse=True)
def _warm_engine(engine: Engine, tmp_path: Path) -> None:
    """Run one small round trip before Hypothesis starts: an engine's first job (Spark's)
    may raise the recursion limit, which Hypothesis reports as an error inside a test."""
    db = DatabaseOps.create(
        tmp_path / "warm", {"id": "Int64", "m": "Map<String,List<Int64>>"}, engine=engine
    )
    db.insert({"id": 1, "m": {"a": [1]}})
    db.merge([{"_op": "UPDATE", "id": 1, "m": {"b": [2]}}], key="id")
    assert db.query("SELECT * FROM data").fetchall() == [(1, [("b", [2])])]
    db.close()


def _ntz_in_map(t: pa.DataType, in_map: bool = False) -> bool:
    """Whether a timestamp without time zone sits inside a map (delta-rs cannot create it)."""
    if pa.types.is_timestamp(t):
        return in_map and t.tz is None
    if pa.types.is_map(t):
        return _ntz_in_map(t.key_type, True) or _ntz_in_map(t.item_type, True)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _ntz_in_map(t.value_type, in_map)
    if pa.types.is_struct(t):
        return any(_ntz_in_map(f.type, in_map) for f in t)
    return False


def _creatable(schema: pa.Schema) -> bool:
    return not any(_ntz_in_map(f.type) for f in schema)


def _types(schema: pa.Schema) -> list[tuple[str, str]]:
    """Names and type strings (nested field names and nullability do not matter)."""
    return [(f.name, type_string(f.type)) for f in schema]


def _sorted_rows(table: pa.Table) -> list[Any]:
    return sorted(comparable_rows(table), key=repr)


def _round_trip(engine: Engine, table: pa.Table, payload: Any) -> pa.Table:
    with tempfile.TemporaryDirectory() as tmp:
        db = DatabaseOps.create(Path(tmp) / "t", table.schema, engine=engine)
        # the table keeps each column's nullability (a query result need not)
        stored = delta_schema(db.get_schema().to_arrow())  # declared (UInt8) -> stored
        assert [f.nullable for f in stored] == [f.nullable for f in table.schema]
        assert _types(stored) == _types(delta_schema(table.schema))
        written = db.insert(payload)
        assert written == table.num_rows
        assert db.version == (1 if table.num_rows else 0)
        out = db.query("SELECT * FROM data").arrow()
        # the time-travel path reads the same rows
        if table.num_rows:
            assert _sorted_rows(db.query("SELECT * FROM data", version=1).arrow()) == (
                _sorted_rows(out)
            )
        db.close()
        return out


@_settings
@given(data=st.data())
def test_arrow_tables_of_every_type_round_trip(engine: Engine, data: st.DataObject) -> None:
    schema = data.draw(arrow_schemas(max_fields=4))
    assume(_creatable(schema))
    table = data.draw(arrow_tables(schema, max_rows=12))
    out = _round_trip(engine, table, table)
    assert _types(out.schema) == _types(delta_schema(schema))
    assert _sorted_rows(out) == _sorted_rows(table)


@_settings
@given(data=st.data())
def test_python_rows_of_every_type_round_trip(engine: Engine, data: st.DataObject) -> None:
    schema = data.draw(arrow_schemas(max_fields=4))
    assume(_creatable(schema))
    table = data.draw(arrow_tables(schema, min_rows=1, max_rows=8))
    out = _round_trip(engine, table, table.to_pylist())
    assert _sorted_rows(out) == _sorted_rows(table)


@_settings
@given(data=st.data())
def test_merge_upserts_rows_of_every_type(engine: Engine, data: st.DataObject) -> None:
    value_schema = data.draw(arrow_schemas(max_fields=3))
    assume(_creatable(value_schema) and "k" not in [n.lower() for n in value_schema.names])
    schema = pa.schema([pa.field("k", pa.int64(), False), *value_schema])
    keys = data.draw(st.lists(st.integers(0, 50), min_size=1, max_size=6, unique=True))
    first = data.draw(arrow_tables(value_schema, min_rows=len(keys), max_rows=len(keys)))
    second = data.draw(arrow_tables(value_schema, min_rows=len(keys), max_rows=len(keys)))
    key_col = pa.array(keys, pa.int64())
    old = first.add_column(0, pa.field("k", pa.int64(), False), key_col)
    new = second.add_column(0, pa.field("k", pa.int64(), False), key_col)
    with tempfile.TemporaryDirectory() as tmp:
        db = DatabaseOps.create(Path(tmp) / "t", schema, primary_key="k", engine=engine)
        db.insert(old)
        source = new.append_column("_op", pa.array(["UPDATE"] * new.num_rows))
        metrics = db.merge(source)
        assert (metrics.rows_updated, metrics.rows_skipped) == (len(keys), 0)
        out = db.query("SELECT * FROM data").arrow()
        db.close()
    assert _sorted_rows(out) == _sorted_rows(new.cast(delta_schema(schema)))


def test_a_timestamp_without_time_zone_in_a_map_is_a_clear_schema_error(
    tmp_path: Path, engine: Engine
) -> None:
    with pytest.raises(SchemaError, match="inside a map"):
        DatabaseOps.create(tmp_path / "t", {"m": "Map<String,TimestampNtz>"}, engine=engine)


UNSIGNED = [
    ("UInt8", 8, pa.uint8(), pa.int16()),
    ("UInt16", 16, pa.uint16(), pa.int32()),
    ("UInt32", 32, pa.uint32(), pa.int64()),
    ("UInt64", 64, pa.uint64(), pa.decimal128(20, 0)),
]


@pytest.mark.parametrize(
    ("spec", "bits", "arrow", "stored"), UNSIGNED, ids=[u[0] for u in UNSIGNED]
)
@_settings
@given(data=st.data())
def test_unsigned_integers_widen_and_every_value_fits(
    engine: Engine,
    spec: str,
    bits: int,
    arrow: pa.DataType,
    stored: pa.DataType,
    data: st.DataObject,
) -> None:
    values = data.draw(
        st.lists(st.one_of(st.none(), st.integers(0, 2**bits - 1)), min_size=1, max_size=10)
    )
    as_arrow = data.draw(st.booleans())
    payload: Any = (
        pa.table({"u": pa.array(values, arrow)}) if as_arrow else [{"u": v} for v in values]
    )
    with tempfile.TemporaryDirectory() as tmp:
        db = DatabaseOps.create(Path(tmp) / "t", {"u": spec}, engine=engine)
        db.insert(payload)
        assert db.get_schema().to_arrow().field("u").type == arrow  # as declared
        assert delta_schema(db.get_schema().to_arrow()).field("u").type == stored
        got = [r[0] for r in db.query("SELECT u FROM data").fetchall()]
        db.close()
    expected = [Decimal(v) if (v is not None and bits == 64) else v for v in values]
    assert sorted(got, key=repr) == sorted(expected, key=repr)
