"""Type inference for ``create_from_csv``: the narrowest of Int64, Float64, Boolean,
Date, Timestamp or String that holds every value of a column (widening on the way)."""

from __future__ import annotations

import os
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.csvcodec._common import (
    _BAD_VALUE_ERRORS,
    _INT_RE,
    Arr,
    Chunked,
    Column,
    CsvFormatError,
    PathOrBytes,
)
from posixlake.csvcodec._parse import _all_match, _convert, _trimmed
from posixlake.csvcodec._scan import _as_bytes, _read_strings, _split_header

__all__ = ["infer_schema_from_csv", "read_csv_infer"]


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
