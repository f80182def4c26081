"""The local engine: delta-rs' own DataFusion queries and DML, no JVM.

It is the low-latency path, and what a machine without Java uses.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from posixlake._convert import conform
from posixlake.delta import DeltaLog
from posixlake.engines.base import FileFormat, MergeOutcome, WriteOutcome
from posixlake.errors import IoError, NotFound, PosixLakeError, SerializationError

__all__ = ["LocalEngine", "expand_paths", "format_of", "source_paths"]


def expand_paths(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, suffix: str
) -> list[str]:
    """Expand a file, a directory (its ``*suffix`` files, recursively) or a glob to sorted paths.

    Raises:
        NotFound: nothing matches.
    """
    items = [source] if isinstance(source, str | os.PathLike) else list(source)
    out: list[str] = []
    for item in items:
        path = os.fspath(item)
        if os.path.isdir(path):
            found = sorted(
                os.path.join(root, f)
                for root, dirs, files in os.walk(path)
                for f in files
                if f.endswith(suffix)
                and not f.startswith((".", "_"))
                and not any(
                    d.startswith((".", "_"))
                    for d in os.path.relpath(root, path).split(os.sep)
                    if d != "."
                )
            )
            out.extend(found)
        elif any(ch in path for ch in "*?["):
            out.extend(sorted(glob.glob(path, recursive=True)))
        elif os.path.isfile(path):
            out.append(path)
        else:
            raise NotFound(f"no such file or directory: {path}")
    if not out:
        raise NotFound(f"no {suffix} files found in {source!r}")
    return out


def source_paths(data: object) -> list[str] | None:
    """Return the file paths ``data`` names, or None when it is not a path (or list of them)."""
    items = list(data) if isinstance(data, list | tuple) else [data]
    if not items:
        return None
    out: list[str] = []
    for item in items:
        if isinstance(item, os.PathLike):
            out.append(os.fspath(item))
        elif isinstance(item, str) and "\n" not in item and item.strip() == item and item:
            if not (item.lower().endswith((".csv", ".parquet")) or os.path.isdir(item)):
                return None
            out.append(item)
        else:
            return None
    return out


def format_of(paths: Sequence[str]) -> tuple[FileFormat, list[str]]:
    """Expand paths and tell their format by suffix (directories: Parquet, else CSV).

    Raises:
        NotFound: nothing matches. SerializationError: a mix of CSV and Parquet.
    """
    lowered = [p.lower() for p in paths]
    if all(p.endswith(".csv") for p in lowered):
        return "csv", expand_paths(list(paths), suffix=".csv")
    if all(p.endswith(".parquet") for p in lowered):
        return "parquet", expand_paths(list(paths), suffix=".parquet")
    if all(os.path.isdir(p) for p in paths):
        try:
            return "parquet", expand_paths(list(paths), suffix=".parquet")
        except PosixLakeError:
            return "csv", expand_paths(list(paths), suffix=".csv")
    raise SerializationError(
        f"insert: give CSV files or Parquet files, not a mix: {list(paths)[:5]}"
    )


class LocalEngine:
    """Engine on delta-rs + DataFusion in this process."""

    name = "local"

    def query(self, log: DeltaLog, sql: str) -> pa.Table:
        """Run SQL with delta-rs' DataFusion over the loaded snapshot."""
        return log.query(sql)

    def delete(
        self, log: DeltaLog, predicate: str | None, *, metadata: Mapping[str, Any]
    ) -> WriteOutcome:
        """Delete through delta-rs (copy-on-write of the touched files)."""
        rows, version = log.delete(predicate, metadata=metadata)
        return WriteOutcome(rows, version)

    def update(
        self,
        log: DeltaLog,
        predicate: str | None,
        updates: Mapping[str, str],
        *,
        metadata: Mapping[str, Any],
    ) -> WriteOutcome:
        """Update through delta-rs."""
        rows, version = log.update(predicate, updates, metadata=metadata)
        return WriteOutcome(rows, version)

    def merge(
        self, log: DeltaLog, source: pa.Table, key: Sequence[str], *, metadata: Mapping[str, Any]
    ) -> MergeOutcome:
        """Merge through delta-rs' MERGE (one commit)."""
        ins, upd, dele, version = log.merge_ops(source, key, metadata=metadata)
        return MergeOutcome(ins, upd, dele, version)

    def read_files(
        self, paths: Sequence[str], *, fmt: FileFormat, schema: pa.Schema | None
    ) -> pa.Table:
        """Read the files into Arrow: CSV with whole-file type inference, or Parquet."""
        if fmt == "csv":
            from posixlake.csvcodec import CsvFormatError, read_csv_infer

            tables = []
            for p in paths:
                try:
                    tables.append(read_csv_infer(p))
                except CsvFormatError as err:
                    raise SerializationError(f"{p}: {err}") from err
                except OSError as err:
                    raise IoError(f"cannot read {p}: {err}") from err
            if schema is not None:
                return pa.concat_tables([conform(t, schema) for t in tables])
            return _unify(tables)
        try:
            tables = [pq.read_table(p) for p in paths]
        except (OSError, pa.ArrowInvalid) as err:
            raise SerializationError(f"cannot read Parquet: {err}") from err
        if schema is not None:
            return pa.concat_tables([conform(t, schema) for t in tables])
        return _unify(tables)

    def append_files(self, log: DeltaLog, paths: Sequence[str], *, fmt: FileFormat) -> WriteOutcome:
        """Read the files and append them in one commit."""
        table = self.read_files(paths, fmt=fmt, schema=log.arrow_schema)
        if table.num_rows == 0:
            return WriteOutcome(0, None)
        return WriteOutcome(table.num_rows, log.append(table))

    def close(self) -> None:
        """Nothing to release."""


def _unify(tables: list[pa.Table]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise SerializationError(f"the files have incompatible schemas: {err}") from err
