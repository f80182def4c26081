"""CSV through the command line without loss: create --from-csv with inference that keeps
every value, --types / --schema at import, inserts into text columns, and merge change
files whose empty fields change nothing (``\\N`` sets NULL). The examples of
``posixlake merge --help``, docs/cli.md and README.md are parsed out and run here, so they
cannot drift from what the command does."""

from __future__ import annotations

import re
import shlex
from decimal import Decimal
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, rows, unchanged, version

LOCAL = ("--engine", "local")
SPARK = ("--engine", "spark", "--spark-master", "local[1]")
ROOT = Path(__file__).resolve().parents[2]

PEOPLE = "id,zip,phone,amount,since\n1,08123,+15551234,1.50,2024-01-31\n2,12345,5551234,2,\n"


def _csv(run: Cli, table: str, *engine: str) -> str:
    out = run.ok("query", table, "SELECT * FROM data ORDER BY id", "--format", "csv", *engine)
    return out.stdout


# -- create --from-csv ---------------------------------------------------------------------


def test_inference_keeps_codes_and_the_file_comes_back(run: Cli, tmp_path: Path) -> None:
    src = tmp_path / "people.csv"
    src.write_text(PEOPLE)
    table = str(tmp_path / "t")
    out = run.ok("create", table, "--from-csv", str(src), "-k", "id", *LOCAL).stdout
    assert "zip String, phone String, amount Float64, since Date32" in out
    # the same values: 1.50 is the number 1.5 (give Decimal128(p,s) to keep the scale)
    assert _csv(run, table, *LOCAL) == PEOPLE.replace("1.50", "1.5")


def test_types_at_import(run: Cli, tmp_path: Path) -> None:
    src = tmp_path / "people.csv"
    src.write_text(PEOPLE)
    table = str(tmp_path / "t")
    args = ("--types", "amount=Decimal128(10,2)", "--types", "id=Int32,since=String")
    out = run.ok("create", table, "--from-csv", str(src), *args, *LOCAL).stdout
    assert "(id Int32, zip String, phone String, amount Decimal128(10,2), since String)" in out
    assert _csv(run, table, *LOCAL) == PEOPLE.replace(",2,\n", ",2.00,\n")


def test_schema_with_from_csv(run: Cli, tmp_path: Path) -> None:
    src = tmp_path / "people.csv"
    src.write_text(PEOPLE)
    table = str(tmp_path / "t")
    spec = "since:Date32, id:Int64 NOT NULL, zip:String, phone:String, amount:Decimal128(5,2)"
    out = run.ok("create", table, "--from-csv", str(src), "--schema", spec, "-k", "id", *LOCAL)
    assert out.stdout.splitlines()[-1] == (
        "(since Date32, id Int64 NOT NULL, zip String, phone String, amount Decimal128(5,2), "
        "PRIMARY KEY (id))"
    )
    assert rows(table, "SELECT zip, amount FROM data ORDER BY id") == [
        {"zip": "08123", "amount": Decimal("1.50")},
        {"zip": "12345", "amount": Decimal("2.00")},
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--types", "zip=Int8"], "line 2, column 'zip': '08123' is not an Int8"),
        (["--types", "amount=Decimal128(4,0)"], "line 2, column 'amount': '1.50'"),
        (["--types", "nope=String"], "'nope'"),
        (["--schema", "id:Int64, zip:String"], "not in the schema: 'phone'"),
    ],
    ids=["too-big", "too-many-digits", "unknown-column", "column-not-in-schema"],
)
def test_a_value_that_does_not_fit_fails_and_creates_nothing(
    run: Cli, tmp_path: Path, args: list[str], message: str
) -> None:
    src = tmp_path / "people.csv"
    src.write_text(PEOPLE)
    table = tmp_path / "t"
    result = run.fails(1, "create", str(table), "--from-csv", str(src), *args, *LOCAL)
    assert message in result.stderr
    assert not table.exists()


def test_inserted_csv_keeps_the_text_of_string_columns(run: Cli, tmp_path: Path) -> None:
    src = tmp_path / "people.csv"
    src.write_text(PEOPLE)
    table = str(tmp_path / "t")
    run.ok("create", table, "--from-csv", str(src), "-k", "id", *LOCAL)
    more = tmp_path / "more.csv"
    more.write_text("id,zip,phone\n3,00501,+4420\n")
    run.ok("insert", table, str(more), *LOCAL)
    assert rows(table, "SELECT zip, phone FROM data WHERE id = 3") == [
        {"zip": "00501", "phone": "+4420"}
    ]


# -- merge: empty fields change nothing, \N sets NULL --------------------------------------


def test_merge_update_with_empty_fields_changes_only_what_it_gives(
    run: Cli, tmp_path: Path
) -> None:
    src = tmp_path / "items.csv"
    body = "".join(f"{i},item {i},{i}.25,{i:05d},note {i}\n" for i in range(5000))
    src.write_text("id,name,price,zip,notes\n" + body)
    table = str(tmp_path / "t")
    run.ok(
        "create",
        table,
        "--from-csv",
        str(src),
        "-k",
        "id",
        "--types",
        "price=Decimal128(10,2)",
        *LOCAL,
    )
    changes = "_op,id,name,price,zip,notes\n" + "".join(
        f"UPDATE,{i},,1.50,,\n" for i in range(5000)
    )
    out = run.ok("merge", table, *LOCAL, input=changes).stdout
    assert out == "Merged: 0 inserted, 5,000 updated, 0 deleted, 0 skipped (version 2)\n"
    assert rows(table, "SELECT * FROM data WHERE id IN (0, 7, 4999) ORDER BY id") == [
        {
            "id": i,
            "name": f"item {i}",
            "price": Decimal("1.50"),
            "zip": f"{i:05d}",
            "notes": f"note {i}",
        }
        for i in (0, 7, 4999)
    ]


def test_merge_null_marker(run: Cli, table: str) -> None:
    run.ok("merge", table, *LOCAL, input="_op,id,item,qty\nUPDATE,1,,\\N\nUPDATE,2,kiwi,\n")
    assert rows(table)[:2] == [
        {"id": 1, "item": "apple", "qty": None},
        {"id": 2, "item": "kiwi", "qty": 5},
    ]
    run.ok("merge", table, "--null-marker", "NULL", *LOCAL, input="_op,id,qty\nUPDATE,2,NULL\n")
    assert rows(table)[1] == {"id": 2, "item": "kiwi", "qty": None}
    result = run.fails(2, "merge", table, "--null-marker", "", *LOCAL, input="_op,id\nDELETE,1\n")
    assert "NULL marker cannot be empty" in result.stderr
    assert version(table) == 3


def test_merge_csv_errors_name_the_value_and_commit_nothing(run: Cli, table: str) -> None:
    before = rows(table)
    for payload, message in [
        ("_op,id,item,qty\nUPDATE,1,\\N,\n", "'item' is NOT NULL"),  # NULL asked for
        ("_op,id,item,qty\nUPDATE,1,,many\n", "line 2, column 'qty': 'many'"),
        ("id,item\n1,x\n", "_op"),
        ("_op,id,colour\nUPDATE,1,red\n", "'colour'"),
    ]:
        result = run.fails(1, "merge", table, *LOCAL, input=payload)
        assert message in result.stderr
        unchanged(table, 1, before)


# -- the documented examples, parsed out of the help text and the docs ---------------------


def _help_example(run: Cli) -> tuple[list[str], str]:
    """Return the command and the change file of ``posixlake merge --help``'s example."""
    text = run.ok("merge", "--help").stdout
    lines = text[text.index("Example:") :].splitlines()[1:]
    command = shlex.split(lines[0].strip())
    assert lines[1].strip() == "where changes.csv is:"
    body = []
    for line in lines[2:]:
        if not line.startswith("      ") or not line.strip():
            break
        body.append(line.strip())
    return command, "\n".join(body) + "\n"


def test_the_help_example_runs_on_the_readme_table(run: Cli, table: str, tmp_path: Path) -> None:
    command, changes = _help_example(run)
    assert command[:2] == ["posixlake", "merge"]
    src = tmp_path / "changes.csv"
    src.write_text(changes)
    args = [
        table if a == "/data/sales" else str(src) if a == "changes.csv" else a for a in command[2:]
    ]
    out = run.ok("merge", *args, *LOCAL).stdout
    assert out == "Merged: 1 inserted, 2 updated, 1 deleted, 0 skipped (version 2)\n"
    assert rows(table) == [
        {"id": 1, "item": "apple", "qty": None},  # UPDATE,1,,\N: qty NULL, item kept
        {"id": 3, "item": "fig", "qty": 10},  # UPDATE,3,,10: item kept (it is NOT NULL)
        {"id": 7, "item": "plum", "qty": 2},
    ]


def test_the_docs_example_matches_the_help_example(run: Cli) -> None:
    docs = (ROOT / "docs" / "cli.md").read_text()
    section = docs[docs.index("**`merge TABLE [FILE]`**") :]
    block = re.search(r"```text\n(.*?)```", section, re.DOTALL)
    assert block is not None
    assert block.group(1) == _help_example(run)[1]
    schema = re.search(r"create /data/sales --schema '([^']+)'", section)
    assert schema is not None and schema.group(1) == "id:Int64, item:String NOT NULL, qty:Int32"


def _printf(fmt: str) -> str:
    """What ``printf 'fmt'`` writes, for the escapes the README uses (\\n and \\\\)."""
    return re.sub(r"\\(\\|n)", lambda m: "\n" if m.group(1) == "n" else "\\", fmt)


def test_the_readme_command_line_examples_run(run: Cli, tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## The command line") : readme.index("## Object storage")]
    table = str(tmp_path / "sales")
    outputs = []
    commands = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)[:2]  # the merge walk
    lines = [ln for block in commands for ln in block.splitlines()]
    ran = 0
    for line in lines:
        stdin = None
        if " | " in line and line.startswith("printf "):
            left, line = line.split(" | ", 1)
            stdin = _printf(shlex.split(left)[1])
        words = shlex.split(line, comments=True)
        if words[1] not in ("create", "insert", "merge", "query"):
            continue  # backup, serve: their own tests
        args = [table if w == "/data/sales" else w for w in words[1:]]
        outputs.append(run.ok(*args, *LOCAL, input=stdin).stdout)
        ran += 1
    assert ran == 6
    merges = [o for o in outputs if o.startswith("Merged")]
    assert merges == [
        "Merged: 1 inserted, 1 updated, 0 deleted, 0 skipped (version 2)\n",
        "Merged: 0 inserted, 1 updated, 1 deleted, 0 skipped (version 3)\n",
    ]
    # the README says what the last query shows
    expected = re.search(r"--format csv +# (.*)\n", section)
    assert expected is not None
    assert outputs[-1] == "\n".join(expected.group(1).split(" / ")) + "\n"


# -- the Spark engine ----------------------------------------------------------------------


@pytest.mark.spark
def test_on_spark_types_at_import_and_merge_with_empty_fields(run: Cli, tmp_path: Path) -> None:
    src = tmp_path / "people.csv"
    src.write_text(PEOPLE)
    table = str(tmp_path / "t")
    run.ok("create", table, "--from-csv", str(src), "-k", "id", *SPARK)
    assert _csv(run, table, *SPARK) == PEOPLE.replace("1.50", "1.5")
    typed = str(tmp_path / "typed")
    run.ok("create", typed, "--from-csv", str(src), "--types", "amount=Decimal128(10,2)", *SPARK)
    assert _csv(run, typed, *SPARK) == PEOPLE.replace(",2,\n", ",2.00,\n")
    changes = "_op,id,zip,phone,amount,since\nUPDATE,1,,\\N,3.5,\nINSERT,3,00501,,,\n"
    out = run.ok("merge", table, *SPARK, input=changes).stdout
    assert out == "Merged: 1 inserted, 1 updated, 0 deleted, 0 skipped (version 2)\n"
    assert _csv(run, table, *SPARK) == (
        "id,zip,phone,amount,since\n1,08123,,3.5,2024-01-31\n2,12345,5551234,2,\n3,00501,,,\n"
    )
