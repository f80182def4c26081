"""Files under a local directory: atomic writes (temporary file, fsync, link or rename)."""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from collections.abc import Iterable, Iterator
from typing import Final

from posixlake.errors import AlreadyExists, IoError, NotFound, StorageError
from posixlake.storage.files import CHUNK_SIZE, TEMP_MARK, FileEntry, check_key

__all__ = [
    "PRIVATE_DIR",
    "LocalStore",
    "fsync_dir",
]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries durable (fsync of the directory itself).

    File systems that cannot fsync a directory (EINVAL, EBADF) are taken as done.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


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
            fsync_dir(path)
        except FileNotFoundError:
            return

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
