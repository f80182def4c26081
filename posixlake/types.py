"""Schemas, type strings and the typed results of posixlake operations.

A table schema is a :class:`Schema` of :class:`Field` values. A field's type is either a
pyarrow ``DataType`` or one of the original project's type strings::

    Int8 Int16 Int32 Int64 UInt8 UInt16 UInt32 UInt64 Float32 Float64
    String LargeUtf8 Binary LargeBinary Boolean Date32 Date64
    Timestamp (UTC, microseconds)  TimestampNtz (no time zone)
    Decimal128(p,s)  List<T>  Map<K,V>  Struct<a:T,b:U,...>

Delta Lake has no unsigned integers, so ``UInt8/16/32`` are stored in the next wider
signed type and ``UInt64`` as ``Decimal(20,0)``: every value of the declared type fits.
:func:`delta_type` gives the type a column is stored as.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

import pyarrow as pa

from posixlake.errors import SchemaError

__all__ = [
    "DECLARED_TYPES_PROPERTY",
    "CommitInfo",
    "DataSkippingStats",
    "Field",
    "HealthStatus",
    "MergeMetrics",
    "Metrics",
    "OptimizeResult",
    "Percentiles",
    "Schema",
    "VacuumResult",
    "check_declared",
    "declared_types",
    "delta_schema",
    "delta_type",
    "parse_type",
    "type_string",
]

_SIMPLE: Final[dict[str, pa.DataType]] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "int": pa.int64(),
    "integer": pa.int64(),
    "bigint": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float": pa.float32(),
    "float64": pa.float64(),
    "double": pa.float64(),
    "string": pa.string(),
    "utf8": pa.string(),
    "largeutf8": pa.large_string(),
    "largestring": pa.large_string(),
    "binary": pa.binary(),
    "largebinary": pa.large_binary(),
    "boolean": pa.bool_(),
    "bool": pa.bool_(),
    "date32": pa.date32(),
    "date": pa.date32(),
    "date64": pa.date64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "timestampntz": pa.timestamp("us"),
    "datetime": pa.timestamp("us"),
}

_DECIMAL = re.compile(r"(?:decimal128|decimal)\((\d+)\s*,\s*(-?\d+)\)", re.IGNORECASE)


def _split_top(text: str, sep: str) -> list[str]:
    """Split ``text`` on ``sep`` where it is not nested in <> or ()."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
            if depth < 0:
                raise SchemaError(f"unbalanced brackets in type {text!r}")
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if depth != 0:
        raise SchemaError(f"unbalanced brackets in type {text!r}")
    parts.append(text[start:].strip())
    return parts


def parse_type(spec: str | pa.DataType) -> pa.DataType:
    """Turn a type string of the original project (or a pyarrow type) into a pyarrow type.

    Args:
        spec: e.g. ``"Int64"``, ``"Decimal128(10,2)"``, ``"List<String>"``,
            ``"Map<String,Int64>"``, ``"Struct<a:Int32,b:List<Float64>>"``; case-insensitive.

    Returns:
        The pyarrow type (before Delta storage conversion, see :func:`delta_type`).

    Raises:
        SchemaError: the string names no known type, naming it.
    """
    if isinstance(spec, pa.DataType):
        return spec
    if not isinstance(spec, str):
        raise SchemaError(
            f"a data type must be a string or a pyarrow type, not {type(spec).__name__}"
        )
    text = spec.strip()
    key = text.replace("_", "").lower()
    if key in _SIMPLE:
        return _SIMPLE[key]
    m = _DECIMAL.fullmatch(text)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise SchemaError(
                f"unsupported decimal {text!r}: need 1 <= precision <= 38, 0 <= scale <= precision"
            )
        return pa.decimal128(precision, scale)
    generic = re.fullmatch(r"(\w+)\s*<(.*)>", text, re.DOTALL)
    if generic:
        head, inner = generic.group(1).lower(), generic.group(2)
        if head in ("list", "array", "largelist"):
            item = parse_type(inner)
            return pa.large_list(item) if head == "largelist" else pa.list_(item)
        if head == "map":
            parts = _split_top(inner, ",")
            if len(parts) != 2:
                raise SchemaError(f"Map needs two types, Map<K,V>: {text!r}")
            return pa.map_(parse_type(parts[0]), parse_type(parts[1]))
        if head == "struct":
            fields = []
            for part in _split_top(inner, ","):
                name, sep, sub = part.partition(":")
                if not sep or not name.strip():
                    raise SchemaError(f"Struct fields are name:Type, got {part!r} in {text!r}")
                fields.append(pa.field(name.strip(), parse_type(sub)))
            return pa.struct(fields)
    raise SchemaError(f"unknown data type {spec!r}")


def type_string(t: pa.DataType) -> str:
    """Return the type string (as :func:`parse_type` reads it) for a pyarrow type."""
    if pa.types.is_decimal(t):
        return f"Decimal128({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "Timestamp" if t.tz is not None else "TimestampNtz"
    if pa.types.is_large_list(t):
        return f"LargeList<{type_string(t.value_type)}>"
    if pa.types.is_list(t):
        return f"List<{type_string(t.value_type)}>"
    if pa.types.is_map(t):
        return f"Map<{type_string(t.key_type)},{type_string(t.item_type)}>"
    if pa.types.is_struct(t):
        inner = ",".join(
            f"{t.field(i).name}:{type_string(t.field(i).type)}" for i in range(t.num_fields)
        )
        return f"Struct<{inner}>"
    names = {
        pa.int8(): "Int8",
        pa.int16(): "Int16",
        pa.int32(): "Int32",
        pa.int64(): "Int64",
        pa.uint8(): "UInt8",
        pa.uint16(): "UInt16",
        pa.uint32(): "UInt32",
        pa.uint64(): "UInt64",
        pa.float16(): "Float16",
        pa.float32(): "Float32",
        pa.float64(): "Float64",
        pa.string(): "String",
        pa.large_string(): "LargeUtf8",
        pa.binary(): "Binary",
        pa.large_binary(): "LargeBinary",
        pa.bool_(): "Boolean",
        pa.date32(): "Date32",
        pa.date64(): "Date64",
    }
    for known, name in names.items():
        if t == known:
            return name
    return str(t)


def delta_type(t: pa.DataType) -> pa.DataType:
    """Return the type a column of type ``t`` is stored as in Delta.

    Unsigned integers widen (UInt64 becomes Decimal(20,0)), large and view types become
    their plain forms, Date64 becomes Date32, Float16 becomes Float32 and timestamps become
    microseconds (UTC when they carry any time zone).

    Raises:
        SchemaError: Delta cannot store the type (e.g. time of day, durations, unions).
    """
    if t == pa.uint8():
        return pa.int16()
    if t == pa.uint16():
        return pa.int32()
    if t == pa.uint32():
        return pa.int64()
    if t == pa.uint64():
        return pa.decimal128(20, 0)
    if t == pa.float16():
        return pa.float32()
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return t
    if pa.types.is_decimal(t):
        if t.precision > 38:
            raise SchemaError(f"Delta decimals hold at most 38 digits, not {t}")
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_date(t):
        return pa.date32()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC") if t.tz is not None else pa.timestamp("us")
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        vf = t.value_field
        return pa.list_(pa.field("element", delta_type(vf.type), vf.nullable))
    if pa.types.is_map(t):
        return pa.map_(
            delta_type(t.key_type),
            pa.field("value", delta_type(t.item_type), t.item_field.nullable),
        )
    if pa.types.is_struct(t):
        return pa.struct(
            [
                pa.field(t.field(i).name, delta_type(t.field(i).type), t.field(i).nullable)
                for i in range(t.num_fields)
            ]
        )
    if pa.types.is_dictionary(t):
        return delta_type(t.value_type)
    raise SchemaError(f"Delta Lake cannot store the type {t}")


DECLARED_TYPES_PROPERTY: Final = "posixlake.declaredTypes"
"""Table property: JSON ``{column: type string}`` of the columns declared with unsigned
integers (``UInt8`` is stored as Int16, ``List<UInt16>`` as List<Int32>, ...)."""


def declared_types(schema: pa.Schema) -> dict[str, str]:
    """Return ``{column: type string}`` for the columns declared with unsigned integers.

    Only those change meaning in storage (their range); other conversions (LargeUtf8 to
    String, Date64 to Date32) keep every value and are reported as stored, as the
    original project reported them.
    """
    return {f.name: type_string(f.type) for f in schema if _has_unsigned(f.type)}


def _has_unsigned(t: pa.DataType) -> bool:
    if pa.types.is_unsigned_integer(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_unsigned(t.value_type)
    if pa.types.is_map(t):
        return _has_unsigned(t.key_type) or _has_unsigned(t.item_type)
    if pa.types.is_struct(t):
        return any(_has_unsigned(t.field(i).type) for i in range(t.num_fields))
    return False


def check_declared(table: pa.Table, declared: Mapping[str, str]) -> None:
    """Check that the values of ``table`` (in stored types) fit the declared types.

    Only declared types holding unsigned integers narrow what Delta stores (a UInt8
    column is an Int16 column that must hold 0..255); other declared types only widen.

    Raises:
        SchemaError: a value is outside its declared type, naming the column.
    """
    import pyarrow.compute as pc

    for name, spec in declared.items():
        if name not in table.column_names:
            continue
        target = parse_type(spec)
        if not _has_unsigned(target):
            continue
        try:
            pc.cast(table[name], target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise SchemaError(f"column {name!r} is {spec}: a value does not fit ({err})") from err


def delta_schema(schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` with every field converted by :func:`delta_type`."""
    return pa.schema([pa.field(f.name, delta_type(f.type), f.nullable) for f in schema])


@dataclass(frozen=True)
class Field:
    """One column: a name, a type (type string or pyarrow type) and nullability."""

    name: str
    data_type: str | pa.DataType
    nullable: bool = True

    def arrow_type(self) -> pa.DataType:
        """Return the declared pyarrow type of the column."""
        return parse_type(self.data_type)

    def to_arrow(self) -> pa.Field:
        """Return the column as a pyarrow field (declared type)."""
        return pa.field(self.name, self.arrow_type(), self.nullable)


_NAME = re.compile(r"[^,;{}()\n\t=\"]+")


@dataclass(frozen=True)
class Schema:
    """A table schema: fields in order, and an optional primary key.

    Args:
        fields: the columns; names must be unique and non-empty.
        primary_key: a column name or a list of them; they must exist and are made
            non-nullable.
    """

    fields: Sequence[Field]
    primary_key: str | Sequence[str] | None = None

    def __post_init__(self) -> None:
        fields = list(self.fields)
        if not fields:
            raise SchemaError("a schema needs at least one field")
        seen: set[str] = set()
        for f in fields:
            if not isinstance(f, Field):
                raise SchemaError(f"schema fields must be Field values, not {type(f).__name__}")
            if not isinstance(f.name, str) or not f.name or not _NAME.fullmatch(f.name):
                raise SchemaError(f"invalid column name {f.name!r}")
            if f.name.lower() in seen:
                raise SchemaError(f"duplicate column name {f.name!r}")
            seen.add(f.name.lower())
            f.arrow_type()  # validates the type string
        object.__setattr__(self, "fields", tuple(fields))
        for k in self.key_columns:
            if k.lower() not in seen:
                raise SchemaError(f"primary key column {k!r} is not in the schema")

    @property
    def key_columns(self) -> list[str]:
        """The primary key as a list of column names (empty when there is none)."""
        if self.primary_key is None:
            return []
        if isinstance(self.primary_key, str):
            return [c.strip() for c in self.primary_key.split(",") if c.strip()]
        return list(self.primary_key)

    def to_arrow(self) -> pa.Schema:
        """Return the declared schema as pyarrow (key columns non-nullable)."""
        keys = set(self.key_columns)
        return pa.schema(
            [
                pa.field(f.name, f.arrow_type(), f.nullable and f.name not in keys)
                for f in self.fields
            ]
        )

    @classmethod
    def from_arrow(
        cls, schema: pa.Schema, primary_key: str | Sequence[str] | None = None
    ) -> Schema:
        """Build a Schema from a pyarrow schema."""
        return cls([Field(f.name, f.type, f.nullable) for f in schema], primary_key=primary_key)

    @classmethod
    def coerce(cls, value: Schema | pa.Schema | Mapping[str, Any] | Iterable[Any]) -> Schema:
        """Accept a Schema, a pyarrow schema, ``{"name": "Type"}`` or a list of fields/tuples.

        Raises:
            SchemaError: the value is not a schema in any of these forms.
        """
        if isinstance(value, Schema):
            return value
        if isinstance(value, pa.Schema):
            return cls.from_arrow(value)
        if isinstance(value, Mapping):
            return cls([Field(str(k), v) for k, v in value.items()])
        if isinstance(value, str | bytes):
            raise SchemaError(
                "a schema must be a Schema, a pyarrow schema or a mapping of name to type"
            )
        try:
            items = list(value)
        except TypeError as err:
            raise SchemaError(f"not a schema: {type(value).__name__}") from err
        fields: list[Field] = []
        for item in items:
            if isinstance(item, Field):
                fields.append(item)
            elif isinstance(item, pa.Field):
                fields.append(Field(item.name, item.type, item.nullable))
            elif isinstance(item, tuple) and 2 <= len(item) <= 3:
                fields.append(Field(*item))
            else:
                raise SchemaError(f"not a schema field: {item!r}")
        return cls(fields)

    def __str__(self) -> str:
        cols = ", ".join(
            f"{f.name} {type_string(f.arrow_type())}{'' if f.nullable else ' NOT NULL'}"
            for f in self.fields
        )
        key = f", PRIMARY KEY ({', '.join(self.key_columns)})" if self.key_columns else ""
        return f"({cols}{key})"


@dataclass(frozen=True)
class MergeMetrics:
    """What a merge did. Rows asked for but not applied are counted as skipped.

    ``rows_inserted``, ``rows_updated`` and ``rows_deleted`` count rows of the table: when
    the merge key is not the primary key and the table holds a key more than once, one
    UPDATE (or DELETE) row of the merge updates (deletes) every table row with that key,
    and each counts. ``rows_skipped`` counts rows of the merge: UPDATE or DELETE rows whose
    key is absent and INSERT rows whose key already exists (with ``strict=True`` those
    raise instead and nothing is committed). ``total_affected`` is the table rows changed.
    """

    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    rows_skipped: int = 0
    version: int | None = None

    @property
    def total_affected(self) -> int:
        """Rows inserted, updated and deleted."""
        return self.rows_inserted + self.rows_updated + self.rows_deleted

    def to_dict(self) -> dict[str, int | None]:
        """Return the metrics as a plain dict (for JSON output)."""
        return {
            "rows_inserted": self.rows_inserted,
            "rows_updated": self.rows_updated,
            "rows_deleted": self.rows_deleted,
            "rows_skipped": self.rows_skipped,
            "total_affected": self.total_affected,
            "version": self.version,
        }


@dataclass(frozen=True)
class CommitInfo:
    """One entry of the table history."""

    version: int
    timestamp: datetime
    operation: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    user: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    """The commit's ``posixlake.*`` metadata (see ``DatabaseOps.commit_tags``)."""


@dataclass(frozen=True)
class VacuumResult:
    """Files vacuum removed (or would remove, with ``dry_run``)."""

    files: tuple[str, ...]
    dry_run: bool

    @property
    def files_deleted(self) -> int:
        """How many files were (or would be) deleted."""
        return len(self.files)


@dataclass(frozen=True)
class OptimizeResult:
    """What OPTIMIZE or Z-ORDER did; ``version`` is None when nothing was committed."""

    files_added: int
    files_removed: int
    partitions_optimized: int
    version: int | None


@dataclass(frozen=True)
class DataSkippingStats:
    """How many active files a predicate lets a scan skip, from per-file statistics."""

    total_files: int
    total_bytes: int
    total_rows: int
    files_to_scan: int
    files_skipped: int
    bytes_to_scan: int
    predicate: str | None

    @property
    def skip_ratio(self) -> float:
        """Fraction of files skipped (0.0 for an empty table)."""
        return self.files_skipped / self.total_files if self.total_files else 0.0

    # the original project's names
    @property
    def files_read(self) -> int:
        """Files a scan with the predicate reads (``files_to_scan``)."""
        return self.files_to_scan

    @property
    def bytes_scanned(self) -> int:
        """Bytes of the files a scan reads (``bytes_to_scan``)."""
        return self.bytes_to_scan

    @property
    def bytes_skipped(self) -> int:
        """Bytes of the files the predicate lets a scan skip."""
        return self.total_bytes - self.bytes_to_scan


@dataclass(frozen=True)
class HealthStatus:
    """The result of a health check: only ACTIVE files count."""

    status: Literal["healthy", "unhealthy"]
    version: int
    active_files: int
    active_bytes: int
    rows: int
    location: str
    message: str = ""
    uptime_seconds: float = 0.0
    """Seconds since the DatabaseOps was opened."""

    # the original project's names
    @property
    def total_files(self) -> int:
        """Active data files (``active_files``)."""
        return self.active_files

    @property
    def total_rows(self) -> int:
        """Rows of the table (``rows``)."""
        return self.rows

    @property
    def total_size_bytes(self) -> int:
        """Bytes of the active data files (``active_bytes``)."""
        return self.active_bytes

    @property
    def healthy(self) -> bool:
        """True when the table could be read."""
        return self.status == "healthy"

    def __bool__(self) -> bool:
        """Truthy when healthy (the original's ``health_check()`` returned a bool)."""
        return self.healthy


@dataclass(frozen=True)
class Metrics:
    """Operation counters of one DatabaseOps since it was opened."""

    queries: int
    inserts: int
    merges: int
    deletes: int
    updates: int
    rows_written: int
    rows_deleted: int
    commits: int
    errors: int
    avg_commit_latency_ms: float
    last_commit_latency_ms: float
    uptime_seconds: float
    avg_query_latency_ms: float = 0.0
    """Mean wall time of the successful queries (SQL and time travel), milliseconds."""
    max_query_latency_ms: float = 0.0

    #: commit attempts that lost to a concurrent writer (each was re-planned and retried)
    commit_conflicts: int = 0
    #: attempts made again after a conflict
    commit_retries: int = 0
    #: writes that failed with CommitConflict because the commit deadline passed
    commits_given_up: int = 0
    #: rows waiting in the insert buffer now
    buffered_rows: int = 0
    #: times the table was found replaced under this handle and reloaded
    table_reloads: int = 0
    #: latency percentiles per operation (``query``, ``insert``, ``commit``, ``health``,
    #: ``merge``, ``delete``, ``update``, ``flush``) over the most recent calls
    latency_ms: Mapping[str, Percentiles] = field(default_factory=dict)

    # the original project's names
    @property
    def total_queries(self) -> int:
        """Successful queries (``queries``)."""
        return self.queries

    @property
    def total_inserts(self) -> int:
        """Insert commits, a flush of buffered rows included (``inserts``)."""
        return self.inserts

    @property
    def total_deletes(self) -> int:
        """Delete and truncate calls (``deletes``)."""
        return self.deletes

    @property
    def total_transactions(self) -> int:
        """Delta commits made through this handle (``commits``)."""
        return self.commits

    @property
    def total_errors(self) -> int:
        """Failed queries, writes and admin calls (``errors``); each failed call once."""
        return self.errors


@dataclass(frozen=True)
class Percentiles:
    """Latency figures of one operation, in milliseconds, over its most recent calls.

    Attributes:
        count: calls measured since the handle was opened (the percentiles cover at
            most the last :data:`posixlake._metrics.WINDOW` of them).
    """

    count: int
    p50: float
    p90: float
    p99: float
    max: float
