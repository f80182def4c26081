"""Full and incremental backups of a table, their verification, and restores.

A backup is a folder (local, S3 or Azure) holding::

    posixlake-backup.json   the manifest, written last
    files/<path>            the table's files, at their paths inside the table

**Consistency.** A backup pins one table version V (one refresh under the table lock,
then writers go on) and copies exactly: the ``_delta_log`` entries up to V (commits,
checkpoints, CRCs; never a later entry, never ``_last_checkpoint``, which may point past
V), every data file that a log entry up to V adds (so the restored table can also time
travel to the older versions), and ``_posixlake/`` (users and audit log). delta-rs
publishes a commit atomically, so a log entry is never copied half-written; files that
in-flight writers are still producing are not referenced by any entry up to V and are
not copied. Data files that an earlier VACUUM removed are skipped, and the manifest
records from which version on the backup can be restored (``restorable_from``); a file
still live at V that vanishes during the copy (a concurrent VACUUM with a retention
near zero) fails the backup, naming the file.

**Manifest.** Table version and id, commit timestamps, the creating user, and for each
file its size, SHA-256, kind, the version that adds it (and removes it, for data files),
and which backup of the chain holds its bytes. The manifest carries a SHA-256 of its own
canonical form, so an edited or truncated manifest is detected. (An attacker who can
rewrite both a file and the manifest can also recompute that checksum: protect backups
with storage immutability — S3 Object Lock, Azure immutable blobs — when that matters.)

**Incremental backups** copy only files that the base backup chain does not hold
(data files and log entries are immutable in Delta; ``_posixlake/`` files are compared by
hash) and list the whole snapshot, pointing each file at the backup that holds it; the
chain is found through the base's location (relative first, so a chain of folders can
be moved together) and pinned by the base manifest's SHA-256.

**Verify** re-reads and hashes every file of the chain: missing, extra (in this backup's
folder but not in its manifest) and corrupted files (any flipped byte), a manifest that
fails its checksum, a broken chain, and log entries that reference data files the
manifest does not list.

**Backups made by the original posixlake** (a copy of the table folder plus
``backup_metadata.json``, no checksums) are recognised by their layout: verify, restore
and ``get_backup_metadata`` hand them to :mod:`posixlake._original`.

**Restore** checks the chain and every file's presence first, writes nothing into a
non-empty destination unless ``overwrite=True``, hashes every byte it copies and
refuses (naming the file, removing what it wrote) at the first mismatch, copies the log
last, sets local log files' modification times back to the originals (delta-rs time
travel by timestamp uses them), and opens the result with delta-rs to check its
version. ``restore(..., version=N)`` / ``as_of=`` rebuild the table as it was at that
version: its log ends at N. Restoring a backup of an auth-enabled table needs
credentials of one of the backup's users holding the ``restore`` permission.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar
from urllib.parse import unquote

from posixlake import _original
from posixlake._authz import Authorizer, Permission
from posixlake.errors import (
    AlreadyExists,
    DeltaLakeError,
    InvalidOperation,
    NotFound,
    PermissionDenied,
    PosixLakeError,
    StorageError,
    VersionError,
)
from posixlake.storage import (
    TEMP_MARK,
    FileEntry,
    LocalStore,
    ObjectStore,
    check_key,
    is_local,
    join_uri,
    normalize_uri,
    open_store,
)

if TYPE_CHECKING:
    from posixlake.delta import DeltaLog

__all__ = [
    "FILES_DIR",
    "MANIFEST_NAME",
    "RESTORE_MARKER",
    "BackupCorrupted",
    "BackupFile",
    "BackupMetadata",
    "Progress",
    "RestoreResult",
    "VerifyReport",
    "check_backup_credentials",
    "clean_restore_leftovers",
    "create_backup",
    "get_backup_metadata",
    "restore",
    "restore_in_progress",
    "verify_backup",
]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")
_R = TypeVar("_R")

MANIFEST_NAME: Final = "posixlake-backup.json"
FILES_DIR: Final = "files"
FORMAT: Final = "posixlake-backup"
FORMAT_VERSION: Final = 1
DEFAULT_WORKERS: Final = 4
EPOCH_MS_THRESHOLD: Final = 10**11
"""``restore_to_transaction`` treats an int at least this large as epoch milliseconds (the
original project's meaning); smaller ints are versions."""

Progress = Callable[[int, int], None]
"""``progress(done_bytes, total_bytes)``; called from worker threads, one call at a time."""

FileKind = Literal["log", "data", "cdc", "meta"]

_COMMIT = re.compile(r"^(\d{20})\.json$")
_LOG_FILE = re.compile(
    r"^(?:(\d{20})\.json|(\d{20})\.crc|(\d{20})\.checkpoint(?:\.\d{10}\.\d{10})?\.parquet"
    r"|(\d{20})\.checkpoint\.[0-9A-Za-z-]+\.(?:json|parquet)|\d{20}\.(\d{20})\.compacted\.json)$"
)
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_USERS_FILE = re.compile(r"^_posixlake/users/(\d{20})\.json$")
LOG_DIR: Final = "_delta_log"


class BackupCorrupted(StorageError):
    """A backup is damaged: a file is missing, its bytes do not match, or the manifest."""


# -- value types ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BackupFile:
    """One file of a backed-up table."""

    path: str
    """Path inside the table (``_delta_log/...``, ``part-....parquet``, ``_posixlake/...``)."""
    size: int
    sha256: str
    kind: FileKind
    backup_id: str
    """The backup of the chain that stores the bytes."""
    version: int | None = None
    """Log entry: its version. Data file: the version that adds it."""
    removed: int | None = None
    """Data file: the version that removes it (None while live)."""
    modified: float | None = None
    """Log entry: the source file's modification time (seconds since the epoch)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "kind": self.kind,
            "backup_id": self.backup_id,
        }
        for name in ("version", "removed", "modified"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> BackupFile:
        kind = doc["kind"]
        if kind not in ("log", "data", "cdc", "meta"):
            raise ValueError(f"unknown kind {kind!r}")
        sha = str(doc["sha256"])
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ValueError(f"bad sha256 {sha!r}")
        return cls(
            path=check_key(str(doc["path"])),
            size=int(doc["size"]),
            sha256=sha,
            kind=kind,
            backup_id=str(doc["backup_id"]),
            version=_opt_int(doc.get("version")),
            removed=_opt_int(doc.get("removed")),
            modified=float(doc["modified"]) if doc.get("modified") is not None else None,
        )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class BackupMetadata:
    """What a backup holds (``get_backup_metadata``, and the result of ``backup``)."""

    path: str
    backup_id: str
    kind: Literal["full", "incremental"]
    table_version: int
    """The table version the backup is a copy of."""
    restorable_from: int
    """The oldest version ``restore(..., version=)`` can rebuild."""
    created_at: datetime
    created_by: str | None
    source: str
    table_id: str | None
    total_rows: int
    """Rows of the table at ``table_version``."""
    total_files: int
    """Files of the snapshot, wherever in the chain they are stored."""
    total_size_bytes: int
    files_copied: int
    """Files stored in this backup's own folder."""
    bytes_copied: int
    base: str | None
    """The base backup's location (incremental backups)."""
    base_backup_id: str | None
    auth: bool
    """The table has users: restoring needs credentials with the restore permission."""

    @property
    def timestamp(self) -> int:
        """Creation time in epoch milliseconds (the original project's field)."""
        return int(self.created_at.timestamp() * 1000)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "path": self.path,
            "backup_id": self.backup_id,
            "kind": self.kind,
            "table_version": self.table_version,
            "restorable_from": self.restorable_from,
            "created_at": self.created_at.isoformat(),
            "created_by": self.created_by,
            "source": self.source,
            "table_id": self.table_id,
            "total_rows": self.total_rows,
            "total_files": self.total_files,
            "total_size_bytes": self.total_size_bytes,
            "files_copied": self.files_copied,
            "bytes_copied": self.bytes_copied,
            "base": self.base,
            "base_backup_id": self.base_backup_id,
            "auth": self.auth,
            "timestamp": self.timestamp,
        }


@dataclass(frozen=True)
class VerifyReport:
    """The result of :func:`verify_backup`. Paths are full locations of backup files."""

    path: str
    backup_id: str | None
    table_version: int | None
    chain: tuple[str, ...]
    """The backups checked, this one first, then its bases."""
    files_checked: int
    bytes_checked: int
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    corrupted: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    """Problems with the manifest, the chain or the log."""
    schema_errors: tuple[str, ...] = ()
    """Problems with the table schema: the Delta log's schema does not parse, or a live
    data file lacks a column or stores it as another type."""
    schema_checked: bool = False
    """Whether the schema could be checked (the log was readable and no file damaged)."""

    @property
    def ok(self) -> bool:
        """True when nothing is missing, corrupted, extra or wrong."""
        return not (
            self.missing or self.extra or self.corrupted or self.errors or self.schema_errors
        )

    @property
    def files_verified(self) -> int:
        """Alias of ``files_checked`` (the original project's field)."""
        return self.files_checked

    @property
    def total_size_bytes(self) -> int:
        """Alias of ``bytes_checked`` (the original project's field)."""
        return self.bytes_checked

    @property
    def schema_valid(self) -> bool:
        """Whether the table schema checked out (the original's field).

        True when the Delta log's schema parses as a Delta schema and every data file
        of the backed-up version holds each (non-partition) column with a matching
        Parquet type. False when that check failed or could not run.
        """
        return self.schema_checked and not self.schema_errors

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "path": self.path,
            "backup_id": self.backup_id,
            "table_version": self.table_version,
            "ok": self.ok,
            "chain": list(self.chain),
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
            "missing": list(self.missing),
            "extra": list(self.extra),
            "corrupted": list(self.corrupted),
            "errors": list(self.errors),
            "schema_valid": self.schema_valid,
            "schema_errors": list(self.schema_errors),
        }


@dataclass(frozen=True)
class RestoreResult:
    """What :func:`restore` rebuilt."""

    path: str
    version: int
    backup_id: str
    files: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "path": self.path,
            "version": self.version,
            "backup_id": self.backup_id,
            "files": self.files,
            "bytes": self.bytes,
        }


@dataclass
class _Manifest:
    backup_id: str
    kind: Literal["full", "incremental"]
    created_at: datetime
    created_by: str | None
    source: str
    table_id: str | None
    table_version: int
    min_version: int
    restorable_from: int
    rows: int
    auth: bool
    timestamps: dict[int, int]
    files: dict[str, BackupFile]
    base: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "backup_id": self.backup_id,
            "kind": self.kind,
            "created_at": self.created_at.isoformat(),
            "created_by": self.created_by,
            "source": self.source,
            "table_id": self.table_id,
            "table_version": self.table_version,
            "min_version": self.min_version,
            "restorable_from": self.restorable_from,
            "rows": self.rows,
            "auth": self.auth,
            "timestamps": {str(k): v for k, v in sorted(self.timestamps.items())},
            "base": self.base,
            "files": [f.to_json() for f in sorted(self.files.values(), key=lambda f: f.path)],
        }

    def encode(self) -> bytes:
        doc = self.to_json()
        doc["checksum"] = _checksum(doc)
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> _Manifest:
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise ValueError("not an object")
        except ValueError as err:
            raise BackupCorrupted(f"{where}: the manifest is not valid JSON ({err})") from err
        if doc.get("format") != FORMAT:
            raise BackupCorrupted(f"{where}: not a posixlake backup manifest")
        stored = doc.pop("checksum", None)
        if stored != _checksum(doc):
            raise BackupCorrupted(f"{where}: the manifest fails its checksum (edited or damaged)")
        if int(doc.get("format_version", 0)) > FORMAT_VERSION:
            raise InvalidOperation(
                f"{where}: made by a newer posixlake (format {doc['format_version']})"
            )
        try:
            files = [BackupFile.from_json(f) for f in doc["files"]]
            return cls(
                backup_id=str(doc["backup_id"]),
                kind="incremental" if doc["kind"] == "incremental" else "full",
                created_at=datetime.fromisoformat(doc["created_at"]),
                created_by=doc.get("created_by"),
                source=str(doc["source"]),
                table_id=doc.get("table_id"),
                table_version=int(doc["table_version"]),
                min_version=int(doc["min_version"]),
                restorable_from=int(doc["restorable_from"]),
                rows=int(doc["rows"]),
                auth=bool(doc["auth"]),
                timestamps={int(k): int(v) for k, v in dict(doc["timestamps"]).items()},
                files={f.path: f for f in files},
                base=dict(doc["base"]) if doc.get("base") else None,
            )
        except (KeyError, TypeError, ValueError, InvalidOperation) as err:
            raise BackupCorrupted(f"{where}: the manifest is malformed ({err})") from err


def _checksum(doc: Mapping[str, Any]) -> str:
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


# -- backup locations and chains ---------------------------------------------------------


@dataclass
class _Backup:
    """One opened backup: its store, its manifest and the manifest's SHA-256."""

    uri: str
    store: ObjectStore
    manifest: _Manifest
    manifest_sha256: str

    def file_uri(self, path: str) -> str:
        return join_uri(self.uri, FILES_DIR, path)


def _open_backup(uri: str, options: Mapping[str, str] | None) -> _Backup:
    store = open_store(uri, options)
    try:
        data = store.read_bytes(MANIFEST_NAME)
    except NotFound as err:
        if store.has_any():
            raise BackupCorrupted(
                f"{uri}: no {MANIFEST_NAME} (an interrupted backup, or not a backup)"
            ) from err
        raise NotFound(f"no backup at {uri}") from err
    manifest = _Manifest.decode(data, f"{uri}/{MANIFEST_NAME}")
    return _Backup(uri, store, manifest, hashlib.sha256(data).hexdigest())


def _resolve_base(child: _Backup, options: Mapping[str, str] | None) -> _Backup:
    ref = child.manifest.base
    assert ref is not None
    candidates: list[str] = []
    relative = ref.get("relative")
    if isinstance(relative, str) and relative:
        if is_local(child.uri):
            candidates.append(os.path.normpath(os.path.join(child.uri, relative)))
        else:
            candidates.append(_join_relative(child.uri, relative))
    if isinstance(ref.get("uri"), str):
        candidates.append(ref["uri"])
    last: PosixLakeError | None = None
    for cand in dict.fromkeys(candidates):
        try:
            base = _open_backup(cand, options)
        except NotFound as err:
            last = err
            continue
        if base.manifest.backup_id != ref.get("backup_id") or base.manifest_sha256 != ref.get(
            "manifest_sha256"
        ):
            raise BackupCorrupted(
                f"{child.uri}: its base backup at {cand} is not the one it was made from "
                "(different id or a changed manifest)"
            )
        return base
    raise BackupCorrupted(
        f"{child.uri}: its base backup {ref.get('backup_id')} was not found at "
        f"{' or '.join(dict.fromkeys(candidates))}"
    ) from last


def _join_relative(uri: str, relative: str) -> str:
    scheme, rest = uri.split("://", 1)
    parts = rest.split("/")
    for seg in relative.split("/"):
        if seg == "..":
            if len(parts) > 1:
                parts.pop()
        elif seg and seg != ".":
            parts.append(seg)
    return f"{scheme}://{'/'.join(parts)}"


def _relative(from_uri: str, to_uri: str) -> str | None:
    if is_local(from_uri) and is_local(to_uri):
        return os.path.relpath(to_uri, from_uri).replace(os.sep, "/")
    if is_local(from_uri) or is_local(to_uri):
        return None
    a_scheme, a = from_uri.split("://", 1)
    b_scheme, b = to_uri.split("://", 1)
    a_parts, b_parts = a.strip("/").split("/"), b.strip("/").split("/")
    if a_scheme != b_scheme or a_parts[0] != b_parts[0]:
        return None
    common = 0
    while common < min(len(a_parts), len(b_parts)) and a_parts[common] == b_parts[common]:
        common += 1
    return "/".join([".."] * (len(a_parts) - common) + b_parts[common:]) or "."


def _chain(top: _Backup, options: Mapping[str, str] | None) -> dict[str, _Backup]:
    """Return the backups of the chain by id (top first), checking each link."""
    out = {top.manifest.backup_id: top}
    current = top
    while current.manifest.base is not None:
        base = _resolve_base(current, options)
        if base.manifest.backup_id in out:
            raise BackupCorrupted(f"{current.uri}: the backup chain loops")
        out[base.manifest.backup_id] = base
        current = base
    return out


# -- hashing copies --------------------------------------------------------------------


class _Meter:
    """Shared progress counter (thread-safe), calling ``progress`` one call at a time."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.total = total
        self.done = 0
        self._progress = progress
        self._lock = threading.Lock()
        if progress is not None:
            progress(0, total)

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self._progress is not None:
                self._progress(self.done, self.total)


def _hashed(
    chunks: Iterable[bytes],
    *,
    expect_sha: str | None,
    expect_size: int | None,
    where: str,
    meter: _Meter | None,
    digest_out: list[str] | None = None,
) -> Iterator[bytes]:
    """Pass chunks through, hashing; raise BackupCorrupted before the end on a mismatch."""
    h = hashlib.sha256()
    size = 0
    for chunk in chunks:
        h.update(chunk)
        size += len(chunk)
        if meter is not None:
            meter.add(len(chunk))
        if expect_size is not None and size > expect_size:
            raise BackupCorrupted(
                f"{where}: corrupted (larger than the {expect_size} bytes expected)"
            )
        yield chunk
    digest = h.hexdigest()
    if expect_size is not None and size != expect_size:
        raise BackupCorrupted(f"{where}: corrupted ({size} bytes, {expect_size} expected)")
    if expect_sha is not None and digest != expect_sha:
        raise BackupCorrupted(f"{where}: corrupted (SHA-256 mismatch)")
    if digest_out is not None:
        digest_out.append(digest)


def _parallel_map(fn: Callable[[_T], _R], items: Sequence[_T], workers: int) -> list[_R]:
    """Return ``[fn(x) for x in items]`` computed on a thread pool; raise the first error."""
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="posixlake-backup") as pool:
        futures: list[Future[_R]] = [pool.submit(fn, x) for x in items]
        _done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for fut in pending:
            fut.cancel()
        wait(futures)
        for fut in futures:
            err = None if fut.cancelled() else fut.exception()
            if err is not None:
                raise err
        return [fut.result() for fut in futures]


# -- reading the Delta log ---------------------------------------------------------------


@dataclass
class _DataFile:
    size: int
    added: int
    removed: int | None = None
    kind: FileKind = "data"


@dataclass
class _LogScan:
    version: int
    min_version: int
    files: dict[str, _DataFile] = field(default_factory=dict)
    timestamps: dict[int, int] = field(default_factory=dict)
    table_id: str | None = None
    schema_string: str | None = None
    partition_columns: tuple[str, ...] = ()
    column_mapping: bool = False


def _log_version(name: str) -> int | None:
    m = _LOG_FILE.match(name)
    if not m:
        return None
    return int(next(g for g in m.groups() if g is not None))


def _data_key(raw: str, where: str) -> str:
    if "://" in raw or raw.startswith("/"):
        raise InvalidOperation(
            f"{where}: the table references a file outside its folder ({raw}); "
            "backups of shallow clones are not supported"
        )
    return check_key(unquote(raw))


def _apply_actions(scan: _LogScan, version: int, lines: Iterable[Any], where: str) -> None:
    for action in lines:
        if not isinstance(action, dict):
            continue
        if "add" in action:
            add = action["add"]
            dv = add.get("deletionVector")
            if dv and dv.get("storageType") not in (None, "i"):
                raise InvalidOperation(
                    f"{where}: deletion vectors stored in files are not supported by backup yet"
                )
            key = _data_key(str(add["path"]), where)
            prior = scan.files.get(key)
            added = prior.added if prior is not None and prior.removed is None else version
            scan.files[key] = _DataFile(int(add.get("size", 0) or 0), added)
        elif "remove" in action:
            key = _data_key(str(action["remove"]["path"]), where)
            entry = scan.files.get(key)
            if entry is not None and entry.removed is None:
                entry.removed = version
        elif "cdc" in action:
            key = _data_key(str(action["cdc"]["path"]), where)
            scan.files.setdefault(
                key, _DataFile(int(action["cdc"].get("size", 0) or 0), version, kind="cdc")
            )
        elif "commitInfo" in action:
            ts = action["commitInfo"].get("timestamp")
            if isinstance(ts, int):
                scan.timestamps[version] = ts
        elif "metaData" in action and isinstance(action["metaData"], dict):
            meta = action["metaData"]
            if meta.get("id"):
                scan.table_id = str(meta["id"])
            if isinstance(meta.get("schemaString"), str):
                scan.schema_string = meta["schemaString"]
            scan.partition_columns = tuple(str(c) for c in meta.get("partitionColumns") or ())
            config = meta.get("configuration") or {}
            if isinstance(config, list):  # a checkpoint's map column reads as pairs
                config = dict(config)
            mode = config.get("delta.columnMapping.mode", "none")
            scan.column_mapping = mode not in (None, "none")


def _parse_commit(data: bytes, where: str) -> list[Any]:
    try:
        return [json.loads(line) for line in data.splitlines() if line.strip()]
    except ValueError as err:
        raise DeltaLakeError(f"{where}: unreadable Delta log entry ({err})") from err


def _read_checkpoint(parts: Sequence[bytes], where: str) -> list[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out: list[Any] = []
    for data in parts:
        try:
            table = pq.read_table(io.BytesIO(data))
        except pa.ArrowException as err:
            raise DeltaLakeError(f"{where}: unreadable checkpoint ({err})") from err
        for col in ("add", "metaData"):
            if col not in table.column_names:
                continue
            for value in table.column(col).to_pylist():
                if value:
                    out.append({col: value})
    return out


def _scan_log(
    log_keys: Mapping[str, int],
    version: int,
    read: Callable[[str], bytes],
    workers: int,
) -> _LogScan:
    """Replay the log up to ``version`` from the entries in ``log_keys`` (key -> version)."""
    commits = {
        v: k for k, v in log_keys.items() if v <= version and _COMMIT.match(k.rsplit("/", 1)[-1])
    }
    if version not in commits:
        raise DeltaLakeError(f"the Delta log has no entry for version {version}")
    start = 0
    checkpoint_parts: list[str] = []
    if not all(v in commits for v in range(version + 1)):
        by_version: dict[int, list[tuple[str, int]]] = {}
        for k, v in log_keys.items():
            m = _CHECKPOINT.match(k.rsplit("/", 1)[-1])
            if m and v <= version:
                by_version.setdefault(v, []).append((k, int(m.group(3) or 1)))
        usable = [
            c
            for c, parts in by_version.items()
            if len(parts) == parts[0][1] and all(v in commits for v in range(c + 1, version + 1))
        ]
        if not usable:
            raise DeltaLakeError(
                f"the Delta log cannot be replayed up to version {version}: commits are missing "
                "and no checkpoint covers them"
            )
        start = max(usable)
        checkpoint_parts = sorted(k for k, _n in by_version[start])
    scan = _LogScan(version=version, min_version=start)
    wanted = sorted(v for v in commits if v > start or not checkpoint_parts)
    older = sorted(v for v in commits if v <= start and checkpoint_parts)
    contents = _parallel_map(read, [commits[v] for v in (*older, *wanted)], workers)
    by_v = dict(zip((*older, *wanted), contents, strict=True))
    if checkpoint_parts:
        parts = [read(k) for k in checkpoint_parts]
        _apply_actions(
            scan, start, _read_checkpoint(parts, checkpoint_parts[0]), checkpoint_parts[0]
        )
        for v in older:  # timestamps only: the state before the checkpoint is not needed
            for action in _parse_commit(by_v[v], commits[v]):
                if isinstance(action, dict) and "commitInfo" in action:
                    ts = action["commitInfo"].get("timestamp")
                    if isinstance(ts, int):
                        scan.timestamps[v] = ts
    for v in wanted:
        _apply_actions(scan, v, _parse_commit(by_v[v], commits[v]), commits[v])
    return scan


# -- backup --------------------------------------------------------------------------------


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
    unavailable: list[_DataFile]
    """Data files of old versions that neither the source nor the chain has (vacuumed)."""


def _plan(
    uri: str,
    pin: _Pin,
    scan: _LogScan,
    listing: Mapping[str, FileEntry],
    log_keys: Mapping[str, int],
    base_files: Mapping[str, BackupFile],
) -> _Plan:
    """Decide, file by file, what the backup copies and what its base chain holds."""
    missing_live = sorted(
        k
        for k, f in scan.files.items()
        if f.removed is None and f.kind == "data" and k not in listing and k not in base_files
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
    unavailable: list[_DataFile] = []
    for key, f in sorted(scan.files.items()):
        entry = listing.get(key)
        if entry is None:
            if key not in base_files and f.kind == "data":
                unavailable.append(f)
            continue
        if f.kind == "data" and f.size and entry.size != f.size:
            raise StorageError(
                f"backup: {uri}/{key} has {entry.size} bytes but the Delta log says {f.size}"
            )
        items.append(_Item(key, f.kind, entry.size, f.added, f.removed))
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
        known = scan.files.get(key)
        plan.files[key] = replace(bf, removed=known.removed) if known is not None else bf
    return plan


def _copy_to_backup(
    item: _Item,
    *,
    source: ObjectStore,
    dest: ObjectStore,
    backup_id: str,
    prior: BackupFile | None,
    meter: _Meter,
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
            _hashed(
                source.read_chunks(item.key),
                expect_sha=None,
                expect_size=item.size if item.kind != "meta" else None,
                where=where,
                meter=meter,
                digest_out=digest,
            ),
        )
    except NotFound as err:
        if item.kind in ("data", "cdc") and item.removed is not None:
            return None  # only older versions needed it: they become unrestorable
        if item.kind == "meta":
            return None
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
    chain: dict[str, _Backup] = {}
    base_backup: _Backup | None = None
    if base is not None:
        base_backup = _open_backup(normalize_uri(base), base_storage_options or storage_options)
        chain = _chain(base_backup, base_storage_options or storage_options)
    base_files: dict[str, BackupFile] = dict(base_backup.manifest.files) if base_backup else {}
    pin = _pin(log, source)
    listing = {e.key: e for e in source.list() if TEMP_MARK not in e.key}
    log_keys: dict[str, int] = {}
    for key in listing:
        if key.startswith(LOG_DIR + "/") and key.count("/") == 1:
            v = _log_version(key.rsplit("/", 1)[-1])
            if v is not None and v <= pin.version:
                log_keys[key] = v
    for key, bf in base_files.items():
        if bf.kind == "log" and bf.version is not None and bf.version <= pin.version:
            log_keys.setdefault(key, bf.version)

    def read_log(key: str) -> bytes:
        if key in listing:
            return source.read_bytes(key)
        bf = base_files[key]
        holder = chain[bf.backup_id]
        return b"".join(
            _hashed(
                holder.store.read_chunks(f"{FILES_DIR}/{key}"),
                expect_sha=bf.sha256,
                expect_size=bf.size,
                where=holder.file_uri(key),
                meter=None,
            )
        )

    scan = _scan_log(log_keys, pin.version, read_log, workers)
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
    plan = _plan(log.uri, pin, scan, listing, log_keys, base_files)
    now = datetime.now(UTC)
    backup_id = _new_id(now)
    dest_store = _dest_store(dest_uri, storage_options, overwrite=overwrite)
    meter = _Meter(sum(i.size for i in plan.to_copy), progress)

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
        copied = _parallel_map(copy_one, plan.to_copy, workers)
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
    meta = _metadata(dest_uri, manifest)
    if authorizer is not None:
        security.record_event(
            authorizer,
            "backup",
            target=_public_uri(dest_uri),
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
    scan: _LogScan,
    plan: _Plan,
    files: dict[str, BackupFile],
    base: _Backup | None,
) -> _Manifest:
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
    return _Manifest(
        backup_id=backup_id,
        kind="incremental" if base is not None else "full",
        created_at=now,
        created_by=user,
        source=_public_uri(source_uri),
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
                "relative": _relative(dest_uri, base.uri),
                "manifest_sha256": base.manifest_sha256,
                "table_version": bm.table_version,
            }
            if base is not None and bm is not None
            else None
        ),
    )


def _public_uri(uri: str) -> str:
    """Drop any user info (``scheme://user:secret@host``) from a URI."""
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        head, sep, tail = rest.partition("/")
        if "@" in head and ":" in head.split("@", 1)[0]:
            head = head.split("@", 1)[1]
        return f"{scheme}://{head}{sep}{tail}"
    return uri


def _metadata(uri: str, m: _Manifest) -> BackupMetadata:
    own = [f for f in m.files.values() if f.backup_id == m.backup_id]
    return BackupMetadata(
        path=uri,
        backup_id=m.backup_id,
        kind=m.kind,
        table_version=m.table_version,
        restorable_from=m.restorable_from,
        created_at=m.created_at,
        created_by=m.created_by,
        source=m.source,
        table_id=m.table_id,
        total_rows=m.rows,
        total_files=len(m.files),
        total_size_bytes=sum(f.size for f in m.files.values()),
        files_copied=len(own),
        bytes_copied=sum(f.size for f in own),
        base=(m.base or {}).get("uri"),
        base_backup_id=(m.base or {}).get("backup_id"),
        auth=m.auth,
    )


def get_backup_metadata(
    path: str | os.PathLike[str], *, storage_options: Mapping[str, str] | None = None
) -> BackupMetadata:
    """Return what the backup at ``path`` holds (reads and checks its manifest only).

    Raises:
        NotFound: no backup there. BackupCorrupted: a damaged manifest.
    """
    uri = normalize_uri(path)
    original = _original_backup(uri, storage_options)
    if original is not None:
        return _original.backup_metadata(uri, original)
    return _metadata(uri, _open_backup(uri, storage_options).manifest)


# -- verify ---------------------------------------------------------------------------------


def verify_backup(
    path: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    workers: int = DEFAULT_WORKERS,
) -> VerifyReport:
    """Hash every file of the backup at ``path`` (and of its base chain) against the manifest.

    Never raises for damage: the report lists it.

    Raises:
        NotFound: there is no backup (nor anything else) at ``path``.
    """
    uri = normalize_uri(path)
    original = _original_backup(uri, storage_options)
    if original is not None:
        return _original.verify_backup(uri, original, progress=progress, workers=workers)
    try:
        top = _open_backup(uri, storage_options)
    except BackupCorrupted as err:
        return VerifyReport(uri, None, None, (uri,), 0, 0, errors=(str(err),))
    m = top.manifest
    errors: list[str] = []
    try:
        chain = _chain(top, storage_options)
    except (BackupCorrupted, InvalidOperation) as err:
        errors.append(str(err))
        chain = {m.backup_id: top}
    listings: dict[str, dict[str, FileEntry]] = {}
    stray: list[str] = []
    for bid, b in chain.items():
        listings[bid] = {}
        for e in b.store.list():
            if e.key.startswith(FILES_DIR + "/"):
                listings[bid][e.key[len(FILES_DIR) + 1 :]] = e
            elif bid == m.backup_id and e.key != MANIFEST_NAME:
                stray.append(join_uri(uri, e.key))
    missing: list[str] = []
    corrupted: list[str] = []
    todo: list[BackupFile] = []
    for f in sorted(m.files.values(), key=lambda f: f.path):
        holder = chain.get(f.backup_id)
        if holder is None:
            if not errors:
                errors.append(
                    f"{f.path}: stored in backup {f.backup_id}, which is not in the chain"
                )
            missing.append(f"{f.backup_id}:{f.path}")
            continue
        entry = listings[f.backup_id].get(f.path)
        if entry is None:
            missing.append(holder.file_uri(f.path))
        elif entry.size != f.size:
            corrupted.append(holder.file_uri(f.path))
        else:
            todo.append(f)
    own = {f.path for f in m.files.values() if f.backup_id == m.backup_id}
    extra = [top.file_uri(k) for k in sorted(listings[m.backup_id]) if k not in own]
    extra += sorted(stray)
    meter = _Meter(sum(f.size for f in todo), progress)

    tails: dict[str, bytes] = {}  # the last bytes of each data file: its Parquet footer

    def check(f: BackupFile) -> str | None:
        holder = chain[f.backup_id]
        where = holder.file_uri(f.path)
        tail = b""
        try:
            for chunk in _hashed(
                holder.store.read_chunks(f"{FILES_DIR}/{f.path}"),
                expect_sha=f.sha256,
                expect_size=f.size,
                where=where,
                meter=meter,
            ):
                if f.kind == "data":
                    tail = (tail + chunk)[-_FOOTER_KEEP:]
        except BackupCorrupted:
            return where
        except NotFound:
            missing.append(where)
            return None
        if f.kind == "data":
            tails[f.path] = tail
        return None

    bad = [w for w in _parallel_map(check, todo, workers) if w]
    corrupted.extend(bad)
    schema_errors: list[str] = []
    schema_checked = False
    if not bad and not missing:
        log_errors, scan = _check_log(m, chain, workers)
        errors.extend(log_errors)
        if scan is not None:
            schema_errors = _check_schema(m, scan, tails)
            schema_checked = True
    return VerifyReport(
        path=uri,
        backup_id=m.backup_id,
        table_version=m.table_version,
        chain=tuple(b.uri for b in chain.values()),
        files_checked=len(todo),
        bytes_checked=meter.done,
        missing=tuple(sorted(missing)),
        extra=tuple(extra),
        corrupted=tuple(sorted(corrupted)),
        errors=tuple(errors),
        schema_errors=tuple(schema_errors),
        schema_checked=schema_checked,
    )


def _check_log(
    m: _Manifest, chain: Mapping[str, _Backup], workers: int
) -> tuple[list[str], _LogScan | None]:
    """Cross-check the manifest against the (verified) Delta log it holds.

    Returns the problems found and the replayed log (None when it is unusable).
    """
    log_keys = {
        f.path: f.version
        for f in m.files.values()
        if f.kind == "log" and f.version is not None and f.version <= m.table_version
    }

    def read(key: str) -> bytes:
        f = m.files[key]
        return chain[f.backup_id].store.read_bytes(f"{FILES_DIR}/{key}")

    try:
        scan = _scan_log(
            {k: v for k, v in log_keys.items() if v is not None}, m.table_version, read, workers
        )
    except (DeltaLakeError, InvalidOperation) as err:
        return [f"the backed-up Delta log is unusable: {err}"], None
    problems = []
    for key, f in sorted(scan.files.items()):
        if f.kind != "data" or key in m.files:
            continue
        needed = f.removed is None or f.removed > m.restorable_from
        if needed:
            problems.append(
                f"the Delta log references {key} (version {f.added}), which the manifest does not list"
            )
    if scan.table_id and m.table_id and scan.table_id != m.table_id:
        problems.append("the manifest's table id does not match the Delta log")
    return problems, scan


_FOOTER_KEEP: Final = 1 << 20
"""Bytes kept from the end of each data file while hashing it: its Parquet footer."""


def _delta_type_matches(delta_type: Any, arrow_type: Any) -> str | None:
    """Return None if a Parquet column of ``arrow_type`` can hold the Delta type, else why."""
    import pyarrow as pa

    t = pa.types
    if isinstance(delta_type, str):
        checks: dict[str, Callable[[Any], bool]] = {
            "string": lambda a: t.is_string(a) or t.is_large_string(a) or t.is_string_view(a),
            "binary": lambda a: t.is_binary(a) or t.is_large_binary(a) or t.is_fixed_size_binary(a),
            "boolean": t.is_boolean,
            "byte": t.is_integer,
            "short": t.is_integer,
            "integer": t.is_integer,
            "long": t.is_integer,
            "float": t.is_floating,
            "double": t.is_floating,
            "date": t.is_date,
            "timestamp": t.is_timestamp,
            "timestamp_ntz": t.is_timestamp,
        }
        if delta_type.startswith("decimal"):
            ok = t.is_decimal(arrow_type) or t.is_integer(arrow_type)
        elif delta_type in checks:
            ok = checks[delta_type](arrow_type)
        else:
            return f"unknown Delta type {delta_type!r}"
        return None if ok else f"{delta_type} stored as {arrow_type}"
    if not isinstance(delta_type, dict):
        return f"malformed Delta type {delta_type!r}"
    kind = delta_type.get("type")
    if kind == "array":
        if not (t.is_list(arrow_type) or t.is_large_list(arrow_type)):
            return f"array stored as {arrow_type}"
        return _delta_type_matches(delta_type.get("elementType"), arrow_type.value_type)
    if kind == "map":
        if not t.is_map(arrow_type):
            return f"map stored as {arrow_type}"
        return _delta_type_matches(
            delta_type.get("keyType"), arrow_type.key_type
        ) or _delta_type_matches(delta_type.get("valueType"), arrow_type.item_type)
    if kind == "struct":
        if not t.is_struct(arrow_type):
            return f"struct stored as {arrow_type}"
        names = {
            arrow_type.field(i).name: arrow_type.field(i).type for i in range(arrow_type.num_fields)
        }
        for sub in delta_type.get("fields") or ():
            if not isinstance(sub, dict) or "name" not in sub:
                return "malformed struct field"
            if sub["name"] in names:
                why = _delta_type_matches(sub.get("type"), names[sub["name"]])
                if why:
                    return f"{sub['name']}: {why}"
        return None
    return f"unknown Delta type {delta_type!r}"


def _check_schema(m: _Manifest, scan: _LogScan, tails: Mapping[str, bytes]) -> list[str]:
    """Check the Delta log's schema and that each live data file matches it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if scan.schema_string is None:
        return ["the Delta log has no table schema (metaData)"]
    try:
        schema = json.loads(scan.schema_string)
    except ValueError as err:
        return [f"the table schema is not valid JSON: {err}"]
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if (
        not isinstance(schema, dict)
        or schema.get("type") != "struct"
        or not isinstance(fields, list)
    ):
        return ["the table schema is not a Delta struct schema"]
    problems: list[str] = []
    columns: dict[str, Any] = {}
    for f in fields:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or "type" not in f:
            problems.append(f"malformed schema field {f!r}")
            continue
        why = _delta_type_matches(f["type"], pa.null()) if isinstance(f["type"], str) else None
        if why and why.startswith("unknown"):
            problems.append(f"column {f['name']!r}: {why}")
        columns[f["name"]] = f["type"]
    if problems or scan.column_mapping:  # mapped columns have physical names: not compared
        return problems
    stored = [c for c in columns if c not in scan.partition_columns]
    for key, entry in sorted(scan.files.items()):
        if entry.kind != "data" or entry.removed is not None or key not in tails:
            continue
        tail = tails[key]
        if len(tail) < 12 or tail[-4:] != b"PAR1":
            problems.append(f"{key}: not a Parquet file")
            continue
        footer = int.from_bytes(tail[-8:-4], "little")
        if footer + 8 > len(tail):
            problems.append(f"{key}: Parquet footer too large to check")
            continue
        try:
            file_schema = pq.read_schema(pa.BufferReader(b"PAR1" + tail[-(footer + 8) :]))
        except (pa.ArrowException, OSError, ValueError) as err:
            problems.append(f"{key}: unreadable Parquet footer ({err})")
            continue
        for col in stored:
            if col not in file_schema.names:
                problems.append(f"{key}: column {col!r} is missing")
                continue
            why = _delta_type_matches(columns[col], file_schema.field(col).type)
            if why:
                problems.append(f"{key}: column {col!r}: {why}")
    return problems


# -- restore --------------------------------------------------------------------------------


def _target_version(
    m: _Manifest, version: int | None, as_of: datetime | int | float | str | None
) -> int:
    if version is not None and as_of is not None:
        raise InvalidOperation("give version or as_of, not both")
    if as_of is not None:
        when = _as_of_ms(as_of)
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


def _as_of_ms(value: datetime | int | float | str) -> int:
    if isinstance(value, datetime):
        when = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(when.timestamp() * 1000)
    if isinstance(value, bool):
        raise VersionError("as_of must be a datetime, epoch milliseconds or an ISO string")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as err:
            raise VersionError(f"as_of: not an ISO timestamp: {value!r}") from err
        return _as_of_ms(parsed)
    raise VersionError(
        f"as_of must be a datetime, epoch milliseconds or an ISO string, not {type(value).__name__}"
    )


def check_backup_credentials(
    path: str | os.PathLike[str],
    credentials: Any,
    permission: Permission = "read",
    *,
    storage_options: Mapping[str, str] | None = None,
) -> str | None:
    """Authenticate ``credentials`` against the users stored in a backup.

    Returns the user name, or None for a backup of a table without users (credentials
    are then not needed and ignored, as when opening such a table).

    Raises:
        NotFound: no backup at ``path``. AuthenticationError: missing or wrong
            credentials. PermissionDenied: the user lacks ``permission``.
    """
    uri = normalize_uri(path)
    top = _open_backup(uri, storage_options)
    if not top.manifest.auth:
        return None
    return _check_restore_credentials(top, _chain(top, storage_options), credentials, permission)


def _check_restore_credentials(
    top: _Backup,
    chain: Mapping[str, _Backup],
    credentials: Any,
    permission: Permission = "restore",
) -> str | None:
    from posixlake import security

    m = top.manifest
    if not m.auth:
        return None
    users = sorted(
        (int(mm.group(1)), f)
        for f in m.files.values()
        if (mm := _USERS_FILE.match(f.path)) is not None
    )
    if not users and _original.USERS_FILE in m.files:
        return _check_original_credentials(top, chain, credentials)
    if not users:
        raise BackupCorrupted(
            f"{top.uri}: a backup of an auth-enabled table without its user database"
        )
    version, f = users[-1]
    holder = chain[f.backup_id]
    data = b"".join(
        _hashed(
            holder.store.read_chunks(f"{FILES_DIR}/{f.path}"),
            expect_sha=f.sha256,
            expect_size=f.size,
            where=holder.file_uri(f.path),
            meter=None,
        )
    )
    db = security.UserDb.parse(data, version=version)
    name = security.check_credentials(db, credentials)
    if permission not in db.permissions(name):
        raise PermissionDenied(f"{permission}: user {name!r} lacks the {permission!r} permission")
    return name


def _check_original_credentials(
    top: _Backup, chain: Mapping[str, _Backup], credentials: Any
) -> str:
    """Check credentials against the original posixlake's users held in a backup."""
    from posixlake import security

    f = top.manifest.files[_original.USERS_FILE]
    holder = chain[f.backup_id]
    data = b"".join(
        _hashed(
            holder.store.read_chunks(f"{FILES_DIR}/{f.path}"),
            expect_sha=f.sha256,
            expect_size=f.size,
            where=holder.file_uri(f.path),
            meter=None,
        )
    )
    users = _original.parse_users(data, holder.file_uri(f.path))
    db = security.UserDb(0, {n: _original.user_record(u) for n, u in users.items()})
    name = security.check_credentials(db, credentials)
    if "restore" not in users[name].permissions:
        raise PermissionDenied(f"restore: user {name!r} lacks the 'restore' permission")
    return name


def _original_backup(uri: str, options: Mapping[str, str] | None) -> ObjectStore | None:
    """Return the store of ``uri`` if it holds a backup made by the original posixlake."""
    store = open_store(uri, options)
    if store.exists(MANIFEST_NAME) or not _original.is_original_backup(store):
        return None
    return store


#: written first and deleted last by a restore into an object store (no atomic rename)
RESTORE_MARKER: Final = "_posixlake/restore-in-progress"


def restore_in_progress(uri: str, storage_options: Mapping[str, str] | None = None) -> bool:
    """Return whether ``uri`` holds a restore that has not finished (or was killed).

    Local restores build beside the destination and never leave one; object-store
    restores mark the destination until the last file is in place.
    """
    if is_local(uri):
        return False
    return open_store(uri, storage_options).exists(RESTORE_MARKER)


_STAGING_NAME: Final = re.compile(r"\.(restore|old)-([0-9a-f]{12})$")


def _lock_is_free(lock_path: str) -> bool:
    """Return True when no live process holds the lock file (or it is gone)."""
    import fcntl

    try:
        fd = os.open(lock_path, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops the lock we may have taken
    return True


def clean_restore_leftovers(dest: str) -> list[str]:
    """Remove what killed local restores into ``dest`` left beside it; return the paths.

    A build (``<dest>.restore-<id>``) whose lock no live process holds is deleted. A
    moved-away old table (``<dest>.old-<id>``, a restore killed between its two renames)
    is moved back when ``dest`` is missing, else deleted.
    """
    parent, base = os.path.split(os.path.abspath(dest))
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return []
    removed: list[str] = []
    for name in sorted(names):
        if not name.startswith(base + "."):
            continue
        m = _STAGING_NAME.search(name)
        if m is None or name[: m.start()] != base:
            continue
        path = os.path.join(parent, name)
        lock = os.path.join(parent, f"{base}.restore-{m.group(2)}.lock")
        if not _lock_is_free(lock):
            continue  # a restore that is running
        if m.group(1) == "old" and not os.path.exists(dest):
            os.rename(path, dest)
            logger.warning("restore: put back %s, left aside by a killed restore", dest)
        else:
            shutil.rmtree(path, ignore_errors=True)
            logger.warning("restore: removed %s, left by a killed restore", path)
        removed.append(path)
    for name in sorted(names):  # locks without a build
        m = re.fullmatch(re.escape(base) + r"\.restore-([0-9a-f]{12})\.lock", name)
        if m and not os.path.exists(os.path.join(parent, f"{base}.restore-{m.group(1)}")):
            lock = os.path.join(parent, name)
            if _lock_is_free(lock):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
    return removed


@dataclass
class _Staging:
    """A local restore built beside its destination, locked while this process runs."""

    dest: str
    build: str
    lock_path: str
    lock_fd: int

    @classmethod
    def begin(cls, dest: str) -> _Staging:
        import fcntl

        dest = os.path.abspath(dest)
        token = uuid.uuid4().hex[:12]
        parent = os.path.dirname(dest)
        os.makedirs(parent, exist_ok=True)
        lock_path = f"{dest}.restore-{token}.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        build = f"{dest}.restore-{token}"
        os.mkdir(build, 0o755)
        return cls(dest, build, lock_path, fd)

    def publish(self) -> None:
        """Move the finished build into place (replacing what ``dest`` held), durably."""
        parent = os.path.dirname(self.dest)
        token = self.build.rsplit("-", 1)[1]
        trash: str | None = None
        if os.path.lexists(self.dest):
            if os.path.isdir(self.dest) and not os.listdir(self.dest):
                os.rmdir(self.dest)
            else:
                trash = f"{self.dest}.old-{token}"
                os.rename(self.dest, trash)
        os.rename(self.build, self.dest)
        _fsync_dir(parent)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        self._unlock()

    def abandon(self) -> None:
        shutil.rmtree(self.build, ignore_errors=True)
        self._unlock()

    def _unlock(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock_path)
        os.close(self.lock_fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    from posixlake.delta import DeltaLog

    backup_uri = normalize_uri(backup)
    dest_uri = normalize_uri(dest)
    b_opts = backup_storage_options if backup_storage_options is not None else storage_options
    original = _original_backup(backup_uri, b_opts)
    if original is not None:
        return _original.restore_backup(
            backup_uri,
            original,
            dest_uri,
            version=version,
            as_of=as_of,
            overwrite=overwrite,
            credentials=credentials,
            storage_options=storage_options,
            progress=progress,
            workers=workers,
        )
    top = _open_backup(backup_uri, b_opts)
    chain = _chain(top, b_opts)
    m = top.manifest
    target = _target_version(m, version, as_of)
    user = _check_restore_credentials(top, chain, credentials)
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
    staging: _Staging | None = None
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
        staging = _Staging.begin(dest_uri)
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
        out.write_bytes(RESTORE_MARKER, json.dumps({"backup": _public_uri(backup_uri)}).encode())
    created_dir = False
    meter = _Meter(sum(f.size for f in selected), progress)

    def copy_one(f: BackupFile) -> None:
        holder = chain[f.backup_id]
        where = holder.file_uri(f.path)
        try:
            out.write_chunks(
                f.path,
                _hashed(
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
        _parallel_map(copy_one, body, workers)
        _parallel_map(copy_one, log_files, workers)
        if isinstance(out, LocalStore):
            for f in log_files:
                if f.modified is not None:
                    os.utime(out.path(f.path), (f.modified, f.modified))
        restored = DeltaLog.open(build_uri, storage_options)
        if restored.version != target:
            raise DeltaLakeError(
                f"restore: the rebuilt table opens at version {restored.version}, not {target}"
            )
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
            target=_public_uri(dest_uri),
            detail={"backup_id": m.backup_id, "backup": _public_uri(backup_uri), "version": target},
        )
    return RestoreResult(dest_uri, target, m.backup_id, len(selected), meter.done)
