"""The manifest of a backup (``posixlake-backup.json``): every file with its size and SHA-256."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from posixlake.backup.results import BackupMetadata
from posixlake.errors import InvalidOperation, StorageError
from posixlake.storage import check_key

__all__ = [
    "FILES_DIR",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "BackupCorrupted",
    "BackupFile",
    "FileKind",
    "Manifest",
    "metadata_of",
    "public_uri",
]


MANIFEST_NAME: Final = "posixlake-backup.json"
FILES_DIR: Final = "files"
FORMAT: Final = "posixlake-backup"
FORMAT_VERSION: Final = 1

FileKind = Literal["log", "data", "cdc", "meta"]


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
        """Return the manifest entry of this file."""
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
        """Return the file of a manifest entry.

        Raises:
            ValueError, KeyError, InvalidOperation: a malformed entry or an unsafe path.
        """
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


@dataclass
class Manifest:
    """The decoded manifest of one backup."""

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
        """Return the manifest document (without its checksum)."""
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
        """Return the manifest file: the document and its checksum."""
        doc = self.to_json()
        doc["checksum"] = _checksum(doc)
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> Manifest:
        """Return the manifest in ``data`` (read from ``where``).

        Raises:
            BackupCorrupted: not JSON, not a manifest, a failed checksum, a malformed entry.
            InvalidOperation: made by a newer posixlake.
        """
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


def public_uri(uri: str) -> str:
    """Drop any user info (``scheme://user:secret@host``) from a URI."""
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        head, sep, tail = rest.partition("/")
        if "@" in head and ":" in head.split("@", 1)[0]:
            head = head.split("@", 1)[1]
        return f"{scheme}://{head}{sep}{tail}"
    return uri


def metadata_of(uri: str, m: Manifest) -> BackupMetadata:
    """Return what the backup at ``uri`` with manifest ``m`` holds."""
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
