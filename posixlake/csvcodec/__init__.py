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

Modules: ``_render`` (Arrow -> CSV), ``_scan`` (records, header), ``_parse`` (CSV ->
Arrow of a given schema), ``_infer`` (types for ``create_from_csv``: lossless, see
there), ``_changes`` (a CSV of changes for ``merge``: empty = no change, ``\\N`` =
NULL), ``_common``.
"""

from posixlake.csvcodec._changes import DEFAULT_NULL_MARKER, read_changes_csv
from posixlake.csvcodec._common import CsvFormatError, HeaderMode
from posixlake.csvcodec._dialect import CsvOptions, to_canonical_csv, write_canonical_files
from posixlake.csvcodec._infer import infer_schema_from_csv, read_csv_infer
from posixlake.csvcodec._parse import parse_csv, parse_value
from posixlake.csvcodec._render import (
    LineBuffers,
    iter_render_csv,
    iter_render_views,
    render_csv,
    render_lines,
    render_value,
)

__all__ = [
    "DEFAULT_NULL_MARKER",
    "CsvFormatError",
    "CsvOptions",
    "HeaderMode",
    "LineBuffers",
    "infer_schema_from_csv",
    "iter_render_csv",
    "iter_render_views",
    "parse_csv",
    "parse_value",
    "read_changes_csv",
    "read_csv_infer",
    "render_csv",
    "render_lines",
    "render_value",
    "to_canonical_csv",
    "write_canonical_files",
]
