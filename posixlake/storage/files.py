"""Byte-level file access over local paths and object-store URIs.

The security and backup code reads and writes plain files (``_posixlake/`` users and
audit events, backup copies and manifests) next to a Delta table. They do it through an
:class:`ObjectStore` bound to a root URI and addressed by ``/``-separated keys, so the
same code runs on local disk, S3 and Azure Blob Storage.

Built in: local paths (and ``file://``), ``s3://`` / ``s3a://`` (boto3) and ``az://``,
``azure://``, ``abfs[s]://`` (azure-storage-blob), with clients, credentials and error
translation from the backend modules (:mod:`posixlake.storage.s3`, :mod:`posixlake.storage.azure`). Other schemes plug in with
:func:`register_scheme`.

Every store offers the one primitive that concurrent writers need: an atomic
*create-if-absent* write (:meth:`ObjectStore.write_bytes` with ``if_absent=True``):
local disk through ``link(2)`` of a complete temporary file, S3 through
``If-None-Match: *``, Azure through ``overwrite=False``.

"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from posixlake.errors import InvalidOperation

__all__ = [
    "CHUNK_SIZE",
    "TEMP_MARK",
    "ChunkReader",
    "FileEntry",
    "ObjectStore",
    "PrefixedStore",
    "StoreFactory",
    "check_key",
    "join_uri",
]


CHUNK_SIZE: Final = 4 * 1024 * 1024
"""Bytes per read when streaming a file."""

TEMP_MARK: Final = ".posixlake-tmp-"
"""Part of the name of every temporary file this module writes (listings may skip them)."""

_BAD_KEY: Final = re.compile(r"(^|/)\.\.?(/|$)|//|^/|\x00")


@dataclass(frozen=True)
class FileEntry:
    """One file (object) found by :meth:`ObjectStore.list`."""

    key: str
    """Path relative to the store root, ``/``-separated."""
    size: int
    """Size in bytes."""
    modified: float | None = None
    """Last modification, seconds since the epoch (when the store reports it)."""


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe relative key.

    A key must be non-empty, relative, ``/``-separated and free of ``.``/``..`` segments,
    empty segments and NUL bytes, so that a key read from a manifest or a listing can
    never address a file outside the store root.

    Raises:
        InvalidOperation: an unsafe key.
    """
    if not isinstance(key, str) or not key or _BAD_KEY.search(key) or key.endswith("/"):
        raise InvalidOperation(f"unsafe or invalid file key {key!r}")
    return key


def join_uri(base: str, *parts: str) -> str:
    """Join ``/``-separated parts onto a local path or URI."""
    out = base.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            out = f"{out}/{part}"
    return out


class ObjectStore(Protocol):
    """Files under one root (a directory, a bucket prefix, a container prefix).

    Keys are ``/``-separated paths relative to the root and are checked with
    :func:`check_key`. Errors: :class:`NotFound` for a missing file,
    :class:`AlreadyExists` for a failed create-if-absent, :class:`NetworkError` for an
    unreachable endpoint, :class:`StorageError` or :class:`IoError` for anything else.
    Implementations are thread-safe.
    """

    @property
    def uri(self) -> str:
        """The root, as a local path or URI."""
        ...

    def read_bytes(self, key: str) -> bytes:
        """Return the whole content of ``key`` (one GET)."""
        ...

    def read_chunks(self, key: str, *, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the content of ``key`` in chunks of at most ``chunk_size`` bytes.

        Raises NotFound on the first ``next()`` when ``key`` does not exist.
        """
        ...

    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Write ``data`` to ``key`` atomically (readers see all of it or nothing).

        Args:
            key: where.
            data: the content.
            if_absent: fail with AlreadyExists when ``key`` exists (atomic check-and-create).
        """
        ...

    def write_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        """Write the concatenation of ``chunks`` to ``key``; return the bytes written.

        The file appears only once complete (local: a rename; object stores: the upload
        completes). An exception raised by ``chunks`` aborts the write and propagates.
        """
        ...

    def exists(self, key: str) -> bool:
        """Return whether ``key`` is a file (one HEAD / stat)."""
        ...

    def has_any(self, prefix: str = "") -> bool:
        """Return whether at least one file lies under ``prefix`` (a cheap, limited listing)."""
        ...

    def list(self, prefix: str = "") -> Iterator[FileEntry]:
        """Yield every file under ``prefix`` (recursively), in no particular order."""
        ...

    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing file is not an error."""
        ...

    def delete_prefix(self, prefix: str = "") -> int:
        """Delete every file under ``prefix``; return how many."""
        ...


StoreFactory = Callable[[str, Mapping[str, str] | None], ObjectStore]
"""Builds a store from a root URI and delta-rs style storage options."""

# -- shared by the bucket and container stores -----------------------------------------


class ChunkReader(io.RawIOBase):
    """A readable file object over an iterable of byte chunks (for SDK uploads)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._buf = b""
        self.total = 0

    def readable(self) -> bool:
        """Return True: the reader is readable."""
        return True

    def readinto(self, b: Any) -> int:
        """Fill ``b`` from the chunks; return the bytes copied (0 at the end)."""
        view = memoryview(b).cast("B")
        while not self._buf:
            nxt = next(self._it, None)
            if nxt is None:
                return 0
            self._buf = bytes(nxt)
        n = min(len(view), len(self._buf))
        view[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        self.total += n
        return n


class PrefixedStore:
    """Shared key handling of bucket/container stores."""

    _prefix: str
    _uri: str

    @property
    def uri(self) -> str:
        """The root URI."""
        return self._uri

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self._prefix}/{key}" if self._prefix else key

    def _list_prefix(self, prefix: str) -> str:
        if prefix:
            check_key(prefix)
        parts = [p for p in (self._prefix, prefix) if p]
        return "/".join(parts) + "/" if parts else ""

    def _strip(self, full: str) -> str:
        return full[len(self._prefix) + 1 :] if self._prefix else full

    def has_any(self, prefix: str = "") -> bool:
        """Return whether an object lies under ``prefix``."""
        return next(iter(self.list(prefix)), None) is not None

    def list(self, prefix: str = "") -> Iterator[FileEntry]:
        """Yield the objects under ``prefix`` (each store implements it)."""
        raise NotImplementedError
