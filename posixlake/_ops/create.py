"""Creating a table from files: CSV (types inferred over the whole input) or Parquet.

Also the storage check every create and open makes first (a bucket, a container, a
local directory).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from posixlake._convert import conform
from posixlake._merge import duplicate_keys
from posixlake._ops.core import StorageArg
from posixlake.delta import DeltaLog
from posixlake.engines import resolve_engine
from posixlake.errors import InvalidOperation, IoError, NotFound, SchemaError, TableExists
from posixlake.storage import normalize_uri, storage_options_for
from posixlake.types import Schema, delta_schema

if TYPE_CHECKING:
    from posixlake.database import DatabaseOps

__all__ = ["create_from_files", "prepare_storage"]


def create_from_files(
    cls: type[DatabaseOps],
    db_path: str | os.PathLike[str],
    paths: list[str],
    fmt: Literal["csv", "parquet"],
    primary_key: str | Sequence[str] | None,
    partition_by: Sequence[str] | None,
    options: dict[str, Any],
) -> DatabaseOps:
    """Create a table at ``db_path`` from CSV or Parquet files (see ``create_from_csv``).

    Rows in memory (the local engine reads the files) are appended in one commit after
    the create; an engine that writes the files itself (Spark) stages them first and
    commits them once the table exists, removing them on any failure.
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
    uri = normalize_uri(db_path)
    if DeltaLog.exists(uri, storage_options_for(uri, options.get("storage"))):
        raise TableExists(f"a Delta table already exists at {uri}")
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
            with db._write(operation):
                outcome = staged.commit(db._log, metadata=db._metadata(operation))
            db._counters.bump(inserts=1, rows_written=outcome.rows)
        except BaseException:
            staged.discard()
            raise
        return db
    arrow = delta_schema(data.schema)
    keys = Schema.from_arrow(arrow, primary_key=primary_key).key_columns
    if keys:
        arrow = pa.schema([f.with_nullable(False) if f.name in keys else f for f in arrow])
    data = conform(data, arrow)
    dups = duplicate_keys(data, keys) if keys else []
    if dups:
        raise SchemaError(f"primary key {keys} is not unique in the input: {dups[:5]}")
    db = cls.create(
        uri, arrow, engine=eng, primary_key=primary_key, partition_by=partition_by, **options
    )
    if data.num_rows:
        db._append(data, operation="CREATE FROM " + fmt.upper())
    return db


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
