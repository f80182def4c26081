"""Creating a table from files: CSV (types inferred over the whole input, or given) or Parquet.

Also the storage check every create and open makes first (a bucket, a container, a
local directory).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, Self, TypeVar

import pyarrow as pa

from posixlake._convert import conform
from posixlake._merge import duplicate_keys
from posixlake._ops.core import StorageArg, Table
from posixlake.delta import DeltaLog
from posixlake.engines import Engine, resolve_engine
from posixlake.errors import (
    InvalidOperation,
    IoError,
    NotFound,
    SchemaError,
    SerializationError,
    TableExists,
)
from posixlake.storage import storage_options_for, table_uri
from posixlake.types import Schema, delta_schema, parse_type

__all__ = ["NewTable", "create_from_files", "prepare_storage", "read_typed_csv"]


class NewTable(Protocol):
    """The handle class a table is created for (``DatabaseOps``): what this module uses."""

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> Self: ...

    @property
    def _table(self) -> Table: ...

    def _append(self, table: pa.Table, *, operation: str) -> int | None: ...


_New = TypeVar("_New", bound=NewTable)


def create_from_files(
    cls: type[_New],
    db_path: str | os.PathLike[str],
    paths: list[str],
    fmt: Literal["csv", "parquet"],
    primary_key: str | Sequence[str] | None,
    partition_by: Sequence[str] | None,
    options: dict[str, Any],
    *,
    types: Mapping[str, Any] | None = None,
    schema: Any = None,
) -> _New:
    """Create a table at ``db_path`` from CSV or Parquet files (see ``create_from_csv``).

    Rows in memory (the local engine reads the files) are appended in one commit after
    the create; an engine that writes the files itself (Spark) stages them first and
    commits them once the table exists, removing them on any failure. CSV with ``types``
    or ``schema`` is read in-process by the codec on either engine (see
    :func:`read_typed_csv`).
    """
    csv_options = options.pop("csv_options", None)
    if csv_options is not None and fmt == "csv":
        import tempfile

        from posixlake.csvcodec import CsvOptions, write_canonical_files

        dialect = CsvOptions.coerce(csv_options)
        if not dialect.is_default:  # rewritten as posixlake's CSV, then read as usual
            with tempfile.TemporaryDirectory(prefix="posixlake-csv-") as tmp:
                try:
                    files = write_canonical_files(paths, dialect, tmp)
                except OSError as err:
                    raise IoError(f"cannot read CSV: {err}") from err
                return create_from_files(
                    cls, db_path, files, fmt, primary_key, partition_by, options
                )
    eng = resolve_engine(
        options.pop("engine", None), master=options.get("master"), spark=options.get("spark")
    )
    uri = table_uri(db_path)
    if DeltaLog.exists(uri, storage_options_for(uri, options.get("storage"))):
        raise TableExists(f"a Delta table already exists at {uri}")
    if fmt == "csv" and len(paths) > 1 and not types and schema is None:
        # one inference over every file: per-file types that an engine unifies could
        # round a value (an Int64 file and a Float64 one); read in-process, as typed
        # imports are
        from posixlake.csvcodec import CsvFormatError, read_csv_infer

        try:
            data = read_csv_infer(list(paths))
        except CsvFormatError as err:
            raise SerializationError(str(err)) from err
        except OSError as err:
            raise IoError(f"cannot read CSV: {err}") from err
        return _create_with_rows(
            cls, uri, data.schema, data, eng, primary_key, partition_by, options, fmt
        )
    if fmt == "csv" and (types or schema is not None):
        declared, data, schema_key = read_typed_csv(paths, types=types, schema=schema)
        if primary_key is None:
            primary_key = schema_key
        return _create_with_rows(
            cls, uri, declared, data, eng, primary_key, partition_by, options, fmt
        )
    if types or schema is not None:
        raise InvalidOperation("types= and schema= apply to CSV files only")
    data = eng.read_files(paths, fmt=fmt, schema=None)
    if data is None:
        # the engine (Spark) writes the files itself: staged first, committed once the
        # table exists; any failure removes the staged files
        stage = getattr(eng, "stage_files", None)
        if stage is None:
            raise InvalidOperation(f"engine {eng.name} cannot create a table from files")
        staged = stage(
            paths,
            fmt=fmt,
            uri=uri,
            storage_options=storage_options_for(uri, options.get("storage")),
            partition_by=tuple(partition_by or ()),
        )
        try:
            arrow = delta_schema(staged.schema)
            keys = Schema.from_arrow(arrow, primary_key=primary_key).key_columns
            if keys:
                arrow = pa.schema([f.with_nullable(False) if f.name in keys else f for f in arrow])
                staged.check_keys(keys)
            db = cls.create(
                uri,
                arrow,
                engine=eng,
                primary_key=primary_key,
                partition_by=partition_by,
                **options,
            )
            operation = "CREATE FROM " + fmt.upper()
            table = db._table
            with table.write(operation):
                outcome = staged.commit(table.log, metadata=table.metadata(operation))
            table.counters.bump(inserts=1, rows_written=outcome.rows)
        except BaseException:
            staged.discard()
            raise
        return db
    return _create_with_rows(
        cls, uri, delta_schema(data.schema), data, eng, primary_key, partition_by, options, fmt
    )


def _create_with_rows(
    cls: type[_New],
    uri: str,
    declared: pa.Schema,
    data: pa.Table,
    eng: Engine,
    primary_key: str | Sequence[str] | None,
    partition_by: Sequence[str] | None,
    options: dict[str, Any],
    fmt: str,
) -> _New:
    """Create the table with ``declared`` (key columns made NOT NULL) and append ``data``."""
    keys = Schema.from_arrow(declared, primary_key=primary_key).key_columns
    if keys:
        declared = pa.schema([f.with_nullable(False) if f.name in keys else f for f in declared])
    data = conform(data, delta_schema(declared))
    dups = duplicate_keys(data, keys) if keys else []
    if dups:
        raise SchemaError(f"primary key {keys} is not unique in the input: {dups[:5]}")
    db = cls.create(
        uri, declared, engine=eng, primary_key=primary_key, partition_by=partition_by, **options
    )
    if data.num_rows:
        db._append(data, operation="CREATE FROM " + fmt.upper())
    return db


def read_typed_csv(
    paths: Sequence[str], *, types: Mapping[str, Any] | None, schema: Any
) -> tuple[pa.Schema, pa.Table, list[str] | None]:
    """Read CSV files whose column types are (partly) given, in-process.

    ``types`` maps column names to types (type strings such as ``"String"`` or
    ``"Decimal128(10,2)"``, or pyarrow types); the other columns are inferred. ``schema``
    (anything :meth:`Schema.coerce` takes) gives every column: the CSV header may list them
    in any order, a column the header lacks is NULL (it must be nullable), a column not in
    the schema is an error. Both together: ``types`` overrides the schema's type.

    Returns:
        The declared schema (types as given: ``UInt8`` stays ``UInt8``), the rows, and the
        schema's primary key (None without one).

    Raises:
        SerializationError: malformed CSV, or a value that does not fit its type (the
            message names the file, line, column and value). SchemaError: an unknown
            type or column. IoError: a file cannot be read.
    """
    from posixlake.csvcodec import CsvFormatError, read_csv_infer

    fields: dict[str, pa.Field[Any]] = {}
    key: list[str] | None = None
    if schema is not None:
        sch = Schema.coerce(schema)
        key = sch.key_columns or None
        fields = {f.name: f for f in sch.to_arrow()}
    for name, spec in (types or {}).items():
        if schema is not None and name not in fields:
            raise SchemaError(f"types= names column {name!r}, which is not in the schema")
        nullable = fields[name].nullable if name in fields else True
        fields[name] = pa.field(name, parse_type(spec), nullable)
    try:
        data = read_csv_infer(list(paths), types=fields, strict_columns=schema is not None)
    except CsvFormatError as err:
        raise SerializationError(str(err)) from err
    except OSError as err:
        raise IoError(f"cannot read CSV: {err}") from err
    declared = pa.schema([fields.get(f.name, f) for f in data.schema])
    return declared, data, key


def prepare_storage(
    uri: str, storage: StorageArg, *, create: bool, create_bucket: bool | None = None
) -> None:
    """Let the storage layer check (and with ``create``, make) a bucket or container."""
    if "://" in uri and not uri.startswith("file://"):
        from posixlake import storage as storage_mod

        storage_mod.prepare(uri, storage, create=create, create_bucket=create_bucket)
    elif not create and not os.path.exists(uri):
        raise NotFound(f"no table at {uri}: the path does not exist")
    elif os.path.exists(uri) and not os.path.isdir(uri):
        raise (IoError if create else NotFound)(f"{uri} is a file, not a table directory")
