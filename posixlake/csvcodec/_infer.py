"""Type inference for ``create_from_csv``: the narrowest type that holds every value of a
column WITHOUT changing what any value says, else String.

The rule: a column gets a type only if every non-empty value, parsed as that type and
rendered again as :mod:`posixlake.csvcodec` renders it, says the same thing as its text:

- Int64 takes canonical decimal integers: ``-12``, ``0``, ``42``. A leading zero before
  a digit (``007``, ``08123``) or a ``+`` (``+15551234``) makes the column String (those
  are codes, zip codes, phone numbers: the zeros and the sign are part of the value), and
  so does ``-0``. Integers beyond Int64 make it String (Float64 would drop digits).
- Float64 takes decimal numbers (``1.5``, ``-0.25``, ``.5``, ``1e5``, ``1.10``) whose
  value a double holds exactly as written: the number the shortest rendering of the
  double says equals the number the text says. ``1.10`` is Float64 and shows again as
  ``1.1`` (the same number; declare ``Decimal128(p,s)`` to keep a scale), ``1e5`` shows
  as ``100000``. ``0.30000000000000001``, ``12345678901234567.5`` or ``1e-400`` (which a
  double cannot hold) make the column String. Leading zeros and ``+`` as for integers.
  ``NaN``, ``inf``, ``-inf``, ``Infinity`` (any case) are Float64 values when the column
  also holds a finite number (a column of only those words is String).
- Boolean takes ``true`` / ``false`` in any case (not ``1``/``0``, ``yes``/``no``).
- Date takes ``YYYY-MM-DD`` (years 0001..9999).
- Timestamp takes ISO 8601 date-times (``T`` or a space, at most 6 fractional digits),
  and bare dates among them. A column whose values all carry a zone (``Z``, ``+02:00``)
  is ``Timestamp`` (UTC; the instant is kept, shown in UTC); one whose values carry none
  is ``TimestampNtz`` (the wall time as written: no zone is made up); a mix is String.
- Whitespace around a value does not prevent a numeric, boolean or temporal type.
- Everything else, and a column with no value at all, is String, kept byte for byte.

Types given by the caller (``types=``) are not inferred: their values are parsed
strictly, and a value that does not fit is an error naming the line, column and value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.csvcodec._common import (
    _BAD_VALUE_ERRORS,
    Arr,
    Chunked,
    Column,
    CsvFormatError,
    PathOrBytes,
    _any,
    _check_supported,
)
from posixlake.csvcodec._parse import _convert, _convert_field, _trimmed
from posixlake.csvcodec._render import _text
from posixlake.csvcodec._scan import _as_bytes, _Body, _read_strings, _split_header
from posixlake.errors import SchemaError

__all__ = ["infer_schema_from_csv", "read_csv_infer"]

# Canonical integers: no leading zero before a digit, no "+", no "-0".
_CANONICAL_INT: Final = r"^(?:0|-?[1-9][0-9]*)$"
# Decimal numbers: an integer part without leading zeros (or none: ".5"), an optional
# fraction and exponent.
_DECIMAL: Final = r"^-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"
_SPECIAL_FLOAT: Final = r"^(?:nan|-?inf|-?infinity)$"
# A decimal number of at most 15 digits and no exponent converts to a double and back
# to the same number (DBL_DIG); only other values need an exact check (in Python).
_SAFE_FLOAT_DIGITS: Final = 15
_DATE_TEXT: Final = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_TIMESTAMP_TEXT: Final = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}(?::[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?)?)?"
    r"(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)?$"
)
# A zone after a time of day, or right after a bare date ("-31" ending a date is no zone).
_ZONED_TEXT: Final = (
    r"(?:[T ][0-9:.]+|^[0-9]{4}-[0-9]{2}-[0-9]{2})(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)$"
)
_SAMPLE: Final = 1000


def _load(source: PathOrBytes) -> bytes | memoryview:
    if isinstance(source, bytes | bytearray | memoryview):
        return _as_bytes(source)
    # The buffer keeps the mapping alive; nothing is copied until Arrow parses it.
    return memoryview(pa.memory_map(os.fspath(source), "r").read_buffer())


def _sample(col: Chunked, size: int = _SAMPLE) -> Chunked:
    """Return up to ``size`` non-NULL values from the start of ``col``."""
    values = []
    for chunk in col.chunks:
        values.append(pc.drop_null(chunk).slice(0, size))
        size -= len(values[-1])
        if size <= 0:
            break
    return pa.chunked_array(values, pa.string())


def _matches(col: Column, pattern: str, *, ignore_case: bool = False) -> bool:
    """Return whether every non-NULL value matches ``pattern`` (NULLs do not vote)."""
    found = pc.match_substring_regex(col, pattern, ignore_case=ignore_case)
    return pc.all(found).as_py() is not False


def _is_bool_words(col: Column) -> bool:
    words = pc.drop_null(pc.ascii_lower(col))
    return bool(pc.all(pc.is_in(words, value_set=pa.array(["true", "false"]))).as_py())


def _exact_floats(text: Chunked, floats: Column) -> bool:
    """Return whether each finite double says the same number as the text it came from."""
    # At most 15 characters and no exponent: at most 15 digits, which a double holds.
    risky = pc.or_(
        pc.greater(pc.utf8_length(text), _SAFE_FLOAT_DIGITS),  # type: ignore[arg-type, unused-ignore]
        pc.match_substring(text, "e", ignore_case=True),
    )
    if not _any(risky):
        return True
    written = pc.filter(text, risky).to_pylist()
    shown = _text(pc.filter(floats, risky).combine_chunks()).to_pylist()  # type: ignore[union-attr, unused-ignore]
    for src, out in zip(written, shown, strict=True):
        if src.lower().lstrip("-") in ("nan", "inf", "infinity"):
            continue
        try:
            if Decimal(src) != Decimal(out):
                return False
        except InvalidOperation:
            return False
    return True


def _as_float(text: Chunked) -> Column | None:
    """Return ``text`` as Float64 if every value fits exactly (see the module docstring)."""
    if not _matches(text, f"{_DECIMAL}|{_SPECIAL_FLOAT}", ignore_case=True):
        return None
    if not _any(pc.match_substring_regex(text, _DECIMAL)):
        return None  # only NaN / inf words: a column of words, not of numbers
    try:
        floats = _convert(text, pa.float64())
    except _BAD_VALUE_ERRORS:
        return None  # beyond the range of a double
    return floats if _exact_floats(text, floats) else None


def _as_timestamp(text: Chunked) -> Column | None:
    """Return ``text`` as a timestamp (zoned: UTC; naive: no zone), None for a mix."""
    if not _matches(text, _TIMESTAMP_TEXT, ignore_case=True):
        return None
    zoned = pc.match_substring_regex(pc.ascii_upper(text), _ZONED_TEXT)
    has_zone = _any(zoned)
    if has_zone and not pc.all(pc.or_(zoned, pc.is_null(text))).as_py():
        return None
    t = pa.timestamp("us", tz="UTC") if has_zone else pa.timestamp("us")
    try:
        return _convert(text, t)
    except _BAD_VALUE_ERRORS:
        return None


class _KeepText(Exception):
    """No later candidate may be tried: the column is String."""


def _as_int(text: Chunked) -> Column | None:
    if not _matches(text, _CANONICAL_INT):
        return None
    try:
        return _convert(text, pa.int64())
    except _BAD_VALUE_ERRORS as err:
        raise _KeepText from err  # integers beyond Int64: Float64 would lose digits


def _as_bool(text: Chunked) -> Column | None:
    return _convert(text, pa.bool_()) if _is_bool_words(text) else None


def _as_date(text: Chunked) -> Column | None:
    if not _matches(text, _DATE_TEXT):
        return None
    try:
        return _convert(text, pa.date32())
    except _BAD_VALUE_ERRORS:
        return None


# The candidates, narrowest first. A column whose sample is not one of them is not one of
# the earlier ones either, so the whole column is tried from its sample's candidate on.
_CANDIDATES: Final = (_as_int, _as_float, _as_bool, _as_date, _as_timestamp)


def _try(text: Chunked, start: int = 0) -> tuple[int, Column | None]:
    """Return the index of the first candidate (from ``start``) that keeps every value
    and the column converted to it; ``(len(_CANDIDATES), None)`` when none does, and
    ``(0, None)`` when a candidate ruled out the later ones."""
    try:
        for index in range(start, len(_CANDIDATES)):
            out = _CANDIDATES[index](text)
            if out is not None:
                return index, out
    except _KeepText:
        return 0, None
    return len(_CANDIDATES), None


def _infer_column(col: Chunked) -> Column:
    """Convert ``col`` (raw strings) to the narrowest type that keeps every value."""
    if col.null_count == len(col):
        return col
    text = pa.chunked_array([_trimmed(c) for c in col.chunks], pa.string())
    start = 0
    sample = _sample(text)
    if len(sample) < len(text) - text.null_count:
        start, _ = _try(sample)  # cheap, and the whole column is no narrower
        if start == len(_CANDIDATES) and _matches(sample, _SPECIAL_FLOAT, ignore_case=True):
            start = 1  # NaN / inf words alone: the rest of the column may hold numbers
    _, out = _try(text, start)
    return col if out is None else out


@dataclass(frozen=True)
class _Source:
    """One CSV input read as strings: its body (for line numbers) and header names."""

    label: str | None
    body: _Body
    names: list[str]
    raw: pa.Table


def _read_source(source: PathOrBytes) -> _Source:
    label = None if isinstance(source, bytes | bytearray | memoryview) else os.fspath(source)
    try:
        body = _split_header(_load(source), "skip")
        names = body.names or []
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
    except CsvFormatError as err:
        raise _located(err, label) from err
    return _Source(label, body, names, raw)


def _located(err: CsvFormatError, label: str | None) -> CsvFormatError:
    if label is None:
        return err
    return CsvFormatError(f"{label}: {err}", line=err.line, column=err.column, value=err.value)


def _given_fields(
    types: Mapping[str, Any] | None, names: Sequence[str], *, strict_columns: bool
) -> dict[str, pa.Field[Any]]:
    """Return the caller's types as fields, checking they name columns of the input."""
    if not types:
        return {}
    unknown = [n for n in types if n not in names]
    if strict_columns:
        extra = [n for n in names if n not in types]
        if extra:
            raise SchemaError(
                f"the CSV has column(s) not in the schema: {', '.join(map(repr, extra))}"
            )
    elif unknown:
        raise SchemaError(
            f"types given for column(s) not in the CSV header: {', '.join(map(repr, unknown))}"
            f" (the columns are {', '.join(names)})"
        )
    fields: dict[str, pa.Field[Any]] = {}
    for name, spec in types.items():
        field = spec.with_name(name) if isinstance(spec, pa.Field) else pa.field(name, spec)
        _check_supported(field.type, name)
        fields[name] = field
    return fields


def _read(
    sources: Sequence[PathOrBytes], types: Mapping[str, Any] | None, *, strict_columns: bool
) -> pa.Table:
    read = [_read_source(s) for s in sources]
    names = list(dict.fromkeys(n for r in read for n in r.names))
    given = _given_fields(types, names, strict_columns=strict_columns)
    if strict_columns:
        names = list(given)  # the schema's columns, in its order
    columns: list[Column] = []
    fields: list[pa.Field[Any]] = []
    for name in names:
        parts = [r.raw.column(r.names.index(name)) if name in r.names else None for r in read]
        field = given.get(name)
        if field is None:
            raw = pa.chunked_array(
                [c for r, p in zip(read, parts, strict=True) for c in _raw_or_nulls(r, p).chunks],
                pa.string(),
            )
            column = _infer_column(raw)
            field = pa.field(name, column.type)
        else:
            pieces: list[Arr] = []
            for r, p in zip(read, parts, strict=True):
                if p is None and not field.nullable:
                    raise CsvFormatError(
                        f"{r.label or 'the CSV'}: no column {name!r}, which is NOT NULL",
                        column=name,
                    )
                try:
                    converted = _convert_field(_raw_or_nulls(r, p), field, r.body, len(r.names))
                except CsvFormatError as err:
                    raise _located(err, r.label) from err
                if isinstance(converted, pa.ChunkedArray):
                    pieces.extend(converted.chunks)
                else:
                    pieces.append(converted)
            column = pa.chunked_array(pieces, field.type)
        columns.append(column)
        fields.append(field)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _raw_or_nulls(source: _Source, column: Chunked | None) -> Chunked:
    if column is not None:
        return column
    return pa.chunked_array([pa.nulls(source.raw.num_rows, pa.string())], pa.string())


def infer_schema_from_csv(
    data_or_path: PathOrBytes | list[PathOrBytes] | tuple[PathOrBytes, ...],
    *,
    types: Mapping[str, pa.DataType | pa.Field[Any]] | None = None,
    strict_columns: bool = False,
) -> pa.Schema:
    """Infer a schema from CSV with a header line, looking at every value.

    A column gets a type only if no value changes what it says (see the module
    docstring for the rules): ``08123``, ``+15551234`` and ``007`` keep a column String,
    ``12``, ``-3`` and ``0`` make it Int64, ``1.5`` and ``1e5`` Float64. Empty fields are
    NULL and do not vote; an all-empty column is String; every field is nullable.

    Args:
        data_or_path: CSV bytes, the path (``str`` or ``os.PathLike``) of a CSV file, or
            a list of those, inferred as one input (columns missing from a file are NULL
            there).
        types: Column name -> Arrow type (or field, for its nullability) for the columns
            whose type is given rather than inferred.
        strict_columns: ``types`` is the whole schema: the result has its columns in its
            order, a header column not in it is an error, and a column no file has is
            NULL (an error if its field is not nullable).

    Returns:
        The inferred schema, columns in header order (``types`` order with
        ``strict_columns``).

    Raises:
        CsvFormatError: The input is empty, the header has an empty or duplicate name, a
            line is malformed, or a value does not fit the type given for its column.
        SchemaError: ``types`` names a column that is not in the header, or a type the
            codec does not support.
        OSError: A file cannot be read.
    """
    return read_csv_infer(data_or_path, types=types, strict_columns=strict_columns).schema


def read_csv_infer(
    path_or_bytes: PathOrBytes | list[PathOrBytes] | tuple[PathOrBytes, ...],
    *,
    types: Mapping[str, pa.DataType | pa.Field[Any]] | None = None,
    strict_columns: bool = False,
) -> pa.Table:
    """Read CSV with a header line into a table whose schema is inferred from the data.

    Equivalent to ``parse_csv(data, infer_schema_from_csv(data, types=types))``; see
    :func:`infer_schema_from_csv` for the inference rules. Rendering the result with
    :func:`render_csv` gives back what every value said.

    Args:
        path_or_bytes: CSV bytes, a path, or a list of those (one input; see
            :func:`infer_schema_from_csv`).
        types: Column name -> type (or field) for the columns not to infer.
        strict_columns: ``types`` is the whole schema (see :func:`infer_schema_from_csv`).

    Returns:
        The table.

    Raises:
        CsvFormatError: As for :func:`infer_schema_from_csv`, with the file's path first
            in the message for a path.
        SchemaError: As for :func:`infer_schema_from_csv`.
        OSError: A file cannot be read.
    """
    if isinstance(path_or_bytes, list | tuple):
        if not path_or_bytes:
            raise CsvFormatError("no CSV input")
        return _read(list(path_or_bytes), types, strict_columns=strict_columns)
    return _read([path_or_bytes], types, strict_columns=strict_columns)
