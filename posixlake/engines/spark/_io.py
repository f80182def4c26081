"""File I/O that runs inside Spark tasks: read table files, write Parquet files.

Everything here is plain pyarrow and runs on executors (it is pickled into
``mapInArrow`` functions and the Python data source), so local, S3 and Azure tables work
without Hadoop connector jars: local tables use pyarrow's local file system, object
stores delta-rs' own object store (``deltalake.fs.DeltaStorageHandler``).

Writers put every file at the table root, as delta-rs, Spark's own Delta writer and the
original project do (scripts list data files there), named
``part-<n>-<operation tag>-<task>.snappy.parquet``: the tag (``spark<id>``) marks the
files of one operation, so that a failed operation, or failed task attempts, can be
cleaned up without touching other files. They split rows by partition values (taken
from the rows, never from directory names; the values live in the add actions) and
return, per file, what a Delta add action needs: the decoded relative path, the size,
the serialized partition values and statistics from the file's Parquet footer.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from posixlake._convert import conform, to_arrow
from posixlake.delta._commit import WrittenFile, file_stats
from posixlake.delta._decimal_parts import refuse_hive_null
from posixlake.delta._features import to_physical
from posixlake.delta._snapshot import serialize_partition_value
from posixlake.delta.datafiles import ReadSpec, read_data_file
from posixlake.errors import IoError, SchemaError, SerializationError
from posixlake.storage import table_filesystem
from posixlake.types import delta_schema

__all__ = [
    "FILE_ROW_SCHEMA",
    "PREFIX_PATTERN",
    "ReadSpec",
    "WriteSpec",
    "delete_prefix",
    "import_task",
    "read_data_file",
    "read_source_file",
    "table_filesystem",
    "write_tables",
]

logger = logging.getLogger(__name__)

PREFIX_PATTERN: Final = "spark{}"
"""An operation's tag in its file names (no ``-``: names split on it, see `_tagged`)."""
MAX_ROWS_PER_FILE: Final = 4_000_000
ROW_GROUP_ROWS: Final = 1_048_576

#: Spark DDL of the rows a write task returns, one per file it wrote.
FILE_ROW_SCHEMA: Final = (
    "path string, size bigint, partition_values string, num_records bigint, stats string, "
    "arrow_schema string"
)
_FILE_ROW_ARROW: Final = pa.schema(
    [
        ("path", pa.string()),
        ("size", pa.int64()),
        ("partition_values", pa.string()),
        ("num_records", pa.int64()),
        ("stats", pa.string()),
        ("arrow_schema", pa.string()),
    ]
)


def _tagged(name: str, tag: str) -> bool:
    """Return whether the file ``name`` was written by the operation tagged ``tag``."""
    parts = name.split("-")
    return len(parts) == 4 and parts[0] == "part" and parts[2] == tag and name.endswith(".parquet")


def data_file_name(counter: int, tag: str, task: str) -> str:
    """Return the name of a data file (at the table root) of operation ``tag``."""
    return f"part-{counter:05d}-{tag}-{task}.snappy.parquet"


def delete_prefix(uri: str, storage_options: Mapping[str, str] | None, prefix: str) -> None:
    """Delete every file the operation tagged ``prefix`` wrote (best effort, logged)."""
    delete_files(uri, storage_options, list_prefix(uri, storage_options, prefix))


def delete_files(uri: str, storage_options: Mapping[str, str] | None, paths: Iterable[str]) -> None:
    """Delete files by relative path (best effort, logged)."""
    fs = table_filesystem(uri, storage_options)
    for path in paths:
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass
        except OSError as err:
            logger.warning("could not remove %s/%s: %s", uri, path, err)


def list_prefix(uri: str, storage_options: Mapping[str, str] | None, prefix: str) -> list[str]:
    """List the files the operation tagged ``prefix`` wrote (relative paths, at the root).

    One listing of the table root (not recursive: ``_delta_log/`` is not visited).
    """
    fs = table_filesystem(uri, storage_options)
    try:
        infos = fs.get_file_info(pafs.FileSelector("", allow_not_found=True, recursive=False))
    except OSError as err:
        logger.warning("could not list %s: %s", uri, err)
        return []
    return [
        i.path
        for i in infos
        if i.type == pafs.FileType.File and _tagged(i.path.rsplit("/", 1)[-1], prefix)
    ]


# -- reading ------------------------------------------------------------------------------


def read_source_file(path: str, *, fmt: str, schema: pa.Schema | None) -> pa.Table:
    """Read a user's CSV or Parquet file (a local path) for an import or an insert.

    With ``schema`` None (a table create), CSV types are inferred over the whole file
    (:func:`posixlake.csvcodec.read_csv_infer`) and Parquet keeps its own types, both then
    stored as their Delta types; with a schema (an insert), the rows are converted to it
    exactly as an in-memory insert would be.

    Raises:
        SerializationError: malformed CSV or unreadable Parquet. SchemaError: rows that do
            not fit ``schema``. IoError: the file cannot be read.
    """
    if fmt == "csv":
        from posixlake.csvcodec import CsvFormatError, read_csv_infer

        try:
            if schema is None:
                table = read_csv_infer(path)
            else:
                with open(path, "rb") as fh:
                    raw = fh.read()
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise SerializationError(f"{path}: not UTF-8 text: {err}") from err
                return to_arrow(text, schema) if text.strip() else schema.empty_table()
        except CsvFormatError as err:
            raise SerializationError(f"{path}: {err}") from err
        except OSError as err:
            raise IoError(f"cannot read {path}: {err}") from err
    else:
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowInvalid) as err:
            raise SerializationError(f"cannot read Parquet {path}: {err}") from err
        if schema is not None:
            return conform(table, schema)
    return conform(table, delta_schema(table.schema))


# -- writing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteSpec:
    """What a write task needs.

    Attributes:
        uri / storage_options: the table.
        prefix: the operation's tag in the names of its files (``spark<id>``, no ``-``).
        schema: the table schema the rows are conformed to (partition columns included);
            None to keep each input's own (Delta-converted) schema, for imports whose
            schema is not known yet.
        partition_by: partition columns (not stored in the files).
        max_rows_per_file: rows per file before a new one is started.
        physical: for a column-mapped table, ``schema`` with the physical names and
            field ids the files store (see ``physical_write_schema``); None: the files
            use the logical names.
    """

    uri: str
    storage_options: Mapping[str, str] | None
    prefix: str
    schema: pa.Schema | None
    partition_by: tuple[str, ...] = ()
    max_rows_per_file: int = MAX_ROWS_PER_FILE
    physical: pa.Schema | None = None

    @classmethod
    def new(
        cls,
        uri: str,
        storage_options: Mapping[str, str] | None,
        schema: pa.Schema | None,
        partition_by: Sequence[str] = (),
    ) -> WriteSpec:
        """Return a spec with a fresh unique tag."""
        return cls(
            uri,
            storage_options,
            PREFIX_PATTERN.format(uuid.uuid4().hex),
            schema,
            tuple(partition_by),
        )


@dataclass
class _OpenFile:
    path: str
    stream: Any
    writer: pq.ParquetWriter
    schema: pa.Schema
    full_schema: pa.Schema
    values: dict[str, str | None]
    rows: int = 0


@dataclass
class _Writer:
    """Writes conformed tables into Parquet files split by partition values."""

    spec: WriteSpec
    fs: pafs.FileSystem
    task: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    open_files: dict[tuple[Any, ...], _OpenFile] = field(default_factory=dict)
    done: list[tuple[WrittenFile, pa.Schema]] = field(default_factory=list)
    counter: int = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        parts = list(self.spec.partition_by)
        missing = [c for c in parts if c not in table.schema.names]
        if missing:
            raise SchemaError(f"partition column(s) {missing} are not in the data")
        if not parts:
            self._write_group((), {}, table)
            return
        for c in parts:
            if pa.types.is_string(table.schema.field(c).type):
                refuse_hive_null(table.column(c), c, "write")
        marker = "__posixlake_row"
        indexed = table.select(parts).append_column(
            marker, pa.array(range(table.num_rows), pa.int64())
        )
        groups = indexed.group_by(parts, use_threads=False).aggregate([(marker, "list")])
        for i in range(groups.num_rows):
            key = tuple(groups.column(c)[i].as_py() for c in parts)
            rows = groups.column(marker + "_list")[i].values
            values = {
                c: serialize_partition_value(v, table.schema.field(c).type)
                for c, v in zip(parts, key, strict=True)
            }
            self._write_group(key, values, table.take(rows))

    def _write_group(
        self, key: tuple[Any, ...], values: dict[str, str | None], table: pa.Table
    ) -> None:
        data = table.drop_columns(list(self.spec.partition_by)) if self.spec.partition_by else table
        if self.spec.physical is not None and self.spec.schema is not None:
            names = dict(zip(self.spec.schema.names, self.spec.physical, strict=True))
            data = to_physical(data, names)
        start = 0
        while start < data.num_rows:
            handle = self.open_files.get(key)
            if handle is not None and handle.full_schema != table.schema:
                self._close(key)
                handle = None
            if handle is None:
                handle = self._open(key, values, data.schema, table.schema)
            room = self.spec.max_rows_per_file - handle.rows
            piece = data.slice(start, room)
            handle.writer.write_table(piece, row_group_size=ROW_GROUP_ROWS)
            handle.rows += piece.num_rows
            start += piece.num_rows
            if handle.rows >= self.spec.max_rows_per_file:
                self._close(key)

    def _open(
        self,
        key: tuple[Any, ...],
        values: dict[str, str | None],
        schema: pa.Schema,
        full_schema: pa.Schema,
    ) -> _OpenFile:
        self.counter += 1
        path = data_file_name(self.counter, self.spec.prefix, self.task)
        try:
            stream = self.fs.open_output_stream(path)
            writer = pq.ParquetWriter(
                stream,
                schema,
                compression="snappy",
                coerce_timestamps="us",
                allow_truncated_timestamps=False,
                write_statistics=True,
                store_schema=True,
            )
        except OSError as err:
            raise IoError(f"cannot write {self.spec.uri}/{path}: {err}") from err
        handle = _OpenFile(path, stream, writer, schema, full_schema, values)
        self.open_files[key] = handle
        return handle

    def _close(self, key: tuple[Any, ...]) -> None:
        handle = self.open_files.pop(key)
        try:
            handle.writer.close()
            size = handle.stream.tell()
            handle.stream.close()
        except OSError as err:
            raise IoError(f"cannot write {self.spec.uri}/{handle.path}: {err}") from err
        metadata = handle.writer.writer.metadata
        self.done.append(
            (
                WrittenFile(
                    path=handle.path,
                    size=int(size),
                    partition_values=handle.values,
                    num_records=handle.rows,
                    stats=file_stats(metadata, handle.schema),
                ),
                handle.full_schema,
            )
        )

    def close(self) -> list[tuple[WrittenFile, pa.Schema]]:
        for key in list(self.open_files):
            self._close(key)
        return self.done

    def abort(self) -> None:
        for handle in self.open_files.values():
            try:
                handle.writer.close()
                handle.stream.close()
            except OSError:
                pass
            with contextlib.suppress(OSError):
                self.fs.delete_file(handle.path)
        for written, _ in self.done:
            with contextlib.suppress(OSError):
                self.fs.delete_file(written.path)
        self.open_files.clear()
        self.done.clear()


def encode_schema(schema: pa.Schema) -> str:
    """Serialise an Arrow schema as base64 IPC text."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def decode_schema(text: str) -> pa.Schema:
    """Read a schema written by :func:`encode_schema`."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def write_tables(
    spec: WriteSpec, tables: Iterable[pa.Table]
) -> list[tuple[WrittenFile, pa.Schema]]:
    """Write tables (conformed to ``spec.schema`` when it is set) into new Parquet files.

    Returns:
        Each file written with the Arrow schema of the rows it holds (partition columns
        included). On an error the files written so far are removed and the error
        propagates.
    """
    fs = table_filesystem(spec.uri, spec.storage_options)
    writer = _Writer(spec, fs)
    try:
        for table in tables:
            if spec.schema is not None:
                table = conform(table, spec.schema)
            else:
                table = conform(table, delta_schema(table.schema))
            writer.write(table)
        return writer.close()
    except BaseException:
        writer.abort()
        raise


def file_rows(files: Sequence[tuple[WrittenFile, pa.Schema]]) -> pa.RecordBatch:
    """Return written files as one batch of :data:`FILE_ROW_SCHEMA` rows."""
    rows = [dict(f.to_row(), arrow_schema=encode_schema(s)) for f, s in files]
    return pa.RecordBatch.from_pylist(rows, schema=_FILE_ROW_ARROW)


def from_file_rows(rows: Iterable[Mapping[str, Any]]) -> list[tuple[WrittenFile, pa.Schema]]:
    """Rebuild written files from :data:`FILE_ROW_SCHEMA` rows."""
    return [(WrittenFile.from_row(r), decode_schema(r["arrow_schema"])) for r in rows]


def writer_task(spec: WriteSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Return a ``mapInArrow`` function writing its input rows and yielding file rows."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        tables = (pa.Table.from_batches([b]) for b in batches)
        yield file_rows(write_tables(spec, tables))

    return run


def import_task(
    spec: WriteSpec, paths: Sequence[str], *, fmt: str, schema: pa.Schema | None
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Return a ``mapInArrow`` function importing the source files whose indexes it receives.

    Each task reads its files (:func:`read_source_file`) and writes them under
    ``spec.prefix``. Besides one row per written file it yields, per input file, a row
    with an empty path and the input's (Delta-converted) schema, so that inputs without
    rows still contribute their columns to an inferred schema.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        inputs: list[pa.Schema] = []

        def tables() -> Iterator[pa.Table]:
            for batch in batches:
                for idx in batch.column(0).to_pylist():
                    table = read_source_file(paths[idx], fmt=fmt, schema=schema)
                    inputs.append(table.schema)
                    yield table

        written = write_tables(spec, tables())
        markers = [
            (WrittenFile(path="", size=0, partition_values={}, num_records=0, stats=""), s)
            for s in inputs
        ]
        yield file_rows([*written, *markers])

    return run


def check_schema_names(names: Sequence[str], schema: pa.Schema) -> None:
    """Refuse unknown or repeated columns, and missing NOT NULL columns, by name alone.

    Raises:
        SchemaError: naming the columns.
    """
    known = set(schema.names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SchemaError(
            f"unknown column(s) {', '.join(map(repr, unknown))}; the table has {', '.join(schema.names)}"
        )
    missing = [f.name for f in schema if not f.nullable and f.name not in names]
    if missing:
        raise SchemaError(f"missing value for non-nullable column(s) {missing}")
