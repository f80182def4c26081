"""Opening a backup and the chain of base backups an incremental one is built on."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

from posixlake.backup import original
from posixlake.backup.manifest import (
    FILES_DIR,
    MANIFEST_NAME,
    BackupCorrupted,
    BackupFile,
    Manifest,
)
from posixlake.backup.transfer import hashed
from posixlake.errors import NotFound, PosixLakeError
from posixlake.storage import ObjectStore, is_local, join_uri, open_store

__all__ = [
    "StoredBackup",
    "backup_chain",
    "open_backup",
    "original_backup_store",
    "relative_location",
]


@dataclass
class StoredBackup:
    """One opened backup: its store, its manifest and the manifest's SHA-256."""

    uri: str
    store: ObjectStore
    manifest: Manifest
    manifest_sha256: str

    def file_uri(self, path: str) -> str:
        """Return the full location of the copy of ``path`` in this backup."""
        return join_uri(self.uri, FILES_DIR, path)

    def read(self, f: BackupFile) -> bytes:
        """Return the bytes of ``f`` (stored here), checked against its size and SHA-256.

        Raises:
            BackupCorrupted: the copy differs. NotFound: it is missing.
        """
        return b"".join(
            hashed(
                self.store.read_chunks(f"{FILES_DIR}/{f.path}"),
                expect_sha=f.sha256,
                expect_size=f.size,
                where=self.file_uri(f.path),
                meter=None,
            )
        )


def open_backup(uri: str, options: Mapping[str, str] | None) -> StoredBackup:
    """Open the backup at ``uri`` and check its manifest.

    Raises:
        NotFound: nothing there. BackupCorrupted: no manifest beside files, or a damaged one.
    """
    store = open_store(uri, options)
    try:
        data = store.read_bytes(MANIFEST_NAME)
    except NotFound as err:
        if store.has_any():
            raise BackupCorrupted(
                f"{uri}: no {MANIFEST_NAME} (an interrupted backup, or not a backup)"
            ) from err
        raise NotFound(f"no backup at {uri}") from err
    manifest = Manifest.decode(data, f"{uri}/{MANIFEST_NAME}")
    return StoredBackup(uri, store, manifest, hashlib.sha256(data).hexdigest())


def _resolve_base(child: StoredBackup, options: Mapping[str, str] | None) -> StoredBackup:
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
            base = open_backup(cand, options)
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


def relative_location(from_uri: str, to_uri: str) -> str | None:
    """Return ``to_uri`` relative to ``from_uri`` (None across schemes, buckets or local/remote)."""
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


def backup_chain(top: StoredBackup, options: Mapping[str, str] | None) -> dict[str, StoredBackup]:
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


def original_backup_store(uri: str, options: Mapping[str, str] | None) -> ObjectStore | None:
    """Return the store of ``uri`` if it holds a backup made by the original posixlake."""
    store = open_store(uri, options)
    if store.exists(MANIFEST_NAME) or not original.is_original_backup(store):
        return None
    return store
