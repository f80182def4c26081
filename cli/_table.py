"""Table commands: create, info, schema, history."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from typing import Any, Final

import click
import pyarrow as pa

from cli._common import (
    AsOf,
    echo_json,
    engine_accepted,
    engine_kwargs,
    engine_options,
    get_options,
    human_bytes,
    iso_time,
    json_option,
    new_password,
    open_table,
    plural,
    read_input,
    schema_json,
    spinner,
    split_columns,
    storage_for,
    storage_options,
    table_argument,
    user_option,
    warn_secret_flag,
)
from cli._csvopts import csv_dialect_options, csv_options_of
from posixlake import DatabaseOps, Field, Schema
from posixlake.delta import DeltaLog
from posixlake.engines.local import expand_paths
from posixlake.errors import AlreadyExists, InvalidOperation, PosixLakeError, SchemaError
from posixlake.result import format_table
from posixlake.security import ADMIN_PASSWORD_ENV
from posixlake.storage import StorageConfig, is_local, normalize_uri, storage_options_for
from posixlake.types import CommitInfo, parse_type, type_string

__all__ = ["COMMANDS", "parse_schema_spec"]

# -- schema specs --------------------------------------------------------------------------

_FIELD: Final = re.compile(
    r'\s*(?:"(?P<quoted>[^"]+)"|(?P<name>[^\s:"]+))\s*(?::\s*|\s+)(?P<type>.+?)'
    r"(?P<notnull>\s+NOT\s+NULL)?\s*",
    re.IGNORECASE | re.DOTALL,
)
_PRIMARY_KEY: Final = re.compile(r"\s*PRIMARY\s+KEY\s*\((?P<cols>[^)]*)\)\s*", re.IGNORECASE)

TYPE_ALIASES: Final[dict[str, str]] = {
    "int": "Int32",
    "integer": "Int32",
    "int32": "Int32",
    "long": "Int64",
    "bigint": "Int64",
    "int64": "Int64",
    "double": "Float64",
    "float64": "Float64",
    "float": "Float32",
    "float32": "Float32",
    "text": "String",
    "varchar": "String",
    "string": "String",
    "utf8": "String",
    "bool": "Boolean",
    "boolean": "Boolean",
}
"""The type names of the original project's ``--schema`` (any case): ``int`` is Int32
there, ``long`` and ``bigint`` Int64, ``float`` Float32, ``text`` and ``varchar`` String."""


def _type_name(text: str) -> str:
    return TYPE_ALIASES.get(text.strip().lower(), text.strip())


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside <...> or (...)."""
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _schema_from_json(value: Any) -> Schema:
    key: list[str] | str | None = None
    if isinstance(value, dict) and isinstance(value.get("fields"), list):
        key = value.get("primary_key") or None
        value = value["fields"]
    if isinstance(value, dict):
        return Schema(
            [Field(str(k), _type_name(v) if isinstance(v, str) else v) for k, v in value.items()]
        )
    if isinstance(value, list):
        out: list[Field] = []
        for item in value:
            if not isinstance(item, dict) or "name" not in item or "type" not in item:
                raise SchemaError(f'a field must be {{"name": ..., "type": ...}}, not {item!r}')
            kind = item["type"]
            kind = _type_name(kind) if isinstance(kind, str) else kind
            out.append(Field(str(item["name"]), kind, bool(item.get("nullable", True))))
        return Schema(out, primary_key=key)
    raise SchemaError("a JSON schema is an object of name -> type, or a list of fields")


def parse_schema_spec(text: str) -> Schema:
    """Parse a schema given on the command line.

    Accepted forms: ``id:Int64, name:String NOT NULL``, the form ``posixlake schema --spec``
    prints (``(id Int64 NOT NULL, name String, PRIMARY KEY (id))``), a JSON object of
    name -> type, or the JSON that ``posixlake schema --json`` prints.

    Raises:
        SchemaError: the text is none of these, or names an unknown type.
    """
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        try:
            return _schema_from_json(json.loads(stripped))
        except json.JSONDecodeError as err:
            raise SchemaError(f"malformed JSON schema: {err}") from err
    if stripped.startswith("(") and stripped.endswith(")") and len(_split_top(stripped)) == 1:
        stripped = stripped[1:-1]
    fields: list[Field] = []
    key: list[str] = []
    for part in _split_top(stripped):
        pk = _PRIMARY_KEY.fullmatch(part)
        if pk:
            key += [c.strip().strip('"') for c in pk.group("cols").split(",") if c.strip()]
            continue
        m = _FIELD.fullmatch(part)
        if not m:
            raise SchemaError(f"cannot read the column {part.strip()!r}: write name:Type")
        name = m.group("quoted") or m.group("name")
        fields.append(Field(name, _type_name(m.group("type")), nullable=not m.group("notnull")))
    if not fields:
        raise SchemaError("the schema has no columns")
    return Schema(fields, primary_key=key or None)


def _schema_param(ctx: click.Context, param: click.Parameter, value: str | None) -> Schema | None:
    if value is None:
        return None
    text = read_input(value[1:]).decode("utf-8", "replace") if value.startswith("@") else value
    try:
        return parse_schema_spec(text)
    except SchemaError as err:
        raise click.BadParameter(str(err), ctx=ctx, param=param) from err


def _types_param(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    """Parse ``--types col=Type,col2=Type`` (repeatable) into column -> type string."""
    out: dict[str, str] = {}
    for value in values:
        for part in _split_top(value):
            column, sep, kind = part.partition("=")
            column = column.strip().strip('"')
            if not sep or not column or not kind.strip():
                raise click.BadParameter(
                    f"{part.strip()!r} is not COLUMN=Type", ctx=ctx, param=param
                )
            try:
                parse_type(_type_name(kind))
            except SchemaError as err:
                raise click.BadParameter(str(err), ctx=ctx, param=param) from err
            if column in out:
                raise click.BadParameter(f"column {column!r} is given twice", ctx=ctx, param=param)
            out[column] = _type_name(kind)
    return out


# -- create --------------------------------------------------------------------------------


@click.command()
@table_argument
@click.option(
    "--schema",
    "schema",
    metavar="SPEC",
    callback=_schema_param,
    help="Columns: 'id:Int64, name:String NOT NULL', JSON, or @FILE (- for stdin).",
)
@click.option(
    "--from-csv",
    "csv_paths",
    metavar="PATH",
    multiple=True,
    help="Import CSV file(s), a directory or a glob; column types are inferred (or given "
    "by --types / --schema). Repeatable.",
)
@click.option(
    "--types",
    "types",
    metavar="COL=TYPE,...",
    multiple=True,
    callback=_types_param,
    help="With --from-csv: the type of these columns instead of an inferred one, "
    "e.g. 'zip=String,amount=Decimal128(10,2)'. Repeatable.",
)
@click.option(
    "--from-parquet",
    "parquet_paths",
    metavar="PATH",
    multiple=True,
    help="Import Parquet file(s), a directory or a glob. Repeatable.",
)
@click.option(
    "--primary-key",
    "-k",
    metavar="COLS",
    help="Primary key column(s), comma-separated; enforced on insert.",
)
@click.option(
    "--partition-by",
    metavar="COLS",
    multiple=True,
    help="Partition column(s), comma-separated or repeated.",
)
@click.option("--name", metavar="NAME", help="A table name stored in the Delta metadata.")
@click.option(
    "--auth",
    is_flag=True,
    help="Turn on users: --user NAME becomes the first admin (new password from "
    "$POSIXLAKE_NEW_PASSWORD or a prompt).",
)
@click.option(
    "--admin-user",
    metavar="NAME",
    help="With --auth: the first admin (as --user; default admin).",
)
@click.option(
    "--admin-password",
    metavar="PASSWORD",
    help="With --auth: the first admin's password; visible to other users in the process "
    "list: prefer $POSIXLAKE_ADMIN_PASSWORD or the prompt.",
)
@click.option(
    "--create-bucket",
    is_flag=True,
    help="Create a missing S3 bucket or Azure container.",
)
@csv_dialect_options
@engine_options
@storage_options
@user_option
@json_option
def create(
    table: str,
    schema: Schema | None,
    csv_paths: tuple[str, ...],
    types: dict[str, str],
    parquet_paths: tuple[str, ...],
    primary_key: str | None,
    partition_by: tuple[str, ...],
    name: str | None,
    auth: bool,
    admin_user: str | None,
    admin_password: str | None,
    create_bucket: bool,
    **csv_dialect: Any,
) -> None:
    """Create a table from a schema, or from CSV or Parquet files.

    \b
    Types: Int8..Int64, UInt8..UInt64, Float32, Float64, Decimal128(p,s), String,
    Binary, Boolean, Date32, Timestamp (UTC), TimestampNtz, List<T>, Map<K,V>,
    Struct<a:T,...>. A column is nullable unless followed by NOT NULL.

    \b
    Examples:
      posixlake create /data/sales --schema 'id:Int64 NOT NULL, item:String, price:Decimal128(10,2)' -k id
      posixlake create /data/sales --from-csv 'exports/*.csv' --primary-key id
      posixlake create /data/crm --from-csv people.csv --types 'zip=String,amount=Decimal128(10,2)'
      posixlake create /data/crm --from-csv people.csv --schema 'id:Int64, zip:String, amount:Float64'
      posixlake create s3://bucket/sales --from-parquet part-0.parquet --engine spark
      posixlake create /data/hr --schema 'id:Int64, name:String' --auth --user admin

    \b
    CSV inference keeps every value as written: a column with 007, 08123 or +15551234
    stays String, and so does one with an integer beyond Int64 or a number a double
    cannot hold exactly; 1.10 is Float64 (shown as 1.1: give Decimal128(p,s) to keep
    the scale). With --schema, the CSV header may list the columns in any order.

    \b
    The original project's forms work too: types int (Int32), long, bigint, text,
    varchar, double, float, bool in any case, and --auth --admin-user NAME
    [--admin-password PW] (else $POSIXLAKE_ADMIN_PASSWORD, else a prompt).
    """
    if parquet_paths and (schema or csv_paths):
        raise click.UsageError(
            "give --from-parquet alone, or --from-csv (with --schema), or --schema"
        )
    if not (schema or csv_paths or parquet_paths):
        raise click.UsageError("give exactly one of --schema, --from-csv or --from-parquet")
    if types and not csv_paths:
        raise click.UsageError("--types applies to --from-csv only")
    if not csv_paths and csv_options_of(**csv_dialect) is not None:
        raise click.UsageError(
            "--delimiter, --quote, --null, --encoding and --no-header go with --from-csv"
        )
    opts = get_options()
    uri = normalize_uri(table)
    key = split_columns([primary_key]) if primary_key else None
    parts = split_columns(partition_by) or None
    common: dict[str, Any] = {
        "storage": storage_for(uri),
        **engine_kwargs(),
        "partition_by": parts,
        "primary_key": key,
        "name": name,
        "create_bucket": create_bucket or None,
    }
    if not auth and (opts.user or admin_user or admin_password is not None):
        raise click.UsageError(
            "--user, --admin-user and --admin-password are only used with --auth"
        )
    _check_target(uri, common["storage"])
    if auth:
        if admin_user and opts.user and admin_user != opts.user:
            raise click.UsageError("give the first admin with --user or --admin-user, not both")
        admin = admin_user or opts.user
        common["auth"] = True
        if admin_password is not None:
            warn_secret_flag("--admin-password", ADMIN_PASSWORD_ENV)
            common["credentials"] = (admin or "admin", admin_password)
        elif admin and not os.environ.get(ADMIN_PASSWORD_ENV):
            common["credentials"] = (admin, new_password(admin))
        elif admin:
            common["credentials"] = (admin, os.environ[ADMIN_PASSWORD_ENV])
        # else posixlake takes $POSIXLAKE_ADMIN_USER / $POSIXLAKE_ADMIN_PASSWORD
    if schema is not None and key:
        try:
            schema = Schema(schema.fields, primary_key=key)
        except SchemaError as err:
            raise click.BadParameter(str(err), param_hint="--primary-key") from err
    if schema is not None and types:
        names = [f.name for f in schema.fields]
        unknown = [c for c in types if c not in names]
        if unknown:
            raise click.BadParameter(
                f"column(s) {', '.join(map(repr, unknown))} are not in --schema",
                param_hint="--types",
            )
    if schema is not None and not csv_paths:
        # An empty table needs no compute: no JVM start for --engine spark.
        db = DatabaseOps.create(uri, schema, **{**common, "engine": "local"})
        label = "Created"
    else:
        fmt, paths = ("CSV", csv_paths) if csv_paths else ("Parquet", parquet_paths)
        files = expand_paths(list(paths), suffix=".csv" if csv_paths else ".parquet")
        size = sum(_file_size(f) for f in files)
        with spinner(f"Importing {plural(len(files), fmt + ' file')} ({human_bytes(size)})"):
            if csv_paths:
                csv_options = csv_options_of(**csv_dialect)
                db = DatabaseOps.create_from_csv(
                    uri,
                    files,
                    types=types or None,
                    schema=schema,
                    csv_options=csv_options,
                    **common,
                )
            else:
                db = DatabaseOps.create_from_parquet(uri, files, **common)
        label = f"Imported {plural(len(files), fmt + ' file')} into"
    with db:
        health = db.health_check()
        created = db.schema
    if get_options().json:
        echo_json(
            {
                "table": health.location,
                "version": health.version,
                "rows": health.rows,
                "schema": schema_json(created),
            }
        )
    else:
        click.echo(
            f"{label} {health.location}: {plural(health.rows, 'row')}, version {health.version}"
        )
        click.echo(str(created))


def _check_target(uri: str, storage: StorageConfig | None) -> None:
    """Fail before any import work (and its progress line) when TABLE cannot be created.

    Raises:
        AlreadyExists: a Delta table is there. InvalidOperation: a local path that is a file.
    """
    if is_local(uri) and os.path.exists(uri) and not os.path.isdir(uri):
        raise InvalidOperation(f"cannot create a table at {uri}: it is a file")
    try:
        exists = DeltaLog.exists(uri, storage_options_for(uri, storage))
    except PosixLakeError:
        if is_local(uri):
            raise
        return  # unreachable storage, missing bucket...: create reports it with its checks
    if exists:
        raise AlreadyExists(f"a Delta table already exists at {uri}")


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# -- info / schema -------------------------------------------------------------------------


@click.command()
@table_argument
@engine_accepted
@storage_options
@user_option
@json_option
def info(table: str) -> None:
    """Show where a table is, its version, size, rows and schema.

    \b
    Example:
      posixlake info /data/sales
    """
    with open_table(table) as db:
        health = db.health_check()
        last = db.history(1)
        schema = db.schema
    commit = last[0] if last else None
    result = {
        "table": health.location,
        "version": health.version,
        "last_commit": _commit_json(commit) if commit else None,
        "rows": health.rows,
        "files": health.active_files,
        "bytes": health.active_bytes,
        "primary_key": schema.key_columns,
        "schema": schema_json(schema),
    }
    if get_options().json:
        echo_json(result)
        return
    lines = [
        ("Table", health.location),
        (
            "Version",
            f"{health.version}"
            + (f" ({iso_time(commit.timestamp)}, {commit.operation})" if commit else ""),
        ),
        ("Rows", f"{health.rows:,}"),
        ("Files", f"{health.active_files:,} ({human_bytes(health.active_bytes)})"),
        ("Primary key", ", ".join(schema.key_columns) or "(none)"),
        ("Columns", str(len(schema.fields))),
    ]
    for label, value in lines:
        click.echo(f"{label + ':':<13}{value}")
    for line in _schema_lines(schema):
        click.echo("  " + line)


def _schema_lines(schema: Schema) -> list[str]:
    keys = set(schema.key_columns)
    rows = [
        (
            f.name,
            _type_text(f),
            "" if f.nullable else "NOT NULL",
            "PRIMARY KEY" if f.name in keys else "",
        )
        for f in schema.fields
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _type_text(f: Field) -> str:
    return type_string(f.arrow_type())


@click.command("schema")
@table_argument
@click.option(
    "--spec",
    is_flag=True,
    help="Print the one-line form that `create --schema` accepts.",
)
@engine_accepted
@storage_options
@user_option
@json_option
def schema_cmd(table: str, spec: bool) -> None:
    """Show a table's columns, types and primary key.

    \b
    Examples:
      posixlake schema /data/sales
      posixlake schema /data/sales --json > sales-schema.json
      posixlake create /data/sales2 --schema @sales-schema.json
    """
    with open_table(table) as db:
        schema = db.get_schema()
    if get_options().json:
        echo_json(schema_json(schema))
    elif spec:
        click.echo(str(schema))
    else:
        for line in _schema_lines(schema):
            click.echo(line)


# -- history -------------------------------------------------------------------------------


def _commit_json(c: CommitInfo) -> dict[str, Any]:
    return {
        "version": c.version,
        "timestamp": c.timestamp,
        "operation": c.operation,
        "user": c.user,
        "parameters": dict(c.parameters),
        "metrics": dict(c.metrics),
    }


def _changes(c: CommitInfo) -> str:
    shown = []
    if c.operation == "RESTORE" and "version" in c.parameters:
        shown.append(f"to version {c.parameters['version']}")
    for k, v in c.metrics.items():
        if "rows" in k and isinstance(v, int) and v:
            shown.append(f"{k.removeprefix('num_')}={v:,}")
    return " ".join(shown)


@click.command()
@table_argument
@click.option("--limit", "-n", type=click.IntRange(min=1), help="Show only the newest N commits.")
@engine_accepted
@storage_options
@user_option
@json_option
def history(table: str, limit: int | None) -> None:
    """List the commits, newest first (versions for --version).

    \b
    Example:
      posixlake history /data/sales --limit 5
    """
    with open_table(table) as db:
        commits = db.history(limit)
    if get_options().json:
        echo_json([_commit_json(c) for c in commits])
        return
    rows = pa.table(
        {
            "version": pa.array([c.version for c in commits], pa.int64()),
            "timestamp": pa.array([iso_time(c.timestamp) for c in commits], pa.string()),
            "operation": pa.array([c.operation for c in commits], pa.string()),
            "user": pa.array([c.user or "" for c in commits], pa.string()),
            "changes": pa.array([_changes(c) for c in commits], pa.string()),
        }
    )
    click.echo(format_table(rows))


@click.command()
@table_argument
@click.option(
    "--version", "version", type=click.IntRange(min=0), help="Go back to this table version."
)
@click.option(
    "--as-of",
    "as_of",
    type=AsOf(),
    help="Go back to the table as it was at this time (the last version at or before it).",
)
@engine_accepted
@storage_options
@user_option
@json_option
def rollback(table: str, version: int | None, as_of: datetime | None) -> None:
    """Roll the table back to an earlier version, in one commit.

    Like deltalake's restore and Databricks' RESTORE TABLE: the commit puts back the
    data files, schema and properties of that version; no data file is rewritten, the
    versions in between stay readable (history shows a RESTORE). To rebuild a table
    from a backup, use `posixlake restore`.

    
    TIME is ISO 8601 (2024-05-01T12:00:00Z; UTC when no offset) or epoch milliseconds.

    
    Examples:
      posixlake history /data/sales
      posixlake rollback /data/sales --version 3
      posixlake rollback /data/sales --as-of 2024-05-01T12:00:00Z
    """
    if (version is None) == (as_of is None):
        raise click.UsageError("give --version N or --as-of TIME")
    with open_table(table) as db:
        done = db.restore_version(version, as_of=as_of)
        current = done.version if done.version is not None else db.version
    if get_options().json:
        echo_json(
            {
                "restored": done.restored,
                "version": current,
                "committed": done.committed,
                "files_removed": done.files_removed,
                "files_restored": done.files_restored,
            }
        )
    elif done.committed:
        click.echo(
            f"Rolled back to version {done.restored} (version {done.version}: "
            f"{plural(done.files_removed, 'file')} removed, "
            f"{plural(done.files_restored, 'file')} restored)"
        )
    else:
        click.echo(f"Already at version {done.restored}: no commit")


COMMANDS: Final[list[click.Command]] = [create, info, schema_cmd, history, rollback]
