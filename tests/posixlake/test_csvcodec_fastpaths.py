"""The renderer's fast paths give the same bytes as the straightforward rendering.

``reference_csv`` below is the renderer as it was before the fast paths (a regular
expression search per text value to decide its quotes, the lines joined, then a line
terminator appended to each, then the text copied out). The fast paths: a column whose
bytes hold nothing that can call for quotes, or no structural character (then only the
values' first and last characters are compared), the terminator appended to the last
field, views instead of copies. Every table, and every string column built to hit their
edges (each byte that can call for quotes, alone or among others, at the start, middle or
end of a value; U+FEFF and other characters whose UTF-8 starts with 0xEF; sliced arrays;
null slots holding bytes), must render to exactly its bytes.

Floats: the reference is Arrow's cast to text (NaN as ``NaN``); the fast path writes whole
numbers as integers (see ``_float_text``). Columns built to hit its edges (whole numbers
of every size around 1e10 and 2**24/2**53, -0.0, NaN, infinities, subnormals, fractions,
1e16, 1e-7, NULLs, among whole numbers so that the path is taken) must render alike.
"""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posixlake.csvcodec import (
    CsvFormatError,
    iter_render_csv,
    iter_render_views,
    render_csv,
    render_lines,
)
from posixlake.csvcodec._common import _NEEDS_QUOTES
from posixlake.csvcodec._render import _json, _quote, _text
from tests.strategies import arrow_tables

# --- the rendering before the fast paths --------------------------------------------------


def _reference_quote(text: pa.Array[Any]) -> pa.Array[Any]:
    needs = pc.or_(pc.match_substring_regex(text, _NEEDS_QUOTES), pc.equal(text, ""))
    if pc.any(needs).as_py():
        quoted = pc.binary_join_element_wise('"', pc.replace_substring(text, '"', '""'), '"', "")
        text = pc.if_else(needs, quoted, text)
    return pc.fill_null(text, "")


def _reference_float_text(arr: pa.Array[Any]) -> pa.Array[Any]:
    """Arrow's shortest text of each float, NaN as ``NaN`` (NULL stays null)."""
    return pc.if_else(pc.is_nan(arr), "NaN", pc.cast(arr, pa.string()))


def _reference_field(arr: pa.Array[Any]) -> pa.Array[Any]:
    if isinstance(arr, pa.DictionaryArray):
        arr = arr.dictionary_decode()
    t = arr.type
    text = _reference_float_text(arr) if pa.types.is_floating(t) else _text(arr)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return _reference_quote(text)
    if isinstance(t, pa.ListType | pa.LargeListType | pa.MapType | pa.StructType):
        return _reference_quote(text)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        text = pc.if_else(pc.equal(text, ""), '""', text)
    return pc.fill_null(text, "")


def reference_csv(table: pa.Table) -> bytes:
    """Render ``table`` (header included) the way the renderer did before its fast paths."""
    header = _reference_quote(pa.array(table.schema.names, pa.string())).to_pylist()
    out = [(",".join(header) + "\n").encode("utf-8")]
    for batch in table.to_batches():
        fields = [_reference_field(column) for column in batch.columns]
        if not fields:
            lines = pa.array([""] * batch.num_rows, pa.string())
        elif len(fields) == 1:
            lines = fields[0]
        else:
            lines = pc.binary_join_element_wise(*fields, ",")
        terminated = pc.binary_join_element_wise(lines, "", "\n")
        out.extend(s.encode("utf-8") for s in terminated.to_pylist())
    return b"".join(out)


# --- strings at the fast paths' edges -------------------------------------------------------

# every byte that can call for quotes, characters sharing U+FEFF's first UTF-8 byte (0xEF)
# or containing 0xEF otherwise (U+00EF is C3 AF: not), and plain text
_CHARS = [",", '"', "\r", "\n", " ", "\t", "\v", "\f", "\ufeff", "\uf000", "\u00ef", "é", "a", "1"]
_EDGY = st.sampled_from(_CHARS)
_edgy_text = st.lists(_EDGY, max_size=4).map("".join)


@st.composite
def string_arrays(draw: st.DrawFn) -> pa.Array[Any]:
    """A string array, possibly a slice of a longer one, possibly with bytes in null slots."""
    values = draw(st.lists(st.none() | _edgy_text, max_size=12))
    arr: pa.Array[Any] = pa.array(values, pa.string())
    if draw(st.booleans()) and len(arr):
        # null slots may hold bytes: rebuild the array with a filler in each null slot
        filler = draw(_edgy_text).encode("utf-8")
        data = b"".join(filler if v is None else v.encode("utf-8") for v in values)
        offsets = [0]
        for v in values:
            offsets.append(offsets[-1] + len(filler if v is None else v.encode("utf-8")))
        arr = pa.Array.from_buffers(
            pa.string(),
            len(values),
            [
                arr.buffers()[0],
                pa.py_buffer(struct.pack(f"={len(offsets)}i", *offsets)),
                pa.py_buffer(data),
            ],
            null_count=arr.null_count,
        )
    start = draw(st.integers(0, len(arr)))
    return arr.slice(start, draw(st.integers(0, len(arr) - start)))


@given(string_arrays())
def test_quoting_equals_a_search_per_value(arr: pa.Array[Any]) -> None:
    assert _quote(arr).to_pylist() == _reference_quote(arr).to_pylist()


@pytest.mark.parametrize("char", _CHARS)
@pytest.mark.parametrize("where", ["alone", "start", "middle", "end"])
def test_each_character_alone_in_a_column_is_quoted_as_before(char: str, where: str) -> None:
    value = {"alone": char, "start": char + "x", "middle": f"x{char}x", "end": "x" + char}[where]
    for values in ([value], ["plain", value, "text"], [None, value, ""]):
        arr = pa.array(values, pa.string())
        assert _quote(arr).to_pylist() == _reference_quote(arr).to_pylist()
        table = pa.table({"a": arr, "b": arr})
        assert render_csv(table) == reference_csv(table)


@given(st.lists(string_arrays(), min_size=1, max_size=3), st.data())
def test_text_columns_render_as_before(columns: list[pa.Array[Any]], data: st.DataObject) -> None:
    rows = min(len(c) for c in columns)
    arrays = [c.slice(0, rows) for c in columns]
    if data.draw(st.booleans()):  # the last column as a dictionary (appends its terminator)
        arrays[-1] = pc.dictionary_encode(arrays[-1])
    table = pa.table({f"c{i}": a for i, a in enumerate(arrays)})
    assert render_csv(table) == reference_csv(table)


@given(arrow_tables())
def test_every_table_renders_as_before(table: pa.Table) -> None:
    assert render_csv(table) == reference_csv(table)
    lines = [f"{line}\n".encode() for line in render_lines(table).to_pylist()]
    assert b"".join(lines) == reference_csv(table).partition(b"\n")[2]


@given(arrow_tables(), st.integers(1, 5))
def test_views_are_the_chunks(table: pa.Table, batch_rows: int) -> None:
    batches = table.to_batches(max_chunksize=batch_rows)
    views = list(iter_render_views(iter(batches), schema=table.schema))
    chunks = list(iter_render_csv(iter(batches), schema=table.schema))
    assert [bytes(v) for v in views] == chunks
    assert all(v.readonly and len(v) for v in views)
    assert b"".join(views) == reference_csv(table)


def test_a_view_outlives_its_table() -> None:
    views = list(iter_render_views(pa.table({"x": ["a b", "c"]}), header=False))
    assert b"".join(views) == b"a b\nc\n"


# --- floats: whole numbers written as integers ---------------------------------------------

_EDGE_FLOATS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    1.5,
    1e-7,
    1e-6,
    1e15,
    1e16,
    1e22,
    1e10,
    -1e10,
    1e10 - 1,
    -(1e10 - 1),
    1e10 + 1,
    float(2**24),
    float(2**24 - 1),
    float(2**24 + 2),
    float(2**25 + 16),  # float32 "33554450"
    -float(2**24),
    float(2**53),
    float(2**53 - 1),
    5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    float("nan"),
    float("inf"),
    float("-inf"),
]
_SCALES = [2**10, 2**24, 2**26, 2**31, 10**10, 2**53, 2**60]
"""Bounds of the whole numbers of one array (float32 writes some above 2**25 with fewer
digits than the integer; float64 writes those from 1e10 in exponent notation)."""
_whole_edges = st.sampled_from([x for x in _EDGE_FLOATS if math.isfinite(x) and x == int(x)])
_any_floats = st.one_of(st.floats(), st.sampled_from(_EDGE_FLOATS))


@st.composite
def float_arrays(draw: st.DrawFn) -> pa.Array[Any]:
    """A float32 or float64 array that is mostly (or only) whole numbers up to a drawn
    scale, with other values and NULLs anywhere, possibly a slice of a longer one."""
    t = draw(st.sampled_from([pa.float64(), pa.float32()]))
    scale = draw(st.sampled_from(_SCALES))
    # most of them near the scale (Hypothesis favours small integers)
    near = st.tuples(st.integers(scale // 2, scale), st.sampled_from([1, -1]))
    whole = near.map(lambda v: float(v[0] * v[1])) | st.integers(-scale, scale).map(float)
    whole |= _whole_edges
    values = draw(st.lists(st.none() | whole, min_size=0, max_size=90))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(values)))
        values.insert(at, draw(st.none() | _any_floats | whole))
    arr: pa.Array[Any] = pa.array(values, pa.float64()).cast(t, safe=False)
    start = draw(st.integers(0, min(3, len(arr))))
    return arr.slice(start)


def _reference_json_list(arr: pa.Array[Any]) -> list[str | None]:
    """The JSON text of each list of floats (non-finite values as JSON strings)."""
    out: list[str | None] = []
    for i in range(len(arr)):
        if not arr[i].is_valid:
            out.append("null")
            continue
        items = arr[i].values
        texts = _reference_float_text(items).to_pylist()
        finite = pc.is_finite(items).to_pylist()
        parts = [
            "null" if x is None else x if ok else f'"{x}"'
            for x, ok in zip(texts, finite, strict=True)
        ]
        out.append("[" + ",".join(parts) + "]")
    return out


@given(float_arrays())
def test_floats_render_as_the_cast(arr: pa.Array[Any]) -> None:
    assert _text(arr).to_pylist() == _reference_float_text(arr).to_pylist()
    table = pa.table({"x": arr, "y": arr})
    assert render_csv(table) == reference_csv(table)


@given(float_arrays())
def test_floats_in_lists_render_as_the_cast(arr: pa.Array[Any]) -> None:
    lists = pa.ListArray.from_arrays(pa.array([0, len(arr) // 2, len(arr)], pa.int32()), arr)
    assert _json(lists).to_pylist() == _reference_json_list(lists)


@pytest.mark.parametrize("t", [pa.float64(), pa.float32()])
@pytest.mark.parametrize("value", _EDGE_FLOATS)
def test_each_edge_float_among_whole_numbers_renders_as_the_cast(
    t: pa.DataType, value: float
) -> None:
    for values in ([value], [1.0] * 70 + [value], [value] + [2.0] * 70, [3.0] * 70 + [value, None]):
        arr = pa.array(values, pa.float64()).cast(t, safe=False)
        assert _text(arr).to_pylist() == _reference_float_text(arr).to_pylist(), value


# --- no pandas ------------------------------------------------------------------------------

_RENDER_IN_A_FRESH_PROCESS = """
import sys
import pyarrow as pa
import pyarrow.parquet as pq
from posixlake.csvcodec import render_csv
batches = pq.ParquetFile(sys.argv[1], read_dictionary=["city"]).iter_batches(batch_size=3)
with open(sys.argv[2], "wb") as out:
    out.write(render_csv(pa.Table.from_batches(list(batches))))
print("pandas" in sys.modules)
"""


def test_rendering_the_common_types_imports_no_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas the first time it converts a Python value (a quarter of a
    second, some 40 MB); rendering a table read from Parquet must not make it."""
    table = pa.table(
        {
            "id": pa.array([1, -2, None, 4], pa.int64()),
            "name": pa.array(["a, b", "", None, ' "q" '], pa.string()),
            "score": pa.array([1.5, float("nan"), None, -0.0], pa.float64()),
            "count": pa.array([1.0, 2.0, None, 4.0], pa.float64()),
            "small": pa.array([0.5, 2.0, None, float("inf")], pa.float32()),
            "ok": pa.array([True, False, None, True], pa.bool_()),
            "day": pa.array([0, 19000, None, -1], pa.int32()).cast(pa.date32()),
            "at": pa.array([0, 1_700_000_000_123_456, None, 5], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
            "local": pa.array([0, 1_700_000_000_000_000, None, 5], pa.int64()).cast(
                pa.timestamp("us")
            ),
            "city": pa.array(["Paris", "New York, NY", None, "Paris"], pa.string()),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _RENDER_IN_A_FRESH_PROCESS,
            str(tmp_path / "t.parquet"),
            str(tmp_path / "t.csv"),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert (tmp_path / "t.csv").read_bytes() == reference_csv(table)
    assert done.stdout.strip() == "False"


# -- reading: small bodies split without Arrow's reader ---------------------------------

_small_text = st.text(alphabet=st.sampled_from(["a", "7", ",", "\n", " ", "é", "\t"]), max_size=40)


@given(text=_small_text, count=st.integers(1, 4))
def test_a_small_body_splits_as_arrows_reader_reads_it(text: str, count: int) -> None:
    """`_small_strings` (a body of an appended line or few, no quote, no CR) gives the
    table Arrow's reader gives, or steps aside (None) where Arrow fails or the input is
    anything else; Arrow's failures stay Arrow's to explain."""
    from posixlake.csvcodec import _scan

    body = _scan._Body(text.encode(), 0, 1, None)
    names = [f"c{i}" for i in range(count)]
    fast = _scan._small_strings(body, names)
    try:
        arrow: pa.Table | None = _arrow_strings(body, count)
    except (CsvFormatError, pa.ArrowInvalid):  # malformed: the fast path must step aside
        arrow = None
    if fast is not None:
        assert arrow is not None and fast.equals(arrow), (text, fast, arrow)


def _arrow_strings(body: Any, count: int) -> pa.Table:
    from posixlake.csvcodec import _scan

    saved = _scan._SMALL_BODY
    setattr(_scan, "_SMALL_BODY", -1)  # noqa: B010 - a Final name: Arrow's reader for every body
    try:
        return _scan._read_strings(body, count)
    finally:
        setattr(_scan, "_SMALL_BODY", saved)  # noqa: B010


def test_an_appended_line_is_split_without_arrows_reader() -> None:
    """The common small bodies take the fast path (and give Arrow's table)."""
    from posixlake.csvcodec import _scan

    for text, count in [
        ("50000001,nfs,0.5\n", 3),
        ("1,a,\n2,,x\n", 3),
        ("1\n\n2\n", 1),  # a blank line of one column is a NULL
        ("1,a\n\n2,b", 2),  # skipped with more than one, the last line unterminated
    ]:
        body = _scan._Body(text.encode(), 0, 1, None)
        fast = _scan._small_strings(body, [f"c{i}" for i in range(count)])
        assert fast is not None and fast.equals(_arrow_strings(body, count)), text
    for text in ['1,"a"\n', "1,a\r\n", "1,a,b\n", "\n\n"]:  # quotes, CR, wrong count, blank
        assert _scan._small_strings(_scan._Body(text.encode(), 0, 1, None), ["c0", "c1"]) is None
