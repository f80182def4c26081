"""insert, query, merge, update, delete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import ROWS, Cli, rows, unchanged, version

LOCAL = ("--engine", "local")


# -- insert --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        '[{"id": 4, "item": "kiwi", "qty": 1}, {"id": 5, "item": "plum"}]',
        '{"id": 4, "item": "kiwi", "qty": 1}\n{"id": 5, "item": "plum"}\n',
    ],
    ids=["json-array", "json-lines"],
)
def test_insert_json_from_stdin(run: Cli, table: str, payload: str) -> None:
    out = run.ok("insert", table, *LOCAL, input=payload).stdout
    assert out == "Inserted 2 rows (version 2)\n"
    assert rows(table)[3:] == [
        {"id": 4, "item": "kiwi", "qty": 1},
        {"id": 5, "item": "plum", "qty": None},
    ]


def test_insert_one_object_from_a_file_with_json_output(
    run: Cli, table: str, tmp_path: Path
) -> None:
    src = tmp_path / "row.json"
    src.write_text('{"id": 9, "item": "lime", "qty": 2}')
    out = json.loads(run.ok("insert", table, str(src), *LOCAL, "--json").stdout)
    assert out == {"rows": 1, "version": 2, "committed": True}
    assert rows(table)[-1] == {"id": 9, "item": "lime", "qty": 2}


def test_insert_csv(run: Cli, table: str, tmp_path: Path) -> None:
    src = tmp_path / "rows.csv"
    src.write_text('id,item,qty\n4,"kiwi, gold",1\n5,plum,\n')
    run.ok("insert", table, str(src), *LOCAL)
    assert rows(table)[3:] == [
        {"id": 4, "item": "kiwi, gold", "qty": 1},
        {"id": 5, "item": "plum", "qty": None},
    ]


def test_insert_nothing_makes_no_commit(run: Cli, table: str) -> None:
    assert run.ok("insert", table, *LOCAL, input="[]").stdout == (
        "Inserted 0 rows (no commit, still version 1)\n"
    )
    assert version(table) == 1


def test_insert_upsert(run: Cli, table: str) -> None:
    run.ok(
        "insert",
        table,
        "--upsert",
        *LOCAL,
        input='[{"id": 1, "item": "APPLE", "qty": 7}, {"id": 8, "item": "new"}]',
    )
    assert rows(table)[0] == {"id": 1, "item": "APPLE", "qty": 7}
    assert rows(table)[-1] == {"id": 8, "item": "new", "qty": None}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ('[{"id": 4, "item": "x"', "malformed JSON"),
        ('[{"id": "four", "item": "x"}]', "id"),
        ('[{"id": 4, "item": "x", "qty": 1.5}]', "qty"),
        ('[{"id": 4, "qty": 1}]', "item"),
        ('[{"id": 4, "item": "x", "colour": "red"}]', "colour"),
        ('[{"id": 1, "item": "again"}]', "1"),
        ('[{"id": 4, "item": "a"}, {"id": 4, "item": "b"}]', "4"),
        ("[1, 2]", "row 0"),
    ],
    ids=[
        "malformed",
        "wrong-type",
        "truncating-float",
        "missing-not-null",
        "unknown-column",
        "duplicate-key",
        "repeated-key",
        "not-objects",
    ],
)
def test_insert_bad_input_fails_and_commits_nothing(
    run: Cli, table: str, payload: str, message: str
) -> None:
    result = run.fails(1, "insert", table, *LOCAL, input=payload)
    assert message in result.stderr
    unchanged(table, 1, ROWS)


def test_insert_missing_file_is_a_usage_error(run: Cli, table: str, tmp_path: Path) -> None:
    result = run.fails(2, "insert", table, str(tmp_path / "none.json"), *LOCAL)
    assert "No such file" in result.stderr
    unchanged(table, 1, ROWS)


def test_insert_into_a_missing_table_fails(run: Cli, tmp_path: Path) -> None:
    run.fails(1, "insert", str(tmp_path / "none"), *LOCAL, input='{"id": 1}')
    assert not (tmp_path / "none").exists()


# -- query ---------------------------------------------------------------------------------


def test_query_table_format(run: Cli, table: str) -> None:
    out = run.ok("query", table, "SELECT id, item FROM data ORDER BY id", *LOCAL).stdout
    assert out.splitlines() == [
        "+----+-------+",
        "| id | item  |",
        "+----+-------+",
        "| 1  | apple |",
        "| 2  | pear  |",
        "| 3  | fig   |",
        "+----+-------+",
        "(3 rows)",
    ]


def test_query_json_is_one_array(run: Cli, table: str) -> None:
    out = run.ok(
        "query", table, "SELECT * FROM data ORDER BY id", "--format", "json", *LOCAL
    ).stdout
    assert json.loads(out) == ROWS
    assert run.ok("query", table, "SELECT * FROM data ORDER BY id", "--json", *LOCAL).stdout == out


def test_query_csv(run: Cli, table: str) -> None:
    out = run.ok("query", table, "SELECT * FROM data ORDER BY id", "-f", "csv", *LOCAL).stdout
    assert out == "id,item,qty\n1,apple,3\n2,pear,5\n3,fig,\n"


def test_query_sql_from_stdin(run: Cli, table: str) -> None:
    out = run.ok("query", table, "-", "--json", *LOCAL, input="SELECT count(*) AS n FROM data")
    assert json.loads(out.stdout) == [{"n": 3}]


def test_query_time_travel(run: Cli, table: str) -> None:
    run.ok("delete", table, "--where", "id = 1", *LOCAL)
    q = ("SELECT count(*) AS n FROM data", "--json", *LOCAL)
    assert json.loads(run.ok("query", table, *q).stdout) == [{"n": 2}]
    assert json.loads(run.ok("query", table, *q, "--version", "1").stdout) == [{"n": 3}]
    assert json.loads(run.ok("query", table, *q, "--version", "0").stdout) == [{"n": 0}]
    history = json.loads(run.ok("history", table, "--json").stdout)
    v1_time = next(c["timestamp"] for c in history if c["version"] == 1)
    assert json.loads(run.ok("query", table, *q, "--as-of", v1_time).stdout) == [{"n": 3}]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--version", "1", "--as-of", "2024-01-01"], 2),
        (["--as-of", "yesterday"], 2),
        (["--version", "-1"], 2),
        (["--format", "xml"], 2),
        (["--version", "99"], 1),
        (["--as-of", "2000-01-01T00:00:00Z"], 1),
    ],
)
def test_query_bad_options(run: Cli, table: str, args: list[str], code: int) -> None:
    run.fails(code, "query", table, "SELECT * FROM data", *args, *LOCAL)


@pytest.mark.parametrize(
    "sql", ["SELEC * FROM data", "SELECT nosuch FROM data", "SELECT * FROM other"]
)
def test_query_bad_sql(run: Cli, table: str, sql: str) -> None:
    run.fails(1, "query", table, sql, *LOCAL)


# -- merge ---------------------------------------------------------------------------------

CHANGES = json.dumps(
    [
        {"_op": "INSERT", "id": 7, "item": "plum", "qty": 2},
        {"_op": "UPDATE", "id": 3, "qty": 10},
        {"_op": "DELETE", "id": 2},
        {"_op": "DELETE", "id": 99},
    ]
)


def test_merge(run: Cli, table: str) -> None:
    out = run.ok("merge", table, *LOCAL, input=CHANGES).stdout
    assert out == "Merged: 1 inserted, 1 updated, 1 deleted, 1 skipped (version 2)\n"
    assert rows(table) == [
        {"id": 1, "item": "apple", "qty": 3},
        {"id": 3, "item": "fig", "qty": 10},
        {"id": 7, "item": "plum", "qty": 2},
    ]


def test_merge_json_and_key(run: Cli, table: str, tmp_path: Path) -> None:
    src = tmp_path / "c.json"
    src.write_text(CHANGES)
    out = json.loads(run.ok("merge", table, str(src), "--key", "id", "--json", *LOCAL).stdout)
    assert out == {
        "rows_inserted": 1,
        "rows_updated": 1,
        "rows_deleted": 1,
        "rows_skipped": 1,
        "total_affected": 3,
        "version": 2,
        "committed": True,
    }


@pytest.mark.parametrize(
    ("args", "payload", "message"),
    [
        (["--strict"], CHANGES, "do not apply"),
        ([], '[{"_op": "UPSERT", "id": 1}]', "UPSERT"),
        ([], '[{"id": 1, "item": "x"}]', "_op"),
        ([], '[{"_op": "UPDATE", "id": 1, "colour": "red"}]', "colour"),
        ([], '[{"_op": "INSERT", "id": 8}', "JSON"),
        (["--key", "nosuch"], CHANGES, "nosuch"),
    ],
    ids=["strict", "bad-op", "no-op-column", "unknown-column", "malformed", "unknown-key"],
)
def test_merge_bad_input_fails_and_commits_nothing(
    run: Cli, table: str, args: list[str], payload: str, message: str
) -> None:
    result = run.fails(1, "merge", table, *args, *LOCAL, input=payload)
    assert message in result.stderr
    unchanged(table, 1, ROWS)


# -- update --------------------------------------------------------------------------------


def test_update(run: Cli, table: str) -> None:
    out = run.ok(
        "update", table, "-w", "qty IS NULL", "-s", "qty=0", "--set", "item='FIG'", *LOCAL
    ).stdout
    assert out == "Updated 1 row (version 2)\n"
    assert rows(table)[2] == {"id": 3, "item": "FIG", "qty": 0}


def test_update_expression_and_json(run: Cli, table: str) -> None:
    out = json.loads(
        run.ok(
            "update", table, "--where", "true", "--set", "qty = qty * 2", "--json", *LOCAL
        ).stdout
    )
    assert out == {"rows": 3, "version": 2, "committed": True}
    assert [r["qty"] for r in rows(table)] == [6, 10, None]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--set", "qty=1"], 2),
        (["--where", "true"], 2),
        (["--where", "true", "--set", "qty"], 2),
        (["--where", "true", "--set", "=1"], 2),
        (["--where", "id = ", "--set", "qty=1"], 1),
        (["--where", "true", "--set", "colour='red'"], 1),
        (["--where", "true", "--set", "id=id+1"], 1),
        (["--where", "true", "--set", "qty=nosuch + 1"], 1),
    ],
)
def test_update_bad_input_fails_and_commits_nothing(
    run: Cli, table: str, args: list[str], code: int
) -> None:
    run.fails(code, "update", table, *args, *LOCAL)
    unchanged(table, 1, ROWS)


# -- delete --------------------------------------------------------------------------------


def test_delete(run: Cli, table: str) -> None:
    assert (
        run.ok("delete", table, "--where", "qty > 4", *LOCAL).stdout
        == "Deleted 1 row (version 2)\n"
    )
    assert [r["id"] for r in rows(table)] == [1, 3]


def test_delete_nothing_makes_no_commit(run: Cli, table: str) -> None:
    out = json.loads(run.ok("delete", table, "-w", "id = 42", "--json", *LOCAL).stdout)
    assert out == {"rows": 0, "version": 1, "committed": False}


@pytest.mark.parametrize(
    ("args", "code"),
    [([], 2), (["--where", "nosuch = 1"], 1), (["--where", "id = = 1"], 1), (["--where", " "], 1)],
)
def test_delete_bad_input_fails_and_commits_nothing(
    run: Cli, table: str, args: list[str], code: int
) -> None:
    run.fails(code, "delete", table, *args, *LOCAL)
    unchanged(table, 1, ROWS)


@pytest.mark.parametrize(
    "args",
    [
        ["query", "SELECT 1"],
        ["merge"],
        ["update", "-w", "true", "-s", "qty=1"],
        ["delete", "-w", "true"],
    ],
)
def test_writes_to_a_missing_table_fail(run: Cli, tmp_path: Path, args: list[str]) -> None:
    command, *rest = args
    run.fails(1, command, str(tmp_path / "none"), *rest, *LOCAL, input="[]")
    assert not (tmp_path / "none").exists()
