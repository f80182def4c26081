"""Delta table features that tables written by Spark, Databricks and delta-rs use.

What a reader or writer of ours must do about each:

- **deletion vectors**: delta-rs gives a keep-mask per file (``DeltaTable.deletion_vectors``);
  readers that read Parquet files themselves drop the deleted row indexes.
- **column mapping** (``name`` / ``id``): data files and partition values use *physical*
  column names; :func:`physical_schema` gives them, nested fields included.
- **INT96 timestamps** (Spark's default for a long time): DataFusion reads them as
  nanoseconds and silently wraps values outside 1677-2262 (9999-12-31 reads as
  1816-03-30). Queries coerce INT96 to microseconds (:data:`QUERY_CONFIG`); delta-rs'
  own DML cannot be told to, so :func:`int96_out_of_range` finds the files it would
  corrupt, and writes refuse them.
- writer features delta-rs does not support (``identityColumns``...): delta-rs refuses
  the commit with ``Unsupported table features required``; :func:`unsupported_feature`
  turns that into :class:`UnsupportedTableFeature` instead of a commit-conflict retry loop.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from posixlake.errors import UnsupportedTableFeature

__all__ = [
    "APPEND_ONLY",
    "DELTA_RS_WRITER_FEATURES",
    "QUERY_CONFIG",
    "check_writable",
    "column_mapping_mode",
    "deleted_rows",
    "int96_out_of_range",
    "physical_schema",
    "physical_write_schema",
    "to_logical",
    "to_physical",
    "unsupported_feature",
]

#: DataFusion session settings for every query: INT96 read as microseconds, never wrapped.
QUERY_CONFIG: Final = {"datafusion.execution.parquet.coerce_int96": "us"}
PHYSICAL_NAME_KEY: Final = "delta.columnMapping.physicalName"
COLUMN_ID_KEY: Final = "delta.columnMapping.id"
_UNSUPPORTED: Final = re.compile(
    r"unsupported (?:table|reader|writer) features?(?: required)?:?\s*\[?([^\]\n]*)\]?", re.I
)
# nanoseconds since the epoch fit in int64 only between these instants
_NS_MIN: Final = datetime(1677, 9, 21, 0, 12, 44, tzinfo=UTC)
_NS_MAX: Final = datetime(2262, 4, 11, 23, 47, 16, tzinfo=UTC)


#: delta-rs' names of table features whose protocol names are not just lower camel case
_PROTOCOL_NAMES: Final = {"ClusteredTable": "clustering", "V2Checkpoint": "v2Checkpoint"}


def _camel(name: str) -> str:
    """Return a delta-rs feature name (``IdentityColumns``, ``Unknown("collations")``) in
    the protocol's spelling."""
    name = name.strip().strip("'\"")
    unknown = re.fullmatch(r"Unknown\(\s*\"?([^\")]*)\"?\s*\)", name)
    if unknown is not None:  # a name delta-rs does not know is the protocol's own
        return unknown.group(1)
    return _PROTOCOL_NAMES.get(name) or name[:1].lower() + name[1:]


#: the writer features delta-rs (1.6) writes tables with, as the protocol spells them
#: (each tried: every other listed feature makes delta-rs refuse any commit)
DELTA_RS_WRITER_FEATURES: Final = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "variantType",
        "variantType-preview",
    }
)
APPEND_ONLY: Final = "delta.appendOnly"


def check_writable(
    configuration: Mapping[str, str | None],
    writer_features: Sequence[str] | None,
    *,
    what: str,
    rewrites: bool,
) -> None:
    """Refuse, before any work, a write the table's protocol or properties forbid.

    Args:
        configuration: the table properties.
        writer_features: the protocol's writer features (None for a legacy protocol).
        what: the operation, for the message.
        rewrites: the write removes or changes rows (UPDATE, DELETE, MERGE that matches).

    Raises:
        UnsupportedTableFeature: a writer feature delta-rs cannot write (by its protocol
            name: ``clustering``, ``identityColumns``...), or ``delta.appendOnly=true``
            and ``rewrites`` (feature ``appendOnly``).
    """
    missing = tuple(f for f in writer_features or () if f not in DELTA_RS_WRITER_FEATURES)
    if missing:
        raise UnsupportedTableFeature(
            f"{what}: the table uses the Delta table feature(s) {', '.join(missing)}, which "
            "delta-rs (and so posixlake) cannot write; read it, or write it with an engine "
            "that supports them",
            missing,
        )
    if rewrites and (configuration.get(APPEND_ONLY) or "").strip().lower() == "true":
        raise UnsupportedTableFeature(
            f"{what}: the table is append-only ({APPEND_ONLY}=true): rows can be inserted, "
            f"not updated or deleted. To change rows, set {APPEND_ONLY}=false first (e.g. "
            f"deltalake.DeltaTable(path).alter.set_table_properties({{'{APPEND_ONLY}': 'false'}}))",
            ("appendOnly",),
        )


def unsupported_feature(text: str, *, what: str) -> UnsupportedTableFeature | None:
    """Return the error for a delta-rs message refusing table features, or None."""
    low = text.lower()
    if (
        "column mapping is not supported for write operation" in low
        or "schema evolution on column-mapped tables is not yet supported" in low
    ):
        return UnsupportedTableFeature(
            f"{what}: the table uses the Delta table feature columnMapping, which delta-rs "
            f"does not support for this operation: {text.splitlines()[0]}",
            ("columnMapping",),
        )
    if "append-only" in low or "append only" in low:
        return UnsupportedTableFeature(
            f"{what}: the table is append-only ({APPEND_ONLY}=true): rows can be inserted, "
            f"not updated or deleted: {text.splitlines()[0]}",
            ("appendOnly",),
        )
    found = _UNSUPPORTED.search(text)
    if found is None:
        return None
    names = tuple(_camel(n) for n in found.group(1).split(",") if n.strip())
    shown = ", ".join(names) or "a table feature"
    return UnsupportedTableFeature(
        f"{what}: the table uses the Delta table feature(s) {shown}, which delta-rs (and so "
        f"posixlake) cannot write; read it, or write it with an engine that supports them",
        names,
    )


def column_mapping_mode(configuration: Mapping[str, str | None]) -> str:
    """Return the column mapping mode: ``none``, ``name`` or ``id``."""
    return (configuration.get("delta.columnMapping.mode") or "none").lower()


# -- column mapping ---------------------------------------------------------------------


def _physical_type(t: pa.DataType, raw: Any, ids: bool = False) -> pa.DataType:
    """Return ``t`` with the physical names of the Delta type JSON ``raw`` (nested fields)."""
    if isinstance(raw, dict) and raw.get("type") == "struct" and pa.types.is_struct(t):
        return pa.struct(
            [_physical_field(t.field(i), raw["fields"][i], ids) for i in range(t.num_fields)]
        )
    if isinstance(raw, dict) and raw.get("type") == "array" and pa.types.is_list(t):
        return pa.list_(
            pa.field(
                t.value_field.name,
                _physical_type(t.value_type, raw.get("elementType"), ids),
                t.value_field.nullable,
            )
        )
    if isinstance(raw, dict) and raw.get("type") == "map" and pa.types.is_map(t):
        return pa.map_(
            _physical_type(t.key_type, raw.get("keyType"), ids),
            pa.field(
                t.item_field.name,
                _physical_type(t.item_type, raw.get("valueType"), ids),
                t.item_field.nullable,
            ),
        )
    return t


def _physical_field(f: pa.Field, raw: Mapping[str, Any], ids: bool = False) -> pa.Field:
    meta = raw.get("metadata") or {}
    name = str(meta.get(PHYSICAL_NAME_KEY) or f.name)
    field_id = meta.get(COLUMN_ID_KEY)
    extra = {b"PARQUET:field_id": str(field_id).encode()} if ids and field_id is not None else None
    return pa.field(name, _physical_type(f.type, raw.get("type"), ids), f.nullable, extra)


def physical_schema(delta_schema_json: str, schema: pa.Schema) -> pa.Schema | None:
    """Return ``schema`` with physical column names, or None when no name differs.

    Args:
        delta_schema_json: the Delta schema (with column mapping metadata).
        schema: the logical Arrow schema of the same columns, in the same order.
    """
    raw = json.loads(delta_schema_json)
    fields = [_physical_field(f, r) for f, r in zip(schema, raw["fields"], strict=True)]
    out = pa.schema(fields)
    return None if out.names == schema.names and out.equals(schema) else out


def physical_write_schema(delta_schema_json: str, schema: pa.Schema) -> pa.Schema:
    """Return ``schema`` as a writer of a column-mapped table stores it in Parquet.

    Physical names at every level, and each field's column mapping id as its Parquet
    field id (``PARQUET:field_id``), as Delta writers do (readers in ``id`` mode match
    columns by it).

    Args:
        delta_schema_json: the Delta schema (with column mapping metadata).
        schema: the logical Arrow schema of the same columns, in the same order.
    """
    raw = json.loads(delta_schema_json)
    return pa.schema(
        [_physical_field(f, r, True) for f, r in zip(schema, raw["fields"], strict=True)]
    )


def to_physical(table: pa.Table, physical: Mapping[str, pa.Field]) -> pa.Table:
    """Rename a logically named table's columns (nested fields too) to ``physical``.

    Args:
        physical: the physical field of each logical column name of ``table``.
    """
    fields = [physical[name] for name in table.column_names]
    arrays = [to_logical(table.column(i).combine_chunks(), f.type) for i, f in enumerate(fields)]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def to_logical(arr: pa.Array, logical: pa.DataType) -> pa.Array:
    """Rename the nested fields of a physically named array to their logical names."""
    if pa.types.is_struct(logical) and pa.types.is_struct(arr.type):
        mask = arr.is_null() if arr.null_count else None
        children = [
            to_logical(arr.field(i), logical.field(i).type) for i in range(arr.type.num_fields)
        ]
        return pa.StructArray.from_arrays(
            children, fields=[logical.field(i) for i in range(logical.num_fields)], mask=mask
        )
    if pa.types.is_list(logical) and pa.types.is_list(arr.type):
        mask = arr.is_null() if arr.null_count else None
        offsets = arr.offsets
        start = int(offsets[0].as_py()) if len(offsets) else 0
        stop = int(offsets[-1].as_py()) if len(offsets) else 0
        values = to_logical(arr.values.slice(start, stop - start), logical.value_type)
        rebased = pc.subtract(offsets, start).cast(pa.int32())
        return pa.ListArray.from_arrays(rebased, values, type=logical, mask=mask)
    if pa.types.is_map(logical) and pa.types.is_map(arr.type):
        mask = arr.is_null() if arr.null_count else None
        offsets = arr.offsets
        start = int(offsets[0].as_py()) if len(offsets) else 0
        stop = int(offsets[-1].as_py()) if len(offsets) else 0
        rebased = pc.subtract(offsets, start).cast(pa.int32())
        return pa.MapArray.from_arrays(
            rebased,
            to_logical(arr.keys.slice(start, stop - start), logical.key_type),
            to_logical(arr.items.slice(start, stop - start), logical.item_type),
            type=logical,
            mask=mask,
        )
    return arr if arr.type.equals(logical) else arr.cast(logical)


# -- deletion vectors ---------------------------------------------------------------------


def deleted_rows(dt: Any, table_uri: str) -> dict[str, tuple[int, ...]]:
    """Return, per file with a deletion vector (decoded path relative to the root), the
    indexes of its deleted rows (delta-rs reads inline and file-stored vectors alike)."""
    reader = dt.deletion_vectors()
    table = pa.table(reader)
    out: dict[str, tuple[int, ...]] = {}
    if table.num_rows == 0:
        return out
    roots = _roots(table_uri)
    for path, keep in zip(
        table.column("filepath").to_pylist(),
        table.column("selection_vector").to_pylist(),
        strict=True,
    ):
        rel = _relative(str(path), roots)
        out[rel] = tuple(i for i, k in enumerate(keep) if not k)
    return out


def _roots(table_uri: str) -> list[str]:
    root = table_uri.rstrip("/")
    forms = [root]
    if root.startswith("file://"):
        forms.append(root[len("file://") :])
    elif root.startswith("/"):
        forms.extend(["file://" + root, "file:" + root])
    return [f + "/" for f in forms]


def _relative(path: str, roots: Sequence[str]) -> str:
    for root in roots:
        for candidate in (path, urllib.parse.unquote(path)):
            if candidate.startswith(root):
                return urllib.parse.unquote(candidate[len(root) :])
            quoted = urllib.parse.unquote(root)
            if candidate.startswith(quoted):
                return urllib.parse.unquote(candidate[len(quoted) :])
    return urllib.parse.unquote(path)


# -- INT96 timestamps ---------------------------------------------------------------------


def _filesystem(uri: str, storage_options: Mapping[str, str] | None) -> pafs.FileSystem:
    """Return a pyarrow file system rooted at the table."""
    from posixlake.storage import is_local, normalize_uri

    if is_local(uri):
        return pafs.SubTreeFileSystem(normalize_uri(uri), pafs.LocalFileSystem())
    from deltalake.fs import DeltaStorageHandler

    return pafs.PyFileSystem(DeltaStorageHandler(uri, dict(storage_options or {})))


_INT96_CACHE: dict[tuple[str, str], bool] = {}
_INT96_LOCK = threading.Lock()


def _file_has_wrapping_int96(fs: Any, path: str) -> bool:
    with fs.open_input_file(path) as handle:
        pf = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
        columns = [
            pf.schema.column(i).path.split(".")[0]
            for i in range(pf.metadata.num_columns)
            if pf.schema.column(i).physical_type == "INT96"
        ]
        if not columns:
            return False
        table = pf.read(columns=sorted(set(columns)), use_threads=False)
    for col in table.columns:
        if not pa.types.is_timestamp(col.type) or col.null_count == len(col):
            continue
        typed = col.cast(pa.timestamp("us", tz="UTC"))
        lo = pc.min(typed).as_py()
        hi = pc.max(typed).as_py()
        if lo is not None and (lo < _NS_MIN or hi > _NS_MAX):
            return True
    return False


def int96_out_of_range(
    uri: str, storage_options: Mapping[str, str] | None, schema: pa.Schema, paths: Sequence[str]
) -> list[str]:
    """Return the files among ``paths`` holding INT96 timestamps outside the nanosecond range.

    Only tables with timestamp columns are looked at; each file's answer is cached
    (files never change).
    """
    if not any(pa.types.is_timestamp(f.type) for f in schema):
        return []
    fs = None
    out: list[str] = []
    for path in paths:
        key = (uri, path)
        with _INT96_LOCK:
            known = _INT96_CACHE.get(key)
        if known is None:
            if fs is None:
                fs = _filesystem(uri, storage_options)
            known = _file_has_wrapping_int96(fs, path)
            with _INT96_LOCK:
                _INT96_CACHE[key] = known
        if known:
            out.append(path)
    return out


# -- what our own file-level commits (the Spark engine's) cannot honour -------------------


def file_commit_blockers(
    configuration: Mapping[str, str | None],
    schema_json: str,
    *,
    rewrites: bool,
    physical_names: bool = False,
) -> tuple[str, ...]:
    """Return the table features that a commit of files we wrote ourselves would break.

    Such commits (:func:`posixlake.delta.commit_files`) add plain Parquet files (with
    logical column names, unless written with physical ones) and no value checks, and remove files without their deletion
    vector descriptors. delta-rs' own writers handle all of these.

    Args:
        configuration: the table properties.
        schema_json: the Delta schema JSON (generation expressions live in its metadata).
        rewrites: the commit removes rows (DELETE / UPDATE / MERGE): a change data feed
            would need change files too.
        physical_names: the files use the physical column names and field ids of a
            column-mapped table (:func:`physical_write_schema`): fine for appends.
    """
    found: list[str] = []
    if column_mapping_mode(configuration) != "none" and (rewrites or not physical_names):
        found.append("columnMapping")
    if rewrites and (configuration.get("delta.enableChangeDataFeed") or "").lower() == "true":
        found.append("changeDataFeed")
    if any(k.startswith("delta.constraints.") for k in configuration):
        found.append("checkConstraints")
    if "delta.generationExpression" in schema_json:
        found.append("generatedColumns")
    if "delta.identity." in schema_json:
        found.append("identityColumns")
    return tuple(found)
