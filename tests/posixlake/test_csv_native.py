"""The renderer's compiled pass (``posixlake/csvcodec/_lines.c``) writes the same bytes as
its Arrow compute path.

Every batch is rendered both ways (``_native_lines`` and ``_batch_lines``) and compared:
tables of every type (``arrow_tables``), integer columns of every width at their extremes,
float64 columns with NaN, infinities, signed zeros, subnormals and the bounds of fixed
notation, strings at each edge of the quoting rule, dictionaries with indices of every
width, sliced arrays and NULL slots holding bytes. A float64 is compared with Arrow's cast
one by one as well (Ryu's shortest digits, and the short-decimal path that finds the same
digits faster, against double-conversion's), with short decimals at every scale and the
doubles next to them. Bad descriptions
of a column (a wrong kind, a buffer shorter than the rows, a dictionary index out of
range) are refused with ValueError, never read out of bounds.
"""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posixlake.csvcodec import _render, render_csv
from tests.posixlake.test_csvcodec_fastpaths import _CHARS, string_arrays
from tests.strategies import arrow_tables

native = _render.native_module()


def _both(batch: pa.RecordBatch) -> tuple[bytes, bytes]:
    compiled = _render._native_lines(batch, "\n")
    assert compiled is not None
    arrow = _render._buffer_view(_render._batch_lines(batch, "\n"))
    return bytes(compiled), bytes(arrow)


def _same(*arrays: pa.Array[Any]) -> None:
    batch = pa.RecordBatch.from_arrays(list(arrays), [f"c{i}" for i in range(len(arrays))])
    compiled, arrow = _both(batch)
    assert compiled == arrow


def test_the_compiled_pass_is_built() -> None:
    # `pip install -e .` builds it where a C compiler is (scripts/test.sh installs one);
    # without it, the renderer's other tests would check the Arrow path alone.
    assert native is not None, "posixlake.csvcodec._lines is not built: pip install -e ."


@given(arrow_tables(min_rows=1))
def test_every_table_renders_alike(table: pa.Table) -> None:
    for batch in table.to_batches():
        if batch.num_rows:
            compiled, arrow = _both(batch)
            assert compiled == arrow


_INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UINT_TYPES = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@st.composite
def int_arrays(draw: st.DrawFn) -> pa.Array[Any]:
    t = draw(st.sampled_from(_INT_TYPES + _UINT_TYPES))
    bits = t.bit_width
    lo, hi = (
        (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if t in _INT_TYPES else (0, (1 << bits) - 1)
    )
    edges = [lo, hi, 0, 1, -1, 9, 10, 99, 100, 10**9, 10**18, 10**19, -(10**18)]
    value = st.integers(lo, hi) | st.sampled_from([e for e in edges if lo <= e <= hi])
    values = draw(st.lists(st.none() | value, min_size=1, max_size=40))
    arr: pa.Array[Any] = pa.array(values, t)
    return arr.slice(draw(st.integers(0, len(arr) - 1)))


_EDGE_FLOATS = [
    0.0, -0.0, 1.0, -1.0, 0.1, 1e-6, 1e-7, 9.999999e-7, 1.5e-6, 123456789.0, 999999999.9,
    1e9, 9999999999.0, 1e10, 1.2345e10, 1e15, 1e16, 1e21, 1e22, 1e23, 5e-324,
    2.2250738585072014e-308, 1.7976931348623157e308, 2.0**53, 2.0**53 + 2, 2.0**63,
    0.3, 1 / 3, 123.456, 1.0000000000000002, float("nan"), -float("nan"),
    float("inf"), float("-inf"),
]  # fmt: skip
_floats = st.floats(allow_subnormal=True) | st.sampled_from(_EDGE_FLOATS)


@st.composite
def float64_arrays(draw: st.DrawFn) -> pa.Array[Any]:
    values = draw(st.lists(st.none() | _floats, min_size=1, max_size=40))
    arr: pa.Array[Any] = pa.array(values, pa.float64())
    return arr.slice(draw(st.integers(0, len(arr) - 1)))


@given(string_arrays())
def test_strings_render_alike(arr: pa.Array[Any]) -> None:
    if len(arr):
        _same(arr, arr)


@pytest.mark.parametrize("char", _CHARS)
@pytest.mark.parametrize("where", ["alone", "start", "middle", "end", "twice"])
def test_each_character_of_the_quoting_rule_renders_alike(char: str, where: str) -> None:
    value = {
        "alone": char, "start": char + "x", "middle": f"x{char}x", "end": "x" + char,
        "twice": f"{char}x{char}",
    }[where]  # fmt: skip
    for values in ([value], ["plain", value, "text"], [None, value, ""]):
        arr = pa.array(values, pa.string())
        _same(arr, arr)
        _same(arr.dictionary_encode(), pa.array(range(len(values))))


@pytest.mark.parametrize("char", _CHARS)
def test_each_character_at_each_place_of_a_short_field_renders_alike(char: str) -> None:
    """Fields of up to 17 characters with one character of the quoting rule at each
    place: with more bytes after them in the buffer (the pass's 16-byte compare, which
    must not look past the field) and as the buffer's last field (byte by byte)."""
    values = ["a" * i + char + "a" * (n - i - 1) for n in range(1, 18) for i in range(n)]
    for ordered in ([*values, "z" * 40], ["z" * 40, *reversed(values)]):
        arr = pa.array(ordered, pa.string())
        _same(arr, arr)
        _same(arr.dictionary_encode(), pa.array(range(len(ordered))))


@given(string_arrays())
def test_strings_with_more_bytes_after_them_render_alike(arr: pa.Array[Any]) -> None:
    """As `test_strings_render_alike`, with a long value after them: every field has 16
    bytes of the buffer from its start."""
    whole = pa.concat_arrays([arr.cast(pa.string()), pa.array(["y" * 40], pa.string())])
    _same(whole, whole)


@given(st.lists(int_arrays() | float64_arrays() | string_arrays(), min_size=1, max_size=4))
def test_numbers_and_strings_render_alike(columns: list[pa.Array[Any]]) -> None:
    rows = min(len(c) for c in columns)
    if rows:
        _same(*(c.slice(0, rows) for c in columns))


@given(string_arrays(), st.sampled_from(_INT_TYPES + _UINT_TYPES), st.data())
def test_dictionaries_render_alike(
    values: pa.Array[Any], index_type: pa.DataType, data: st.DataObject
) -> None:
    if len(values) == 0:
        return
    dictionary = values.unique()
    rows = data.draw(st.integers(len(dictionary) + 1, 3 * len(dictionary) + 4))
    picks = data.draw(
        st.lists(st.none() | st.integers(0, len(dictionary) - 1), min_size=rows, max_size=rows)
    )
    arr = pa.DictionaryArray.from_arrays(pa.array(picks, index_type), dictionary)
    start = data.draw(st.integers(0, 1))
    _same(arr.slice(start), pa.array(range(rows - start), pa.int64()))


@pytest.mark.parametrize("index_type", _INT_TYPES + _UINT_TYPES)
def test_dictionary_indices_of_every_type_and_value_render_alike(index_type: pa.DataType) -> None:
    # indices up to the type's top (200 of uint8 reads as -56 when taken for signed)
    size = 201 if index_type.bit_width == 8 else 40_000
    top = min(size, 2 ** (index_type.bit_width - (1 if index_type in _INT_TYPES else 0))) - 1
    dictionary = pa.array([f"v{i}" for i in range(top + 1)])
    picks = pa.array([top, 0, None, top // 2] * (top // 2 + 2), index_type)
    _same(pa.DictionaryArray.from_arrays(picks, dictionary))


@given(_floats)
def test_a_float64_is_written_as_the_cast(value: float) -> None:
    assert native is not None
    expected = pc.cast(pa.array([value], pa.float64()), pa.string())[0].as_py()
    assert native.f64(value) == ("NaN" if value != value else expected)


def test_many_floats_are_written_as_the_cast() -> None:
    assert native is not None
    rnd = random.Random(7)
    values = [struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0] for _ in range(50_000)]
    for _ in range(50_000):  # the values people store: a few decimals, at every scale
        value = round(rnd.random() * 10 ** rnd.randint(-8, 12), rnd.randint(0, 7))
        values.append(-value if rnd.random() < 0.3 else value)
    values = [v for v in values if v == v]
    expected = pc.cast(pa.array(values, pa.float64()), pa.string()).to_pylist()
    got = [native.f64(v) for v in values]
    assert [(v, g) for v, g, e in zip(values, got, expected, strict=True) if g != e] == []


def _cast(values: list[float]) -> list[str]:
    return [str(v) for v in pc.cast(pa.array(values, pa.float64()), pa.string()).to_pylist()]


def _steps(value: float, steps: int) -> float:
    for _ in range(abs(steps)):
        value = math.nextafter(value, math.inf if steps > 0 else -math.inf)
    return value


@given(
    st.integers(1, 2**53),
    st.integers(0, 12),
    st.integers(-2, 2),
    st.booleans(),
)
def test_short_decimals_and_their_neighbours_are_written_as_the_cast(
    digits: int, places: int, steps: int, negative: bool
) -> None:
    """The short-decimal path (``short_decimal`` in _lines.c) against the cast: a decimal
    of up to 12 places (the path tries 9) and the doubles next to it, across the path's
    bound of 2^50 units of the last place."""
    assert native is not None
    value = _steps(digits / 10**places, steps)
    value = -value if negative else value
    assert native.f64(value) == _cast([value])[0]


def test_the_bounds_of_the_short_decimal_path_are_written_as_the_cast() -> None:
    """Values at the edges the path's proof leans on: just under and over 2^50 units of
    the last place, powers of two (whose rounding interval is narrower below), the ends
    of fixed notation (1e-6 and 1e10) at every number of places, and the doubles next to
    each."""
    assert native is not None
    values: list[float] = []
    for places in range(11):
        for top in (2**49, 2**50, 2**51, 2**52, 2**53):
            for n in range(top - 3, top + 4):
                values.append(n / 10**places)
        for exp in range(-40, 60):
            values.append(2.0**exp)
        for edge in (10 ** max(0, places - 6), 10 ** (places + 10)):  # fixed notation's ends
            for n in (edge - 1, edge, edge + 1, edge * 10 - 1):
                values.append(n / 10**places)
    values += [_steps(v, s) for v in list(values) for s in (-1, 1)]
    values += [-v for v in values]
    got = [native.f64(v) for v in values]
    assert [(v, g) for v, g, e in zip(values, got, _cast(values), strict=True) if g != e] == []


def test_render_csv_is_the_same_without_the_compiled_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    table = pa.table(
        {
            "id": pa.array([1, None, -(2**63)], pa.int64()),
            "name": ["a,b", "", None],
            "x": [0.1, None, float("nan")],
            "city": pa.array(["Paris", "Paris", None]).dictionary_encode(),
        }
    )
    compiled = render_csv(table)
    monkeypatch.setattr(_render, "_native", None)
    assert render_csv(table) == compiled
    assert compiled == (
        b'id,name,x,city\n1,"a,b",0.1,Paris\n,"",,Paris\n-9223372036854775808,,NaN,\n'
    )


def _column(kind: int, **kw: Any) -> tuple[int, int, int, Any, Any, int, Any, Any, int]:
    c: dict[str, Any] = {"width": 8, "offset": 0, "valid": None, "data": None, "text_offset": 0}
    c.update({"offsets": None, "chars": None, "dict_len": 0})
    c.update(kw)
    return (
        kind, c["width"], c["offset"], c["valid"], c["data"], c["text_offset"], c["offsets"],
        c["chars"], c["dict_len"],
    )  # fmt: skip


def test_bad_descriptions_are_refused() -> None:
    assert native is not None
    ints = pa.py_buffer(struct.pack("<3q", 1, 2, 3))
    offsets = pa.py_buffer(struct.pack("<3i", 0, 1, 2))
    chars = pa.py_buffer(b"ab")
    dictionary = {"offsets": offsets, "chars": chars, "dict_len": 2}
    assert native.lines(3, [_column(_render._K_INT, data=ints)], b"\n") == b"1\n2\n3\n"
    refused = [
        [_column(9, data=ints)],  # no such kind
        [_column(_render._K_INT, data=ints, width=3)],  # no such width
        [_column(_render._K_INT, data=ints, offset=1)],  # 4 rows from a buffer of 3
        [_column(_render._K_INT)],  # no values
        [_column(_render._K_INT, data=ints, valid=pa.py_buffer(b""))],  # a short bitmap
        [_column(_render._K_STR, offsets=offsets, chars=chars)],  # 3 strings, 2 offsets
        [_column(_render._K_STR, offsets=offsets, chars=pa.py_buffer(b"a"))],  # short text
        # an index past the dictionary of 2
        [_column(_render._K_DICT, data=pa.py_buffer(b"\0\2\1"), width=1, **dictionary)],
        [],  # no columns
    ]
    for columns in refused:
        with pytest.raises(ValueError, match="lines"):
            native.lines(3, columns, b"\n")


def _batch(rows: int) -> pa.RecordBatch:
    ids = pa.array(range(rows), pa.int64())
    return pa.RecordBatch.from_arrays(
        [ids, pc.cast(ids, pa.string()), pc.divide(pc.cast(ids, pa.float64()), 8.0)],
        ["id", "name", "score"],
    )


def _columns(batch: pa.RecordBatch) -> list[Any]:
    return [_render._native_column(c) for c in batch.columns]


def test_lines_written_into_a_buffer_are_the_same_bytes() -> None:
    """With ``out``, the pass writes at the buffer's start and returns the length; a
    buffer under the lines' bound is left as it was and the bound comes back negated."""
    assert native is not None
    batch = _batch(1000)
    expected = native.lines(batch.num_rows, _columns(batch), b"\n")
    out = bytearray(b"\xff" * (8 * len(expected)))  # the bound is about 4.4 times
    n = native.lines(batch.num_rows, _columns(batch), b"\n", out)
    assert bytes(out[:n]) == expected and out[n:] == b"\xff" * (len(out) - n)
    small = bytearray(b"\xee" * len(expected))  # the exact size, under the bound
    need = native.lines(batch.num_rows, _columns(batch), b"\n", small)
    assert need < -len(expected) and small == b"\xee" * len(expected)
    fits = bytearray(-need)
    assert native.lines(batch.num_rows, _columns(batch), b"\n", fits) == len(expected)
    with pytest.raises(BufferError):  # not writable
        native.lines(batch.num_rows, _columns(batch), b"\n", b"\0" * (-need))
    assert len(native.buffer(5)) == 5
    with pytest.raises(ValueError):
        native.buffer(-1)


def test_a_released_buffer_takes_the_next_lines() -> None:
    """`LineBuffers` writes into the buffer of a released chunk (no fresh pages), never
    into one whose chunk is still held, and a chunk of bytes is not taken in."""
    assert native is not None
    buffers = _render.LineBuffers(keep=2)
    one, two = _batch(500), _batch(700)
    first = buffers.lines(one.num_rows, _columns(one), b"\n")
    assert first is not None and bytes(first) == native.lines(one.num_rows, _columns(one), b"\n")
    held = first.obj
    second = buffers.lines(two.num_rows, _columns(two), b"\n")  # `first` is held
    assert second is not None and second.obj is not held
    buffers.release(first)
    third = buffers.lines(two.num_rows, _columns(two), b"\n")
    assert third is not None and third.obj is held
    assert bytes(third) == bytes(second) == native.lines(two.num_rows, _columns(two), b"\n")
    buffers.release(memoryview(b"abc"))  # not ours: left alone
    fourth = buffers.lines(one.num_rows, _columns(one), b"\n")
    assert fourth is not None and fourth.obj is not held and type(fourth.obj) is bytearray


def test_lines_larger_than_a_kept_buffer_get_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A buffer too small for the next lines is dropped for a larger one; lines that may
    need more than `LineBuffers.MAX_BYTES` are written as bytes of their own."""
    assert native is not None
    buffers = _render.LineBuffers(keep=4)
    small, large = _batch(10), _batch(100_000)
    chunk = buffers.lines(small.num_rows, _columns(small), b"\n")
    assert chunk is not None and isinstance(chunk.obj, bytearray) and len(chunk.obj) == 1 << 20
    buffers.release(chunk)
    big = buffers.lines(large.num_rows, _columns(large), b"\n")
    assert big is not None and isinstance(big.obj, bytearray) and len(big.obj) > 1 << 20
    assert bytes(big) == native.lines(large.num_rows, _columns(large), b"\n")
    monkeypatch.setattr(_render.LineBuffers, "MAX_BYTES", 1 << 20)
    assert buffers.lines(large.num_rows, _columns(large), b"\n") is None
    view = _render._native_lines(large, "\n", buffers)
    assert view is not None and type(view.obj) is bytes
    assert bytes(view) == bytes(big)
