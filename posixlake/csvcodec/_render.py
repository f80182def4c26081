"""Rendering Arrow tables as CSV (the format in :mod:`posixlake.csvcodec`): each batch's
lines are written by one compiled pass (``_lines.c``, see `_native_lines`) from its
integer, float64 and string columns and the text of the others, which is vectorized with
``pyarrow.compute`` (the whole rendering is, where the pass is not built); only binary
(base64) and nested (JSON) columns cost Python work per value."""

from __future__ import annotations

import base64
import json
import os
import struct
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from types import ModuleType
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.csvcodec._common import (
    _JSON_ESCAPES,
    _NEEDS_QUOTES,
    _RENDER_BYTES,
    _RENDER_ROWS,
    Arr,
    Chunked,
    Column,
    RenderSource,
    _any,
    _check_supported,
    _choose,
    _concat,
    _fill,
    _is_bytes,
    _is_empty,
    _is_nested,
    _is_text,
    _lit,
)

_native: ModuleType | None
try:  # the compiled pass (`_lines.c`), built where a C compiler is (see `_native_lines`)
    from posixlake.csvcodec import _lines

    _native = _lines
except ImportError:  # pragma: no cover - an install without a C compiler
    _native = None

__all__ = [
    "LineBuffers",
    "iter_render_csv",
    "iter_render_views",
    "render_csv",
    "render_lines",
    "render_value",
]

# The bytes that can make a field need quotes (see _NEEDS_QUOTES), matched byte by byte in
# a column's whole text at once: the structural characters, the ASCII whitespace, and 0xEF,
# the first byte of U+FEFF in UTF-8. A column whose text holds none of them needs quotes
# only for its empty strings, which spares a regular expression search per value; one
# whose text holds no structural character needs them only for its empty strings and the
# values that start or end with whitespace (or start with U+FEFF), found by comparing
# prefixes and suffixes.
_QUOTE_BYTES: Final = r'[,"\r\n \t\x0b\x0c\xef]'
_STRUCTURAL_BYTES: Final = r'[,"\r\n]'
_EDGE_SPACES: Final = (" ", "\t", "\v", "\f")
# Whole floats below these (by bit width) render as the integer (see `_float_text`):
# 1e10 for float64 (Arrow writes larger ones as 1e+10), 2**24 for float32.
_WHOLE_BELOW: Final = {64: 1e10, 32: float(1 << 24)}
_WHOLE_PROBE: Final = 64


def _decoded(arr: Arr) -> Arr:
    """Return a dictionary-encoded array as plain values (others unchanged)."""
    return arr.dictionary_decode() if isinstance(arr, pa.DictionaryArray) else arr


def _text(arr: Arr) -> Arr:
    """Return the CSV text of each value, unquoted; NULL stays null."""
    arr = _decoded(arr)
    t = arr.type
    if _is_text(t):
        return arr if t == pa.string() else pc.cast(arr, pa.string())
    if _is_nested(t):
        out = _json(arr)
        return _choose(arr.is_valid(), out, None) if arr.null_count else out
    if _is_bytes(t):
        return pa.array(
            [None if v is None else base64.b64encode(v).decode("ascii") for v in arr.to_pylist()],
            pa.string(),
        )
    if isinstance(t, pa.TimestampType):
        if t.tz is not None:
            # Casting a zoned timestamp to string is slow (per-value zone lookups); the
            # naive cast is a metadata change that keeps the UTC wall time.
            return _concat(_text(pc.cast(arr, pa.timestamp(t.unit))), "Z")
        text = pc.replace_substring(pc.cast(arr, pa.string()), " ", "T", max_replacements=1)
        digits = {"s": 0, "ms": 3, "us": 6, "ns": 9}[t.unit]
        return pc.replace_substring(text, "." + "0" * digits, "") if digits else text
    if pa.types.is_float64(t) or pa.types.is_float32(t):
        return _float_text(arr)
    text = pc.cast(arr, pa.string())
    if pa.types.is_floating(t) and _any(pc.is_nan(arr)):
        text = _choose(pc.is_nan(arr), "NaN", text)
    return text


def _shortest_text(arr: Arr) -> Arr:
    """Return the shortest round-trip text of each float (Arrow's cast: double-conversion's
    shortest digits, fixed notation for decimal exponents -6 to 9), NaN as ``NaN``."""
    text = pc.cast(arr, pa.string())
    if _any(pc.is_nan(arr)):
        text = _choose(pc.is_nan(arr), "NaN", text)
    return text


def _whole(arr: Arr) -> Arr:
    """Return, per float, whether it is a whole number printed as one: ``|x| <`` the
    type's `_WHOLE_BELOW` and not -0.0 (NaN and infinities: false); NULL: true (NULL
    whichever way it is cast)."""
    below = _WHOLE_BELOW[arr.type.bit_width]
    t = arr.type
    whole = pc.and_(pc.equal(pc.trunc(arr), arr), pc.less(pc.abs(arr), _lit(below, t)))
    zero = pc.equal(arr, _lit(0.0, t))
    if _any(zero):  # -0.0 is whole but renders as "-0": the sign of a zero is 1/x's
        sign = pc.less(pc.divide(_lit(1.0, t), arr), _lit(0.0, t))
        whole = pc.and_not(whole, pc.and_(zero, sign))
    filled: Arr = pc.fill_null(whole, _lit(True))  # type: ignore[call-overload, arg-type, unused-ignore]
    return filled


def _float_text(arr: Arr) -> Arr:
    """Return `_shortest_text` of a float32 or float64 array, its whole numbers the text
    of the same integer (the whole column then costs about half as much: casting an
    integer to text costs a third of finding a float's shortest digits).

    Exact: a whole number ``x`` with ``|x| < 2**p`` (``p`` the significand's bits: 53, 24)
    has neighbours at most 1 apart, so no other decimal of as few significant digits
    rounds to it: its shortest digits are its integer digits without trailing zeros,
    and below 1e10 Arrow writes them in fixed notation, i.e. the integer. -0.0 ("-0") is
    left to the cast. Taken only when the column's first `_WHOLE_PROBE` values are whole
    (a column of fractions pays one short test) and so are at least half of them, each
    other value falling back to the cast.
    """
    if not _all_true(_whole(arr.slice(0, _WHOLE_PROBE))):
        return _shortest_text(arr)
    whole = _whole(arr)
    count = pc.sum(whole).as_py() or 0
    if count == len(arr):
        return pc.cast(pc.cast(arr, pa.int64()), pa.string())
    if 2 * count < len(arr):
        return _shortest_text(arr)
    rest = pc.invert(whole)
    ints = pc.cast(pc.if_else(whole, arr, _lit(0.0, arr.type)), pa.int64())
    text: Arr = pc.replace_with_mask(  # type: ignore[call-overload, unused-ignore]
        pc.cast(ints, pa.string()), rest, _shortest_text(arr.filter(rest))
    )
    return text


def _all_true(mask: Arr) -> bool:
    return bool(pc.all(mask).as_py())


def _json_quote(text: Arr) -> Arr:
    """Return each string as a JSON string literal (quotes included)."""
    text = pc.replace_substring(text, "\\", "\\\\")
    text = pc.replace_substring(text, '"', '\\"')
    if _any(pc.match_substring_regex(text, r"[\x00-\x1f]")):
        for code in range(32):
            char = chr(code)
            text = pc.replace_substring(text, char, _JSON_ESCAPES.get(char, f"\\u{code:04x}"))
    return _concat('"', text, '"')


def _child_range(arr: pa.ListArray[Any] | pa.LargeListArray[Any]) -> tuple[Arr, int, int]:
    """Return (offsets rebased to 0, first child index, child count) of a list or map array."""
    offsets = arr.offsets
    start = int(offsets[0].as_py())
    end = int(offsets[-1].as_py())
    if start or arr.offset:
        offsets = pc.subtract(offsets, pa.scalar(start, offsets.type))  # type: ignore[arg-type, unused-ignore]
    return offsets, start, end - start


def _mask(arr: Arr) -> Arr | None:
    return arr.is_null() if arr.null_count else None


def _list_array(t: pa.DataType, offsets: Arr, values: Arr, mask: Arr | None) -> Arr:
    """Build a list (or large list, per ``t``) array; ``t`` is also the type when it is one."""
    # The stubs know from_arrays without the type= and mask= keywords only.
    built: Arr
    if isinstance(t, pa.LargeListType):
        built = pa.LargeListArray.from_arrays(offsets, values, type=t, mask=mask)  # type: ignore[call-overload, unused-ignore]
    elif isinstance(t, pa.ListType):
        built = pa.ListArray.from_arrays(offsets, values, type=t, mask=mask)  # type: ignore[call-overload, unused-ignore]
    else:
        built = pa.ListArray.from_arrays(offsets, values, mask=mask)  # type: ignore[call-overload, unused-ignore]
    return built


def _join_lists(
    arr: pa.ListArray[Any] | pa.LargeListArray[Any], texts: Arr, offsets: Arr, brackets: str
) -> Arr:
    """Join each list's element texts with ``,`` inside ``brackets`` (``"[]"``, ``"{}"``)."""
    kind = pa.large_list(pa.string()) if isinstance(arr.type, pa.LargeListType) else None
    lists = _list_array(kind or pa.null(), offsets, texts, _mask(arr))
    joined: Arr = pc.binary_join(lists, ",")  # type: ignore[assignment, unused-ignore]
    return _concat(brackets[0], joined, brackets[1])


def _json(arr: Arr) -> Arr:
    """Return the compact JSON text of each value; NULL becomes ``null``."""
    arr = _decoded(arr)
    t = arr.type
    out: Column
    if isinstance(arr, pa.MapArray) and isinstance(t, pa.MapType):
        offsets, start, length = _child_range(arr)
        keys = _json(arr.keys.slice(start, length))
        values = _json(arr.items.slice(start, length))
        if _is_text(t.key_type):
            out = _join_lists(arr, _concat(keys, values, sep=":"), offsets, "{}")
        else:
            out = _join_lists(arr, _concat("[", keys, ",", values, "]"), offsets, "[]")
    elif isinstance(arr, pa.ListArray | pa.LargeListArray):
        offsets, start, length = _child_range(arr)
        out = _join_lists(arr, _json(arr.values.slice(start, length)), offsets, "[]")
    elif isinstance(arr, pa.StructArray) and isinstance(t, pa.StructType):
        parts = [_concat(json.dumps(f.name) + ":", _json(arr.field(i))) for i, f in enumerate(t)]
        body = parts[0] if len(parts) == 1 else _concat(*parts, sep=",")
        out = _concat("{", body, "}") if parts else pa.array(["{}"] * len(arr), pa.string())
        if arr.null_count:
            out = _choose(arr.is_valid(), out, "null")
    elif pa.types.is_integer(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t):
        out = _text(arr)
    elif pa.types.is_floating(t):
        text = _text(arr)
        out = _choose(pc.is_finite(arr), text, _json_quote(text))
    else:
        out = _json_quote(_text(arr))
    return _fill(out, "null")


def _text_bytes(text: Arr) -> Arr | None:
    """Return the bytes of all the values of a string array as ONE binary value (no copy).

    Null slots may hold bytes too (the format lets them): they are included, which only
    makes a search in them find more. None when the values hold no bytes at all.
    """
    _, offsets_buffer, data = text.buffers()
    if offsets_buffer is None or data is None or len(text) == 0:
        return None
    offsets = memoryview(offsets_buffer).cast("i")  # int32, native byte order
    start = offsets[text.offset]
    size = offsets[text.offset + len(text)] - start
    if size == 0:
        return None
    bounds = pa.py_buffer(struct.pack("=ii", 0, size))
    return pa.Array.from_buffers(pa.binary(), 1, [None, bounds, data.slice(start, size)])


def _holds(whole: Arr | None, pattern: str) -> bool:
    """Return whether the bytes of ``whole`` (see `_text_bytes`) match ``pattern``
    somewhere: one linear search that stops at the first match."""
    if whole is None:
        return False
    # a binary array: the regular expression matches bytes (Latin-1), not UTF-8 characters
    return bool(pc.match_substring_regex(whole, pattern)[0].as_py())


def _needs_quotes(text: Arr) -> Arr:
    """Return, per value of a string array, whether ``_NEEDS_QUOTES`` matches it or it is
    empty (NULL stays null), searching value by value only when the column's bytes hold a
    structural character (see `_QUOTE_BYTES`)."""
    needs = _is_empty(text)
    whole = _text_bytes(text)
    if not _holds(whole, _QUOTE_BYTES):
        return needs
    if _holds(whole, _STRUCTURAL_BYTES):
        return pc.or_(pc.match_substring_regex(text, _NEEDS_QUOTES), needs)
    # no structural character in any value: only its first and last characters matter
    for space in (*_EDGE_SPACES, "\ufeff"):
        needs = pc.or_(needs, pc.starts_with(text, space))
    for space in _EDGE_SPACES:
        needs = pc.or_(needs, pc.ends_with(text, space))
    return needs


def _quote(text: Arr) -> Arr:
    """Quote the fields that need it (see the module docstring); NULL becomes empty."""
    needs = _needs_quotes(text)
    if _any(needs):
        text = _choose(needs, _concat('"', pc.replace_substring(text, '"', '""'), '"'), text)
    return _fill(text, "")


def _field(arr: Arr, end: str = "") -> Arr:
    """Return the CSV field of each value, quoted where needed, NULL as empty, each
    followed by ``end`` (the line terminator, for a line's last field)."""
    if isinstance(arr, pa.DictionaryArray) and len(arr.dictionary) < len(arr):
        # render each distinct value once (a low-cardinality column read from Parquet)
        fields = _field(arr.dictionary, end)
        return _fill(fields.take(arr.indices), end)
    arr = _decoded(arr)
    t = arr.type
    text = _text(arr)
    if _is_text(t) or _is_nested(t):
        field = _quote(text)
    else:
        if _is_bytes(t):
            # base64 needs no quotes, but empty binary must not look like NULL.
            text = _choose(_is_empty(text), '""', text)
        field = _fill(text, "")
    return _concat(field, end) if end else field


def _batch_lines(batch: pa.RecordBatch, end: str = "") -> Arr:
    """Return each row's CSV line followed by ``end`` (the line terminator, or nothing).

    The terminator is appended to the last field before the fields are joined, not to the
    joined lines: a pass over one column's text instead of over the whole text.
    """
    columns = batch.columns
    if not columns:
        return pa.array([end] * batch.num_rows, pa.string())
    fields = [_field(column) for column in columns[:-1]]
    fields.append(_field(columns[-1], end))
    if len(fields) == 1:
        return fields[0]
    return _concat(*fields, sep=",")


# The kinds of column `_lines.lines` takes (see _lines.c).
_K_INT, _K_UINT, _K_FLOAT64, _K_TEXT, _K_DICT, _K_STR = range(6)
# POSIXLAKE_NATIVE_RENDER=0 renders with Arrow compute only (the benchmarks compare both).
_NATIVE_ON: Final = os.environ.get("POSIXLAKE_NATIVE_RENDER", "1") != "0"


def native_module() -> ModuleType | None:
    """Return the compiled pass (the ``_lines`` module), or None where it is not built."""
    return _native


def _native_column(arr: Arr) -> tuple[int, int, int, Any, Any, int, Any, Any, int]:
    """Describe one column for `_lines.lines`: integers, float64 values and strings as
    they are, a low-cardinality dictionary as its indices and the fields of its distinct
    values, any other column as the final text of its fields (`_field`)."""
    t = arr.type
    if isinstance(arr, pa.DictionaryArray) and len(arr.dictionary) < len(arr):
        fields = _field(arr.dictionary)
        indices = arr.indices
        if not pa.types.is_signed_integer(indices.type):  # read as signed by the pass
            indices = indices.cast(pa.int64())
        valid, data = indices.buffers()[:2]
        _, offsets, chars = fields.buffers()
        width = indices.type.bit_width // 8
        return (
            _K_DICT,
            width,
            indices.offset,
            valid,
            data,
            fields.offset,
            offsets,
            chars,
            len(fields),
        )
    if pa.types.is_integer(t):
        valid, data = arr.buffers()[:2]
        kind = _K_INT if pa.types.is_signed_integer(t) else _K_UINT
        return (kind, t.bit_width // 8, arr.offset, valid, data, 0, None, None, 0)
    if pa.types.is_float64(t):
        valid, data = arr.buffers()[:2]
        return (_K_FLOAT64, 8, arr.offset, valid, data, 0, None, None, 0)
    if pa.types.is_string(t):
        valid, offsets, chars = arr.buffers()
        return (_K_STR, 0, arr.offset, valid, None, 0, offsets, chars, 0)
    text = _field(arr)
    valid, offsets, chars = text.buffers()
    return (_K_TEXT, 0, text.offset, valid, None, 0, offsets, chars, 0)


class LineBuffers:
    """Output buffers the compiled pass writes lines into, used again once a consumer is
    done with a chunk (`release`), for a rendering that hands its chunks on at once.

    A fresh buffer costs a page fault for every 4 KiB the pass writes into it (the
    kernel zeroes each page first): about a tenth of the CPU time of a first rendering,
    which writes hundreds of megabytes only to copy them into segment files. A buffer
    taken from here was written before, so its pages are already there.

    Thread-safe (a deque's append and pop are atomic). At most ``keep`` buffers of at
    most `MAX_BYTES` each are kept; a larger chunk is a fresh buffer, not kept.

    A chunk must not be used after it was released: its bytes are overwritten by the
    next chunk written into the same buffer.
    """

    MAX_BYTES: Final = 16 << 20

    def __init__(self, keep: int) -> None:
        self._free: deque[bytearray] = deque()
        self._keep = keep

    def lines(self, rows: int, columns: list[Any], end: bytes) -> memoryview | None:
        """Write the lines into a kept buffer or a new one; None if they may need more
        than `MAX_BYTES` (the caller writes them into bytes of their own)."""
        assert _native is not None
        try:
            buf: bytearray | None = self._free.pop()
        except IndexError:
            buf = None
        if buf is not None:
            n = _native.lines(rows, columns, end, buf)
            if n >= 0:
                return memoryview(buf)[:n].toreadonly()
            need = -n  # too small for these lines: dropped
        else:
            need = -_native.lines(rows, columns, end, _EMPTY)
        if need > self.MAX_BYTES:
            return None
        buf = _native.buffer(max(need, 1 << 20))
        n = _native.lines(rows, columns, end, buf)
        return memoryview(buf)[:n].toreadonly()

    def release(self, chunk: memoryview) -> None:
        """Take back the buffer of ``chunk`` if it is one of ours (a chunk of bytes or of
        an Arrow buffer is left alone); ``chunk`` is released."""
        buf = chunk.obj
        chunk.release()
        if type(buf) is bytearray and len(self._free) < self._keep:
            self._free.append(buf)


_EMPTY = bytearray()


def _native_lines(
    step: pa.RecordBatch, end: str, buffers: LineBuffers | None = None
) -> memoryview | None:
    """Return the lines of ``step``, each followed by ``end``, written by the compiled
    pass; None where it is not built (or turned off) or the batch has no rows or columns.

    The same bytes as ``_buffer_view(_batch_lines(step, end))``: integers, float64 values
    and strings are written by the pass as the Arrow path writes them, every other field
    is `_field`'s text. It saves the Arrow passes that cast numbers to text, search the
    strings for quotes and join the fields (about two thirds of a first rendering's CPU
    time on the Arrow path)."""
    if _native is None or not _NATIVE_ON or step.num_columns == 0 or step.num_rows == 0:
        return None
    columns = [_native_column(column) for column in step.columns]
    encoded = end.encode("utf-8")
    if buffers is not None:
        chunk = buffers.lines(step.num_rows, columns, encoded)
        if chunk is not None:
            return chunk
    return memoryview(_native.lines(step.num_rows, columns, encoded))


def _pieces(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """Split a batch into slices small enough to render in one step."""
    rows = batch.num_rows
    if rows == 0:
        return
    per_row = max(1, batch.nbytes // rows)
    step = max(1, min(_RENDER_ROWS, _RENDER_BYTES // per_row))
    for start in range(0, rows, step):
        yield batch.slice(start, step)


def _steps(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Cut big batches and merge small ones into steps of at most the render limits.

    Merging matters for tables read from many small files (each ``echo >>`` commits
    one): every step costs a fixed number of compute calls.
    """
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        for piece in _pieces(batch):
            if pending and (
                rows + piece.num_rows > _RENDER_ROWS or size + piece.nbytes > _RENDER_BYTES
            ):
                yield _merged(pending)
                pending, rows, size = [], 0, 0
            pending.append(piece)
            rows += piece.num_rows
            size += piece.nbytes
    if pending:
        yield _merged(pending)


def _merged(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches, schema=batches[0].schema).combine_chunks()
    return table.to_batches()[0]


def _buffer_view(lines: Arr) -> memoryview:
    """Return the concatenated values of a string array: a read-only view of (a slice of)
    its data buffer, no copy; the view keeps the buffer alive.

    The array must be of type string (32-bit offsets); NULL slots must be empty.
    """
    whole = _text_bytes(lines)
    if whole is None:
        return memoryview(b"")
    return memoryview(whole.buffers()[2]).toreadonly()


def _as_batches(source: RenderSource) -> tuple[pa.Schema | None, Iterable[pa.RecordBatch]]:
    if isinstance(source, pa.Table):
        return source.schema, source.to_batches()
    if isinstance(source, pa.RecordBatch):
        return source.schema, [source]
    if isinstance(source, pa.RecordBatchReader):
        return source.schema, source
    return None, source


def _strings(values: Sequence[str]) -> Arr:
    """Return ``values`` as a string array, built from their bytes (see `_lit`)."""
    data = [v.encode("utf-8") for v in values]
    offsets = [0]
    for d in data:
        offsets.append(offsets[-1] + len(d))
    bounds = pa.py_buffer(struct.pack(f"={len(offsets)}i", *offsets))
    return pa.Array.from_buffers(
        pa.string(), len(data), [None, bounds, pa.py_buffer(b"".join(data))]
    )


def _header_line(names: Sequence[str]) -> bytes:
    fields = _quote(_strings(names))
    return (",".join(str(f) for f in fields.to_pylist()) + "\n").encode("utf-8")


def iter_render_csv(
    table_or_batches: RenderSource,
    *,
    header: bool = True,
    schema: pa.Schema | None = None,
) -> Iterator[bytes]:
    """Render a table as CSV, one chunk of bytes at a time.

    Each chunk holds whole lines (every line ends with LF). At most about 64 MiB of
    Arrow data (and at most 65,536 rows) is rendered per chunk, so a table larger than
    memory can be streamed from a ``RecordBatchReader`` to a spill file, holding about
    one chunk and its text at a time.

    Args:
        table_or_batches: A table, a record batch, a ``RecordBatchReader`` or any
            iterable of record batches sharing one schema.
        header: Yield the header line first.
        schema: The schema, needed only for the header of a bare iterable of batches
            (otherwise taken from the source or from the first batch).

    Yields:
        Non-empty chunks of UTF-8 CSV text; their concatenation is the whole file.

    Raises:
        SchemaError: A column has a type the codec does not support.
        ValueError: A header is asked for a bare iterable with no batches and no
            ``schema``.
    """
    for view in iter_render_views(table_or_batches, header=header, schema=schema):
        yield bytes(view)


def iter_render_views(
    table_or_batches: RenderSource,
    *,
    header: bool = True,
    schema: pa.Schema | None = None,
    buffers: LineBuffers | None = None,
) -> Iterator[memoryview]:
    """Render a table as CSV like :func:`iter_render_csv`, yielding the chunks as
    read-only views of the Arrow buffers that hold them, without copying them.

    For a consumer that writes the chunks somewhere (a file, a socket, ``b"".join``):
    a chunk of bytes costs a copy of the text that such a consumer makes again. Each view
    keeps its buffer alive as long as the view lives.

    Args:
        table_or_batches: As for :func:`iter_render_csv`.
        header: Yield the header line first.
        schema: As for :func:`iter_render_csv`.
        buffers: Write the lines into these reusable buffers (see :class:`LineBuffers`);
            the consumer then hands each chunk back with ``buffers.release`` once it
            has written it, and does not touch it after.

    Yields:
        Non-empty read-only views of UTF-8 CSV text; their concatenation is the same
        bytes as :func:`iter_render_csv`'s chunks.

    Raises:
        SchemaError: A column has a type the codec does not support.
        ValueError: A header is asked for a bare iterable with no batches and no
            ``schema``.
    """
    source_schema, batches = _as_batches(table_or_batches)
    schema = schema if schema is not None else source_schema
    header_done = not header
    if schema is not None:
        for field in schema:
            _check_supported(field.type, field.name)
        if not header_done:
            yield memoryview(_header_line(schema.names))
            header_done = True
    for step in _steps(batches):
        if not header_done:
            for field in step.schema:
                _check_supported(field.type, field.name)
            yield memoryview(_header_line(step.schema.names))
            header_done = True
        chunk = _native_lines(step, "\n", buffers)
        if chunk is None:
            chunk = _buffer_view(_batch_lines(step, "\n"))
        if chunk:
            yield chunk
    if not header_done:
        raise ValueError("iter_render_csv: no batches and no schema: cannot write the header")


def render_csv(table: pa.Table | pa.RecordBatch, *, header: bool = True) -> bytes:
    """Render a whole table as CSV bytes (see the module docstring for the format).

    Args:
        table: The table to render.
        header: Start with the header line of column names.

    Returns:
        The CSV text. A table without rows renders as the header line alone.

    Raises:
        SchemaError: A column has a type the codec does not support.
    """
    return b"".join(iter_render_views(table, header=header))


def render_lines(table: pa.Table | pa.RecordBatch) -> Chunked:
    """Render each row as its CSV line, without the line terminator.

    The rendering is injective for a given schema (distinct rows give distinct lines;
    NULL and ``""`` differ, NaN equals NaN), which makes lines usable as row keys.

    Args:
        table: The rows to render.

    Returns:
        A string array with one line per row, in row order.

    Raises:
        SchemaError: A column has a type the codec does not support.
    """
    for field in table.schema:
        _check_supported(field.type, field.name)
    batches = table.to_batches() if isinstance(table, pa.Table) else [table]
    chunks = [_batch_lines(step) for step in _steps(batches)]
    return pa.chunked_array(chunks, pa.string())


def render_value(value: Any, type: pa.DataType) -> str:
    """Render one value as the CSV field it would be in a line (quoted if needed).

    Args:
        value: A Python value accepted by ``pa.array([value], type)``; ``None`` is NULL.
        type: The Arrow type of the column.

    Returns:
        The field text: ``""`` (nothing) for NULL, ``'""'`` for the empty string.

    Raises:
        SchemaError: ``type`` is not supported.
    """
    _check_supported(type, "value")
    return str(_field(pa.array([value], type))[0].as_py())
