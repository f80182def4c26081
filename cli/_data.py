"""Data commands: insert, query, merge, update, delete."""

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
from posixlake import DatabaseOps
from posixlake.csvcodec import DEFAULT_NULL_MARKER, read_changes_csv
from posixlake.result import WriteResult, format_table

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
@engine_options
@storage_options
@user_option
@json_option
def insert(table: str, file: str, upsert: bool) -> None:
    """Insert rows from FILE (or stdin) in one commit.

    \b
    FILE holds JSON (an object, an array of objects or JSON lines) or CSV with a
    header line; the format is detected from the content. Missing columns are NULL.
    An unknown column, a value of the wrong type or a duplicate primary key fails
    and nothing is written.

    \b
    Examples:
      posixlake insert /data/sales rows.csv
      echo '{"id": 4, "item": "pear", "qty": 3}' | posixlake insert /data/sales
      posixlake insert /data/sales changes.jsonl --upsert
    """
    data = read_input(file)
    with open_table(table, computes=True) as db:
        rows = db.insert(data, upsert=upsert)
        text, fields = _written(rows, db)
    if get_options().json:
        echo_json({"rows": rows.rows, **fields})
    else:
        click.echo(f"Inserted {plural(rows.rows, 'row')} ({text})")


@click.command()
@table_argument
@click.argument("sql", metavar="SQL")
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["table", "csv", "json"], case_sensitive=False),
    default="table",
    show_default=True,
    help="Output format (json: one array of objects).",
)
@click.option("--version", "version", type=click.IntRange(min=0), help="Query this table version.")
@click.option("--as-of", "as_of", type=AsOf(), help="Query the table as it was at this time.")
@engine_options
@storage_options
@user_option
@json_option
def query(table: str, sql: str, fmt: str, version: int | None, as_of: datetime | None) -> None:
    """Run SQL over the table, which is named `data`.

    \b
    TIME is ISO 8601 (2024-05-01T12:00:00Z; UTC when no offset) or epoch milliseconds.

    \b
    Examples:
      posixlake query /data/sales 'SELECT item, sum(qty) AS qty FROM data GROUP BY item'
      posixlake query /data/sales 'SELECT * FROM data' --format csv > sales.csv
      posixlake query /data/sales 'SELECT count(*) FROM data' --version 3 --json
      posixlake query /data/sales 'SELECT * FROM data' --as-of 2024-05-01T12:00:00Z
    """
    if version is not None and as_of is not None:
        raise click.UsageError("give --version or --as-of, not both")
    if sql == "-":
        sql = read_input("-").decode("utf-8", "replace")
    if get_options().json:
        fmt = "json"
    with open_table(table, computes=True) as db:
        result = db.query(sql, version=version, as_of=as_of)
    if fmt == "json":
        click.echo(result.to_json())
    elif fmt == "csv":
        from posixlake.csvcodec import render_csv

        rendered = render_csv(result.arrow())
        out = sys.stdout.buffer
        out.write(rendered if isinstance(rendered, bytes) else str(rendered).encode("utf-8"))
        out.flush()
    else:
        click.echo(format_table(result.arrow()))


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


COMMANDS: Final[list[click.Command]] = [insert, query, merge, update, delete]
