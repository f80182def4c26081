"""create, info, schema, history."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli._table import parse_schema_spec
from posixlake import DatabaseOps
from posixlake.errors import SchemaError
from tests.cli.conftest import ROWS, Cli, rows, version


def test_create_from_a_schema_spec(run: Cli, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    out = run.ok(
        "create",
        path,
        "--schema",
        "id:Int64, name:String NOT NULL, price: Decimal128(10, 2)",
        "-k",
        "id",
    ).stdout
    assert f"Created {path}: 0 rows, version 0" in out
    with DatabaseOps.open(path, engine="local") as db:
        assert db.primary_key() == "id"
        assert str(db.schema) == (
            "(id Int64 NOT NULL, name String NOT NULL, price Decimal128(10,2), PRIMARY KEY (id))"
        )


def test_create_json_output(run: Cli, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    out = json.loads(
        run.ok("create", path, "--schema", '{"a": "Int32", "b": "List<String>"}', "--json").stdout
    )
    assert out == {
        "table": path,
        "version": 0,
        "rows": 0,
        "schema": {
            "fields": [
                {"name": "a", "type": "Int32", "nullable": True},
                {"name": "b", "type": "List<String>", "nullable": True},
            ],
            "primary_key": [],
        },
    }


def test_schema_json_round_trips_through_create(run: Cli, table: str, tmp_path: Path) -> None:
    spec = tmp_path / "schema.json"
    spec.write_text(run.ok("schema", table, "--json").stdout)
    copy = str(tmp_path / "copy")
    run.ok("create", copy, "--schema", f"@{spec}")
    assert run.ok("schema", copy, "--json").stdout == run.ok("schema", table, "--json").stdout


def test_schema_spec_round_trips_through_create(run: Cli, table: str, tmp_path: Path) -> None:
    spec = run.ok("schema", table, "--spec").stdout.strip()
    assert spec == "(id Int64 NOT NULL, item String NOT NULL, qty Int32, PRIMARY KEY (id))"
    copy = str(tmp_path / "copy")
    run.ok("create", copy, "--schema", "@-", input=spec)
    assert run.ok("schema", copy, "--spec").stdout.strip() == spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("a:Int64", "(a Int64)"),
        ("a Int64, b String", "(a Int64, b String)"),
        ("(a Int64 not null, PRIMARY KEY (a))", "(a Int64 NOT NULL, PRIMARY KEY (a))"),
        (
            "m:Map<String, Int64>, s:Struct<x:Int32,y:List<Float64>>",
            "(m Map<String,Int64>, s Struct<x:Int32,y:List<Float64>>)",
        ),
        ('"odd name":Int8', "(odd name Int8)"),
        ('[{"name": "a", "type": "Date32", "nullable": false}]', "(a Date32 NOT NULL)"),
    ],
)
def test_parse_schema_spec(spec: str, expected: str) -> None:
    assert str(parse_schema_spec(spec)) == expected


@pytest.mark.parametrize(
    "spec", ["", "a", "a:Nope", "a:Int64, a:Int32", "{bad json", "[1]", "a:List<Int64"]
)
def test_parse_schema_spec_rejects(spec: str) -> None:
    with pytest.raises(SchemaError):
        parse_schema_spec(spec)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--schema", "a:Int64", "--from-parquet", "x.parquet"],
        ["--from-parquet", "x.parquet", "--types", "a=String"],
        ["--from-csv", "x.csv", "--types", "a=Nope"],
        ["--from-csv", "x.csv", "--types", "a"],
        ["--from-csv", "x.csv", "--schema", "a:Int64", "--types", "b=String"],
        ["--schema", "a:Nope"],
        ["--schema", "a:Int64", "--primary-key", "b"],
        ["--schema", "@/nonexistent/schema.json"],
    ],
)
def test_create_usage_errors_exit_2(run: Cli, tmp_path: Path, args: list[str]) -> None:
    path = tmp_path / "t"
    run.fails(2, "create", str(path), *args)
    assert not path.exists()


def test_create_over_an_existing_table_fails(run: Cli, table: str) -> None:
    before = version(table)
    result = run.fails(1, "create", table, "--schema", "x:Int64")
    assert "already exists" in result.stderr
    assert version(table) == before and rows(table) == ROWS


def test_create_from_parquet(run: Cli, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    pq.write_table(pa.table({"id": [1, 2], "v": ["a", "b"]}), src / "p1.parquet")
    pq.write_table(pa.table({"id": [3], "v": ["c"]}), src / "p2.parquet")
    path = str(tmp_path / "t")
    result = run.ok("create", path, "--from-parquet", str(src), "-k", "id", "--engine", "local")
    assert "Importing 2 Parquet files" in result.stderr
    assert "Imported 2 Parquet files into" in result.stdout and "3 rows" in result.stdout
    assert rows(path) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}]
    with DatabaseOps.open(path, engine="local") as db:
        assert db.primary_key() == "id"


def test_create_from_csv(run: Cli, tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("id,name,score\n1,ann,1.5\n2,bob,\n")
    (tmp_path / "b.csv").write_text("id,name,score\n3,cy,2\n")
    path = str(tmp_path / "t")
    out = json.loads(
        run.ok(
            "create",
            path,
            "--from-csv",
            str(tmp_path / "a.csv"),
            "--from-csv",
            str(tmp_path / "b.csv"),
            "--primary-key",
            "id",
            "--engine",
            "local",
            "--json",
        ).stdout
    )
    assert out["rows"] == 3 and out["schema"]["primary_key"] == ["id"]
    assert rows(path) == [
        {"id": 1, "name": "ann", "score": 1.5},
        {"id": 2, "name": "bob", "score": None},
        {"id": 3, "name": "cy", "score": 2.0},
    ]


def test_create_from_missing_files_fails(run: Cli, tmp_path: Path) -> None:
    run.fails(
        1,
        "create",
        str(tmp_path / "t"),
        "--from-parquet",
        str(tmp_path / "none*.parquet"),
        "--engine",
        "local",
    )
    assert not (tmp_path / "t").exists()


def test_create_partitioned(run: Cli, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    run.ok("create", path, "--schema", "day:Date32, v:Int64", "--partition-by", "day")
    run.ok("insert", path, "--engine", "local", input='{"day": "2024-01-02", "v": 1}')
    assert (tmp_path / "t" / "day=2024-01-02").is_dir()


def test_info(run: Cli, table: str) -> None:
    out = run.ok("info", table).stdout
    assert f"Table:       {table}" in out
    assert "Version:     1 (" in out
    assert "Rows:        3" in out
    assert "Primary key: id" in out
    assert "  item  String  NOT NULL" in out


def test_info_json(run: Cli, table: str) -> None:
    out = json.loads(run.ok("info", table, "--json").stdout)
    assert out["table"] == table and out["version"] == 1 and out["rows"] == 3
    assert out["files"] == 1 and out["bytes"] > 0 and out["primary_key"] == ["id"]
    assert out["last_commit"]["version"] == 1
    assert out["last_commit"]["timestamp"].endswith("Z")


def test_schema_plain(run: Cli, table: str) -> None:
    assert run.ok("schema", table).stdout.splitlines() == [
        "id    Int64   NOT NULL  PRIMARY KEY",
        "item  String  NOT NULL",
        "qty   Int32",
    ]


def test_history(run: Cli, table: str) -> None:
    out = run.ok("history", table).stdout
    lines = out.splitlines()
    assert lines[1].split("|")[1:6] == [
        " version ",
        " timestamp                ",
        " operation    ",
        " user ",
        " changes      ",
    ]
    assert "| 1       |" in out and "added_rows=3" in out and "CREATE TABLE" in out
    assert lines[-1] == "(2 rows)"


def test_history_json_and_limit(run: Cli, table: str) -> None:
    out = json.loads(run.ok("history", table, "--json", "-n", "1").stdout)
    assert [c["version"] for c in out] == [1]
    assert out[0]["metrics"]["num_added_rows"] == 3
    run.fails(2, "history", table, "--limit", "0")


@pytest.mark.parametrize("command", ["info", "schema", "history"])
def test_missing_table_fails(run: Cli, tmp_path: Path, command: str) -> None:
    assert "no table" in run.fails(1, command, str(tmp_path / "nope")).stderr
