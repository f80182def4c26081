"""Shared parts of the CSV codec: the error, type aliases, constants, and the
Arrow helpers that type checks and messages use."""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Iterable
from typing import Any, Final, Literal, TypeAlias, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.errors import SchemaError, SerializationError

__all__ = ["CsvFormatError", "HeaderMode"]

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


def _lit(value: str | float | bool, t: pa.DataType | None = None) -> pa.Scalar[Any]:
    """Return ``value`` as an Arrow scalar (of type ``t``, default string, float64 or
    bool), built from its bytes; cached.

    pyarrow converts a Python value (``pa.scalar``, ``pa.array``, a Python argument of a
    compute function) only after asking whether it is a pandas object, which imports
    pandas the first time: a quarter of a second and some 40 MB in a process that never
    needed it. The codec's literals come from here instead, so rendering the common types
    imports nothing.
    """
    if isinstance(value, bool):
        return _scalar_of(pa.bool_(), bytes([value]), t)
    if isinstance(value, str):
        return _scalar_of(pa.string(), value.encode("utf-8"), t)
    return _scalar_of(pa.float64(), struct.pack("=d", value), t)  # by its bits: -0.0 too


@functools.lru_cache(maxsize=256)
def _scalar_of(kind: pa.DataType, data: bytes, t: pa.DataType | None) -> pa.Scalar[Any]:
    arr: pa.Array[Any]
    if kind == pa.string():
        offsets = pa.py_buffer(struct.pack("=ii", 0, len(data)))
        arr = pa.Array.from_buffers(kind, 1, [None, offsets, pa.py_buffer(data)])
    else:
        arr = pa.Array.from_buffers(kind, 1, [None, pa.py_buffer(data)])
    scalar = arr[0]
    return scalar if t is None or t == kind else scalar.cast(t)


def _operand(value: Any, like: Any) -> Any:
    """``value`` as a compute operand: a str as `_lit`, None as a null of ``like``'s type."""
    if isinstance(value, str):
        return _lit(value)
    if value is None and like is not None and not isinstance(like, str):
        return pa.nulls(1, like.type)[0]
    return value


def _concat(*parts: _A | str, sep: str = "") -> _A:
    """Join strings element-wise (``binary_join_element_wise``); str parts broadcast."""
    # The stubs accept no str scalar among array operands.
    operands = [_operand(part, None) for part in parts]
    joined: _A = pc.binary_join_element_wise(*operands, _lit(sep))  # type: ignore[call-overload, arg-type, unused-ignore]
    return joined


def _choose(condition: _A, then: _A | str | None, otherwise: _A | str | None) -> _A:
    """Pick ``then`` where ``condition`` holds, else ``otherwise`` (``if_else``)."""
    chosen: _A = pc.if_else(  # type: ignore[call-overload, unused-ignore]
        condition, _operand(then, otherwise), _operand(otherwise, then)
    )
    return chosen


def _is_empty(text: _A) -> _A:
    """Return, per value, whether a string is empty (NULL stays null)."""
    empty: _A = pc.equal(text, _lit("", text.type))  # type: ignore[assignment, unused-ignore]
    return empty


def _fill(text: _A, value: str) -> _A:
    """Replace NULL by ``value`` (``fill_null``)."""
    filled: _A = pc.fill_null(text, _lit(value, text.type))  # type: ignore[call-overload, arg-type, unused-ignore]
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
