"""Render Arrow tables as CSV text and parse that text back, losslessly.

This module is the user-visible CSV contract of posixlake: the NFS face shows every
table as ``data.csv`` in this format, and ``DatabaseOps`` accepts it for inserts and
``create_from_csv``. ``parse_csv(render_csv(t), t.schema)`` equals ``t`` for every
supported type.

Format (bytes, UTF-8):

- The first line is the header: the column names, in schema order.
- Every line, the last included, ends with LF (``\\n``). On input, CRLF and a lone CR
  end lines too, and the last line may lack its terminator.
- Fields are separated by ``,``. A field is quoted (RFC 4180) ONLY when it must be:
  when it contains ``,`` ``"`` CR or LF, when it starts or ends with ASCII whitespace
  (space, tab, VT, FF), or when it is the empty string. Inside quotes ``"`` is doubled.
- NULL is an empty, unquoted field; the empty string is ``""``. So ``a,,b`` holds a NULL
  and ``a,"",b`` an empty string, and both round-trip. ``NULL``, ``null`` and ``NaN``
  in a text column are just those strings.
- Input is read as Arrow's CSV reader reads it: a ``"`` opens a quoted field only at
  the start of a field (``ab"c`` is the text ``ab"c``), and text between a closing
  quote and the next delimiter is kept (``"ab"c`` is ``abc``). A quote still open at
  the end of the input is an error (detected by quote parity, so not when an odd
  number of stray mid-field quotes hides it).
- Integers are plain decimal (``-12``). On input, ASCII whitespace around a non-text
  value is ignored and a leading ``+`` is accepted; hexadecimal is not. Out-of-range
  values are errors.
- Floats use the shortest text that reads back as the same value of the column's width
  (float32 columns round-trip as float32): ``1.0`` -> ``1``, ``0.1`` -> ``0.1``,
  ``1e20`` -> ``1e+20``; ``NaN``, ``inf`` and ``-inf`` for the special values (any case,
  and ``Infinity``, on input). A finite input beyond the type's range is an error.
- Decimals keep their scale: ``1.50`` in a ``decimal128(10, 2)`` column. Input with more
  fractional digits than the scale, or too many digits for the precision, is an error,
  never rounded.
- Booleans are ``true`` / ``false``. Input also accepts any case of ``true false t f
  yes no y n 1 0``.
- Dates are ISO ``2024-01-31``.
- Timestamps are ISO 8601 with a ``T``: ``2024-01-31T12:34:56.123456Z`` for
  ``timestamp(tz="UTC")`` columns and the same without ``Z`` for timezone-naive
  (``timestamp_ntz``) columns. The fraction is omitted when it is zero, otherwise it has
  all the digits of the unit (6 for microseconds, as Python's ``isoformat``). Input
  accepts ``T`` or a space, an optional fraction of at most the unit's digits, an
  optional zone (``Z``, ``+HH:MM``, ``+HHMM``, ``+HH``) converted to UTC, and a bare date
  (midnight). A value without a zone in a UTC column is taken as UTC; a value with a
  zone in a naive column is stored as its UTC wall time.
- Binary is base64 (RFC 4648, standard alphabet, padded); empty binary is ``""``.
- Nested values (list, map, struct) are compact JSON in one cell (then quoted like any
  field containing ``,`` or ``"``): lists are arrays, structs are objects in field order,
  maps are objects when their keys are strings and arrays of ``[key, value]`` pairs
  otherwise. Inside JSON, ``null`` is NULL; integers, decimals and finite floats are
  numbers in the forms above; NaN and infinities are the strings ``"NaN"``, ``"inf"`` and
  ``"-inf"``; strings are JSON strings (non-ASCII kept, control characters escaped);
  binary, dates and timestamps are JSON strings of their CSV form. On input a struct may
  omit fields (NULL) but not carry unknown ones.
- A blank line is skipped when the table has several columns (it cannot be a row);
  in a one-column table it is a row holding NULL.
- A UTF-8 byte order mark at the start of the input is ignored. Invalid UTF-8 is an
  error.
- ``string_view``, ``binary_view`` and dictionary columns render as their values
  (and parse back into those types).

Rendering and parsing are vectorized with ``pyarrow.compute`` and ``pyarrow.csv``;
only binary (base64) and nested (JSON) columns cost Python work per value.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from posixlake.errors import SchemaError, SerializationError

__all__ = [
    "CsvFormatError",
    "HeaderMode",
    "infer_schema_from_csv",
    "iter_render_csv",
    "parse_csv",
    "parse_value",
    "read_csv_infer",
    "render_csv",
    "render_lines",
    "render_value",
]

HeaderMode: TypeAlias = Literal["require", "skip", "none"]
"""How :func:`parse_csv` treats the first line: check it, skip it, or read it as data."""

CsvSource: TypeAlias = "bytes | bytearray | memoryview | str"
PathOrBytes: TypeAlias = "bytes | bytearray | memoryview | str | os.PathLike[str]"
RenderSource: TypeAlias = (
    "pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch]"
)

# A field needs quotes when it holds a delimiter, a quote or a line break, or starts or
# ends with whitespace (empty strings are handled apart), or starts with U+FEFF: CSV
# readers drop a byte order mark at the start of their input, which may be this field.
_NEEDS_QUOTES: Final = r'[,"\r\n]|^[ \t\v\f\x{FEFF}]|[ \t\v\f]$'
# Render at most this many rows, and about this many bytes of Arrow data, per step, so
# that 32-bit string offsets cannot overflow and memory stays bounded.
_RENDER_ROWS: Final = 65_536
_RENDER_BYTES: Final = 64 << 20
_BOM: Final = b"\xef\xbb\xbf"
_JSON_ESCAPES: Final = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_TRUE_WORDS: Final = ("true", "t", "yes", "y", "1")
_FALSE_WORDS: Final = ("false", "f", "no", "n", "0")
_INT_RE: Final = r"^[+-]?[0-9]+$"
_DATE_RE: Final = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_TIMESTAMP_RE: Final = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}(?::[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?)?)?"
    r"(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)?$"
)
_ZONE_RE: Final = r"(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)$"
_BAD_VALUE_ERRORS: Final = (pa.ArrowInvalid, ValueError, TypeError, OverflowError)


class CsvFormatError(SerializationError, ValueError):
    """CSV text does not match the expected format or schema.

    The message names the (1-based, physical) line, the column and the bad value, for
    example ``line 7, column 'qty': 'abc' is not an Int64``.

    Attributes:
        line: Line of the input where the bad record starts, or ``None``.
        column: Name of the column at fault, or ``None``.
        value: The offending field text, or ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: str | None = None,
        value: str | None = None,
    ) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.value = value


# --------------------------------------------------------------------------- types
#
# pyarrow-stubs type arrays and compute functions precisely but reject some valid calls
# (str scalars mixed with arrays in binary_join_element_wise, Python numbers in
# comparisons). Those calls go through the few helpers below, each with one narrow
# ignore; "unused-ignore" keeps mypy quiet when the stubs are not installed.

Arr: TypeAlias = "pa.Array[Any]"
Chunked: TypeAlias = "pa.ChunkedArray[Any]"
Column: TypeAlias = "pa.Array[Any] | pa.ChunkedArray[Any]"


_A = TypeVar("_A", "pa.Array[Any]", "pa.ChunkedArray[Any]")


def _concat(*parts: _A | str, sep: str = "") -> _A:
    """Join strings element-wise (``binary_join_element_wise``); str parts broadcast."""
    # The stubs accept no str scalar among array operands.
    joined: _A = pc.binary_join_element_wise(*parts, sep)  # type: ignore[call-overload, arg-type, unused-ignore]
    return joined


def _choose(condition: _A, then: _A | str | None, otherwise: _A | str | None) -> _A:
    """Pick ``then`` where ``condition`` holds, else ``otherwise`` (``if_else``)."""
    chosen: _A = pc.if_else(condition, then, otherwise)  # type: ignore[call-overload, arg-type, unused-ignore]
    return chosen


def _is_empty(text: _A) -> _A:
    """Return, per value, whether a string is empty (NULL stays null)."""
    empty: _A = pc.equal(text, pa.scalar("", text.type))  # type: ignore[assignment, unused-ignore]
    return empty


def _fill(text: _A, value: str) -> _A:
    """Replace NULL by ``value`` (``fill_null``)."""
    filled: _A = pc.fill_null(text, value)  # type: ignore[call-overload, arg-type, unused-ignore]
    return filled


def _any(mask: Column) -> bool:
    """Return whether any value is true (NULL counts as false)."""
    return bool(pc.any(mask).as_py())


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _is_bytes(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t))


def _is_nested(t: pa.DataType) -> bool:
    return isinstance(t, pa.ListType | pa.LargeListType | pa.MapType | pa.StructType)


def _type_label(t: pa.DataType) -> str:
    """Name a type for error messages (``Int64``, ``Decimal(10, 2)``, ``List<Date>``)."""
    if pa.types.is_integer(t):
        return ("Int" if pa.types.is_signed_integer(t) else "UInt") + str(t.bit_width)
    if pa.types.is_floating(t):
        return f"Float{t.bit_width}"
    if isinstance(t, pa.Decimal128Type | pa.Decimal256Type):
        return f"Decimal({t.precision}, {t.scale})"
    if pa.types.is_boolean(t):
        return "Boolean"
    if pa.types.is_date(t):
        return "Date"
    if isinstance(t, pa.TimestampType):
        return "Timestamp" if t.tz is not None else "TimestampNtz"
    if _is_text(t):
        return "String"
    if _is_bytes(t):
        return "Binary (base64)"
    if isinstance(t, pa.ListType | pa.LargeListType):
        return f"List<{_type_label(t.value_type)}>"
    if isinstance(t, pa.MapType):
        return f"Map<{_type_label(t.key_type)}, {_type_label(t.item_type)}>"
    if isinstance(t, pa.StructType):
        inner = ", ".join(f"{f.name}: {_type_label(f.type)}" for f in t)
        return f"Struct<{inner}>"
    return str(t)


def _with_article(label: str) -> str:
    return ("an " if label[:1] in "AEIOU" else "a ") + label


def _check_supported(t: pa.DataType, where: str) -> None:
    """Raise SchemaError unless the codec can render and parse values of ``t``."""
    if isinstance(t, pa.ListType | pa.LargeListType):
        _check_supported(t.value_type, where)
    elif isinstance(t, pa.MapType):
        _check_supported(t.key_type, where)
        _check_supported(t.item_type, where)
    elif isinstance(t, pa.StructType):
        for child in t:
            _check_supported(child.type, where)
    elif isinstance(t, pa.DictionaryType):
        _check_supported(t.value_type, where)
    elif not (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_boolean(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
        or _is_text(t)
        or _is_bytes(t)
    ):
        raise SchemaError(f"column {where!r}: type {t} is not supported by the CSV codec")


# ------------------------------------------------------------------------- render


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
    text = pc.cast(arr, pa.string())
    if pa.types.is_floating(t) and _any(pc.is_nan(arr)):
        text = _choose(pc.is_nan(arr), "NaN", text)
    return text


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


def _quote(text: Arr) -> Arr:
    """Quote the fields that need it (see the module docstring); NULL becomes empty."""
    needs = pc.or_(pc.match_substring_regex(text, _NEEDS_QUOTES), _is_empty(text))
    if _any(needs):
        text = _choose(needs, _concat('"', pc.replace_substring(text, '"', '""'), '"'), text)
    return _fill(text, "")


def _field(arr: Arr) -> Arr:
    """Return the CSV field of each value, quoted where needed, NULL as empty."""
    if isinstance(arr, pa.DictionaryArray) and len(arr.dictionary) < len(arr):
        # render each distinct value once (a low-cardinality column read from Parquet)
        fields = _field(arr.dictionary)
        return _fill(fields.take(arr.indices), "")
    arr = _decoded(arr)
    t = arr.type
    text = _text(arr)
    if _is_text(t) or _is_nested(t):
        return _quote(text)
    if _is_bytes(t):
        # base64 needs no quotes, but empty binary must not look like NULL.
        text = _choose(_is_empty(text), '""', text)
    return _fill(text, "")


def _batch_lines(batch: pa.RecordBatch) -> Arr:
    fields = [_field(column) for column in batch.columns]
    if not fields:
        return pa.array([""] * batch.num_rows, pa.string())
    if len(fields) == 1:
        return fields[0]
    return _concat(*fields, sep=",")


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


def _buffer_bytes(lines: Arr) -> bytes:
    """Return the concatenated values of a string array, by slicing its data buffer.

    The array must be of type string (32-bit offsets); NULL slots must be empty.
    """
    if len(lines) == 0:
        return b""
    _, offsets_buffer, data = lines.buffers()
    if offsets_buffer is None or data is None:
        return b""
    offsets = memoryview(offsets_buffer).cast("i")  # int32, native byte order
    start = offsets[lines.offset]
    end = offsets[lines.offset + len(lines)]
    return bytes(data.slice(start, end - start).to_pybytes())


def _as_batches(source: RenderSource) -> tuple[pa.Schema | None, Iterable[pa.RecordBatch]]:
    if isinstance(source, pa.Table):
        return source.schema, source.to_batches()
    if isinstance(source, pa.RecordBatch):
        return source.schema, [source]
    if isinstance(source, pa.RecordBatchReader):
        return source.schema, source
    return None, source


def _header_line(names: Sequence[str]) -> bytes:
    fields = _quote(pa.array(list(names), pa.string()))
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
    source_schema, batches = _as_batches(table_or_batches)
    schema = schema if schema is not None else source_schema
    header_done = not header
    if schema is not None:
        for field in schema:
            _check_supported(field.type, field.name)
        if not header_done:
            yield _header_line(schema.names)
            header_done = True
    for step in _steps(batches):
        if not header_done:
            for field in step.schema:
                _check_supported(field.type, field.name)
            yield _header_line(step.schema.names)
            header_done = True
        chunk = _buffer_bytes(_concat(_batch_lines(step), "", sep="\n"))
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
    return b"".join(iter_render_csv(table, header=header))


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


# -------------------------------------------------------------------------- parse


@dataclass(frozen=True)
class _Record:
    """One CSV record as the scanner sees it."""

    line: int  # line where the record starts
    fields: list[tuple[bytes, bool]]  # (raw value, was quoted)
    end: int  # offset just past the record's line terminator
    next_line: int  # line where the next record starts

    @property
    def blank(self) -> bool:
        return len(self.fields) == 1 and not self.fields[0][1] and not self.fields[0][0]


_EOL_RE: Final = re.compile(rb"[\r\n]")
_UNQUOTED_RE: Final = re.compile(rb"[^,\r\n]*")
_QUOTED_RE: Final = re.compile(rb'"([^"]*(?:""[^"]*)*)"')


def _line_breaks(raw: bytes) -> int:
    return raw.count(b"\n") + raw.count(b"\r") - raw.count(b"\r\n")


def _scan(data: bytes | memoryview, pos: int, line: int) -> Iterator[_Record]:
    """Yield the records of ``data`` from ``pos``, the way Arrow's CSV reader splits them.

    CR, LF and CRLF end lines. A quote opens a quoted field only at the start of a
    field; text after the closing quote, up to the next delimiter, is appended
    literally (as Arrow does). Only used to check headers and to explain errors.

    Raises:
        CsvFormatError: A quoted field is never closed.
    """
    size = len(data)
    while pos < size:
        start_line = line
        eol = _EOL_RE.search(data, pos)
        stop = size if eol is None else eol.start()
        segment = bytes(data[pos:stop])
        fields: list[tuple[bytes, bool]]
        if b'"' not in segment:
            fields = [(value, False) for value in segment.split(b",")]
            pos = stop
        else:
            fields = []
            while True:
                if data[pos : pos + 1] == b'"':
                    quoted = _QUOTED_RE.match(data, pos)
                    if quoted is None:
                        raise CsvFormatError(
                            f"line {start_line}: unterminated quote: a quoted field opened "
                            "on this line is never closed",
                            line=start_line,
                        )
                    raw = quoted.group(1)
                    line += _line_breaks(raw)
                    tail = _UNQUOTED_RE.match(data, quoted.end())
                    assert tail is not None  # the pattern matches the empty string
                    fields.append((raw.replace(b'""', b'"') + tail.group(), True))
                    pos = tail.end()
                else:
                    plain = _UNQUOTED_RE.match(data, pos)
                    assert plain is not None  # the pattern matches the empty string
                    fields.append((plain.group(), False))
                    pos = plain.end()
                if data[pos : pos + 1] != b",":
                    break
                pos += 1
        if data[pos : pos + 2] == b"\r\n":
            pos += 2
        elif pos < size:
            pos += 1
        line += 1
        yield _Record(start_line, fields, pos, line)


def _as_bytes(data: CsvSource) -> bytes | memoryview:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytearray):
        return memoryview(data)
    return data


def _decode(raw: bytes, line: int, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CsvFormatError(
            f"line {line}, {what}: invalid UTF-8 ({err.reason} at byte {err.start}): {raw[:60]!r}",
            line=line,
        ) from err


def _header_text(names: Sequence[str]) -> str:
    return _header_line(names).decode("utf-8").rstrip("\n")


@dataclass(frozen=True)
class _Body:
    """The data part of a CSV input: where it starts and on which line."""

    data: bytes | memoryview
    start: int
    line: int
    names: list[str] | None  # the header names, when there was a header


def _split_header(data: bytes | memoryview, header: HeaderMode) -> _Body:
    start = 3 if data[:3] == _BOM else 0
    if header == "none":
        return _Body(data, start, 1, None)
    first = next(_scan(data, start, 1), None)
    if first is None:
        return _Body(data, start, 1, [])
    names = [_decode(raw, 1, "header") for raw, _ in first.fields]
    return _Body(data, first.end, first.next_line, names)


def _empty_strings(names: list[str]) -> pa.Table:
    return pa.table({name: pa.array([], pa.string()) for name in names})


def _read_strings(body: _Body, count: int) -> pa.Table:
    """Read the body with Arrow, every column as string, NULL for empty unquoted fields.

    Raises:
        CsvFormatError: The body is malformed (wrong field count, bad quote, bad UTF-8).
    """
    names = [f"c{i}" for i in range(count)]
    if body.start >= len(body.data):
        return _empty_strings(names)
    buffer = pa.py_buffer(body.data).slice(body.start)
    try:
        table = pacsv.read_csv(
            pa.BufferReader(buffer),  # type: ignore[arg-type, unused-ignore]  # a NativeFile is a file
            read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=count > 1),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.string()),
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid as err:
        if "Empty CSV file" in str(err):  # only blank lines
            return _empty_strings(names)
        raise _locate_malformed(body, count, err) from err
    if _count_quotes(body.data, body.start) % 2:
        # Arrow reads a quote left open at the end of the input as closed there. An odd
        # number of quote characters is the cheap sign of it; the scanner confirms.
        for _ in _scan(body.data, body.start, body.line):
            pass
    return table


def _count_quotes(data: bytes | memoryview, start: int) -> int:
    """Count the ``"`` bytes of ``data[start:]`` (C speed; bounded copies for views)."""
    if isinstance(data, bytes):
        return data.count(b'"', start)
    owner = data.obj
    if isinstance(owner, bytes | bytearray) and len(owner) == data.nbytes:
        return owner.count(b'"', start)
    step = 16 << 20
    return sum(
        data[offset : offset + step].tobytes().count(b'"')
        for offset in range(start, len(data), step)
    )


def _data_records(body: _Body, count: int) -> Iterator[_Record]:
    """Yield the records that Arrow turns into rows (blank lines skipped if count > 1)."""
    for record in _scan(body.data, body.start, body.line):
        if count > 1 and record.blank:
            continue
        yield record


def _locate_malformed(body: _Body, count: int, err: Exception) -> CsvFormatError:
    """Find the first malformed record to explain an Arrow parse error."""
    names = body.names
    for record in _data_records(body, count):
        if len(record.fields) != count:
            expected = f"{count} fields" + (f" ({_header_text(names)})" if names else "")
            return CsvFormatError(
                f"line {record.line}: expected {expected}, got {len(record.fields)}",
                line=record.line,
            )
        for raw, _ in record.fields:
            _decode(raw, record.line, "field")
    return CsvFormatError(f"malformed CSV: {err}")


def _row_line(body: _Body, count: int, row: int) -> int:
    """Return the line where data row ``row`` (0-based) starts."""
    for index, record in enumerate(_data_records(body, count)):
        if index == row:
            return record.line
    return body.line + row


# Converters: string column (NULL = null) -> column of the target type. Each works
# element by element and raises one of _BAD_VALUE_ERRORS when any value is bad.

Converter: TypeAlias = "Callable[[Column, pa.DataType], Column]"


def _combined(col: Column) -> Arr:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _trimmed(col: Column) -> Column:
    return pc.ascii_trim_whitespace(col)


def _all_match(col: Column, pattern: str) -> bool:
    return pc.all(pc.match_substring_regex(col, pattern)).as_py() is not False


def _lenient_cast(col: Column, t: pa.DataType, tidy: Callable[[Column], Column]) -> Column:
    """Cast strictly; if that fails, cast ``tidy(col)`` (trimmed, normalized) instead."""
    try:
        return pc.cast(col, t)
    except pa.ArrowInvalid:
        return pc.cast(tidy(col), t)


def _without_plus(col: Column) -> Column:
    """Trim, and drop a ``+`` before a digit (Arrow's integer parser rejects it)."""
    return pc.replace_substring_regex(_trimmed(col), r"^\+([0-9])", r"\1")


def _to_int(col: Column, t: pa.DataType) -> Column:
    out = _lenient_cast(col, t, _without_plus)
    # Arrow also reads 0x hexadecimal; the format is decimal only.
    if _any(pc.match_substring(col, "x", ignore_case=True)):
        raise ValueError("not a decimal integer")
    return out


def _to_scalar(col: Column, t: pa.DataType) -> Column:
    """Convert decimals and dates: Arrow's cast, after trimming if need be."""
    return _lenient_cast(col, t, _trimmed)


def _to_float(col: Column, t: pa.DataType) -> Column:
    """Convert floats; a finite number too big for the type is an error, not infinity."""
    out = _lenient_cast(col, t, _trimmed)
    infinite = pc.is_inf(out)
    if _any(infinite) and not _spelled_inf(col, infinite):
        raise ValueError("out of range")
    return out


def _spelled_inf(col: Column, infinite: Column) -> bool:
    """Return whether every value that parsed as infinite is spelled as an infinity."""
    spelled = pc.match_substring(col, "inf", ignore_case=True)
    return bool(pc.all(pc.or_(pc.invert(infinite), spelled)).as_py())


def _to_bool(col: Column, t: pa.DataType) -> Column:
    try:
        return pc.cast(col, t)  # true/false/1/0, any case
    except pa.ArrowInvalid:
        pass
    words = pc.ascii_lower(_trimmed(col))
    true = pc.is_in(words, value_set=pa.array(_TRUE_WORDS))
    false = pc.is_in(words, value_set=pa.array(_FALSE_WORDS))
    if _any(pc.and_(pc.is_valid(words), pc.invert(pc.or_(true, false)))):
        raise ValueError("not a boolean")
    return _choose(pc.is_valid(words), true, None)


def _to_timestamp(col: Column, t: pa.DataType) -> Column:
    assert isinstance(t, pa.TimestampType)
    utc = pa.timestamp(t.unit, tz="UTC")
    try:
        # Rendered text: zoned ("...Z") in UTC columns, naive in naive columns.
        return pc.cast(pc.cast(col, t if t.tz is None else utc), t)
    except pa.ArrowInvalid:
        pass
    text: Arr = pc.ascii_upper(_combined(_trimmed(col)))  # type: ignore[assignment, unused-ignore]
    if not _all_match(text, _TIMESTAMP_RE):
        raise ValueError("not a timestamp")
    bare: Arr = pc.match_substring_regex(text, _DATE_RE)
    if _any(bare):
        text = _choose(bare, _concat(text, "T00:00:00"), text)
    zoned: Arr = pc.match_substring_regex(text, _ZONE_RE)
    if not pc.all(zoned).as_py():
        text = _choose(zoned, text, _concat(text, "Z"))
    return pc.cast(pc.cast(text, utc), t)


def _to_binary(col: Column, t: pa.DataType) -> Column:
    values = [
        None if v is None else base64.b64decode(v.strip(" \t\r\n\v\f"), validate=True)
        for v in col.to_pylist()
    ]
    return pa.array(values, t)


def _to_text(col: Column, t: pa.DataType) -> Column:
    return col if col.type == t else pc.cast(col, t)


class _Obj(list[tuple[str, Any]]):
    """A decoded JSON object: its (key, value) pairs, in order, duplicates kept."""


def _json_leaves(value: Any, t: pa.DataType) -> Any:
    """Turn decoded JSON into Python data for ``_leaf_type(t)``: scalars become str."""
    if value is None:
        return None
    if isinstance(t, pa.ListType | pa.LargeListType):
        if not isinstance(value, list) or isinstance(value, _Obj):
            raise ValueError(f"expected a JSON array for {_type_label(t)}")
        return [_json_leaves(v, t.value_type) for v in value]
    if isinstance(t, pa.MapType):
        if not isinstance(value, list):
            raise ValueError(f"expected a JSON object or array of pairs for {_type_label(t)}")
        out = []
        for pair in value:
            if not isinstance(pair, list | tuple) or isinstance(pair, _Obj) or len(pair) != 2:
                raise ValueError("a map entry must be a [key, value] pair")
            key = _json_leaves(pair[0], t.key_type)
            if key is None:
                raise ValueError("a map key is null")
            out.append((key, _json_leaves(pair[1], t.item_type)))
        return out
    if isinstance(t, pa.StructType):
        if not isinstance(value, _Obj):
            raise ValueError(f"expected a JSON object for {_type_label(t)}")
        by_name = {f.name: f.type for f in t}
        row: dict[str, Any] = {}
        for name, item in value:
            if name not in by_name:
                raise ValueError(f"unknown struct field {name!r}")
            row[name] = _json_leaves(item, by_name[name])
        return row
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    raise ValueError(f"expected a scalar for {_type_label(t)}, got JSON {type(value).__name__}")


def _leaf_type(t: pa.DataType) -> pa.DataType:
    """Return ``t`` with every scalar replaced by string and every field nullable."""
    if isinstance(t, pa.LargeListType):
        return pa.large_list(_leaf_type(t.value_type))
    if isinstance(t, pa.ListType):
        return pa.list_(_leaf_type(t.value_type))
    if isinstance(t, pa.MapType):
        return pa.map_(_leaf_type(t.key_type), _leaf_type(t.item_type))
    if isinstance(t, pa.StructType):
        return pa.struct([pa.field(f.name, _leaf_type(f.type)) for f in t])
    return pa.string()


def _rebuild(arr: Arr, t: pa.DataType) -> Arr:
    """Convert an array of ``_leaf_type(t)`` into type ``t``, leaves parsed as CSV text."""
    if isinstance(arr, pa.MapArray) and isinstance(t, pa.MapType):
        offsets, start, length = _child_range(arr)
        keys = _rebuild(arr.keys.slice(start, length), t.key_type)
        items = _rebuild(arr.items.slice(start, length), t.item_type)
        built: Arr = pa.MapArray.from_arrays(offsets, keys, items, type=t, mask=_mask(arr))  # type: ignore[call-overload, unused-ignore]
        return built
    if isinstance(arr, pa.ListArray | pa.LargeListArray):
        assert isinstance(t, pa.ListType | pa.LargeListType)
        offsets, start, length = _child_range(arr)
        values = _rebuild(arr.values.slice(start, length), t.value_type)
        return _list_array(t, offsets, values, _mask(arr))
    if isinstance(arr, pa.StructArray) and isinstance(t, pa.StructType):
        # flatten() masks children where the struct is NULL (their slots hold filler).
        children = [_rebuild(child, f.type) for child, f in zip(arr.flatten(), t, strict=True)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=_mask(arr))
    out = _converter(t)(arr, t)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _json_decode(text: str) -> Any:
    return json.loads(
        text, object_pairs_hook=_Obj, parse_float=str, parse_int=str, parse_constant=str
    )


def _to_nested(col: Column, t: pa.DataType) -> Column:
    values = [
        None if text is None else _json_leaves(_json_decode(text), t) for text in col.to_pylist()
    ]
    return _rebuild(pa.array(values, _leaf_type(t)), t)


def _to_dictionary(col: Column, t: pa.DataType) -> Column:
    assert isinstance(t, pa.DictionaryType)
    return pc.cast(_convert(col, t.value_type), t)


def _converter(t: pa.DataType) -> Converter:
    if isinstance(t, pa.DictionaryType):
        return _to_dictionary
    if _is_text(t):
        return _to_text
    if pa.types.is_integer(t):
        return _to_int
    if pa.types.is_boolean(t):
        return _to_bool
    if pa.types.is_floating(t):
        return _to_float
    if pa.types.is_decimal(t) or pa.types.is_date32(t):
        return _to_scalar
    if pa.types.is_timestamp(t):
        return _to_timestamp
    if _is_bytes(t):
        return _to_binary
    if _is_nested(t):
        return _to_nested
    raise SchemaError(f"type {t} is not supported by the CSV codec")


def _convert(col: Column, t: pa.DataType) -> Column:
    return _converter(t)(col, t)


def _first_bad(arr: Arr, t: pa.DataType) -> tuple[int, str]:
    """Return the index of the first value that does not convert, and why."""

    def reason(piece: Arr) -> str | None:
        try:
            _convert(piece, t)
        except _BAD_VALUE_ERRORS as err:
            return str(err)
        return None

    block = 4096
    for base in range(0, len(arr), block):
        piece = arr.slice(base, block)
        if reason(piece) is None:
            continue
        good, bad = 0, len(piece)  # piece[:good] converts, piece[:bad] does not
        while bad - good > 1:
            mid = (good + bad) // 2
            if reason(piece.slice(0, mid)) is None:
                good = mid
            else:
                bad = mid
        index = base + bad - 1
        return index, reason(arr.slice(index, 1)) or ""
    raise AssertionError("conversion failed but every value converts alone")


def _detail(t: pa.DataType, why: str) -> str:
    """Keep the part of a conversion error worth showing to a user."""
    if pa.types.is_decimal(t) and ("precision" in why or "Rescaling" in why):
        return " (too many digits)"
    if why == "out of range":
        return " (out of range)"
    if _is_nested(t) or _is_bytes(t):
        return f" ({why.split(': ', 1)[-1]})" if why else ""
    return ""


def _null_violation(arr: Arr, field: pa.Field[Any], path: str) -> str | None:
    """Return where a non-nullable (sub)field holds NULL, or None."""
    if not field.nullable and arr.null_count:
        return path
    t = field.type
    if isinstance(arr, pa.MapArray) and isinstance(t, pa.MapType):
        _, start, length = _child_range(arr)
        return _null_violation(arr.items.slice(start, length), t.item_field, path + "{}")
    if isinstance(arr, pa.ListArray | pa.LargeListArray):
        assert isinstance(t, pa.ListType | pa.LargeListType)
        _, start, length = _child_range(arr)
        return _null_violation(arr.values.slice(start, length), t.value_field, path + "[]")
    if isinstance(arr, pa.StructArray) and isinstance(t, pa.StructType):
        for child_field, child in zip(t, arr.flatten(), strict=True):
            # flatten() shows NULL where the struct itself is NULL: look past those.
            values = child.filter(arr.is_valid()) if arr.null_count else child
            found = _null_violation(values, child_field, f"{path}.{child_field.name}")
            if found:
                return found
    return None


def _first_null_row(arr: Arr, field: pa.Field[Any]) -> int:
    for index in range(len(arr)):
        if _null_violation(arr.slice(index, 1), field, field.name):
            return index
    return 0


def _shown(value: str | None) -> str:
    if value is None:
        return "NULL"
    return repr(value if len(value) <= 80 else value[:77] + "...")


def _bad_value(raw: Chunked, field: pa.Field[Any], body: _Body, count: int) -> CsvFormatError:
    """Explain why column ``raw`` does not convert to ``field``: first bad value."""
    arr = raw.combine_chunks()
    row, why = _first_bad(arr, field.type)
    line = _row_line(body, count, row)
    value = arr[row].as_py()
    label = _with_article(_type_label(field.type))
    return CsvFormatError(
        f"line {line}, column {field.name!r}: {_shown(value)} is not "
        f"{label}{_detail(field.type, why)}",
        line=line,
        column=field.name,
        value=value,
    )


def _convert_columns(raw: pa.Table, schema: pa.Schema, body: _Body) -> pa.Table:
    columns: list[Column] = []
    count = len(schema)
    for index, field in enumerate(schema):
        col = raw.column(index)
        try:
            out = _convert(col, field.type)
        except _BAD_VALUE_ERRORS as err:
            raise _bad_value(col, field, body, count) from err
        if (not field.nullable and out.null_count) or _is_nested(field.type):
            whole = out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out
            where = _null_violation(whole, field, field.name)
            if where is not None:
                row = _first_null_row(whole, field)
                line = _row_line(body, count, row)
                what = "NULL (empty field)" if where == field.name else f"NULL at {where}"
                raise CsvFormatError(
                    f"line {line}, column {field.name!r}: {what} in a non-nullable field",
                    line=line,
                    column=field.name,
                    value=col[row].as_py(),
                )
        columns.append(out)
    return pa.Table.from_arrays(columns, schema=schema)


def parse_csv(data: CsvSource, schema: pa.Schema, *, header: HeaderMode = "require") -> pa.Table:
    """Parse CSV text in the format of this module into a table of exactly ``schema``.

    Args:
        data: The CSV text, bytes (UTF-8) or str.
        schema: The schema of the result; its field order is the column order.
        header: ``"require"``: the first line must be the column names of ``schema``,
            exactly and in order. ``"skip"``: the first line is dropped unread.
            ``"none"``: every line is data.

    Returns:
        The rows, with exactly ``schema`` (types, nullability and metadata).
        Header-only input (or, without a header, empty input) gives zero rows.

    Raises:
        CsvFormatError: With the line, column and value at fault: a missing or wrong
            header (also for empty input when a header is required), a line with the
            wrong number of fields, an unterminated quote, invalid UTF-8, a value that
            does not parse as its column's type, or NULL in a non-nullable field.
        SchemaError: ``schema`` has a type the codec does not support.
    """
    for field in schema:
        _check_supported(field.type, field.name)
    if len(schema) == 0:
        raise SchemaError("parse_csv: the schema has no columns")
    body = _split_header(_as_bytes(data), header)
    if header == "require" and body.names != schema.names:
        got = "an empty file" if not body.names else _header_text(body.names)
        raise CsvFormatError(
            f"missing or wrong header: expected {_header_text(schema.names)} got {got}",
            line=1,
        )
    raw = _read_strings(body, len(schema))
    return _convert_columns(raw, schema, body)


def parse_value(text: str, type: pa.DataType) -> Any:
    """Parse one CSV field (as :func:`render_value` writes it) into a Python value.

    Args:
        text: The field text, quoted or not: ``""`` (nothing) is NULL, ``'""'`` is the
            empty string.
        type: The Arrow type of the column.

    Returns:
        The value as ``pyarrow`` returns it from ``as_py()``; ``None`` for NULL.

    Raises:
        CsvFormatError: The text is not a valid field of that type.
        SchemaError: ``type`` is not supported.
    """
    schema = pa.schema([pa.field("value", type)])
    table = parse_csv(text + "\n", schema, header="none")
    if table.num_rows != 1:
        raise CsvFormatError(f"expected one field, got {table.num_rows} rows: {_shown(text)}")
    return table.column(0)[0].as_py()


# ---------------------------------------------------------------------- inference


def _load(source: PathOrBytes) -> bytes | memoryview:
    if isinstance(source, bytes | bytearray | memoryview):
        return _as_bytes(source)
    # The buffer keeps the mapping alive; nothing is copied until Arrow parses it.
    return memoryview(pa.memory_map(os.fspath(source), "r").read_buffer())


def _sample(col: Chunked, size: int = 1000) -> Arr:
    """Return up to ``size`` non-NULL values from the start of ``col``."""
    values = []
    for chunk in col.chunks:
        values.append(pc.drop_null(chunk).slice(0, size))
        size -= len(values[-1])
        if size <= 0:
            break
    return pa.concat_arrays(values) if values else pa.array([], pa.string())


def _is_bool_words(col: Column) -> bool:
    words = pc.drop_null(pc.ascii_lower(_trimmed(col)))
    return bool(pc.all(pc.is_in(words, value_set=pa.array(["true", "false"]))).as_py())


_CANDIDATES: Final = (pa.int64(), pa.float64(), pa.bool_(), pa.date32(), pa.timestamp("us", "UTC"))


def _infer_column(col: Chunked) -> Column:
    """Convert ``col`` to the narrowest type that every non-NULL value parses as."""
    if col.null_count == len(col):
        return col
    sample = _sample(col)
    for t in _CANDIDATES:
        # Reject on the sample (cheap), then confirm on the whole column.
        try:
            if pa.types.is_boolean(t):
                if not (_is_bool_words(sample) and _is_bool_words(col)):
                    continue
            else:
                _convert(sample, t)
            return _convert(col, t)
        except _BAD_VALUE_ERRORS:
            if pa.types.is_integer(t) and all(
                _all_match(_trimmed(c), _INT_RE) for c in (sample, col)
            ):
                return col  # integers beyond Int64: Float64 would lose digits
    return col


def _infer(source: PathOrBytes) -> pa.Table:
    data = _load(source)
    body = _split_header(data, "skip")
    names = body.names
    if not names:
        raise CsvFormatError("empty CSV: no header line with column names", line=1)
    for index, name in enumerate(names):
        if not name:
            raise CsvFormatError(f"line 1: column {index + 1} has an empty name", line=1)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise CsvFormatError(f"line 1: duplicate column name {name!r}", line=1, column=name)
        seen.add(name)
    raw = _read_strings(body, len(names))
    columns = [_infer_column(raw.column(i)) for i in range(len(names))]
    schema = pa.schema([pa.field(name, col.type) for name, col in zip(names, columns, strict=True)])
    return pa.Table.from_arrays(columns, schema=schema)


def infer_schema_from_csv(data_or_path: PathOrBytes) -> pa.Schema:
    """Infer a schema from CSV with a header line, looking at every value.

    Each column gets the first of Int64, Float64, Boolean, Date, Timestamp that all its
    non-empty values parse as, else String. So a later value that breaks a type widens
    it instead of failing: Int64 -> Float64 -> String, Date -> Timestamp -> String,
    Boolean -> String. Details:

    - Empty fields are NULL and do not vote; an all-empty column is String.
    - Int64 takes optionally signed decimal digits; a column of integers of which one
      does not fit in Int64 is String (Float64 would lose digits).
    - Float64 takes decimal numbers with optional exponent, ``NaN``, ``inf``,
      ``Infinity`` (any case).
    - Boolean takes ``true`` / ``false`` in any case (not ``1``/``0``: those are Int64).
    - Date takes ``YYYY-MM-DD``. Timestamp takes ISO 8601 date-times and dates, with or
      without a zone, at most microsecond precision, and is ``timestamp("us", "UTC")``:
      values with a zone are converted to UTC and naive values are taken as UTC.
    - Whitespace around a value does not prevent a numeric, boolean or temporal type.
    - Every field is nullable.

    Args:
        data_or_path: CSV bytes, or the path (``str`` or ``os.PathLike``) of a CSV file.

    Returns:
        The inferred schema, columns in header order.

    Raises:
        CsvFormatError: The input is empty, the header has an empty or duplicate name,
            or a line is malformed.
        OSError: The file cannot be read.
    """
    return _infer(data_or_path).schema


def read_csv_infer(path_or_bytes: PathOrBytes) -> pa.Table:
    """Read CSV with a header line into a table whose schema is inferred from the data.

    Equivalent to ``parse_csv(data, infer_schema_from_csv(data))``; see
    :func:`infer_schema_from_csv` for the inference rules.

    Args:
        path_or_bytes: CSV bytes, or the path (``str`` or ``os.PathLike``) of a CSV file.

    Returns:
        The table.

    Raises:
        CsvFormatError: As for :func:`infer_schema_from_csv`.
        OSError: The file cannot be read.
    """
    return _infer(path_or_bytes)
