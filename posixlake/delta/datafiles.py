"""Reading one Delta data file into rows of the table's logical schema.

Plain pyarrow, no engine: the Spark engine runs it inside its tasks (pickled into
``mapInArrow`` functions and its Python data source), and the change feed runs it in
process. Partition values come from the add action, column mapping renames physical
columns, deletion vectors drop rows, INT96 timestamps are read as microseconds.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from posixlake.delta._features import to_logical
from posixlake.delta._snapshot import DataFile, Snapshot
from posixlake.errors import IoError, NotFound

__all__ = ["BATCH_ROWS", "ReadSpec", "read_data_file"]

BATCH_ROWS: Final = 65_536
"""Rows per batch a reader yields."""


@dataclass(frozen=True)
class ReadSpec:
    """What a read task needs: the table location, its schema and the files to read.

    Attributes:
        uri / storage_options: the table.
        schema: output schema (table columns in order; partition columns included).
        partition_columns: columns whose values come from ``files``' partition values.
        files: the files, by index.
        file_column: when set, an extra string column with each row's file path.
        physical_schema: with column mapping, ``schema`` with the names the files use.
    """

    uri: str
    storage_options: Mapping[str, str] | None
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    files: tuple[DataFile, ...]
    file_column: str | None = None
    physical_schema: pa.Schema | None = None

    @classmethod
    def of(cls, snap: Snapshot, files: Sequence[DataFile]) -> ReadSpec:
        """The spec to read ``files`` of the snapshot ``snap`` with its schema."""
        return cls(
            uri=snap.uri,
            storage_options=snap.storage_options,
            schema=snap.schema,
            partition_columns=snap.partition_columns,
            files=tuple(files),
            physical_schema=snap.physical_schema,
        )

    def stored_names(self) -> dict[str, str]:
        """Return the name each column has in the data files, by logical name."""
        if self.physical_schema is None:
            return {n: n for n in self.schema.names}
        return dict(zip(self.schema.names, self.physical_schema.names, strict=True))

    def output_schema(self) -> pa.Schema:
        """The schema of the batches :func:`read_data_file` yields."""
        if self.file_column is None:
            return self.schema
        return self.schema.append(pa.field(self.file_column, pa.string()))


def read_data_file(
    fs: pafs.FileSystem,
    spec: ReadSpec,
    data_file: DataFile,
    *,
    batch_rows: int = BATCH_ROWS,
    use_threads: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of one table file with exactly ``spec.output_schema()``.

    Columns missing from an older file are NULL; partition columns come from the file's
    partition values. Column mapping: columns are read by their physical names and
    renamed. Deletion vectors: the rows at ``data_file.deleted_rows`` (positions in the
    file) are dropped. INT96 timestamps are read as microseconds (never wrapped).
    ``use_threads`` decodes a batch's columns in parallel (Arrow's pool; off where the
    caller runs in a Spark task, which has its own cores).
    """
    out_schema = spec.output_schema()
    stored = spec.stored_names()
    try:
        handle = fs.open_input_file(data_file.path)
    except FileNotFoundError as err:
        raise NotFound(f"data file {data_file.path} of {spec.uri} is missing") from err
    except OSError as err:
        raise IoError(f"cannot open {data_file.path} of {spec.uri}: {err}") from err
    with handle:
        pf = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
        present = set(pf.schema_arrow.names)
        wanted = [
            stored[f.name]
            for f in spec.schema
            if f.name not in spec.partition_columns and stored[f.name] in present
        ]
        if pf.metadata.num_rows == 0:
            return
        deleted = pa.array(sorted(data_file.deleted_rows), pa.int64())
        offset = 0
        for batch in pf.iter_batches(
            batch_size=batch_rows, columns=wanted, use_threads=use_threads
        ):
            n = batch.num_rows
            if len(deleted):
                positions = pa.array(range(offset, offset + n), pa.int64())
                batch = batch.filter(pc.invert(pc.is_in(positions, value_set=deleted)))
            offset += n
            yield _assemble(batch, spec, data_file, out_schema, stored)


def _assemble(
    batch: pa.RecordBatch,
    spec: ReadSpec,
    data_file: DataFile,
    out_schema: pa.Schema,
    stored: Mapping[str, str],
) -> pa.RecordBatch:
    n = batch.num_rows
    names = batch.schema.names
    arrays: list[pa.Array] = []
    for f in spec.schema:
        if f.name in spec.partition_columns:
            value = data_file.partition_values.get(f.name)
            arrays.append(
                pa.array([value] * n, f.type) if value is not None else pa.nulls(n, f.type)
            )
        elif stored[f.name] in names:
            col = batch.column(names.index(stored[f.name]))
            arrays.append(col if col.type == f.type else to_logical(col, f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    if spec.file_column is not None:
        arrays.append(pa.array([data_file.path] * n, pa.string()))
    return pa.RecordBatch.from_arrays(arrays, schema=out_schema)
