"""Parsing CSV into a given schema: string columns converted to each type (strictly,
never rounding), and errors naming the line, the column and the value."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.csvcodec._common import (
    _BAD_VALUE_ERRORS,
    _DATE_RE,
    _FALSE_WORDS,
    _TIMESTAMP_RE,
    _TRUE_WORDS,
    _ZONE_RE,
    Arr,
    Chunked,
    Column,
    CsvFormatError,
    CsvSource,
    HeaderMode,
    _any,
    _check_supported,
    _choose,
    _concat,
    _is_bytes,
    _is_nested,
    _is_text,
    _type_label,
    _with_article,
)
from posixlake.csvcodec._render import _child_range, _list_array, _mask
from posixlake.csvcodec._scan import (
    _as_bytes,
    _Body,
    _header_text,
    _read_strings,
    _row_line,
    _split_header,
)
from posixlake.errors import SchemaError

__all__ = ["parse_csv", "parse_value"]

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


def _convert_field(col: Chunked, field: pa.Field[Any], body: _Body, count: int) -> Column:
    """Convert one string column of ``body`` (``count`` fields a line) to ``field``.

    Raises:
        CsvFormatError: naming the line, the column and the first value that does not
            convert, or the first NULL in a non-nullable (sub)field.
    """
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
    return out


def _convert_columns(raw: pa.Table, schema: pa.Schema, body: _Body) -> pa.Table:
    count = len(schema)
    columns = [
        _convert_field(raw.column(index), field, body, count) for index, field in enumerate(schema)
    ]
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
