"""Data commands: insert, query, sql, shell, merge, update, delete."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any, Final

import click

from cli._common import (
    AsOf,
    echo_json,
    engine_options,
    get_options,
    json_option,
    open_table,
    plural,
    read_input,
    split_columns,
    storage_options,
    table_argument,
    user_option,
)
from cli._csvopts import csv_dialect_options, csv_options_of
from cli._output import FORMATS, output_options, write_rows
from posixlake import DatabaseOps
from posixlake.csvcodec import DEFAULT_NULL_MARKER, read_changes_csv
from posixlake.result import WriteResult
from posixlake.types import type_string

__all__ = ["COMMANDS"]


def _written(done: WriteResult, db: DatabaseOps) -> tuple[str, dict[str, Any]]:
    """Describe a write's commit: text, and the JSON fields ``version`` / ``committed``.

    The version is the one the write committed (read from its result, so another writer's
    commit meanwhile cannot be shown as ours); without a commit, the table's current one.
    """
    if done.version is not None:
        return f"version {done.version}", {"version": done.version, "committed": True}
    current = db.version
    return f"no commit, still version {current}", {"version": current, "committed": False}


@click.command()
@table_argument
@click.argument("file", default="-", required=False, metavar="[FILE]")
@click.option(
    "--upsert", is_flag=True, help="Update rows whose primary key exists instead of failing."
)
@csv_dialect_options
@engine_options
@storage_options
@user_option
@json_option
def insert(
    table: str,
    file: str,
    upsert: bool,
    delimiter: str | None,
    quote: str | None,
    null: str | None,
    encoding: str | None,
    no_header: bool,
) -> None:
    """Insert rows from FILE (or stdin) in one commit.

    \b
    FILE holds JSON (an object, an array of objects or JSON lines) or CSV with a
    header line; the format is detected from the content. Missing columns are NULL.
    An unknown column, a value of the wrong type or a duplicate primary key fails
    and nothing is written. CSV in another dialect: --delimiter ';' --quote "'"
    --null NA --encoding latin-1 --no-header.

    \b
    Examples:
      posixlake insert /data/sales rows.csv
      echo '{"id": 4, "item": "pear", "qty": 3}' | posixlake insert /data/sales
      posixlake insert /data/sales changes.jsonl --upsert
      posixlake insert /data/sales export.csv --delimiter ';' --null NA --encoding latin-1
    """
    csv_options = csv_options_of(delimiter, quote, null, encoding, no_header)
    data = read_input(file)
    with open_table(table, computes=True) as db:
        rows = db.insert(data, upsert=upsert, csv_options=csv_options)
        text, fields = _written(rows, db)
    if get_options().json:
        echo_json({"rows": rows.rows, **fields})
    else:
        click.echo(f"Inserted {plural(rows.rows, 'row')} ({text})")


_QUERY_USAGE: Final = (
    "give the SQL to run, e.g. posixlake query {table} 'SELECT * FROM data LIMIT 10' "
    "(the table is named `data`; '-' reads the SQL from stdin; posixlake shell {table} "
    "opens a prompt)"
)


def _statement_text(sql: str | None, table: str, command: str) -> str:
    """Return the SQL argument, read from stdin for ``-``; a usage error when missing."""
    if sql is None or not sql.strip():
        raise click.UsageError(
            "missing SQL: "
            + _QUERY_USAGE.format(table=table).replace("posixlake query", f"posixlake {command}")
        )
    if sql == "-":
        sql = read_input("-").decode("utf-8", "replace")
    return sql


@click.command()
@table_argument
@click.argument("sql", metavar="SQL", required=False)
@output_options
@click.option("--version", "version", type=click.IntRange(min=0), help="Query this table version.")
@click.option("--as-of", "as_of", type=AsOf(), help="Query the table as it was at this time.")
@engine_options
@storage_options
@user_option
@json_option
def query(
    table: str,
    sql: str | None,
    fmt: str,
    max_rows: int | None,
    max_width: int | None,
    version: int | None,
    as_of: datetime | None,
) -> None:
    """Run a SQL query over the table, which is named `data`.

    \b
    Time travel: --version N / --as-of TIME, or in the SQL as Delta users write it:
    FROM data VERSION AS OF 3, FROM data TIMESTAMP AS OF '2024-05-01 12:00:00'.
    TIME is ISO 8601 (2024-05-01T12:00:00Z; UTC when no offset) or epoch milliseconds.
    UPDATE, DELETE, INSERT and MERGE run with `posixlake sql`.

    \b
    On a terminal a table shows at most --max-rows rows (the first and last 20 of 40
    by default); piped, or with --format csv|json|jsonl|markdown, every row is printed.

    \b
    Examples:
      posixlake query /data/sales 'SELECT item, sum(qty) AS qty FROM data GROUP BY item'
      posixlake query /data/sales 'SELECT * FROM data' --format csv > sales.csv
      posixlake query /data/sales 'SELECT count(*) FROM data VERSION AS OF 3' --json
      posixlake query /data/sales 'SELECT * FROM data' --as-of 2024-05-01T12:00:00Z
    """
    from posixlake.sql import statement_kind

    if version is not None and as_of is not None:
        raise click.UsageError("give --version or --as-of, not both")
    sql = _statement_text(sql, table, "query")
    kind = statement_kind(sql)
    if kind in ("update", "delete", "insert", "merge"):
        raise click.UsageError(
            f'query runs SELECT; run {kind.upper()} with: posixlake sql {table} "{sql.strip()}"'
        )
    if get_options().json:
        fmt = "json"
    # a SELECT changes no session state: it may run in a leased, warm session
    with open_table(table, computes=True, shared=kind == "select") as db:
        result = db.query(sql, version=version, as_of=as_of)
    write_rows(result.arrow(), fmt, max_rows=max_rows, max_width=max_width)


_VERBS: Final = {"update": "Updated", "delete": "Deleted", "insert": "Inserted"}


def _run_statement(
    db: DatabaseOps, sql: str, fmt: str, max_rows: int | None, max_width: int | None
) -> None:
    """Run one statement and print its rows, or what it changed."""
    from posixlake.sql import statement_kind

    kind = statement_kind(sql)
    result = db.sql(sql)
    if kind not in _VERBS and kind != "merge":
        write_rows(result.arrow(), fmt, max_rows=max_rows, max_width=max_width)
        return
    row = result.to_pylist()[0]
    version = row["version"]
    committed = version is not None
    if version is None:
        version = db.version
    if get_options().json or fmt in ("json", "jsonl"):
        if kind == "merge":
            fields = {
                "rows_inserted": row["num_inserted_rows"],
                "rows_updated": row["num_updated_rows"],
                "rows_deleted": row["num_deleted_rows"],
            }
        else:
            fields = {"rows": row["num_affected_rows"]}
        echo_json({**fields, "version": version, "committed": committed})
        return
    where = f"version {version}" if committed else f"no commit, still version {version}"
    if kind == "merge":
        click.echo(
            f"Merged: {row['num_inserted_rows']:,} inserted, {row['num_updated_rows']:,} "
            f"updated, {row['num_deleted_rows']:,} deleted ({where})"
        )
    else:
        click.echo(f"{_VERBS[kind]} {plural(row['num_affected_rows'], 'row')} ({where})")


@click.command("sql")
@table_argument
@click.argument("statement", metavar="SQL", required=False)
@output_options
@engine_options
@storage_options
@user_option
@json_option
def sql_cmd(
    table: str, statement: str | None, fmt: str, max_rows: int | None, max_width: int | None
) -> None:
    """Run a SQL statement: SELECT, UPDATE, DELETE, INSERT or MERGE.

    \b
    The table is named `data`; the SQL is Spark SQL (Databricks / Delta syntax) on the
    Spark engine, the same with DataFusion's quoting on the local engine ('it''s').
    Each write is one commit, the same as the matching command or Python call.
    SQL '-' reads the statement from stdin.

    \b
    Examples:
      posixlake sql /data/sales "UPDATE data SET qty = qty + 1 WHERE item = 'pear'"
      posixlake sql /data/sales "DELETE FROM data WHERE qty = 0"
      posixlake sql /data/sales "INSERT INTO data VALUES (7, 'plum', 2)"
      posixlake sql /data/sales "INSERT INTO data SELECT id + 100, item, qty FROM data VERSION AS OF 1"
      posixlake sql /data/sales "MERGE INTO data t USING (VALUES (3, 'fig', 9)) AS s(id, item, qty)
        ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    """
    from posixlake.sql import statement_kind

    text = _statement_text(statement, table, "sql")
    # SELECT and DML run as queries and DataFrame jobs; SET, CREATE... may change the
    # session's state, so they get a session of their own
    with open_table(table, computes=True, shared=statement_kind(text) != "other") as db:
        _run_statement(db, text, fmt, max_rows, max_width)


_SHELL_HELP: Final = """\
Enter SQL statements ending with ; (the table is `data`). Commands:
  .help              this text
  .mode FORMAT       table, csv, json, jsonl or markdown
  .maxrows N         rows a table shows (0: all)
  .schema            the table's columns
  .quit / .exit      leave (or Ctrl-D)"""


def _history_file() -> str:
    import os

    return os.environ.get("POSIXLAKE_HISTORY") or os.path.expanduser("~/.posixlake_history")


@click.command()
@table_argument
@output_options
@engine_options
@storage_options
@user_option
def shell(table: str, fmt: str, max_rows: int | None, max_width: int | None) -> None:
    """Open an interactive SQL prompt (with history).

    \b
    Statements end with ; and run as with `posixlake sql` (queries, UPDATE, DELETE,
    INSERT, MERGE, time travel). Dot commands: .help .mode .maxrows .schema .quit.
    With input from a pipe no prompt is printed: statements run one after the other,
    and the exit code is 1 if one failed.

    \b
    Examples:
      posixlake shell /data/sales --engine local
      echo "SELECT count(*) FROM data;" | posixlake shell /data/sales
    """
    from posixlake.errors import PosixLakeError
    from posixlake.sql import split_statements

    interactive = sys.stdin.isatty()
    readline: Any = None
    if interactive:
        try:
            import readline as _readline

            readline = _readline
            readline.read_history_file(_history_file())
        except (ImportError, OSError):
            pass
    failed = False
    with open_table(table, computes=True, shared=False) as db:  # SET... must not outlive it
        if interactive:
            click.echo(
                f"posixlake {db.engine.name} engine, table {table} (version {db.version}). "
                "Statements end with ; .help for help.",
                err=True,
            )
        buffer = ""
        while True:
            prompt = ("posixlake> " if not buffer.strip() else "      ...> ") if interactive else ""
            try:
                line = input(prompt)
            except EOFError:
                if interactive:
                    click.echo(err=True)
                line = None
            except KeyboardInterrupt:
                click.echo("^C", err=True)
                buffer = ""
                continue
            if line is None:
                statements, buffer = ([buffer.strip()] if buffer.strip() else []), ""
            elif not buffer.strip() and line.strip().startswith("."):
                words = line.split()
                command = words[0].lower()
                if command in (".quit", ".exit"):
                    break
                if command == ".help":
                    click.echo(_SHELL_HELP)
                elif command == ".mode" and len(words) == 2 and words[1].lower() in FORMATS:
                    fmt = words[1].lower()
                elif command == ".maxrows" and len(words) == 2 and words[1].isdigit():
                    max_rows = int(words[1])
                elif command == ".schema":
                    for f in db.schema.fields:
                        click.echo(f"  {f.name} {type_string(f.arrow_type())}")
                elif command == ".mode":
                    click.echo(f"Error: .mode takes one of {', '.join(FORMATS)}", err=True)
                    failed = True
                elif command == ".maxrows":
                    click.echo("Error: .maxrows takes a number of rows (0: all)", err=True)
                    failed = True
                else:
                    click.echo(
                        f"Error: unknown command {line.strip()!r}; .help lists them", err=True
                    )
                    failed = True
                continue
            else:
                statements, buffer = split_statements(buffer + line + "\n", engine=db.engine.name)
            for text in statements:
                try:
                    _run_statement(db, text, fmt, max_rows, max_width)
                except PosixLakeError as err:
                    failed = True
                    click.echo(f"Error: {' '.join(str(err).split())}", err=True)
            if line is None:
                break
    if readline is not None:
        try:
            readline.write_history_file(_history_file())
        except OSError:
            click.echo(f"Warning: cannot write the history to {_history_file()}", err=True)
    if failed and not interactive:
        raise click.exceptions.Exit(1)


@click.command()
@table_argument
@click.argument("file", default="-", required=False, metavar="[FILE]")
@click.option(
    "--key",
    "-k",
    "key",
    metavar="COLS",
    help="Match rows on these column(s) (default: the primary key).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Fail (commit nothing) if a row does not apply: UPDATE/DELETE of a missing key, "
    "INSERT of an existing one.",
)
@click.option(
    "--null-marker",
    "null_marker",
    metavar="TEXT",
    default=DEFAULT_NULL_MARKER,
    show_default=True,
    help="In CSV input, the field text that sets a column to NULL (an empty field changes "
    "nothing).",
)
@engine_options
@storage_options
@user_option
@json_option
def merge(table: str, file: str, key: str | None, strict: bool, null_marker: str) -> None:
    """Apply INSERT/UPDATE/DELETE rows (an `_op` column) in one commit.

    \b
    Each row has an `_op` column: INSERT, UPDATE or DELETE. DELETE rows need only
    the key; UPDATE rows set the columns they carry. Rows that do not apply are
    counted as skipped (or fail with --strict).

    \b
    In CSV, an empty field carries nothing: an UPDATE leaves that column as it is
    (an INSERT leaves it NULL). To set NULL, write \\N (or the --null-marker text).
    In JSON, an UPDATE row sets the keys it has ("qty": null sets NULL).

    \b
    Example:
      posixlake merge /data/sales changes.csv --key id
      where changes.csv is:
        _op,id,item,qty
        INSERT,7,plum,2
        UPDATE,3,,10
        UPDATE,1,,\\N
        DELETE,2,,
    """
    if not null_marker:
        raise click.BadParameter("the NULL marker cannot be empty", param_hint="--null-marker")
    data = read_input(file)
    cols = split_columns([key]) if key else None
    with open_table(table, computes=True) as db:
        rows: object = data
        if not _is_json(data):
            rows = read_changes_csv(data, db.arrow_schema, null_marker=null_marker)
        metrics = db.merge(rows, cols, strict=strict)
        version = metrics.version if metrics.version is not None else db.version
    if get_options().json:
        echo_json(
            {**metrics.to_dict(), "version": version, "committed": metrics.version is not None}
        )
        return
    click.echo(
        f"Merged: {metrics.rows_inserted:,} inserted, {metrics.rows_updated:,} updated, "
        f"{metrics.rows_deleted:,} deleted, {metrics.rows_skipped:,} skipped "
        f"({'version ' + str(metrics.version) if metrics.version is not None else 'no commit'})"
    )


def _is_json(data: bytes) -> bool:
    """Return whether a change file is JSON (an object, an array, JSON lines), not CSV."""
    text = data.removeprefix(b"\xef\xbb\xbf").lstrip()
    return not text or text[:1] in (b"[", b"{")


def _assignment(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        column, sep, expr = item.partition("=")
        if not sep or not column.strip() or not expr.strip():
            raise click.BadParameter(f"{item!r} is not COLUMN=EXPRESSION", ctx=ctx, param=param)
        out[column.strip()] = expr.strip()
    return out


@click.command()
@table_argument
@click.option(
    "--where",
    "-w",
    "where",
    required=True,
    metavar="PREDICATE",
    help="SQL predicate of the rows to change ('true' for every row).",
)
@click.option(
    "--set",
    "-s",
    "sets",
    multiple=True,
    required=True,
    metavar="COL=EXPR",
    callback=_assignment,
    help="A column and its new value as SQL (quote strings: name='bob'). Repeatable.",
)
@engine_options
@storage_options
@user_option
@json_option
def update(table: str, where: str, sets: dict[str, str]) -> None:
    """Set columns on the rows matching a predicate, in one commit.

    \b
    Examples:
      posixlake update /data/sales --where 'id = 3' --set qty=10 --set "item='apple'"
      posixlake update /data/sales --where 'qty < 0' --set 'qty=0'
    """
    with open_table(table, computes=True) as db:
        rows = db.update(where, expressions=sets)
        text, fields = _written(rows, db)
    if get_options().json:
        echo_json({"rows": rows.rows, **fields})
    else:
        click.echo(f"Updated {plural(rows.rows, 'row')} ({text})")


@click.command()
@table_argument
@click.option(
    "--where",
    "-w",
    "where",
    required=True,
    metavar="PREDICATE",
    help="SQL predicate of the rows to delete ('true' for every row).",
)
@engine_options
@storage_options
@user_option
@json_option
def delete(table: str, where: str) -> None:
    """Delete the rows matching a predicate, in one commit.

    \b
    Examples:
      posixlake delete /data/sales --where 'id = 3'
      posixlake delete /data/sales --where "item = 'pear' AND qty = 0"
    """
    with open_table(table, computes=True) as db:
        rows = db.delete_rows_where(where)
        text, fields = _written(rows, db)
    if get_options().json:
        echo_json({"rows": rows.rows, **fields})
    else:
        click.echo(f"Deleted {plural(rows.rows, 'row')} ({text})")


COMMANDS: Final[list[click.Command]] = [insert, query, sql_cmd, shell, merge, update, delete]
