"""Schemas and type strings: parsing, Delta storage types, validation, tables created from them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from posixlake import DatabaseOps, Field, Schema
from posixlake.engines import Engine
from posixlake.errors import AlreadyExists, SchemaError
from posixlake.types import delta_schema, delta_type, parse_type, type_string

# the type strings of the original project -> declared Arrow type -> type stored in Delta
TYPES: list[tuple[str, pa.DataType, pa.DataType]] = [
    ("Int8", pa.int8(), pa.int8()),
    ("Int16", pa.int16(), pa.int16()),
    ("Int32", pa.int32(), pa.int32()),
    ("Int64", pa.int64(), pa.int64()),
    ("UInt8", pa.uint8(), pa.int16()),
    ("UInt16", pa.uint16(), pa.int32()),
    ("UInt32", pa.uint32(), pa.int64()),
    ("UInt64", pa.uint64(), pa.decimal128(20, 0)),
    ("Float32", pa.float32(), pa.float32()),
    ("Float64", pa.float64(), pa.float64()),
    ("String", pa.string(), pa.string()),
    ("LargeUtf8", pa.large_string(), pa.string()),
    ("Binary", pa.binary(), pa.binary()),
    ("LargeBinary", pa.large_binary(), pa.binary()),
    ("Boolean", pa.bool_(), pa.bool_()),
    ("Date32", pa.date32(), pa.date32()),
    ("Date64", pa.date64(), pa.date32()),
    ("Timestamp", pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="UTC")),
    ("TimestampNtz", pa.timestamp("us"), pa.timestamp("us")),
    ("Decimal128(10,2)", pa.decimal128(10, 2), pa.decimal128(10, 2)),
    ("Decimal128(38, 0)", pa.decimal128(38, 0), pa.decimal128(38, 0)),
    ("List<Int64>", pa.list_(pa.int64()), pa.list_(pa.int64())),
    ("List<UInt8>", pa.list_(pa.uint8()), pa.list_(pa.int16())),
    ("Map<String,Int64>", pa.map_(pa.string(), pa.int64()), pa.map_(pa.string(), pa.int64())),
    (
        "Struct<a:Int32,b:String>",
        pa.struct([("a", pa.int32()), ("b", pa.string())]),
        pa.struct([("a", pa.int32()), ("b", pa.string())]),
    ),
    (
        "Struct<a:List<Struct<x:UInt32,y:Map<String,List<Float64>>>>,b:Date64>",
        pa.struct(
            [
                (
                    "a",
                    pa.list_(
                        pa.struct(
                            [
                                ("x", pa.uint32()),
                                ("y", pa.map_(pa.string(), pa.list_(pa.float64()))),
                            ]
                        )
                    ),
                ),
                ("b", pa.date64()),
            ]
        ),
        pa.struct(
            [
                (
                    "a",
                    pa.list_(
                        pa.struct(
                            [
                                ("x", pa.int64()),
                                ("y", pa.map_(pa.string(), pa.list_(pa.float64()))),
                            ]
                        )
                    ),
                ),
                ("b", pa.date32()),
            ]
        ),
    ),
]


@pytest.mark.parametrize(("spec", "declared", "stored"), TYPES, ids=[t[0] for t in TYPES])
def test_type_string_parses_and_widens_for_delta(
    spec: str, declared: pa.DataType, stored: pa.DataType
) -> None:
    assert parse_type(spec) == declared
    assert delta_type(declared) == stored
    assert parse_type(type_string(declared)) == declared


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("int64", pa.int64()),
        ("  Int64 ", pa.int64()),
        ("BOOLEAN", pa.bool_()),
        ("utf8", pa.string()),
        ("decimal(5, 1)", pa.decimal128(5, 1)),
        ("list< map<string , int32> >", pa.list_(pa.map_(pa.string(), pa.int32()))),
        ("LargeList<Int8>", pa.large_list(pa.int8())),
    ],
)
def test_type_strings_are_case_and_space_insensitive(spec: str, expected: pa.DataType) -> None:
    assert parse_type(spec) == expected


def test_pyarrow_types_pass_through() -> None:
    assert parse_type(pa.int16()) == pa.int16()


@pytest.mark.parametrize(
    "t",
    [pa.large_list(pa.int8()), pa.list_(pa.large_list(pa.string())), pa.float16()],
)
def test_type_string_round_trips(t: pa.DataType) -> None:
    assert parse_type(type_string(t)) == t


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("Int128", "Int128"),
        ("Strin", "Strin"),
        ("List<Nope>", "Nope"),
        ("Map<String,Quux>", "Quux"),
        ("Struct<a:Int32,b:Wat>", "Wat"),
        ("Foo<Int64>", "Foo<Int64>"),
        ("", "''"),
    ],
)
def test_unknown_type_string_raises_schema_error_naming_it(spec: str, named: str) -> None:
    with pytest.raises(SchemaError, match="unknown data type") as info:
        parse_type(spec)
    assert named in str(info.value)


@pytest.mark.parametrize(
    "spec",
    [
        "Decimal128(39,2)",
        "Decimal128(0,0)",
        "Decimal128(5,6)",
        "Map<String>",
        "Map<String,Int64,Int64>",
        "Struct<a>",
        "Struct<:Int64>",
        "List<Int64",
        "List<Int64>>",
    ],
)
def test_malformed_type_strings_raise_schema_error(spec: str) -> None:
    with pytest.raises(SchemaError):
        parse_type(spec)


def test_non_string_type_raises_schema_error() -> None:
    with pytest.raises(SchemaError, match="int"):
        parse_type(5)


@pytest.mark.parametrize("t", [pa.time64("us"), pa.duration("s"), pa.dense_union([])])
def test_types_delta_cannot_store_raise(t: pa.DataType) -> None:
    with pytest.raises(SchemaError, match="cannot store"):
        delta_type(t)


def test_delta_schema_keeps_names_and_nullability() -> None:
    s = pa.schema([pa.field("a", pa.uint8(), False), pa.field("b", pa.large_string())])
    out = delta_schema(s)
    assert out.names == ["a", "b"]
    assert out.field("a").type == pa.int16() and not out.field("a").nullable
    assert out.field("b").type == pa.string() and out.field("b").nullable


class TestSchemaValidation:
    def test_fields_and_primary_key(self) -> None:
        s = Schema([Field("id", "Int64"), Field("name", "String")], primary_key="id")
        assert s.key_columns == ["id"]
        arrow = s.to_arrow()
        assert not arrow.field("id").nullable  # key columns become NOT NULL
        assert arrow.field("name").nullable

    def test_composite_key_from_string_or_list(self) -> None:
        fields = [Field("a", "Int64"), Field("b", "String"), Field("c", "Int64")]
        assert Schema(fields, primary_key="a, b").key_columns == ["a", "b"]
        assert Schema(fields, primary_key=["b", "a"]).key_columns == ["b", "a"]

    @pytest.mark.parametrize(
        ("fields", "key", "match"),
        [
            ([], None, "at least one field"),
            ([Field("a", "Int64"), Field("A", "Int64")], None, "duplicate"),
            ([Field("", "Int64")], None, "invalid column name"),
            ([Field("a,b", "Int64")], None, "invalid column name"),
            ([Field("a", "Int64")], "b", "primary key column 'b'"),
            ([Field("a", "NoSuchType")], None, "NoSuchType"),
        ],
    )
    def test_invalid_schemas_raise(self, fields: list[Field], key: str | None, match: str) -> None:
        with pytest.raises(SchemaError, match=match):
            Schema(fields, primary_key=key)

    def test_non_field_items_raise(self) -> None:
        with pytest.raises(SchemaError, match="Field"):
            Schema([("a", "Int64")])  # type: ignore[list-item]

    def test_coerce_accepts_every_form(self) -> None:
        expected = [("id", pa.int64(), False), ("name", pa.string(), True)]
        forms = [
            Schema([Field("id", "Int64", False), Field("name", "String")]),
            pa.schema([pa.field("id", pa.int64(), False), pa.field("name", pa.string())]),
            [("id", "Int64", False), ("name", "String")],
            [pa.field("id", pa.int64(), False), pa.field("name", pa.string())],
        ]
        for form in forms:
            s = Schema.coerce(form)
            assert [(f.name, f.arrow_type(), f.nullable) for f in s.fields] == expected
        mapping = Schema.coerce({"id": "Int64", "name": "String"})
        assert [f.name for f in mapping.fields] == ["id", "name"]

    @pytest.mark.parametrize("bad", ["id Int64", b"x", 5, [("id",)], [object()]])
    def test_coerce_rejects_non_schemas(self, bad: object) -> None:
        with pytest.raises(SchemaError):
            Schema.coerce(bad)

    def test_str_reads_like_sql(self) -> None:
        s = Schema([Field("id", "Int64", False), Field("v", "Decimal128(5,2)")], primary_key="id")
        assert str(s) == "(id Int64 NOT NULL, v Decimal128(5,2), PRIMARY KEY (id))"


class TestCreateWithSchema:
    def test_every_type_creates_a_table_with_the_stored_types(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        fields = [Field(f"c{i}", spec) for i, (spec, _, _) in enumerate(TYPES)]
        db = DatabaseOps.create(tmp_path / "t", Schema(fields), engine=engine)
        got = db.get_schema()
        assert [f.name for f in got.fields] == [f.name for f in fields]
        for f, (spec, _, stored) in zip(got.fields, TYPES, strict=True):
            assert delta_type(f.arrow_type()) == stored, f.name  # reported as declared
            assert isinstance(f.data_type, str), f.name
            if "UInt" in spec:
                assert f.data_type == spec, f.name
        assert db.version == 0

    def test_pyarrow_schema_is_accepted(self, tmp_path: Path, engine: Engine) -> None:
        schema = pa.schema(
            [pa.field("id", pa.int64(), False), pa.field("tags", pa.list_(pa.string()))]
        )
        db = DatabaseOps.create(tmp_path / "t", schema, engine=engine)
        got = db.get_schema().to_arrow()
        assert got.field("id").type == pa.int64() and not got.field("id").nullable
        assert got.field("tags").type == pa.list_(pa.string())

    def test_mapping_schema_and_primary_key_option(self, tmp_path: Path, engine: Engine) -> None:
        db = DatabaseOps.create(
            tmp_path / "t", {"id": "Int64", "name": "String"}, primary_key="id", engine=engine
        )
        assert db.primary_key() == "id"
        schema = db.get_schema()
        assert schema.key_columns == ["id"]
        assert not schema.to_arrow().field("id").nullable
        assert db.schema == schema

    def test_schema_survives_reopen(self, tmp_path: Path, engine: Engine) -> None:
        s = Schema([Field("id", "Int64"), Field("m", "Map<String,List<Int32>>")], primary_key="id")
        DatabaseOps.create(tmp_path / "t", s, engine=engine).close()
        db = DatabaseOps.open(tmp_path / "t", engine=engine)
        got = db.get_schema()
        assert got.key_columns == ["id"]
        assert got.to_arrow() == pa.schema(
            [
                pa.field("id", pa.int64(), False),
                pa.field("m", pa.map_(pa.string(), pa.list_(pa.int32()))),
            ]
        )
        assert db.primary_key() == "id"

    def test_unknown_type_fails_before_anything_is_written(
        self, tmp_path: Path, engine: Engine
    ) -> None:
        with pytest.raises(SchemaError, match="Int99"):
            DatabaseOps.create(tmp_path / "t", {"a": "Int99"}, engine=engine)
        assert not (tmp_path / "t").exists()

    def test_unknown_partition_column_raises(self, tmp_path: Path, engine: Engine) -> None:
        with pytest.raises(SchemaError, match="partition column 'zz'"):
            DatabaseOps.create(tmp_path / "t", {"a": "Int64"}, partition_by=["zz"], engine=engine)
        assert not (tmp_path / "t").exists()

    def test_create_twice_raises_already_exists(self, tmp_path: Path, engine: Engine) -> None:
        DatabaseOps.create(tmp_path / "t", {"a": "Int64"}, engine=engine)
        with pytest.raises(AlreadyExists):
            DatabaseOps.create(tmp_path / "t", {"a": "Int64"}, engine=engine)
        assert DatabaseOps.open(tmp_path / "t", engine=engine).version == 0
