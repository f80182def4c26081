"""Maintenance commands: optimize, zorder, vacuum, health, metrics."""

from __future__ import annotations

from typing import Final

import click

from cli._common import (
    ByteSize,
    echo_json,
    get_options,
    human_bytes,
    json_option,
    open_table,
    plural,
    split_columns,
    storage_options,
    table_argument,
    to_jsonable,
    user_option,
)
from posixlake.errors import PosixLakeError
from posixlake.types import HealthStatus, OptimizeResult

__all__ = ["COMMANDS"]

_TARGET_SIZE_HELP: Final = "Target file size (e.g. 128MiB; delta-rs default 100 MiB)."


def _report_optimize(verb: str, done: str, result: OptimizeResult) -> None:
    if get_options().json:
        echo_json(result)
    elif result.version is None or (result.files_added == 0 and result.files_removed == 0):
        click.echo(f"Nothing to {verb}: the table is unchanged")
    else:
        click.echo(
            f"{done}: {plural(result.files_removed, 'file')} rewritten into "
            f"{result.files_added:,} (version {result.version})"
        )


@click.command()
@table_argument
@click.option("--target-size", type=ByteSize(), help=_TARGET_SIZE_HELP)
@storage_options
@user_option
@json_option
def optimize(table: str, target_size: int | None) -> None:
    """Compact small files into larger ones, in one commit.

    \b
    Example:
      posixlake optimize /data/sales --target-size 256MiB
    """
    with open_table(table) as db:
        result = db.optimize.compact(target_size=target_size)
    _report_optimize("compact", "Compacted", result)


@click.command()
@table_argument
@click.argument("columns", nargs=-1, required=True, metavar="COLUMN...")
@click.option("--target-size", type=ByteSize(), help=_TARGET_SIZE_HELP)
@storage_options
@user_option
@json_option
def zorder(table: str, columns: tuple[str, ...], target_size: int | None) -> None:
    """Cluster files by a Z-order curve over COLUMNs (data skipping).

    \b
    Example:
      posixlake zorder /data/events user_id ts
      posixlake metrics /data/events --where 'user_id = 42'   # see the files skipped
    """
    with open_table(table) as db:
        result = db.optimize.z_order(split_columns(columns), target_size=target_size)
    _report_optimize("z-order", "Z-ordered", result)


@click.command()
@table_argument
@click.option(
    "--retention-hours",
    type=click.IntRange(min=0),
    help="Keep files that versions of the last N hours need (default: the table's, 168).",
)
@click.option("--dry-run", "-n", is_flag=True, help="Only list the files that would be deleted.")
@click.option(
    "--enforce-retention/--no-enforce-retention",
    default=True,
    show_default=True,
    help="Refuse a retention shorter than the table's minimum (7 days by default). "
    "Time travel to versions older than the retention stops working.",
)
@storage_options
@user_option
@json_option
def vacuum(table: str, retention_hours: int | None, dry_run: bool, enforce_retention: bool) -> None:
    """Delete data files that no version in the retention period needs.

    \b
    Examples:
      posixlake vacuum /data/sales --dry-run
      posixlake vacuum /data/sales --retention-hours 0 --no-enforce-retention
    """
    with open_table(table) as db:
        result = db.vacuum(
            retention_hours, dry_run=dry_run, enforce_retention_duration=enforce_retention
        )
    if get_options().json:
        echo_json(
            {
                "dry_run": result.dry_run,
                "files_deleted": result.files_deleted,
                "files": result.files,
            }
        )
        return
    verb = "Would delete" if dry_run else "Deleted"
    click.echo(f"{verb} {plural(result.files_deleted, 'file')}")
    for name in result.files:
        click.echo(f"  {name}")


@click.command()
@table_argument
@storage_options
@user_option
@json_option
def health(table: str) -> None:
    """Check that a table can be read; exit 1 when it cannot.

    \b
    Example:
      posixlake health /data/sales && echo ok
    """
    try:
        with open_table(table) as db:
            status = db.health_check()
    except PosixLakeError as err:
        status = HealthStatus("unhealthy", -1, 0, 0, 0, table, message=str(err))
    if get_options().json:
        echo_json({**_health_dict(status), "healthy": status.healthy})
    elif status.healthy:
        click.echo(
            f"healthy: version {status.version}, {plural(status.rows, 'row')}, "
            f"{plural(status.active_files, 'file')} ({human_bytes(status.active_bytes)}) "
            f"at {status.location}"
        )
    if not status.healthy:
        if not get_options().json:
            click.echo(f"unhealthy: {' '.join(status.message.split())}", err=True)
        raise click.exceptions.Exit(1)


def _health_dict(status: HealthStatus) -> dict[str, object]:
    return {
        "status": status.status,
        "version": status.version,
        "active_files": status.active_files,
        "active_bytes": status.active_bytes,
        "rows": status.rows,
        "location": status.location,
        "message": status.message,
    }


@click.command()
@table_argument
@click.option(
    "--where",
    "-w",
    "where",
    metavar="PREDICATE",
    help="Also count the files a query with this predicate would skip.",
)
@storage_options
@user_option
@json_option
def metrics(table: str, where: str | None) -> None:
    """Show file and row counts, and data-skipping figures.

    \b
    Examples:
      posixlake metrics /data/events
      posixlake metrics /data/events --where 'user_id = 42' --json
    """
    with open_table(table) as db:
        stats = db.get_data_skipping_stats(where)
        version = db.version
    if get_options().json:
        echo_json({"version": version, **to_jsonable(stats), "skip_ratio": stats.skip_ratio})
        return
    click.echo(f"Version:      {version}")
    click.echo(f"Files:        {stats.total_files:,} ({human_bytes(stats.total_bytes)})")
    click.echo(f"Rows:         {stats.total_rows:,}")
    avg = stats.total_bytes // stats.total_files if stats.total_files else 0
    click.echo(f"Avg file:     {human_bytes(avg)}")
    if where is not None:
        click.echo(f"Predicate:    {where}")
        click.echo(
            f"Files to scan: {stats.files_to_scan:,} ({human_bytes(stats.bytes_to_scan)}), "
            f"skipped {stats.files_skipped:,} ({stats.skip_ratio:.0%})"
        )


COMMANDS: Final[list[click.Command]] = [optimize, zorder, vacuum, health, metrics]
