"""Which posixlake user an NFS caller acts as, and that user's roles on the table's files.

`UserMap` + `TableAccessVfs`: map the AUTH_SYS uid (after `nfs.protocol.identity`'s
root squash) to a posixlake user (``--map-uid 1000=ana``; ``*=name`` for any other
uid), and check that user's roles on the table's own files: reading ``data.csv``, a
version or a change file (``changes.csv``) needs "read"; changing ``data.csv`` (WRITE, a truncation, a RENAME onto it,
REMOVE) needs "write" ("write" and "delete" to remove or truncate it). The change
itself is still committed by the serving user, so a mapped user can never do more
than the serving user. Without a map every caller acts as the serving user.

See docs/nfs-security.md for the threat model. Sans-IO: no sockets, no clock besides
the injected one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from nfs.protocol.nfs3 import Fattr3, Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import (
    ACCESS3_DELETE,
    ACCESS3_EXTEND,
    ACCESS3_MODIFY,
    ACCESS3_READ,
    DirPage,
    EditBounds,
    FileId,
    FsStat,
    NfsError,
    Vfs,
    VfsCapabilities,
)
from nfs.table.partitions import PARTITION_BASE, is_partition_file

__all__ = ["TableAccessVfs", "TableEntries", "UserMap", "UserPermissions"]


@dataclass(frozen=True)
class UserMap:
    """Which posixlake user an AUTH_SYS uid acts as.

    Attributes:
        users: uid -> posixlake user name.
        default: the user of any other uid (``*=name``); None: no user (no access
            to the table's files).
    """

    users: Mapping[int, str] = field(default_factory=dict)
    default: str | None = None

    @classmethod
    def parse(cls, specs: Iterable[str]) -> UserMap:
        """Build a map from ``UID=USER`` items (``*=USER`` for every other uid).

        Raises:
            ValueError: a malformed item, a uid outside 0..2**32-1, a uid given twice.
        """
        users: dict[int, str] = {}
        default: str | None = None
        for spec in specs:
            uid_text, sep, user = spec.partition("=")
            uid_text, user = uid_text.strip(), user.strip()
            if not sep or not user:
                raise ValueError(f"{spec!r}: expected UID=USER (e.g. 1000=ana, or *=guest)")
            if uid_text == "*":
                if default is not None:
                    raise ValueError(f"{spec!r}: * is mapped twice")
                default = user
                continue
            if not uid_text.isdigit() or int(uid_text) >= 1 << 32:
                raise ValueError(f"{spec!r}: the uid must be a number from 0 to 4294967295")
            if int(uid_text) in users:
                raise ValueError(f"{spec!r}: uid {uid_text} is mapped twice")
            users[int(uid_text)] = user
        return cls(users, default)

    def user_for(self, uid: int) -> str | None:
        """Return the posixlake user of `uid` (None: unmapped)."""
        return self.users.get(uid, self.default)

    def names(self) -> set[str]:
        """Return every user name the map mentions."""
        return set(self.users.values()) | ({self.default} if self.default else set())


class UserPermissions:
    """The permissions of each posixlake user, re-read at most every `refresh_seconds`.

    Args:
        load: returns {user: permissions} (e.g. from ``authorizer.list_users()``).
        refresh_seconds: how long a loaded table of users is trusted (role changes
            and deletions are seen after at most this long).
        clock: monotonic seconds (injected in tests).
    """

    def __init__(
        self,
        load: Callable[[], Mapping[str, frozenset[str]]],
        *,
        refresh_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._refresh = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._users: Mapping[str, frozenset[str]] = load()
        self._loaded_at = clock()

    def of(self, user: str) -> frozenset[str]:
        """Return `user`'s permissions (empty for an unknown or deleted user)."""
        with self._lock:
            if self._clock() - self._loaded_at >= self._refresh:
                self._users = self._load()
                self._loaded_at = self._clock()
            return self._users.get(user, frozenset())


@dataclass(frozen=True)
class TableEntries:
    """Where a table's own files are in a Vfs (for `TableAccessVfs`).

    Attributes:
        data_dir: the directory holding the table file.
        data_name: the table file's name in `data_dir`.
        data_file: the table file's id.
        read_only_files: ids of other files whose content is table data (versions, change
            files).
    """

    data_dir: FileId
    data_name: str
    data_file: FileId
    read_only_files: Callable[[FileId], bool]


_TABLE_WRITE: Final = ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE


class TableAccessVfs:
    """A `Vfs` that checks each caller's posixlake roles on the table's own files.

    Args:
        inner: the table's Vfs (``nfs.table.tablefs.TableFs``).
        entries: where the table's files are.
        user_map: uid -> posixlake user.
        permissions: the permissions of a posixlake user.

    Other files (the scratch area) are left to `inner` (POSIX mode bits).

    Attributes:
        write_verifier: the inner Vfs's ``write_verifier``, when it has one.
        finish: the inner Vfs's `nfs.protocol.vfs.EditBounds` ``finish``, when it has one.
        discard: likewise ``discard``.
        state_dir: the inner Vfs's ``state_dir`` (None if it has none).
    """

    write_verifier: Callable[[], bytes]
    finish: Callable[[FileId, CallContext], object]
    discard: Callable[[FileId, CallContext], bool]
    state_dir: object

    def __init__(
        self,
        inner: Vfs,
        entries: TableEntries,
        user_map: UserMap,
        permissions: Callable[[str], frozenset[str]],
    ) -> None:
        self.inner = inner
        own_verifier = getattr(inner, "write_verifier", None)
        if callable(own_verifier):  # the inner Vfs's WRITE/COMMIT verifier (see nfs.protocol.vfs)
            self.write_verifier = own_verifier
        if isinstance(inner, EditBounds):  # NFSv4 CLOSE / lease expiry (see nfs.protocol.vfs)
            self.finish = inner.finish
            self.discard = inner.discard
        self.state_dir = getattr(inner, "state_dir", None)  # NFSv4 client records
        self._entries = entries
        self._map = user_map
        self._permissions = permissions

    # ------------------------------------------------------------ checks

    def _granted(self, ctx: CallContext) -> frozenset[str]:
        user = self._map.user_for(ctx.cred.uid)
        return frozenset() if user is None else self._permissions(user)

    def _require(self, ctx: CallContext, *needed: str) -> None:
        granted = self._granted(ctx)
        missing = [p for p in needed if p not in granted]
        if missing:
            user = self._map.user_for(ctx.cred.uid)
            who = f"user {user!r}" if user else "an unmapped uid"
            raise NfsError(
                Nfsstat3.NFS3ERR_ACCES,
                f"uid {ctx.cred.uid} ({who}) lacks {', '.join(missing)} on the table",
            )

    def _is_data(self, dir_id: FileId, name: str) -> bool:
        if dir_id >= PARTITION_BASE and name == self._entries.data_name:
            return True  # a partition's data.csv: that partition's rows
        return dir_id == self._entries.data_dir and name == self._entries.data_name

    def _is_data_file(self, fid: FileId) -> bool:
        return fid == self._entries.data_file or is_partition_file(fid)

    def _is_table_content(self, fid: FileId) -> bool:
        # a partition's data.csv (nfs.table.partitions) holds rows whatever `entries` says
        return (
            fid == self._entries.data_file
            or self._entries.read_only_files(fid)
            or is_partition_file(fid)
        )

    # ------------------------------------------------------------ Vfs

    def capabilities(self) -> VfsCapabilities:
        """See `Vfs.capabilities`."""
        return self.inner.capabilities()

    def root_dir(self) -> FileId:
        """See `Vfs.root_dir`."""
        return self.inner.root_dir()

    def generation(self, fid: FileId) -> bytes:
        """See `Vfs.generation`."""
        return self.inner.generation(fid)

    def getattr(self, fid: FileId) -> Fattr3:
        """See `Vfs.getattr`."""
        return self.inner.getattr(fid)

    def setattr(self, fid: FileId, attrs: Sattr3, ctx: CallContext) -> Fattr3:
        """See `Vfs.setattr`; a size on the table file needs "write" and "delete"."""
        if self._is_data_file(fid) and attrs.size is not None:
            self._require(ctx, "write", "delete")
        return self.inner.setattr(fid, attrs, ctx)

    def lookup(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId:
        """See `Vfs.lookup`."""
        return self.inner.lookup(dir_id, name, ctx)

    def access(self, fid: FileId, mask: int, ctx: CallContext) -> int:
        """See `Vfs.access`; the table's files also by the caller's roles."""
        granted = self.inner.access(fid, mask, ctx)
        if self._is_table_content(fid):
            roles = self._granted(ctx)
            if "read" not in roles:
                granted &= ~ACCESS3_READ
            if "write" not in roles:
                granted &= ~_TABLE_WRITE
        return granted

    def read(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview, bool]:
        """See `Vfs.read`; the table's files need "read"."""
        if self._is_table_content(fid):
            self._require(ctx, "read")
        return self.inner.read(fid, offset, count, ctx)

    def write(
        self, fid: FileId, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow]:
        """See `Vfs.write`; the table file (and a partition's) needs "write"."""
        if self._is_data_file(fid):
            self._require(ctx, "write")
        return self.inner.write(fid, offset, data, stable, ctx)

    def commit(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> None:
        """See `Vfs.commit`; the table file (and a partition's) needs "write"."""
        if self._is_data_file(fid):
            self._require(ctx, "write")
        self.inner.commit(fid, offset, count, ctx)

    def create(
        self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext, *, guarded: bool
    ) -> FileId:
        """See `Vfs.create`; opening the table file with a size needs "write" and "delete"."""
        if self._is_data(dir_id, name) and attrs.size is not None:
            self._require(ctx, "write", "delete")
        return self.inner.create(dir_id, name, attrs, ctx, guarded=guarded)

    def create_exclusive(
        self, dir_id: FileId, name: str, verifier: bytes, ctx: CallContext
    ) -> FileId:
        """See `Vfs.create_exclusive`."""
        return self.inner.create_exclusive(dir_id, name, verifier, ctx)

    def mkdir(self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext) -> FileId:
        """See `Vfs.mkdir`."""
        return self.inner.mkdir(dir_id, name, attrs, ctx)

    def remove(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """See `Vfs.remove`; removing the table file (all rows) needs "write" and "delete"."""
        if self._is_data(dir_id, name):
            self._require(ctx, "write", "delete")
        self.inner.remove(dir_id, name, ctx)

    def rmdir(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """See `Vfs.rmdir`."""
        self.inner.rmdir(dir_id, name, ctx)

    def rename(
        self,
        from_dir: FileId,
        from_name: str,
        to_dir: FileId,
        to_name: str,
        ctx: CallContext,
    ) -> None:
        """See `Vfs.rename`; onto the table file (an overwrite) needs "write" and "delete"."""
        if self._is_data(to_dir, to_name) or self._is_data(from_dir, from_name):
            self._require(ctx, "write", "delete")
        self.inner.rename(from_dir, from_name, to_dir, to_name, ctx)

    def readdir(self, dir_id: FileId, *, after: int, max_entries: int, ctx: CallContext) -> DirPage:
        """See `Vfs.readdir`."""
        return self.inner.readdir(dir_id, after=after, max_entries=max_entries, ctx=ctx)

    def fsstat(self, fid: FileId) -> FsStat:
        """See `Vfs.fsstat`."""
        return self.inner.fsstat(fid)

    def close(self) -> None:
        """Close (or flush) the inner Vfs, as `nfs.protocol.server.NfsServer` does at shutdown."""
        for name in ("close", "flush"):
            hook = getattr(self.inner, name, None)
            if callable(hook):
                hook()
                return
