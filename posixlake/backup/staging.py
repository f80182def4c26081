"""Where a restore is built (beside a local destination, or marked in an object store) and how it ends."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from posixlake.errors import DeltaLakeError
from posixlake.storage import LocalStore, ObjectStore, is_local, open_store
from posixlake.storage.local import fsync_dir

__all__ = [
    "RESTORE_MARKER",
    "Staging",
    "clean_restore_leftovers",
    "restore_in_progress",
    "settle_log",
]

logger = logging.getLogger(__name__)

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
class Staging:
    """A local restore built beside its destination, locked while this process runs."""

    dest: str
    build: str
    lock_path: str
    lock_fd: int

    @classmethod
    def begin(cls, dest: str) -> Staging:
        """Lock and create a build folder beside ``dest``."""
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
        fsync_dir(parent)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        self._unlock()

    def abandon(self) -> None:
        """Remove the build and drop the lock."""
        shutil.rmtree(self.build, ignore_errors=True)
        self._unlock()

    def _unlock(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock_path)
        os.close(self.lock_fd)


def settle_log(
    out: ObjectStore,
    times: Mapping[str, float],
    uri: str,
    storage_options: Mapping[str, str] | None,
    target: int,
    *,
    what: str = "rebuilt",
) -> None:
    """Finish a restored log: modification times back, then check what delta-rs opens.

    Local log files get ``times`` (key -> seconds since the epoch) as modification
    times, since delta-rs time travel by timestamp uses them.

    Raises:
        DeltaLakeError: the table at ``uri`` does not open at version ``target``.
    """
    from posixlake.delta import DeltaLog

    if isinstance(out, LocalStore):
        for key, stamp in times.items():
            os.utime(out.path(key), (stamp, stamp))
    restored = DeltaLog.open(uri, storage_options)
    if restored.version != target:
        raise DeltaLakeError(
            f"restore: the {what} table opens at version {restored.version}, not {target}"
        )
