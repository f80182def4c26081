"""Turn user payloads into Arrow tables that match a table's schema exactly.

Accepted payloads: a dict (one row, or a columnar dict of equal-length lists), a list of
dicts, a JSON string (object, array of objects, or JSON lines), CSV text with a header,
a pyarrow Table / RecordBatch / RecordBatchReader, a pandas or polars DataFrame, and any
object with ``__arrow_c_stream__``.

Conversion never truncates: a value that does not fit its column (1.5 into Int64, 300
into Int8, "abc" into Int64, a string into Boolean) is a :class:`SchemaError` naming the
column, and nothing is written. The same holds inside nested values (2.5 in a list of
Int64, a datetime in a list of dates, an unknown struct field), and for floats into
decimals (1.005 does not fit Decimal(10,2); 1.5 becomes 1.50). Accepted conversions are
exact: an int into a float column, 2.0 into an integer column, an ISO string into a date
or timestamp column (a UTC column needs an offset), text into binary (UTF-8), and
unsigned integers into the wider signed types Delta stores them as.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.errors import SchemaError, SerializationError

__all__ = [
    "conform",
    "csv_changes",
    "is_arrow_like",
    "is_csv_text",
    "python_column",
    "quick_row",
    "to_arrow",
]


def is_arrow_like(data: object) -> bool:
    """Return whether ``data`` is an in-memory Arrow-convertible table (not rows or text)."""
    if isinstance(data, pa.Table | pa.RecordBatch | pa.RecordBatchReader):
        return True
    return hasattr(data, "__arrow_c_stream__") or _is_dataframe(data)


def _is_dataframe(data: object) -> bool:
    mod = type(data).__module__
    return (mod.startswith("pandas") or mod.startswith("polars")) and type(
        data
    ).__name__ == "DataFrame"


def to_arrow(data: object, schema: pa.Schema) -> pa.Table:
    """Convert a payload to a table with exactly ``schema`` (names, order, types).

    Args:
        data: any accepted payload (see the module docstring).
        schema: the table's Arrow schema.

    Returns:
        A table that can be appended to the Delta table as is.

    Raises:
        SerializationError: malformed JSON or CSV, or a payload of an unsupported kind.
        SchemaError: unknown column, missing non-nullable column, a value of the wrong type.
    """
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as err:
            raise SerializationError(f"payload is not UTF-8 text: {err}") from err
    if isinstance(data, str):
        return _from_text(data, schema)
    if isinstance(data, Mapping):
        return _from_mapping(data, schema)
    if isinstance(data, Sequence):
        return _from_rows(list(data), schema)
    if isinstance(data, pa.RecordBatch):
        return conform(pa.Table.from_batches([data]), schema)
    if isinstance(data, pa.RecordBatchReader):
        return conform(data.read_all(), schema)
    if isinstance(data, pa.Table):
        return conform(data, schema)
    if _is_dataframe(data):
        if type(data).__module__.startswith("pandas"):
            return conform(pa.Table.from_pandas(data, preserve_index=False), schema)
        return conform(pa.table(data.to_arrow()), schema)  # type: ignore[attr-defined]
    if hasattr(data, "__arrow_c_stream__"):
        return conform(pa.table(data), schema)
    raise SerializationError(
        f"cannot insert a {type(data).__name__}: pass dicts, JSON, CSV text, Arrow, pandas or polars data"
    )


_Check = Callable[[Any], bool]
_QUICK: dict[int, tuple[pa.Schema, dict[str, _Check], frozenset[str]]] = {}
_INT_RANGES: Final = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
}


def _quick_check(t: pa.DataType, nullable: bool) -> _Check | None:
    """Return an exact Python type check for simple column types (None: use Arrow)."""
    check: _Check
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]

        def check(v: Any) -> bool:
            return type(v) is int and lo <= v <= hi

    elif t == pa.float64():

        def check(v: Any) -> bool:
            return type(v) is float or (type(v) is int and -(2**53) <= v <= 2**53)

    elif t == pa.string():

        def check(v: Any) -> bool:
            return type(v) is str

    elif t == pa.bool_():

        def check(v: Any) -> bool:
            return type(v) is bool

    else:
        return None
    if not nullable:
        return check
    inner = check

    def check_nullable(v: Any) -> bool:
        return v is None or inner(v)

    return check_nullable


def quick_row(data: object, schema: pa.Schema) -> dict[str, Any] | None:
    """Return ``data`` if it is one dict row that certainly converts to ``schema``, else None.

    The check is exact and cheap (Python types and integer ranges of simple columns), so a
    row it accepts always converts with :func:`to_arrow`; anything else (other types,
    unknown or missing NOT NULL columns) returns None and goes through :func:`to_arrow`,
    which raises the precise error.
    """
    if type(data) is not dict:
        return None
    cached = _QUICK.get(id(schema))
    if cached is None or cached[0] is not schema:
        checks: dict[str, _Check] = {}
        required: set[str] = set()
        for f in schema:
            c = _quick_check(f.type, f.nullable)
            if c is None:
                checks = {}
                break
            checks[f.name] = c
            if not f.nullable:
                required.add(f.name)
        cached = (schema, checks, frozenset(required))  # required: the NOT NULL columns
        if len(_QUICK) > 64:
            _QUICK.clear()
        _QUICK[id(schema)] = cached
    _, checks, needed = cached
    if not checks or not needed.issubset(data):
        return None
    for name, value in data.items():
        check = checks.get(name)
        if check is None or not check(value):
            return None
    return data


def is_csv_text(data: object) -> bool:
    """Return whether ``data`` is text (str or bytes) that ``to_arrow`` reads as CSV."""
    if isinstance(data, bytes | bytearray):
        text = bytes(data).removeprefix(b"\xef\xbb\xbf").lstrip()
        return bool(text) and text[:1] not in (b"[", b"{")
    if isinstance(data, str):
        stripped = data.removeprefix("\ufeff").lstrip()
        return bool(stripped) and stripped[0] not in "[{"
    return False


def csv_changes(data: object, schema: pa.Schema, *, null_marker: str = "\\N") -> object:
    """Return CSV change text as merge rows with explicit intent; other data unchanged.

    In a CSV of changes an empty field gives no value (an UPDATE keeps the column) and
    ``null_marker`` sets NULL (see :func:`posixlake.csvcodec.read_changes_csv`).

    Raises:
        SerializationError: malformed CSV or a value that does not parse as its column.
        SchemaError: a column that is not in ``schema``.
    """
    if not isinstance(data, str | bytes | bytearray) or not is_csv_text(data):
        return data
    from posixlake.csvcodec import CsvFormatError, read_changes_csv

    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        return read_changes_csv(raw, schema, null_marker=null_marker)
    except CsvFormatError as err:
        raise SerializationError(f"bad CSV: {err}") from err


def _from_text(text: str, schema: pa.Schema) -> pa.Table:
    stripped = text.lstrip()
    if not stripped:
        return schema.empty_table()
    if stripped[0] in "[{":
        return _from_json(stripped, schema)
    from posixlake.csvcodec import CsvFormatError, parse_csv

    header = stripped.split("\n", 1)[0].rstrip("\r")
    names = [n.strip().strip('"') for n in header.split(",")]
    _check_columns(names, schema)
    sub = pa.schema([schema.field(n) for n in names])
    try:
        table = parse_csv(stripped, sub, header="require")
    except CsvFormatError as err:
        raise SerializationError(f"bad CSV: {err}") from err
    return conform(table, schema)


def _from_json(text: str, schema: pa.Schema) -> pa.Table:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if len(lines) > 1 and all(ln.lstrip().startswith("{") for ln in lines):
            rows: list[Any] = []
            for i, line in enumerate(lines, 1):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as line_err:
                    raise SerializationError(
                        f"malformed JSON on line {i}: {line_err}"
                    ) from line_err
            return _from_rows(rows, schema)
        raise SerializationError(f"malformed JSON: {err}") from err
    if isinstance(value, dict):
        return _from_mapping(value, schema)
    if isinstance(value, list):
        return _from_rows(value, schema)
    raise SerializationError(
        f"JSON must be an object or an array of objects, not {type(value).__name__}"
    )


def _is_columnar(data: Mapping[str, Any], schema: pa.Schema) -> bool:
    if not data:
        return False
    for name, value in data.items():
        if not isinstance(value, list | tuple):
            return False
        idx = schema.get_field_index(name) if isinstance(name, str) else -1
        if (
            idx >= 0
            and _nested_list(schema.field(idx).type)
            and not all(v is None or isinstance(v, list | tuple) for v in value)
        ):
            return False
    return True


def _nested_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _from_mapping(data: Mapping[str, Any], schema: pa.Schema) -> pa.Table:
    if _is_columnar(data, schema):
        lengths = {len(v) for v in data.values()}
        if len(lengths) != 1:
            raise SchemaError(f"columnar data has columns of different lengths: {sorted(lengths)}")
        return _from_columns({k: list(v) for k, v in data.items()}, lengths.pop(), schema)
    return _from_rows([data], schema)


def _from_rows(rows: list[Any], schema: pa.Schema) -> pa.Table:
    for i, row in enumerate(rows):
        if type(row) is not dict and not isinstance(row, Mapping):
            raise SerializationError(f"row {i} is a {type(row).__name__}, not an object")
    names: dict[Any, None] = {}
    if rows:
        first = rows[0].keys()
        if all(row.keys() == first for row in rows):  # the common case: the same keys
            names = dict.fromkeys(first)
        else:
            for row in rows:
                for key in row:
                    names.setdefault(key)
    columns = {key: [row.get(key) for row in rows] for key in names}
    return _from_columns(columns, len(rows), schema)


def _check_columns(names: Sequence[Any], schema: pa.Schema) -> None:
    known = set(schema.names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SchemaError(
            f"unknown column(s) {', '.join(map(repr, unknown))}; the table has {', '.join(schema.names)}"
        )
    if len(set(names)) != len(names):
        raise SchemaError(f"duplicate column names in {list(names)}")


def _from_columns(columns: dict[str, list[Any]], n_rows: int, schema: pa.Schema) -> pa.Table:
    _check_columns(list(columns), schema)
    arrays: list[pa.Array] = []
    for fld in schema:
        values = columns.get(fld.name)
        if values is None:
            arrays.append(pa.nulls(n_rows, fld.type))
            continue
        arrays.append(python_column(fld, values))
    table = pa.Table.from_arrays(
        arrays, schema=pa.schema([pa.field(f.name, f.type, True) for f in schema])
    )
    return conform(table, schema)


def python_column(fld: pa.Field, values: list[Any]) -> pa.Array:
    """Convert Python values to an Arrow array of ``fld``'s type, strictly.

    Raises:
        SchemaError: a value has the wrong type or does not fit (naming the column).
    """
    t = fld.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        values = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
    if pa.types.is_decimal(t):
        values = [
            Decimal(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in values
        ]
    if pa.types.is_nested(t):
        for v in values:
            _check_nested(v, t, fld.name)
        try:
            return pa.array(values, type=t)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as err:
            raise SchemaError(f"column {fld.name!r}: {err}") from err
    try:
        inferred = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as err:
        raise SchemaError(f"column {fld.name!r} ({t}): mixed or unsupported values: {err}") from err
    return _cast_column(fld.name, inferred, t)


def _check_nested(value: Any, t: pa.DataType, column: str, where: str = "") -> None:
    """Check a Python value against a (nested) Arrow type before ``pa.array`` converts it.

    ``pa.array(values, type=...)`` is lenient inside nested values: it truncates 2.5 into an
    integer list, turns ``"ab"`` into ``["a", "b"]``, a datetime into a date, True into 1.0,
    and drops unknown struct fields. This walk refuses all of those.

    Raises:
        SchemaError: naming the column (and the path inside it).
    """
    if value is None:
        return

    def bad(what: str) -> SchemaError:
        at = f" at {column}{where}" if where else ""
        return SchemaError(f"column {column!r}{at} is {t}: {what} ({value!r})")

    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        if not isinstance(value, list | tuple):
            raise bad("a list value must be a list")
        for item in value:
            _check_nested(item, t.value_type, column, f"{where}[]")
    elif pa.types.is_map(t):
        if isinstance(value, Mapping):
            pairs = list(value.items())
        elif isinstance(value, list | tuple) and all(
            isinstance(p, list | tuple) and len(p) == 2 for p in value
        ):
            pairs = [tuple(p) for p in value]
        else:
            raise bad("a map value must be a dict or a list of (key, value) pairs")
        for k, v in pairs:
            if k is None:
                raise bad("map keys cannot be NULL")
            _check_nested(k, t.key_type, column, f"{where}.key")
            _check_nested(v, t.item_type, column, f"{where}.value")
    elif pa.types.is_struct(t):
        if not isinstance(value, Mapping):
            raise bad("a struct value must be a dict")
        names = {t.field(i).name for i in range(t.num_fields)}
        unknown = [k for k in value if k not in names]
        if unknown:
            raise bad(f"unknown struct field(s) {unknown}")
        for i in range(t.num_fields):
            f = t.field(i)
            _check_nested(value.get(f.name), f.type, column, f"{where}.{f.name}")
    elif pa.types.is_integer(t):
        if type(value) is float and value.is_integer():
            return
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("not an integer")
    elif pa.types.is_floating(t):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("not a number")
    elif pa.types.is_boolean(t):
        if not isinstance(value, bool):
            raise bad("not a boolean")
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        if not isinstance(value, str):
            raise bad("not a string")
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        if not isinstance(value, bytes | bytearray | str):
            raise bad("not bytes")
    elif pa.types.is_date(t):
        if isinstance(value, datetime) or not isinstance(value, date):
            raise bad("not a date (a datetime would lose its time of day)")
    elif pa.types.is_timestamp(t):
        if not isinstance(value, datetime):
            raise bad("not a datetime")
    elif pa.types.is_decimal(t) and (
        isinstance(value, bool) or not isinstance(value, int | Decimal)
    ):
        raise bad("not a Decimal or an integer")


_INT = "integer"


def _category(t: pa.DataType) -> str:
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_integer(t):
        return _INT
    if pa.types.is_floating(t):
        return "floating"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return "binary"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_dictionary(t):
        return _category(t.value_type)
    if pa.types.is_nested(t):
        return "nested"
    return str(t)


_ACCEPTS: dict[str, frozenset[str]] = {
    _INT: frozenset({_INT, "floating", "decimal"}),
    "floating": frozenset({_INT, "floating", "decimal"}),
    "decimal": frozenset({_INT, "floating", "decimal", "string"}),
    "bool": frozenset({"bool"}),
    "string": frozenset({"string"}),
    "binary": frozenset({"binary", "string"}),
    "date": frozenset({"date", "timestamp", "string"}),
    "timestamp": frozenset({"timestamp", "date", "string"}),
    "nested": frozenset({"nested"}),
}


def _cast_column(
    name: str, arr: pa.Array | pa.ChunkedArray, target: pa.DataType
) -> pa.Array | pa.ChunkedArray:
    if arr.type == target:
        return arr
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    src, dst = _category(arr.type), _category(target)
    if src != "null" and src not in _ACCEPTS.get(dst, frozenset({dst})):
        raise SchemaError(f"column {name!r} is {target}, but the data holds {arr.type} values")
    # safe cast refuses fractions; NaN and inf are refused explicitly
    if src == "floating" and dst == _INT and pc.any(pc.invert(pc.is_finite(arr))).as_py():
        raise SchemaError(f"column {name!r} is {target}: NaN or infinity does not fit")
    if src == "timestamp" and dst == "date":
        raise SchemaError(f"column {name!r} is a date; a timestamp would lose its time of day")
    if src == "floating" and dst == "decimal":
        # via the shortest decimal text of each float, so 1.005 into Decimal(10,2) is refused
        # (a direct cast would round it) while 1.5 becomes exactly 1.50
        arr = arr.cast(pa.string())
    if dst == "nested" and src == "nested":
        if isinstance(arr, pa.ChunkedArray):
            chunks = [_cast_nested(name, c, target) for c in arr.chunks]
            return pa.chunked_array(chunks, target)
        return _cast_nested(name, arr, target)
    try:
        return arr.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
        raise SchemaError(f"column {name!r} ({target}): {err}") from err


def _cast_nested(name: str, arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Cast a list / map / struct array level by level, each level with the checks above.

    ``Array.cast`` of a nested array neither checks the leaves' categories (it parses
    strings into numbers) nor copes with a NULL struct or list whose NOT NULL child holds
    a null slot under it; rebuilding keeps every level's validity and checks that a NOT
    NULL child has no null under a valid parent.

    Raises:
        SchemaError: a shape or leaf type that does not fit, or a NULL in a NOT NULL child.
    """
    if arr.type.equals(target):
        return arr
    mask = arr.is_null() if arr.null_count else None

    def check_children(child: pa.Array, nullable: bool, where: str, under: Any) -> None:
        if nullable or not child.null_count:
            return
        bad = child.is_null() if under is None else pc.and_(child.is_null(), under)
        if pc.any(bad).as_py():
            raise SchemaError(f"column {name!r}: {where} is NOT NULL but holds NULLs")

    if pa.types.is_struct(target):
        if not pa.types.is_struct(arr.type):
            raise SchemaError(f"column {name!r} is {target}, but the data holds {arr.type}")
        have = {arr.type.field(i).name for i in range(arr.type.num_fields)}
        want = [target.field(i) for i in range(target.num_fields)]
        unknown = have - {f.name for f in want}
        if unknown:
            raise SchemaError(f"column {name!r}: unknown struct field(s) {sorted(unknown)}")
        valid = pc.is_valid(arr)
        children = []
        for f in want:
            if f.name in have:
                child = _cast_any(f"{name}.{f.name}", arr.field(f.name), f.type)
            else:
                child = pa.nulls(len(arr), f.type)
            check_children(child, f.nullable, f"field {f.name!r}", valid)
            if not f.nullable and child.null_count:
                # the nulls sit under NULL structs: give them a placeholder value, as
                # Parquet writers refuse a null in a NOT NULL column even where unseen
                child = pc.coalesce(child, _placeholder(f.type))
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=want, mask=mask)
    if pa.types.is_map(target):
        if not pa.types.is_map(arr.type):
            raise SchemaError(f"column {name!r} is {target}, but the data holds {arr.type}")
        offsets, start, stop = _rebased_offsets(arr)
        keys = _cast_any(f"{name}.key", arr.keys.slice(start, stop - start), target.key_type)
        items = _cast_any(f"{name}.value", arr.items.slice(start, stop - start), target.item_type)
        check_children(keys, False, "a map key", None)
        check_children(items, target.item_field.nullable, "a map value", None)
        return pa.MapArray.from_arrays(offsets, keys, items, type=target, mask=mask)
    if pa.types.is_list(target) or pa.types.is_large_list(target):
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            if pa.types.is_list_view(arr.type) or pa.types.is_large_list_view(arr.type):
                return _cast_nested(
                    name, pa.array(arr.to_pylist(), pa.list_(arr.type.value_field)), target
                )
            raise SchemaError(f"column {name!r} is {target}, but the data holds {arr.type}")
        offsets, start, stop = _rebased_offsets(arr)
        values = _cast_any(f"{name}[]", arr.values.slice(start, stop - start), target.value_type)
        check_children(values, target.value_field.nullable, "a list element", None)
        if pa.types.is_large_list(target):
            return pa.LargeListArray.from_arrays(
                offsets.cast(pa.int64()), values, type=target, mask=mask
            )
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=mask)
    return _cast_any(name, arr, target)


def _placeholder(t: pa.DataType) -> pa.Scalar:
    """Return a non-null value of type ``t`` (zero, empty, or a struct of placeholders)."""
    value: Any
    if pa.types.is_struct(t):
        value = {
            t.field(i).name: (
                None if t.field(i).nullable else _placeholder(t.field(i).type).as_py()
            )
            for i in range(t.num_fields)
        }
    elif pa.types.is_nested(t):
        value = []
    elif pa.types.is_boolean(t):
        value = False
    elif pa.types.is_decimal(t):
        value = Decimal(0)
    elif pa.types.is_integer(t) or pa.types.is_floating(t):
        value = 0
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        value = ""
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        value = b""
    elif pa.types.is_date(t):
        value = date(1970, 1, 1)
    elif pa.types.is_timestamp(t):
        value = datetime(1970, 1, 1)
    else:
        raise SchemaError(f"no placeholder value for a NOT NULL {t} under a NULL struct")
    return pa.scalar(value, t)


def _cast_any(name: str, arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Cast one (child) array with the checks of :func:`_cast_column`."""
    out: pa.Array = _cast_column(name, arr, target)
    return out


def _rebased_offsets(arr: pa.Array) -> tuple[pa.Array, int, int]:
    """Return a list/map array's offsets as a new int32 array starting at 0, and the
    range of child values they cover (the offsets of a sliced array start anywhere)."""
    offsets = arr.offsets
    start = int(offsets[0].as_py()) if len(offsets) else 0
    stop = int(offsets[-1].as_py()) if len(offsets) else 0
    return pc.subtract(offsets, start).cast(pa.int32()), start, stop


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder, cast and check ``table`` so it has exactly ``schema``.

    Raises:
        SchemaError: unknown or missing non-nullable columns, values of the wrong type,
            values that do not fit, or NULLs in a non-nullable column.
    """
    _check_columns(table.column_names, schema)
    arrays: list[pa.Array | pa.ChunkedArray] = []
    for fld in schema:
        if fld.name in table.column_names:
            col = _cast_column(fld.name, table.column(fld.name), fld.type)
        elif fld.nullable:
            col = pa.nulls(table.num_rows, fld.type)
        else:
            raise SchemaError(f"missing value for non-nullable column {fld.name!r}")
        if not fld.nullable and col.null_count:
            raise SchemaError(
                f"column {fld.name!r} is NOT NULL but {col.null_count} row(s) have no value"
            )
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema)


def json_value(value: Any) -> Any:
    """Make a Python value from Arrow ``as_py`` JSON-serialisable (ISO times, base64 bytes)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): json_value(v) for k, v in value}
        return [json_value(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, Decimal):
        return str(value)
    return value
