"""A table's schema is made plain from its types alone, and opening a table imports no pandas.

pyarrow imports pandas (about a quarter of a second) the first time it builds an empty
array; ``DatabaseOps.open`` used to build an empty table just to read its plain schema, so
every process that opened a table paid it (a read-only CLI command, ``serve``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from posixlake import DatabaseOps
from posixlake.delta._arrow import plain_schema, plain_types
from tests.strategies import arrow_schemas, arrow_types, field_names


def _widened(t: pa.DataType) -> st.SearchStrategy[pa.DataType]:
    """``t``, or a large/view form of it where one exists, at every level."""
    if pa.types.is_string(t):
        return st.sampled_from([t, pa.large_string(), pa.string_view()])
    if pa.types.is_binary(t):
        return st.sampled_from([t, pa.large_binary(), pa.binary_view()])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        f = t.value_field
        return st.tuples(_widened(f.type), st.sampled_from(["list", "large", "view"])).map(
            lambda c: (
                pa.list_view(pa.field(f.name, c[0], f.nullable))
                if c[1] == "view"
                else pa.large_list(pa.field(f.name, c[0], f.nullable))
                if c[1] == "large"
                else pa.list_(pa.field(f.name, c[0], f.nullable))
            )
        )
    if pa.types.is_struct(t):
        fields = list(t)
        return st.tuples(*(_widened(f.type) for f in fields)).map(
            lambda ts: pa.struct(
                [pa.field(f.name, ft, f.nullable) for f, ft in zip(fields, ts, strict=True)]
            )
        )
    if pa.types.is_map(t):
        return st.tuples(_widened(t.key_type), _widened(t.item_type)).map(
            lambda kv: pa.map_(kv[0], pa.field("value", kv[1], t.item_field.nullable))
        )
    return st.just(t)


@st.composite
def _schemas(draw: st.DrawFn) -> pa.Schema:
    base = draw(arrow_schemas(types=arrow_types(max_depth=2)))
    fields = [
        pa.field(
            f.name,
            draw(_widened(f.type)),
            f.nullable,
            draw(st.none() | st.just({b"comment": draw(field_names()).encode()})),
        )
        for f in base
    ]
    metadata = draw(st.none() | st.just({b"origin": b"delta"}))
    return pa.schema(fields, metadata=metadata)


@given(_schemas())
def test_plain_schema_is_the_schema_plain_types_gives(schema: pa.Schema) -> None:
    expected = plain_types(schema.empty_table()).schema
    actual = plain_schema(schema)
    assert actual.equals(expected, check_metadata=True)
    for f in actual:
        assert not pa.types.is_large_string(f.type) and not pa.types.is_string_view(f.type)


def test_opening_a_table_reads_its_schema_without_importing_pandas(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.large_string())])
    db = DatabaseOps.create(str(tmp_path / "t"), schema, engine="local")
    db.close()
    code = textwrap.dedent(
        f"""
        import sys
        from posixlake import DatabaseOps
        db = DatabaseOps.open({str(tmp_path / "t")!r}, engine="local")
        print(db.arrow_schema.field("name").type, db.version, "pandas" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["string", "0", "False"]
