"""Schema evolution: the columns an insert brings that the table lacks.

``insert(data, schema_mode="merge")`` adds the payload's new columns (nullable) in the
same commit as the rows; ``add_columns`` adds declared ones. Types of new columns come
from the payload (Arrow, pandas, polars keep theirs; Python values are inferred by
pyarrow) and are stored as their Delta types (see :func:`posixlake.types.delta_type`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from posixlake._convert import is_arrow_like
from posixlake.errors import SchemaError, SerializationError
from posixlake.types import Schema, delta_schema

__all__ = ["declared_fields", "evolved_schema", "new_fields"]


def _payload_schema(data: object) -> pa.Schema:
    """Return the Arrow schema pyarrow infers for a payload (its own types kept)."""
    if isinstance(data, str):
        text = data.strip()
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            try:
                data = [json.loads(line) for line in text.splitlines() if line.strip()]
            except json.JSONDecodeError as err:
                raise SerializationError(
                    "insert with schema_mode='merge' takes JSON text, rows, Arrow or data "
                    f"frames: {err}"
                ) from err
    try:
        if isinstance(data, pa.RecordBatch):
            return data.schema
        if isinstance(data, pa.Table):
            return data.schema
        if isinstance(data, Mapping):
            values = list(data.values())
            if values and all(isinstance(v, list | tuple) for v in values):
                return pa.Table.from_pydict({k: list(v) for k, v in data.items()}).schema
            return pa.Table.from_pylist([dict(data)]).schema
        if isinstance(data, list | tuple):
            return pa.Table.from_pylist([dict(r) for r in data]).schema
        if type(data).__module__.startswith("pandas"):
            return pa.Schema.from_pandas(data, preserve_index=False)
        if is_arrow_like(data):
            return pa.table(data).schema
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as err:
        raise SerializationError(f"cannot infer the types of the new columns: {err}") from err
    raise SerializationError(
        f"insert with schema_mode='merge' cannot infer columns of a {type(data).__name__}"
    )


def new_fields(data: object, schema: pa.Schema) -> list[pa.Field]:
    """Return the payload's columns that ``schema`` lacks, nullable, as Delta types.

    Raises:
        SchemaError: a new column has no type (only NULLs) or a type Delta cannot store.
    """
    inferred = _payload_schema(data)
    fresh = [f for f in inferred if f.name not in schema.names]
    untyped = [f.name for f in fresh if pa.types.is_null(f.type)]
    if untyped:
        raise SchemaError(
            f"new column(s) {untyped} hold only NULLs: their type is unknown; "
            "add them with add_columns first"
        )
    if not fresh:
        return []
    typed = delta_schema(pa.schema([f.with_nullable(True) for f in fresh]))
    return list(typed)


def evolved_schema(schema: pa.Schema, fields: Sequence[pa.Field]) -> pa.Schema:
    """Return ``schema`` followed by ``fields``."""
    return pa.schema([*schema, *fields])


def declared_fields(columns: Any) -> list[pa.Field]:
    """Return nullable Delta fields for ``add_columns`` arguments.

    Args:
        columns: ``{"name": "Type"}``, a list of :class:`posixlake.Field` or pyarrow fields,
            or a pyarrow schema.

    Raises:
        SchemaError: an unknown type string or no columns.
    """
    arrow = columns if isinstance(columns, pa.Schema) else Schema.coerce(columns).to_arrow()
    if len(arrow) == 0:
        raise SchemaError("add_columns needs at least one column")
    return list(delta_schema(pa.schema([f.with_nullable(True) for f in arrow])))
