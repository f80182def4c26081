"""Byte-level file access over local paths and object-store URIs.

The security and backup code reads and writes plain files (``_posixlake/`` users and
audit events, backup copies and manifests) next to a Delta table. They do it through an
:class:`ObjectStore` bound to a root URI and addressed by ``/``-separated keys, so the
same code runs on local disk, S3 and Azure Blob Storage.

Built in: local paths (and ``file://``), ``s3://`` / ``s3a://`` (boto3) and ``az://``,
``azure://``, ``abfs[s]://`` (azure-storage-blob), with clients, credentials and error
translation from :mod:`posixlake.storage`. Other schemes plug in with
:func:`register_scheme`.

Every store offers the one primitive that concurrent writers need: an atomic
*create-if-absent* write (:meth:`ObjectStore.write_bytes` with ``if_absent=True``):
local disk through ``link(2)`` of a complete temporary file, S3 through
``If-None-Match: *``, Azure through ``overwrite=False``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from posixlake.errors import (
    AlreadyExists,
    InvalidOperation,
    IoError,
    NotFound,
    StorageError,
)
from posixlake.storage import is_local, normalize_uri

__all__ = [
    "CHUNK_SIZE",
    "TEMP_MARK",
    "AzureStore",
    "FileEntry",
    "LocalStore",
    "ObjectStore",
    "S3Store",
    "StoreFactory",
    "check_key",
    "join_uri",
    "open_store",
    "register_scheme",
]

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

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

_FACTORIES: dict[str, StoreFactory] = {}


def register_scheme(scheme: str, factory: StoreFactory) -> None:
    """Make :func:`open_store` use ``factory`` for ``scheme://`` URIs (replacing any)."""
    _FACTORIES[scheme.lower()] = factory


def open_store(uri: str, storage_options: Mapping[str, str] | None = None) -> ObjectStore:
    """Return the store rooted at ``uri`` (a local path or an object-store URI).

    Args:
        uri: a local path, ``file://``, ``s3://``, ``s3a://``, ``az://``, ``azure://`` or
            ``abfs[s]://`` URI.
        storage_options: delta-rs style options (credentials, endpoint), as
            :func:`posixlake.storage.storage_options_for` returns them.

    Raises:
        StorageError: no store is known for the URI's scheme.
    """
    if is_local(uri):
        return LocalStore(normalize_uri(uri))
    scheme = uri.split("://", 1)[0].lower()
    factory = _FACTORIES.get(scheme)
    if factory is None:
        raise StorageError(f"no file access for {scheme}:// URIs ({uri})")
    return factory(uri, storage_options)


# -- local disk ------------------------------------------------------------------------


def _os_error(err: OSError, what: str) -> Exception:
    if isinstance(err, FileNotFoundError | NotADirectoryError):
        return NotFound(f"{what}: no such file")
    if isinstance(err, FileExistsError):
        return AlreadyExists(f"{what}: already exists")
    if isinstance(err, PermissionError):
        return StorageError(f"{what}: permission denied")
    return IoError(f"{what}: {err.strerror or err}")


#: files in folders of this name (users, audit events, keys) are created 0600 and the
#: folders 0700 on local storage
PRIVATE_DIR: Final = "_posixlake"


class LocalStore:
    """Files under a local directory."""

    def __init__(self, root: str, *, durable: bool = True) -> None:
        """Root the store at ``root``.

        Args:
            root: an absolute directory path (need not exist yet).
            durable: fsync each written file and its directory before reporting success.
        """
        self._root = os.path.abspath(root)
        self._durable = durable

    @property
    def uri(self) -> str:
        """The root directory."""
        return self._root

    def path(self, key: str) -> str:
        """Return the local path of ``key``."""
        return os.path.join(self._root, *check_key(key).split("/"))

    def read_bytes(self, key: str) -> bytes:
        """Return the content of ``key``."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                return f.read()
        except IsADirectoryError as err:
            raise NotFound(f"read {path}: a directory, not a file") from err
        except OSError as err:
            raise _os_error(err, f"read {path}") from err

    def read_chunks(self, key: str, *, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the content of ``key`` in chunks."""
        path = self.path(key)
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in finally
        except IsADirectoryError as err:
            raise NotFound(f"read {path}: a directory, not a file") from err
        except OSError as err:
            raise _os_error(err, f"read {path}") from err
        try:
            while True:
                try:
                    block = f.read(chunk_size)
                except OSError as err:
                    raise _os_error(err, f"read {path}") from err
                if not block:
                    return
                yield block
        finally:
            f.close()

    def _temp_for(self, path: str) -> str:
        head, tail = os.path.split(path)
        return os.path.join(head, f".{tail}{TEMP_MARK}{uuid.uuid4().hex}")

    def _sync_dir(self, path: str) -> None:
        if not self._durable:
            return
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError as err:
            if err.errno not in (errno.EINVAL, errno.EBADF):
                raise
        finally:
            os.close(fd)

    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Write ``data`` atomically (temporary file, fsync, then link or rename)."""
        path = self.path(key)
        self._write(path, (data,), if_absent=if_absent)

    def write_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        """Stream ``chunks`` into ``key`` (temporary file, then rename)."""
        return self._write(self.path(key), chunks, if_absent=False)

    def _private(self, path: str) -> bool:
        """Return whether ``path`` lies in a ``_posixlake/`` folder (users, audit, keys)."""
        rel = os.path.relpath(path, self._root)
        return PRIVATE_DIR in rel.split(os.sep)[:-1]

    def _makedirs(self, directory: str, *, private: bool) -> None:
        if not private:
            os.makedirs(directory, exist_ok=True)
            return
        # the folders from _posixlake down are 0700 (made one by one: makedirs' mode
        # applies to the last one only, and the umask may widen nothing but narrows)
        parts = os.path.relpath(directory, self._root).split(os.sep)
        at = parts.index(PRIVATE_DIR)
        os.makedirs(os.path.join(self._root, *parts[:at]) if at else self._root, exist_ok=True)
        current = os.path.join(self._root, *parts[:at])
        for part in parts[at:]:
            current = os.path.join(current, part)
            with contextlib.suppress(FileExistsError):
                os.mkdir(current, 0o700)

    def _write(self, path: str, chunks: Iterable[bytes], *, if_absent: bool) -> int:
        directory = os.path.dirname(path)
        tmp = self._temp_for(path)
        written = 0
        private = self._private(path)
        try:
            self._makedirs(directory, private=private)
            mode = 0o600 if private else 0o666
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            with open(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                    written += len(chunk)
                if self._durable:
                    f.flush()
                    os.fsync(f.fileno())
            if if_absent:
                os.link(tmp, path)
                os.unlink(tmp)
            else:
                os.replace(tmp, path)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise _os_error(err, f"write {path}") from err
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._sync_dir(directory)
        return written

    def exists(self, key: str) -> bool:
        """Return whether ``key`` is a file."""
        return os.path.isfile(self.path(key))

    def has_any(self, prefix: str = "") -> bool:
        """Return whether a file lies under ``prefix``."""
        return next(iter(self.list(prefix)), None) is not None

    def list(self, prefix: str = "") -> Iterator[FileEntry]:
        """Yield the files under ``prefix``."""
        base = self.path(prefix) if prefix else self._root
        if os.path.isfile(base):
            st = os.stat(base)
            yield FileEntry(prefix, st.st_size, st.st_mtime)
            return
        stack = [base]
        while stack:
            current = stack.pop()
            try:
                with os.scandir(current) as it:
                    entries = list(it)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as err:
                raise _os_error(err, f"list {current}") from err
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        rel = os.path.relpath(entry.path, self._root).replace(os.sep, "/")
                        st = entry.stat(follow_symlinks=False)
                        yield FileEntry(rel, st.st_size, st.st_mtime)
                except FileNotFoundError:
                    continue  # removed while listing

    def delete(self, key: str) -> None:
        """Delete ``key`` if present."""
        path = self.path(key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as err:
            raise _os_error(err, f"delete {path}") from err

    def delete_prefix(self, prefix: str = "") -> int:
        """Delete every file under ``prefix`` (and the emptied directories)."""
        count = 0
        for entry in list(self.list(prefix)):
            self.delete(entry.key)
            count += 1
        base = self.path(prefix) if prefix else self._root
        for current, _dirs, _files in sorted(os.walk(base, topdown=False), reverse=True):
            if current != self._root:
                with contextlib.suppress(OSError):
                    os.rmdir(current)
        return count

    def __repr__(self) -> str:
        return f"LocalStore({self._root!r})"


# -- S3 and Azure ------------------------------------------------------------------------


class _ChunkReader(io.RawIOBase):
    """A readable file object over an iterable of byte chunks (for SDK uploads)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._buf = b""
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
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


class _PrefixedStore:
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


class S3Store(_PrefixedStore):
    """Objects under ``s3://bucket/prefix`` (boto3, configured by :mod:`posixlake.storage`).

    Create-if-absent writes are conditional PUTs (``If-None-Match: *``), which AWS S3,
    MinIO and moto implement.
    """

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        """Root the store at ``uri`` (``s3://bucket[/prefix]`` or ``s3a://...``)."""
        from boto3.s3.transfer import TransferConfig

        from posixlake import storage as st

        loc = st.parse_uri(uri)
        cfg = st.config_for(uri, storage_options)
        if loc is None or not isinstance(cfg, st.S3Config):
            raise InvalidOperation(f"{uri} is not an S3 URI")
        self._uri = uri.rstrip("/")
        self._cfg = cfg
        self._bucket = loc.bucket
        self._prefix = loc.prefix
        self._client: Any = st.s3_client(cfg)
        self._transfer = TransferConfig(
            multipart_threshold=64 * 1024 * 1024,
            multipart_chunksize=16 * 1024 * 1024,
            use_threads=False,
        )

    def _call(self, what: str, key: str, fn: Callable[[], _T]) -> _T:
        from botocore.exceptions import BotoCoreError, ClientError

        from posixlake import storage as st

        where = f"{what} s3://{self._bucket}/{key}"
        try:
            return fn()
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code in ("NoSuchKey", "404", "NotFound") and code != "NoSuchBucket":
                raise NotFound(f"{where}: no such object") from err
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status == 412:
                raise AlreadyExists(f"{where}: already exists") from err
            raise st.s3_error(err, what=where, cfg=self._cfg, bucket=self._bucket) from err
        except BotoCoreError as err:
            raise st.s3_error(err, what=where, cfg=self._cfg, bucket=self._bucket) from err

    def read_bytes(self, key: str) -> bytes:
        """Return the object's content."""
        k = self._key(key)
        return self._call(
            "read",
            k,
            lambda: bytes(self._client.get_object(Bucket=self._bucket, Key=k)["Body"].read()),
        )

    def read_chunks(self, key: str, *, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the object's content in chunks."""
        k = self._key(key)
        body = self._call(
            "read", k, lambda: self._client.get_object(Bucket=self._bucket, Key=k)["Body"]
        )
        try:
            while True:
                block = self._call("read", k, lambda: body.read(chunk_size))
                if not block:
                    return
                yield bytes(block)
        finally:
            body.close()

    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """PUT the object (with ``If-None-Match: *`` when ``if_absent``)."""
        k = self._key(key)
        extra: dict[str, Any] = {"IfNoneMatch": "*"} if if_absent else {}
        self._call(
            "write",
            k,
            lambda: self._client.put_object(Bucket=self._bucket, Key=k, Body=data, **extra),
        )

    def write_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        """Upload ``chunks`` (multipart for large objects)."""
        k = self._key(key)
        reader = _ChunkReader(chunks)
        self._call(
            "write",
            k,
            lambda: self._client.upload_fileobj(
                io.BufferedReader(reader, CHUNK_SIZE), self._bucket, k, Config=self._transfer
            ),
        )
        return reader.total

    def exists(self, key: str) -> bool:
        """HEAD the object."""
        k = self._key(key)
        try:
            self._call("check", k, lambda: self._client.head_object(Bucket=self._bucket, Key=k))
        except NotFound:
            return False
        return True

    def list(self, prefix: str = "") -> Iterator[FileEntry]:
        """Yield the objects under ``prefix``."""
        full = self._list_prefix(prefix)
        kwargs: dict[str, Any] = {"Bucket": self._bucket, "Prefix": full}
        while True:
            page = self._call("list", full, lambda: self._client.list_objects_v2(**kwargs))
            for obj in page.get("Contents", ()):
                key = self._strip(str(obj["Key"]))
                if key and not key.endswith("/"):
                    modified = obj.get("LastModified")
                    yield FileEntry(
                        key, int(obj["Size"]), modified.timestamp() if modified else None
                    )
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def delete(self, key: str) -> None:
        """DELETE the object (a missing object is fine)."""
        k = self._key(key)
        with contextlib.suppress(NotFound):
            self._call("delete", k, lambda: self._client.delete_object(Bucket=self._bucket, Key=k))

    def delete_prefix(self, prefix: str = "") -> int:
        """Delete the objects under ``prefix`` in batches of 1000."""
        keys = [self._key(e.key) for e in self.list(prefix)]
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            self._call(
                "delete",
                self._list_prefix(prefix),
                lambda batch=batch: self._client.delete_objects(  # type: ignore[misc]
                    Bucket=self._bucket, Delete={"Objects": batch, "Quiet": True}
                ),
            )
        return len(keys)

    def same_account(self, other: S3Store) -> bool:
        """Return whether ``other`` reaches the same endpoint with the same credentials."""
        return self._cfg == other._cfg

    def copy_from(self, src: S3Store, src_key: str, dst_key: str) -> int:
        """Copy ``src_key`` of ``src`` to ``dst_key`` server-side; return its size."""
        sk, dk = src._key(src_key), self._key(dst_key)
        head = src._call("check", sk, lambda: src._client.head_object(Bucket=src._bucket, Key=sk))
        self._call(
            "copy",
            dk,
            lambda: self._client.copy(
                {"Bucket": src._bucket, "Key": sk}, self._bucket, dk, Config=self._transfer
            ),
        )
        return int(head["ContentLength"])

    def __repr__(self) -> str:
        return f"S3Store({self._uri!r})"


for _scheme in ("s3", "s3a"):
    register_scheme(_scheme, S3Store)


# -- Azure Blob Storage -------------------------------------------------------------------


class AzureStore(_PrefixedStore):
    """Blobs under ``az://container/prefix`` (also ``azure://``, ``abfs[s]://``), via azure-storage-blob.

    Storage options use delta-rs' names (``azure_storage_account_name``,
    ``azure_storage_account_key``, ``azure_storage_sas_token``, ``azure_storage_endpoint``,
    ...); missing ones come from the environment (see :class:`posixlake.storage.AzureConfig`).
    """

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        """Root the store at ``uri``."""
        from posixlake.storage import AzureConfig, azure_service_client, parse_uri

        loc = parse_uri(uri)
        if loc is None or loc.kind != "azure":
            raise InvalidOperation(f"not an Azure URI: {uri!r}")
        self._uri = uri.rstrip("/")
        self._bucket = loc.bucket
        self._prefix = loc.prefix
        self._config = AzureConfig.from_options(storage_options or {}).for_uri(uri).resolved()
        self._container: Any = azure_service_client(self._config).get_container_client(loc.bucket)

    def _error(self, err: Exception, what: str) -> Exception:
        from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

        from posixlake.storage import azure_error

        raw_code: Any = getattr(err, "error_code", None)
        code = str(getattr(raw_code, "value", raw_code) or "")  # StorageErrorCode is an enum
        if isinstance(err, ResourceNotFoundError) and code != "ContainerNotFound":
            return NotFound(f"{what}: no such blob")
        if isinstance(err, ResourceExistsError) or code in ("BlobAlreadyExists", "ConditionNotMet"):
            return AlreadyExists(f"{what}: already exists")
        return azure_error(err, what=what, cfg=self._config, container=self._bucket)

    def _errors(self) -> tuple[type[Exception], ...]:
        from azure.core.exceptions import AzureError

        return (AzureError,)

    def _where(self, key: str) -> str:
        return f"az://{self._bucket}/{key}"

    def read_bytes(self, key: str) -> bytes:
        """Return the blob's content."""
        k = self._key(key)
        try:
            return bytes(self._container.download_blob(k).readall())
        except self._errors() as err:
            raise self._error(err, f"read {self._where(k)}") from err

    def read_chunks(self, key: str, *, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        """Yield the blob's content in chunks of at most ``chunk_size`` bytes."""
        k = self._key(key)
        what = f"read {self._where(k)}"
        try:
            downloader = self._container.download_blob(k)
            parts = iter(downloader.chunks())
        except self._errors() as err:
            raise self._error(err, what) from err
        while True:
            try:
                part = next(parts, None)
            except self._errors() as err:
                raise self._error(err, what) from err
            if part is None:
                return
            view = bytes(part)
            for start in range(0, len(view), chunk_size):
                yield view[start : start + chunk_size]

    def write_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Upload the blob (``If-None-Match: *`` when ``if_absent``)."""
        k = self._key(key)
        try:
            self._container.upload_blob(k, data, overwrite=not if_absent)
        except self._errors() as err:
            raise self._error(err, f"write {self._where(k)}") from err

    def write_chunks(self, key: str, chunks: Iterable[bytes]) -> int:
        """Upload ``chunks`` as blocks; the blob appears when the block list commits."""
        k = self._key(key)
        total = 0

        def counted() -> Iterator[bytes]:
            nonlocal total
            for chunk in chunks:
                total += len(chunk)
                yield bytes(chunk)

        try:
            self._container.upload_blob(k, counted(), overwrite=True)
        except self._errors() as err:
            raise self._error(err, f"write {self._where(k)}") from err
        return total

    def exists(self, key: str) -> bool:
        """Return whether the blob exists (one HEAD)."""
        k = self._key(key)
        try:
            return bool(self._container.get_blob_client(k).exists())
        except self._errors() as err:
            raise self._error(err, f"check {self._where(k)}") from err

    def has_any(self, prefix: str = "") -> bool:
        """List at most one blob under ``prefix``."""
        full = self._list_prefix(prefix)
        try:
            blobs = self._container.list_blobs(name_starts_with=full, results_per_page=1)
            return next(iter(blobs), None) is not None
        except self._errors() as err:
            raise self._error(err, f"list {self._where(full)}") from err

    def list(self, prefix: str = "") -> Iterator[FileEntry]:
        """Yield the blobs under ``prefix``."""
        full = self._list_prefix(prefix)
        strip = len(self._prefix) + 1 if self._prefix else 0
        what = f"list {self._where(full)}"
        try:
            blobs = iter(self._container.list_blobs(name_starts_with=full))
        except self._errors() as err:
            raise self._error(err, what) from err
        while True:
            try:
                blob = next(blobs, None)
            except self._errors() as err:
                raise self._error(err, what) from err
            if blob is None:
                return
            name = str(blob.name)[strip:]
            if name and not name.endswith("/"):
                modified = blob.last_modified
                yield FileEntry(name, int(blob.size), modified.timestamp() if modified else None)

    def delete(self, key: str) -> None:
        """Delete the blob; a missing blob is not an error."""
        k = self._key(key)
        try:
            self._container.delete_blob(k)
        except self._errors() as err:
            mapped = self._error(err, f"delete {self._where(k)}")
            if not isinstance(mapped, NotFound):
                raise mapped from err

    def delete_prefix(self, prefix: str = "") -> int:
        """Delete the blobs under ``prefix``."""
        keys = [e.key for e in self.list(prefix)]
        for key in keys:
            self.delete(key)
        return len(keys)

    def __repr__(self) -> str:
        return f"AzureStore({self._uri!r})"


for _scheme in ("az", "azure", "abfs", "abfss"):
    register_scheme(_scheme, AzureStore)


def copy_file(src: ObjectStore, src_key: str, dst: ObjectStore, dst_key: str) -> int:
    """Copy one file between stores; return the bytes copied.

    Within one S3 endpoint and account the copy is server-side (``CopyObject``, multipart
    for large objects): the bytes never pass through this process. Anything else streams
    in chunks (:meth:`ObjectStore.read_chunks` into :meth:`ObjectStore.write_chunks`).

    Raises:
        NotFound: ``src_key`` does not exist.
    """
    if isinstance(src, S3Store) and isinstance(dst, S3Store) and src.same_account(dst):
        return dst.copy_from(src, src_key, dst_key)
    return dst.write_chunks(dst_key, src.read_chunks(src_key))
