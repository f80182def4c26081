"""Full and incremental backups of a table pinned at one version."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote

from posixlake import _original
from posixlake._authz import Authorizer
from posixlake.backup.chain import StoredBackup, backup_chain, open_backup, relative_location
from posixlake.backup.log import LogFiles, log_keys_of, read_log
from posixlake.backup.manifest import (
    FILES_DIR,
    MANIFEST_NAME,
    BackupCorrupted,
    BackupFile,
    FileKind,
    Manifest,
    metadata_of,
    public_uri,
)
from posixlake.backup.results import BackupMetadata
from posixlake.backup.transfer import DEFAULT_WORKERS, Meter, Progress, hashed, parallel_map
from posixlake.delta import FileSpan
from posixlake.errors import (
    AlreadyExists,
    DeltaLakeError,
    InvalidOperation,
    NotFound,
    PosixLakeError,
    StorageError,
)
from posixlake.storage import TEMP_MARK, FileEntry, ObjectStore, is_local, normalize_uri, open_store

if TYPE_CHECKING:
    from posixlake.delta import DeltaLog

__all__ = [
    "create_backup",
]

logger = logging.getLogger(__name__)


def _new_id(now: datetime) -> str:
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:12]}"


def _dest_store(dest: str, options: Mapping[str, str] | None, *, overwrite: bool) -> ObjectStore:
    store = open_store(dest, options)
    if store.has_any():
        if not overwrite:
            raise AlreadyExists(
                f"the backup destination {dest} is not empty (pass overwrite=True to replace it)"
            )
        store.delete_prefix()
    return store


@dataclass(frozen=True)
class _Pin:
    """One pinned table version and what delta-rs says about it."""

    version: int
    rows: int
    live: frozenset[str]
    auth: bool


def _pin(log: DeltaLog, source: ObjectStore) -> _Pin:
    """Pin the latest version (writers in this process wait only for this refresh)."""
    from posixlake import security

    with log.lock:
        version = int(log.refresh())
        actions = log.add_actions()
        rows = (
            int(sum(v or 0 for v in actions.column("num_records").to_pylist()))
            if "num_records" in actions.column_names
            else 0
        )
        live = frozenset(unquote(p) for p in actions.column("path").to_pylist())
        auth = (
            log.configuration.get(security.AUTH_PROPERTY, "").lower() == "true"
            or security.UserStore(source).exists()
            or _original.has_users(source)
        )
    return _Pin(version, rows, live, auth)


@dataclass(frozen=True)
class _Item:
    """A file of the snapshot to store in the new backup."""

    key: str
    kind: FileKind
    size: int
    version: int | None = None
    removed: int | None = None
    modified: float | None = None


@dataclass
class _Plan:
    files: dict[str, BackupFile]
    """Files the base chain already holds."""
    to_copy: list[_Item]
    unavailable: list[FileSpan]
    """Data files of old versions that neither the source nor the chain has (vacuumed)."""


CDC_DIR: Final = "_change_data/"
"""Change-data files (Delta change data feed) live under this folder of the table."""
_DELETION_VECTOR: Final = re.compile(r"(^|/)deletion_vector_[^/]*\.bin$")


def _known_files(
    uri: str, scan: LogFiles, listing: Mapping[str, FileEntry]
) -> dict[str, tuple[FileKind, FileSpan]]:
    """Return the data files the log names, and the change-data files of the listing.

    delta-rs does not list ``cdc`` actions: every change-data file present is kept, as
    used from the oldest replayed version on (a restore to an older version carries
    change-data files it does not need; readers ignore them).

    Raises:
        InvalidOperation: deletion vectors stored in files of their own.
    """
    if scan.deletion_vectors:
        dv_files = sorted(k for k in listing if _DELETION_VECTOR.search(k))
        if dv_files:
            raise InvalidOperation(
                f"{uri}/{dv_files[0]}: deletion vectors stored in files are not supported "
                "by backup yet"
            )
    known: dict[str, tuple[FileKind, FileSpan]] = {k: ("data", f) for k, f in scan.files.items()}
    for key, entry in listing.items():
        if key.startswith(CDC_DIR) and key not in known:
            known[key] = ("cdc", FileSpan(entry.size, scan.min_version))
    return known


def _adopt_base_spans(
    scan: LogFiles, base_files: Mapping[str, BackupFile], base_version: int
) -> None:
    """Complete a log walk that started at the base backup's version with what the base knows.

    A file live at the start of the walk keeps the version that its base entry says
    added it, and files that the base recorded as removed before are added as it
    recorded them. Nothing changes when the walk started earlier (the log was replayed
    from its oldest rebuildable version anyway).
    """
    first = max(scan.min_version, base_version)
    if first == scan.min_version:
        return
    for key, bf in base_files.items():
        if bf.kind != "data" or bf.version is None:
            continue
        span = scan.files.get(key)
        if span is None:
            if bf.removed is not None and bf.removed <= first:
                scan.files[key] = FileSpan(bf.size, bf.version, bf.removed)
        elif span.added == first and bf.version < first:
            span.added = bf.version


def _plan(
    uri: str,
    pin: _Pin,
    scan: LogFiles,
    listing: Mapping[str, FileEntry],
    log_keys: Mapping[str, int],
    base_files: Mapping[str, BackupFile],
) -> _Plan:
    """Decide, file by file, what the backup copies and what its base chain holds."""
    known = _known_files(uri, scan, listing)
    missing_live = sorted(
        k
        for k, f in scan.files.items()
        if f.removed is None and k not in listing and k not in base_files
    )
    if pin.live - set(scan.files):
        raise DeltaLakeError(
            f"backup: the log replay disagrees with delta-rs about version {pin.version}"
        )
    if missing_live:
        raise StorageError(
            f"backup: {uri}/{missing_live[0]} is part of version {pin.version} but missing "
            f"({len(missing_live)} file(s)): the table is damaged"
        )
    items = [
        _Item(key, "log", listing[key].size, v, modified=listing[key].modified)
        for key, v in sorted(log_keys.items())
        if key in listing
    ]
    unavailable: list[FileSpan] = []
    for key, (kind, f) in sorted(known.items()):
        entry = listing.get(key)
        if entry is None:
            if key not in base_files and kind == "data":
                unavailable.append(f)
            continue
        if kind == "data" and f.size and entry.size != f.size:
            raise StorageError(
                f"backup: {uri}/{key} has {entry.size} bytes but the Delta log says {f.size}"
            )
        items.append(_Item(key, kind, entry.size, f.added, f.removed))
    items += [
        _Item(key, "meta", entry.size)
        for key, entry in sorted(listing.items())
        if key.startswith(("_posixlake/", "_metadata/"))  # _metadata/: the original's users
    ]
    plan = _Plan({}, [], unavailable)
    for item in items:
        prior = base_files.get(item.key)
        if prior is not None and item.kind != "meta" and prior.size == item.size:
            removed = item.removed if item.kind == "data" else prior.removed
            plan.files[item.key] = replace(prior, removed=removed)
        else:
            plan.to_copy.append(item)
    # files of the chain that the source lost (VACUUM, log cleanup) stay available
    planned = {i.key for i in items}
    for key, bf in base_files.items():
        if key in planned or bf.kind == "meta":
            continue
        if bf.kind == "log" and (bf.version is None or bf.version > pin.version):
            continue
        span = scan.files.get(key)
        plan.files[key] = replace(bf, removed=span.removed) if span is not None else bf
    return plan


def _copy_to_backup(
    item: _Item,
    *,
    source: ObjectStore,
    dest: ObjectStore,
    backup_id: str,
    prior: BackupFile | None,
    meter: Meter,
    where: str,
) -> BackupFile | None:
    """Copy one file into the backup, hashing it; None for an old file vacuumed meanwhile."""
    if item.kind == "meta" and prior is not None and prior.size == item.size:
        try:
            data = source.read_bytes(item.key)
        except NotFound:
            return prior  # removed meanwhile: the chain's copy is as good
        meter.add(len(data))
        sha = hashlib.sha256(data).hexdigest()
        if sha == prior.sha256:
            return prior
        dest.write_bytes(f"{FILES_DIR}/{item.key}", data)
        return BackupFile(item.key, len(data), sha, "meta", backup_id)
    digest: list[str] = []
    try:
        written = dest.write_chunks(
            f"{FILES_DIR}/{item.key}",
            hashed(
                source.read_chunks(item.key),
                expect_sha=None,
                expect_size=item.size if item.kind != "meta" else None,
                where=where,
                meter=meter,
                digest_out=digest,
            ),
        )
    except NotFound as err:
        if item.kind == "data" and item.removed is not None:
            return None  # only older versions needed it: they become unrestorable
        if item.kind in ("meta", "cdc"):
            return None  # change data is not needed to read the table
        raise StorageError(
            f"backup: {where} vanished during the copy (a concurrent VACUUM with a "
            "very short retention?)"
        ) from err
    except BackupCorrupted as err:
        raise StorageError(f"backup: {where} changed during the copy: {err}") from err
    return BackupFile(
        item.key,
        written,
        digest[0],
        item.kind,
        backup_id,
        item.version,
        item.removed,
        item.modified,
    )


def create_backup(
    log: DeltaLog,
    dest: str | os.PathLike[str],
    *,
    base: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
    base_storage_options: Mapping[str, str] | None = None,
    user: str | None = None,
    authorizer: Authorizer | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> BackupMetadata:
    """Back up the table of ``log`` (a :class:`posixlake.delta.DeltaLog`) into ``dest``.

    Args:
        log: the table's Delta log (refreshed once, under its lock, to pin the version).
        dest: an empty (or missing) local folder or object-store prefix.
        base: a previous backup of the same table: make an incremental backup on it.
        storage_options: object-store options of ``dest``.
        base_storage_options: object-store options of ``base`` (``storage_options`` if None).
        user: recorded in the manifest.
        authorizer: the session, for the audit log.
        overwrite: replace a non-empty ``dest``.
        progress: ``progress(done_bytes, total_bytes)``.
        workers: parallel copies.

    Raises:
        AlreadyExists: ``dest`` is not empty. BackupCorrupted: ``base`` is damaged.
        InvalidOperation: ``base`` is a backup of another table, or newer than the table.
        StorageError: a file of the pinned version vanished or changed during the copy.
    """
    from posixlake import security

    dest_uri = normalize_uri(dest)
    source = open_store(log.uri, log.storage_options)
    if (
        is_local(dest_uri)
        and is_local(log.uri)
        and os.path.commonpath([dest_uri, log.uri]) == log.uri
    ):
        raise InvalidOperation(f"the backup destination {dest_uri} lies inside the table")
    chain: dict[str, StoredBackup] = {}
    base_backup: StoredBackup | None = None
    if base is not None:
        base_backup = open_backup(normalize_uri(base), base_storage_options or storage_options)
        chain = backup_chain(base_backup, base_storage_options or storage_options)
    base_files: dict[str, BackupFile] = dict(base_backup.manifest.files) if base_backup else {}
    pin = _pin(log, source)
    listing = {e.key: e for e in source.list() if TEMP_MARK not in e.key}
    log_keys = log_keys_of(listing, pin.version)
    for key, bf in base_files.items():
        if bf.kind == "log" and bf.version is not None and bf.version <= pin.version:
            log_keys.setdefault(key, bf.version)

    def read_entry(key: str) -> bytes:
        if key in listing:
            return source.read_bytes(key)
        bf = base_files[key]
        return chain[bf.backup_id].read(bf)

    modified = {
        k: listing[k].modified if k in listing else base_files[k].modified for k in log_keys
    }
    walk_from = base_backup.manifest.table_version if base_backup is not None else None
    scan = read_log(
        log_keys,
        pin.version,
        read_entry,
        workers,
        modified=modified,
        where=f"{log.uri}/_delta_log",
        walk_from=walk_from,
    )
    if base_backup is not None:
        bm = base_backup.manifest
        if bm.table_id and scan.table_id and bm.table_id != scan.table_id:
            raise InvalidOperation(
                f"the base backup {base_backup.uri} is a backup of another table ({bm.table_id})"
            )
        if bm.table_version > pin.version:
            raise InvalidOperation(
                f"the base backup is at version {bm.table_version}, after the table's {pin.version}"
            )
        _adopt_base_spans(scan, base_files, bm.table_version)
    plan = _plan(log.uri, pin, scan, listing, log_keys, base_files)
    now = datetime.now(UTC)
    backup_id = _new_id(now)
    dest_store = _dest_store(dest_uri, storage_options, overwrite=overwrite)
    meter = Meter(sum(i.size for i in plan.to_copy), progress)

    def copy_one(item: _Item) -> BackupFile | None:
        return _copy_to_backup(
            item,
            source=source,
            dest=dest_store,
            backup_id=backup_id,
            prior=base_files.get(item.key),
            meter=meter,
            where=f"{log.uri}/{item.key}",
        )

    try:
        files = dict(plan.files)
        copied = parallel_map(copy_one, plan.to_copy, workers)
        for item, done in zip(plan.to_copy, copied, strict=True):
            if done is not None:
                files[done.path] = done
            elif item.kind == "data":
                plan.unavailable.append(scan.files[item.key])
        manifest = _new_manifest(
            backup_id, now, user, log.uri, dest_uri, pin, scan, plan, files, base_backup
        )
        dest_store.write_bytes(MANIFEST_NAME, manifest.encode(), if_absent=True)
    except BaseException:
        with contextlib.suppress(PosixLakeError):
            dest_store.delete_prefix()
        raise
    meta = metadata_of(dest_uri, manifest)
    if authorizer is not None:
        security.record_event(
            authorizer,
            "backup",
            target=public_uri(dest_uri),
            detail={"backup_id": backup_id, "kind": manifest.kind, "version": pin.version},
        )
    logger.info(
        "backup %s of %s at version %d: %d files copied (%d bytes)",
        backup_id,
        log.uri,
        pin.version,
        meta.files_copied,
        meta.bytes_copied,
    )
    return meta


def _new_manifest(
    backup_id: str,
    now: datetime,
    user: str | None,
    source_uri: str,
    dest_uri: str,
    pin: _Pin,
    scan: LogFiles,
    plan: _Plan,
    files: dict[str, BackupFile],
    base: StoredBackup | None,
) -> Manifest:
    bm = base.manifest if base is not None else None
    # the log replay ran over the union of the source's and the chain's log entries;
    # versions before the last removal of a vacuumed file cannot be rebuilt
    min_version = scan.min_version
    restorable_from = max(
        [min_version]
        + [f.removed or 0 for f in plan.unavailable]
        + ([bm.restorable_from] if bm else [])
    )
    timestamps = dict(bm.timestamps) if bm else {}
    timestamps.update(scan.timestamps)
    return Manifest(
        backup_id=backup_id,
        kind="incremental" if base is not None else "full",
        created_at=now,
        created_by=user,
        source=public_uri(source_uri),
        table_id=scan.table_id,
        table_version=pin.version,
        min_version=min_version,
        restorable_from=restorable_from,
        rows=pin.rows,
        auth=pin.auth,
        timestamps={v: t for v, t in timestamps.items() if v <= pin.version},
        files=files,
        base=(
            {
                "backup_id": bm.backup_id,
                "uri": base.uri,
                "relative": relative_location(dest_uri, base.uri),
                "manifest_sha256": base.manifest_sha256,
                "table_version": bm.table_version,
            }
            if base is not None and bm is not None
            else None
        ),
    )
