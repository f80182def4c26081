"""What the original posixlake (the Rust project, 0.4.0 on PyPI) leaves in tables and backups.

Its tables are Delta tables plus a sidecar folder ``_metadata/`` (not Delta):

``_metadata/users.json``
    ``{"users": {name: {"username", "password_hash": "$2b$12$...", "roles": [...],
    "created_at": epoch_ms}}}``: bcrypt hashes; roles ``admin`` (every permission),
    ``read`` (read) and ``write`` (write only: no read, no delete); other role names
    grant nothing.
``_metadata/schema.json``
    ``{"version", "fields": [...], "primary_key": "id" | null}``, written by its
    ``set_primary_key``: the table's primary key (the original keeps none in Delta).
``_metadata/audit.json``, ``_metadata/schema_history.json``
    its audit trail and schema history (kept, not read).

Its backups are a copy of the table folder (every Parquet file on disk at the top level,
``_delta_log/*.json`` and ``_metadata/``) plus ``backup_metadata.json``
(``{"timestamp": ms, "total_rows", "total_files", "total_size_bytes"}``), with no
checksums. Its incremental backups hold only the log entries and Parquet files newer
than their base, and do not say which base: one is restored onto the table restored
from its base, in the same destination, as the original did.

Here they are read so that such tables stay closed without credentials (users are
checked against the bcrypt hashes, and moved into our user store at the first admin
login: :func:`posixlake.security.login`), their primary key is honoured, and their
backups verify and restore (:func:`verify_backup`, :func:`restore_backup`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

from posixlake._authz import PERMISSIONS, AllowAll, Permission
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
from posixlake.storage import ObjectStore, check_key, is_local, join_uri, open_store

if TYPE_CHECKING:
    from posixlake.backup import BackupMetadata, Progress, RestoreResult, VerifyReport
    from posixlake.security import UserDb

__all__ = [
    "BACKUP_METADATA",
    "ORIGINAL_ROLES",
    "SCHEMA_FILE",
    "USERS_FILE",
    "OriginalUser",
    "backup_metadata",
    "check_password",
    "has_users",
    "is_original_backup",
    "primary_key",
    "read_users",
    "restore_backup",
    "restore_user",
    "user_db",
    "user_record",
    "verify_backup",
]

logger = logging.getLogger(__name__)

METADATA_DIR: Final = "_metadata"
USERS_FILE: Final = "_metadata/users.json"
SCHEMA_FILE: Final = "_metadata/schema.json"
BACKUP_METADATA: Final = "backup_metadata.json"
MIGRATED_BY: Final = "posixlake 0.4.0 (migrated)"

ORIGINAL_ROLES: Final[Mapping[str, frozenset[Permission]]] = {
    "admin": frozenset(PERMISSIONS),
    "read": frozenset({"read"}),
    "write": frozenset({"write"}),
}
"""The original's roles and what they grant (its ``write`` role cannot read or delete)."""

_BCRYPT_PREFIX: Final = re.compile(r"^\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}$")
_COMMIT: Final = re.compile(r"^_delta_log/(\d{20})\.json$")
_BCRYPT_MAX_BYTES: Final = 72


# -- users -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OriginalUser:
    """A user of ``_metadata/users.json``."""

    name: str
    password_hash: str
    roles: tuple[str, ...]
    created_at: datetime | None = None

    @property
    def permissions(self) -> frozenset[Permission]:
        """What the original granted this user."""
        out: set[Permission] = set()
        for role in self.roles:
            out |= ORIGINAL_ROLES.get(role, frozenset())
        return frozenset(out)


def _corrupt(where: str, why: str) -> StorageError:
    return StorageError(
        f"{where} (the user file of the original posixlake) is unreadable ({why}): "
        "the table stays closed; restore the file from a backup"
    )


def parse_users(data: bytes, where: str) -> dict[str, OriginalUser]:
    """Decode ``_metadata/users.json``.

    Raises:
        StorageError: the file is not the original's user file (a table with such a file
            is never opened without credentials).
    """
    try:
        doc = json.loads(data)
        raw = doc["users"]
        if not isinstance(raw, dict):
            raise TypeError("users is not an object")
    except (ValueError, KeyError, TypeError) as err:
        raise _corrupt(where, str(err)) from err
    users: dict[str, OriginalUser] = {}
    for name, rec in raw.items():
        if not isinstance(rec, dict):
            raise _corrupt(where, f"user {name!r} is not an object")
        hashed = rec.get("password_hash")
        roles = rec.get("roles", [])
        if not isinstance(hashed, str) or not isinstance(roles, list):
            raise _corrupt(where, f"user {name!r} has no password hash or roles")
        created = rec.get("created_at")
        users[str(name)] = OriginalUser(
            name=str(name),
            password_hash=hashed,
            roles=tuple(str(r) for r in roles),
            created_at=(
                datetime.fromtimestamp(created / 1000, UTC)
                if isinstance(created, int | float) and not isinstance(created, bool)
                else None
            ),
        )
    return users


def read_users(store: ObjectStore) -> dict[str, OriginalUser] | None:
    """Return the original's users of the table in ``store`` (None: it has no user file).

    Raises:
        StorageError: the file exists but is unreadable.
    """
    try:
        data = store.read_bytes(USERS_FILE)
    except NotFound:
        return None
    return parse_users(data, f"{store.uri}/{USERS_FILE}")


def has_users(store: ObjectStore) -> bool:
    """Return whether the table in ``store`` has the original's user file."""
    return store.exists(USERS_FILE)


def check_password(password: str, hashed: str) -> bool:
    """Return whether ``password`` matches an original bcrypt hash (``$2b$12$...``).

    bcrypt reads at most 72 bytes of a password: longer ones are compared on those, as
    the original did.

    Raises:
        StorageError: ``hashed`` is not a bcrypt hash.
    """
    import bcrypt

    if not _BCRYPT_PREFIX.match(hashed):
        raise StorageError("the user database holds a malformed bcrypt hash")
    secret = password.encode("utf-8")[:_BCRYPT_MAX_BYTES]
    try:
        return bool(bcrypt.checkpw(secret, hashed.encode("ascii")))
    except ValueError as err:
        raise StorageError("the user database holds a malformed bcrypt hash") from err


def user_record(user: OriginalUser) -> dict[str, Any]:
    """Return ``user`` as a record of our user database (its bcrypt hash kept).

    ``admin`` and ``read`` become our roles; the original's ``write`` (insert only)
    becomes the single ``write`` permission; other role names granted nothing there and
    are dropped (kept under ``original_roles``).
    """
    roles = [r for r in dict.fromkeys(user.roles) if r in ("admin", "read")]
    grants = ["write"] if "write" in user.roles and "admin" not in user.roles else []
    return {
        "roles": roles,
        "grants": grants,
        "password": {"alg": "bcrypt", "hash": user.password_hash},
        "created_at": user.created_at.isoformat(timespec="milliseconds")
        if user.created_at
        else None,
        "created_by": MIGRATED_BY,
        "password_changed_at": None,
        "original_roles": list(user.roles),
    }


def user_db(users: Mapping[str, OriginalUser]) -> UserDb:
    """Return ``users`` as a user database of ours (version 0, their bcrypt hashes kept)."""
    from posixlake.security import UserDb

    return UserDb(0, {name: user_record(u) for name, u in users.items()})


def restore_user(users: Mapping[str, OriginalUser], credentials: Any) -> str:
    """Return the user that ``credentials`` log in as, if it may restore.

    Checked as every login is (:func:`posixlake.security.check_credentials`): one message
    and one cost for an unknown user and a wrong password.

    Raises:
        AuthenticationError: missing or wrong credentials.
        PermissionDenied: the user lacks the original's restore permission.
    """
    from posixlake.security import check_credentials

    name = check_credentials(user_db(users), credentials)
    if "restore" not in users[name].permissions:
        raise PermissionDenied(f"restore: user {name!r} lacks the 'restore' permission")
    return name


# -- primary key -----------------------------------------------------------------------------


def primary_key(store: ObjectStore, columns: Sequence[str]) -> list[str]:
    """Return the primary key that the original's ``_metadata/schema.json`` names.

    Empty when there is no such file, it names no key, or names a column the table
    does not have (logged: the file is then ignored).
    """
    try:
        data = store.read_bytes(SCHEMA_FILE)
    except NotFound:
        return []
    try:
        key = json.loads(data).get("primary_key")
    except (ValueError, AttributeError):
        logger.warning("%s/%s is unreadable: its primary key is ignored", store.uri, SCHEMA_FILE)
        return []
    if not key:
        return []
    cols = [key] if isinstance(key, str) else list(key) if isinstance(key, list) else []
    if not cols or any(c not in columns for c in cols):
        logger.warning(
            "%s/%s names primary key %r, which is not a column of the table: ignored",
            store.uri,
            SCHEMA_FILE,
            key,
        )
        return []
    return [str(c) for c in cols]


# -- backups ---------------------------------------------------------------------------------


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
    from posixlake.backup import BackupMetadata

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
    from posixlake.backup import VerifyReport
    from posixlake.backup.transfer import Meter, parallel_map

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
    from posixlake.backup.restore import as_of_ms

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
    from posixlake.backup import BackupCorrupted, RestoreResult
    from posixlake.backup.staging import settle_log
    from posixlake.backup.transfer import Meter, hashed, parallel_map

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
    from posixlake.backup import BackupCorrupted, RestoreResult
    from posixlake.backup.staging import settle_log
    from posixlake.backup.transfer import Meter, hashed, parallel_map
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
