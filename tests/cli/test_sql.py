"""posixlake sql / shell / rollback, query output (formats, cut tables) and CSV dialects."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from cli._output import box_lines, write_rows
from posixlake import DatabaseOps
from tests.cli.conftest import ROWS, Cli, rows, unchanged, version

LOCAL = ("--engine", "local")


# -- posixlake sql -------------------------------------------------------------------------


def test_sql_update_delete_insert(run: Cli, table: str) -> None:
    out = run.ok("sql", table, "UPDATE data SET qty = qty + 1 WHERE id < 3", *LOCAL).stdout
    assert out == "Updated 2 rows (version 2)\n"
    out = run.ok("sql", table, "DELETE FROM data WHERE qty IS NULL", *LOCAL).stdout
    assert out == "Deleted 1 row (version 3)\n"
    sql = "INSERT INTO data VALUES (7, 'plum', 2), (8, 'kiwi', NULL)"
    assert run.ok("sql", table, sql, *LOCAL).stdout == "Inserted 2 rows (version 4)\n"
    out = run.ok("sql", table, "DELETE FROM data WHERE id = 42", *LOCAL).stdout
    assert out == "Deleted 0 rows (no commit, still version 4)\n"
    assert rows(table) == [
        {"id": 1, "item": "apple", "qty": 4},
        {"id": 2, "item": "pear", "qty": 6},
        {"id": 7, "item": "plum", "qty": 2},
        {"id": 8, "item": "kiwi", "qty": None},
    ]


def test_sql_merge_and_json(run: Cli, table: str) -> None:
    merge = (
        "MERGE INTO data t USING (VALUES (3, 'fig', 9), (9, 'lime', 1)) AS s(id, item, qty) "
        "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    out = json.loads(run.ok("sql", table, merge, "--json", *LOCAL).stdout)
    assert out == {
        "rows_inserted": 1,
        "rows_updated": 1,
        "rows_deleted": 0,
        "version": 2,
        "committed": True,
    }
    out = json.loads(run.ok("sql", table, "DELETE FROM data WHERE id = 9", "--json", *LOCAL).stdout)
    assert out == {"rows": 1, "version": 3, "committed": True}
    assert rows(table)[-1] == {"id": 3, "item": "fig", "qty": 9}


def test_sql_select_and_stdin(run: Cli, table: str) -> None:
    out = run.ok("sql", table, "SELECT count(*) AS n FROM data", "-f", "csv", *LOCAL).stdout
    assert out == "n\n3\n"
    out = run.ok("sql", table, "-", *LOCAL, input="DELETE FROM data WHERE id = 1").stdout
    assert out == "Deleted 1 row (version 2)\n"


def test_sql_errors_name_the_clause(run: Cli, table: str) -> None:
    result = run.fails(1, "sql", table, "INSERT OVERWRITE data SELECT * FROM data", *LOCAL)
    assert "INSERT OVERWRITE is not supported" in result.stderr
    result = run.fails(1, "sql", table, "UPDATE customers SET qty = 1", *LOCAL)
    assert "unknown table 'customers': the table is called `data`" in result.stderr
    result = run.fails(1, "sql", table, "INSERT INTO data VALUES (1, 'dup', 1)", *LOCAL)
    assert "`posixlake insert --upsert`" in result.stderr
    unchanged(table, 1, ROWS)


def test_sql_without_a_statement_says_how(run: Cli, table: str) -> None:
    result = run.fails(2, "sql", table, *LOCAL)
    assert "missing SQL" in result.stderr and "posixlake sql" in result.stderr


# -- posixlake query -------------------------------------------------------------------------


def test_query_without_sql_says_how(run: Cli, table: str) -> None:
    result = run.fails(2, "query", table, *LOCAL)
    assert "Missing argument" not in result.stderr
    assert "missing SQL: give the SQL to run, e.g. posixlake query" in result.stderr
    assert "SELECT * FROM data LIMIT 10" in result.stderr and "posixlake shell" in result.stderr
    assert "missing SQL" in run.fails(2, "query", table, " ", *LOCAL).stderr


@pytest.mark.parametrize("sql", ["UPDATE data SET qty = 0", "delete from data", "MERGE INTO data"])
def test_query_points_dml_to_sql(run: Cli, table: str, sql: str) -> None:
    result = run.fails(2, "query", table, sql, *LOCAL)
    assert "query runs SELECT" in result.stderr
    assert f'posixlake sql {table} "{sql}"' in result.stderr
    unchanged(table, 1, ROWS)


def test_query_time_travel_in_sql(run: Cli, table: str) -> None:
    run.ok("sql", table, "DELETE FROM data", *LOCAL)
    sql = "SELECT count(*) AS n FROM data VERSION AS OF 1"
    assert json.loads(run.ok("query", table, sql, "--json", *LOCAL).stdout) == [{"n": 3}]
    result = run.fails(1, "query", table, sql, "--version", "0", *LOCAL)
    assert "do not also give --version or --as-of" in result.stderr


def test_query_unknown_table_names_data(run: Cli, table: str) -> None:
    result = run.fails(1, "query", table, "SELECT * FROM customers", *LOCAL)
    assert "datafusion.public" not in result.stderr
    assert "unknown table 'customers': the table is called `data`" in result.stderr


# -- output ------------------------------------------------------------------------------


@pytest.fixture
def many(tmp_path: Path) -> str:
    """A table of 1,000 rows, one with a newline and one with a long value."""
    path = str(tmp_path / "many")
    with DatabaseOps.create(path, {"id": "Int64", "text": "String"}, engine="local") as db:
        db.insert(
            pa.table(
                {
                    "id": list(range(1000)),
                    "text": ["two\nlines", "x" * 100] + [f"r{i}" for i in range(2, 1000)],
                }
            )
        )
    return path


def test_box_is_cut_like_duckdb() -> None:
    table = pa.table({"id": list(range(100)), "text": ["a\nb", "y" * 60] + ["z"] * 98})
    lines = list(box_lines(table, max_rows=40, max_width=40))
    body = [ln for ln in lines if ln.startswith("| ") and "id" not in ln]
    assert len(body) == 41  # 20 + the … line + 20
    assert body[0].split("|")[1].strip() == "0" and body[-1].split("|")[1].strip() == "99"
    assert body[20].split("|")[1].strip() == "…"
    assert "a\\nb" in body[0]  # one row, one line
    assert ("y" * 39 + "…") in body[1] and "y" * 40 not in body[1]
    assert lines[-1].startswith("(100 rows, 40 shown: the first 20 and the last 20")
    # no cut: every row, whole values (newlines still escaped)
    full = list(box_lines(table))
    assert len(full) == 100 + 5 and "y" * 60 in full[4] and full[-1] == "(100 rows)"


def test_terminal_defaults_cut_piped_output_does_not(tmp_path: Path) -> None:
    import io

    table = pa.table({"id": list(range(100))})
    out = io.BytesIO()
    write_rows(table, "table", out=out, terminal=True)
    assert out.getvalue().decode().splitlines()[-1].startswith("(100 rows, 40 shown")
    out = io.BytesIO()
    write_rows(table, "table", out=out, terminal=False)
    assert out.getvalue().decode().splitlines()[-1] == "(100 rows)"


def test_query_max_rows_and_width(run: Cli, many: str) -> None:
    sql = "SELECT * FROM data ORDER BY id"
    out = run.ok("query", many, sql, "--max-rows", "4", "--max-width", "10", *LOCAL).stdout
    lines = out.splitlines()
    assert "| 0   | two\\nlines |" in lines  # escaped; the id column is as wide as 999
    assert "| 1   | xxxxxxxxx… |" in lines
    assert "| 999 | r999       |" in lines
    assert lines[-1].startswith("(1,000 rows, 4 shown")
    # piped (CliRunner is not a terminal): every row
    assert len(run.ok("query", many, sql, *LOCAL).stdout.splitlines()) == 1000 + 5


def test_query_formats_are_complete(run: Cli, many: str) -> None:
    sql = "SELECT * FROM data ORDER BY id"
    csv = run.ok("query", many, sql, "-f", "csv", *LOCAL).stdout
    assert csv.startswith('id,text\n0,"two\nlines"\n1,' + "x" * 100 + "\n")
    assert csv.count("\n") == 1002
    jsonl = run.ok("query", many, sql, "-f", "jsonl", *LOCAL).stdout.splitlines()
    assert len(jsonl) == 1000 and json.loads(jsonl[0]) == {"id": 0, "text": "two\nlines"}
    assert json.loads(run.ok("query", many, sql, "-f", "json", *LOCAL).stdout)[1]["text"] == (
        "x" * 100
    )
    md = run.ok("query", many, sql + " LIMIT 2", "-f", "markdown", *LOCAL).stdout
    assert md.splitlines() == [
        "| id | text |",
        "|---|---|",
        "| 0 | two\\nlines |",
        f"| 1 | {'x' * 100} |",
    ]


def test_json_times_end_with_z(run: Cli, tmp_path: Path) -> None:
    path = str(tmp_path / "times")
    run.ok("create", path, "--schema", "id:Int64, at:Timestamp")
    run.ok("insert", path, *LOCAL, input='{"id": 1, "at": "2024-05-01T12:00:00.123456+02:00"}')
    out = run.ok("query", path, "SELECT at FROM data", "--json", *LOCAL).stdout
    assert json.loads(out) == [{"at": "2024-05-01T10:00:00.123456Z"}]
    out = run.ok("query", path, "SELECT at FROM data", "-f", "jsonl", *LOCAL).stdout
    assert out == '{"at": "2024-05-01T10:00:00.123456Z"}\n'


# -- shell ---------------------------------------------------------------------------------


def test_shell_runs_piped_statements(run: Cli, table: str) -> None:
    script = (
        "SELECT count(*) AS n\n  FROM data;\n"
        ".mode csv\n"
        "UPDATE data SET qty = 0 WHERE id = 1; SELECT id, qty FROM data WHERE id = 1;\n"
        "SELECT id FROM data VERSION AS OF 1 WHERE id = 2\n"
    )
    result = run.ok("shell", table, *LOCAL, input=script)
    assert result.stdout.splitlines() == [
        "+---+",
        "| n |",
        "+---+",
        "| 3 |",
        "+---+",
        "(1 row)",
        "Updated 1 row (version 2)",
        "id,qty",
        "1,0",
        "id",
        "2",
    ]
    assert result.stderr == ""  # no prompt, no banner off a terminal


def test_shell_reports_errors_and_goes_on(run: Cli, table: str) -> None:
    script = (
        "SELECT nosuch FROM data;\n.bogus\n.mode xml\nDELETE FROM data WHERE id = 3;\n"
        ".quit\nDELETE FROM data;\n"
    )
    result = run("shell", table, *LOCAL, input=script)
    assert result.exit_code == 1
    assert result.stdout == "Deleted 1 row (version 2)\n"
    errors = result.stderr.splitlines()
    assert errors[0].startswith("Error: query: Schema error: No field named nosuch")
    assert errors[1] == "Error: unknown command '.bogus'; .help lists them"
    assert errors[2] == "Error: .mode takes one of table, csv, json, jsonl, markdown"
    assert version(table) == 2  # .quit stopped before the last DELETE


# -- rollback ------------------------------------------------------------------------------


def test_rollback_to_a_version(run: Cli, table: str) -> None:
    run.ok("sql", table, "DELETE FROM data WHERE id = 1", *LOCAL)
    run.ok("sql", table, "UPDATE data SET qty = 0", *LOCAL)
    out = run.ok("rollback", table, "--version", "1").stdout
    assert out.startswith("Rolled back to version 1 (version 4: ")
    assert rows(table) == ROWS
    history = json.loads(run.ok("history", table, "--json").stdout)
    assert (history[0]["version"], history[0]["operation"]) == (4, "RESTORE")
    assert "to version 1" in run.ok("history", table, "--limit", "1").stdout
    out = json.loads(run.ok("rollback", table, "--version", "4", "--json").stdout)
    assert out["committed"] is False and out["version"] == 4


def test_rollback_as_of(run: Cli, table: str) -> None:
    history = json.loads(run.ok("history", table, "--json").stdout)
    at_v1 = history[0]["timestamp"]
    run.ok("sql", table, "DELETE FROM data", *LOCAL)
    out = json.loads(run.ok("rollback", table, "--as-of", at_v1, "--json").stdout)
    assert (out["restored"], out["version"], out["committed"]) == (1, 3, True)
    assert rows(table) == ROWS


def test_rollback_usage(run: Cli, table: str) -> None:
    assert "give --version N or --as-of TIME" in run.fails(2, "rollback", table).stderr
    run.fails(2, "rollback", table, "--version", "0", "--as-of", "2024-01-01")
    assert "does not exist" in run.fails(1, "rollback", table, "--version", "7").stderr
    unchanged(table, 1, ROWS)


# -- CSV dialects --------------------------------------------------------------------------


def test_insert_csv_dialect(run: Cli, table: str, tmp_path: Path) -> None:
    src = tmp_path / "semi.csv"
    src.write_bytes("id;item;qty\n7;caf\u00e9;NA\n8;'a;b';4\n9;'NA';NA\n".encode("latin-1"))
    run.fails(1, "insert", table, str(src), *LOCAL)  # read as UTF-8 and commas: refused
    flags = ("--delimiter", ";", "--quote", "'", "--null", "NA", "--encoding", "latin-1")
    out = run.ok("insert", table, str(src), *flags, *LOCAL).stdout
    assert out == "Inserted 3 rows (version 2)\n"
    assert rows(table)[3:] == [
        {"id": 7, "item": "caf\u00e9", "qty": None},
        {"id": 8, "item": "a;b", "qty": 4},
        {"id": 9, "item": "NA", "qty": None},  # quoted, NA is text
    ]


def test_insert_tsv_without_header(run: Cli, table: str) -> None:
    out = run.ok(
        "insert",
        table,
        "--delimiter",
        "\\t",
        "--no-header",
        *LOCAL,
        input="7\tplum\t2\n8\tkiwi\t\n",
    )
    assert out.stdout == "Inserted 2 rows (version 2)\n"
    assert rows(table)[3:] == [
        {"id": 7, "item": "plum", "qty": 2},
        {"id": 8, "item": "kiwi", "qty": None},
    ]
    result = run.fails(1, "insert", table, "--no-header", *LOCAL, input="9,x\n")
    assert "2 field(s) a row, the table 3 column(s)" in result.stderr


def test_csv_flags_are_checked(run: Cli, table: str) -> None:
    result = run.fails(1, "insert", table, "--delimiter", ";", *LOCAL, input='{"id": 9}')
    assert "the data is JSON, not CSV" in result.stderr
    assert "one character" in run.fails(2, "insert", table, "--delimiter", ";;").stderr
    assert "unknown encoding" in run.fails(2, "insert", table, "--encoding", "nope").stderr
    result = run.fails(2, "create", table + "2", "--schema", "a:Int64", "--delimiter", ";")
    assert "go with --from-csv" in result.stderr


def test_create_from_csv_dialect(run: Cli, tmp_path: Path) -> None:
    src = tmp_path / "export.csv"
    src.write_bytes(b"1|x|2.5\n2|\\N|\n")
    path = str(tmp_path / "made")
    flags = ("--delimiter", "|", "--null", "\\N", "--no-header")
    run.ok("create", path, "--from-csv", str(src), *flags, *LOCAL)
    assert rows(path, "SELECT * FROM data ORDER BY column0") == [
        {"column0": 1, "column1": "x", "column2": 2.5},
        {"column0": 2, "column1": None, "column2": None},
    ]


# -- errors in the words of the CLI ------------------------------------------------------


def test_errors_name_flags(run: Cli, table: str, tmp_path: Path) -> None:
    dest = tmp_path / "backup"
    run.ok("backup", table, str(dest))
    result = run.fails(1, "backup", table, str(dest))
    assert "use --overwrite to replace it" in result.stderr and "=True" not in result.stderr
    result = run.fails(1, "restore", str(dest), table)
    assert "use --overwrite to replace it" in result.stderr and "=True" not in result.stderr
    result = run.fails(1, "insert", table, *LOCAL, input='{"id": 1, "item": "again"}')
    assert "posixlake insert --upsert" in result.stderr and "upsert=True" not in result.stderr
    result = run.fails(1, "vacuum", table, "--retention-hours", "0")
    assert "use --no-enforce-retention" in result.stderr
    assert "enforce_retention_duration" not in result.stderr


def test_update_cast_error_names_the_value(run: Cli, table: str) -> None:
    result = run.fails(1, "update", table, "--where", "id = 1", "--set", "qty='abc'", *LOCAL)
    assert "simplify_expressions" not in result.stderr
    assert "the value 'abc' cannot be cast to an integer (Int32)" in result.stderr
    unchanged(table, 1, ROWS)


def test_json_and_box_numbers_are_exact() -> None:
    import io

    table = pa.table(
        {
            "f": [1.0, 0.1, float("nan"), float("inf"), None, 1e16, -0.0],
            "g": pa.array([0.1] * 7, pa.float32()),
        }
    )
    out = io.BytesIO()
    write_rows(table, "jsonl", out=out)
    got = [json.loads(line) for line in out.getvalue().decode().splitlines()]
    assert [r["f"] for r in got] == [1.0, 0.1, None, None, None, 1e16, -0.0]
    assert all(isinstance(r["f"], float) for r in got if r["f"] is not None)
    assert {r["g"] for r in got} == {0.1}  # a float32's shortest text
    out = io.BytesIO()
    write_rows(table, "table", out=out)
    cells = [ln.split("|")[1].strip() for ln in out.getvalue().decode().splitlines()[3:10]]
    assert cells == ["1.0", "0.1", "NaN", "inf", "NULL", "1e+16", "-0.0"]


def test_shell_on_a_terminal_prompts_and_keeps_history(table: str, tmp_path: Path) -> None:
    import os
    import pty
    import select
    import subprocess
    import sys

    history = tmp_path / "history"
    master, slave = pty.openpty()
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "POSIXLAKE_HISTORY": str(history), "PYTHONPATH": root, "TERM": "dumb"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "shell", table, *LOCAL],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    os.write(master, b"SELECT 41 + 1\n  AS answer;\n.quit\n")
    out = b""
    while select.select([master], [], [], 120)[0]:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=120) == 0
    text = out.decode()
    assert "posixlake local engine, table" in text
    assert "posixlake> " in text and "      ...> " in text  # the continuation prompt
    assert "| 42     |" in text
    assert history.read_text().splitlines() == ["SELECT 41 + 1", "  AS answer;", ".quit"]
