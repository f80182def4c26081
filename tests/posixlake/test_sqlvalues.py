"""The local engine's SQL values are exact or an error (posixlake/delta/_sqlvalues.py).

DataFusion wraps integer arithmetic; the local engine rewrites it so that every result
is the mathematical one or a ValueOutOfRange, and says timestamp literals past 2262 in
microseconds. Checked here against Python's integers, on real tables.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posixlake import DatabaseOps
from posixlake.delta._sqlvalues import checked_arithmetic, microsecond_timestamps
from posixlake.errors import ValueOutOfRange

LIMITS = {"i16": 2**15, "i32": 2**31, "i64": 2**63}
TYPES = {"i16": pa.int16(), "i32": pa.int32(), "i64": pa.int64()}
_counter = itertools.count()


def ints(col: str) -> st.SearchStrategy[int]:
    bound = LIMITS[col]
    edges = st.sampled_from([-bound, -bound + 1, -1, 0, 1, bound - 2, bound - 1])
    return st.one_of(edges, st.integers(-bound, bound - 1))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    col=st.sampled_from(["i16", "i32", "i64"]),
    op=st.sampled_from(["+", "-", "*"]),
    data=st.data(),
)
def test_integer_arithmetic_is_exact_or_an_error(
    col: str, op: str, data: st.DataObject, tmp_path: Path
) -> None:
    a = data.draw(ints(col), label="a")
    b = data.draw(ints(col), label="b")
    path = tmp_path / f"t{next(_counter)}"
    db = DatabaseOps.create(path, {"a": type_name(col), "b": type_name(col)}, engine="local")
    db.insert(pa.table({"a": pa.array([a], TYPES[col]), "b": pa.array([b], TYPES[col])}))
    exact = {"+": a + b, "-": a - b, "*": a * b}[op]
    bound = LIMITS[col]
    sql = f"SELECT a {op} b AS v, -a AS n FROM data"
    if -bound <= exact < bound and a != -bound:
        got = db.query(sql).arrow()
        assert got.column("v").to_pylist() == [exact]
        assert got.column("n").to_pylist() == [-a]
    else:
        with pytest.raises(ValueOutOfRange):
            db.query(sql).arrow()
    db.close()


def type_name(col: str) -> str:
    return {"i16": "Int16", "i32": "Int32", "i64": "Int64"}[col]


def test_the_rewrite_keeps_every_operation_s_type() -> None:
    got = checked_arithmetic(
        {"e": "CASE WHEN x > 0 THEN x - 1 ELSE -x END", "p": "x + 1 > y"},
        lambda exprs: ["Int32" if e.startswith("-") else "Int64" for e in exprs],
    )
    assert got == {
        "e": "CASE WHEN x > 0 THEN CAST((CAST(x AS DECIMAL(38, 0)) - CAST(1 AS DECIMAL(38, 0)))"
        " AS BIGINT) ELSE CAST((-CAST(x AS BIGINT)) AS INT) END",
        "p": "CAST((CAST(x AS DECIMAL(38, 0)) + CAST(1 AS DECIMAL(38, 0))) AS BIGINT) > y",
    }
    # nothing to rewrite: no arithmetic, a constant, or no row to type it on
    assert checked_arithmetic({"e": "x", "c": "-5", "d": "1 + 2"}, lambda e: ["Int64"]) == {}
    assert checked_arithmetic({"e": "x + 1"}, lambda e: None) == {}
    assert checked_arithmetic({"e": "y * 2.5"}, lambda e: ["Float64"]) == {}


def test_integer_sums_are_summed_in_38_digits() -> None:
    """SUM(x) of an integer column sums in DECIMAL(38, 0) and is cast back (an error when
    the total does not fit); a window SUM is cast as a whole; SUM of a float is left."""
    ints = lambda exprs: ["Int64"] * len(exprs)  # noqa: E731
    assert checked_arithmetic({"q": "SELECT k, sum(DISTINCT v) FROM data GROUP BY k"}, ints) == {
        "q": "SELECT k, CAST(SUM(DISTINCT CAST(v AS DECIMAL(38, 0))) AS BIGINT) FROM data GROUP BY k"
    }
    assert checked_arithmetic({"q": "SELECT sum(v) OVER (ORDER BY id) FROM data"}, ints) == {
        "q": "SELECT CAST(SUM(CAST(v AS DECIMAL(38, 0))) OVER (ORDER BY id) AS BIGINT) FROM data"
    }
    assert checked_arithmetic({"q": "SELECT sum(f) FROM data"}, lambda e: ["Float64"]) == {}
    assert checked_arithmetic({"q": "SELECT sum(v) FROM data"}, lambda e: ["?"]) == {}


def test_timestamp_texts_become_microseconds() -> None:
    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("n", pa.timestamp("us"))])
    assert microsecond_timestamps("ts > '9000-01-01' AND n = TIMESTAMP '0001-01-01'", schema) == (
        "ts > ARROW_CAST('9000-01-01', 'Timestamp(Microsecond, Some(\"UTC\"))') "
        "AND n = ARROW_CAST('0001-01-01', 'Timestamp(Microsecond, None)')"
    )
    assert microsecond_timestamps("CAST('9999-12-31' AS TIMESTAMP)", schema) == (
        "ARROW_CAST('9999-12-31', 'Timestamp(Microsecond, None)')"
    )
    assert microsecond_timestamps("n BETWEEN '0001-01-01' AND '0002-01-01'", schema) == (
        "n BETWEEN ARROW_CAST('0001-01-01', 'Timestamp(Microsecond, None)') "
        "AND ARROW_CAST('0002-01-01', 'Timestamp(Microsecond, None)')"
    )
    assert microsecond_timestamps("name = 'x'", schema) is None
