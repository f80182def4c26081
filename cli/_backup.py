"""Backup commands: backup, restore, verify."""

from __future__ import annotations

from datetime import datetime
from typing import Final

import click

from cli._common import (
    AsOf,
    credentials,
    echo_json,
    engine_accepted,
    get_options,
    human_bytes,
    json_option,
    open_table,
    plural,
    progress,
    storage_for,
    storage_options,
    table_argument,
    user_option,
)
from posixlake import DatabaseOps
from posixlake.storage import normalize_uri

__all__ = ["COMMANDS"]

_WORKERS_HELP: Final = "Files copied or hashed in parallel."
_workers_option = click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    metavar="N",
    help=_WORKERS_HELP,
)


@click.command()
@table_argument
@click.argument("dest", metavar="DEST")
@click.option("--incremental", is_flag=True, help="Copy only what --base lacks (needs --base).")
@click.option(
    "--base",
    metavar="BACKUP",
    help="The backup an incremental backup builds on (a full or incremental one).",
)
@click.option("--overwrite", is_flag=True, help="Replace what DEST holds.")
@_workers_option
@engine_accepted
@storage_options
@user_option
@json_option
def backup(
    table: str, dest: str, incremental: bool, base: str | None, overwrite: bool, workers: int
) -> None:
    """Back up the table into DEST, with a SHA-256 manifest.

    The copy is the table as of its current version; writers are not blocked. DEST is a directory, s3://... or az://...; it must be empty
    unless --overwrite. An incremental backup copies only the files its base chain lacks.

    \b
    Examples:
      posixlake backup /data/sales /backups/sales-full
      posixlake backup /data/sales /backups/sales-mon --incremental --base /backups/sales-full
      posixlake verify /backups/sales-mon
    """
    if incremental and not base:
        raise click.UsageError("--incremental needs --base BACKUP")
    dest_uri = normalize_uri(dest)
    with open_table(table) as db, progress(f"Backing up to {dest_uri}") as report:
        if base:
            meta = db.backup_incremental(
                base,
                dest_uri,
                storage=storage_for(dest_uri),
                base_storage=storage_for(normalize_uri(base)),
                overwrite=overwrite,
                progress=report,
                workers=workers,
            )
        else:
            meta = db.backup(
                dest_uri,
                storage=storage_for(dest_uri),
                overwrite=overwrite,
                progress=report,
                workers=workers,
            )
    if get_options().json:
        echo_json(meta.to_dict())
        return
    kind = f"incremental backup on {meta.base}" if meta.kind == "incremental" else "full backup"
    click.echo(
        f"Backed up {meta.source} version {meta.table_version} to {meta.path} ({kind}): "
        f"{plural(meta.total_rows, 'row')}, {plural(meta.total_files, 'file')} "
        f"({human_bytes(meta.total_size_bytes)}), {meta.files_copied:,} copied "
        f"({human_bytes(meta.bytes_copied)})"
    )
    click.echo(f"Backup id: {meta.backup_id}")


@click.command()
@click.argument("backup_path", metavar="BACKUP")
@click.argument("dest", metavar="DEST")
@click.option(
    "--version", "version", type=click.IntRange(min=0), help="Rebuild the table as of this version."
)
@click.option("--as-of", "as_of", type=AsOf(), help="Rebuild the table as it was at this time.")
@click.option("--overwrite", is_flag=True, help="Replace what DEST holds.")
@_workers_option
@engine_accepted
@storage_options
@user_option
@json_option
def restore(
    backup_path: str,
    dest: str,
    version: int | None,
    as_of: datetime | None,
    overwrite: bool,
    workers: int,
) -> None:
    """Rebuild a table at DEST from BACKUP.

    An incremental backup applies its chain. Every byte is checked against the manifest. DEST must be empty unless --overwrite.
    A backup of a table with users needs --user: a user of the backup with the restore
    permission.

    \b
    Examples:
      posixlake restore /backups/sales-mon /data/sales-restored
      posixlake restore /backups/sales-full /data/sales-v3 --version 3
      posixlake restore /backups/sales-full /data/sales --as-of 2024-05-01T12:00:00Z --overwrite
    """
    if version is not None and as_of is not None:
        raise click.UsageError("give --version or --as-of, not both")
    backup_uri, dest_uri = normalize_uri(backup_path), normalize_uri(dest)
    with progress(f"Restoring {backup_uri}") as report:
        result = DatabaseOps.restore(
            backup_uri,
            dest_uri,
            version=version,
            as_of=as_of,
            overwrite=overwrite,
            credentials=credentials(),
            storage=storage_for(dest_uri),
            backup_storage=storage_for(backup_uri),
            progress=report,
            workers=workers,
        )
    if get_options().json:
        echo_json(result.to_dict())
        return
    click.echo(
        f"Restored {result.path} at version {result.version} from backup {result.backup_id}: "
        f"{plural(result.files, 'file')} ({human_bytes(result.bytes)})"
    )


@click.command()
@click.argument("backup_path", metavar="BACKUP")
@_workers_option
@engine_accepted
@storage_options
@json_option
def verify(backup_path: str, workers: int) -> None:
    """Check every byte of a backup and its chain.

    Exits 1 if anything is wrong. Reports missing, extra and corrupted files, a damaged manifest and a broken chain.
    Needs no table and no login.

    \b
    Example:
      posixlake verify /backups/sales-mon && echo "backup OK"
    """
    uri = normalize_uri(backup_path)
    with progress(f"Verifying {uri}") as report:
        result = DatabaseOps.verify_backup(
            uri, storage=storage_for(uri), progress=report, workers=workers
        )
    if get_options().json:
        echo_json(result.to_dict())
    else:
        chain = f", chain of {len(result.chain)}" if len(result.chain) > 1 else ""
        click.echo(
            f"{'OK' if result.ok else 'DAMAGED'}: backup {result.backup_id} "
            f"(table version {result.table_version}{chain}): "
            f"{plural(result.files_checked, 'file')} ({human_bytes(result.bytes_checked)}) checked"
        )
        for label, items in (
            ("missing", result.missing),
            ("corrupted", result.corrupted),
            ("extra", result.extra),
            ("error", result.errors),
        ):
            for item in items:
                click.echo(f"  {label}: {item}")
    if not result.ok:
        problems = [
            f"{len(items)} {label}"
            for label, items in (
                ("missing", result.missing),
                ("corrupted", result.corrupted),
                ("extra", result.extra),
                ("errors", result.errors),
            )
            if items
        ]
        raise click.ClickException(f"backup {uri} failed verification: {', '.join(problems)}")


COMMANDS: Final[list[click.Command]] = [backup, restore, verify]
