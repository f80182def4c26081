"""Rebuilding a table from a backup, as of its last version or an older one."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Mapping
from datetime import UTC, datetime

from posixlake.backup import original
from posixlake.backup.chain import backup_chain, open_backup, original_backup_store
from posixlake.backup.credentials import check_restore_credentials
from posixlake.backup.manifest import FILES_DIR, BackupCorrupted, BackupFile, Manifest, public_uri
from posixlake.backup.results import RestoreResult
from posixlake.backup.staging import RESTORE_MARKER, Staging, clean_restore_leftovers, settle_log
from posixlake.backup.transfer import DEFAULT_WORKERS, Meter, Progress, hashed, parallel_map
from posixlake.backup.verify import verify_backup
from posixlake.backup.when import EPOCH_MS_THRESHOLD, as_of_ms
from posixlake.errors import AlreadyExists, InvalidOperation, NotFound, PosixLakeError, VersionError
from posixlake.storage import is_local, normalize_uri, open_store

__all__ = [
    "EPOCH_MS_THRESHOLD",
    "as_of_ms",
    "restore",
]

logger = logging.getLogger(__name__)

"""``restore_to_transaction`` treats an int at least this large as epoch milliseconds (the
original project's meaning); smaller ints are versions."""


def _target_version(
    m: Manifest, version: int | None, as_of: datetime | int | float | str | None
) -> int:
    if version is not None and as_of is not None:
        raise InvalidOperation("give version or as_of, not both")
    if as_of is not None:
        when = as_of_ms(as_of)
        candidates = [v for v, ts in m.timestamps.items() if ts <= when and v <= m.table_version]
        if not candidates:
            first = min(m.timestamps.values(), default=None)
            raise VersionError(
                f"the backup has no version at or before {as_of!r}"
                + (
                    f" (its oldest commit is at {datetime.fromtimestamp(first / 1000, UTC).isoformat()})"
                    if first is not None
                    else ""
                )
            )
        version = max(candidates)
    if version is None:
        return m.table_version
    if isinstance(version, bool) or not isinstance(version, int):
        raise VersionError(f"a version must be an int, not {type(version).__name__}")
    if version > m.table_version or version < 0:
        raise VersionError(
            f"version {version} is not in the backup (it holds versions up to {m.table_version})"
        )
    if version < m.restorable_from:
        raise VersionError(
            f"version {version} cannot be restored from this backup: its files were vacuumed "
            f"before the backup (versions {m.restorable_from}..{m.table_version} can)"
        )
    return version


def restore(
    backup: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    version: int | None = None,
    as_of: datetime | int | float | str | None = None,
    overwrite: bool = False,
    credentials: tuple[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
    backup_storage_options: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> RestoreResult:
    """Rebuild a table at ``dest`` from a backup (applying an incremental's chain).

    Args:
        backup: the backup's location.
        dest: where to build the table (empty or missing, unless ``overwrite``).
        version: rebuild the table as of this version (its log ends there).
        as_of: rebuild as of this time (datetime, epoch ms or ISO string): the latest
            version committed at or before it.
        overwrite: replace whatever ``dest`` holds (local: built aside, then swapped in;
            object stores: the whole backup is verified before ``dest`` is emptied).
        credentials: ``(user, password)`` of a user of the backup with the restore
            permission (backups of auth-enabled tables only).
        storage_options: object-store options of ``dest``.
        backup_storage_options: object-store options of ``backup`` (``storage_options``
            when None).
        progress: ``progress(done_bytes, total_bytes)``.
        workers: parallel copies.

    Raises:
        NotFound: no backup. BackupCorrupted: a missing or damaged file (named).
        AlreadyExists: ``dest`` is not empty. VersionError: the version or time is not
        in the backup. AuthenticationError / PermissionDenied: see ``credentials``.
    """
    from posixlake import security

    backup_uri = normalize_uri(backup)
    dest_uri = normalize_uri(dest)
    b_opts = backup_storage_options if backup_storage_options is not None else storage_options
    old = original_backup_store(backup_uri, b_opts)
    if old is not None:
        return original.restore_backup(
            backup_uri,
            old,
            dest_uri,
            version=version,
            as_of=as_of,
            overwrite=overwrite,
            credentials=credentials,
            storage_options=storage_options,
            progress=progress,
            workers=workers,
        )
    top = open_backup(backup_uri, b_opts)
    chain = backup_chain(top, b_opts)
    m = top.manifest
    target = _target_version(m, version, as_of)
    user = check_restore_credentials(top, chain, credentials)
    selected = [
        f
        for f in m.files.values()
        if f.kind == "meta"
        or (f.kind == "log" and f.version is not None and f.version <= target)
        or (f.kind in ("data", "cdc") and f.version is not None and f.version <= target)
    ]
    # presence and sizes first: refuse before writing anything
    sizes: dict[str, dict[str, int]] = {}
    for bid, b in chain.items():
        sizes[bid] = {e.key[len(FILES_DIR) + 1 :]: e.size for e in b.store.list(FILES_DIR)}
    for f in sorted(selected, key=lambda f: f.path):
        where = chain[f.backup_id].file_uri(f.path)
        got = sizes[f.backup_id].get(f.path)
        if got is None:
            raise BackupCorrupted(f"restore refused: {where} is missing")
        if got != f.size:
            raise BackupCorrupted(
                f"restore refused: {where} is corrupted ({got} bytes, {f.size} expected)"
            )
    if (
        is_local(dest_uri)
        and is_local(backup_uri)
        and os.path.commonpath([dest_uri, backup_uri]) in (dest_uri, backup_uri)
    ):
        raise InvalidOperation("restore: the destination and the backup overlap")
    local = is_local(dest_uri)
    if local:
        clean_restore_leftovers(dest_uri)
    probe = open_store(dest_uri, storage_options)
    staging: Staging | None = None
    partial = not local and probe.exists(RESTORE_MARKER)
    if partial:
        logger.warning("restore: %s holds a partial restore; deleting it", dest_uri)
        probe.delete_prefix()
    elif probe.has_any() and not overwrite:
        raise AlreadyExists(
            f"restore refused: {dest_uri} is not empty (pass overwrite=True to replace it)"
        )
    if local:
        # built beside the destination and renamed into place: a killed restore leaves
        # no partial table at dest, only a locked build that the next run removes
        staging = Staging.begin(dest_uri)
    elif probe.has_any():
        report = verify_backup(backup_uri, storage_options=b_opts, workers=workers)
        if report.corrupted or report.missing:
            bad = (report.corrupted or report.missing)[0]
            raise BackupCorrupted(f"restore refused: {bad} is missing or corrupted")
        probe.delete_prefix()
    build_uri = staging.build if staging is not None else dest_uri
    out = open_store(build_uri, storage_options)
    if staging is None:
        # object stores cannot rename a prefix: the marker says "partial" until the end
        # (health reports it, and the next restore deletes the partial table)
        out.write_bytes(RESTORE_MARKER, json.dumps({"backup": public_uri(backup_uri)}).encode())
    created_dir = False
    meter = Meter(sum(f.size for f in selected), progress)

    def copy_one(f: BackupFile) -> None:
        holder = chain[f.backup_id]
        where = holder.file_uri(f.path)
        try:
            out.write_chunks(
                f.path,
                hashed(
                    holder.store.read_chunks(f"{FILES_DIR}/{f.path}"),
                    expect_sha=f.sha256,
                    expect_size=f.size,
                    where=where,
                    meter=meter,
                ),
            )
        except BackupCorrupted as err:
            raise BackupCorrupted(f"restore refused: {err}") from err
        except NotFound as err:
            raise BackupCorrupted(f"restore refused: {where} is missing") from err

    body = [f for f in selected if f.kind != "log"]
    log_files = sorted(
        (f for f in selected if f.kind == "log"), key=lambda f: (f.version or 0, f.path)
    )
    try:
        parallel_map(copy_one, body, workers)
        parallel_map(copy_one, log_files, workers)
        times = {f.path: f.modified for f in log_files if f.modified is not None}
        settle_log(out, times, build_uri, storage_options, target)
    except BaseException:
        with contextlib.suppress(PosixLakeError, OSError):
            if staging is not None:
                staging.abandon()
            else:
                out.delete_prefix()
                if created_dir:
                    shutil.rmtree(build_uri, ignore_errors=True)
        raise
    if staging is not None:
        staging.publish()
    else:
        out.delete(RESTORE_MARKER)
    if m.auth:
        security.AuditLog(open_store(dest_uri, storage_options)).record(
            user,
            "restore",
            target=public_uri(dest_uri),
            detail={"backup_id": m.backup_id, "backup": public_uri(backup_uri), "version": target},
        )
    return RestoreResult(dest_uri, target, m.backup_id, len(selected), meter.done)
