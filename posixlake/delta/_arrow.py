"""Arrow types as posixlake hands them on: plain (not large/view) strings, binaries and
lists, with any offsets rebased; and which timestamps fit in nanoseconds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["plain_schema", "plain_types"]

_NS_LOW: Final = datetime(1677, 9, 22, tzinfo=UTC)
_NS_HIGH: Final = datetime(2262, 4, 10, tzinfo=UTC)


def _plain_type(t: pa.DataType) -> pa.DataType:
    """``t`` with view and large types, at every level, in their plain forms."""
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_list_view(t) or pa.types.is_large_list(t) or pa.types.is_large_list_view(t):
        return pa.list_(pa.field("element", _plain_type(t.value_type), t.value_field.nullable))
    if pa.types.is_list(t):
        return pa.list_(
            pa.field(t.value_field.name, _plain_type(t.value_type), t.value_field.nullable)
        )
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain_type(f.type), f.nullable) for f in t])
    if pa.types.is_map(t):
        return pa.map_(
            _plain_type(t.key_type),
            pa.field("value", _plain_type(t.item_type), t.item_field.nullable),
        )
    return t


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with view and large types in their plain forms (``plain_types``' schema).

    Built from the types alone: an empty table would do, but pyarrow imports pandas (a
    quarter of a second) the first time it builds an empty array.
    """
    target = pa.schema(
        [pa.field(f.name, _plain_type(f.type), f.nullable, f.metadata) for f in schema]
    )
    return schema if target.equals(schema) else target


def plain_types(table: pa.Table) -> pa.Table:
    """Cast view and large types that DataFusion returns to their plain forms."""
    target = plain_schema(table.schema)
    if target.equals(table.schema):
        return table
    columns = [
        col
        if col.type.equals(f.type)
        else pa.chunked_array([_plain_array(c, f.type) for c in col.chunks], f.type)
        for col, f in zip(table.columns, target, strict=True)
    ]
    return pa.Table.from_arrays(columns, schema=target)


def _plain_array(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Convert ``arr`` to ``target``, rebuilding nested arrays level by level.

    A plain ``cast`` of a nested array re-checks nullability, and a NULL struct (or list)
    whose NOT NULL child holds a null slot under it would fail for no reason; rebuilding
    keeps each level's validity as it is.
    """
    if arr.type.equals(target):
        return arr
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(target):
        children = [
            _plain_array(arr.field(i), target.field(i).type) for i in range(target.num_fields)
        ]
        fields = [target.field(i) for i in range(target.num_fields)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    if pa.types.is_map(target):
        if not pa.types.is_map(arr.type):
            return arr.cast(target)
        offsets, start, stop = _rebased_offsets(arr)
        return pa.MapArray.from_arrays(
            offsets,
            _plain_array(arr.keys.slice(start, stop - start), target.key_type),
            _plain_array(arr.items.slice(start, stop - start), target.item_type),
            type=target,
            mask=mask,
        )
    if pa.types.is_list(target):
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            return pa.array(arr.to_pylist(), type=target)  # list views: rare, by value
        offsets, start, stop = _rebased_offsets(arr)
        return pa.ListArray.from_arrays(
            offsets,
            _plain_array(arr.values.slice(start, stop - start), target.value_type),
            type=target,
            mask=mask,
        )
    return arr.cast(target)


def _rebased_offsets(arr: pa.Array) -> tuple[pa.Array, int, int]:
    """Return a list/map array's offsets as a new int32 array starting at 0, and the
    range of its child values they cover (a sliced array's offsets start anywhere)."""
    offsets = arr.offsets
    start = int(offsets[0].as_py()) if len(offsets) else 0
    stop = int(offsets[-1].as_py()) if len(offsets) else 0
    return pc.subtract(offsets, start).cast(pa.int32()), start, stop


def _has_timestamps(schema: pa.Schema) -> bool:
    """Return whether any column (nested ones included) is a timestamp."""

    def walk(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return True
        if pa.types.is_struct(t):
            return any(walk(t.field(i).type) for i in range(t.num_fields))
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return walk(t.value_type)
        if pa.types.is_map(t):
            return walk(t.key_type) or walk(t.item_type)
        return False

    return any(walk(f.type) for f in schema)


def _in_ns_range(value: Any) -> bool:
    """Return whether a statistics timestamp lies where nanoseconds since 1970 fit."""
    if not isinstance(value, datetime):
        return False
    when = value if value.tzinfo else value.replace(tzinfo=UTC)
    return _NS_LOW < when < _NS_HIGH
