"""delta-rs errors as posixlake errors (translated once, here), and SQL identifiers."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Final

import pyarrow as pa
from deltalake.exceptions import (
    CommitFailedError,
    DeltaError,
    DeltaProtocolError,
    SchemaMismatchError,
    TableNotFoundError,
)

from posixlake.delta._features import unsupported_feature
from posixlake.errors import (
    CommitConflict,
    DeltaLakeError,
    DivisionByZero,
    InvalidOperation,
    IoError,
    NetworkError,
    NotFound,
    PosixLakeError,
    QueryError,
    SchemaError,
    StorageError,
    ValueOutOfRange,
)

__all__ = [
    "NS_RANGE",
    "_translated",
    "quote_ident",
    "retention_hours_of",
    "translate",
    "value_error",
]

_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")


def quote_ident(name: str) -> str:
    """Quote a column name for delta-rs / DataFusion SQL."""
    return '"' + name.replace('"', '""') + '"'


_INTERVAL = re.compile(r"^\s*interval\s+(\d+(?:\.\d+)?)\s+([a-z]+?)s?\s*$", re.IGNORECASE)
_UNIT_HOURS: Final[dict[str, float]] = {
    "week": 168.0,
    "day": 24.0,
    "hour": 1.0,
    "minute": 1 / 60,
    "second": 1 / 3600,
    "millisecond": 1 / 3_600_000,
    "microsecond": 1 / 3_600_000_000,
}
DEFAULT_RETENTION_HOURS: Final = 168.0


def retention_hours_of(configuration: Mapping[str, str]) -> float:
    """Return ``delta.deletedFileRetentionDuration`` (``"interval 7 days"``) in hours.

    The Delta default, one week, when the property is missing or unreadable.
    """
    text = configuration.get("delta.deletedFileRetentionDuration")
    m = _INTERVAL.match(text) if text else None
    if m is None or m.group(2).lower() not in _UNIT_HOURS:
        return DEFAULT_RETENTION_HOURS
    return float(m.group(1)) * _UNIT_HOURS[m.group(2).lower()]


# DataFusion / arrow-rs messages of a value that does not fit its type (the value first)
_OUT_OF_RANGE: Final = (
    re.compile(r"value of (\S+) is out of range (\w+)", re.I),
    re.compile(r"can't cast value (\S+) to type (\w+)", re.I),
    re.compile(r"(\S+) is too large to store in a (Decimal\d+ of precision \d+)", re.I),
    re.compile(r"overflow converting (.+?) to (nanosecond)", re.I),
    re.compile(r"overflow happened on: (.+?)(?:$|\n)", re.I),
    re.compile(r"(\w+array) overflow on (.+?)(?:$|\n)", re.I),
)
_ZERO: Final = re.compile(r"divide by zero|division by zero", re.I)
#: in the message of a timestamp that DataFusion could only hold in nanoseconds
NS_RANGE: Final = "outside 1677-2262"


def value_error(
    text: str, *, what: str, column: str | None = None, expression: str | None = None
) -> ValueOutOfRange | DivisionByZero | None:
    """Return the error for an engine message about a value that cannot be represented
    (an overflow, a division by zero), or None when ``text`` is about something else.

    Args:
        text: the engine's message.
        what: the operation, for the message.
        column: the column the value was for, when known.
        expression: the SQL that computed it, when known.
    """
    where = f"{what}: column {column!r}" if column else what
    if expression:
        where += f" = {expression}"
    if _ZERO.search(text):
        return DivisionByZero(f"{where}: division by zero; nothing was committed", column)
    for pattern in _OUT_OF_RANGE:
        m = pattern.search(text)
        if m is None:
            continue
        if m.group(2).lower() == "nanosecond":
            reason = (
                f"the timestamp {m.group(1)} is {NS_RANGE}, which this SQL "
                "cannot hold; years 0001-9999 are valid as literals "
                "(TIMESTAMP '9000-01-01') and as column values"
            )
        elif "overflow happened" in m.group(0).lower():
            reason = f"{m.group(1).strip()} overflows its type"
        elif "array overflow" in m.group(0).lower():
            reason = f"{m.group(2).strip()} overflows its type"
        else:
            reason = f"the value {m.group(1)} does not fit {m.group(2)}"
        return ValueOutOfRange(f"{where}: {reason}; nothing was committed", column)
    return None


_UNKNOWN_TABLE: Final = re.compile(r"table '([^']+)' not found")
_BAD_CAST: Final = re.compile(
    r"Cannot cast string '((?:[^']|'')*)' to value of (\w+(?:\(\d+, ?\d+\))?) type"
)


def _type_words(arrow_name: str) -> str:
    """A DataFusion type name as users read it (``Decimal128(38, 10)`` -> a decimal)."""
    if arrow_name.startswith("Decimal"):
        return "a decimal number"
    if arrow_name.startswith(("Int", "UInt")):
        return f"an integer ({arrow_name})"
    if arrow_name.startswith("Float"):
        return f"a floating-point number ({arrow_name})"
    return arrow_name


def translate(err: Exception, *, what: str, query: bool = False) -> PosixLakeError:
    """Map a delta-rs (or object store) error to the posixlake error tree.

    Args:
        err: the exception delta-rs raised.
        what: a short description of the operation, used in the message.
        query: the error came from running SQL: any error that is not about storage is
            a :class:`QueryError` (a cast failing at run time included).
    """
    text = _ANSI.sub("", str(err))
    low = text.lower()
    if "could not create local directory" in low:
        return IoError(f"{what}: {text.splitlines()[0]}")
    if isinstance(err, TableNotFoundError) or "invalid table location" in low:
        return NotFound(f"{what}: no Delta table there ({text.splitlines()[0]})")
    unsupported = unsupported_feature(text, what=what)
    if unsupported is not None:  # not a conflict: retrying cannot help
        return unsupported
    value = value_error(text, what=what)
    if value is not None:
        return value
    if isinstance(err, CommitFailedError):
        return CommitConflict(f"{what}: commit conflict: {text}")
    if isinstance(err, SchemaMismatchError):
        return SchemaError(f"{what}: {text}")
    if "timestamp_ntz columns but does not have" in low:
        # delta-rs enables the timestampNtz feature for top-level, struct and list columns
        # but not for a timestamp without time zone inside a map
        return SchemaError(
            f"{what}: delta-rs cannot create a table with a timestamp without time zone "
            f"inside a map; use Timestamp (UTC) there: {text}"
        )
    if isinstance(err, DeltaProtocolError):
        return InvalidOperation(f"{what}: {text}")
    if any(
        s in low
        for s in (
            "connection refused",
            "dns error",
            "error sending request",
            "timed out",
            "tcp connect",
        )
    ):
        return NetworkError(f"{what}: storage endpoint unreachable: {text}")
    unknown_table = _UNKNOWN_TABLE.search(text)
    if unknown_table is not None:
        name = unknown_table.group(1).rsplit(".", 1)[-1]
        return QueryError(f"{what}: unknown table {name!r}: the table is called `data`")
    bad_cast = _BAD_CAST.search(text)
    if bad_cast is not None:
        cast_value, type_name = bad_cast.groups()
        return QueryError(
            f"{what}: the value '{cast_value}' cannot be cast to {_type_words(type_name)}, the "
            "type of the column it is set to or compared with"
        )
    if any(
        s in low
        for s in (
            "sql error",
            "parsererror",
            "parser error",
            "schema error",
            "no field named",
            "plan(",
            "error during planning",
            "type_coercion",
        )
    ):
        return QueryError(f"{what}: {text}")
    if "not found" in low and ("object at location" in low or "no such file" in low):
        return NotFound(f"{what}: a data file is missing (removed by VACUUM or by hand): {text}")
    if "invalid retention period" in low:
        return InvalidOperation(
            f"{what}: {text.splitlines()[0]} (pass enforce_retention_duration=False to allow "
            "a shorter one: time travel to the versions it removes stops working)"
        )
    if "failed validation check" in low or "invariant violations" in low:
        return SchemaError(f"{what}: a NOT NULL column or constraint is violated: {text}")
    if any(
        s in low
        for s in (
            "access denied",
            "forbidden",
            "invalidaccesskeyid",
            "signaturedoesnotmatch",
            "authorizationfailure",
            "403",
        )
    ):
        return StorageError(f"{what}: access denied by storage: {text}")
    if query and not any(s in low for s in ("no such file", "not found", "object store")):
        return QueryError(f"{what}: {text}")
    if "invalid data type" in low or "cast error" in low or "arrow error" in low:
        return SchemaError(f"{what}: {text}")
    if isinstance(err, DeltaError):
        return DeltaLakeError(f"{what}: {text}")
    return DeltaLakeError(f"{what}: {type(err).__name__}: {text}")


@contextmanager
def _translated(what: str, *, query: bool = False) -> Iterator[None]:
    try:
        yield
    except PosixLakeError:
        raise
    except (DeltaError, OSError, pa.ArrowException) as err:
        raise translate(err, what=what, query=query) from err
    except ValueError as err:
        # delta-rs raises a bare ValueError when a computed value does not fit its
        # column (a decimal overflow, a division by zero)
        value = value_error(str(err), what=what)
        if value is None:
            raise
        raise value from err
    except Exception as err:
        # DataFusion raises a bare Exception for errors while a query runs (a failed
        # cast, a division by zero); anything of another class is not ours to translate
        if type(err) is not Exception:
            raise
        raise translate(err, what=what, query=query) from err
