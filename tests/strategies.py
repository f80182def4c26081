"""Hypothesis strategies for posixlake's table types, and helpers to compare tables.

The types are the Arrow types that delta-rs stores (the API converts users' types to
these): signed integers, float32/64, decimal128, string and large_string, binary and
large_binary, bool, date32, ``timestamp("us", "UTC")`` (Delta ``timestamp``),
``timestamp("us")`` (Delta ``timestamp_ntz``), and list / large_list / map / struct of
them, nested.

Typical use::

    @given(arrow_tables())
    def test_round_trip(table: pa.Table) -> None:
        assert_same_rows(parse_csv(render_csv(table), table.schema), table)

    @given(st.data())
    def test_something(data: st.DataObject) -> None:
        schema = data.draw(arrow_schemas(max_fields=3))
        table = data.draw(arrow_tables(schema, max_rows=50))
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from typing import Any, Final

import pyarrow as pa
from hypothesis import strategies as st

__all__ = [
    "NASTY_STRINGS",
    "PRIMITIVE_TYPES",
    "arrow_schemas",
    "arrow_tables",
    "arrow_types",
    "arrow_values",
    "assert_same_rows",
    "comparable_rows",
    "decimal_types",
    "field_names",
    "primitive_types",
]

PRIMITIVE_TYPES: Final[tuple[pa.DataType, ...]] = (
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.large_binary(),
    pa.bool_(),
    pa.date32(),
    pa.timestamp("us", tz="UTC"),
    pa.timestamp("us"),
)
"""Every scalar table type except decimals (see :func:`decimal_types`)."""

NASTY_STRINGS: Final[tuple[str, ...]] = (
    "",
    " ",
    "  ",
    "\t",
    ",",
    '"',
    '""',
    "a,b",
    'say "hi"',
    '"quoted"',
    "line\nbreak",
    "cr\ronly",
    "crlf\r\nend",
    "\n",
    " leading",
    "trailing ",
    "NULL",
    "null",
    "NaN",
    "inf",
    "true",
    "0",
    "-0",
    "2024-01-31",
    "naïve café",
    "日本語",
    "emoji 😀",
    "nul\x00byte",
    "ctrl\x1fchar",
    "back\\slash",
    "[1,2]",
    '{"a":1}',
    "=SUM(A1)",
    "\ufeffbom",
    "\u2028sep",
)
"""Strings that stress CSV quoting, NULL markers, JSON escaping and Unicode."""

_MIN_DATETIME: Final = dt.datetime(1, 1, 1)
_MAX_DATETIME: Final = dt.datetime(9999, 12, 31, 23, 59, 59, 999999)


def decimal_types() -> st.SearchStrategy[pa.DataType]:
    """Generate ``decimal128(precision, scale)`` with 1 <= precision <= 38, 0 <= scale <= precision."""
    return st.integers(1, 38).flatmap(
        lambda precision: st.integers(0, precision).map(
            lambda scale: pa.decimal128(precision, scale)
        )
    )


def primitive_types() -> st.SearchStrategy[pa.DataType]:
    """Generate any scalar table type: one of :data:`PRIMITIVE_TYPES` or a decimal.

    Each of the 15 kinds (decimals counting as one) is about equally likely.
    """
    kinds: list[pa.DataType | None] = [*PRIMITIVE_TYPES, None]  # None: a decimal
    return st.sampled_from(kinds).flatmap(lambda t: decimal_types() if t is None else st.just(t))


def field_names() -> st.SearchStrategy[str]:
    """Generate column names valid in Delta without column mapping (``[a-z_][a-z0-9_]*``)."""
    return st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True)


def _struct_types(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    fields = st.lists(
        st.tuples(field_names(), children, st.booleans()),
        min_size=1,
        max_size=3,
        unique_by=lambda entry: entry[0],
    )
    return fields.map(
        lambda entries: pa.struct(
            [pa.field(name, type, nullable=nullable) for name, type, nullable in entries]
        )
    )


def arrow_types(*, max_depth: int = 2) -> st.SearchStrategy[pa.DataType]:
    """Generate table types, nested up to ``max_depth`` levels.

    Depth 0 is :func:`primitive_types`. Each nested level adds (one time in three) ``list<T>``,
    ``large_list<T>`` (elements nullable or not), ``map<K, V>`` (K a scalar type) and
    ``struct<...>`` with 1-3 uniquely named fields, nullable or not.

    Args:
        max_depth: Maximum nesting depth.
    """
    scalars = primitive_types()
    if max_depth <= 0:
        return scalars
    children = arrow_types(max_depth=max_depth - 1)
    nested = st.one_of(
        st.tuples(children, st.booleans()).map(
            lambda c: pa.list_(pa.field("item", c[0], nullable=c[1]))
        ),
        st.tuples(children, st.booleans()).map(
            lambda c: pa.large_list(pa.field("item", c[0], nullable=c[1]))
        ),
        st.tuples(scalars, children).map(lambda kv: pa.map_(kv[0], kv[1])),
        _struct_types(children),
    )
    # Scalars twice as likely as nested types, so that wide tables stay readable.
    return st.one_of(scalars, scalars, nested)


def arrow_schemas(
    *,
    min_fields: int = 1,
    max_fields: int = 6,
    types: st.SearchStrategy[pa.DataType] | None = None,
) -> st.SearchStrategy[pa.Schema]:
    """Generate schemas of uniquely named fields (case-insensitively, as Delta wants).

    Args:
        min_fields: Minimum number of fields.
        max_fields: Maximum number of fields.
        types: Strategy for the field types; :func:`arrow_types` by default.
    """
    field_types = types if types is not None else arrow_types()
    entries = st.lists(
        st.tuples(field_names(), field_types, st.booleans()),
        min_size=min_fields,
        max_size=max_fields,
        unique_by=lambda entry: entry[0].lower(),
    )
    return entries.map(
        lambda fields: pa.schema(
            [pa.field(name, type, nullable=nullable) for name, type, nullable in fields]
        )
    )


def _decimals(t: pa.Decimal128Type) -> st.SearchStrategy[decimal.Decimal]:
    bound = 10**t.precision - 1
    # From text, so that no decimal context rounds the digits.
    return st.integers(-bound, bound).map(
        lambda unscaled: decimal.Decimal(f"{unscaled}E-{t.scale}")
    )


def _strings() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(NASTY_STRINGS),
        st.text(st.characters(codec="utf-8"), max_size=12),
    )


def _scalar_values(t: pa.DataType) -> st.SearchStrategy[Any]:
    if pa.types.is_integer(t):
        bits = t.bit_width
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if pa.types.is_float32(t):
        return st.floats(width=32)
    if pa.types.is_floating(t):
        return st.floats()
    if isinstance(t, pa.Decimal128Type):
        return _decimals(t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _strings()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return st.one_of(st.just(b""), st.binary(max_size=16), st.just(bytes(range(256))))
    if pa.types.is_boolean(t):
        return st.booleans()
    if pa.types.is_date32(t):
        return st.dates()
    if pa.types.is_timestamp(t):
        if t.tz is None:
            return st.datetimes(_MIN_DATETIME, _MAX_DATETIME)
        return st.datetimes(_MIN_DATETIME, _MAX_DATETIME, timezones=st.just(dt.UTC))
    raise ValueError(f"no strategy for type {t}")


def arrow_values(t: pa.DataType, *, nullable: bool = True) -> st.SearchStrategy[Any]:
    """Generate Python values of type ``t`` as ``pa.array([...], t)`` accepts them.

    Integers span the whole width (Hypothesis favours the extremes); floats include
    NaN, infinities, -0.0 and subnormals (float32 values are exact float32); decimals
    fill their precision at their scale; strings mix :data:`NASTY_STRINGS` with
    arbitrary UTF-8 text; binary includes empty values and all 256 byte values; dates
    span 0001-01-01 to 9999-12-31; timestamps span the same years with microseconds
    (aware UTC datetimes for UTC columns, naive ones for ntz columns). Lists hold up to
    4 elements, maps up to 3 entries with distinct keys, structs are dicts by field
    name. Child nullability follows the type's fields.

    Args:
        t: The Arrow type.
        nullable: Whether ``None`` (NULL) may be generated at the top level.
    """
    values: st.SearchStrategy[Any]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field
        values = st.lists(arrow_values(item.type, nullable=item.nullable), max_size=4)
    elif pa.types.is_map(t):
        values = st.lists(
            st.tuples(
                arrow_values(t.key_type, nullable=False),
                arrow_values(t.item_type, nullable=t.item_field.nullable),
            ),
            max_size=3,
            unique_by=lambda entry: repr(entry[0]),
        )
    elif pa.types.is_struct(t):
        values = st.fixed_dictionaries(
            {f.name: arrow_values(f.type, nullable=f.nullable) for f in t}
        )
    else:
        values = _scalar_values(t)
    return st.one_of(st.none(), values) if nullable else values


@st.composite
def arrow_tables(
    draw: st.DrawFn,
    schema: pa.Schema | None = None,
    *,
    min_rows: int = 0,
    max_rows: int = 20,
) -> pa.Table:
    """Generate a table of ``schema`` (or of a drawn schema) with values of every kind.

    NULLs appear only in nullable fields (at any nesting level). See
    :func:`arrow_values` for the values.

    Args:
        draw: Supplied by Hypothesis.
        schema: The schema; drawn from :func:`arrow_schemas` when ``None``.
        min_rows: Minimum number of rows.
        max_rows: Maximum number of rows.
    """
    if schema is None:
        schema = draw(arrow_schemas())
    rows = draw(st.integers(min_rows, max_rows))
    arrays = []
    for field in schema:
        column = draw(
            st.lists(
                arrow_values(field.type, nullable=field.nullable), min_size=rows, max_size=rows
            )
        )
        arrays.append(pa.array(column, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _comparable(value: Any) -> Any:
    if isinstance(value, float):
        return ("float", "NaN" if math.isnan(value) else struct.pack(">d", value))
    if isinstance(value, dict):
        return tuple((key, _comparable(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        return tuple(_comparable(item) for item in value)
    return value


def comparable_rows(table: pa.Table) -> list[Any]:
    """Return the rows of ``table`` as hashable tuples that compare by exact value.

    NaN equals NaN and ``-0.0`` differs from ``0.0`` (``Table.equals`` says NaN != NaN).

    Args:
        table: The table.
    """
    return [_comparable(row) for row in zip(*(c.to_pylist() for c in table.columns), strict=True)]


def assert_same_rows(actual: pa.Table, expected: pa.Table, *, ordered: bool = True) -> None:
    """Assert two tables have equal schemas and rows (NaN equal to NaN).

    Args:
        actual: The table under test.
        expected: The expected table.
        ordered: Compare row order too; otherwise compare the rows as multisets.
    """
    assert actual.schema.equals(expected.schema), f"{actual.schema}\n!=\n{expected.schema}"
    left = comparable_rows(actual)
    right = comparable_rows(expected)
    if not ordered:
        left.sort(key=repr)
        right.sort(key=repr)
    assert left == right
