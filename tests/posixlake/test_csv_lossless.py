"""CSV in and out without loss: inference never changes what a value says, types can be
given at import, a change file says what it means, and data.csv gives back what was read.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posixlake import DatabaseOps
from posixlake.csvcodec import (
    CsvFormatError,
    infer_schema_from_csv,
    read_changes_csv,
    read_csv_infer,
    render_csv,
)
from posixlake.engines import Engine
from posixlake.errors import SchemaError, SerializationError

# ---------------------------------------------------------------- the inference table


INFERENCE_TABLE: list[tuple[list[str], pa.DataType]] = [
    (["08123", "12345"], pa.string()),  # a zip code with its zero
    (["007", "8"], pa.string()),
    (["+15551234", "5551234"], pa.string()),  # a phone number with its plus
    (["-0", "1"], pa.float64()),  # an Int64 would show 0; a double shows -0
    (["0", "42", "-3"], pa.int64()),  # ordinary integers stay integers
    (["9223372036854775807", "-9223372036854775808"], pa.int64()),
    (["9223372036854775808", "1"], pa.string()),  # beyond Int64: not a float
    (["0.5", "1.10", ".5", "5.", "1e5", "-2.5E-3"], pa.float64()),
    (["00.5", "1"], pa.string()),
    (["+1.5", "2"], pa.string()),
    (["1", "2.5"], pa.float64()),
    (["12345678901234567", "0.5"], pa.string()),  # a double would round the integer
    (["0.30000000000000001", "1"], pa.string()),  # a double says 0.3
    (["1e-400", "1"], pa.string()),  # a double says 0
    (["4.9e-324", "1"], pa.string()),  # a double says 5e-324
    (["1e400", "1"], pa.string()),  # beyond a double
    (["NaN", "inf", "-Infinity", "1.5"], pa.float64()),
    (["NaN", "inf"], pa.string()),  # words only
    (["Nan", "Bob"], pa.string()),
    (["true", "FALSE", "True"], pa.bool_()),
    (["1", "0"], pa.int64()),
    (["yes", "no"], pa.string()),
    (["2024-01-31", "0001-01-01", "9999-12-31"], pa.date32()),
    (["2024-1-5", "2024-01-05"], pa.string()),
    (["2024-02-30"], pa.string()),
    (["2024-01-31 12:00:00", "2024-01-31T12:00:00.123456", "2024-02-01"], pa.timestamp("us")),
    (["2024-01-31T12:00:00Z", "2024-01-31 12:00:00+02:00"], pa.timestamp("us", "UTC")),
    (["2024-01-31T12:00:00Z", "2024-01-31 12:00:00"], pa.string()),  # zoned and naive
    (["2024-01-31T12:00:00.1234567"], pa.string()),  # beyond microseconds
    ([" 42 ", "7"], pa.int64()),  # whitespace around a number is not part of it
]


def test_inferred_types_keep_every_value() -> None:
    wrong = []
    for values, expected in INFERENCE_TABLE:
        data = ("v\n" + "\n".join(values) + "\n").encode()
        got = infer_schema_from_csv(data).types[0]
        if got != expected:
            wrong.append((values, str(got), str(expected)))
            continue
        shown = _fields(render_csv(read_csv_infer(data)))
        for written, again in zip(values, shown, strict=True):
            assert _says(written, expected) == _says(again, expected), (written, again)
    assert wrong == []


def test_a_value_past_the_sample_still_decides() -> None:
    data = b"zip\n" + b"".join(b"%d\n" % (10000 + i) for i in range(5000)) + b"08123\n"
    table = read_csv_infer(data)
    assert table.schema.types == [pa.string()]
    assert table.column("zip")[-1].as_py() == "08123"
    # the sample (NaN words only) does not decide for the rest of the column
    late_number = b"x\n" + b"NaN\n" * 5000 + b"1.5\n"
    assert infer_schema_from_csv(late_number).types == [pa.float64()]


# ---------------------------------------------------------------- types given at import


def test_given_types_win_and_a_value_that_does_not_fit_names_line_column_value() -> None:
    data = b"id,zip,amount\n1,08123,1.50\n2,12345,2\n"
    table = read_csv_infer(data, types={"amount": pa.decimal128(10, 2), "id": pa.int32()})
    assert table.schema.types == [pa.int32(), pa.string(), pa.decimal128(10, 2)]
    assert render_csv(table) == b"id,zip,amount\n1,08123,1.50\n2,12345,2.00\n"
    bad = data + b"3,x,3.999\n"
    with pytest.raises(CsvFormatError) as err:
        read_csv_infer(bad, types={"amount": pa.decimal128(10, 2)})
    assert (err.value.line, err.value.column, err.value.value) == (4, "amount", "3.999")
    assert "line 4, column 'amount': '3.999'" in str(err.value)
    with pytest.raises(SchemaError, match="'nope'"):
        read_csv_infer(data, types={"nope": pa.string()})


def test_several_files_are_one_input(tmp_path: Path) -> None:
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_text("id,zip\n1,12345\n")
    second.write_text("zip,id,note\n08123,2,x\n")
    table = read_csv_infer([first, second])
    assert table.schema.names == ["id", "zip", "note"]
    assert table.schema.types == [pa.int64(), pa.string(), pa.string()]
    assert table.to_pydict() == {"id": [1, 2], "zip": ["12345", "08123"], "note": [None, "x"]}
    with pytest.raises(CsvFormatError, match=r"b\.csv: line 2, column 'note': 'x'"):
        read_csv_infer([first, second], types={"id": pa.uint8(), "note": pa.bool_()})


# ---------------------------------------------------------------- a change file


def test_change_rows_say_what_they_mean() -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("price", pa.decimal128(10, 2))])
    rows = read_changes_csv(
        b'_op,id,name,price\nUPDATE,3,,1.50\nUPDATE,4,\\N,\nINSERT,5,"",\\N\nDELETE,6,,\n',
        schema,
    )
    assert rows == [
        {"_op": "UPDATE", "id": 3, "price": Decimal("1.50")},
        {"_op": "UPDATE", "id": 4, "name": None},
        {"_op": "INSERT", "id": 5, "name": "", "price": None},
        {"_op": "DELETE", "id": 6},
    ]
    custom = read_changes_csv(b"_op,id,name\nUPDATE,1,NULL\n", schema, null_marker="NULL")
    assert custom == [{"_op": "UPDATE", "id": 1, "name": None}]
    with pytest.raises(CsvFormatError, match="line 2, column 'price': 'abc'"):
        read_changes_csv(b"_op,id,price\nUPDATE,1,abc\n", schema)
    with pytest.raises(CsvFormatError, match="_op"):
        read_changes_csv(b"id,price\n1,2\n", schema)
    with pytest.raises(SchemaError, match="'colour'"):
        read_changes_csv(b"_op,id,colour\nUPDATE,1,red\n", schema)


# ---------------------------------------------------------------- tables, both engines


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_create_from_csv_keeps_codes_as_text(tmp_path: Path, engine: Engine) -> None:
    src = _write(
        tmp_path / "people.csv",
        "id,zip,phone,code,n,price\n1,08123,+15551234,007,10,1.5\n2,12345,5551234,8,0,2.25\n",
    )
    db = DatabaseOps.create_from_csv(tmp_path / "t", src, primary_key="id", engine=engine)
    assert str(db.schema) == (
        "(id Int64 NOT NULL, zip String, phone String, code String, n Int64, price Float64, "
        "PRIMARY KEY (id))"
    )
    assert render_csv(db.to_arrow().sort_by("id")) == (
        b"id,zip,phone,code,n,price\n1,08123,+15551234,007,10,1.5\n2,12345,5551234,8,0,2.25\n"
    )
    # later CSV inserts into the String columns keep their text too
    db.insert("id,zip,phone,code\n3,00501,+4412345,000\n")
    row = db.query("SELECT zip, phone, code FROM data WHERE id = 3").to_pylist()
    assert row == [{"zip": "00501", "phone": "+4412345", "code": "000"}]


def test_create_from_csv_with_given_types(tmp_path: Path, engine: Engine) -> None:
    src = _write(tmp_path / "in.csv", "id,zip,amount,qty\n1,12345,1.50,3\n2,54321,2,\n")
    db = DatabaseOps.create_from_csv(
        tmp_path / "t",
        src,
        primary_key="id",
        types={"zip": "String", "amount": "Decimal128(10,2)", "qty": "UInt8"},
        engine=engine,
    )
    assert str(db.schema) == (
        "(id Int64 NOT NULL, zip String, amount Decimal128(10,2), qty UInt8, PRIMARY KEY (id))"
    )
    assert render_csv(db.to_arrow().sort_by("id")) == (
        b"id,zip,amount,qty\n1,12345,1.50,3\n2,54321,2.00,\n"
    )


def test_create_from_csv_with_a_schema(tmp_path: Path, engine: Engine) -> None:
    src = _write(tmp_path / "in.csv", "zip,id\n08123,1\n,2\n")
    db = DatabaseOps.create_from_csv(
        tmp_path / "t",
        src,
        schema={"id": "Int32", "zip": "String", "since": "Date32"},
        primary_key="id",
        engine=engine,
    )
    assert str(db.schema) == "(id Int32 NOT NULL, zip String, since Date32, PRIMARY KEY (id))"
    assert db.query("SELECT * FROM data ORDER BY id").to_pylist() == [
        {"id": 1, "zip": "08123", "since": None},
        {"id": 2, "zip": None, "since": None},
    ]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"types": {"qty": "UInt8"}}, SerializationError, "line 3, column 'qty': '-1'"),
        ({"types": {"zip": "Int8"}}, SerializationError, "line 2, column 'zip': '08123'"),
        ({"types": {"nope": "String"}}, SchemaError, "'nope'"),
        ({"types": {"zip": "Nonsense"}}, SchemaError, "Nonsense"),
        ({"schema": [("id", "Int64"), ("zip", "String")]}, SchemaError, "'qty'"),
        (
            {
                "schema": [
                    ("id", "Int64"),
                    ("zip", "String"),
                    ("qty", "Int32"),
                    ("x", "Date32", False),
                ]
            },
            SerializationError,
            "'x', which is NOT NULL",
        ),
    ],
    ids=["negative-uint", "too-big", "unknown-column", "unknown-type", "extra-column", "missing"],
)
def test_a_value_that_does_not_fit_creates_nothing(
    tmp_path: Path, engine: Engine, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    src = _write(tmp_path / "in.csv", "id,zip,qty\n1,08123,3\n2,12345,-1\n")
    with pytest.raises(error, match=message):
        DatabaseOps.create_from_csv(tmp_path / "t", src, engine=engine, **kwargs)
    assert not (tmp_path / "t").exists()


# ---------------------------------------------------------------- the round trip


def _fields(rendered: bytes) -> list[str | None]:
    """The one column of rendered CSV, NULL (an empty unquoted field) as None."""
    lines = rendered.decode().split("\n")[1:-1]
    return [None if line == "" else next(csv.reader([line]))[0] for line in lines]


def _says(text: str | None, t: pa.DataType) -> object:
    """What a field says, read by Python alone (not the codec) for a column of type t."""
    if text is None or pa.types.is_string(t):
        return text
    s = text.strip()
    if pa.types.is_integer(t):
        return int(s)
    if pa.types.is_floating(t):
        low = s.lower()
        if low == "nan":
            return "nan"
        if low.lstrip("-") in ("inf", "infinity"):
            return "-inf" if low.startswith("-") else "inf"
        return Decimal(s)
    if pa.types.is_boolean(t):
        return {"true": True, "false": False}[s.lower()]
    if pa.types.is_date(t):
        return dt.date.fromisoformat(s)
    assert isinstance(t, pa.TimestampType)
    when = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return when.astimezone(dt.UTC) if when.tzinfo else when


_CODES = st.one_of(
    st.from_regex(r"\A0[0-9]{1,9}\Z"),  # zip codes, account numbers
    st.from_regex(r"\A\+[1-9][0-9]{5,12}\Z"),  # phone numbers
)
_INTS = st.integers(-(2**63), 2**63 - 1).map(str)
_FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.decimals(
        allow_nan=False, allow_infinity=False, places=2, min_value=-(10**6), max_value=10**6
    ).map(str),
    st.from_regex(r"\A-?[1-9][0-9]{0,20}\.[0-9]{0,20}\Z"),  # any digits: a double may not hold them
    st.sampled_from(["NaN", "inf", "-inf", "1e5", "1.10", "0.1"]),
)
_DATES = st.dates().map(dt.date.isoformat)
_NAIVE = st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)).map(
    lambda d: d.isoformat(sep=" ")
)
_TEXT = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1
)
_KINDS = {
    "code": _CODES,
    "int": _INTS,
    "float": _FLOATS,
    "date": _DATES,
    "naive": _NAIVE,
    "text": _TEXT,
}


@st.composite
def _csv_columns(draw: st.DrawFn, max_columns: int = 4) -> tuple[list[str], list[list[str | None]]]:
    """Columns of CSV field texts (None for an empty field), each of one or two kinds."""
    kinds = draw(st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=max_columns))
    rows = draw(st.integers(1, 8))
    columns = []
    for kind in kinds:
        values = st.one_of(_KINDS[kind], _KINDS[draw(st.sampled_from(sorted(_KINDS)))])
        mixed = draw(st.booleans())
        pick = values if mixed else _KINDS[kind]
        columns.append(draw(st.lists(st.none() | pick, min_size=rows, max_size=rows)))
    return kinds, columns


def _csv_field(value: str | None) -> str:
    """RFC 4180: an empty field for NULL; quotes around text that needs them."""
    if value is None:
        return ""
    if re.search(r'[,"\r\n]|^\s|\s$', value):
        return '"' + value.replace('"', '""') + '"'
    return value


def _csv_text(columns: list[list[str | None]]) -> bytes:
    lines = [",".join(f"c{i}" for i in range(len(columns)))]
    lines += [",".join(map(_csv_field, row)) for row in zip(*columns, strict=True)]
    return ("\n".join(lines) + "\n").encode()


def _check_round_trip(kinds: list[str], columns: list[list[str | None]], table: pa.Table) -> None:
    shown = list(csv.reader(io.StringIO(render_csv(table).decode())))[1:]
    for index, (kind, written) in enumerate(zip(kinds, columns, strict=True)):
        t = table.schema.field(index).type
        # a blank line is a row of one NULL (csv.reader gives [])
        again = [row[index] if row and row[index] != "" else None for row in shown]
        assert len(again) == len(written)
        for before, after in zip(written, again, strict=True):
            assert _says(before, t) == _says(after, t), (kind, t, before, after)
        values = [v.strip() for v in written if v is not None]
        if any(re.fullmatch(r"[+0][0-9]+", v) for v in values):
            assert t == pa.string(), (written, t)  # a code keeps its zeros and its plus
        elif (
            values
            and all(re.fullmatch(r"0|-?[1-9][0-9]*", v) for v in values)
            and all(-(2**63) <= int(v) < 2**63 for v in values)
        ):
            assert t == pa.int64(), (written, t)  # ordinary integers stay integers


@given(_csv_columns(max_columns=6))
def test_csv_read_and_rendered_again_says_the_same(sample: Any) -> None:
    kinds, columns = sample
    _check_round_trip(kinds, columns, read_csv_infer(_csv_text(columns)))


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_csv_columns())
def test_create_from_csv_then_data_csv_says_the_same(tmp_path: Path, sample: Any) -> None:
    kinds, columns = sample
    base = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    base.mkdir()
    src = base / "in.csv"
    src.write_bytes(_csv_text(columns))
    db = DatabaseOps.create_from_csv(base / "t", str(src), engine="local")
    with db:
        table = db.to_arrow()
    # the table's rows come back in file order from one commit
    _check_round_trip(kinds, columns, table)


def test_merge_of_csv_text_changes_only_what_it_gives(tmp_path: Path, engine: Engine) -> None:
    db = DatabaseOps.create(
        tmp_path / "t",
        [
            ("id", "Int64"),
            ("name", "String", False),
            ("price", "Decimal128(10,2)"),
            ("zip", "String"),
        ],
        primary_key="id",
        engine=engine,
    )
    db.insert("id,name,price,zip\n1,apple,0.50,08123\n2,pear,0.75,00501\n3,fig,1.00,\n")
    metrics = db.merge(
        "_op,id,name,price,zip\nUPDATE,1,,1.50,\nUPDATE,2,,\\N,\\N\nINSERT,4,kiwi,,\nDELETE,3,,,\n"
    )
    assert (metrics.rows_inserted, metrics.rows_updated, metrics.rows_deleted) == (1, 2, 1)
    assert db.query("SELECT * FROM data ORDER BY id").to_pylist() == [
        {"id": 1, "name": "apple", "price": Decimal("1.50"), "zip": "08123"},
        {"id": 2, "name": "pear", "price": None, "zip": None},
        {"id": 4, "name": "kiwi", "price": None, "zip": None},
    ]
    with pytest.raises(SerializationError, match="line 2, column 'price': 'cheap'"):
        db.merge(b"_op,id,price\nUPDATE,1,cheap\n")


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_several_csv_files_are_inferred_as_one_input(tmp_path: Path, engine: str) -> None:
    """An Int64 file and a Float64 one: typed one by one and unified, the big integer was
    rounded to a double; inferred over every file, the column keeps every value's text."""
    (tmp_path / "a.csv").write_text("id,v\n1,9007199254740993\n")
    (tmp_path / "b.csv").write_text("id,v\n2,1.5\n")
    db = DatabaseOps.create_from_csv(
        tmp_path / "t", [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")], engine=engine
    )
    got = sorted(db.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [str(r["v"]) for r in got] == ["9007199254740993", "1.5"]
