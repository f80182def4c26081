"""Named Spark Connect sessions that commands lease, one process at a time.

Each Connect session has a class loader of its own on the server, and Spark's cache of
compiled generated code is keyed by class loader: the first query of a new session
compiles its code again and runs it before the JIT has seen it. Commands of the
command line therefore reuse a few named sessions of the server ``posixlake spark
start`` runs: slot ``k`` of server port ``P`` is the file ``connect-P.session-k`` in
:func:`state_dir`, holding the session's id; a process that holds the file's lock
(``flock``, released when the process exits) is the only one using that session, so
the temporary view ``data`` a query registers in it is never another command's.
"""

from __future__ import annotations

import fcntl
import logging
import os
import uuid
from pathlib import Path
from typing import Final

__all__ = ["SESSION_SLOTS", "lease_session", "renew_session", "slot_path", "state_dir"]

logger = logging.getLogger(__name__)

#: named sessions per server (commands beyond this many at once get sessions of their own)
SESSION_SLOTS: Final = 4
_ID: Final = ";session_id="

#: this process's leases: session id -> (its locked slot file, the URL naming it)
_LEASES: dict[str, tuple[int, str]] = {}


def state_dir() -> Path:
    """Return where Connect servers are recorded (``<state dir>/spark``)."""
    root = os.environ.get("POSIXLAKE_STATE_DIR")
    if not root:
        xdg = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        root = os.path.join(xdg, "posixlake")
    return Path(root) / "spark"


def slot_path(port: int, k: int) -> Path:
    """Return the file of session slot ``k`` of the server on ``port``."""
    return state_dir() / f"connect-{port}.session-{k}"


def _valid_id(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def _write_id(fd: int) -> str:
    sid = str(uuid.uuid4())
    os.ftruncate(fd, 0)
    os.pwrite(fd, sid.encode("ascii"), 0)
    return sid


def lease_session(url: str, port: int) -> str | None:
    """Lease a named session of the server at ``url`` (on ``port``) for this process.

    Returns:
        ``url`` with ``;session_id=...``: a session no other process uses until this
        one exits (the same one on every call); None when every slot is leased.
    """
    for _, leased in _LEASES.values():
        if leased.startswith(f"{url}/{_ID}"):
            return leased
    state_dir().mkdir(parents=True, exist_ok=True)
    for k in range(SESSION_SLOTS):
        fd = os.open(slot_path(port, k), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        sid = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        if not _valid_id(sid):
            sid = _write_id(fd)
        leased = f"{url}/{_ID}{sid}"
        _LEASES[sid] = (fd, leased)
        return leased
    logger.debug("every session of %s is leased: using a session of our own", url)
    return None


def renew_session(url: str) -> str | None:
    """Give the slot of a leased session the server closed (it idled out) a new
    session; return its URL, or None when ``url`` is no session this process leased."""
    base, sep, sid = url.rpartition(_ID)
    lease = _LEASES.pop(sid, None) if sep else None
    if lease is None:
        return None
    fd, _ = lease
    new = _write_id(fd)
    renewed = f"{base}{_ID}{new}"
    _LEASES[new] = (fd, renewed)
    return renewed
