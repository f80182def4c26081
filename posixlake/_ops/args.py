"""Argument forms the facade accepts, and the SQL literals it writes.

Pure functions: a Python value checked against a column type as a SQL literal (for
``update(values=...)``), a time-travel point (datetime, epoch seconds or milliseconds, ISO
text), column lists, ``{column: value}`` mappings (or their JSON text) and partition
filters in the original project's text form.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Final

import pyarrow as pa

from posixlake._convert import python_column
from posixlake.errors import InvalidOperation, SchemaError, SerializationError, VersionError
from posixlake.types import parse_type, type_string

__all__ = [
    "as_of",
    "columns_arg",
    "mapping_arg",
    "partition_filters",
    "sql_literal",
    "sql_type",
    "type_text",
]

#: epoch numbers below this are seconds (before the year 5138), at or above milliseconds
EPOCH_MS_FROM: Final = 10**11


def sql_literal(value: Any, column: str, field: pa.Field) -> str:
    """Render a Python value, checked against the column type, as a SQL literal.

    Raises:
        SchemaError: the value does not fit the column, or is NULL for a NOT NULL column.
        InvalidOperation: the column type has no literal form (nested types).
    """
    t = field.type
    if value is None:
        if not field.nullable:
            raise SchemaError(f"update: column {column!r} is NOT NULL and cannot be set to NULL")
        return "NULL"
    if pa.types.is_nested(t):
        raise InvalidOperation(
            f"update: column {column!r} of type {t} cannot be set to a literal; use expressions="
        )
    v = python_column(pa.field(column, t, True), [value])[0].as_py()
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, float):
        text = repr(v) if math.isfinite(v) else f"'{v}'"
        return f"CAST({text} AS {sql_type(t)})"
    if isinstance(v, int):
        return f"CAST({v} AS {sql_type(t)})"
    if isinstance(v, Decimal):
        return f"CAST('{v:f}' AS {sql_type(t)})"
    if isinstance(v, datetime):
        return f"CAST('{v.isoformat()}' AS TIMESTAMP)"
    if isinstance(v, date):
        return f"CAST('{v.isoformat()}' AS DATE)"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, bytes):
        return f"X'{v.hex()}'"
    raise InvalidOperation(
        f"update: column {column!r} of type {t} cannot be set to a literal; use expressions="
    )


def sql_type(t: pa.DataType) -> str:
    names = {
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INT",
        pa.int64(): "BIGINT",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
    }
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    return names.get(t, "DOUBLE")


def as_of(value: datetime | int | float | str) -> datetime:
    """Accept a datetime, epoch milliseconds (or seconds, as the original took) or ISO text.

    A number below 10**11 is read as seconds: as milliseconds it would be before 1973.
    """
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, bool):
        raise VersionError("as_of must be a datetime, epoch milliseconds or an ISO string")
    if isinstance(value, int | float):
        seconds = value if abs(value) < EPOCH_MS_FROM else value / 1000
        try:
            return datetime.fromtimestamp(seconds, tz=UTC)
        except (OverflowError, OSError, ValueError) as err:
            raise VersionError(f"as_of: {value!r} is not a valid epoch time") from err
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as err:
            raise VersionError(f"as_of: not an ISO timestamp: {value!r}") from err
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise VersionError(
        f"as_of must be a datetime, epoch milliseconds or an ISO string, not {type(value).__name__}"
    )


def type_text(t: pa.DataType) -> str | pa.DataType:
    """The type string of a stored type, or the pyarrow type if no string names it."""
    text = type_string(t)
    try:
        parse_type(text)
    except SchemaError:
        return t
    return text


def columns_arg(value: object, what: str) -> list[str]:
    """Accept ``"a"``, ``"a, b"`` or a sequence of names; raise SchemaError otherwise."""
    if isinstance(value, str):
        cols = [c.strip() for c in value.split(",") if c.strip()]
    elif isinstance(value, Sequence) and all(isinstance(c, str) for c in value):
        cols = list(value)
    else:
        raise SchemaError(f"{what}: expected a column name or a list of them, not {value!r}")
    if not cols:
        raise SchemaError(f"{what}: no column named")
    return cols


def mapping_arg(value: object, what: str) -> dict[str, Any]:
    """Accept a mapping of column -> value (or JSON object text); raise SerializationError."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise SerializationError(f"update: {what} is malformed JSON: {err}") from err
    if not isinstance(value, Mapping):
        raise SerializationError(
            f"update: {what} must map column names to values, not {type(value).__name__}"
        )
    return {str(k): v for k, v in value.items()}


def partition_filters(value: str | list[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
    """Accept delta-rs partition filter tuples or ``col = 'v' AND col2 != 'w'`` text."""
    if not isinstance(value, str):
        return list(value)
    out: list[tuple[str, str, Any]] = []
    for part in re.split(r"\s+AND\s+", value.strip(), flags=re.IGNORECASE):
        m = re.fullmatch(r"\s*\"?([^\s\"=!<>]+)\"?\s*(=|!=|<>)\s*'?(.*?)'?\s*", part)
        if not m:
            raise InvalidOperation(f"cannot read partition filter {part!r}: use col = 'value'")
        op = "!=" if m.group(2) == "<>" else m.group(2)
        out.append((m.group(1), op, m.group(3)))
    return out
