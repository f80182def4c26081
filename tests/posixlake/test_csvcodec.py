"""Tests of the CSV codec: the user-visible format, round trips, errors and inference."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posixlake.csvcodec import (
    CsvFormatError,
    infer_schema_from_csv,
    iter_render_csv,
    parse_csv,
    parse_value,
    read_csv_infer,
    render_csv,
    render_lines,
    render_value,
)
from posixlake.errors import SchemaError, SerializationError
from tests.strategies import (
    PRIMITIVE_TYPES,
    arrow_tables,
    arrow_types,
    assert_same_rows,
    decimal_types,
)

UTC = dt.UTC


def schema_of(*fields: pa.Field[Any]) -> pa.Schema:
    return pa.schema(list(fields))


def one_column(type: pa.DataType, *, nullable: bool = True) -> pa.Schema:
    return pa.schema([pa.field("c", type, nullable=nullable)])


def rendered_cells(values: Sequence[object], type: pa.DataType) -> list[str]:
    """Render a one-column table and return its data lines."""
    text = render_csv(pa.table({"c": pa.array(values, type)})).decode("utf-8")
    assert text.endswith("\n")
    return text.split("\n")[1:-1]


# ---------------------------------------------------------------- round trips


@given(arrow_tables())
def test_parse_inverts_render(table: pa.Table) -> None:
    assert_same_rows(parse_csv(render_csv(table), table.schema), table)


@pytest.mark.parametrize("type", [*PRIMITIVE_TYPES, pa.decimal128(38, 10)], ids=str)
@given(data=st.data())
def test_parse_inverts_render_for_each_scalar_type(type: pa.DataType, data: st.DataObject) -> None:
    for nullable in (True, False):
        schema = schema_of(pa.field("id", pa.int64()), pa.field("v", type, nullable=nullable))
        table = data.draw(arrow_tables(schema, max_rows=30))
        assert_same_rows(parse_csv(render_csv(table), schema), table)


@pytest.mark.parametrize(
    "type",
    [
        pa.string_view(),
        pa.binary_view(),
        pa.dictionary(pa.int32(), pa.string()),
        pa.list_(pa.dictionary(pa.int8(), pa.string())),
    ],
    ids=str,
)
@given(data=st.data())
def test_view_and_dictionary_types_round_trip(type: pa.DataType, data: st.DataObject) -> None:
    plain: pa.DataType = pa.list_(pa.string()) if pa.types.is_list(type) else pa.string()
    if pa.types.is_binary_view(type):
        plain = pa.binary()
    table = data.draw(arrow_tables(one_column(plain))).cast(one_column(type))
    text = render_csv(table)
    assert text == render_csv(table.cast(one_column(plain)))
    assert_same_rows(parse_csv(text, table.schema), table)


@given(data=st.data())
def test_parse_inverts_render_for_nested_and_decimal_types(data: st.DataObject) -> None:
    type = data.draw(st.one_of(decimal_types(), arrow_types(max_depth=2)))
    table = data.draw(arrow_tables(one_column(type)))
    assert_same_rows(parse_csv(render_csv(table), table.schema), table)


@given(arrow_tables(), st.integers(1, 5))
def test_streaming_render_equals_whole_render(table: pa.Table, batch_rows: int) -> None:
    batches = table.to_batches(max_chunksize=batch_rows)
    whole = render_csv(table)
    assert b"".join(iter_render_csv(table)) == whole
    assert b"".join(iter_render_csv(iter(batches), schema=table.schema)) == whole
    assert (
        b"".join(iter_render_csv(pa.RecordBatchReader.from_batches(table.schema, batches))) == whole
    )
    _, _, body = whole.partition(b"\n")
    assert b"".join(iter_render_csv(table, header=False)) == body
    assert all(chunk.endswith(b"\n") for chunk in iter_render_csv(table))


@given(arrow_tables())
def test_render_lines_are_the_data_lines(table: pa.Table) -> None:
    lines = render_lines(table).to_pylist()
    body = render_csv(table, header=False).decode("utf-8")
    assert "".join(f"{line}\n" for line in lines) == body


@given(arrow_tables(max_rows=5))
def test_crlf_line_endings_parse_the_same(table: pa.Table) -> None:
    # Replace only the record terminators (embedded newlines stay as they are).
    lines = [str(line) for line in render_lines(table).to_pylist()]
    header = render_csv(table.slice(0, 0)).decode("utf-8").rstrip("\n")
    text = "\r\n".join([header, *lines]) + "\r\n"
    assert_same_rows(parse_csv(text, table.schema), table)


def test_iter_render_csv_needs_a_schema_for_a_header() -> None:
    with pytest.raises(ValueError, match="schema"):
        list(iter_render_csv(iter([])))
    assert list(iter_render_csv(iter([]), header=False)) == []
    schema = pa.schema([pa.field("a", pa.int64())])
    assert list(iter_render_csv(iter([]), schema=schema)) == [b"a\n"]


# ---------------------------------------------------------------- the format


def test_render_example() -> None:
    table = pa.table(
        {
            "id": pa.array([1, 2, None], pa.int64()),
            "name": pa.array(["plain", "a,b", ""]),
            "price": pa.array([1.0, 0.1, float("nan")]),
            "ok": pa.array([True, False, None]),
            "day": pa.array([dt.date(2024, 1, 31), None, dt.date(1, 1, 1)]),
            "at": pa.array(
                [
                    dt.datetime(2024, 1, 31, 12, 34, 56, 123456, tzinfo=UTC),
                    dt.datetime(2024, 1, 31, tzinfo=UTC),
                    None,
                ],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    assert render_csv(table) == (
        b"id,name,price,ok,day,at\n"
        b"1,plain,1,true,2024-01-31,2024-01-31T12:34:56.123456Z\n"
        b'2,"a,b",0.1,false,,2024-01-31T00:00:00Z\n'
        b',"",NaN,,0001-01-01,\n'
    )


def test_empty_table_renders_the_header_only() -> None:
    schema = schema_of(pa.field("a b", pa.int64()), pa.field("x,y", pa.string()))
    assert render_csv(schema.empty_table()) == b'a b,"x,y"\n'
    assert parse_csv(b'a b,"x,y"\n', schema).num_rows == 0
    assert parse_csv(b'a b,"x,y"', schema).num_rows == 0


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("plain", "plain"),
        ("", '""'),
        (None, ""),
        (" ", '" "'),
        ("  ", '"  "'),
        ("\t", '"\t"'),
        (" lead", '" lead"'),
        ("trail ", '"trail "'),
        ("in side", "in side"),
        ('"', '""""'),
        ('say "hi"', '"say ""hi"""'),
        ("a,b", '"a,b"'),
        ("a\nb", '"a\nb"'),
        ("a\r\nb", '"a\r\nb"'),
        ("a\rb", '"a\rb"'),
        ("NULL", "NULL"),
        ("naïve", "naïve"),
    ],
)
def test_string_quoting(value: str | None, field: str) -> None:
    assert render_value(value, pa.string()) == field
    assert parse_value(field, pa.string()) == value


def test_null_and_empty_string_round_trip_distinctly() -> None:
    table = pa.table({"a": pa.array([None, "", "x"]), "b": pa.array(["", None, None])})
    text = render_csv(table)
    assert text == b'a,b\n,""\n"",\nx,\n'
    assert parse_csv(text, table.schema).to_pydict() == table.to_pydict()


def test_embedded_crlf_survives_inside_quotes() -> None:
    schema = schema_of(pa.field("a", pa.string()), pa.field("b", pa.int64()))
    parsed = parse_csv(b'a,b\r\n"x\r\ny",1\r\n"",2', schema)
    assert parsed.to_pydict() == {"a": ["x\r\ny", ""], "b": [1, 2]}


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (0.1, "0.1"),
        (-0.0, "-0"),
        (1e20, "1e+20"),
        (1e-7, "1e-7"),
        (123456.789, "123456.789"),
        (float("nan"), "NaN"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (5e-324, "5e-324"),
    ],
)
def test_float64_shortest_text(value: float, text: str) -> None:
    assert rendered_cells([value], pa.float64()) == [text]
    parsed = parse_value(text, pa.float64())
    assert math.isnan(parsed) if math.isnan(value) else repr(parsed) == repr(value)


def test_float32_uses_float32_shortest_text() -> None:
    values = [0.1, 1 / 3, 3.4028234663852886e38, 1e-45]
    cells = rendered_cells(values, pa.float32())
    assert cells == ["0.1", "0.33333334", "3.4028235e+38", "1e-45"]
    expected = pa.array(values, pa.float32())
    parsed = parse_csv("c\n" + "\n".join(cells), one_column(pa.float32()))
    assert parsed.column(0).to_pylist() == expected.to_pylist()


def test_decimals_keep_their_scale() -> None:
    values = [decimal.Decimal("1.50"), decimal.Decimal("-0.05"), decimal.Decimal("0")]
    assert rendered_cells(values, pa.decimal128(10, 2)) == ["1.50", "-0.05", "0.00"]


def test_timestamps_iso_8601() -> None:
    naive = [
        dt.datetime(2024, 1, 31, 12, 34, 56, 123456),
        dt.datetime(2024, 1, 31, 0, 0, 0, 500000),
    ]
    assert rendered_cells(naive, pa.timestamp("us")) == [
        "2024-01-31T12:34:56.123456",
        "2024-01-31T00:00:00.500000",
    ]
    aware = [
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(1, 1, 1, tzinfo=UTC),
    ]
    assert rendered_cells(aware, pa.timestamp("us", tz="UTC")) == [
        "9999-12-31T23:59:59.999999Z",
        "0001-01-01T00:00:00Z",
    ]


def test_binary_is_base64() -> None:
    assert rendered_cells([b"\x00\xff", b"", None, b"abc"], pa.binary()) == [
        "AP8=",
        '""',
        "",
        "YWJj",
    ]


def test_nested_values_are_compact_json() -> None:
    struct = pa.struct([("n", pa.int32()), ("tags", pa.list_(pa.string()))])
    assert rendered_cells([{"n": 1, "tags": ["a", None]}, None], struct) == [
        '"{""n"":1,""tags"":[""a"",null]}"',
        "",
    ]
    assert rendered_cells([[1, 2], []], pa.list_(pa.int64())) == ['"[1,2]"', "[]"]
    string_keys = pa.map_(pa.string(), pa.float64())
    assert rendered_cells([[("k", float("nan")), ("j", 1.5)]], string_keys) == [
        '"{""k"":""NaN"",""j"":1.5}"'
    ]
    int_keys = pa.map_(pa.int32(), pa.date32())
    assert rendered_cells([[(7, dt.date(2024, 1, 31))]], int_keys) == ['"[[7,""2024-01-31""]]"']
    assert rendered_cells([[b"\x00"]], pa.list_(pa.binary())) == ['"[""AA==""]"']
    assert rendered_cells([["a\nb\x01"]], pa.list_(pa.string())) == ['"[""a\\nb\\u0001""]"']


def test_nested_input_is_lenient_json() -> None:
    struct = pa.struct([("n", pa.int32()), ("when", pa.timestamp("us", tz="UTC"))])
    value = parse_value('"{""when"": ""2024-01-31 13:00:00+01:00""}"', struct)
    assert value == {"n": None, "when": dt.datetime(2024, 1, 31, 12, 0, tzinfo=UTC)}
    by_pairs = parse_value('"[[""a"", 1]]"', pa.map_(pa.string(), pa.int64()))
    assert by_pairs == [("a", 1)]
    assert parse_value("null", pa.list_(pa.int64())) is None
    assert parse_value('"[NaN, Infinity]"', pa.list_(pa.float64()))[1] == math.inf


# ---------------------------------------------------------------- lenient input


def test_lenient_scalars() -> None:
    assert parse_value(" 42 ", pa.int64()) == 42
    assert parse_value("+7", pa.int8()) == 7
    assert [parse_value(v, pa.bool_()) for v in ("TRUE", "f", "Yes", "n", "1", "0")] == [
        True,
        False,
        True,
        False,
        True,
        False,
    ]
    assert math.isnan(parse_value("nan", pa.float64()))
    assert parse_value("Infinity", pa.float32()) == math.inf
    assert parse_value("1.5", pa.decimal128(5, 2)) == decimal.Decimal("1.50")
    assert parse_value(" 2024-01-31 ", pa.date32()) == dt.date(2024, 1, 31)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-31T12:34:56.123456Z", dt.datetime(2024, 1, 31, 12, 34, 56, 123456)),
        ("2024-01-31 12:34:56Z", dt.datetime(2024, 1, 31, 12, 34, 56)),
        ("2024-01-31T12:34:56", dt.datetime(2024, 1, 31, 12, 34, 56)),
        ("2024-01-31T12:34:56.5+01:00", dt.datetime(2024, 1, 31, 11, 34, 56, 500000)),
        ("2024-01-31T12:34:56-0530", dt.datetime(2024, 1, 31, 18, 4, 56)),
        ("2024-01-31t12:34z", dt.datetime(2024, 1, 31, 12, 34)),
        ("2024-01-31", dt.datetime(2024, 1, 31)),
    ],
)
def test_timestamp_input_forms(text: str, expected: dt.datetime) -> None:
    assert parse_value(text, pa.timestamp("us", tz="UTC")) == expected.replace(tzinfo=UTC)
    assert parse_value(text, pa.timestamp("us")) == expected


def test_header_modes() -> None:
    schema = schema_of(pa.field("a", pa.int64()), pa.field("b", pa.string()))
    assert parse_csv(b"a,b\n1,x\n", schema).num_rows == 1
    assert parse_csv(b"whatever,else\n1,x\n", schema, header="skip").num_rows == 1
    assert parse_csv(b"1,x\n2,y", schema, header="none").num_rows == 2
    assert parse_csv(b"", schema, header="none").num_rows == 0
    assert parse_csv(b"\xef\xbb\xbfa,b\n1,x\n", schema).num_rows == 1


def test_blank_lines() -> None:
    two = schema_of(pa.field("a", pa.int64()), pa.field("b", pa.string()))
    assert parse_csv(b"a,b\n1,x\n\n2,y\n\n", two).column("a").to_pylist() == [1, 2]
    one = one_column(pa.string())
    assert parse_csv(b"c\nx\n\ny\n", one).column("c").to_pylist() == ["x", None, "y"]


# ---------------------------------------------------------------- errors


SCHEMA = schema_of(
    pa.field("id", pa.int64(), nullable=False),
    pa.field("name", pa.string()),
    pa.field("qty", pa.int64()),
)


def error_of(data: bytes, schema: pa.Schema = SCHEMA) -> CsvFormatError:
    with pytest.raises(CsvFormatError) as caught:
        parse_csv(data, schema)
    return caught.value


def test_error_is_a_serialization_error_and_a_value_error() -> None:
    err = error_of(b"")
    assert isinstance(err, SerializationError)
    assert isinstance(err, ValueError)


def test_error_missing_header() -> None:
    err = error_of(b"1,a,2\n")
    assert str(err) == "missing or wrong header: expected id,name,qty got 1,a,2"
    assert str(error_of(b"")) == "missing or wrong header: expected id,name,qty got an empty file"
    assert "got name,id,qty" in str(error_of(b"name,id,qty\n"))


def test_error_wrong_column_count() -> None:
    err = error_of(b'id,name,qty\n1,a,2\n2,"b\nc",3\n3,x\n')
    assert str(err) == "line 5: expected 3 fields (id,name,qty), got 2"
    assert err.line == 5
    assert (
        str(error_of(b"id,name,qty\n1,a,2,3\n")) == "line 2: expected 3 fields (id,name,qty), got 4"
    )


def test_error_bad_value() -> None:
    err = error_of(b'id,name,qty\n1,a,2\n2,"multi\nline",3\n3,c,abc\n')
    assert str(err) == "line 5, column 'qty': 'abc' is not an Int64"
    assert (err.line, err.column, err.value) == (5, "qty", "abc")


def test_error_bad_value_in_a_big_file() -> None:
    rows = b"".join(b"%d,n,%d\n" % (i, i) for i in range(10_000))
    err = error_of(b"id,name,qty\n" + rows + b"10000,n,1.5\n")
    assert str(err) == "line 10002, column 'qty': '1.5' is not an Int64"


@pytest.mark.parametrize(
    ("type", "text", "message"),
    [
        (pa.int8(), "300", "'300' is not an Int8"),
        (pa.int64(), "0x10", "'0x10' is not an Int64"),
        (pa.int64(), "+-5", "'+-5' is not an Int64"),
        (pa.float64(), "1,5", None),
        (pa.float32(), "one", "'one' is not a Float32"),
        (pa.float32(), "3.5e38", "'3.5e38' is not a Float32 (out of range)"),
        (pa.decimal128(4, 2), "1.234", "'1.234' is not a Decimal(4, 2) (too many digits)"),
        (pa.decimal128(4, 2), "123.4", "'123.4' is not a Decimal(4, 2) (too many digits)"),
        (pa.bool_(), "maybe", "'maybe' is not a Boolean"),
        (pa.date32(), "2024-02-30", "'2024-02-30' is not a Date"),
        (pa.timestamp("us", tz="UTC"), "2024-01-31T12:34:56.1234567Z", "is not a Timestamp"),
        (pa.timestamp("us"), "yesterday", "'yesterday' is not a TimestampNtz"),
        (pa.binary(), "not base64!", "is not a Binary (base64)"),
        (pa.list_(pa.int64()), '"[1,""x""]"', "is not a List<Int64>"),
        (pa.list_(pa.int64()), '"[1,"', "is not a List<Int64>"),
        (pa.struct([("a", pa.int8())]), '"{""b"":1}"', "unknown struct field 'b'"),
    ],
)
def test_error_bad_value_per_type(type: pa.DataType, text: str, message: str | None) -> None:
    schema = schema_of(pa.field("id", pa.int64()), pa.field("v", type))
    with pytest.raises(CsvFormatError) as caught:
        parse_csv(f"id,v\n1,{text}\n".encode(), schema)
    if message is None:
        assert "line 2: expected 2 fields" in str(caught.value)
    else:
        assert str(caught.value).startswith("line 2, column 'v': ")
        assert message in str(caught.value)


def test_error_null_in_non_nullable_field() -> None:
    err = error_of(b"id,name,qty\n1,a,2\n,b,3\n")
    assert str(err) == "line 3, column 'id': NULL (empty field) in a non-nullable field"
    schema = pa.schema([pa.field("tags", pa.list_(pa.field("item", pa.string(), nullable=False)))])
    with pytest.raises(CsvFormatError, match=r"line 3, column 'tags': NULL at tags\[\]"):
        parse_csv(b'tags\n"[""a""]"\n"[""a"",null]"\n', schema)


def test_error_unterminated_quote() -> None:
    err = error_of(b'id,name,qty\n1,a,2\n2,"open,3\n4,b,5\n')
    assert str(err).startswith("line 3: unterminated quote")
    assert err.line == 3


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview, str])
def test_error_quote_open_at_the_end_of_the_input(kind: type) -> None:
    data = b'id,name,qty\n1,a,2\n2,"open\n'
    source = data.decode() if kind is str else kind(data)
    with pytest.raises(CsvFormatError, match=r"^line 3: unterminated quote"):
        parse_csv(source, SCHEMA)


def test_error_invalid_utf8() -> None:
    err = error_of(b"id,name,qty\n1,\xff,2\n")
    assert str(err).startswith("line 2, field: invalid UTF-8")


def test_unsupported_type_is_a_schema_error() -> None:
    schema = pa.schema([pa.field("d", pa.duration("s"))])
    with pytest.raises(SchemaError):
        parse_csv(b"d\n1\n", schema)
    with pytest.raises(SchemaError):
        render_csv(pa.table({"d": pa.array([1], pa.duration("s"))}))


# ---------------------------------------------------------------- inference


def test_infer_basic_types() -> None:
    data = (
        b"i,f,b,d,t,s,e\n"
        b"1,1.5,true,2024-01-31,2024-01-31T12:00:00Z,x,\n"
        b"-2,2,FALSE,2024-02-01,2024-02-01 13:00:00+01:00,y,\n"
    )
    table = read_csv_infer(data)
    assert table.schema.names == ["i", "f", "b", "d", "t", "s", "e"]
    assert table.schema.types == [
        pa.int64(),
        pa.float64(),
        pa.bool_(),
        pa.date32(),
        pa.timestamp("us", tz="UTC"),
        pa.string(),
        pa.string(),
    ]
    assert table.column("t").to_pylist() == [
        dt.datetime(2024, 1, 31, 12, tzinfo=UTC),
        dt.datetime(2024, 2, 1, 12, tzinfo=UTC),
    ]
    assert table.column("e").to_pylist() == [None, None]


def test_infer_widens_on_later_values() -> None:
    head = b"".join(b"%d,%d,2024-01-01,true\n" % (i, i) for i in range(5000))
    data = b"a,b,c,d\n" + head + b"1.5,x,2024-01-01T10:00:00,yes\n"
    schema = infer_schema_from_csv(data)
    assert schema.types == [pa.float64(), pa.string(), pa.timestamp("us"), pa.string()]
    table = read_csv_infer(data)
    assert table.column("b").to_pylist()[-2:] == ["4999", "x"]
    assert table.column("c").to_pylist()[-1] == dt.datetime(2024, 1, 1, 10)


def test_infer_naive_timestamps_without_a_zone_and_keeps_big_integers() -> None:
    data = b"t,big\n2024-01-31 12:00:00,123456789012345678901234567890\n,1\n"
    table = read_csv_infer(data)
    assert table.schema.types == [pa.timestamp("us"), pa.string()]
    assert table.column("t").to_pylist() == [dt.datetime(2024, 1, 31, 12), None]


def test_infer_quoted_fields_and_empty_strings() -> None:
    data = b'name,note,n\n"Smith, J","line1\nline2",1\n"",,2\n'
    table = read_csv_infer(data)
    assert table.schema.types == [pa.string(), pa.string(), pa.int64()]
    assert table.to_pydict() == {
        "name": ["Smith, J", ""],
        "note": ["line1\nline2", None],
        "n": [1, 2],
    }


def test_infer_all_empty_column_and_header_only() -> None:
    assert infer_schema_from_csv(b"a,b\n,1\n,2\n").types == [pa.string(), pa.int64()]
    header_only = read_csv_infer(b"a,b\n")
    assert header_only.num_rows == 0
    assert header_only.schema.types == [pa.string(), pa.string()]


def test_infer_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "in.csv"
    path.write_bytes(b"x,y\n1,a\n2,b\n")
    assert read_csv_infer(path).to_pydict() == {"x": [1, 2], "y": ["a", "b"]}
    assert infer_schema_from_csv(str(path)).names == ["x", "y"]


def test_infer_matches_parse_with_the_inferred_schema() -> None:
    data = b"a,b,c\n 1 ,x,TRUE\n2,,false\n"
    table = read_csv_infer(data)
    assert_same_rows(parse_csv(data, table.schema), table)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty CSV"),
        (b"a,a\n1,2\n", "duplicate column name 'a'"),
        (b"a,,c\n1,2,3\n", "column 2 has an empty name"),
        (b"a,b\n1,2\n3\n", "line 3: expected 2 fields (a,b), got 1"),
    ],
)
def test_infer_errors(data: bytes, message: str) -> None:
    with pytest.raises(CsvFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_csv_infer(data)
