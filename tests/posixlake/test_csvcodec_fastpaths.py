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
"""

from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posixlake.csvcodec import iter_render_csv, iter_render_views, render_csv, render_lines
from posixlake.csvcodec._common import _NEEDS_QUOTES
from posixlake.csvcodec._render import _quote, _text
from tests.strategies import arrow_tables

# --- the rendering before the fast paths --------------------------------------------------


def _reference_quote(text: pa.Array[Any]) -> pa.Array[Any]:
    needs = pc.or_(pc.match_substring_regex(text, _NEEDS_QUOTES), pc.equal(text, ""))
    if pc.any(needs).as_py():
        quoted = pc.binary_join_element_wise('"', pc.replace_substring(text, '"', '""'), '"', "")
        text = pc.if_else(needs, quoted, text)
    return pc.fill_null(text, "")


def _reference_field(arr: pa.Array[Any]) -> pa.Array[Any]:
    if isinstance(arr, pa.DictionaryArray):
        arr = arr.dictionary_decode()
    t = arr.type
    text = _text(arr)
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
