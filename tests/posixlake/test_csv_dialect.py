"""CSV dialects (posixlake.csvcodec.CsvOptions): other delimiters, quotes, NULL markers,
encodings and header-less files, rewritten to posixlake's CSV without changing a value."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posixlake import DatabaseOps
from posixlake.csvcodec import CsvFormatError, CsvOptions, parse_csv, to_canonical_csv
from posixlake.engines import Engine
from posixlake.errors import SerializationError

TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
ROWS = st.lists(st.tuples(st.none() | TEXT, st.none() | TEXT), max_size=8)


def _written(rows: list[tuple[str | None, str | None]], options: CsvOptions) -> bytes:
    """Rows as a CSV of that dialect: every value quoted, NULL the bare marker."""
    q, d = options.quote, options.delimiter

    def field(v: str | None) -> str:
        return options.null if v is None else q + v.replace(q, q + q) + q

    lines = [d.join(field(v) for v in row) for row in rows]
    if options.header:
        lines.insert(0, d.join(["a", "b"]))
    return "".join(line + "\n" for line in lines).encode(options.encoding)


@given(ROWS, st.sampled_from(["utf-8", "utf-16", "utf-32"]))
def test_dialects_keep_every_value(rows: list[tuple[str | None, str | None]], enc: str) -> None:
    options = CsvOptions(delimiter=";", quote="'", null="NA", encoding=enc)
    canonical = to_canonical_csv(_written(rows, options), options)
    schema = pa.schema([("a", pa.string()), ("b", pa.string())])
    expected = pa.table({"a": [r[0] for r in rows], "b": [r[1] for r in rows]}, schema=schema)
    assert parse_csv(canonical, schema) == expected if rows else canonical in (b"", b"a,b\n")


@given(ROWS)
def test_header_less_input_takes_the_given_names(rows: list[tuple[str | None, str | None]]) -> None:
    options = CsvOptions(delimiter="\t", null="\\N", header=False)
    canonical = to_canonical_csv(_written(rows, options), options, columns=["a", "b"])
    schema = pa.schema([("a", pa.string()), ("b", pa.string())])
    expected = pa.table({"a": [r[0] for r in rows], "b": [r[1] for r in rows]}, schema=schema)
    assert parse_csv(canonical, schema) == expected


def test_options_are_checked() -> None:
    for bad in ({"delimiter": ";;"}, {"quote": "ab"}, {"delimiter": '"'}, {"encoding": "nope"}):
        with pytest.raises(CsvFormatError):
            CsvOptions.coerce(bad)
    with pytest.raises(CsvFormatError, match="unknown CSV option"):
        CsvOptions.coerce({"sep": ";"})
    assert CsvOptions.coerce({"encoding": "UTF8"}).is_default
    assert not CsvOptions.coerce({"header": False}).is_default


def test_insert_with_csv_options(tmp_path: Path, local_engine: Engine) -> None:
    db = DatabaseOps.create(tmp_path / "t", {"id": "Int64", "city": "String"}, engine=local_engine)
    data = "id;city\n1;Z\u00fcrich\n2;NA\n".encode("latin-1")
    with pytest.raises(SerializationError):
        db.insert(data)  # UTF-8 and commas: refused, nothing written
    done = db.insert(data, csv_options={"delimiter": ";", "null": "NA", "encoding": "latin-1"})
    assert done.rows == 2 and db.version == 1
    path = tmp_path / "more.csv"
    path.write_bytes(b"3|Lima\n")
    db.insert(str(path), csv_options=CsvOptions(delimiter="|", header=False))
    assert db.query("SELECT * FROM data ORDER BY id").to_pylist() == [
        {"id": 1, "city": "Z\u00fcrich"},
        {"id": 2, "city": None},
        {"id": 3, "city": "Lima"},
    ]
    with pytest.raises(SerializationError, match="3 field"):
        db.insert("1|x|y\n", csv_options={"delimiter": "|", "header": False})
    assert db.version == 2


def test_create_from_csv_with_options(tmp_path: Path, local_engine: Engine) -> None:
    src = tmp_path / "in.csv"
    src.write_bytes("x;y\n1;a\n2;NA\n".encode("utf-16"))
    db = DatabaseOps.create_from_csv(
        tmp_path / "t",
        str(src),
        engine=local_engine,
        csv_options={"delimiter": ";", "null": "NA", "encoding": "utf-16"},
    )
    assert db.query("SELECT * FROM data ORDER BY x").to_pylist() == [
        {"x": 1, "y": "a"},
        {"x": 2, "y": None},
    ]
