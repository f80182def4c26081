"""Backups made by the original project (a copy of the table plus ``backup_metadata.json``):
recognised, described, verified and restored as far as they allow. See
docs/security-and-backup.md."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from posixlake._authz import AllowAll
from posixlake._original import (
    _COMMIT,
    BACKUP_METADATA,
    METADATA_DIR,
    USERS_FILE,
    parse_users,
    read_users,
)
from posixlake.backup.manifest import BackupCorrupted
from posixlake.backup.results import BackupMetadata, RestoreResult, VerifyReport
from posixlake.backup.staging import settle_log
from posixlake.backup.transfer import Meter, Progress, hashed, parallel_map
from posixlake.backup.when import as_of_ms
from posixlake.errors import (
    AlreadyExists,
    AuthenticationError,
    InvalidOperation,
    NotFound,
    PermissionDenied,
    PosixLakeError,
    StorageError,
    VersionError,
)
from posixlake.security.original import restore_user
from posixlake.storage import ObjectStore, check_key, is_local, join_uri, open_store

__all__ = ["backup_metadata", "is_original_backup", "restore_backup", "verify_backup"]

logger = logging.getLogger("posixlake._original")


def is_original_backup(store: ObjectStore) -> bool:
    """Return whether ``store`` holds a backup made by the original posixlake."""
    return store.exists(BACKUP_METADATA) and store.has_any("_delta_log")


@dataclass
class _File:
    size: int
    added: int
    removed: int | None = None
    rows: int | None = None


@dataclass
class _Scan:
    """The original backup's log, replayed over the entries it holds."""

    commits: dict[int, str]
    files: dict[str, _File]
    timestamps: dict[int, int]
    table_id: str | None
    bad_entries: list[str]

    @property
    def first(self) -> int:
        return min(self.commits)

    @property
    def latest(self) -> int:
        return max(self.commits)

    @property
    def incremental(self) -> bool:
        return 0 not in self.commits

    def commit_times(self, upto: int) -> dict[str, float]:
        """Return each commit file up to ``upto`` with its commit time (epoch seconds)."""
        return {
            key: self.timestamps[v] / 1000
            for v, key in self.commits.items()
            if v <= upto and v in self.timestamps
        }

    def live(self, version: int) -> dict[str, _File]:
        return {
            k: f
            for k, f in self.files.items()
            if f.added <= version and (f.removed is None or f.removed > version)
        }


def _stats_rows(add: Mapping[str, Any]) -> int | None:
    stats = add.get("stats")
    if not isinstance(stats, str):
        return None
    try:
        rows = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):
        return None
    return rows if isinstance(rows, int) else None


def _scan(store: ObjectStore, listing: Mapping[str, int], upto: int | None = None) -> _Scan:
    commits = {int(m.group(1)): key for key in listing if (m := _COMMIT.match(key)) is not None}
    if upto is not None:
        commits = {v: k for v, k in commits.items() if v <= upto}
    if not commits:
        raise NotFound(f"{store.uri}: the backup holds no Delta log entry")
    scan = _Scan(commits, {}, {}, None, [])
    for version in sorted(commits):
        key = commits[version]
        try:
            actions = [json.loads(line) for line in store.read_bytes(key).splitlines() if line]
        except ValueError:
            scan.bad_entries.append(key)
            continue
        for action in actions:
            if not isinstance(action, dict):
                continue
            if "add" in action:
                add = action["add"]
                path = check_key(unquote(str(add["path"])))
                scan.files[path] = _File(int(add.get("size") or 0), version, None, _stats_rows(add))
            elif "remove" in action:
                path = check_key(unquote(str(action["remove"]["path"])))
                entry = scan.files.get(path)
                if entry is not None and entry.removed is None:
                    entry.removed = version
            elif "commitInfo" in action:
                ts = action["commitInfo"].get("timestamp")
                if isinstance(ts, int):
                    scan.timestamps[version] = ts
            elif "metaData" in action and action["metaData"].get("id"):
                scan.table_id = str(action["metaData"]["id"])
    return scan


def _read_metadata_doc(store: ObjectStore) -> dict[str, Any]:
    try:
        doc = json.loads(store.read_bytes(BACKUP_METADATA))
    except NotFound:
        return {}
    except ValueError:
        return {"_unreadable": True}
    return doc if isinstance(doc, dict) else {"_unreadable": True}


def backup_metadata(uri: str, store: ObjectStore) -> BackupMetadata:
    """Describe the original's backup at ``uri`` (its ``backup_metadata.json`` and log)."""

    listing = {e.key: e.size for e in store.list()}
    doc = _read_metadata_doc(store)
    scan = _scan(store, listing)
    stamp = doc.get("timestamp")
    created = (
        datetime.fromtimestamp(stamp / 1000, UTC)
        if isinstance(stamp, int)
        else datetime.fromtimestamp(scan.timestamps.get(scan.latest, 0) / 1000, UTC)
    )
    own = [k for k in listing if k != BACKUP_METADATA]
    return BackupMetadata(
        path=uri,
        backup_id=f"original-{int(created.timestamp() * 1000)}",
        kind="incremental" if scan.incremental else "full",
        table_version=scan.latest,
        restorable_from=scan.first,
        created_at=created,
        created_by=None,
        source="(a backup made by the original posixlake)",
        table_id=scan.table_id,
        total_rows=_int(doc.get("total_rows")),
        total_files=_int(doc.get("total_files")),
        total_size_bytes=_int(doc.get("total_size_bytes")),
        files_copied=len(own),
        bytes_copied=sum(listing[k] for k in own),
        base=None,
        base_backup_id=None,
        auth=USERS_FILE in listing,
    )


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _check_parquet(data: bytes, expected_rows: int | None) -> str | None:
    """Return why ``data`` is not a sound Parquet file (None when it decodes fully)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if len(data) < 12 or data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        return "not a Parquet file"
    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError, ValueError) as err:
        return f"undecodable ({err})"
    if expected_rows is not None and table.num_rows != expected_rows:
        return f"{table.num_rows} rows, the Delta log says {expected_rows}"
    return None


def verify_backup(
    uri: str,
    store: ObjectStore,
    *,
    progress: Progress | None = None,
    workers: int = 4,
) -> VerifyReport:
    """Check a backup made by the original posixlake.

    It holds no checksums, so this checks what can be checked: every Delta log entry
    parses; every data file the log needs at the backup's version is present, has the
    size the log records and decodes completely as Parquet with the row count of its
    statistics; the ``_metadata`` files parse; and the row total matches
    ``backup_metadata.json``. An incremental backup is checked on its own entries and
    the data files they add (restoring it needs its base, see :func:`restore_backup`).
    """

    listing = {e.key: e.size for e in store.list()}
    doc = _read_metadata_doc(store)
    errors: list[str] = []
    corrupted: list[str] = []
    missing: list[str] = []
    try:
        scan = _scan(store, listing)
    except NotFound as err:
        return VerifyReport(uri, None, None, (uri,), 0, 0, errors=(str(err),))
    corrupted += [join_uri(uri, k) for k in scan.bad_entries]
    if doc.get("_unreadable"):
        corrupted.append(join_uri(uri, BACKUP_METADATA))
    live = scan.live(scan.latest)
    added_here = {k: f for k, f in scan.files.items() if f.added in scan.commits}
    needed = added_here if scan.incremental else live
    todo: list[tuple[str, _File]] = []
    for key, f in sorted(needed.items()):
        size = listing.get(key)
        if size is None:
            # the original copies every Parquet file on disk: a live one must be there
            if f.removed is None:
                missing.append(join_uri(uri, key))
        elif f.size and size != f.size:
            corrupted.append(join_uri(uri, key))
        else:
            todo.append((key, f))
    metas = sorted(k for k in listing if k.startswith(METADATA_DIR + "/") and k.endswith(".json"))
    meter = Meter(sum(listing[k] for k, _f in todo) + sum(listing[k] for k in metas), progress)

    def check(item: tuple[str, _File]) -> str | None:
        key, f = item
        try:
            data = store.read_bytes(key)
        except NotFound:
            missing.append(join_uri(uri, key))
            return None
        meter.add(len(data))
        why = _check_parquet(data, f.rows)
        return None if why is None else join_uri(uri, key)

    corrupted += [w for w in parallel_map(check, todo, workers) if w]
    for key in metas:
        data = store.read_bytes(key)
        meter.add(len(data))
        try:
            if key == USERS_FILE:
                parse_users(data, key)
            else:
                json.loads(data)
        except (ValueError, StorageError):
            corrupted.append(join_uri(uri, key))
    if not scan.incremental and not corrupted and not missing and "total_rows" in doc:
        rows = sum(f.rows or 0 for f in live.values())
        if all(f.rows is not None for f in live.values()) and rows != doc["total_rows"]:
            errors.append(
                f"{BACKUP_METADATA} says {doc['total_rows']} rows, the backed-up Delta log "
                f"holds {rows} at version {scan.latest}"
            )
    return VerifyReport(
        path=uri,
        backup_id=f"original-{doc.get('timestamp')}" if "timestamp" in doc else None,
        table_version=scan.latest,
        chain=(uri,),
        files_checked=len(todo) + len(metas),
        bytes_checked=meter.done,
        missing=tuple(sorted(set(missing))),
        corrupted=tuple(sorted(set(corrupted))),
        errors=tuple(errors),
    )


def _target(scan: _Scan, version: int | None, as_of: Any) -> int:

    if version is not None and as_of is not None:
        raise InvalidOperation("give version or as_of, not both")
    if as_of is not None:
        when = as_of_ms(as_of)
        candidates = [v for v, ts in scan.timestamps.items() if ts <= when]
        if not candidates:
            raise VersionError(f"the backup has no version at or before {as_of!r}")
        return max(candidates)
    if version is None:
        return scan.latest
    if isinstance(version, bool) or not isinstance(version, int):
        raise VersionError(f"a version must be an int, not {type(version).__name__}")
    if not scan.first <= version <= scan.latest:
        raise VersionError(
            f"version {version} is not in the backup (it holds versions "
            f"{scan.first}..{scan.latest})"
        )
    return version


def _check_credentials(store: ObjectStore, credentials: Any) -> str | None:
    users = read_users(store)
    if users is None:
        return None
    if credentials is None:
        raise AuthenticationError(
            "this backup is of a table with users: restore it with credentials=(user, "
            "password) of a user holding the restore permission"
        )
    return restore_user(users, credentials)


def restore_backup(
    backup_uri: str,
    store: ObjectStore,
    dest_uri: str,
    *,
    version: int | None = None,
    as_of: Any = None,
    overwrite: bool = False,
    credentials: tuple[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    workers: int = 4,
) -> RestoreResult:
    """Rebuild a table at ``dest_uri`` from a full backup made by the original posixlake.

    The backup is verified first (:func:`verify_backup`) and nothing is written when it
    is damaged. The log is copied up to the target version, last, with the files'
    modification times set to the commit times (time travel by timestamp uses them);
    ``_metadata/`` comes along, so a table with users stays closed.

    An incremental backup is applied onto ``dest_uri`` when that holds the table restored
    from its base (see :func:`_apply_incremental`), as the original layered them.

    Raises:
        InvalidOperation: an incremental backup and no table to continue at ``dest_uri``.
        BackupCorrupted: a missing or damaged file. AlreadyExists: ``dest`` is not empty.
        AuthenticationError / PermissionDenied: a backup with users and no restore right.
    """
    from posixlake import security

    listing = {e.key: e.size for e in store.list()}
    scan = _scan(store, listing)
    if scan.incremental:
        return _apply_incremental(
            backup_uri,
            store,
            listing,
            scan,
            dest_uri,
            version=version,
            as_of=as_of,
            credentials=credentials,
            storage_options=storage_options,
            progress=progress,
            workers=workers,
        )
    target = _target(scan, version, as_of)
    user = _check_credentials(store, credentials)
    report = verify_backup(backup_uri, store, workers=workers)
    damaged = report.missing + report.corrupted
    if damaged:
        raise BackupCorrupted(f"restore refused: {damaged[0]} is missing or corrupted")
    if (
        is_local(dest_uri)
        and is_local(backup_uri)
        and os.path.commonpath([dest_uri, backup_uri]) in (dest_uri, backup_uri)
    ):
        raise InvalidOperation("restore: the destination and the backup overlap")
    data = [
        k
        for k, f in scan.files.items()
        if f.added <= target and k in listing  # vacuumed tombstones are simply absent
    ]
    metas = [k for k in listing if k.startswith(METADATA_DIR + "/")]
    logs = [scan.commits[v] for v in sorted(scan.commits) if v <= target]
    probe = open_store(dest_uri, storage_options)
    staging: str | None = None
    if probe.has_any():
        if not overwrite:
            raise AlreadyExists(
                f"restore refused: {dest_uri} is not empty (pass overwrite=True to replace it)"
            )
        if is_local(dest_uri):
            staging = f"{dest_uri}.restore-{uuid.uuid4().hex[:8]}"
        else:
            probe.delete_prefix()
    build_uri = staging or dest_uri
    out = open_store(build_uri, storage_options)
    created_dir = is_local(build_uri) and not os.path.exists(build_uri)
    meter = Meter(sum(listing[k] for k in (*data, *metas, *logs)), progress)

    def copy_one(key: str) -> None:
        where = join_uri(backup_uri, key)
        try:
            out.write_chunks(
                key,
                hashed(
                    store.read_chunks(key),
                    expect_sha=None,
                    expect_size=listing[key],
                    where=where,
                    meter=meter,
                ),
            )
        except NotFound as err:
            raise BackupCorrupted(f"restore refused: {where} is missing") from err

    try:
        parallel_map(copy_one, [*data, *metas], workers)
        for key in logs:  # in version order, last
            copy_one(key)
        settle_log(out, scan.commit_times(target), build_uri, storage_options, target)
    except BaseException:
        with contextlib.suppress(PosixLakeError, OSError):
            out.delete_prefix()
            if created_dir or staging:
                shutil.rmtree(build_uri, ignore_errors=True)
        raise
    if staging is not None:
        trash = f"{dest_uri}.old-{uuid.uuid4().hex[:8]}"
        os.rename(dest_uri, trash)
        os.rename(staging, dest_uri)
        shutil.rmtree(trash, ignore_errors=True)
    if user is not None:
        security.AuditLog(open_store(dest_uri, storage_options)).record(
            user,
            "restore",
            target=dest_uri,
            detail={"backup": backup_uri, "version": target, "made_by": "original posixlake"},
        )
    stamp = _read_metadata_doc(store).get("timestamp", scan.timestamps.get(scan.latest, 0))
    return RestoreResult(
        dest_uri,
        target,
        f"original-{stamp}",
        len(data) + len(metas) + len(logs),
        meter.done,
    )


def _apply_incremental(
    backup_uri: str,
    store: ObjectStore,
    listing: Mapping[str, int],
    scan: _Scan,
    dest_uri: str,
    *,
    version: int | None,
    as_of: Any,
    credentials: tuple[str, str] | None,
    storage_options: Mapping[str, str] | None,
    progress: Progress | None,
    workers: int,
) -> RestoreResult:
    """Continue the table at ``dest_uri`` with an incremental backup of the original.

    The original's incremental backups hold the log entries and data files after their
    base and do not name it; it restored a chain by restoring each backup into the same
    folder. Here the destination must be a table at the version just before the
    backup's first (the base restored there), its user (``credentials``) needs the
    restore permission, the backup's files are checked first, and only new files are
    added: the data files, then the log entries in order (each created only if absent).
    On a failure what was added is removed again.

    Raises:
        InvalidOperation: no table at ``dest_uri``, or not at the right version.
    """
    from posixlake import security
    from posixlake.delta import DeltaLog

    hint = (
        f"{backup_uri} is an incremental backup made by the original posixlake (versions "
        f"{scan.first}..{scan.latest}): restore its full base backup to {dest_uri} first, "
        "then this one to the same destination"
    )
    try:
        log = DeltaLog.open(dest_uri, storage_options)
    except NotFound as err:
        raise InvalidOperation(hint) from err
    if log.version != scan.first - 1:
        raise InvalidOperation(f"{hint} ({dest_uri} is at version {log.version})")
    target = _target(scan, version, as_of)
    authorizer = security.login(
        dest_uri, storage_options, credentials, configuration=log.configuration
    )
    if authorizer is not None and not authorizer.allows("restore"):
        raise PermissionDenied(f"restore: user {authorizer.user!r} lacks the 'restore' permission")
    report = verify_backup(backup_uri, store, workers=workers)
    damaged = report.missing + report.corrupted
    if damaged:
        raise BackupCorrupted(f"restore refused: {damaged[0]} is missing or corrupted")
    out = open_store(dest_uri, storage_options)
    data = [k for k, f in sorted(scan.files.items()) if f.added <= target and k in listing]
    data = [k for k in data if not out.exists(k)]
    logs = [scan.commits[v] for v in sorted(scan.commits) if v <= target]
    meter = Meter(sum(listing[k] for k in (*data, *logs)), progress)
    written: list[str] = []

    def copy_one(key: str, *, if_absent: bool = False) -> None:
        chunks = hashed(
            store.read_chunks(key),
            expect_sha=None,
            expect_size=listing[key],
            where=join_uri(backup_uri, key),
            meter=meter,
        )
        if if_absent:
            out.write_bytes(key, b"".join(chunks), if_absent=True)
        else:
            out.write_chunks(key, chunks)
        written.append(key)

    try:
        parallel_map(copy_one, data, workers)
        for key in logs:
            copy_one(key, if_absent=True)  # a writer may have moved the table on meanwhile
        times = scan.commit_times(target)
        settle_log(out, times, dest_uri, storage_options, target, what="continued")
    except BaseException:
        for key in reversed(written):
            with contextlib.suppress(PosixLakeError, OSError):
                out.delete(key)
        raise
    security.record_event(
        authorizer or AllowAll(),
        "restore",
        target=dest_uri,
        detail={"backup": backup_uri, "version": target, "made_by": "original posixlake"},
    )
    stamp = _read_metadata_doc(store).get("timestamp", scan.timestamps.get(scan.latest, 0))
    return RestoreResult(dest_uri, target, f"original-{stamp}", len(data) + len(logs), meter.done)
